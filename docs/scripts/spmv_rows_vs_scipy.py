"""The drop-in's SpMV kernels vs scipy's ``csr_matvec``, one thread, thread CPU time, interleaved in one process
(best of REPS): the three variants on array objects (rows / grouped / flat), the one-row kernel with 2-4 rows
advanced together (``spmv_rows.spmv_ir(rows=R, check=True)``), and the whole calls (``A @ x``, ``splyce.matmul``
default and ``threads=1``). Every output is checked bit for bit against ``csr_matvec``. Both kernels write a
y allocated once (scipy's zeroed before each call, outside the timing): page faults of a fresh y are not counted.

    PYTHONPATH=. python docs/scripts/spmv_rows_vs_scipy.py ba-100k,fem3d-100k,fem2d-250k,road-700,rmat-s13 61
"""
import os
import sys
import time

import numpy as np
import scipy.sparse as sps
from scipy.sparse import _sparsetools

import splyce
from splyce.bench import corpus
from splyce.native import array_objects, spmv
from splyce.native.spmv_rows import spmv_ir, whole_ir

f64 = np.dtype(np.float64)
names = sys.argv[1].split(",")
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 41
fns = {v: spmv._spmv_objects(f64, 32, 32, v) for v in ("rows", "grouped", "flat")}
for R in (2, 3, 4):
    name = f"rows_together_{R}"
    text = (spmv_ir(name + "_checked", f64, 32, 32, R, True) + whole_ir(name + "_whole", name + "_checked", 32)
            + array_objects.object_entry_ir(name + "_objects", name + "_whole", "aaaaaiii"))
    fns[f"r{R}"] = spmv._objects(text, name + "_objects")
ents = {e.name: e for e in corpus.entries()}
print("load", os.getloadavg(), "cpu", spmv._host_cpu(), "L2", spmv.L2_BYTES)
for nm in names:
    A = sps.csr_array(ents[nm].build())
    m, n = A.shape
    x = np.random.default_rng(0).standard_normal(n)
    ip, ix, d = A.indptr, A.indices, A.data
    ref = np.zeros(m)
    _sparsetools.csr_matvec(m, n, ip, ix, d, x, ref)
    ys, y0 = {k: np.empty(m) for k in fns}, np.zeros(m)
    calls = {"A@x": lambda: A @ x, "matmul": lambda: splyce.matmul(A, x),
             "matmul1": lambda: splyce.matmul(A, x, threads=1)}
    best = dict.fromkeys(["scipy", *fns, *calls], float("inf"))
    for _ in range(reps):
        y0.fill(0.0)
        t = time.thread_time_ns()
        _sparsetools.csr_matvec(m, n, ip, ix, d, x, y0)
        best["scipy"] = min(best["scipy"], time.thread_time_ns() - t)
        for k, f in fns.items():
            t = time.thread_time_ns()
            rc = f(id(ip), id(ix), id(d), id(x), id(ys[k]), n, m, A.nnz)
            best[k] = min(best[k], time.thread_time_ns() - t)
            assert rc == 0
        for k, g in calls.items():
            t = time.thread_time_ns()
            g()
            best[k] = min(best[k], time.thread_time_ns() - t)
    for k in fns:
        assert np.array_equal(ys[k].view(np.int64), ref.view(np.int64)), k
    print(f"{nm:12s} {m} rows, {A.nnz} entries ({A.nnz / m:.1f} a row), rule: {spmv.spmv_variant(A.nnz, m, 12)}; "
          + "  ".join(f"{k} {best[k] / 1e3:.0f} us ({best['scipy'] / best[k]:.2f}x)" for k in best), flush=True)
