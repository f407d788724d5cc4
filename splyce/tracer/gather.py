"""Gathers: indexing by an integer array (``x[perm]``, ``X[idx]``, ``X[:, q]``, ``np.take``) of dense values,
and row / column slices and gathers of sparse CSR / CSC values (``X[a:b]``, ``X[idx]``, ``X[:, q]``), as
``gather`` nodes; the refusals of boolean masks and item assignment.

A ``gather`` node reads an operand (an input: an argument or a constant; or another gather) at an index
(an input too, or none): its args are ``(operand,)`` or ``(operand, index)``, its one param the key, one
entry per operand axis after ``...`` is expanded, plus ``None``\\ s: ``("s", start, step, length)`` (a
slice, resolved at trace time), ``("i", i)`` (an integer, wrapped), ``("n",)`` (``None``: a unit axis),
``("a",)`` (the index array, ``args[1]``). The planner computes a gather of an input before the kernel, on
the host, from the call's values (planner/gathers.py): the kernel reads the gathered value as one more
input, so the work is O(selected) (and a contiguous row slice of a CSR argument is a view of its buffers).
A gather of a dense value computed in the kernel (``(a @ x)[perm]``) is a ``linalg.generic`` of the kernel
reading it by ``tensor.extract`` (lowering/dense.py), at an index the planner checks and wraps before the
kernel. Either way every index is checked on every call before native code reads anything: one out of
``[-n, n)`` raises NumPy's ``IndexError`` ("index 7 is out of bounds for axis 0 with size 5"), a negative
one wraps as in NumPy.

Shapes stay static: the result's shape is the index's (known at trace time). An index computed inside
the function is read in the kernel only when its values are in range by construction (``labels[s.argmax(
axis=1)]``: an argmax along an axis no longer than the indexed one); any other (``x[np.argsort(x)]``,
``x[i + 1]``: the kernel does not check bounds) and a slice or gather of a sparse value computed inside the
function that cannot be pushed down to the arguments (``_pushed_down``: ``(a * b)[rows]`` is
``a[rows] * b[rows]``) are refused with what to write instead.
"""

from __future__ import annotations

import numbers

import numpy as np

from splyce.tracer.base import MAX_RANK, TraceError, Tracer, _node, contract, relabel_axes
from splyce.tracer.ir import Node, TensorType
from splyce.tensors.formats import Format, compressed_order, relabelled

MASK_HINT = ("a boolean mask selects a data-dependent number of entries, which a traced shape cannot hold "
             "(as in JAX); keep the shape: write np.where(mask, x, 0) (or x * mask), and for a sum over the "
             "selected entries np.where(mask, x, 0).sum()")


def is_array_index(item) -> bool:
    return isinstance(item, (Tracer, np.ndarray, list)) or (
        hasattr(item, "shape") and hasattr(item, "dtype") and not isinstance(item, np.generic))


def _refuse_masks(key: tuple) -> None:
    for item in key:
        if is_array_index(item) and np.dtype(item.dtype if hasattr(item, "dtype") else np.asarray(item).dtype) \
                == np.bool_:
            raise TraceError(f"index: boolean mask indexing is not supported inside @splyce.jit: {MASK_HINT}")


def in_range(node: Node) -> int | None:
    """The bound ``n`` when every value of the computed integer ``node`` is known to lie in ``[0, n)`` (an
    ``argmax`` / ``argmin`` along an axis of size ``n``; NumPy's ``argsort`` / ``argpartition`` along an axis
    of size ``n``, a permutation of ``range(n)`` computed on the host between kernels; or a view of one: a
    slice ``[:, :k]``, unit axes), else None."""
    while node.op == "view":
        node = node.args[0]
    if node.op == "argreduce":
        return node.args[0].type.shape[node.params[1]]
    if node.op == "host" and node.params[0] in ("argsort", "argpartition"):
        statics = dict(node.params[1])
        axis = statics.get("axis", -1)
        (operand,) = node.args
        shape = operand.type.shape
        if axis is None:
            return int(np.prod(shape))
        return shape[axis] if shape else 1
    return None


