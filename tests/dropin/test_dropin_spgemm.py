"""Sparse @ sparse with a sparse result: the native O(flops) Gustavson product against scipy's."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.native import ir_text
from splyce.dropin import products as dropin
from splyce.dropin import Formulation, OperandInfo, choose_matmul_formulation


def _same_as_scipy(ours, ref):
    """Same entries as scipy's product, bit for bit (same summation order), no explicit zeros."""
    ours, ref = sps.csr_array(ours), sps.csr_array(ref)
    ours.sort_indices()
    ref = ref.copy()
    ref.sort_indices()
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)
    assert np.array_equal(ours.data, ref.data, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape", [(0, 0, 0), (1, 1, 1), (7, 5, 9), (40, 30, 25)])
def test_spgemm_matches_scipy_bit_for_bit(dtype, shape):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = sps.random_array((m, k), density=0.2, format="csr", rng=rng, dtype=np.float64)
    b = sps.random_array((k, n), density=0.2, format="csr", rng=rng, dtype=np.float64)
    a.data = (a.data * 10 - 5).astype(dtype)
    b.data = (b.data * 10 - 5).astype(dtype)
    out = splyce.matmul(a, b)
    assert isinstance(out, sps.csr_array) and out.indices.dtype == np.int32 and out.indptr.dtype == np.int32
    _same_as_scipy(out, a @ b)


def test_spgemm_empty_rows_cancellation_and_nan():
    a = sps.csr_array(np.array([[1.0, 1.0, 0], [0, 0, 0], [np.nan, 0, 0], [0, 0, 0]]))
    b = sps.csr_array(np.array([[1.0, 0, 2], [-1.0, 0, 3], [0, 0, 0]]))
    out = splyce.matmul(a, b)        # row 0: column 0 cancels to zero and is dropped; NaN kept
    _same_as_scipy(out, a @ b)
    assert out[0, 0] == 0 and 0 not in out.indices[out.indptr[0]:out.indptr[1]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(["csr", "csc", "coo"]), st.sampled_from([1, 2, 3]))
def test_spgemm_property(m, k, n, density, seed, fmt, threads):
    rng = np.random.default_rng(seed)
    a = sps.random_array((m, k), density=density, format=fmt, rng=rng)
    b = sps.random_array((k, n), density=density, format="csr", rng=rng)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ir_text, "MIN_CHUNK", 1)              # threads split these tiny products
        _same_as_scipy(splyce.matmul(a, b, threads=threads), a @ b)


def test_spgemm_threads_bit_identical(monkeypatch):
    from splyce.native import spgemm as native_spgemm

    a = sps.random_array((300, 200), density=0.05, format="csr", random_state=1)
    with pytest.MonkeyPatch.context() as mp:                # a small product stays on one thread
        mp.setattr(native_spgemm, "pool", lambda threads: pytest.fail("a thread pool for a small product"))
        _same_as_scipy(splyce.matmul(a, a.T, threads=2), a @ a.T)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 1)           # threads split it as they split large ones
    monkeypatch.setattr(native_spgemm, "CHUNK_FLOPS", 50)   # many chunks, each in its own buffer
    one, two = splyce.matmul(a, a.T, threads=1), splyce.matmul(a, a.T, threads=2)
    assert np.array_equal(one.indptr, two.indptr) and np.array_equal(one.indices, two.indices)
    assert np.array_equal(one.data, two.data)
    _same_as_scipy(splyce.matmul(a, a.T, threads=None), a @ a.T)


def test_spgemm_work_is_proportional_to_flops_not_rows_times_columns():
    """Doubling the rows at fixed entries per row doubles the work counter (a dense row block would
    quadruple it)."""
    works = []
    for n in (2000, 4000, 8000):
        a = sps.diags_array([np.ones(n - abs(d)) for d in (-2, -1, 0, 1, 2)], offsets=[-2, -1, 0, 1, 2],
                            format="csr")
        _same_as_scipy(splyce.matmul(a, a), a @ a)
        works.append(dropin.last_spgemm_work)
    assert abs(works[1] / works[0] - 2) < 0.01
    assert abs(works[2] / works[1] - 2) < 0.01


def test_matmul_formulation_choice():
    csr, vec, dense = OperandInfo("scipy-array", (5, 6)), OperandInfo("scipy-array", (6,)), OperandInfo("numpy", (6, 3))
    assert choose_matmul_formulation(csr, OperandInfo("scipy-array", (6, 4))) is Formulation.GUSTAVSON_SPARSE
    assert choose_matmul_formulation(csr, OperandInfo("scipy-array", (6, 4)), "dense") is Formulation.GUSTAVSON_DENSE
    assert choose_matmul_formulation(csr, vec) is Formulation.SCATTER_VECTOR
    assert choose_matmul_formulation(csr, dense) is Formulation.SPARSE_TIMES_DENSE
    assert choose_matmul_formulation(OperandInfo("numpy", (2, 5)), csr) is Formulation.DENSE_TIMES_SPARSE


