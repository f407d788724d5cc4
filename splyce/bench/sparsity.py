"""``sparsity``: speedup and SIMD share from 0.01 % to 10 % density (Figure 13), K1 by default.

At low densities K1 and K2 grow N so that the plain sparsifier still takes a measurable time (about a fixed
number of merge steps); the other kernels keep their benchmark sizes (docs/kernels.md).
"""

from __future__ import annotations

import math

import numpy as np

from splyce.bench.common import Config, Result, _progress, measure, random_sparse, simd_share


def densities(cfg: Config):
    if cfg.tiny:
        return (0.001, 0.05)
    if cfg.quick:
        return (0.0001, 0.001, 0.01, 0.05, 0.1)
    return (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.05, 0.1)


def grown_size(kernel: str, d: float, cfg: Config) -> int:
    """N for K1 (steps ~ 2 d N^3) and K2 (steps ~ 2 d N^2) at density d."""
    if kernel == "K1":
        n0, steps, cap = (64, 2e5, 128) if cfg.tiny else ((256, 4e6, 1024) if cfg.quick else (1500, 1e8, 6000))
        return int(min(cap, max(n0, (steps / (2 * d)) ** (1 / 3))))
    n0, steps, cap = (512, 1e5, 2048) if cfg.tiny else ((2048, 1e6, 20000) if cfg.quick else (20000, 4e7, 300000))
    return int(min(cap, max(n0, math.sqrt(steps / (2 * d)))))


def make_case(kernel: str, d: float, cfg: Config, seed: int = 0):
    """(operands, reference, size label) for one density."""
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    from splyce.bench.kernels import TINY_SIZES

    rng = np.random.default_rng(seed)
    if kernel in ("K1", "K2"):
        n = grown_size(kernel, d, cfg)
        B = random_sparse((n, n), d, rng, "csr")
        if kernel == "K1":
            C = random_sparse((n, n), d, rng, "csc")
            ops = [splyce.asarray(B, format=splyce.CSR), splyce.asarray(C, format=splyce.CSC)]
            ref = lambda: (B @ C).toarray() if n > 2000 else B.toarray() @ C.toarray()
        else:
            c = random_sparse((1, n), max(d, 1.0 / n), rng, "csr")
            cd = c.toarray().ravel()
            ops = [splyce.asarray(B, format=splyce.CSR), splyce.asarray(cd, format=splyce.SPARSE_VECTOR)]
            ref = lambda: B @ cd
        return ops, ref, str(n)
    spec = KERNELS[kernel]
    size = TINY_SIZES[kernel] if cfg.tiny else (spec.quick_size if cfg.quick else spec.bench_size)
    ops = spec.operands(size, d)
    ref = lambda: spec.reference(*[o if isinstance(o, np.ndarray) else o.to_numpy() for o in ops])
    return ops, ref, "x".join(map(str, size)) if isinstance(size, tuple) else str(size)


COLUMNS = ["kernel", "density", "size", "baseline_s", "splyce_s", "speedup_vs_baseline", "simd_share"]


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS[cfg.kernel]
    ds = densities(cfg)
    rows = []
    bar = _progress(len(ds) * 2 * (cfg.n_repeats + 1), f"sparsity {cfg.kernel}", cfg)
    try:
        for d in ds:
            ops, ref, label = make_case(cfg.kernel, d, cfg)
            base, fast = splyce.jit(spec.fun, vectorize=False), splyce.jit(spec.fun)
            t = measure({"baseline": lambda: base(*ops), "splyce": lambda: fast(*ops)}, ref, cfg,
                        desc=f"{cfg.kernel} d={d:g}", bar=bar)
            rows.append({"kernel": cfg.kernel, "density": d, "size": label, "baseline_s": t["baseline"].median,
                         "splyce_s": t["splyce"].median,
                         "speedup_vs_baseline": t["baseline"].median / t["splyce"].median,
                         "simd_share": simd_share(spec.fun, tuple(ops))})
            ops = None  # free this density's operands before building the next
    finally:
        bar.close()
    worst = min(rows, key=lambda r: r["speedup_vs_baseline"])
    note = (f"{cfg.kernel} {spec.title}, uniform random operands, both sparse operands at the same density; "
            "size = N (grown at low density so the baseline stays measurable) or the docs/kernels.md shape. "
            f"Minimum speedup {worst['speedup_vs_baseline']:.3g}x at {worst['density'] * 100:g} %.")
    return Result(f"sparsity_{cfg.kernel}", f"Speedup vs density, {cfg.kernel} (paper Figure 13)", COLUMNS, rows,
                  note, plot=_plot)


def _plot(rows, ax):
    xs = [r["density"] * 100 for r in rows]
    ax.plot(xs, [r["speedup_vs_baseline"] for r in rows], "o-", label="speedup vs plain sparsifier")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("density (%)")
    ax.set_ylabel("speedup")
    shares = [r["simd_share"] for r in rows]
    if any(s == s for s in shares):
        ax2 = ax.twinx()
        ax2.plot(xs, [s * 100 if s == s else np.nan for s in shares], "s--", color="tab:orange",
                 label="SIMD share (%)")
        ax2.set_ylabel("SIMD share (%)")
        ax2.set_ylim(0, 100)
        ax2.legend(loc="lower right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