def _index_node(item, n: int, sparse: bool = False) -> Node:
    """The trace node of an index array into an axis of size ``n``: an input (argument or constant), a frozen
    literal, a value computed on the host before the kernel, or (dense operands) an argmax / argmin known to
    be in range."""
    if isinstance(item, (list, np.ndarray)):     # a literal: frozen, as an index type the kernels take
        item = np.asarray(item)
        item = item.astype(np.int64) if item.dtype.kind in "iu" and item.dtype != np.int64 else item
    node = _node(item, "index")
    dtype = np.dtype(node.type.dtype)
    if dtype == np.bool_:
        raise TraceError(f"index: boolean mask indexing is not supported inside @splyce.jit: {MASK_HINT}")
    if dtype.kind not in "iu":
        raise TraceError(f"index: arrays used as indices must be of integer type, got {dtype}")
    if node.type.is_sparse:
        raise TraceError("index: a sparse index array is not supported; pass the indices as a dense integer "
                         "array")
    host = _on_host(node)
    bound = in_range(node) if host is None and not sparse else None
    if bound is not None and bound <= n:
        return node      # read in the kernel, where every value is in range by construction
    if bound is not None:
        base = node
        while base.op == "view":
            base = base.args[0]
        what = "an argsort / argpartition" if base.op == "host" else "an argmax / argmin"
        raise TraceError(f"index: {what} along an axis of size {bound} indexes an axis of size {n}, "
                         "so it may be out of bounds (the kernel does not check them); index an axis of at "
                         f"least {bound}")
    node = host
    if node is None:
        raise TraceError("index: an index array computed inside the jitted function is not supported (its "
                         "values are only known when the kernel runs, and the kernel does not check bounds); "
                         "pass the index array as an argument of the function (it is checked on every call), "
                         "or compute it outside")
    return node


def _slice_entry(item: slice, n: int) -> tuple:
    start, stop, step = item.indices(n)
    return ("s", start, step, len(range(start, stop, step)))


def _expand(key: tuple, ndim: int) -> list:
    if sum(item is Ellipsis for item in key) > 1:
        raise TraceError("index: an index can only have a single ellipsis ('...')")
    used = sum(1 for item in key if item is not None and item is not Ellipsis)
    if used > ndim:
        raise TraceError(f"index: too many indices for a tensor of rank {ndim}")
    if Ellipsis in [item for item in key if not is_array_index(item)]:
        at = next(k for k, item in enumerate(key) if not is_array_index(item) and item is Ellipsis)
        return list(key[:at]) + [slice(None)] * (ndim - used) + list(key[at + 1:])
    return list(key) + [slice(None)] * (ndim - used)


def _is_host(node: Node) -> bool:
    """Whether the planner computes ``node`` before the kernel: an input, or a gather of such values."""
    return node.op == "input" or (node.op == "gather" and all(_is_host(a) for a in node.args))


def _on_host(node: Node) -> Node | None:
    """``node`` as a value the planner computes before the kernel (an input, a gather of such values, or a
    basic slice of one, made a gather), else None."""
    if _is_host(node):
        return node
    if node.op != "view" or not _is_host(node.args[0]):
        return None
    (spec,) = node.params
    dims = [entry[1] for entry in spec if entry[0] == "dim"]
    if dims != list(range(node.type.ndim)):        # unit axes inserted, axes reordered or read twice
        return None
    key = tuple(("i", entry[1]) if entry[0] == "at" else ("s", entry[2], entry[3], node.type.shape[entry[1]])
                for entry in spec)
    return Node("gather", node.args, (key,), node.type)


