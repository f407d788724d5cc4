"""Sparse x sparse -> sparse matrix product (CSR x CSR -> CSR) in O(flops), native code.

Gustavson's row-by-row product with a sparse accumulator written straight into the output: ``mark[j]`` holds
the output position of column ``j`` in the current row, or a position before the row's start when the row
has not met ``j`` yet; so the accumulator never needs clearing, and each multiply-add costs one lookup.
The work is ``rows + flops`` (flops: the multiply-adds, ``sum over A's entries (i, k) of len(B[k, :])``)
plus ``O(cols)`` to set up ``mark``, never ``rows x cols``.

Each row's sums accumulate in the order of ``k`` (A's row order) exactly as scipy's product does, so values
are the same as scipy's; columns within a row come in order of first appearance (scipy's are not sorted
either), and zero sums are dropped, as scipy does. Rows are cut into chunks of bounded flops: each chunk
writes into a buffer sized by its flops (an upper bound on its entries; pages never written are never
touched), so one pass suffices; chunks run on worker threads when asked, with identical results.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.backend.array_objects import address as _address
from splyce.backend.ir_text import pool

_PRODUCT = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi,
                   ptr %ends, ptr %cc, ptr %cv, ptr %mark) {{
entry:
  br label %row
row:
  %i = phi i64 [%lo, %entry], [%i1, %row_end]
  %start = phi i64 [0, %entry], [%c1, %row_end]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %row_body, label %done
row_body:
  %pa0 = getelementptr i{pa}, ptr %ap, i64 %i
  %ka_raw = load i{pa}, ptr %pa0
  %ka = {pa_ext} %ka_raw to i64
  %i1 = add i64 %i, 1
  %pa1 = getelementptr i{pa}, ptr %ap, i64 %i1
  %kb_raw = load i{pa}, ptr %pa1
  %kb = {pa_ext} %kb_raw to i64
  br label %k_head
k_head:
  %k = phi i64 [%ka, %row_body], [%k1, %k_end]
  %c1 = phi i64 [%start, %row_body], [%c2, %k_end]
  %kin = icmp slt i64 %k, %kb
  br i1 %kin, label %k_body, label %row_end
k_body:
  %pac = getelementptr i{ca}, ptr %ac, i64 %k
  %acol_raw = load i{ca}, ptr %pac
  %acol = {ca_ext} %acol_raw to i64
  %pav = getelementptr {t}, ptr %av, i64 %k
  %aval = load {t}, ptr %pav
  %pb0 = getelementptr i{pb}, ptr %bp, i64 %acol
  %ja_raw = load i{pb}, ptr %pb0
  %ja = {pb_ext} %ja_raw to i64
  %acol1 = add i64 %acol, 1
  %pb1 = getelementptr i{pb}, ptr %bp, i64 %acol1
  %jb_raw = load i{pb}, ptr %pb1
  %jb = {pb_ext} %jb_raw to i64
  br label %j_head
j_head:
  %jj = phi i64 [%ja, %k_body], [%jj1, %j_next]
  %c2 = phi i64 [%c1, %k_body], [%c2n, %j_next]
  %jin = icmp slt i64 %jj, %jb
  br i1 %jin, label %j_body, label %k_end
j_body:
  %pbc = getelementptr i{cb}, ptr %bc, i64 %jj
  %col_raw = load i{cb}, ptr %pbc
  %col = {cb_ext} %col_raw to i64
  %pbv = getelementptr {t}, ptr %bv, i64 %jj
  %bval = load {t}, ptr %pbv
  %prod = {mul} {t} %aval, %bval
  %pm = getelementptr i64, ptr %mark, i64 %col
  %m = load i64, ptr %pm
  %seen = icmp sge i64 %m, %start
  br i1 %seen, label %accum, label %insert
accum:
  %pcv = getelementptr {t}, ptr %cv, i64 %m
  %old = load {t}, ptr %pcv
  %sum = {add} {t} %old, %prod
  store {t} %sum, ptr %pcv
  br label %j_next
insert:
  store i64 %c2, ptr %pm
  %pcc = getelementptr i{co}, ptr %cc, i64 %c2
  %col_out = {co_narrow} %col to i{co}
  store i{co} %col_out, ptr %pcc
  %pcv2 = getelementptr {t}, ptr %cv, i64 %c2
  store {t} %prod, ptr %pcv2
  %c2i = add i64 %c2, 1
  br label %j_next
j_next:
  %c2n = phi i64 [%c2, %accum], [%c2i, %insert]
  %jj1 = add i64 %jj, 1
  br label %j_head
k_end:
  %k1 = add i64 %k, 1
  br label %k_head
row_end:
  %rel = sub i64 %i, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  store i64 %c1, ptr %pend
  br label %row
done:
  ret i64 %start
}}
"""

