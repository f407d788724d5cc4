"""The Splyce pass: vectorize the sparsifier's intersection loops (two-finger, and the three- and four-way
loops of products of three or four operands) with a dual path.

Runs on the stage-1 module (scf + memref + arith, see ``pipeline.SPARSIFY``). For each ``scf.while`` that
``coiteration_match`` recognizes, ``fast_lane`` puts a branchless fast-lane loop before it; the original
loop is kept as the scalar epilogue and starts from the fast lane's cursors and accumulators. Every
``scf.while`` gets a ``LoopDecision`` saying what was built, or why the loop was left untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import memref

from splyce.passes.broadcast_lane import BroadcastLaneBuilder, broadcast_blocker
from splyce.passes.conflict_lane import BLOCK, ConflictLaneBuilder, conflict_blocker
from splyce.passes.coiteration_match import INSERT_KIND, Coiteration, Decline, match_coiteration, shape_name
from splyce.passes.fast_lane import FastLaneBuilder, add_epilogue_count
from splyce.passes.gallop_lane import PREFETCH_FUNCTION_PREFIX, add_galloping, add_leapfrog, describe_galloping
from splyce.passes.insert_lane import InsertLaneBuilder
from splyce.passes.permute_lane import PermuteLaneBuilder, permute_blocker
from splyce.passes.strict_conflict_lane import add_conflict_lane_first, describe_packed, packed_phase2, \
    strict_conflict_blocker
from splyce.passes.union_insert import UnionInsert, UnionInsertBuilder, match_union_insert
from splyce.passes.union_lane import UnionLaneBuilder, add_tail_count, simd_blocker
from splyce.passes.union_match import Union, match_union
from splyce.passes.union_reduce import UnionReduce, UnionReduceBuilder, describe as describe_reduce, \
    match_union_reduce, reduce_blocker
from splyce.options import CONFLICT_WIDTH, DEFAULT_VECTOR_WIDTH, Options
from splyce.passes.ir_utils import const_int, defined_outside, walk

PROFILE_COUNTERS_SYMBOL = "splyce_profile_counters"
PROFILE_SLOTS = 8  # coordinates consumed by: fast lanes, scalar epilogue steps, galloping jumps,
#                   three- and four-way fast lanes (fast_lane.FAST_LANE_SLOT, ...), entries summed by
#                   flat row loops (flat_rows.FLAT_ROWS_SLOT); the strict conflict lane's coordinates, fiber
#                   pairs that entered it, pairs sent to the all-pairs lane (strict_conflict_lane.CONFLICT_LANE_SLOT, ...)


@dataclass(frozen=True)
class LoopDecision:
    function: str
    index: int  # which scf.while, in walk order within the function
    vectorized: bool
    reason: str  # why it declined, or a short description of what was built


def _while_loops(op) -> list:
    """The scf.while ops nested in ``op``, in pre-order walk order."""
    return [inner.opview for inner in walk(op) if inner.name == "scf.while"]


def profile_counters_global(module: ir.Module) -> None:
    body = module.body
    for op in body.operations:
        if op.operation.name == "memref.global" and \
                ir.StringAttr(op.operation.attributes["sym_name"]).value == PROFILE_COUNTERS_SYMBOL:
            return
    i64 = ir.IntegerType.get_signless(64)
    mtype = ir.MemRefType.get([PROFILE_SLOTS], i64)
    zeros = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get([PROFILE_SLOTS], i64), ir.IntegerAttr.get(i64, 0))
    with ir.InsertionPoint.at_block_begin(body):
        memref.global_(PROFILE_COUNTERS_SYMBOL, ir.TypeAttr.get(mtype), sym_visibility="public",
                       initial_value=zeros)


def counters_in(func) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    entry = func.regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(entry):
        return memref.get_global(ir.MemRefType.get([PROFILE_SLOTS], i64), PROFILE_COUNTERS_SYMBOL)


# ------------------------------------------------------------------ hoisting of the fiber bounds
_VIEW_OPS = ("memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.expand_shape",
             "memref.collapse_shape", "memref.view")
_STORE_OPS = {"memref.store": 1, "vector.store": 1, "vector.maskedstore": 0, "vector.scatter": 0,
              "vector.transfer_write": 1}
_PURE_PREFIXES = ("arith.", "math.", "scf.", "vector.", "llvm.extractvalue", "llvm.insertvalue",
                  "llvm.mlir.poison", "llvm.mlir.undef", "llvm.mlir.constant",
                  "llvm.intr.expect", "memref.load", "memref.prefetch", "memref.dim",   # prefetch: galloping's scan
                  "memref.alloca", "memref.get_global", "memref.extract_strided_metadata") + _VIEW_OPS


def _memref_root(value):
    """(kind, identity) of the buffer a memref value views: a function argument, a global or a local."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return ("arg", ir.BlockArgument(value).arg_number)
        name = owner.operation.name
        if name in _VIEW_OPS:
            value = owner.operation.operands[0]
            continue
        if name == "memref.get_global":
            return ("global", str(owner.operation.attributes["name"]))
        if name in ("memref.alloca", "memref.alloc"):
            return ("local", owner.operation)
        return ("unknown", owner.operation)