def _operand(x, op: str = "index") -> Node:
    """The gathered operand: on the host when it can be (computed before the kernel), else a dense value
    the kernel computes (read by ``tensor.extract`` in the kernel, lowering/dense.py)."""
    node = _on_host(_node(x, op))
    if node is not None:
        return node
    node = _node(x, op)
    if node.type.is_sparse:
        raise TraceError(f"{op}: a slice or gather of a sparse value computed inside the function is pushed down "
                         "to the arguments through products, unions and zero-preserving functions ((a * b)[rows] "
                         "is a[rows] * b[rows]), but this one reaches a dense value computed in the kernel, or "
                         "its key is not slices and one 1-D index array; index the arguments instead (the "
                         "entries at index pairs of a product of arguments, c[u, v] with c = b @ b.T: "
                         "b[u].multiply(b[v]).sum(axis=1))")
    return node


def dense_gather(x, key: tuple) -> Tracer:
    """NumPy's indexing of a dense value by one integer array (with integers, slices, ``None``, ``...``)."""
    _refuse_masks(key)
    shape_in = _node(x, "index").type.shape
    items = _expand(key, len(shape_in))
    arrays = [item for item in items if is_array_index(item)]
    if len(arrays) > 1:
        raise TraceError("index: one integer array per index is supported inside @splyce.jit (several arrays "
                         "pair their entries); index one axis at a time, e.g. x[i][:, j] for the outer "
                         "product of the selections")
    at = next(k for k, item in enumerate(items) if item is arrays[0])
    axis = sum(1 for item in items[:at] if item is not None)        # the operand axis the array indexes
    index = _index_node(arrays[0], shape_in[axis])
    node = _operand(x)
    spec, shape, advanced, d = [], [], [], 0
    for item in items:
        if item is None:
            spec.append(("n",))
            shape.append(1)
            continue
        n = shape_in[d]
        if is_array_index(item):
            advanced.append(len(spec))
            spec.append(("a",))
            shape.append(None)
        elif isinstance(item, slice):
            spec.append(_slice_entry(item, n))
            shape.append(spec[-1][3])
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {d} with size {n}")
            advanced.append(len(spec))
            spec.append(("i", i % n))
            shape.append(None)
        else:
            raise TraceError(f"index: unsupported index {item!r} of type {type(item).__name__}")
        d += 1
    axes, at = result_axes(tuple(spec), index.type.ndim)
    out = [0] * (len(shape) - len(advanced) + index.type.ndim)
    for entry, n, k in zip(spec, shape, axes):
        if k is not None:
            out[k] = n
    out[at:at + index.type.ndim] = index.type.shape
    return Tracer(_gather(node, index, tuple(spec), tuple(out), None))


def result_axes(spec: tuple, index_ndim: int) -> tuple[tuple, int]:
    """Per entry of a dense gather's ``spec``, the result axis it makes (None for the integers and the
    array), and the first result axis of the index's axes. NumPy's rule: the advanced indices (the array
    and the integers) broadcast to the array's shape, placed where they stand when they are adjacent, else
    first."""
    advanced = [k for k, e in enumerate(spec) if e[0] in ("a", "i")]
    adjacent = advanced == list(range(advanced[0], advanced[0] + len(advanced)))
    at = sum(1 for e in spec[:advanced[0]] if e[0] in ("s", "n")) if adjacent else 0
    axes, k = [], 0
    for e in spec:
        if e[0] in ("a", "i"):
            axes.append(None)
            continue
        if k == at:
            k += index_ndim
        axes.append(k)
        k += 1
    return tuple(axes), at