# prefix[i + 1] = prefix[i] + flops of row i, for rows [0, m)
_FLOPS = """
define void @{name}(ptr %ap, ptr %ac, ptr %bp, i64 %m, ptr %prefix) {{
entry:
  store i64 0, ptr %prefix
  br label %row
row:
  %i = phi i64 [0, %entry], [%i1, %row_end]
  %total = phi i64 [0, %entry], [%t1, %row_end]
  %more = icmp slt i64 %i, %m
  br i1 %more, label %row_body, label %done
row_body:
  %pa0 = getelementptr i{pa}, ptr %ap, i64 %i
  %ka_raw = load i{pa}, ptr %pa0
  %ka = {pa_ext} %ka_raw to i64
  %i1 = add i64 %i, 1
  %pa1 = getelementptr i{pa}, ptr %ap, i64 %i1
  %kb_raw = load i{pa}, ptr %pa1
  %kb = {pa_ext} %kb_raw to i64
  br label %k_head
k_head:
  %k = phi i64 [%ka, %row_body], [%k1, %k_body]
  %t = phi i64 [%total, %row_body], [%t2, %k_body]
  %kin = icmp slt i64 %k, %kb
  br i1 %kin, label %k_body, label %row_end
k_body:
  %pac = getelementptr i{ca}, ptr %ac, i64 %k
  %acol_raw = load i{ca}, ptr %pac
  %acol = {ca_ext} %acol_raw to i64
  %pb0 = getelementptr i{pb}, ptr %bp, i64 %acol
  %ja_raw = load i{pb}, ptr %pb0
  %ja = {pb_ext} %ja_raw to i64
  %acol1 = add i64 %acol, 1
  %pb1 = getelementptr i{pb}, ptr %bp, i64 %acol1
  %jb_raw = load i{pb}, ptr %pb1
  %jb = {pb_ext} %jb_raw to i64
  %len = sub i64 %jb, %ja
  %t2 = add i64 %t, %len
  %k1 = add i64 %k, 1
  br label %k_head
row_end:
  %t1 = phi i64 [%t, %k_head]
  %pp = getelementptr i64, ptr %prefix, i64 %i1
  store i64 %t1, ptr %pp
  br label %row
done:
  ret void
}}
"""

_VALUE = {np.dtype(np.float64): ("double", "fmul", "fadd"), np.dtype(np.float32): ("float", "fmul", "fadd"),
          np.dtype(np.int64): ("i64", "mul", "add"), np.dtype(np.int32): ("i32", "mul", "add")}
_P = ctypes.c_void_p
_I = ctypes.c_int64
_PRODUCT_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P, _P, _P)
_FLOPS_SIG = ctypes.CFUNCTYPE(None, _P, _P, _P, _I, _P)
_lock = threading.Lock()

# A chunk's output buffers are sized by its flops: at most this many entries per chunk (12-16 bytes each),
# so an upper bound far above the true entry count never reserves more than ~1 GB of address space.
CHUNK_FLOPS = 1 << 26


def _ext(bits: int) -> str:
    return "zext i32" if bits == 32 else "bitcast i64"


def _bits(arr: np.ndarray) -> int:
    return arr.dtype.itemsize * 8


@functools.cache
def _product(value: np.dtype, pa: int, ca: int, pb: int, cb: int, co: int):
    from splyce.backend.codegen import compile_host_helpers

    t, mul, add = _VALUE[value]
    name = f"splyce_spgemm_{t}_{pa}_{ca}_{pb}_{cb}_{co}"
    text = _PRODUCT.format(name=name, t=t, mul=mul, add=add, pa=pa, ca=ca, pb=pb, cb=cb, co=co,
                           pa_ext=_ext(pa), ca_ext=_ext(ca), pb_ext=_ext(pb), cb_ext=_ext(cb),
                           co_narrow="trunc i64" if co == 32 else "bitcast i64")
    return compile_host_helpers(text, {name: _PRODUCT_SIG})[name]


