"""``grad``: a jitted gradient step (``splyce.jit(splyce.grad(loss))``) against ``jax.jit(jax.grad(loss))`` on
BCOO and against a hand-written scipy / NumPy gradient, on corpus matrices (issue 57), with first-call times.

Programs (``A``: the corpus matrix, n x n; dense factors of width 16 / 8):

- ``gcn``: ``sum(tanh(A @ (X @ W)) ** 2)``, gradients w.r.t. ``W`` and ``A``'s stored values (an SDDMM);
- ``logreg``: ``mean(log1p(exp(-y * (A @ w))))``, the gradient w.r.t. ``w`` (``A`` as sparse features);
- ``mf``: ``sum((M * (U @ V.T) - R) ** 2)`` over the observed entries ``M`` (``A``'s pattern, ``R`` its
  values), gradients w.r.t. ``U`` and ``V`` (JAX: the sampled product written with gathers, as JAX users
  write it; BCOO has no sampled product that differentiates to one).

Every candidate's gradients are checked against the scipy gradient (concatenated into one vector). JAX runs
on CPU asked for one thread (XLA_FLAGS, set before jax is imported here)."""

from __future__ import annotations

import os
import time

import numpy as np

from splyce.bench.common import Config, Result, measure

COLUMNS = ["program", "matrix", "n", "nnz", "splyce_ms", "jax_ms", "scipy_ms", "jax_over_splyce",
           "scipy_over_splyce", "cpu_jax_over_splyce", "cpu_scipy_over_splyce", "splyce_first_s", "jax_first_s"]
DEFAULT_MATRICES = ("ba-100k", "fem2d-250k")


def _jax():
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _flat(*parts) -> np.ndarray:
    return np.concatenate([np.asarray(p).ravel() for p in parts])


def _values(g) -> np.ndarray:
    return np.asarray(g.data)


def programs(A, rng):
    """(name, splyce step, jax step, scipy step) per program; each step returns the flat gradient."""
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    import splyce
    import splyce.numpy as snp

    jax = _jax()
    n = A.shape[0]
    rows = np.repeat(np.arange(n), np.diff(A.indptr))
    cols = A.indices
    Ab = jsparse.BCOO.from_scipy_sparse(A)
    X = rng.standard_normal((n, 16)) / 4
    W = rng.standard_normal((16, 16)) / 4
    w = rng.standard_normal(n) / np.sqrt(n)
    y = rng.choice([-1.0, 1.0], n)
    U = rng.standard_normal((n, 8)) / 3
    V = rng.standard_normal((n, 8)) / 3
    M = A.copy()
    M.data = np.ones_like(M.data)
    jrows, jcols = jnp.asarray(rows), jnp.asarray(cols)

    # gcn
    def gcn(A, X, W):
        return snp.sum(snp.tanh(A @ (X @ W)) ** 2)
    g_gcn = splyce.jit(splyce.grad(gcn, argnums=(0, 2)))

    def jgcn(data, X, W):   # the gradient w.r.t. the BCOO's stored values (its indices are integers)
        Ad = jsparse.BCOO((data, Ab.indices), shape=Ab.shape, indices_sorted=True, unique_indices=True)
        return jnp.sum(jnp.tanh(Ad @ (X @ W)) ** 2)
    jg_gcn = jax.jit(jax.grad(jgcn, argnums=(0, 2)))

    def scipy_gcn():
        H = X @ W
        T = np.tanh(A @ H)
        G = 2 * T * (1 - T * T)
        gA = np.einsum("ij,ij->i", G[rows], H[cols])
        return _flat(gA, X.T @ (A.T @ G))

    # logistic regression
    def logreg(A, w, y):
        return snp.mean(snp.log1p(snp.exp(-y * (A @ w))))
    g_log = splyce.jit(splyce.grad(logreg, argnums=1))
    jg_log = jax.jit(jax.grad(lambda A, w, y: jnp.mean(jnp.log1p(jnp.exp(-y * (A @ w)))), argnums=1))

    def scipy_log():
        z = A @ w
        s = -y / (1 + np.exp(y * z)) / n
        return A.T @ s

    # masked factorisation
    def mf(M, R, U, V):
        return snp.sum(snp.square(M.multiply(U @ V.T) - R))
    g_mf = splyce.jit(splyce.grad(mf, argnums=(2, 3)))
    R_values = jnp.asarray(A.data)

    def jmf(U, V):
        pred = jnp.sum(U[jrows] * V[jcols], axis=1)
        return jnp.sum((pred - R_values) ** 2)
    jg_mf = jax.jit(jax.grad(jmf, argnums=(0, 1)))

    def scipy_mf():
        resid = np.einsum("ij,ij->i", U[rows], V[cols]) - A.data
        E = A.copy()
        E.data = 2 * resid
        return _flat(E @ V, E.T @ U)

    return [
        ("gcn", lambda: (lambda g: _flat(_values(g[0]), g[1]))(g_gcn(A, X, W)),
         lambda: _flat(*jg_gcn(Ab.data, X, W)), scipy_gcn),
        ("logreg", lambda: g_log(A, w, y), lambda: np.asarray(jg_log(Ab, w, y)), scipy_log),
        ("mf", lambda: _flat(*g_mf(M, A, U, V)), lambda: _flat(*jg_mf(U, V)), scipy_mf),
    ]


