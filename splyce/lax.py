"""Compiled loops with JAX's signatures: ``fori_loop``, ``while_loop``, ``scan`` (``jax.lax``'s).

Inside ``@splyce.jit`` a loop is one node of the trace (tracer/loops.py): its body is traced once, on
placeholders for the carry, and compiled once, as its own kernel (the plan of one step: fused, with native
SpMVs where they pay); the jitted function runs as stages (runtime/staged.py), the loop a driver that calls the
body's kernel once per iteration on operands prepared once. Called outside a jitted function, a loop jits
itself (cached per body function and loop parameters) and runs the same way, so ``fori_loop(0, 100, step, x)``
is one call that traces and compiles ``step`` once, never 100 times, and never unrolls.

As in JAX, the carry is a pytree of arrays whose shapes and dtypes the body keeps (a ``TypeError`` names the
leaf otherwise); Python scalars in it become 0-d arrays (int64, float64, bool, complex128). The carry and a
scan's per-step outputs are dense; sparse matrices are read by the body from its arguments or its scope.
"""

from __future__ import annotations

import collections
import numbers
import operator
import threading

import numpy as np

from splyce.runtime import pytree
from splyce.tracer import captures, loops
from splyce.tracer.ir import TensorType
from splyce.tracer.tracer import Tracer, TraceError

__all__ = ["fori_loop", "while_loop", "scan"]


# -- public functions -----------------------------------------------------------------------------------------

def fori_loop(lower, upper, body_fun, init_val):
    """``for i in range(lower, upper): val = body_fun(i, val)``; returns ``val``, as ``jax.lax.fori_loop``.

    Parameters
    ----------
    lower, upper : int or traced integer scalar
        The loop's bounds (no iteration when ``upper <= lower``).
    body_fun : callable
        ``body_fun(i, val) -> val``: ``i`` a traced int64 scalar, ``val`` the carry (a pytree of arrays),
        returned with the same structure, shapes and dtypes.
    init_val : pytree of arrays and scalars
        The initial carry.

    Returns
    -------
    The final carry (NumPy arrays; 0-d leaves as NumPy scalars), in ``init_val``'s structure.

    Raises
    ------
    TypeError
        ``body_fun`` changes the carry's structure, a leaf's shape or dtype, or returns a sparse leaf.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> P = sps.csr_array(np.array([[0.0, 1.0], [1.0, 0.0]]))
    >>> splyce.fori_loop(0, 3, lambda i, x: 0.5 * (P @ x) + 1.0, np.array([1.0, 0.0]))
    array([1.75 , 1.875])
    """
    if not _tracing((lower, upper, init_val)):
        return _eager("fori", (body_fun,), (_static_int(lower, "lower"), _static_int(upper, "upper")), init_val)
    return _record("fori", body_fun, None, init_val, (lower, upper))


