"""CSR times a dense vector (SpMV) or a dense matrix (SpMM), native code, one thread or row chunks.

Every row sums its products in stored order from +0.0, as scipy's ``csr_matvec`` and the plain sparsifier do,
so results are bit for bit the same. A matrix whose entries stay in cache is bound by the latency of each
row's chain of additions and by the mispredicted exit of every short row loop; there (the drop-in's fast path,
``GROUPED_MAX_BYTES``, on the CPUs where that pays) rows of varying lengths go in groups of ``GROUPED_ROWS``: the group's rows advance
together for as many entries as its shortest row holds (independent addition chains, one loop exit per
group), then each row finishes alone. Beyond cache the gather from memory bounds it and rows go one at a time.
Rows of a few entries (``FLAT_MAX_ROW``; on some CPUs only beyond ``FLAT_MIN_BYTES``) go through one flat
loop over all the entries instead, with no branch on a row's end (``_FLAT``).

Index checks: SpMV checks positions and coordinates as it reads them: before a row's entries, ``start <= stop
<= nnz``; before each ``x[col]``, ``col < n`` (unsigned compares, so negative indices fail too), each a branch
to an error return that the CPU predicts as never taken, so the loads never wait for the checks. Measured
against the alternatives on the shared 2-core EPYC (docs/corpus.md): a SIMD scan of each block of rows
before the rows ran cost 10-20 % on matrices beyond cache (the scan's memory time does not overlap the
product's), a clamped (selected) index 20-30 % (the gather waits for the compare). The drop-in's fast path
(``_spmv_objects``) also checks the two ends of the positions in native code, so a malformed scipy operand
is refused with nothing checked in Python. SpMM checks the same way, every thread its own rows. Unsorted or
repeated columns are fine for a product and need no check.

SpMM keeps each output row (``k`` columns) in registers while it accumulates the row's entries, then stores it
once: the output is never zeroed or re-read.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import IR as _IR, VALUE as _VALUE, ext as _ext, load_index as _load_index, loop as _loop
from splyce.native.ir_text import run_chunks as _run_chunks, work_chunks as _work_chunks

# Rows advanced together (independent addition chains). Measured on the shared 2-core EPYC (Delaunay meshes,
# R-MAT, 0.7-1M entries): 1 is fastest there (1.76 ms vs 2.16 for 4 and 3.0 for 8 on a 3-D mesh); the gather
# from x, not the addition chain, bounds it. Kept as a knob for machines where the latency dominates.
ROWS = 1

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (pos, crd, values, x, n, lo, hi, y, nnz) -> 0, or 1 when a checking kernel met a bad index
_SPMV_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _I, _I, _I, _P, _I)
# (pos, crd, values, X, n, lo, hi, Y, k, nnz) -> as _SPMV_SIG
_SPMM_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _I, _I, _I, _P, _I, _I)
_lock = threading.Lock()


def _accumulate(ir: _IR, t: str, mul: str, add: str, c: int, acc: str, k: str, check: bool = False) -> None:
    """acc (an alloca) += values[k] * x[crd[k]]; with ``check``, a column outside [0, n) returns 1 first."""
    safe = _checked_column(ir, c, k) if check else _column(ir, c, k)
    pv, v, px, xv, prod, s0, s1 = (ir.name(n) for n in ("pv", "v", "px", "xv", "prod", "s", "s"))
    ir(f"  {pv} = getelementptr {t}, ptr %vals, i64 {k}")
    ir(f"  {v} = load {t}, ptr {pv}")
    ir(f"  {px} = getelementptr {t}, ptr %x, i64 {safe}")
    ir(f"  {xv} = load {t}, ptr {px}")
    ir(f"  {prod} = {mul} {t} {v}, {xv}")
    ir(f"  {s0} = load {t}, ptr {acc}")
    ir(f"  {s1} = {add} {t} {s0}, {prod}")
    ir(f"  store {t} {s1}, ptr {acc}")


def _spmv_ir(name: str, value: np.dtype, p: int, c: int, rows: int, check: bool = False) -> str:
    """Rows [lo, hi) of y = A @ x. With ``check`` the kernel checks what it reads, as it reads it (returning 1,
    ``y`` incomplete, at the first defect): each row's segment ``start <= stop <= nnz`` (unsigned, so no
    position is negative) before its entries are read, and each column ``< n`` (unsigned) before ``x`` is read
    there. Both are branches the CPU predicts as not taken: unlike a clamped (selected) index, the load of
    ``x`` does not wait for the compare."""
    t, mul, add, zero = _VALUE[value]
    ir = _IR()
    ir(f"define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz) noinline {{")
    ir.label("entry")
    ir("  %r = alloca i64")
    ir("  store i64 %lo, ptr %r")
    accs = [f"%acc{k}" for k in range(rows)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")
    ir("  br label %group_head")
    # groups of `rows` rows
    ir.label("group_head")
    ir("  %gr = load i64, ptr %r")
    ir(f"  %gend = add i64 %gr, {rows}")
    ir("  %gfits = icmp sle i64 %gend, %hi")
    ir("  br i1 %gfits, label %group_body, label %single_head")
    ir.label("group_body")
    starts, stops = [], []
    for k in range(rows):
        row = ir.name("row")
        ir(f"  {row} = add i64 %gr, {k}")
        starts.append(_load_index(ir, "%pos", p, row))
        nxt = ir.name("rowp")
        ir(f"  {nxt} = add i64 {row}, 1")
        stops.append(_load_index(ir, "%pos", p, nxt))
        if check:
            _check_segment(ir, starts[-1], stops[-1])
        ir(f"  store {t} {zero}, ptr {accs[k]}")
    common = None
    for k in range(rows):
        length = ir.name("len")
        ir(f"  {length} = sub i64 {stops[k]}, {starts[k]}")
        if common is None:
            common = length
        else:
            less, new = ir.name("less"), ir.name("common")
            ir(f"  {less} = icmp slt i64 {length}, {common}")
            ir(f"  {new} = select i1 {less}, i64 {length}, i64 {common}")
            common = new

    def together(i):
        for k in range(rows):
            at = ir.name("at")
            ir(f"  {at} = add i64 {starts[k]}, {i}")
            _accumulate(ir, t, mul, add, c, accs[k], at, check)

    _loop(ir, "0", common, together, "tail0")
    for k in range(rows):
        ir.label(f"tail{k}")
        begin = ir.name("begin")
        ir(f"  {begin} = add i64 {starts[k]}, {common}")
        _loop(ir, begin, stops[k], lambda i, k=k: _accumulate(ir, t, mul, add, c, accs[k], i, check),
              f"tail{k + 1}" if k + 1 < rows else "group_store")
    ir.label("group_store")
    for k in range(rows):
        row, py, s = ir.name("row"), ir.name("py"), ir.name("s")
        ir(f"  {row} = add i64 %gr, {k}")
        ir(f"  {py} = getelementptr {t}, ptr %y, i64 {row}")
        ir(f"  {s} = load {t}, ptr {accs[k]}")
        ir(f"  store {t} {s}, ptr {py}")
    ir("  store i64 %gend, ptr %r")
    ir("  br label %group_head")
    # the last rows one at a time
    ir.label("single_head")
    ir("  %sr = load i64, ptr %r")
    ir("  %smore = icmp slt i64 %sr, %hi")
    ir("  br i1 %smore, label %single_body, label %done")
    ir.label("single_body")
    s_start = _load_index(ir, "%pos", p, "%sr")
    ir("  %sr1 = add i64 %sr, 1")
    s_stop = _load_index(ir, "%pos", p, "%sr1")
    if check:
        _check_segment(ir, s_start, s_stop)
    ir(f"  store {t} {zero}, ptr %acc0")
    _loop(ir, s_start, s_stop, lambda i: _accumulate(ir, t, mul, add, c, "%acc0", i, check), "single_store")
    ir.label("single_store")
    ir("  %spy = getelementptr " + t + ", ptr %y, i64 %sr")
    ir(f"  %ss = load {t}, ptr %acc0")
    ir(f"  store {t} %ss, ptr %spy")
    ir("  store i64 %sr1, ptr %r")
    ir("  br label %single_head")
    ir.label("done")
    ir("  ret i64 0")
    ir.label("bad")
    ir("  ret i64 1")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _check_segment(ir: _IR, start: str, stop: str) -> None:
    """Branch to %bad unless start <= stop <= nnz (unsigned: a negative position is out of range too)."""
    down, over, bad, ok = ir.name("down"), ir.name("over"), ir.name("badseg"), ir.name("seg_ok")
    ir(f"  {down} = icmp ugt i64 {start}, {stop}")
    ir(f"  {over} = icmp ugt i64 {stop}, %nnz")
    ir(f"  {bad} = or i1 {down}, {over}")
    ir(f"  br i1 {bad}, label %bad, label %{ok[1:]}")
    ir.label(ok[1:])


def _spmm_ir(name: str, value: np.dtype, p: int, c: int, k: int | None, check: bool = False) -> str:
    """Y[i, :] = sum over row i's entries of values * X[col, :]. With ``k`` fixed at compile time the row's
    ``k`` sums are separate scalars (registers, packed into SIMD by LLVM), stored once per row; with None, any
    count, accumulated in Y's row itself. ``check``: as ``_spmv_ir`` (each segment and column checked before
    it is read, 1 returned at the first defect)."""
    t, mul, add, zero = _VALUE[value]
    width = str(k) if k is not None else "%k"
    ir = _IR()
    ir(f"define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %k, "
       "i64 %nnz) noinline {")
    ir.label("entry")
    accs = [f"%acc{j}" for j in range(k or 0)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")

    def columns(body):
        """body(j, acc_ptr) for every column j of the row: unrolled when k is fixed, else a loop."""
        if k is not None:
            for j, acc in enumerate(accs):
                body(str(j), acc)
            return
        after = ir.name("cols")[1:]
        _loop(ir, "0", "%k", lambda j: body(j, None), after)
        ir.label(after)

    def row(i):
        base = ir.name("base")
        ir(f"  {base} = mul i64 {i}, {width}")

        def y_at(j):
            at, py = ir.name("at"), ir.name("py")
            ir(f"  {at} = add i64 {base}, {j}")
            ir(f"  {py} = getelementptr {t}, ptr %y, i64 {at}")
            return py

        columns(lambda j, acc: ir(f"  store {t} {zero}, ptr {acc or y_at(j)}"))
        start = _load_index(ir, "%pos", p, i)
        i1 = ir.name("i1")
        ir(f"  {i1} = add i64 {i}, 1")
        stop = _load_index(ir, "%pos", p, i1)
        if check:
            _check_segment(ir, start, stop)

        def entry(e):
            safe = _checked_column(ir, c, e) if check else _column(ir, c, e)
            pv, v, xbase = ir.name("pv"), ir.name("v"), ir.name("xb")
            ir(f"  {pv} = getelementptr {t}, ptr %vals, i64 {e}")
            ir(f"  {v} = load {t}, ptr {pv}")
            ir(f"  {xbase} = mul i64 {safe}, {width}")

            def axpy(j, acc):
                at, px, xv, prod, s0, s1 = (ir.name(n) for n in ("at", "px", "xv", "prod", "s", "s"))
                ir(f"  {at} = add i64 {xbase}, {j}")
                ir(f"  {px} = getelementptr {t}, ptr %x, i64 {at}")
                ir(f"  {xv} = load {t}, ptr {px}")
                ir(f"  {prod} = {mul} {t} {v}, {xv}")
                target = acc or y_at(j)
                ir(f"  {s0} = load {t}, ptr {target}")
                ir(f"  {s1} = {add} {t} {s0}, {prod}")
                ir(f"  store {t} {s1}, ptr {target}")

            columns(axpy)

        after = ir.name("entries")[1:]
        _loop(ir, start, stop, entry, after)
        ir.label(after)
        if k is not None:
            def store(j, acc):
                s = ir.name("s")
                ir(f"  {s} = load {t}, ptr {acc}")
                ir(f"  store {t} {s}, ptr {y_at(j)}")
            columns(store)

    _loop(ir, "%lo", "%hi", row, "done")
    ir.label("done")
    ir("  ret i64 0")
    ir.label("bad")
    ir("  ret i64 1")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _column(ir: _IR, c: int, e: str) -> str:
    """crd[e] widened to i64 (the caller checked every coordinate is in range before the call)."""
    return _load_index(ir, "%crd", c, e)


def _checked_column(ir: _IR, c: int, e: str) -> str:
    """crd[e] widened to i64 (zero-extended: a negative int32 becomes >= 2**31), branching to %bad unless < n."""
    col = _load_index(ir, "%crd", c, e)
    inside, ok = ir.name("inside"), ir.name("col_ok")
    ir(f"  {inside} = icmp ult i64 {col}, %n")
    ir(f"  br i1 {inside}, label %{ok[1:]}, label %bad")
    ir.label(ok[1:])
    return col


# -- the flat kernel for very short rows ----------------------------------------------------------------------
# One loop over all the entries of rows [lo, hi), no branch on a row's end: a row of 2-3 entries otherwise ends
# in a mispredicted loop exit, which costs more than its entries. Each
# entry adds its product to the running sum and stores the sum to y[r] (the row's last store wins); at a row's
# end the sum restarts from +0.0 (a mask and, all bits clear: bit for bit scipy's order) and r, the row's end
# and the next row's end (loaded one row ahead, off the critical path) move on, by selects. What stays a
# branch is predicted: a column outside [0, n) (to the error return), and leaving the loop when the next row
# is empty or its end is beyond min(pos[hi - 2], nnz) (then ``resync`` checks that row, writes 0 for an empty
# one, and re-enters; the last two rows of the range go one at a time: the look-ahead reads pos[r + 3] <=
# pos[hi]). The loop is bound by its instruction count (27 per entry on x86-64): one compare serves both ways
# out, and one row-end flag (kept opaque, or LLVM recomputes it) both r += last and the mask.
# The sums of all rows form one chain of additions, so this pays only for rows of a few entries: measured
# (docs/corpus.md) 1.5-1.6x the per-row kernel on road graphs (2.5 entries per row), 0.5-0.9x on 6-25.
FLAT_MAX_ROW = 4       # average entries per row (nnz <= FLAT_MAX_ROW * m) up to which the drop-in goes flat

_FLAT = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz) noinline {{
entry:
  %hf = sub i64 %hi, 2
  %hf_low = icmp slt i64 %hf, %lo
  %hfc = select i1 %hf_low, i64 %lo, i64 %hf
  %pkstop = getelementptr i{p}, ptr %pos, i64 %hfc
  %kstop_raw = load i{p}, ptr %pkstop
  %kstop_pos = {p_ext} %kstop_raw to i64
  %kstop_over = icmp ugt i64 %kstop_pos, %nnz
  %kstop = select i1 %kstop_over, i64 %nnz, i64 %kstop_pos
  br label %resync
resync:
  %r0 = phi i64 [%lo, %entry], [%r0n, %empty], [%rx, %leave], [%r0n, %single_done]
  %rmore = icmp slt i64 %r0, %hi
  br i1 %rmore, label %segment, label %done
segment:
  %ps0 = getelementptr i{p}, ptr %pos, i64 %r0
  %s0_raw = load i{p}, ptr %ps0
  %s0 = {p_ext} %s0_raw to i64
  %r0n = add i64 %r0, 1
  %pt0 = getelementptr i{p}, ptr %pos, i64 %r0n
  %t0_raw = load i{p}, ptr %pt0
  %t0 = {p_ext} %t0_raw to i64
  %down = icmp ugt i64 %s0, %t0
  %over = icmp ugt i64 %t0, %nnz
  %badseg = or i1 %down, %over
  br i1 %badseg, label %bad, label %segment_ok
segment_ok:
  %is_empty = icmp eq i64 %s0, %t0
  br i1 %is_empty, label %empty, label %nonempty
empty:
  %pye = getelementptr {t}, ptr %y, i64 %r0
  store {t} {zero}, ptr %pye
  br label %resync
nonempty:
  %below = icmp slt i64 %r0, %hf
  %inside_kstop = icmp ule i64 %t0, %kstop
  %in_flat = and i1 %below, %inside_kstop
  br i1 %in_flat, label %prime, label %single
single:
  %sk = phi i64 [%s0, %nonempty], [%sk1, %single_ok]
  %sacc = phi {t} [{zero}, %nonempty], [%ss, %single_ok]
{single_product}
  %sk1 = add i64 %sk, 1
  %smore = icmp ult i64 %sk1, %t0
  br i1 %smore, label %single, label %single_done
single_done:
  %spy = getelementptr {t}, ptr %y, i64 %r0
  store {t} %ss, ptr %spy
  br label %resync
prime:
  %pn = add i64 %r0, 2
  %ppn = getelementptr i{p}, ptr %pos, i64 %pn
  %pn_raw = load i{p}, ptr %ppn
  %next0 = {p_ext} %pn_raw to i64
  br label %flat
flat:
  %k = phi i64 [%s0, %prime], [%k1, %flat_ok]
  %r = phi i64 [%r0, %prime], [%r1, %flat_ok]
  %end = phi i64 [%t0, %prime], [%end1, %flat_ok]
  %next = phi i64 [%next0, %prime], [%next1, %flat_ok]
  %acc = phi {t} [{zero}, %prime], [%acc1, %flat_ok]
{flat_product}
  %py = getelementptr {t}, ptr %y, i64 %r
  store {t} %s, ptr %py
  %k1 = add i64 %k, 1
  %last = icmp eq i64 %k1, %end
  %lastw_i = zext i1 %last to i64
  %lastw = call i64 asm "", "=r,0"(i64 %lastw_i)
  %r1 = add i64 %r, %lastw
{restart}
  %end1 = select i1 %last, i64 %next, i64 %end
  %pa = add i64 %r, 3
  %ppa = getelementptr i{p}, ptr %pos, i64 %pa
  %ahead_raw = load i{p}, ptr %ppa
  %ahead = {p_ext} %ahead_raw to i64
  %next1 = select i1 %last, i64 %ahead, i64 %next
  ; leave after a row whose successor is empty or ends beyond kstop (min(pos[hf], nnz)), so also at the flat
  ; rows' end (pos[hf]). Inside a row end1 = end, k1 < end <= kstop; after it end1 = next: one unsigned compare
  %gap = sub i64 %end1, %k1
  %gap1 = sub i64 %gap, 1
  %room = sub i64 %kstop, %k1
  %leaving = icmp uge i64 %gap1, %room
  br i1 %leaving, label %leave, label %flat_ok
flat_ok:
  br label %flat
leave:
  %rx = add i64 %r, 1
  br label %resync
done:
  ret i64 0
bad:
  ret i64 1
}}
"""

