"""A corpus of gradient programs (graph learning, linear models on sparse features, masked matrix
factorisation, sparse attention, gradients w.r.t. stored values, several sparse layers, ``where``, unrolled
iterations), each written once against a NumPy-like namespace ``xp``: ``splyce.numpy`` when traced by splyce,
``jax.numpy`` (on the dense equivalents) for the reference. Sparse operands take part only through
``@``, ``xp.multiply`` and zero-preserving functions, so each body means the same under both.

Each entry: name -> (function(xp, *args), argument specs, argnums). A spec is ("sparse", shape, density) or
("dense", shape); sparse arguments share no pattern unless an entry says so (``"pattern:k"``: the pattern
of argument k, with its own values)."""

from __future__ import annotations


def gcn_layer(xp, A, X, W):
    return xp.sum(xp.tanh(A @ (X @ W)) ** 2)


def gcn_two_layers(xp, A, X, W1, W2, Y):
    H = xp.maximum(A @ (X @ W1), 0.0)
    out = A @ (H @ W2)
    return xp.mean((out - Y) ** 2)


def logistic_regression(xp, X, w, b, y):
    z = X @ w + b
    return xp.mean(xp.log1p(xp.exp(-y * z)))


def masked_factorisation(xp, M, R, U, V):
    pred = xp.multiply(M, U @ V.T)          # SDDMM at the observed entries
    return xp.sum(xp.square(pred - R)) + 0.01 * (xp.sum(U * U) + xp.sum(V * V))


def sparse_attention(xp, M, Q, K, V):
    scores = xp.multiply(M, Q @ K.T)        # sampled scores
    weights = xp.tanh(scores)
    return xp.sum((weights @ V) ** 2)


def stored_values(xp, A, B, x):
    return xp.sum(xp.square(A @ (B @ x))) + xp.sum(xp.multiply(A, A))


def three_sparse_layers(xp, A1, A2, A3, x):
    h = xp.tanh(A1 @ x)
    h = xp.tanh(A2 @ h)
    h = xp.tanh(A3 @ h)
    return xp.sum(h * h)


def leaky_where(xp, A, x):
    y = A @ x
    return xp.sum(xp.where(y > 0, y, 0.1 * y)) + xp.sum(xp.where(x > 0.5, x * x, 0.0))


def unrolled_descent(xp, A, b, x0):
    x = x0
    for _ in range(5):
        x = x - 0.1 * (A @ x - b)
    return xp.sum(x * x)


def mixed_elementwise(xp, A, x):
    y = A @ x
    return xp.sum(xp.exp(-xp.abs(y)) + xp.log1p(y * y) + xp.sqrt(1.0 + y * y) + xp.sin(y) / (2.0 + xp.cos(y)))


def reductions(xp, A, X):
    Y = A @ X
    return xp.sum(xp.max(Y, axis=1)) + xp.sum(xp.mean(X * X, axis=0)) + xp.sum(xp.min(Y, axis=0))


def transposes(xp, A, x, y, X):
    return xp.sum((A.T @ x) * (A @ y)) + xp.sum((x @ A) ** 2) + xp.sum((X.T @ A) @ y)


def slicing(xp, A, X):
    Y = A @ X
    return xp.sum(Y[:, :2] ** 2) + xp.sum(X[1:3] * 3.0) + xp.sum(Y[0] * Y[-1])


def sparse_elementwise(xp, A, B, x):
    C = xp.multiply(A, B)
    return xp.sum(C @ x) + xp.sum(xp.abs(A) @ (x * x)) + xp.sum((A * 2.0 - B) @ x) + xp.sum(xp.tanh(A) @ x)


def divisions(xp, A, x):
    y = A @ x
    return xp.sum(y / (1.0 + y * y)) + xp.sum(x / (2.0 + x * x)) + xp.sum(y / 3.0) + xp.sum(1.0 / (2.0 + y * y))


def broadcasting(xp, A, X, b, s):
    Y = A @ X + b                          # a bias broadcast over rows
    Z = Y * s - b[None, :] / 2.0
    return xp.sum(xp.tanh(Z)) + xp.sum(Y.sum(axis=0) ** 2)


def sparse_sparse_product(xp, A, B):
    return xp.sum(A @ B) * 0.5 + xp.sum(xp.square(A @ B))


CORPUS = {
    "gcn_layer": (gcn_layer, [("sparse", (30, 30), 0.1), ("dense", (30, 8)), ("dense", (8, 4))], (0, 1, 2)),
    "gcn_two_layers": (gcn_two_layers, [("sparse", (25, 25), 0.15), ("dense", (25, 6)), ("dense", (6, 5)),
                                        ("dense", (5, 3)), ("dense", (25, 3))], (0, 2, 3)),
    "logistic_regression": (logistic_regression, [("sparse", (40, 20), 0.1), ("dense", (20,)), ("dense", ()),
                                                  ("sign", (40,))], (0, 1, 2)),
    "masked_factorisation": (masked_factorisation, [("sparse", (20, 15), 0.2), "pattern:0", ("dense", (20, 4)),
                                                    ("dense", (15, 4))], (2, 3)),
    "sparse_attention": (sparse_attention, [("sparse", (16, 16), 0.25), ("dense", (16, 4)), ("dense", (16, 4)),
                                            ("dense", (16, 3))], (1, 2, 3)),
    "stored_values": (stored_values, [("sparse", (12, 10), 0.3), ("sparse", (10, 9), 0.3), ("dense", (9,))],
                      (0, 1, 2)),
    "three_sparse_layers": (three_sparse_layers, [("sparse", (15, 20), 0.2), ("sparse", (10, 15), 0.2),
                                                  ("sparse", (8, 10), 0.3), ("dense", (20,))], (0, 1, 2, 3)),
    "leaky_where": (leaky_where, [("sparse", (20, 14), 0.2), ("dense", (14,))], (0, 1)),
    "unrolled_descent": (unrolled_descent, [("sparse", (12, 12), 0.3), ("dense", (12,)), ("dense", (12,))],
                         (0, 1, 2)),
    "mixed_elementwise": (mixed_elementwise, [("sparse", (18, 11), 0.3), ("dense", (11,))], (0, 1)),
    "reductions": (reductions, [("sparse", (14, 14), 0.3), ("dense", (14, 5))], (0, 1)),
    "transposes": (transposes, [("sparse", (13, 13), 0.25), ("dense", (13,)), ("dense", (13,)),
                                ("dense", (13, 13))], (0, 1, 2, 3)),
    "slicing": (slicing, [("sparse", (10, 10), 0.3), ("dense", (10, 4))], (0, 1)),
    "sparse_elementwise": (sparse_elementwise, [("sparse", (12, 9), 0.4), "pattern:0", ("dense", (9,))],
                           (0, 1, 2)),
    "divisions": (divisions, [("sparse", (15, 10), 0.3), ("dense", (10,))], (0, 1)),
    "broadcasting": (broadcasting, [("sparse", (11, 11), 0.3), ("dense", (11, 5)), ("dense", (5,)),
                                    ("dense", ())], (0, 1, 2, 3)),
    "sparse_sparse_product": (sparse_sparse_product, [("sparse", (10, 12), 0.25), ("sparse", (12, 8), 0.25)],
                              (0, 1)),
}