def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)``; returns ``val``, as ``jax.lax.while_loop``.

    Parameters
    ----------
    cond_fun : callable
        ``cond_fun(val)``: a traced boolean scalar (``r @ r > tol ** 2``).
    body_fun : callable
        ``body_fun(val) -> val``, keeping the carry's structure, shapes and dtypes.
    init_val : pytree of arrays and scalars
        The initial carry.

    Returns
    -------
    The final carry, in ``init_val``'s structure.

    Raises
    ------
    TypeError
        As ``fori_loop``; or ``cond_fun`` does not return a boolean scalar.

    Examples
    --------
    >>> import numpy as np, splyce
    >>> splyce.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0, c[1] + 1), (1.0, 0))
    (np.float64(16.0), np.int64(4))
    """
    if not _tracing((init_val,)):
        return _eager("while", (cond_fun, body_fun), (), init_val)
    return _record("while", body_fun, cond_fun, init_val, ())


def scan(f, init, xs=None, length=None, reverse=False):
    """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each ``x`` of ``xs`` along its first axis; returns
    ``(carry, ys)``, ``ys`` the ``y``'s stacked along a new first axis.

    Parameters
    ----------
    f : callable
        ``f(carry, x) -> (carry, y)``: ``y`` a pytree of dense arrays (or None).
    init : pytree of arrays and scalars
        The initial carry.
    xs : pytree of arrays, optional
        Scanned along their first axis (all of one length). None: ``x`` is None, ``length`` steps.
    length : int, optional
        The number of steps: needed without ``xs``, else checked against their first axis.
    reverse : bool
        Run from the last step to the first (``ys`` still aligned with ``xs``), as ``jax.lax.scan``'s.

    Returns
    -------
    tuple
        ``(final carry, stacked ys)``.

    Examples
    --------
    >>> import numpy as np, splyce
    >>> splyce.scan(lambda c, x: (c + x, c * x), 0.0, np.arange(4.0))
    (np.float64(6.0), array([0., 0., 2., 9.]))
    """
    if not _tracing((init, xs)):
        leaves, _, _ = pytree.flatten(xs, "xs")
        n = _scan_length(leaves, length)
        return _eager("scan", (f,), (n, bool(reverse)), init, xs)
    return _record("scan", f, None, init, (), xs, length, bool(reverse))


# -- tracing ---------------------------------------------------------------------------------------------------

def _tracing(values) -> bool:
    if captures.current() is not None:
        return True
    leaves, _, _ = pytree.flatten(values, "the loop's arguments")
    return any(isinstance(x, Tracer) for x in leaves)


def _static_int(x, name: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
            return int(x)
        raise TypeError(f"fori_loop: {name} must be an integer, got {type(x).__name__}") from None


_SCALARS = ((bool, "bool"), (numbers.Integral, "int64"), (numbers.Real, "float64"), (numbers.Complex, "complex128"))


def _node_of(leaf, path: str):
    """A carry / scanned leaf as a trace node: a tracer's; a constant array's (frozen with the plan); a scalar
    as a 0-d node (element 0 of a 1-element constant)."""
    if isinstance(leaf, Tracer):
        return leaf.node
    if isinstance(leaf, np.ndarray) and leaf.ndim > 0:
        return captures.constant_node(leaf)
    if isinstance(leaf, (np.ndarray, np.generic)) or isinstance(leaf, numbers.Number):
        value = np.asarray(leaf)
        if not isinstance(leaf, (np.ndarray, np.generic)):
            dtype = next(d for kind, d in _SCALARS if isinstance(leaf, kind))
            value = value.astype(dtype)
        node = captures.constant_node(value.reshape(1))
        return Tracer(node)[0].node
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):    # a scipy / pydata / SparseTensor operand
        raise TypeError(f"{path}: a loop's carry holds dense arrays only, got {type(leaf).__name__}; read sparse "
                        "matrices in the body from the function's arguments or its scope")
    raise TypeError(f"{path}: a loop's carry holds arrays and scalars, got {type(leaf).__name__}")


def _type_text(t: TensorType) -> str:
    return f"{t.dtype}[{', '.join(map(str, t.shape))}]"


def _check_dense(nodes, paths, what: str):
    for n, p in zip(nodes, paths):
        if n.type.is_sparse:
            raise TypeError(f"{what} {p} is sparse ({n.type}); a loop's carry and a scan's outputs are dense "
                            "arrays: read sparse matrices in the body from the function's arguments or scope "
                            "(or densify with .toarray())")


def _record(kind, body_fun, cond_fun, init, bounds, xs=None, length=None, reverse=False):
    """The loop traced as one node; its results as tracers in ``init``'s structure (and a scan's ys)."""
    name = {"fori": "fori_loop", "while": "while_loop", "scan": "scan"}[kind]
    leaves, paths, structure = pytree.flatten(init, "init_val" if kind != "scan" else "init")
    init_nodes = [_node_of(x, p) for x, p in zip(leaves, paths)]
    _check_dense(init_nodes, paths, f"{name}: the carry's leaf")
    uid = loops.new_uid()
    placeholders = []

    def hole(t: TensorType):
        node = loops.placeholder(uid, len(placeholders), t)
        placeholders.append(node)
        return node

    index = hole(TensorType((), "int64", None)) if kind == "fori" else None
    carry_in = [hole(n.type) for n in init_nodes]
    carry_tree = pytree.unflatten(structure, [Tracer(n) for n in carry_in])

    xs_nodes, xs_structure, n = [], None, None
    if kind == "scan":
        x_leaves, x_paths, xs_structure = pytree.flatten(xs, "xs")
        xs_nodes = [_node_of(x, p) for x, p in zip(x_leaves, x_paths)]
        _check_dense(xs_nodes, x_paths, "scan: the scanned")
        n = _scan_length([Tracer(x) for x in xs_nodes], length)
        slices = [hole(TensorType(x.type.shape[1:], x.type.dtype, None)) for x in xs_nodes]
        x_tree = pytree.unflatten(xs_structure, [Tracer(s) for s in slices])

    lower = upper = None
    traced_bounds = []
    if kind == "fori":
        for b, label in zip(bounds, ("lower", "upper")):
            if isinstance(b, Tracer):
                if b.ndim != 0 or b.dtype.kind not in "iu":
                    raise TypeError(f"fori_loop: {label} must be an integer scalar, got a traced {b.dtype}{list(b.shape)}")
                traced_bounds.append(b.node)
            else:
                value = _static_int(b, label)
                lower, upper = (value, upper) if label == "lower" else (lower, value)

    # the body, traced once on the placeholders
    if kind == "fori":
        out = body_fun(Tracer(index), carry_tree)
    elif kind == "while":
        out = body_fun(carry_tree)
    else:
        result = body_fun(carry_tree, x_tree)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"scan: f must return a pair (carry, y), got {type(result).__name__}")
        out, ys = result
    out_leaves, out_paths, out_structure = pytree.flatten(out, "the body's result")
    if out_structure != structure:
        raise TypeError(f"{name}: body_fun output and input must have identical types: the carry's structure "
                        f"changed from {pytree.unflatten(structure, ['*'] * len(leaves))!r} to "
                        f"{pytree.unflatten(out_structure, ['*'] * len(out_leaves))!r}")
    new_nodes = []
    for leaf, path, before in zip(out_leaves, paths, carry_in):
        node = _node_of(leaf, path)
        if node.type.shape != before.type.shape or node.type.dtype != before.type.dtype or node.type.is_sparse:
            raise TypeError(f"{name}: body_fun output and input must have identical types: the carry's leaf "
                            f"{path} is {_type_text(before.type)} in the input and "
                            f"{_type_text(node.type)}{' (sparse)' if node.type.is_sparse else ''} in the output")
        new_nodes.append(node)
    outputs = list(new_nodes)
    if kind == "while":
        c = cond_fun(pytree.unflatten(structure, [Tracer(n) for n in new_nodes]))
        outputs.append(_condition(c))
    y_nodes, y_structure = [], None
    if kind == "scan":
        y_leaves, y_paths, y_structure = pytree.flatten(ys, "y")
        y_nodes = [_node_of(y, p) for y, p in zip(y_leaves, y_paths)]
        _check_dense(y_nodes, y_paths, "scan: the output")
        outputs.extend(y_nodes)

    free, dependent = loops.free_values(outputs, placeholders)
    uses_index = index is not None and index in _reached(outputs, placeholders)
    if index is not None and not uses_index:
        placeholders = placeholders[1:]        # the body does not read i: not passed
    spec = loops.LoopSpec(kind, len(init_nodes), len(xs_nodes), len(y_nodes), 0 if uses_index else None,
                          placeholders, outputs, free, lower, upper, bool(traced_bounds), n, paths, uid,
                          reverse=reverse)
    args = list(init_nodes)
    if kind == "while":
        args.append(_condition(cond_fun(pytree.unflatten(structure, [Tracer(n) for n in init_nodes]))))
    args += xs_nodes + traced_bounds + free
    loop = loops.loop_node(spec, tuple(args))
    results = [Tracer(o) for o in loops.outputs_of(loop)]
    carry = pytree.unflatten(structure, results[:len(init_nodes)])
    if kind == "scan":
        return carry, pytree.unflatten(y_structure, results[len(init_nodes):])
    return carry


def _reached(outputs, placeholders) -> set:
    from splyce.tracer.ir import walk

    found = set(placeholders)
    return {n for n in walk(outputs) if n in found}


def _condition(c):
    if isinstance(c, (bool, np.bool_)):
        raise TypeError("while_loop: cond_fun returned a Python bool, which would never change; return a traced "
                        "boolean scalar computed from the carry (e.g. r @ r > tol ** 2)")
    if not isinstance(c, Tracer) or c.ndim != 0 or c.dtype != np.bool_:
        what = f"a traced {c.dtype}{list(c.shape)}" if isinstance(c, Tracer) else type(c).__name__
        raise TypeError(f"while_loop: cond_fun must return a boolean scalar, got {what}")
    return c.node


def _scan_length(leaves, length) -> int:
    sizes = []
    for x in leaves:
        shape = getattr(x, "shape", None)
        if not shape:
            raise TypeError(f"scan got a value with no leading axis to scan over: {type(x).__name__} of shape "
                            f"{shape!r}")
        sizes.append(shape[0])
    if length is not None:
        length = _static_int(length, "length")
        if any(s != length for s in sizes):
            raise ValueError(f"scan got `length` argument of {length} which disagrees with leading axis sizes "
                             f"{sizes}")
        return length
    if not sizes:
        raise ValueError("scan got no values to scan over and `length` not provided")
    if len(set(sizes)) > 1:
        raise ValueError(f"scan got values with different leading axis sizes: {sizes}")
    return sizes[0]


# -- called outside a jitted function ---------------------------------------------------------------------------

_EAGER: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()
_EAGER_SIZE = 64
_eager_lock = threading.Lock()


def _eager(kind, funs, statics, init, xs=None):
    """The loop jitted by itself (cached per functions and static parameters) and called on the values."""
    from splyce.runtime.decorator import jit

    key = (kind, funs, statics)
    with _eager_lock:
        jitted = _EAGER.get(key)
        if jitted is not None:
            _EAGER.move_to_end(key)
    if jitted is None:
        if kind == "fori":
            (body,), (lo, hi) = funs, statics

            def loop(init):
                return fori_loop(lo, hi, body, init)
        elif kind == "while":
            cond, body = funs

            def loop(init):
                return while_loop(cond, body, init)
        else:
            (body,), (n, reverse) = funs, statics

            def loop(init, xs):
                return scan(body, init, xs, n, reverse)
        jitted = jit(loop)
        with _eager_lock:
            _EAGER[key] = jitted
            while len(_EAGER) > _EAGER_SIZE:
                _EAGER.popitem(last=False)
    init = _scalars_of(init)
    return jitted(init, xs) if kind == "scan" else jitted(init)


def _scalars_of(tree):
    """0-d arrays of the carry as Python scalars (a jitted function takes those, as static leaves, part of the
    cache key by value, and the trace reads each as a 0-d constant)."""
    leaves, _, structure = pytree.flatten(tree, "init_val")
    if not any(isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0 for x in leaves):
        return tree
    return pytree.unflatten(structure, [x.item() if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0
                                        else x for x in leaves])
