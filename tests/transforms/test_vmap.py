"""splyce.vmap over dense arguments: results equal a Python loop of calls; a batch of SpMVs is one SpMM."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.numpy as snp


def _loop(f, A, xs):
    return np.stack([np.asarray(f(A, x)) for x in xs])


@pytest.mark.parametrize("kind", ["csr_array"] + [pytest.param(k, marks=pytest.mark.slow)
                                                  for k in ("csr_matrix", "SparseTensor")])
def test_batch_of_spmv_is_one_spmm(kind):
    rng = np.random.default_rng(0)
    A = sps.random_array((60, 45), density=0.1, format="csr", rng=rng)
    A = {"csr_array": A, "csr_matrix": sps.csr_matrix(A), "SparseTensor": splyce.asarray(A)}[kind]
    X = rng.standard_normal((9, 45))

    def f(A, x):
        y = A @ x
        return snp.tanh(y) + y.sum() / 3.0 - snp.maximum(y, 0.0)

    out = splyce.vmap(f, in_axes=(None, 0))(A, X)
    np.testing.assert_allclose(out, _loop(splyce.jit(f), A, X), rtol=1e-12, atol=1e-12)
    plan = splyce.jit(splyce.vmap(f, in_axes=(None, 0))).lower(A, X).as_text("plan")
    products = [line for line in plan.splitlines() if "contract[ik,zk->zi" in line]
    assert len(products) == 1 and "9x60xfloat64" in products[0]   # one SpMM for the 9 SpMVs


def test_in_axes_out_axes_and_sddmm():
    rng = np.random.default_rng(1)
    M = sps.random_array((20, 15), density=0.2, format="csr", rng=rng)
    U = rng.standard_normal((4, 20, 3))     # a batch of factor pairs: a batch of SDDMMs
    V = rng.standard_normal((15, 3, 4))     # batched along its last axis

    def f(M, u, v):
        return (M.multiply(u @ v.T)).sum(axis=1)

    out = splyce.vmap(f, in_axes=(None, 0, 2), out_axes=1)(M, U, V)
    ref = np.stack([np.asarray(M.multiply(U[b] @ V[:, :, b].T).sum(axis=1)).ravel() for b in range(4)], axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_vmap_of_grad():
    rng = np.random.default_rng(2)
    A = sps.random_array((12, 12), density=0.3, format="csr", rng=rng)
    X = rng.standard_normal((5, 12))
    g = splyce.grad(lambda A, x: snp.sum(snp.tanh(A @ x) ** 2), argnums=1)
    out = splyce.vmap(g, in_axes=(None, 0))(A, X)
    np.testing.assert_allclose(out, np.stack([g(A, x) for x in X]), rtol=1e-12)


def test_unmapped_result_is_broadcast():
    A = sps.random_array((6, 4), density=0.5, format="csr", rng=3)
    X = np.random.default_rng(3).standard_normal((3, 4))
    s, y = splyce.vmap(lambda A, x: ((A @ np.ones(4)).sum(), A @ x), in_axes=(None, 0))(A, X)
    np.testing.assert_allclose(s, np.full(3, A.sum()))
    np.testing.assert_allclose(y, X @ A.T.toarray())


def test_errors():
    A = sps.random_array((5, 5), density=0.5, format="csr", rng=0)
    with pytest.raises(splyce.TraceError, match="sparse"):
        splyce.vmap(lambda A, x: A @ x)(A, np.ones((5, 5)))
    with pytest.raises(ValueError, match="different sizes"):
        splyce.vmap(lambda x, y: x + y)(np.ones((3, 2)), np.ones((4, 2)))
