"""The union fast lane for a sparse output (CSR + CSR -> CSR: sparse add / subtract / maximum).

The sparsifier's union loop for a sparse output carries the output's positions, coordinates, values and
sizes (its storage specifier) besides the cursors, and each of its three branches computes the value and
calls the sparsifier's insertion ``_insert_dense_compressed_*(positions, coordinates, values, sizes, i, k,
v)``, which appends ``(k, v)`` to row ``i`` (growing the buffers by doubling). Coordinates arrive in
increasing order within a row, so an insertion is: set ``positions[i]`` on the row's first entry, append
the coordinate and the value, set ``positions[i + 1]`` to the new size.

One fast-lane step merges n coordinates of each side as the dense-output union lane does (all-pairs
compares, pivot ``min(last B, last C)``), computes each lane's value by the branch's arithmetic, and appends
the step's entries in one go: each lane's place in the merged order is its rank (B lane i: i plus the C
lanes without a partner below it; C lane j: the B lanes below it plus the C lanes without a partner before
it), so every entry is one scalar store at ``size + rank`` (lanes without an entry store to a scratch
element; n scalar stores per side and buffer, not a scatter), after one capacity check per buffer for 2n more
entries. The same entries reach the same
places with the same values as the scalar loop's insertions: the output is bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlir import ir
from mlir.dialects import arith, llvm, memref, scf, vector

from splyce.options import Options
from splyce.passes.coiteration_match import TRAPPING_OPS, Coiteration, Decline, _name, _unit_stride_1d
from splyce.passes.fast_lane import FastLaneBuilder, _apply_chain, _clone_with, _index, _vtype
from splyce.passes.ir_utils import CMPI_UGE, CMPI_ULT, defined_outside
from splyce.passes.union_lane import build_fast_loop, step_masks
from splyce.passes.union_match import match_union, union_branches

INSERT_PREFIX = "_insert_dense_compressed_"
SIZES_TYPE = "!llvm.struct<(array<2 x i64>, array<3 x i64>)>"  # (dim sizes, [positions, coordinates, values])
CRD_SIZE, VAL_SIZE = [1, 1], [1, 2]


@dataclass
class InsertBranch:
    ops: list                  # the value's computation: loads at a cursor and pure arithmetic, in order
    lane_loads: dict           # load result -> (values memref, side)
    value: ir.Value            # the inserted value


@dataclass
class UnionInsert:
    head: Coiteration
    carried: tuple             # loop positions of (positions, coordinates, values, sizes)
    row: ir.Value              # the row index given to the insertion
    both: InsertBranch
    only_b: InsertBranch
    only_c: InsertBranch


def _branch(block, while_op, cursor_args, carried_args, k) -> tuple | Decline:
    """(InsertBranch, callee, row) of a branch that computes a value and inserts it at ``k``."""
    ops = list(block.operations)
    if len(ops) < 2 or _name(ops[-1]) != "scf.yield" or _name(ops[-2]) != "func.call":
        return Decline("a branch does not end with the insertion")
    call = ops[-2]
    if list(ops[-1].operation.operands) != list(call.operation.results):
        return Decline("a branch yields something else than the insertion's results")
    callee = ir.FlatSymbolRefAttr(call.operation.attributes["callee"]).value
    args = list(call.operation.operands)
    if not callee.startswith(INSERT_PREFIX) or len(args) != 7 or args[:4] != carried_args or args[5] != k:
        return Decline(f"a branch calls {callee}, not the insertion of the loop's output at the coordinate")
    row = args[4]
    if not defined_outside(row, while_op):
        return Decline("the inserted row is not loop-invariant")
    lane_loads, mine = {}, set()
    for op in ops[:-2]:
        name, operands = _name(op), list(op.operation.operands)
        if name == "memref.load" and len(operands) == 2 and operands[1] in cursor_args and \
                defined_outside(operands[0], while_op) and _unit_stride_1d(ir.MemRefType(operands[0].type)):
            lane_loads[op.operation.results[0]] = (operands[0], cursor_args.index(operands[1]))
        elif not name.startswith(("arith.", "math.")) or name in TRAPPING_OPS or len(op.operation.regions) or \
                len(op.operation.results) != 1 or \
                any(v not in mine and not defined_outside(v, while_op) for v in operands):
            return Decline(f"a branch computes its value with {name}")
        mine.add(op.operation.results[0])
    value = args[6]
    if value not in mine and not defined_outside(value, while_op):
        return Decline("the inserted value is not computed in the branch")
    return InsertBranch(ops[:-2], lane_loads, value), callee, row


def match_union_insert(while_op) -> UnionInsert | Decline:
    """Match ``while_op`` against the sparsifier's union loop inserting into a CSR-like sparse output."""
    parsed = match_union(while_op, carried=True)
    if isinstance(parsed, Decline):
        return parsed
    head, final, k, cursor_args = parsed
    after = while_op.after.blocks[0]
    carried = tuple(i for i in range(len(after.arguments)) if i not in head.cursor_pos)
    if len(carried) != 4 or str(after.arguments[carried[3]].type) != SIZES_TYPE:
        return Decline("the loop carries something else than one sparse matrix output")
    if_op = head.if_op
    yielded = list(head.after_yield.operation.operands)
    if len(if_op.operation.results) != 4 or [yielded[i] for i in carried] != list(if_op.operation.results):
        return Decline("the union's branches do not produce the carried output")
    carried_args = [after.arguments[i] for i in carried]
    blocks = union_branches(if_op, final, k, carried_args)
    if isinstance(blocks, Decline):
        return blocks
    branches, callees, rows = [], set(), set()
    for what, block in blocks:
        parsed = _branch(block, while_op, cursor_args, carried_args, k)
        if isinstance(parsed, Decline):
            return Decline(f"{what} branch: {parsed.reason}")
        branches.append(parsed[0])
        callees.add(parsed[1])
        rows.add(parsed[2])
    if len(callees) != 1 or len(rows) != 1:
        return Decline("the branches insert with different functions or into different rows")
    if any(side != 0 for _, side in branches[1].lane_loads.values()) or \
            any(side != 1 for _, side in branches[2].lane_loads.values()):
        return Decline("an only-B / only-C branch reads the other operand")
    head.element_type = ir.MemRefType(after.arguments[carried[2]].type).element_type
    return UnionInsert(head, carried, rows.pop(), *branches)


