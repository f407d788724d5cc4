"""The strict two-finger lane every fiber pair starts in: conflict compares, ordered adds of the matches only.

The all-pairs lane at n = 4 (``fast_lane``) is the strict (bit-exact) lane: each step adds its 4 lane products
to the sum in order, the unmatched ones as -0.0, 4 dependent adds a step whatever the overlap; on a skewed pair
(one fiber several times the other's length) its pivot advance also walks the long fiber 4 at a time. This
builder is the conflict lane's phase 1 and block advance (``conflict_lane``: blocks of 16 int32 / 8 int64
coordinates) with a strict phase 2: the matched lanes' terms (the SIMD phase 2's term vector) are added to the
scalar sum one at a time, lowest B lane (= smallest coordinate) first (``cttz``, the lane's term permuted into
lane 0, the bit cleared): exactly the scalar loop's additions, in its order. The first ``FIXED_ADDS`` matched
lanes are added without a branch (-0.0 past the last one); a step with more (a "busy" one) adds the rest under
one branch, by an ordered reduction of the step's terms with every other lane -0.0.

Every pair that does not gallop starts here (``add_conflict_lane_first``), then goes on in the all-pairs lane and
the scalar loop as before: for its last < 16 / 8 coordinates, or from the step on where its busy steps came too
often (a credit carried through the lane: +1 a calm step, -4 a busy one, the lane left below 0; a pair of length
ratio >= ``SKEW_RATIO`` never leaves). At low overlap a step has 0-3 matches and costs its few adds; at 50 %
overlap and more the all-pairs lane's 4 fixed adds a step are cheaper, which the credit finds within a few steps.
Every pair of overlapping blocks meets exactly once and the blocks' ranges advance in order, so the matched
coordinates come in ascending order across steps and the results are bit-identical to the plain sparsifier.

Every type pair (``packed_phase2``): phase 2 packs the matched terms in lane order by compress (``vcompressps`` /
``vcompresspd``) and stores them into a buffer per sum, added in order when it fills and after the lane
(``_phase2_buffered``: no add chain in the lane; a pair that enters stays), and a pair whose expected matches a step
(from its lengths and first and last coordinates) reach ``PACKED_DENSE`` starts in the all-pairs lane
(``_dense_start``; docs/passes.md, "The buffered strict lane, every type pair"); one whose expected matches reach
``DRAIN_FROM`` adds ``DRAIN`` buffered terms in every step (``_drain``: the ordered add chain beside the lane's work
instead of after it; docs/passes.md, "The interleaved drain"). The permute per lane
(``_phase2_permuted``) and the packed adds in the lane (``_phase2_packed``) remain for the measurement script.

Built for strict (``fast_math=False``) two-finger sums ``acc + term`` without stores, int32 or int64 coordinates
(int64: the conflict lane's 8 x 8 blocks, ``vpconflictq``), the other operand's values f32 / f64, phase 2 in
SIMD, the all-pairs lane at n = 4, on a target with AVX-512 CD whose ``vpconflictd`` was measured fast
(``options.FAST_CONFLICT_CPUS``: AMD Zen 4; on Intel Sapphire Rapids it is slow, docs/passes.md); a static
rule, as strict kernels are never measured (``strict_conflict_blocker``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from mlir import ir
from mlir.dialects import arith, llvm, math, memref, scf, vector

from splyce.options import DEFAULT_VECTOR_WIDTH, FAST_CONFLICT_CPUS, Options, has_fast_conflict_compares
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.conflict_lane import CRD_BITS, HALF, PERMUTE, PERMUTE8, WIDTH, ConflictLaneBuilder
from splyce.passes.fast_lane import FAST_LANE_ATTR, FastLaneBuilder, _clone_with, _index, _neg_zero, _vtype
from splyce.passes.ir_utils import CMPI_NE, CMPI_SGE, CMPI_UGE, CMPI_UGT, int_splat

STRICT_CONFLICT_ATTR = "splyce.strict_conflict_lane"   # unit attribute marking this lane's scf.while
# The length ratio from which a pair stays in this lane to its end (docs/passes.md, "A strict conflict lane for skewed
# pairs": measured against the n = 4 lane at 1:1 to 1:16 on AMD Zen 4)
SKEW_RATIO = 6
COMPRESS = "llvm.experimental.vector.compress"
# profile counters (splyce_pass.PROFILE_SLOTS): coordinates this lane consumed; fiber pairs (long enough for one step)
# that entered it; pairs sent on to the all-pairs lane from the start (dense ones: _dense_start)
CONFLICT_LANE_SLOT, PAIRS_CONFLICT_SLOT, PAIRS_ALL_PAIRS_SLOT = 5, 6, 7


def _true():
    return arith.constant(ir.IntegerType.get_signless(1), 1)   # LLVM's generic register compress: vcompressps on AVX-512


def strict_conflict_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the strict conflict lane is not built before the all-pairs lane of ``match``, or None."""
    if options.fast_math:
        return "fast_math (its sums go to vector accumulators)"
    if options.vector_width != DEFAULT_VECTOR_WIDTH or not options.simd_mac:
        return f"needs the all-pairs lane at n = {DEFAULT_VECTOR_WIDTH} with phase 2 in SIMD"
    if match.fingers != 2 or match.kind != "K-accumulate" or match.stores:
        return "two fingers summing without stores only"
    if not (isinstance(match.crd_type, ir.IntegerType) and ir.IntegerType(match.crd_type).width in CRD_BITS):
        return "int32 / int64 coordinates only"
    blocker = builder.simd2_blocker()
    if blocker or set(match.acc_of_result.values()) != set(match.reductions):
        return blocker or "an accumulator that is not a sum"
    for ll in match.lane_loads.values():
        et = ir.MemRefType(ll.memref.type).element_type
        if ll.side == 1 and not (isinstance(et, ir.FloatType) and et.width in PERMUTE):
            return f"the other operand's values are {et}, not f32 / f64"
    if not has_fast_conflict_compares(options.target):
        return f"the target is not a CPU with AVX-512 CD measured fast ({', '.join(FAST_CONFLICT_CPUS)})"
    return None


