"""Drop ``linalg.generic`` ops whose body yields its own ``outs`` values unchanged.

Folding makes such kernels out of integer code that cancels (``(a * 0).sum()``, ``(d - d) @ a``: ``x * 0``
and ``x - x`` fold to 0 for integers, and ``out + 0`` to ``out``). The sparsifier segfaults on a generic
over a sparse operand whose body ignores it (docs/toolchain.md), and the op computes nothing anyway: each
result is its ``outs`` operand, so its uses take that operand and the op goes. Float bodies do not fold
this way (``x * 0`` is NaN for an infinite ``x``), so they are never dropped.
"""

from __future__ import annotations

from mlir import ir

from splyce.passes.ir_utils import walk


def _is_noop(op) -> bool:
    if op.name != "linalg.generic" or len(op.results) == 0:
        return False
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 1 or ops[0].operation.name != "linalg.yield":
        return False
    n_outs = len(op.results)
    n_ins = len(body.arguments) - n_outs
    yielded = list(ops[0].operation.operands)
    return len(yielded) == n_outs and all(
        value == body.arguments[n_ins + i] for i, value in enumerate(yielded))


def drop_noop_generics(module: ir.Module) -> int:
    """Replace each no-op generic's results by its ``outs`` operands and erase it; returns how many."""
    found = [op for fn in module.body.operations for op in walk(fn.operation) if _is_noop(op)]
    with module.context:
        for op in found:
            n_outs = len(op.results)
            outs = list(op.operands)[len(op.operands) - n_outs:]
            for result, init in zip(op.results, outs):
                result.replace_all_uses_with(init)
            op.erase()
    return len(found)
