"""One engine for the sparse products: SpGEMM ``a @ b`` into a sparse result, masked SpGEMM ``(l @ l) * l``,
the triangle sum ``((l @ l.T) * l).sum()`` and SDDMM ``m * (x @ y.T)`` inside ``@splyce.jit`` run the native
kernel library (runtime/library.py), with the compiled MLIR kernel's results bit for bit: the same stored
positions (explicit zeros included), the same values (+0.0 where the sparsifier has +0.0); columns ascending
where the result's format is an explicit ``splyce.CSR``, else (``out_format="sparse"``) each row's columns in
any order (planner/unordered.py, ``unordered_product_results``), compared after sorting."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel

from test_one_engine import _flags_true, _same, _same_entries


def _csr(rng, m, n, density, dtype=np.float64, special=True, index=np.int32, empty_rows=0.0, long_rows=0):
    """A random CSR with explicit zeros, -0.0, NaN and +-Inf among its values (floats), some empty rows and
    ``long_rows`` rows of up to ``n`` entries."""
    a = sps.random_array((m, n), density=density, format="lil", rng=rng, dtype=np.float64)
    for r in rng.choice(m, size=min(m, long_rows), replace=False):
        cols = rng.choice(n, size=int(rng.integers(n // 2, n + 1)), replace=False)
        a[r, cols] = rng.standard_normal(len(cols))
    a = sps.csr_array(a)
    if empty_rows:
        coo, keep = a.tocoo(), rng.random(m) >= empty_rows
        at = keep[coo.row]
        a = sps.csr_array((coo.data[at], (coo.row[at], coo.col[at])), shape=a.shape)
        a.sort_indices()
    if np.issubdtype(dtype, np.integer):
        a.data = np.round(a.data * 4)
    elif special and a.nnz:
        k = max(1, a.nnz // 12)
        at = rng.choice(a.nnz, size=min(a.nnz, 4 * k), replace=False)
        a.data[at[:k]] = 0.0
        a.data[at[k:2 * k]] = -0.0
        a.data[at[2 * k:3 * k]] = np.nan
        a.data[at[3 * k:]] = rng.choice([np.inf, -np.inf], size=len(at[3 * k:]))
    a = sps.csr_array((a.data.astype(dtype), a.indices.astype(index), a.indptr.astype(index)), shape=a.shape)
    a.has_sorted_indices = True
    return a


def _both(body, args, out_format=None, threads=1):
    """The jitted ``body`` on the library route and on the MLIR kernel (``library=False``)."""
    fast = splyce.jit(body, out_format=out_format, threads=threads)
    mlir = splyce.jit(body, out_format=out_format, library=False, threads=threads)
    return fast, mlir


def _sorted_csr(t):
    """An explicit ``splyce.CSR`` of ``t``'s index widths: the sorted product, the format ``out_format="sparse"``
    resolves to before the planner leaves a result's rows unordered."""
    return splyce.CSR.with_widths(t.format.pos_width, t.format.crd_width)


def _both_sorted(t, threads=1):
    """``a @ b`` jitted with an explicit CSR result (``_sorted_csr(t)``): the library's sorted kernels, and the
    MLIR kernel."""
    return _both(lambda a, b: a @ b, None, _sorted_csr(t), threads)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rows", ["unordered", "sorted"])
def test_spgemm_rows_of_every_length_bit_for_bit(dtype, seed, rows):
    """Rows of 0, <= 16 (one-vector ranks) and longer (bitmap) entries, special values, one and two
    threads; the rows unordered (``out_format="sparse"``: the unsorted kernel keeping every position) and
    sorted (an explicit CSR: the sorted kernels)."""
    rng = np.random.default_rng(seed)
    n = (40, 150, 700)[seed]
    a = splyce.asarray(_csr(rng, n, n, 6 / n, dtype, empty_rows=0.1, long_rows=3))
    b = splyce.asarray(_csr(rng, n, n, 10 / n, dtype, long_rows=2))
    for threads in (1, 2):
        out_format = "sparse" if rows == "unordered" else _sorted_csr(a)
        fast, mlir = _both(lambda a, b: a @ b, (a, b), out_format, threads)
        got = fast(a, b)
        if rows == "unordered":
            _same_entries(got, mlir(a, b))
            _flags_true(got)
            np.testing.assert_array_equal(got.toarray(), mlir(a, b).toarray())
        else:
            _same(got, mlir(a, b))
            assert got.has_sorted_indices
        assert isinstance(fast.kernel_for(a, b)[0], LibraryKernel)
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