def _lane_value(term, lane):
    """``term[lane]`` (a vector<16 / 8 x f32 / f64>, ``lane`` an index): the lane permuted into lane 0 (``vpermps`` /
    ``vpermi2pd`` / ``vpermpd`` by a broadcast index) and lane 0 taken. A dynamic ``vector.extract`` spilled the
    vectors to the stack and reloaded the lane on every add (a store-forwarding stall each: ~20 ns per match
    measured)."""
    vt = ir.VectorType(term.type)
    et, lanes = vt.element_type, vt.shape[0]
    if lanes != WIDTH:   # an int64 lane's 8-wide terms
        it = ir.IntegerType.get_signless(et.width)
        idx = vector.broadcast(_vtype(lanes, it), arith.index_castui(it, lane))
        return vector.extract(llvm.call_intrinsic(term.type, PERMUTE8[et.width], [term, idx], [], []), [], [0])
    if et.width == 32:
        idx = vector.broadcast(_vtype(WIDTH, ir.IntegerType.get_signless(32)),
                               arith.index_castui(ir.IntegerType.get_signless(32), lane))
        moved = llvm.call_intrinsic(term.type, PERMUTE[32], [term, idx], [], [])
    else:
        i64 = ir.IntegerType.get_signless(64)
        idx = vector.broadcast(_vtype(HALF, i64), arith.index_castui(i64, lane))
        halves = [vector.shuffle(term, term, [h + k for k in range(HALF)]) for h in (0, HALF)]
        moved = llvm.call_intrinsic(_vtype(HALF, et), PERMUTE[64], [halves[0], idx, halves[1]], [], [])
    return vector.extract(moved, [], [0])


def packed_phase2(match: Coiteration) -> bool:
    """Whether the strict lane of ``match`` packs its terms by compress (``StrictConflictLaneBuilder._phase2_packed``):
    every strict lane the builder takes (int32 coordinates: blocks of 16, f32 terms in one zmm, f64 terms in two;
    int64 coordinates: blocks of 8, f32 terms in one ymm, f64 in one zmm), unless ``PACKED`` was turned off (the
    measurement scripts' permute per lane)."""
    if not StrictConflictLaneBuilder.PACKED:
        return False
    if not (isinstance(match.crd_type, ir.IntegerType) and ir.IntegerType(match.crd_type).width in CRD_BITS):
        return False
    return all(isinstance(red.term.type, ir.FloatType) and ir.FloatType(red.term.type).width in (32, 64)
               for red in match.reductions.values())