def _cpu_medians(steps: dict, repeats: int) -> dict:
    """Each step's median process CPU time over ``repeats`` interleaved calls (after ``measure``'s warm-up):
    on a VM shared with other work, wall times wait for a core (2-3x the CPU time at load ~15 on 2 cores,
    2026-12-08) and CPU times do not; a step on two threads counts both."""
    times = {k: [] for k in steps}
    for _ in range(max(3, repeats)):
        for k, f in steps.items():
            t = time.process_time()
            f()
            times[k].append(time.process_time() - t)
    return {k: float(np.median(v)) for k, v in times.items()}


def run(cfg: Config) -> Result:
    from splyce.bench import corpus

    _jax()
    if cfg.tiny:
        import scipy.sparse as sps

        matrices = [("random-2k", sps.random_array((2_000, 2_000), density=0.003, format="csr", rng=0))]
    else:
        names = None if cfg.quick else DEFAULT_MATRICES
        matrices = [(e.name, e.build()) for e in corpus.chosen(cfg.quick, names, cfg.matrices)]
    rng = np.random.default_rng(57)
    out = []
    for name, A in matrices:
        A = A.tocsr().astype(np.float64)
        A.sum_duplicates()
        A.sort_indices()
        for program, ours, theirs, scipy_step in programs(A, rng):
            timings = measure({"splyce": ours, "jax": theirs, "scipy": scipy_step}, scipy_step, cfg,
                              desc=f"{program} {name}", rtol=1e-8)
            cpu = _cpu_medians({"splyce": ours, "jax": theirs, "scipy": scipy_step}, cfg.n_repeats)
            s, j, r = (timings[k].median for k in ("splyce", "jax", "scipy"))
            out.append({"program": program, "matrix": name, "n": A.shape[0], "nnz": A.nnz, "splyce_ms": s * 1e3,
                        "jax_ms": j * 1e3, "scipy_ms": r * 1e3, "jax_over_splyce": j / s,
                        "scipy_over_splyce": r / s, "cpu_jax_over_splyce": cpu["jax"] / cpu["splyce"],
                        "cpu_scipy_over_splyce": cpu["scipy"] / cpu["splyce"],
                        "splyce_first_s": timings["splyce"].first_call,
                        "jax_first_s": timings["jax"].first_call})
    note = ("splyce: splyce.jit(splyce.grad(loss)) on the scipy CSR; jax: jax.jit(jax.grad(loss)) on a BCOO "
            "(mf: gathers), float64, one thread asked; scipy: the gradient written by hand with scipy / NumPy. "
            "Median of interleaved repeats; cpu_*: ratios of median process CPU times (a second interleaved pass, "
            "robust to other processes' load); first_s: the first call (trace, plan, compile; the disk cache may "
            "serve splyce's kernel on a re-run). Results checked against the scipy gradient (rtol 1e-8).")
    return Result("grad", "Jitted gradient steps vs jax.jit(jax.grad) on BCOO and hand-written scipy", COLUMNS, out,
                  note)
