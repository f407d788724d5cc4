"""Compiled loops in the trace IR: a ``loop`` node stands for a whole ``fori_loop`` / ``while_loop`` / ``scan``.

The loop's body is traced once, on placeholder nodes (op ``loop_input``: the loop index, the carry leaves, the
slices of the scanned arrays), and kept in the loop node's ``LoopSpec`` as the body's output nodes. Values the
body reads from outside (arguments, constants, values computed before the loop) are the loop node's *free*
arguments: the maximal sub-expressions of the body that depend on no placeholder, computed once before the
loop, never per iteration. Each of the loop's results is a ``loop_out`` node over the loop node (params: its
position: the final carry leaves, then the stacked outputs of a scan).

The planner never sees these nodes: the dispatcher cuts a trace holding a loop into stages
(runtime/staged.py): kernels for what comes before and after, and per loop a driver that calls the body's one
compiled kernel once per iteration (docs/guide/loops.md).
"""

from __future__ import annotations

import itertools

from splyce.tracer.ir import Node, TensorType, walk

_ids = itertools.count()


class LoopSpec:
    """What a ``loop`` node computes (compared by identity: each traced loop is its own).

    ``kind``: "fori" | "while" | "scan". The loop node's args are, in order: the initial carry leaves
    (``n_carry``), for a while loop the condition on the initial carry, the scanned arrays (``n_xs``), the
    bounds given as traced values (``traced_bounds``: lower then upper, for a fori loop), then the free values
    (``n_free``). The body's placeholders are ``placeholders``: the loop index when the body reads it
    (``index``: its position, else None), the carry leaves, the slices of the scanned arrays, and then the
    free values are read as they are. ``outputs``: the body's new carry leaves, for a while loop its condition
    on the new carry, then a scan's per-step outputs (``n_ys``)."""

    __slots__ = ("kind", "uid", "n_carry", "n_xs", "n_ys", "index", "placeholders", "outputs", "free", "lower",
                 "upper", "traced_bounds", "length", "paths", "reverse")

    def __init__(self, kind, n_carry, n_xs, n_ys, index, placeholders, outputs, free, lower, upper,
                 traced_bounds, length, paths, uid, reverse=False):
        self.kind = kind
        self.reverse = bool(reverse)       # a scan run from its last step to its first (ys kept in place)
        self.uid = uid
        self.n_carry = n_carry
        self.n_xs = n_xs
        self.n_ys = n_ys
        self.index = index
        self.placeholders = tuple(placeholders)
        self.outputs = tuple(outputs)
        self.free = tuple(free)
        self.lower = lower                 # a Python int, or None when traced
        self.upper = upper
        self.traced_bounds = traced_bounds
        self.length = length               # a scan's
        self.paths = tuple(paths)          # the carry leaves' paths, for messages

    @property
    def has_cond(self) -> bool:
        return self.kind == "while"

    def out_types(self) -> tuple[TensorType, ...]:
        carry = tuple(n.type for n in self.outputs[:self.n_carry])
        ys = tuple(TensorType((self.length,) + n.type.shape, n.type.dtype, None)
                   for n in self.outputs[len(self.outputs) - self.n_ys:])
        return carry + ys

    def describe(self) -> str:
        if self.kind == "fori":
            lo = "%lower" if self.lower is None else self.lower
            hi = "%upper" if self.upper is None else self.upper
            return f"fori_loop {lo}..{hi}"
        if self.kind == "scan":
            return f"scan length={self.length}" + (", reverse" if self.reverse else "")
        return "while_loop"

    def __str__(self) -> str:
        return f"{self.describe()}, carry={self.n_carry}" + (f", xs={self.n_xs}, ys={self.n_ys}" if self.kind == "scan"
                                                            else "")

    def __repr__(self) -> str:
        return f"LoopSpec({self})"


def new_uid() -> int:
    return next(_ids)


def placeholder(uid: int, k: int, type_: TensorType) -> Node:
    """The body's k-th placeholder of loop ``uid``."""
    return Node("loop_input", (), (uid, k), type_)


class Placeholders:
    """A new loop's body placeholders, made in order: calling it with a type gives the next one; ``uid`` is
    the loop's, ``made`` the list so far (a transformation building a loop's body from another's)."""

    def __init__(self) -> None:
        self.uid = new_uid()
        self.made: list[Node] = []

    def __call__(self, t: TensorType) -> Node:
        p = placeholder(self.uid, len(self.made), t)
        self.made.append(p)
        return p


def loop_node(spec: LoopSpec, args: tuple[Node, ...]) -> Node:
    """The loop's node. Its type is a placeholder (its values are its ``loop_out`` nodes'), a float so that a
    transformation asking which nodes a float input reaches (splyce.grad) sees the loop and refuses it by its
    op, instead of taking its results for constants."""
    return Node("loop", args, (spec,), TensorType((), "float64", None))


def outputs_of(loop: Node) -> tuple[Node, ...]:
    """The ``loop_out`` nodes of a loop node: the final carry leaves, then a scan's stacked outputs."""
    spec: LoopSpec = loop.params[0]
    return tuple(Node("loop_out", (loop,), (k,), t) for k, t in enumerate(spec.out_types()))


def free_values(outputs, placeholders) -> tuple[list[Node], set[Node]]:
    """The body's free values (the maximal sub-expressions of ``outputs`` reading no placeholder, in
    dependency order) and the set of nodes that depend on a placeholder."""
    marks = set(placeholders)
    dependent: set[Node] = set()
    order = walk(outputs)
    for node in order:
        if node in marks or any(a in dependent for a in node.args):
            dependent.add(node)
    free: dict[Node, None] = {}
    for node in order:
        if node in dependent:
            for a in node.args:
                if a not in dependent:
                    free[a] = None
    for node in outputs:
        if node not in dependent:
            free[node] = None
    return [n for n in order if n in free], dependent


def has_loops(outputs) -> bool:
    return any(n.op == "loop" for n in walk(outputs))
