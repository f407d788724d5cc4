"""A corpus of small algorithm bodies as users of NumPy / scipy.sparse write them (graph Laplacian
normalisation, TF-IDF, z-scoring, degree statistics, feature stacking, GCN propagation ...), each run under
``@splyce.jit`` on a scipy ``csr_array``, a ``csr_matrix`` (where the spmatrix semantics agree) and a
``SparseTensor``, against the same function called without jit on the scipy operand.

The bodies use the NumPy / scipy surface of docs/tracing.md ("NumPy and scipy names inside a jitted
function"): ``np.asarray(A.sum(1)).ravel()``, ``sp.diags(d)``, ``sp.eye(n)``, ``.tocsr()``, ``.nnz``,
``.getnnz(axis=)``, ``.std()``, ``np.hstack``... The corpus was written before the surface it exercises.
"""

import numpy as np
import pytest
import scipy
import scipy.sparse as sp
from numpy import asarray
from scipy.sparse import diags

import splyce

N = 40
RNG = np.random.default_rng(53)


def _graph(n=N, density=0.1, seed=2):
    """A symmetric 0/1 adjacency with self loops (every degree >= 1), as csr_array."""
    a = sp.random_array((n, n), density=density, format="csr", rng=seed)
    a = ((a + a.T) > 0).astype(np.float64) + sp.eye_array(n)
    a = sp.csr_array((a > 0).astype(np.float64))
    a.sort_indices()
    return a


