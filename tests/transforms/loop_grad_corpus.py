"""Gradient programs through compiled loops, gathers and sparse max / min (tests/transforms/test_loop_grad.py), each
written once against a NumPy-like namespace ``xp`` and a ``lax`` (``splyce.numpy`` / ``splyce.lax`` when
traced by splyce; ``jax.numpy`` / ``jax.lax`` on the dense equivalents for the reference). Entry format as
tests/grad_corpus.py: name -> (function(xp, lax, *args), argument specs, argnums); ("index", shape, n): an
int64 index array into an axis of n (repeats likely)."""

from __future__ import annotations


def fori_propagation(xp, lax, A, x):
    """A few damped propagation steps; the gradient w.r.t. A's stored values and the start."""
    def body(i, h):
        return xp.tanh(A @ h) + 0.5 * h
    return xp.sum(lax.fori_loop(0, 4, body, x) ** 2)


def fori_gcn_shared_weights(xp, lax, A, X, W):
    """Three propagation layers sharing one weight matrix (a fori_loop over layers)."""
    def layer(i, H):
        return xp.maximum(A @ (H @ W), 0.0) + 0.1 * H
    return xp.mean(lax.fori_loop(0, 3, layer, X) ** 2)


def fori_reads_index(xp, lax, A, x):
    def body(i, h):
        return h - (0.05 * (i + 1)).astype(h.dtype) * (A @ h) + 0.01 * h * h
    return xp.sum(lax.fori_loop(2, 6, body, x) ** 2)


def fori_gradient_descent(xp, lax, A, b, x0):
    """Unrolled least squares (the corpus' unrolled_descent) as a compiled loop, differentiated w.r.t. the
    problem."""
    def body(i, x):
        return x - 0.1 * (A.T @ (A @ x - b))
    x = lax.fori_loop(0, 6, body, x0)
    return xp.sum(x * x)


def scan_rnn(xp, lax, A, c0, xs):
    """An RNN over a sequence with a sparse recurrent matrix; per-step outputs in the loss."""
    def step(c, x):
        c = xp.tanh(A @ c + x)
        return c, xp.sum(c * x)
    c, ys = lax.scan(step, c0, xs)
    return xp.sum(c ** 2) + xp.sum(ys ** 2)


def scan_reverse_mixed_carry(xp, lax, A, c0, xs):
    """A reverse scan whose carry holds a float vector and a float scalar; stacked vector outputs."""
    def step(carry, x):
        c, s = carry
        c = xp.sin(A @ c) * x + c * 0.5
        return (c, s + xp.sum(c)), c * s
    (c, s), ys = lax.scan(step, (c0, 0.0), xs, reverse=True)
    return s * s + xp.sum(ys * ys) + xp.sum(c)


def nested_loops(xp, lax, A, x):
    def outer(i, h):
        return lax.fori_loop(0, 2, lambda j, g: xp.tanh(A @ g) + h * 0.1, h)
    return xp.sum(lax.fori_loop(0, 2, outer, x) ** 2)


def masked_factorisation_steps(xp, lax, M, R, U, V):
    """Three descent steps on U inside the loss (a bilevel program): an SDDMM at M's pattern per step."""
    def step(i, U):
        E = xp.multiply(M, U @ V.T) - R
        return U - 0.05 * (E @ V)
    U = lax.fori_loop(0, 3, step, U)
    return xp.sum(xp.square(xp.multiply(M, U @ V.T) - R))


def embedding_lookup(xp, lax, W, idx, y):
    """Rows of an embedding table gathered (repeated indices: a scatter-add)."""
    h = xp.tanh(W[idx])
    return xp.sum((h.sum(axis=1) - y) ** 2)


def gather_columns_in_scan(xp, lax, W, idx, xs):
    def step(c, x):
        return xp.tanh(W[:, idx] @ c + x), None
    c, _ = lax.scan(step, xs[0], xs)
    return xp.sum(c * c)


def sparse_row_gather(xp, lax, A, idx, v):
    return xp.sum(xp.sin(A[idx] @ v))


def sparse_maximum(xp, lax, A, B, v):
    return xp.sum(xp.tanh(xp.maximum(A, B) @ v) ** 2) + xp.sum(xp.minimum(A, B) @ v)


def sparse_max_reduction(xp, lax, A, v):
    return xp.sum(v @ A.max(axis=1)) + A.min() * 2.0


CORPUS = {
    "fori_propagation": (fori_propagation, [("sparse", (30, 30), 0.1), ("dense", (30,))], (0, 1)),
    "fori_gcn_shared_weights": (fori_gcn_shared_weights,
                                [("sparse", (25, 25), 0.15), ("dense", (25, 6)), ("dense", (6, 6))], (0, 1, 2)),
    "fori_reads_index": (fori_reads_index, [("sparse", (20, 20), 0.2), ("dense", (20,))], (0, 1)),
    "fori_gradient_descent": (fori_gradient_descent,
                              [("sparse", (30, 20), 0.15), ("dense", (30,)), ("dense", (20,))], (0, 1, 2)),
    "scan_rnn": (scan_rnn, [("sparse", (16, 16), 0.2), ("dense", (16,)), ("dense", (5, 16))], (0, 1, 2)),
    "scan_reverse_mixed_carry": (scan_reverse_mixed_carry,
                                 [("sparse", (12, 12), 0.25), ("dense", (12,)), ("dense", (4, 12))], (0, 1, 2)),
    "nested_loops": (nested_loops, [("sparse", (15, 15), 0.2), ("dense", (15,))], (0, 1)),
    "masked_factorisation_steps": (masked_factorisation_steps,
                                   [("sparse", (20, 15), 0.2), "pattern:0", ("dense", (20, 4)), ("dense", (15, 4))],
                                   (0, 2, 3)),
    "embedding_lookup": (embedding_lookup, [("dense", (9, 4)), ("index", (14,), 9), ("dense", (14,))], (0,)),
    "gather_columns_in_scan": (gather_columns_in_scan,
                               [("dense", (8, 10)), ("index", (8,), 10), ("dense", (3, 8))], (0, 2)),
    "sparse_row_gather": (sparse_row_gather, [("sparse", (12, 10), 0.3), ("index", (15,), 12), ("dense", (10,))],
                          (0, 2)),
    "sparse_maximum": (sparse_maximum, [("sparse", (14, 10), 0.3), ("sparse", (14, 10), 0.3), ("dense", (10,))],
                       (0, 1, 2)),
    "sparse_max_reduction": (sparse_max_reduction, [("sparse", (12, 9), 0.3), ("dense", (12,))], (0,)),
}
