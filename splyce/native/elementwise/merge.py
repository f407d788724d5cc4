"""Elementwise products and sums of two CSR matrices (canonical: sorted, unique columns) -> CSR, native code.

Operands with the same positions (a structurally symmetric matrix and its transpose, a matrix and a copy with
new values: common) take one flat, vectorized pass over all entries (``same_pattern``). Otherwise each row is
one pass: rows holding the same columns are combined entry by entry after a vectorized compare; other rows
merge their two sorted column lists with branch-free steps (both cursors advance by comparison results, every
candidate is stored and the output cursor advances only when it is kept), so the loop does not mispredict on
irregular patterns. The output is sized by an upper bound (``min(nnz)`` for an integer product, an
intersection; ``nnz(A) + nnz(B)`` for a union) and shrunk in place afterwards; pages never written are never
touched. Values follow scipy's ``csr_binop_csr``: a missing entry counts as zero, ``op(a, b)`` is stored only
when it is not zero (NaN is kept, so NaN times a missing entry is NaN, as in scipy), columns come out sorted.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from splyce.native.array_objects import DATA_OFFSET, address as _address
from splyce.native import ir_text
from splyce.native.elementwise.common import _POS_MAX, _keep, _lock, missing_values, value_type
from splyce.native.elementwise.merge_ir import (_BOUNDS, _MERGE_STEP, _MERGE_STEP_PARTS, _NARROW, _NARROW_MASK,
                                                 _NARROW_PARTS, _ROWS, _ROWS_PARTS, _TAIL,
                                                 _TAILS)
from splyce.native.ir_text import IR, counted, fill

_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P, _P)


# Where a kernel's row ends go: ``ends[r - lo]`` as i64 (row ranges of threads, moved and offset afterwards), or
# ``direct``: the whole matrix on one range, straight into the result's positions (``indptr[r + 1]`` in the
# positions' width, ``indptr[0] = 0``), so the call needs no conversion afterwards
_END_STORES = {
    False: ("", """  %rel = sub i64 %r, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  store i64 %o_end, ptr %pend"""),
    True: ("  store i{p} 0, ptr %ends", """  %pend = getelementptr i{p}, ptr %ends, i64 %r1
  %o_end_p = {p_narrow} %o_end to i{p}
  store i{p} %o_end_p, ptr %pend"""),
}


@functools.cache
def _kernel(op: str, value: np.dtype, pos_bits: int, crd_bits: int, intersect: bool, direct: bool = False,
            keep_zeros: bool = False):
    """The merge of rows [lo, hi) (``direct``: all rows, reached through an object entry taking array objects;
    ``keep_zeros``: every coiterated position stored, a sum's missing entries as ``missing_values``)."""
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, instr = value_type(value, keep_zeros, op)
    zero_a, zero_b = missing_values(op, t, keep_zeros)
    neg_a, neg_b = zero_a != zero, zero_b != zero       # -0.0 where a value is missing
    name = (f"splyce_elementwise_{op}_{t}_p{pos_bits}_c{crd_bits}_{'i' if intersect else 'u'}"
            f"{'_d' if direct else ''}{'_k' if keep_zeros else ''}")
    # the kernel's fields; the pieces with fields of their own (a row's mask, a row's tail, the merge step) are
    # filled first
    fields = dict(name=name, t=t, zero=zero, nonzero=nonzero, op=instr, c=crd_bits, c_zext=ir_text.ext(crd_bits),
                  c_sext=ir_text.sext(crd_bits), c_narrow=ir_text.narrow(crd_bits), p=pos_bits,
                  p_ext=ir_text.ext(pos_bits), p_narrow=ir_text.narrow(pos_bits), zero_a=zero_a, zero_b=zero_b)
    masks = {f"mask_{x}": fill(_NARROW_MASK, x=x, start=start, stop=stop, crd=crd, enter=enter, exit=exit_, **fields)
             for x, start, stop, crd, enter, exit_ in (("a", "ia", "ib", "ac", "nw_width", "nw_mb_head"),
                                                       ("b", "ja", "jb", "bc", "nw_ma_head", "nw_start"))}
    keeps = dict(keep_nw_a="", keep_nw_b="", keep_a="", keep_b="") if intersect else dict(
        keep_nw_a=_keep("nw_va", "nw_hasa", "nw_va_raw", t, neg_a), keep_nw_b=_keep("nw_vb", "nw_hasb", "nw_vb_raw", t, neg_b),
        keep_a=_keep("va", "adv_a", "va_raw", t, neg_a), keep_b=_keep("vb", "adv_b", "vb_raw", t, neg_b))
    narrow = fill(_NARROW, **masks, **_NARROW_PARTS[not intersect], **keeps, **fields)
    step = fill(_MERGE_STEP, **_MERGE_STEP_PARTS[not intersect], **keeps, **fields)
    tails = {f"tail_{x}": fill(_TAIL, x=x, **own, **fields) for x, own in _TAILS.items()}
    entry_store, end_store = _END_STORES[direct]
    text = fill(_ROWS, **_ROWS_PARTS[not intersect], bounds=_BOUNDS, narrow=narrow, merge_step=step, **tails,
                entry_store=entry_store, end_store=end_store, **fields)
    if not direct:
        return compile_host_helpers(text, {name: _SIG})[name]
    text += array_objects.object_entry_ir(name + "_objects", name, "aaaaaaiiaaa")
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(11)})[name + "_objects"]


