"""NumPy's functions for jitted code, the JAX way: ``import splyce.numpy as snp``; ``snp.exp(a @ x)``.

On traced values (inside ``@splyce.jit``) each function records its trace operation (the same ones NumPy's
own functions dispatch to, splyce/tracer/numpy_api.py); on anything else it is NumPy's function, so one body
runs jitted and plain. docs/tracing.md lists what traces.
"""

from __future__ import annotations

import numpy as _np

from splyce.tracer import numpy_api as _api

_NAMES = (
    "add", "subtract", "multiply", "divide", "true_divide", "power", "matmul", "negative", "positive", "absolute",
    "abs", "conjugate", "conj", "maximum", "minimum", "square", "exp", "expm1", "log", "log1p", "log2", "log10",
    "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan", "arcsinh", "floor", "ceil", "trunc", "rint",
    "sign", "reciprocal", "isnan", "isinf", "isfinite", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "where", "sum", "mean", "max",
    "min", "amax", "amin", "dot", "vdot", "inner", "outer", "clip", "transpose", "einsum", "diagonal", "reshape",
    "squeeze", "ravel", "expand_dims", "zeros_like", "ones_like", "full_like", "trace", "any", "all", "count_nonzero",
    "argmax", "argmin", "round", "around",
)


def _function(name: str):
    numpy_function = getattr(_np, name)
    traced = _api.traced(name)

    def function(*args, **kwargs):
        if _api.has_tracer(args) or _api.has_tracer(kwargs.values()):
            return traced(*args, **kwargs) if name not in _api.UFUNCS else _api.array_ufunc(
                None, numpy_function, "__call__", *args, **kwargs)
        return numpy_function(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"numpy.{name}; traced on splyce tracers (inside @splyce.jit)."
    return function


for _name in _NAMES:
    globals()[_name] = _function(_name)


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))`` (scipy.special.expit), traced or NumPy's."""
    return 1.0 / (1.0 + exp(-x))   # noqa: F821  (defined by the loop above)


def relu(x):
    """``maximum(x, 0)``, traced or NumPy's."""
    return maximum(x, 0)   # noqa: F821


class linalg:   # noqa: N801  (NumPy's namespace name)
    @staticmethod
    def norm(x, ord=None, axis=None, keepdims=False):
        if _api.has_tracer((x,)):
            return _api.traced("norm")(x, ord, axis, keepdims)
        return _np.linalg.norm(x, ord, axis, keepdims)


newaxis = None
pi, e, inf, nan = _np.pi, _np.e, _np.inf, _np.nan
float32, float64, int32, int64, bool_, complex64, complex128 = (
    _np.float32, _np.float64, _np.int32, _np.int64, _np.bool_, _np.complex64, _np.complex128)

__all__ = [*_NAMES, "sigmoid", "relu", "linalg", "newaxis", "pi", "e", "inf", "nan"]