def describe_packed(match: Coiteration) -> str:
    block = WIDTH if ir.IntegerType(match.crd_type).width == 32 else 8
    S = StrictConflictLaneBuilder
    if S.BUFFERED:
        how = f"stored into a buffer, added in order each time it holds > {S.BUFFER} (one add per match)"
        if S.DRAIN:
            how += f", {S.DRAIN} of them a step in the lane on pairs expecting >= {S.DRAIN_FROM:g} matches a step"
    else:
        how = f"{' + '.join(str(a) for a in S.packed_adds(block))} ordered adds"
    start = (f"a pair expecting >= {S.dense_limit(match):g} matches a step ({block} lenB lenC / (span (lenB + lenC)), from "
             "its lengths and first and last coordinates) starts in the all-pairs lane" if S.PACKED_START[block] >= 0
             else "only pairs of length ratio >= 6 enter")
    return f"; matched lanes packed by vcompress, {how}; {start}"


def add_conflict_lane_first(match: Coiteration, fast_op, options: Options, counters=None) -> None:
    """Put the strict conflict lane before the all-pairs lane ``fast_op`` of ``match`` (after galloping's choice,
    if any, in its branch for the pairs that do not gallop): every pair starts in it, and goes on in the
    all-pairs lane (for its last < 16 / 8 coordinates, or from a step on when its matches come too densely:
    ``StrictConflictLaneBuilder``'s credit), then the scalar loop."""
    StrictConflictLaneBuilder(replace(match, while_op=fast_op), options, counters).build()


