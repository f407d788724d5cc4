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
come in order of first appearance, and zero sums are dropped at the row's end, as scipy does (NaN kept): the
sparse kernel flags a row where a sum or product was zero and only then compacts it; the dense one compacts
while gathering. scipy's csr_matmat writes a row in the reverse order (its linked list of columns starts at
the last one met) and does not sort afterwards: ``scipy_order=True`` (the variant patch_scipy serves) reverses
each row in place at its end, giving scipy's buffers byte for byte (about 5 % more time: road-700's A @ A).

A product whose rows may come in any order (``sort=None``: the jit's ``out_format="sparse"`` result, and the
drop-in's, whose zero sums the flags kernel then drops) takes, per call, spgemm_sorted's flags kernel instead
(rows sorted: a valid unordered row) where a sample of its rows says each entry gets many terms and B's columns
are not runs (``unordered_kernel``, ``FLAGS_COMPRESSION``).

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
from splyce.native import ir_text, spgemm_ir, spgemm_sample, spgemm_sorted
from splyce.native.ir_text import index_bits as _bits, pool, row_chunks, run_each

_P = ctypes.c_void_p
_I = ctypes.c_int64
_PRODUCT_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _I, _P, _P, _P, _P)
_BACKWARD_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _P, _I, _I, _P, _P, _P, _P, _P)
_FLOPS_SIG = ctypes.CFUNCTYPE(None, _P, _P, _P, _I, _P)
_SAMPLE_SIG = ctypes.CFUNCTYPE(None, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, ctypes.c_double, _P, _P)
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

# A product whose rows may come in any order (``sort=None``: the jit's ``out_format="sparse"`` result) takes
# spgemm_sorted's flags kernel, rows sorted, where its entries get many terms: a compression (multiply-adds
# per stored entry, estimated by :func:`compression`) of at least FLAGS_COMPRESSION, B's columns not mostly
# adjacent (spgemm_sorted.ADJACENT_SHARE, counted on at most ADJACENT_SAMPLE pairs) and its rows averaging
# more than spgemm_sorted.SHORT_ROW_FLOPS terms (else the map kernel would sort them: this sparse accumulator
# plus a sort, never faster). There the sparse accumulator's insert-or-add branch mispredicts (an entry's
# terms come in no pattern) where the flags kernel adds branch-free into a dense row; with about one term an
# entry (the BA graphs) or runs of adjacent columns (banded, element blocks: the branch is predicted) the
# sparse accumulator wins. Kernels alone in docs/guide/benchmarks.md ("SpGEMM").
FLAGS_COMPRESSION = 2.0
ADJACENT_SAMPLE = 1024
# compression()'s sample: rows at SAMPLE_ROWS evenly spaced multiply-adds (a row by its share of the work),
# each of at most flops / SAMPLE_SHARE (a hub row of a power-law graph is left out): at most SAMPLE_ROWS /
# SAMPLE_SHARE of the product's multiply-adds, 0.01-3 % on the corpus. Products of fewer than
# SAMPLE_MIN_FLOPS multiply-adds keep this module's kernel unasked: the look's fixed cost (~6-8 us, a native
# call) would be a share of theirs.
SAMPLE_ROWS = 32
SAMPLE_SHARE = 256
SAMPLE_MIN_FLOPS = 1 << 17


def _index_dtype(nnz: int, n: int):
    """The result's index dtype: int32 when its entry count and column count fit, else int64."""
    return np.int32 if nnz < 2**31 and n <= 2**31 else np.int64


@functools.cache
def _product(dense: bool, value: np.dtype, pa: int, ca: int, pb: int, cb: int, co: int, keep_zeros: bool = False,
             sort: str | None = None, scipy_order: bool = False):
    from splyce.native.codegen import compile_host_helpers

    t, mul, add, _ = ir_text.VALUE[value]
    kind = f"sorted_{sort}" if sort else "dense" if dense else "sparse"
    name = f"splyce_spgemm_{kind}_{t}_{pa}_{ca}_{pb}_{cb}_{co}" + ("_keep" if keep_zeros else "") \
        + ("_scipy" if scipy_order else "")
    indices = spgemm_ir.index_fields(pa, ca, pb, cb, co)
    if sort:            # the sparsifier's result: every position kept, rows sorted (spgemm_sorted.py)
        text = spgemm_sorted.rows_ir(dict(name=name, t=t, mul=mul, add=add, **indices), sort, keep_zeros=keep_zeros) \
            + spgemm_ir.backward_ir(name, t, indices)
    else:
        text = spgemm_ir.product_ir(name, dense, t, mul, add, keep_zeros, indices, scipy_order)
    fns = compile_host_helpers(text, {name: _PRODUCT_SIG, f"{name}_backward": _BACKWARD_SIG})
    return fns[name], fns[f"{name}_backward"]