# One entry's product added to a running sum, its column checked first: %{q}s = %{q}acc + vals[%{q}k] * x[col],
# shared by the flat loop and the loop for a row on its own (``q`` prefixes the value names, ``ok`` is the
# block after the check)
_PRODUCT = """  %{q}pc = getelementptr i{c}, ptr %crd, i64 %{q}k
  %{q}col_raw = load i{c}, ptr %{q}pc
  %{q}col = {c_ext} %{q}col_raw to i64
  %{q}inside = icmp ult i64 %{q}col, %n
  br i1 %{q}inside, label %{ok}, label %bad
{ok}:
  %{q}pv = getelementptr {t}, ptr %vals, i64 %{q}k
  %{q}v = load {t}, ptr %{q}pv
  %{q}px = getelementptr {t}, ptr %x, i64 %{q}col
  %{q}xv = load {t}, ptr %{q}px
  %{q}prod = {mul} {t} %{q}v, %{q}xv
  %{q}s = {add} {t} %{q}acc, %{q}prod"""

# the sum restarts from +0.0 after a row's end: for floating point an and with an all-clear mask, made opaque
# (an empty asm) so LLVM keeps it an and instead of a select, which x86 compiles to a branch
_RESTART_FLOAT = """  %keep_int = sub i{bits} {last_w}, 1
  %keep_f = bitcast i{bits} %keep_int to {t}
  %keep_o = call {t} asm "", "=x,0"({t} %keep_f)
  %keep = bitcast {t} %keep_o to i{bits}
  %s_bits = bitcast {t} %s to i{bits}
  %acc_bits = and i{bits} %s_bits, %keep
  %acc1 = bitcast i{bits} %acc_bits to {t}"""
