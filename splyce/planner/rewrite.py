"""Trace rewrites before lowering: fuse a contraction into the contraction that consumes it.

Einsum is multilinear, so a contraction ``X`` read by another contraction ``C`` can be substituted into
``C``: ``X``'s reduced indices get fresh letters, its operands join ``C``'s. One rule covers the forms users
write: a product masked by a sparse operand (``(a @ b) * m``, ``m * (x @ y.T)``), a reduction of a product
(``(a * b).sum()``, ``v @ (a @ v)``, triangle counting ``((l @ l) * l).sum()``) and scalar factors of products
(``w @ h * 0.01``). Whether a substitution pays is the cost model's call (planner/cost.py), so chained
products that are cheaper apart (``(a @ b) @ c``) stay apart.
"""

from __future__ import annotations

import dataclasses
import string

from splyce.native.records import record
from splyce.tracer.ir import ContractParams, Node, TensorType, walk

MAX_FUSED_OPERANDS = 6


@record
class Fusion:
    """One substitution: ``inner`` (a contraction) into ``outer``, giving ``fused``."""

    inner: Node
    outer: Node
    fused: Node


def readers(outputs) -> dict[Node, list[Node]]:
    """The nodes that read each node (once per read)."""
    found: dict[Node, list[Node]] = {}
    for node in walk(outputs):
        for arg in node.args:
            found.setdefault(arg, []).append(node)
    return found


def uses(outputs) -> dict[Node, int]:
    """How many times each node is read (by another node or as a result)."""
    count: dict[Node, int] = {}
    for node in walk(outputs):
        for arg in node.args:
            count[arg] = count.get(arg, 0) + 1
    for out in outputs:
        count[out] = count.get(out, 0) + 1
    return count


def substitute(outer: Node, position: int) -> Node | None:
    """``outer`` with its contraction operand at ``position`` substituted, or None when that cannot be
    expressed (different dtypes would change rounding, too many operands or indices)."""
    inner = outer.args[position]
    if inner.op != "contract" or outer.op != "contract" or inner.type.dtype != outer.type.dtype:
        return None
    if len(outer.args) - 1 + len(inner.args) > MAX_FUSED_OPERANDS:
        return None
    po: ContractParams = outer.params[0]
    pi: ContractParams = inner.params[0]
    rename = dict(zip(pi.output, po.inputs[position]))
    taken = set("".join(po.inputs) + po.output)
    fresh = (c for c in string.ascii_lowercase if c not in taken)
    for c in dict.fromkeys("".join(pi.inputs)):
        if c not in rename:
            letter = next(fresh, None)
            if letter is None:
                return None
            rename[c] = letter
    inputs = (*po.inputs[:position], *("".join(rename[c] for c in s) for s in pi.inputs),
              *po.inputs[position + 1:])
    args = (*outer.args[:position], *inner.args, *outer.args[position + 1:])
    scale = _product(po.scale, pi.scale)
    params = ContractParams(tuple(inputs), po.output, scale, format_left=po.format_left)   # the result's request
    return Node("contract", args, (params,), outer.type)


def _product(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a * b


def with_order(node: Node, order: str) -> Node:
    params: ContractParams = node.params[0]
    return Node("contract", node.args, (dataclasses.replace(params, order=order),), node.type)


def with_args(node: Node, args: tuple) -> Node:
    return node if args == node.args else Node(node.op, args, node.params, node.type)


def retype(node: Node, type_: TensorType) -> Node:
    return Node(node.op, node.args, node.params, type_)
