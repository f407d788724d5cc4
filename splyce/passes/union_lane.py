"""The union fast lane: a branchless SIMD merge step put before the sparsifier's union ``scf.while``.

One step loads n coordinates of each operand and, against the pivot ``min(last B, last C)``:

- all-pairs compares (B against C rotated, and C against B rotated) mark the B lanes that have a partner
  in C (the "both" branch, with the partner's value picked by the rotation that matched) and the C lanes
  that have one in B;
- the three bodies are rebuilt in SIMD form by the fast lane's body builder and run on every lane (their
  output read once per side, lane by lane, their stores collected); B's lanes ``<=`` pivot take the
  "both" result (matched) or the "only B" one, C's lanes ``<=`` pivot without a partner the "only C" one;
- every lane stores (n scalar stores per side), C's first: every other lane writes back the value it read;
- both cursors advance past the pivot; the output elements a few coordinates ahead are prefetched.

The coordinates written with a new value in one step are distinct (B's lanes are distinct, a C lane without
a partner differs from every B lane), a lane writing back its old value changes no bits, and B's stores
come last, so each output element gets the scalar loop's arithmetic once: results are bit-identical.
The original loop runs after it from the fast lane's cursors, then the sparsifier's two tail loops.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from splyce.options import Options
from splyce.passes.coiteration_match import TRAPPING_OPS
from splyce.passes.fast_lane import FAST_LANE_ATTR, FastLaneBuilder, Lanes, _apply_chain, _index, _tree, _vtype
from splyce.passes.ir_utils import CMPI_EQ, CMPI_UGE, CMPI_ULE, CMPI_ULT
from splyce.passes.union_match import Union


PREFETCH_AHEAD = 8  # coordinates; measured at N = 1000 and 4000 (4 and 16 were slower, 12 no better)


def simd_blocker(union: Union, options: Options) -> str | None:
    """Why the union fast lane cannot be built, or None."""
    targets = set()
    for name, branch in (("both", union.both), ("only-B", union.only_b), ("only-C", union.only_c)):
        builder = FastLaneBuilder(branch, options)
        if len(branch.stores) != 1:
            return f"{name} branch stores {len(branch.stores)} times (one output element per coordinate needed)"
        if any(op.operation.name in TRAPPING_OPS for op in branch.then_ops):
            return f"{name} branch divides integers (every lane runs every body: it could trap)"
        (store,) = branch.stores
        mem = store.operation.operands[1]
        idx = list(store.operation.operands[2:])
        entries = [("s", v) for v in idx[:-1]] + [("v", idx[-1])]
        if any(v in branch.coord_level for v in idx[:-1]):
            return f"{name} branch stores at a coordinate in an outer dimension"
        if not builder._gather_ok(mem, entries):
            return f"{name} branch stores to a memref without unit innermost stride"
        targets.add((mem, *idx[:-1]))
    if len(targets) != 1:
        return "the branches store to different output rows"
    return None


def step_masks(head, n: int, pb, pc) -> dict:
    """One merge step's coordinates and lane masks: ``vb`` / ``vc`` (n coordinates of each side), ``masks_b``
    (B lane i equals C lane i + r, per rotation r), ``match_b`` / ``match_c`` (a partner on the other side),
    ``active_b`` / ``active_c`` (up to the pivot min(last B, last C)), ``only_c`` (C up to the pivot without
    a partner), ``rot`` (lane rotation) and ``true`` (the all-true mask)."""
    t = head.crd_type
    vt = _vtype(n, t)
    vb = vector.load(vt, head.crd_memrefs[0], [pb])
    vc = vector.load(vt, head.crd_memrefs[1], [pc])

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
    bools = _vtype(n, ir.IntegerType.get_signless(1))
    true = arith.constant(bools, ir.DenseElementsAttr.get_splat(bools, ir.BoolAttr.get(True)))
    only_c = arith.andi(active_c, arith.xori(match_c, true))
    return {"vb": vb, "vc": vc, "rot": rot, "masks_b": masks_b, "match_b": match_b, "match_c": match_c,
            "active_b": active_b, "active_c": active_c, "only_c": only_c, "true": true}


def build_fast_loop(head, n: int, body, prepare=None, finish=None):
    """A fast-lane ``scf.while`` put before the union loop ``head.while_op``, running while both fibers
    have n coordinates left; ``body(args)`` builds a step and returns the next values; ``prepare(inits)``
    (optional) may replace the initial values, built just before the loop, and append values carried by the
    fast lane only; ``finish(results)`` (optional, built after it) turns the fast lane's results into the
    union loop's initial values. The union loop then starts from them."""
    w = head.while_op
    inits = list(w.operation.operands)
    with ir.InsertionPoint(w):
        c_n = _index(n)
        if prepare is not None:
            inits = prepare(inits)
        types = [v.type for v in inits]
        fast = scf.WhileOp(types, inits)
        fast.operation.attributes[FAST_LANE_ATTR] = ir.UnitAttr.get()
        before = fast.before.blocks.append(*types)
        with ir.InsertionPoint(before):
            ok = []
            for pos, hi in zip(head.cursor_pos, head.bounds):
                cur = before.arguments[pos]
                ok.append(arith.andi(arith.cmpi(CMPI_ULT, cur, hi), arith.cmpi(CMPI_UGE, arith.subi(hi, cur), c_n)))
            scf.condition(arith.andi(ok[0], ok[1]), list(before.arguments))
        after = fast.after.blocks.append(*types)
        with ir.InsertionPoint(after):
            scf.yield_(body(list(after.arguments)))
    results = list(fast.results)
    if finish is not None:
        with ir.InsertionPoint(w):
            results = finish(results)
    for i in range(len(w.operation.operands)):
        w.operation.operands[i] = results[i]
    return fast


