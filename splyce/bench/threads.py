"""``threads``: K3 (SpMTTKRP) and K1 (SpGEMM) at 1..os.cpu_count() threads (Figure 17), Splyce and the plain
sparsifier (``vectorize=False``) alike."""

from __future__ import annotations

import os

import numpy as np

from splyce.bench.common import Config, Result, _progress, measure

KERNEL_NAMES = ("K3", "K1")
COLUMNS = ["kernel", "threads", "baseline_1t_s", "baseline_s", "splyce_s", "self_scaling", "baseline_self_scaling",
           "speedup_vs_baseline_1t"]


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    from splyce.bench.kernels import size_for

    counts = list(range(1, (os.cpu_count() or 1) + 1))
    rows = []
    bar = _progress(len(KERNEL_NAMES) * 2 * len(counts) * (cfg.n_repeats + 1), "threads", cfg)
    try:
        for name in KERNEL_NAMES:
            spec = KERNELS[name]
            ops = spec.operands(size_for(spec, cfg), cfg.density)
            ref = spec.reference(*[o if isinstance(o, np.ndarray) else o.to_numpy() for o in ops])
            cands = {}
            for t in counts:
                cands[f"baseline-t{t}"] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vectorize=False, threads=t))
                cands[f"t{t}"] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, threads=t))
            tm = measure(cands, ref, cfg, desc=f"{name} threads", bar=bar)
            base, one = tm["baseline-t1"].median, tm["t1"].median
            for t in counts:
                rows.append({"kernel": f"{name} {spec.title}", "threads": t, "baseline_1t_s": base,
                             "baseline_s": tm[f"baseline-t{t}"].median, "splyce_s": tm[f"t{t}"].median,
                             "self_scaling": one / tm[f"t{t}"].median,
                             "baseline_self_scaling": base / tm[f"baseline-t{t}"].median,
                             "speedup_vs_baseline_1t": base / tm[f"t{t}"].median})
    finally:
        bar.close()
    return Result("threads", "K3 SpMTTKRP and K1 SpGEMM thread scaling (paper Figure 17)", COLUMNS, rows,
                  f"Outer loop parallel; {cfg.density * 100:g} % density; baseline = plain sparsifier "
                  "(vectorize=False) at the same thread count; self_scaling = one-thread time / this time.",
                  plot=_plot)


def _plot(rows, ax):
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        rs = [r for r in rows if r["kernel"] == kernel]
        xs = [r["threads"] for r in rs]
        label = kernel.split()[0]
        ax.plot(xs, [r["self_scaling"] for r in rs], "o-", label=f"{label} Splyce self-scaling")
        ax.plot(xs, [r["speedup_vs_baseline_1t"] for r in rs], "s-", label=f"{label} vs 1-thread plain sparsifier")
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8)
