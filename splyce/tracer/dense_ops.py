"""NumPy's elementwise functions on traced values: one ``ewise`` node per call, with NumPy's broadcasting and
dtype rules.

A dense value (a dense argument or constant, a contraction's dense result, a reduction) takes NumPy's full
semantics here: scalars and dense arrays broadcast, comparisons give bool arrays, ``where``, the common ufuncs.
A sparse operand is accepted only where the result keeps its pattern: a function with ``f(0) == 0`` (``sqrt``,
``tanh``, ``sign``, ``x != 0``, ``maximum(x, 0)``...) of one sparse value and scalars gives a sparse result,
as scipy's ``a.sqrt()``, ``a != 0`` or ``a.maximum(0)`` do; anything else raises a TraceError saying what to
write instead (``a.todense()``).

An ``ewise`` node's params are ``(expression, subscripts)``: the expression as nested tuples (planner/
elementwise.py describes them; ``UFUNCS`` below lists the heads added here), and per operand a string that
maps the result's axes to the operand's (``"ab"``: the same position; ``"b"``: broadcast along the first
axis; ``"0b"``: a unit axis read at 0). The result dtype of every head is NumPy's, found by running the
NumPy function on empty arrays (``result_dtype``), so it follows NumPy's promotion of weak Python scalars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from splyce.tracer.base import MAX_RANK, TraceError, Tracer, _letters, _node, scalar_value
from splyce.tracer.ir import Node, TensorType

SUPPORTED_DTYPES = ("float64", "float32", "int64", "int32", "bool", "complex128", "complex64")


@dataclass(frozen=True)
class Ufunc:
    """One elementwise function. ``kind`` says how the lowering converts its operands: ``arith`` (to the
    result dtype), ``compare`` (to their common dtype; bool result), ``logical`` (to truth values; bool
    result), ``predicate`` (as they are; bool result), ``where`` (a truth value, then two of the result
    dtype). ``zero``: f(0) == 0, so a sparse operand keeps its pattern. ``reals``: no complex operands."""

    name: str
    numpy: object
    kind: str = "arith"
    zero: bool = False
    reals: bool = False


def stored(x):
    """True at every entry of ``x`` (the ``stored`` head: of a sparse value, at every entry it stores)."""
    return np.ones_like(x, dtype=bool)


def _table(*entries) -> dict[str, Ufunc]:
    return {u.name: u for u in entries}


UFUNCS = _table(
    # binary arithmetic: the planner's heads (add / sub / mul / max / min) plus true division and power
    Ufunc("add", np.add), Ufunc("sub", np.subtract), Ufunc("mul", np.multiply, zero=True),
    Ufunc("max", np.maximum, reals=True), Ufunc("min", np.minimum, reals=True),
    Ufunc("truediv", np.true_divide), Ufunc("powf", np.power, reals=True),
    # unary
    Ufunc("exp", np.exp, reals=True), Ufunc("expm1", np.expm1, zero=True, reals=True),
    Ufunc("log", np.log, reals=True), Ufunc("log1p", np.log1p, zero=True, reals=True),
    Ufunc("log2", np.log2, reals=True), Ufunc("log10", np.log10, reals=True),
    Ufunc("sqrt", np.sqrt, zero=True, reals=True), Ufunc("sin", np.sin, zero=True, reals=True),
    Ufunc("cos", np.cos, reals=True), Ufunc("tan", np.tan, zero=True, reals=True),
    Ufunc("tanh", np.tanh, zero=True, reals=True), Ufunc("sinh", np.sinh, zero=True, reals=True),
    Ufunc("cosh", np.cosh, reals=True), Ufunc("arctan", np.arctan, zero=True, reals=True),
    Ufunc("arcsinh", np.arcsinh, zero=True, reals=True), Ufunc("floor", np.floor, zero=True, reals=True),
    Ufunc("ceil", np.ceil, zero=True, reals=True), Ufunc("trunc", np.trunc, zero=True, reals=True),
    Ufunc("rint", np.rint, zero=True, reals=True), Ufunc("sign", np.sign, zero=True, reals=True),
    Ufunc("square", np.square, zero=True), Ufunc("reciprocal", np.reciprocal, reals=True),
    # comparisons and logic
    Ufunc("eq", np.equal, "compare"), Ufunc("ne", np.not_equal, "compare"),
    Ufunc("lt", np.less, "compare", reals=True), Ufunc("le", np.less_equal, "compare", reals=True),
    Ufunc("gt", np.greater, "compare", reals=True), Ufunc("ge", np.greater_equal, "compare", reals=True),
    Ufunc("and", np.logical_and, "logical", zero=True), Ufunc("or", np.logical_or, "logical"),
    Ufunc("xor", np.logical_xor, "logical"), Ufunc("not", np.logical_not, "logical"),
    Ufunc("isnan", np.isnan, "predicate", zero=True, reals=True),
    Ufunc("isinf", np.isinf, "predicate", zero=True, reals=True),
    Ufunc("isfinite", np.isfinite, "predicate", reals=True),
    Ufunc("where", np.where, "where"),
    # structure: True at each entry a value stores (a sparse value's explicit zeros too): scipy's nnz
    Ufunc("stored", stored, "predicate"),
)

# NumPy's name of each head (for messages and for NumPy's protocols)
NUMPY_NAMES = {name: u.numpy.__name__ for name, u in UFUNCS.items()}


def result_dtype(head: str, operands) -> str:
    """NumPy's result dtype of ``head`` on ``operands`` (dtype names, or Python scalars: weak, as NumPy 2
    treats them), or TypeError when NumPy refuses it or gives a dtype splyce does not support."""
    u = UFUNCS[head]
    samples = [np.empty(0, dtype=x) if isinstance(x, str) else x for x in operands]
    name = NUMPY_NAMES[head]
    try:
        with np.errstate(all="ignore"):
            dtype = np.asarray(u.numpy(*samples)).dtype.name
    except (TypeError, OverflowError, ValueError) as error:
        raise TypeError(f"{name}: not supported for operands of types "
                        f"{', '.join(x if isinstance(x, str) else type(x).__name__ for x in operands)} "
                        f"(NumPy: {error})") from None
    if u.reals and any(isinstance(x, str) and x.startswith("complex") or isinstance(x, complex) for x in operands):
        raise TypeError(f"{name}: not supported for complex values inside @splyce.jit")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}: NumPy computes it as {dtype} here, which splyce does not support; convert "
                        f"the operand first (e.g. x.astype(float))")
    return dtype


def compute_dtype(head: str, operands) -> str:
    """The dtype a ``compare`` head converts its operands to: their common NumPy dtype."""
    samples = [np.empty(0, dtype=x) if isinstance(x, str) else x for x in operands]
    return np.result_type(*samples).name


# -- building nodes -----------------------------------------------------------------------------------------

def broadcast_shape(shapes, op: str) -> tuple[int, ...]:
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise TraceError(f"{op}: shapes {', '.join(map(str, shapes))} cannot be broadcast together") from None
    if len(shape) > MAX_RANK:
        raise TraceError(f"{op}: results of rank up to {MAX_RANK} are supported, got shape {shape}")
    return tuple(shape)


def broadcast_subscripts(shape: tuple[int, ...], out: tuple[int, ...]) -> str:
    """How an operand of ``shape`` is read at each position of the result ``out`` (NumPy's broadcasting:
    trailing axes align; a unit axis against a longer one is read at 0)."""
    letters = _letters(len(out))
    lead = len(out) - len(shape)
    return "".join("0" if n == 1 and out[lead + d] != 1 else letters[lead + d] for d, n in enumerate(shape))


def apply(head: str, *operands, op: str | None = None, sparse_ok: bool = False, params=()) -> Tracer:
    """``head`` (a key of ``UFUNCS``) elementwise on tracers, arrays and scalars, as NumPy computes it.
    ``params``: extra constants of the head (``cast``: the target dtype). ``sparse_ok``: the caller checked
    that the result keeps a sparse operand's pattern."""
    op = op or NUMPY_NAMES.get(head, head)
    nodes: list[Node] = []
    parts = []
    dtypes = []
    for x in operands:
        value = scalar_value(x)
        if value is not None:
            parts.append(("const", value))
            dtypes.append(value)
            continue
        node = _node(x, op)
        if node in nodes:
            parts.append(("arg", nodes.index(node)))
        else:
            parts.append(("arg", len(nodes)))
            nodes.append(node)
        dtypes.append(node.type.dtype)
    if not nodes:
        raise TraceError(f"{op}: at least one operand must be a traced tensor or an array")
    sparse = [n for n in nodes if n.type.is_sparse]
    if sparse and not sparse_ok:
        raise TraceError(f"{op}: not supported on a sparse tensor here (the result would not be zero at its "
                         "implicit zeros); write a.todense() to compute it on the dense array")
    shape = broadcast_shape([n.type.shape for n in nodes], op)
    if sparse and any(n.type.shape != shape for n in sparse):
        raise TraceError(f"{op}: a sparse operand cannot be broadcast (shape {sparse[0].type.shape} against "
                         f"{shape}); write a.todense()")
    if head == "cast":
        dtype = params[0]
    else:
        dtype = result_dtype(head, dtypes)
    expr = (head, *parts, *params)
    subs = tuple(broadcast_subscripts(n.type.shape, shape) for n in nodes)
    fmt = sparse[0].type.format if sparse else None
    if any(n == 0 for n in shape) and len(shape) > 0:
        raise TraceError(f"{op}: empty results (shape {shape}) are not supported inside @splyce.jit")
    return Tracer(Node("ewise", tuple(nodes), (expr, subs), TensorType(shape, dtype, fmt)))