class UnionInsertBuilder:
    def __init__(self, union: UnionInsert, options: Options, profile_counters: ir.Value | None = None):
        self.u, self.options, self.n = union, options, options.vector_width
        self.profile_counters = profile_counters

    def build(self):
        return build_fast_loop(self.u.head, self.n, self._body, self._reserve)

    def _values(self, branch: InsertBranch, loaded, st):
        """The branch's value on every lane: its ops rebuilt on vectors (loads at a cursor are the loaded
        vectors; C's in the "both" branch rotated to its B partner)."""
        n = self.n
        vmap = {}

        def get(v):
            if v in vmap:
                return vmap[v]
            return vector.broadcast(_vtype(n, v.type), v)

        for op in branch.ops:
            res = op.operation.results[0]
            if res in branch.lane_loads:
                mem, side = branch.lane_loads[res]
                vmap[res] = loaded(mem, side)
                continue
            (vmap[res],) = _clone_with(op, [get(v) for v in op.operation.operands], [_vtype(n, res.type)])
        return get(branch.value)

    def _body(self, args):
        u, n = self.u, self.n
        head = u.head
        pb, pc = (args[p] for p in head.cursor_pos)
        st = step_masks(head, n, pb, pc)
        idx_t = ir.IndexType.get()
        i64 = ir.IntegerType.get_signless(64)
        sizes_at = u.carried[3]
        positions, crds, vals, sizes = (args[p] for p in u.carried)
        crd_size = arith.index_cast(idx_t, llvm.extractvalue(i64, sizes, CRD_SIZE))
        val_size = arith.index_cast(idx_t, llvm.extractvalue(i64, sizes, VAL_SIZE))
        # the row's first entry sets positions[i] (the insertion's test: positions[i] < positions[i + 1])
        pt = ir.MemRefType(positions.type).element_type
        row = u.row
        row_next = arith.addi(row, _index(1))
        start = memref.load(positions, [row])
        first = arith.cmpi(CMPI_UGE, start, memref.load(positions, [row_next]))
        memref.store(arith.select(first, arith.index_cast(pt, crd_size), start), positions, [row])

        # Both sides' next n coordinates equal lane by lane (operands sharing their structure, A + A.T of a
        # symmetric A): n "both" entries, stored contiguously; a well-predicted branch either way.
        same = vector.reduction(ir.IntegerType.get_signless(1), vector.CombiningKind.AND, st["masks_b"][0])
        step = scf.IfOp(same, [idx_t, idx_t, idx_t], has_else=True)
        with ir.InsertionPoint(step.then_block):
            c_n = _index(n)
            value = self._values(u.both, self._loader({}, pb, pc, st, rotate=False), st)
            ct = ir.MemRefType(crds.type).element_type
            vector.store(arith.index_cast(_vtype(n, ct), _apply_chain(head.cast_chain, st["vb"], n)[-1]),
                         crds, [crd_size])
            vector.store(value, vals, [val_size])
            scf.yield_([c_n, c_n, c_n])
        with ir.InsertionPoint(step.else_block):
            scf.yield_(list(self._merge(st, pb, pc, crds, vals, crd_size, val_size)))
        adv_b, adv_c, entries = step.results

        new_crd_size = arith.addi(crd_size, entries)
        memref.store(arith.index_cast(pt, new_crd_size), positions, [row_next])
        sizes = llvm.insertvalue(sizes, arith.index_cast(i64, new_crd_size), CRD_SIZE)
        sizes = llvm.insertvalue(sizes, arith.index_cast(i64, arith.addi(val_size, entries)), VAL_SIZE)
        if self.profile_counters is not None:
            FastLaneBuilder._count(self.profile_counters, 0, arith.addi(adv_b, adv_c))
        out = list(args)
        out[head.cursor_pos[0]] = arith.addi(pb, adv_b)
        out[head.cursor_pos[1]] = arith.addi(pc, adv_c)
        out[sizes_at] = sizes
        return out

    def _loader(self, cache, pb, pc, st, rotate: bool):
        """A lane-load callback: the n values of a side at its cursor (loaded once per region); C's, with
        ``rotate``, moved to their B partner's lane."""
        n = self.n

        def load(mem, side):
            key = (mem, side)
            if key not in cache:
                et = ir.MemRefType(mem.type).element_type
                cache[key] = vector.load(_vtype(n, et), mem, [pb if side == 0 else pc])
            vm = cache[key]
            if side == 1 and rotate:
                sel = vm
                for r in range(1, n):
                    sel = arith.select(st["masks_b"][r], st["rot"](vm, r), sel)
                vm = sel
            return vm
        return load

    def _merge(self, st, pb, pc, crds, vals, crd_size, val_size):
        """The general step: each lane's value and place among the step's entries, stored; returns (B's
        advance, C's advance, the number of entries)."""
        u, n, head = self.u, self.n, self.u.head
        vb, vc = st["vb"], st["vc"]
        active_b, only_c, match_b = st["active_b"], st["only_c"], st["match_b"]
        cache = {}
        value_b = arith.select(match_b, self._values(u.both, self._loader(cache, pb, pc, st, True), st),
                               self._values(u.only_b, self._loader(cache, pb, pc, st, False), st))
        value_c = self._values(u.only_c, self._loader(cache, pb, pc, st, False), st)

        i32 = ir.IntegerType.get_signless(32)
        vi = _vtype(n, i32)

        def count(terms):
            total = None
            for t in terms:
                t = arith.extui(vi, t)
                total = t if total is None else arith.addi(total, t)
            return total

        rot = st["rot"]
        iota = arith.constant(vi, ir.DenseElementsAttr.get(np.arange(n, dtype=np.int32), type=vi))
        rank_b = arith.addi(iota, count([arith.andi(arith.cmpi(CMPI_ULT, rot(vc, r), vb), rot(only_c, r))
                                         for r in range(n)]))
        rank_c = arith.addi(count([arith.andi(arith.cmpi(CMPI_ULT, rot(vb, r), vc), rot(active_b, r))
                                   for r in range(n)]),
                            count([arith.andi(arith.cmpi(CMPI_ULT, rot(vc, r), vc), rot(only_c, r))
                                   for r in range(1, n)]))
        idx_t = ir.IndexType.get()
        wt = head.crd_type if isinstance(head.crd_type, ir.IntegerType) else ir.IntegerType.get_signless(64)

        def popcount(mask):
            return arith.index_castui(idx_t, vector.reduction(wt, vector.CombiningKind.ADD,
                                                                arith.extui(_vtype(n, wt), mask)))

        adv_b, adv_c = popcount(active_b), popcount(st["active_c"])
        entries = arith.addi(adv_b, popcount(only_c))
        # Every lane stores (no branch per lane); a lane without an entry stores to the
        # last of the 2n places made room for, past the step's entries (at most 2n - 1 of them then): a
        # place beyond the size, overwritten by later entries, never part of the result.
        spare = arith.constant(vi, ir.DenseElementsAttr.get_splat(vi, ir.IntegerAttr.get(i32, 2 * n - 1)))
        ct = ir.MemRefType(crds.type).element_type
        vidx = _vtype(n, idx_t)
        for coords, mask, value, rank in ((vb, active_b, value_b, rank_b), (vc, only_c, value_c, rank_c)):
            keys = arith.index_cast(_vtype(n, ct), _apply_chain(head.cast_chain, coords, n)[-1])
            at = arith.index_castui(vidx, arith.select(mask, rank, spare))
            # Lane by lane, in lane order, not a vector.scatter: on AVX-512 LLVM emits vpscatter, microcoded on
            # Zen 4 (4 per step: the merge ran at 1.9-2.05x the plain sparsifier with them, 2.7-3.5x with these
            # stores, N = 4000 at 5 %); on AVX2 LLVM scalarizes the scatter into these very stores.
            for lane in range(n):
                place = vector.extract(at, [], [lane])
                memref.store(vector.extract(keys, [], [lane]), crds, [arith.addi(crd_size, place)])
                memref.store(vector.extract(value, [], [lane]), vals, [arith.addi(val_size, place)])
        return adv_b, adv_c, entries

    def _reserve(self, inits):
        """The loop's initial values with the coordinate and value buffers grown, before the loop, to hold
        every coordinate of both fibers past the cursors (the union's entries, and each step's 2n places,
        fit): the loop itself never reallocates (a call in it would make LLVM spill the step's vectors)."""
        head, (_, crd_at, val_at, sizes_at) = self.u.head, self.u.carried
        out = list(inits)
        rest = [arith.subi(hi, inits[p]) for p, hi in zip(head.cursor_pos, head.bounds)]
        room = arith.addi(*rest)
        # the output has at most nnz(B) + nnz(C) entries: grown once to that, not doubled ~log2(nnz) times
        bound = arith.addi(memref.dim(head.crd_memrefs[0], _index(0)), memref.dim(head.crd_memrefs[1], _index(0)))
        i64, idx_t = ir.IntegerType.get_signless(64), ir.IndexType.get()
        for at, field in ((crd_at, CRD_SIZE), (val_at, VAL_SIZE)):
            size = arith.index_cast(idx_t, llvm.extractvalue(i64, inits[sizes_at], field))
            out[at] = self._grow(inits[at], arith.addi(size, room), bound)
        return out

    @staticmethod
    def _grow(buf, need, bound):
        """``buf`` reallocated to max(2 x its size, ``need``, ``bound``) when smaller than ``need`` (the
        capacity is never visible in the result: the buffers are returned cut to their sizes)."""
        size = memref.dim(buf, _index(0))
        grow = scf.IfOp(arith.cmpi(CMPI_ULT, size, need), [buf.type], has_else=True)
        with ir.InsertionPoint(grow.then_block):
            new = arith.muli(size, _index(2))
            for at_least in (need, bound):
                new = arith.select(arith.cmpi(CMPI_ULT, new, at_least), at_least, new)
            scf.yield_([memref.realloc(buf.type, buf, dynamic_result_size=new)])
        with ir.InsertionPoint(grow.else_block):
            scf.yield_([buf])
        return grow.results[0]
