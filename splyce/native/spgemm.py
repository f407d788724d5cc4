"""Sparse x sparse -> sparse matrix product (CSR x CSR -> CSR) in O(flops), native code.

Gustavson's row-by-row product, one pass (no symbolic phase), with one of two accumulators per product:

- *sparse* (the default): ``slots[j]`` holds the output position of column ``j`` in the current row, or a
  position before the row's start when the row has not met ``j`` yet, so it never needs clearing; sums go
  straight into the output. Its insert-or-add branch is well predicted when output entries get few partial
  sums (graphs, meshes), and it touches one line of ``slots`` per multiply-add, which matters when ``slots``
  does not fit in cache.
- *dense*: ``slots[j] = (row tag, running sum)``, updated without a branch (a select), the sum gathered into
  the output at the row's end. It wins when A's rows are long and the result has few columns (e.g. pyamg's
  elasticity / DG matrices: ~10 partial sums per output entry, where the branch above mispredicts and the
  add waits for the position load); ``DENSE_COLUMNS`` / ``DENSE_ROW_ENTRIES`` choose it.

The work is ``rows + flops`` (flops: the multiply-adds, ``sum over A's entries (i, k) of len(B[k, :])``)
plus ``O(cols)`` to set up ``slots``, never ``rows x cols``. Each row's sums accumulate in the order of ``k``
(A's row order) exactly as scipy's product does, so values are the same as scipy's; columns within a row
come in order of first appearance (scipy's are not sorted either), and zero sums are dropped at the row's
end, as scipy does (NaN kept): the sparse kernel flags a row where a sum or product was zero and only then
compacts it; the dense one compacts while gathering.

Threads: rows are cut into ranges of about equal flops (a cut on the row nearest its target), each thread
with its own ``slots``. With two ranges (``threads=2``) both write straight into one pair of result buffers
sized by all the flops (an upper bound whose untouched pages cost nothing): the first range backwards, block
by block, so that it ends exactly where the second one starts writing forwards (``_BACKWARD``); nothing is
copied afterwards and each page is first touched by the thread that fills it. With more ranges the first
writes into the result's buffers, the others into their own, copied into place by all threads at once. The
flops prefix is computed in parallel too. Results are bit-identical for any thread count.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native import ir_text
from splyce.native.ir_text import pool, row_chunks, run_each

# Rows [lo, hi) of A @ B into cc / cv from position base on; ends[i - lo] = row i's end; returns the end.
# {accumulate}: one multiply-add (col, prod at position c2; defines block j_next, which sets c2n and loops);
# {finish}: the row's end (gather / compaction) from block finish (ends in block finished, which sets row_end).
_ROWS = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi, i64 %base,
                   ptr %ends, ptr %cc, ptr %cv, ptr %slots) {{
entry:
  br label %row
row:
  %i = phi i64 [%lo, %entry], [%i1, %row_done]
  %start = phi i64 [%base, %entry], [%row_end, %row_done]
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
  %z1 = phi i1 [false, %row_body], [%z2, %k_end]
  %kin = icmp slt i64 %k, %kb
  br i1 %kin, label %k_body, label %finish
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
  %z2 = phi i1 [%z1, %k_body], [%z2n, %j_next]
  %jin = icmp slt i64 %jj, %jb
  br i1 %jin, label %j_body, label %k_end
j_body:
  %pbc = getelementptr i{cb}, ptr %bc, i64 %jj
  %col_raw = load i{cb}, ptr %pbc
  %col = {cb_ext} %col_raw to i64
  %col_out = {co_narrow} %col to i{co}
  %pbv = getelementptr {t}, ptr %bv, i64 %jj
  %bval = load {t}, ptr %pbv
  %prod = {mul} {t} %aval, %bval
{accumulate}
k_end:
  %k1 = add i64 %k, 1
  br label %k_head
{finish}
row_done:
  %rel = sub i64 %i, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  store i64 %row_end, ptr %pend
  br label %row
done:
  ret i64 %start
}}
"""

