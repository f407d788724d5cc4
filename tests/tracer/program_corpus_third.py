"""A third corpus of algorithm bodies, from fields and idioms the first two (tests/tracer/program_corpus.py,
tests/tracer/program_corpus_more.py) do not hold: survival statistics (Kaplan-Meier, Nelson-Aalen, Cox gradients),
matrix factorisation steps (NMF multiplicative updates, sparse PCA deflation, randomized range finders),
BM25 variants (BM25+, BM25L), item-item collaborative filtering with adjusted cosine, spectral clustering
steps, Markov chains (stationary distribution, absorption), Poisson / heat stencils with SOR and red-black
sweeps, graph diffusion and Laplacian smoothing, modularity and conductance, co-occurrence NPMI, Poisson
regression. Each was written the natural scipy / NumPy way before it was ever run under ``@splyce.jit``;
tests/tracer/test_program_corpus_third.py runs each on every operand kind (scipy matrix and array classes, pydata,
SparseTensor) against the same function without jit.

Each entry: ``name -> (function, argument maker)`` as in tests/tracer/program_corpus.py: the maker takes the sparse
operand (a 40 x 40 matrix with nonnegative entries, row 3 and column 5 empty) converted to the kind under test,
and a seeded generator.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

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


def _ay(a, rng):
    return a, rng.random(a.shape[0])


def _aX(a, rng):
    return a, rng.random((a.shape[1], 3))


def _aWH(a, rng):
    return a, rng.random((a.shape[0], 4)) + 0.1, rng.random((4, a.shape[1])) + 0.1


def _a_survival(a, rng):
    n = a.shape[0]
    return a, rng.random(n) * 10.0, (rng.random(n) < 0.7).astype(float), rng.standard_normal(a.shape[1]) * 0.1


def _a_query(a, rng):
    return a, np.array([1, 6, 7, 22, 30])


def _a_labels(a, rng):
    return a, rng.integers(0, 3, a.shape[0])


def _a_set(a, rng):
    return a, (rng.random(a.shape[0]) < 0.4).astype(float)


def _a_counts(a, rng):
    return a, rng.poisson(2.0, a.shape[0]).astype(float), rng.standard_normal(a.shape[1]) * 0.05


# -- survival statistics ----------------------------------------------------------------------------------------

@program(_a_survival)
def kaplan_meier(x, time, event, beta):
    order = time.argsort()
    d = event[order]
    at_risk = len(time) - np.arange(len(time))
    survival = (1.0 - d / at_risk).cumprod()
    risk = x @ beta
    return survival, risk[order]


@program(_a_survival)
def nelson_aalen(x, time, event, beta):
    order = np.argsort(time)
    at_risk = np.arange(len(time), 0, -1)
    hazard = np.cumsum(event[order] / at_risk)
    return hazard


@program(_a_survival)
def cox_gradient(x, time, event, beta):
    order = np.argsort(-time)              # descending time: the risk set is a prefix
    eta = x @ beta
    w = np.exp(eta)[order]
    xw = (x.multiply(np.exp(eta)[:, None])).toarray()[order]
    risk_w = np.cumsum(w)
    risk_xw = np.cumsum(xw, axis=0)
    xs = x.toarray()[order]
    ev = event[order]
    grad = (ev[:, None] * (xs - risk_xw / risk_w[:, None])).sum(axis=0)
    loglik = (ev * (eta[order] - np.log(risk_w))).sum()
    return grad, loglik


# -- matrix factorisation steps ---------------------------------------------------------------------------------

@program(_aWH)
def nmf_multiplicative_update(v, w, h):
    for _ in range(2):
        h = h * (w.T @ v) / (w.T @ w @ h + 1e-9)
        w = w * (v @ h.T) / (w @ (h @ h.T) + 1e-9)
    err = np.linalg.norm(v.toarray() - w @ h)
    return w, h, err


@program(_aWH)
def nmf_kl_update(v, w, h):
    wh = w @ h
    ratio = v.multiply(1.0 / wh)
    h = h * (w.T @ ratio) / w.sum(axis=0)[:, None]
    return h


@program(_aX)
def sparse_pca_deflation(x, q):
    xc = x.toarray() - x.mean(axis=0)
    cov = xc.T @ xc / (x.shape[0] - 1)
    comps = []
    v = q[:, 0]
    for _ in range(2):
        for _ in range(8):
            v = cov @ v
            v = np.sign(v) * np.maximum(np.abs(v) - 1e-4, 0.0)
            v = v / np.linalg.norm(v)
        comps.append(v)
        cov = cov - (v @ cov @ v) * np.outer(v, v)
    return np.column_stack(comps)


@program(_aX)
def randomized_range_finder(a, omega):
    y = a @ omega
    q, _ = np.linalg.qr(y)
    y = a @ (a.T @ q)
    q, _ = np.linalg.qr(y)
    b = q.T @ a
    s = np.linalg.svd(np.asarray(b), compute_uv=False)
    return s


@program(_aX)
def truncated_svd_error(a, omega):
    q, _ = np.linalg.qr(a @ omega)
    b = (a.T @ q).T
    approx = q @ b
    return np.linalg.norm(a.toarray() - approx) / sp.linalg.norm(a)


# -- text retrieval -------------------------------------------------------------------------------------------

@program(_a_query)
def bm25_plus(tf, query):
    k1, b, delta = 1.2, 0.75, 1.0
    n_docs = tf.shape[0]
    dl = np.asarray(tf.sum(axis=1)).ravel()
    avgdl = dl.mean()
    df = np.asarray((tf > 0).sum(axis=0)).ravel()
    idf = np.log((n_docs + 1) / (df + 0.5))
    q = tf[:, query].toarray()
    norm = k1 * (1 - b + b * dl / avgdl)
    score = (idf[query] * ((q * (k1 + 1)) / (q + norm[:, None]) + delta * (q > 0))).sum(axis=1)
    return score


@program(_a_query)
def bm25l(tf, query):
    k1, b, delta = 1.5, 0.75, 0.5
    dl = np.asarray(tf.sum(axis=1)).ravel()
    ctd = tf[:, query].toarray() / (1 - b + b * dl / dl.mean())[:, None]
    df = np.asarray(tf.getnnz(axis=0) if hasattr(tf, "getnnz") else (tf != 0).sum(axis=0)).ravel()
    idf = np.log((tf.shape[0] + 1) / (df[query] + 0.5))
    return (idf * (k1 + 1) * (ctd + delta) / (k1 + ctd + delta) * (ctd > 0)).sum(axis=1)


@program(_a_query)
def tfidf_cosine_knn(tf, query):
    idf = np.log(tf.shape[0] / (1.0 + np.asarray((tf > 0).sum(axis=0)).ravel()))
    x = tf @ sp.diags(idf)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    x = sp.diags(1.0 / norms) @ x
    q = x[query]
    sims = (q @ x.T).toarray()
    top = np.argsort(-sims, axis=1)[:, :5]
    return top, np.take_along_axis(sims, top, axis=1)


@program(_a)
def cooccurrence_npmi(x):
    b = (x > 0).astype(float)
    co = (b.T @ b).toarray()
    n = b.shape[0]
    p = np.diag(co) / n
    pxy = co / n
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(pxy / np.outer(p, p))
        npmi = pmi / -np.log(pxy)
    npmi = np.where(pxy > 0, npmi, -1.0)
    return npmi


# -- recommendation -------------------------------------------------------------------------------------------

@program(_a)
def adjusted_cosine_items(r):
    counts = np.diff(r.tocsr().indptr)
    sums = np.asarray(r.sum(axis=1)).ravel()
    means = sums / np.maximum(counts, 1)
    centered = r - sp.diags(means) @ (r != 0)
    num = (centered.T @ centered).toarray()
    sq = np.sqrt(np.diag(num))
    return num / np.maximum(np.outer(sq, sq), 1e-12)


@program(_ay)
def item_cf_predict(r, user_weights):
    sim = (r.T @ r).toarray()
    np.fill_diagonal(sim, 0.0)
    norm = np.abs(sim).sum(axis=1)
    scores = (r.T @ user_weights) @ sim / np.maximum(norm, 1e-12)
    return scores


@program(_ay)
def slope_one_deviations(r, user):
    b = (r != 0).astype(float)
    card = (b.T @ b).toarray()
    dev = ((r.T @ b) - (b.T @ r)).toarray() / np.maximum(card, 1.0)
    u = user * (user > 0.5)
    rated = (u > 0).astype(float)
    pred = ((dev + u[None, :]) * card * rated[None, :]).sum(axis=1) / np.maximum(card @ rated, 1.0)
    return pred


# -- graphs: spectral, Markov, diffusion --------------------------------------------------------------------------

@program(_aX)
def spectral_embedding_step(adj, q):
    a = (adj + adj.T) / 2
    deg = np.asarray(a.sum(axis=1)).ravel()
    dinv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    m = sp.diags(dinv) @ a @ sp.diags(dinv)
    for _ in range(5):
        q, _ = np.linalg.qr(m @ q + q)
    rows = np.linalg.norm(q, axis=1)
    return q / np.maximum(rows, 1e-12)[:, None]


@program(_a)
def markov_stationary(adj):
    n = adj.shape[0]
    p = adj + sp.identity(n) * 0.01
    p = sp.diags(1.0 / np.asarray(p.sum(axis=1)).ravel()) @ p
    pi = np.full(n, 1.0 / n)
    for _ in range(30):
        pi = p.T @ pi
    return pi / pi.sum()


@program(_a_set)
def markov_absorption_time(adj, absorbing):
    n = adj.shape[0]
    p = adj + sp.eye(n)
    p = sp.diags(1.0 / np.asarray(p.sum(axis=1)).ravel()) @ p
    transient = 1.0 - absorbing
    t = np.zeros(n)
    for _ in range(15):
        t = transient * (1.0 + p @ t)
    return t


@program(_ay)
def random_walk_diffusion(adj, x0):
    deg = np.asarray(adj.sum(axis=0)).ravel()
    w = adj @ sp.diags(1.0 / np.where(deg > 0, deg, 1.0))
    x = x0
    trace = []
    for _ in range(4):
        x = 0.5 * x + 0.5 * (w @ x)
        trace.append(x.sum())
    return x, np.array(trace)


@program(_aX)
def laplacian_smoothing(adj, signal):
    a = adj + adj.T
    lap = sp.diags(np.asarray(a.sum(axis=1)).ravel()) - a
    lam = 0.1 / (np.abs(lap).sum(axis=1).max() + 1.0)
    s = signal
    for _ in range(5):
        s = s - lam * (lap @ s)
    return s


@program(_a_labels)
def modularity(adj, labels):
    a = adj + adj.T
    m2 = a.sum()
    k = np.asarray(a.sum(axis=1)).ravel()
    onehot = np.eye(3)[labels]
    within = (onehot * (a @ onehot)).sum()
    ks = onehot.T @ k
    return within / m2 - (ks ** 2).sum() / m2 ** 2


@program(_a_set)
def conductance(adj, member):
    a = adj + adj.T
    vol = np.asarray(a.sum(axis=1)).ravel()
    cut = member @ (a @ (1 - member))
    return cut / min(member @ vol, (1 - member) @ vol)


@program(_ay)
def hub_authority_normalized(adj, h):
    for _ in range(10):
        a = adj.T @ h
        a = a / np.linalg.norm(a)
        h = adj @ a
        h = h / np.linalg.norm(h)
    return h, a


@program(_a)
def katz_by_series(adj):
    alpha = 0.5 / (abs(adj).sum(axis=1).max() + 1.0)
    n = adj.shape[0]
    x = np.ones(n)
    total = np.zeros(n)
    for _ in range(8):
        x = alpha * (adj.T @ x)
        total += x
    return total


# -- PDE solvers ----------------------------------------------------------------------------------------------

def _poisson(adj):
    """A diagonally dominant system from the graph: D - (A + A^T) / 2 with D = row sums + 1."""
    s = (adj + adj.T) * 0.5
    return sp.diags(np.asarray(s.sum(axis=1)).ravel() + 1.0) - s


@program(_ay)
def sor_sweeps(adj, b):
    a = _poisson(adj).tocsr()
    omega = 1.2
    d = sp.diags(a.diagonal())
    lower = sp.tril(a, k=-1)
    upper = sp.triu(a, k=1)
    m = d + omega * lower
    x = np.zeros_like(b)
    for _ in range(3):
        x = spla.spsolve_triangular(m.tocsr(), omega * b - (omega * upper + (omega - 1) * d) @ x, lower=True)
    return x


@program(_ay)
def red_black_jacobi(adj, b):
    a = _poisson(adj)
    d = a.diagonal()
    n = a.shape[0]
    red = (np.arange(n) % 2 == 0)
    x = np.zeros(n)
    for _ in range(4):
        x = np.where(red, x + (b - a @ x) / d, x)
        x = np.where(~red, x + (b - a @ x) / d, x)
    return x


@program(_ay)
def jacobi_pcg(adj, b):
    a = _poisson(adj)
    minv = 1.0 / a.diagonal()
    x = np.zeros_like(b)
    r = b - a @ x
    z = minv * r
    p = z.copy()
    rz = r @ z
    for _ in range(8):
        ap = a @ p
        alpha = rz / (p @ ap)
        x = x + alpha * p
        r = r - alpha * ap
        z = minv * r
        rz_new = r @ z
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x, np.linalg.norm(r)


@program(_ay)
def heat_crank_nicolson(adj, u):
    a = adj + adj.T
    lap = sp.diags(np.asarray(a.sum(axis=1)).ravel()) - a
    dt = 0.01
    left = sp.eye(adj.shape[0]) + 0.5 * dt * lap
    right = sp.eye(adj.shape[0]) - 0.5 * dt * lap
    d = left.diagonal()
    for _ in range(3):
        rhs = right @ u
        v = u
        for _ in range(4):
            v = v + (rhs - left @ v) / d
        u = v
    return u


# -- statistics and GLMs --------------------------------------------------------------------------------------

@program(_a_counts)
def poisson_regression_step(x, y, beta):
    mu = np.exp(x @ beta)
    grad = x.T @ (y - mu)
    hess_diag = np.asarray((x.multiply(x)).T @ mu).ravel()
    beta = beta + grad / (hess_diag + 1.0)
    deviance = 2 * np.sum(np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / mu), 0.0) - (y - mu))
    return beta, deviance


@program(_a)
def column_quantiles(x):
    dense = x.toarray()
    q = np.quantile(dense, [0.25, 0.5, 0.75], axis=0)
    ranks = dense.argsort(axis=0).argsort(axis=0)
    return q, ranks.mean(axis=1)


@program(_a)
def spearman_first_columns(x):
    d = x[:, :6].toarray()
    ranks = d.argsort(axis=0).argsort(axis=0).astype(float)
    ranks = ranks - ranks.mean(axis=0)
    c = ranks.T @ ranks
    s = np.sqrt(np.diag(c))
    return c / np.outer(s, s)


@program(_a)
def gini_per_row(x):
    d = np.sort(x.toarray(), axis=1)
    n = d.shape[1]
    idx = np.arange(1, n + 1)
    tot = d.sum(axis=1)
    return np.where(tot > 0, ((2 * idx - n - 1) * d).sum(axis=1) / (n * np.where(tot > 0, tot, 1.0)), 0.0)
