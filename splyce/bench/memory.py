"""``memory``: the drop-ins with and without the cache of freed large buffers (native/memory_pool.py), in one
process, interleaved, on one and two threads, beside scipy (docs/memory.md).

"off" switches the allocator hook off for that candidate only (``api._pool_for`` and its dense-product twin
return None while it runs), so every candidate keeps its own steady state: the cache keeps what the "on"
candidates freed, and the "off" ones allocate from libc as before the cache existed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from splyce.bench.common import Config, Result, _progress, measure
from splyce.bench import corpus, real

# The corpus matrices whose results are large enough for the cache to matter (>= 1 MiB), and the ops whose
# results or buffers are.
MATRICES = ("fem2d-250k", "fem3d-100k", "ba-100k", "road-700", "banded-150k", "blockdiag-1500", "rmat-s13")
OPS = ("spmv", "spmm", "hadamard", "add", "spgemm", "masked", "sddmm")
COLUMNS = ["matrix", "nnz", "op", "scipy_s", "t1_off_s", "t1_on_s", "t2_off_s", "t2_on_s", "t1_on_vs_off",
           "t2_on_vs_off", "t2_vs_t1_on", "t1_on_vs_scipy", "hits", "misses"]


def _without_pool(fn):
    import splyce.api as api

    def run():
        saved = api._pool_for, api._pool_for_dense_product
        api._pool_for = api._pool_for_dense_product = lambda *xs: None
        try:
            return fn()
        finally:
            api._pool_for, api._pool_for_dense_product = saved
    return run


def run(cfg: Config) -> Result:
    from splyce.native import memory_pool

    if cfg.tiny:
        entries = real.tiny_entries()
    else:
        everything = {e.name: e for e in corpus.entries()}
        names = real._chosen(cfg.matrices, list(everything), "matrix") if cfg.matrices else list(MATRICES)
        entries = [everything[n] for n in names]
    ops = real._chosen(cfg.ops, list(OPS), "op") if cfg.ops else list(OPS)
    cache_dir = Path(cfg.out) / "corpus-cache"
    rows = []
    bar = _progress(len(entries) * len(ops) * 5 * (cfg.n_repeats + 1), "memory", cfg)
    try:
        for entry in entries:
            A = corpus.build(entry, cache_dir)
            d = real.Operands(entry.name, A)
            for op in ops:
                ref, _ = real._reference(op, d)
                cands = {"scipy": real.scipy_call(op, d),
                         "t1-off": _without_pool(real.splyce_call(op, d, threads=1)),
                         "t1-on": real.splyce_call(op, d, threads=1),
                         "t2-off": _without_pool(real.splyce_call(op, d, threads=2)),
                         "t2-on": real.splyce_call(op, d, threads=2)}
                before = memory_pool.stats()
                tm = measure(cands, ref, cfg, desc=f"memory {entry.name} {op}", bar=bar)
                after = memory_pool.stats()
                m = {k: t.median for k, t in tm.items()}
                rows.append({"matrix": entry.name, "nnz": A.nnz, "op": op, "scipy_s": m["scipy"],
                             "t1_off_s": m["t1-off"], "t1_on_s": m["t1-on"], "t2_off_s": m["t2-off"],
                             "t2_on_s": m["t2-on"], "t1_on_vs_off": m["t1-off"] / m["t1-on"],
                             "t2_on_vs_off": m["t2-off"] / m["t2-on"], "t2_vs_t1_on": m["t1-on"] / m["t2-on"],
                             "t1_on_vs_scipy": m["scipy"] / m["t1-on"],
                             "hits": after["hits"] - before["hits"], "misses": after["misses"] - before["misses"]})
    finally:
        bar.close()
    note = (f"Median seconds of {cfg.n_repeats} interleaved repeats. on = the drop-in as shipped (NumPy allocates "
            "from splyce's cache of freed large buffers); off = the same call with the allocator hook off; t1 / t2 "
            "= threads=1 / 2. *_on_vs_off = off time / on time (> 1: the cache helps). hits / misses: the cache's "
            "reuses and fresh large blocks over the whole measurement of that row. docs/memory.md.")
    return Result("memory", "Drop-ins with and without the cache of freed buffers", COLUMNS, rows, note, plot=_plot)


def _plot(rows, ax):
    labels = [f"{r['matrix']}\n{r['op']}" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["t1_on_vs_off"] for r in rows], 0.4, label="one thread")
    ax.bar(x + 0.2, [r["t2_on_vs_off"] for r in rows], 0.4, label="two threads")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels, rotation=90, fontsize=6)
    ax.set_ylabel("time without the cache / with it")
    ax.legend(fontsize=8)
