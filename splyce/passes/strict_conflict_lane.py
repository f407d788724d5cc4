"""The strict two-finger lane for skewed fiber pairs: 16 x 16 conflict compares, ordered adds of the matches only.

The all-pairs lane at n = 4 (``fast_lane``) is the strict (bit-exact) lane: each step adds its 4 lane products
to the sum in order, the unmatched ones as -0.0. On a skewed pair (one fiber several times the other's length)
its pivot advance moves the short fiber by ~0 coordinates a step and walks the long one 4 at a time, where the
conflict lane (``conflict_lane``, ``fast_math`` only) skips the long fiber 16 at a time. This builder is the
conflict lane's phase 1 and block advance with a strict phase 2: the matched lanes' terms (the SIMD phase 2's
term vector) are added to the scalar sum one at a time, lowest B lane (= smallest coordinate) first, by a loop
over the match mask's set bits (``cttz``, the lane's term permuted into lane 0, then the bit cleared): exactly the scalar loop's additions, in its
order, and nothing when no lane matched, the common case on a skewed pair (one predictable branch).

A fiber pair runs it only when, on entry, ``long >= SKEW_RATIO x short`` (``add_skew_lane``), then the scalar loop
finishes the pair (the short fiber's last < 16 coordinates); other pairs run the all-pairs lane as before (the choice is per pair and at run
time, as galloping's, which takes over from a larger ratio: ``gallop_lane``). Every pair of overlapping blocks meets
exactly once and the blocks' ranges advance in order, so the matched coordinates come in ascending order across
steps and the results are bit-identical to the plain sparsifier.

Built for strict (``fast_math=False``) two-finger sums ``acc + term`` without stores, int32 or int64 coordinates
(int64: the conflict lane's 8 x 8 blocks, ``vpconflictq``), the other operand's values f32 / f64, phase 2 in
SIMD, the all-pairs lane at n = 4, on a target with AVX-512 CD whose ``vpconflictd`` was measured fast
(``options.FAST_CONFLICT_CPUS``: AMD Zen 4; on Intel Sapphire Rapids it is slow, docs/passes.md); a static
rule, as strict kernels are never measured (``strict_conflict_blocker``).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, math, scf, vector

from splyce.options import DEFAULT_VECTOR_WIDTH, FAST_CONFLICT_CPUS, Options, has_fast_conflict_compares
from splyce.passes.coiteration_match import Coiteration, Decline, match_coiteration
from splyce.passes.conflict_lane import CRD_BITS, HALF, PERMUTE, PERMUTE8, WIDTH, ConflictLaneBuilder
from splyce.passes.fast_lane import FAST_LANE_ATTR, FastLaneBuilder, _clone_with, _index, _neg_zero, _vtype
from splyce.passes.gallop_lane import _expect_false, _split_by_skew
from splyce.passes.ir_utils import CMPI_NE, CMPI_UGE

STRICT_CONFLICT_ATTR = "splyce.strict_conflict_lane"   # unit attribute marking this lane's scf.while
# The length ratio from which a pair runs this lane first (docs/passes.md, "A strict conflict lane for skewed
# pairs": measured against the n = 4 lane at 1:1 to 1:16 on AMD Zen 4)
SKEW_RATIO = 6


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


def add_skew_lane(match: Coiteration, fast_op, options: Options, counters=None) -> None:
    """Give the all-pairs lane ``fast_op`` of ``match`` (after galloping's choice, if any) a sibling path for pairs
    with ``long >= SKEW_RATIO x short`` on entry: ``scf.if`` (marked unlikely) whose then-branch runs the strict
    conflict lane and a copy of the scalar loop (the pair's tail), the else-branch the lane and the loop as before.
    No all-pairs lane after the conflict lane: with one there (its room test of B hoisted, one more value live
    across K1's j loop) K1's ~100 : 100-coordinate pairs, which never take this branch, ran ~1 % slower
    (docs/passes.md)."""
    inits = list(fast_op.operation.operands)[:len(match.while_op.operation.operands)]
    with ir.InsertionPoint(fast_op):
        lens = [arith.subi(hi, inits[p]) for p, hi in zip(match.cursor_pos, match.bounds)]
        skewed = arith.cmpi(CMPI_UGE, arith.maxui(*lens), arith.muli(arith.minui(*lens), _index(SKEW_RATIO)))
    copy = match_coiteration(_split_by_skew(match, fast_op, _expect_false(skewed, fast_op)).while_op)
    if isinstance(copy, Decline):   # the copy of a matched loop
        raise RuntimeError(f"strict_conflict_lane: the scalar loop's copy does not match: {copy.reason}")
    StrictConflictLaneBuilder(copy, options, counters).build()   # then the copy of the scalar loop


class StrictConflictLaneBuilder(ConflictLaneBuilder):
    """The conflict lane with the strict phase 2 (``strict_conflict_blocker`` must have said None); built before the
    scalar loop (it takes the loop's initial values), on skewed pairs only (``add_skew_lane``)."""

    # matched lanes added per step without a branch (a branch on any match measured 1.3-1.7x slower), per block:
    # about the matches a step has at the ratio 6 with 100 % overlap (16 / 6, 8 / 6), measured (docs/passes.md)
    FIXED_ADDS = {16: 3, 8: 2}

    def build(self):
        fast = super().build()
        del fast.operation.attributes[FAST_LANE_ATTR]   # tests and tools count the all-pairs lane as "the" lane
        fast.operation.attributes[STRICT_CONFLICT_ATTR] = ir.UnitAttr.get()
        return fast

    def _phase2(self, args, st):
        """The SIMD phase 2's term vectors, added to the sums one matched lane at a time, in lane order: the first
        ``FIXED_ADDS`` matched lanes without a branch (a lane past the last matched one adds -0.0, the identity),
        the rest, if any, by a loop over the remaining mask bits."""
        accs = self._phase2_simd(args, st)   # builds each sum as an ordered reduction of select(mask, term, -0.0)
        terms, adds = [], []
        for pos, red in self.m.reductions.items():
            reduction = accs[pos].owner
            masked = reduction.operands[0].owner
            terms.append(masked.operands[1])
            adds.append(red.add_op)
            reduction.operation.erase()
            masked.operation.erase()
        i32 = ir.IntegerType.get_signless(32)
        zero = arith.constant(i32, 0)
        mask_int = ir.IntegerType.get_signless(self.block)
        bits = vector.extract(vector.bitcast(_vtype(1, mask_int), st["matched"].vec()), [], [0])
        bits = arith.extui(i32, bits)
        positions = list(self.m.reductions)
        sums = [args[pos] for pos in positions]

        def add_lowest(left, sums, fixed: bool):
            """The sums plus the term of ``left``'s lowest set lane (-0.0 when ``left`` is 0, if ``fixed``), and
            ``left`` without that bit."""
            lane = arith.index_castui(ir.IndexType.get(), math.cttz(left))
            some = arith.cmpi(CMPI_NE, left, zero) if fixed else None
            new = []
            for term, add, acc in zip(terms, adds, sums):
                value = _lane_value(term, lane)
                if fixed:
                    value = arith.select(some, value, _neg_zero(value.type))
                new.append(_clone_with(add, [acc, value], [acc.type])[0])
            return arith.andi(left, arith.subi(left, arith.constant(i32, 1))), new

        for _ in range(self.FIXED_ADDS[self.block]):
            bits, sums = add_lowest(bits, sums, True)
        types = [i32] + [s.type for s in sums]
        loop = scf.WhileOp(types, [bits] + sums)
        before = loop.before.blocks.append(*types)
        with ir.InsertionPoint(before):   # no matched lane left: done
            scf.condition(arith.cmpi(CMPI_NE, before.arguments[0], zero), list(before.arguments))
        after = loop.after.blocks.append(*types)
        with ir.InsertionPoint(after):
            rest, new = add_lowest(after.arguments[0], list(after.arguments)[1:], False)
            scf.yield_([rest] + new)
        return {pos: loop.results[k + 1] for k, pos in enumerate(positions)}