@functools.cache
def _flops(pa: int, ca: int, pb: int):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spgemm_flops_{pa}_{ca}_{pb}"
    return compile_host_helpers(spgemm_ir.flops_ir(name, pa, ca, pb), {name: _FLOPS_SIG})[name]


@functools.cache
def _sample(pa: int, ca: int, pb: int, cb: int):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spgemm_sample_{pa}_{ca}_{pb}_{cb}"
    return compile_host_helpers(spgemm_sample.sample_ir(name, pa, ca, pb, cb), {name: _SAMPLE_SIG})[name]


supported = ir_text.supported


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


def compression(ap, ac, bp, bc, n: int, prefix: np.ndarray) -> float | None:
    """An estimate of ``A @ B``'s multiply-adds per stored entry (1: each entry one term) from a sample of its
    rows; None where the flags kernel is out of the question (fewer than SAMPLE_MIN_FLOPS multiply-adds, rows
    of at most spgemm_sorted.SHORT_ROW_FLOPS on average, or at least spgemm_sorted.ADJACENT_SHARE of B's
    neighbouring columns adjacent, counted on at most ADJACENT_SAMPLE evenly spaced pairs) or where fewer than
    SAMPLE_ROWS / 2 of the sampled rows have at most flops / SAMPLE_SHARE. One native call (spgemm_sample.py):
    rows are taken at SAMPLE_ROWS evenly spaced multiply-adds (``prefix``: :func:`row_flops_prefix`), a row
    thus with probability proportional to its flops ``f``, and the mean of ``c / f`` over them (``c``: the
    row's distinct columns) estimates nnz(C) / flops without bias; its inverse is the answer."""
    flops, m = int(prefix[-1]), len(ap) - 1
    if flops < SAMPLE_MIN_FLOPS or flops <= spgemm_sorted.SHORT_ROW_FLOPS * m:
        return None
    pairs = len(bc) - 1
    out = np.empty(4, dtype=np.int64)
    mark = np.zeros(n + 1, dtype=np.uint8)                            # one tag byte per column (lazy zero pages)
    with _lock:
        fn = _sample(_bits(ap), _bits(ac), _bits(bp), _bits(bc))
    fn(_address(ap), _address(ac), _address(bp), _address(bc), _address(prefix), m, SAMPLE_ROWS,
       flops // (2 * SAMPLE_ROWS), flops // SAMPLE_SHARE, max(pairs, 0), max(1, pairs // ADJACENT_SAMPLE),
       spgemm_sorted.ADJACENT_SHARE, _address(mark), _address(out))
    ratios, taken = float(out[:1].view(np.float64)[0]), int(out[1])
    return taken / ratios if taken >= SAMPLE_ROWS // 2 and ratios > 0.0 else None


def unordered_kernel(ap, ac, bp, bc, n: int, prefix: np.ndarray) -> str | bool:
    """The kernel of a product whose rows may come in any order (see FLAGS_COMPRESSION): ``"flags"``
    (spgemm_sorted's, rows sorted) where :func:`compression` gives at least FLAGS_COMPRESSION, else False
    (this module's kernel, rows in order of first appearance)."""
    estimate = compression(ap, ac, bp, bc, n, prefix)
    return "flags" if estimate is not None and estimate >= FLAGS_COMPRESSION else False


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
    """The CSR parts of ``A @ B``, the work it took (``work``: rows + flops, the counter tests use), whether
    each row's columns are ascending (``sorted``) and the kernel that ran (``kernel``: "sparse", "dense" or
    the sorted kernel's kind)."""

    def __init__(self, data, indices, indptr, work, kernel="sparse"):
        self.data, self.indices, self.indptr, self.work = data, indices, indptr, work
        self.kernel = kernel
        self.sorted = kernel not in ("sparse", "dense")


