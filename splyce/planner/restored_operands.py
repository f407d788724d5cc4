"""Sparse intermediates re-stored inside the kernel for the contraction that reads them.

A contraction of sparse operands runs in a loop order that visits every sparse operand's levels in storage
order, and writes a sparse result with all but its innermost level outside every reduction (cost.py,
``sparse_output_ok``). An argument stored otherwise is re-stored on the host before the kernel; an
intermediate is computed by the kernel in the format the trace gave it, so two intermediates can leave no
such order: ``p.T @ a @ p`` of CSR operands (smoothed aggregation's Galerkin product) computes ``p.T @ a``
as a CSC and multiplies it by the CSR ``p``, where both operands put the reduction index outermost. MLIR's
sparsifier then leaves the kernel unsparsified and its codegen fails ("failed to legalize unresolved
materialization").

``restore_blocked_operands`` finds each contraction with no such order (``Planner.choice`` is None) and reads
its sparse intermediate operands through a re-store: a one-operand contraction into the other level order
(``ij->ij`` with the format's levels permuted), which the lowering writes in its operand's order and sorts
into its own (lowering/restore.py, as scipy's ``tocsc``), choosing the cheapest combination of re-stored
operands that admits an order. Results, values and summation order of each product are unchanged: a
re-store moves entries, it adds nothing.
"""

from __future__ import annotations

import itertools

from splyce.tensors.formats import Format
from splyce.tracer.ir import ContractParams, Node, TensorType, walk

MAX_RESTORED_RANK = 3


def restored(arg: Node, order: tuple[int, ...]) -> Node:
    """``arg`` re-stored with its levels in ``order`` (same level kinds and index widths)."""
    fmt = arg.type.format
    subs = "abcdefgh"[: arg.type.ndim]
    return Node("contract", (arg,), (ContractParams((subs,), subs),),
                TensorType(arg.type.shape, arg.type.dtype, Format(fmt.levels, order, fmt.pos_width, fmt.crd_width)))


def _alternatives(arg: Node) -> list[Node]:
    if not arg.type.is_sparse or arg.op == "input" or not 2 <= arg.type.ndim <= MAX_RESTORED_RANK:
        return [arg]
    orders = [p for p in itertools.permutations(range(arg.type.ndim)) if p != arg.type.format.order]
    return [arg] + [restored(arg, p) for p in orders]


def _unblocked(planner, node: Node) -> Node | None:
    """``node`` reading some sparse intermediates re-stored so that a loop order admits it (the cheapest such
    combination, re-stores included), or None where none does."""
    best, best_cost = None, None
    for args in itertools.product(*(_alternatives(a) for a in node.args)):
        if args == node.args:
            continue
        trial = Node(node.op, tuple(args), node.params, node.type)
        choice = planner.choice(trial)
        if choice is None:
            continue
        extra = [planner.choice(a) for a, old in zip(args, node.args) if a is not old]
        if any(c is None for c in extra):
            continue
        total = choice.cost + sum(c.cost for c in extra)
        if best_cost is None or total < best_cost:
            best, best_cost = trial, total
    return best


def restore_blocked_operands(planner, outputs: tuple) -> tuple:
    """``outputs`` with each contraction that no loop order admits reading re-stored intermediates
    (``_unblocked``); unchanged where every contraction has an order."""
    mapping: dict[Node, Node] = {}
    changed = False
    for node in walk(outputs):
        args = tuple(mapping.get(a, a) for a in node.args)
        new = node if args == node.args else Node(node.op, args, node.params, node.type)
        if new.op == "contract" and new.params[0].order is None and any(a.type.is_sparse for a in args) \
                and planner.choice(new) is None:
            fixed = _unblocked(planner, new)
            if fixed is not None:
                new = fixed
        changed = changed or new is not node
        mapping[node] = new
    return tuple(mapping[o] for o in outputs) if changed else outputs
