"""The partial derivatives of each elementwise head (tracer/dense_ops.py's ``UFUNCS``, the planner's ``map``
kinds), as elementwise expressions over the same operands (planner/elementwise.py's nested tuples).

``partials(head, parts, params)`` gives, per operand expression in ``parts``, the expression of
d head(parts) / d part, or None where it is zero or undefined (comparisons, rounding, a ``where``'s
condition). Ties of ``maximum`` / ``minimum`` share the derivative (0.5 each), as JAX's."""

from __future__ import annotations

import math

ONE = ("const", 1.0)
ZERO = ("const", 0.0)


def _c(value: float):
    return ("const", value)


def _mul(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = ("mul", out, x)
    return out


def _div(x, y):
    return ("truediv", x, y)


def _sq(x):
    return ("mul", x, x)


def _chooser(x, y, cmp: str):
    """d max(x, y) / dx (``cmp`` "gt") or d min / dx ("lt"): 1 where x wins, 0.5 on a tie, else 0."""
    return ("where", (cmp, x, y), ONE, ("where", ("eq", x, y), _c(0.5), ZERO))


NONDIFFERENTIABLE = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "not", "isnan", "isinf", "isfinite",
                     "stored", "floor", "ceil", "trunc", "rint", "sign"}


def partials(head: str, parts: tuple, params: tuple = ()) -> list:
    """One derivative expression (or None) per operand expression of ``(head, *parts, *params)``."""
    e = (head, *parts, *params)
    if head in NONDIFFERENTIABLE:
        return [None] * len(parts)
    unary = {
        "exp": lambda x: e, "expm1": lambda x: ("exp", x), "log": lambda x: _div(ONE, x),
        "log1p": lambda x: _div(ONE, ("add", ONE, x)), "log2": lambda x: _div(ONE, _mul(x, _c(math.log(2)))),
        "log10": lambda x: _div(ONE, _mul(x, _c(math.log(10)))), "sqrt": lambda x: _div(_c(0.5), e),
        "sin": lambda x: ("cos", x), "cos": lambda x: _mul(_c(-1.0), ("sin", x)),
        "tan": lambda x: ("add", ONE, _sq(e)), "tanh": lambda x: ("sub", ONE, _sq(e)),
        "sinh": lambda x: ("cosh", x), "cosh": lambda x: ("sinh", x),
        "arctan": lambda x: _div(ONE, ("add", ONE, _sq(x))),
        "arcsinh": lambda x: _div(ONE, ("sqrt", ("add", _sq(x), ONE))),
        "square": lambda x: _mul(_c(2.0), x), "reciprocal": lambda x: _mul(_c(-1.0), _sq(e)),
        "neg": lambda x: _c(-1.0), "conj": lambda x: ONE,
        "abs": lambda x: ("sign", x),
    }
    if head in unary:
        return [unary[head](parts[0])]
    if head == "cast":   # to an integer or bool: piecewise constant
        return [ONE if str(params[0]).startswith(("float", "complex")) else None]
    if head == "pow":          # a map's integer power: ("pow", x, k)
        k = params[0]
        return [_mul(_c(float(k)), x_pow(parts[0], k - 1))]
    if head == "div":          # a map's division by a scalar: ("div", x, s)
        return [_c(1.0 / params[0])]
    x, y = parts[0], parts[1] if len(parts) > 1 else None
    if head == "add":
        return [ONE, ONE]
    if head == "sub":
        return [ONE, _c(-1.0)]
    if head == "mul":
        return [y, x]
    if head == "truediv":
        return [_div(ONE, y), _mul(_c(-1.0), _div(x, _sq(y)))]
    if head == "max":
        return [_chooser(x, y, "gt"), _chooser(y, x, "gt")]
    if head == "min":
        return [_chooser(x, y, "lt"), _chooser(y, x, "lt")]
    if head == "powf":
        dx = _mul(y, ("powf", x, ("sub", y, ONE)))
        # JAX's rule: x ** y's derivative in y is log(x) x ** y, taken as 0 where x is 0
        dy = ("where", ("eq", x, ZERO), ZERO, _mul(("log", ("where", ("eq", x, ZERO), ONE, x)), e))
        return [dx, dy]
    if head == "where":
        return [None, ("where", parts[0], ONE, ZERO), ("where", parts[0], ZERO, ONE)]
    raise NotImplementedError(f"grad: no derivative rule for the elementwise function {head!r}")


def x_pow(x, k: int):
    """``x ** k`` for an integer ``k >= 0`` as products."""
    if k == 0:
        return ONE
    return x if k == 1 else ("pow", x, k)


def split(expr):
    """``(head, operand expressions, extra constants)`` of one level of an expression."""
    parts = tuple(x for x in expr[1:] if isinstance(x, tuple))
    extra = tuple(x for x in expr[1:] if not isinstance(x, tuple))
    return expr[0], parts, extra


def gradient(expr) -> dict:
    """The derivative of an elementwise expression (nested: a fused chain) w.r.t. each operand it reads, by
    the chain rule: operand index -> expression. Operands it does not depend on are left out."""
    if expr[0] == "arg":
        return {expr[1]: ONE}
    if expr[0] == "const":
        return {}
    head, parts, extra = split(expr)
    out: dict = {}
    for part, d in zip(parts, partials(head, parts, extra)):
        if d is None:
            continue
        for k, dk in gradient(part).items():
            term = d if dk == ONE else (dk if d == ONE else ("mul", d, dk))
            out[k] = term if k not in out else ("add", out[k], term)
    return out
