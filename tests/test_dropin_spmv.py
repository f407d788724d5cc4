"""Sparse matrix times dense vector / matrix drop-ins (native SpMV / SpMM) and what they check, vs scipy."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.runtime import arguments


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (5, 0), (0, 4), (9, 7), (60, 45)])
@pytest.mark.parametrize("cols", [None, 1, 3, 16, 40])
def test_spmv_spmm_bit_identical_to_scipy(dtype, shape, cols):
    rng = np.random.default_rng(sum(shape))
    a = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    a.data = (a.data * 8 - 4).astype(dtype)
    x = (rng.random(shape[1] if cols is None else (shape[1], cols)) * 8 - 4).astype(dtype)
    ours, ref = splyce.matmul(a, x), a @ x
    assert type(ours) is type(ref) and ours.shape == ref.shape and ours.dtype == ref.dtype
    assert np.array_equal(ours, ref)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(["csr", "csc", "coo", "matrix"]), st.sampled_from([1, 2, 3]), st.booleans())
def test_spmv_property(m, n, density, seed, fmt, threads, mixed):
    rng = np.random.default_rng(seed)
    a = sps.random_array((m, n), density=density, format="csr" if fmt == "matrix" else fmt, rng=rng)
    if fmt == "matrix":
        a = sps.csr_matrix(a)
    x = rng.random(n).astype(np.float32 if mixed else np.float64)
    ours, ref = splyce.matmul(a, x, threads=threads), a @ x
    # (scipy's COO gives a 0-d result for a 1 x 0 matrix; NumPy's dense product gives shape (1,), as we do)
    assert ours.shape == (m,) and ours.dtype == ref.dtype
    if fmt in ("csr", "matrix"):          # the same summation order as scipy's CSR product: bit for bit
        assert np.array_equal(ours, np.reshape(ref, (m,)))
    else:                                 # scipy sums a CSC / COO in its own order
        np.testing.assert_allclose(ours, np.reshape(ref, (m,)), rtol=1e-6 if mixed else 1e-13)


def test_unsorted_and_duplicate_columns_need_no_canonical_copy():
    indptr = np.array([0, 3, 3, 5], dtype=np.int32)
    indices = np.array([2, 0, 2, 1, 0], dtype=np.int32)
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    a = sps.csr_array((data, indices, indptr), shape=(3, 3))
    x = np.array([1.0, 10.0, 100.0])
    before = [arr.copy() for arr in (indptr, indices, data)]
    assert np.array_equal(splyce.matmul(a, x), a @ x)
    assert all(np.array_equal(b, arr) for b, arr in zip(before, (indptr, indices, data)))   # not modified


def test_bad_operands_raise_clear_errors():
    x = np.ones(4)
    out_of_range = sps.csr_array((np.ones(2), np.array([0, 4], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32)),
                                 shape=(2, 4))
    with pytest.raises(ValueError, match=r"coordinate 4 out of range \[0, 4\)"):
        splyce.matmul(out_of_range, x)
    negative = out_of_range.copy()
    negative.indices[1] = -1
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(negative, x)
    decreasing = sps.csr_array((np.ones(2), np.array([0, 1], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32)),
                               shape=(2, 4))
    decreasing.indptr[1] = 3                       # 0, 3, 2: positions decrease
    with pytest.raises(ValueError, match="positions decrease"):
        splyce.matmul(decreasing, x)
    with pytest.raises(TypeError, match="complex128"):
        splyce.matmul(out_of_range.tocsc(), x.astype(complex))
    with pytest.raises(TypeError, match="complex128"):
        splyce.matmul(sps.csr_array(np.eye(4)), x.astype(complex))


def test_sealed_tensor_is_not_validated_again(monkeypatch):
    a = sps.random_array((30, 20), density=0.2, format="csr", random_state=1)
    sealed = splyce.asarray(a, copy=True)
    wrapped = splyce.asarray(a)                    # shares scipy's arrays: its owner may change them
    assert sealed.sealed and not wrapped.sealed
    with pytest.raises(ValueError):
        sealed.values[0] = 1.0                     # read-only: the check made once cannot go stale
    calls = []
    monkeypatch.setattr(arguments, "validate", lambda t, name: calls.append(name))
    f = splyce.jit(lambda m, v: m @ v)
    x = np.ones(20)
    assert np.allclose(f(sealed, x), a @ x) and calls == []
    assert np.allclose(f(wrapped, x), a @ x) and len(calls) == 1
    out = sealed.to_scipy()                        # handing the buffers out unseals the tensor
    assert not sealed.sealed and out.data.flags.writeable
