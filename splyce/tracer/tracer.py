"""The operations on traced values, with NumPy's and scipy's rules: a value stored sparse keeps scipy's
rules (a nonzero scalar added to it, or a division by its implicit zeros, is refused with what to write
instead), a dense value takes NumPy's (dense_ops.py). Shapes, dtypes and formats are inferred here, at trace
time, so a shape mismatch or an unsupported operation raises before anything is compiled.

The ``Tracer`` class is defined in base.py; its operators and methods are installed at the end of this module
(``_install``), where every operation they name is defined.
"""

from __future__ import annotations

import numbers

import numpy as np

from splyce.tensors.formats import relabelled
from splyce.tracer import dense_ops, gather, indexing, views
from splyce.errors import TraceError  # re-exported: defined once in splyce.errors
from splyce.tracer.base import (MAX_OPERANDS, MAX_RANK, OUT_FORMATS, Tracer, _axes, _letters, _node,
                                _scalar_dtype, check_out_format, check_reducible, contract, copy_of,
                                default_sparse_format, diagonal_vector, is_array, parse_einsum, refuse_dtype,
                                relabel_axes, resolve_format, scalar_value)
from splyce.tracer.dense_ops import apply, astype, ufunc
from splyce.tracer.ir import Node, TensorType, result_dtype

__all__ = ["MAX_OPERANDS", "MAX_RANK", "OUT_FORMATS", "TraceError", "Tracer", "check_out_format", "contract",
           "copy_of", "default_sparse_format", "parse_einsum", "refuse_dtype", "relabel_axes", "resolve_format"]


def _sparse(x) -> bool:
    return isinstance(x, Tracer) and x.node.type.is_sparse


def _is_tensor(x) -> bool:
    return isinstance(x, Tracer) or (is_array(x) and scalar_value(x) is None)


def matmul(a, b, *, out_format=None) -> Tracer:
    na, nb = _node(a, "matmul"), _node(b, "matmul")
    ra, rb = na.type.ndim, nb.type.ndim
    if not (1 <= ra <= 2 and 1 <= rb <= 2):
        raise TraceError(f"matmul: operands must be 1-D or 2-D, got shapes {na.type.shape} and {nb.type.shape}")
    sa = "ik" if ra == 2 else "k"
    sb = "kj" if rb == 2 else "k"
    if na.type.shape[-1] != nb.type.shape[0]:
        raise TraceError(f"matmul: shapes {na.type.shape} and {nb.type.shape} are not aligned "
                         f"({na.type.shape[-1]} != {nb.type.shape[0]})")
    out = sa.replace("k", "") + sb.replace("k", "")
    if out_format is None:
        scaled = _diagonal_product(na, nb)
        if scaled is not None:
            return scaled
    if out_format is None and ra == rb == 2 and na.type.is_sparse and nb.type.is_sparse:
        out_format = "sparse"   # sparse @ sparse is sparse, as scipy, pydata and BCOO (the planner may fuse it away)
    return contract([na, nb], [sa, sb], out, out_format=out_format, op="matmul")


def _diagonal_product(na: Node, nb: Node) -> Tracer | None:
    """``diags(d) @ b`` and ``a @ diags(d)`` as the row / column scalings they are (``b * d[:, None]``): in
    ``b``'s (``a``'s) pattern when it is sparse, as scipy's product, and never a dense n x n matrix."""
    left, right = diagonal_vector(na), diagonal_vector(nb)
    if left is not None and nb.type.ndim == 2:
        return contract([nb, left], ["ij", "i"], "ij", op="matmul", scaling=nb.type.is_sparse)
    if left is not None:     # diags(d) @ x: the elementwise product, dense
        return contract([nb, left], ["i", "i"], "i", op="matmul", out_format="dense")
    if right is not None and na.type.ndim == 2:
        return contract([na, right], ["ij", "j"], "ij", op="matmul", scaling=na.type.is_sparse)
    if right is not None:    # x @ diags(d)
        return contract([na, right], ["j", "j"], "j", op="matmul", out_format="dense")
    return None


def absolute(a) -> Tracer:
    """NumPy's ``abs``: the real magnitude of complex values (complex128 -> float64), the identity on bools."""
    from splyce.native.dtypes import real_dtype

    na = _node(a, "abs")
    t = na.type
    return Tracer(Node("map", (na,), (("abs",),), TensorType(t.shape, real_dtype(t.dtype), t.format)))


