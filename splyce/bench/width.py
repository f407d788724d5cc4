"""``width``: the fast lane's vector width n = 2, 4, 8, 16 across densities, K1 (Figure 12)."""

from __future__ import annotations

import numpy as np

from splyce.options import DEFAULT_PHASES
from splyce.bench.common import Config, Result, _progress, measure
from splyce.bench.kernels import size_for

WIDTHS = (2, 4, 8, 16)


def densities(cfg: Config):
    return (0.02, 0.1) if cfg.tiny else ((0.01, 0.05, 0.1) if cfg.quick else (0.01, 0.02, 0.05, 0.1))


# Full runs sweep 4 densities x 5 candidates: K1 at half its bench size keeps that under a minute.
FULL_K1_SIZE = 1000


COLUMNS = ["density", "width", "median_s", "baseline_s", "speedup_vs_baseline"]


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS["K1"]
    n = min(size_for(spec, cfg), FULL_K1_SIZE)
    rows = []
    ds = densities(cfg)
    bar = _progress(len(ds) * (len(WIDTHS) + 1) * (cfg.n_repeats + 1), "width", cfg)
    try:
        for d in ds:
            ops = spec.operands(n, d)
            ref = spec.reference(*[o.to_numpy() for o in ops])
            cands = {"baseline": (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vectorize=False))}
            for w in WIDTHS:
                cands[f"n={w}"] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vector_width=w))
            t = measure(cands, ref, cfg, desc=f"K1 d={d}", bar=bar)
            base = t["baseline"].median
            for w in WIDTHS:
                m = t[f"n={w}"].median
                rows.append({"density": d, "width": w, "median_s": m, "baseline_s": base,
                             "speedup_vs_baseline": base / m})
    finally:
        bar.close()
    note = f"K1 SpGEMM, N = {n}, default phases ({DEFAULT_PHASES}), strict math; median of {cfg.n_repeats} interleaved repeats."
    return Result("width", "Vector width vs density, K1 (paper Figure 12)", COLUMNS, rows, note, plot=_plot)


def _plot(rows, ax):
    ds = sorted({r["density"] for r in rows})
    x = np.arange(len(ds))
    for i, w in enumerate(WIDTHS):
        ys = [next(r["speedup_vs_baseline"] for r in rows if r["density"] == d and r["width"] == w) for d in ds]
        ax.bar(x + (i - 1.5) * 0.2, ys, 0.2, label=f"n = {w}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{d * 100:g} %" for d in ds])
    ax.set_xlabel("density")
    ax.set_ylabel("speedup vs plain sparsifier")
    ax.legend(fontsize=8)
