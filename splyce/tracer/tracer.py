"""Tracers: stand-ins for a jitted function's arguments that record operations as trace IR nodes.

Shapes and formats are inferred here, at trace time, so a shape mismatch or an unsupported operation raises
before anything is compiled.
"""

from __future__ import annotations

import numbers
import string

from splyce.tensors.formats import Format, relabelled
from splyce.tracer.ir import ContractParams, Node, TensorType, result_dtype
from splyce.errors import TraceError  # re-exported: defined once in splyce.errors

MAX_OPERANDS = 4
MAX_RANK = 4

# What a user may pass as out_format: "dense", "sparse" (an automatic sparse format) or a Format.
OUT_FORMATS = ("dense", "sparse")


class Tracer:
    """A tensor inside a jitted function. Supports ``@``, ``*``, ``+``, ``-``, ``sum``, ``.T``."""

    __slots__ = ("node",)
    __array_priority__ = 1000  # so that ndarray * tracer defers to us

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.type.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self):
        import numpy as np

        return np.dtype(self.node.type.dtype)

    @property
    def format(self) -> Format | None:
        return self.node.type.format

    def __repr__(self) -> str:
        return f"Tracer({self.node.type})"

    def __bool__(self):
        raise TraceError("the truth value of a traced tensor is not known at trace time")

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __mul__(self, other):
        return multiply(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return divide(self, other)

    def __abs__(self):
        return absolute(self)

    def __pow__(self, exponent):
        return power(self, exponent)

    def max(self, axis=None, keepdims=False):
        return reduce_extremum(self, "max", axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return reduce_extremum(self, "min", axis, keepdims)

    def __neg__(self):
        return negative(self)

    def conj(self):
        return conjugate(self)

    conjugate = conj

    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return subtract(self, other)

    def __rsub__(self, other):
        return subtract(other, self)

    def sum(self, axis=None):
        return sum_(self, axis)

    @property
    def T(self):
        return transpose(self)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return transpose(self, axes or None)


def _node(x, op: str) -> Node:
    if isinstance(x, Tracer):
        return x.node
    raise TraceError(f"{op}: operands must be traced tensors (the jitted function's arguments), "
                     f"got {type(x).__name__}")


def check_out_format(out_format, ndim: int):
    if out_format is None or isinstance(out_format, Format):
        if isinstance(out_format, Format) and out_format.ndim != ndim:
            raise TraceError(f"out_format {out_format} has {out_format.ndim} levels, the result has rank {ndim}")
        return out_format
    if out_format in OUT_FORMATS:
        return out_format
    raise TraceError(f"out_format must be 'dense', 'sparse', a splyce.Format or None, got {out_format!r}")


def default_sparse_format(like: Format, ndim: int) -> Format:
    """The sparse format of a result that mirrors a sparse operand: same level kinds and order, unique and
    ordered (the sparsifier inserts in order), same index widths."""
    from splyce.tensors.formats import Level

    levels = tuple(Level("dense") if lv.kind == "dense" else Level("compressed") for lv in like.levels)
    return Format(levels, like.order, like.pos_width, like.crd_width)


def resolve_format(out_format, sparse_default: bool, sparse_like: list[Format], ndim: int):
    """The result format: an explicit request wins; otherwise sparse only where the op's default says so."""
    if isinstance(out_format, Format):
        return None if out_format.is_dense else out_format
    want_sparse = out_format == "sparse" or (out_format is None and sparse_default)
    if not want_sparse or ndim == 0:
        return None
    same_rank = [f for f in sparse_like if f.ndim == ndim]
    if same_rank:
        return default_sparse_format(same_rank[0], ndim)
    from splyce.tensors.formats import csf

    base = csf(ndim) if ndim > 1 else Format(("compressed",))
    return base


def contract(nodes: list[Node], inputs: list[str], output: str, *, scale=None, out_format=None,
             op: str = "einsum", order: str | None = None, dtype: str | None = None) -> Tracer:
    """The one constructor for contraction nodes: checks subscripts against shapes and infers the type."""
    if not 1 <= len(nodes) <= MAX_OPERANDS:
        raise TraceError(f"{op}: between 1 and {MAX_OPERANDS} operands are supported, got {len(nodes)}")
    # an elementwise product, or a scaled copy, of sparse operands as written gives a sparse result as in
    # scipy (``b.T * b`` of a CSR ``b`` is CSC there), also when a transpose folds into the subscripts below
    elementwise = all(subs == output for subs in inputs) and (len(nodes) >= 2 or scale is not None)
    sparse_like = [n.type.format for n in nodes if n.type.is_sparse]
    if len(nodes) > 1 or scale is not None or inputs[0] != output:
        # a sparse transpose stays an operand of an elementwise op: the planner reads a transposed input in
        # place and fuses the op with its elementwise neighbours, which permuted subscripts would prevent
        nodes, inputs = zip(*[_fold_transpose(n, s, relabels=not elementwise) for n, s in zip(nodes, inputs)])
    sizes: dict[str, int] = {}
    for n, (node, subs) in enumerate(zip(nodes, inputs)):
        if len(subs) != node.type.ndim:
            raise TraceError(f"{op}: operand {n} has shape {node.type.shape} but subscripts {subs!r}")
        if len(set(subs)) != len(subs):
            raise TraceError(f"{op}: repeated index in {subs!r} (diagonals) is not supported inside @splyce.jit "
                             "(the drop-in splyce.einsum on concrete operands takes the diagonal)")
        if node.type.ndim > MAX_RANK:
            raise TraceError(f"{op}: tensors of rank up to {MAX_RANK} are supported, got {node.type.ndim}")
        for letter, size in zip(subs, node.type.shape):
            if sizes.setdefault(letter, size) != size:
                shapes = ", ".join(str(x.type.shape) for x in nodes)
                raise TraceError(f"{op}: size mismatch for index {letter!r} ({sizes[letter]} vs {size}) "
                                 f"with operand shapes {shapes}")
    if len(set(output)) != len(output) or not set(output) <= set(sizes):
        raise TraceError(f"{op}: output subscripts {output!r} must be distinct indices of the inputs")
    if len(output) > MAX_RANK:
        raise TraceError(f"{op}: results of rank up to {MAX_RANK} are supported")
    out_format = check_out_format(out_format, len(output))
    fmt = resolve_format(out_format, elementwise and bool(sparse_like), sparse_like, len(output))
    dtype = dtype or result_dtype(*[n.type.dtype for n in nodes])
    if scale is not None:   # NumPy 2 (NEP 50): a Python scalar is weak (it turns ints into floats, bools
        _scalar_dtype(scale)   # into ints, reals into complex), never widens float32 / complex64
        import numpy as np

        dtype = np.result_type(np.dtype(dtype), scale).name
    shape = tuple(sizes[c] for c in output)
    if order is not None and (not isinstance(order, str) or sorted(order) != sorted(sizes)):
        raise TraceError(f"{op}: order must list each index of {','.join(inputs)}->{output} once "
                         f"(outermost loop first), got {order!r}")
    params = ContractParams(tuple(inputs), output, scale, order)
    return Tracer(Node("contract", tuple(nodes), (params,), TensorType(shape, dtype, fmt)))


def _fold_transpose(node: Node, subs: str, relabels: bool = True) -> tuple[Node, str]:
    """Read a transposed operand through its source with permuted subscripts (``x @ y.T`` becomes
    ``einsum("ik,jk->ij", x, y)``), so the sparse source keeps its format instead of going through a
    dense transposed copy. ``relabels``: sparse transposes (relabel_axes) fold too."""
    while node.op == "contract" and len(node.args) == 1 and (
            not node.type.is_sparse or (relabels and relabel_axes(node))):
        params: ContractParams = node.params[0]
        (source,) = params.inputs
        if params.scale is not None or sorted(source) != sorted(params.output):
            break
        subs = "".join(subs[params.output.index(c)] for c in source)
        node = node.args[0]
    return node, subs


def _scalar_dtype(x) -> str:
    if isinstance(x, bool) or not isinstance(x, numbers.Number):
        raise TraceError(f"scalar factors must be numbers, got {type(x).__name__}")
    if isinstance(x, numbers.Integral):
        return "int64"
    return "float64" if isinstance(x, numbers.Real) else "complex128"


def refuse_dtype(op: str, dtype: str, why: str) -> None:
    """The one error for an op NumPy does not define (or splyce does not support) on a value dtype."""
    raise TypeError(f"{op}: not supported for {dtype} values ({why})")


def _letters(n: int, skip: str = "") -> str:
    return "".join(c for c in string.ascii_lowercase if c not in skip)[:n]


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
    return contract([na, nb], [sa, sb], out, out_format=out_format, op="matmul")


def multiply(a, b, *, out_format=None) -> Tracer:
    """Elementwise product (an intersection of sparse operands); a scalar operand scales."""
    if not isinstance(a, Tracer):
        a, b = b, a
    na = _node(a, "multiply")
    subs = _letters(na.type.ndim)
    if isinstance(b, numbers.Number):
        _scalar_dtype(b)
        return contract([na], [subs], subs, scale=b, out_format=out_format, op="multiply")
    nb = _node(b, "multiply")
    if na.type.shape != nb.type.shape:
        # NumPy's broadcasting of a 0-d tensor (a traced sum) or of a vector along the last axis: the same
        # product as a contraction that repeats the smaller operand's indices (``ij,j->ij``)
        if na.type.ndim < nb.type.ndim:
            na, nb = nb, na
        big, small = na.type.shape, nb.type.shape
        subs = _letters(len(big))
        if small == () or small == big[-1:]:
            return contract([na, nb], [subs, subs[len(big) - len(small):]], subs, out_format=out_format,
                            op="multiply")
        raise TraceError(f"multiply: shapes {na.type.shape} and {nb.type.shape} cannot be broadcast (a 0-d "
                         "tensor or a vector along the last axis can)")
    return contract([na, nb], [subs, subs], subs, out_format=out_format, op="multiply")


def divide(a, b) -> Tracer:
    """Division by a nonzero scalar (dividing by a sparse tensor would divide by its implicit zeros)."""
    if isinstance(b, numbers.Number) and not isinstance(b, bool) and not isinstance(a, numbers.Number):
        _scalar_dtype(b)
        if b == 0:
            raise TraceError("divide: division by zero")
        na = _node(a, "divide")
        if na.type.dtype == "bool":
            refuse_dtype("divide", "bool", "divide a numeric array instead")
        import numpy as np

        source = na.type.dtype if na.type.dtype.startswith(("float", "complex")) else "float64"   # true division
        dtype = np.result_type(np.dtype(source), b).name
        return Tracer(Node("map", (na,), (("div", b),), TensorType(na.type.shape, dtype, na.type.format)))
    raise TraceError("divide: only division by a nonzero scalar is supported (dividing by a sparse tensor "
                     "divides by its implicit zeros)")


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


def power(a, exponent) -> Tracer:
    """``a ** k`` for an integer ``k >= 1`` (zero-preserving, so sparse stays sparse)."""
    na = _node(a, "power")
    if na.type.dtype == "bool":
        refuse_dtype("power", "bool", "raise a numeric array instead")
    if isinstance(exponent, bool) or not isinstance(exponent, numbers.Integral):
        raise TraceError(f"power: only integer exponents are supported, got {exponent!r}")
    if exponent < 1:
        raise TraceError(f"power: the exponent must be >= 1 (a ** {exponent} is not zero at the implicit zeros "
                         "of a sparse tensor); compute it on a dense array instead")
    if exponent == 1:
        return Tracer(na)
    return Tracer(Node("map", (na,), (("pow", int(exponent)),), na.type))


def maximum(a, b, *, out_format=None) -> Tracer:
    """Elementwise maximum (NumPy's: NaN propagates); an entry stored in neither operand is 0."""
    return _combine(a, b, "max", "maximum", out_format)


def minimum(a, b, *, out_format=None) -> Tracer:
    """Elementwise minimum (NumPy's: NaN propagates); an entry stored in neither operand is 0."""
    return _combine(a, b, "min", "minimum", out_format)


def _combine(a, b, sign, op: str, out_format=None) -> Tracer:
    if isinstance(a, numbers.Number) or isinstance(b, numbers.Number):
        if op in ("maximum", "minimum"):
            raise TraceError(f"{op}: scalar operands are not supported (the result is not zero at a sparse "
                             "tensor's implicit zeros); pass a dense array instead")
        raise TraceError(f"{op}: adding a scalar to a sparse tensor makes it dense; add a dense array instead")
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


def add(a, b, *, out_format=None) -> Tracer:
    return _combine(a, b, +1, "add", out_format)


def subtract(a, b, *, out_format=None) -> Tracer:
    return _combine(a, b, -1, "subtract", out_format)


def _axes(axis, ndim: int, op: str) -> set[int]:
    """NumPy's ``axis`` argument (None, an int or a tuple; negative counts from the end) as a set."""
    axes = range(ndim) if axis is None else (axis if isinstance(axis, (tuple, list)) else (axis,))
    norm = set()
    for ax in axes:
        if isinstance(ax, bool) or not isinstance(ax, numbers.Integral) or not -ndim <= ax < ndim:
            raise TraceError(f"{op}: axis {ax!r} is out of range for a tensor of rank {ndim}")
        if int(ax) % ndim in norm:
            raise TraceError(f"{op}: axis {ax!r} is repeated")
        norm.add(int(ax) % ndim)
    return norm


def sum_(a, axis=None, *, out_format=None) -> Tracer:
    na = _node(a, "sum")
    ndim = na.type.ndim
    norm = _axes(axis, ndim, "sum")
    subs = _letters(ndim)
    out = "".join(c for d, c in enumerate(subs) if d not in norm)
    # NumPy sums bools and integers narrower than the platform's int64 as int64
    dtype = "int64" if na.type.dtype in ("bool", "int8", "int16", "int32") else None
    return contract([na], [subs], out, out_format=out_format, op="sum", dtype=dtype)


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


def check_reducible(dtype: str, op: str) -> None:
    """max / min need an order: complex values have none here."""
    if dtype.startswith("complex"):
        refuse_dtype(op, dtype, "complex numbers are not ordered; compare abs(x) instead")


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
    return contract([na], [subs], "".join(subs[a] for a in axes), out_format=out_format, op="transpose")


def copy_of(node: Node, op: str = "return") -> Node:
    """A copy of ``node`` in its own format (a result never aliases an argument: the caller may write to
    either, as JAX returns a new array)."""
    subs = _letters(node.type.ndim)
    fmt = node.type.format if node.type.is_sparse else "dense"
    return contract([node], [subs], subs, out_format=fmt, op=op).node


def relabel_axes(node: Node) -> tuple[int, ...] | None:
    """The axes of ``node`` when it is a transpose of a sparse value stored in that value's buffers
    relabelled (``relabelled(format, axes)``: no entry moves), else None."""
    if node.op != "contract" or len(node.args) != 1 or not node.type.is_sparse:
        return None
    params: ContractParams = node.params[0]
    (source,) = params.inputs
    (arg,) = node.args
    if params.scale is not None or not arg.type.is_sparse or sorted(source) != sorted(params.output):
        return None
    if node.type.dtype != arg.type.dtype:
        return None
    axes = tuple(source.index(c) for c in params.output)
    return axes if node.type.format == relabelled(arg.type.format, axes) else None


def parse_einsum(subscripts: str, nops: int) -> tuple[list[str], str]:
    """NumPy's einsum notation without ellipses: explicit (``"ik,kj->ij"``) or implicit (``"ik,kj"``)."""
    if not isinstance(subscripts, str):
        raise TraceError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    text = subscripts.replace(" ", "")
    if "." in text:
        raise TraceError("einsum: ellipses ('...') are not supported")
    lhs, arrow, rhs = text.partition("->")
    inputs = lhs.split(",")
    if any(not s.isalpha() and s != "" for s in inputs) or (arrow and rhs and not rhs.isalpha()):
        raise TraceError(f"einsum: invalid subscripts {subscripts!r} (use letters a-z)")
    if len(inputs) != nops:
        raise TraceError(f"einsum: {len(inputs)} subscript groups for {nops} operands in {subscripts!r}")
    if not arrow:
        counts = {c: "".join(inputs).count(c) for c in set("".join(inputs))}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(rhs)) != len(rhs) or not set(rhs) <= set("".join(inputs)):
        raise TraceError(f"einsum: output subscripts {rhs!r} must be distinct indices of the inputs")
    return inputs, rhs


def einsum(subscripts: str, *operands, out_format=None, order: str | None = None) -> Tracer:
    """``order`` pins the loop order (outermost first) and the formulation as written: the planner then
    neither fuses, re-stores nor scatters this contraction's operands (the paper's kernels use it)."""
    inputs, output = parse_einsum(subscripts, len(operands))
    return contract([_node(x, "einsum") for x in operands], inputs, output, out_format=out_format,
                    order=order)
