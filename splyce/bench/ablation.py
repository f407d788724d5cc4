"""``ablation``: the eight phase configurations of the fast lane on K1, strict and fast-math (Tables 1-2)."""

from __future__ import annotations

import numpy as np

from splyce.backend.compiler import DEFAULT_PHASES
from splyce.bench.common import Config, Result, _progress, measure
from splyce.bench.kernels import size_for

PHASE_NAMES = ("load+compare", "multiply-accumulate", "pointer advance")


def phase_bits(c: int) -> str:
    """Configuration c in 1..8: bits of c-1 as (phase1, phase2, phase3), MSB first; S = SIMD, x = scalar."""
    b = c - 1
    return "".join("S" if (b >> s) & 1 else "x" for s in (2, 1, 0))


COLUMNS = ["config", "phases", "fast_math", "median_s", "min_s", "speedup_vs_baseline", "compile_s"]


def run(cfg: Config) -> Result:
    import splyce
    from splyce.kernels import KERNELS

    spec = KERNELS["K1"]
    n = size_for(spec, cfg)
    ops = spec.operands(n, cfg.density)
    ref = spec.reference(*[o.to_numpy() for o in ops])
    candidates, tol = {"baseline": (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vectorize=False))}, {}
    for fm in (False, True):
        for c in range(1, 9):
            key = f"{c}{'-fm' if fm else ''}"
            candidates[key] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, phases=c, fast_math=fm))
            tol[key] = 1e-9 if not fm else 1e-7
    bar = _progress(len(candidates) * (cfg.n_repeats + 1), "ablation", cfg)
    try:
        t = measure(candidates, ref, cfg, desc="K1 ablation", rtol=tol, bar=bar)
    finally:
        bar.close()
    base = t["baseline"].median
    rows = [{"config": "baseline", "phases": "plain sparsifier", "fast_math": "", "median_s": base,
             "min_s": t["baseline"].min, "speedup_vs_baseline": 1.0, "compile_s": t["baseline"].compile}]
    for fm in (False, True):
        for c in range(1, 9):
            tm = t[f"{c}{'-fm' if fm else ''}"]
            rows.append({"config": c, "phases": phase_bits(c), "fast_math": "on" if fm else "off",
                         "median_s": tm.median, "min_s": tm.min, "speedup_vs_baseline": base / tm.median,
                         "compile_s": tm.compile})
    note = (f"K1 SpGEMM, N = {n}, {cfg.density * 100:g} % density. phases: (1 load + all-pairs compare, "
            f"2 multiply-accumulate, 3 pointer advance), S = SIMD, x = scalar; configuration {DEFAULT_PHASES} "
            f"({phase_bits(DEFAULT_PHASES)}) is splyce's default (the paper's best was 5). fast_math = reassociation allowed (Table 2), results then checked with rtol 1e-7.")
    return Result("ablation", "K1 phase ablation, strict and fast-math (paper Tables 1-2)", COLUMNS, rows, note,
                  plot=_plot)


def _plot(rows, ax):
    x = np.arange(1, 9)
    for fm, label in (("off", "strict"), ("on", "fast-math")):
        ys = [r["speedup_vs_baseline"] for r in rows if r["fast_math"] == fm]
        ax.bar(x + (-0.2 if fm == "off" else 0.2), ys, 0.4, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{c}\n{phase_bits(c)}" for c in x])
    ax.set_ylabel("speedup vs plain sparsifier")
    ax.legend(fontsize=8)
