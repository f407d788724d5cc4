"""Threads: give a kernel's outermost parallel loop a range [lo, hi) taken from two new entry arguments.

Runs on the stage-1 module (after ``pipeline.SPARSIFY``, before the Splyce pass). The sparsifier emits the
entry ``@kernel``, which calls ``@_internal_kernel``; there, the outer loop over the first dense level is a
top-level ``scf.for %i = 0 to N``. When every iteration writes only its own output slice (every store into
memory goes to the dense output argument with ``%i`` as first index) and nothing else at top level writes
memory, the iterations are independent. The loop then runs from ``%lo`` to ``%hi``, two ``index`` arguments
appended to both functions, and the runtime calls the entry once per chunk, from several threads. Each output
element is still computed by one thread, in the same order as with one thread: results are bit-identical.

Anything else declines with a reason (and the kernel runs on one thread): sparse outputs, an outer loop that
is a ``scf.while`` (compressed outer level) or carries values, reductions into a shared output element,
profile counters (a shared global).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from splyce.lowering.to_mlir import ENTRY
from splyce.passes.ir_utils import const_int, defined_inside, walk

INTERNAL = "_internal_" + ENTRY
_READ_ONLY_TOP_LEVEL = ("arith.", "index.", "llvm.extractvalue", "llvm.mlir.", "memref.subview", "memref.load",
                        "memref.dim", "memref.cast", "memref.reinterpret_cast",
                        "memref.extract_strided_metadata", "func.return")


@dataclass(frozen=True)
class OuterLoop:
    """The outer loop was split: the entry takes ``lo, hi`` (0 <= lo <= hi <= extent) as its last arguments."""

    extent: int


@dataclass(frozen=True)
class NotSplit:
    reason: str


def _function(module: ir.Module, name: str):
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _check_loop_body(loop, iv: ir.Value, arguments: list[ir.Value]) -> str | None:
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
    if not written:
        return "the loop writes no dense output"
    for op in ops:
        if op.name in ("memref.store", "memref.load"):
            target = op.operands[1 if op.name == "memref.store" else 0]
            first = 2 if op.name == "memref.store" else 1
            if any(target == w for w in written) and (len(op.operands) <= first or op.operands[first] != iv):
                return "the output is accessed at a row other than the outer loop's (a reduction over it)"
    return None


def split_outer_loop(module: ir.Module) -> OuterLoop | NotSplit:
    """Give the outer loop [lo, hi) arguments when its iterations are independent; in place."""
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
        if len(loop.results):
            return NotSplit("the outer loop carries values (a reduction)")
        for op in body.operations:
            op = op.operation
            if op != loop and not op.name.startswith(_READ_ONLY_TOP_LEVEL):
                return NotSplit(f"top-level {op.name} outside the outer loop")
        lower, upper, step = (const_int(loop.operands[i]) for i in range(3))
        if lower != 0 or upper is None or step != 1:
            return NotSplit("the outer loop's bounds are not constant 0..N step 1")
        outputs = [a for a in body.arguments if isinstance(a.type, ir.MemRefType) and
                   a.type.has_static_shape and a.type.rank >= 1]
        if not outputs:
            return NotSplit("no dense output")
        iv = loop.regions[0].blocks[0].arguments[0]
        reason = _check_loop_body(loop, iv, outputs)
        if reason:
            return NotSplit(reason)

        index = ir.IndexType.get()
        lo, hi = body.add_argument(index, ir.Location.unknown()), body.add_argument(index, ir.Location.unknown())
        _append_inputs(internal, [index, index])
        loop.operands[0] = lo
        loop.operands[1] = hi

        entry_body = entry.regions[0].blocks[0]
        elo = entry_body.add_argument(index, ir.Location.unknown())
        ehi = entry_body.add_argument(index, ir.Location.unknown())
        _append_inputs(entry, [index, index])
        calls = [op.operation for op in walk(entry) if op.name == "func.call"]
        if len(calls) != 1:  # pragma: no cover - the sparse assembler emits one call
            raise RuntimeError("internal error: the entry does not call the internal kernel once")
        call = calls[0]
        with ir.InsertionPoint(call):
            new = func.CallOp([r.type for r in call.results], ir.FlatSymbolRefAttr.get(INTERNAL),
                              [*call.operands, elo, ehi])
        for old, replacement in zip(call.results, new.results):
            old.replace_all_uses_with(replacement)
        call.erase()
        module.operation.verify()
        return OuterLoop(upper)


def _append_inputs(function, types) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([*ftype.inputs, *types], ftype.results))
