"""The matcher of the Splyce pass: recognize a k-finger intersection ``scf.while`` by its structure.

The sparsifier (stage 1) emits, for an index that is compressed in two operands and innermost, a loop of
this shape (docs/toolchain.md)::

    scf.while (%pb = .., %pc = .., %acc.. = ..) {
      cmpi ult %pb, %hiB ; cmpi ult %pc, %hiC ; andi ; scf.condition(..) %pb, %pc, %acc..
    } do {
      load crdB[%pb] (extui/extsi/index_cast)* ; load crdC[%pc] (casts)*
      cmpi ult kc, kb ; select -> k ; cmpi eq kb, k ; cmpi eq kc, k ; andi -> both
      scf.if both { loads at the cursors, loop-invariant values, arith; stores or yields } else { yield acc.. }
      select(eqB, pb + 1, pb) ; select(eqC, pc + 1, pc) ; scf.yield
    }

An index compressed in three (or four) operands of a product (``a * b * c``, ``einsum("ij,ij,ij->i")``)
gives the same loop with one more finger: k bound checks and'ed, k coordinate loads, the minimum as a chain
of k - 1 compare-and-selects, the match as the and of k ``eq`` tests, k select-based advances. It is
matched the same way (``Coiteration.fingers`` = k) and gets the same fast lane.

Into a sparse output, the guarded body calls the sparsifier's insertion function and the loop carries the
output's buffers: matched as kind ``INSERT_KIND`` (``_match_insert``), built by insert_lane.py.

``match_coiteration`` returns a ``Coiteration`` describing the parts the builder needs, or a ``Decline``
saying why the loop is not that shape. Nothing is matched by SSA name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from splyce.passes.ir_utils import CMPI_EQ, CMPI_ULT, const_int, defined_outside, defining_op, strides_and_offset

CAST_OPS = ("arith.extui", "arith.extsi", "arith.index_cast", "arith.index_castui")
# Ops the fast lane may execute speculatively (for unmatched lanes too): pure and non-trapping.
TRAPPING_OPS = ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi",
                "arith.ceildivui", "arith.floordivsi")
SPECULATABLE_DIALECTS = ("arith.", "math.")


@dataclass(frozen=True)
class Decline:
    reason: str


@dataclass
class LaneLoad:
    """A ``memref.load M[cursor]`` in the guarded body: the value of one operand at the matched pair."""
    memref: ir.Value
    side: int  # which cursor, in bound-check order: 0 = B (the first), 1 = C, 2 = D ..


@dataclass
class Reduction:
    """An accumulator whose guarded update is ``addf(acc, e)`` (or ``addf(e, acc)``), acc used only there."""
    position: int  # iter-arg position
    add_op: ir.Operation
    term: ir.Value  # e
    acc_first: bool


@dataclass
class Coiteration:
    while_op: ir.Operation
    cursor_pos: tuple[int, ...]  # iter-arg positions of the cursors (B, C, ..), one per finger
    bounds: tuple[ir.Value, ...]  # hiB, hiC, .. (loop-invariant)
    crd_memrefs: tuple[ir.Value, ...]
    crd_type: ir.Type  # raw coordinate element type (i32, i64 or index)
    cast_chain: tuple[tuple[str, ir.Type], ...]  # casts from the raw coordinate to the index compared
    coord_level: dict  # after-block value -> level in the cast chain (0 = raw); both sides and the min
    if_op: ir.Operation
    then_ops: list  # ops of the then-block, without its yield
    then_yield: list  # then-yield operands
    acc_of_result: dict  # if-result index -> iter-arg position
    lane_loads: dict  # then-block load result -> LaneLoad
    reductions: dict  # iter-arg position -> Reduction (accumulators in reduction form)
    stores: list  # then-block memref.store ops
    element_type: ir.Type | None
    kind: str
    invariant_load_memrefs: list = field(default_factory=list)
    coord_load_memrefs: list = field(default_factory=list)
    after_yield: ir.Operation | None = None
    next_cursors: tuple = ()

    @property
    def fingers(self) -> int:
        """How many coordinate lists the loop intersects (2 for the paper's two-finger loop)."""
        return len(self.cursor_pos)


def _name(op) -> str:
    return op.operation.name


def _is_block_arg(value: ir.Value, block: ir.Block, index: int | None = None) -> bool:
    if not isinstance(value.owner, ir.Block) or value.owner != block:
        return False
    return index is None or ir.BlockArgument(value).arg_number == index


def _predicate(op) -> int:
    return ir.IntegerAttr(op.operation.attributes["predicate"]).value



def _unit_stride_1d(memref_type: ir.MemRefType) -> bool:
    if memref_type.rank != 1:
        return False
    layout = strides_and_offset(memref_type)
    return layout is not None and layout[0] == [1]


MAX_FINGERS = 4  # einsum takes up to 4 operands: at most a four-way intersection
_COUNT = {2: "two", 3: "three", 4: "four"}


def shape_name(fingers: int) -> str:
    """How the decisions name a ``fingers``-way intersection."""
    return "two-finger intersection" if fingers == 2 else f"{_COUNT.get(fingers, fingers)}-way intersection"


def _and_leaves(value, block) -> list | None:
    """The leaves of the tree of ``arith.andi`` in ``block`` computing ``value`` (None if it is none)."""
    op = defining_op(value)
    if op is None or op.name != "arith.andi" or op.parent != block.owner:
        return None
    leaves = []
    for v in op.operands:
        inner = defining_op(v)
        if inner is not None and inner.name == "arith.andi":
            sub = _and_leaves(v, block)
            if sub is None:
                return None
            leaves += sub
        else:
            leaves.append(v)
    return leaves


def _match_before(while_op) -> tuple | Decline:
    """(cursor positions, bounds) of a loop whose before-region is ``c0 and c1 (and c2 ..)``, each
    ``cursor ult bound``: two to MAX_FINGERS coordinate lists walked together."""
    before = while_op.before.blocks[0]
    ops = list(before.operations)
    names = [_name(op) for op in ops]
    if "arith.ori" in names:
        return Decline("union (disjunctive) coiteration: before-region combines conditions with ori")
    compares = [op for op in ops if _name(op) == "arith.cmpi"]
    k = len(compares)
    if k < 2:
        return Decline(f"not a two-finger intersection: before-region has {k} conditions")
    if k > MAX_FINGERS:
        return Decline(f"not an intersection of at most {MAX_FINGERS} operands: before-region has {k} conditions")
    shape = shape_name(k)
    expected = ["arith.cmpi", "arith.cmpi", "arith.andi"] + ["arith.cmpi", "arith.andi"] * (k - 2) + ["scf.condition"]
    if names != expected:
        return Decline(f"not a {shape}: before-region is not `{' and '.join(['ult'] * k)}`")
    cond = ops[-1]
    forwarded = list(cond.operation.operands)[1:]
    if len(forwarded) != len(before.arguments) or any(
            not _is_block_arg(v, before, i) for i, v in enumerate(forwarded)):
        return Decline("before-region does not forward its arguments unchanged")
    leaves = _and_leaves(cond.operation.operands[0], before)
    checks = [c.operation.results[0] for c in compares]
    if leaves is None or len(leaves) != k or any(sum(1 for v in leaves if v == c) != 1 for c in checks):
        return Decline(f"not a {shape}: condition is not the and of the {_COUNT[k]} bound checks")
    cursors, bounds = [], []
    for cmp in compares:
        lhs, rhs = cmp.operation.operands
        if _predicate(cmp) != CMPI_ULT or not _is_block_arg(lhs, before):
            return Decline(f"not a {shape}: bound check is not `cursor ult bound`")
        if not defined_outside(rhs, while_op):
            return Decline("bound of a cursor is not loop-invariant")
        cursors.append(ir.BlockArgument(lhs).arg_number)
        bounds.append(rhs)
    if len(set(cursors)) != k:
        which = "both" if k == 2 else "two"
        return Decline(f"not a {shape}: {which} bound checks test the same cursor")
    for pos in cursors:
        if not isinstance(before.arguments[pos].type, ir.IndexType):
            return Decline("cursor is not of index type")
    return tuple(cursors), tuple(bounds)


def side_of(value: ir.Value, values) -> int | None:
    """The index of ``value`` among ``values`` (None entries skipped), or None."""
    for i, v in enumerate(values):
        if v is not None and v == value:
            return i
    return None


def _min_step(operands, finals, partial, used) -> set | None:
    """The coordinate sides a ``cmpi ult`` / ``select`` pair adds to the running minimum: the first step
    compares two coordinates, each next one the running minimum and a coordinate not yet in it."""
    sides = [side_of(v, finals) for v in operands]
    if partial is None:
        if len(operands) == 2 and None not in sides and sides[0] != sides[1]:
            return set(sides)
        return None
    if len(operands) == 2 and partial in operands:
        other = [s for v, s in zip(operands, sides) if v != partial]
        if len(other) == 1 and other[0] is not None and other[0] not in used:
            return {other[0]}
    return None


def match_coiteration(while_op) -> Coiteration | Decline:
    """Match ``while_op`` against the k-finger intersection shape (k = 2 .. MAX_FINGERS)."""
    head = _match_before(while_op)
    if isinstance(head, Decline):
        return head
    cursor_pos, bounds = head
    k = len(cursor_pos)
    after = while_op.after.blocks[0]
    cursor_args = [after.arguments[p] for p in cursor_pos]

    # Classify the after-block ops by role, in order. The minimum of the k coordinates is a chain of
    # k - 1 compare-and-selects (the first over two coordinates, each next over the running minimum and
    # one more coordinate); the match is an and-tree of the k ``coordinate == min`` tests.
    role = {}  # value -> (kind, side/level)
    chains = tuple([] for _ in range(k))  # per side: list of (op name, result type)
    crd_memrefs = [None] * k
    level_of = {}  # value -> (side, level)
    partial_min, min_sides, min_value = None, set(), None
    partial_mins = []  # the running minima (each equals the coordinate on a match)
    eq_values = [None] * k
    both_value = None
    if_op = None
    next_values = [None] * k
    yield_op = None

    chains_final = [None] * k
    for op in after.operations:
        name = _name(op)
        operands = list(op.operation.operands)
        results = list(op.operation.results)
        if name == "memref.load" and len(operands) == 2 and side_of(operands[1], cursor_args) is not None:
            side = side_of(operands[1], cursor_args)
            if crd_memrefs[side] is not None:
                return Decline("after-region loads two coordinates for one cursor")
            mtype = ir.MemRefType(operands[0].type)
            et = mtype.element_type
            if not (isinstance(et, ir.IntegerType) or isinstance(et, ir.IndexType)):
                return Decline(f"coordinate element type {et} unsupported")
            if not _unit_stride_1d(mtype):
                return Decline("coordinate array is not a unit-stride 1-D memref")
            if not defined_outside(operands[0], while_op):
                return Decline("coordinate array is not loop-invariant")
            crd_memrefs[side] = operands[0]
            level_of[results[0]] = (side, 0)
            chains_final[side] = results[0]
        elif name in CAST_OPS and side_of(operands[0], chains_final) is not None:
            side, level = level_of[operands[0]]
            chains[side].append((name, results[0].type))
            level_of[results[0]] = (side, level + 1)
            chains_final[side] = results[0]
        elif name == "arith.cmpi" and _predicate(op) == CMPI_ULT and min_value is None and \
                all(c is not None for c in chains_final) and _min_step(operands, chains_final, partial_min,
                                                                      min_sides) is not None:
            role[results[0]] = ("lt", tuple(operands))
        elif name == "arith.select" and operands[0] in role and role[operands[0]][0] == "lt" \
                and tuple(operands[1:]) == role[operands[0]][1]:
            min_sides |= _min_step(operands[1:], chains_final, partial_min, min_sides)
            partial_min = results[0]
            partial_mins.append(partial_min)
            if len(min_sides) == k:
                min_value = partial_min
        elif name == "arith.cmpi" and _predicate(op) == CMPI_EQ and min_value is not None and \
                min_value in operands and any(side_of(v, chains_final) is not None for v in operands):
            side = next(side_of(v, chains_final) for v in operands if side_of(v, chains_final) is not None)
            role[results[0]] = ("eq", frozenset([side]))
            if eq_values[side] is None:
                eq_values[side] = results[0]
        elif name == "arith.andi" and all(v in role and role[v][0] == "eq" for v in operands) and \
                not (role[operands[0]][1] & role[operands[1]][1]):
            sides = role[operands[0]][1] | role[operands[1]][1]
            role[results[0]] = ("eq", sides)   # an and of matches: every side in ``sides`` is at the min
            if len(sides) == k:
                both_value = results[0]
        elif name == "scf.if":
            if if_op is not None:
                return Decline("after-region has two scf.if")
            if both_value is None or operands[0] != both_value:
                return Decline("scf.if is not guarded by the coordinate match")
            if_op = op
        elif name == "arith.addi" and side_of(operands[0], cursor_args) is not None and \
                const_int(operands[1]) == 1:
            role[results[0]] = ("inc", side_of(operands[0], cursor_args))
        elif name == "arith.select" and operands[0] in role and role[operands[0]][0] == "eq" and \
                len(role[operands[0]][1]) == 1 and operands[1] in role and \
                role[operands[1]] == ("inc", next(iter(role[operands[0]][1]))) and \
                operands[2] == cursor_args[next(iter(role[operands[0]][1]))]:
            next_values[next(iter(role[operands[0]][1]))] = results[0]
        elif name == "scf.yield":
            yield_op = op
        else:
            return Decline(f"after-region has unexpected op {name}")

    if any(c is None for c in crd_memrefs):
        return Decline("after-region does not load a coordinate at each cursor")
    if if_op is None:
        return Decline("no guarded scf.if on the coordinate match")
    if any(v is None for v in next_values):
        return Decline("cursor advance is not select(eq, cursor + 1, cursor)")
    types = [ir.MemRefType(c.type).element_type for c in crd_memrefs]
    for side in range(1, k):
        if types[side] != types[0] or \
                [(n, str(t)) for n, t in chains[side]] != [(n, str(t)) for n, t in chains[0]]:
            return Decline(f"coordinate types differ ({types[0]} vs {types[side]})")
    t_b = types[0]
    if not isinstance(chains_final[0].type, ir.IndexType):
        return Decline("coordinates are not compared as index")

    # The yield: cursor positions get the advanced cursors, the others are unchanged or if-results.
    yielded = list(yield_op.operation.operands)   # as many as the loop arguments (the verifier checks)
    acc_of_result = {}
    for pos, value in enumerate(yielded):
        if pos in cursor_pos:
            if value != next_values[cursor_pos.index(pos)]:
                return Decline("cursor advance is not select(eq, cursor + 1, cursor)")
            continue
        if _is_block_arg(value, after, pos):
            continue
        if isinstance(value.owner, ir.Block) or value.owner != if_op.operation:
            return Decline("loop-carried value is not produced by the guarded scf.if")
        acc_of_result[ir.OpResult(value).result_number] = pos
    if len(if_op.operation.results) != len(acc_of_result):
        return Decline("scf.if result is not carried by the loop")
    # (No other op of the after-region can use an if-result: the classifier above accepts none that could.)

    # Coordinate values usable in the body: both chains and the min (all equal on a match).
    coord_level = {}
    for value, (side, level) in level_of.items():
        coord_level[value] = level
    for value in partial_mins:
        coord_level[value] = len(chains[0])

    regions = if_op.operation.regions
    for op in regions[0].blocks[0].operations:
        if len(op.operation.regions):
            return Decline(f"not innermost: guarded body contains {_name(op)}")
    if len(regions[1].blocks):
        else_ops = list(regions[1].blocks[0].operations)
        if len(else_ops) > 1:
            return Decline("union (disjunctive) coiteration: the else-region handles unmatched coordinates")
        # Only its yield: it must give back the accumulators unchanged.
        for i, value in enumerate(else_ops[0].operation.operands):
            if not _is_block_arg(value, after, acc_of_result[i]):
                return Decline("else-region of the guarded scf.if does not keep the accumulator")

    then_block = regions[0].blocks[0]
    common = dict(while_op=while_op, cursor_pos=cursor_pos, bounds=bounds, crd_memrefs=tuple(crd_memrefs),
                  crd_type=t_b, cast_chain=tuple(chains[0]), coord_level=coord_level, if_op=if_op,
                  acc_of_result=acc_of_result, after_yield=yield_op, next_cursors=tuple(next_values))
    if any(_name(op) == "func.call" for op in then_block.operations):
        return _match_insert(after, then_block, common)
    result = _match_then(while_op, after, then_block, cursor_args, coord_level, acc_of_result)
    if isinstance(result, Decline):
        return result
    then_ops, then_yield, lane_loads, stores, element_type, inv_mems, crd_mems = result

    reductions = {}
    acc_positions = set(acc_of_result.values())
    for res_index, pos in acc_of_result.items():
        acc_arg = after.arguments[pos]
        value = then_yield[res_index]
        op = defining_op(value)
        if op is None or _name(op) != "arith.addf" or len(list(value.uses)) != 1:
            continue
        # acc is read only by this add (and kept by the else-region's yield).
        uses = [u.owner for u in acc_arg.uses if u.owner.operation.name != "scf.yield"
                or u.owner.operation.parent != if_op.operation]
        if len(uses) != 1 or uses[0].operation != op.operation:
            continue
        lhs, rhs = op.operation.operands
        if lhs == acc_arg and rhs != acc_arg:
            reductions[pos] = Reduction(pos, op, rhs, True)
        elif rhs == acc_arg and lhs != acc_arg:
            reductions[pos] = Reduction(pos, op, lhs, False)
    kind = []
    if acc_positions:
        kind.append("K-accumulate")
    if stores:
        kind.append("store")
    if not kind:
        return Decline("guarded body has no effect (no accumulator, no store)")
    return Coiteration(
        then_ops=then_ops, then_yield=then_yield, lane_loads=lane_loads, reductions=reductions, stores=stores,
        element_type=element_type, kind="+".join(kind), invariant_load_memrefs=inv_mems,
        coord_load_memrefs=crd_mems, **common)


INSERT_KIND = "sparse-output insert"


def _match_insert(after, then_block, common) -> Coiteration | Decline:
    """A guarded body that calls a function: the sparsifier's insertion into a sparse output (the output's
    buffers are loop-carried and may be reallocated by the call). Calls are not speculatable, so the fast
    lane runs this body as it is, once per matched lane, under a branch (``INSERT_KIND``); what it may
    read from the loop: the cursors (each lane's positions), the coordinate (each lane's) and the carried
    values."""
    loop_args = set(after.arguments)   # the cursors (a lane's positions) and the carried values
    local = set()
    ops = list(then_block.operations)
    element_type = None
    for op in ops:
        for v in op.operation.operands:
            if v in local or v in loop_args or v in common["coord_level"]:
                continue
            if not defined_outside(v, common["while_op"]):
                return Decline(f"{_name(op)} in the guarded body uses a loop value the fast lane does not model")
        if _name(op) == "memref.load" and _float_ok(op.operation.results[0].type):
            element_type = op.operation.results[0].type
        local.update(op.operation.results)
    if not common["acc_of_result"]:
        return Decline("guarded body calls a function but carries nothing (not a sparse-output insertion)")
    return Coiteration(then_ops=ops[:-1], then_yield=list(ops[-1].operation.operands), lane_loads={},
                       reductions={}, stores=[], element_type=element_type, kind=INSERT_KIND, **common)


def _float_ok(t: ir.Type) -> bool:
    return isinstance(t, ir.F32Type) or isinstance(t, ir.F64Type)


def _match_then(while_op, after, then_block, cursor_args, coord_level, acc_of_result):
    """Check the guarded body: loads at the cursors, loop-invariant values, pure arith, stores."""
    acc_args = {after.arguments[p] for p in acc_of_result.values()}
    local = set()
    then_ops, lane_loads, stores = [], {}, []
    inv_mems, crd_mems = [], []
    element_type = None
    for t in [after.arguments[p].type for p in acc_of_result.values()]:
        if not _float_ok(t):
            return Decline(f"element type {t} unsupported")
        element_type = t

    def check_operand(v, what):
        if v in local or v in acc_args or v in coord_level:
            return None
        if any(v == c for c in cursor_args):
            return Decline(f"cursor used outside value loads ({what})")
        if defined_outside(v, while_op):
            return None
        return Decline(f"{what} uses a loop value the fast lane does not model")

    ops = list(then_block.operations)
    for op in ops[:-1]:
        name = _name(op)
        operands = list(op.operation.operands)   # (ops with regions were declined by the caller)
        if name == "memref.load":
            mem, idx = operands[0], operands[1:]
            if not defined_outside(mem, while_op):
                return Decline("body reads a memref defined in the loop")
            cursor_hits = [i for i, v in enumerate(idx) if any(v == c for c in cursor_args)]
            if cursor_hits:
                mtype = ir.MemRefType(mem.type)
                if len(idx) != 1:
                    return Decline("body reads a multi-dimensional memref at a cursor")
                if not _unit_stride_1d(mtype):
                    return Decline("body reads a non-unit-stride memref at a cursor")
                if not _float_ok(mtype.element_type):
                    return Decline(f"element type {mtype.element_type} unsupported")
                side = side_of(idx[0], cursor_args)
                lane_loads[op.operation.results[0]] = LaneLoad(mem, side)
                element_type = mtype.element_type
            else:
                for v in idx:
                    if v in coord_level:
                        continue
                    if not defined_outside(v, while_op):
                        return Decline("body reads a non-cursor-indexed memref")
                if any(v in coord_level for v in idx):
                    crd_mems.append(mem)
                else:
                    inv_mems.append(mem)
        elif name == "memref.store":
            value, mem, idx = operands[0], operands[1], operands[2:]
            if not defined_outside(mem, while_op):
                return Decline("body writes a memref defined in the loop")
            for v in idx:
                if v in coord_level:
                    continue
                if not defined_outside(v, while_op):
                    return Decline("body writes at an index computed in the loop")
            if not any(v in coord_level for v in idx):
                return Decline("body writes at a loop-invariant index")
            bad = check_operand(value, "store")
            if bad:
                return bad
            if not _float_ok(value.type):
                return Decline(f"element type {value.type} unsupported")
            element_type = value.type
            stores.append(op)
        elif name in TRAPPING_OPS:
            return Decline(f"body op {name} may trap when executed speculatively")
        elif name.startswith(SPECULATABLE_DIALECTS):
            for v in operands:
                bad = check_operand(v, name)
                if bad:
                    return bad
            for r in op.operation.results:
                t = r.type
                if not (_float_ok(t) or isinstance(t, ir.IntegerType) or isinstance(t, ir.IndexType)):
                    return Decline(f"element type {t} unsupported")
        else:
            return Decline(f"guarded body has unsupported op {name}")
        for r in op.operation.results:
            local.add(r)
        then_ops.append(op)
    then_yield = list(ops[-1].operation.operands)
    for v in then_yield:
        bad = check_operand(v, "yield")
        if bad:
            return bad
    if element_type is None:
        return Decline("guarded body loads no floating-point value")
    return then_ops, then_yield, lane_loads, stores, element_type, inv_mems, crd_mems
