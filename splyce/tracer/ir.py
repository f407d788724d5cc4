"""The trace IR: small, frozen, hashable nodes recorded while a jitted function runs on tracers.

Every operation normalizes to one of these node kinds:
- ``input``: the i-th argument, or a constant the function reads from its enclosing scope after the arguments
  (params: its position; tracer/captures.py);
- ``contract``: an einsum over 1-4 operands with an optional constant factor (matmul, einsum, elementwise
  ``*``, transpose, ``sum`` and scalar multiplication all become this);
- ``combine``: elementwise ``+`` / ``-`` (params: +1 / -1), ``maximum`` / ``minimum`` ("max" / "min") of
  same-shaped operands (a union: an entry stored in either operand);
- ``map``: a zero-preserving elementwise function of one operand (params: ``("abs",)``, ``("pow", k)``,
  ``("div", scalar)``);
- ``ewise``: an elementwise expression over its operands, with NumPy's broadcasting (params: the expression
  as nested tuples and how each operand is read, see planner/elementwise.py): built by the tracer for NumPy's
  functions on dense values (tracer/dense_ops.py) and by the planner for fused elementwise chains;
- ``reduce``: ``max`` / ``min`` over axes (params: kind, axes, keepdims), a dense result; after planning, a
  fourth param when an elementwise expression of its operands was fused in (planner/elementwise.py);
- ``view``: a dense operand read through an affine map: indexing, unit axes, a diagonal (params: the spec,
  see tracer/indexing.py).
- ``gather``: an operand read at an integer-array index (``args[1]``) and / or, for a sparse operand, row /
  column slices (params: the key, see tracer/gather.py).

Nodes are hash-consed (one object per distinct structure), so equality is identity and a trace prints and
keys in time linear in its distinct nodes.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from splyce.tensors.formats import Format


@dataclass(frozen=True)
class TensorType:
    """Shape, dtype (a NumPy dtype name) and format (``None`` for a dense tensor)."""

    shape: tuple[int, ...]
    dtype: str
    format: Format | None
    # a scipy BSR / DIA / COO argument held in its own format ("bsr 4x4", "dia", "coo": tensors/held.py), read
    # by the trace as the CSR ``format``; None for every other value (results and intermediates never hold one)
    stored: str | None = None

    def __hash__(self) -> int:   # part of every cache lookup: computed once
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.shape, self.dtype, self.format, self.stored))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_sparse(self) -> bool:
        return self.format is not None and not self.format.is_dense

    def __str__(self) -> str:
        dims = "x".join(map(str, self.shape)) or "scalar"
        held = f" (held as {self.stored})" if self.stored else ""
        return f"{dims}x{self.dtype}" + (f" #{self.format}" if self.is_sparse else "") + held


class Node:
    """One traced value. Nodes are hash-consed: building a node equal to a live one returns that node, so
    equality is identity, hashing is O(1), and a value used twice is one node (a DAG, never re-walked as a
    tree). Immutable once built."""

    __slots__ = ("op", "args", "params", "type", "__weakref__")
    op: str                       # "input" | "contract" | "combine" | "map" | "ewise" | "reduce" | "view" | "gather"
    args: tuple["Node", ...]
    params: tuple                 # hashable op parameters (see the module docstring)
    type: TensorType

    _table: "weakref.WeakValueDictionary[tuple, Node]" = weakref.WeakValueDictionary()
    _lock = threading.Lock()

    def __new__(cls, op: str, args: tuple, params: tuple, type: TensorType):
        args = tuple(args)
        # The args are interned, so their identities stand for their structure; they stay alive (and their
        # ids unique) as long as the node holding them does.
        key = (op, tuple(map(id, args)), _canonical(params), type)
        with cls._lock:
            node = cls._table.get(key)
            if node is None:
                node = object.__new__(cls)
                for name, value in (("op", op), ("args", args), ("params", tuple(params)), ("type", type)):
                    object.__setattr__(node, name, value)
                cls._table[key] = node
        return node

    def __setattr__(self, name, value):
        raise AttributeError("trace nodes are immutable")

    def __reduce__(self):
        return (Node, (self.op, self.args, self.params, self.type))

    def __repr__(self) -> str:   # shallow: a deep repr of a DAG is exponential in its depth
        return f"Node({self.op}, {len(self.args)} args, {self.params}, {self.type})"

    def walk(self) -> list["Node"]:
        """Nodes in dependency order, each once (iterative: deep chains do not hit the recursion limit)."""
        return walk([self])


def walk(roots) -> list[Node]:
    """The nodes reachable from ``roots`` in dependency order (arguments first), each once."""
    order: dict[Node, None] = {}
    stack = [(node, False) for node in reversed(tuple(roots))]
    while stack:
        node, expanded = stack.pop()
        if node in order:
            continue
        if expanded:
            order[node] = None
            continue
        stack.append((node, True))
        stack.extend((arg, False) for arg in reversed(node.args) if arg not in order)
    return list(order)


def _canonical(value):
    """A key for a params value that keeps apart what ``==`` merges but code generation does not:
    ``0.0`` / ``-0.0``, ``1`` / ``1.0`` / ``True`` (NaN keys by its bits, so equal NaNs share)."""
    if isinstance(value, float):
        return ("f", value.hex())
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    if isinstance(value, tuple):
        return tuple(_canonical(v) for v in value)
    if dataclasses.is_dataclass(value):
        return (type(value).__name__,) + tuple(_canonical(getattr(value, f.name))
                                               for f in dataclasses.fields(value))
    return value


@dataclass(frozen=True)
class ContractParams:
    """``out = scale * einsum(",".join(inputs) + "->" + output, *args)``; ``order``: the loop order the
    planner chose (outermost first), or None for the lowering's heuristic; ``format_left``: the sparse result
    format was left to splyce (``out_format="sparse"`` or a sparse default, not a ``Format``), so the planner
    may choose its storage details (planner/unordered.py, ``unordered_product_results``). Not printed: it changes
    generated code only through the result type the planner gives, which the plan's text and the disk key show."""

    inputs: tuple[str, ...]
    output: str
    scale: float | int | None = None
    order: str | None = None
    format_left: bool = False

    def __str__(self) -> str:
        text = ",".join(self.inputs) + "->" + self.output
        if self.scale is not None:
            text += f", scale={self.scale!r}"
        return text if self.order is None else f"{text}, order={self.order}"