def is_sparse(x) -> bool:
    return isinstance(x, Tracer) and x.node.type.is_sparse


def keeps_zero(head: str, values) -> bool:
    """Whether ``head`` of ``values`` (0 in place of the sparse operand) is 0 (or False), so a sparse operand
    keeps its pattern."""
    u = UFUNCS[head]
    try:
        with np.errstate(all="ignore"):
            value = u.numpy(*values)
    except (TypeError, ValueError):
        return False
    value = np.asarray(value)
    return value.ndim == 0 and not math.isnan(complex(value[()]).real) and value[()] == 0


def ufunc(head: str, *operands) -> Tracer:
    """``head`` with NumPy's semantics; one sparse operand (the others scalars) stays sparse where
    ``f(0, scalars) == 0``, else a TraceError suggests ``a.todense()``."""
    sparse = [x for x in operands if is_sparse(x)]
    values = [0 if is_sparse(x) else scalar_value(x) for x in operands]
    ok = len(sparse) == 1 and None not in values and keeps_zero(head, values)
    if sparse and not ok:
        written = ", ".join("a" if is_sparse(x) else ("c" if scalar_value(x) is not None else "d")
                            for x in operands)
        name = NUMPY_NAMES[head]
        raise TraceError(f"{name}: not supported on a sparse tensor here: {name}({written}) is not zero where "
                         f"a stores nothing, so the result is dense; write {name}("
                         f"{written.replace('a', 'a.todense()', 1)}) to compute it on the dense array")
    return apply(head, *operands, sparse_ok=bool(sparse))


def astype(x, dtype) -> Tracer:
    """NumPy's ``astype`` (a copy converted with C casts: floats truncate to integers, nonzero is True)."""
    target = np.dtype(dtype).name
    if target not in SUPPORTED_DTYPES:
        raise TypeError(f"astype: dtype {target} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")
    node = _node(x, "astype")
    if node.type.dtype.startswith("complex") and not target.startswith("complex"):
        raise TypeError(f"astype: converting {node.type.dtype} to {target} discards the imaginary part; take "
                        "x.real or abs(x) explicitly")
    if node.type.dtype == target:
        return Tracer(node)
    return apply("cast", x, op="astype", sparse_ok=True, params=(target,))