@functools.cache
def _flops(pa: int, ca: int, pb: int):
    from splyce.backend.codegen import compile_host_helpers

    name = f"splyce_spgemm_flops_{pa}_{ca}_{pb}"
    text = _FLOPS.format(name=name, pa=pa, ca=ca, pb=pb, pa_ext=_ext(pa), ca_ext=_ext(ca), pb_ext=_ext(pb))
    return compile_host_helpers(text, {name: _FLOPS_SIG})[name]


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


def row_flops_prefix(a_indptr, a_indices, b_indptr) -> np.ndarray:
    """``prefix[i]``: the multiply-adds of rows ``[0, i)`` of ``A @ B`` (int64, length rows + 1)."""
    m = len(a_indptr) - 1
    prefix = np.empty(m + 1, dtype=np.int64)
    with _lock:
        fn = _flops(_bits(a_indptr), _bits(a_indices), _bits(b_indptr))
    fn(_address(a_indptr), _address(a_indices), _address(b_indptr), m, _address(prefix))
    return prefix


def _chunks(prefix: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Row ranges with about equal flops, at least ``threads`` of them when there are rows, each at most
    CHUNK_FLOPS multiply-adds (or a single row)."""
    m = len(prefix) - 1
    total = int(prefix[-1])
    pieces = max(threads, -(-total // CHUNK_FLOPS), 1)
    if pieces == 1 or m <= 1:
        return [(0, m)]
    targets = total * np.arange(1, pieces) / pieces
    inner = np.searchsorted(prefix, targets, side="left").tolist()
    bounds = sorted(set([0, *inner, m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


class Product:
    """The CSR parts of ``A @ B`` and the work it took (``work``: rows + flops, the counter tests use)."""

    def __init__(self, data, indices, indptr, work):
        self.data, self.indices, self.indptr, self.work = data, indices, indptr, work


def spgemm(a, b, shape_b_cols: int, dtype, threads: int = 1) -> Product:
    """``A @ B`` for CSR parts ``a = (data, indices, indptr)`` and ``b`` (index arrays int32 or int64, any
    widths; values of ``dtype``, C-contiguous, already validated: in-range columns, monotone positions).
    The result's indices are int32 when the column count and entry count fit, else int64."""
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    m, n = len(ap) - 1, shape_b_cols
    prefix = row_flops_prefix(ap, ac, bp)
    flops = int(prefix[-1])
    col_dtype = np.dtype(np.int32) if n <= 2**31 else np.dtype(np.int64)
    with _lock:
        kernel = _product(dtype, _bits(ap), _bits(ac), _bits(bp), _bits(bc), col_dtype.itemsize * 8)
    chunks = _chunks(prefix, threads)

    def run(chunk):
        lo, hi = chunk
        size = int(prefix[hi] - prefix[lo])
        cols = np.empty(size, dtype=col_dtype)
        vals = np.empty(size, dtype=dtype)
        ends = np.empty(hi - lo, dtype=np.int64)
        mark = np.full(n, -1, dtype=np.int64)
        count = kernel(_address(ap), _address(ac), _address(av), _address(bp), _address(bc),
                       _address(bv), lo, hi, _address(ends), _address(cols), _address(vals),
                       _address(mark))
        return cols, vals, ends, int(count)

    if len(chunks) > 1 and threads > 1:
        parts = list(pool(threads).map(run, chunks))
    else:
        parts = [run(c) for c in chunks]
    nnz = sum(p[3] for p in parts)
    if len(parts) == 1:
        cols, vals, ends, _ = parts[0]
        cols.resize(nnz, refcheck=False)    # shrink in place (realloc): no copy of the entries
        vals.resize(nnz, refcheck=False)
    else:
        cols = np.concatenate([p[0][: p[3]] for p in parts])
        vals = np.concatenate([p[1][: p[3]] for p in parts])
        offsets = np.cumsum([0] + [p[3] for p in parts[:-1]])
        ends = np.concatenate([p[2] + off for p, off in zip(parts, offsets)])
    index_dtype = np.int32 if nnz < 2**31 and n <= 2**31 else np.int64
    indptr = np.empty(m + 1, dtype=index_dtype)
    indptr[0] = 0
    indptr[1:] = ends
    cols = cols.astype(index_dtype, copy=False)
    if nnz and np.count_nonzero(vals) != nnz:      # sums that cancelled to zero: dropped, as scipy does
        keep = vals != 0                           # NaN != 0: kept
        kept_before = np.zeros(nnz + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        indptr = kept_before[indptr].astype(index_dtype)
        cols, vals = cols[keep], vals[keep]
    return Product(vals, cols, indptr, m + flops)
