"""The permute lane (passes/permute_lane.py) against the rotating all-pairs lane it replaces, in one process,
interleaved (docs/passes.md, "AMD Zen 1"): ``bench limit``'s fiber pairs (int32 coordinates, f64 values, 2^18 :
2^18, 10 % and 50 % overlap, NumKong's ``sparse_dot`` beside them) and K1-K5 at their benchmark sizes, 5 %
density (plain sparsifier, strict, fast_math n = 4 with either lane). Thread CPU time; fiber pairs: best of 9
samples of 20 calls, ns per input coordinate; K1-K5: median of REPEATS single calls (default 7); every result
checked first (NumPy / the kernels' references).

"all-pairs" is the pass with ``permute_blocker`` answering "off" (so the rotations), compiled with the disk cache
off and ``SPLYCE_NO_TUNE=1`` (this script sets both), so that neither lane's code is read from a cache.

    python docs/scripts/permute_lane.py [REPEATS]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
os.environ["SPLYCE_NO_TUNE"] = "1"
import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
import splyce.passes.splyce_pass as sp  # noqa: E402
from splyce.bench import limit  # noqa: E402
from splyce.bench.paper_kernels import KERNELS  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
REAL = sp.permute_blocker


def lane_jit(fun, permute: bool, ops):
    """``fun`` jitted fast_math n = 4 with (``permute``) or without the permute lane, compiled now."""
    sp.permute_blocker = REAL if permute else (lambda *args: "off")
    try:
        jitted = splyce.jit(fun, fast_math=True, vector_width=4)
        text = jitted.lower(*ops).as_text("splyce")
    finally:
        sp.permute_blocker = REAL
    if permute != ("vpermd" in text) and fun is limit._dot:
        raise SystemExit(f"the lane asked for was not built: {text.splitlines()[0]}")
    return jitted


def interleaved(cands: dict, repeats: int, calls: int) -> dict:
    times = {k: [] for k in cands}
    names = list(cands)
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            t0 = time.thread_time()
            for _ in range(calls):
                cands[k]()
            times[k].append((time.thread_time() - t0) / calls)
    return times


n = 1 << 18
for ov in (0.10, 0.50):
    dim, b, bv, c, cv = limit.fiber_pair(n, ov, 1, np.int32, np.float64)
    A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
    _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(bv[ib] @ cv[ic])
    cands = {}
    for label, permute in (("all-pairs", False), ("permute", True)):
        j = lane_jit(limit._dot, permute, (A, B))
        assert abs(float(j(A, B)) - exact) <= 1e-9 * max(1.0, abs(exact)), label
        cands[label] = lambda j=j: j(A, B)
    try:
        import numkong as nk

        ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv.astype(np.float32), cv.astype(np.float32)
        cands["numkong dot"] = lambda: nk.sparse_dot(ub, fb, uc, fc)
    except ImportError:
        pass
    best = {k: min(v) / (2 * n) * 1e9 for k, v in interleaved(cands, 9, 20).items()}
    print(f"int32 / f64 {ov * 100:g} %: " + "  ".join(f"{k} {v:.3f}" for k, v in best.items()) + " ns per coordinate")

ratios = {}
for name, spec in KERNELS.items():
    ops = spec.operands(None, 0.05)
    dense = [o.todense() if hasattr(o, "todense") else o for o in ops]
    ref = np.asarray(spec.reference(*dense))
    fns = {"plain": splyce.jit(spec.fun, vectorize=False), "strict": splyce.jit(spec.fun),
           "fm all-pairs": lane_jit(spec.fun, False, ops), "fm permute": lane_jit(spec.fun, True, ops)}
    for k, f in fns.items():
        out = f(*ops)
        out = out.todense() if hasattr(out, "todense") else np.asarray(out)
        np.testing.assert_allclose(out, ref, rtol=1e-9 if k in ("plain", "strict") else 1e-6, atol=1e-9)
    med = {k: statistics.median(v) for k, v in interleaved({k: (lambda f=f: f(*ops)) for k, f in fns.items()},
                                                           REPEATS, 1).items()}
    ratios[name] = {k: med["plain"] / v for k, v in med.items()}
    print(name, "  ".join(f"{k} {v * 1e3:.1f} ms ({ratios[name][k]:.2f}x)" for k, v in med.items()))
for k in ("strict", "fm all-pairs", "fm permute"):
    for names in (("K1", "K2", "K3", "K5"), tuple(KERNELS)):
        print(f"geomean {'/'.join(names)} {k}: {np.exp(np.mean([np.log(ratios[x][k]) for x in names])):.2f}x")
print("load average:", open("/proc/loadavg").read().split()[:3])
