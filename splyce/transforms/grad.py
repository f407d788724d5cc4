"""``splyce.grad``, ``splyce.value_and_grad`` and ``splyce.vjp``: JAX's reverse-mode transformations over
splyce's traces (the rules: adjoint.py).

Called with tracers (inside ``@splyce.jit``, or under another transformation) they differentiate the traced
program in place, so ``jit(grad(f))`` plans the forward and backward passes as one program. Called with
arrays they run as a jitted function of their own (compiled on the first call per signature, cached after).

A gradient w.r.t. a dense argument is a dense array of its shape and dtype; w.r.t. a sparse argument it is
the gradient of its stored values, on the same pattern and of the same kind (a scipy matrix / array of the
argument's class and format, a ``SparseTensor`` for a ``SparseTensor``), as ``jax.grad`` through BCOO."""

from __future__ import annotations

import numbers
import weakref

import numpy as np

from splyce.runtime import pytree
from splyce.runtime.dispatcher import Jitted
from splyce.tensors.tensor import SparseTensor
from splyce.tracer.base import Tracer, contract
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer import captures, indexing
from splyce.tracer.tracer import todense
from splyce.transforms import adjoint, gather_adjoint, loop_adjoint  # noqa: F401  (their rules, registered)
from splyce.transforms.adjoint import finalize


def _is_traced(tree) -> bool:
    leaves, _, _ = pytree.flatten(tree)
    return any(isinstance(x, Tracer) for x in leaves)


def _check_inexact(dtype, where: str, fun_name: str) -> None:
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        raise TypeError(f"{fun_name} requires real- or complex-valued inputs (input dtype that is a sub-dtype of "
                        f"np.inexact), but got {dtype.name} for {where}. Convert it (x.astype(float)) or leave it "
                        f"out of argnums.")
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{fun_name}: complex inputs are not supported yet ({where} is {dtype.name})")


