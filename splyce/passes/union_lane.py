"""The union fast lane: a branchless SIMD merge step put before the sparsifier's union ``scf.while``.

One step loads n coordinates of each operand and, against the pivot ``min(last B, last C)``:

- all-pairs compares (B against C rotated, and C against B rotated) mark the B lanes that have a partner
  in C (the "both" branch, with the partner's value picked by the rotation that matched) and the C lanes
  that have one in B;
- the B lanes ``<=`` pivot run the "both" body (matched) or the "only B" body (unmatched), the C lanes
  ``<=`` pivot without a partner run the "only C" body: each body rebuilt in SIMD form by the fast lane's
  body builder under its lane mask, its output accesses as masked gathers / scatters at the coordinates;
- both cursors advance past the pivot.

The coordinates of one step are distinct across the three masks (B's lanes are distinct, a C lane without
a partner differs from every B lane, and everything beyond the pivot waits for a later step), so each output
element is read and written once, by the same arithmetic as the scalar loop: results are bit-identical.
The original loop runs after it from the fast lane's cursors, then the sparsifier's two tail loops.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, vector

from splyce.options import Options
from splyce.passes.fast_lane import FAST_LANE_ATTR, FastLaneBuilder, Lanes, _index, _tree, _vtype
from splyce.passes.ir_utils import CMPI_EQ, CMPI_UGE, CMPI_ULE, CMPI_ULT
from splyce.passes.union_match import Union


def simd_blocker(union: Union, options: Options) -> str | None:
    """Why the union fast lane cannot be built, or None."""
    for name, branch in (("both", union.both), ("only-B", union.only_b), ("only-C", union.only_c)):
        builder = FastLaneBuilder(branch, options)
        for store in branch.stores:
            mem = store.operation.operands[1]
            idx = list(store.operation.operands[2:])
            entries = [("s", v) for v in idx[:-1]] + [("v", idx[-1])]
            if any(v in branch.coord_level for v in idx[:-1]):
                return f"{name} branch stores at a coordinate in an outer dimension"
            if not builder._gather_ok(mem, entries):
                return f"{name} branch stores to a memref without unit innermost stride"
    return None


class UnionLaneBuilder:
    def __init__(self, union: Union, options: Options, profile_counters: ir.Value | None = None):
        self.u, self.options, self.n = union, options, options.vector_width
        self.profile_counters = profile_counters  # memref<PROFILE_SLOTS x i64> when profiling

    def build(self):
        head, n = self.u.head, self.n
        w = head.while_op
        inits = list(w.operation.operands)
        types = [v.type for v in inits]
        with ir.InsertionPoint(w):
            c_n = _index(n)
            fast = scf.WhileOp(types, inits)
            fast.operation.attributes[FAST_LANE_ATTR] = ir.UnitAttr.get()
            before = fast.before.blocks.append(*types)
            with ir.InsertionPoint(before):
                ok = []
                for pos, hi in zip(head.cursor_pos, head.bounds):
                    cur = before.arguments[pos]
                    ok.append(arith.andi(arith.cmpi(CMPI_ULT, cur, hi),
                                         arith.cmpi(CMPI_UGE, arith.subi(hi, cur), c_n)))
                scf.condition(arith.andi(ok[0], ok[1]), list(before.arguments))
            after = fast.after.blocks.append(*types)
            with ir.InsertionPoint(after):
                scf.yield_(self._body(list(after.arguments)))
        for i, r in enumerate(fast.results):
            w.operation.operands[i] = r
        return fast

    def _body(self, args):
        u, n = self.u, self.n
        head = u.head
        pb, pc = (args[p] for p in head.cursor_pos)
        crd_b, crd_c = head.crd_memrefs
        t = head.crd_type
        vt = _vtype(n, t)
        vb = vector.load(vt, crd_b, [pb])
        vc = vector.load(vt, crd_c, [pc])

        def rot(v, r):
            return v if r == 0 else vector.shuffle(v, v, [(i + r) % n for i in range(n)])

        masks_b = [arith.cmpi(CMPI_EQ, vb, rot(vc, r)) for r in range(n)]  # B lane i == C lane i + r
        match_b = _tree(masks_b, arith.ori)
        match_c = _tree([arith.cmpi(CMPI_EQ, vc, rot(vb, r)) for r in range(n)], arith.ori)
        last_b = vector.extract(vb, [], [n - 1])
        last_c = vector.extract(vc, [], [n - 1])
        pivot = arith.select(arith.cmpi(CMPI_ULT, last_c, last_b), last_c, last_b)
        pivots = vector.broadcast(vt, pivot)
        active_b = arith.cmpi(CMPI_ULE, vb, pivots)
        active_c = arith.cmpi(CMPI_ULE, vc, pivots)
        true = arith.constant(_vtype(n, ir.IntegerType.get_signless(1)),
                              ir.DenseElementsAttr.get_splat(_vtype(n, ir.IntegerType.get_signless(1)),
                                                             ir.BoolAttr.get(True)))
        only_b = arith.andi(active_b, arith.xori(match_b, true))
        only_c = arith.andi(active_c, arith.xori(match_c, true))

        loaded = {}

        def side_values(branch, rotate_c: bool):
            values = {}
            for ll in branch.lane_loads.values():
                key = (ll.memref, ll.side)
                if key in values:
                    continue
                if (ll.memref, ll.side) not in loaded:
                    et = ir.MemRefType(ll.memref.type).element_type
                    loaded[key] = vector.load(_vtype(n, et), ll.memref, [pb if ll.side == 0 else pc])
                vm = loaded[key]
                if ll.side == 1 and rotate_c:
                    sel = vm
                    for r in range(1, n):
                        sel = arith.select(masks_b[r], rot(vm, r), sel)
                    vm = sel
                values[key] = Lanes(n, vec=vm)
            return values

        for branch, coords, mask, rotate_c in ((u.both, vb, match_b, True), (u.only_b, vb, only_b, False),
                                               (u.only_c, vc, only_c, False)):
            state = {"kb": Lanes(n, vec=coords), "matched": Lanes(n, vec=mask),
                     "values": side_values(branch, rotate_c)}
            FastLaneBuilder(branch, self.options, self.profile_counters)._phase2_simd(args, state)

        idx_t = ir.IndexType.get()
        wt = t if isinstance(t, ir.IntegerType) else ir.IntegerType.get_signless(64)
        advances = []
        for active in (active_b, active_c):
            ones = arith.extui(_vtype(n, wt), active)
            advances.append(arith.index_castui(idx_t, vector.reduction(wt, vector.CombiningKind.ADD, ones)))
        if self.profile_counters is not None:
            FastLaneBuilder._count(self.profile_counters, 0, arith.addi(*advances))
        out = list(args)
        out[head.cursor_pos[0]] = arith.addi(pb, advances[0])
        out[head.cursor_pos[1]] = arith.addi(pc, advances[1])
        return out