# Rows [lo, hi) of A @ B ending at position end0 of cc / cv, in blocks of rows (bounds[0] = lo < bounds[1] <
# ... < bounds[blocks] = hi) taken last block first, each placed just before the blocks already placed;
# ends[i - lo] = row i's end; returns where row lo starts. Two threads meet at end0 with no gap: one writes
# backwards to it, the other forwards from it. A block (at most its flops, prefix[b1] - prefix[b0], entries)
# is computed by @{name} at end - flops on, seen through pointers shifted so that its positions count on from
# the previous block's (a stream that only grows, as forwards: slots never need clearing), then moved up to
# end when it has fewer entries than flops: a move of what was just written, still in cache.
_BACKWARD = """
define i64 @{name}_backward(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, ptr %bounds,
                            i64 %blocks, i64 %end0, ptr %ends, ptr %cc, ptr %cv, ptr %slots, ptr %prefix) {{
entry:
  br label %block
block:
  %b = phi i64 [%blocks, %entry], [%bm, %block_done]
  %vs = phi i64 [0, %entry], [%vend, %block_done]
  %end = phi i64 [%end0, %entry], [%end_new, %block_done]
  %more = icmp sgt i64 %b, 0
  br i1 %more, label %body, label %done
body:
  %bm = sub i64 %b, 1
  %pb0 = getelementptr i64, ptr %bounds, i64 %bm
  %r0 = load i64, ptr %pb0
  %pb1 = getelementptr i64, ptr %bounds, i64 %b
  %r1 = load i64, ptr %pb1
  %pf0 = getelementptr i64, ptr %prefix, i64 %r0
  %f0 = load i64, ptr %pf0
  %pf1 = getelementptr i64, ptr %prefix, i64 %r1
  %f1 = load i64, ptr %pf1
  %flops = sub i64 %f1, %f0
  %at = sub i64 %end, %flops
  %shift = sub i64 %at, %vs
  %ccr = getelementptr i{co}, ptr %cc, i64 %shift
  %cvr = getelementptr {t}, ptr %cv, i64 %shift
  %rel = sub i64 %r0, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  %vend = call i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %r0, i64 %r1, i64 %vs,
                           ptr %pend, ptr %ccr, ptr %cvr, ptr %slots)
  %cnt = sub i64 %vend, %vs
  %end_new = sub i64 %end, %cnt
  %delta = sub i64 %end_new, %vs
  %rows = sub i64 %r1, %r0
  br label %fix
fix:
  %y = phi i64 [0, %body], [%y1, %fix_body]
  %yin = icmp slt i64 %y, %rows
  br i1 %yin, label %fix_body, label %fixed
fix_body:
  %pe = getelementptr i64, ptr %pend, i64 %y
  %e = load i64, ptr %pe
  %e1 = add i64 %e, %delta
  store i64 %e1, ptr %pe
  %y1 = add i64 %y, 1
  br label %fix
fixed:
  %gap = icmp slt i64 %cnt, %flops
  br i1 %gap, label %move, label %block_done
move:
  %x = phi i64 [%cnt, %fixed], [%xm, %move_body]
  %xin = icmp sgt i64 %x, 0
  br i1 %xin, label %move_body, label %block_done
move_body:
  %xm = sub i64 %x, 1
  %from = add i64 %at, %xm
  %psc = getelementptr i{co}, ptr %cc, i64 %from
  %col = load i{co}, ptr %psc
  %psv = getelementptr {t}, ptr %cv, i64 %from
  %val = load {t}, ptr %psv
  %to = add i64 %end_new, %xm
  %pdc = getelementptr i{co}, ptr %cc, i64 %to
  store i{co} %col, ptr %pdc
  %pdv = getelementptr {t}, ptr %cv, i64 %to
  store {t} %val, ptr %pdv
  br label %move
block_done:
  br label %block
done:
  ret i64 %end
}}
"""

