"""The ``Tracer``'s scipy / NumPy methods defined outside tracer.py (which cannot import the modules that
build on it): format conversions and stored-entry counts (sparse_methods.py), ``var`` / ``std``
(statistics.py), and the guard on ``__array__``.

``__array__`` is how NumPy converts an unknown object. scipy.sparse's operators call it on their operand
(``B @ x`` with a captured scipy matrix ``B``): there it returns a 0-d object array holding the tracer, on
which scipy returns NotImplemented, so Python calls the tracer's reflected operator. Called from anywhere
else (``np.asarray(t)`` in code the jit does not rebind: tracer/namespaces.py) it raises a TraceError
naming the construct, at that line, instead of an object array that fails lines later.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from splyce.tracer import linalg
from splyce.tracer import sparse_methods as S
from splyce.tracer import statistics
from splyce.tracer.base import TraceError, Tracer

# modules whose own calls of np.asarray on a tracer get the object holder (they then defer to the tracer)
_DEFERRING = ("scipy.", "numpy.", "splyce.", "sparse.")


class ConversionRefused(TraceError):
    """NumPy's or scipy's own conversion of a traced value (``np.asarray(t)`` in code the jit does not rebind,
    a scipy constructor): a caller that knows which function was called may name it instead
    (tracer/namespaces.py)."""


def _as_object(self, dtype=None, copy=None):
    frame = sys._getframe(1)
    caller = frame.f_globals.get("__name__", "") or ""
    if caller.startswith("scipy.") and frame.f_code.co_name == "__init__":
        raise ConversionRefused(
            "a scipy.sparse constructor (csr_array(t), coo_matrix(t)...) of a traced value in code @splyce.jit does "
            "not rebind (a function of another module, or one held in a closure): write t.tocsr() / t.tocsc() / "
            "t.tocoo(), or call it from the jitted function's own module, where its scipy.sparse names are served")
    if caller.startswith("scipy.sparse.csgraph"):   # a graph routine, not an operator that defers to the tracer
        raise ConversionRefused(
            f"scipy.sparse.csgraph ({caller}.{frame.f_code.co_name}) converted a traced value to a NumPy array: "
            "csgraph's routines do not know traced values. For laplacian, write it with the traced operations: "
            "d = np.asarray(w.sum(axis=1)).ravel(); L = sp.diags(d) - w (normed: s = np.where(d > 0, 1 / "
            "np.sqrt(np.where(d > 0, d, 1)), 0); L = sp.eye(n) - sp.diags(s) @ w @ sp.diags(s)); else call it "
            "outside the jitted function and pass the result as an argument")
    if not caller.startswith(_DEFERRING):
        raise ConversionRefused(
            "NumPy converted a traced value to an array: numpy.asarray / numpy.array in code @splyce.jit does not "
            f"rebind (called from module {caller!r}), or a NumPy array indexed by a traced index array (c[idx]). "
            "Inside the trace the value already is an array: drop the conversion, or write x.astype(dtype) / "
            "x.toarray(), or import numpy in the jitted function's module (its np.asarray is served there); for "
            "c[idx] write np.take(c, idx, axis=0)")
    holder = np.empty((), dtype=object)
    holder[()] = self
    return holder


def _sparse_only(name: str, method, alternative: str, value: bool = False):
    """An attribute of sparse values only (a NumPy array has none: ``hasattr(x, "tocsr")`` tells them apart,
    as it does outside the trace); on a dense value an AttributeError naming what to write instead."""
    def get(self):
        if not self.node.type.is_sparse:
            raise AttributeError(f"a dense traced value (a NumPy array) has no attribute {name!r}; {alternative}")
        return method(self) if value else types.MethodType(method, self)
    return property(get)


def _copied(x, copy: bool):
    """scipy's ``copy=True``: a new tracer, so a conversion to the format ``x`` has is a copy returned, never a
    view of an argument (tracer/views.py)."""
    return type(x)(x.node) if copy and isinstance(x, Tracer) else x


def _dense_only(name: str, method):
    """A NumPy method of dense values that scipy.sparse matrices lack: on a sparse value the AttributeError
    scipy gives, naming what to write instead."""
    def get(self):
        if self.node.type.is_sparse:
            raise AttributeError(f"a sparse traced value (a scipy.sparse matrix) has no attribute {name!r}; write "
                                 f"x.toarray().{name}(...) for its dense values")
        return types.MethodType(method, self)
    return property(get)


def _no_out(name: str, out) -> None:
    if out is not None:
        raise TraceError(f"{name}(out=...) writes into an array, and traced values are immutable inside "
                         f"@splyce.jit (as in JAX); write y = x.{name}(...) instead")


def _argsort(self, axis=-1, kind=None, order=None, *, stable=None):
    return linalg.call(np.argsort, (self,), {"axis": axis, "kind": kind, "order": order, "stable": stable})


def _scan(name: str):
    def scan(self, axis=None, dtype=None, out=None):
        _no_out(name, out)
        kwargs = {"axis": axis} if dtype is None else {"axis": axis, "dtype": np.dtype(dtype).name}
        return linalg.call(getattr(np, name), (self,), kwargs)
    return scan


def _sort(self, axis=-1, kind=None, order=None, *, stable=None):
    raise TraceError("x.sort() sorts x in place, and traced values are immutable inside @splyce.jit (as in JAX); "
                     "write x = np.sort(x, axis)")


def _install(cls) -> None:
    dense = "it stores every entry"
    methods = {
        "tocsr": _sparse_only("tocsr", lambda self, copy=False: _copied(S.convert(self, "csr"), copy),
                              "write scipy.sparse.csr_array(x) to store it sparse"),
        "tocsc": _sparse_only("tocsc", lambda self, copy=False: _copied(S.convert(self, "csc"), copy),
                              "write scipy.sparse.csc_array(x) to store it sparse"),
        "tocoo": _sparse_only("tocoo", lambda self, copy=False: _copied(S.convert(self, "coo"), copy),
                              "write scipy.sparse.coo_array(x) to store it sparse"),
        "asformat": _sparse_only("asformat", lambda self, format, copy=False: _copied(S.asformat(self, format, copy), copy),
                                 "write scipy.sparse.csr_array(x) (csc_array, coo_array) to store it sparse"),
        "getnnz": _sparse_only("getnnz", lambda self, axis=None: S.getnnz(self, axis),
                               f"{dense}: write np.count_nonzero(x, axis) for its nonzeros"),
        "nnz": _sparse_only("nnz", S.nnz, f"{dense}: write np.count_nonzero(x) for its nonzeros", value=True),
        "count_nonzero": lambda self, axis=None: S.count_nonzero(self, axis),
        "var": statistics.method("var"),
        "std": statistics.method("std"),
        "argsort": _dense_only("argsort", _argsort),    # NumPy's, run between kernels (tracer/linalg.py)
        "cumsum": _dense_only("cumsum", _scan("cumsum")),
        "cumprod": _dense_only("cumprod", _scan("cumprod")),
        "sort": _dense_only("sort", _sort),
        "__array__": _as_object,
    }
    for name, method in methods.items():
        setattr(cls, name, method)


_install(Tracer)

__all__ = ["TraceError"]
