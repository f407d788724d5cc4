"""The fast lane for intersections into a sparse output (``a * b * c`` with its default sparse result).

The sparsifier's guarded body then calls its insertion function (append the coordinate and value to the
output's buffers, reallocating them when full), and the loop carries the output's buffers. A call cannot run
speculatively for unmatched lanes, so phase 2 is a branch instead of the branchless body: when any of the
n lanes matched (rare: a three-way intersection of 5 % operands matches ~0.25 % of B's coordinates), the
original body runs once per matched lane, in lane order, with the lane's positions in each operand and its
coordinate in place of the scalar loop's cursors and minimum. Phases 1 and 3 (all-pairs compare, pointer
advance past the pivot) are the fast lane's. The calls, their arguments and their order are the scalar
loop's, so results are bit-identical.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, vector

from splyce.passes.fast_lane import FastLaneBuilder, _apply_chain, _clone_with, _tree


class InsertLaneBuilder(FastLaneBuilder):
    def _phase2(self, args, st):
        m, n = self.m, self.n
        after = m.while_op.after.blocks[0]
        old_args = list(after.arguments)
        carried = sorted(m.acc_of_result.values())
        types = [args[p].type for p in carried]
        cursors = [args[p] for p in m.cursor_pos]
        matched = st["matched"]
        if self.options.simd_compare:
            any_matched = vector.reduction(ir.IntegerType.get_signless(1), vector.CombiningKind.OR, matched.vec())
        else:
            any_matched = _tree(matched.scalars(), arith.ori)
        kb = st["kb"].scalars()                 # extracted here, outside the branches that use them
        flags = matched.scalars()
        current = {p: args[p] for p in carried}
        outer = scf.IfOp(any_matched, types, has_else=True)
        with ir.InsertionPoint(outer.then_block):
            for i in range(n):
                lane = scf.IfOp(flags[i], types, has_else=True)
                with ir.InsertionPoint(lane.then_block):
                    vmap = {old_args[p]: current[p] for p in carried}
                    for side, p in enumerate(m.cursor_pos):
                        vmap[old_args[p]] = self.lane_position(st, cursors, side, i)
                    for p, arg in enumerate(old_args):
                        vmap.setdefault(arg, args[p])
                    chain = _apply_chain(m.cast_chain, kb[i])
                    for value, level in m.coord_level.items():
                        vmap[value] = chain[level]
                    for op in m.then_ops:
                        results = _clone_with(op, [vmap.get(v, v) for v in op.operation.operands],
                                              [r.type for r in op.operation.results])
                        vmap.update(zip(op.operation.results, results))
                    yields = [None] * len(carried)
                    for res_index, p in m.acc_of_result.items():
                        yields[carried.index(p)] = vmap.get(m.then_yield[res_index], m.then_yield[res_index])
                    scf.yield_(yields)
                with ir.InsertionPoint(lane.else_block):
                    scf.yield_([current[p] for p in carried])
                current = dict(zip(carried, lane.results))
            scf.yield_([current[p] for p in carried])
        with ir.InsertionPoint(outer.else_block):
            scf.yield_([args[p] for p in carried])
        return dict(zip(carried, outer.results))