class _Transform:
    """The callable ``grad`` / ``value_and_grad`` return."""

    def __init__(self, fun, argnums, has_aux: bool, with_value: bool, name: str):
        if not callable(fun):
            raise TypeError(f"{name}: the function to differentiate must be callable, got {type(fun).__name__}")
        nums = (argnums,) if isinstance(argnums, numbers.Integral) else tuple(argnums)
        if not nums or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) for n in nums):
            raise TypeError(f"{name}: argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
        # (prefixed: ``jit`` copies a wrapped callable's attributes onto itself, functools.update_wrapper)
        self._grad_fun, self._grad_argnums, self._grad_has_aux = fun, argnums, has_aux
        self._grad_with_value, self._grad_name = with_value, name
        self._grad_nums = tuple(int(n) for n in nums)
        self._grad_jitted = None
        # the name and docs only: a ``__wrapped__`` would let ``jit`` (its signature, its named constants)
        # look through to ``fun`` and trace it untransformed
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(fun, attr):
                setattr(self, attr, getattr(fun, attr))

    def traced(self, *args, **kwargs):
        """The transformation on tracers: ``(value, grads, aux)``."""
        nums = [n if n >= 0 else len(args) + n for n in self._grad_nums]
        if any(not 0 <= n < len(args) for n in nums):
            raise TypeError(f"{self._grad_name}: argnums {self._grad_argnums!r} out of range for {len(args)} positional "
                            "arguments")
        wrt, structures = [], []
        args = list(args)
        for n in nums:
            leaves, paths, structure = pytree.flatten(args[n], f"argument {n}")
            if any(_python_real(leaf) for leaf in leaves):   # JAX's weak-typed scalar: traced, differentiable
                leaves = [_traced_number(leaf, path or f"argument {n}", self._grad_name) if _python_real(leaf)
                          else leaf for leaf, path in zip(leaves, paths)]
                args[n] = pytree.unflatten(structure, leaves)
            for leaf, path in zip(leaves, paths):
                if not isinstance(leaf, Tracer):
                    raise TypeError(f"{self._grad_name}: {path or f'argument {n}'} is {type(leaf).__name__}, not an "
                                    "array; only array arguments can be differentiated")
                _check_inexact(leaf.dtype, path or f"argument {n}", self._grad_name)
                if leaf.node in wrt:
                    raise ValueError(f"{self._grad_name}: {path or f'argument {n}'} is the same traced value as "
                                     "another differentiated argument; each would get the whole gradient. Pass "
                                     "it once, or pass a copy (x + 0.0)")
                wrt.append(leaf.node)
            structures.append((structure, len(leaves)))
        out = self._grad_fun(*args, **kwargs)
        aux = None
        if self._grad_has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError(f"{self._grad_name} with has_aux=True: the function must return a pair (output, aux), "
                                f"got {type(out).__name__}")
            out, aux = out
        if _python_real(out):   # a constant output (a Python number): JAX's zero gradients
            _check_inexact(np.asarray(out).dtype, "the function's output", self._grad_name)
            grads = [finalize(node, None) for node in wrt]
            trees, at = [], 0
            for structure, count in structures:
                trees.append(pytree.unflatten(structure, grads[at: at + count]))
                at += count
            return out, trees[0] if isinstance(self._grad_argnums, numbers.Integral) else tuple(trees), aux
        if not isinstance(out, Tracer) or out.node.type.ndim != 0:
            shape = getattr(out, "shape", None)
            raise TypeError(f"{self._grad_name}: the function must return a scalar (a 0-d array), got "
                            f"{type(out).__name__}{'' if shape is None else f' of shape {shape}'}; for a "
                            "non-scalar output use splyce.vjp")
        _check_inexact(out.dtype, "the function's output", self._grad_name)
        cts = adjoint.backward([(out.node, adjoint.Fill(1.0, ()))], wrt)
        grads = [finalize(node, ct) for node, ct in zip(wrt, cts)]
        trees, at = [], 0
        for structure, count in structures:
            trees.append(pytree.unflatten(structure, grads[at: at + count]))
            at += count
        result = trees[0] if isinstance(self._grad_argnums, numbers.Integral) else tuple(trees)
        return out, result, aux

    def __call__(self, *args, **kwargs):
        if _is_traced((args, kwargs)):
            value, grads, aux = self.traced(*args, **kwargs)
        else:
            args, squeezed = _as_arrays(args, self._grad_nums, self._grad_name)
            if self._grad_jitted is None:
                self._grad_jitted = {}
            jitted = self._grad_jitted.get(squeezed)
            if jitted is None:
                jitted = self._grad_jitted[squeezed] = Jitted(_packed(self.traced, squeezed))
            value, grads, aux = jitted(*args, **kwargs)
            grads = _restore(grads, args, self._grad_nums, self._grad_argnums)
        if self._grad_with_value:
            return ((value, aux), grads) if self._grad_has_aux else (value, grads)
        return (grads, aux) if self._grad_has_aux else grads


def _python_real(x) -> bool:
    """A Python (or NumPy scalar) int or float, not a bool: what ``jit`` reads as a static value."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) and not isinstance(x, Tracer)


def _traced_number(x, where: str, fun_name: str) -> Tracer:
    """A Python float differentiated under ``jit`` (where numbers are static values, part of the signature):
    a 0-d float64 value of the trace of its own (a constant frozen into the plan, a node no other constant
    shares), so the gradient w.r.t. it is its own 0-d result, as ``jax.grad`` gives for a weak-typed scalar.
    An int is refused as JAX refuses it."""
    dtype = np.asarray(x).dtype
    _check_inexact(dtype, where, fun_name)
    node = captures.constant_node(np.asarray([x], dtype=np.float64 if isinstance(x, float) else dtype))
    if node is None:
        raise TypeError(f"{fun_name}: {where} is a number outside a trace")
    return indexing.reshape(Tracer(node), ())


def _packed(traced, squeezed=()):
    """``traced`` as a function of arrays: the leaves ``squeezed`` names ((argument, leaf) pairs), passed as
    1-element vectors (a kernel takes no 0-d arrays), read back as the 0-d values they stand for."""
    def run(*args, **kwargs):
        if squeezed:
            args = list(args)
            for n in {n for n, _ in squeezed}:
                leaves, _, structure = pytree.flatten(args[n])
                leaves = [indexing.reshape(x, ()) if (n, i) in squeezed else x for i, x in enumerate(leaves)]
                args[n] = pytree.unflatten(structure, leaves)
        return traced(*args, **kwargs)
    return run


def _as_arrays(args, nums, name):
    """The differentiated arguments' 0-d leaves (Python numbers, 0-d arrays) as 1-element vectors, and
    which they are."""
    args = list(args)
    squeezed = []
    for n in nums:
        if -len(args) <= n < len(args):
            n = n % len(args)
            leaves, paths, structure = pytree.flatten(args[n])
            fixed = []
            for i, (leaf, path) in enumerate(zip(leaves, paths)):
                if isinstance(leaf, numbers.Number) and not isinstance(leaf, bool):
                    leaf = np.asarray(leaf, dtype=np.float64 if isinstance(leaf, float) else np.asarray(leaf).dtype)
                dtype = getattr(leaf, "dtype", None)
                if dtype is not None:
                    _check_inexact(dtype, path or f"argument {n}", name)
                if isinstance(leaf, np.ndarray) and leaf.ndim == 0:
                    leaf = leaf.reshape(1)
                    squeezed.append((n, i))
                fixed.append(leaf)
            args[n] = pytree.unflatten(structure, fixed)
    return tuple(args), tuple(squeezed)


def _restore(grads, args, nums, argnums):
    """Each sparse gradient on its argument's pattern, of its argument's class (a jitted result is a scipy
    array of splyce's choice of format)."""
    per_arg = (grads,) if isinstance(argnums, numbers.Integral) else grads
    out = []
    for n, g in zip(nums, per_arg):
        arg_leaves, _, _ = pytree.flatten(args[n])
        g_leaves, _, structure = pytree.flatten(g)
        fixed = [on_pattern(a, r) if _sparse_object(a) else np.asarray(r) for a, r in zip(arg_leaves, g_leaves)]
        out.append(pytree.unflatten(structure, fixed))
    return out[0] if isinstance(argnums, numbers.Integral) else tuple(out)


def _sparse_object(x) -> bool:
    if isinstance(x, SparseTensor):
        return not x.format.is_dense
    return type(x).__module__.startswith("scipy.sparse")


def _coords_of(x):
    """``(shape, coordinate arrays in stored order)`` of a scipy sparse object or a SparseTensor."""
    if isinstance(x, SparseTensor):
        return x.shape, [np.asarray(c, dtype=np.int64) for c in x.coords()]
    fmt = x.format
    if fmt in ("csr", "csc"):
        major = np.repeat(np.arange(len(x.indptr) - 1, dtype=np.int64), np.diff(x.indptr))
        minor = x.indices.astype(np.int64)
        return x.shape, ([major, minor] if fmt == "csr" else [minor, major])
    if fmt == "coo":
        return x.shape, [np.asarray(c, dtype=np.int64) for c in x.coords]
    return None


def on_pattern(arg, result):
    """``result`` (a sparse gradient of splyce's format) as the values stored at ``arg``'s entries, in
    ``arg``'s class and format (0 where ``result`` stores nothing)."""
    dtype = arg.dtype
    if (not isinstance(arg, SparseTensor) and type(result).__module__.startswith("scipy.sparse")
            and result.format == arg.format and arg.format in ("csr", "csc")
            and np.array_equal(result.indptr, arg.indptr) and np.array_equal(result.indices, arg.indices)):
        values = result.data
    else:
        located = _coords_of(arg)
        if located is None:   # bsr / dia / lil / dok: through CSR, converted back
            return type(arg)(on_pattern(arg.tocsr(), result)).asformat(arg.format)
        shape, coords = located
        if isinstance(result, SparseTensor):
            r_coords, r_values = [np.asarray(c, dtype=np.int64) for c in result.coords()], result.values
        elif type(result).__module__.startswith("scipy.sparse"):
            coo = result.tocoo()
            r_coords, r_values = [np.asarray(c, dtype=np.int64) for c in coo.coords], coo.data
        else:   # a dense result
            dense = np.asarray(result)
            values = dense[tuple(coords)]
            return _with_values(arg, values.astype(dtype, copy=False))
        values = _lookup(shape, coords, r_coords, np.asarray(r_values))
    return _with_values(arg, np.asarray(values).astype(dtype, copy=True))


def _lookup(shape, coords, r_coords, r_values):
    if len(coords[0]) == 0:
        return np.zeros(0, dtype=r_values.dtype)
    keys = np.ravel_multi_index(coords, shape)
    if len(r_coords[0]) == 0:
        return np.zeros(len(keys), dtype=r_values.dtype)
    r_keys = np.ravel_multi_index(r_coords, shape)
    order = np.argsort(r_keys, kind="stable")
    r_keys, r_values = r_keys[order], r_values[order]
    unique, start = np.unique(r_keys, return_index=True)
    sums = np.add.reduceat(r_values, start)
    pos = np.minimum(np.searchsorted(unique, keys), len(unique) - 1)
    found = unique[pos] == keys
    out = np.zeros(len(keys), dtype=r_values.dtype)
    out[found] = sums[pos[found]]
    return out


def _with_values(arg, values):
    if isinstance(arg, SparseTensor):
        return arg.with_values(values)
    out = arg.copy()
    out.data = values
    return out


def grad(fun, argnums=0, has_aux=False):
    """The gradient of ``fun``, a function of arrays returning a scalar, as ``jax.grad``.

    Parameters
    ----------
    fun : callable
        Traced as ``splyce.jit`` traces (sparse and dense arrays, NumPy / scipy operators); a jitted
        function too (it is inlined).
    argnums : int or tuple of int
        The positional arguments to differentiate (each an array or a pytree of arrays of a float dtype).
    has_aux : bool
        ``fun`` returns ``(output, aux)``; the gradient is of ``output`` and ``aux`` is returned beside it.

    Returns
    -------
    callable
        Called as ``fun``, it returns the gradient (a tuple of them for a tuple ``argnums``; ``(grads, aux)``
        with ``has_aux``): a dense array for a dense argument, the gradient of the stored values on the
        argument's own pattern and class for a sparse one.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
    >>> loss = lambda A, x: ((A @ x) ** 2).sum()
    >>> splyce.grad(loss, argnums=1)(A, np.ones(2))
    array([22., 30.])
    >>> splyce.grad(loss)(A, np.ones(2)).toarray()     # d/dA at A's pattern only
    array([[ 2.,  0.],
           [10., 10.]])
    """
    return _Transform(fun, argnums, has_aux, False, "grad")


def value_and_grad(fun, argnums=0, has_aux=False):
    """``fun``'s value and gradient in one program, as ``jax.value_and_grad``: returns ``(value, grads)``,
    or ``((value, aux), grads)`` with ``has_aux``. Parameters as ``grad``."""
    return _Transform(fun, argnums, has_aux, True, "value_and_grad")


def vjp(fun, *primals, has_aux=False):
    """``(fun(*primals), vjp_fn)`` as ``jax.vjp``: ``vjp_fn(cotangent)`` (a cotangent of the output's
    structure, shapes and kinds) returns the tuple of the primals' cotangents. Inside a jitted function the
    forward and backward passes are one trace; outside, ``vjp_fn`` runs a jitted program of its own that
    recomputes the forward pass."""
    if _is_traced(primals):
        return _traced_vjp(fun, primals, has_aux)
    runners = _VJP_RUNNERS.get(fun)
    if runners is None or runners[2] != has_aux:
        runners = _VJP_RUNNERS[fun] = (Jitted(_packed(lambda *p: fun(*p))),
                                       Jitted(_packed(lambda p, ct: _traced_vjp(fun, p, has_aux)[1](ct))), has_aux)
    forward, backward_fn, _ = runners
    out = forward(*primals)

    def vjp_fn(ct):
        grads = backward_fn(tuple(primals), ct)
        return _restore(tuple(grads), primals, tuple(range(len(primals))), tuple(range(len(primals))))
    if has_aux:
        out, aux = out
        return (out, vjp_fn, aux)
    return (out, vjp_fn)


_VJP_RUNNERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # fun -> (forward, backward, has_aux)


def _traced_vjp(fun, primals, has_aux):
    wrt, structures = [], []
    for n, p in enumerate(primals):
        leaves, paths, structure = pytree.flatten(p, f"primal {n}")
        for leaf, path in zip(leaves, paths):
            if not isinstance(leaf, Tracer):
                raise TypeError(f"vjp: {path} is {type(leaf).__name__}, not an array")
            _check_inexact(leaf.dtype, path, "vjp")
            if leaf.node in wrt:
                raise ValueError(f"vjp: {path} is the same traced value as another primal; pass it once")
            wrt.append(leaf.node)
        structures.append((structure, len(leaves)))
    out = fun(*primals)
    aux = None
    if has_aux:
        out, aux = out
    out_leaves, _, out_structure = pytree.flatten(out)

    def vjp_fn(ct):
        ct_leaves, _, ct_structure = pytree.flatten(ct)
        if len(ct_leaves) != len(out_leaves):
            raise ValueError(f"vjp: the cotangent has {len(ct_leaves)} leaves, the output {len(out_leaves)}")
        seeds = []
        for o, c in zip(out_leaves, ct_leaves):
            if not isinstance(o, Tracer):
                continue
            if isinstance(c, numbers.Number):
                if o.node.type.ndim != 0:
                    raise ValueError(f"vjp: a number cotangent for an output of shape {o.shape}")
                seeds.append((o.node, adjoint.Fill(c, ())))
                continue
            if not isinstance(c, Tracer) or tuple(c.shape) != tuple(o.shape):
                raise ValueError(f"vjp: a cotangent of shape {getattr(c, 'shape', None)} for an output of shape "
                                 f"{o.shape}")
            seeds.append((o.node, c))
        cts = adjoint.backward(seeds, wrt)
        grads = [finalize(node, c) for node, c in zip(wrt, cts)]
        trees, at = [], 0
        for structure, count in structures:
            trees.append(pytree.unflatten(structure, grads[at: at + count]))
            at += count
        return tuple(trees)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)
