"""Prototype, not landed (issue 59): the strict conflict lane's phase 2 by compress, measured across distributions.

The landed strict lane (passes/strict_conflict_lane.py) adds a step's first 3 matched lanes without a branch (each
term moved into lane 0 by cttz and a permute) and the rest under one branch by an ordered reduction of all 16 lanes;
a credit sends a pair to the all-pairs n = 4 lane for good when such busy steps come often. Here (monkeypatched onto
``StrictConflictLaneBuilder._phase2``; ``PROTO_F=4,4``) the step's terms are packed in lane order by
``llvm.experimental.vector.compress`` (``vcompressps``, -0.0 past the matched ones) and added in order, the first
F[0] without a branch, F[1] more under one branch, the rest under another; ``PROTO_NOEXIT=1``: no busy step, the pair
never leaves. Bit-identical on the pairs below (checked against the plain sparsifier). int32 / f32 only measured.

    PROTO_F=4,4 PROTO_NOEXIT=1 SPLYCE_CACHE_DIR=<a fresh folder> python docs/scripts/strict_compress_lane.py \
        "runs 8,runs 64,powerlaw 1.2,uniform x4"

(a fresh cache folder per setting: the kernels' disk cache keys on the sources, not on these variables).
"""
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import numpy as np  # noqa: E402
from mlir import ir  # noqa: E402
from mlir.dialects import arith, llvm, math, scf, vector  # noqa: E402

from splyce.passes import strict_conflict_lane as scl  # noqa: E402
from splyce.passes.fast_lane import _clone_with, _neg_zero, _vtype  # noqa: E402
from splyce.passes.ir_utils import CMPI_UGT  # noqa: E402

F = [int(x) for x in os.environ.get("PROTO_F", "4,4").split(",")]
COMPRESS = "llvm.experimental.vector.compress"
def _phase2(self, args, st):
    accs = self._phase2_simd(args, st)
    terms, adds = [], []
    for pos, red in self.m.reductions.items():
        reduction = accs[pos].owner
        masked = reduction.operands[0].owner
        terms.append(masked.operands[1])
        adds.append(red.add_op)
        reduction.operation.erase()
        masked.operation.erase()
    mask = st["matched"].vec()
    i32 = ir.IntegerType.get_signless(32)
    mask_int = ir.IntegerType.get_signless(self.block)
    bits = vector.extract(vector.bitcast(_vtype(1, mask_int), mask), [], [0])
    count = arith.extui(i32, math.ctpop(bits))
    packed = []
    for term in terms:
        vt = ir.VectorType(term.type)
        neg = vector.broadcast(vt, _neg_zero(vt.element_type))
        packed.append(llvm.call_intrinsic(vt, COMPRESS, [term, mask, neg], [], []))
    positions = list(self.m.reductions)
    sums = [args[pos] for pos in positions]

    def add_lanes(sums, lo, hi):
        out = []
        for p, add, acc in zip(packed, adds, sums):
            for i in range(lo, hi):
                acc = _clone_with(add, [acc, vector.extract(p, [], [i])], [acc.type])[0]
            out.append(acc)
        return out

    sums = add_lanes(sums, 0, F[0])
    done = F[0]
    busy = None
    for f in F[1:] + [self.block - sum(F)]:
        if f <= 0:
            break
        more = arith.cmpi(CMPI_UGT, count, arith.constant(i32, done))
        busy = busy if busy is not None else more
        rest = scf.IfOp(more, [s.type for s in sums], has_else=True)
        with ir.InsertionPoint(rest.then_block):
            scf.yield_(add_lanes(sums, done, done + f))
        with ir.InsertionPoint(rest.else_block):
            scf.yield_(sums)
        sums = list(rest.results)
        done += f
    never = arith.cmpi(CMPI_UGT, count, arith.constant(i32, 1000))
    self._busy = never if os.environ.get("PROTO_NOEXIT") else busy
    return {pos: sums[k] for k, pos in enumerate(positions)}


def main():
    import numkong as nk

    from splyce.bench import limit, sweep

    if os.environ.get("PROTO_F"):
        scl.StrictConflictLaneBuilder._phase2 = _phase2
    n = 1 << 18
    for name in sys.argv[1].split(","):
        dim, b, bv, c, cv = sweep.fiber_pair(name, n, np.int32, np.float32)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        strict, fast = limit._jit(), limit._jit(fast_math=True, vector_width=16)
        assert float(strict(A, B)) == float(limit._jit(vectorize=False)(A, B))
        ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv, cv
        cands = {"strict": lambda: strict(A, B), "fast_math n16": lambda: fast(A, B),
                 "numkong dot": lambda: nk.sparse_dot(ub, fb, uc, fc)}
        times = {k: [] for k in cands}
        for _ in range(9):
            for k, f in cands.items():
                gc.collect()
                t0 = time.thread_time()
                for _ in range(5):
                    f()
                times[k].append((time.thread_time() - t0) / 5)
        coords = b.size + c.size
        print(name, " | ".join(f"{k} {min(v) / coords * 1e9:.3f}" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
