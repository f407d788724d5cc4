"""Call-time validation in native code: flat, branch-free scans that LLVM vectorizes, no temporaries.

The NumPy checks in ``splyce.tensors.validation`` cost ~25 us of fixed overhead per tensor and make several
passes with O(nnz) temporaries. Once the compiler is loaded, this module registers native scans (each variant
compiled on first use, once per process, with llvmlite) as the fast path of ``check_buffers``; the NumPy
checks still run, to word the error, whenever a scan finds a defect, and for what the scans do not cover
(singleton levels: their checks need the parent coordinates).

A per-segment loop costs a branch misprediction per row (rows of real matrices hold ~5-20 entries), so each
compressed level is checked by three flat loops instead:
1. positions never decrease (with ``pos[0] == 0`` and ``pos[-1] == len(crd)``, checked in Python, every
   segment then lies inside ``crd``);
2. over all coordinates at once: any out of range (one unsigned compare) and the number of steps
   ``crd[k] <= crd[k-1]`` (``<`` for non-unique levels), segment boundaries included;
3. over segments: the number of those steps that fall on a segment's first entry (allowed there).
The level is ordered iff the two counts are equal. Loops 1 and 2 are reductions without branches, which the
loop vectorizer turns into SIMD code running near memory bandwidth.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import DATA_OFFSET, address as _address
from splyce.native import ir_text
from splyce.native.dtypes import SUPPORTED_DTYPES
from splyce.native.ir_text import IR, counted, ext, fill, index_at, load_at, load_index, narrow, sext, store_at

def _pos_scan_ir(name: str, p: int) -> str:
    """``i64 name(ptr pos, i64 nseg)``: nonzero when some ``pos[s] > pos[s + 1]``, s in [0, nseg)."""
    ir = IR()
    ir(f"define i64 @{name}(ptr %pos, i64 %nseg) {{")
    ir.label("entry")

    def segment(s, acc):
        s1 = ir.op("add", "i64", s, "1")
        down = ir.op("icmp sgt", f"i{p}", ir.load(f"i{p}", "%pos", s), ir.load(f"i{p}", "%pos", s1))
        return (_or_flag(ir, acc, down, "i64"),)

    (acc,) = counted(ir, "0", "%nseg", segment, carried=(("i64", "0"),), base="s")
    ir(f"  ret i64 {acc}")
    ir("}")
    return ir.text()


def _or_flag(ir: IR, acc: str, flag: str, t: str, op: str = "or") -> str:
    """``acc op zext(flag)`` in type ``t``."""
    wide = ir.name("f")
    ir(f"  {wide} = zext i1 {flag} to {t}")
    return ir.op(op, t, acc, wide)


def _crd_scan_ir(name: str, c: int, cmp: str) -> str:
    """``void name(ptr crd, i64 n, i64 size, ptr out)``: ``out[0]`` = any coordinate outside [0, size),
    ``out[1]`` = the number of k in [1, n) with ``crd[k] cmp crd[k - 1]``. The accumulators are in the
    coordinates' own width, so a SIMD register holds as many lanes as it holds coordinates; the caller keeps
    each call below 2**31 entries so an i32 count cannot wrap."""
    ir = IR()
    ic = f"i{c}"
    ir(f"define void @{name}(ptr %crd, i64 %n, i64 %size, ptr %out) {{")
    ir.label("entry")
    size_c, has = ir.name("size"), ir.op("icmp sgt", "i64", "%n", "0")
    ir(f"  {size_c} = {narrow(c)} %size to {ic}")
    ir(f"  br i1 {has}, label %first, label %empty")
    ir.label("first")
    c0 = ir.load(ic, "%crd", "0")
    range0, bad0 = ir.name("range"), ir.op("icmp uge", ic, c0, size_c)
    ir(f"  {range0} = zext i1 {bad0} to {ic}")

    def entry(k, out_of, steps):
        here, prev = ir.load(ic, "%crd", k), ir.load(ic, "%crd", ir.op("add", "i64", k, "-1"))
        return (_or_flag(ir, out_of, ir.op("icmp uge", ic, here, size_c), ic),
                _or_flag(ir, steps, ir.op(f"icmp {cmp}", ic, here, prev), ic, "add"))

    out_of, steps = counted(ir, "1", "%n", entry, carried=((ic, range0), (ic, "0")), base="k")
    for at, value in ((0, out_of), (1, steps)):
        wide = ir.name("w")
        ir(f"  {wide} = {ext(c)} {value} to i64")
        ir.store("i64", wide, "%out", str(at))
    ir("  ret void")
    ir.label("empty")
    ir.store("i64", "0", "%out", "0")
    ir.store("i64", "0", "%out", "1")
    ir("  ret void")
    ir("}")
    return ir.text()


def _boundary_scan_ir(name: str, p: int, c: int, cmp: str) -> str:
    """``i64 name(ptr pos, i64 nseg, ptr crd)``: the number of segments s in [1, nseg) that are non-empty and
    whose first entry steps down (``cmp``) from the entry before it (positions known monotone, inside crd)."""
    ir = IR()
    ir(f"define i64 @{name}(ptr %pos, i64 %nseg, ptr %crd) {{")
    ir.label("entry")

    def segment(s, acc):
        s1 = ir.op("add", "i64", s, "1")
        lo, hi = load_index(ir, "%pos", p, s, signed=True), load_index(ir, "%pos", p, s1, signed=True)
        check = ir.op("and", "i1", ir.op("icmp slt", "i64", lo, hi), ir.op("icmp sgt", "i64", lo, "0"))
        came, look, after = ir.block, ir.name("look")[1:], ir.name("next")[1:]
        ir(f"  br i1 {check}, label %{look}, label %{after}")
        ir.label(look)
        here, prev = ir.load(f"i{c}", "%crd", lo), ir.load(f"i{c}", "%crd", ir.op("add", "i64", lo, "-1"))
        down, d = ir.op(f"icmp {cmp}", f"i{c}", here, prev), ir.name("d")
        ir(f"  {d} = zext i1 {down} to i64")
        ir(f"  br label %{after}")
        ir.label(after)
        add = ir.name("add")
        ir(f"  {add} = phi i64 [0, %{came}], [{d}, %{look}]")
        return (ir.op("add", "i64", acc, add),)

    (acc,) = counted(ir, "1", "%nseg", segment, carried=(("i64", "0"),), base="s")
    ir(f"  ret i64 {acc}")
    ir("}")
    return ir.text()


_ORDER = {"unique": "sle", "ordered": "slt"}   # a step that breaks the rule: <= (unique) or < (non-unique)

_lock = threading.Lock()
_INT = {32: np.dtype(np.int32), 64: np.dtype(np.int64)}
_MAX = {32: 2**31 - 1, 64: 2**63 - 1}
_CHUNK = 1 << 30    # coordinates per crd scan call (its i32 step count cannot wrap)
_POS_SIG = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
_CRD_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_BOUNDARY_SIG = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)


@functools.cache
def _scanners(pos_bits: int, crd_bits: int, rule: str):
    """Compile one variant on first use (~20 ms), once per process: (pos scan, crd scan, boundary scan)."""
    from splyce.native.codegen import compile_host_helpers

    tag = f"p{pos_bits}_c{crd_bits}_{rule}"
    cmp = _ORDER.get(rule, "slt")
    names = (f"splyce_check_pos_{tag}", f"splyce_check_crd_{tag}", f"splyce_check_bounds_{tag}")
    text = (_pos_scan_ir(names[0], pos_bits) + _crd_scan_ir(names[1], crd_bits, cmp)
            + _boundary_scan_ir(names[2], pos_bits, crd_bits, cmp))
    fns = compile_host_helpers(text, dict(zip(names, (_POS_SIG, _CRD_SIG, _BOUNDARY_SIG))))
    return tuple(fns[n] for n in names)


def _extend(bits: int) -> str:
    """Widen a loaded index to i64 (a no-op bitcast when it already is)."""
    return sext(bits)


def _rule(level) -> str:
    if not level.ordered:
        return "any"
    return "unique" if level.unique else "ordered"


def buffers_ok(shape, fmt, pos, crd, values) -> bool:
    """True when the buffers are a well-formed tensor (False: let the NumPy checks find and word the defect,
    also for what this scan does not cover: singleton levels)."""
    try:
        pos, crd, shape = tuple(pos), tuple(crd), tuple(shape)
    except TypeError:
        return False
    # not covered: singleton levels (checked against parent coordinates) and unique-but-unordered levels
    # (duplicates anywhere in a segment)
    if any(level.kind == "singleton" or (level.unique and not level.ordered) for level in fmt.levels):
        return False
    if not _structure_ok(shape, fmt, pos, crd, values):
        return False
    if _is_canonical_matrix(fmt, pos):             # CSR / CSC: the whole check in one native call
        return canonical_csr(pos[1], crd[1], shape[fmt.order[1]])
    return _levels_ok(shape, fmt, pos, crd)


def _is_canonical_matrix(fmt, pos) -> bool:
    from splyce.native.array_objects import DATA_OFFSET

    return (fmt.ndim == 2 and fmt.levels[0].kind == "dense" and fmt.levels[1].kind == "compressed"
            and fmt.levels[1].unique and fmt.levels[1].ordered and fmt.pos_width == fmt.crd_width
            and DATA_OFFSET is not None and len(pos[1]) - 1 < _CHUNK)



def _structure_ok(shape, fmt, pos, crd, values) -> bool:
    """Types, dtypes, lengths and layout of every buffer (cheap attribute checks, no data read)."""
    if len(shape) != fmt.ndim or len(pos) != fmt.ndim or len(crd) != fmt.ndim:
        return False
    pos_dtype, crd_dtype = _INT[fmt.pos_width], _INT[fmt.crd_width]
    n_parent = 1
    for l, level in enumerate(fmt.levels):
        size = shape[fmt.order[l]]
        if type(size) is not int or size < 0:
            return False
        p, c = pos[l], crd[l]
        if level.kind == "dense":
            if p is not None or c is not None:
                return False
            n_parent *= size
            continue
        for arr, dtype in ((p, pos_dtype), (c, crd_dtype)):
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1 \
                    or not arr.flags.c_contiguous:
                return False
        if size - 1 > _MAX[fmt.crd_width] or len(p) != n_parent + 1 or p[0] != 0 or p[-1] != len(c):
            return False
        n_parent = len(c)
    return (isinstance(values, np.ndarray) and values.ndim == 1 and values.flags.c_contiguous
            and values.dtype.isnative and len(values) == n_parent
            and values.dtype in SUPPORTED_DTYPES)


def _levels_ok(shape, fmt, pos, crd) -> bool:
    out = np.empty(2, dtype=np.int64)
    for l, level in enumerate(fmt.levels):
        if level.kind != "compressed":
            continue
        p, c = pos[l], crd[l]
        rule = _rule(level)
        with _lock:
            pos_scan, crd_scan, boundary_scan = _scanners(fmt.pos_width, fmt.crd_width, rule)
        nseg = len(p) - 1
        if pos_scan(_address(p), nseg):
            return False
        steps = 0
        for start in range(0, max(len(c), 1), _CHUNK):    # each chunk re-reads the entry before it
            first = max(start - 1, 0)
            crd_scan(_address(c) + first * c.itemsize, min(start + _CHUNK, len(c)) - first,
                     shape[fmt.order[l]], _address(out))
            if out[0]:
                return False
            steps += int(out[1])
        if rule != "any" and steps and steps != boundary_scan(_address(p), nseg, _address(c)):
            return False
    return True


# Only the range of coordinates (what a product needs): one unsigned max per coordinate, which LLVM turns into
# one SIMD max per vector of them, about a third of the work of the scan above (which also counts order steps).
def range_check_ir(name: str, bits: int) -> str:
    """LLVM IR of a range-only coordinate scan (``void name(ptr crd, i64 n, i64 size, ptr out)``: ``out[0]``
    nonzero when a coordinate is outside ``[0, size)``), for native kernels that check a block just before
    reading it: the largest coordinate (unsigned) against ``size``."""
    ir, ic = IR(), f"i{bits}"
    ir(f"define void @{name}(ptr %crd, i64 %n, i64 %size, ptr %out) {{")
    ir.label("entry")

    def entry(k, mx):
        c = ir.load(ic, "%crd", k)
        above, mx1 = ir.op("icmp ugt", ic, c, mx), ir.name("mx")
        ir(f"  {mx1} = select i1 {above}, {ic} {c}, {ic} {mx}")
        return (mx1,)

    (mx,) = counted(ir, "0", "%n", entry, carried=((ic, "0"),), base="k")
    size_c, wide = ir.name("size"), ir.name("bad")
    ir(f"  {size_c} = {narrow(bits)} %size to {ic}")
    bad = ir.op("and", "i1", ir.op("icmp uge", ic, mx, size_c), ir.op("icmp sgt", "i64", "%n", "0"))
    ir(f"  {wide} = zext i1 {bad} to i64")
    ir(f"  store i64 {wide}, ptr %out")
    ir("  ret void")
    ir("}")
    return ir.text()


def position_check_ir(name: str, bits: int) -> str:
    """LLVM IR of the position scan (``i64 name(ptr pos, i64 nseg)``: nonzero when some ``pos[s] > pos[s+1]``)."""
    return _pos_scan_ir(name, bits)


def positions_ok(indptr: np.ndarray, n_entries: int) -> bool:
    """Positions monotone from 0 to ``n_entries`` (C-contiguous int32 / int64): every segment lies inside the
    coordinates."""
    if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != n_entries:
        return False
    bits = indptr.dtype.itemsize * 8
    with _lock:
        pos_scan = _scanners(bits, bits, "any")[0]
    return not pos_scan(_address(indptr), len(indptr) - 1)


def position_ends_ir(bits: int, segments: str = "%m") -> str:
    """IR lines setting ``%ends_ok`` (i1): ``pos[0] == 0`` and ``pos[m] == nnz``, from ``ptr %pos``, ``i64 %m``
    (or the value named by ``segments``: the number of segments) and ``i64 %nnz`` (with monotone positions,
    every segment then lies inside crd)."""
    ext = _extend(bits)
    return f"""  %first_raw = load i{bits}, ptr %pos
  %first = {ext} %first_raw to i64
  %pm = getelementptr i{bits}, ptr %pos, i64 {segments}
  %last_raw = load i{bits}, ptr %pm
  %last = {ext} %last_raw to i64
  %starts = icmp eq i64 %first, 0
  %ends = icmp eq i64 %last, %nnz
  %ends_ok = and i1 %starts, %ends"""


def _column_scan(first: str, before: str, last: str, out_range: str) -> str:
    """Template text: the column scan of entries [%{first} - 1 (or 0), %{last}) (``%{before}``: the entry
    before the first), on to %fail when a column is out of range, else to block ``order`` with ``%steps`` (the
    order steps) and ``%none``, whether there are none."""
    return f"""  %has_prev = icmp sgt i64 %{first}, 0
  %{before} = add i64 %{first}, -1
  %cfirst = select i1 %has_prev, i64 %{before}, i64 0
  %pcf = getelementptr i{{p}}, ptr %crd, i64 %cfirst
  %ncrd = sub i64 %{last}, %cfirst
  call void @{{crd_scan}}(ptr %pcf, i64 %ncrd, i64 %n, ptr %out)
  %{out_range} = load i64, ptr %out
  %o1 = getelementptr i64, ptr %out, i64 1
  %steps = load i64, ptr %o1
  %out_of_range = icmp ne i64 %{out_range}, 0
  br i1 %out_of_range, label %fail, label %order
