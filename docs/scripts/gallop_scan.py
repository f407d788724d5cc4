"""Galloping sized per fiber pair (issue 59), against the rule before it, interleaved in one process.

Skewed sparse dots (``bench sweep``'s ``skew 1:S``: a long fiber of 2^20 coordinates uniform in [0, 2^22), a short
one of 2^20 / S from the same range), int32 coordinates, f32 values (``f64``: float64 values; ``i64``: int64
coordinates). Candidates, each compiled in this process with the module constants set (the disk cache off):
``before`` (``SCAN_LINES = 0``, ``CONFLICT_SLOPE = 0``: the exponential search and the threshold of the all-pairs
lane), ``scan`` (the line scan only) and ``now`` (both, the defaults), strict (default options) and fast_math
(``vector_width=16``: the conflict lane on AVX-512 CD hosts); ``strict gallop=0`` (the lanes alone) and NumKong's
``sparse_dot``. Strict results checked bit-identical to the plain sparsifier. Thread CPU time, best of 9
interleaved rounds (order rotated) of 5 calls, ns per input coordinate.

    python docs/scripts/gallop_scan.py [S,S,...] [f64] [i64]
"""
import gc
import os
import sys
import time

os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench import limit, sweep  # noqa: E402
from splyce.passes import gallop_lane  # noqa: E402

SKEWS = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1][0].isdigit() else \
    ["16", "32", "64", "128", "256", "512", "1024", "4096"]
VTYPE = np.float64 if "f64" in sys.argv else np.float32
ITYPE = np.int64 if "i64" in sys.argv else np.int32
SETTINGS = {"before": (0, 0), "scan": (gallop_lane.SCAN_LINES, 0),
            "now": (gallop_lane.SCAN_LINES, gallop_lane.CONFLICT_SLOPE)}


def dot(x, y):
    return splyce.einsum("i,i->", x, y)


def main():
    saved = gallop_lane.SCAN_LINES, gallop_lane.CONFLICT_SLOPE
    for s in SKEWS:
        dim, b, bv, c, cv = sweep.fiber_pair(f"skew 1:{s}", 1 << 20, ITYPE, VTYPE)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        want = splyce.jit(dot, vectorize=False)(A, B)
        cands = {}
        try:
            for name, (lines, slope) in SETTINGS.items():
                gallop_lane.SCAN_LINES, gallop_lane.CONFLICT_SLOPE = lines, slope
                for mode, options in (("strict", {}), ("fast", {"fast_math": True, "vector_width": 16})):
                    f = splyce.jit(dot, **options)
                    got = f(A, B)    # compiles now, with these constants
                    if mode == "strict":
                        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (s, name)
                    else:
                        assert np.isclose(float(got), float(want), rtol=1e-4), (s, name)
                    cands[f"{mode} {name}"] = (lambda f=f: f(A, B))
        finally:
            gallop_lane.SCAN_LINES, gallop_lane.CONFLICT_SLOPE = saved
        lanes = splyce.jit(dot, gallop=0)
        assert np.asarray(lanes(A, B)).tobytes() == np.asarray(want).tobytes()
        cands["strict gallop=0"] = lambda: lanes(A, B)
        try:
            import numkong as nk
            if ITYPE == np.int32:
                ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv.astype(np.float32), cv.astype(np.float32)
                cands["numkong dot"] = lambda: nk.sparse_dot(ub, fb, uc, fc)
        except ImportError:
            pass
        times = {k: [] for k in cands}
        names = list(cands)
        for r in range(9):
            for k in names[r % len(names):] + names[:r % len(names)]:
                gc.collect()
                t0 = time.thread_time()
                for _ in range(5):
                    cands[k]()
                times[k].append((time.thread_time() - t0) / 5)
        coords = b.size + c.size
        print(f"1:{s} ({b.size}:{c.size})", " | ".join(f"{k} {min(v) / coords * 1e9:.3f}" for k, v in times.items()),
              flush=True)


if __name__ == "__main__":
    main()