def negative(a) -> Tracer:
    na = _node(a, "negative")
    if na.type.dtype == "bool":
        refuse_dtype("negative", "bool", "NumPy refuses it too: use ~ or logical_not")
    if na.type.dtype.startswith("complex"):   # complex.neg: NumPy negates the parts (never inf * 0 = NaN)
        return Tracer(Node("map", (na,), (("neg",),), na.type))
    return multiply(a, -1)


def conjugate(a) -> Tracer:
    """The complex conjugate (zero-preserving); real values are returned unchanged, as NumPy's."""
    na = _node(a, "conj")
    if not na.type.dtype.startswith("complex"):
        return Tracer(na)
    return Tracer(Node("map", (na,), (("conj",),), na.type))


def reduce_extremum(a, kind: str, axis=None, keepdims=False) -> Tracer:
    """``a.max(axis)`` / ``a.min(axis)`` as NumPy computes them on the dense equivalent: a sparse operand's
    implicit zeros take part, NaN propagates, and an empty reduction raises NumPy's ValueError. The result is
    dense (a NumPy array, a 0-d one for ``axis=None``)."""
    op = {"max": "max", "min": "min"}[kind]
    na = _node(a, op)
    ndim = na.type.ndim
    axes = _axes(axis, ndim, op)
    if not isinstance(keepdims, bool):
        raise TraceError(f"{op}: keepdims must be True or False, got {keepdims!r}")
    check_reducible(na.type.dtype, op)
    if any(na.type.shape[d] == 0 for d in axes):
        name = "maximum" if kind == "max" else "minimum"
        raise TraceError(f"zero-size array to reduction operation {name} which has no identity "
                         f"({op} over axes {tuple(sorted(axes))} of shape {na.type.shape})")
    shape = tuple(1 if d in axes else n for d, n in enumerate(na.type.shape) if keepdims or d not in axes)
    params = (kind, tuple(sorted(axes)), keepdims)
    return Tracer(Node("reduce", (na,), params, TensorType(shape, na.type.dtype, None)))


def transpose(a, axes=None, *, out_format=None) -> Tracer:
    na = _node(a, "transpose")
    ndim = na.type.ndim
    axes = tuple(reversed(range(ndim))) if axes is None else tuple(axes)
    if sorted(a % ndim if isinstance(a, int) else a for a in axes) != list(range(ndim)):
        raise TraceError(f"transpose: axes {axes} are not a permutation of range({ndim})")
    axes = tuple(a % ndim for a in axes)
    if out_format is None and na.type.is_sparse:
        # as scipy's ``csr.T`` is a CSC array over the same buffers: sparse, each level relabelled
        out_format = relabelled(na.type.format, axes)
    subs = _letters(ndim)
    out = contract([na], [subs], "".join(subs[a] for a in axes), out_format=out_format, op="transpose")
    if isinstance(a, Tracer) and relabel_axes(out.node) is not None:
        views.note(out, a)          # over a's buffers, as scipy's A.T: returned as a view of an argument
    return out


def einsum(subscripts: str, *operands, out_format=None, order: str | None = None) -> Tracer:
    """``order`` pins the loop order (outermost first) and the formulation as written: the planner then
    neither fuses, re-stores nor scatters this contraction's operands (the paper's kernels use it)."""
    inputs, output = parse_einsum(subscripts, len(operands))
    return contract([_node(x, "einsum") for x in operands], inputs, output, out_format=out_format,
                    order=order)


def _combine(a, b, sign, op: str, out_format=None) -> Tracer:
    """A union of same-shaped operands (``+``, ``-``, maximum / minimum): sparse when both are."""
    na, nb = _node(a, op), _node(b, op)
    if na.type.shape != nb.type.shape:
        raise TraceError(f"{op}: shapes {na.type.shape} and {nb.type.shape} differ (broadcasting is not "
                         "supported)")
    ndim = na.type.ndim
    out_format = check_out_format(out_format, ndim)
    sparse_like = [n.type.format for n in (na, nb) if n.type.is_sparse]
    fmt = resolve_format(out_format, len(sparse_like) == 2, sparse_like, ndim)
    dtype = result_dtype(na.type.dtype, nb.type.dtype)
    if op in ("maximum", "minimum"):
        check_reducible(dtype, op)
    if op == "subtract" and dtype == "bool":
        refuse_dtype("subtract", "bool", "NumPy refuses it too: use ^ or logical_xor")
    return Tracer(Node("combine", (na, nb), (sign,), TensorType(na.type.shape, dtype, fmt)))


