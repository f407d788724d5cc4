"""``programs``: algorithm bodies written as their users write them, jitted whole (``@splyce.jit``) vs the same
body in scipy / NumPy, on the realistic corpus (:mod:`splyce.bench.corpus`).

Each program is one step of an iterative algorithm, with its dense glue (docs/tracing.md):

* ``pagerank``: ``0.85 * (P @ x) + 0.15 / n`` (``P`` column-stochastic);
* ``cg``: one conjugate-gradient step (an SpMV, three dot products, three vector updates; three results);
* ``gcn``: a GCN layer ``relu(A @ (X @ W))`` with ``X`` (n x 16) and ``W`` (16 x 16) captured from the
  enclosing scope (hidden kernel arguments);
* ``logreg``: a logistic-regression gradient ``A.T @ (sigmoid(A @ w) - y)``;
* ``rownorm``: row normalisation ``A.multiply(1 / max(A.sum(axis=1), 1)[:, None])`` (a sparse result);
* ``triangles``: ``((L @ L) * L).sum()`` with ``L = tril(A, -1)`` as a pattern;

and five small programs of several ops (``B``: ``A``'s rows rotated by one, another pattern of the same
statistics): ``axbx`` ``a @ x + b @ x``, ``hsum`` ``(a * b).sum()``, ``quad`` ``v @ (a @ v)``, ``normal``
``a.T @ (a @ x)``, ``maxdiff`` ``abs(a - b).max()``.

Three candidates are timed interleaved in one :func:`~splyce.bench.common.measure`, after their first results
were checked against each other: the jitted call with its argument handling, as a user calls it; the same
body in scipy / NumPy; and the chain of drop-ins (``splyce.matmul`` / ``multiply`` / ``subtract`` for the
sparse ops, NumPy for the dense glue) called one after another, which the jitted program should beat.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from splyce.bench import corpus, loop_programs
from splyce.bench.common import Config, Result, _progress, geomean, measure

PROGRAMS = {
    "pagerank": "PageRank step 0.85 * (P @ x) + 0.15 / n",
    "cg": "CG step (SpMV, 3 dots, 3 axpys)",
    "gcn": "GCN layer relu(A @ (X @ W)), X, W captured",
    "logreg": "logistic-regression gradient A.T @ (sigmoid(A @ w) - y)",
    "rownorm": "row normalisation A.multiply(1 / deg[:, None])",
    "triangles": "triangles ((L @ L) * L).sum()",
    "axbx": "a @ x + b @ x",
    "hsum": "(a * b).sum()",
    "quad": "v @ (a @ v)",
    "normal": "a.T @ (a @ x)",
    "maxdiff": "abs(a - b).max()",
    **loop_programs.PROGRAMS,
}
COLUMNS = ["matrix", "program", "n", "nnz", "scipy_s", "chain_s", "splyce_s", "splyce_vs_scipy", "splyce_vs_chain",
           "wrapped_s", "wrapped_vs_chain", "compile_s"]
FEATURES = 16


def cg_step(a, x, r, p):
    """One conjugate-gradient step written the NumPy way (the `cg` program)."""
    ap = a @ p
    rr = r @ r
    alpha = rr / (p @ ap)
    r_new = r - alpha * ap
    return x + alpha * p, r_new, r_new + (r_new @ r_new) / rr * p


def _programs(A):
    """Per program: (jitted function, scipy / NumPy function, arguments, the chain of drop-ins)."""
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

    B = sps.csr_array(A[np.roll(np.arange(n), 1)])

    def axbx(a, b, x):
        return a @ x + b @ x

    def hsum(a, b):
        return (a * b).sum()

    def quad(a, v):
        return v @ (a @ v)

    def normal(a, x):
        return a.T @ (a @ x)

    def maxdiff(a, b):
        return abs(a - b).max()

    mm = splyce.matmul

    def cg_chain(a, x, r, p):
        ap = mm(a, p)
        rr = r @ r
        alpha = rr / (p @ ap)
        r_new = r - alpha * ap
        return x + alpha * p, r_new, r_new + (r_new @ r_new) / rr * p

    chains = {
        "pagerank": lambda p, x: 0.85 * mm(p, x) + 0.15 / n,
        "cg": cg_chain,
        "gcn": lambda a: np.maximum(mm(a, X @ W), 0),
        "logreg": lambda a, w, y: mm(a.T, 1 / (1 + np.exp(-mm(a, w))) - y),
        "rownorm": lambda a: splyce.multiply(a, 1.0 / np.maximum(a.sum(axis=1), 1.0)[:, None]),
        "triangles": lambda l: splyce.multiply(mm(l, l), l).sum(),
        "axbx": lambda a, b, x: mm(a, x) + mm(b, x),
        "hsum": lambda a, b: splyce.multiply(a, b).sum(),
        "quad": lambda a, v: v @ mm(a, v),
        "normal": lambda a, x: mm(a.T, mm(a, x)),
        "maxdiff": lambda a, b: abs(splyce.subtract(a, b)).max(),
    }
    bodies = {
        "pagerank": (pagerank, pagerank, (P, x)),
        "cg": (cg_step, cg_step, (spd, x * 0, r, r.copy())),
        "gcn": (gcn, gcn, (A,)),
        "logreg": (logreg, logreg, (A, w, y)),
        "rownorm": (rownorm, rownorm, (A,)),
        "triangles": (triangles, scipy_triangles, (L,)),
        "axbx": (axbx, axbx, (A, B, x)),
        "hsum": (hsum, hsum, (A, B)),
        "quad": (quad, quad, (A, x)),
        "normal": (normal, normal, (A, x)),
        "maxdiff": (maxdiff, maxdiff, (A, B)),
    }
    return {name: (splyce.jit(body), reference, args, chains[name])
            for name, (body, reference, args) in bodies.items()}


def _first(result):
    """The first result of a program returning several (checked and compared as one array)."""
    return np.concatenate([np.ravel(r) for r in result]) if isinstance(result, tuple) else result


def run(cfg: Config) -> Result:
    names = {"fem2d-3k", "rmat-s10"} if cfg.tiny else None
    entries = corpus.chosen(cfg.quick, names, cfg.matrices)
    unknown = [p for p in cfg.ops if p not in PROGRAMS]
    if unknown:
        raise SystemExit(f"unknown program {', '.join(unknown)}; choose from {', '.join(PROGRAMS)}")
    programs = [p for p in PROGRAMS if not cfg.ops or p in cfg.ops]
    rows = []
    bar = _progress(0, "programs", cfg)
    from threadpoolctl import threadpool_limits

    import scipy.sparse as sps

    import splyce

    blas = threadpool_limits(1)   # one thread on both sides: NumPy's BLAS too (X @ W, the GCN layer)
    try:
        for entry in entries:
            A = corpus.build(entry, Path(cfg.out) / "corpus-cache")
            loops = {name: (whole, reference, args, one_by_one) for name, (whole, reference, one_by_one, args)
                     in loop_programs.programs(A).items()} if any(p in loop_programs.PROGRAMS for p in programs) else {}
            for name, (jitted, reference, args, chain) in {**_programs(A), **loops}.items():
                if name not in programs:
                    continue
                bar.set_description(f"programs {entry.name} {name}")
                want = _first(reference(*args))
                # the same jitted function on the sparse operands wrapped once (checked when wrapped, untimed)
                wrapped = tuple(splyce.asarray(a) if sps.issparse(a) else a for a in args)
                timings = measure({"scipy": lambda r=reference, a=args: _first(r(*a)),
                                   "chain": lambda c=chain, a=args: _first(c(*a)),
                                   "splyce": lambda f=jitted, a=args: _first(f(*a)),
                                   "wrapped": lambda f=jitted, a=wrapped: _first(f(*a))},
                                  want, cfg, desc=f"{entry.name} {name}", rtol=loop_programs.TOL.get(name, (1e-8,))[0],
                                  bar=bar, atol=loop_programs.TOL.get(name, (0, 1e-12))[1])
                t_scipy, t_chain, t_splyce, t_wrapped = (timings[k].median for k in
                                                         ("scipy", "chain", "splyce", "wrapped"))
                rows.append({"matrix": entry.name, "program": name, "n": A.shape[0], "nnz": A.nnz,
                             "scipy_s": t_scipy, "chain_s": t_chain, "splyce_s": t_splyce,
                             "splyce_vs_scipy": t_scipy / t_splyce, "splyce_vs_chain": t_chain / t_splyce,
                             "wrapped_s": t_wrapped, "wrapped_vs_chain": t_chain / t_wrapped,
                             "compile_s": timings["splyce"].compile})
    finally:
        blas.restore_original_limits()
        bar.close()
    by_program = {p: tuple(geomean(r[k] for r in rows if r["program"] == p)
                           for k in ("splyce_vs_scipy", "splyce_vs_chain", "wrapped_vs_chain")) for p in programs}
    summary = "; ".join(f"{p} {s:.2f}x / {c:.2f}x / {w:.2f}x" for p, (s, c, w) in by_program.items())
    note = (f"Median seconds of {cfg.n_repeats} interleaved repeats, one thread (NumPy's BLAS too); "
            "splyce_vs_scipy = scipy time / jitted time, splyce_vs_chain = time of the drop-ins called one "
            "after another / jitted time (> 1: the jitted body is faster). splyce_s: the jitted call on the scipy "
            "operands, which it checks on every call (the drop-ins check inside their kernels); wrapped_s: the "
            "same function on the operands wrapped once with splyce.asarray (checked when wrapped). "
            f"The iterative programs ({', '.join(loop_programs.KINDS)}: {loop_programs.UNROLLED} steps unrolled in one "
            f"jitted function, *-x{loop_programs.UNROLLED}, or {loop_programs.FORI} steps of splyce.fori_loop, *-fori) "
            "compare against the jitted one-step function called once per step in their chain columns. "
            "Geometric means over the matrices, vs scipy / vs the drop-in chain / wrapped vs the chain: "
            f"{summary}.")
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