def _intersects(op: str, av: np.ndarray, bv: np.ndarray, threads: int = 1) -> bool:
    """Whether only columns both rows hold can give nonzero results: a product, except of floats where NaN or
    Inf meets an absent entry (as in scipy and IEEE, NaN or Inf times zero is NaN, kept: then the product
    merges as a union). A finite sum proves every value finite (NaN and Inf propagate into it; an overflow
    to Inf only costs the union). The sums of large operands are split across threads (NumPy's reductions
    release the GIL)."""
    if op != "multiply":
        return False
    if av.dtype.kind != "f":
        return True
    parts = [av, bv]
    if threads > 1 and len(av) + len(bv) >= 2 * ir_text.MIN_CHUNK:
        half_a, half_b = len(av) // 2, len(bv) // 2
        parts = [(av[:half_a], bv[:half_b]), (av[half_a:], bv[half_b:])]
        sums = ir_text.run_chunks(lambda t, lo, hi: float(parts[t][0].sum()) + float(parts[t][1].sum()),
                                  [(0, 1), (1, 2)], threads)
        return all(np.isfinite(sums))
    return bool(np.isfinite(av.sum()) and np.isfinite(bv.sum()))


def elementwise(op: str, a, b, dtype, threads: int = 1, keep_zeros: bool = False):
    """``(data, indices, indptr)`` of ``op(A, B)`` for canonical CSR parts ``a = (data, indices, indptr)`` and
    ``b`` of one shape, with equal index dtypes (pos: int32 or int64; crd: int32 or int64) and values of
    ``dtype``. Index dtypes of the result are the operands'. ``threads``: row ranges balanced by the entries
    of both operands, each writing straight into the result at its upper-bound offset; the ranges after the
    first then move down to close the gaps (bit-identical to one thread). ``keep_zeros``: the sparsifier's
    coiteration (the jit's semantics) instead of scipy's rule: a product stores every position both hold (zero
    and NaN results too; NaN or Inf times a missing entry is not stored), a sum every position either holds,
    a missing entry leaving the other value as it is (``a - missing`` is a, ``missing - b`` is -b); bool too."""
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    m = len(ap) - 1
    same = same_pattern(op, a, b, dtype, drop_zeros=not keep_zeros)
    if same is not None:
        return same
    pos_bits, crd_bits = ap.dtype.itemsize * 8, ac.dtype.itemsize * 8
    intersect = op == "multiply" if keep_zeros else _intersects(op, av, bv, threads)
    one = threads <= 1 or len(ac) + len(bc) < 2 * ir_text.MIN_CHUNK
    bound = min(len(ac), len(bc)) if intersect else len(ac) + len(bc)
    if one and m > 0 and bound <= _POS_MAX[pos_bits] and DATA_OFFSET is not None:
        key = (op, dtype, pos_bits, crd_bits, intersect, True, keep_zeros)
        kernel = _direct_kernels.get(key)
        if kernel is None:
            with _lock:
                kernel = _direct_kernels[key] = _kernel(*key)
        cols = np.empty(bound + 1, dtype=ac.dtype)    # + 1: the store before the last test
        vals = np.empty(bound + 1, dtype=dtype)
        indptr = np.empty(m + 1, dtype=ap.dtype)
        nnz = kernel(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), 0, m, id(indptr), id(cols), id(vals))
        cols.resize(nnz, refcheck=False)     # shrink in place: no copy of the entries
        vals.resize(nnz, refcheck=False)
        return vals, cols, indptr
    with _lock:
        kernel = _kernel(op, dtype, pos_bits, crd_bits, intersect, False, keep_zeros)
    chunks = [(0, m)]
    if threads > 1 and len(ac) + len(bc) >= 2 * ir_text.MIN_CHUNK:
        chunks = ir_text.work_chunks(ap.astype(np.int64) + bp, threads)
    # each range's room: its bound (min(na, nb) for an intersection, na + nb for a union) + 1 for the store
    # before the last test
    bound = [(min if intersect else int.__add__)(int(ap[hi] - ap[lo]), int(bp[hi] - bp[lo])) + 1
             for lo, hi in chunks]
    starts = np.concatenate([[0], np.cumsum(bound)]).tolist()
    cols = np.empty(starts[-1], dtype=ac.dtype)
    vals = np.empty(starts[-1], dtype=dtype)
    ends = np.empty(m, dtype=np.int64)
    cbase, vbase, ebase = _address(cols), _address(vals), _address(ends)

    def run(t, lo, hi):
        return int(kernel(_address(ap), _address(ac), _address(av), _address(bp), _address(bc), _address(bv),
                          lo, hi, ebase + lo * 8, cbase + starts[t] * cols.itemsize,
                          vbase + starts[t] * vals.itemsize))

    counts = ir_text.run_chunks(run, chunks, threads)
    nnz = sum(counts)
    offset = 0
    for t, ((lo, hi), count) in enumerate(zip(chunks, counts)):
        if t:     # close the gap (a move to a lower offset: numpy copies overlapping ranges correctly)
            cols[offset:offset + count] = cols[starts[t]:starts[t] + count]
            vals[offset:offset + count] = vals[starts[t]:starts[t] + count]
            ends[lo:hi] += offset
        offset += count
    cols.resize(nnz, refcheck=False)     # shrink in place: no copy of the entries
    vals.resize(nnz, refcheck=False)
    pos_dtype = ap.dtype if nnz <= np.iinfo(ap.dtype).max else np.dtype(np.int64)
    indptr = np.empty(m + 1, dtype=pos_dtype)
    indptr[0] = 0
    indptr[1:] = ends
    return vals, cols, indptr


