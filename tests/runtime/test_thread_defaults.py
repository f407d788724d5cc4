"""The default thread count (threads=None): every core unless splyce.set_threads / use_threads /
SPLYCE_NUM_THREADS say otherwise, fewer when other processes hold the cores; small calls on one thread; results
bit-identical to threads=1 for every op, size and dtype (references: the one-thread call, and scipy / NumPy)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce import thread_count


def _bits(x):
    if sps.issparse(x):
        x = x.tocsr()
        x.sort_indices()
        return (x.shape, x.indptr.tobytes(), x.indices.tobytes(), x.data.dtype.str, x.data.tobytes())
    x = np.asarray(x)
    return (x.shape, x.dtype.str, x.tobytes())


def _matrix(n, per_row, dtype, seed, power=False):
    rng = np.random.default_rng(seed)
    m = n * per_row
    if power:       # skewed rows: a few hubs hold most entries
        rows = np.minimum((rng.pareto(1.2, m) * 4).astype(np.int64), n - 1)
    else:
        rows = rng.integers(0, n, m)
    a = sps.csr_array((rng.random(m) + 0.25, (rows, rng.integers(0, n, m))), shape=(n, n))
    a.sum_duplicates()
    if np.dtype(dtype).kind in "iu":
        a.data = np.ceil(a.data * 4)
    return sps.csr_array(a.astype(dtype))


def _sddmm(a, x, y):
    """``a * (x @ y.T)`` on a's stored positions only (the dense product of a large n would not fit)."""
    c = a.tocoo()
    return sps.csr_array((c.data * np.einsum("ij,ij->i", x[c.row], y[c.col]), (c.row, c.col)), shape=a.shape)


def _ops(a, dtype):
    n = a.shape[0]
    rng = np.random.default_rng(5)
    x = rng.random(n).astype(dtype) if np.dtype(dtype).kind == "f" else rng.integers(-3, 4, n).astype(dtype)
    x8 = (rng.random((n, 8)) * 4).astype(dtype)
    y8 = (rng.random((n, 8)) * 4).astype(dtype)
    lower = sps.csr_array(sps.tril(a, -1))
    return {
        "spmv": (lambda t: splyce.matmul(a, x, threads=t), lambda: a @ x),
        "spmm": (lambda t: splyce.matmul(a, x8, threads=t), lambda: a @ x8),
        "spgemm": (lambda t: splyce.matmul(a, a, threads=t), lambda: a @ a),
        "sddmm": (lambda t: splyce.einsum("ij,ik,jk->ij", a, x8, y8, threads=t), lambda: _sddmm(a, x8, y8)),
        "masked": (lambda t: splyce.einsum("ik,kj,ij->ij", a, a, a, threads=t), lambda: (a @ a).multiply(a)),
        "triangles": (lambda t: splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=t),
                      lambda: (lower @ lower).multiply(lower).sum()),
        "add": (lambda t: splyce.add(a, a.T, threads=t), lambda: a + a.T),
        "multiply": (lambda t: splyce.multiply(a, a.T, threads=t), lambda: a.multiply(a.T)),
        "subtract": (lambda t: splyce.subtract(a, a.T.tocsr(), threads=t), lambda: a - a.T),
    }


