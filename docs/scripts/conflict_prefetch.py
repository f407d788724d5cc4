"""Software prefetches in the conflict lanes (strict and fast_math), tried on AMD Zen 4 (issue 59).

Each step of the conflict lane (passes/conflict_lane.py, strict_conflict_lane.py) loads one 16-coordinate block
of each fiber (a cache line of int32), C's 16 values and B's 16 values at the two cursors. The variant ``pfD``
adds, before the step's loads, a ``memref.prefetch`` (``prefetcht0``) of each of those buffers ``D`` elements past
its cursor. Compiled in one process with the lane as it is (``main``, twice: the control), every candidate
checked first (strict: bit-identical to the plain sparsifier; fast_math: within 1e-4 of the exact sum), thread
CPU time, best / median of REPEATS rounds of 3 calls, ns per input coordinate, ``bench sweep``'s fiber pairs.

    python docs/scripts/conflict_prefetch.py [REPEATS] [N] [DISTRIBUTION ...]
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
from mlir.dialects import arith, memref  # noqa: E402

import splyce  # noqa: E402
from splyce.bench import limit, sweep  # noqa: E402
from splyce.passes import conflict_lane  # noqa: E402
from splyce.passes.fast_lane import _index  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
NAMES = sys.argv[3:] or ["uniform x2", "uniform x10", "runs 64", "powerlaw 2", "skew 1:64", "skew 1:256"]
DIST = {"main": 0, "main2": 0, "pf256": 256, "pf512": 512}

_orig_phase1 = conflict_lane.ConflictLaneBuilder._phase1
_state = {"dist": 0}


def _phase1(self, cursors):
    d = _state["dist"]
    if d:
        m = self.m
        mems = [(crd, cursors[k]) for k, crd in enumerate(m.crd_memrefs)]
        seen = {id(x[0]) for x in mems}
        for ll in m.lane_loads.values():
            if id(ll.memref) not in seen:
                seen.add(id(ll.memref))
                mems.append((ll.memref, cursors[ll.side]))
        for mem, cur in mems:
            memref.prefetch(mem, [arith.addi(cur, _index(d))], False, 3, True)
    return _orig_phase1(self, cursors)


conflict_lane.ConflictLaneBuilder._phase1 = _phase1
import numkong as nk  # noqa: E402

for name in NAMES:
    dim, b, bv, c, cv = sweep.fiber_pair(name, N, np.int32, np.float32)
    A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
    plain = splyce.jit(limit._dot, vectorize=False)
    ref = plain(A, B)
    _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(bv[ib].astype(np.float64) @ cv[ic].astype(np.float64))
    cands = {}
    for var, d in DIST.items():
        for fm in (False, True):
            _state["dist"] = d
            try:
                j = splyce.jit(limit._dot, fast_math=fm, **({"vector_width": 16} if fm else {}))
                j.lower(A, B)
                r = j(A, B)
            finally:
                _state["dist"] = 0
            if fm:
                assert abs(float(r) - exact) <= 1e-4 * max(1.0, abs(exact)), (name, var)
            else:
                assert np.asarray(r).tobytes() == np.asarray(ref).tobytes(), (name, var, r, ref)
            cands[f"{'fast' if fm else 'strict'} {var}"] = lambda j=j: j(A, B)
    ub, uc = b.view(np.uint32), c.view(np.uint32)
    cands["numkong"] = lambda: nk.sparse_dot(ub, bv, uc, cv)
    names, t = list(cands), {k: [] for k in cands}
    for r in range(REPEATS):
        for k in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            t0 = time.thread_time_ns()
            for _ in range(3):
                cands[k]()
            t[k].append((time.thread_time_ns() - t0) / 3 / (b.size + c.size))
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"{name}: " + "  ".join(f"{k} {min(v):.3f}/{med[k] / med['numkong']:.2f}" for k, v in t.items()), flush=True)
