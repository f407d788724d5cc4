"""The MLIR + Splyce kernel beside the native library kernel for the same op inside ``@splyce.jit``
(docs/passes.md, "The noalias pass"): ``splyce.jit(body, library=False)`` (always the MLIR kernel) and
``splyce.jit(body)`` (the native kernel where the planner picks it) on SparseTensor operands from the
realistic corpus, one thread, interleaved repeats; the ratio is MLIR time / native time (> 1: MLIR slower).
Times are the calling thread's CPU time per call (``time.thread_time``, the minimum over the repeats): on a
shared, loaded machine wall time mostly measures the other jobs.

    python docs/scripts/mlir_vs_native.py [MATRIX,...] [OP,...] [REPEATS]
    (default fem3d-100k,ba-100k,fem2d-250k  spmv,spmm,hadamard,add,spgemm  7; also: hadamard-tl ``a.T * a``,
    add-tl ``a.T + a`` (column order: the result a CSC), bool ``b * b.T`` of A's pattern, sddmm ``m * (x @ y.T)``
    with 32 columns)
"""
import sys
from pathlib import Path
import numpy as np
import scipy.sparse as sps
import splyce
from splyce.bench import corpus
from splyce.bench.common import thread_cpu_per_call as cpu_per_call

names = (sys.argv[1] if len(sys.argv) > 1 else "fem3d-100k,ba-100k,fem2d-250k").split(",")
ops = (sys.argv[2] if len(sys.argv) > 2 else "spmv,spmm,hadamard,add,spgemm").split(",")
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 7
BODIES = {"spmv": (lambda a, x: a @ x, None), "spmm": (lambda a, x: a @ x, None),
          "hadamard": (lambda a, b: a * b, None), "add": (lambda a, b: a + b, None),
          "spgemm": (lambda a, b: a @ b, "sparse"), "hadamard-tl": (lambda a: a.T * a, None),
          "add-tl": (lambda a: a.T + a, None), "bool": (lambda b: b * b.T, None),
          "sddmm": (lambda m, x, y: m * (x @ y.T), None)}
everything = {e.name: e for e in corpus.entries()}
rng = np.random.default_rng(0)



print(f"{'matrix':12} {'op':9} {'native ms':>10} {'mlir ms':>10} {'mlir/native':>12}")
for name in names:
    A = corpus.build(everything[name], Path("bench-results") / "corpus-cache")
    T, TT = splyce.asarray(A), splyce.asarray(A.T.tocsr())
    args = {"spmv": (T, rng.random(A.shape[1])), "spmm": (T, rng.random((A.shape[1], 16))),
            "hadamard": (T, TT), "add": (T, TT), "spgemm": (T, T), "hadamard-tl": (T,), "add-tl": (T,),
            "bool": (splyce.asarray(sps.csr_array(A.astype(bool))),),
            "sddmm": (T, rng.uniform(-1, 1, (A.shape[0], 32)), rng.uniform(-1, 1, (A.shape[1], 32)))}
    for op in ops:
        body, out_format = BODIES[op]
        native = splyce.jit(body, out_format=out_format)
        mlir = splyce.jit(body, out_format=out_format, library=False)
        a = args[op]
        r1, r2 = native(*a), mlir(*a)
        if hasattr(r1, "toarray"):   # sparse results: compared entry by entry, never densified
            r1, r2 = sps.csr_array(r1), sps.csr_array(r2)
            if r1.dtype == bool:
                assert (r1 != r2).nnz == 0
            else:
                assert abs(r1 - r2).max() <= 1e-12 * max(abs(r1).max(), 1e-300)
        else:
            np.testing.assert_allclose(np.asarray(r2), np.asarray(r1), rtol=1e-12)
        t = {"native": [], "mlir": []}
        for r in range(repeats):   # interleaved, order alternating
            for who in (("native", "mlir") if r % 2 == 0 else ("mlir", "native")):
                f = native if who == "native" else mlir
                t[who].append(cpu_per_call(lambda: f(*a)))
        tn, tm = min(t["native"]), min(t["mlir"])
        print(f"{name:12} {op:9} {tn * 1e3:10.3f} {tm * 1e3:10.3f} {tm / tn:12.2f}", flush=True)
