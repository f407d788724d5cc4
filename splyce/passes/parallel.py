"""Threads: give a kernel's outermost parallel loop a range [lo, hi) taken from two new entry arguments.

Runs on the stage-1 module (after ``pipeline.SPARSIFY``, before the Splyce pass). The sparsifier emits the
entry ``@kernel``, which calls ``@_internal_kernel``; there, the outer loop over the first dense level is a
top-level ``scf.for %i = 0 to N``. When every iteration writes only its own output slice (every store into
memory goes to the dense output argument with ``%i`` as first index) and nothing else at top level writes
memory, the iterations are independent. The loop then runs from ``%lo`` to ``%hi``, two ``index`` arguments
appended to both functions, and the runtime calls the entry once per chunk, from several threads. Each output
element is still computed by one thread, in the same order as with one thread: results are bit-identical.

A reduction over the outer loop into one output element (``(a * b).sum()``, triangle counting) is split too
when it has the shape the sparsifier gives it: the loop carries the sum, its initial value is loaded from a
rank-0 output before the loop and its result stored back after it, and inside the loop the carried value
only flows through one kind of combining op (``arith.addf`` / ``addi``, ``maximumf`` / ``maxsi`` ...). Each
chunk then reduces into a private output that starts at the op's identity, and the runtime combines the
partial results in chunk order. Max and min and integer sums give the same result in any order; a float sum
is reassociated, so it is split only when reassociation is allowed (``fast_math=True``).

Anything else declines with a reason (and the kernel runs on one thread): sparse outputs, an outer loop that
is a ``scf.while`` (compressed outer level), reductions into a shared element of a rank >= 1 output, carried
values of any other shape, profile counters (a shared global).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from splyce.lowering.to_mlir import ENTRY
from splyce.passes.ir_utils import const_int, defined_inside, defining_op, walk

INTERNAL = "_internal_" + ENTRY
_READ_ONLY_TOP_LEVEL = ("arith.", "index.", "llvm.extractvalue", "llvm.mlir.", "memref.subview", "memref.load",
                        "memref.dim", "memref.cast", "memref.reinterpret_cast",
                        "memref.extract_strided_metadata", "func.return")


# How partial results of a split reduction combine, by the op that accumulates the carried value.
COMBINE = {"arith.addf": "add", "arith.addi": "add", "arith.maximumf": "maximum", "arith.maxsi": "maximum",
           "arith.minimumf": "minimum", "arith.minsi": "minimum", "arith.maxnumf": "fmax",
           "arith.minnumf": "fmin"}
_PASS_THROUGH = ("arith.select",)   # picks the carried value or a new one: no arithmetic on it


@dataclass(frozen=True)
class OuterLoop:
    """The outer loop was split: the entry takes ``lo, hi`` (0 <= lo <= hi <= extent) as its last arguments.

    ``reductions``: (k, combine) for each rank-0 output the loop reduces into, ``k`` counted from the end of
    the entry's arguments before ``lo, hi`` (1 = the last dense output), ``combine`` a key of the runtime's
    combining functions ("add", "maximum", ...)."""

    extent: int
    reductions: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class NotSplit:
    reason: str


def _function(module: ir.Module, name: str):
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _check_loop_body(loop, iv: ir.Value, arguments: list[ir.Value], reductions: bool = False) -> str | None:
    """Why the iterations of ``loop`` may not be independent, or None."""
    ops = list(walk(loop))
    written = []
    for op in ops:
        if op.name == "memref.store":
            target = op.operands[1]
            if defined_inside(target, loop):
                continue  # a buffer allocated inside the loop: private to one iteration
            if not any(target == a for a in arguments):
                return "the loop writes to a memref other than the dense output"
            written.append(target)
        elif op.name in ("memref.copy", "memref.atomic_rmw", "memref.get_global", "func.call") or \
                op.name.startswith(("linalg.", "vector.")):
            return f"the loop contains {op.name}"
    if not written and not reductions:
        return "the loop writes no dense output"
    for op in ops:
        if op.name in ("memref.store", "memref.load"):
            target = op.operands[1 if op.name == "memref.store" else 0]
            first = 2 if op.name == "memref.store" else 1
            if any(target == w for w in written) and (len(op.operands) <= first or op.operands[first] != iv):
                return "the output is accessed at a row other than the outer loop's (a reduction over it)"
    return None


def split_outer_loop(module: ir.Module, reassociate: bool = False) -> OuterLoop | NotSplit:
    """Give the outer loop [lo, hi) arguments when its iterations are independent (or reduce into rank-0
    outputs, see the module docstring; float sums only when ``reassociate``); in place."""
    with module.context, ir.Location.unknown():
        entry, internal = _function(module, ENTRY), _function(module, INTERNAL)
        if entry is None or internal is None:
            return NotSplit("no internal kernel function")
        body = internal.regions[0].blocks[0]
        loops = [op.operation for op in body.operations if op.operation.name in ("scf.for", "scf.while",
                                                                              "scf.parallel")]
        if len(loops) != 1:
            return NotSplit(f"{len(loops)} top-level loops in the kernel")
        loop = loops[0]
        if loop.name != "scf.for":
            return NotSplit(f"the outer loop is a {loop.name} (a compressed outer level)")
        carried = _carried_outputs(loop, body)
        if isinstance(carried, NotSplit):
            return carried
        for op in body.operations:
            op = op.operation
            if op != loop and not op.name.startswith(_READ_ONLY_TOP_LEVEL) and \
                    not any(op == store for store in carried.stores):
                return NotSplit(f"top-level {op.name} outside the outer loop")
        lower, upper, step = (const_int(loop.operands[i]) for i in range(3))
        if lower != 0 or upper is None or step != 1:
            return NotSplit("the outer loop's bounds are not constant 0..N step 1")
        outputs = [a for a in body.arguments if isinstance(a.type, ir.MemRefType) and
                   a.type.has_static_shape and a.type.rank >= 1]
        if not outputs and not carried.targets:
            return NotSplit("no dense output")
        iv = loop.regions[0].blocks[0].arguments[0]
        reason = _check_loop_body(loop, iv, outputs, reductions=bool(carried.targets))
        if reason:
            return NotSplit(reason)
        combines = []
        for k, target in enumerate(carried.targets):
            combine = _combining_op(loop, k)
            if isinstance(combine, NotSplit):
                return combine
            element = ir.MemRefType(target.type).element_type
            if combine == "add" and not reassociate and not isinstance(element, ir.IntegerType):
                return NotSplit("a float sum over the outer loop (splitting it reorders the additions; "
                                "allowed with fast_math=True)")
            combines.append(combine)

        entry_body = entry.regions[0].blocks[0]
        calls = [op.operation for op in walk(entry) if op.name == "func.call"]
        if len(calls) != 1:  # pragma: no cover - the sparse assembler emits one call
            raise RuntimeError("internal error: the entry does not call the internal kernel once")
        call = calls[0]
        reductions = []
        for target, combine in zip(carried.targets, combines):
            passed = call.operands[ir.BlockArgument(target).arg_number]
            if not (isinstance(passed.owner, ir.Block) and passed.owner == entry_body):
                return NotSplit("the reduced output is not an argument of the entry")
            reductions.append((len(entry_body.arguments) - ir.BlockArgument(passed).arg_number, combine))

        index = ir.IndexType.get()
        lo, hi = body.add_argument(index, ir.Location.unknown()), body.add_argument(index, ir.Location.unknown())
        _append_inputs(internal, [index, index])
        loop.operands[0] = lo
        loop.operands[1] = hi

        elo = entry_body.add_argument(index, ir.Location.unknown())
        ehi = entry_body.add_argument(index, ir.Location.unknown())
        _append_inputs(entry, [index, index])
        with ir.InsertionPoint(call):
            new = func.CallOp([r.type for r in call.results], ir.FlatSymbolRefAttr.get(INTERNAL),
                              [*call.operands, elo, ehi])
        for old, replacement in zip(call.results, new.results):
            old.replace_all_uses_with(replacement)
        call.erase()
        module.operation.verify()
        return OuterLoop(upper, tuple(reductions))


@dataclass
class _Carried:
    targets: list          # the rank-0 output argument each carried value is loaded from and stored to
    stores: list           # the top-level stores of the loop's results


def _carried_outputs(loop, body) -> _Carried | NotSplit:
    """The rank-0 outputs the loop's carried values reduce into: value k starts as ``memref.load %out_k[]``
    before the loop and its result is only stored to ``%out_k[]`` after it."""
    targets, stores = [], []
    for k, result in enumerate(loop.results):
        init = defining_op(loop.operands[3 + k])
        target = init.operands[0] if init is not None and init.name == "memref.load" else None
        if target is None or not isinstance(target.owner, ir.Block) or target.owner != body or \
                ir.MemRefType(target.type).rank != 0:
            return NotSplit("the outer loop carries values (a reduction) not loaded from a rank-0 output")
        users = [use.owner.operation for use in result.uses]
        if not users or any(u.name != "memref.store" or u.operands[0] != result or u.operands[1] != target
                            for u in users):
            return NotSplit("the outer loop's result is used other than stored to its rank-0 output")
        if any(t == target for t in targets):
            return NotSplit("two carried values reduce into one output")
        targets.append(target)
        stores.extend(users)
    loads = [defining_op(loop.operands[3 + k]) for k in range(len(targets))]
    for op in [o.operation for o in body.operations] + list(walk(loop)):   # no other access to them
        if op.name in ("memref.store", "memref.load") and not any(op == o for o in stores + loads):
            ref = op.operands[1 if op.name == "memref.store" else 0]
            if any(ref == t for t in targets):
                return NotSplit("a reduced output is accessed outside the reduction")
    return _Carried(targets, stores)


def _combining_op(loop, k: int) -> str | NotSplit:
    """The one kind of op that folds new values into carried value ``k`` of ``loop``, following it through
    nested loops' iter_args, ``scf.condition`` / ``scf.yield`` and ``scf.if`` results; or why not."""
    start = loop.regions[0].blocks[0].arguments[1 + k]
    seen, work, kinds = {start}, [start], set()

    def add(value):
        if value not in seen:   # MLIR values hash and compare by identity
            seen.add(value)
            work.append(value)

    while work:
        value = work.pop()
        for use in value.uses:
            user, n = use.owner.operation, use.operand_number
            name = user.name
            if name == "scf.for" and n >= 3:
                add(user.regions[0].blocks[0].arguments[n - 2])
                add(user.results[n - 3])
            elif name == "scf.while":
                add(user.regions[0].blocks[0].arguments[n])
            elif name == "scf.condition" and n >= 1:
                parent = user.parent.operation
                add(parent.regions[1].blocks[0].arguments[n - 1])
                add(parent.results[n - 1])
            elif name == "scf.yield":
                parent = user.parent.operation
                if parent == loop:
                    continue   # back to the outer loop's own iteration
                if parent.name == "scf.for":
                    add(parent.regions[0].blocks[0].arguments[n + 1])
                    add(parent.results[n])
                elif parent.name == "scf.while":
                    add(parent.regions[0].blocks[0].arguments[n])
                elif parent.name == "scf.if":
                    add(parent.results[n])
                else:
                    return NotSplit(f"the carried value is yielded by {parent.name}")
            elif name in COMBINE or name in _PASS_THROUGH:
                if name in COMBINE:
                    kinds.add(COMBINE[name])
                add(user.results[0])
            else:
                return NotSplit(f"the carried value is used by {name}")
    if len(kinds) != 1:
        return NotSplit("the carried value is combined by " + (" and ".join(sorted(kinds)) or "no op"))
    return kinds.pop()


def _append_inputs(function, types) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([*ftype.inputs, *types], ftype.results))