def multiply(a, b, *, out_format=None) -> Tracer:
    """Elementwise product (an intersection of sparse operands) with NumPy's broadcasting; a scalar scales.
    A sparse operand times dense ones broadcast along its axes (``a * d[:, None]``) stays sparse, as scipy's
    ``multiply``."""
    if not isinstance(a, Tracer) and (isinstance(b, Tracer) or scalar_value(a) is not None):
        a, b = b, a
    na = _node(a, "multiply")
    subs = _letters(na.type.ndim)
    scalar = scalar_value(b)
    if scalar is not None:
        if isinstance(scalar, bool) and not na.type.is_sparse:
            return apply("mul", a, scalar)
        _scalar_dtype(scalar)
        return contract([na], [subs], subs, scale=scalar, out_format=out_format, op="multiply")
    nb = _node(b, "multiply")
    if na.type.shape == nb.type.shape:
        return contract([na, nb], [subs, subs], subs, out_format=out_format, op="multiply")
    # NumPy's broadcasting as a contraction that repeats the indices of the operand read along fewer axes
    # (``ij,j->ij``, ``ij,i->ij`` for ``d[:, None]``): unit axes are squeezed out of the dense operand
    shape = dense_ops.broadcast_shape([na.type.shape, nb.type.shape], "multiply")
    nodes, inputs = [], []
    for node in (na, nb):
        read = dense_ops.broadcast_subscripts(node.type.shape, shape)
        if node.type.is_sparse and read != _letters(len(shape)):
            raise TraceError(f"multiply: a sparse operand cannot be broadcast (shape {node.type.shape} against "
                             f"{shape}); write a.todense() for the dense product")
        if "0" in read:
            node = indexing.squeeze(node, {d for d, c in enumerate(read) if c == "0"})
            read = read.replace("0", "")
        nodes.append(node)
        inputs.append(read)
    return contract(nodes, inputs, _letters(len(shape)), out_format=out_format, op="multiply",
                    scaling=any(n.type.is_sparse for n in nodes))


def divide(a, b) -> Tracer:
    """NumPy's true division. A sparse dividend keeps its pattern, as scipy's: divided by a scalar (a nonzero
    Python one, or a traced 0-d value) or a dense array, scipy multiplies its stored entries by the reciprocal
    (``a.multiply(1 / d)``; an implicit zero stays zero where ``d`` is 0). Dividing by a sparse tensor divides
    by its implicit zeros: it raises with what to write instead."""
    sa, sb = scalar_value(a), scalar_value(b)
    if sb is not None and sa is None:
        na = _node(a, "divide")
        if isinstance(sb, bool) or (na.type.is_sparse and sb == 0):
            if na.type.is_sparse:
                _scalar_dtype(sb)
                raise TraceError("divide: division by zero")
            return apply("truediv", a, sb)
        _scalar_dtype(sb)
        if sb == 0 or na.type.dtype == "bool":   # dense: NumPy's inf / NaN, bools as numbers
            if na.type.is_sparse:
                refuse_dtype("divide", "bool", "divide a numeric array instead")
            return apply("truediv", a, sb)
        source = na.type.dtype if na.type.dtype.startswith(("float", "complex")) else "float64"   # true division
        dtype = np.result_type(np.dtype(source), sb).name
        return Tracer(Node("map", (na,), (("div", sb),), TensorType(na.type.shape, dtype, na.type.format)))
    if _sparse(b):
        raise TraceError("divide: dividing by a sparse tensor divides by its implicit zeros (0 / 0 is NaN); "
                         "write x / b.todense() for NumPy's dense result")
    if _sparse(a):   # scipy's rule: the stored entries times the reciprocal (``a.multiply(1 / d)``), a's pattern
        return multiply(a, apply("truediv", 1.0, b))
    return apply("truediv", a, b)


