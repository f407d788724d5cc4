"""The strict conflict lane's packed phase 2 (issue 59) against the permute per lane, interleaved in one process.

``bench sweep``'s distributions (int32 coordinates, f32 values: where the packed phase 2 is built), 2^20 coordinates
per fiber by default. Candidates compiled in this process (the disk cache off): ``strict packed`` (the default) and
``strict permuted`` (``StrictConflictLaneBuilder._packed`` forced False while compiling: the lane before), both
checked bit-identical to the plain sparsifier; ``fast_math`` (the width left unset) and NumKong's ``sparse_dot``.
Thread CPU time, best and median of 9 interleaved rounds (order rotated) of 3 calls, ns per input coordinate.

    python docs/scripts/strict_packed_lane.py ["uniform x2,runs 8,..."] [n]
"""
import gc
import os
import statistics
import sys
import time

os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench import limit, sweep  # noqa: E402
from splyce.passes.strict_conflict_lane import StrictConflictLaneBuilder  # noqa: E402

NAMES = sys.argv[1].split(",") if len(sys.argv) > 1 else sweep.distributions()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20


def dot(x, y):
    return splyce.einsum("i,i->", x, y)


def main():
    import numkong as nk

    print("| distribution | strict packed | strict permuted | packed / permuted (medians) | fast_math | NumKong "
          "`sparse_dot` | packed / NumKong | permuted / NumKong |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in NAMES:
        dim, b, bv, c, cv = sweep.fiber_pair(name, N, np.int32, np.float32)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        want = np.asarray(splyce.jit(dot, vectorize=False)(A, B)).tobytes()
        packed = splyce.jit(dot)
        assert np.asarray(packed(A, B)).tobytes() == want, name
        saved = StrictConflictLaneBuilder._packed
        StrictConflictLaneBuilder._packed = lambda self: False
        try:
            permuted = splyce.jit(dot)
            assert np.asarray(permuted(A, B)).tobytes() == want, name
        finally:
            StrictConflictLaneBuilder._packed = saved
        fast = splyce.jit(dot, fast_math=True)
        fast(A, B)
        ub, uc = b.view(np.uint32), c.view(np.uint32)
        cands = {"packed": lambda: packed(A, B), "permuted": lambda: permuted(A, B), "fast": lambda: fast(A, B),
                 "nk": lambda: nk.sparse_dot(ub, bv, uc, cv)}
        times = {k: [] for k in cands}
        names = list(cands)
        for r in range(9):
            for k in names[r % len(names):] + names[:r % len(names)]:
                gc.collect()
                t0 = time.thread_time()
                for _ in range(3):
                    cands[k]()
                times[k].append((time.thread_time() - t0) / 3)
        coords = b.size + c.size
        best = {k: min(v) / coords * 1e9 for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {name} | {best['packed']:.3f} | {best['permuted']:.3f} | {med['packed'] / med['permuted']:.2f} | "
              f"{best['fast']:.3f} | {best['nk']:.3f} | {med['packed'] / med['nk']:.2f} | "
              f"{med['permuted'] / med['nk']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
