"""How a jitted function is called, as ``jax.jit`` calls: keyword arguments bound to the function's signature
(defaults applied, Python's own ``TypeError`` for a wrong call), ``static_argnums`` / ``static_argnames``
(arguments keyed by value and passed as they are), and pytree arguments (runtime/pytree.py) whose array
leaves become the kernel's inputs and whose other leaves are static.

A call is canonicalized to ``(positional, keywords)`` as Python binds it (every positional-or-keyword
parameter positional, defaults filled in), so ``f(A, x)``, ``f(A, x=x)`` and ``f(a=A, x=x)`` share a kernel.
"""

from __future__ import annotations

import functools
import inspect
import keyword

import numpy as np

from splyce.runtime import arguments, pytree
from splyce.runtime.signature import fast_signature
from splyce.tensors.tensor import SparseTensor
from splyce.tracer.tracer import Tracer

# default values that cannot change between calls: a call that leaves them out may still take the cached
# fast path (``Call.operands``)
_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_FAST = (SparseTensor, np.ndarray, arguments.Checked)    # the leaves ``fast_signature`` keys
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Call:
    """One call's canonical arguments, flattened."""

    __slots__ = ("leaves", "paths", "structure", "operands", "traced")

    def __init__(self, leaves, paths, structure, operands, traced):
        self.leaves = leaves          # the arguments' leaves (arrays and static values), depth first
        self.paths = paths            # each leaf's name in error messages ("argument 1['w']")
        self.structure = structure    # pytree.unflatten(structure, leaves) == (positional, keywords)
        # the arguments whose ``signature.fast_signature`` (with the function) determines the kernel, when they
        # are all the call passes but unchanging defaults (bound positionally, each a leaf), else None
        self.operands = operands
        self.traced = traced          # a Tracer among them: called from a jitted function being traced