def sparse_gather(x, key: tuple) -> Tracer:
    """scipy's row / column slicing and integer-array indexing of a CSR / CSC value: a sparse result in the
    operand's format."""
    _refuse_masks(key)
    outer = _node(x, "index")
    axes = relabel_axes(outer)
    if axes == (1, 0) and _on_host(outer) is None and _on_host(outer.args[0]) is not None:
        # a.T[k0, k1] of an input a (scipy's a.T: the same buffers in the other order): a[k1, k0].T, so the
        # selection reads a's buffers and the transpose is relabelled in place (planner/transposed_inputs.py)
        items = _expand(key, 2)
        if any(item is None for item in items):
            raise TraceError("index: None (a new axis) does not index a sparse matrix; write a.todense()[...] "
                             "for a dense array")
        inner = sparse_gather(Tracer(outer.args[0]), (items[1], items[0])).node
        return Tracer(contract([inner], ["ij"], "ji", out_format=relabelled(inner.type.format, (1, 0)),
                               op="transpose").node)
    pushed = _pushed_down(outer, key)
    if pushed is not None:
        return Tracer(pushed)
    node = _operand(x)
    t = node.type
    if t.ndim != 2:
        raise TraceError(f"index: slicing and integer-array indexing of a sparse tensor need a matrix, got {t}; "
                         "write a.todense()[...] for a dense array")
    fmt = t.format
    if compressed_order(fmt) is None:    # a COO (read as DCSR) or another format: re-stored as CSR first, O(nnz)
        fmt = Format(("dense", "compressed"), (0, 1), fmt.pos_width, fmt.crd_width)
    items = _expand(key, 2)
    if len(items) != 2 or any(item is None for item in items):
        raise TraceError("index: None (a new axis) does not index a sparse matrix; write a.todense()[...] "
                         "for a dense array")
    spec, index = [], None
    for d, item in enumerate(items):
        n = t.shape[d]
        if isinstance(item, slice):
            spec.append(_slice_entry(item, n))
        elif is_array_index(item):
            if index is not None:
                raise TraceError("index: a[rows, cols] with two index arrays (entries at pairs of indices, a "
                                 "data-dependent pattern) is not supported on a sparse matrix; select one axis "
                                 "at a time: a[rows][:, cols]")
            index = _index_node(item, n, sparse=True)
            if index.type.ndim != 1:
                raise TraceError(f"index: a sparse matrix is indexed by a 1-D integer array, got shape "
                                 f"{index.type.shape}")
            spec.append(("a",))
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            i = int(item)
            hint = f"a[{i}:{i + 1}]" if d == 0 else f"a[:, {i}:{i + 1}]"
            raise TraceError(f"index: an integer index of a sparse matrix (a {'row' if d == 0 else 'column'}) "
                             f"is not supported inside @splyce.jit; write {hint} (a sparse matrix of one "
                             f"{'row' if d == 0 else 'column'}), or {hint}.todense() for a dense array")
        else:
            raise TraceError(f"index: unsupported index {item!r} of type {type(item).__name__}")
    shape = tuple(index.type.shape[0] if e[0] == "a" else e[3] for e in spec)
    if spec == [("s", 0, 1, t.shape[0]), ("s", 0, 1, t.shape[1])] and fmt == t.format:
        return Tracer(node)
    return Tracer(_gather(node, index, tuple(spec), shape, fmt))


def _pushed_down(node: Node, key: tuple) -> Node | None:
    """A selection of a sparse value computed inside the function, as the same computation on the selected
    operands (``(a @ b)[rows]`` as ``a[rows] @ b``, ``(a * b)[:, q]`` as ``a[:, q] * b[:, q]``): rows and columns
    one after the other, each pushed through contractions, zero-preserving maps and unions down to the
    arguments, which are selected before the kernel. None when the value is an input (or a gather of one),
    or when a selection cannot be pushed down (an operand it would have to select is a dense value
    computed in the kernel, or the key is not slices and one 1-D index array)."""
    if _is_host(node) or node.type.ndim != 2 or relabel_axes(node) == (1, 0):
        return None
    items = _expand(key, 2)
    if len(items) != 2 or not all(isinstance(i, slice) or (is_array_index(i) and _ndim(i) == 1) for i in items):
        return None
    for axis, item in enumerate(items):
        if isinstance(item, slice):
            entry, index = _slice_entry(item, node.type.shape[axis]), None
            if entry == ("s", 0, 1, node.type.shape[axis]):
                continue
        else:
            entry, index = ("a",), _index_node(item, node.type.shape[axis], sparse=True)
        node = _select(node, axis, entry, index)
        if node is None:
            return None
    return node


def _ndim(item) -> int:
    return item.ndim if hasattr(item, "ndim") else np.asarray(item).ndim