def _slots(n: int, dense: bool, sort: str | None = None) -> np.ndarray:
    """A thread's accumulator (see the kernels): nothing shared between threads, never cleared."""
    if sort:
        return spgemm_sorted.scratch(n, sort)
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
    index_dtype = _index_dtype(nnz, n)
    indptr = np.empty(len(ap), dtype=index_dtype)
    indptr[0] = 0

    def shift(index):
        lo, hi = ranges[index]
        np.subtract((ends0, ends1)[index], first, out=indptr[lo + 1: hi + 1], casting="unsafe")

    run_each(shift, (0, 1), workers)
    cols, vals = cols[first: stop], vals[first: stop]
    return Product(vals, cols.astype(index_dtype, copy=False), indptr, len(ap) - 1 + flops,
                   sort or ("dense" if dense else "sparse"))


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


def spgemm(a, b, shape_b_cols: int, dtype, threads: int = 1, keep_zeros: bool = False,
           sort: bool | None = False, scipy_order: bool = False) -> Product:
    """``A @ B`` for CSR parts ``a = (data, indices, indptr)`` and ``b`` (index arrays int32 or int64, any
    widths; values of ``dtype``, C-contiguous, already validated: in-range columns, monotone positions).
    The result's indices are int32 when the column count and entry count fit, else int64. ``keep_zeros``:
    store every position reached, zero sums included (the sparsifier's rule) instead of scipy's. ``sort``
    (with ``keep_zeros``): the sparsifier's result exactly: columns ascending in each row, each sum started
    from +0.0 (spgemm_sorted.py); None: the same values as ``sort=False``, each row's columns in any order, the
    kernel chosen per call (:func:`unordered_kernel`; ``Product.sorted`` says which order came; without
    ``keep_zeros`` the flags kernel drops zero sums as scipy does, the drop-in's product). ``scipy_order``
    (with ``sort=False``): each row's columns in the order scipy's csr_matmat writes them, the reverse of
    first appearance (the same kernel, each row reversed at its end): scipy's buffers exactly."""
    if sort and not keep_zeros:
        raise ValueError(f"spgemm: sort={sort} is the sparsifier's result and needs keep_zeros=True")
    if scipy_order and sort is not False:
        raise ValueError(f"spgemm: scipy_order=True is one order and needs sort=False, got sort={sort}")
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
    if sort is None:                        # rows in any order: the kernel expected faster
        sort = unordered_kernel(ap, ac, bp, bc, n, prefix)
    elif sort:                              # which sorted kernel: by B's columns (spgemm_sorted.kind_for)
        sort = spgemm_sorted.kind_for(bc, flops, m)
    dense = not sort and n <= DENSE_COLUMNS and int(ap[-1]) - int(ap[0]) >= DENSE_ROW_ENTRIES * m > 0
    if scipy_order and not dense:
        # where the rows-in-any-order rule takes the flags kernel (many terms an entry, B's columns not runs: the
        # sparse accumulator's branch mispredicts), scipy's order takes the dense one, also branch-free, whatever
        # the column count: R-MAT s13 695 vs 1,686 ms sparse (flags, sorted: 904), blockdiag-1500 451 vs 740,
        # fem2d-250k 362 vs 439 (fastest of 5-7, 2026-12-07); ba-100k (about one term an entry) stays sparse
        dense = unordered_kernel(ap, ac, bp, bc, n, prefix) == "flags"
    label = sort or ("dense" if dense else "sparse")
    with _lock:
        kernel, backward = _product(dense, dtype, _bits(ap), _bits(ac), _bits(bp), _bits(bc),
                                    col_dtype.itemsize * 8, keep_zeros, sort, scipy_order)
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
    if len(parts) == 1:                     # one chunk: its buffers are the result's
        cols, vals, ends, nnz = parts[0]
        index_dtype = _index_dtype(nnz, n)
        indptr = np.empty(m + 1, dtype=index_dtype)
        indptr[0] = 0
        indptr[1:] = ends
        cols.resize(nnz, refcheck=False)    # shrink in place (realloc): no copy of the entries
        vals.resize(nnz, refcheck=False)
        return Product(vals, cols.astype(index_dtype, copy=False), indptr, m + flops, label)
    counts = [p[3] for p in parts]
    nnz = sum(counts)
    offsets = np.cumsum([0] + counts[:-1]).tolist()
    index_dtype = _index_dtype(nnz, n)
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
    return Product(vals, cols.astype(index_dtype, copy=False), indptr, m + flops, label)
