"""``python -m splyce.bench SUBCOMMAND``: the paper's experiments and the comparison with peers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from splyce.bench.common import METHODOLOGY, BenchMismatch, Config, machine_lines

SUBCOMMANDS = {
    "kernels": "K1-K5 at --density vs the plain sparsifier, scipy, pydata-sparse and the drop-ins (Table 3)",
    "ablation": "the 8 phase configurations of K1, strict and fast-math (Tables 1-2)",
    "width": "vector widths 2, 4, 8, 16 across densities, K1 (Figure 12)",
    "sparsity": "speedup and SIMD share from 0.01 %% to 10 %% density, --kernel (Figure 13)",
    "real": "the drop-ins vs scipy, GraphBLAS and pydata-sparse on a realistic corpus, 9 ops (docs/corpus.md)",
    "formats": "the drop-ins on scipy COO / DIA / BSR / LIL and pydata COO / GCXS operands vs scipy's and pydata's "
               "own operators: SpMV, SpMM, multiply, add, SpGEMM (docs/guide/formats.md)",
    "threads": "K3 and K1 at 1..cpu_count threads, Splyce and the plain sparsifier (Figure 17)",
    "memory": "the drop-ins on the largest corpus matrices with and without the cache of freed buffers, 1 and 2 "
              "threads (docs/memory.md)",
    "compile": "cold compile vs disk-cache load of K1-K5, results checked",
    "programs": "algorithm bodies (PageRank, CG, GCN, logistic regression, row normalisation, triangles) and five "
                "small programs of several ops jitted whole vs scipy / NumPy and vs the drop-ins called one after "
                "another, on the corpus; --ops picks programs",
    "forms": "every one-op form users write (unary maps, binary ops, reductions, scaling, comparisons, products, "
             "transposes, conversions) jitted on operands wrapped once vs scipy and the drop-ins, on the corpus; "
             "--ops picks forms, --matrices matrices",
    "overhead": "fixed costs per op: first call cold / from the disk cache (fresh processes), steady, 4x4 call, vs scipy",
    "limit": "the fiber-pair sparse dot vs the plain sparsifier, NumKong and the bandwidth floor (issue 36)",
    "sweep": "limit's fiber-pair sparse dot across coordinate distributions (uniform, clustered runs, power-law gaps, "
             "skews) vs NumKong and the read floor (issue 59)",
    "dask": "SpMV, SpGEMM, triangles on a 2-worker Dask LocalCluster: 1 vs 2 workers, vs dask + pydata-sparse",
    "clients": "networkx / scikit-learn / scanpy-style client code with splyce.patch_scipy() off and on, and the "
               "per-op break-even sizes (docs/scipy_patch.md; needs the compat extra)",
    "calls": "a cached jitted SpMV per calling convention: positional, keywords, pytrees, static arguments "
             "(docs/tracing.md)",
    "indexing": "row / column slices and gathers of CSR arguments and gathers of dense values inside @splyce.jit "
                "vs the same expression in scipy / NumPy (docs/tracing.md)",
    "grad": "a jitted gradient step (GCN, logistic regression, masked factorisation) vs jax.jit(jax.grad) on BCOO "
            "and a hand-written scipy gradient, with first-call times (issue 57; needs jax)",
    "jit_formats": "jitted SpMV, SpMM, PageRank, power iteration and a GCN layer on scipy BSR / DIA / COO operands "
                   "(held in their format) vs the same on CSR and vs scipy (docs/guide/formats.md)",
    "vector_math": "exp / log / log1p / expm1 / tanh / sin / cos in compiled kernels: max ulp error per dtype and "
                   "libmvec vs libm vs NumPy speed, jitted exp, log1p of a CSR matrix, the logistic gradient step",
    "all": "every subcommand above but dask, overhead, clients, calls, indexing, grad, jit_formats and vector_math, "
           "in turn",
}
ORDER = ["kernels", "ablation", "width", "sparsity", "real", "programs", "threads", "memory", "compile", "limit"]

EPILOG = "Methodology:\n" + METHODOLOGY + """
Outputs: each subcommand writes <name>.csv (machine info as leading '#' lines), <name>.md and <name>.png
into --out, and prints the Markdown table. A result that disagrees with the reference aborts with exit 1.
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m splyce.bench", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("subcommand", choices=list(SUBCOMMANDS),
                   help="; ".join(f"{k}: {v}" for k, v in SUBCOMMANDS.items()))
    p.add_argument("--out", default="bench-results", help="output folder (default: bench-results/)")
    p.add_argument("--quick", action="store_true", help="small sizes and 3 repeats (all --quick: < 3 min)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per candidate (default 5; 3 quick)")
    p.add_argument("--density", type=float, default=0.05, help="density for kernels / threads (default 0.05)")
    p.add_argument("--kernel", default="K1", choices=["K1", "K2", "K3", "K4", "K5"],
                   help="kernel for sparsity (default K1)")
    p.add_argument("--ops", default="",
                   help="real / dask: comma-separated ops to run (default all), e.g. spmv,spgemm; dask --ops gathered: "
                        "one SpGEMM gathered to the client on 1 worker vs the single-process drop-in (issue 35)")
    p.add_argument("--matrices", default="",
                   help="real / programs / forms: comma-separated corpus matrices to run (default all), e.g. ba-100k,pyamg-bar")
    p.add_argument("--target", default="native",
                   help="kernels: compile the plain sparsifier and Splyce for this target: native (default), avx2 "
                        "(AVX2 code, runs on any AVX2 host: the paper's AVX2 column on an AVX-512 machine) or avx512")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # seconds-long runs for the tests
    return p


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def run_one(name: str, cfg: Config):
    import importlib

    module = importlib.import_module(f"splyce.bench.{name}")
    result = module.run(cfg)
    paths = result.write(cfg)
    print(result.markdown())
    print("wrote " + ", ".join(str(p) for p in paths.values()) + "\n", flush=True)
    return result


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    tiny = args.tiny or os.environ.get("SPLYCE_BENCH_TINY") == "1"
    cfg = Config(out=Path(args.out), quick=args.quick or tiny, tiny=tiny, repeats=args.repeats,
                 density=args.density, kernel=args.kernel, progress=not args.no_progress,
                 ops=_names(args.ops), matrices=_names(args.matrices), target=args.target)
    print("# splyce.bench " + args.subcommand + (" (quick)" if cfg.quick else "") +
          (f" (target {cfg.target})" if cfg.target != "native" else ""))
    for line in machine_lines():
        print("# " + line)
    print(flush=True)
    names = ORDER if args.subcommand == "all" else [args.subcommand]
    try:
        for name in names:
            run_one(name, cfg)
    except BenchMismatch as e:
        print(f"\nsplyce.bench: RESULT MISMATCH, run aborted: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