class Convention:
    """A function's calling convention: its signature and its static arguments."""

    def __init__(self, fun, static_argnums=None, static_argnames=None):
        self.fun = fun
        try:
            signature = inspect.signature(fun)
        except (TypeError, ValueError):    # a builtin without a signature: its arguments are taken as given
            signature = None
        self._signature = signature
        self._bind = None if signature is None else _binder(fun, signature)
        nums, names = _infer(signature, _index_tuple(static_argnums), _name_tuple(static_argnames))
        self.static_argnums, self.static_argnames = nums, names
        self._static_names = frozenset(names)
        params = [] if signature is None else list(signature.parameters.values())
        # ``f(a, b)`` called with two positional arguments binds to them as they are
        self._exact = len(params) if all(p.kind in _POSITIONAL for p in params) else -1
        # a call ``f(A, x)`` of leaves, flattened: its names and structure made once (``static_argnums``: never)
        self._leaves_only = -1 if nums else self._exact
        self._flat = (_names(self._exact), _flat(self._exact)) if self._exact >= 0 else None
        self._positional = [p.name for p in params if p.kind in _POSITIONAL]

    def bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``(positional, keywords)`` as Python binds ``fun(*args, **kwargs)``; raises the ``TypeError`` the
        function itself would raise for a wrong call."""
        if self._bind is None or (not kwargs and len(args) == self._exact):
            return args, dict(kwargs)
        return self._bind(*args, **kwargs)

    def flatten(self, args: tuple, kwargs: dict) -> Call:
        """The call ``fun(*args, **kwargs)``, canonicalized and flattened."""
        if not kwargs and len(args) == self._leaves_only:
            traced = False                       # ``f(A, x)``: each argument a leaf (a scipy operand's call)
            for a in args:
                kind = _KINDS.get(type(a))
                if kind is None:
                    kind = _kind(type(a))
                if kind == 0:
                    break
                traced = traced or kind == 2
            else:
                names, structure = self._flat
                return Call(list(args), names, structure, args, traced)
        positional, keywords = self.bind(args, kwargs)
        statics = {i + len(positional) if i < 0 else i for i in self.static_argnums}
        leaves, paths, parts = [], [], []
        static_values = []
        for i, a in enumerate(positional):
            if i in statics:
                parts.append(pytree.static(a))
                static_values.append((a, self._where(i), "static_argnums"))
            else:
                parts.append(pytree.flatten_into(a, f"argument {i}", leaves, paths))
        named = []
        for name, a in keywords.items():
            if name in self._static_names:
                named.append(pytree.static(a))
                static_values.append((a, f"argument {name!r}", "static_argnames"))
            else:
                named.append(pytree.flatten_into(a, f"argument {name!r}", leaves, paths))
        structure = ("tuple", None, (("tuple", None, tuple(parts)),
                                     ("dict", (dict, tuple(keywords), None), tuple(named))))
        traced = any(isinstance(x, Tracer) for x in leaves) or any(isinstance(v, Tracer) for v, _, _ in static_values)
        if not traced:
            for value, where, how in static_values:
                _check_static(value, where, how)
        return Call(leaves, paths, structure, self._operands(positional, keywords, parts, args, kwargs), traced)

    def _operands(self, positional, keywords, parts, args, kwargs):
        """``Call.operands``: the positional arguments up to the trailing defaults the call left out that are
        atoms (they cannot change between calls), when every one is a leaf (not static) and every keyword is
        such a default."""
        if any(name in kwargs or type(v) not in _ATOMS for name, v in keywords.items()):
            return None
        n = len(positional)
        names = self._positional
        while n > len(args) and n <= len(names) and names[n - 1] not in kwargs \
                and type(positional[n - 1]) in _ATOMS:
            n -= 1
        return positional[:n] if all(type(p) is str for p in parts[:n]) else None

    def _where(self, i: int) -> str:
        name = self._positional[i] if i < len(self._positional) else None
        return f"argument {i}" + (f" ({name!r})" if name else "")


_KINDS: dict[type, int] = {}     # per type: 0 a container, 1 a leaf, 2 a traced leaf


def _kind(kind: type) -> int:
    _KINDS[kind] = value = 0 if not pytree.is_leaf_type(kind) else 2 if issubclass(kind, Tracer) else 1
    return value


@functools.cache
def _names(n: int) -> tuple[str, ...]:
    return tuple(f"argument {i}" for i in range(n))


@functools.cache
def _flat(n: int) -> tuple:
    """The structure of a call with ``n`` positional leaves (``Convention.flatten``'s)."""
    return ("tuple", None, (("tuple", None, (pytree.LEAF,) * n), ("dict", (dict, (), None), ())))


def signature(call: Call, values: list) -> tuple[tuple | None, tuple | None]:
    """``(signature, operands)``: the key a kernel is filed under for calls like this one, as the dispatcher's
    fast path files positional calls (``signature.fast_signature``, filling ``values``), and the arguments it
    keys; ``(None, None)`` when there is none. A call of pytrees, keywords or static arguments is keyed by its
    structure (static arguments' values in it), its static leaves' types and values, and its array leaves'
    fast signature: every leaf a checked SparseTensor, an ndarray or an atom (None, bool, int, float, complex,
    str, bytes)."""
    if call.operands is not None:
        parts = fast_signature(call.operands, values)
        if parts is not None:
            return parts, call.operands
        values.clear()            # (a Python scalar among them: keyed below)
    tensors, statics = [], []
    for leaf in call.leaves:
        kind = type(leaf)
        if kind in _FAST:
            tensors.append(leaf)
            statics.append(None)
        elif kind in _ATOMS:
            statics.append((kind, leaf))     # typed: 1, 1.0 and True are equal values
        else:
            return None, None
    parts = fast_signature(tensors, values)
    if parts is None:
        return None, None
    return ("call", call.structure, tuple(statics), parts), tensors    # never a positional call's signature


def arguments_of(structure, leaves) -> tuple[tuple, dict]:
    """``(positional, keywords)`` of a flattened call, with ``leaves`` in place of its leaves."""
    positional, keywords = pytree.unflatten(structure, leaves)
    return positional, keywords


def _check_static(value, where: str, how: str) -> None:
    """A static argument must be hashable (it is part of the cache key by value) and not an array."""
    if arguments.is_tensor(value):
        kind = f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
        raise TypeError(f"Non-hashable static arguments are not supported: {where} is static ({how}) but is an "
                        f"array ({kind}); static arguments are part of the cache key by value. Remove it from "
                        f"{how} to pass it as a traced input")
    try:
        hash(value)
    except TypeError as exc:
        raise TypeError(f"Non-hashable static arguments are not supported: {where} is static ({how}) but "
                        f"{type(value).__name__} {value!r} cannot be hashed ({exc}); pass a hashable value "
                        "(a tuple instead of a list, a frozenset instead of a set)") from None


def _index_tuple(nums) -> tuple[int, ...]:
    if nums is None:
        return ()
    nums = (nums,) if isinstance(nums, int) else tuple(nums)
    for n in nums:
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"static_argnums must be an int or a sequence of ints, got {n!r}")
    return nums


