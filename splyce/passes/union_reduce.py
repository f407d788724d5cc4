"""The union fast lane for a scalar reduction: ``abs(a - b).max()``, ``min``, an integer ``sum`` or count.

The sparsifier's union loop for a reduction carries one scalar besides the cursors, and each of its three
branches updates it with one combining op (``acc = maximumf(acc, term)``) of a term computed from the
values at the cursors; a fourth branch keeps it (no coordinate: unreachable in the loop). One fast-lane step
merges n coordinates of each side as the dense-output union lane does (all-pairs compares, pivot
``min(last B, last C)``, the three bodies rebuilt in SIMD by the fast lane's body builder, every body on
every lane) and combines the step's terms into two loop-carried vector accumulators, one per side: B's lanes
``<=`` pivot take the "both" term (matched) or the "only B" one, C's lanes ``<=`` pivot without a partner the
"only C" one; every other lane keeps its old value (a select, no identity needed). After the lane the two
vectors are combined and reduced horizontally into the scalar, and the original loop continues from the
lane's cursors.

Exactness: each term is computed by the scalar loop's ops on the same values, and every stored coordinate's
term is combined exactly once. Integer max / min (signed, unsigned) and add / mul / and / or / xor (wrapping)
are associative and commutative bit for bit: any order gives the scalar loop's result. ``maximumf`` /
``minimumf`` are IEEE 754-2019 maximum / minimum upstream (NaN propagates, -0.0 < +0.0), but this toolchain's
``arith-expand`` (MLIR 22, pipeline.TO_LLVM) lowers ``maximumf(a, b)`` to ``select(a ugt b, a, b)`` with a NaN
``b`` taken: a tie (-0.0 against +0.0) keeps ``b``, so the scalar loop's ``maximumf(acc, term)`` returns the
*last* term equal to the maximum, and which zero comes out depends on the order. The lane reproduces it: the
vector form is the same op (expanded the same way), each vector lane also carries the coordinate (+ 1; 0 for
the initial value) of its last replacement, and after the lane the result is the bits of the lane holding
the maximum with the largest such coordinate (a NaN anywhere gives NaN; its payload is unspecified).
``maxnumf`` / ``minnumf`` (IEEE 754-2008 maxNum: a zero's sign is unspecified) take the lane with
``fast_math`` only. A float sum rounds in the order of its additions: with ``fast_math`` it goes to the vector
accumulators (``reassoc``); strict, the fast lane carries the scalar sum itself and adds each step's terms to
it one at a time in coordinate order (``_ordered_sum``), exactly the scalar loop's additions.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, vector

from splyce.options import Options
from splyce.passes.coiteration_match import (
    TRAPPING_OPS, Coiteration, Decline, LaneLoad, Reduction, _name, _unit_stride_1d)
from splyce.passes.fast_lane import FastLaneBuilder, Lanes, _apply_chain, _reassoc, _vtype
from splyce.passes.ir_utils import CMPI_EQ, CMPI_ULE, CMPI_ULT, defined_outside
from splyce.passes.union_lane import build_fast_loop, lane_values, step_masks
from splyce.passes.union_match import match_union, union_branches

_K = vector.CombiningKind
# combining op -> (vector.reduction kind, idempotent (x op x == x), exact in any order)
COMBINE = {
    "arith.maximumf": (_K.MAXIMUMF, True, True), "arith.minimumf": (_K.MINIMUMF, True, True),
    "arith.maxnumf": (_K.MAXNUMF, True, False), "arith.minnumf": (_K.MINNUMF, True, False),
    "arith.maxsi": (_K.MAXSI, True, True), "arith.minsi": (_K.MINSI, True, True),
    "arith.maxui": (_K.MAXUI, True, True), "arith.minui": (_K.MINUI, True, True),
    "arith.andi": (_K.AND, True, True), "arith.ori": (_K.OR, True, True),
    "arith.addi": (_K.ADD, False, True), "arith.muli": (_K.MUL, False, True), "arith.xori": (_K.XOR, False, True),
    "arith.addf": (_K.ADD, False, False),
}
_IDENTITY = {"arith.addi": 0, "arith.xori": 0, "arith.muli": 1, "arith.addf": -0.0}


def _int_attr(t: ir.Type, value: int):
    return ir.IntegerAttr.get(t, value)


@dataclass
class UnionReduce:
    head: Coiteration
    acc_pos: int                # the scalar's position among the loop's values
    combine: str                # the combining op's name (the same in every branch)
    both: Coiteration           # each branch's term computation, its combining op as its one Reduction
    only_b: Coiteration
    only_c: Coiteration


def _branch(head: Coiteration, block, acc, cursor_args, k, acc_pos: int) -> Coiteration | Decline:
    """A branch ``term ops ; acc' = combine(acc, term) ; yield acc'`` as a Coiteration for the body builder."""
    ops = list(block.operations)
    if len(ops) < 2 or _name(ops[-1]) != "scf.yield" or len(ops[-1].operation.operands) != 1:
        return Decline("a branch does not yield the one carried value")
    last = ops[-2]
    if _name(last) not in COMBINE or list(ops[-1].operation.operands) != [last.operation.results[0]]:
        return Decline(f"a branch updates the carried value with {_name(last)}")
    lhs, rhs = last.operation.operands
    if (lhs == acc) == (rhs == acc):
        return Decline("a branch's update does not combine the carried value with a term")
    term = rhs if lhs == acc else lhs
    local, lane_loads = set(), {}
    for op in ops[:-2]:
        name, operands = _name(op), list(op.operation.operands)
        if len(op.operation.regions) or len(op.operation.results) != 1:
            return Decline(f"a branch has {name}")
        for v in operands:
            if v == acc:
                return Decline("a branch reads the carried value besides its update")
            if v in local or v == k or (defined_outside(v, head.while_op) and v not in cursor_args):
                continue
            if name == "memref.load" and v in cursor_args and operands == [operands[0], v]:
                continue
            return Decline(f"{name} in a branch uses a loop value the lane does not model")
        if name == "memref.load":
            if len(operands) == 2 and operands[1] in cursor_args:
                if not defined_outside(operands[0], head.while_op) or \
                        not _unit_stride_1d(ir.MemRefType(operands[0].type)):
                    return Decline("a branch reads values that are not one loop-invariant unit-stride array")
                lane_loads[op.operation.results[0]] = LaneLoad(operands[0], cursor_args.index(operands[1]))
            elif any(v == k for v in operands[1:]):
                return Decline("a branch reads a memref at the coordinate")
        elif not name.startswith(("arith.", "math.")) or name in TRAPPING_OPS:
            return Decline(f"a branch computes its term with {name}")
        local.add(op.operation.results[0])
    return Coiteration(
        while_op=head.while_op, cursor_pos=head.cursor_pos, bounds=head.bounds, crd_memrefs=head.crd_memrefs,
        crd_type=head.crd_type, cast_chain=head.cast_chain, coord_level={k: head.coord_level[k]}, if_op=None,
        then_ops=ops[:-2], then_yield=[], acc_of_result={}, lane_loads=lane_loads,
        reductions={acc_pos: Reduction(acc_pos, last, term, lhs == acc)}, stores=[], element_type=acc.type,
        kind="union-reduce", after_yield=head.after_yield, next_cursors=head.next_cursors)


def match_union_reduce(while_op) -> UnionReduce | Decline:
    """Match ``while_op`` against the sparsifier's union loop reducing into one carried scalar."""
    parsed = match_union(while_op, carried=True)
    if isinstance(parsed, Decline):
        return parsed
    head, final, k, cursor_args = parsed
    after = while_op.after.blocks[0]
    carried = [i for i in range(len(after.arguments)) if i not in head.cursor_pos]
    if len(carried) != 1:
        return Decline(f"the loop carries {len(carried)} values besides the cursors (one scalar reduced only)")
    (acc_pos,) = carried
    acc = after.arguments[acc_pos]
    if not isinstance(acc.type, (ir.F32Type, ir.F64Type, ir.IntegerType)):
        return Decline(f"the carried value is of type {acc.type}")
    if_op = head.if_op
    if len(if_op.operation.results) != 1 or \
            head.after_yield.operation.operands[acc_pos] != if_op.operation.results[0]:
        return Decline("the carried value is not the union's branches' result")
    blocks = union_branches(if_op, final, k, [acc])
    if isinstance(blocks, Decline):
        return blocks
    branches = []
    for what, block in blocks:
        branch = _branch(head, block, acc, cursor_args, k, acc_pos)
        if isinstance(branch, Decline):
            return Decline(f"{what} branch: {branch.reason}")
        branches.append(branch)
    combines = {_name(b.reductions[acc_pos].add_op) for b in branches}
    if len(combines) != 1:
        return Decline(f"the branches combine with different ops ({', '.join(sorted(combines))})")
    if any(ll.side != 0 for ll in branches[1].lane_loads.values()) or \
            any(ll.side != 1 for ll in branches[2].lane_loads.values()):
        return Decline("an only-B / only-C branch reads the other operand")
    # carried only through the branches: no other op of the loop reads it (the union matcher accepts none)
    head.element_type = acc.type
    return UnionReduce(head, acc_pos, combines.pop(), *branches)