def _select(node: Node, axis: int, entry: tuple, index: Node | None) -> Node | None:
    """``node`` selected along ``axis`` by ``entry`` (a slice entry, or ``("a",)`` at the 1-D ``index``), as a
    gather of an input or pushed into the operands of the op that computes it; None where it cannot be."""
    length = entry[3] if entry[0] == "s" else index.type.shape[0]
    shape = node.type.shape[:axis] + (length,) + node.type.shape[axis + 1:]
    if length == 0:
        return None
    if _is_host(node):
        spec = tuple(entry if d == axis else ("s", 0, 1, n) for d, n in enumerate(node.type.shape))
        fmt = node.type.format
        if fmt is not None and (node.type.ndim != 2 or compressed_order(fmt) is None):
            if node.type.ndim != 2:
                return None
            fmt = Format(("dense", "compressed"), (0, 1), fmt.pos_width, fmt.crd_width)
        args = (node,) if index is None else (node, index)
        return Node("gather", args, (spec,), TensorType(shape, node.type.dtype, fmt))
    if node.op == "contract" and node.params[0].order is None:
        params = node.params[0]
        letter = params.output[axis]
        args = []
        for subs, arg in zip(params.inputs, node.args):
            if letter in subs:
                arg = _select(arg, subs.index(letter), entry, index)
                if arg is None:
                    return None
            args.append(arg)
    elif node.op in ("map", "combine"):
        args = [_select(arg, axis, entry, index) for arg in node.args]
        if any(arg is None for arg in args):
            return None
    else:
        return None
    return Node(node.op, tuple(args), node.params, TensorType(shape, node.type.dtype, node.type.format))


def _gather(node: Node, index: Node | None, spec: tuple, shape: tuple, fmt) -> Node:
    if len(shape) > MAX_RANK:
        raise TraceError(f"index: results of rank up to {MAX_RANK} are supported, got shape {shape}")
    if any(n == 0 for n in shape):
        raise TraceError(f"index: empty results (shape {shape}) are not supported inside @splyce.jit")
    args = (node,) if index is None else (node, index)
    return Node("gather", args, (spec,), TensorType(tuple(shape), node.type.dtype, fmt))


def take(a, indices, axis=None) -> Tracer:
    """``np.take(a, indices, axis)`` of a dense value (``axis=None``: of a 1-D one)."""
    node = _node(a, "take")
    if node.type.is_sparse:
        raise TraceError("take: not supported on a sparse tensor; write a[idx] (rows) or a[:, idx] (columns), "
                         "which keep it sparse")
    ndim = node.type.ndim
    if axis is None:
        if ndim != 1:
            raise TraceError("take: axis=None flattens, which is supported for 1-D arrays only inside "
                             "@splyce.jit; pass axis=")
        axis = 0
    if not isinstance(axis, numbers.Integral) or not -ndim <= int(axis) < ndim:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    key = (slice(None),) * (int(axis) % ndim) + (indices if is_array_index(indices) else np.asarray(indices),)
    return dense_gather(a, key)


def setitem(x, key, value):
    """Item assignment: refused as JAX refuses it (a traced value is immutable), naming what to write."""
    key_items = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Tracer) and k.node.type.dtype == "bool" for k in key_items):
        raise TraceError("item assignment y[mask] = v is not supported inside @splyce.jit (traced values are "
                         "immutable, as in JAX); write y = np.where(mask, v, y), e.g. y = np.where(y < 0.1, 0.0, y)")
    if any(isinstance(k, Tracer) for k in key_items):
        raise TraceError("item assignment y[i] = v with a traced index is not supported inside @splyce.jit "
                         "(traced values are immutable, as in JAX); write y = np.where(np.arange(n) == i, v, "
                         "y) with the positions as an array argument")
    raise TraceError("item assignment y[...] = v is not supported inside @splyce.jit (traced values are "
                     "immutable, as in JAX); write y = np.where(mask, v, y) with a mask of the positions "
                     "(e.g. mask = np.arange(n) == 0 for y[0] = v)")
