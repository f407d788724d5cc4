"""Sparse @ sparse with a sparse result: the native O(flops) Gustavson product against scipy's."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.planner import dropin
from splyce.planner.dropin import Formulation, OperandInfo, choose_matmul_formulation


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
    _same_as_scipy(splyce.matmul(a, b, threads=threads), a @ b)


def test_spgemm_threads_bit_identical(monkeypatch):
    from splyce.backend import native_spgemm

    monkeypatch.setattr(native_spgemm, "CHUNK_FLOPS", 50)   # many chunks, each in its own buffer
    a = sps.random_array((300, 200), density=0.05, format="csr", random_state=1)
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
    from splyce.planner import dropin

    a = sps.random_array((40, 40), density=0.1, format="csr", rng=12)
    calls = []
    real = dropin._as_format
    monkeypatch.setattr(dropin, "_as_format", lambda x, fmt, name: calls.append(name) or real(x, fmt, name))
    np.testing.assert_allclose(splyce.matmul(a, a).toarray(), (a @ a).toarray())
    assert calls == ["a"]
    bad = a.copy()
    bad.indices[0] = 40
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(bad, bad)