_direct_kernels: dict = {}   # the one-range merges, looked up per call without a lock


# -- the same-pattern fast path: operands holding the same positions, one flat, vectorizable pass over all entries
@functools.cache
def _memcmp():
    fn = ctypes.CDLL(None).memcmp
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    fn.restype = ctypes.c_int
    return fn


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal C-contiguous arrays of one dtype (libc's memcmp: SIMD, stops at the first difference)."""
    return len(x) == len(y) and (x.nbytes == 0 or _memcmp()(_address(x), _address(y), x.nbytes) == 0)


def _same_ir(name: str, t: str, zero: str, nonzero: str, op: str, c: int) -> str:
    """Same positions in both operands: one flat, vectorizable pass over all entries writes every column and
    op(a, b), counts the nonzero results, and records whether any column differs (then the caller merges):
    ``out[0]`` (any column differs), ``out[1]`` (results kept)."""
    ir = IR()
    ir(f"define void @{name}(ptr %ac, ptr %bc, ptr %av, ptr %bv, i64 %n, ptr %cc, ptr %cv, ptr %out) {{")
    ir.label("entry")

    def entry(k, diff, kept):
        ca, cb = ir.load(f"i{c}", "%ac", k), ir.load(f"i{c}", "%bc", k)
        v = ir.op(op, t, ir.load(t, "%av", k), ir.load(t, "%bv", k))
        ir.store(f"i{c}", ca, "%cc", k)
        ir.store(t, v, "%cv", k)
        ne, nz, diff1, kept1 = ir.op("icmp ne", f"i{c}", ca, cb), ir.name("ne"), ir.name("diff"), ir.name("kept")
        ir(f"  {nz} = zext i1 {ne} to i32")
        ir(f"  {diff1} = or i32 {diff}, {nz}")
        keep, step = ir.op(nonzero, t, v, zero), ir.name("step")
        ir(f"  {step} = zext i1 {keep} to i64")
        ir(f"  {kept1} = add i64 {kept}, {step}")
        return diff1, kept1

    diff, kept = counted(ir, "0", "%n", entry, carried=(("i32", "0"), ("i64", "0")), base="k")
    d64 = ir.name("d")
    ir(f"  {d64} = zext i32 {diff} to i64")
    ir(f"  store i64 {d64}, ptr %out")
    ir.store("i64", kept, "%out", "1")
    ir("  ret void")
    ir("}")
    return ir.text()


_SAME_SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 4), ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