order:
  %none = icmp eq i64 %steps, 0
"""


# A whole canonical-CSR check in one native call (the three scans above, rule "unique"), for the drop-ins'
# per-call fast paths: pos[0] == 0, pos[m] == nnz, positions monotone, columns in [0, n), strictly increasing
# within each row. Returns 0 when all hold. The rows go in blocks of 2048: a block's columns are scanned,
# then its row starts, while those columns are still in cache (the row-start scan reads one coordinate per
# row, a new cache line per row of 16 or more entries: run over the whole matrix after the column scan it
# streamed crd from memory a second time, as long as the column scan itself). The block's column scan starts
# at the entry before its first (compared with it), so the blocks together compare every entry with the one
# before it once; the row-start scan of rows [s0, s1) runs from pos + s0 - 1 (row 0's start is never a step).
_CANONICAL_DRIVER = """
define i64 @{name}(ptr %pos, ptr %crd, i64 %m, i64 %n, i64 %nnz) {
entry:
  %out = alloca [2 x i64]
{ends}
  %fits = icmp slt i64 %nnz, {chunk}
  %ok1 = and i1 %ends_ok, %fits
  br i1 %ok1, label %positions, label %fail
positions:
  %down = call i64 @{pos_scan}(ptr %pos, i64 %m)
  %dec = icmp ne i64 %down, 0
  br i1 %dec, label %fail, label %blocks
blocks:
  %s0 = phi i64 [0, %positions], [%s1, %columns_ok], [%s1, %row_starts_ok]
  %more = icmp slt i64 %s0, %m
  br i1 %more, label %block, label %ok
block:
  %s1_try = add i64 %s0, 2048
  %short = icmp slt i64 %s1_try, %m
  %s1 = select i1 %short, i64 %s1_try, i64 %m
""" + load_at("i{p}", "%pos", "%s0", "%e0_raw") + """  %e0 = {ext} %e0_raw to i64
""" + load_at("i{p}", "%pos", "%s1", "%e1_raw") + """  %e1 = {ext} %e1_raw to i64
""" + _column_scan("e0", "e0m1", "e1", "brange") + """\
  br i1 %none, label %columns_ok, label %row_starts
columns_ok:
  br label %blocks
row_starts:
  %at_top = icmp eq i64 %s0, 0
  %s0m1 = add i64 %s0, -1
  %from = select i1 %at_top, i64 0, i64 %s0m1
  %pfrom = getelementptr i{p}, ptr %pos, i64 %from
  %nseg = sub i64 %s1, %from
  %allowed = call i64 @{boundary_scan}(ptr %pfrom, i64 %nseg, ptr %crd)
  %same = icmp eq i64 %allowed, %steps
  br i1 %same, label %row_starts_ok, label %fail
row_starts_ok:
  br label %blocks
ok:
  ret i64 0
fail:
  ret i64 1
}
"""


def _unique_scans_ir(names: dict, bits: int) -> str:
    """The three scans (rule "unique") under ``names["pos_scan"]``, ``["crd_scan"]``, ``["boundary_scan"]``."""
    return (_pos_scan_ir(names["pos_scan"], bits) + _crd_scan_ir(names["crd_scan"], bits, _ORDER["unique"])
            + _boundary_scan_ir(names["boundary_scan"], bits, bits, _ORDER["unique"]))


def _compile_driver(tag: str, bits: int, driver: str, kinds: str, **fields):
    """A canonical-CSR driver (``driver``, filled with the scans' names and ``fields``) and the three scans,
    compiled once, reached through an object entry taking ``kinds`` arguments."""
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers

    names = {k: f"splyce_{k}_{tag}" for k in ("pos_scan", "crd_scan", "boundary_scan", "driver", "entry")}
    text = (_unique_scans_ir(names, bits)
            + fill(driver, name=names["driver"], chunk=_CHUNK, **fields,
                   **{k: names[k] for k in ("pos_scan", "crd_scan", "boundary_scan")})
            + array_objects.object_entry_ir(names["entry"], names["driver"], kinds))
    return compile_host_helpers(text, {names["entry"]: array_objects.signature(len(kinds))})[names["entry"]]


def canonical_check_ir(prefix: str, bits: int) -> str:
    """LLVM IR of the whole canonical-CSR check (the three scans and their driver) for a native kernel that
    checks its operands itself, in the same call: ``i64 @{prefix}_canonical(ptr pos, ptr crd, i64 m, i64 n,
    i64 nnz)`` (0 when canonical, as ``canonical_csr``) and the position scan ``i64 @{prefix}_pos_scan(ptr pos,
    i64 nseg)`` (nonzero when some position decreases)."""
    names = {k: f"{prefix}_{k}" for k in ("pos_scan", "crd_scan", "boundary_scan")}
    return (_unique_scans_ir(names, bits)
            + fill(_CANONICAL_DRIVER, name=f"{prefix}_canonical", chunk=_CHUNK, ends=position_ends_ir(bits), p=bits,
                   ext=_extend(bits), **names))


@functools.cache
def _canonical_entry(bits: int):
    return _compile_driver(f"p{bits}_c{bits}_canonical", bits, _CANONICAL_DRIVER, "aaiii",
                           ends=position_ends_ir(bits), p=bits, ext=_extend(bits))


def canonical_csr(indptr: np.ndarray, indices: np.ndarray, n_cols: int) -> bool:
    """Whether CSR index arrays are canonical: positions monotone from 0 to ``len(indices)``, columns in
    ``[0, n_cols)`` and strictly increasing within each row. One native call on the array objects; the caller
    guarantees both are 1-D, C-contiguous, of one dtype (int32 / int64), ``n_cols`` fitting it, and
    ``array_objects.DATA_OFFSET`` confirmed. False also for more than 2**30 entries (the caller's general
    path then checks)."""
    bits = indptr.dtype.itemsize * 8
    if len(indptr) == 0 or n_cols - 1 > _MAX[bits]:
        return False
    with _lock:
        entry = _canonical_entry(bits)
    return not entry(id(indptr), id(indices), len(indptr) - 1, n_cols, len(indices))


_SUPPORTED = frozenset(SUPPORTED_DTYPES)
_BITS = {np.dtype(np.int32): 32, np.dtype(np.int64): 64}


def compressed_ok(n_major, n_minor, indptr, indices, data) -> bool:
    """``buffers_ok`` for a CSR (``n_major`` rows of ``n_minor`` columns; a CSC likewise, by columns) in one
    function: the attribute checks of ``_structure_ok`` and the one native scan of ``canonical_csr``, without
    building the level tuples (a scipy operand's whole check on every jitted call: ~25 us through
    ``buffers_ok``, a few us here on a small matrix). True only when every check of ``buffers_ok`` holds for
    the format of the index dtype's widths; False whenever ``buffers_ok`` would say False or take its general
    path (exact ndarrays only, equal index dtypes, fewer than 2**30 entries), so the caller then falls back to
    it, which words the defect."""
    nd = np.ndarray
    if type(indptr) is not nd or type(indices) is not nd or type(data) is not nd or DATA_OFFSET is None:
        return False
    bits = _BITS.get(indptr.dtype)
    if bits is None or indices.dtype != indptr.dtype or data.dtype not in _SUPPORTED:
        return False
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1 or not (
            indptr.flags.c_contiguous and indices.flags.c_contiguous and data.flags.c_contiguous):
        return False
    if type(n_major) is not int or type(n_minor) is not int or n_major < 0 or n_minor < 0:
        return False
    nnz = len(indices)
    if len(indptr) != n_major + 1 or len(data) != nnz or nnz >= _CHUNK or n_major >= _CHUNK \
            or n_minor - 1 > _MAX[bits]:
        return False
    return canonical_csr(indptr, indices, n_minor)


# The same check for the rows [lo, hi) of a CSR, so that threads can share it: positions monotone on
# [lo, hi] and inside [0, nnz] (pos[0] == 0 checked by the chunk with lo == 0, pos[m] == nnz by the one with
# hi == m: together, and since neighbouring chunks share a position, the whole array is checked), then the
# chunk's columns in range and its order steps, each entry compared with the one before it (also for the
# chunk's first entry, which may belong to an earlier chunk's row: then it lies on a row start and its
# boundary is counted here too), and the row starts of segments [max(lo, 1), hi). Returns 0 when all hold.
_CANONICAL_CHUNK = """
define i64 @{name}(ptr %pos, ptr %crd, i64 %lo, i64 %hi, i64 %m, i64 %n, i64 %nnz) {
entry:
  %out = alloca [2 x i64]
  %plo_ptr = getelementptr i{p}, ptr %pos, i64 %lo
  %plo_raw = load i{p}, ptr %plo_ptr
  %plo = {ext} %plo_raw to i64
""" + index_at("%pos", "%hi", "%phi", "p", "ext") + """  %is_first = icmp eq i64 %lo, 0
  %starts0 = icmp eq i64 %plo, 0
  %not_first = xor i1 %is_first, true
  %start_ok = or i1 %not_first, %starts0
  %is_last = icmp eq i64 %hi, %m
  %endsn = icmp eq i64 %phi, %nnz
  %not_last = xor i1 %is_last, true
  %end_ok = or i1 %not_last, %endsn
  %lo_ok = icmp sge i64 %plo, 0
  %hi_ok = icmp sle i64 %phi, %nnz
  %fits = icmp slt i64 %nnz, {chunk}
  %e1 = and i1 %start_ok, %end_ok
  %e2 = and i1 %lo_ok, %hi_ok
  %e3 = and i1 %e1, %e2
  %ok1 = and i1 %e3, %fits
  br i1 %ok1, label %positions, label %fail
positions:
  %nseg = sub i64 %hi, %lo
  %down = call i64 @{pos_scan}(ptr %plo_ptr, i64 %nseg)
  %dec = icmp ne i64 %down, 0
  br i1 %dec, label %fail, label %columns
columns:
""" + _column_scan("plo", "plo_m1", "phi", "range") + """\
  br i1 %none, label %ok, label %boundaries
boundaries:
  %lo_m1 = add i64 %lo, -1
  %bstart = select i1 %is_first, i64 0, i64 %lo_m1
  %pbs = getelementptr i{p}, ptr %pos, i64 %bstart
  %bseg = sub i64 %hi, %bstart
  %allowed = call i64 @{boundary_scan}(ptr %pbs, i64 %bseg, ptr %crd)
  %same = icmp eq i64 %allowed, %steps
  br i1 %same, label %ok, label %fail
ok:
  ret i64 0
fail:
  ret i64 1
}
"""


@functools.cache
def _canonical_chunk_entry(bits: int):
    return _compile_driver(f"p{bits}_c{bits}_canonical_chunk", bits, _CANONICAL_CHUNK, "aaiiiii", p=bits,
                           ext=_extend(bits))


def canonical_csr_threaded(indptr: np.ndarray, indices: np.ndarray, n_cols: int, threads: int) -> bool:
    """``canonical_csr`` with the rows split into ranges of about equal entries, one per thread (ranges
    proposed from the unchecked positions: any split is checked correctly, a bad one is only unbalanced)."""
    m, nnz = len(indptr) - 1, len(indices)
    if threads <= 1 or nnz < 2 * ir_text.MIN_CHUNK or m < 2 or n_cols - 1 > _MAX[indptr.dtype.itemsize * 8]:
        return canonical_csr(indptr, indices, n_cols)
    ends = indptr[[0, -1]]
    if ends[0] != 0 or ends[1] != nnz:
        return False
    with _lock:
        entry = _canonical_chunk_entry(indptr.dtype.itemsize * 8)
    chunks = ir_text.row_chunks(indptr, min(threads, nnz // ir_text.MIN_CHUNK))
    return not any(ir_text.run_chunks(lambda t, lo, hi: entry(id(indptr), id(indices), lo, hi, m, n_cols, nnz),
                              chunks, threads))

