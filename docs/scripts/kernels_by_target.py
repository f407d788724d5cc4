"""K1-K5 at their benchmark sizes: the Splyce pass vs the plain sparsifier, both compiled for one target.

Usage: python docs/scripts/kernels_by_target.py avx2|avx512|native   (interleaved, median of 7; results checked equal)
"""
import sys, time, statistics, numpy as np, splyce
from splyce.bench.paper_kernels import KERNELS
target = sys.argv[1]
ratios = {}
for name, spec in KERNELS.items():
    ops = spec.operands()
    base = splyce.jit(spec.fun, vectorize=False, target=target)
    fast = splyce.jit(spec.fun, target=target)
    rb, rf = base(*ops), fast(*ops)
    a = rb.toarray() if hasattr(rb, "toarray") else np.asarray(rb)
    b = rf.toarray() if hasattr(rf, "toarray") else np.asarray(rf)
    assert np.array_equal(a, b), name
    tb, tf = [], []
    for _ in range(7):
        t = time.perf_counter(); base(*ops); tb.append(time.perf_counter() - t)
        t = time.perf_counter(); fast(*ops); tf.append(time.perf_counter() - t)
    ratios[name] = statistics.median(tb) / statistics.median(tf)
    print(f"{target} {name} plain {statistics.median(tb)*1e3:.2f} ms splyce {statistics.median(tf)*1e3:.2f} ms {ratios[name]:.2f}x", flush=True)
g = np.exp(np.mean(np.log([ratios[k] for k in ("K1", "K2", "K3", "K4", "K5")])))
print(f"{target} geomean {g:.2f}x")
