"""``programs``: algorithm bodies written as their users write them, jitted whole (``@splyce.jit``) vs the same
body in scipy / NumPy, on the realistic corpus (:mod:`splyce.bench.corpus`).

Each program is one step of an iterative algorithm, with its dense glue (docs/tracing.md):

* ``pagerank``: ``0.85 * (P @ x) + 0.15 / n`` (``P`` column-stochastic);
* ``cg``: one conjugate-gradient step (an SpMV, three dot products, three vector updates; three results);
* ``gcn``: a GCN layer ``relu(A @ (X @ W))`` with ``X`` (n x 16) and ``W`` (16 x 16) captured from the
  enclosing scope (hidden kernel arguments);
* ``logreg``: a logistic-regression gradient ``A.T @ (sigmoid(A @ w) - y)``;
* ``rownorm``: row normalisation ``A.multiply(1 / max(A.sum(axis=1), 1)[:, None])`` (a sparse result);
* ``triangles``: ``((L @ L) * L).sum()`` with ``L = tril(A, -1)`` as a pattern.

Both candidates are timed interleaved in one :func:`~splyce.bench.common.measure` (the jitted call with its
argument handling, as a user calls it), after the first results were checked against each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from splyce.bench import corpus
from splyce.bench.common import Config, Result, _progress, geomean, measure

PROGRAMS = {
    "pagerank": "PageRank step 0.85 * (P @ x) + 0.15 / n",
    "cg": "CG step (SpMV, 3 dots, 3 axpys)",
    "gcn": "GCN layer relu(A @ (X @ W)), X, W captured",
    "logreg": "logistic-regression gradient A.T @ (sigmoid(A @ w) - y)",
    "rownorm": "row normalisation A.multiply(1 / deg[:, None])",
    "triangles": "triangles ((L @ L) * L).sum()",
}
COLUMNS = ["matrix", "program", "n", "nnz", "scipy_s", "splyce_s", "splyce_vs_scipy", "compile_s"]
FEATURES = 16


def _programs(A):
    """Per program: (jitted function, scipy / NumPy function, arguments)."""
    import scipy.sparse as sps

    import splyce

    n = A.shape[0]
    rng = np.random.default_rng(0)
    out_degree = np.asarray(A.sum(axis=0)).ravel()
    P = sps.csr_array(A.multiply(1.0 / np.maximum(out_degree, 1.0)[None, :]))
    spd = sps.csr_array(A + A.T + sps.diags_array(np.asarray(abs(A).sum(axis=1)).ravel() * 2 + 1.0))
    X, W = rng.random((n, FEATURES)), rng.random((FEATURES, FEATURES)) - 0.5
    L = sps.csr_array(sps.tril(A, k=-1))
    L.data[:] = 1.0
    x, w, y = rng.random(n), rng.random(n) - 0.5, (rng.random(n) < 0.5).astype(np.float64)
    r = rng.random(n)

    def pagerank(p, x):
        return 0.85 * (p @ x) + 0.15 / n

    def cg(a, x, r, p):
        ap = a @ p
        rr = r @ r
        alpha = rr / (p @ ap)
        r_new = r - alpha * ap
        return x + alpha * p, r_new, r_new + (r_new @ r_new) / rr * p

    def gcn(a):
        return np.maximum(a @ (X @ W), 0)

    def logreg(a, w, y):
        return a.T @ (1 / (1 + np.exp(-(a @ w))) - y)

    def rownorm(a):
        return a.multiply(1.0 / np.maximum(a.sum(axis=1), 1.0)[:, None])

    def triangles(l):
        return ((l @ l) * l).sum()

    def scipy_triangles(l):
        return (l @ l).multiply(l).sum()

    return {
        "pagerank": (splyce.jit(pagerank), pagerank, (P, x)),
        "cg": (splyce.jit(cg), cg, (spd, x * 0, r, r.copy())),
        "gcn": (splyce.jit(gcn), gcn, (A,)),
        "logreg": (splyce.jit(logreg), logreg, (A, w, y)),
        "rownorm": (splyce.jit(rownorm), rownorm, (A,)),
        "triangles": (splyce.jit(triangles), scipy_triangles, (L,)),
    }


def _first(result):
    """The first result of a program returning several (checked and compared as one array)."""
    return np.concatenate([np.ravel(r) for r in result]) if isinstance(result, tuple) else result


def run(cfg: Config) -> Result:
    names = {"fem2d-3k", "rmat-s10"} if cfg.tiny else None
    entries = [e for e in corpus.select(cfg.quick) if names is None or e.name in names]
    if cfg.matrices:
        everything = {e.name: e for e in corpus.entries()}
        unknown = [m for m in cfg.matrices if m not in everything]
        if unknown:
            raise SystemExit(f"unknown matrix {', '.join(unknown)}; choose from {', '.join(everything)}")
        entries = [everything[m] for m in cfg.matrices]
    unknown = [p for p in cfg.ops if p not in PROGRAMS]
    if unknown:
        raise SystemExit(f"unknown program {', '.join(unknown)}; choose from {', '.join(PROGRAMS)}")
    programs = [p for p in PROGRAMS if not cfg.ops or p in cfg.ops]
    rows = []
    bar = _progress(0, "programs", cfg)
    from threadpoolctl import threadpool_limits

    blas = threadpool_limits(1)   # one thread on both sides: NumPy's BLAS too (X @ W, the GCN layer)
    try:
        for entry in entries:
            A = corpus.build(entry, Path(cfg.out) / "corpus-cache")
            for name, (jitted, reference, args) in _programs(A).items():
                if name not in programs:
                    continue
                bar.set_description(f"programs {entry.name} {name}")
                want = _first(reference(*args))
                timings = measure({"scipy": lambda r=reference, a=args: _first(r(*a)),
                                   "splyce": lambda f=jitted, a=args: _first(f(*a))},
                                  want, cfg, desc=f"{entry.name} {name}", rtol=1e-8, bar=bar)
                t_scipy, t_splyce = timings["scipy"].median, timings["splyce"].median
                rows.append({"matrix": entry.name, "program": name, "n": A.shape[0], "nnz": A.nnz,
                             "scipy_s": t_scipy, "splyce_s": t_splyce, "splyce_vs_scipy": t_scipy / t_splyce,
                             "compile_s": timings["splyce"].compile})
    finally:
        blas.restore_original_limits()
        bar.close()
    by_program = {p: geomean(r["splyce_vs_scipy"] for r in rows if r["program"] == p) for p in programs}
    summary = "; ".join(f"{p} {v:.2f}x" for p, v in by_program.items())
    note = (f"Median seconds of {cfg.n_repeats} interleaved repeats, one thread (NumPy's BLAS too); "
            "splyce_vs_scipy = scipy time / jitted time (> 1: the jitted body is faster). The jitted call includes "
            "its argument handling. "
            f"Geometric means over the matrices: {summary}.")
    return Result("programs", "Algorithm bodies jitted whole vs scipy / NumPy", COLUMNS, rows, note, plot=plot)


def plot(rows, ax) -> None:
    """splyce_vs_scipy per program, one bar per matrix (log scale; 1 = as fast as scipy)."""
    programs = list(dict.fromkeys(r["program"] for r in rows))
    matrices = list(dict.fromkeys(r["matrix"] for r in rows))
    width = 0.8 / max(len(matrices), 1)
    for k, matrix in enumerate(matrices):
        ratios = {r["program"]: float(r["splyce_vs_scipy"]) for r in rows if r["matrix"] == matrix}
        ax.bar([p + k * width for p in range(len(programs))], [ratios.get(p, float("nan")) for p in programs],
               width, label=matrix)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([p + 0.4 - width / 2 for p in range(len(programs))], programs)
    ax.set_ylabel("scipy time / jitted time")
    ax.legend(fontsize=7, ncol=2)
