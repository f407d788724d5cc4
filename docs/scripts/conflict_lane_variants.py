"""Four changes to the conflict lane (passes/conflict_lane.py) tried on AMD Zen 4, each against the lane as it is,
interleaved in one process (docs/passes.md, "AMD Zen 4, 2026-12-06"). ``bench limit``'s fiber pairs (int32
coordinates, f32 / f64 values, 2^20 : 2^20, 10 % and 50 % overlap) with NumKong's ``sparse_dot`` beside them;
thread CPU time, best / median of REPEATS samples of 3 calls (default 11), ns per input coordinate; each
result checked against NumPy first. ``main`` twice: the old-vs-old control.

* ``cmovroom``: each new cursor a select of ``cursor + 16`` or ``cursor`` (a ``cmov``, as the broadcast lane
  does) and the loop test one signed compare per cursor (``cursor <= bound - 16``) instead of two;
* ``fma``: the product and the masked add of the vector accumulator with ``contract`` (one ``vfmadd``);
  fast_math allows reassociating only, so this would widen its contract;
* ``ldq``: the four (C half, B half) vectors built from 8-coordinate loads instead of shuffles of two loads;
* ``best``: all three.

    python docs/scripts/conflict_lane_variants.py [REPEATS]
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
from mlir import ir  # noqa: E402
from mlir.dialects import arith, llvm, math, vector  # noqa: E402

import splyce  # noqa: E402
import splyce.passes.splyce_pass as sp  # noqa: E402
from splyce.bench import limit  # noqa: E402
from splyce.passes.conflict_lane import CONFLICT, HALF, WIDTH, ConflictLaneBuilder  # noqa: E402
from splyce.passes.fast_lane import _index, _vtype  # noqa: E402
from splyce.passes.ir_utils import CMPI_NE, CMPI_ULE  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 11
CMPI_SLE = 3


def _splat(vt, value):
    return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.IntegerAttr.get(vt.element_type, value)))


class CmovRoom(ConflictLaneBuilder):
    def _phase3(self, st):
        lb, lc = st["lasts"]
        self._moves = [arith.cmpi(CMPI_ULE, lb, lc), arith.cmpi(CMPI_ULE, lc, lb)]
        return [arith.select(mv, _index(WIDTH), _index(0)) for mv in self._moves]

    def _body(self, args):
        out = super()._body(args)
        for pos, mv in zip(self.m.cursor_pos, self._moves):
            out[pos] = arith.select(mv, arith.addi(args[pos], _index(WIDTH)), args[pos])
        return out

    def build(self):
        fast = super().build()
        block = fast.before.blocks[0]
        cond = list(block.operations)[-1]   # scf.condition(ok, args)
        with ir.InsertionPoint(cond):
            ok = [arith.cmpi(CMPI_SLE, block.arguments[pos], arith.subi(hi, _index(WIDTH)))
                  for pos, hi in zip(self.m.cursor_pos, self.m.bounds)]
            cond.operation.operands[0] = arith.andi(*ok)
        return fast


class Fma(ConflictLaneBuilder):
    def _body(self, args):
        out = super()._body(args)
        for slot in self.vector_acc_slots.values():
            add = out[slot].owner.operands[1].owner            # select(mask, acc + term, acc)
            add.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<reassoc,contract>")
            add.operands[1].owner.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<contract>")
        return out


class LoadedQuarters(ConflictLaneBuilder):
    def _phase1(self, cursors):
        m = self.m
        vt, v8 = _vtype(WIDTH, m.crd_type), _vtype(HALF, m.crd_type)
        kb = vector.load(vt, m.crd_memrefs[0], [cursors[0]])
        kc = vector.load(vt, m.crd_memrefs[1], [cursors[1]])
        halves = [[vector.load(v8, crd, [arith.addi(cur, _index(h))]) for h in (0, HALF)]
                  for crd, cur in zip(m.crd_memrefs, cursors)]
        merged = []
        for hb in (0, 1):
            quarters = [vector.shuffle(halves[1][hc], halves[0][hb], list(range(WIDTH))) for hc in (0, 1)]
            conf = [llvm.call_intrinsic(vt, CONFLICT, [q], [], []) for q in quarters]
            merged.append(arith.ori(conf[0], arith.shli(conf[1], _splat(vt, HALF))))
        hits = vector.shuffle(merged[0], merged[1], [HALF + k for k in range(HALF)] +
                              [WIDTH + HALF + k for k in range(HALF)])
        matched = arith.cmpi(CMPI_NE, hits, _splat(vt, 0))
        return self._block_state(cursors, kb, kc, matched, arith.subi(_splat(vt, 31), math.ctlz(hits)))


class Best(CmovRoom, Fma, LoadedQuarters):
    pass


VARIANTS = {"main": ConflictLaneBuilder, "main2": ConflictLaneBuilder, "cmovroom": CmovRoom, "fma": Fma,
            "ldq": LoadedQuarters, "best": Best}

try:
    import numkong as nk
except ImportError:
    nk = None
n = 1 << 20
for vt in (np.float32, np.float64):
    for ov in (0.10, 0.50):
        dim, b, bv, c, cv = limit.fiber_pair(n, ov, 1, np.int32, vt)
        A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
        _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
        exact = float(bv[ib].astype(np.float64) @ cv[ic].astype(np.float64))
        cands = {}
        for name, cls in VARIANTS.items():
            sp.ConflictLaneBuilder = cls
            try:
                j = splyce.jit(limit._dot, fast_math=True, vector_width=16)
                j.lower(A, B)
            finally:
                sp.ConflictLaneBuilder = ConflictLaneBuilder
            assert abs(float(j(A, B)) - exact) <= 1e-4 * max(1.0, abs(exact)), name
            cands[name] = lambda j=j: j(A, B)
        if nk is not None:
            ub, uc, fb, fc = b.view(np.uint32), c.view(np.uint32), bv.astype(np.float32), cv.astype(np.float32)
            cands["numkong dot"] = lambda: nk.sparse_dot(ub, fb, uc, fc)
        names, t = list(cands), {k: [] for k in cands}
        for r in range(REPEATS):
            for k in names[r % len(names):] + names[:r % len(names)]:
                gc.collect()
                t0 = time.thread_time_ns()
                for _ in range(3):
                    cands[k]()
                t[k].append((time.thread_time_ns() - t0) / 3 / (2 * n))
        print(f"int32 / {np.dtype(vt).name} {ov * 100:g} %: " + "  ".join(
            f"{k} {min(v):.3f} / {statistics.median(v):.3f}" for k, v in t.items()) + " ns per coordinate", flush=True)