@dataclass(frozen=True)
class Trace:
    """A traced function: its input types, output nodes, and the output format requested per output."""

    inputs: tuple[TensorType, ...]
    outputs: tuple[Node, ...]
    # (output position, input index): a dense result the kernel writes over that input's buffer, a fresh
    # array the plan computed before the kernel and nothing reads after it (planner/in_place.py)
    in_place: tuple[tuple[int, int], ...] = ()
    # per output, True where it is a sparse argument or its transpose returned as is (tracer/views.py): its
    # result shares that argument's buffers, as scipy's ``A.T``; empty: none
    views: tuple[bool, ...] = ()

    def as_text(self) -> str:
        """The trace as text, one line per distinct node (linear in their number): the canonical form that
        the disk cache keys on."""
        names: dict[Node, str] = {}
        lines = []
        for node in walk(self.outputs):
            if node.op == "input":
                names[node] = f"%arg{node.params[0]}"
                continue
            names[node] = name = f"%{len(lines)}"
            operands = ", ".join(names[a] for a in node.args)
            params = params_text(node)
            lines.append(f"  {name} = {node.op}[{params}]({operands}) : {node.type}")
        header = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(self.inputs))
        results = ", ".join(names[o] for o in self.outputs)
        over = "".join(f" ({names[self.outputs[o]]} over %arg{i})" for o, i in self.in_place)
        return f"trace({header}) {{\n" + "\n".join(lines) + f"\n  return {results}{over}\n}}"


def expression_text(expr) -> str:
    """An elementwise expression (planner/elementwise.py) as text: ``$k`` for operand k, constants by repr."""
    if expr[0] == "arg":
        return f"${expr[1]}"
    if expr[0] == "const":
        return repr(expr[1])
    head, *rest = expr
    return f"{head}(" + ", ".join(expression_text(x) if isinstance(x, tuple) else repr(x) for x in rest) + ")"


def params_text(node: "Node") -> str:
    """A node's params as the trace and the plan print them: an ``ewise`` node's expression, a reduction's
    kind, axes and keepdims, then the expression fused into it (planner/elementwise.py) after ``of``."""
    if node.op == "ewise":
        return ewise_text(node.params, node.type.ndim)
    if node.op == "reduce" and len(node.params) > 3:
        return ", ".join(str(p) for p in node.params[:3]) + " of " + expression_text(node.params[3])
    if node.op == "gather":
        return key_text(node.params[0])
    return ", ".join(str(p) for p in node.params if p is not None)


def key_text(spec: tuple) -> str:
    """A ``gather`` node's key as NumPy writes it: ``idx, 0:5``, ``2, None, 4:0:-2`` (tracer/gather.py)."""
    parts = []
    for entry in spec:
        if entry[0] == "s":
            _, start, step, length = entry
            stop = start + step * length
            parts.append(f"{start}:{stop if stop >= 0 else ''}" + (f":{step}" if step != 1 else ""))
        elif entry[0] == "i":
            parts.append(str(entry[1]))
        elif entry[0] == "n":
            parts.append("None")
        else:
            parts.append("idx")
    return ", ".join(parts)


def ewise_text(params: tuple, ndim: int) -> str:
    """An ``ewise`` node's params as text: the expression, then how each operand is read when one is
    broadcast (``reads ab,b``)."""
    text = expression_text(params[0])
    reads = params[1] if len(params) > 1 else ()
    if any(r != "abcd"[:ndim] for r in reads):
        text += f"; reads {','.join(reads)}"
    return text


def result_dtype(*dtypes: str) -> str:
    return np.result_type(*[np.dtype(d) for d in dtypes]).name
