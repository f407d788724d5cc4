"""The broadcast lane (passes/broadcast_lane.py) beside the other fast_math lanes, NumKong and bench-only steps
(bench/intersect_step.py) on ``bench limit``'s fiber pairs: int32 coordinates, 2^20 : 2^20, 10 % and 50 %
overlap, f64 and f32 values; REPEATS interleaved repeats (default 9), best, thread CPU time, ns per input
coordinate; every candidate checked against NumPy first (docs/passes.md, "Intel Sapphire Rapids").

The broadcast lane is built for a target with AVX-512 but without CD: this script compiles it for the host with
``-avx512cd`` in the target's features (``codegen.resolve_target`` spied while the jit resolves its options;
``jit`` takes only target names). ``n16 conflict`` is the same call for the host as it is (the conflict lane).

    python docs/scripts/broadcast_lane.py [REPEATS]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench import intersect_step  # noqa: E402
from splyce.bench.limit import _dot, _sealed_vector, clock_ghz, fiber_pair  # noqa: E402
from splyce.native import codegen  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
N = 1 << 20


def broadcast_lane_jit():
    host = codegen.host_target()
    no_cd = codegen.Target(host.triple, host.cpu, host.features.replace("+avx512cd", "-avx512cd"))
    real = codegen.resolve_target
    codegen.resolve_target = lambda name: no_cd if name == "native" else real(name)
    try:
        jitted = splyce.jit(_dot, fast_math=True, vector_width=16)
        jitted.options   # resolved now, with the spy
    finally:
        codegen.resolve_target = real
    return jitted


def main():
    import numkong as nk

    ghz, how = clock_ghz()
    print(f"clock {ghz:.2f} GHz ({how}); load average {os.getloadavg()}")
    lanes = {"lane broadcast (n16, no CD)": broadcast_lane_jit(),
             "lane n16 conflict": splyce.jit(_dot, fast_math=True, vector_width=16),
             "lane n4": splyce.jit(_dot, fast_math=True, vector_width=4),
             "lane n8": splyce.jit(_dot, fast_math=True, vector_width=8)}
    for vt in (np.float64, np.float32):
        for ov in (0.10, 0.50):
            dim, b, bv, c, cv = fiber_pair(N, ov, 1, np.int32, vt)
            A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
            _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
            exact = float(np.dot(bv[ib].astype(np.float64), cv[ic].astype(np.float64)))
            ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv.astype(np.float32), cv.astype(np.float32)
            cands = {name: (lambda f=f: f(A, B)) for name, f in lanes.items()}
            cands["numkong dot"] = lambda: nk.sparse_dot(ub, fb, uc, fc)
            for step in ("broadcast", "broadcast8"):
                cands[f"step dot {step}"] = lambda step=step: intersect_step.dot(b, bv, c, cv, step)
            for name, run in cands.items():
                got = float(run())
                assert math.isclose(got, exact, rel_tol=1e-3 if "numkong" in name or vt == np.float32 else 1e-9,
                                    abs_tol=1e-6), (name, got, exact)
            times = {name: [] for name in cands}
            names = list(cands)
            for r in range(REPEATS):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    t0 = time.thread_time()
                    for _ in range(3):
                        cands[name]()
                    times[name].append((time.thread_time() - t0) / 3)
            best = {name: min(v) / (b.size + c.size) * 1e9 for name, v in times.items()}
            nkd = best["numkong dot"]
            print(f"{np.dtype(vt).name} {ov:.0%}: " + ", ".join(
                f"{name} {ns:.3f} ns ({ns / nkd:.2f}x nk dot, {ns * ghz:.2f} cyc)" for name, ns in best.items()))


if __name__ == "__main__":
    main()
