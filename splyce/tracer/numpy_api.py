"""NumPy's functions on traced values, the NumPy way and the JAX way.

- NumPy dispatches its ufuncs (``np.exp(t)``, ``np.maximum(t, 0)``, ``ndarray @ t``) to
  ``Tracer.__array_ufunc__`` and its other functions (``np.where``, ``np.sum``, ``np.dot``...) to
  ``Tracer.__array_function__``, both installed here; a function splyce does not trace raises a TypeError
  naming it.
- ``splyce.numpy`` (``import splyce.numpy as snp``) exposes the same functions under NumPy's names: on traced
  values they trace, on concrete ones they are NumPy's.
"""

from __future__ import annotations

import numpy as np

from splyce.tracer import gather, linalg, stacking, statistics
from splyce.tracer import tracer as T
from splyce.tracer.base import TraceError, Tracer, _node, scalar_value
from splyce.tracer.dense_ops import astype, ufunc


def _unary(head: str):
    return lambda x: ufunc(head, x)


def _square(x):
    return T.power(x, 2) if _node(x, "square").type.dtype != "bool" else T.logical("and", x, x)


UFUNCS = {   # NumPy ufunc name -> the traced operation
    "add": T.add, "subtract": T.subtract, "multiply": T.multiply, "true_divide": T.divide, "divide": T.divide,
    "power": T.power, "matmul": T.matmul, "negative": T.negative, "positive": lambda x: x,
    "absolute": T.absolute, "conjugate": T.conjugate, "maximum": T.maximum, "minimum": T.minimum,
    "square": _square, "logical_and": lambda a, b: ufunc("and", a, b),   # of any dtype's truth values
    "logical_or": lambda a, b: ufunc("or", a, b), "logical_xor": lambda a, b: ufunc("xor", a, b),
    "logical_not": lambda a: ufunc("not", a),
    **{name: (lambda s: lambda a, b: T.compare(s, a, b))(symbol) for name, symbol in (
        ("equal", "=="), ("not_equal", "!="), ("less", "<"), ("less_equal", "<="), ("greater", ">"),
        ("greater_equal", ">="))},
    **{name: _unary(head) for name, head in (
        ("exp", "exp"), ("expm1", "expm1"), ("log", "log"), ("log1p", "log1p"), ("log2", "log2"),
        ("log10", "log10"), ("sqrt", "sqrt"), ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("tanh", "tanh"),
        ("sinh", "sinh"), ("cosh", "cosh"), ("arctan", "arctan"), ("arcsinh", "arcsinh"), ("floor", "floor"),
        ("ceil", "ceil"), ("trunc", "trunc"), ("rint", "rint"), ("sign", "sign"), ("reciprocal", "reciprocal"),
        ("isnan", "isnan"), ("isinf", "isinf"), ("isfinite", "isfinite"))},
}
UFUNCS["abs"] = UFUNCS["absolute"]
UFUNCS["conj"] = UFUNCS["conjugate"]


def _no(name: str, **given):
    """Refuse NumPy keyword arguments the traced version does not implement."""
    used = [k for k, v in given.items() if v is not None and v is not False]
    if used:
        raise TypeError(f"numpy.{name}: argument{'s' if len(used) > 1 else ''} {', '.join(used)} not supported on "
                        "traced tensors")


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no("sum", out=out, initial=initial, where=where)
    return T.sum_(a, axis, keepdims=keepdims, dtype=dtype)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no("mean", dtype=dtype, out=out, where=where)
    return T.mean(a, axis, keepdims=keepdims)


