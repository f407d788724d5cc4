"""Views of dense traced values: basic indexing (integers, slices, ``None``, ``...``), unit-axis reshapes,
squeezes and diagonals, as ``view`` nodes (integer-array indices and sparse operands: tracer/gather.py).

A ``view`` node reads its one dense operand through an affine map: its params are ``(spec,)`` with, per axis
of the operand, ``("at", i)`` (a fixed index: the axis is dropped) or ``("dim", k, start, step)`` (result
axis ``k`` reads ``start + step * index``); result axes that no operand axis reads are unit axes (``None``).
A view of a view composes into one, and a view that reads its operand whole is the operand itself, so
``d[:, None]`` squeezed back is ``d`` (the tracer then reads ``a * d[:, None]`` as the row scaling
``einsum("ij,i->ij", a, d)``). Shapes stay static: a mask or a traced index raises.
"""

from __future__ import annotations

import numbers

import numpy as np

from splyce.tracer import gather
from splyce.tracer.base import MAX_RANK, TraceError, Tracer, _node
from splyce.tracer.ir import Node, TensorType


def view(node: Node, spec: tuple, shape: tuple[int, ...], op: str = "index") -> Node:
    """The node reading ``node`` through ``spec`` (composed with ``node``'s own view; the operand itself
    when the view reads all of it in place)."""
    if node.op == "view":
        spec = _compose(node.params[0], spec)
        node = node.args[0]
    if len(shape) > MAX_RANK:
        raise TraceError(f"{op}: results of rank up to {MAX_RANK} are supported, got shape {shape}")
    if any(n == 0 for n in shape):
        raise TraceError(f"{op}: empty results (shape {shape}) are not supported inside @splyce.jit")
    if shape == node.type.shape and spec == tuple(("dim", d, 0, 1) for d in range(len(shape))):
        return node
    return Node("view", (node,), (spec,), TensorType(tuple(shape), node.type.dtype, None))


def _compose(inner: tuple, outer: tuple) -> tuple:
    """The spec of ``outer`` applied to the result of ``inner`` (both over their own operand's axes)."""
    out = []
    for entry in inner:
        if entry[0] == "at":
            out.append(entry)
            continue
        _, k, start, step = entry
        read = outer[k]
        if read[0] == "at":
            out.append(("at", start + step * read[1]))
        else:
            _, k2, start2, step2 = read
            out.append(("dim", k2, start + step * start2, step * step2))
    return tuple(out)


def dense_node(x, op: str) -> Node:
    node = _node(x, op)
    if node.type.is_sparse:
        raise TraceError(f"{op}: not supported on a sparse tensor inside @splyce.jit; write a.todense() first "
                         "(or a.multiply(m) / a @ x for the products that keep it sparse)")
    return node


def getitem(x, key) -> Tracer:
    """NumPy's basic indexing of a dense value; an integer-array index, or any index of a sparse value, is
    a gather (tracer/gather.py)."""
    key = key if isinstance(key, tuple) else (key,)
    if _node(x, "index").type.is_sparse:
        return gather.sparse_gather(x, key)
    if any(gather.is_array_index(item) for item in key):
        return gather.dense_gather(x, key)
    node = dense_node(x, "index")
    for item in key:
        if not (item is None or item is Ellipsis or isinstance(item, slice)
                or (isinstance(item, numbers.Integral) and not isinstance(item, bool))):
            raise TraceError(f"index: unsupported index {item!r} of type {type(item).__name__}")
    if sum(item is Ellipsis for item in key) > 1:
        raise TraceError("index: an index can only have a single ellipsis ('...')")
    used = sum(1 for item in key if item is not None and item is not Ellipsis)
    shape_in = node.type.shape
    if used > len(shape_in):
        raise TraceError(f"index: too many indices for a tensor of rank {len(shape_in)}")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape_in) - used) + key[at + 1:]
    else:
        key = key + (slice(None),) * (len(shape_in) - used)
    spec, shape, d = [], [], 0
    for item in key:
        if item is None:
            shape.append(1)
            continue
        n = shape_in[d]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            spec.append(("dim", len(shape), start, step))
            shape.append(len(range(start, stop, step)))
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {d} with size {n}")
            spec.append(("at", i % n))
        d += 1
    return Tracer(view(node, tuple(spec), tuple(shape)))


def squeeze(node: Node, axes) -> Node:
    """``node`` without the unit ``axes``."""
    spec, shape = [], []
    for d, n in enumerate(node.type.shape):
        if d in axes:
            if n != 1:
                raise TraceError(f"squeeze: axis {d} has size {n}, not 1")
            spec.append(("at", 0))
        else:
            spec.append(("dim", len(shape), 0, 1))
            shape.append(n)
    return view(node, tuple(spec), tuple(shape), "squeeze")


def expand(node: Node, shape: tuple[int, ...], op: str = "reshape") -> Node:
    """``node`` reshaped to ``shape`` when that only inserts or removes unit axes (no data moves)."""
    old = node.type.shape
    if [n for n in old if n != 1] != [n for n in shape if n != 1]:
        raise TraceError(f"{op}: only reshapes that add or remove axes of size 1 are supported inside "
                         f"@splyce.jit, not {old} -> {shape}")
    spec, k = [], 0
    for n in old:
        if n == 1:
            spec.append(("at", 0))
            continue
        while shape[k] == 1:
            k += 1
        spec.append(("dim", k, 0, 1))
        k += 1
    return view(node, tuple(spec), tuple(shape), op)


def reshape(x, *shape) -> Tracer:
    node = dense_node(x, "reshape")
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    size = int(np.prod(node.type.shape, dtype=np.int64))
    if list(shape).count(-1) > 1:
        raise TraceError("reshape: can only specify one unknown dimension")
    if -1 in shape:
        known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
        shape = tuple(size // known if n == -1 else n for n in shape)
    shape = tuple(int(n) for n in shape)
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return Tracer(expand(node, shape))


def diagonal_length(shape: tuple[int, ...], k: int) -> int:
    """The length of a 2-D shape's ``k``-th diagonal (NumPy's and scipy's: 0 past the corner)."""
    m, n = shape
    return max(0, min(m, n - k) if k >= 0 else min(m + k, n))


def diagonal_dense(node: Node, k: int = 0) -> Node:
    """The ``k``-th diagonal of a dense matrix (``k`` > 0 above the main one), a view."""
    if node.type.ndim != 2:
        raise TraceError(f"diagonal: a 2-D tensor is needed, got shape {node.type.shape}")
    n = diagonal_length(node.type.shape, k)
    rows, cols = (0, k) if k >= 0 else (-k, 0)
    return view(node, (("dim", 0, rows, 1), ("dim", 0, cols, 1)), (n,), "diagonal")
