"""The builder of the Splyce pass: the branchless fast-lane ``scf.while`` put before a matched loop.

One fast-lane iteration consumes up to n coordinates of each operand, in three phases, each built in
SIMD (vector dialect) or unrolled scalar form:

1. load n coordinates of B and of C; all-pairs compare: B's coordinates against C's rotated by
   0..n-1 lanes (SIMD) or n*n scalar ``cmpi eq`` (scalar); per B lane: matched?, and the matched C value.
   A three- or four-way intersection (``a * b * c``) compares B against each other operand the same way;
   a B lane is matched when every other operand has its coordinate.
2. the guarded body, re-materialized per lane without branches: accumulators take
   ``select(matched, new, old)`` lane by lane (the scalar loop's order of additions), or an ordered
   ``vector.reduction <add>`` of ``select(mask, term, -0.0)`` (SIMD); with ``fast_math`` (SIMD) a sum is a
   loop-carried vector accumulator instead, ``select(mask, vacc + term, vacc)``, reduced once after the lane.
   Scalar per-lane loads and stores go
   through a selected *address*: the real element when the lane matched, else a one-element scratch
   buffer (alloca'd once at function entry), so unmatched lanes never touch the output. In SIMD form,
   loads and stores indexed by the coordinate (innermost, unit stride) are one masked ``vector.gather`` /
   ``vector.scatter`` under the match mask (B's coordinates in one vector are distinct: no conflicts).
3. pointer advance past the pivot ``min(last B coordinate, last C coordinate, ..)``: per operand, the
   number of lanes whose coordinate is ``<=`` the pivot, as a tree of scalar compares or a vector compare
   whose mask bits are counted (popcnt). With two operands each one counts against the *other's* last
   coordinate, the same number without computing the pivot. (A coordinate present in every operand's window
   is ``<=`` every last coordinate, so no matched lane lies past the pivot: nothing is done twice.)

The original loop then runs from the fast lane's cursors and accumulators and finishes the tails.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, memref, scf, vector

from splyce.options import Options
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.ir_utils import CMPI_EQ, CMPI_UGE, CMPI_ULE, CMPI_ULT, strides_and_offset
from splyce.passes.lane_addresses import LaneAddresses

FAST_LANE_ATTR = "splyce.fast_lane"  # unit attribute marking the fast-lane scf.while


def _cmpi(pred: int, a, b):
    return arith.cmpi(pred, a, b)


def _tree(values, combine):
    values = list(values)
    while len(values) > 1:
        paired = [combine(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]


def _index(value: int):
    return arith.constant(ir.IndexType.get(), value)


def _vtype(width: int, t: ir.Type) -> ir.VectorType:
    return ir.VectorType.get([width], t)


class Lanes:
    """n per-lane values, held as one vector or as n scalars; converts (and caches) on demand."""

    def __init__(self, width: int, vec=None, scalars=None):
        self.width, self._vec, self._scalars = width, vec, scalars

    def vec(self):
        if self._vec is None:
            t = self._scalars[0].type
            self._vec = vector.from_elements(_vtype(self.width, t), self._scalars)
        return self._vec

    def scalars(self):
        if self._scalars is None:
            self._scalars = [vector.extract(self._vec, [], [i]) for i in range(self.width)]
        return self._scalars

    def scalar(self, i: int):
        return self.scalars()[i]


def _popcount(mask, n: int):
    """The number of set lanes of a vector<n x i1>, as an index: the mask's n bits as one integer and
    ``math.ctpop`` (a mask-register move and ``popcnt`` on AVX-512, ``vmovmskps`` + ``popcnt`` on AVX2)."""
    bits_t = ir.IntegerType.get_signless(n)
    bits = vector.extract(vector.bitcast(_vtype(1, bits_t), mask), [], [0])
    return arith.index_castui(ir.IndexType.get(), math.ctpop(bits))


def _neg_zero(t: ir.Type):
    return arith.constant(t, ir.FloatAttr.get(t, -0.0))


def _reassoc():
    return ir.Attribute.parse("#arith.fastmath<reassoc>")


def _clone_with(op, operands, result_types):
    """A new op with ``op``'s name and attributes on new operands (no regions: checked by the matcher)."""
    old = op.operation.attributes
    attrs = {key: old[key] for key in old}
    new = ir.Operation.create(op.operation.name, results=result_types, operands=operands,
                              attributes=attrs)
    return list(new.results)


