"""The dense-output union with the output row prefetched ahead (docs/passes.md, "Prefetching the
output row ahead"): C prototypes
(dense_union_prefetch.c, built here with gcc) beside the jitted plain sparsifier and union lane, uniform 5 % + 5 %,
the output touched untimed as ``bench ablation`` does, median of 9 interleaved runs.

    python docs/scripts/dense_union_prefetch.py N D1,D2,...   (e.g. 4000 0,1,2: prefetch distances in rows)
"""
import ctypes, pathlib, statistics, subprocess, sys, tempfile, time
import numpy as np, scipy.sparse as sps
import splyce
from splyce.bench.ablation import _UnionOp
from splyce.bench.common import touched_zeros
n = int(sys.argv[1]); D = [int(x) for x in sys.argv[2].split(",")]
rng = np.random.default_rng(0)
mats = [sps.random_array((n, n), density=0.05, format="csr", rng=rng) for _ in range(2)]
for m in mats: m.indices = m.indices.astype(np.int32); m.indptr = m.indptr.astype(np.int32)
ops = [splyce.asarray(m) for m in mats]
B, C = mats
S = (B + C).tocsr(); S.indices = S.indices.astype(np.int32); S.indptr = S.indptr.astype(np.int32)
here = pathlib.Path(__file__).parent
so = pathlib.Path(tempfile.mkdtemp()) / "dense_union_prefetch.so"
subprocess.run(["gcc", "-O2", "-march=native", "-shared", "-fPIC", "-o", str(so), str(here / "dense_union_prefetch.c")], check=True)
lib = ctypes.CDLL(str(so))
P = ctypes.c_void_p; L = ctypes.c_long
a = lambda x: P(x.ctypes.data)
tagc = np.full(n, -1, np.int64); tagb = np.full(n, -1, np.int64); atc = np.zeros(n, np.int32); mark = np.full(n, 2**64 - 1, np.uint64)
fun = _UnionOp("add", "dense")
base = splyce.jit(fun, vectorize=False); lane = splyce.jit(fun, union=True)
cands = {"plain": lambda out: base.accumulate(out, *ops), "lane": lambda out: lane.accumulate(out, *ops)}
for d in D:
    cands[f"C merge D={d}"] = lambda out, d=d: lib.merge_add(a(B.indptr), a(B.indices), a(B.data), a(C.indptr), a(C.indices), a(C.data), L(n), L(n), a(out), L(d))
    cands[f"C spa D={d}"] = lambda out, d=d: (tagc.fill(-1), tagb.fill(-1), lib.spa_add(a(B.indptr), a(B.indices), a(B.data), a(C.indptr), a(C.indices), a(C.data), L(n), L(n), a(out), a(tagc), a(atc), a(tagb), L(d)))
    cands[f"floor D={d}"] = lambda out, d=d: lib.floor_add(a(S.indptr), a(S.indices), a(S.data), L(n), L(n), a(out), L(d))
    cands[f"C spa1 D={d}"] = lambda out, d=d: (mark.fill(2**64 - 1), lib.spa1_add(a(B.indptr), a(B.indices), a(B.data), a(C.indptr), a(C.indices), a(C.data), L(n), L(n), a(out), a(mark), L(d)))
    if d > 99:
        cands[f"C merge crd D={d}"] = lambda out, d=d: lib.merge_add_c(a(B.indptr), a(B.indices), a(B.data), a(C.indptr), a(C.indices), a(C.data), L(n), L(n), a(out), L(d))
        cands[f"C spa crd D={d}"] = lambda out, d=d: (tagc.fill(-1), tagb.fill(-1), lib.spa_add_c(a(B.indptr), a(B.indices), a(B.data), a(C.indptr), a(C.indices), a(C.data), L(n), L(n), a(out), a(tagc), a(atc), a(tagb), L(d)))
        cands[f"floor crd D={d}"] = lambda out, d=d: lib.floor_add_c(a(S.indptr), a(S.indices), a(S.data), L(n), L(n), a(out), L(d))
ref = S.toarray()
for k, f in cands.items():
    out = np.zeros((n, n)); f(out); assert np.array_equal(out, ref), k
res = {k: [] for k in cands}
for r in range(9):
    ks = list(cands); ks = ks[r % len(ks):] + ks[:r % len(ks)]
    for k in ks:
        out = touched_zeros((n, n))
        t0 = time.perf_counter(); cands[k](out); res[k].append(time.perf_counter() - t0)
        del out
med = {k: statistics.median(v) for k, v in res.items()}
for k, v in med.items(): print(f"N={n} {k:16s} {v*1e3:7.2f} ms  {med['plain']/v:.2f}x plain")