# Moves the row's nonzero sums (columns cc[start, c1), value {value} of entry x) to cc / cv from start on.
_COMPACT = """
compact_head:
  %x = phi i64 [%start, %{before}], [%x1, %compact_body]
  %q = phi i64 [%start, %{before}], [%qn, %compact_body]
  %xin = icmp slt i64 %x, %c1
  br i1 %xin, label %compact_body, label %finished
compact_body:
  %pxc = getelementptr i{co}, ptr %cc, i64 %x
  %xcol_raw = load i{co}, ptr %pxc
{value}
  %keep = {nonzero} {t} %v, {zero}
  %pqc = getelementptr i{co}, ptr %cc, i64 %q
  store i{co} %xcol_raw, ptr %pqc
  %pqv = getelementptr {t}, ptr %cv, i64 %q
  store {t} %v, ptr %pqv
  %kinc = zext i1 %keep to i64
  %qn = add i64 %q, %kinc
  %x1 = add i64 %x, 1
  br label %compact_head
"""

# Dense: slots[col] = (row tag, running sum), updated by a select; the sums gathered at the row's end.
_DENSE_ACCUMULATE = """
  %pm = getelementptr {{i64, {t}}}, ptr %slots, i64 %col, i32 0
  %tag = load i64, ptr %pm
  %seen = icmp eq i64 %tag, %i
  store i64 %i, ptr %pm
  %pcc = getelementptr i{co}, ptr %cc, i64 %c2
  store i{co} %col_out, ptr %pcc
  %pacc = getelementptr {{i64, {t}}}, ptr %slots, i64 %col, i32 1
  %old = load {t}, ptr %pacc
  %sum = {add} {t} %old, %prod
  %new = select i1 %seen, {t} %sum, {t} %prod
  store {t} %new, ptr %pacc
  %fresh = xor i1 %seen, true
  %inc = zext i1 %fresh to i64
  br label %j_next
j_next:
  %c2n = add i64 %c2, %inc
  %z2n = or i1 %z2, false
  %jj1 = add i64 %jj, 1
  br label %j_head
"""
_DENSE_FINISH = """
finish:
  br label %compact_head
""" + _COMPACT.replace("{before}", "finish").replace("{value}", """\
  %xcol = {co_ext} %xcol_raw to i64
  %pxv = getelementptr {{i64, {t}}}, ptr %slots, i64 %xcol, i32 1
  %v = load {t}, ptr %pxv""") + """
finished:
  %row_end = phi i64 [%q, %compact_head]
  br label %row_done
"""

