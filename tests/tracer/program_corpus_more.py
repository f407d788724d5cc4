"""A second corpus of algorithm bodies (PDE solvers and multigrid, statistics, recommendation, graph learning,
text retrieval, linear models), each written the natural scipy / NumPy way before it was ever run under
``@splyce.jit``, from fields and idioms tests/tracer/program_corpus.py does not hold (triangular splittings,
transfer operators, small dense solves between kernels, QR in subspace iteration, column gathers of query
terms, top-k by argsort, ...). tests/tracer/test_program_corpus_more.py runs each on every operand kind against the
same function without jit, with tests/tracer/test_program_corpus.py's harness.

Each entry: ``name -> (function, argument maker)``, as in tests/tracer/program_corpus.py: the maker takes the sparse
operand (a 40 x 40 matrix with nonnegative entries, row 3 and column 5 empty) converted to the kind under
test, and a seeded generator.
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


def _aX(a, rng):
    return a, rng.random((a.shape[1], 4))


def _ab(a, rng):
    return a, rng.random(a.shape[0])


def _a_terms(a, rng):
    return a, np.array([0, 7, 12, 5, 31])


def _a_docs(a, rng):
    return a, rng.random(a.shape[1]), np.array([1, 4, 9, 20]), np.array([2, 3, 30])


def _a_edges(a, rng):
    return a, rng.random((a.shape[1], 3)), np.array([0, 1, 2, 10, 39]), np.array([5, 6, 7, 11, 0])


def _a_triples(a, rng):
    return a, rng.random((a.shape[0], 3)), rng.random((a.shape[1], 3)), np.array([0, 2, 4]), \
        np.array([1, 8, 9]), np.array([3, 5, 6])


# -- PDE solvers and multigrid --------------------------------------------------------------------------------

def _spd(adj):
    """A diagonally dominant M-matrix from the graph: D - (A + A^T) / 2 with D = row sums + 1."""
    s = (adj + adj.T) * 0.5
    return sp.diags(np.asarray(s.sum(axis=1)).ravel() + 1.0) - s


@program(_ab)
def gauss_seidel_sweeps(adj, b):
    a = _spd(adj)
    lower = sp.tril(a, format="csr")
    upper = sp.triu(a, k=1, format="csr")
    x = np.zeros_like(b)
    for _ in range(3):
        x = spla.spsolve_triangular(lower, b - upper @ x, lower=True)
    return x


@program(_ab)
def splitting_residual(adj, b):
    a = _spd(adj)
    lower = sp.tril(a, k=-1)
    upper = sp.triu(a, k=1)
    d = a.diagonal()
    x = b / d
    for _ in range(5):
        x = (b - lower @ x - upper @ x) / d
    return np.linalg.norm(b - a @ x) / np.linalg.norm(b)


@program(_ab)
def two_level_multigrid(adj, b):
    a = _spd(adj)
    n = a.shape[0]
    agg = np.arange(n) // 4
    r_op = sp.csr_matrix((np.ones(n), (agg, np.arange(n))), shape=(agg.max() + 1, n))
    a_c = r_op @ a @ r_op.T
    d = a.diagonal()
    x = np.zeros(n)
    for _ in range(2):
        x = x + 0.6 * (b - a @ x) / d
    r_c = r_op @ (b - a @ x)
    e_c = np.linalg.solve(a_c.toarray(), r_c)
    x = x + r_op.T @ e_c
    for _ in range(2):
        x = x + 0.6 * (b - a @ x) / d
    return x


@program(_a)
def smoothed_prolongation(adj):
    a = _spd(adj)
    n = a.shape[0]
    p0 = sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) // 5)), shape=(n, n // 5))
    dinv = sp.diags(1.0 / a.diagonal())
    p = p0 - (2.0 / 3.0) * (dinv @ (a @ p0))
    return p.T @ a @ p


@program(_ab)
def heat_implicit_jacobi(adj, u0):
    lap = sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj
    dt = 0.05
    m = sp.identity(adj.shape[0]) + dt * lap
    d = m.diagonal()
    u = u0.copy()
    for _ in range(4):
        rhs = u
        for _ in range(3):
            u = u + (rhs - m @ u) / d
    return u


@program(_ab)
def steepest_descent(adj, b):
    a = _spd(adj)
    x = np.zeros_like(b)
    for _ in range(6):
        r = b - a @ x
        ar = a @ r
        alpha = (r @ r) / (r @ ar)
        x = x + alpha * r
    energy = 0.5 * x @ (a @ x) - b @ x
    return x, energy


@program(_ab)
def upwind_advection(adj, u):
    n = adj.shape[0]
    diff = sp.diags([np.ones(n), -np.ones(n - 1)], [0, -1], shape=(n, n), format="csr")
    speed = np.asarray(adj.sum(axis=1)).ravel() / (adj.sum() + 1.0)
    for _ in range(5):
        u = u - 0.5 * speed * (diff @ u)
    return u


# -- statistics -----------------------------------------------------------------------------------------------

@program(_a)
def sample_covariance(x):
    n = x.shape[0]
    mu = np.asarray(x.mean(axis=0)).ravel()
    gram = (x.T @ x).toarray()
    return (gram - n * np.outer(mu, mu)) / (n - 1)


@program(_a)
def scale_columns_by_std(x):
    mean = np.asarray(x.mean(axis=0)).ravel()
    mean_sq = np.asarray(x.multiply(x).mean(axis=0)).ravel()
    std = np.sqrt(np.maximum(mean_sq - mean ** 2, 0.0))
    std = np.where(std == 0, 1.0, std)
    return x @ sp.diags(1.0 / std)


@program(_ax)
def pearson_with_target(x, y):
    n = x.shape[0]
    y = y[:n]
    mu_x = np.asarray(x.mean(axis=0)).ravel()
    sx = np.sqrt(np.asarray(x.power(2).mean(axis=0)).ravel() - mu_x ** 2)
    yc = y - y.mean()
    cov = (x.T @ yc) / n
    return cov / np.maximum(sx * yc.std(), 1e-12)


@program(_ax)
def anova_f_scores(x, y):
    labels = (y > 0.5).astype(float)
    n1 = labels.sum()
    n0 = len(labels) - n1
    sum1 = x.T @ labels
    sum0 = np.asarray(x.sum(axis=0)).ravel() - sum1
    mean1, mean0 = sum1 / n1, sum0 / n0
    grand = (sum1 + sum0) / len(labels)
    between = n1 * (mean1 - grand) ** 2 + n0 * (mean0 - grand) ** 2
    sq = np.asarray(x.multiply(x).sum(axis=0)).ravel()
    within = sq - n1 * mean1 ** 2 - n0 * mean0 ** 2
    return between / np.maximum(within / (len(labels) - 2), 1e-12)


@program(_a)
def ppmi(counts):
    co = (counts.T @ counts).tocsr()
    total = co.sum()
    row = np.asarray(co.sum(axis=1)).ravel()
    col = np.asarray(co.sum(axis=0)).ravel()
    pmi = co.multiply(total).multiply(1.0 / np.outer(np.maximum(row, 1), np.maximum(col, 1))).tocsr()
    pmi.data = np.maximum(np.log(pmi.data), 0.0)
    return pmi


@program(_a)
def row_entropy(x):
    s = np.asarray(x.sum(axis=1)).ravel()
    p = sp.diags(1.0 / np.maximum(s, 1e-12)) @ x
    plogp = p.multiply(p.log1p())
    return -np.asarray(plogp.sum(axis=1)).ravel()


@program(_a)
def max_abs_scale(x):
    m = abs(x).max(axis=0).toarray().ravel()
    m[m == 0] = 1.0
    return x.multiply(1.0 / m)


# -- recommendation -------------------------------------------------------------------------------------------

@program(_a)
def item_knn_topk(r):
    norms = np.sqrt(np.asarray(r.power(2).sum(axis=0)).ravel())
    norms = np.where(norms == 0, 1.0, norms)
    rn = r @ sp.diags(1.0 / norms)
    sim = (rn.T @ rn).toarray()
    np.fill_diagonal(sim, 0.0)
    scores = r @ sim
    return np.argsort(-scores, axis=1)[:, :5]


@program(_a)
def ease_recommender(x):
    g = (x.T @ x).toarray() + 10.0 * np.eye(x.shape[1])
    p = np.linalg.inv(g)
    b = -p / np.diag(p)
    b = np.where(np.eye(x.shape[1], dtype=bool), 0.0, b)
    return x @ b


@program(_aX)
def implicit_als_items(r, u):
    alpha, lam = 10.0, 0.1
    c = r * alpha
    p = (r > 0).astype(float)
    utu = u.T @ u
    k = u.shape[1]
    rhs = ((c + p).T @ u)
    gram = utu + lam * np.eye(k)
    v = np.linalg.solve(gram, rhs.T).T
    return v


@program(_a_triples)
def bpr_step(r, users, items, u_idx, i_idx, j_idx):
    x_ui = np.sum(users[u_idx] * items[i_idx], axis=1)
    x_uj = np.sum(users[u_idx] * items[j_idx], axis=1)
    g = 1.0 / (1.0 + np.exp(x_ui - x_uj))
    grad_u = g[:, None] * (items[i_idx] - items[j_idx])
    seen = np.asarray(r.sum(axis=1)).ravel()[u_idx]
    return grad_u, np.log(1.0 / (1.0 + np.exp(-(x_ui - x_uj)))).sum() + 0.01 * seen.sum()


@program(_ax)
def popularity_debiased_scores(r, w):
    pop = np.asarray((r > 0).sum(axis=0)).ravel()
    scores = r @ (r.T @ w)
    return scores / np.power(np.maximum(pop, 1), 0.5)[: r.shape[0]]


@program(_aX)
def implicit_neighbourhood(r, y):
    n_u = np.asarray((r != 0).sum(axis=1)).ravel()
    norm = 1.0 / np.sqrt(np.maximum(n_u, 1))
    implicit = sp.diags(norm) @ (r != 0).astype(float) @ y
    return implicit @ implicit.T


# -- graph learning and analytics -----------------------------------------------------------------------------

@program(_ax)
def normalized_laplacian_step(adj, x):
    a = (adj + adj.T) / 2
    d = np.asarray(a.sum(axis=1)).ravel()
    dis = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-300)), 0.0)
    lap = sp.identity(a.shape[0]) - sp.diags(dis) @ a @ sp.diags(dis)
    u = np.sqrt(d) / np.linalg.norm(np.sqrt(d))
    for _ in range(5):
        x = 2.0 * x - lap @ x
        x = x - (u @ x) * u
        x = x / np.linalg.norm(x)
    return x @ (lap @ x), x


@program(_aX)
def gin_layer(adj, h):
    eps = 0.1
    w1 = np.linspace(-1.0, 1.0, h.shape[1] * 6).reshape(h.shape[1], 6)
    w2 = np.linspace(1.0, -0.5, 6 * 2).reshape(6, 2)
    z = (1 + eps) * h + adj @ h
    z = np.maximum(z @ w1, 0.0)
    return z @ w2


@program(_aX)
def chebyshev_filter(adj, x):
    a = (adj + adj.T) / 2
    d = np.asarray(a.sum(axis=1)).ravel()
    dis = 1.0 / np.sqrt(np.maximum(d, 1e-12))
    lap = sp.eye(a.shape[0]) - a.multiply(np.outer(dis, dis))
    lap_s = lap - sp.eye(a.shape[0])
    t0, t1 = x, lap_s @ x
    out = 0.5 * t0 + 0.3 * t1
    for theta in (0.2, 0.1):
        t0, t1 = t1, 2 * (lap_s @ t1) - t0
        out = out + theta * t1
    return out


@program(_ax)
def heat_kernel_taylor(adj, x):
    lap = sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj
    t = 0.3
    term = x.copy()
    out = x.copy()
    for k in range(1, 8):
        term = -t * (lap @ term) / k
        out += term
    return out


@program(_a_edges)
def edge_scores(adj, x, src, dst):
    h = adj @ x
    return np.sum(h[src] * h[dst], axis=1)


@program(_a)
def neighbour_jaccard(adj):
    b = ((adj + adj.T) > 0).astype(float)
    inter = b @ b.T
    deg = np.asarray(b.sum(axis=1)).ravel()
    union = deg[:, None] + deg[None, :] - inter.toarray()
    return inter.multiply(1.0 / np.maximum(union, 1.0))


@program(_a)
def adamic_adar(adj):
    b = ((adj + adj.T) > 0).astype(float)
    deg = np.asarray(b.sum(axis=0)).ravel()
    w = np.where(deg > 1, 1.0 / np.log(np.maximum(deg, 2.0)), 0.0)
    return b @ sp.diags(w) @ b


@program(_a)
def two_core_filter(adj):
    b = ((adj + adj.T) != 0).astype(float)
    deg = b.getnnz(axis=1)
    keep = (deg >= 2).astype(float)
    k = sp.diags(keep)
    return k @ b @ k


@program(_aX)
def subspace_iteration(adj, q):
    a = (adj + adj.T) / 2
    for _ in range(3):
        q, _ = np.linalg.qr(a @ q)
    t = q.T @ (a @ q)
    return np.linalg.eigvalsh(t)


@program(_ax)
def simrank_step(adj, x):
    c = 0.8
    col = np.asarray(adj.sum(axis=0)).ravel()
    w = adj @ sp.diags(1.0 / np.maximum(col, 1.0))
    s = np.eye(adj.shape[0])
    for _ in range(2):
        s = c * (w.T @ s @ w).toarray() if sp.issparse(w.T @ s @ w) else c * (w.T @ s @ w)
        s = np.where(np.eye(adj.shape[0], dtype=bool), 1.0, s)
    return s @ x


# -- text retrieval -------------------------------------------------------------------------------------------

@program(_a_terms)
def bm25_query_terms(counts, terms):
    k1, b = 1.5, 0.75
    n_docs = counts.shape[0]
    dl = np.asarray(counts.sum(axis=1)).ravel()
    avgdl = dl.mean()
    tf = counts[:, terms].toarray()
    df = np.asarray((counts[:, terms] > 0).sum(axis=0)).ravel()
    idf = np.log((n_docs - df + 0.5) / (df + 0.5) + 1)
    norm = tf + k1 * (1 - b + b * dl[:, None] / avgdl)
    return (idf * tf * (k1 + 1) / norm).sum(axis=1)


@program(_a_docs)
def rocchio_feedback(x, q, relevant, nonrelevant):
    alpha, beta, gamma = 1.0, 0.75, 0.15
    rel = np.asarray(x[relevant].mean(axis=0)).ravel()
    non = np.asarray(x[nonrelevant].mean(axis=0)).ravel()
    q2 = alpha * q + beta * rel - gamma * non
    q2 = np.maximum(q2, 0)
    return x @ q2


@program(_a_terms)
def dirichlet_query_likelihood(counts, terms):
    mu = 20.0
    dl = np.asarray(counts.sum(axis=1)).ravel()
    coll = np.asarray(counts.sum(axis=0)).ravel()
    p_c = (coll + 1.0) / (coll.sum() + counts.shape[1])
    tf = counts[:, terms].toarray()
    return np.log(tf + mu * p_c[terms]).sum(axis=1) - len(terms) * np.log(dl + mu)


@program(_a)
def pivoted_length_tfidf(counts):
    s = 0.2
    dl = np.asarray((counts != 0).sum(axis=1)).ravel()
    pivot = dl.mean()
    df = np.asarray((counts != 0).sum(axis=0)).ravel()
    idf = np.log((1.0 + counts.shape[0]) / (1.0 + df))
    tf = counts.log1p()
    w = tf.multiply(idf[None, :])
    return w.multiply(1.0 / ((1 - s) * pivot + s * dl)[:, None])


@program(_a)
def sublinear_tfidf_l2(counts):
    tf = counts.copy().astype(float)
    tf.data = 1.0 + np.log(tf.data)
    df = np.bincount(counts.nonzero()[1], minlength=counts.shape[1])
    idf = np.log((1 + counts.shape[0]) / (1 + df)) + 1
    x = tf @ sp.diags(idf)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    return sp.diags(1 / np.where(norms == 0, 1, norms)) @ x


@program(_aX)
def lsi_fold_in(counts, u):
    k = u.shape[1]
    s = np.linalg.svd(u, compute_uv=False)
    proj = counts @ u
    return proj @ np.linalg.inv(np.diag(s) + np.eye(k))


# -- linear models --------------------------------------------------------------------------------------------

@program(_ax)
def newton_logistic_step(x, w):
    y = (np.arange(x.shape[0]) % 2).astype(float)
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    g = x.T @ (p - y)
    s = p * (1 - p)
    h = (x.T @ sp.diags(s) @ x).toarray() + 1e-2 * np.eye(x.shape[1])
    return w - np.linalg.solve(h, g)


@program(_ax)
def ridge_closed_form(x, y):
    lam = 0.5
    xtx = (x.T @ x).toarray()
    c = np.linalg.cholesky(xtx + lam * np.eye(x.shape[1]))
    z = np.linalg.solve(c, x.T @ y)
    return np.linalg.solve(c.T, z)


@program(_ax)
def pca_power_without_centering_matrix(x, v):
    n = x.shape[0]
    mu = np.asarray(x.mean(axis=0)).ravel()
    for _ in range(6):
        w = x.T @ (x @ v) - n * mu * (mu @ v)
        v = w / np.linalg.norm(w)
    return v, v @ (x.T @ (x @ v) - n * mu * (mu @ v)) / (n - 1)


@program(_ax)
def elastic_net_prox(x, w):
    y = np.cos(np.arange(x.shape[0]))
    lam, l1 = 0.1, 0.5
    step = 1.0 / (spla.norm(x) ** 2 + lam)
    for _ in range(4):
        g = x.T @ (x @ w - y) + lam * (1 - l1) * w
        z = w - step * g
        w = np.sign(z) * np.maximum(np.abs(z) - step * lam * l1, 0.0)
    return w