def _apply_chain(chain, value, width=None):
    """Re-apply the coordinate cast chain (extui/extsi/index_cast) to a raw coordinate (or vector)."""
    values = [value]
    for name, t in chain:
        rt = t if width is None else _vtype(width, t)
        new = ir.Operation.create(name, results=[rt], operands=[values[-1]])
        values.append(new.results[0])
    return values


FAST_LANE_SLOT, EPILOGUE_SLOT, MULTIWAY_SLOT = 0, 1, 3  # profile counters (2: galloping skips)


class FastLaneBuilder(LaneAddresses):
    def __init__(self, match: Coiteration, options: Options, profile_counters: ir.Value | None = None):
        """``profile_counters``: the function's memref<Nxi64> of coordinates consumed, when profiling (the
        two-finger lane counts in FAST_LANE_SLOT, a three- or four-way lane in MULTIWAY_SLOT)."""
        self.m, self.options, self.n = match, options, options.vector_width
        self.profile_counters = profile_counters
        self.counter_slot = FAST_LANE_SLOT if match.fingers == 2 else MULTIWAY_SLOT
        self.vector_acc_slots = {}  # sum's iter-arg position -> the fast lane's vector accumulator's position
        self._scratches = {}  # (element type, rank, memory space, store?) -> scratch, cast to dynamic

    # ----------------------------------------------------------------------------------------- loop
    def vector_accumulated(self) -> list[int]:
        """The sums kept in vector accumulators through the fast lane: with ``fast_math`` and phase 2 in SIMD,
        every ``acc + term`` sum. Each gets a loop-carried vector<n x T> that adds the step's matched terms
        under the match mask (one masked add per step: no scalar chain, no horizontal sum per step), reduced
        into the scalar accumulator once, after the fast lane. Strict sums keep the ordered reduction."""
        if not (self.options.fast_math and self.options.simd_mac and self.simd2_blocker() is None):
            return []
        if type(self)._phase2 is not FastLaneBuilder._phase2:   # a subclass building its own phase 2
            return []
        return sorted(self.m.reductions)

    def build(self):
        m, n = self.m, self.n
        w = m.while_op
        inits = list(w.operation.operands)
        types = [v.type for v in inits]
        summed = self.vector_accumulated()
        vec_types = [_vtype(n, m.reductions[pos].term.type) for pos in summed]
        self.vector_acc_slots = {pos: len(types) + k for k, pos in enumerate(summed)}
        with ir.InsertionPoint(w):
            c_n = _index(n)
            zeros = [vector.broadcast(vt, _neg_zero(vt.element_type)) for vt in vec_types]
            carried = self._carried_inits()
            own = len(types) + len(vec_types)   # the builder's own loop-carried values follow
            fast = scf.WhileOp(types + vec_types + [v.type for v in carried], inits + zeros + carried)
            fast.operation.attributes[FAST_LANE_ATTR] = ir.UnitAttr.get()
            before = fast.before.blocks.append(*types, *vec_types, *[v.type for v in carried])
            with ir.InsertionPoint(before):
                ok = []
                for pos, hi in zip(m.cursor_pos, m.bounds):
                    cur = before.arguments[pos]
                    inside = _cmpi(CMPI_ULT, cur, hi)
                    room = _cmpi(CMPI_UGE, arith.subi(hi, cur), c_n)
                    ok.append(arith.andi(inside, room))
                ok += self._carried_conditions(list(before.arguments)[own:])
                scf.condition(_tree(ok, arith.andi), list(before.arguments))
            after = fast.after.blocks.append(*types, *vec_types, *[v.type for v in carried])
            with ir.InsertionPoint(after):
                self._carried_now = list(after.arguments)[own:]   # a subclass's phase 2 may read them
                new_args = self._body(list(after.arguments)[:own])
                scf.yield_(new_args + self._carried_next(list(after.arguments)[own:]))
        results = list(fast.results)[:len(types)]
        with ir.InsertionPoint(w):   # between the fast lane and the scalar loop (moved with them: gallop_lane)
            for pos, slot in self.vector_acc_slots.items():
                results[pos] = vector.reduction(vec_types[slot - len(types)].element_type, vector.CombiningKind.ADD,
                                                fast.results[slot], acc=fast.results[pos], fastmath=_reassoc())
        for i, r in enumerate(results):
            w.operation.operands[i] = r
        return fast

    def _carried_inits(self) -> list:
        """Initial values of loop-carried values of a subclass's own (after the sums' vector accumulators)."""
        return []

    def _carried_conditions(self, carried: list) -> list:
        """More conditions for the next step, from the carried values."""
        return []

    def _carried_next(self, carried: list) -> list:
        """The carried values after a step (built after ``_body``)."""
        return []

    def _body(self, args):
        m = self.m
        cursors = [args[p] for p in m.cursor_pos]
        lanes = self._phase1(cursors)
        new_accs = self._phase2(args, lanes)
        advances = self._phase3(lanes)
        if self.profile_counters is not None:
            self._count(self.profile_counters, self.counter_slot, _tree(advances, arith.addi))
        out = list(args)
        for pos, value in new_accs.items():
            out[pos] = value
        for pos, cursor, advance in zip(m.cursor_pos, cursors, advances):
            out[pos] = arith.addi(cursor, advance)
        return out

    @staticmethod
    def _count(counters, slot: int, amount):
        i64 = ir.IntegerType.get_signless(64)
        idx = _index(slot)
        old = memref.load(counters, [idx])
        memref.store(arith.addi(old, arith.index_cast(i64, amount)), counters, [idx])

    # -------------------------------------------------------------------------------------- phase 1
    def _phase1(self, cursors):
        """Coordinates of every operand, B's lanes matched against each other operand's window (a B lane
        is matched when all of them have its coordinate), and the values at the lanes: B's at its cursor
        + i, another operand's at the position where its coordinate equals B's lane i."""
        m, n = self.m, self.n
        t = m.crd_type
        k = m.fingers
        state = {}
        side_memrefs = [[] for _ in range(k)]
        for ll in m.lane_loads.values():
            if ll.memref not in side_memrefs[ll.side]:
                side_memrefs[ll.side].append(ll.memref)
        values = {}
        if self.options.simd_compare:
            vt = _vtype(n, t)
            keys = [vector.load(vt, crd, [p]) for crd, p in zip(m.crd_memrefs, cursors)]
            vb = keys[0]

            def rot(v, r):
                return v if r == 0 else vector.shuffle(v, v, [(i + r) % n for i in range(n)])

            masks, matched = {}, None
            for side in range(1, k):
                masks[side] = [_cmpi(CMPI_EQ, vb, rot(keys[side], r)) for r in range(n)]
                found = _tree(masks[side], arith.ori)
                matched = found if matched is None else arith.andi(matched, found)
            for side in range(k):
                for mem in side_memrefs[side]:
                    et = ir.MemRefType(mem.type).element_type
                    vm = vector.load(_vtype(n, et), mem, [cursors[side]])
                    sel = vm
                    for r in range(1, n if side else 1):
                        sel = arith.select(masks[side][r], rot(vm, r), sel)
                    values[(mem, side)] = Lanes(n, vec=sel)
            state.update(keys=[Lanes(n, vec=v) for v in keys], matched=Lanes(n, vec=matched), values=values,
                         lasts=[vector.extract(v, [], [n - 1]) for v in keys], masks=masks)
            state["kb"] = state["keys"][0]
            return state
        at = [[p] + [arith.addi(p, _index(i)) for i in range(1, n)] for p in cursors]
        keys = [[memref.load(crd, [q]) for q in ps] for crd, ps in zip(m.crd_memrefs, at)]
        kb = keys[0]
        matched, positions = [], {side: [] for side in range(1, k)}
        for i in range(n):
            lane = None
            for side in range(1, k):
                eqs = {j: _cmpi(CMPI_EQ, kb[i], keys[side][j]) for j in range(n)}
                found = _tree([eqs[j] for j in range(n)], arith.ori)
                lane = found if lane is None else arith.andi(lane, found)
                pos = at[side][i]
                for j in range(n):
                    if j != i:
                        pos = arith.select(eqs[j], at[side][j], pos)
                positions[side].append(pos)
            matched.append(lane)
        # Values at the lanes: B at pb + i, the others at the matched positions (scalar loads into registers).
        for side in range(k):
            for mem in side_memrefs[side]:
                where = at[0] if side == 0 else positions[side]
                values[(mem, side)] = Lanes(n, scalars=[memref.load(mem, [q]) for q in where])
        state.update(keys=[Lanes(n, scalars=v) for v in keys], matched=Lanes(n, scalars=matched),
                     values=values, lasts=[v[-1] for v in keys], positions=positions)
        state["kb"] = state["keys"][0]
        return state

    def lane_position(self, st, cursors, side: int, i: int):
        """The position in operand ``side``'s list of B's lane i coordinate (where it matched)."""
        if side == 0:
            return arith.addi(cursors[0], _index(i)) if i else cursors[0]
        if "positions" in st:
            return st["positions"][side][i]
        n = self.n
        pos = arith.addi(cursors[side], _index(i)) if i else cursors[side]
        for r in range(1, n):   # lane i met the other side's lane (i + r) % n in rotation r
            hit = vector.extract(st["masks"][side][r], [], [i])
            pos = arith.select(hit, arith.addi(cursors[side], _index((i + r) % n)), pos)
        return pos

    # -------------------------------------------------------------------------------------- phase 2
    def simd2_blocker(self) -> str | None:
        """Why the guarded body cannot run in SIMD form (then phase 2 is built scalar), or None."""
        m = self.m
        for pos in m.acc_of_result.values():
            red = m.reductions.get(pos)
            if red is None:
                return "accumulator update is not acc + term"
            if not red.acc_first and not self.options.fast_math:
                return "sum written term + acc (strict order needs acc first)"
        stored = [s.operation.operands[1] for s in m.stores]
        for mem in m.invariant_load_memrefs:
            if mem in stored:
                return "body reads at a fixed index a memref it writes"
        return None

    def _phase2(self, args, st):
        if self.options.simd_mac and self.simd2_blocker() is None:
            return self._phase2_simd(args, st)
        return self._phase2_scalar(args, st)

    def _lane_coord(self, st, cache, i, level):
        key = (i, level)
        if key not in cache:
            chain = _apply_chain(self.m.cast_chain, st["kb"].scalar(i))
            for lv, v in enumerate(chain):
                cache[(i, lv)] = v
        return cache[key]

    def _phase2_scalar(self, args, st):
        m, p, n = self.m, self.options, self.n
        after = m.while_op.after.blocks[0]
        old_args = list(after.arguments)
        accs = {pos: args[pos] for pos in m.acc_of_result.values()}
        tree_accs = {}
        if p.fast_math:
            tree_accs = {pos: red for pos, red in m.reductions.items()}
        terms = {pos: [] for pos in tree_accs}
        skip = {red.add_op.operation for red in tree_accs.values()}
        coord_cache = {}
        casts = {}
        matched = st["matched"].scalars()
        for i in range(n):
            vmap = {}
            for pos, acc in accs.items():
                vmap[old_args[pos]] = acc

            def get(v):
                if v in vmap:
                    return vmap[v]
                if v in m.coord_level:
                    return self._lane_coord(st, coord_cache, i, m.coord_level[v])
                return v

            for op in m.then_ops:
                if op.operation in skip:
                    continue
                res0 = op.operation.results[0] if len(op.operation.results) else None
                if res0 is not None and res0 in m.lane_loads:
                    ll = m.lane_loads[res0]
                    vmap[res0] = st["values"][(ll.memref, ll.side)].scalar(i)
                    continue
                name = op.operation.name
                operands = [get(v) for v in op.operation.operands]
                if name == "memref.store":
                    self._store_lane(matched[i], operands[0], operands[1], operands[2:], casts)
                    continue
                if name == "memref.load":
                    addr = self._lane_address(matched[i], operands[0], operands[1:], casts, False)
                    if addr is not None:
                        vmap[res0] = memref.load(addr[0], addr[1])
                        continue
                results = _clone_with(op, operands, [r.type for r in op.operation.results])
                for r_old, r_new in zip(op.operation.results, results):
                    vmap[r_old] = r_new
            for res_index, pos in m.acc_of_result.items():
                if pos in tree_accs:
                    neg0 = _neg_zero(tree_accs[pos].term.type)
                    terms[pos].append(arith.select(matched[i], get(tree_accs[pos].term), neg0))
                else:
                    accs[pos] = arith.select(matched[i], get(m.then_yield[res_index]), accs[pos])
        fm = _reassoc()
        for pos, red in tree_accs.items():
            total = _tree(terms[pos], lambda a, b: arith.addf(a, b, fastmath=fm))
            accs[pos] = arith.addf(accs[pos], total, fastmath=fm)
        return accs

    def _phase2_simd(self, args, st):
        m, p, n = self.m, self.options, self.n
        skip = {red.add_op.operation for red in m.reductions.values()}
        vmap = {}  # old value -> ("v", vector) or ("s", scalar)
        chain_vec = None
        casts = {}
        mask = st["matched"].vec()

        def get(v):
            nonlocal chain_vec
            if v in vmap:
                return vmap[v]
            if v in m.coord_level:
                if chain_vec is None:
                    chain_vec = st.get("chain") or _apply_chain(m.cast_chain, st["kb"].vec(), n)
                return ("v", chain_vec[m.coord_level[v]])
            return ("s", v)

        def as_vec(entry):
            kind, value = entry
            return value if kind == "v" else vector.broadcast(_vtype(n, value.type), value)

        def lane_scalar(entry, i):
            kind, value = entry
            return value if kind == "s" else vector.extract(value, [], [i])

        for op in m.then_ops:
            if op.operation in skip:
                continue
            res0 = op.operation.results[0] if len(op.operation.results) else None
            if res0 is not None and res0 in m.lane_loads:
                ll = m.lane_loads[res0]
                vmap[res0] = ("v", st["values"][(ll.memref, ll.side)].vec())
                continue
            name = op.operation.name
            entries = [get(v) for v in op.operation.operands]
            if name == "memref.load":
                if all(kind == "s" for kind, _ in entries):
                    vmap[res0] = ("s", memref.load(entries[0][1], [v for _, v in entries[1:]]))
                elif self._gather_ok(entries[0][1], entries[1:]):  # masked gather at the coordinates
                    vmap[res0] = ("v", self.gather(st, entries[0][1], entries[1:], mask))
                else:  # indexed by the coordinate: one scalar load per lane (unmatched: scratch), packed
                    matched = st["matched"].scalars()
                    loads = []
                    for i in range(n):
                        mem, idx = entries[0][1], [lane_scalar(e, i) for e in entries[1:]]
                        addr = self._lane_address(matched[i], mem, idx, casts, False) or (mem, idx)
                        loads.append(memref.load(addr[0], addr[1]))
                    vmap[res0] = ("v", vector.from_elements(_vtype(n, res0.type), loads))
                continue
            if name == "memref.store" and self._gather_ok(entries[1][1], entries[2:]):
                if "stores" in st:  # the caller merges and emits the stores (the union lane)
                    st["stores"].append((entries[1][1], entries[2:], as_vec(entries[0])))
                    continue
                base, offsets, idx = self._gather_parts(entries[1][1], entries[2:])
                vector.scatter(None, base, offsets, idx, mask, as_vec(entries[0]))
                continue
            if name == "memref.store":
                matched = st["matched"].scalars()
                for i in range(n):
                    value = lane_scalar(entries[0], i)
                    mem = entries[1][1]
                    idx = [lane_scalar(e, i) for e in entries[2:]]
                    self._store_lane(matched[i], value, mem, idx, casts)
                continue
            if all(kind == "s" for kind, _ in entries):
                results = _clone_with(op, [v for _, v in entries], [r.type for r in op.operation.results])
                for r_old, r_new in zip(op.operation.results, results):
                    vmap[r_old] = ("s", r_new)
                continue
            results = _clone_with(op, [as_vec(e) for e in entries],
                                  [_vtype(n, r.type) for r in op.operation.results])
            for r_old, r_new in zip(op.operation.results, results):
                vmap[r_old] = ("v", r_new)
        accs = {}
        kind_add = vector.CombiningKind.ADD
        for pos, red in m.reductions.items():
            term = as_vec(get(red.term))
            if "terms" in st:   # the caller combines the terms (the union reduction lane)
                st["terms"][pos] = term
                continue
            et = red.term.type
            fm = _reassoc() if p.fast_math else None
            slot = self.vector_acc_slots.get(pos)
            if slot is not None:    # the vector accumulator: a masked add of the matched lanes' terms
                acc = args[slot]
                accs[slot] = arith.select(mask, arith.addf(acc, term, fastmath=fm), acc)
                continue
            identity = vector.broadcast(_vtype(n, et), _neg_zero(et))
            prod = arith.select(mask, term, identity)
            accs[pos] = vector.reduction(et, kind_add, prod, acc=args[pos], fastmath=fm)
        return accs

    @staticmethod
    def _gather_ok(mem, entries) -> bool:
        """A memref access ``mem[s.., v]`` (lane-uniform outer indices, per-lane innermost index) into a
        memref whose innermost dimension has unit stride: one masked vector.gather / vector.scatter."""
        mt = mem.type
        if not isinstance(mt, ir.MemRefType) or mt.rank != len(entries) or mt.rank < 1:
            return False
        if [k for k, _ in entries[:-1]] != ["s"] * (len(entries) - 1) or entries[-1][0] != "v":
            return False
        layout = strides_and_offset(mt)
        return layout is not None and layout[0][-1] == 1

    def gather(self, st, mem, entries, mask):
        """``mem[s.., v]`` gathered under ``mask``; with ``st["gathers"]`` (a dict), each distinct access
        is gathered once per step (the union lane's branches read the same output element). Under the mask
        ``st["unmasked"]`` (the caller's all-true mask: every lane's element may be read) the lanes are loaded
        one by one instead."""
        cache = st.get("gathers")
        key = (mem, *(v for _, v in entries))
        if cache is not None and key in cache:
            return cache[key]
        et = ir.MemRefType(mem.type).element_type
        vt = _vtype(self.n, et)
        unmasked = st.get("unmasked")
        if unmasked is not None and mask == unmasked:
            # every lane reads: n scalar loads (a gather is microcoded on AMD Zen 4; LLVM scalarizes it on AVX2)
            result = vector.from_elements(vt, [memref.load(mem, at) for at in self.lane_indices(entries)])
        else:
            base, offsets, idx = self._gather_parts(mem, entries)
            zeros = arith.constant(vt, ir.DenseElementsAttr.get_splat(
                vt, ir.FloatAttr.get(et, 0.0) if isinstance(et, ir.FloatType) else ir.IntegerAttr.get(et, 0)))
            result = vector.gather(vt, base, offsets, idx, mask, zeros)
        if cache is not None:
            cache[key] = result
        return result

    @staticmethod
    def lane_indices(entries):
        """Each lane's indices of an access ``mem[s.., v]`` (lane-uniform outer indices, per-lane innermost)."""
        outer, innermost = [v for _, v in entries[:-1]], entries[-1][1]
        width = ir.VectorType(innermost.type).shape[0]
        return [[*outer, vector.extract(innermost, [], [i])] for i in range(width)]

    @staticmethod
    def _gather_parts(mem, entries):
        return mem, [v for _, v in entries[:-1]] + [_index(0)], entries[-1][1]

    # -------------------------------------------------------------------------------------- phase 3
    def _phase3(self, st):
        m, n = self.m, self.n
        t = m.crd_type
        lasts = st["lasts"]
        idx_t = ir.IndexType.get()
        advances = []
        global_pivot = None
        if len(lasts) > 2:  # min of all lasts (k - 1 compare-selects, shared by the k counts)
            global_pivot = lasts[0]
            for last in lasts[1:]:
                global_pivot = arith.select(_cmpi(CMPI_ULT, last, global_pivot), last, global_pivot)
        for side, lanes in enumerate(st["keys"]):
            # Two fingers: each operand advances past its coordinates <= the *other* operand's last one, the
            # same count as <= the pivot min(both lasts) (the operand holding the pivot has all n coordinates
            # <= the other's last), without the pivot's compare-and-select on the loop-carried path from the
            # loaded coordinates to the next cursors.
            pivot = lasts[1 - side] if global_pivot is None else global_pivot
            if self.options.simd_advance:
                le = _cmpi(CMPI_ULE, lanes.vec(), vector.broadcast(_vtype(n, t), pivot))
                advances.append(_popcount(le, n))
            else:
                bits = [arith.index_castui(idx_t, _cmpi(CMPI_ULE, k, pivot)) for k in lanes.scalars()]
                advances.append(_tree(bits, arith.addi))
        return advances