def lane_values(branch, rotate_c: bool, loaded: dict, st: dict, pb, pc, n: int) -> dict:
    """The operands' values a branch reads at the cursors, as ``Lanes`` keyed (memref, side): n values
    loaded at each cursor (once per step: ``loaded`` caches them); with ``rotate_c``, C's moved to their
    B partner's lane by the rotation that matched (the "both" branch)."""
    values = {}
    for ll in branch.lane_loads.values():
        key = (ll.memref, ll.side)
        if key in values:
            continue
        if key not in loaded:
            et = ir.MemRefType(ll.memref.type).element_type
            loaded[key] = vector.load(_vtype(n, et), ll.memref, [pb if ll.side == 0 else pc])
        vm = loaded[key]
        if ll.side == 1 and rotate_c:
            sel = vm
            for r in range(1, n):
                sel = arith.select(st["masks_b"][r], st["rot"](vm, r), sel)
            vm = sel
        values[key] = Lanes(n, vec=vm)
    return values


class UnionLaneBuilder:
    def __init__(self, union: Union, options: Options, profile_counters: ir.Value | None = None):
        self.u, self.options, self.n = union, options, options.vector_width
        self.profile_counters = profile_counters  # memref<PROFILE_SLOTS x i64> when profiling

    def build(self):
        return build_fast_loop(self.u.head, self.n, self._body)

    def _prefetch(self, pb, pc, mem, outer):
        """Prefetch the output elements of the coordinates PREFETCH_AHEAD past each cursor (clamped to the
        fiber's last n): the output is touched at random places of a long row, and the step's gathers wait on
        each other's misses otherwise (measured: 0.8x of the plain sparsifier without, 1.1x with)."""
        head, n = self.u.head, self.n
        vt = _vtype(n, head.crd_type)
        for cur, hi, crd in ((pb, head.bounds[0], head.crd_memrefs[0]), (pc, head.bounds[1], head.crd_memrefs[1])):
            ahead = arith.addi(cur, _index(PREFETCH_AHEAD))
            last = arith.subi(hi, _index(n))
            start = arith.select(arith.cmpi(CMPI_ULT, ahead, last), ahead, last)
            future = _apply_chain(head.cast_chain, vector.load(vt, crd, [start]), n)[-1]
            for i in range(n):
                memref.prefetch(mem, [*outer, vector.extract(future, [], [i])], True, 3, True)

    def _body(self, args):
        u, n = self.u, self.n
        head = u.head
        pb, pc = (args[p] for p in head.cursor_pos)
        sm = step_masks(head, n, pb, pc)
        vb, vc, true = sm["vb"], sm["vc"], sm["true"]
        match_b, active_b, active_c, only_c = sm["match_b"], sm["active_b"], sm["active_c"], sm["only_c"]
        t = head.crd_type

        loaded = {}

        # Each body runs on every lane (unmasked gathers of the output, no stores); its stored vector is
        # collected and the lanes are merged below, so a step issues one unmasked scatter per side.
        all_lanes = Lanes(n, vec=true)
        gathers = {}
        chains = {id(vb): _apply_chain(head.cast_chain, vb, n), id(vc): _apply_chain(head.cast_chain, vc, n)}
        stored = []
        for branch, coords, rotate_c in ((u.both, vb, True), (u.only_b, vb, False), (u.only_c, vc, False)):
            st = {"kb": Lanes(n, vec=coords), "matched": all_lanes,
                  "values": lane_values(branch, rotate_c, loaded, sm, pb, pc, n), "gathers": gathers, "chain": chains[id(coords)], "stores": [], "unmasked": true}
            FastLaneBuilder(branch, self.options, self.profile_counters)._phase2_simd(args, st)
            (store,) = st["stores"]
            stored.append(store)
        (mem, at_b, both_v), (_, _, only_b_v), (_, at_c, only_c_v) = stored
        # Every lane stores, C's side first: a lane that produces no output element this step (C's lanes with
        # a partner in B, every lane past the pivot) writes back the value it read, so the new values of B's
        # lanes land last and every other element keeps its bits. No branch per lane (AVX2 has no scatter: a
        # masked one becomes a branch per lane). The old values are read and the new ones written by n scalar
        # loads and stores per side, not a gather and a scatter: those are microcoded on AMD Zen 4 (N = 4000 /
        # 1000 at 5 %: 0.85-0.90x the plain sparsifier with them, 0.91-0.99x with scalar accesses; on AVX2 LLVM
        # scalarizes them the same way). (On AVX-512 a masked scatter, which writes no lane past the pivot,
        # measured 1.92 -> 2.06x at N = 1000 and no gain at N = 4000 on Zen 5, output in DRAM: not kept.)
        lanes = FastLaneBuilder(u.both, self.options)
        cached = {"gathers": gathers, "unmasked": true}
        old_b = lanes.gather(cached, mem, at_b, true)
        old_c = lanes.gather(cached, mem, at_c, true)
        new_c = arith.select(only_c, only_c_v, old_c)
        new_b = arith.select(active_b, arith.select(match_b, both_v, only_b_v), old_b)
        for at, value in ((at_c, new_c), (at_b, new_b)):
            for i, indices in enumerate(FastLaneBuilder.lane_indices(at)):
                memref.store(vector.extract(value, [], [i]), mem, indices)
        self._prefetch(pb, pc, mem, [v for _, v in at_b[:-1]])

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


def add_tail_count(union: Union, counters) -> None:
    """Profile mode: the coordinates left to the sparsifier's two tail loops (each side's rest after the
    union loop) go to ``counters[1]``, so fast lane + epilogue add up to every stored coordinate."""
    w = union.head.while_op
    ops = list(w.operation.block.operations)
    after = ops[[op.operation for op in ops].index(w.operation) + 1]
    with ir.InsertionPoint(after):
        rest = [arith.subi(hi, w.results[p]) for p, hi in zip(union.head.cursor_pos, union.head.bounds)]
        FastLaneBuilder._count(counters, 1, arith.addi(*rest))