def power(a, exponent) -> Tracer:
    """``a ** k``. Sparse: ``k > 0`` (zero-preserving, so sparse stays sparse); dense: NumPy's power, with
    its shortcuts ``x ** 2`` (a product), ``x ** 0.5`` (sqrt) and ``x ** -1`` (reciprocal) of floats."""
    na = _node(a, "power")
    k = scalar_value(exponent)
    if k is None:
        if na.type.is_sparse or _sparse(exponent):
            raise TraceError("power: a tensor exponent of a sparse tensor is not supported; write "
                             "a.todense() ** e")
        if not na.type.dtype.startswith("float"):
            raise TypeError(f"power: a tensor exponent is supported for float values, got {na.type.dtype}; "
                            "convert first (x.astype(float))")
        return apply("powf", a, exponent)
    if na.type.dtype == "bool":
        refuse_dtype("power", "bool", "raise a numeric array instead")
    if isinstance(k, bool) or not isinstance(k, numbers.Real):
        raise TraceError(f"power: only real exponents are supported, got {exponent!r}")
    if isinstance(k, numbers.Integral) and k >= 1:
        return Tracer(na) if k == 1 else Tracer(Node("map", (na,), (("pow", int(k)),), na.type))
    if na.type.is_sparse:
        if k <= 0:
            raise TraceError(f"power: the exponent must be > 0 for a sparse tensor (a ** {exponent} is not zero "
                             "at its implicit zeros); write a.todense() ** k for the dense result")
        return ufunc("powf", a, float(k))
    inexact = na.type.dtype.startswith(("float", "complex"))
    if k == 0.5 and inexact:
        return ufunc("sqrt", a)
    if k == -1 and inexact:
        return ufunc("reciprocal", a)
    if isinstance(k, numbers.Integral) and not inexact:
        if k < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
        return apply("mul", a, 0) + 1    # x ** 0 of integers: ones
    return apply("powf", a, k)


def rpower(base, a) -> Tracer:
    """``c ** a`` (dense ``a``)."""
    return ufunc("powf", base, a)


def maximum(a, b, *, out_format=None) -> Tracer:
    """Elementwise maximum (NumPy's: NaN propagates); an entry stored in neither operand is 0."""
    return _extremum(a, b, "max", "maximum", out_format)


def minimum(a, b, *, out_format=None) -> Tracer:
    """Elementwise minimum (NumPy's: NaN propagates); an entry stored in neither operand is 0."""
    return _extremum(a, b, "min", "minimum", out_format)


def _extremum(a, b, head: str, op: str, out_format) -> Tracer:
    if scalar_value(a) is not None or scalar_value(b) is not None:
        return ufunc(head, a, b)
    na, nb = _node(a, op), _node(b, op)
    if na.type.shape == nb.type.shape:
        return _combine(a, b, head, op, out_format)
    dense_ops.broadcast_shape([na.type.shape, nb.type.shape], op)
    if na.type.is_sparse or nb.type.is_sparse:
        raise TraceError(f"{op}: shapes {na.type.shape} and {nb.type.shape} differ; a sparse operand cannot be "
                         "broadcast: write a.todense()")
    return apply(head, a, b)


def add(a, b, *, out_format=None) -> Tracer:
    return _add_sub(a, b, +1, "add", out_format)


def subtract(a, b, *, out_format=None) -> Tracer:
    return _add_sub(a, b, -1, "subtract", out_format)


def _add_sub(a, b, sign: int, op: str, out_format) -> Tracer:
    head = "add" if sign > 0 else "sub"
    sa, sb = scalar_value(a), scalar_value(b)
    if sa is not None or sb is not None:
        tensor, c = (b, sa) if sa is not None else (a, sb)
        node = _node(tensor, op)
        if not node.type.is_sparse:
            return apply(head, a, b)
        if c != 0 or isinstance(c, bool):
            raise TraceError(f"{op}: adding a nonzero scalar to a sparse tensor makes it dense (scipy refuses it "
                             f"too); write a.todense() {'+' if sign > 0 else '-'} c for the dense result")
        if sign < 0 and sa is not None:
            tensor = negative(tensor)                 # 0 - a
        dtype = np.result_type(np.dtype(node.type.dtype), c).name
        return tensor if dtype == node.type.dtype else astype(tensor, dtype)   # a + 0 is a (as scipy's copy)
    na, nb = _node(a, op), _node(b, op)
    if na.type.shape == nb.type.shape:
        return _combine(a, b, sign, op, out_format)
    dense_ops.broadcast_shape([na.type.shape, nb.type.shape], op)
    if na.type.is_sparse or nb.type.is_sparse:
        raise TraceError(f"{op}: shapes {na.type.shape} and {nb.type.shape} differ; a sparse operand cannot be "
                         f"broadcast: write a.todense() {'+' if sign > 0 else '-'} d for the dense result")
    return apply(head, a, b)


