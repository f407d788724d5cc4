"""Keep a kernel argument read inside a sparse ``linalg.generic``'s body from reaching the sparsifier as such.

A dense value read through a view inside a sparse kernel (``adj.multiply(s[:, None] + s[None, :])``: the
views lower as gathers, ``tensor.extract`` of ``s`` at ``linalg.index`` positions, lowering/dense.py) is
fused by MLIR's elementwise fusion into the sparse generic, whose body then reads the function argument
directly. MLIR 22's sparsifier turns every block argument it meets in a generic's body into a tensor id
before it asks whether the argument belongs to the generic (``Merger::buildTensorExp``), and that id must be
below the generic's operand count + 1: a kernel argument numbered past it aborts the process
(``Merger::makeTensorId``: ``Assertion `isValidTensorId(t)' failed``). A host-computed operand (``s = h @ w``
run before the kernel, planner/before_kernel.py) is appended after the arguments, so the natural
``adj.multiply(s[:, None] + s[None, :]).sum(axis=1)`` hit it; so does an argument after two others.

Each such read takes a ``tensor.cast`` of the argument to a dynamic shape instead, made just before the
generic: a value defined outside the body, which the sparsifier takes as an invariant whatever its number
(as it does for the same read from a low-numbered argument), and which folds back into the argument once the
loops are made (the kernel reads the argument's buffer, no copy). docs/toolchain.md has the minimal IR.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from splyce.errors import LoweringError
from splyce.passes.ir_utils import walk


def _is_sparse(value) -> bool:
    t = value.type
    return isinstance(t, ir.RankedTensorType) and t.encoding is not None


def _outer_argument(value, body: ir.Block) -> ir.BlockArgument | None:
    """``value`` as a block argument of a block other than ``body`` (an enclosing function's), else None."""
    if not isinstance(value.owner, ir.Block) or value.owner == body:
        return None
    return ir.BlockArgument(value)


def _at_risk(op) -> list[tuple[ir.Operation, int, ir.BlockArgument]]:
    """(user, operand position, argument) for each read inside a sparse generic's body of an enclosing block's
    argument whose number is not a valid tensor id of that generic."""
    operands = list(op.operands)
    if not any(_is_sparse(v) for v in operands) and not any(_is_sparse(r) for r in op.results):
        return []   # the sparsifier leaves dense generics alone
    body = op.regions[0].blocks[0]
    found = []
    for inner in walk(op):
        for position, value in enumerate(inner.operands):
            arg = _outer_argument(value, body)
            if arg is not None and arg.arg_number > len(operands):
                found.append((inner, position, arg))
    return found


def _shield(arg: ir.BlockArgument, before: ir.Operation):
    t = arg.type
    if not isinstance(t, ir.RankedTensorType) or t.rank == 0 or t.encoding is not None:
        raise LoweringError(
            f"internal error: a sparse kernel reads argument {arg.arg_number} ({t}) inside its loop body, which "
            "MLIR's sparsifier cannot compile (it would abort the process); please report this program")
    dynamic = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()] * t.rank, t.element_type)
    with ir.InsertionPoint(before):
        return tensor.cast(dynamic, arg)


def shield_outer_arguments(module: ir.Module) -> int:
    """Route each at-risk read (``_at_risk``) through a dynamic-shape cast of its argument made before the
    generic (one cast per argument and generic); returns how many reads were rerouted."""
    generics = [op for fn in module.body.operations for op in walk(fn.operation) if op.name == "linalg.generic"]
    count = 0
    with module.context, ir.Location.unknown():
        for op in generics:
            casts = {}
            for user, position, arg in _at_risk(op):
                key = arg
                if key not in casts:
                    casts[key] = _shield(arg, op)
                user.operands[position] = casts[key]
                count += 1
    return count
