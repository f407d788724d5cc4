"""The fast-math two-finger lane of 16 x 16 coordinates with conflict compares and a block advance (issue 36).

``bench/intersect_step.py`` measured the least time an intersection step takes on an AVX-512 CPU without
``vp2intersect``: 4 ``vpconflictd`` over 8 + 8 coordinates compare two blocks of 16 (256 pairs) in fewer
instructions than 16 rotations or broadcasts, and a block advance from the two blocks' last coordinates keeps
the loop-carried cursor chain short (load, compare, select, add). This builder puts that step into the pass for
the loops where it is allowed and pays:

* ``fast_math=True`` (the matched terms are summed in vector accumulators, in any order), ``vector_width=16``,
  phase 2 in SIMD, an ``acc + term`` sum and no store (K-accumulate), two fingers, int32 or int64 coordinates,
  the other operand's values float32 / float64, and a target with AVX-512 CD (``vpconflictd`` / ``vpconflictq``;
  no ``vector`` dialect op has them: an LLVM intrinsic call in the lane).

int64 coordinates: the same step on blocks of 8 (one zmm of coordinates), 4 ``vpconflictq`` over 4 + 4
coordinates, C's values permuted by ``vpermpd`` (float64) or ``vpermps`` on a ymm (float32); the lane's n and
its vector accumulators are 8 wide.

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
from splyce.passes.ir_utils import CMPI_NE, CMPI_ULE, int_splat

WIDTH = CONFLICT_WIDTH   # the int32 lane's block (the broadcast lane is int32 only)
HALF = WIDTH // 2
CRD_BITS = (32, 64)
BLOCK = {32: WIDTH, 64: 8}   # coordinates per block: one zmm of them
CONFLICT = {32: "llvm.x86.avx512.conflict.d.512", 64: "llvm.x86.avx512.conflict.q.512"}
NO_CONFLICT = "the target has no AVX-512 CD"   # the one blocker the broadcast lane lifts (broadcast_lane.py)
PERMUTE = {32: "llvm.x86.avx512.permvar.sf.512", 64: "llvm.x86.avx512.vpermi2var.pd.512"}
# int64 blocks: 8 values permuted by an 8-lane index (float64: vpermpd zmm; float32: vpermps ymm, i32 index)
PERMUTE8 = {64: "llvm.x86.avx512.permvar.df.512", 32: "llvm.x86.avx2.permps"}


def conflict_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the conflict lane is not built for ``match`` (then the all-pairs lane is), or None."""
    blocker = sum_lane_blocker(match, options, builder, WIDTH, CRD_BITS)
    if blocker:
        return blocker
    for ll in match.lane_loads.values():
        et = ir.MemRefType(ll.memref.type).element_type
        if ll.side == 1 and not (isinstance(et, ir.FloatType) and et.width in PERMUTE):
            return f"the other operand's values are {et}, not f32 / f64"
    if not has_conflict_compares(options.target):
        return NO_CONFLICT
    return None


class ConflictLaneBuilder(FastLaneBuilder):
    """``FastLaneBuilder`` with phase 1 by conflict compares and phase 3 by block advance (``conflict_blocker``
    must have said None). ``block``: coordinates per block and the lane's n (16 for int32, 8 for int64)."""

    def __init__(self, match: Coiteration, options: Options, profile_counters=None):
        super().__init__(match, options, profile_counters)
        self.crd_bits = ir.IntegerType(match.crd_type).width
        self.block = BLOCK[self.crd_bits]
        self.n = self.block   # the vector accumulators and the room test are one block wide

    def _phase1(self, cursors):
        m, block = self.m, self.block
        half = block // 2
        vt = _vtype(block, m.crd_type)
        kb = vector.load(vt, m.crd_memrefs[0], [cursors[0]])
        kc = vector.load(vt, m.crd_memrefs[1], [cursors[1]])
        merged = []
        for hb in (0, half):
            conf = []
            for hc in (0, half):   # C's half hc in the low lanes, B's half hb in the high ones
                quarter = vector.shuffle(kc, kb, [hc + k for k in range(half)] + [block + hb + k for k in range(half)])
                conf.append(llvm.call_intrinsic(vt, CONFLICT[self.crd_bits], [quarter], [], []))
            merged.append(arith.ori(conf[0], arith.shli(conf[1], int_splat(vt, half))))
        # B lane i: a one-hot of the C lane (0..block-1) holding its coordinate, or 0
        hits = vector.shuffle(merged[0], merged[1], [half + k for k in range(half)] +
                              [block + half + k for k in range(half)])
        matched = arith.cmpi(CMPI_NE, hits, int_splat(vt, 0))
        lane_of = arith.subi(int_splat(vt, self.crd_bits - 1), math.ctlz(hits))
        return self._block_state(cursors, kb, kc, matched, lane_of)

    def _block_state(self, cursors, kb, kc, matched, lane_of, c_block: int | None = None):
        """Phase 1's result from B's / C's keys, B's matched lanes and the C lane of each (low bits): B's
        values loaded, C's permuted into B's lanes, the blocks' last coordinates (for the advance; C's block
        ``c_block`` coordinates, by default one block)."""
        block = self.block
        c_block = c_block or block
        m = self.m
        values = {}
        side_memrefs = [[], []]
        for ll in m.lane_loads.values():
            if ll.memref not in side_memrefs[ll.side]:
                side_memrefs[ll.side].append(ll.memref)
        for mem in side_memrefs[0]:
            et = ir.MemRefType(mem.type).element_type
            values[(mem, 0)] = Lanes(block, vec=vector.load(_vtype(block, et), mem, [cursors[0]]))
        for mem in side_memrefs[1]:
            values[(mem, 1)] = Lanes(block, vec=self._permuted(mem, cursors[1], lane_of))
        lasts = [memref.load(crd, [arith.addi(cur, _index(width - 1))])
                 for crd, cur, width in zip(m.crd_memrefs, cursors, (block, c_block))]
        keys = [Lanes(block, vec=kb), Lanes(block, vec=kc)]
        return {"keys": keys, "kb": keys[0], "matched": Lanes(block, vec=matched), "values": values, "lasts": lasts}

    def _permuted(self, mem, cursor, lane_of):
        """C's values of one block at ``cursor`` in B's lanes: lane i holds the value at C lane ``lane_of[i]``."""
        et = ir.MemRefType(mem.type).element_type
        if self.block != WIDTH:   # int64 coordinates: 8 lanes, one permute
            vt = _vtype(self.block, et)
            vm = vector.load(vt, mem, [cursor])
            index = lane_of if et.width == 64 else arith.trunci(_vtype(self.block, ir.IntegerType.get_signless(32)),
                                                                 lane_of)
            return llvm.call_intrinsic(vt, PERMUTE8[et.width], [vm, index], [], [])
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
        """Block advance: a fiber moves past its block when its last coordinate is <= the other's."""
        lb, lc = st["lasts"]
        full, none = _index(self.block), _index(0)
        return [arith.select(arith.cmpi(CMPI_ULE, lb, lc), full, none),
                arith.select(arith.cmpi(CMPI_ULE, lc, lb), full, none)]