@pytest.mark.parametrize("rows", ["unordered", "sorted"])
@pytest.mark.parametrize("dense", [False, True])
def test_spgemm_negative_zero_products_sum_from_positive_zero(rows, dense, monkeypatch):
    """A product of -0.0 is stored as +0.0: the sparsifier sums each entry into a zero-filled workspace (the
    unordered rows' kernel too, with either accumulator: the first term added to +0.0)."""
    from splyce.native import spgemm

    if dense:
        monkeypatch.setattr(spgemm, "DENSE_ROW_ENTRIES", 1)
    a = sps.csr_array((np.array([-1.0, 2.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    b = sps.csr_array((np.array([0.0, -0.0]), np.array([0, 1]), np.array([0, 2, 2])), shape=(2, 2))
    A, B = splyce.asarray(a), splyce.asarray(b)
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse" if rows == "unordered" else _sorted_csr(A))
    got = fast(A, B)
    (_same_entries if rows == "unordered" else _same)(got, mlir(A, B))
    assert not np.signbit(got.data).any() and got.nnz == 2


def test_spgemm_64_bit_indices_and_rectangles():
    rng = np.random.default_rng(7)
    a = splyce.asarray(_csr(rng, 90, 60, 0.08, index=np.int64, long_rows=1))
    b = splyce.asarray(_csr(rng, 60, 130, 0.1, index=np.int64))
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse")
    got = fast(a, b)
    _same_entries(got, mlir(a, b))
    assert got.indices.dtype == np.int64 and isinstance(fast.kernel_for(a, b)[0], LibraryKernel)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_spgemm_rows_spread_over_many_columns(index):
    """Rows of more than 16 entries spread over 40,000 columns (the bitmap's two levels; the rows of
    test_spgemm_rows_of_every_length span few words, walked one by one), and rows of 9-16 entries (int64
    columns: vector ranks over the row)."""
    rng = np.random.default_rng(9)
    a = splyce.asarray(_csr(rng, 80, 60, 0.03, index=index))
    b = _csr(rng, 60, 40_000, 1.5e-4, index=index)
    near = _csr(rng, 60, 200, 0.03, index=index)         # clustered in the first 200 columns
    b = sps.csr_array(sps.hstack([near, b[:, 200:]], format="csr").astype(b.dtype))
    b = splyce.asarray(sps.csr_array((b.data, b.indices.astype(index), b.indptr.astype(index)), shape=b.shape))
    fast, mlir = _both_sorted(a)
    got = fast(a, b)
    _same(got, mlir(a, b))
    lengths = np.diff(got.indptr)
    assert lengths.max() > 16 and ((lengths > 8) & (lengths <= 16)).any()
    assert isinstance(fast.kernel_for(a, b)[0], LibraryKernel)


def _designed_rows(n: int, w: int) -> list[np.ndarray]:
    """Column sets at each boundary of native/spgemm_sorted.py's rule for ``w``-lane columns (16 int32 / 8
    int64): rows of w - 1, w, w + 1 (ranked in one vector / over the row), RANK_MAX and RANK_MAX + 1 (the first
    read from the flags) entries; blocks of 64 columns holding w and w + 1 columns (one vector of a block's
    compressed columns / all of them), a full block, the matrix's last block (n is not a multiple of 64) and
    its last column, one column in each block, and an empty row."""
    from splyce.native.spgemm_sorted import RANK_MAX

    rng = np.random.default_rng(3)
    pick = lambda size, lo=0, hi=n: np.sort(rng.choice(np.arange(lo, hi), size=size, replace=False))
    rows = [pick(w - 1), pick(w), pick(w + 1), pick(RANK_MAX), pick(RANK_MAX + 1)]
    rows.append(np.concatenate([pick(w, 64, 128), pick(w + 1, 192, 256)]))
    rows.append(np.concatenate([[0], np.arange(128, 192), pick(20, 64 * (n // 64), n - 1), [n - 1]]))
    rows.append(np.arange(5, n, 64))
    rows.append(np.array([], dtype=np.int64))
    return rows


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_spgemm_sorted_rule_boundaries_bit_for_bit(dtype):
    """Rows of ``B`` designed at each boundary of the sorted kernel's rule (threshold - 1 / threshold), alone and
    summed with one another (A's rows select one or two of them, overlapping), against the MLIR kernel."""
    n = 64 * 5 + 37
    rows = _designed_rows(n, 16)
    rng = np.random.default_rng(4)
    values = [rng.standard_normal(len(r)) for r in rows]
    if np.issubdtype(dtype, np.integer):
        values = [np.round(v * 4) for v in values]
    else:
        values[5][:3] = [np.nan, -0.0, np.inf]
    b = sps.csr_array((np.concatenate(values).astype(dtype), np.concatenate(rows).astype(np.int32),
                       np.cumsum([0] + [len(r) for r in rows]).astype(np.int32)), shape=(len(rows), n))
    k = len(rows)
    pairs = [(i,) for i in range(k)] + [(0, 1), (3, 4), (5, 6), (6, 7), (1, 8), (2, 5)]
    a = sps.csr_array((np.concatenate([[2, -1][: len(p)] for p in pairs]).astype(dtype),
                       np.concatenate(pairs).astype(np.int32),
                       np.cumsum([0] + [len(p) for p in pairs]).astype(np.int32)), shape=(len(pairs), k))
    A, B = splyce.asarray(a), splyce.asarray(b)
    fast, mlir = _both_sorted(A)
    got = fast(A, B)
    _same(got, mlir(A, B))
    assert isinstance(fast.kernel_for(A, B)[0], LibraryKernel)
    lengths = np.diff(got.indptr)
    assert {15, 16, 17}.issubset(set(lengths.tolist())) and lengths.max() > 64 and 0 in lengths


@pytest.mark.parametrize("kind", ["flags", "map"])
def test_spgemm_sorted_64_bit_result_columns(kind):
    """Each sorted kernel writing int64 columns (a result of more than 2**31 columns: 8-lane ranks, rows of 9-16
    entries ranked over the row, a block's columns 8 at a time), run on small rows here since such a result
    cannot be built in a test: the same rows, values and positions as the int32-column kernel's."""
    from splyce.native import spgemm
    from splyce.native.array_objects import address
    from splyce.native.spgemm_sorted import layout, scratch
    from splyce.native.spgemm_sorted_map import scratch as map_scratch

    n = 64 * 5 + 37
    rows = _designed_rows(n, 8)
    rng = np.random.default_rng(5)
    b = sps.csr_array((rng.standard_normal(sum(len(r) for r in rows)), np.concatenate(rows),
                       np.cumsum([0] + [len(r) for r in rows])), shape=(len(rows), n))
    k = len(rows)
    pairs = [(i,) for i in range(k)] + [(0, 1), (2, 3), (3, 4), (5, 6), (6, 7)]
    a = sps.csr_array((np.ones(sum(len(p) for p in pairs)), np.concatenate(pairs), np.cumsum([0] + [len(p) for p in pairs])),
                      shape=(len(pairs), k))
    out = {}
    for co in (32, 64):
        kernel, _ = spgemm._product(False, np.dtype(np.float64), 64, 64, 64, 64, co, True, kind)
        flops = int(spgemm.row_flops_prefix(a.indptr, a.indices, b.indptr)[-1])
        cols, vals = np.empty(flops, dtype=f"int{co}"), np.empty(flops)
        ends, buf = np.empty(a.shape[0], dtype=np.int64), scratch(n, kind)
        count = kernel(*(address(x) for x in (a.indptr, a.indices, a.data, b.indptr, b.indices, b.data)), 0,
                       a.shape[0], 0, address(ends), address(cols), address(vals), address(buf))
        out[co] = (cols[:count].astype(np.int64), vals[:count], ends)
        if kind == "flags":                              # sums and flags left zero for the next row / call
            dense, _, flags, _, end = layout(n)
            assert not buf[dense: dense + n].any() and not buf[flags: end].any()
        else:                                            # the bitmap words left zero
            words = n // 64 + 2 + n // 4096 + 2
            assert len(buf) == len(map_scratch(n)) and not buf[-words:].any()
    ref = (a @ b).tocsr()
    ref.sort_indices()
    for co in (32, 64):
        cols, vals, ends = out[co]
        assert np.array_equal(ends, ref.indptr[1:]) and np.array_equal(cols, ref.indices)
        assert np.array_equal(vals.view(np.uint8), out[32][1].view(np.uint8))
    assert np.allclose(out[64][1], ref.data)


def test_spgemm_sorted_kernel_choice_at_the_adjacent_share():
    """kind_for: the map kernel from ADJACENT_SHARE of B's neighbouring columns adjacent, the flags below (every
    pair counted when there are at most SAMPLE of them)."""
    from splyce.native.spgemm_sorted import ADJACENT_SHARE, kind_for

    pairs = 200
    at = int(ADJACENT_SHARE * pairs)
    for adjacent, kind in ((at - 1, "flags"), (at, "map")):
        steps = np.array([1] * adjacent + [3] * (pairs - adjacent))
        assert kind_for(np.concatenate([[0], np.cumsum(steps)]).astype(np.int32)) == kind
    assert kind_for(np.arange(10_000_000, dtype=np.int64)) == "map"          # sampled
    assert kind_for(np.arange(0, 30_000_000, 3, dtype=np.int64)) == "flags"
    assert kind_for(np.array([5], dtype=np.int32)) == "flags"


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("adjacent", [0.49, 0.5, 0.95])
def test_spgemm_both_sorted_kernels_bit_for_bit(dtype, adjacent):
    """B with a share of adjacent neighbouring columns at the choice's boundary (0.49: the flags, 0.5: the map)
    and a banded-like B (the map), special values, one and two threads, against the MLIR kernel."""
    from splyce.native.spgemm_sorted import kind_for

    rng = np.random.default_rng(int(adjacent * 100))
    n, m, per_row = 300, 120, 12
    pairs = m * per_row - 1                         # every pair counted (fewer than SAMPLE)
    inner = np.where(np.arange(m * (per_row - 1)) < round(adjacent * pairs), 1, 2)   # steps within rows
    rng.shuffle(inner)
    cols, end = [], -5
    for r, steps in enumerate(inner.reshape(m, per_row - 1)):
        start = int(rng.integers(0, n - 2 * per_row))
        start += start == end + 1                   # a row never starts next to the previous one's end
        cols.append(start + np.concatenate([[0], np.cumsum(steps)]))
        end = cols[-1][-1]
    cols = np.concatenate(cols)
    b = sps.csr_array((rng.standard_normal(len(cols)), cols, np.arange(0, len(cols) + 1, per_row)), shape=(m, n))
    b = _as_dtype(b, dtype, rng)
    a = _csr(rng, 90, m, 0.08, dtype, empty_rows=0.1, long_rows=2)
    assert kind_for(b.indices) == ("map" if adjacent >= 0.5 else "flags")
    _product_on_both(splyce.asarray(a), splyce.asarray(b))


def _product_on_both(A, B) -> list:
    """``A @ B`` jitted on the library route with sorted rows (an explicit CSR), one and two threads, each the
    MLIR kernel's bit for bit: the library's results."""
    results = []
    for threads in (1, 2):
        fast, mlir = _both_sorted(A, threads)
        results.append(fast(A, B))
        _same(results[-1], mlir(A, B))
        assert isinstance(fast.kernel_for(A, B)[0], LibraryKernel)
    return results


@pytest.mark.parametrize("banded", [False, True])
def test_spgemm_sorted_kernels_split_across_threads(monkeypatch, banded):
    """Both sorted kernels on rows split between threads: the second range forwards, the first backwards in
    blocks (moved up over what repeated columns left free), and more chunks than threads: the same bits as one
    thread."""
    from splyce.native import ir_text, spgemm
    from splyce.native.spgemm_sorted import kind_for

    rng = np.random.default_rng(21)
    n = 400
    if banded:
        b = sps.diags([rng.standard_normal(n - abs(d)) for d in range(-4, 5)], list(range(-4, 5)), format="csr")
    else:
        b = _csr(rng, n, n, 0.03, long_rows=3)
    b = _as_dtype(b, np.float64, rng)
    a = _csr(rng, 300, n, 0.02, empty_rows=0.1, long_rows=2)
    assert kind_for(b.indices) == ("map" if banded else "flags")
    parts = [(x.data, x.indices, x.indptr) for x in (a, b)]
    one = spgemm.spgemm(*parts, n, np.float64, 1, keep_zeros=True, sort=True)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 1)
    for threads, chunk_flops, block_flops in ((2, spgemm.CHUNK_FLOPS, 16), (2, spgemm.CHUNK_FLOPS, 1 << 13),
                                               (3, 64, 16)):
        monkeypatch.setattr(spgemm, "CHUNK_FLOPS", chunk_flops)
        monkeypatch.setattr(spgemm, "BLOCK_FLOPS", block_flops)
        other = spgemm.spgemm(*parts, n, np.float64, threads, keep_zeros=True, sort=True)
        assert np.array_equal(one.indptr, other.indptr) and np.array_equal(one.indices, other.indices)
        assert np.array_equal(one.data.view(np.uint64), other.data.view(np.uint64))
    step = np.diff(one.indices.astype(np.int64))
    starts = one.indptr[1:-1][(one.indptr[1:-1] > 0) & (one.indptr[1:-1] < len(one.indices))] - 1
    step[starts] = 1                                      # (each row's columns ascending: steps within rows)
    assert (step > 0).all() and len(one.indices) >= (a @ b).nnz


def _as_dtype(x, dtype, rng):
    """``x`` with values of ``dtype`` (integers rounded; floats with a few zeros, -0.0, NaN and Inf)."""
    x = sps.csr_array(x)
    if np.issubdtype(dtype, np.integer):
        x.data = np.round(x.data * 4)
    elif x.nnz:
        at = rng.choice(x.nnz, size=min(x.nnz, 8), replace=False)
        x.data[at] = [0.0, -0.0, np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0][: len(at)]
    x = sps.csr_array((x.data.astype(dtype), x.indices.astype(np.int32), x.indptr.astype(np.int32)), shape=x.shape)
    x.has_sorted_indices = True
    return x


def test_spgemm_scratch_out_of_memory_is_a_memory_error():
    """A product over 2**40 columns needs a scratch row far beyond memory: MemoryError, not a crash."""
    a = sps.csr_array((np.ones(2), np.array([0, 1], np.int64), np.array([0, 1, 2], np.int64)), shape=(2, 5))
    b = sps.csr_array((np.ones(2), np.array([3, 2**40 - 1], np.int64), np.array([0, 1, 2, 2, 2, 2], np.int64)),
                      shape=(5, 2**40))
    f = splyce.jit(lambda a, b: a @ b, out_format="sparse")
    with pytest.raises(MemoryError):
        f(splyce.asarray(a), splyce.asarray(b))



def test_spgemm_bad_operands_raise():
    """Unaligned shapes and out-of-range columns: a clear ValueError from the jitted sparse product."""
    from splyce.errors import TraceError

    f = splyce.jit(lambda a, b: a @ b, out_format="sparse")
    a = sps.csr_array(np.eye(3))
    with pytest.raises(TraceError, match="not aligned"):
        f(a, sps.csr_array(np.ones((4, 2))))
    bad = sps.csr_array((np.array([1.0]), np.array([9]), np.array([0, 1, 1, 1])), shape=(3, 3), copy=False)
    with pytest.raises(ValueError, match="out of range"):
        f(bad, a)


def test_spgemm_non_canonical_and_mixed_width_scipy_operands():
    """scipy operands as they come: a row stored in descending column order, duplicate entries, int64 indices
    against int32 ones. The library kernel runs, with the MLIR kernel's bits and scipy's values, and leaves the
    operands as they were."""
    rng = np.random.default_rng(11)
    a = sps.csr_array(_csr(rng, 30, 20, 0.2, special=False))
    row = int(np.argmax(np.diff(a.indptr)))
    lo, hi = a.indptr[row], a.indptr[row + 1]
    a.indices[lo: hi], a.data[lo: hi] = a.indices[lo: hi][::-1].copy(), a.data[lo: hi][::-1].copy()
    a.has_sorted_indices = False
    b = sps.csr_array((np.array([1.5, 2.0, -3.0, 4.0]), np.array([3, 3, 0, 7]), np.array([0, 2, 4] + [4] * 18)),
                      shape=(20, 9), copy=False)
    wide = sps.csr_array((a.data.copy(), a.indices.astype(np.int64), a.indptr.astype(np.int64)), shape=a.shape)
    wide.has_sorted_indices = False
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse")
    for x, y in ((a, b), (wide, b), (a, sps.csr_array(_csr(rng, 20, 9, 0.3, special=False)))):
        before = [arr.copy() for arr in (x.data, x.indices, x.indptr, y.data, y.indices, y.indptr)]
        got = fast(x, y)
        _same_entries(got, mlir(x, y))
        assert np.allclose(got.toarray(), (x @ y).toarray())
        _flags_true(got)
        assert isinstance(fast.kernel_for(x, y)[0], LibraryKernel)
        for old, now in zip(before, (x.data, x.indices, x.indptr, y.data, y.indices, y.indptr)):
            assert np.array_equal(old, now) and old.dtype == now.dtype


@pytest.mark.parametrize("shapes", [((0, 0), (0, 0)), ((3, 0), (0, 4)), ((0, 4), (4, 3)), ((5, 6), (6, 3)),
                                    ((3, 4), (4, 0))])
def test_spgemm_empty_operands(shapes):
    """Empty products (no rows, no inner dimension, no entries, no columns): the sparsifier's empty result of the
    right shape. Products with columns run the library kernel (a 4x0 operand is traced as a dense memref<4x0>
    and runs the MLIR kernel: not pinned here)."""
    (m, k), (_, n) = shapes
    a = sps.csr_array(sps.random_array((m, k), density=0.5, rng=np.random.default_rng(2))) if m == 3 \
        else sps.csr_array((m, k))
    b = sps.csr_array((k, n))
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse")
    got = fast(a, b)
    _same_entries(got, mlir(a, b))
    assert got.shape == (m, n) and got.nnz == 0 and len(got.indptr) == m + 1
    assert n == 0 or isinstance(fast.kernel_for(a, b)[0], LibraryKernel)

def test_spgemm_plan_is_the_dropins_native_product():
    """``a @ b`` returned with a sparse format left to splyce (at the jit or the op): the plan types it CSR with
    unordered columns and runs the drop-in's formulation (its kernel, every reached position kept); with an
    explicit ``splyce.CSR``: ordered, the sorted kernels."""
    from splyce.dropin import OperandInfo, choose_matmul_formulation

    a = splyce.asarray(_csr(np.random.default_rng(1), 50, 50, 0.1))
    dropin = choose_matmul_formulation(OperandInfo.of(a), OperandInfo.of(a)).value
    for f in (splyce.jit(lambda a, b: a @ b, out_format="sparse"),
              splyce.jit(lambda a, b: splyce.matmul(a, b, out_format="sparse")),
              splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, out_format="sparse"))):
        text = f.lower(a, a).as_text("plan")
        assert "#(i, j) -> (i : dense, j : compressed(nonordered))" in text
        assert "// %0: a sparse x sparse product returned with its sparse format left to splyce: CSR with each " \
               "row's columns unique, in any order (unordered_product_results" in text
        assert f"as formulation '{dropin}' (the drop-in's choice" in text and dropin == "gustavson-spa"
        assert "each row's columns in order of first appearance" in text
    text = splyce.jit(lambda a, b: a @ b, out_format=_sorted_csr(a)).lower(a, a).as_text("plan")
    assert "compressed(nonordered)" not in text and "unordered_product_results" not in text
    assert "runs on the native kernel library: matmul (per call, by b's columns: when at least half of its " \
           "neighbouring stored columns are adjacent (banded, dense blocks) or the rows average at most 16 " \
           "multiply-adds (road networks), a map of output positions and a sort of each row" in text
    assert "else each row summed in a dense row with a flag per column, branch-free" in text
    assert "as formulation 'gustavson-spa, every position kept, rows sorted'" in text


def _lower(rng, n, dtype, index=np.int32, special=True):
    a = _csr(rng, n, n, 10 / n, dtype, special=special, index=index, empty_rows=0.1, long_rows=1)
    low = sps.csr_array(sps.tril(a, -1))
    return splyce.asarray(sps.csr_array((low.data, low.indices.astype(index), low.indptr.astype(index)),
                                        shape=low.shape))


PRODUCTS = {
    "masked": (lambda l: (l @ l) * l, "masked-gustavson, reached positions kept"),
    "triangles": (lambda l: ((l @ l.T) * l).sum(), "masked-sum"),
    "triangles-einsum": (lambda l: splyce.einsum("ij,jk,ik->", l, l, l), "masked-sum"),
    "masked-einsum": (lambda l: splyce.einsum("ik,kj,ij->ij", l, l, l, out_format="sparse"),
                      "masked-gustavson, reached positions kept"),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("seed", range(3))
def test_masked_products_bit_for_bit(name, dtype, seed):
    """Each term multiplied in the einsum's operand order, summed from +0.0 in the plan's loop order; the
    masked product keeps every reached mask position (zero sums too): the MLIR kernel's result."""
    rng = np.random.default_rng(10 + seed)
    n = (25, 120, 400)[seed]
    index = np.int64 if seed == 1 else np.int32
    l = _lower(rng, n, dtype, index)
    body, formulation = PRODUCTS[name]
    fast, mlir = _both(body, (l,))
    _same(fast(l), mlir(l))
    if name == "triangles" and dtype == np.int32:
        # .sum() of int32 products is int64 (NumPy's promotion): a cast in the plan, the MLIR kernel's
        assert not isinstance(fast.kernel_for(l)[0], LibraryKernel)
        return
    kernel = fast.kernel_for(l)[0]
    assert isinstance(kernel, LibraryKernel)
    assert f"as formulation '{formulation}'" in fast.lower(l).as_text("plan")
    if kernel.distributed and not np.isfinite(l.values).all():
        # a NaN / Inf of l, a factor of the fused sum: its unfused twin ran (planner/plan.py,
        # ``distributed_factors``), an MLIR kernel, the library=False result above
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 1
    else:
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


def test_masked_product_on_two_threads_is_the_one_thread_result():
    rng = np.random.default_rng(4)
    l = _lower(rng, 3000, np.float64)
    fast, mlir = _both(lambda l: (l @ l) * l, (l,), threads=2)
    _same(fast(l), mlir(l))


def test_bool_triangles_plan_two_steps_and_stay_on_the_mlir_kernel():
    """``bench real``'s L is float64; a bool L makes ``l @ l.T`` a separate step (its sum promotes), so the
    plan is not one library op."""
    rng = np.random.default_rng(5)
    l = splyce.asarray(sps.csr_array(sps.tril(_csr(rng, 60, 60, 0.1, special=False), -1)).astype(bool))
    fast, mlir = _both(lambda l: ((l @ l.T) * l).sum(), (l,))
    assert not isinstance(fast.kernel_for(l)[0], LibraryKernel)
    _same(fast(l), mlir(l))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("density", [0.02, 0.3])
@pytest.mark.parametrize("d", [1, 5, 32])
def test_sddmm_bit_for_bit(dtype, density, d):
    """Each mask entry ``+0.0 + sum over k of (M[i, j] X[i, k]) Y[j, k]``, every mask position kept (zeros
    too); the planner's loop order (i, j, k or i, k, j, by density) sums each entry alike."""
    rng = np.random.default_rng(int(density * 100) + d)
    n = 90
    m = splyce.asarray(_csr(rng, n, n + 7, density, dtype, empty_rows=0.1))
    x = rng.standard_normal((n, d)).astype(dtype)
    y = rng.standard_normal((n + 7, d)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[3, 0], y[5, 0], x[7, :] = np.inf, np.nan, -0.0
    fast, mlir = _both(lambda m, x, y: m * (x @ y.T), (m, x, y))
    _same(fast(m, x, y), mlir(m, x, y))
    assert isinstance(fast.kernel_for(m, x, y)[0], LibraryKernel)
    assert "as formulation 'sddmm, every mask position kept'" in fast.lower(m, x, y).as_text("plan")
    two = splyce.jit(lambda m, x, y: m * (x @ y.T), threads=2)
    _same(two(m, x, y), mlir(m, x, y))
