"""threads=N: the outer loop runs in N contiguous chunks balanced by nonzeros, bit-identical to one thread."""

import os

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.kernel import _outer_chunks
from splyce.bench.paper_kernels import KERNELS


def _as_array(x):
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


@pytest.mark.parametrize("vectorize", [True, False])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_threads_bit_identical_on_the_five_kernels(name, vectorize):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.1, seed=5)
    one = _as_array(splyce.jit(spec.fun, vectorize=vectorize)(*ops))
    for threads in (2, 3):
        f = splyce.jit(spec.fun, vectorize=vectorize, threads=threads)
        out = _as_array(f(*ops))
        assert out.tobytes() == one.tobytes()
        text = f.lower(*ops).as_text("splyce")
        assert "// splyce: threads: outer loop split into chunks" in text
        if vectorize:
            assert "vectorized" in text


def test_skewed_rows_chunk_unevenly_and_stay_identical():
    rng = np.random.default_rng(0)
    dense = np.zeros((60, 400))
    dense[:5] = rng.uniform(0.5, 1, (5, 400))           # five full rows hold most nonzeros
    dense[5:, ::37] = 1.0
    B = splyce.asarray(dense, format=splyce.CSR.with_widths(32, 32))
    C = splyce.asarray(rng.uniform(-1, 1, (400, 30)) * (rng.random((400, 30)) < 0.3),
                       format=splyce.CSC.with_widths(32, 32))
    chunks = _outer_chunks(60, 3, [_type(B), _type(C)], [B, C])
    assert chunks[0][0] == 0 and chunks[-1][1] == 60 and len(chunks) == 3
    assert chunks[0][1] <= 5                            # the heavy rows are split off early
    one = splyce.jit(lambda x, y: x @ y, out_format="dense")(B, C)
    for threads in (2, 3):
        assert splyce.jit(lambda x, y: x @ y, threads=threads, out_format="dense")(B, C).tobytes() == one.tobytes()


def _type(x):
    from splyce.runtime.arguments import prepare

    return prepare(x, "x")[0]


def test_chunks_cover_the_rows_once():
    assert _outer_chunks(2, 4, [], []) == [(0, 1), (1, 2)]
    assert _outer_chunks(10, 1, [], []) == [(0, 10)]
    assert _outer_chunks(10, 3, [], []) == [(0, 3), (3, 6), (6, 10)]


def test_sparse_output_falls_back_to_one_thread():
    a = sps.random(30, 40, 0.2, format="csr", random_state=1)
    b = sps.random(30, 40, 0.2, format="csr", random_state=2)
    f = splyce.jit(lambda x, y: x.multiply(y), threads=2)     # (csr_matrix: * is the matrix product)
    out = f(a, b)
    assert np.allclose(out.toarray(), a.multiply(b).toarray())
    low = f.lower(a, b)
    assert low.outer_extent is None
    assert "// splyce: threads: one thread (" in low.as_text("splyce")


def test_profile_falls_back_to_one_thread():
    from splyce.runtime.dispatcher import Jitted

    spec = KERNELS["K1"]
    ops = spec.operands(64, 0.2, seed=1)
    f = Jitted(spec.fun, profile=True, threads=2)
    assert np.allclose(f(*ops), splyce.jit(spec.fun)(*ops))
    assert "one thread (profile counters are shared)" in f.lower(*ops).as_text("splyce")


