"""SpGEMM ``A @ A`` per corpus matrix, the native kernels alone (native/spgemm.py with each accumulator forced,
spgemm_sorted.py with each kind forced; keep: every reached position kept, the jit's rule; scipy: zero sums
dropped, the drop-in's), one thread, thread CPU, interleaved, median of N; and the quantities a kernel rule
could read (flops per row, compression flops / nnz(C), B's adjacent share, kind_for's answer).
``python docs/scripts/spgemm_kernels_alone.py N [--cache DIR] names...``."""

import sys
import time

import numpy as np

from splyce.bench import corpus
from splyce.native import spgemm, spgemm_sorted

N, names = int(sys.argv[1]), sys.argv[2:]
CACHE = None
if names[:1] == ["--cache"]:
    CACHE, names = names[1], names[2:]
ents = {e.name: e for e in corpus.entries()}
real_kind = spgemm_sorted.kind_for


def call(A, variant):
    p = (A.data, A.indices, A.indptr)
    n = A.shape[1]
    if variant.startswith("sorted-"):
        kind = variant[7:]
        spgemm_sorted.kind_for = (lambda *a, **k: real_kind(*a, **k)) if kind == "auto" else (lambda *a, **k: kind)
        try:
            return spgemm.spgemm(p, p, n, np.float64, 1, keep_zeros=True, sort=True)
        finally:
            spgemm_sorted.kind_for = real_kind
    keep = variant.endswith("keep")
    old = spgemm.DENSE_ROW_ENTRIES, spgemm.DENSE_COLUMNS
    if variant.startswith("dense"):
        spgemm.DENSE_ROW_ENTRIES, spgemm.DENSE_COLUMNS = 0, 1 << 40
    elif variant.startswith("sparse"):
        spgemm.DENSE_ROW_ENTRIES = 1 << 40
    try:
        return spgemm.spgemm(p, p, n, np.float64, 1, keep_zeros=keep)
    finally:
        spgemm.DENSE_ROW_ENTRIES, spgemm.DENSE_COLUMNS = old

VARIANTS = ["sparse-keep", "dense-keep", "sorted-flags", "sorted-map", "sorted-short", "sparse-scipy", "dense-scipy"]
for name in names:
    A = ents[name].build(CACHE)
    m, n = A.shape
    prefix = spgemm.row_flops_prefix(A.indptr, A.indices, A.indptr)
    flops = int(prefix[-1])
    rowlen = np.diff(A.indptr)
    C = call(A, "sparse-keep")
    nnzc = len(C.data)
    pairs = len(A.indices) - 1
    adj = np.count_nonzero(np.diff(A.indices) == 1) / pairs
    rf = np.diff(prefix)
    cl = np.diff(C.indptr)
    # per-row compression: flops_i / nnz(C_i)
    stats = dict(m=m, n=n, nnzA=A.nnz, a_row=A.nnz / m, flops=flops, f_row=flops / m, nnzC=nnzc,
                 c_row=nnzc / m, cr=flops / nnzc, adj=adj, kind=real_kind(A.indices, flops, m),
                 dens=nnzc / (m * n), f_over_n=flops / m / n,
                 f_row_w=float((rf.astype(float) ** 2).sum() / max(flops, 1)),  # flops-weighted row flops
                 c_row_w=float((cl.astype(float) * rf).sum() / max(flops, 1)))  # flops-weighted out row len
    for v in VARIANTS:
        call(A, v)
    t = {v: [] for v in VARIANTS}
    for _ in range(N):
        for v in VARIANTS:
            s = time.thread_time_ns(); call(A, v); t[v].append(time.thread_time_ns() - s)
    med = {v: np.median(x) / 1e6 for v, x in t.items()}
    print(name, " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()), flush=True)
    print("   ms:", " ".join(f"{k} {v:.3f}" for k, v in med.items()), flush=True)
