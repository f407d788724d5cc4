"""Warm per-call microseconds of the jit, the drop-in and scipy on the bench real operands (docs/caches.md).

Usage: python docs/scripts/small_calls.py OPS MATRICES [CALLS] [CORPUS_CACHE]
  e.g. python docs/scripts/small_calls.py spmv,hadamard,triangles blockdiag-32,road-100 200 bench-results/corpus-cache
Per op and matrix: two interleaved rounds of (jit, drop-in, scipy), each the best of 5 loops of CALLS / 5 calls
back to back (warm caches, unlike bench real's single calls after gc.collect()); the minimum over the rounds.
The jit runs on SparseTensors made once, the drop-in and scipy on the scipy operands, as in bench real.
Run from the repository root so that its splyce is imported (PYTHONPATH=. when this is a worktree).
"""
import sys
import time
from pathlib import Path

from splyce.bench import corpus, real

ops, names = sys.argv[1].split(","), sys.argv[2].split(",")
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 300
cache = Path(sys.argv[4] if len(sys.argv) > 4 else "bench-results/corpus-cache")
entries = {e.name: e for e in corpus.entries()}


def best(f):
    f()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            f()
        times.append((time.perf_counter() - start) / (calls // 5))
    return min(times) * 1e6


for name in names:
    d = real.Operands(name, corpus.build(entries[name], cache))
    for op in ops:
        fns = {"jit": real.jit_call(op, d), "dropin": real.splyce_call(op, d), "scipy": real.scipy_call(op, d)}
        rounds = [{k: best(f) for k, f in fns.items()} for _ in range(2)]     # interleaved rounds
        got = {k: min(r[k] for r in rounds) for k in fns}
        print(f"{name:22s} {op:10s} " + "  ".join(f"{k} {v:8.1f}" for k, v in got.items())
              + f"  jit/dropin {got['dropin'] / got['jit']:.2f}", flush=True)