def test_bad_operands_of_spgemm_raise():
    good = sps.random_array((5, 6), density=0.5, format="csr", random_state=1)
    bad = sps.csr_array((np.ones(2), np.array([0, 9]), np.array([0, 2, 2, 2, 2, 2])), shape=(5, 6))
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(bad, good.T)
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(good.T, bad)
    with pytest.raises(ValueError, match="threads"):
        splyce.matmul(good, good.T, threads=0)


def test_a_times_a_converts_and_checks_the_operand_once(monkeypatch):
    from splyce.dropin import operands as dropin

    a = sps.random_array((40, 40), density=0.1, format="csr", rng=12)
    calls = []
    real = dropin.as_format
    monkeypatch.setattr(dropin, "as_format", lambda x, fmt, name, *rest: calls.append(name) or real(x, fmt, name, *rest))
    np.testing.assert_allclose(splyce.matmul(a, a).toarray(), (a @ a).toarray())
    assert calls == ["a"]
    bad = a.copy()
    bad.indices[0] = 40
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(bad, bad)


def _skewed(m, n, seed):
    """A power-law-like CSR: a few hub rows hold most entries; values +-1 and +-0.5 so sums cancel to zero."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum((rng.pareto(1.2, m) * 3).astype(int), n)
    rows = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths]) if lengths.sum() else rows
    vals = rng.choice([-1.0, 1.0, 0.5, -0.5], rows.size)
    return sps.csr_array((vals, (rows, cols)), shape=(m, n))


@pytest.mark.parametrize("kernel", ["dense", "sparse"])
def test_spgemm_kernels_skewed_rows_threads_bit_identical(monkeypatch, kernel):
    """Both accumulators (dense slots, sparse position marks) against scipy on skewed rows with cancellation,
    and threads=1 / 2 / 3 the same arrays in the same (unsorted) order, several chunks per thread included, and
    two threads' first range placed backwards in blocks of 16 multiply-adds (rows longer than a block, blocks
    moved up over repeated columns)."""
    from splyce.native import spgemm as native_spgemm

    monkeypatch.setattr(native_spgemm, "DENSE_ROW_ENTRIES", 1 if kernel == "dense" else 10**9)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 1)           # threads split these small products
    a, b = _skewed(300, 120, 5), _skewed(120, 200, 6)
    a[7, 3] = np.nan
    ref = a @ b
    one = splyce.matmul(a, b, threads=1)
    _same_as_scipy(one.copy(), ref)                # (it sorts its argument's indices in place)
    chunk, block = native_spgemm.CHUNK_FLOPS, native_spgemm.BLOCK_FLOPS
    for threads, chunk_flops, block_flops in ((2, chunk, block), (2, chunk, 16), (3, chunk, block), (2, 64, block)):
        monkeypatch.setattr(native_spgemm, "CHUNK_FLOPS", chunk_flops)
        monkeypatch.setattr(native_spgemm, "BLOCK_FLOPS", block_flops)
        other = splyce.matmul(a, b, threads=threads)
        assert np.array_equal(one.indptr, other.indptr) and np.array_equal(one.indices, other.indices)
        assert np.array_equal(one.data, other.data, equal_nan=True)


def test_spgemm_row_split_balances_flops_on_skewed_rows():
    """The two threads' row ranges carry about equal multiply-adds, hub rows included (no timing)."""
    from splyce.native import spgemm as native_spgemm

    a = _skewed(5000, 5000, 7)
    a = a + a.T                                     # hubs as rows and as columns
    prefix = native_spgemm.row_flops_prefix(a.indptr, a.indices, a.indptr)
    total = int(prefix[-1])
    assert total == sum(int(np.diff(a.indptr)[a.indices[a.indptr[i]:a.indptr[i + 1]]].sum()) for i in range(5000))
    ranges = native_spgemm.chunks(prefix, 2)
    assert len(ranges) == 2 and ranges[0][0] == 0 and ranges[-1][1] == 5000
    assert max(int(prefix[hi] - prefix[lo]) for lo, hi in ranges) <= 0.6 * total


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_spgemm_dense_kernel_other_dtypes(monkeypatch, dtype):
    from splyce.native import spgemm as native_spgemm

    monkeypatch.setattr(native_spgemm, "DENSE_ROW_ENTRIES", 1)
    a, b = _skewed(60, 50, 8), _skewed(50, 40, 9)
    a.data, b.data = (a.data * 2).astype(dtype), (b.data * 2).astype(dtype)
    _same_as_scipy(splyce.matmul(a, b), a @ b)
