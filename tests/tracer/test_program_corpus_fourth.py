"""The algorithm bodies of tests/tracer/program_corpus_fourth.py (written the way networkx, scikit-learn, scipy and
JAX users write them, before any was run under jit) on csr_matrix, csr_array, csc_matrix, csc_array and
SparseTensor operands, jitted against the same function without jit: the same values (float: rtol 1e-9;
integer and bool: exact, same dtype) and class families, an error under jit only where the eager function
raises too, and the refusals below naming the construct and what to write instead."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

from program_corpus_fourth import PROGRAMS
from test_program_corpus import _matrix
from test_program_corpus_third import as_kind, _eager_operand, assert_same

KINDS = ["csr_matrix", "csr_array", "csc_matrix", "csc_array", "SparseTensor"]
# refused inside jit, each message naming the construct and what to write instead: data-dependent shapes and
# in-place writes (JAX refuses them too), scipy routines that do not know traced values
REFUSED = {
    "nx_pagerank_scipy": "boolean mask indexing is not supported",       # S[S != 0] = ...; x[np.where(S == 0)[0]]
    "pagerank_converged": "np.where(c, x, y)",                            # if err < tol: break
    "kipf_normalize_adj": "np.where(mask, v, y)",                         # d[np.isinf(d)] = 0.
    "sklearn_normalize_max": "np.where(mask, v, y)",                      # norms[norms == 0] = 1
    "sklearn_document_frequency": "no .indices array",                    # np.bincount(X.indices)
    "sparse_row_softmax": "no .data array",                               # coo.data, coo.row
    "edge_degree_products": "a.nonzero() of a traced value",              # rows, cols = A.nonzero()
    "laplacian_by_hand": "np.where(cond, np.divide(...), fallback)",     # np.divide(1, d, out=, where=)
    "csgraph_laplacian": "csgraph's routines do not know traced values",  # csgraph.laplacian(G, normed=True)
    "heat_diffusion_expm": "scipy.sparse.linalg.expm_multiply on traced values",
    "complement_nb": "np.take(c, idx, axis=0)",                          # np.eye(3)[y], y traced
    "common_neighbour_pairs": "index: a slice or gather of a sparse value computed inside the function",
}
QUICK = {"cooccurrence_counts": "csr_matrix", "okapi_bm25": "csr_array", "k_hop_reachability": "csc_matrix",
         "multinomial_logreg_grad": "SparseTensor", "sklearn_tfidf_transformer": "csc_array",
         "edge_degree_products": "csr_array"}


def _exact_dtypes(got, want, where: str):
    if isinstance(want, (tuple, list)):
        for g, w in zip(got, want):
            _exact_dtypes(g, w, where)
        return
    if np.dtype(want.dtype).kind in "biu":
        assert np.dtype(got.dtype) == np.dtype(want.dtype), f"{where}: dtype {got.dtype} vs {want.dtype}"
        dense = (lambda r: r.toarray() if sps.issparse(r) else
                 r.to_numpy() if isinstance(r, splyce.SparseTensor) else np.asarray(r))
        np.testing.assert_array_equal(dense(got), dense(want), err_msg=where)


def run(name: str, kind: str):
    fun, make = PROGRAMS[name]
    args = make(as_kind(_matrix(), kind), np.random.default_rng(1))
    if name in REFUSED:
        with pytest.raises((splyce.TraceError, TypeError), match=re.escape(REFUSED[name])):
            splyce.jit(fun)(*args)
        return
    try:
        want = fun(*(_eager_operand(a) for a in args))
    except Exception:   # noqa: BLE001 - whatever the eager code raises (a 1-D sum of an sparray broadcast), the jit raises too
        with pytest.raises(Exception):
            splyce.jit(fun)(*args)
        return
    got = splyce.jit(fun)(*args)
    assert_same(got, want, f"{name} on {kind}")
    _exact_dtypes(got, want, f"{name} on {kind}")


@pytest.mark.parametrize("name, kind", sorted(QUICK.items()))
def test_fourth_corpus_quick(name, kind):
    run(name, kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fourth_corpus_every_kind(name, kind):
    run(name, kind)


def test_big_endian_scipy_operands_are_converted_at_the_boundary():
    a = sps.random(20, 20, density=0.2, format="csr", random_state=0)
    x = np.arange(20.0)
    for cls, fmt in ((sps.csr_matrix, "csr"), (sps.csc_array, "csc")):
        ref = cls(a)
        big = cls((ref.data.astype(">f8"), ref.indices.astype(">i4"), ref.indptr), shape=ref.shape)
        np.testing.assert_array_equal(splyce.jit(lambda m, v: m @ v)(big, x), ref @ x)
        np.testing.assert_array_equal(splyce.asarray(big).to_numpy(), ref.toarray())
        assert big.data.dtype.str == ">f8"                  # the input is not modified


def test_scipy_special_on_traced_values():
    import scipy.special

    a = sps.random(30, 8, density=0.3, format="csr", random_state=0)
    w = np.random.default_rng(0).standard_normal((8, 3))

    def f(m, v):
        z = m @ v
        return (scipy.special.logsumexp(z, axis=1), scipy.special.softmax(z, axis=0),
                scipy.special.log_softmax(z, axis=1), scipy.special.logsumexp(z), scipy.special.expit(z),
                scipy.special.logit(scipy.special.expit(z)))
    for g, e in zip(splyce.jit(f)(a, w), f(a, w)):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
    with pytest.raises(TypeError, match="scipy.special.gammaln is not supported"):
        splyce.jit(lambda m, v: scipy.special.gammaln(m @ v))(a, w)


@pytest.mark.parametrize("cls", [sps.csr_matrix, pytest.param(sps.csc_array, marks=pytest.mark.slow)])
def test_sparse_norm_along_an_axis(cls):
    import scipy.sparse.linalg as spla

    a = sps.random(30, 8, density=0.3, format="csr", random_state=0)
    a = cls(a - sps.random(30, 8, density=0.2, format="csr", random_state=1))
    for ord in (None, 2, 1, 0):
        for axis in (0, -1):
            want = spla.norm(a, ord=ord, axis=axis)
            got = splyce.jit(lambda m: spla.norm(m, ord=ord, axis=axis))(a)
            assert type(got) is type(want) and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("cls", [sps.csr_matrix, sps.csc_array, "SparseTensor"])
def test_tril_triu_keep_format_and_class(cls):
    a = _matrix()
    x = splyce.asarray(sps.csr_array(a)) if cls == "SparseTensor" else cls(a)
    eager = x.to_scipy() if cls == "SparseTensor" else x

    def f(m):
        return sps.tril(m), sps.triu(m, k=1, format="csr"), sps.tril(m, -3), sps.triu(m, 2).sum(axis=0)
    for got, want in zip(splyce.jit(f)(x), f(eager)):
        assert (isinstance(got, sps.spmatrix) or isinstance(got, np.matrix)) == \
            (isinstance(want, sps.spmatrix) or isinstance(want, np.matrix))
        if sps.issparse(got):     # the operand's entries, copied: exact
            assert got.format == (x.format if cls != "SparseTensor" else "csr")
            np.testing.assert_array_equal(got.toarray(), want.toarray())
        else:                     # a column sum after it: summed in the kernel's order
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13)


@pytest.mark.parametrize("lower, unit", [(True, False), (False, False), (True, True), (False, True)])
def test_spsolve_triangular_and_spsolve_as_scipy(lower, unit):
    import scipy.sparse.linalg as spla

    rng = np.random.default_rng(0)
    a = _matrix() + sps.diags(np.full(40, 3.0))
    tri = sps.csr_array(sps.tril(a) if lower else sps.triu(a))
    b, B = rng.random(40), rng.random((40, 3))
    f = (lambda m, v: spla.spsolve_triangular(m, v, lower=lower, unit_diagonal=unit))
    for rhs in (b, B):
        np.testing.assert_array_equal(splyce.jit(f)(tri, rhs), f(tri, rhs))          # scipy's own solve
    g = (lambda m, v: spla.spsolve_triangular((sps.tril(m) if lower else sps.triu(m)).tocsr(), v, lower=lower,
                                              unit_diagonal=unit))
    np.testing.assert_allclose(splyce.jit(g)(sps.csr_matrix(a), b), g(sps.csr_matrix(a), b), rtol=1e-12)
    h = (lambda m, v: spla.spsolve(m + m.T, v))
    np.testing.assert_allclose(splyce.jit(h)(sps.csc_array(a), B), h(sps.csc_array(a), B), rtol=1e-12)
    with pytest.raises(ValueError, match="square"):
        splyce.jit(f)(sps.csr_array(a)[:, :30], b)
