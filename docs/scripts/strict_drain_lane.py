"""The strict conflict lane's interleaved drain (``StrictConflictLaneBuilder.DRAIN``, issue 59) against the buffered
lane without it, interleaved in one process (the variants below; otherwise as strict_packed_lane.py).

``bench sweep``'s distributions, int32 coordinates and f32 values by default (the third argument: another pair, e.g.
``int64/float64``; NumKong's ``sparse_dot`` then reads uint32 / float32 copies, untimed), 2^20 coordinates per fiber
by default. Candidates compiled in this process (the disk cache off), each checked bit-identical to the plain
sparsifier: ``buffered`` (the default: packed terms stored into a buffer, added in order when it fills),
``packed`` (``StrictConflictLaneBuilder.BUFFERED`` False while compiling: the packed terms added in the lane,
4 + 4 + 8 / 2 + 6), ``permuted`` (``PACKED`` False: a permute per matched lane, the lane before both),
``buffered, dense pairs too`` (``PACKED_DENSE`` infinite: no pair starts in the all-pairs lane), ``buffered, int64
all pairs`` (int64 coordinates: every pair enters the lane, not only the skewed ones);
``fast_math`` (the width left unset) and NumKong's ``sparse_dot``. Thread CPU time, best and median of 9
interleaved rounds (order rotated) of 3 calls, ns per input coordinate; ratios of medians.

    python docs/scripts/strict_packed_lane.py ["uniform x2,runs 8,..."] [n] [int32/float32]
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
from splyce.passes.strict_conflict_lane import StrictConflictLaneBuilder as S  # noqa: E402

NAMES = sys.argv[1].split(",") if len(sys.argv) > 1 else sweep.distributions()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
TYPES = [np.dtype(t).type for t in (sys.argv[3] if len(sys.argv) > 3 else "int32/float32").split("/")]
DENSE = {"PACKED_DENSE": {32: 1e30, 64: 1e30}}
VARIANTS = {"buffered": {"DRAIN": 0}, "drain 2 from 3 (default)": {}, "drain 2 from 1.5": {"DRAIN_FROM": 1.5},
            "drain 4 from 3": {"DRAIN": 4}}
if os.environ.get("DRAIN_VARIANTS"):
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ["DRAIN_VARIANTS"].split(";")}


def dot(x, y):
    return splyce.einsum("i,i->", x, y)


def compiled(settings, A, B, want, name):
    saved = {k: getattr(S, k) for k in settings}
    for k, v in settings.items():
        setattr(S, k, v)
    try:
        f = splyce.jit(dot)
        assert np.asarray(f(A, B)).tobytes() == want, name
    finally:
        for k, v in saved.items():
            setattr(S, k, v)
    return f


def main():
    import numkong as nk

    print(f"{'/'.join(np.dtype(t).name for t in TYPES)}, n = {N}")
    print("| distribution | " + " | ".join(f"{v} ns" for v in VARIANTS) + " | fast_math ns | NumKong ns | "
          + " | ".join(f"{v} / NumKong" for v in VARIANTS) + "")
    print("|---|" + "---:|" * (2 * len(VARIANTS) + 2))
    for name in NAMES:
        dim, b, bv, c, cv = sweep.fiber_pair(name, N, *TYPES)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        want = np.asarray(splyce.jit(dot, vectorize=False)(A, B)).tobytes()
        fs = {v: compiled(settings, A, B, want, name) for v, settings in VARIANTS.items()}
        fast = splyce.jit(dot, fast_math=True)
        fast(A, B)
        ub, uc = b.astype(np.uint32), c.astype(np.uint32)
        fb, fc = bv.astype(np.float32), cv.astype(np.float32)
        cands = {v: (lambda f=f: f(A, B)) for v, f in fs.items()}
        cands.update({"fast": lambda: fast(A, B), "nk": lambda: nk.sparse_dot(ub, fb, uc, fc)})
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
        print(f"| {name} | " + " | ".join(f"{best[v]:.3f}" for v in VARIANTS) + f" | {best['fast']:.3f} | "
              f"{best['nk']:.3f} | " + " | ".join(f"{med[v] / med['nk']:.2f}" for v in VARIANTS) + " |", flush=True)


if __name__ == "__main__":
    main()
