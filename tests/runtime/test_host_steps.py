"""NumPy's functions between kernels (tracer/linalg.py, planner/host_steps.py, runtime/host_stages.py): np.linalg's
and NumPy's sorting / scans on traced dense values run by NumPy itself, the program cut there into kernels;
results equal the same function without jit. Also the pieces the corpus bodies around them need: vectors of
0-d traced values, np.diag(v, k), scipy's class of max / min along an axis, scipy.sparse.linalg.norm, and the
refusals that name what to write."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import splyce

A = sp.random(30, 30, density=0.2, format="csr", random_state=0, data_rvs=lambda k: np.linspace(0.1, 2, k))
V = np.random.default_rng(0).random((30, 4))
X = np.random.default_rng(1).random(30)


def _same(got, want):
    if isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert type(got) is type(want), (type(got), type(want))
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)      # NumPy's own results, bit for bit


def als(r, v):
    k = v.shape[1]
    gram = v.T @ v + 0.1 * np.eye(k)
    return np.linalg.solve(gram, (r @ v).T).T


def small(a, x):
    s = (a + a.T).toarray()[:6, :6] + 6 * np.eye(6)
    return s


CASES = {
    "solve": lambda a, v, x: np.linalg.solve(small(a, x), x[:6]),
    "inv": lambda a, v, x: np.linalg.inv(small(a, x)),
    "cholesky": lambda a, v, x: np.linalg.cholesky(small(a, x)),
    "qr": lambda a, v, x: np.linalg.qr(a @ v),
    "eigh": lambda a, v, x: np.linalg.eigh(small(a, x)),
    "eigvalsh": lambda a, v, x: np.linalg.eigvalsh(small(a, x)),
    "svd": lambda a, v, x: np.linalg.svd(a @ v, full_matrices=False),
    "lstsq": lambda a, v, x: np.linalg.lstsq(a @ v, x, rcond=None),
    "det": lambda a, v, x: np.linalg.det(small(a, x)),
    "slogdet": lambda a, v, x: np.linalg.slogdet(small(a, x)),
    "pinv": lambda a, v, x: np.linalg.pinv(a @ v),
    "norm_1": lambda a, v, x: np.linalg.norm(a @ v, 1),
    "norm_inf_vec": lambda a, v, x: np.linalg.norm(a @ x, np.inf),
    "matrix_power": lambda a, v, x: np.linalg.matrix_power(small(a, x), 3),
    "argsort": lambda a, v, x: np.argsort(-(a @ v), axis=1)[:, :2],
    "sort": lambda a, v, x: np.sort(a @ x),
    "cumsum": lambda a, v, x: np.cumsum(a @ x),
    "median": lambda a, v, x: np.median(a @ v, axis=0),
}


QUICK = ("solve", "qr")


@pytest.mark.parametrize("name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)])
def test_numpy_between_kernels_equals_numpy(name):
    fun = CASES[name]
    _same(splyce.jit(fun)(A, V, X), fun(A, V, X))


def test_als_step_cuts_the_program_and_equals_eager():
    f = splyce.jit(als)
    _same(f(A, V), als(A, V))
    plan = f.lower(A, V).as_text("plan")
    assert plan.count("// kernel") == 2 and "// host step: numpy.linalg.solve" in plan
    _same(f(A * 2.0, V), als(A * 2.0, V))          # the cached staged kernel, other values
    for kind in (sp.csr_array, sp.csc_matrix, splyce.asarray):
        operand = kind(sp.csr_array(A)) if kind is splyce.asarray else kind(A)
        eager = operand.to_scipy() if isinstance(operand, splyce.SparseTensor) else operand
        _same(f(operand, V), als(eager, V))


@pytest.mark.slow
def test_several_cuts_and_values_across_them():
    def fun(a, q):
        s = (a + a.T) / 2
        for _ in range(3):                         # subspace iteration: SpMM, QR, SpMM, QR ...
            q, _ = np.linalg.qr(s @ q)
        z = s @ q[:, 0]                            # read after the last cut
        return np.linalg.eigvalsh(q.T @ (s @ q)), z * np.linalg.norm(q, 1), a.sum()

    got, want = splyce.jit(fun)(A, V), fun(A, V)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert got[2] == pytest.approx(want[2])


def test_numpy_errors_and_data_dependent_shapes():
    singular = lambda a, x: np.linalg.solve(np.outer(a @ x, a @ x)[:3, :3], x[:3])
    with pytest.raises(np.linalg.LinAlgError):
        singular(A, X)
    with pytest.raises(np.linalg.LinAlgError):
        splyce.jit(singular)(A, X)


@pytest.mark.parametrize("fun, match", [
    (lambda a, x: np.linalg.eig(small(a, x)), "np.linalg.eigh"),
    (lambda a, x: np.linalg.multi_dot([small(a, x), small(a, x), small(a, x)]), "write the products with @"),
    (lambda a, x: np.linalg.solve(a, x), "a.toarray()"),
    (lambda a, x: np.fill_diagonal(a @ a.T @ np.eye(30), 0.0), "np.where(np.eye(n, dtype=bool), v, a)"),
    (lambda a, x: sp.kron(a, a).sum() * x, "scipy.sparse.kron"),   # sp.tril / triu: served since 2026-12-08
])
def test_refusals_name_the_construct_and_the_alternative(fun, match):
    with pytest.raises((splyce.TraceError, TypeError), match=match.replace("(", r"\(").replace(")", r"\)")):
        splyce.jit(fun)(A, X)


def test_vectors_of_zero_d_values_and_tridiagonal_matrices():
    def fun(a, v):
        s = a @ v
        alpha, beta = s.sum(), s.max()
        t = np.diag(np.array([alpha, beta, alpha])) + np.diag(np.array([beta, beta]), 1) \
            + np.diag(np.array([beta, beta]), -1)
        return np.array([alpha, beta, 2.0]), np.stack([alpha, beta]), np.array([alpha, 1]), t, \
            np.linalg.eigvalsh(t)

    got, want = splyce.jit(fun)(A, X), fun(A, X)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_diag_keeps_an_inf_on_its_diagonal():
    fun = lambda a, x: np.diag(np.array([np.inf, 1.0, 2.0]) * (a @ x)[:3], -1)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(splyce.jit(fun)(A, X), fun(A, X))


@pytest.mark.parametrize("kind", [sp.csr_matrix, pytest.param(sp.csr_array, marks=pytest.mark.slow),
                                  pytest.param(sp.coo_matrix, marks=pytest.mark.slow),
                                  pytest.param(sp.csc_array, marks=pytest.mark.slow)])
def test_max_min_along_an_axis_return_scipys_coo_class(kind):
    a = kind(A)
    fun = lambda m: (m.max(axis=0), m.min(axis=1), m.max())
    got, want = splyce.jit(fun)(a), fun(a)
    for g, w in zip(got[:2], want[:2]):
        assert type(g) is type(w) and g.shape == w.shape and g.nnz == w.nnz
        np.testing.assert_array_equal(g.toarray(), w.toarray())
    assert got[2] == want[2]


@pytest.mark.parametrize("ords", [(None, 1), pytest.param(("fro", -1, np.inf, -np.inf), marks=pytest.mark.slow)])
def test_scipy_sparse_linalg_norm(ords):
    for ord_ in ords:
        fun = lambda a, o=ord_: spla.norm(a, o) * 2
        assert splyce.jit(fun)(A) == pytest.approx(fun(A), rel=1e-12)
    with pytest.raises(TypeError, match="input is not sparse"):
        splyce.jit(lambda x: spla.norm(x))(V)


@pytest.mark.parametrize("count", [1, pytest.param(5, marks=pytest.mark.slow)])
def test_broadcast_union_inside_a_sparse_loop_compiles(count):
    """(a.toarray() + d[:, None]).sum(axis=1) segfaulted in the sparsifier (MLIR 22): run in a child."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, splyce
        a = sp.random(40, 40, density=0.1, format="csr", random_state=3)
        d = np.linspace(0.5, 1.5, 40)
        funs = [lambda a, d: (a.toarray() + d[:, None]).sum(axis=1),
                lambda a, d: (a.toarray() - d[:, None]).sum(),
                lambda a, d: np.maximum(a.toarray(), d[:, None]).max(axis=1),
                lambda a, d: (a.toarray() + d[:, None]) @ d,
                lambda a, d: (a.T.toarray() + d[None, :]).sum(axis=0)]
        for f in funs[:COUNT]:
            np.testing.assert_allclose(splyce.jit(f)(a, d), f(a, d), rtol=1e-12)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code.replace("COUNT", str(count))], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]