def _name_tuple(names) -> tuple[str, ...]:
    if names is None:
        return ()
    names = (names,) if isinstance(names, str) else tuple(names)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"static_argnames must be a str or a sequence of str, got {n!r}")
    return names


def _infer(signature, nums: tuple, names: tuple) -> tuple[tuple, tuple]:
    """``jax.jit``'s ``_infer_argnums_and_argnames``: given only ``static_argnums``, the names of those
    positional-or-keyword parameters are static too, and the other way round; both given, each as it is.
    Indices out of range or names the function does not take raise ``ValueError``, as in JAX."""
    if signature is None:
        return nums, names
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    if not var_positional:
        bad = [n for n in nums if not -len(positional) <= n < len(positional)]
        if bad:
            raise ValueError(f"jitted function has static_argnums={nums}, but only accepts {len(positional)} "
                             "positional arguments")
        nums = tuple(n % len(positional) for n in nums)
    by_name = {p.name: p for p in params}
    bad = [n for n in names if (n not in by_name and not var_keyword)
           or (n in by_name and by_name[n].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.VAR_POSITIONAL,
                                                    inspect.Parameter.VAR_KEYWORD))]
    if bad:
        raise ValueError(f"jitted function has invalid argnames {set(bad)} in static_argnames. Function does not "
                         "take these args (or takes them positionally only)")
    index = {p.name: i for i, p in enumerate(positional) if p.kind is p.POSITIONAL_OR_KEYWORD}
    given_nums = bool(nums)
    nums = tuple(dict.fromkeys(nums + tuple(index[n] for n in names if n in index)))
    if given_nums and not names:
        names = tuple(positional[n].name for n in nums
                      if 0 <= n < len(positional) and positional[n].kind is positional[n].POSITIONAL_OR_KEYWORD)
    # names bound positionally are static by their index; the rest (keyword-only, **kwargs) by name
    return nums, tuple(n for n in names if n not in index)


def _binder(fun, signature: inspect.Signature):
    """A function with ``fun``'s parameters (and name, for Python's error messages) that returns them as
    ``(positional, keywords)``: binding at the cost of one Python call, wrong calls rejected by Python itself
    with the message ``fun`` would give."""
    params, positional, keywords, defaults = [], [], [], {}
    kinds = [p.kind for p in signature.parameters.values()]
    for k, p in enumerate(signature.parameters.values()):
        name = p.name
        text = name
        if p.default is not p.empty:
            defaults[f"__splyce_default_{k}"] = p.default
            text = f"{name}=__splyce_default_{k}"
        if p.kind is p.VAR_POSITIONAL:
            text = "*" + name
            positional.append("*" + name)
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + name
            keywords.append("**" + name)
        elif p.kind is p.KEYWORD_ONLY:
            if p.VAR_POSITIONAL not in kinds and "*" not in params:
                params.append("*")
            keywords.append(f"{name!r}: {name}")
        else:
            positional.append(name)
        params.append(text)
        if p.kind is p.POSITIONAL_ONLY and (k + 1 == len(kinds) or kinds[k + 1] is not p.POSITIONAL_ONLY):
            params.append("/")
    name = getattr(fun, "__name__", None) or type(fun).__name__
    body = "({}{})".format(", ".join(positional), "," if len(positional) == 1 else "")
    source = f"def {_identifier(name)}({', '.join(params)}):\n    return {body}, {{{', '.join(keywords)}}}\n"
    namespace = dict(defaults)
    exec(compile(source, f"<splyce.jit binding of {name}>", "exec"), namespace)
    binder = namespace[_identifier(name)]
    qualname = getattr(fun, "__qualname__", name)
    if isinstance(name, str) and isinstance(qualname, str):   # Python's messages name the function so
        binder.__name__, binder.__qualname__ = name, qualname
        binder.__code__ = binder.__code__.replace(co_name=name, co_qualname=qualname)
    return binder


def _identifier(name) -> str:
    return name if isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) else "f"