# Sparse: slots[col] = the column's output position (before start: not in this row yet); sums in place.
_SPARSE_ACCUMULATE = """
  %pm = getelementptr i64, ptr %slots, i64 %col
  %m = load i64, ptr %pm
  %seen = icmp sge i64 %m, %start
  br i1 %seen, label %accum, label %insert
accum:
  %pcv = getelementptr {t}, ptr %cv, i64 %m
  %old = load {t}, ptr %pcv
  %sum = {add} {t} %old, %prod
  store {t} %sum, ptr %pcv
  %sum_zero = {zero_test} {t} %sum, {zero}
  %za = or i1 %z2, %sum_zero
  br label %j_next
insert:
  store i64 %c2, ptr %pm
  %pcc = getelementptr i{co}, ptr %cc, i64 %c2
  store i{co} %col_out, ptr %pcc
  %pcv2 = getelementptr {t}, ptr %cv, i64 %c2
  store {t} %prod, ptr %pcv2
  %c2i = add i64 %c2, 1
  %prod_zero = {zero_test} {t} %prod, {zero}
  %zi = or i1 %z2, %prod_zero
  br label %j_next
j_next:
  %c2n = phi i64 [%c2, %accum], [%c2i, %insert]
  %z2n = phi i1 [%za, %accum], [%zi, %insert]
  %jj1 = add i64 %jj, 1
  br label %j_head
"""
# Sums that cancel to zero are rare: the row's flag z1 says one may have (a sum or product once zero); only
# then are the row's positions in slots forgotten (a compacted row would leave stale ones at or after the next
# row's start) and the row compacted.
_SPARSE_FINISH = """
finish:
  br i1 %z1, label %reset_head, label %finished
reset_head:
  %r = phi i64 [%start, %finish], [%r1, %reset_body]
  %rin = icmp slt i64 %r, %c1
  br i1 %rin, label %reset_body, label %compact_head
reset_body:
  %prc = getelementptr i{co}, ptr %cc, i64 %r
  %rcol_raw = load i{co}, ptr %prc
  %rcol = {co_ext} %rcol_raw to i64
  %prm = getelementptr i64, ptr %slots, i64 %rcol
  store i64 -1, ptr %prm
  %r1 = add i64 %r, 1
  br label %reset_head
""" + _COMPACT.replace("{before}", "reset_head").replace("{value}", """\
  %pxv = getelementptr {t}, ptr %cv, i64 %x
  %v = load {t}, ptr %pxv""") + """
finished:
  %row_end = phi i64 [%c1, %finish], [%q, %compact_head]
  br label %row_done
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
_PRODUCT_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _I, _P, _P, _P, _P)
_BACKWARD_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _P, _I, _I, _P, _P, _P, _P, _P)
_FLOPS_SIG = ctypes.CFUNCTYPE(None, _P, _P, _P, _I, _P)
_lock = threading.Lock()

# A chunk's output buffers are sized by its flops: at most this many entries per chunk (12-16 bytes each),
# so an upper bound far above the true entry count never reserves more than ~1 GB of address space.
CHUNK_FLOPS = 1 << 26

# Rows placed backwards go in blocks of about this many multiply-adds: a block is computed, then moved up
# over what its repeated columns left free, while still in cache (12-16 bytes an entry: fits L2).
BLOCK_FLOPS = 1 << 13

# The dense accumulator (see the module docstring) when the result has at most DENSE_COLUMNS columns (its
# slots stay in cache) and A's rows hold DENSE_ROW_ENTRIES entries on average (many partial sums per output
# entry, whose insert-or-add branch the sparse one mispredicts).
DENSE_COLUMNS = 1 << 14
DENSE_ROW_ENTRIES = 32


def _ext(bits: int) -> str:
    return "zext i32" if bits == 32 else "bitcast i64"


def _bits(arr: np.ndarray) -> int:
    return arr.dtype.itemsize * 8


@functools.cache
def _product(dense: bool, value: np.dtype, pa: int, ca: int, pb: int, cb: int, co: int, keep_zeros: bool = False,
             sort: bool = False):
    from splyce.native.codegen import compile_host_helpers

    t, mul, add = _VALUE[value]
    floating = t in ("double", "float")
    kind = "sorted" if sort else "dense" if dense else "sparse"
    name = f"splyce_spgemm_{kind}_{t}_{pa}_{ca}_{pb}_{cb}_{co}" + ("_keep" if keep_zeros else "")
    if sort:            # the sparsifier's result: every position kept, rows sorted (spgemm_sorted.py)
        from splyce.native import spgemm_sorted

        fields = dict(name=name, t=t, mul=mul, add=add, pa=pa, ca=ca, pb=pb, cb=cb, co=co, pa_ext=_ext(pa),
                      ca_ext=_ext(ca), pb_ext=_ext(pb), cb_ext=_ext(cb), co_ext=_ext(co),
                      co_narrow="trunc i64" if co == 32 else "bitcast i64")
        text = spgemm_sorted.rows_ir(fields) + _BACKWARD.format(**fields)
        fns = compile_host_helpers(text, {name: _PRODUCT_SIG, f"{name}_backward": _BACKWARD_SIG})
        return fns[name], fns[f"{name}_backward"]
    # keep_zeros: every position the product reaches is stored, zero sums too (the sparsifier's result): the
    # zero tests become constant false / the keep test constant true, and LLVM folds the compaction away
    nonzero = ("fcmp true" if floating else "icmp uge") if keep_zeros else ("fcmp une" if floating else "icmp ne")
    zero_test = ("fcmp false" if floating else "icmp ult") if keep_zeros else ("fcmp oeq" if floating else "icmp eq")
    body = (_DENSE_ACCUMULATE, _DENSE_FINISH) if dense else (_SPARSE_ACCUMULATE, _SPARSE_FINISH)
    text = (_ROWS.replace("{accumulate}", body[0]).replace("{finish}", body[1]) + _BACKWARD).format(name=name, t=t, mul=mul, add=add, pa=pa, ca=ca, pb=pb, cb=cb, co=co,
                           pa_ext=_ext(pa), ca_ext=_ext(ca), pb_ext=_ext(pb), cb_ext=_ext(cb), co_ext=_ext(co),
                           co_narrow="trunc i64" if co == 32 else "bitcast i64",
                           nonzero=nonzero, zero_test=zero_test, zero="0.0" if floating else "0")
    fns = compile_host_helpers(text, {name: _PRODUCT_SIG, f"{name}_backward": _BACKWARD_SIG})
    return fns[name], fns[f"{name}_backward"]


@functools.cache
def _flops(pa: int, ca: int, pb: int):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spgemm_flops_{pa}_{ca}_{pb}"
    text = _FLOPS.format(name=name, pa=pa, ca=ca, pb=pb, pa_ext=_ext(pa), ca_ext=_ext(ca), pb_ext=_ext(pb))
    return compile_host_helpers(text, {name: _FLOPS_SIG})[name]


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


def row_flops_prefix(a_indptr, a_indices, b_indptr, workers=None, threads: int = 1) -> np.ndarray:
    """``prefix[i]``: the multiply-adds of rows ``[0, i)`` of ``A @ B`` (int64, length rows + 1); with
    ``workers`` (a pool of ``threads``) each thread sums the rows of an equal share of A's entries."""
    m = len(a_indptr) - 1
    with _lock:
        fn = _flops(_bits(a_indptr), _bits(a_indices), _bits(b_indptr))
    width = a_indptr.itemsize

    def local(lo, hi):      # prefix of rows [lo, hi), from 0
        out = np.empty(hi - lo + 1, dtype=np.int64)
        fn(_address(a_indptr) + lo * width, _address(a_indices), _address(b_indptr), hi - lo, _address(out))
        return out

    ranges = row_chunks(a_indptr, threads) if workers is not None else [(0, m)]
    if len(ranges) == 1:
        return local(0, m)
    parts = run_each(lambda r: local(*r), ranges, workers)
    prefix = np.empty(m + 1, dtype=np.int64)
    prefix[0] = total = 0
    for (lo, hi), part in zip(ranges, parts):
        np.add(part[1:], total, out=prefix[lo + 1: hi + 1])
        total += int(part[-1])
    return prefix


