"""The strict lane compiled for AVX2 (``target="avx2"``: no AVX-512 instruction) on an AVX-512 host, against NumKong's
``sparse_dot`` with its AVX-512 paths disabled (``disable_capability``: its Haswell path) and the plain sparsifier,
over ``bench sweep``'s distributions (issue 59, part 3: the lane on an AVX2 core, measured where no Zen 1-3 machine is
at hand; a Zen 3 core's own run: docs/results/limit-zen3.md).

Candidates in one process (the disk cache off), the lane checked bit-identical to the plain sparsifier; thread CPU
time, best and median of 9 interleaved rounds (order rotated) of 3 calls, ns per input coordinate; ratios of medians.

    python docs/scripts/avx2_forced_lane.py ["uniform x2,runs 8,..."] [n] [int32/float32]
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

NAMES = sys.argv[1].split(",") if len(sys.argv) > 1 else sweep.distributions()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
TYPES = [np.dtype(t).type for t in (sys.argv[3] if len(sys.argv) > 3 else "int32/float32").split("/")]


def dot(x, y):
    return splyce.einsum("i,i->", x, y)


def main():
    import numkong as nk

    for cap in ("sapphire", "turin", "genoa", "icelake", "skylake"):
        if nk.get_capabilities().get(cap):
            nk.disable_capability(cap)
    left = sorted(k for k, v in nk.get_capabilities().items() if v)
    print(f"{'/'.join(np.dtype(t).name for t in TYPES)}, n = {N}; NumKong capabilities left: {', '.join(left)}")
    print("| distribution | lane avx2 ns | lane avx2 fast_math ns | plain ns | NumKong ns | lane / NumKong | "
          "fast_math / NumKong | plain / lane |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in NAMES:
        dim, b, bv, c, cv = sweep.fiber_pair(name, N, *TYPES)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        plain = splyce.jit(dot, vectorize=False)
        want = np.asarray(plain(A, B)).tobytes()
        lane = splyce.jit(dot, target="avx2")
        assert np.asarray(lane(A, B)).tobytes() == want, name
        asm = lane.lower(A, B).as_text("asm")
        assert "zmm" not in asm and "%k1" not in asm, "AVX-512 code in the avx2 kernel"
        fast = splyce.jit(dot, target="avx2", fast_math=True)
        fast(A, B)
        ub, uc = b.astype(np.uint32), c.astype(np.uint32)
        fb, fc = bv.astype(np.float32), cv.astype(np.float32)
        cands = {"lane": lambda: lane(A, B), "fast": lambda: fast(A, B), "plain": lambda: plain(A, B),
                 "nk": lambda: nk.sparse_dot(ub, fb, uc, fc)}
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
        print(f"| {name} | {best['lane']:.3f} | {best['fast']:.3f} | {best['plain']:.3f} | {best['nk']:.3f} | "
              f"{med['lane'] / med['nk']:.2f} | {med['fast'] / med['nk']:.2f} | {med['plain'] / med['lane']:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
