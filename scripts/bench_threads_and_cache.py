"""Disk cache and threads measurements (a script, not a timed test).

    python scripts/bench_threads_and_cache.py cache     # cold compile vs disk-cache load, K1-K5
    python scripts/bench_threads_and_cache.py threads   # K3 and K1 at 5 %, KERNELS.md sizes, threads 1 vs 2
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

import splyce
from splyce.kernels import KERNELS


def _first_call_minus_run(f, ops):
    start = time.perf_counter()
    f(*ops)
    first = time.perf_counter() - start
    start = time.perf_counter()
    f(*ops)
    return first - (time.perf_counter() - start)


def cache():
    os.environ["SPLYCE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splyce-bench-cache-")
    warm = KERNELS["K2"]
    splyce.jit(warm.fun, vector_width=2)(*warm.operands(64, 0.2))   # imports, LLVM init, source hash
    print("| kernel | cold compile (ms) | disk load (ms) |\n| --- | --- | --- |")
    for name, spec in KERNELS.items():
        ops = spec.operands(spec.quick_size)
        cold = _first_call_minus_run(splyce.jit(spec.fun), ops)
        splyce.clear_cache()
        f = splyce.jit(spec.fun)
        load = _first_call_minus_run(f, ops)
        assert f.cache_info().disk_hits == 1
        print(f"| {name} | {cold * 1e3:.0f} | {load * 1e3:.1f} |")


def threads(repeats=5):
    print("| kernel | vectorize | threads=1 (s) | threads=2 (s) | speedup |\n| --- | --- | --- | --- | --- |")
    for name in ("K3", "K1"):
        spec = KERNELS[name]
        ops = spec.operands(density=0.05)
        for vectorize in (True, False):
            medians = []
            for t in (1, 2):
                f = splyce.jit(spec.fun, vectorize=vectorize, threads=t)
                f(*ops)
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    f(*ops)
                    times.append(time.perf_counter() - start)
                medians.append(statistics.median(times))
            print(f"| {name} | {vectorize} | {medians[0]:.3f} | {medians[1]:.3f} | {medians[0] / medians[1]:.2f}x |")


if __name__ == "__main__":
    {"cache": cache, "threads": threads}[sys.argv[1] if len(sys.argv) > 1 else "cache"]()