def test_threads_option_validation_and_key():
    assert splyce.jit(lambda x: x, threads=None).options.threads == (os.cpu_count() or 1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be"):
            splyce.jit(lambda x: x, threads=bad)
    spec = KERNELS["K1"]
    ops = spec.operands(16, 0.2)
    k1 = splyce.jit(spec.fun, threads=1)._key(ops)[0]
    k2 = splyce.jit(spec.fun, threads=2)._key(ops)[0]
    assert k1.explain(k2) == ["options"]
    # the default follows the process default (splyce.set_threads / use_threads / SPLYCE_NUM_THREADS)
    with splyce.use_threads(1):
        assert splyce.jit(spec.fun)._key(ops)[0].explain(k1) == []
    with splyce.use_threads(2):
        assert splyce.jit(spec.fun)._key(ops)[0].explain(k2) == []


# -- reductions over the outer loop into one element (passes/parallel.py: private partials per chunk)
def _split_note(f, *ops) -> str:
    return [line for line in f.lower(*ops).as_text("splyce").splitlines() if "splyce: threads:" in line][0]


def _int_matrices():
    a = sps.random_array((120, 90), density=0.15, random_state=3, format="csr", dtype=np.int64)
    a.data = np.arange(1, a.nnz + 1, dtype=np.int64) * 7919
    b = sps.random_array((120, 90), density=0.3, random_state=4, format="csr", dtype=np.int64)
    b.data = -np.arange(1, b.nnz + 1, dtype=np.int64)
    return a, b


def test_integer_sum_is_split_and_exact():
    a, b = _int_matrices()
    want = int(a.multiply(b).sum())
    for threads in (2, 3, 7):
        f = splyce.jit(lambda x, y: (x * y).sum(), threads=threads)
        got = f(a, b)
        assert int(got) == want and np.asarray(got).dtype == np.int64
        assert _split_note(f, a, b).endswith("partial add results combined")


def test_float_sum_splits_only_with_fast_math():
    a = sps.random_array((200, 150), density=0.1, random_state=5, format="csr")
    b = sps.random_array((200, 150), density=0.1, random_state=6, format="csr")
    one = splyce.jit(lambda x, y: (x * y).sum())(a, b)
    strict = splyce.jit(lambda x, y: (x * y).sum(), threads=2)
    assert strict(a, b).tobytes() == np.asarray(one).tobytes()        # not split: the exact order
    assert "a float sum over the outer loop" in _split_note(strict, a, b)
    fast = splyce.jit(lambda x, y: (x * y).sum(), threads=2, fast_math=True)
    assert "partial add results combined" in _split_note(fast, a, b)
    assert np.isclose(fast(a, b), a.multiply(b).sum(), rtol=1e-12)


def test_split_reduction_with_inf_and_nan():
    dense = np.zeros((50, 40))
    dense[3, 5], dense[40, 7] = np.inf, -np.inf                       # in different chunks: inf - inf
    a = sps.csr_array(dense + np.eye(50, 40))
    f = splyce.jit(lambda x: x.sum(), threads=2, fast_math=True)
    assert "partial add results combined" in _split_note(f, a)
    assert np.isnan(f(a))
    dense[40, 7] = 1.0
    b = sps.csr_array(dense + np.eye(50, 40))
    assert f(b) == np.inf


def test_triangle_count_dropin_with_threads_is_exact():
    rng = np.random.default_rng(7)
    n = 400
    rows, cols = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    g = sps.csr_array((np.ones(3000), (rows, cols)), shape=(n, n))
    g = ((g + g.T) > 0).astype(np.float64)
    L = sps.csr_array(sps.tril(g, -1))
    L.sort_indices()
    want = (L @ L.T).multiply(L).sum()
    for threads in (1, 2, 3):
        assert splyce.einsum("ij,kj,ik->", L, L, L, threads=threads) == want


def test_threads_take_chunks_dynamically_each_once(monkeypatch):
    """threads=2 splits the outer loop into CHUNKS_PER_THREAD chunks per thread, balanced by entries; two
    threads take them (each the next one left), every chunk runs exactly once, and the triangle count is
    exact on skewed rows."""
    import threading

    from splyce.runtime import calls, kernel as dispatcher

    seen = []
    call_one = calls.KernelCall._call_one

    def recording(self, pointers, indices):
        seen.append((tuple(indices), threading.get_ident()))
        return call_one(self, pointers, indices)
    monkeypatch.setattr(calls.KernelCall, "_call_one", recording)
    monkeypatch.setattr(dispatcher, "SERIAL_MAX_ENTRIES", 0)     # this small call split all the same
    rng = np.random.default_rng(9)
    n = 600
    rows = np.minimum((rng.pareto(1.0, 6000) * 3).astype(np.int64), n - 1)
    g = sps.csr_array((np.ones(6000), (rows, rng.integers(0, n, 6000))), shape=(n, n))
    L = sps.csr_array(sps.tril(((g + g.T) > 0).astype(np.float64), -1))
    want = (L @ L.T).multiply(L).sum()
    assert splyce.einsum("ij,kj,ik->", L, L, L, threads=2) == want
    chunks = sorted(c for c, _ in seen)
    assert len(chunks) == 2 * dispatcher.CHUNKS_PER_THREAD and len({t for _, t in seen}) <= 2
    assert chunks[0][0] == 0 and chunks[-1][1] == n and all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    entries = [int(L.indptr[hi] - L.indptr[lo]) for lo, hi in chunks]
    assert max(entries) - min(entries) <= 2 * int(np.diff(L.indptr).max())   # balanced up to a row each end


def test_split_reduction_from_the_disk_cache(monkeypatch):
    a, b = _int_matrices()
    f = splyce.jit(lambda x, y: (x * y).sum(), threads=3)
    want = f(a, b)
    splyce.clear_cache()                                  # memory only: the next call loads from disk
    g = splyce.jit(lambda x, y: (x * y).sum(), threads=3)
    assert g(a, b) == want and g.cache_info().disk_hits == 1
    assert g.lower(a, b).outer_reductions == ((1, "add"),)