COMPARISONS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


def compare(symbol: str, a, b) -> Tracer:
    """NumPy's comparisons (a bool array). A sparse tensor compared with a scalar it is not equal to at 0
    (``a != 0``, ``a > 0``) gives its sparse bool pattern, as scipy's."""
    return ufunc(COMPARISONS[symbol], a, b)


def logical(head: str, *operands) -> Tracer:
    """``&``, ``|``, ``^``, ``~`` of bool values (NumPy's logical_and ...); bitwise ops of integers are not
    supported."""
    for x in operands:
        if isinstance(x, Tracer) and x.node.type.dtype != "bool":
            raise TypeError(f"{dense_ops.NUMPY_NAMES[head]}: bitwise operators are supported on bool values only "
                            f"inside @splyce.jit, got {x.node.type.dtype}")
    return ufunc(head, *operands)


def where(condition, x, y) -> Tracer:
    if any(_sparse(v) for v in (condition, x, y)):
        raise TraceError("where: not supported on sparse tensors; write where(c.todense(), ...) on dense arrays, "
                         "or a.multiply(mask) to keep a sparse pattern")
    return apply("where", condition, x, y)


def clip(a, lo=None, hi=None) -> Tracer:
    """NumPy's clip: ``minimum(maximum(a, lo), hi)`` (a sparse tensor stays sparse for ``lo <= 0 <= hi``)."""
    if lo is None and hi is None:
        raise ValueError("One of max or min must be given")
    out = a if lo is None else maximum(a, lo)
    return out if hi is None else minimum(out, hi)


def sum_(a, axis=None, *, out_format=None, keepdims=False, dtype=None) -> Tracer:
    na = _node(a, "sum")
    ndim = na.type.ndim
    norm = _axes(axis, ndim, "sum")
    subs = _letters(ndim)
    out = "".join(c for d, c in enumerate(subs) if d not in norm)
    if dtype is not None:
        dtype = np.dtype(dtype).name
    elif na.type.dtype in ("bool", "int8", "int16", "int32"):   # NumPy sums these as int64
        dtype = "int64"
    result = contract([na], [subs], out, out_format=out_format, op="sum", dtype=dtype)
    return _keep_dims(result, na.type.shape, norm) if keepdims else result


def _keep_dims(result: Tracer, shape, axes) -> Tracer:
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    return Tracer(indexing.expand(result.node, kept, "keepdims")) if not result.node.type.is_sparse else result


def mean(a, axis=None, *, keepdims=False) -> Tracer:
    na = _node(a, "mean")
    norm = _axes(axis, na.type.ndim, "mean")
    count = int(np.prod([na.type.shape[d] for d in norm], dtype=np.int64))
    if count == 0:
        raise TraceError("mean: the mean of an empty axis is NaN (NumPy warns); not supported inside @splyce.jit")
    total = sum_(a, axis, keepdims=keepdims)
    if na.type.dtype.startswith(("float", "complex")):
        total = astype(total, na.type.dtype) if total.node.type.dtype != na.type.dtype else total
    return divide(total, count)


def argextremum(a, kind: str, axis=None, keepdims=False) -> Tracer:
    """NumPy's argmax / argmin of a dense value along one axis (the first occurrence; the first NaN, as
    NumPy's): an int64 ``argreduce`` node."""
    op = "argmax" if kind == "max" else "argmin"
    node = _node(a, op)
    if node.type.is_sparse:
        raise TraceError(f"{op}: not supported on a sparse tensor inside @splyce.jit; write a.todense().{op}(axis)")
    check_reducible(node.type.dtype, op)
    shape = node.type.shape
    if axis is None:
        if len(shape) != 1:
            raise TraceError(f"{op}: without an axis NumPy returns an index into the flattened array; pass axis= "
                             "(or take it of a 1-D value)")
        axis = 0
    if isinstance(axis, (tuple, list)):
        raise TraceError(f"{op}: axis must be an integer, got {axis!r}")
    (ax,) = _axes(axis, len(shape), op)
    if shape[ax] == 0:
        raise ValueError(f"attempt to get {op} of an empty sequence")
    reduced = Node("argreduce", (node,), (kind, ax), TensorType(shape[:ax] + shape[ax + 1:], "int64", None))
    if keepdims:
        return Tracer(indexing.expand(reduced, shape[:ax] + (1,) + shape[ax + 1:], op))
    return Tracer(reduced)


