"""The small-call rule of the masked products (dropin/einsums.py ``small_masked_call``): a call whose work is
surely below ``serial_max_work()`` runs on one thread, decided without a per-call NumPy pass; larger calls keep
the threads they are given. Counted, not timed."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import einsums
from splyce.native import masked, masked_chunks


def _mesh(k: int):
    """A 2-D k x k grid graph (5-point stencil), 1.0 values."""
    t = sps.diags_array([np.ones(k - 1), np.ones(k - 1)], offsets=[-1, 1], shape=(k, k))
    g = sps.kronsum(t, t, format="csr")
    g.data[:] = 1.0
    return sps.csr_array(g)


@pytest.fixture
def threads_seen(monkeypatch):
    seen = []
    real = masked.masked_spgemm

    def counted(m, a, b, n_cols, dtype, threads=1):
        seen.append(threads)
        return real(m, a, b, n_cols, dtype, threads)
    monkeypatch.setattr(masked, "masked_spgemm", counted)
    return seen


def test_small_masked_product_one_thread(threads_seen, monkeypatch):
    a = _mesh(32)                                   # 1k nodes: the bench's mesh2d-1k
    one = splyce.einsum("ik,kj,ij->ij", a, a, a, threads=1)
    assert threads_seen == [1]
    # the kernel's own check (a NumPy pass per call) is never reached for such a call
    monkeypatch.setattr(masked_chunks, "small_masked_work", lambda *args: pytest.fail("per-call work pass"))
    two = splyce.einsum("ik,kj,ij->ij", a, a, a, threads=2)
    with splyce.use_threads(2):
        default = splyce.einsum("ik,kj,ij->ij", a, a, a)
    assert threads_seen == [1, 1, 1]
    for r in (two, default):
        assert np.array_equal(r.indptr, one.indptr) and np.array_equal(r.indices, one.indices)
        assert r.data.tobytes() == one.data.tobytes()
    np.testing.assert_allclose(one.toarray(), (a @ a).multiply(a).toarray())


def test_large_masked_product_keeps_threads(threads_seen):
    a = sps.random_array((1500, 1500), density=0.04, format="csr", rng=3)
    assert not einsums.small_masked_call(a.nnz, a.nnz, a.indptr)
    one = splyce.einsum("ik,kj,ij->ij", a, a, a, threads=1)
    two = splyce.einsum("ik,kj,ij->ij", a, a, a, threads=2)
    assert threads_seen == [1, 2]
    assert np.array_equal(two.indices, one.indices) and two.data.tobytes() == one.data.tobytes()


def test_small_rule_bound_and_cache():
    a = _mesh(32)
    longest = int(np.diff(a.indptr).max())
    limit = masked_chunks.serial_max_work()
    assert einsums.small_masked_call(a.nnz, a.nnz, a.indptr) == (a.nnz * max(longest, 8) + a.nnz < limit)
    assert einsums._longest_row(a.indptr) == longest
    # cached by the array's identity: a second call reads no row starts (a poisoned copy of the value shows it)
    hit = einsums._longest_rows[id(a.indptr)]
    einsums._longest_rows[id(a.indptr)] = (hit[0], 10 ** 9)
    assert not einsums.small_masked_call(a.nnz, a.nnz, a.indptr)
    einsums._longest_rows.pop(id(a.indptr))
    assert einsums.small_masked_call(a.nnz, a.nnz, a.indptr)
    other = a.indptr.copy()                         # another array: computed for it, not taken from a's entry
    assert einsums._longest_row(other) == longest


def test_small_triangle_sum_skips_work_pass(monkeypatch):
    lower = sps.csr_array(sps.tril(_mesh(32), -1))
    want = splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=1)
    assert want == splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=1)   # the one-call path filed
    monkeypatch.setattr(masked_chunks, "small_masked_work", lambda *args: pytest.fail("per-call work pass"))
    for _ in range(3):
        assert splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=2) == want
    assert want == pytest.approx(float(((lower @ lower).multiply(lower)).sum()))