def chunks(prefix: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Row ranges with about equal flops (``prefix``: :func:`row_flops_prefix`), at least ``threads`` of them
    when there are rows, each at most CHUNK_FLOPS multiply-adds (or a single row). A cut falls on the row
    nearest its flops target, so one long row (a power-law hub) never drags a long run of rows with it."""
    m = len(prefix) - 1
    total = int(prefix[-1])
    pieces = max(threads, -(-total // CHUNK_FLOPS), 1)
    if pieces == 1 or m <= 1:
        return [(0, m)]
    targets = total * np.arange(1, pieces, dtype=np.int64) // pieces     # int64 as prefix: not converted
    after = np.searchsorted(prefix, targets, side="left").clip(1, m)
    nearer = np.where(targets - prefix[after - 1] < prefix[after] - targets, after - 1, after)
    bounds = sorted(set([0, *nearer.tolist(), m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


class Product:
    """The CSR parts of ``A @ B`` and the work it took (``work``: rows + flops, the counter tests use)."""

    def __init__(self, data, indices, indptr, work):
        self.data, self.indices, self.indptr, self.work = data, indices, indptr, work


def _slots(n: int, dense: bool, sort: bool = False) -> np.ndarray:
    """A thread's accumulator (see the kernels): nothing shared between threads, never cleared."""
    if sort:
        from splyce.native import spgemm_sorted

        return spgemm_sorted.scratch(n)
    slots = np.empty((n, 2) if dense else n, dtype=np.int64)
    (slots[:, 0] if dense else slots)[...] = -1
    return slots


def _blocks(prefix: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Bounds of blocks of rows [lo, hi) of about BLOCK_FLOPS multiply-adds (a longer row alone)."""
    targets = np.arange(int(prefix[lo]), int(prefix[hi]), BLOCK_FLOPS, dtype=np.int64)
    inner = np.searchsorted(prefix[lo: hi + 1], targets, side="right") - 1 + lo
    return np.unique(np.concatenate((inner.clip(lo, hi), [lo, hi])))


def _meeting_halves(kernel, backward, a, b, n, dtype, col_dtype, dense, prefix, ranges, workers, sort) -> Product:
    """Two row ranges on two threads writing straight into one pair of result buffers (sized by all the
    flops, allocated once, each page first touched by the thread that fills it): the first range's rows
    go last row first (``_BACKWARD``) and end at position F (the first range's flops, an upper bound of its
    entries), the second range's go forwards from F. The result is the contiguous run between them: nothing
    copied or moved, only ``indptr`` shifted (by both threads)."""
    av, ac, ap = a
    bv, bc, bp = b
    (lo0, hi0), (lo1, hi1) = ranges
    meet, flops = int(prefix[hi0]), int(prefix[-1])
    cols = np.empty(flops, dtype=col_dtype)
    vals = np.empty(flops, dtype=dtype)
    operands = (_address(ap), _address(ac), _address(av), _address(bp), _address(bc), _address(bv))

    def run(index):
        lo, hi = ranges[index]
        ends = np.empty(hi - lo, dtype=np.int64)
        slots = _slots(n, dense, sort)
        if index == 1:
            return ends, kernel(*operands, lo, hi, meet, _address(ends), _address(cols), _address(vals),
                                _address(slots))
        bounds = _blocks(prefix, lo, hi)
        return ends, backward(*operands, lo, _address(bounds), len(bounds) - 1, meet, _address(ends),
                              _address(cols), _address(vals), _address(slots), _address(prefix))

    (ends0, first), (ends1, stop) = run_each(run, (0, 1), workers)
    nnz = stop - first
    index_dtype = np.int32 if nnz < 2**31 and n <= 2**31 else np.int64
    indptr = np.empty(len(ap), dtype=index_dtype)
    indptr[0] = 0

    def shift(index):
        lo, hi = ranges[index]
        np.subtract((ends0, ends1)[index], first, out=indptr[lo + 1: hi + 1], casting="unsafe")

    run_each(shift, (0, 1), workers)
    cols, vals = cols[first: stop], vals[first: stop]
    return Product(vals, cols.astype(index_dtype, copy=False), indptr, len(ap) - 1 + flops)


def _copy_tasks(counts, offsets, threads: int):
    """The copies of chunks 1.. (``counts[c]`` entries each, going to ``offsets[c]``) as ``threads`` pieces of
    about equal entries: lists of (chunk, source start, destination start, entries)."""
    first, nnz = counts[0], offsets[-1] + counts[-1]
    cuts = [first + (nnz - first) * t // threads for t in range(threads + 1)]
    tasks = []
    for lo, hi in zip(cuts, cuts[1:]):
        piece = []
        for c in range(1, len(counts)):
            a, b = max(lo, offsets[c]), min(hi, offsets[c] + counts[c])
            if b > a:
                piece.append((c, a - offsets[c], a, b - a))
        tasks.append(piece)
    return tasks


def spgemm(a, b, shape_b_cols: int, dtype, threads: int = 1, keep_zeros: bool = False, sort: bool = False) -> Product:
    """``A @ B`` for CSR parts ``a = (data, indices, indptr)`` and ``b`` (index arrays int32 or int64, any
    widths; values of ``dtype``, C-contiguous, already validated: in-range columns, monotone positions).
    The result's indices are int32 when the column count and entry count fit, else int64. ``keep_zeros``:
    store every position reached, zero sums included (the sparsifier's rule) instead of scipy's. ``sort``
    (with ``keep_zeros``): the sparsifier's result exactly: columns ascending in each row, each sum started
    from +0.0 (spgemm_sorted.py)."""
    if sort and not keep_zeros:
        raise ValueError("spgemm: sort=True is the sparsifier's result and needs keep_zeros=True")
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    m, n = len(ap) - 1, shape_b_cols
    # (split passes over fewer than ~2 * MIN_CHUNK entries, products of fewer than ~8 * MIN_CHUNK flops: ~2 ms
    # of one thread, cost more than they save; fem2d-3k, ba-4k were 1.5x slower on two threads)
    split = threads > 1 and m > 1
    prefix = row_flops_prefix(ap, ac, bp, pool(threads), threads) if split and int(ap[-1]) >= 2 * ir_text.MIN_CHUNK \
        else row_flops_prefix(ap, ac, bp)
    flops = int(prefix[-1])
    workers = pool(threads) if split and flops >= 8 * ir_text.MIN_CHUNK else None
    threads = threads if workers is not None else 1
    col_dtype = np.dtype(np.int32) if n <= 2**31 else np.dtype(np.int64)
    dense = not sort and n <= DENSE_COLUMNS and int(ap[-1]) - int(ap[0]) >= DENSE_ROW_ENTRIES * m > 0
    with _lock:
        kernel, backward = _product(dense, dtype, _bits(ap), _bits(ac), _bits(bp), _bits(bc),
                                    col_dtype.itemsize * 8, keep_zeros, sort)
    ranges = chunks(prefix, threads)
    if workers is not None and len(ranges) == 2:
        return _meeting_halves(kernel, backward, a, b, n, dtype, col_dtype, dense, prefix, ranges, workers, sort)
    # The first chunk writes straight into the result's buffers, sized for every chunk's flops when that
    # bound is small enough to reserve (pages never written are never touched); the others write into
    # their own, copied after it by all threads at once.
    first_size = flops if flops <= CHUNK_FLOPS else int(prefix[ranges[0][1]])

    def run(index):
        lo, hi = ranges[index]
        size = first_size if index == 0 else int(prefix[hi] - prefix[lo])
        cols = np.empty(size, dtype=col_dtype)
        vals = np.empty(size, dtype=dtype)
        ends = np.empty(hi - lo, dtype=np.int64)
        slots = _slots(n, dense, sort)
        count = kernel(_address(ap), _address(ac), _address(av), _address(bp), _address(bc),
                       _address(bv), lo, hi, 0, _address(ends), _address(cols), _address(vals), _address(slots))
        return cols, vals, ends, int(count)

    if workers is not None and len(ranges) > 1:
        parts = list(workers.map(run, range(len(ranges))))
    else:
        parts = [run(c) for c in range(len(ranges))]
    index_dtype = np.int32
    if len(parts) == 1:                     # one chunk: its buffers are the result's
        cols, vals, ends, nnz = parts[0]
        if nnz >= 2**31 or n > 2**31:
            index_dtype = np.int64
        indptr = np.empty(m + 1, dtype=index_dtype)
        indptr[0] = 0
        indptr[1:] = ends
        cols.resize(nnz, refcheck=False)    # shrink in place (realloc): no copy of the entries
        vals.resize(nnz, refcheck=False)
        return Product(vals, cols.astype(index_dtype, copy=False), indptr, m + flops)
    counts = [p[3] for p in parts]
    nnz = sum(counts)
    offsets = np.cumsum([0] + counts[:-1]).tolist()
    index_dtype = np.int32 if nnz < 2**31 and n <= 2**31 else np.int64
    cols, vals, _, _ = parts[0]
    if nnz > len(cols):                                 # the first chunk's buffers cannot hold them all
        cols, vals = np.empty(nnz, dtype=col_dtype), np.empty(nnz, dtype=dtype)
        cols[: counts[0]], vals[: counts[0]] = parts[0][0][: counts[0]], parts[0][1][: counts[0]]
    indptr = np.empty(m + 1, dtype=index_dtype)
    indptr[0] = 0
    pieces = max(1, min(threads, len(parts)))

    def finish(t, copies):
        for c, src, dst, length in copies:
            for out, part in ((cols, parts[c][0]), (vals, parts[c][1])):
                ctypes.memmove(_address(out) + dst * out.itemsize, _address(part) + src * part.itemsize,
                               length * out.itemsize)
        for c in range(t, len(parts), pieces):          # row ends made global, straight into indptr
            lo, hi = ranges[c]
            np.add(parts[c][2], offsets[c], out=indptr[lo + 1: hi + 1], casting="unsafe")

    tasks = _copy_tasks(counts, offsets, pieces)
    if workers is not None and pieces > 1:
        list(workers.map(finish, range(pieces), tasks))
    else:
        for t in range(pieces):
            finish(t, tasks[t])
    cols.resize(nnz, refcheck=False)        # shrink in place (realloc): no copy of the entries
    vals.resize(nnz, refcheck=False)
    return Product(vals, cols.astype(index_dtype, copy=False), indptr, m + flops)