_RESTART_INT = "  %acc1 = select i1 %last, {t} 0, {t} %s"


def _spmv_flat_ir(name: str, value: np.dtype, p: int, c: int) -> str:
    """Rows [lo, hi) of y = A @ x by one loop over their entries (``_FLAT``), checking as ``_spmv_ir`` does:
    each segment ``start <= stop <= nnz`` before its entries are read, each column ``< n`` (unsigned) before
    ``x`` is read there; 1 (``y`` incomplete) at the first defect."""
    from splyce.native.codegen import host_target

    t, mul, add, zero = _VALUE[value]
    if t in ("double", "float") and host_target().triple.startswith("x86_64"):
        bits = 64 if t == "double" else 32
        last_w = "%lastw" if bits == 64 else "%lastw32"
        restart = ("  %lastw32 = trunc i64 %lastw to i32\n" if bits == 32 else "") + _RESTART_FLOAT.format(
            bits=bits, t=t, last_w=last_w)
    else:
        restart = _RESTART_INT.format(t=t) if t not in ("double", "float") else \
            f"  %acc1 = select i1 %last, {t} {zero}, {t} %s"
    product = functools.partial(_PRODUCT.format, t=t, mul=mul, add=add, c=c, c_ext=_ext(c))
    return _FLAT.format(name=name, t=t, zero=zero, p=p, c=c, p_ext=_ext(p), c_ext=_ext(c), restart=restart,
                        single_product=product(q="s", ok="single_ok"), flat_product=product(q="", ok="col_ok"))


