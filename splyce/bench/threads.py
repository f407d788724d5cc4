"""``threads``: K3 (SpMTTKRP) at 1..os.cpu_count() threads (Figure 17), when ``splyce.jit`` has ``threads=``."""

from __future__ import annotations

import inspect
import os

import numpy as np

from splyce.bench.common import Config, Result, _progress, measure


def supported() -> bool:
    import splyce

    try:
        return "threads" in inspect.signature(splyce.jit).parameters
    except (TypeError, ValueError):
        return False


UNSUPPORTED = ("threads: this splyce.jit has no `threads=` option yet (multithreading is not available in this "
               "build); nothing to measure.")

COLUMNS = ["threads", "baseline_1t_s", "splyce_s", "self_scaling", "speedup_vs_baseline_1t"]


def run(cfg: Config) -> Result | None:
    if not supported():
        print(UNSUPPORTED)
        return None
    import splyce
    from splyce.kernels import KERNELS

    from splyce.bench.kernels import size_for

    spec = KERNELS["K3"]
    ops = spec.operands(size_for(spec, cfg), cfg.density)
    ref = spec.reference(*[o if isinstance(o, np.ndarray) else o.to_numpy() for o in ops])
    counts = list(range(1, (os.cpu_count() or 1) + 1))
    cands = {"baseline": (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vectorize=False))}
    for t in counts:
        cands[f"t{t}"] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, threads=t))
    bar = _progress(len(cands) * (cfg.n_repeats + 1), "threads", cfg)
    try:
        tm = measure(cands, ref, cfg, desc="K3 threads", bar=bar)
    finally:
        bar.close()
    base, one = tm["baseline"].median, tm["t1"].median
    rows = [{"threads": t, "baseline_1t_s": base, "splyce_s": tm[f"t{t}"].median,
             "self_scaling": one / tm[f"t{t}"].median, "speedup_vs_baseline_1t": base / tm[f"t{t}"].median}
            for t in counts]
    return Result("threads", "K3 SpMTTKRP thread scaling (paper Figure 17)", COLUMNS, rows,
                  "Outer loop parallel; baseline = plain sparsifier on one thread.", plot=_plot)


def _plot(rows, ax):
    xs = [r["threads"] for r in rows]
    ax.plot(xs, [r["self_scaling"] for r in rows], "o-", label="Splyce self-scaling")
    ax.plot(xs, [r["speedup_vs_baseline_1t"] for r in rows], "s-", label="vs 1-thread plain sparsifier")
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8)
