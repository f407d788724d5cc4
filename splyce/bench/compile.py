"""``compile``: cold compile vs disk-cache load of K1-K5, each result checked against the reference; before its
table, a new program's first call (SpMV, a GCN layer, 10 PageRank steps) from an empty cache in a fresh process
split by stage, beside ``jax.jit``'s (``first_call.py``).

Per kernel and repeat: the disk cache (a private temporary folder) is emptied, a fresh ``splyce.jit`` is called
once (a cold compile) and again (a cached run); then the in-memory caches are emptied and a second fresh
``splyce.jit`` is called once (served from disk: it must count one disk hit) and again. ``cold_s`` and
``load_s`` time the first call's kernel lookup (``kernel_for``: trace, plan, compile or load), without the
kernel's own run.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from splyce.bench.common import Config, Result, _progress, check, empty_disk_cache
from splyce.bench.kernels import size_for

COLUMNS = ["kernel", "size", "cold_s", "mlir_s", "llvm_opt_s", "codegen_load_s", "trace_plan_s", "load_s", "run_s",
           "cold_vs_load"]

# Where a cold compile's time goes (``Lowering.timings``, backend/compiler.py): MLIR (trace -> linalg,
# sparsifier and bufferization, the Splyce pass, MLIR -> LLVM IR), LLVM's O3 pipeline, then instruction
# selection, linking and loading (a shared library, ``build``; MCJIT without a linker). The rest of ``cold_s`` is tracing, planning and the disk-cache key.
_MLIR_STAGES = ("linalg", "scf", "splyce", "to_llvm")


def _first_minus_run(f, ops, ref, desc) -> tuple[float, float]:
    """(the first call's compile or load: ``kernel_for``, which traces, plans and compiles or loads without
    running; then the run after it), the results of a first and a second call both checked. Timing the
    lookup itself, not a first call minus a run: K1's run of 0.6 s varies by more than its 5 ms load (one
    run had read 51 ms)."""
    t0 = time.perf_counter()
    f.kernel_for(*ops)
    t1 = time.perf_counter()
    first = f(*ops)
    t2 = time.perf_counter()
    again = f(*ops)
    t3 = time.perf_counter()
    check(desc + " first call", first, ref)
    check(desc + " second call", again, ref)
    return t1 - t0, min(t2 - t1, t3 - t2)


def _warm_process() -> None:
    """Imports, LLVM initialisation and the source hash happen once per process, not in the first kernel."""
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS["K2"]
    splyce.jit(spec.fun, vector_width=2)(*spec.operands(64, 0.2))


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    rows = []
    bar = _progress(len(KERNELS) * cfg.n_repeats, "compile", cfg)
    try:
        with empty_disk_cache("splyce-bench-cache-"):
            _warm_process()
            for name, spec in KERNELS.items():
                size = size_for(spec, cfg)
                ops = spec.operands(size, cfg.density)
                ref = spec.reference(*[o if isinstance(o, np.ndarray) else o.to_numpy() for o in ops])
                cold, load, runs, stages = [], [], [], []
                for _ in range(cfg.n_repeats):
                    splyce.clear_cache(disk=True)
                    fresh = splyce.jit(spec.fun)
                    c, r = _first_minus_run(fresh, ops, ref, f"{name} cold")
                    timings = fresh.lower(*ops).timings
                    stages.append((sum(timings.get(k, 0.0) for k in _MLIR_STAGES), timings.get("llvm", 0.0),
                                   timings.get("load", 0.0)))
                    splyce.clear_cache()
                    loaded = splyce.jit(spec.fun)
                    d, r2 = _first_minus_run(loaded, ops, ref, f"{name} disk load")
                    info = loaded.cache_info()
                    if info.disk_hits != 1 or info.compiles != 0:
                        raise RuntimeError(f"compile bench: {name} was not served by the disk cache ({info})")
                    cold.append(c)
                    load.append(d)
                    runs += [r, r2]
                    bar.update(1)
                cold_s, load_s = statistics.median(cold), statistics.median(load)
                mlir_s, llvm_s, codegen_s = (statistics.median(x) for x in zip(*stages))
                rows.append({"kernel": f"{name} {spec.title}",
                             "size": "x".join(map(str, size)) if isinstance(size, tuple) else str(size),
                             "cold_s": cold_s, "mlir_s": mlir_s, "llvm_opt_s": llvm_s, "codegen_load_s": codegen_s,
                             "trace_plan_s": max(cold_s - mlir_s - llvm_s - codegen_s, 0.0),
                             "load_s": load_s, "run_s": statistics.median(runs),
                             "cold_vs_load": cold_s / load_s if load_s > 0 else float("inf")})
    finally:
        bar.close()
    note = ("cold_s = the first call's kernel lookup (`kernel_for`) of a fresh `splyce.jit` with an empty disk cache "
            "(trace, plan, lowering, Splyce pass, LLVM codegen), without the run; of it mlir_s: MLIR (linalg, "
            "sparsifier, Splyce pass, to LLVM IR), llvm_opt_s: LLVM's O3 pipeline, codegen_load_s: instruction "
            "selection, linking into a shared library and loading it, trace_plan_s: the rest (tracing, planning, disk key); load_s = the same after emptying "
            "only the in-memory "
            f"caches (the kernel comes from the disk cache); medians of {cfg.n_repeats} repeats in a warm process "
            "(the process's first MLIR context is excluded); run_s = the faster of the two runs after it. Every call's "
            "result is checked against the reference.")
    return Result("compile", "Cold compile vs disk-cache load, K1-K5", COLUMNS, rows, note, plot=_plot,
                  preface=_first_calls(cfg))


def _first_calls(cfg: Config) -> str:
    """A new program's first call from an empty disk cache in a fresh process, split by stage, beside
    ``jax.jit``'s (``first_call.py``); not in ``--tiny`` runs (two fresh processes per program)."""
    if cfg.tiny:
        return "First calls of new programs (fresh processes): skipped in --tiny runs.\n"
    from splyce.bench import first_call

    rows = first_call.measure(n=30000, repeats=1 if cfg.quick else 2, out=lambda line: None)
    lines = ["First call of a new program from an empty disk cache, each in a fresh process (30k-row random graph, "
             "10 entries a row; `python -m splyce.bench.first_call`); splyce's split: trace_plan (with imports "
             "of MLIR and the first run's setup), MLIR, LLVM optimisation, codegen + link + load, run (a second "
             "call).", "",
             "| program | framework | first s | trace_plan s | mlir s | llvm s | codegen+load s | run ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["framework"] == "splyce":
            lines.append(f"| {r['program']} | splyce | {r['first_s']:.3f} | {r['trace_plan_s']:.3f} | "
                         f"{r['mlir_s']:.3f} | {r['llvm_s']:.3f} | {r['codegen_load_s']:.3f} | {r['run_s'] * 1e3:.2f} |")
        else:
            lines.append(f"| {r['program']} | {r['framework']} | {r['first_s']:.3f} | | | | | {r['run_s'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


def _plot(rows, ax):
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["cold_s"] * 1e3 for r in rows], 0.4, label="cold compile")
    ax.bar(x + 0.2, [r["load_s"] * 1e3 for r in rows], 0.4, label="disk-cache load")
    ax.set_xticks(x, [r["kernel"].split()[0] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("ms (first call minus a cached run)")
    ax.legend(fontsize=8)
