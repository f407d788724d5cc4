"""scipy.special on traced values inside ``@splyce.jit``: the ufuncs ``expit`` / ``logit`` (through NumPy's
``__array_ufunc__``, tracer/numpy_api.py) and the reductions ``logsumexp`` / ``softmax`` / ``log_softmax``
(through the ``scipy.special`` namespace a traced function sees, tracer/namespaces.py), each written with the
traced NumPy operations scipy's definition uses:

- ``expit(x) = 1 / (1 + exp(-x))``, ``logit(p) = log(p / (1 - p))`` (scipy's own formulas);
- ``logsumexp(a, axis)``: ``log(sum(exp(a - m))) + m`` with ``m`` the maximum along ``axis`` (0 where it is
  not finite), the classic stable form; scipy >= 1.15 sums the terms other than the maximum with ``log1p``:
  the values agree to a few ulps, not bit for bit;
- ``softmax(x, axis) = exp(x - m) / sum(exp(x - m))``, ``log_softmax(x, axis) = x - logsumexp(x, axis)``.

Other scipy.special functions raise a TraceError naming them (``b=`` / ``return_sign=`` of logsumexp too).
"""

from __future__ import annotations

import numpy as np

from splyce.tracer.base import TraceError, Tracer


def expit(x):
    return 1.0 / (1.0 + np.exp(-x))


def logit(p):
    return np.log(p / (1.0 - p))


UFUNCS = {"expit": expit, "logit": logit}


def _shifted_max(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return np.where(np.isfinite(m), m, 0.0)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    if b is not None or return_sign:
        raise TraceError("scipy.special.logsumexp: b= and return_sign= are not supported on traced values inside "
                         "@splyce.jit; write np.log((b * np.exp(a - m)).sum(axis)) + m with m = a.max(axis)")
    m = _shifted_max(a, axis)
    out = np.log(np.exp(a - m).sum(axis=axis, keepdims=True)) + m
    return out if keepdims else out.sum(axis=axis)     # the kept unit axes dropped (a sum of one term each)


def softmax(x, axis=None):
    e = np.exp(x - _shifted_max(x, axis))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=None):
    return x - logsumexp(x, axis=axis, keepdims=True)


def _traced_only(name: str, fn):
    """``fn`` on traced values, scipy's own on concrete ones (a constant of the trace)."""
    def served(x, *args, **kwargs):
        if not isinstance(x, Tracer):
            import scipy.special

            return getattr(scipy.special, name)(x, *args, **kwargs)
        return fn(x, *args, **kwargs)
    served.__name__ = name
    served.__doc__ = f"scipy.special.{name} serving traced values inside @splyce.jit (tracer/special.py)."
    return served


FUNCTIONS = {name: _traced_only(name, fn)
             for name, fn in (("logsumexp", logsumexp), ("softmax", softmax), ("log_softmax", log_softmax))}