# -- compiled variants and the drivers ----------------------------------------------------------------------
SPMM_FIXED = 32    # column counts up to this get a kernel with the row's sums in registers


@functools.cache
def _spmv(value: np.dtype, p: int, c: int, check: bool, flat: bool = False):
    """The SpMV kernel on rows [lo, hi); with ``check``, one that checks the positions and columns it reads as
    it reads them (``_spmv_ir``) and returns 1, the output incomplete, at the first defect. ``flat``: the flat
    kernel for rows of a few entries (``_FLAT``), which always checks (its checks are predicted branches)."""
    from splyce.native.codegen import compile_host_helpers

    if flat:
        name = f"splyce_spmv_{_VALUE[value][0]}_p{p}_c{c}_flat_checked"
        return compile_host_helpers(_flat_driver_ir(name, value, p, c), {name: _SPMV_SIG})[name]
    name = f"splyce_spmv_{_VALUE[value][0]}_p{p}_c{c}_r{ROWS}" + ("_checked" if check else "")
    return compile_host_helpers(_spmv_ir(name, value, p, c, ROWS, check), {name: _SPMV_SIG})[name]


# For a matrix whose entries stay in cache: per block of GROUPED_BLOCK_ROWS rows, a SIMD scan of the block's
# positions (monotone) and of the range of its columns, then the block's rows, which read them again from
# cache, in groups of GROUPED_ROWS unless they all have one length (then one at a time: every loop exit is
# predicted, and groups only add work). In cache the scan is cheap, and the grouped kernel without a branch
# per entry was measured 1.3x faster than with one (ba-4k, pyamg-bar).
GROUPED_BLOCK_ROWS = 512
_GROUPED_DRIVER = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz) {{
entry:
  %flags = alloca [2 x i64]
  br label %head
head:
  %b = phi i64 [%lo, %entry], [%bend, %next]
  %more = icmp slt i64 %b, %hi
  br i1 %more, label %body, label %ok
body:
  %b1 = add i64 %b, {block}
  %over = icmp sgt i64 %b1, %hi
  %bend = select i1 %over, i64 %hi, i64 %b1
  %ps = getelementptr i{p}, ptr %pos, i64 %b
  %nseg = sub i64 %bend, %b
  %down = call i64 @{name}_pos(ptr %ps, i64 %nseg)
  %decreasing = icmp ne i64 %down, 0
  br i1 %decreasing, label %fail, label %positions_ok
positions_ok:
  %s_raw = load i{p}, ptr %ps
  %s = {p_ext} %s_raw to i64
  %pe = getelementptr i{p}, ptr %pos, i64 %bend
  %e_raw = load i{p}, ptr %pe
  %e = {p_ext} %e_raw to i64
  %s_over = icmp ugt i64 %s, %nnz
  %e_over = icmp ugt i64 %e, %nnz
  %outside = or i1 %s_over, %e_over
  br i1 %outside, label %fail, label %columns
columns:
  %len = sub i64 %e, %s
  %pc = getelementptr i{c}, ptr %crd, i64 %s
  call void @{name}_check(ptr %pc, i64 %len, i64 %n, ptr %flags)
  %f = load i64, ptr %flags
  %bad = icmp ne i64 %f, 0
  br i1 %bad, label %fail, label %run
run:
  %uniform = call i64 @{name}_uniform(ptr %ps, i64 %nseg)
  %is_uniform = icmp ne i64 %uniform, 0
  br i1 %is_uniform, label %run_single, label %run_grouped
run_single:
  %ignored1 = call i64 @{name}_rows(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %b, i64 %bend, ptr %y, i64 %nnz)
  br label %next
run_grouped:
  %ignored2 = call i64 @{name}_grouped(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %b, i64 %bend, ptr %y, i64 %nnz)
  br label %next
next:
  br label %head
ok:
  ret i64 0
fail:
  ret i64 1
}}
"""

# 1 when the nseg segments starting at pos all have the length of the first one (a flat, vectorizable scan)
_UNIFORM = """
define i64 @{name}(ptr %pos, i64 %nseg) {{
entry:
  %p0 = load i{p}, ptr %pos
  %p1a = getelementptr i{p}, ptr %pos, i64 1
  %p1 = load i{p}, ptr %p1a
  %len0 = sub i{p} %p1, %p0
  br label %head
head:
  %s = phi i64 [0, %entry], [%s1, %body]
  %acc = phi i{p} [0, %entry], [%acc1, %body]
  %more = icmp slt i64 %s, %nseg
  br i1 %more, label %body, label %done
body:
  %pa = getelementptr i{p}, ptr %pos, i64 %s
  %a = load i{p}, ptr %pa
  %s1 = add i64 %s, 1
  %pb = getelementptr i{p}, ptr %pos, i64 %s1
  %b = load i{p}, ptr %pb
  %len = sub i{p} %b, %a
  %differs = xor i{p} %len, %len0
  %acc1 = or i{p} %acc, %differs
  br label %head
done:
  %same = icmp eq i{p} %acc, 0
  %r = zext i1 %same to i64
  ret i64 %r
}}
"""

# Rows advanced together in the grouped kernel. Measured on the shared 2-core EPYC (Zen 1), raw kernels, min of
# 25 interleaved repeats, vs ROWS = 1: 1.3-1.45x faster on small meshes, power-law and block matrices (fem2d-3k
# 43 -> 30 us, propack 22 -> 17 us), equal on R-MAT and 3-D meshes, slower on uniform rows (banded) and on
# matrices beyond cache (there the gather from memory bounds it, and ROWS = 1 is fastest).
GROUPED_ROWS = 3


def _tuned_for(cpu: str, l2_bytes: int) -> tuple[int, int, int]:
    """(GROUPED_MAX_BYTES, GROUPED_MIN_ROW, FLAT_MIN_BYTES) for this CPU: the matrix size (index + value bytes
    of the entries) up to which the grouped kernel runs, for an average row of at least GROUPED_MIN_ROW
    entries, and the size from which rows of a few entries go flat. Measured per machine (docs/corpus.md,
    "SpMV kernel choice by CPU"). Zen 1 / Zen 2 (512 KiB L2): grouped rows in L2 (1.3-1.45x the one-row
    kernel), the flat loop at any size (road-100: 1.83 vs 1.18x scipy). Zen 4 (1 MiB L2): grouped rows pay in
    L2 only on long rows (37-39 entries: 1.25x the one-row kernel; 14-16: 1.02-1.04x; 6-12: 0.86-0.97x), and
    beyond L2 the flat loop wins on short rows (road-700: 1.9x the one-row kernel). Zen 5 (1 MiB L2), and by
    default the CPUs not measured: in L2 the one-row kernel is fastest everywhere (grouped 0.66-0.96x of it,
    flat 0.41-0.62x: road-100 0.97x scipy flat, 2.24x one row) and beyond L2 the flat loop wins on short rows
    (road graphs of 1.2-14 MB: 1.47-1.72x scipy against the one-row kernel's 0.92-1.00x)."""
    if cpu in ("znver1", "znver2"):
        return 512 << 10, 0, 0
    if cpu == "znver4":
        return l2_bytes, 14, l2_bytes
    return 0, 0, l2_bytes


def _l2_bytes() -> int:
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        return int(text[:-1]) << {"K": 10, "M": 20}[text[-1]] if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError, KeyError):
        return 1 << 20


