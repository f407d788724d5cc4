"""A jitted call on scipy CSR / CSC operands, once its kernel is filed under the prepared signature
(runtime/signature.py ``prepared_signature``): the same results as the general call and as scipy, every call's
operand checked again (buffers changed in place after the kernel was filed are refused), the operand's class
followed, and every other kind of operand still taken by the general path."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


def _variants(rng):
    base = sps.random_array((40, 30), density=0.1, format="csr", rng=rng)
    out = []
    for cls in (sps.csr_array, sps.csr_matrix, sps.csc_array, sps.csc_matrix):
        for idx in (np.int32, np.int64):
            a = cls(base)
            a.indptr, a.indices = a.indptr.astype(idx), a.indices.astype(idx)
            out.append((a, base.toarray()))
    mixed = sps.csr_array(base)
    mixed.indices = mixed.indices.astype(np.int64)      # int32 positions, int64 columns
    out.append((mixed, base.toarray()))
    strided = sps.csr_array(base)
    strided.data = np.repeat(strided.data, 2)[::2]       # non-contiguous values
    out.append((strided, base.toarray()))
    f32 = sps.csr_array(base.astype(np.float32))
    out.append((f32, base.toarray().astype(np.float32)))
    return out


def test_scipy_operands_match_scipy_on_repeated_calls():
    rng = np.random.default_rng(7)
    x = rng.random(30)
    f = splyce.jit(lambda a, v: a @ v)
    g = splyce.jit(lambda a, b: (a + b).sum())
    for a, dense in _variants(rng):
        want = dense @ x
        for _ in range(3):                        # general call, then the filed signature
            got = np.asarray(f(a, x)).ravel()
            assert np.allclose(got, want, rtol=1e-5), (type(a), a.indices.dtype)
        s = splyce.asarray(a)
        assert np.asarray(f(s, x)).ravel().tobytes() == np.asarray(f(a, x)).ravel().tobytes()
        for _ in range(2):
            assert np.isclose(g(a, a), (dense + dense).sum(), rtol=1e-5)


def test_operand_changed_in_place_after_filing_is_refused():
    rng = np.random.default_rng(3)
    a = sps.random_array((50, 50), density=0.1, format="csr", rng=rng)
    x = rng.random(50)
    f = splyce.jit(lambda m, v: m @ v)
    f(a, x)
    f(a, x)                                        # filed
    hits = f._fast_hits
    a.indices[3] = 10_000                          # out of range now
    with pytest.raises(ValueError, match="argument 0"):
        f(a, x)
    a.indices[3] = 1
    a.indptr[5] = a.indptr[6] + 1                  # positions decrease
    with pytest.raises(ValueError):
        f(a, x)
    fresh = sps.random_array((50, 50), density=0.1, format="csr", rng=rng)
    assert np.allclose(f(fresh, x), fresh @ x)


def test_unsorted_operand_on_the_filed_signature_is_canonicalized_not_modified():
    rng = np.random.default_rng(5)
    a = sps.random_array((20, 20), density=0.3, format="csr", rng=rng)
    x = rng.random(20)
    f = splyce.jit(lambda m, v: m @ v)
    f(a, x)
    f(a, x)
    messy = sps.csr_array((a.data[::-1].copy(), a.indices.copy(), a.indptr.copy()), shape=a.shape)
    for i in range(20):                            # reverse each row's entries: unsorted columns
        lo, hi = messy.indptr[i], messy.indptr[i + 1]
        messy.indices[lo:hi] = messy.indices[lo:hi][::-1].copy()
        messy.data[lo:hi] = messy.data[lo:hi][::-1].copy()
    before = [messy.data.copy(), messy.indices.copy(), messy.indptr.copy()]
    assert np.allclose(f(messy, x), messy.toarray() @ x)
    assert all(np.array_equal(b, n) for b, n in zip(before, (messy.data, messy.indices, messy.indptr)))


def test_spmatrix_result_class_follows_operand_on_filed_signature():
    rng = np.random.default_rng(9)
    a = sps.random(30, 30, density=0.1, format="csr", random_state=1)
    b = sps.csr_array(a)
    f = splyce.jit(lambda m: m * 2.0)
    for _ in range(3):
        assert type(f(a)) is type(2.0 * a)
        assert type(f(b)) is type(2.0 * b)
    h = splyce.jit(lambda m, v: m @ v)
    v = rng.random((30, 2))
    for _ in range(3):
        assert type(h(a, v)) is type(a @ v)
        assert np.allclose(h(a, v), a @ v)


def test_function_reading_outside_names_takes_prepared_signature_and_refuses_changed_buffers():
    """A function that reads a name from its closure (``n``) skips ``__call__``'s fast path; its scipy calls
    are looked up under the prepared signature in ``_kernel_for_call``, still checked on every call."""
    rng = np.random.default_rng(11)
    n = 60
    a = sps.random_array((n, n), density=0.05, format="csr", rng=rng)
    x = np.full(n, 1.0 / n)
    step = splyce.jit(lambda p, r: 0.85 * (p @ r) + 0.15 / n)
    want = 0.85 * (a @ x) + 0.15 / n
    for _ in range(3):
        assert np.allclose(step(a, x), want)
    info = step.cache_info()
    # one kernel (the native SpMV and its glue in NumPy, runtime/glue.py: nothing compiled), looked up on each call
    assert info.misses == 1 and info.compiles == 0 and info.hits + info.misses == 3
    a.indices[0] = n + 5
    with pytest.raises(ValueError):
        step(a, x)
