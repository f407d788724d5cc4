"""NumPy's ``var`` and ``std`` of dense traced values, computed as NumPy does: the mean (kept as unit axes),
the squared magnitudes of the deviations, their sum divided by ``n - ddof``.

A sparse value has no ``var`` / ``std`` in scipy (and NumPy's on a sparse matrix is an error): the
deviations from the mean are dense, so it is refused with what to write instead (``a.toarray().var()``).
"""

from __future__ import annotations

import numbers

import numpy as np

from splyce.tracer import tracer as T
from splyce.tracer.base import TraceError, Tracer, _axes, _node
from splyce.tracer.dense_ops import astype, ufunc


def var(x, axis=None, dtype=None, ddof=0, keepdims=False, op: str = "var") -> Tracer:
    node = _node(x, op)
    if node.type.is_sparse:
        raise TraceError(f"{op}: not supported on a sparse value (scipy.sparse has no {op}; its deviations from "
                         f"the mean are dense); write a.toarray().{op}(axis) for NumPy's result")
    if isinstance(ddof, bool) or not isinstance(ddof, numbers.Real):
        raise TraceError(f"{op}: ddof must be a number, got {ddof!r}")
    if not isinstance(keepdims, bool):
        raise TraceError(f"{op}: keepdims must be True or False, got {keepdims!r}")
    axes = _axes(axis, node.type.ndim, op)
    count = int(np.prod([node.type.shape[d] for d in axes], dtype=np.int64))
    if count - ddof <= 0:
        raise TraceError(f"{op}: {count} values with ddof={ddof} leave no degrees of freedom (NumPy warns and "
                         "returns inf or NaN); not supported inside @splyce.jit")
    source = node.type.dtype
    if source == "bool":
        raise TypeError(f"{op}: not supported for bool values (NumPy refuses it too); write x.astype(float)")
    if dtype is not None:
        x = astype(x, dtype)
    elif not source.startswith(("float", "complex")):
        x = astype(x, "float64")   # NumPy computes the variance of integers in float64
    deviation = T.subtract(x, T.mean(x, axis, keepdims=True))
    if deviation.node.type.dtype.startswith("complex"):
        squares = T.power(T.absolute(deviation), 2)
    else:
        squares = T.multiply(deviation, deviation)
    total = T.sum_(squares, axis, keepdims=keepdims)
    return T.divide(total, count - ddof)


def std(x, axis=None, dtype=None, ddof=0, keepdims=False) -> Tracer:
    return ufunc("sqrt", var(x, axis, dtype, ddof, keepdims, op="std"))


def _numpy(name: str, fn):
    """The ``numpy.var`` / ``numpy.std`` signature (``out`` and ``where`` refused)."""
    def call(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
             correction=None):
        used = [k for k, v in (("out", out), ("where", where), ("mean", mean)) if v is not None]
        if used:
            raise TypeError(f"numpy.{name}: argument {', '.join(used)} not supported on traced tensors")
        if correction is not None:
            if ddof != 0:
                raise ValueError("ddof and correction can't be provided simultaneously.")
            ddof = correction
        return fn(a, axis, dtype, ddof, keepdims)
    call.__name__ = name
    return call


np_var = _numpy("var", var)
np_std = _numpy("std", std)


def method(name: str):
    """``x.var(axis=None, dtype=None, out=None, ddof=0, keepdims=False)`` as ndarray's method."""
    return _numpy(name, var if name == "var" else std)