def _loop_may_write(loop, load) -> bool:
    """Whether anything in ``loop`` may write the buffer ``load`` reads. Stores to locals and globals do
    not alias function arguments; stores of another element type to another argument are taken as not
    aliasing (an index array and a value array are never the same buffer); unknown ops may write."""
    mem = load.operation.operands[0]
    root = _memref_root(mem)
    if root[0] != "arg":
        return True
    et = str(ir.MemRefType(mem.type).element_type)

    for inner in walk(loop):
        if inner.name in _STORE_OPS:
            target = inner.operands[_STORE_OPS[inner.name]]
            troot = _memref_root(target)
            if troot[0] == "unknown" or troot == root:
                return True
            if troot[0] == "arg" and str(ir.MemRefType(target.type).element_type) == et:
                return True
        elif inner.name == "func.call" and \
                ir.FlatSymbolRefAttr(inner.attributes["callee"]).value.startswith(PREFETCH_FUNCTION_PREFIX):
            continue                                    # galloping's prefetch: writes nothing
        elif not inner.name.startswith(_PURE_PREFIXES):
            return True
    return False


def _runs_at_least_once(loop) -> bool:
    if loop.operation.name != "scf.for":
        return False
    lb, ub = (const_int(v) for v in list(loop.operation.operands)[:2])
    return lb is not None and ub is not None and lb < ub


def hoist_fiber_bounds(match: Coiteration) -> int:
    """Move the loads of the two fibers' start and end positions (and their casts) out of enclosing
    ``scf.for`` loops whose trip count is a positive constant, as far out as their indices allow, when
    the loops cannot write the position arrays. The sparsifier reloads ``pos[i]`` and ``pos[i+1]`` for
    every ``j``; hoisted, the fast lane's "n coordinates left" test of B is loop-invariant in the j loop,
    so the common short-fiber case costs one well-predicted branch. Returns the number of ops moved."""
    w = match.while_op
    inits = list(w.operation.operands)
    chains = []
    for value in [inits[p] for p in match.cursor_pos] + list(match.bounds):
        chain = []
        while not isinstance(value.owner, ir.Block) and value.owner.operation.name in (
                "arith.extui", "arith.extsi", "arith.index_cast", "arith.index_castui"):
            chain.append(value.owner)
            value = value.owner.operation.operands[0]
        if isinstance(value.owner, ir.Block) or value.owner.operation.name != "memref.load":
            continue
        chain.append(value.owner)
        chains.append(list(reversed(chain)))  # load first
    moved = 0
    for chain in chains:
        load = chain[0]
        while True:
            loop = chain[0].operation.parent
            if loop is None or loop.name != "scf.for" or not _runs_at_least_once(loop.opview):
                break
            if chain[0].operation.parent != chain[-1].operation.parent:
                break
            if any(not defined_outside(v, loop) for v in load.operation.operands):
                break
            if _loop_may_write(loop, load):
                break
            for op in chain:
                op.operation.move_before(loop)
                moved += 1
    return moved


def _conflict_compares(block: int) -> str:
    return f"{block} x {block} conflict compares ({'vpconflictd' if block == 16 else 'vpconflictq'})"


