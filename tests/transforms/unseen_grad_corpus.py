"""Gradient programs written (2026-12-08, helper ``grad``) before the logreg / loop / Python-float changes they
check, run unchanged through tests/transforms/test_grad.py's harness (against jax.grad on the dense
equivalents and central finite differences). Same conventions as grad_corpus.py."""

from __future__ import annotations


def poisson_regression(xp, X, w, b, y):
    """Poisson negative log-likelihood with a log link on sparse features."""
    eta = X @ w + b
    return xp.mean(xp.exp(eta) - y * eta)


def softmax_regression(xp, X, W, Y):
    """5-class softmax regression (Y one-hot, dense) on sparse features, log-sum-exp stabilised by a max."""
    Z = X @ W
    m = xp.max(Z, axis=1)
    lse = m + xp.log(xp.sum(xp.exp(Z - m[:, None]), axis=1))
    return xp.mean(lse - xp.sum(Y * Z, axis=1))


def ridge_l1(xp, X, w, y):
    """A squared loss, an L2 and a smoothed L1 penalty, with the transposed product X.T @ r written out."""
    r = X @ w - y
    g = X.T @ r
    return 0.5 * xp.sum(r * r) + 0.1 * xp.sum(w * w) + 0.01 * xp.sum(xp.sqrt(w * w + 1e-3)) + 1e-3 * xp.sum(g * g)


def gcn_dropout(xp, A, X, W1, W2, D, Y):
    """Two GCN layers with a dropout mask (an input, 0 / 2) on the hidden layer and a squared loss; the
    gradient w.r.t. the adjacency's stored values too."""
    H = xp.maximum(A @ (X @ W1), 0.0) * D
    out = A @ (H @ W2)
    return xp.sum((out - Y) ** 2) / out.shape[0]


UNSEEN = {
    "poisson_regression": (poisson_regression, [("sparse", (45, 18), 0.12), ("dense", (18,)), ("dense", ()),
                                                ("count", (45,))], (0, 1, 2)),
    "softmax_regression": (softmax_regression, [("sparse", (40, 16), 0.15), ("dense", (16, 5)),
                                                ("onehot", (40, 5))], (0, 1)),
    "ridge_l1": (ridge_l1, [("sparse", (30, 22), 0.15), ("dense", (22,)), ("dense", (30,))], (0, 1, 2)),
    "gcn_dropout": (gcn_dropout, [("sparse", (24, 24), 0.15), ("dense", (24, 7)), ("dense", (7, 6)),
                                  ("dense", (6, 3)), ("mask", (24, 6)), ("dense", (24, 3))], (0, 2, 3)),
}