def _check_ops(a, dtype):
    for name, (call, reference) in _ops(a, dtype).items():
        one = call(1)
        with splyce.use_threads(2):          # chosen: two threads whatever the load
            default = call(None)
        two = call(2)
        assert _bits(default) == _bits(one), name
        if name != "triangles" or np.dtype(dtype).kind in "iu":
            assert _bits(two) == _bits(one), name
        ref = reference()
        rtol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
        if sps.issparse(one):             # compared sparse: the dense forms of a large n would not fit
            diff = abs(sps.csr_array(one, dtype=np.float64) - sps.csr_array(ref, dtype=np.float64))
            assert diff.max() <= rtol * (1 + abs(sps.csr_array(ref, dtype=np.float64)).max()), name
        else:
            assert np.allclose(np.asarray(one), np.asarray(ref), rtol=rtol, atol=rtol), name


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_default_threads_bit_identical_small(dtype):
    _check_ops(_matrix(3000, 6, dtype, seed=3000, power=True), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("n,per_row,power", [(30, 3, False), (3000, 6, True), (500, 40, False)])
def test_default_threads_bit_identical_small_dtypes(n, per_row, dtype, power):
    _check_ops(_matrix(n, per_row, dtype, seed=n, power=power), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("n,per_row,power", [(40_000, 8, False), (30_000, 10, True)])
def test_default_threads_bit_identical_split_sizes(n, per_row, dtype, power):
    """Sizes past every op's one-thread threshold (the passes over >= 2^17 entries and products of
    >= 2^18 multiply-adds split): the default on two threads gives one thread's bits."""
    _check_ops(_matrix(n, per_row, dtype, seed=n, power=power), dtype)


def test_default_threads_bit_identical_one_split_size():
    """One size past the thresholds in the quick run (float64, skewed rows)."""
    a = _matrix(30_000, 6, np.float64, seed=11, power=True)
    assert a.nnz >= 2 * 65536
    _check_ops(a, np.float64)


def test_float_scalar_sum_stays_on_one_thread_by_default():
    """The default never changes a bit: a float triangle sum stays on one thread (an explicit threads=2 may
    reassociate it); an integer one splits (any order is exact), with one thread's result."""
    a = _matrix(20_000, 8, np.float64, seed=3, power=True)
    lower = sps.csr_array(sps.tril(a, -1))
    lower.data = np.random.default_rng(0).random(lower.nnz) * 1e3
    from splyce.dropin import einsums

    with splyce.use_threads(2):
        default = splyce.einsum("ij,jk,ik->", lower, lower, lower)
        counts = sps.csr_array(lower, dtype=np.int64)
        counts.data[:] = 1
        integral = splyce.einsum("ij,jk,ik->", counts, counts, counts)
    assert _bits(default) == _bits(splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=1))
    assert integral == splyce.einsum("ij,jk,ik->", counts, counts, counts, threads=1)
    assert einsums._float_values([lower]) and not einsums._float_values([counts])


def test_set_threads_use_threads_and_env(monkeypatch):
    saved = thread_count._process, thread_count._chosen
    try:
        splyce.set_threads(1)
        assert splyce.get_threads() == 1 and thread_count.call_threads() == 1
        with splyce.use_threads(3):
            assert splyce.get_threads() == 3 and thread_count.resolve(None) == 3
            with splyce.use_threads(None):
                assert splyce.get_threads() == thread_count.cores()
        assert splyce.get_threads() == 1
        assert thread_count.resolve(4) == 4              # an explicit count is kept
        monkeypatch.setenv("SPLYCE_NUM_THREADS", "2")
        splyce.set_threads(None)                         # back to the environment
        assert splyce.get_threads() == 2 and thread_count._chosen
        monkeypatch.delenv("SPLYCE_NUM_THREADS")
        splyce.set_threads(None)
        assert splyce.get_threads() == thread_count.cores() and not thread_count._chosen
        for bad in (0, -2, 1.5, True, "2"):
            with pytest.raises(ValueError, match="positive int"):
                splyce.set_threads(bad)
            with pytest.raises(ValueError, match="positive int"):
                splyce.use_threads(bad).__enter__()
        for bad in (0, True, "all"):
            with pytest.raises(ValueError, match="threads"):
                splyce.matmul(sps.csr_array(np.eye(3)), np.ones(3), threads=bad)
        monkeypatch.setenv("SPLYCE_NUM_THREADS", "many")
        with pytest.raises(ValueError, match="SPLYCE_NUM_THREADS='many'"):
            splyce.set_threads(None)
    finally:
        thread_count._process, thread_count._chosen = saved


def test_automatic_default_takes_the_idle_cores(monkeypatch):
    """Left to every core, a call takes the cores other processes leave idle; a chosen count is kept."""
    saved = thread_count._process, thread_count._chosen
    try:
        thread_count._process, thread_count._chosen = 4, False
        monkeypatch.setattr(thread_count, "_idle_cores", lambda: 1)
        assert thread_count.call_threads() == 1 and splyce.get_threads() == 4
        monkeypatch.setattr(thread_count, "_idle_cores", lambda: 3)
        assert thread_count.call_threads() == 3
        splyce.set_threads(4)
        monkeypatch.setattr(thread_count, "_idle_cores", lambda: 1)
        assert thread_count.call_threads() == 4
    finally:
        thread_count._process, thread_count._chosen = saved
    assert 1 <= thread_count._idle_cores() <= thread_count.cores()


def test_jit_default_small_calls_run_one_chunk(monkeypatch):
    """A jitted kernel compiled for two threads runs a call of <= SERIAL_MAX_ENTRIES stored entries as one chunk
    on the calling thread, a larger one in chunks; both give one thread's bits."""
    from splyce.runtime import calls, kernel as kernel_module

    seen = []
    call_one = calls.KernelCall._call_one

    def recording(self, pointers, indices):
        seen.append(tuple(indices))
        return call_one(self, pointers, indices)
    monkeypatch.setattr(calls.KernelCall, "_call_one", recording)

    def spmm(a, x):
        return a @ x
    rng = np.random.default_rng(2)
    with splyce.use_threads(2):
        f = splyce.jit(spmm, library=False)       # the MLIR kernel, its outer loop split in chunks
        small = _matrix(200, 4, np.float64, seed=1)
        xs = rng.random((200, 4))
        seen.clear()
        out = f(splyce.asarray(small), xs)
        assert len(seen) == 1
        big = _matrix(40_000, 4, np.float64, seed=2)
        xb = rng.random((40_000, 4))
        assert big.nnz + xb.size > kernel_module.SERIAL_MAX_ENTRIES
        seen.clear()
        out_big = f(splyce.asarray(big), xb)
        assert len(seen) == 2 * kernel_module.CHUNKS_PER_THREAD
    one = splyce.jit(spmm, library=False, threads=1)
    assert _bits(out) == _bits(one(splyce.asarray(small), xs))
    assert _bits(out_big) == _bits(one(splyce.asarray(big), xb))
    assert np.allclose(out_big, big @ xb)


def test_scipy_switch_product_same_buffers_on_two_threads():
    """patch_scipy's product (scipy's stored order) splits by default past its size: the same buffers as one
    thread's, which are scipy's own."""
    from splyce.dropin.products import matmul_in_scipy_order

    a = _matrix(30_000, 6, np.float64, seed=4)
    want = a @ a                                    # scipy's csr_matmat: its buffers, unsorted rows
    one = matmul_in_scipy_order(a, a, threads=1)
    two = matmul_in_scipy_order(a, a, threads=2)
    with splyce.use_threads(2):
        default = matmul_in_scipy_order(a, a)
    for got in (one, two, default):
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert got.data.tobytes() == want.data.tobytes()