def _describe(match: Coiteration, options: Options, builder: FastLaneBuilder, conflict_first: bool = False) -> str:
    crd = str(match.crd_type)
    text = f"{match.kind} {match.element_type} {crd}-crd n={options.vector_width}"
    if options.fast_math and options.width_reason != "given":   # chosen for fast_math by the target's features
        text += f" ({options.width_reason})"
    text += f" config {options.phases}"
    if match.fingers > 2:
        text = f"{shape_name(match.fingers)}: {text}"
        text += f", leapfrogging at length ratio >= {options.gallop}" if options.gallop else ", no leapfrogging (gallop=0)"
    else:
        text += ", " + describe_galloping(options.gallop, conflict_first or (
            isinstance(builder, ConflictLaneBuilder) and not isinstance(builder, BroadcastLaneBuilder)))
    if match.kind == INSERT_KIND:
        return text + "; phase 2: the body, with its call, under a branch per matched lane"
    if options.fast_math:
        text += " fast-math"
        if builder.vector_acc_slots:
            text += " (vector accumulators)"
        if isinstance(builder, BroadcastLaneBuilder):
            text += "; 16 x 8 broadcast compares (no AVX-512 CD), block advance"
        elif isinstance(builder, ConflictLaneBuilder):
            text += f"; {_conflict_compares(builder.block)}, block advance"
        elif isinstance(builder, PermuteLaneBuilder):
            text += "; f64 values by an index and vpermd (AVX2)"
    if conflict_first:
        block = BLOCK[ir.IntegerType(match.crd_type).width]
        text += (f"; first a strict lane of {_conflict_compares(block)}, block advance, ordered adds of the matched "
                 "lanes (left for the all-pairs lane when matches come densely)")
        if packed_phase2(match):
            text += describe_packed(match)
    if options.simd_mac:
        blocker = builder.simd2_blocker()
        if blocker:
            text += f" (phase 2 scalar: {blocker})"
    return text


def _match(loop, options: Options):
    """The intersection match, else (for a union loop, when enabled) the union match, else the Decline."""
    match = match_coiteration(loop)
    if isinstance(match, Decline) and match.reason.startswith("union"):
        if options.union is False:
            return Decline(match.reason + "; union fast lane off (union=False)")
        union = match_union(loop)
        if isinstance(union, Decline) and union.reason.startswith("union carries values besides the cursors"):
            union = match_union_insert(loop)
            if isinstance(union, Decline) and union.reason == "the loop carries something else than one sparse " \
                    "matrix output":
                union = match_union_reduce(loop)
        if options.union is None:   # the default: the sparse-output lane only (docs/passes.md)
            if isinstance(union, Union):
                return Decline(match.reason + "; union fast lane: a dense output (on with union=True: slower on "
                               "short rows)")
            if isinstance(union, Decline):
                return Decline(f"{match.reason}; union fast lane: {union.reason}")
        if isinstance(union, Decline):
            return Decline(f"union fast lane: {union.reason}")
        return union
    return match


def _build_union(function: str, index: int, union: Union, options: Options, counters) -> LoopDecision:
    blocker = simd_blocker(union, options)
    if blocker:
        return LoopDecision(function, index, False, f"union fast lane: {blocker}")
    hoist_fiber_bounds(union.head)
    UnionLaneBuilder(union, options, counters).build()
    if counters is not None:
        add_epilogue_count(union.head, counters)
        add_tail_count(union, counters)
    return LoopDecision(function, index, True, f"union fast lane: dense-output merge {union.both.element_type} "
                        f"{union.head.crd_type}-crd n={options.vector_width}")


def _build_union_reduce(function: str, index: int, union: UnionReduce, options: Options,
                        counters) -> LoopDecision:
    blocker = reduce_blocker(union, options)
    if blocker:
        return LoopDecision(function, index, False, f"union fast lane: {blocker}")
    hoist_fiber_bounds(union.head)
    UnionReduceBuilder(union, options, counters).build()
    if counters is not None:
        add_epilogue_count(union.head, counters)
        add_tail_count(union, counters)
    return LoopDecision(function, index, True, describe_reduce(union, options))


def _build_union_insert(function: str, index: int, union: UnionInsert, options: Options,
                        counters) -> LoopDecision:
    hoist_fiber_bounds(union.head)
    UnionInsertBuilder(union, options, counters).build()
    if counters is not None:
        add_epilogue_count(union.head, counters)
        add_tail_count(union, counters)
    return LoopDecision(function, index, True, f"union fast lane: sparse-output merge {union.head.element_type} "
                        f"{union.head.crd_type}-crd n={options.vector_width}")