@functools.cache
def _same_kernel(op: str, value: np.dtype, crd_bits: int, keep_zeros: bool = False):
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, instr = value_type(value, keep_zeros, op)
    name = f"splyce_elementwise_same_{op}_{t}_c{crd_bits}{'_k' if keep_zeros else ''}"
    text = _same_ir(name, t, zero, nonzero, instr, crd_bits)
    return compile_host_helpers(text, {name: _SAME_SIG})[name]


def same_pattern(op: str, a, b, dtype, drop_zeros: bool = True):
    """``op(A, B)`` as ``(data, indices, indptr)`` when B holds exactly A's positions (equal ``indptr`` and
    ``indices``), else None. Only A needs to be validated: B's index arrays are compared, never followed.
    ``drop_zeros``: scipy's rule (a zero result is not stored); False keeps every position, as the sparsifier's
    coiteration does (the jit's semantics; bool too)."""
    av, ac, ap = a
    bv, bc, bp = b
    if ac.dtype != bc.dtype or ap.dtype != bp.dtype or not _same_bytes(ap, bp) or len(ac) != len(bc):
        return None
    dtype = np.dtype(dtype)
    n = len(ac)
    with _lock:
        kernel = _same_kernel(op, dtype, ac.dtype.itemsize * 8, not drop_zeros)
    cols = np.empty(n, dtype=ac.dtype)
    vals = np.empty(n, dtype=dtype)
    out = np.zeros(2, dtype=np.int64)
    kernel(_address(ac), _address(bc), _address(av), _address(bv), n, _address(cols),
           _address(vals), _address(out))
    if out[0]:
        return None
    if not drop_zeros:
        return vals, cols, ap.copy()
    return _drop_zeros(vals, cols, ap.copy(), int(out[1]))


def _drop_zeros(vals, cols, indptr, kept: int):
    """The entries of (vals, cols, indptr) whose value is not zero (``kept`` of them), as scipy's products drop
    them; NaN != 0 is kept."""
    n = len(vals)
    if kept != n:
        keep = vals != 0
        kept_before = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        vals, cols, indptr = vals[keep], cols[keep], kept_before[indptr].astype(indptr.dtype)
    return vals, cols, indptr