def _host_cpu() -> str:
    from splyce.native.codegen import host_target

    return host_target().cpu


GROUPED_MAX_BYTES, GROUPED_MIN_ROW, FLAT_MIN_BYTES = _tuned_for(_host_cpu(), _l2_bytes())


@functools.cache
def _spmm(value: np.dtype, p: int, c: int, k: int | None, check: bool = False):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spmm_{_VALUE[value][0]}_p{p}_c{c}_k{k or 'any'}" + ("_checked" if check else "")
    return compile_host_helpers(_spmm_ir(name, value, p, c, k, check), {name: _SPMM_SIG})[name]


# The flat kernel's driver: per block of GROUPED_BLOCK_ROWS rows, rows of one length (a tridiagonal matrix, a
# diagonal) go one at a time, where every loop exit is predicted (flat measured 0.57-0.88x that there, on rows
# of 2-4 entries), and rows of varying lengths through the flat loop. Each kernel checks what it reads.
_FLAT_DRIVER = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz) {{
entry:
  br label %head
head:
  %b = phi i64 [%lo, %entry], [%bend, %run_rows], [%bend, %run_flat]
  %more = icmp slt i64 %b, %hi
  br i1 %more, label %body, label %ok
body:
  %b1 = add i64 %b, {block}
  %over = icmp sgt i64 %b1, %hi
  %bend = select i1 %over, i64 %hi, i64 %b1
  %ps = getelementptr i{p}, ptr %pos, i64 %b
  %nseg = sub i64 %bend, %b
  %uniform = call i64 @{name}_uniform(ptr %ps, i64 %nseg)
  %is_uniform = icmp ne i64 %uniform, 0
  br i1 %is_uniform, label %rows, label %flat
rows:
  %bad1 = call i64 @{name}_rows(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %b, i64 %bend, ptr %y, i64 %nnz)
  %failed1 = icmp ne i64 %bad1, 0
  br i1 %failed1, label %fail, label %run_rows
run_rows:
  br label %head
flat:
  %bad2 = call i64 @{name}_flat(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %b, i64 %bend, ptr %y, i64 %nnz)
  %failed2 = icmp ne i64 %bad2, 0
  br i1 %failed2, label %fail, label %run_flat
run_flat:
  br label %head
ok:
  ret i64 0
fail:
  ret i64 1
}}
"""

def _flat_driver_ir(name: str, value: np.dtype, p: int, c: int) -> str:
    """``name``: the checking SpMV on rows [lo, hi) (``_SPMV_SIG``), uniform blocks one row at a time, the
    others through the flat loop (``_FLAT_DRIVER``); with its helper functions."""
    return (_spmv_ir(name + "_rows", value, p, c, ROWS, True) + _spmv_flat_ir(name + "_flat", value, p, c)
            + _UNIFORM.format(name=name + "_uniform", p=p)
            + _FLAT_DRIVER.format(name=name, block=GROUPED_BLOCK_ROWS, p=p))


# The whole product in one call, as the drop-in's fast path makes it: also checks the two ends of the positions
# (``pos[0] == 0``, ``pos[m] == nnz``: scipy's own format rule; the kernel checks every segment itself).
_WHOLE = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr %y, i64 %n, i64 %m, i64 %nnz) {{
entry:
{ends}
  br i1 %ends_ok, label %run, label %fail
run:
  %r = call i64 @{checked}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 0, i64 %m, ptr %y, {k}i64 %nnz)
  ret i64 %r
fail:
  ret i64 1
}}
"""