def _unchosen(options: Options, why: str) -> Options:
    """A width chosen (vector_width unset, ``Options.width_chosen``) holds only for the loops it was measured
    on: the conflict lane's (16) or every intersection loop (an all-pairs n = 8): every other loop keeps the
    default width, so its code is what it was without the choice."""
    if not options.width_chosen:
        return options
    loop_options = replace(options, vector_width=DEFAULT_VECTOR_WIDTH)
    object.__setattr__(loop_options, "width_reason", f"default: no conflict lane here, {why}")
    return loop_options


def run_splyce_pass(module: ir.Module, options: Options) -> list[LoopDecision]:
    """Transform the stage-1 ``module`` in place, verify it, and return one decision per scf.while."""
    decisions = []
    with module.context, ir.Location.unknown():
        funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
        for func in funcs:
            name = ir.StringAttr(func.operation.attributes["sym_name"]).value
            loops = _while_loops(func.operation)
            matches = [(i, loop, _match(loop, options)) for i, loop in enumerate(loops)]
            counters = None
            if options.profile and any(isinstance(mt, (Coiteration, Union, UnionInsert, UnionReduce)) for _, _, mt in matches):
                profile_counters_global(module)
                counters = counters_in(func.operation)
            for index, loop, match in matches:
                if isinstance(match, Decline):
                    decisions.append(LoopDecision(name, index, False, match.reason))
                    continue
                if isinstance(match, Union):
                    decisions.append(_build_union(name, index, match, _unchosen(options, "a union"), counters))
                    continue
                if isinstance(match, UnionReduce):
                    decisions.append(_build_union_reduce(name, index, match, _unchosen(options, "a union"),
                                                         counters))
                    continue
                if isinstance(match, UnionInsert):
                    decisions.append(_build_union_insert(name, index, match, _unchosen(options, "a union"),
                                                         counters))
                    continue
                hoist_fiber_bounds(match)
                lane = InsertLaneBuilder if match.kind == INSERT_KIND else FastLaneBuilder
                loop_options = options
                builder = lane(match, options, counters)
                blocker = conflict_blocker(match, options, builder) if lane is FastLaneBuilder else "an insert"
                if blocker is None:
                    builder = ConflictLaneBuilder(match, options, counters)
                elif lane is FastLaneBuilder and broadcast_blocker(match, options, builder) is None:
                    builder = BroadcastLaneBuilder(match, options, counters)
                elif lane is FastLaneBuilder and permute_blocker(match, options, builder) is None:
                    builder = PermuteLaneBuilder(match, options, counters)
                elif options.vector_width == CONFLICT_WIDTH:   # a chosen all-pairs width holds for every
                    loop_options = _unchosen(options, blocker)  # intersection loop, a chosen 16 for this lane
                    if loop_options is not options:
                        builder = lane(match, loop_options, counters)
                # profiling builds too: splyce.profile counts each lane's coordinates and the pairs' lane choice
                conflict_first = lane is FastLaneBuilder and blocker is not None and \
                    strict_conflict_blocker(match, loop_options, builder) is None
                fast = builder.build()
                if counters is not None:
                    add_epilogue_count(match, counters)
                conflict = conflict_first or (isinstance(builder, ConflictLaneBuilder) and
                                              not isinstance(builder, BroadcastLaneBuilder))
                if options.gallop and match.fingers == 2:
                    add_galloping(match, fast, options.gallop, counters, conflict)
                elif options.gallop:
                    add_leapfrog(match, fast, options.gallop, counters)
                if conflict_first:   # strict: pairs that do not gallop start in the strict conflict lane
                    add_conflict_lane_first(match, fast, loop_options, counters)
                decisions.append(LoopDecision(name, index, True, _describe(match, loop_options, builder, conflict_first)))
        module.operation.verify()
    return decisions


def decisions_as_comments(decisions) -> str:
    """One ``// splyce: @fn loop i: ...`` line per decision (prepended to the "splyce" stage text)."""
    lines = []
    for d in decisions:
        verdict = "vectorized" if d.vectorized else "declined"
        lines.append(f"// splyce: @{d.function} loop {d.index}: {verdict} ({d.reason})")
    return "\n".join(lines) + ("\n" if lines else "")