def count_nonzero(a, axis=None, keepdims=False) -> Tracer:
    """NumPy's count_nonzero: a sum of ``a != 0`` (int64; a sparse ``a`` counts its nonzero stored values)."""
    return sum_(compare("!=", a, 0), axis, keepdims=keepdims)


def any_(a, axis=None, keepdims=False) -> Tracer:
    return compare(">", count_nonzero(a, axis, keepdims), 0)


def all_(a, axis=None, keepdims=False) -> Tracer:
    node = _node(a, "all")
    norm = _axes(axis, node.type.ndim, "all")
    extent = int(np.prod([node.type.shape[d] for d in norm], dtype=np.int64))
    return compare("==", count_nonzero(a, axis, keepdims), extent)


def dot(a, b) -> Tracer:
    """NumPy's / scipy's ``dot``: a product with a scalar, an inner product of vectors, a matrix product."""
    if scalar_value(a) is not None or scalar_value(b) is not None:
        return multiply(a, b)
    na, nb = _node(a, "dot"), _node(b, "dot")
    if na.type.ndim == 0 or nb.type.ndim == 0:
        return multiply(a, b)
    if na.type.ndim > 2 or nb.type.ndim > 2:
        raise TraceError(f"dot: operands of rank up to 2 are supported, got shapes {na.type.shape} and "
                         f"{nb.type.shape}")
    return matmul(a, b)


def todense(a) -> Tracer:
    """The dense array of a sparse value (scipy's ``todense()`` / ``toarray()``); a dense value as it is."""
    node = _node(a, "todense")
    if not node.type.is_sparse:
        return Tracer(node)
    subs = _letters(node.type.ndim)
    return contract([node], [subs], subs, out_format="dense", op="todense")


def diagonal(a, k=0) -> Tracer:
    """The ``k``-th diagonal (a dense vector; ``k`` > 0 above the main one, as NumPy's and scipy's). Of a
    sparse matrix: the entries it stores there, read by an elementwise product with the shifted identity
    matrix (a constant of the trace, O(n))."""
    node = _node(a, "diagonal")
    if node.type.ndim != 2:
        raise TraceError(f"diagonal: a 2-D tensor is needed, got shape {node.type.shape}")
    if isinstance(k, Tracer) or not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TraceError(f"diagonal: the offset k must be a Python int known at trace time, got {k!r}")
    k = int(k)
    if indexing.diagonal_length(node.type.shape, k) == 0:
        raise TraceError(f"diagonal: offset {k} is past the corner of a {node.type.shape} matrix (an empty "
                         "diagonal); empty results are not supported inside @splyce.jit: keep the offset in "
                         f"{-node.type.shape[0] + 1}..{node.type.shape[1] - 1}")
    if not node.type.is_sparse:
        return Tracer(indexing.diagonal_dense(node, k))
    import scipy.sparse as sps

    m, n = node.type.shape
    length = indexing.diagonal_length((m, n), k)
    eye = sps.eye_array(m, n, k=k, dtype=node.type.dtype, format="csr")
    if k == 0 and m > n:                   # a tall matrix's main diagonal: one entry per column
        return contract([node, _node(eye, "diagonal")], ["ij", "ij"], "j", out_format="dense", op="diagonal")
    rows = contract([node, _node(eye, "diagonal")], ["ij", "ij"], "i", out_format="dense", op="diagonal")
    start = 0 if k >= 0 else -k
    if (start, length) == (0, m):
        return rows
    return Tracer(indexing.getitem(rows, slice(start, start + length)).node)


def trace(a, offset=0) -> Tracer:
    """scipy's and NumPy's ``trace(offset)``: the sum of the ``offset``-th diagonal."""
    return sum_(diagonal(a, offset))


# -- the Tracer's operators and methods --------------------------------------------------------------------