ORDERED_TIES = ("arith.maximumf", "arith.minimumf")   # exact with the last replacement's coordinate tracked


def reduce_blocker(union: UnionReduce, options: Options) -> str | None:
    """Why the lane cannot be built (an order-dependent combine in strict mode), or None."""
    if options.fast_math:
        return None
    if not COMBINE[union.combine][2] and union.combine != "arith.addf":   # strict sums: added in order
        return f"{union.combine} needs fast_math (maxNum's result for -0.0 and +0.0 depends on the order)"
    if union.combine in ORDERED_TIES and not union.both.reductions[union.acc_pos].acc_first:
        return f"{union.combine}(term, acc): a tie keeps the older value (not modelled)"
    return None


def describe(union: UnionReduce, options: Options) -> str:
    kind = union.combine.removeprefix("arith.")
    ties = " and their last replacements' coordinates" if union.combine in ORDERED_TIES and not options.fast_math \
        else ""
    text = f"union fast lane: {kind} reduction {union.head.element_type} {union.head.crd_type}-crd n={options.vector_width}"
    if union.combine == "arith.addf" and not options.fast_math:
        return text + ", strict: each step's terms ranked by coordinate and added in that order"
    return text + f", B's and C's vector accumulators{ties}, reduced after the lane"


class UnionReduceBuilder:
    def __init__(self, union: UnionReduce, options: Options, profile_counters: ir.Value | None = None):
        self.u, self.options, self.n = union, options, options.vector_width
        self.profile_counters = profile_counters
        self.slots = ()          # the fast lane's positions of B's and C's vector accumulators
        # strict maximumf / minimumf: B's and C's coordinates (+ 1) of each lane's last replacement too
        self.ties = union.combine in ORDERED_TIES and not options.fast_math
        # a strict float sum: the scalar itself carried, each step's terms added to it in coordinate order
        self.ordered = union.combine == "arith.addf" and not options.fast_math
        self._buffer = None

    def build(self):
        return build_fast_loop(self.u.head, self.n, self._body, self._prepare, self._finish)

    def _combine(self, a, b):
        """The branches' combining op on vectors: a float op keeps its fast-math flags (a sum gets reassoc),
        an integer op drops its overflow flags (reordered, a wrapping sum may overflow where the loop's did not)."""
        attrs = {}
        if self.u.combine == "arith.addf":
            attrs["fastmath"] = _reassoc()
        elif "fastmath" in self.u.both.reductions[self.u.acc_pos].add_op.operation.attributes:
            attrs["fastmath"] = self.u.both.reductions[self.u.acc_pos].add_op.operation.attributes["fastmath"]
        return ir.Operation.create(self.u.combine, results=[a.type], operands=[a, b],
                                   attributes=attrs).results[0]

    def _prepare(self, inits):
        u, n = self.u, self.n
        if self.ordered:
            return inits
        et = u.head.element_type
        vt = _vtype(n, et)
        if COMBINE[u.combine][1]:       # idempotent: start from the scalar itself, reduced without it
            start = vector.broadcast(vt, inits[u.acc_pos])
        else:
            value = _IDENTITY[u.combine]
            attr = ir.FloatAttr.get(et, value) if isinstance(et, ir.FloatType) else ir.IntegerAttr.get(et, value)
            start = vector.broadcast(vt, arith.constant(et, attr))
        self.slots = (len(inits), len(inits) + 1)
        if not self.ties:
            return list(inits) + [start, start]
        ct = _vtype(n, u.head.crd_type)
        zeros = arith.constant(ct, ir.DenseElementsAttr.get_splat(ct, _int_attr(u.head.crd_type, 0)))
        return list(inits) + [start, start, zeros, zeros]

    def _finish(self, results):
        u = self.u
        if self.ordered:
            return results
        kind, idempotent, _ = COMBINE[u.combine]
        both = self._combine(results[self.slots[0]], results[self.slots[1]])
        fm = _reassoc() if u.combine == "arith.addf" else None
        acc = None if idempotent else results[u.acc_pos]
        out = list(results[:self.slots[0]])
        out[u.acc_pos] = vector.reduction(u.head.element_type, kind, both, acc=acc, fastmath=fm)
        if self.ties:
            out[u.acc_pos] = self._last_extremum(out[u.acc_pos], results[self.slots[0]:])
        return out

    def _last_extremum(self, extremum, lanes):
        """The scalar loop's result from the lanes (B's and C's values, then their coordinates + 1): the
        bits of the lane equal to ``extremum`` (its value; a zero's sign aside) with the largest coordinate,
        i.e. the last term equal to it in the loop's order; ``extremum`` itself when it is NaN."""
        n, et, ct = self.n, self.u.head.element_type, self.u.head.crd_type
        bits_t = ir.IntegerType.get_signless(ir.FloatType(et).width)
        vbits, vcrd = _vtype(n, bits_t), _vtype(n, ct)
        values, crds = lanes[:2], lanes[2:]
        target = vector.broadcast(_vtype(n, et), extremum)
        equal = [arith.cmpf(arith.CmpFPredicate.OEQ, v, target) for v in values]
        zero_crd = arith.constant(vcrd, ir.DenseElementsAttr.get_splat(vcrd, _int_attr(ct, 0)))
        keys = [arith.select(e, c, zero_crd) for e, c in zip(equal, crds)]
        last = vector.reduction(ct, vector.CombiningKind.MAXUI, arith.maxui(*keys))
        lasts = vector.broadcast(vcrd, last)
        zero_bits = arith.constant(vbits, ir.DenseElementsAttr.get_splat(vbits, _int_attr(bits_t, 0)))
        picked = [arith.select(arith.andi(e, arith.cmpi(CMPI_EQ, c, lasts)), vector.bitcast(vbits, v), zero_bits)
                  for e, c, v in zip(equal, crds, values)]   # one lane, or lanes all holding the initial value
        value = arith.bitcast(et, vector.reduction(bits_t, vector.CombiningKind.OR, arith.ori(*picked)))
        return arith.select(arith.cmpf(arith.CmpFPredicate.UNO, extremum, extremum), extremum, value)

    def _body(self, args):
        u, n = self.u, self.n
        head = u.head
        pb, pc = (args[p] for p in head.cursor_pos)
        sm = step_masks(head, n, pb, pc)
        vb, vc, true = sm["vb"], sm["vc"], sm["true"]
        loaded, terms = {}, []
        for branch, coords, rotate_c in ((u.both, vb, True), (u.only_b, vb, False), (u.only_c, vc, False)):
            st = {"kb": Lanes(n, vec=coords), "matched": Lanes(n, vec=true), "terms": {},
                  "values": lane_values(branch, rotate_c, loaded, sm, pb, pc, n),
                  "chain": _apply_chain(head.cast_chain, coords, n)}
            FastLaneBuilder(branch, self.options)._phase2_simd(args, st)
            terms.append(st["terms"][u.acc_pos])
        both_t, only_b_t, only_c_t = terms
        acc_first = u.both.reductions[u.acc_pos].acc_first
        out = list(args)
        if self.ordered:
            out[u.acc_pos] = self._ordered_sum(args[u.acc_pos], sm, arith.select(sm["match_b"], both_t, only_b_t),
                                               only_c_t)
        sides = ((0, vb, sm["active_b"], arith.select(sm["match_b"], both_t, only_b_t)),
                 (1, vc, sm["only_c"], only_c_t))
        for side, coords, active, term in sides if not self.ordered else ():
            slot = self.slots[side]
            old = args[slot]
            new = self._combine(old, term) if acc_first else self._combine(term, old)
            out[slot] = arith.select(active, new, old)
            if self.ties:   # the term replaces the lane's value (the scalar op's choice on a tie: the term)
                pred = arith.CmpFPredicate.OGE if u.combine == "arith.maximumf" else arith.CmpFPredicate.OLE
                replaced = arith.andi(active, arith.cmpf(pred, term, old))
                one = arith.constant(coords.type, ir.DenseElementsAttr.get_splat(
                    coords.type, _int_attr(u.head.crd_type, 1)))
                pos = self.slots[side] + 2
                out[pos] = arith.select(replaced, arith.addi(coords, one), args[pos])
        idx_t = ir.IndexType.get()
        t = head.crd_type
        wt = t if isinstance(t, ir.IntegerType) else ir.IntegerType.get_signless(64)
        advances = []
        for active in (sm["active_b"], sm["active_c"]):
            ones = arith.extui(_vtype(n, wt), active)
            advances.append(arith.index_castui(idx_t, vector.reduction(wt, vector.CombiningKind.ADD, ones)))
        if self.profile_counters is not None:
            FastLaneBuilder._count(self.profile_counters, 0, arith.addi(*advances))
        out[head.cursor_pos[0]] = arith.addi(pb, advances[0])
        out[head.cursor_pos[1]] = arith.addi(pc, advances[1])
        return out

    def _scratch(self):
        """A 2n-element buffer for a step's terms in coordinate order, allocated once at function entry."""
        if self._buffer is None:
            func = self.u.head.while_op.operation
            while func.name != "func.func":
                func = func.parent
            with ir.InsertionPoint.at_block_begin(func.regions[0].blocks[0]):
                self._buffer = memref.alloca(ir.MemRefType.get([2 * self.n], self.u.head.element_type), [], [])
        return self._buffer

    def _ordered_sum(self, acc, sm, term_b, term_c):
        """``acc`` plus the step's terms one at a time in coordinate order, as the scalar loop adds them: B's
        lanes and C's go to their places in the step's merge (B lane i: i + the C lanes below it; C lane j: j
        + the B lanes at or below it; a permutation of 0 .. 2n-1), each inactive lane's term -0.0 (the identity:
        ``x + -0.0`` is ``x``, bit for bit), through a stack buffer (n scalar stores per side), and the 2n
        places are loaded and added in order (scalar loads; one 2n-wide load and an ordered
        ``vector.reduction`` measured the same)."""
        n, et, t = self.n, self.u.head.element_type, self.u.head.crd_type
        vt, vet = _vtype(n, t), _vtype(n, et)
        neg0 = arith.constant(vet, ir.DenseElementsAttr.get_splat(vet, ir.FloatAttr.get(et, -0.0)))
        term_b = arith.select(sm["active_b"], term_b, neg0)
        term_c = arith.select(sm["only_c"], term_c, neg0)

        def splat(value):
            return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, _int_attr(t, value)))

        one, zero = splat(1), splat(0)
        iota = arith.constant(vt, ir.DenseElementsAttr.get([_int_attr(t, i) for i in range(n)], type=vt))
        vb, vc, rot = sm["vb"], sm["vc"], sm["rot"]
        place_b, place_c = iota, iota
        for r in range(n):
            place_b = arith.addi(place_b, arith.select(arith.cmpi(CMPI_ULT, rot(vc, r), vb), one, zero))
            place_c = arith.addi(place_c, arith.select(arith.cmpi(CMPI_ULE, rot(vb, r), vc), one, zero))
        buf = self._scratch()
        idx_t = ir.IndexType.get()
        for places, terms in ((place_b, term_b), (place_c, term_c)):
            for i in range(n):
                at = vector.extract(places, [], [i])
                if not isinstance(t, ir.IndexType):
                    at = arith.index_castui(idx_t, at)
                memref.store(vector.extract(terms, [], [i]), buf, [at])
        for k in range(2 * n):
            acc = arith.addf(acc, memref.load(buf, [arith.constant(idx_t, k)]))
        return acc