class StrictConflictLaneBuilder(ConflictLaneBuilder):
    """The conflict lane with the strict phase 2 (``strict_conflict_blocker`` must have said None), built before the
    all-pairs lane of the pair (``add_conflict_lane_first``: it takes that lane's initial values)."""

    # matched lanes added per step without a branch (a branch on any match measured 1.3-1.7x slower), per block:
    # about the matches a step has at the length ratio 6 with 100 % overlap (16 / 6, 8 / 6), measured
    # (docs/passes.md)
    FIXED_ADDS = {16: 3, 8: 2}

    # A pair leaves the lane for the all-pairs lane when its steps have more matched lanes than FIXED_ADDS too
    # often (the ordered adds of such a step cost more than the all-pairs lane's): a credit, CREDIT_START on entry
    # (a pair of length ratio >= SKEW_RATIO: never leaves, its matches come one block of the short fiber at a time),
    # +1 a calm step up to CREDIT_CAP, -CREDIT_DEBIT a busy one, the lane left below 0 (docs/passes.md). On blocks
    # of 8 (int64) only the skewed pairs enter: the others measured 3-10 % slower in it at 1:1 and low overlap.
    CREDIT_START, CREDIT_CAP, CREDIT_DEBIT = {16: 8, 8: -1}, 16, 4

    def _carried_inits(self) -> list:
        m, i32 = self.m, ir.IntegerType.get_signless(32)
        inits = list(self.m.while_op.operation.operands)
        lens = [arith.subi(hi, inits[p]) for p, hi in zip(m.cursor_pos, m.bounds)]
        skewed = arith.cmpi(CMPI_UGE, arith.maxui(*lens), arith.muli(arith.minui(*lens), _index(SKEW_RATIO)))
        self._cap = arith.select(skewed, arith.constant(i32, 1 << 30), arith.constant(i32, self.CREDIT_CAP))
        if self._packed():
            start = self._dense_start(inits, lens, arith.constant(i32, self.PACKED_START[self.block]))
        else:
            start = arith.constant(i32, self.CREDIT_START[self.block])
        credit = arith.select(skewed, self._cap, start)
        fill = [_index(0)] * (1 + (self.DRAIN > 0)) if self._buffered() else []
        if self.profile_counters is not None:   # the pair's lane choice, for pairs long enough for a step
            steps = arith.cmpi(CMPI_UGE, arith.minui(*lens), _index(self.block))
            enters = arith.cmpi(CMPI_SGE, credit, arith.constant(i32, 0))
            for slot, chosen in ((PAIRS_CONFLICT_SLOT, enters), (PAIRS_ALL_PAIRS_SLOT, arith.xori(enters, _true()))):
                self._count(self.profile_counters, slot,
                            arith.select(arith.andi(steps, chosen), _index(1), _index(0)))
        return [credit] + fill

    def _dense_start(self, inits, lens, start):
        """The packed lane's credit on entry, from the pair's lengths and first and last coordinates: ``start``, or
        -1 (the pair starts in the all-pairs lane) when the matches expected a step, ``16 lenB lenC / (span (lenB +
        lenC))`` for fibers drawn independently over their joint span, reach ``PACKED_DENSE`` (uniform pairs of 50 %
        overlap and more: the all-pairs lane's 4 adds a step are cheaper there). Either fiber empty: ``start``
        (no lane runs)."""
        m, i32, f64 = self.m, ir.IntegerType.get_signless(32), ir.F64Type.get()
        nonempty = arith.andi(*[arith.cmpi(CMPI_UGT, n, _index(0)) for n in lens])
        i1 = ir.IntegerType.get_signless(1)
        branch = scf.IfOp(nonempty, [i32, i1], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            ends = []
            for crd, p, hi in zip(m.crd_memrefs, m.cursor_pos, m.bounds):
                ends.append([arith.uitofp(f64, memref.load(crd, [at])) for at in (inits[p], arith.subi(hi, _index(1)))])
            lo = arith.minimumf(ends[0][0], ends[1][0])
            span = arith.addf(arith.subf(arith.maximumf(ends[0][1], ends[1][1]), lo), arith.constant(f64, 1.0))
            lb, lc = (arith.uitofp(f64, arith.index_castui(ir.IntegerType.get_signless(64), n)) for n in lens)
            expected = arith.mulf(arith.constant(f64, float(self.block)), arith.mulf(lb, lc))
            limit = arith.mulf(arith.constant(f64, self.dense_limit(m)), arith.mulf(span, arith.addf(lb, lc)))
            dense = arith.cmpf(arith.CmpFPredicate.OGE, expected, limit)
            drain_limit = arith.mulf(arith.constant(f64, self.DRAIN_FROM), arith.mulf(span, arith.addf(lb, lc)))
            drain = arith.cmpf(arith.CmpFPredicate.OGE, expected, drain_limit)
            scf.yield_([arith.select(dense, arith.constant(i32, -1), start), drain])
        with ir.InsertionPoint(branch.else_block):
            scf.yield_([start, arith.constant(i1, 0)])
        self._drain_on = branch.results[1]
        return branch.results[0]

    def _carried_conditions(self, carried: list) -> list:
        return [arith.cmpi(CMPI_SGE, carried[0], arith.constant(carried[0].type, 0))]

    def _carried_next(self, carried: list) -> list:
        credit = carried[0]
        t = credit.type
        step = arith.select(self._busy, arith.constant(t, -self.CREDIT_DEBIT), arith.constant(t, 1))
        return [arith.minsi(arith.addi(credit, step), self._cap)] + (self._next_fill if self._buffered() else [])

    def build(self):
        self.counter_slot = CONFLICT_LANE_SLOT
        self._buffers = {}
        fast = super().build()
        del fast.operation.attributes[FAST_LANE_ATTR]   # tests and tools count the all-pairs lane as "the" lane
        fast.operation.attributes[STRICT_CONFLICT_ATTR] = ir.UnitAttr.get()
        if self._buffered():   # the terms still in the buffers, added after the lane
            w = self.m.while_op
            fill = fast.results[len(w.operation.operands) + 1]
            read = fast.results[len(w.operation.operands) + 2] if self.DRAIN else None
            with ir.InsertionPoint(w):
                sums = self._flush([w.operation.operands[pos] for pos in self._buffers], fill, read)
            for pos, value in zip(self._buffers, sums):
                w.operation.operands[pos] = value
        return fast

    # The buffered phase 2 (``_phase2_buffered``): the matched lanes' packed terms stored into a buffer per sum, added
    # in order by a loop of one add per term when it fills (and after the lane)
    BUFFERED = True   # the measurement scripts turn it off (the packed adds in the lane) to compare
    BUFFER = 512      # terms a buffer holds before it is added up (2 / 4 KiB: stays in L1)
    # Terms added from the buffer in every step (the interleaved drain, ``_drain``): the ordered add chain runs beside
    # the lane's own work instead of after it; 0: none (the buffer added up only when full and after the lane)
    # Only pairs expecting at least DRAIN_FROM matches a step (``_dense_start``'s statistic) drain in the lane (under
    # a branch taken the same way every step of a pair); the sparser ones leave their few terms to the buffer's flush
    DRAIN = 2
    DRAIN_FROM = 3.0

    def _buffered(self) -> bool:
        return self.BUFFERED and self._packed()

    def _buffer(self, pos: int, et: ir.Type):
        """The buffer of the sum at iter-arg ``pos``: ``BUFFER + block`` elements on the stack, allocated once at
        the function's entry."""
        if pos not in self._buffers:
            func = self.m.while_op.operation
            while func.name != "func.func":
                func = func.parent
            with ir.InsertionPoint.at_block_begin(func.regions[0].blocks[0]):
                size = self.BUFFER + self.block + self.DRAIN   # the drain reads up to DRAIN past the fill
                self._buffers[pos] = memref.alloca(ir.MemRefType.get([size], et), [], [])
        return self._buffers[pos]

    def _flush(self, sums: list, fill, start=None) -> list:
        """``sums`` (in ``self._buffers``' order) plus their buffers' terms ``start`` (0 by default) to ``fill``, one
        add each, in order (the sum's own add op: the scalar loop's additions)."""
        adds = {pos: red.add_op for pos, red in self.m.reductions.items()}
        loop = scf.ForOp(_index(0) if start is None else start, fill, _index(1), sums)
        with ir.InsertionPoint(loop.body):
            k = loop.induction_variable
            out = []
            for pos, acc in zip(self._buffers, loop.inner_iter_args):
                term = memref.load(self._buffers[pos], [k])
                out.append(_clone_with(adds[pos], [acc, term], [acc.type])[0])
            scf.yield_(out)
        return list(loop.results)

    # The packed phase 2 (``_phase2_packed``): matched lanes added in order without a branch, then under one branch,
    # then the rest under another (``packed_adds``)
    PACKED = True   # the measurement scripts turn it off (the permute per lane) to compare
    # per block: 4 + 4 (+ 8) on blocks of 16; 2 + 6 on blocks of 8 (only skewed pairs enter them, with fewer matches a
    # step: 4 branchless adds measured 1.13x the permute per lane's 2 at 1:16, int64 / f64)
    PACKED_ADDS = {16: (4, 4), 8: (2, 6)}
    # Matched lanes past which a packed step is busy (the credit's debit). The block: none is, a pair that enters
    # stays (_dense_start keeps the dense ones out): with 8, clustered pairs (runs of 64) left for the all-pairs lane
    # at their first overlapping runs and ran 0.91 ns against 0.50 staying (docs/passes.md)
    # expected matches a step from which a pair starts in the all-pairs lane (_dense_start), by the terms' bits.
    # Buffered, f32: uniform pairs of 50 % overlap (4 a step) ran 0.86x, 61 % (power-law gaps a = 2) 0.91x the
    # all-pairs lane's time in this lane, 80 % (6.4 a step) 1.17x; f64 (two zmm of terms a step): 50 % 1.15x, so 3
    # (docs/passes.md, "The buffered strict lane, every type pair"); the packed adds in the lane: 3
    PACKED_DENSE = {32: 6.0, 64: 3.0}

    @classmethod
    def dense_limit(cls, match: Coiteration) -> float:
        """``PACKED_DENSE`` for the terms of ``match`` (the widest)."""
        return cls.PACKED_DENSE[max(ir.FloatType(red.term.type).width for red in match.reductions.values())]
    # the credit on entry of a packed lane; blocks of 8 (int64): only the skewed pairs enter, as with the permute per
    # lane (the others measured 1.11-1.21x slower packed than in the all-pairs lane: uniform x2 / x10, runs 8,
    # int64 / f64, docs/passes.md)
    PACKED_START = {16: 8, 8: -1}

    @classmethod
    def packed_adds(cls, block: int) -> tuple:
        """The packed phase 2's ordered adds: without a branch, under a first branch, under a second (none past the
        block)."""
        first, second = cls.PACKED_ADDS[block]
        return tuple(a for a in (first, min(second, block - first), block - first - second) if a > 0)

    def _packed(self) -> bool:
        return packed_phase2(self.m)

    def _phase2(self, args, st):
        if self._buffered():
            return self._phase2_buffered(args, st)
        if self._packed():
            return self._phase2_packed(args, st)
        return self._phase2_permuted(args, st)

    def _terms(self, args, st):
        """The SIMD phase 2's term vectors (its masked ordered reductions removed), the sums' add ops, positions."""
        accs = self._phase2_simd(args, st)   # builds each sum as an ordered reduction of select(mask, term, -0.0)
        terms, adds = [], []
        for pos, red in self.m.reductions.items():
            reduction = accs[pos].owner
            masked = reduction.operands[0].owner
            terms.append(masked.operands[1])
            adds.append(red.add_op)
            reduction.operation.erase()
            masked.operation.erase()
        return terms, adds, list(self.m.reductions)

    def _phase2_packed(self, args, st):
        """The matched lanes' terms packed in lane order into the low lanes (``llvm.experimental.vector.compress``:
        one ``vcompressps``, -0.0 past the last matched lane) and added to the sums in that order: the first
        ``PACKED_ADDS[0]`` without a branch (-0.0 is the identity), the next ``PACKED_ADDS[1]`` under one branch
        (more matched lanes than the first), the rest under a second; a step with more matched lanes than
        the block is busy (none: a pair that enters stays). Each added lane is a static extract of the packed vector: no
        per-lane cttz or permute. Against the permute per lane (3 adds, then an ordered reduction of all 16 lanes):
        1.3-1.8x faster on clustered and power-law pairs, 1.1-1.3x on uniform pairs to 25 % overlap (docs/passes.md,
        "The lane across coordinate distributions")."""
        terms, adds, positions = self._terms(args, st)
        mask = st["matched"].vec()
        i32 = ir.IntegerType.get_signless(32)
        bits = vector.extract(vector.bitcast(_vtype(1, ir.IntegerType.get_signless(self.block)), mask), [], [0])
        count = arith.extui(i32, math.ctpop(bits))
        packed = [self._compress(term, mask, bits) for term in terms]
        sums = [args[pos] for pos in positions]

        def add_lanes(sums, lo, hi):
            out = []
            for lane, add, acc in zip(packed, adds, sums):
                for i in range(lo, hi):
                    acc = _clone_with(add, [acc, lane(i)], [acc.type])[0]
                out.append(acc)
            return out

        first, *more_adds = self.packed_adds(self.block)
        sums = add_lanes(sums, 0, first)
        done = first
        for more in more_adds:
            taken = arith.cmpi(CMPI_UGT, count, arith.constant(i32, done))
            branch = scf.IfOp(taken, [s.type for s in sums], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                scf.yield_(add_lanes(sums, done, done + more))
            with ir.InsertionPoint(branch.else_block):
                scf.yield_(sums)
            sums = list(branch.results)
            done += more
        self._busy = arith.cmpi(CMPI_UGT, count, arith.constant(i32, self.block))   # never: a pair that enters stays
        return {pos: sums[k] for k, pos in enumerate(positions)}

    def _phase2_buffered(self, args, st):
        """The matched lanes' terms packed in lane order (one compress: ``vcompressps`` / ``vcompresspd``; f64 terms
        of a block of 16: each half by its half of the mask) and stored whole (an unaligned vector store) into the
        sum's buffer at its fill, which moves on by the step's matches (popcnt); a buffer holding more than
        ``BUFFER`` terms is added up in order under one branch (``_flush``) and refilled from 0. The lane then
        carries no add chain: its steps cost the same at any overlap, and the ordered adds, one per matched term
        (none for the -0.0 fillers the packed adds spent on every step), run in a tight loop of loads and adds.
        The terms come in ascending coordinate order across steps (every pair of overlapping blocks meets once),
        so the sums are the scalar loop's, bit for bit."""
        terms, adds, positions = self._terms(args, st)
        mask = st["matched"].vec()
        bits = vector.extract(vector.bitcast(_vtype(1, ir.IntegerType.get_signless(self.block)), mask), [], [0])
        idx_t = ir.IndexType.get()
        count = arith.index_castui(idx_t, math.ctpop(bits))
        fill = self._carried_now[1]
        for term, pos in zip(terms, positions):
            vt = ir.VectorType(term.type)
            et, lanes = vt.element_type, vt.shape[0]
            buf = self._buffer(pos, et)
            fill_value = vector.broadcast(term.type, _neg_zero(et))
            if lanes == WIDTH and ir.FloatType(et).width == 64:
                half_t, at = _vtype(HALF, et), fill
                low_bits = arith.trunci(ir.IntegerType.get_signless(HALF), bits)
                for h in (0, HALF):
                    part = list(range(h, h + HALF))
                    packed = llvm.call_intrinsic(half_t, COMPRESS, [vector.shuffle(term, term, part),
                                                                    vector.shuffle(mask, mask, part),
                                                                    vector.broadcast(half_t, _neg_zero(et))], [], [])
                    vector.store(packed, buf, [at])
                    if h == 0:
                        at = arith.addi(fill, arith.index_castui(idx_t, math.ctpop(low_bits)))
            else:
                vector.store(llvm.call_intrinsic(term.type, COMPRESS, [term, mask, fill_value], [], []), buf, [fill])
        filled = arith.addi(fill, count)
        sums = [args[pos] for pos in positions]
        read = None
        if self.DRAIN:
            read = self._carried_now[2]
            drained = scf.IfOp(self._drain_on, [v.type for v in sums] + [idx_t, idx_t], has_else=True)
            with ir.InsertionPoint(drained.then_block):
                out, moved, kept = self._drain(sums, positions, adds, read, filled)
                scf.yield_(out + [moved, kept])
            with ir.InsertionPoint(drained.else_block):
                scf.yield_(sums + [read, filled])
            sums, read, filled = list(drained.results[:len(sums)]), drained.results[len(sums)], drained.results[-1]
        full = arith.cmpi(CMPI_UGT, filled, _index(self.BUFFER))
        carried_t = [idx_t] * (1 + (read is not None))
        branch = scf.IfOp(full, [s.type for s in sums] + carried_t, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(self._flush(sums, filled, read) + [_index(0)] * len(carried_t))
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(sums + [filled] + ([read] if read is not None else []))
        self._next_fill = list(branch.results[len(sums):])
        self._busy = arith.constant(ir.IntegerType.get_signless(1), 0)   # never: a pair that enters stays
        return {pos: branch.results[k] for k, pos in enumerate(positions)}

    def _drain(self, sums, positions, adds, read, filled):
        """The interleaved drain: ``DRAIN`` terms from each buffer at ``read`` added to the sums in order, every step
        of a pair that drains, without a further branch (a term at or past ``filled`` adds -0.0, the identity: x + -0.0 is x for every x, -0.0, NaN
        and Inf included); ``read`` moves on by ``min(DRAIN, filled - read)``, and both go back to 0 when the buffer
        is drained. The adds depend on the lane's stores but nothing in the lane depends on them, so the out-of-order
        core runs the ordered add chain (3 cycles an add) beside the next steps' compares instead of after the
        lane; terms in order, so bit-identical."""
        k = self.DRAIN
        out = []
        for pos, add, acc in zip(positions, adds, sums):
            buf = self._buffers[pos]
            et = ir.MemRefType(buf.type).element_type
            # one scalar load per term, each within one of the lane's stores (a vector load of the DRAIN terms may span
            # two: no store forwarding; measured the same within 3 % at 4 a step)
            for i in range(k):
                at = arith.addi(read, _index(i))
                live = arith.cmpi(arith.CmpIPredicate.ult, at, filled)
                term = arith.select(live, memref.load(buf, [at]), _neg_zero(et))
                acc = _clone_with(add, [acc, term], [acc.type])[0]
            out.append(acc)
        moved = arith.minui(arith.addi(read, _index(k)), filled)
        empty = arith.cmpi(arith.CmpIPredicate.eq, moved, filled)
        return out, arith.select(empty, _index(0), moved), arith.select(empty, _index(0), filled)

    def _compress(self, term, mask, bits):
        """A function of a lane index ``i`` giving the ``i``-th matched lane of ``term`` in lane order (-0.0 past
        the matched ones), built at the insertion point of its first call for each vector it reads.

        One zmm / ymm of terms (f32 on blocks of 16, f32 / f64 on blocks of 8): one ``llvm.experimental.vector.compress``
        (vcompressps / vcompresspd), lane ``i`` a static extract. f64 terms of a block of 16 span two zmm, which
        LLVM's compress of a vector<16xf64> splits and joins through the stack (a store-forwarding stall a step):
        instead each half is compressed by its half of the mask (two vcompresspd), and the matched lanes 0-7 are
        one two-source permute (vpermi2pd) of the halves, index ``i < nlo ? i : 8 + i - nlo`` (``nlo``: the low
        half's matches); lanes 8-15 (a step with more than 8 matches: built where first asked, under its branch) a
        permute of the high half and -0.0 by ``8 + i - nlo``."""
        vt = ir.VectorType(term.type)
        et, lanes = vt.element_type, vt.shape[0]
        neg = _neg_zero(et)
        if not (lanes == WIDTH and ir.FloatType(et).width == 64):
            packed = llvm.call_intrinsic(term.type, COMPRESS, [term, mask, vector.broadcast(term.type, neg)], [], [])
            return lambda i: vector.extract(packed, [], [i])
        half_t, i1, i64 = _vtype(HALF, et), ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
        halves, masks = [], []
        for h in (0, HALF):
            part = list(range(h, h + HALF))
            halves.append(llvm.call_intrinsic(half_t, COMPRESS, [vector.shuffle(term, term, part),
                                                                 vector.shuffle(mask, mask, part),
                                                                 vector.broadcast(half_t, neg)], [], []))
        low_bits = arith.trunci(ir.IntegerType.get_signless(HALF), bits)
        nlo = vector.broadcast(_vtype(HALF, i64), arith.extui(i64, math.ctpop(low_bits)))
        vi = _vtype(HALF, i64)
        iota = arith.constant(vi, ir.DenseElementsAttr.get(np.arange(HALF, dtype=np.int64), type=vi))
        from_high = arith.subi(arith.addi(iota, int_splat(vi, HALF)), nlo)     # 8 + i - nlo
        built = {}

        def lane(i):
            k = i // HALF
            if k not in built:
                if k == 0:
                    idx = arith.select(arith.cmpi(arith.CmpIPredicate.ult, iota, nlo), iota, from_high)
                    built[0] = llvm.call_intrinsic(half_t, PERMUTE[64], [halves[0], idx, halves[1]], [], [])
                else:
                    built[1] = llvm.call_intrinsic(half_t, PERMUTE[64], [halves[1], from_high,
                                                                         vector.broadcast(half_t, neg)], [], [])
            return vector.extract(built[k], [], [i % HALF])
        return lane

    def _phase2_permuted(self, args, st):
        """The SIMD phase 2's term vectors, added to the sums one matched lane at a time, in lane order: the first
        ``FIXED_ADDS`` matched lanes without a branch (a lane past the last matched one adds -0.0, the identity),
        the rest, if any, under one branch by an ordered reduction of the step's terms with every lane but the
        remaining matched ones -0.0 (a fixed 16 / 8 dependent adds: a loop over the remaining bits had a trip
        count that changed from step to step, mispredicted on pairs of high overlap)."""
        terms, adds, positions = self._terms(args, st)
        i32 = ir.IntegerType.get_signless(32)
        zero = arith.constant(i32, 0)
        mask_int = ir.IntegerType.get_signless(self.block)
        bits = vector.extract(vector.bitcast(_vtype(1, mask_int), st["matched"].vec()), [], [0])
        bits = arith.extui(i32, bits)
        sums = [args[pos] for pos in positions]

        def add_lowest(left, sums):
            """The sums plus the term of ``left``'s lowest set lane (-0.0 when ``left`` is 0), and ``left``
            without that bit."""
            lane = arith.index_castui(ir.IndexType.get(), math.cttz(left))
            some = arith.cmpi(CMPI_NE, left, zero)
            new = []
            for term, add, acc in zip(terms, adds, sums):
                value = arith.select(some, _lane_value(term, lane), _neg_zero(term.type.element_type))
                new.append(_clone_with(add, [acc, value], [acc.type])[0])
            return arith.andi(left, arith.subi(left, arith.constant(i32, 1))), new

        for _ in range(self.FIXED_ADDS[self.block]):
            bits, sums = add_lowest(bits, sums)
        self._busy = arith.cmpi(CMPI_NE, bits, zero)
        rest = scf.IfOp(self._busy, [s.type for s in sums], has_else=True)
        with ir.InsertionPoint(rest.then_block):   # more matched lanes: every one left, in lane order
            vi = _vtype(self.block, i32)
            lane_bits = arith.constant(vi, ir.DenseElementsAttr.get(
                np.array([1 << i for i in range(self.block)], dtype=np.int32), type=vi))
            left = arith.cmpi(CMPI_NE, arith.andi(vector.broadcast(vi, bits), lane_bits), int_splat(vi, 0))
            scf.yield_([vector.reduction(acc.type, vector.CombiningKind.ADD,
                                         arith.select(left, term, vector.broadcast(term.type, _neg_zero(acc.type))),
                                         acc=acc)
                        for term, acc in zip(terms, sums)])
        with ir.InsertionPoint(rest.else_block):
            scf.yield_(sums)
        return {pos: rest.results[k] for k, pos in enumerate(positions)}
