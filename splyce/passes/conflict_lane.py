"""The fast-math two-finger lane of 16 x 16 coordinates with conflict compares and a block advance (issue 36).

``bench/intersect_step.py`` measured the least time an intersection step takes on an AVX-512 CPU without
``vp2intersect``: 4 ``vpconflictd`` over 8 + 8 coordinates compare two blocks of 16 (256 pairs) in fewer
instructions than 16 rotations or broadcasts, and a block advance from the two blocks' last coordinates keeps
the loop-carried cursor chain short (load, compare, select, add). This builder puts that step into the pass for
the loops where it is allowed and pays:

* ``fast_math=True`` (the matched terms are summed in vector accumulators, in any order), ``vector_width=16``,
  phase 2 in SIMD, an ``acc + term`` sum and no store (K-accumulate), two fingers, int32 coordinates, the other
  operand's values float32 / float64, and a target with AVX-512 CD (``vpconflictd``; no ``vector`` dialect op
  has it: an LLVM intrinsic call in the lane).

Phase 1: C's block in lanes 0-7 and half of B's block in lanes 8-15 of one vector, 4 times; a B lane's conflict
bits are the C lanes holding its coordinate (coordinates within one fiber are distinct, so no other bits).
The two quarters of one B half merge into one 16-bit one-hot (C's upper half shifted up by 8): a B lane is
matched when it is non-zero, and its C lane is ``31 - ctlz``; C's values are permuted into B's lanes by that
index (``vpermps``; float64: two ``vpermi2pd`` over C's two halves). Phase 2 is the SIMD phase 2 of
``fast_lane`` (its vector accumulators). Phase 3: a fiber moves past its whole block when its last coordinate
is ``<=`` the other's (both when equal), so every pair of blocks whose ranges overlap meets exactly once.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, math, memref, vector

from splyce.options import CONFLICT_WIDTH, Options, has_conflict_compares
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.fast_lane import FastLaneBuilder, Lanes, _index, _vtype, sum_lane_blocker
from splyce.passes.ir_utils import CMPI_NE, CMPI_ULE

WIDTH = CONFLICT_WIDTH
HALF = WIDTH // 2
CONFLICT = "llvm.x86.avx512.conflict.d.512"
NO_CONFLICT = "the target has no AVX-512 CD"   # the one blocker the broadcast lane lifts (broadcast_lane.py)
PERMUTE = {32: "llvm.x86.avx512.permvar.sf.512", 64: "llvm.x86.avx512.vpermi2var.pd.512"}


def conflict_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the conflict lane is not built for ``match`` (then the all-pairs lane is), or None."""
    blocker = sum_lane_blocker(match, options, builder, WIDTH)
    if blocker:
        return blocker
    for ll in match.lane_loads.values():
        et = ir.MemRefType(ll.memref.type).element_type
        if ll.side == 1 and not (isinstance(et, ir.FloatType) and et.width in PERMUTE):
            return f"the other operand's values are {et}, not f32 / f64"
    if not has_conflict_compares(options.target):
        return NO_CONFLICT
    return None


def _splat(vt: ir.VectorType, value: int):
    return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.IntegerAttr.get(vt.element_type, value)))


class ConflictLaneBuilder(FastLaneBuilder):
    """``FastLaneBuilder`` with phase 1 by conflict compares and phase 3 by block advance (``conflict_blocker``
    must have said None)."""

    def _phase1(self, cursors):
        m = self.m
        t = m.crd_type
        vt = _vtype(WIDTH, t)
        kb = vector.load(vt, m.crd_memrefs[0], [cursors[0]])
        kc = vector.load(vt, m.crd_memrefs[1], [cursors[1]])
        eight = _splat(vt, HALF)
        merged = []
        for hb in (0, HALF):
            conf = []
            for hc in (0, HALF):   # C's half hc in lanes 0-7, B's half hb in lanes 8-15
                quarter = vector.shuffle(kc, kb, [hc + k for k in range(HALF)] + [WIDTH + hb + k for k in range(HALF)])
                conf.append(llvm.call_intrinsic(vt, CONFLICT, [quarter], [], []))
            merged.append(arith.ori(conf[0], arith.shli(conf[1], eight)))
        # B lane i: a one-hot of the C lane (0..15) holding its coordinate, or 0
        hits = vector.shuffle(merged[0], merged[1], [HALF + k for k in range(HALF)] +
                              [WIDTH + HALF + k for k in range(HALF)])
        matched = arith.cmpi(CMPI_NE, hits, _splat(vt, 0))
        lane_of = arith.subi(_splat(vt, 31), math.ctlz(hits))
        return self._block_state(cursors, kb, kc, matched, lane_of)

    def _block_state(self, cursors, kb, kc, matched, lane_of, c_block: int = WIDTH):
        """Phase 1's result from B's / C's keys, B's matched lanes and the C lane of each (low 4 bits): B's
        values loaded, C's permuted into B's lanes, the blocks' last coordinates (for the advance; C's block
        ``c_block`` coordinates)."""
        m = self.m
        values = {}
        side_memrefs = [[], []]
        for ll in m.lane_loads.values():
            if ll.memref not in side_memrefs[ll.side]:
                side_memrefs[ll.side].append(ll.memref)
        for mem in side_memrefs[0]:
            et = ir.MemRefType(mem.type).element_type
            values[(mem, 0)] = Lanes(WIDTH, vec=vector.load(_vtype(WIDTH, et), mem, [cursors[0]]))
        for mem in side_memrefs[1]:
            values[(mem, 1)] = Lanes(WIDTH, vec=self._permuted(mem, cursors[1], lane_of))
        lasts = [memref.load(crd, [arith.addi(cur, _index(width - 1))])
                 for crd, cur, width in zip(m.crd_memrefs, cursors, (WIDTH, c_block))]
        keys = [Lanes(WIDTH, vec=kb), Lanes(WIDTH, vec=kc)]
        return {"keys": keys, "kb": keys[0], "matched": Lanes(WIDTH, vec=matched), "values": values, "lasts": lasts}

    @staticmethod
    def _permuted(mem, cursor, lane_of):
        """C's 16 values at ``cursor`` in B's lanes: lane i holds the value at C lane ``lane_of[i]``."""
        et = ir.MemRefType(mem.type).element_type
        if et.width == 32:
            vm = vector.load(_vtype(WIDTH, et), mem, [cursor])
            return llvm.call_intrinsic(_vtype(WIDTH, et), PERMUTE[32], [vm, lane_of], [], [])
        v8 = _vtype(HALF, et)
        lo = vector.load(v8, mem, [cursor])
        hi = vector.load(v8, mem, [arith.addi(cursor, _index(HALF))])
        i64x8 = _vtype(HALF, ir.IntegerType.get_signless(64))
        halves = []
        for h in (0, HALF):
            idx = arith.extui(i64x8, vector.shuffle(lane_of, lane_of, [h + k for k in range(HALF)]))
            halves.append(llvm.call_intrinsic(v8, PERMUTE[64], [lo, idx, hi], [], []))
        return vector.shuffle(halves[0], halves[1], list(range(WIDTH)))

    def _phase3(self, st):
        """Block advance: a fiber moves past its 16 coordinates when its last one is <= the other's."""
        lb, lc = st["lasts"]
        full, none = _index(WIDTH), _index(0)
        return [arith.select(arith.cmpi(CMPI_ULE, lb, lc), full, none),
                arith.select(arith.cmpi(CMPI_ULE, lc, lb), full, none)]