def sum_lane_blocker(match: Coiteration, options: Options, builder: "FastLaneBuilder",
                     width: int, crd_bits: tuple[int, ...] = (32,)) -> str | None:
    """The conditions every specialised fast_math sum lane (conflict, permute) shares, or None: the chosen
    ``width``, two fingers summing without stores, coordinates of ``crd_bits`` bits, sums in vector
    accumulators."""
    if not options.fast_math or options.vector_width != width:
        return f"needs fast_math and vector_width={width}"
    if match.fingers != 2 or match.kind != "K-accumulate" or match.stores:
        return "two fingers summing without stores only"
    if not (isinstance(match.crd_type, ir.IntegerType) and ir.IntegerType(match.crd_type).width in crd_bits):
        return " / ".join(f"int{b}" for b in crd_bits) + " coordinates only"
    if not builder.vector_accumulated():
        return "the sums are not in vector accumulators"
    return None


def add_epilogue_count(match: Coiteration, counters) -> None:
    """Profile mode: the original loop adds its cursor advance to ``counters[1]`` each iteration."""
    after = match.while_op.after.blocks[0]
    with ir.InsertionPoint(match.after_yield):
        steps = [arith.subi(nxt, after.arguments[p]) for p, nxt in zip(match.cursor_pos, match.next_cursors)]
        FastLaneBuilder._count(counters, EPILOGUE_SLOT, _tree(steps, arith.addi))
