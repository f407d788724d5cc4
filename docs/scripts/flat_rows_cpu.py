"""SpMV on the MLIR kernel's loop nest, on its flat row loop, on the drop-in's native flat kernel and in scipy,
and programs jitted with and without the native library against the chain of drop-ins, in the calling
thread's CPU time per call (median of interleaved repeats, one BLAS thread): docs/passes.md, "Row sums on
rows of a few entries".

    python docs/scripts/flat_rows_cpu.py [MATRIX,...] [PROGRAM,...]   (default road-700 pagerank,quad,axbx)
"""
import sys
from pathlib import Path
import numpy as np
import scipy.sparse as sps
import splyce
from threadpoolctl import threadpool_limits
from splyce.bench import corpus
from splyce.bench.common import thread_cpu_per_call as cpu
from splyce.bench.programs import _programs

everything = {e.name: e for e in corpus.entries()}


names = (sys.argv[1] if len(sys.argv) > 1 else "road-700").split(",")
programs = (sys.argv[2] if len(sys.argv) > 2 else "pagerank,quad,axbx").split(",")
with threadpool_limits(1):
    for name in names:
        A = corpus.build(everything[name], Path("bench-results") / "corpus-cache").tocsr()
        T, x = splyce.asarray(A), np.random.default_rng(0).random(A.shape[0])
        calls = {"flat loop": (lambda f=splyce.jit(lambda a, x: a @ x, library=False): f(T, x)),
                 "loop nest": (lambda f=splyce.jit(lambda a, x: a @ x, library=False, vectorize=False): f(T, x)),
                 "native": lambda: splyce.matmul(A, x), "scipy": lambda: A @ x}
        progs = _programs(A)
        for p in programs:
            jitted, _, args, chain = progs[p]
            wrapped = tuple(splyce.asarray(a) if sps.issparse(a) else a for a in args)
            calls[p] = (lambda j=jitted, w=wrapped: j(*w))
            calls[p + " library=False"] = (lambda j=jitted.with_options(library=False), w=wrapped: j(*w))
            calls[p + " chain"] = (lambda c=chain, a=args: c(*a))
        for f in calls.values():
            f()
        times = {k: [] for k in calls}
        for _ in range(11):
            for k, f in calls.items():
                times[k].append(cpu(f))
        print(name, A.shape[0], "rows", A.nnz, "entries (ms):")
        for k, v in times.items():
            print(f"  {k:28s} {np.median(v) * 1e3:8.3f}")