def _counts(docs=30, terms=25, seed=4):
    """A documents x terms count matrix (every document and term used at least once)."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 3, size=(docs, terms)) * (rng.random((docs, terms)) < 0.3)
    dense[np.arange(docs), np.arange(docs) % terms] += 1
    dense[np.arange(terms) % docs, np.arange(terms)] += 1
    return sp.csr_array(dense.astype(np.float64))


def _with_explicit_zero():
    a = _graph(seed=5).copy()
    a.data[3] = 0.0           # stored, zero: nnz counts it, count_nonzero does not
    a.data[10] = 0.0
    return a


A = _graph()
X = RNG.random((N, 3))
W = RNG.random((3, 2))
V = RNG.random(N)
C = _counts()
Z = _with_explicit_zero()


# -- the bodies -------------------------------------------------------------------------------------------

def sym_normalised_adjacency(A):
    d = np.asarray(A.sum(1)).ravel()
    d_inv_sqrt = sp.diags(d ** -0.5)
    return d_inv_sqrt @ A @ d_inv_sqrt


def laplacian(A):
    deg = np.asarray(A.sum(axis=1)).ravel()
    return sp.diags(deg) - A


def random_walk(A, x):
    deg = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(1.0 / deg) @ A
    return P @ x


def pygcn_normalise(adj):
    rowsum = np.array(adj.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv = np.where(np.isinf(r_inv), 0.0, r_inv)
    r_mat_inv = sp.diags(r_inv)
    return r_mat_inv.dot(adj)


def gcn_layer(A, X, W):
    n = A.shape[0]
    A_hat = A + sp.eye(n)
    d = np.asarray(A_hat.sum(axis=1)).ravel()
    D = sp.diags(1.0 / np.sqrt(d))
    return np.maximum(D @ (A_hat @ (D @ (X @ W))), 0)


def tfidf(X):
    n_docs = X.shape[0]
    df = np.asarray((X > 0).sum(axis=0)).ravel()
    idf = np.log((1 + n_docs) / (1 + df)) + 1
    weighted = X @ sp.diags(idf)
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    return sp.diags(1.0 / norms) @ weighted


def cosine_similarity(X):
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    Xn = sp.diags(1.0 / norms) @ X
    return Xn @ Xn.T


def zscore_columns(X):
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    return (X - mu) / sd


def zscore_of_sparse_features(A):
    dense = A.toarray()
    return (dense - np.mean(dense, axis=0)) / np.std(dense, axis=0)


def variances(X):
    return np.var(X, axis=0, ddof=1), X.var(axis=1, keepdims=True), X.std()


def degree_statistics(A):
    deg = np.asarray(A.sum(axis=1)).ravel()
    return deg.mean(), deg.std(), deg.max(), np.var(deg)


def getnnz_statistics(A):
    per_row = A.getnnz(axis=1)
    per_col = A.getnnz(axis=0)
    return per_row.max(), per_col.min(), A.getnnz(), A.nnz


def count_nonzero_by_axis(A):
    return A.count_nonzero(axis=1), A.count_nonzero(axis=0), A.count_nonzero(), A.nnz


def density(A):
    return A.nnz / (A.shape[0] * A.shape[1])


def stacked_features(A, X):
    return np.hstack([X, A @ X, A @ (A @ X)])


def degree_features(A):
    deg = np.asarray(A.sum(axis=1)).ravel()
    neighbour_deg = np.asarray(A @ deg).ravel()
    return np.column_stack([deg, neighbour_deg, neighbour_deg / deg])


def hop_vectors(A, x):
    return np.vstack([x, A @ x, A.T @ x]), np.stack([x, A @ x], axis=1), np.concatenate([x, A @ x])


def format_conversions(A, x):
    csc = A.tocsc()
    coo = A.tocoo()
    again = csc.tocsr()
    return csc @ x, np.asarray(coo.sum(axis=0)).ravel(), again.asformat("csr") @ x, A.asformat("csc").T @ x


def transpose_then_csr(A, x):
    return A.T.tocsr() @ x


def katz_step(A, x):
    n = A.shape[0]
    M = sp.identity(n) - 0.1 * A
    return M @ x


def eye_array_and_diags_array(A, x):
    n = A.shape[0]
    d = np.asarray(A.sum(axis=0)).ravel()
    B = sp.eye_array(n) + sp.diags_array(d)
    return B @ x


def rebuilt_csr(A, x):
    S = sp.csr_array(A.multiply(A.T))
    T = sp.csr_matrix(A).tocsr()
    return S @ x, T.sum()


def issparse_branch(A, x):
    if sp.issparse(A):
        return A @ x
    return np.dot(A, x)


def directly_imported(A):
    d = asarray(A.sum(axis=1)).ravel()
    return diags(d ** -1) @ A


def cast_and_copy(A, x):
    B = A.copy()
    pattern = (B != 0).astype(float)
    return np.asarray(pattern.sum(axis=1)).ravel(), A.astype(np.float32) @ x.astype(np.float32, copy=False)


def asanyarray_glue(A, x):
    y = np.asanyarray(A @ x).ravel()
    z = np.ascontiguousarray(A.T @ y)
    return np.array(z, dtype=np.float32)


def scipy_namespace(A, x):
    d = np.asarray(A.sum(axis=1)).ravel()
    return scipy.sparse.diags(d) @ (A @ x)


def standard_scaler(X):
    mu = np.asarray(X.mean(axis=0)).ravel()
    var = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mu ** 2
    return X @ sp.diags(1.0 / np.sqrt(var))


# -- the corpus: (body, arguments, operand kinds) --------------------------------------------------------

ALL = ("csr_array", "csr_matrix", "tensor")
ARRAYS = ("csr_array", "tensor")   # sparray semantics only (getnnz is an spmatrix method, ...)

CORPUS = [
    (sym_normalised_adjacency, (A,), ALL),
    (laplacian, (A,), ALL),
    (random_walk, (A, V), ALL),
    (pygcn_normalise, (A,), ALL),
    (gcn_layer, (A, X, W), ALL),
    (tfidf, (C,), ALL),
    (cosine_similarity, (C,), ALL),
    (zscore_columns, (X,), ("dense",)),
    (zscore_of_sparse_features, (C,), ALL),
    (variances, (X,), ("dense",)),
    (degree_statistics, (A,), ALL),
    (getnnz_statistics, (Z,), ("csr_matrix",)),
    (count_nonzero_by_axis, (Z,), ALL),
    (density, (Z,), ALL),
    (stacked_features, (A, X), ALL),
    (degree_features, (A,), ALL),
    (hop_vectors, (A, V), ALL),
    (format_conversions, (A, V), ALL),
    (transpose_then_csr, (C, RNG.random(C.shape[0])), ALL),
    (katz_step, (A, V), ALL),
    (eye_array_and_diags_array, (A, V), ALL),
    (rebuilt_csr, (A, V), ALL),
    (issparse_branch, (A, V), ALL),
    (directly_imported, (A,), ALL),
    (cast_and_copy, (A, V), ALL),
    (asanyarray_glue, (A, V), ALL),
    (scipy_namespace, (A, V), ALL),
    (standard_scaler, (C,), ALL),
]


def _operand(x, kind):
    if not sp.issparse(x):
        return x
    if kind == "csr_matrix":
        return sp.csr_matrix(x)
    if kind == "tensor":
        return splyce.asarray(x)
    return sp.csr_array(x)


def _reference_operand(x, kind):
    return sp.csr_matrix(x) if kind == "csr_matrix" and sp.issparse(x) else x


def _dense(x):
    if isinstance(x, splyce.SparseTensor):
        x = x.to_scipy()
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


def _leaves(x):
    return list(x) if isinstance(x, tuple) else [x]


def _check(got, want):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = _dense(g), _dense(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5 if w.dtype == np.float32 else 1e-12, atol=1e-12)


CASES = [pytest.param(body, args, kind, id=f"{body.__name__}-{kind}")
         for body, args, kinds in CORPUS for kind in kinds]


@pytest.mark.parametrize("body, args, kind", CASES)
def test_corpus_body(body, args, kind):
    operands = [_operand(x, kind) for x in args]
    before = [_dense(x).copy() for x in args]
    got = splyce.jit(body)(*operands)
    want = body(*[_reference_operand(x, kind) for x in args])
    _check(got, want)
    for x, b in zip(args, before):      # inputs are never modified
        np.testing.assert_array_equal(_dense(x), b)


def test_corpus_size():
    assert len(CORPUS) >= 20
