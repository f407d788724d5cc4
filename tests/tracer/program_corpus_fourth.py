"""A fourth corpus of algorithm bodies, written the way the users of networkx, scikit-learn, scipy and JAX write
them (networkx's pagerank_scipy / hits / katz / eigenvector and degree centrality, Kipf's GCN preprocessing,
scikit-learn's TfidfTransformer / normalize / StandardScaler / euclidean_distances / k-means / naive Bayes /
label spreading / spectral embedding / TruncatedSVD, scipy.sparse.csgraph's laplacian, implicit-ALS, BM25,
co-occurrence counts, k-hop reachability with boolean products, Jaccard and link-prediction scores, row-wise
softmax over sparse scores, sparse covariance, ridge and logistic normal equations, triangular solves), none of
them a body of the first three corpora. Each was written before any was run under ``@splyce.jit``;
tests/tracer/test_program_corpus_fourth.py runs each on csr_matrix, csr_array, csc_matrix, csc_array and
SparseTensor operands against the same function without jit (scipy's result; float: rtol 1e-9; integer and
bool: exact).

Each entry: ``name -> (function, argument maker)`` as in tests/tracer/program_corpus.py: the maker takes the sparse
operand (a 40 x 40 matrix with nonnegative entries, row 3 and column 5 empty) converted to the kind under test,
and a seeded generator.

First run (2026-12-08, before any fix; 39 bodies x 5 kinds = 195 runs): **0 wrong answers**; 107 runs gave the
eager values (21 bodies on every kind, sklearn_euclidean_distances on the matrix classes); 5 raised as the
eager code raises (sklearn_euclidean_distances on the array kinds: a 1-D row sum does not broadcast against an
(n, k) array; nx_pagerank_scipy on the matrix classes: NumPy refuses a 2-D boolean mask assignment); 83 were
refused (16 bodies on every kind, nx_pagerank_scipy on the array kinds). Six of the refusals did not name the
construct or the alternative, and were fixed first: ``csgraph.laplacian`` ("array must be at least 2-d",
from scipy's dense path), ``A.nonzero()`` (an AttributeError), ``expm_multiply`` (the tracer's "truth value"
message, without the function's name), ``scipy.special.logsumexp`` ("iterating over a traced tensor"),
``scipy.special.expit`` (named "numpy.expit"), ``np.divide(out=, where=)`` (no alternative). Served since:
``scipy.special`` expit / logit / logsumexp / softmax / log_softmax, ``spla.norm(a, axis=)``, ``sp.tril`` /
``sp.triu``, ``spla.spsolve_triangular`` and ``spla.spsolve`` (logistic_newton_expit, multinomial_logreg_grad,
sklearn_tfidf_transformer, gauss_seidel_triangular, katz_spsolve now run). The refusals left are listed in
the test's REFUSED, each naming the construct and what to write instead.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import scipy.special

PROGRAMS = {}


def program(make_args):
    def register(fun):
        PROGRAMS[fun.__name__] = (fun, make_args)
        return fun
    return register


def _a(a, rng):
    return (a,)


def _ax(a, rng):
    return a, rng.random(a.shape[1])


def _aX(a, rng):
    return a, rng.random((a.shape[1], 4))


def _a_seeds(a, rng):
    e = np.zeros((a.shape[0], 3))
    e[[0, 7, 19], [0, 1, 2]] = 1.0
    return a, e


def _a_labels(a, rng):
    y = np.zeros((a.shape[0], 3))
    known = rng.choice(a.shape[0], 12, replace=False)
    y[known, rng.integers(0, 3, 12)] = 1.0
    return a, y


def _a_classes(a, rng):
    return a, rng.integers(0, 3, a.shape[0])


def _a_query(a, rng):
    return a, np.array([2, 9, 14, 27])


def _a_pairs(a, rng):
    return a, rng.integers(0, a.shape[0], (25, 2))


def _a_factors(a, rng):
    return a, rng.standard_normal((a.shape[1], 5)) * 0.1


def _a_centers(a, rng):
    return a, rng.random((4, a.shape[1])) * 0.3


def _a_target(a, rng):
    return a, (rng.random(a.shape[0]) < 0.5).astype(float)


def _a_logits(a, rng):
    y = np.eye(3)[rng.integers(0, 3, a.shape[0])]
    return a, y, rng.standard_normal((a.shape[1], 3)) * 0.1


# -- networkx ---------------------------------------------------------------------------------------------------

@program(_a)
def nx_pagerank_scipy(A):
    # networkx.pagerank_scipy, as written there
    N = A.shape[0]
    alpha = 0.85
    S = A.sum(axis=1)
    S[S != 0] = 1.0 / S[S != 0]
    Q = sp.csr_array(sp.spdiags(S.T, 0, *A.shape))
    A = Q @ A
    x = np.repeat(1.0 / N, N)
    p = np.repeat(1.0 / N, N)
    is_dangling = np.where(S == 0)[0]
    for _ in range(30):
        x = alpha * (x @ A + sum(x[is_dangling]) * p) + (1 - alpha) * p
    return x / x.sum()


@program(_a)
def pagerank_where(A):
    # the same, the degree guard written with np.where and the dangling mass as a product
    n = A.shape[0]
    alpha = 0.85
    out_deg = np.asarray(A.sum(axis=1)).ravel()
    inv = np.where(out_deg > 0, 1.0 / np.where(out_deg > 0, out_deg, 1.0), 0.0)
    P = sp.diags(inv) @ A
    dangling = (out_deg == 0).astype(float)
    x = np.full(n, 1.0 / n)
    for _ in range(30):
        x = alpha * (P.T @ x + (dangling @ x) / n) + (1 - alpha) / n
    return x


@program(_a)
def pagerank_converged(A):
    # networkx's loop with its convergence test and early break
    n = A.shape[0]
    d = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(1.0 / np.maximum(d, 1.0)) @ A
    x = np.ones(n) / n
    for _ in range(100):
        xlast = x
        x = 0.85 * (x @ P) + 0.15 / n
        err = np.absolute(x - xlast).sum()
        if err < n * 1e-10:
            break
    return x


@program(_a)
def nx_hits(A):
    # networkx.hits_scipy: authority matrix, power iteration normalised by the max
    n = A.shape[0]
    M = A.T @ A
    x = np.ones((n,)) / n
    for _ in range(40):
        x = M @ x
        x /= x.max()
    a = x / x.sum()
    h = A @ a
    h /= h.sum()
    return h, a


@program(_a)
def nx_katz(A):
    # networkx.katz_centrality's power iteration on the transposed adjacency, normalised at the end
    alpha, beta = 0.05, 1.0
    n = A.shape[0]
    x = np.zeros(n)
    for _ in range(50):
        x = alpha * (A.T @ x) + beta
    return x / np.linalg.norm(x)


@program(_a)
def nx_eigenvector_centrality(A):
    # networkx.eigenvector_centrality: iterate with (A + I)^T, l2-normalised
    n = A.shape[0]
    x = np.ones(n) / n
    for _ in range(60):
        x = x + A.T @ x
        x = x / np.linalg.norm(x)
    return x


@program(_a)
def nx_degree_centrality(A):
    # in-degree, out-degree and total degree centrality (structure counts), s = 1 / (n - 1)
    n = A.shape[0]
    s = 1.0 / (n - 1)
    B = A != 0
    indeg = np.asarray(B.sum(axis=0)).ravel()
    outdeg = np.asarray(B.sum(axis=1)).ravel()
    return indeg * s, outdeg * s, (indeg + outdeg) * s


@program(_a)
def katz_spsolve(A):
    # Katz centrality by a sparse linear solve, as the closed form is usually written
    n = A.shape[0]
    alpha = 0.05
    M = sp.eye(n, format="csc") - alpha * A.T
    return spla.spsolve(M, np.ones(n))


# -- graph learning (Kipf's preprocessing, label spreading, spectral embedding) -----------------------------------

@program(_a)
def kipf_normalize_adj(adj):
    # gcn/utils.py normalize_adj, as written there
    adj = sp.coo_matrix(adj)
    rowsum = np.array(adj.sum(1))
    d_inv_sqrt = np.power(rowsum, -0.5).flatten()
    d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
    d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
    return adj.dot(d_mat_inv_sqrt).transpose().dot(d_mat_inv_sqrt).tocoo()


@program(_aX)
def gcn_preprocess_where(adj, features):
    # the same preprocessing with the self-loop added and the guard as np.where, then one propagation
    n = adj.shape[0]
    a_hat = adj + sp.eye(n)
    rowsum = np.asarray(a_hat.sum(axis=1)).ravel()
    d = np.where(rowsum > 0, rowsum ** -0.5, 0.0)
    norm = sp.diags(d) @ a_hat @ sp.diags(d)
    return norm @ (norm @ features)


@program(_a_labels)
def label_spreading(W, Y):
    # sklearn LabelSpreading: S = D^-1/2 W D^-1/2, F <- alpha S F + (1 - alpha) Y
    alpha = 0.2
    W = (W + W.T) / 2
    d = np.asarray(W.sum(axis=1)).ravel()
    d_inv_sqrt = 1.0 / np.sqrt(np.maximum(d, 1e-12))
    S = sp.diags(d_inv_sqrt) @ W @ sp.diags(d_inv_sqrt)
    F = Y.copy()
    for _ in range(30):
        F = alpha * (S @ F) + (1 - alpha) * Y
    return F.argmax(axis=1), F


@program(_aX)
def spectral_embedding_power(W, V):
    # normalised adjacency power iteration with the trivial vector deflated (spectral embedding by hand)
    W = W + W.T
    d = np.asarray(W.sum(axis=1)).ravel() + 1e-9
    d_half = np.sqrt(d)
    M = sp.diags(1.0 / d_half) @ W @ sp.diags(1.0 / d_half)
    v0 = d_half / np.linalg.norm(d_half)
    for _ in range(20):
        V = M @ V + V
        V = V - np.outer(v0, v0 @ V)
        V, _ = np.linalg.qr(V)
    return np.abs(V[:, 0]) / d_half


@program(_a)
def csgraph_laplacian(A):
    # scipy.sparse.csgraph.laplacian, normed, on the symmetrised graph
    from scipy.sparse import csgraph
    G = A + A.T
    L = csgraph.laplacian(G, normed=True)
    return L


@program(_a)
def laplacian_by_hand(A):
    # L = D - W and the random-walk Laplacian I - D^-1 W, as in most notebooks
    W = A.maximum(A.T)
    deg = np.asarray(W.sum(axis=1)).ravel()
    L = sp.diags(deg) - W
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    Lrw = sp.eye(W.shape[0]) - sp.diags(inv) @ W
    return L, Lrw


@program(_a_seeds)
def personalized_pagerank_multi(A, E):
    # random walk with restart from three seeds at once: R <- (1 - c) P^T R + c E
    c = 0.15
    deg = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(1.0 / np.maximum(deg, 1e-12)) @ A
    R = E.copy()
    for _ in range(25):
        R = (1 - c) * (P.T @ R) + c * E
    return R / R.sum(axis=0, keepdims=True)


@program(_ax)
def heat_diffusion_expm(A, x):
    # graph heat diffusion exp(-t L) x through scipy's expm_multiply
    W = A + A.T
    L = sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W
    return spla.expm_multiply(-0.1 * L, x)


@program(_a)
def k_hop_reachability(A):
    # who reaches whom in at most 3 hops: boolean sparse products
    R = A.astype(bool)
    reach = R.copy()
    frontier = R
    for _ in range(2):
        frontier = frontier @ R
        reach = reach + frontier
    return reach, np.asarray(reach.sum(axis=1)).ravel()


@program(_a)
def jaccard_similarity(A):
    # neighbourhood Jaccard between all node pairs
    B = (A > 0).astype(np.float64)
    inter = (B @ B.T).toarray()
    size = np.asarray(B.sum(axis=1)).ravel()
    union = size[:, None] + size[None, :] - inter
    return inter / np.maximum(union, 1.0)


@program(_a_pairs)
def common_neighbour_pairs(A, pairs):
    # link prediction: common neighbours, resource allocation and preferential attachment on candidate pairs
    B = ((A + A.T) > 0).astype(float)
    deg = np.asarray(B.sum(axis=1)).ravel()
    cn = B @ B
    ra = B @ sp.diags(1.0 / np.maximum(deg, 1.0)) @ B
    u, v = pairs[:, 0], pairs[:, 1]
    return (np.asarray(cn[u, v]).ravel(), np.asarray(ra[u, v]).ravel(), deg[u] * deg[v])


@program(_a)
def edge_degree_products(A):
    # degree products over the stored edges, through A.nonzero()
    deg = np.asarray((A != 0).sum(axis=1)).ravel()
    rows, cols = A.nonzero()
    return np.corrcoef(deg[rows], deg[cols])[0, 1]


@program(_a)
def transition_power(A):
    # three-step random-walk probabilities P^3 with the walk's own matrix product
    deg = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(1.0 / np.maximum(deg, 1e-12)) @ A
    P3 = P @ P @ P
    return P3.sum(axis=1), P3.diagonal()


# -- scikit-learn ---------------------------------------------------------------------------------------------

@program(_a)
def sklearn_tfidf_transformer(X):
    # TfidfTransformer(smooth_idf=True, norm="l2"): df by structure, idf as a diagonal, rows l2-normalised
    n_samples, n_features = X.shape
    df = np.asarray((X > 0).sum(axis=0)).ravel()
    df = df + 1
    n_samples = n_samples + 1
    idf = np.log(n_samples / df) + 1
    X = X @ sp.diags(idf)
    norms = spla.norm(X, axis=1)
    norms = np.where(norms == 0, 1.0, norms)
    return sp.diags(1.0 / norms) @ X


@program(_a)
def sklearn_document_frequency(X):
    # sklearn's _document_frequency on CSR, through the stored column indices
    X = sp.csr_matrix(X)
    df = np.bincount(X.indices, minlength=X.shape[1])
    return np.log((1 + X.shape[0]) / (1 + df)) + 1


@program(_a)
def sklearn_normalize_max(X):
    # normalize(X, norm="max"): each row divided by its largest absolute value
    norms = abs(X).max(axis=1).toarray().ravel()
    norms[norms == 0.0] = 1.0
    return X.multiply(1.0 / norms[:, None])


@program(_a)
def sklearn_standard_scale(X):
    # StandardScaler(with_mean=False) on sparse input: mean_variance_axis then inplace_column_scale
    mean = np.asarray(X.mean(axis=0)).ravel()
    var = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean ** 2
    scale = np.sqrt(var)
    scale = np.where(scale < 10 * np.finfo(scale.dtype).eps, 1.0, scale)
    return X @ sp.diags(1.0 / scale), var


@program(_a_centers)
def sklearn_euclidean_distances(X, C):
    # euclidean_distances(X, C, squared=True) with the row norms of the sparse X
    XX = np.asarray(X.multiply(X).sum(axis=1))
    YY = (C ** 2).sum(axis=1)[np.newaxis, :]
    distances = -2 * (X @ C.T)
    distances += XX
    distances += YY
    return np.maximum(distances, 0)


@program(_a_centers)
def kmeans_lloyd_step(X, C):
    # two Lloyd steps: squared distances, argmin labels, centres as one-hot means, inertia
    k = C.shape[0]
    x_sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    for _ in range(2):
        d2 = x_sq[:, None] - 2 * (X @ C.T) + (C * C).sum(axis=1)[None, :]
        labels = d2.argmin(axis=1)
        onehot = (labels[:, None] == np.arange(k)).astype(float)
        counts = onehot.sum(axis=0)
        C = (X.T @ onehot).T / np.maximum(counts, 1.0)[:, None]
    inertia = d2.min(axis=1).sum()
    return labels, C, inertia


@program(_a_classes)
def complement_nb(X, y):
    # ComplementNB fit and joint log likelihood, the class indicator built with np.eye
    Y = np.eye(3)[y]
    feature_count = (X.T @ Y).T
    feature_all = feature_count.sum(axis=0)
    comp_count = feature_all + 1.0 - feature_count
    logged = np.log(comp_count / comp_count.sum(axis=1, keepdims=True))
    feature_log_prob = -logged
    jll = X @ feature_log_prob.T
    return jll.argmax(axis=1), jll


@program(_a)
def truncated_svd_variance(X):
    # TruncatedSVD's explained variance ratio from a few randomized-free power steps
    rng_v = np.linspace(1.0, 2.0, X.shape[1] * 3).reshape(X.shape[1], 3)
    Q, _ = np.linalg.qr(X @ rng_v)
    for _ in range(3):
        Q, _ = np.linalg.qr(X @ (X.T @ Q))
    B = (X.T @ Q).T
    _, s, Vt = np.linalg.svd(B, full_matrices=False)
    Xt = X @ Vt.T
    exp_var = np.var(Xt, axis=0)
    full_var = np.var(X.toarray(), axis=0).sum()
    return exp_var / full_var


@program(_a_logits)
def multinomial_logreg_grad(X, Y, W):
    # softmax regression: log-probabilities through scipy.special.logsumexp, gradient X^T (P - Y)
    Z = X @ W
    logp = Z - scipy.special.logsumexp(Z, axis=1)[:, None]
    P = np.exp(logp)
    grad = X.T @ (P - Y) / X.shape[0]
    loss = -(Y * logp).sum() / X.shape[0]
    return loss, grad


@program(_a_target)
def logistic_newton_expit(X, y):
    # one Newton step for logistic regression: expit, Hessian X^T diag(w) X + lam I, dense solve
    n, d = X.shape
    w = np.zeros(d)
    for _ in range(2):
        p = scipy.special.expit(X @ w)
        g = X.T @ (p - y) + 1e-2 * w
        H = (X.T @ sp.diags(p * (1 - p)) @ X).toarray() + 1e-2 * np.eye(d)
        w = w - np.linalg.solve(H, g)
    return w


# -- recommendation and retrieval -----------------------------------------------------------------------------

@program(_a_factors)
def implicit_als_batch(Cui, Y):
    # implicit-ALS user step with one shared system (confidence 1 + alpha r, preference r > 0)
    alpha, reg = 40.0, 0.1
    k = Y.shape[1]
    P = (Cui > 0).astype(float)
    C = P + alpha * Cui
    YtY = Y.T @ Y
    A = YtY + reg * np.eye(k)
    b = C.multiply(P) @ Y
    X = np.linalg.solve(A, b.T).T
    return X, X @ Y.T


@program(_a_query)
def okapi_bm25(X, query):
    # Okapi BM25 over all documents for a query's terms, idf as in rank_bm25
    k1, b = 1.5, 0.75
    n = X.shape[0]
    dl = np.asarray(X.sum(axis=1)).ravel()
    avgdl = dl.mean()
    df = np.asarray((X > 0).sum(axis=0)).ravel()
    idf = np.log((n - df + 0.5) / (df + 0.5) + 1)
    tf = X[:, query].toarray()
    denom = tf + k1 * (1 - b + b * dl / avgdl)[:, None]
    return (idf[query] * tf * (k1 + 1) / denom).sum(axis=1)


@program(_a)
def cooccurrence_counts(X):
    # term co-occurrence counts (documents in which both terms occur), the diagonal removed
    B = (X > 0).astype(np.int64)
    C = B.T @ B
    C = C - sp.diags(C.diagonal())
    return C, np.asarray(C.sum(axis=0)).ravel()


@program(_a)
def textrank(X):
    # TextRank over sentences: cosine similarity graph without self loops, then a PageRank
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    Xn = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    S = Xn @ Xn.T
    S = S - sp.diags(S.diagonal())
    w = np.asarray(S.sum(axis=1)).ravel()
    P = sp.diags(1.0 / np.maximum(w, 1e-12)) @ S
    n = X.shape[0]
    r = np.ones(n) / n
    for _ in range(30):
        r = 0.15 / n + 0.85 * (P.T @ r)
    return r


@program(_a)
def sparse_row_softmax(S):
    # softmax over each row's stored scores, through the COO triplets
    coo = S.tocoo()
    m = S.max(axis=1).toarray().ravel()
    vals = np.exp(coo.data - m[coo.row])
    E = sp.csr_matrix((vals, (coo.row, coo.col)), shape=S.shape)
    return E.multiply(1.0 / E.sum(axis=1))


# -- statistics and least squares -------------------------------------------------------------------------------

@program(_a)
def sparse_covariance(X):
    # covariance of the columns without centring the sparse matrix (ddof = 1), and the correlation
    n = X.shape[0]
    mu = np.asarray(X.mean(axis=0)).ravel()
    C = ((X.T @ X).toarray() - n * np.outer(mu, mu)) / (n - 1)
    sd = np.sqrt(np.diag(C))
    sd = np.where(sd == 0, 1.0, sd)
    return C, C / np.outer(sd, sd)


@program(_ax)
def ridge_normal_equations(X, y):
    # ridge by the normal equations, and the same through a Cholesky factor
    lam = 0.5
    d = X.shape[1]
    G = (X.T @ X).toarray() + lam * np.eye(d)
    rhs = X.T @ y
    w = np.linalg.solve(G, rhs)
    L = np.linalg.cholesky(G)
    z = np.linalg.solve(L, rhs)
    w2 = np.linalg.solve(L.T, z)
    return w, w2, np.linalg.norm(X @ w - y)


@program(_ax)
def gauss_seidel_triangular(A, b):
    # Gauss-Seidel on a diagonally dominant matrix through scipy's triangular solve
    n = A.shape[0]
    M = A + sp.diags(np.asarray(A.sum(axis=1)).ravel() + 1.0)
    L = sp.tril(M, format="csr")
    U = sp.triu(M, k=1, format="csr")
    x = np.zeros(n)
    for _ in range(5):
        x = spla.spsolve_triangular(L, b - U @ x, lower=True)
    return x