def _extremum(kind: str):
    def reduce(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        _no(kind, out=out, initial=initial, where=where)
        return T.reduce_extremum(a, kind, axis, keepdims)
    return reduce


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise TypeError("numpy.where with one argument (the indices of nonzeros) has no static shape; pass x and y")
    return T.where(condition, x, y)


def _clip(a, a_min=None, a_max=None, out=None, min=None, max=None):
    _no("clip", out=out)
    return T.clip(a, a_min if min is None else min, a_max if max is None else max)


def _norm(x, ord=None, axis=None, keepdims=False):
    """The 2-norm of a vector, the Frobenius norm of a matrix (``np.linalg.norm`` without ``ord``) in the
    kernel; another ``ord`` of a dense value by NumPy between kernels (tracer/linalg.py)."""
    if ord not in (None, 2, "fro") or (ord == 2 and _node(x, "norm").type.ndim != 1):
        if _node(x, "norm").type.is_sparse:
            raise TypeError(f"numpy.linalg.norm: ord={ord!r} of a sparse value is not supported on traced tensors "
                            "(the Frobenius norm is; for another, write np.linalg.norm(a.toarray(), ord))")
        return linalg.call(np.linalg.norm, (x,), {"ord": ord, "axis": axis, "keepdims": keepdims})
    t = _node(x, "norm").type
    if axis is None and not keepdims and t.ndim == 1 and not t.is_sparse and t.dtype in ("float32", "float64"):
        # NumPy's own formula for a real vector (sqrt(x.dot(x))): the dot product, which the planner runs on the
        # host as NumPy does (BLAS, planner/cuts.py ``host_dots``) when long, so the norm equals NumPy's
        return ufunc("sqrt", T.matmul(x, x))
    squares = T.absolute(x) ** 2 if t.dtype.startswith("complex") else T.multiply(x, x)
    return ufunc("sqrt", T.sum_(squares, axis, keepdims=keepdims))


def _like(fill):
    def build(a, dtype=None, order="K", subok=True, shape=None, **extra):
        node = _node(a, "like")
        value = np.full(node.type.shape if shape is None else shape, fill(extra),
                        dtype=dtype or node.type.dtype)
        return value   # a constant of the trace when an operation reads it
    return build


def _round(a, decimals, out):
    """``np.round`` to an integer (half to even, as NumPy's ``rint``)."""
    _no("round", out=out)
    if decimals != 0:
        raise TypeError("numpy.round: only decimals=0 is supported on traced tensors")
    return ufunc("rint", a)


def _outer(a, b, out=None):
    _no("outer", out=out)
    na, nb = _node(a, "outer"), _node(b, "outer")
    if na.type.ndim != 1 or nb.type.ndim != 1:
        raise TypeError("numpy.outer: 1-D traced operands are supported")
    return T.einsum("i,j->ij", a, b)


FUNCTIONS = {   # NumPy function -> the traced operation
    np.where: _where, np.sum: _sum, np.mean: _mean, np.max: _extremum("max"), np.min: _extremum("min"),
    np.amax: _extremum("max"), np.amin: _extremum("min"), np.dot: T.dot, np.vdot: T.dot,
    np.inner: T.dot, np.clip: _clip, np.transpose: lambda a, axes=None: T.transpose(a, axes),
    np.einsum: lambda subscripts, *operands, **kw: T.einsum(subscripts, *operands, **kw),
    np.diagonal: lambda a, offset=0, axis1=0, axis2=1: T.diagonal(_plain_axes(a, axis1, axis2, 'diagonal'), offset), np.reshape: lambda a, shape, *rest: a.reshape(shape),
    np.squeeze: lambda a, axis=None: a.squeeze(axis), np.ravel: lambda a, order="C": a.ravel(),
    np.expand_dims: lambda a, axis: _expand_dims(a, axis), np.linalg.norm: _norm,
    np.zeros_like: _like(lambda kw: 0), np.ones_like: _like(lambda kw: 1),
    np.full_like: lambda a, fill_value, dtype=None, **kw: _like(lambda _: fill_value)(a, dtype, **kw),
    np.outer: _outer, np.abs: UFUNCS["absolute"], np.real_if_close: lambda a, tol=100: a,
    np.trace: lambda a, offset=0, axis1=0, axis2=1, dtype=None, out=None: T.sum_(
        T.diagonal(_plain_axes(a, axis1, axis2, 'trace', out), offset), dtype=dtype), np.diag: lambda v, k=0: _diag(v, k),
    np.any: lambda a, axis=None, out=None, keepdims=False: _no("any", out=out) or T.any_(a, axis, keepdims),
    np.all: lambda a, axis=None, out=None, keepdims=False: _no("all", out=out) or T.all_(a, axis, keepdims),
    np.count_nonzero: lambda a, axis=None, keepdims=False: T.count_nonzero(a, axis, keepdims),
    np.round: lambda a, decimals=0, out=None: _round(a, decimals, out),
    np.around: lambda a, decimals=0, out=None: _round(a, decimals, out),
    np.argmax: lambda a, axis=None, out=None, keepdims=False: _no("argmax", out=out) or T.argextremum(
        a, "max", axis, keepdims),
    np.argmin: lambda a, axis=None, out=None, keepdims=False: _no("argmin", out=out) or T.argextremum(
        a, "min", axis, keepdims),
    np.var: statistics.np_var, np.std: statistics.np_std,
    np.concatenate: lambda arrays, axis=0, out=None, dtype=None, casting="same_kind": _no(
        "concatenate", out=out, dtype=dtype) or stacking.concatenate(arrays, axis),
    np.stack: lambda arrays, axis=0, out=None, dtype=None, casting="same_kind": _no(
        "stack", out=out, dtype=dtype) or stacking.stack(arrays, axis),
    np.hstack: lambda tup, dtype=None, casting="same_kind": _no("hstack", dtype=dtype) or stacking.hstack(tup),
    np.vstack: lambda tup, dtype=None, casting="same_kind": _no("vstack", dtype=dtype) or stacking.vstack(tup),
    np.column_stack: stacking.column_stack,
    np.ndim: lambda a: a.ndim, np.shape: lambda a: a.shape,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    # never written, so a copy of a tracer computes as it; a new tracer all the same: a copy returned is never a
    # view of an argument (tracer/views.py); ``subok`` keeps a matrix a matrix
    np.copy: lambda a, order="K", subok=False: type(a)(a.node) if subok and isinstance(a, Tracer)
    else Tracer(_node(a, "copy")),
    np.take: lambda a, indices, axis=None, out=None, mode="raise": _no(
        "take", out=out, mode=None if mode == "raise" else mode) or gather.take(a, indices, axis),
}
if hasattr(np, "astype"):
    FUNCTIONS[np.astype] = lambda x, dtype, copy=True, **kw: astype(x, dtype)


def _plain_axes(a, axis1, axis2, name, out=None):
    """``a`` when the axes are a matrix's own (0, 1): other axes of higher-rank values are not traced."""
    if out is not None:
        raise TraceError(f"np.{name}: out= is not supported inside @splyce.jit; use the returned value")
    if (axis1, axis2) not in ((0, 1), (-2, -1)) or _node(a, name).type.ndim != 2:
        raise TraceError(f"np.{name}: only a 2-D value over axes (0, 1) is supported inside @splyce.jit, "
                         f"got axis1={axis1}, axis2={axis2}")
    return a


def _diag(v, k=0):
    """``np.diag``: the main diagonal of a 2-D value, or the square matrix with a 1-D value on its diagonal."""
    node = _node(v, "diag")
    if node.type.ndim == 2 and k == 0:
        return T.diagonal(v)
    if node.type.ndim != 1 or node.type.is_sparse:
        raise TypeError(f"numpy.diag: a 1-D dense value (or k=0 of a 2-D one) is needed, got shape "
                        f"{node.type.shape} and k={k!r}")
    n = node.type.shape[0]
    k = int(k)
    # entry i at (i + max(-k, 0), i + max(k, 0)): two 0/1 placements stored sparse, so only v's entries are
    # read (an inf stays where it is, zeros elsewhere, as NumPy's)
    size = n + abs(k)
    rows = stacking.placement(n, max(-k, 0), size, node.type.dtype)
    cols = stacking.placement(n, max(k, 0), size, node.type.dtype)
    return T.contract([node, _node(rows, "diag"), _node(cols, "diag")], ["i", "ir", "ic"], "rc",
                      out_format="dense", op="diag")


def _expand_dims(a, axis):
    node = _node(a, "expand_dims")
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = node.type.ndim + len(axes)
    axes = {int(ax) % ndim for ax in axes}
    shape, rest = [], iter(node.type.shape)
    for d in range(ndim):
        shape.append(1 if d in axes else next(rest))
    return a.reshape(tuple(shape))


def _name(func) -> str:
    module = getattr(func, "__module__", "numpy") or "numpy"
    module = "numpy" if module.startswith("numpy") and "linalg" not in module else module
    return f"{module}.{getattr(func, '__name__', func)}"


def array_ufunc(self, ufunc_, method, *inputs, **kwargs):
    name = ufunc_.__name__
    if method != "__call__":
        raise TypeError(f"numpy.{name}.{method} is not supported on traced tensors (use the function or method, "
                        f"e.g. x.sum(axis=0))")
    out = kwargs.get("out")
    if out is not None and len(out) == 1 and isinstance(out[0], np.ndarray) and inputs and out[0] is inputs[0]:
        # ``x += t`` of a concrete array x (``x = np.zeros(n)`` then an update): Python rebinds x to the traced
        # sum, as it would to NumPy's; the concrete array itself is not written (traced values are immutable)
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    _no(name, **{k: v for k, v in kwargs.items() if k != "out" or v is not None})
    impl = UFUNCS.get(name)
    if impl is None:
        raise TypeError(f"numpy.{name} is not supported on traced tensors inside @splyce.jit; supported ufuncs: "
                        f"{', '.join(sorted(UFUNCS))}")
    return impl(*inputs)


def array_function(self, func, types, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None and ("linalg" in (getattr(func, "__module__", "") or "") or linalg.serves(func)):
        return linalg.call(func, args, kwargs)   # NumPy itself, between kernels
    if func is np.fill_diagonal:
        raise TraceError("numpy.fill_diagonal writes into its argument, and traced values are immutable inside "
                         "@splyce.jit (as in JAX); write a = np.where(np.eye(n, dtype=bool), v, a)")
    if impl is None:
        raise TypeError(f"{_name(func)} is not supported on traced tensors inside @splyce.jit; supported: "
                        f"{', '.join(sorted(_name(f) for f in FUNCTIONS))} and the ufuncs")
    return impl(*args, **kwargs)


Tracer.__array_ufunc__ = array_ufunc
Tracer.__array_function__ = array_function


def traced(name: str):
    """The traced implementation of NumPy's ``name`` (a ufunc or a function), or None."""
    if name in UFUNCS:
        return UFUNCS[name]
    target = getattr(np, name, None) if name != "norm" else np.linalg.norm
    return FUNCTIONS.get(target)


def has_tracer(values) -> bool:
    for v in values:
        if isinstance(v, Tracer):
            return True
        if isinstance(v, (tuple, list)) and has_tracer(v):
            return True
    return False


__all__ = ["UFUNCS", "FUNCTIONS", "traced", "has_tracer", "TraceError", "scalar_value"]