@functools.cache
def _spmv_objects(value: np.dtype, p: int, c: int, variant: str):
    """``i64 f(id(indptr), id(indices), id(data), id(x), id(y), n, m, nnz)``: the checking SpMV on array
    objects (``array_objects``), nonzero when the index arrays are malformed (then ``y`` is incomplete).
    ``variant``: "rows" (one row at a time), "grouped" (rows of varying lengths in groups of ``GROUPED_ROWS``,
    for matrices that stay in cache) or "flat" (one loop over all entries, for rows of a few entries)."""
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers

    text, entry = spmv_objects_ir(value, p, c, variant)
    return compile_host_helpers(text, {entry: array_objects.signature(8)})[entry]


def spmv_objects_ir(value: np.dtype, p: int, c: int, variant: str) -> tuple[str, str]:
    """The IR of ``_spmv_objects`` and its entry's name."""
    from splyce.native import array_objects
    from splyce.native.validation import position_check_ir, position_ends_ir, range_check_ir

    if variant not in ("rows", "grouped", "flat"):
        raise ValueError(f"unknown SpMV variant {variant!r}")
    suffix = {"rows": "", "grouped": f"_g{GROUPED_ROWS}", "flat": "_flat"}[variant]
    name = f"splyce_spmv_{_VALUE[value][0]}_p{p}_c{c}_r{ROWS}" + suffix
    checked, whole, entry = name + "_checked", name + "_whole", name + "_objects"
    if variant == "flat":
        text = _flat_driver_ir(checked, value, p, c)
    elif variant == "grouped":
        text = (_spmv_ir(checked + "_rows", value, p, c, ROWS) + _spmv_ir(checked + "_grouped", value, p, c, GROUPED_ROWS)
                + range_check_ir(checked + "_check", c) + position_check_ir(checked + "_pos", p)
                + _UNIFORM.format(name=checked + "_uniform", p=p)
                + _GROUPED_DRIVER.format(name=checked, block=GROUPED_BLOCK_ROWS, p=p, c=c, p_ext=_ext(p)))
    else:
        text = _spmv_ir(checked, value, p, c, ROWS, True)
    text += (_WHOLE.format(name=whole, checked=checked, ends=position_ends_ir(p), k="")
             + array_objects.object_entry_ir(entry, whole, "aaaaaiii"))
    return text, entry


