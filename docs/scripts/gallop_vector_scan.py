"""Galloping's line scan as its own loop with a vector count at its stop (``gallop_lane.VECTOR_SCAN``), against
the scan inside the exponential search (the lane before), on ``bench sweep``'s skewed fiber pairs (issue 59).

Both builds compiled in one process (``VECTOR_SCAN`` read when the pass runs), strict and fast_math, every
candidate checked first (strict: bit-identical to the plain sparsifier; fast_math: within 1e-4 of the exact sum),
with NumKong's ``sparse_dot`` and the read floor beside them; thread CPU time (``bench limit``'s ``_time_case``:
calls per sample calibrated, REPEATS interleaved rotated rounds), best, ns per input coordinate; ``/nk``: ratio of medians over NumKong's.

    python docs/scripts/gallop_vector_scan.py [REPEATS] [N] [DISTRIBUTION ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
os.environ["SPLYCE_NO_TUNE"] = "1"
import statistics  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench import limit, sweep  # noqa: E402
from splyce.passes import gallop_lane  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
NAMES = sys.argv[3:] or ["skew 1:128", "skew 1:256", "skew 1:512", "skew 1:1024", "skew 1:4096"]
TYPES = [(np.int32, np.float32)] if os.environ.get("TYPES") != "all" else [
    (np.int32, np.float32), (np.int32, np.float64), (np.int64, np.float32), (np.int64, np.float64)]

VARIANTS = [("before", False, 0), ("scan", True, 0)] + [
    (f"scan pf{d}", True, d) for d in os.environ.get("SCAN_PF", "").split(",") if d]
SLOPES = [int(x) for x in os.environ.get("SLOPES", "").split(",") if x]   # CONFLICT_SLOPE variants (scan pf16)
SLOPE0 = gallop_lane.CONFLICT_SLOPE

import numkong as nk  # noqa: E402

for name in NAMES:
    for it, vt in TYPES:
        dim, b, bv, c, cv = sweep.fiber_pair(name, N, it, vt)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        ref = splyce.jit(limit._dot, vectorize=False)(A, B)
        _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
        exact = float(bv[ib].astype(np.float64) @ cv[ic].astype(np.float64))
        cands = {}
        for var, flag, pf in VARIANTS:
            for fm in (False, True):
                gallop_lane.VECTOR_SCAN, gallop_lane.SCAN_PREFETCH = flag, int(str(pf).rstrip("v"))
                gallop_lane.SCAN_PREFETCH_VALUES = str(pf).endswith("v")
                try:
                    j = splyce.jit(limit._dot, fast_math=fm, **({"vector_width": 16} if fm else {}))
                    j.lower(A, B)
                    r = j(A, B)
                finally:
                    gallop_lane.VECTOR_SCAN, gallop_lane.SCAN_PREFETCH = True, 0
                    gallop_lane.SCAN_PREFETCH_VALUES = False
                if fm:
                    assert abs(float(r) - exact) <= 1e-4 * max(1.0, abs(exact)), (name, var)
                else:
                    assert np.asarray(r).tobytes() == np.asarray(ref).tobytes(), (name, var, r, ref)
                cands[f"{'fast' if fm else 'strict'} {var}"] = lambda j=j: j(A, B)
        for slope in SLOPES:
            for fm in (False, True):
                gallop_lane.VECTOR_SCAN, gallop_lane.SCAN_PREFETCH, gallop_lane.CONFLICT_SLOPE = True, 16, slope
                try:
                    j = splyce.jit(limit._dot, fast_math=fm, **({"vector_width": 16} if fm else {}))
                    r = j(A, B)
                finally:
                    gallop_lane.SCAN_PREFETCH, gallop_lane.CONFLICT_SLOPE = 0, SLOPE0
                assert fm or np.asarray(r).tobytes() == np.asarray(ref).tobytes()
                cands[f"{'fast' if fm else 'strict'} slope{slope}"] = lambda j=j: j(A, B)
        if it == np.int32:
            ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv.astype(np.float32), cv.astype(np.float32)
            cands["numkong"] = lambda: nk.sparse_dot(ub, fb, uc, fc)
        bufs = [x.view(np.int32) for x in (b, bv, c, cv)]
        cands["floor"] = lambda: max(int(x.max()) for x in bufs)
        timed = {k: (run, float(run()), 0.0) for k, run in cands.items()}   # checked above; limit's method:
        t = limit._time_case(timed, REPEATS)   # calls per sample calibrated, interleaved, rotated
        t = {k: [x / (b.size + c.size) * 1e9 for x in v] for k, v in t.items()}
        med = {k: statistics.median(v) for k, v in t.items()}
        ref_med = med.get("numkong", med["floor"])
        print(f"{name} {np.dtype(it).name}/{np.dtype(vt).name} ({'/nk' if 'numkong' in med else '/floor'}): " +
              "  ".join(f"{k} {min(v):.3f} ({med[k] / ref_med:.2f})" for k, v in t.items()), flush=True)