# scipy.sparse's elementwise methods of the same name (zero-preserving: a sparse tensor stays sparse)
_UNARY_METHODS = ("sqrt", "expm1", "log1p", "sign", "tanh", "sin", "tan", "sinh", "arctan", "arcsinh", "floor",
                  "ceil", "trunc", "rint")


def _not_concrete(self, *args):
    raise TraceError("a traced tensor has no value at trace time (float(), int(), item() and the like need "
                     "one); keep the computation in arrays, e.g. where(c, x, y) instead of an if")


def _squeeze(self, axis=None):
    node = _node(self, "squeeze")
    shape = node.type.shape
    axes = {d for d, n in enumerate(shape) if n == 1} if axis is None else _axes(axis, len(shape), "squeeze")
    return Tracer(indexing.squeeze(indexing.dense_node(self, "squeeze"), axes))


def _install(cls) -> None:
    def binary(fn, reflected=False):
        return (lambda self, other: fn(other, self)) if reflected else (lambda self, other: fn(self, other))

    methods = {
        "__matmul__": binary(matmul), "__rmatmul__": binary(matmul, True),
        "__mul__": binary(multiply), "__rmul__": binary(multiply, True),
        "__truediv__": binary(divide), "__rtruediv__": binary(divide, True),
        "__add__": binary(add), "__radd__": binary(add, True),
        "__sub__": binary(subtract), "__rsub__": binary(subtract, True),
        "__pow__": binary(power), "__rpow__": binary(rpower, True),
        "__abs__": absolute, "__neg__": negative, "__pos__": lambda self: self,
        "__and__": lambda self, other: logical("and", self, other),
        "__rand__": lambda self, other: logical("and", other, self),
        "__or__": lambda self, other: logical("or", self, other),
        "__ror__": lambda self, other: logical("or", other, self),
        "__xor__": lambda self, other: logical("xor", self, other),
        "__rxor__": lambda self, other: logical("xor", other, self),
        "__invert__": lambda self: logical("not", self),
        "__getitem__": indexing.getitem, "__setitem__": gather.setitem,   # __array__, nnz, tocsr ...: surface.py
        "__float__": _not_concrete, "__int__": _not_concrete, "__index__": _not_concrete, "item": _not_concrete,
        "__complex__": _not_concrete,
        "sum": lambda self, axis=None, dtype=None, keepdims=False: sum_(self, axis, keepdims=keepdims, dtype=dtype),
        "mean": lambda self, axis=None, keepdims=False: mean(self, axis, keepdims=keepdims),
        "max": lambda self, axis=None, keepdims=False: reduce_extremum(self, "max", axis, keepdims),
        "min": lambda self, axis=None, keepdims=False: reduce_extremum(self, "min", axis, keepdims),
        "T": property(lambda self: transpose(self)),
        "transpose": lambda self, *axes: transpose(
            self, (tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes) or None),
        "conj": conjugate, "conjugate": conjugate, "dot": dot, "multiply": multiply, "maximum": maximum,
        "minimum": minimum, "power": power, "todense": todense, "toarray": todense, "diagonal": diagonal,
        "trace": trace,
        "astype": lambda self, dtype, copy=True: astype(self, dtype), "clip": clip,
        "reshape": indexing.reshape, "squeeze": _squeeze, "ravel": lambda self: indexing.reshape(self, -1),
        "flatten": lambda self: indexing.reshape(self, -1), "copy": lambda self: Tracer(self.node),   # a new tracer: never a view (tracer/views.py)
       
        "any": lambda self, axis=None, keepdims=False: any_(self, axis, keepdims),
        "all": lambda self, axis=None, keepdims=False: all_(self, axis, keepdims),
        "argmax": lambda self, axis=None, keepdims=False: argextremum(self, "max", axis, keepdims),
        "argmin": lambda self, axis=None, keepdims=False: argextremum(self, "min", axis, keepdims),
    }
    for symbol, head in COMPARISONS.items():
        name = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}[symbol]
        methods[name] = (lambda s: lambda self, other: compare(s, self, other))(symbol)
    for name in _UNARY_METHODS:
        methods[name] = (lambda n: lambda self: ufunc(n, self))(name)
    for name, method in methods.items():
        setattr(cls, name, method)
    cls.__hash__ = object.__hash__   # defining __eq__ would drop it; tracers stay usable as dict keys


_install(Tracer)
