"""A corpus of algorithm bodies as their users write them (text retrieval, recommendation, graph learning and
analytics, PDE solvers, statistics, linear models, iterative methods), each written the natural scipy / NumPy way
before it was ever run under ``@splyce.jit``. tests/tracer/test_program_corpus.py runs each on every operand kind
against the same function without jit.

Each entry: ``name -> (function, argument maker)``; the maker takes the sparse operand (a square matrix with
nonnegative entries, some rows empty) already converted to the kind under test, and a seeded generator, and
returns the arguments. Dense arguments are float64 NumPy arrays.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

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


def _axy(a, rng):
    return a, rng.random(a.shape[1]), rng.random(a.shape[0])


# -- text retrieval -------------------------------------------------------------------------------------------

@program(_a)
def tfidf(counts):
    n_docs = counts.shape[0]
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = np.log((1 + n_docs) / (1 + df)) + 1
    tf = counts.multiply(1.0 / np.maximum(np.asarray(counts.sum(axis=1)), 1.0))
    return tf.multiply(idf[None, :])


@program(_ax)
def bm25_scores(counts, query):
    k1, b = 1.2, 0.75
    doc_len = np.asarray(counts.sum(axis=1)).ravel()
    avg = doc_len.mean()
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = np.log(1 + (counts.shape[0] - df + 0.5) / (df + 0.5))
    weights = counts.multiply(idf[None, :] * (k1 + 1))
    denom = k1 * (1 - b + b * doc_len / avg)
    return (weights @ query) / (1 + denom)


@program(_a)
def cosine_similarity(x):
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    xn = sp.diags(1.0 / norms) @ x
    return xn @ xn.T


@program(_ax)
def query_cosine(x, q):
    scores = x @ q
    norms = np.sqrt(np.asarray(x.power(2).sum(axis=1)).ravel()) * np.linalg.norm(q)
    return scores / np.where(norms == 0, 1.0, norms)


@program(_a)
def row_l2_normalize(x):
    norms = np.sqrt(x.multiply(x).sum(axis=1))
    return x.multiply(1 / np.maximum(norms, 1e-12))


@program(_a)
def row_l1_normalize(x):
    s = abs(x).sum(axis=1)
    s = np.asarray(s).ravel()
    s[s == 0] = 1
    return sp.diags(1 / s) @ x


@program(_ax)
def top_score(x, q):
    return (x @ q).max()


@program(_a)
def vocabulary_stats(counts):
    term_freq = np.asarray(counts.sum(axis=0)).ravel()
    doc_freq = counts.getnnz(axis=0)
    return term_freq, doc_freq


# -- recommendation -------------------------------------------------------------------------------------------

@program(_a)
def item_item_similarity(r):
    co = r.T @ r
    d = np.sqrt(co.diagonal())
    d[d == 0] = 1
    return co.multiply(1 / np.outer(d, d))


@program(_aX)
def predict_ratings(r, v):
    u = r @ v
    return u @ v.T


@program(_aX)
def observed_entries_loss(r, u):
    pred = r.copy()
    pred.data = np.ones_like(pred.data)
    err = r - pred.multiply(u @ u.T)
    return (err.multiply(err)).sum()


@program(_aX)
def mf_gradient(r, u):
    mask = (r != 0).astype(float)
    pred = mask.multiply(u @ u.T)
    resid = pred - r
    return resid @ u + resid.T @ u + 0.01 * u


@program(_a)
def item_popularity(r):
    counts = np.asarray((r > 0).sum(axis=0)).ravel()
    means = np.asarray(r.sum(axis=0)).ravel() / np.maximum(counts, 1)
    return counts, means


@program(_a)
def user_mean_centering(r):
    sums = np.asarray(r.sum(axis=1)).ravel()
    counts = np.diff(r.tocsr().indptr)
    means = sums / np.maximum(counts, 1)
    centered = r - sp.diags(means) @ (r != 0)
    return centered


@program(_aX)
def als_user_step(r, v):
    k = v.shape[1]
    gram = v.T @ v + 0.1 * np.eye(k)
    rhs = (r @ v).T
    return np.linalg.solve(gram, rhs).T


@program(_ax)
def user_based_scores(r, u):
    sims = r @ (r.T @ u)
    return sims / (np.abs(sims).sum() + 1e-9)


# -- graph learning -------------------------------------------------------------------------------------------

@program(_a)
def gcn_normalize(adj):
    a_hat = adj + sp.eye(adj.shape[0])
    deg = np.array(a_hat.sum(1)).flatten()
    d_inv_sqrt = np.power(deg, -0.5)
    d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.0
    d_mat = sp.diags(d_inv_sqrt)
    return d_mat @ a_hat @ d_mat


@program(_aX)
def gcn_layer(adj, h):
    w = np.linspace(-1, 1, h.shape[1] * 3).reshape(h.shape[1], 3)
    deg = np.asarray(adj.sum(axis=1)).ravel() + 1.0
    norm = 1.0 / np.sqrt(deg)
    ah = norm[:, None] * (adj @ (norm[:, None] * h) + norm[:, None] * h)
    return np.maximum(ah @ w, 0)


@program(_aX)
def sgc_features(adj, x):
    deg = np.asarray(adj.sum(axis=1)).ravel()
    deg[deg == 0] = 1
    p = sp.diags(1 / deg) @ adj
    for _ in range(3):
        x = p @ x
    return x


@program(_aX)
def appnp(adj, h):
    alpha = 0.1
    deg = np.asarray(adj.sum(axis=1)).ravel()
    p = adj.multiply(1.0 / np.maximum(deg, 1)[:, None])
    z = h
    for _ in range(5):
        z = (1 - alpha) * (p @ z) + alpha * h
    return z


@program(_aX)
def graphsage_mean(adj, h):
    deg = np.asarray(adj.getnnz(axis=1))
    neigh = (adj @ h) / np.maximum(deg, 1)[:, None]
    return np.concatenate([h, neigh], axis=1)


@program(_aX)
def label_propagation(adj, y0):
    deg = np.asarray(adj.sum(axis=1)).ravel()
    p = sp.diags(1.0 / np.maximum(deg, 1e-12)) @ adj
    y = y0.copy()
    for _ in range(10):
        y = 0.9 * (p @ y) + 0.1 * y0
    return y


@program(_a)
def edge_dropout_free_laplacian(adj):
    deg = np.asarray(adj.sum(axis=1)).ravel()
    return sp.diags(deg) - adj


@program(_aX)
def gat_like_scores(adj, h):
    s = h @ np.ones(h.shape[1])
    scores = adj.multiply(s[:, None] + s[None, :])
    return scores.sum(axis=1)


# -- graph analytics ------------------------------------------------------------------------------------------

@program(_ax)
def pagerank(adj, x0):
    n = adj.shape[0]
    out_deg = np.asarray(adj.sum(axis=1)).ravel()
    out_deg[out_deg == 0] = 1
    p = (sp.diags(1 / out_deg) @ adj).T
    x = x0 / x0.sum()
    for _ in range(20):
        x = 0.85 * (p @ x) + 0.15 / n
    return x


@program(_ax)
def personalized_pagerank(adj, seed):
    deg = np.asarray(adj.sum(axis=0)).ravel()
    deg[deg == 0] = 1.0
    p = adj.multiply(1.0 / deg[None, :])
    r = seed / seed.sum()
    s = r
    for _ in range(15):
        r = 0.8 * (p @ r) + 0.2 * s
    return r


@program(_ax)
def hits(adj, h0):
    h = h0
    for _ in range(10):
        a = adj.T @ h
        a = a / np.linalg.norm(a)
        h = adj @ a
        h = h / np.linalg.norm(h)
    return h, a


@program(_ax)
def katz(adj, x0):
    beta = 0.01
    x = np.zeros_like(x0)
    for _ in range(10):
        x = beta * (adj.T @ x) + 1.0
    return x


@program(_a)
def triangle_count(adj):
    a = ((adj + adj.T) != 0).astype(float)
    return (a @ a).multiply(a).sum() / 6


@program(_a)
def local_clustering(adj):
    a = ((adj + adj.T) != 0).astype(float)
    tri = np.asarray((a @ a).multiply(a).sum(axis=1)).ravel() / 2
    deg = np.asarray(a.sum(axis=1)).ravel()
    return np.where(deg > 1, 2 * tri / np.maximum(deg * (deg - 1), 1), 0.0)


@program(_a)
def degree_stats(adj):
    deg = adj.getnnz(axis=1)
    return deg.mean(), deg.max(), deg.std()


@program(_a)
def weighted_degree_centrality(adj):
    w = np.asarray(adj.sum(axis=1)).ravel()
    return w / w.max()


@program(_a)
def two_hop_counts(adj):
    b = (adj != 0).astype(np.float64)
    return (b @ b).sum(axis=1)


@program(_ax)
def power_iteration(adj, x0):
    x = x0
    lam = 0.0
    for _ in range(15):
        y = adj @ x
        lam = np.linalg.norm(y)
        x = y / lam
    return lam, x


# -- PDE solvers ----------------------------------------------------------------------------------------------

def _laplacian_args(a, rng):
    return a, rng.random(a.shape[0])


@program(_laplacian_args)
def jacobi(adj, b):
    a = sp.diags(np.asarray(abs(adj).sum(axis=1)).ravel() + 1.0) - adj
    d = a.diagonal()
    x = np.zeros_like(b)
    for _ in range(20):
        x = x + (b - a @ x) / d
    return x


@program(_laplacian_args)
def weighted_jacobi_residual(adj, b):
    a = sp.diags(np.asarray(abs(adj).sum(axis=1)).ravel() + 1.0) - adj
    dinv = 1.0 / a.diagonal()
    x = np.zeros(a.shape[0])
    for _ in range(10):
        x += (2.0 / 3.0) * dinv * (b - a.dot(x))
    return np.linalg.norm(b - a.dot(x))


@program(_laplacian_args)
def richardson(adj, b):
    a = sp.diags(np.asarray(abs(adj).sum(axis=1)).ravel() + 1.0) - adj
    omega = 1.0 / (2 * a.diagonal().max())
    x = np.zeros_like(b)
    for _ in range(25):
        x = x + omega * (b - a @ x)
    return x


@program(_laplacian_args)
def heat_explicit(adj, u0):
    lap = sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj
    dt = 0.1 / max(1.0, float(np.asarray(adj.sum(axis=1)).max()))
    u = u0
    for _ in range(10):
        u = u - dt * (lap @ u)
    return u


@program(_laplacian_args)
def conjugate_gradient(adj, b):
    a = sp.diags(np.asarray(abs(adj).sum(axis=1)).ravel() + 1.0) - adj
    x = np.zeros_like(b)
    r = b - a @ x
    p = r.copy()
    rs = r @ r
    for _ in range(8):
        ap = a @ p
        alpha = rs / (p @ ap)
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


@program(_laplacian_args)
def chebyshev_smoother(adj, b):
    a = sp.diags(np.asarray(abs(adj).sum(axis=1)).ravel() + 1.0) - adj
    x = np.zeros_like(b)
    r = b.copy()
    d = 1.0 / a.diagonal()
    for _ in range(4):
        x = x + 0.5 * d * r
        r = b - a @ x
    return x, r


@program(_laplacian_args)
def stencil_energy(adj, u):
    lap = sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj
    return 0.5 * u @ (lap @ u)


# -- statistics -----------------------------------------------------------------------------------------------

@program(_a)
def column_mean_var(x):
    n = x.shape[0]
    mean = np.asarray(x.mean(axis=0)).ravel()
    sq = np.asarray(x.multiply(x).mean(axis=0)).ravel()
    return mean, sq - mean ** 2


@program(_a)
def column_std_dense(x):
    d = x.toarray()
    return d.std(axis=0), d.var(axis=0, ddof=1)


@program(_a)
def covariance(x):
    n = x.shape[0]
    mu = np.asarray(x.mean(axis=0)).ravel()
    xtx = (x.T @ x).toarray()
    return xtx / n - np.outer(mu, mu)


@program(_a)
def correlation_of_columns(x):
    n = x.shape[0]
    mu = np.asarray(x.mean(axis=0)).ravel()
    cov = (x.T @ x).toarray() / n - np.outer(mu, mu)
    sd = np.sqrt(np.clip(np.diag(cov), 1e-12, None))
    return cov / np.outer(sd, sd)


@program(_ax)
def chi2_scores(x, y):
    y_bin = (y > 0.5).astype(float)
    observed = x.T @ y_bin
    feature_count = np.asarray(x.sum(axis=0)).ravel()
    expected = feature_count * y_bin.mean()
    return (observed - expected) ** 2 / np.maximum(expected, 1e-12)


@program(_ax)
def naive_bayes_logprob(x, w):
    log_w = np.log(w + 1e-3)
    return x @ log_w


@program(_a)
def frobenius_and_max(x):
    return np.sqrt(x.multiply(x).sum()), abs(x).max()


@program(_a)
def zscore_nonzeros(x):
    mean = x.sum() / x.nnz
    return x - mean * (x != 0)


@program(_a)
def sparsity_profile(x):
    rows = np.diff(x.tocsr().indptr)
    return rows.min(), rows.max(), x.nnz / (x.shape[0] * x.shape[1])


# -- linear models --------------------------------------------------------------------------------------------

@program(_axy)
def logistic_gradient(x, w, y):
    z = x @ w
    p = 1.0 / (1.0 + np.exp(-z))
    return x.T @ (p - y) / x.shape[0]


@program(_axy)
def logistic_loss(x, w, y):
    z = x @ w
    return np.mean(np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0) - y * z)


@program(_axy)
def ridge_gradient(x, w, y):
    r = x @ w - y
    return x.T @ r + 0.1 * w


@program(_axy)
def hinge_subgradient(x, w, y):
    sign = 2 * (y > 0.5) - 1
    margin = sign * (x @ w)
    active = (margin < 1).astype(float)
    return -(x.T @ (active * sign)) / x.shape[0] + 0.01 * w


@program(_axy)
def lasso_ista_step(x, w, y):
    step, lam = 0.01, 0.1
    g = x.T @ (x @ w - y)
    v = w - step * g
    return np.sign(v) * np.maximum(np.abs(v) - step * lam, 0.0)


@program(_axy)
def softmax_scores(x, w, y):
    z = x @ np.outer(w, np.arange(3.0))
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# -- iterative and spectral methods ---------------------------------------------------------------------------

@program(_ax)
def rayleigh_quotient(a, x):
    s = a + a.T
    return (x @ (s @ x)) / (x @ x)


@program(_ax)
def lanczos_three_steps(a, v0):
    s = a + a.T
    v = v0 / np.linalg.norm(v0)
    alphas = []
    w = s @ v
    alpha = w @ v
    alphas.append(alpha)
    w = w - alpha * v
    beta = np.linalg.norm(w)
    v_prev, v = v, w / beta
    w = s @ v - beta * v_prev
    alphas.append(w @ v)
    return np.array(alphas)


@program(_a)
def symmetric_part_norm(a):
    s = (a + a.T) / 2
    return abs(s - s.T).sum(), s.sum()


@program(_ax)
def matrix_function_series(a, x):
    s = a / (abs(a).sum() + 1.0)
    out = x.copy()
    term = x
    for k in range(1, 6):
        term = s @ term / k
        out = out + term
    return out


@program(_a)
def squared_matrix_trace(a):
    return (a @ a).diagonal().sum()


@program(_a)
def gram_diagonal(a):
    return (a.multiply(a)).sum(axis=0)


@program(_ax)
def residual_norms(a, x):
    r = a @ x - x
    return np.linalg.norm(r), np.abs(r).max()


@program(_a)
def block_features(a):
    deg = np.asarray(a.sum(axis=1)).ravel()
    nnz = a.getnnz(axis=1)
    return np.stack([deg, nnz, deg / np.maximum(nnz, 1)], axis=1)


@program(_a)
def scaled_adjacency_power(a):
    s = a.multiply(1.0 / (a.max() + 1.0))
    return (s @ s @ s).sum(axis=0)


@program(_ax)
def sparse_dense_mixed(a, x):
    b = a.T.tocsr()
    return b @ x + a @ x


@program(_a)
def threshold_pattern(a):
    strong = a.multiply(a > 0.5)
    return strong.sum(), (strong != 0).sum()
