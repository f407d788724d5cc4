"""The cached jitted call's fast path (runtime/dispatcher.py): a validated SparseTensor is keyed by what it
carries and its descriptors are packed once and reused; results stay right for every tensor, for changed
values, and for kernels that hand an input buffer back. Checked against scipy / NumPy. ``library=False``:
the MLIR kernels (a single library op would run the native drop-in kernel instead, runtime/library.py)."""

import gc

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime import arguments, calls


def _csr(m, n, density, seed, dtype=np.float64):
    a = sps.random_array((m, n), density=density, format="csr", random_state=seed)
    a.data[:] = np.arange(1, a.nnz + 1) % 5 + 1
    return a.astype(dtype)


def test_repeated_calls_take_the_fast_path_and_stay_right(monkeypatch):
    f = splyce.jit(lambda a, x: a @ x, library=False)
    a = _csr(40, 30, 0.2, 1)
    t = splyce.asarray(a)
    x = np.arange(30.0)
    assert np.allclose(f(t, x), a @ x)
    packed = []
    real = calls.descriptor_words
    monkeypatch.setattr(calls, "descriptor_words", lambda v: (packed.append(v.shape), real(v))[1])
    checked = []
    monkeypatch.setattr(arguments, "validate", lambda *args: checked.append(args))
    hits = f.cache_info().hits
    for k in range(5):
        assert np.allclose(f(t, x + k), a @ (x + k))
    assert f.cache_info().hits == hits + 5 and f.cache_info().compiles == 1
    assert checked == []
    # per call: the dense vector and the dense result only; the tensor's 3 buffers were packed once, before
    assert packed == [(30,), (40,)] * 5


def test_other_tensors_of_the_same_kind_get_their_own_descriptors():
    f = splyce.jit(lambda a, x: a @ x, library=False)
    x = np.linspace(-1, 1, 30)
    mats = [_csr(40, 30, 0.2, seed) for seed in range(4)]
    tensors = [splyce.asarray(m) for m in mats]
    for _ in range(2):
        for m, t in zip(mats, tensors):
            assert np.allclose(f(t, x), m @ x)
    assert f.cache_info().compiles == 1


def test_changed_values_of_a_wrapped_tensor_are_seen():
    """docs/caches.md: values may change between calls (the structure is trusted, the values are read)."""
    f = splyce.jit(lambda a, x: a @ x, library=False)
    a = _csr(40, 30, 0.2, 2)
    t = splyce.asarray(a)
    x = np.ones(30)
    assert np.allclose(f(t, x), a @ x)
    a.data *= -3.0
    assert np.allclose(f(t, x), a @ x)


def test_sparse_results_and_a_returned_input_buffer():
    add = splyce.jit(lambda a, b: a + b, library=False)
    a, b = _csr(30, 30, 0.1, 3), _csr(30, 30, 0.1, 4)
    ta, tb = splyce.asarray(a), splyce.asarray(b)
    for _ in range(3):
        got = add(ta, tb)
        assert abs(got - (a + b)).max() == 0
    same = splyce.jit(lambda a: a * 1, library=False)
    ints = splyce.asarray(_csr(20, 20, 0.2, 5, np.int64))
    before = ints.values.copy()
    for _ in range(3):
        out = same(ints)
        assert np.array_equal(out.toarray(), ints.to_numpy())
        del out
        gc.collect()
    assert np.array_equal(ints.values, before)   # the input's buffer was never freed or written


def test_a_dense_format_tensor_and_a_coo_take_the_general_path():
    f = splyce.jit(lambda a, x: a @ x, library=False)
    a = _csr(20, 10, 0.3, 6)
    x = np.ones(10)
    dense = splyce.asarray(a.toarray())
    coo = splyce.asarray(a.tocoo())
    for _ in range(2):
        assert np.allclose(f(dense, x), a @ x)
        assert np.allclose(f(coo, x), a @ x)


def test_memo_is_not_pickled():
    import pickle

    t = splyce.asarray(_csr(10, 10, 0.3, 7))
    f = splyce.jit(lambda a, x: a @ x, library=False)
    f(t, np.ones(10))
    assert t.memo()
    back = pickle.loads(pickle.dumps(t, protocol=5))
    assert back.memo() == {}
    assert np.allclose(f(back, np.ones(10)), t.to_numpy() @ np.ones(10))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_fast_path_other_dtypes(dtype):
    f = splyce.jit(lambda a, x: a @ x, library=False)
    a = _csr(25, 15, 0.2, 8, dtype)
    t = splyce.asarray(a)
    x = (np.arange(15) % 4).astype(dtype)
    for _ in range(3):
        assert np.allclose(f(t, x), a @ x)


def test_one_scipy_operand_passed_twice_is_checked_once_per_call(monkeypatch):
    """``f(A, A)`` with a scipy CSR: the operand is converted and checked once per call (a counter on the
    native check), with the values of two distinct but equal operands; a non-canonical one is canonicalized
    once and left as it was; a malformed one is refused as before."""
    import scipy.sparse as sps

    from splyce.native import validation as native_validation

    a = sps.random_array((300, 300), density=0.03, format="csr", rng=41)
    x = np.random.default_rng(42).random(300)
    calls = []
    check = native_validation.canonical_csr
    monkeypatch.setattr(native_validation, "canonical_csr", lambda *args: calls.append(1) or check(*args))
    for fun, twice, apart in ((lambda p, q: (p * q).sum(), (a, a), (a, a.copy())),
                              (lambda p, q, v: p @ v + q @ v, (a, a, x), (a, a.copy(), x))):
        f = splyce.jit(fun)
        want = f(*apart)
        calls.clear()
        got = f(*twice)
        assert len(calls) == 1
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    # duplicates and unsorted columns: canonicalized (duplicates summed) once, the operand untouched
    messy = sps.csr_array((np.array([0.1, 0.7, 2.0, 1.0]), np.array([3, 3, 1, 0]), np.array([0, 2, 4, 4])),
                          shape=(3, 5))
    before = [messy.data.copy(), messy.indices.copy(), messy.indptr.copy()]
    f = splyce.jit(lambda p, q: (p * q).sum())
    clean = messy.copy()
    clean.sum_duplicates()
    assert f(messy, messy) == f(clean, clean.copy())
    assert all(np.array_equal(b, n) for b, n in zip(before, (messy.data, messy.indices, messy.indptr)))
    bad = sps.csr_array((np.ones(2), np.array([0, 7]), np.array([0, 1, 2, 2])), shape=(3, 5))
    with pytest.raises(ValueError):
        f(bad, bad)


def test_fast_path_hits_are_counted_exactly_across_threads_and_cleared():
    """The cached call counts its hit without the lock (an ``itertools.count``): threads calling at once lose
    no count, ``cache_info`` adds them to the general path's hits, ``cache_clear`` starts again from zero."""
    import threading

    import scipy.sparse as sps

    a = splyce.asarray(sps.random_array((40, 40), density=0.2, format="csr", random_state=3))
    x = np.ones(40)
    f = splyce.jit(lambda a, x: a @ x)
    f(a, x)
    f(a, x)                                    # one hit: a kernel_for hit or a fast one, counted either way
    before = f.cache_info().hits

    def calls():
        for _ in range(3000):
            f(a, x)
    threads = [threading.Thread(target=calls) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert f.cache_info().hits == before + 4 * 3000 and before >= 1
    f.cache_clear()
    assert f.cache_info().hits == 0
    f(a, x)
    f(a, x)
    assert f.cache_info().hits == 1