@functools.cache
def _spmm_objects(value: np.dtype, p: int, c: int, k: int):
    """``i64 f(id(indptr), id(indices), id(data), id(X), id(Y), n, m, nnz)``: SpMM with ``k`` (<= SPMM_FIXED)
    columns on array objects, checking what it reads as SpMV does; nonzero (``Y`` incomplete) when the operand
    is malformed."""
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers
    from splyce.native.validation import position_ends_ir

    name = f"splyce_spmm_{_VALUE[value][0]}_p{p}_c{c}_k{k}"
    checked, whole, entry = name + "_checked", name + "_whole", name + "_objects"
    text = (_spmm_ir(checked, value, p, c, k, True)
            + _WHOLE.format(name=whole, checked=checked, ends=position_ends_ir(p), k=f"i64 {k}, ")
            + array_objects.object_entry_ir(entry, whole, "aaaaaiii"))
    return compile_host_helpers(text, {entry: array_objects.signature(8)})[entry]


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


def csr_times_dense(indptr, indices, data, x, threads: int = 1, coordinates_checked: bool = True):
    """``A @ x`` for CSR buffers and a C-contiguous ``x`` of A's value dtype, 1-D (SpMV) or 2-D (SpMM). The
    buffers must be checked already (positions monotone from 0 to ``len(indices)``, coordinates in
    ``[0, len(x))``), or, with ``coordinates_checked=False`` (``pos[0] == 0`` and ``pos[-1] == len(indices)``
    still checked by the caller), they are checked inside the kernel as it reads them (by each thread for its
    rows: nothing serial before the threads start), and the result is None when they are not well formed."""
    m = len(indptr) - 1
    n = x.shape[0]
    p, c = indptr.dtype.itemsize * 8, indices.dtype.itemsize * 8
    if x.ndim == 1:
        y = np.empty(m, dtype=data.dtype)
        with _lock:
            flat = len(indices) <= FLAT_MAX_ROW * m and len(indices) * (c + data.dtype.itemsize * 8) // 8 >= FLAT_MIN_BYTES
            fn = _spmv(data.dtype, p, c, not coordinates_checked, flat)
        extra = (len(indices),)
    else:
        k = x.shape[1]
        y = np.empty((m, k), dtype=data.dtype)
        with _lock:
            fn = _spmm(data.dtype, p, c, k if k <= SPMM_FIXED else None, not coordinates_checked)
        extra = (k, len(indices))

    def args(lo, hi):
        return (_address(indptr), _address(indices), _address(data), _address(x), n, lo, hi,
                _address(y), *extra)

    # rows balanced by entries (any split is safe: each range checks its own rows); the first range on the
    # calling thread; one range when the entries are too few for a split to pay (ir_text.MIN_CHUNK)
    bad = any(_run_chunks(lambda t, lo, hi: fn(*args(lo, hi)), _work_chunks(indptr, threads), threads))
    return None if bad else y
