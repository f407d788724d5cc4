"""Pytrees, as ``jax.tree_util`` flattens them: the containers a jitted function's arguments and results may
be nested in, flattened to their leaves and a hashable structure (a cache key part), and rebuilt with the
same types.

Containers: ``tuple``, ``list``, ``dict`` (``collections.OrderedDict`` and ``defaultdict`` too; keys kept in
their order), ``typing.NamedTuple`` / ``collections.namedtuple`` instances, dataclass instances (every
field, rebuilt without calling ``__init__`` or ``__post_init__``, as ``copy.copy`` does) and ``None`` (a
container with no leaves, as in JAX). Anything else is a leaf; a subclass of ``tuple``, ``list`` or ``dict``
that is none of the above too. A structure is nested tuples of strings, types, keys and static values:
hashable, compared by value.
"""

from __future__ import annotations

import collections
import dataclasses

LEAF = "*"
NONE = ("None",)


def flatten(tree, path: str = "") -> tuple[list, list[str], object]:
    """``(leaves, paths, structure)``: the leaves of ``tree`` depth first, each one's path from ``tree``
    (``"['key'][0].field"``, for error messages), and the structure ``unflatten`` rebuilds ``tree`` from."""
    leaves: list = []
    paths: list[str] = []
    structure = flatten_into(tree, path, leaves, paths)
    return leaves, paths, structure


def flatten_into(x, path: str, leaves: list, paths: list, inside: tuple = ()):
    """``flatten``, appending the leaves and their paths (``path`` first) to ``leaves`` and ``paths``;
    returns the structure. ``inside``: the ids of the containers ``x`` sits in (a container inside itself is
    refused with a ``ValueError`` naming it, not a ``RecursionError``)."""
    kind = type(x)
    if is_leaf_type(kind):
        leaves.append(x)
        paths.append(path)
        return LEAF
    if x is None:
        return NONE
    if id(x) in inside:
        raise ValueError(f"{path}: a {kind.__name__} that contains itself; arguments and results must be trees "
                         "of containers (tuple, list, dict, NamedTuple, dataclass) without cycles")
    inside = (*inside, id(x))
    if kind is tuple or kind is list:
        return (kind.__name__, None, tuple(flatten_into(v, f"{path}[{i}]", leaves, paths, inside)
                                           for i, v in enumerate(x)))
    if kind is dict or kind is collections.OrderedDict or kind is collections.defaultdict:
        keys = tuple(x)
        aux = (kind, keys, x.default_factory if kind is collections.defaultdict else None)
        return ("dict", aux, tuple(flatten_into(x[k], f"{path}[{k!r}]", leaves, paths, inside) for k in keys))
    if issubclass(kind, tuple):     # a named tuple
        return ("namedtuple", kind, tuple(flatten_into(v, f"{path}.{name}", leaves, paths, inside)
                                          for name, v in zip(kind._fields, x)))
    names = tuple(f.name for f in dataclasses.fields(x))     # a dataclass instance
    return ("dataclass", (kind, names), tuple(flatten_into(getattr(x, n), f"{path}.{n}", leaves, paths, inside)
                                              for n in names))


_LEAF_TYPES: dict[type, bool] = {}


def is_leaf_type(kind: type) -> bool:
    """Whether every object of type ``kind`` is a leaf (memoized: a call's arguments are checked per call)."""
    leaf = _LEAF_TYPES.get(kind)
    if leaf is None:
        leaf = _LEAF_TYPES[kind] = not (
            kind is type(None) or kind in (tuple, list, dict, collections.OrderedDict, collections.defaultdict)
            or (issubclass(kind, tuple) and isinstance(getattr(kind, "_fields", None), tuple))
            or dataclasses.is_dataclass(kind))
    return leaf


def static(value) -> tuple:
    """The structure of a leaf kept in the structure itself (a static argument): ``unflatten`` puts ``value``
    back, and the structure's hash and equality are the value's."""
    return ("static", type(value), value)      # 1, 1.0 and True are equal, and hash alike: typed


def unflatten(structure, leaves):
    """The tree of ``structure`` (``flatten``'s) with ``leaves`` in order (any iterable)."""
    it = iter(leaves)
    tree = _build(structure, it)
    rest = next(it, it)
    if rest is not it:
        raise ValueError("unflatten: more leaves than the structure holds")
    return tree


def _build(s, it):
    if type(s) is str:
        return next(it)
    tag = s[0]
    if tag == "None":
        return None
    if tag == "static":
        return s[2]
    children = [_build(c, it) for c in s[2]]
    if tag == "tuple":
        return tuple(children)
    if tag == "list":
        return children
    if tag == "dict":
        kind, keys, factory = s[1]
        items = zip(keys, children)
        return collections.defaultdict(factory, items) if kind is collections.defaultdict else kind(items)
    if tag == "namedtuple":
        return s[1](*children)
    kind, names = s[1]            # a dataclass: its fields set as ``copy.copy`` would, no ``__init__`` run
    obj = object.__new__(kind)
    for name, value in zip(names, children):
        object.__setattr__(obj, name, value)
    return obj


def leaf_count(structure) -> int:
    """How many leaves ``structure`` holds."""
    if type(structure) is str:
        return 1
    if structure[0] in ("None", "static"):
        return 0
    return sum(leaf_count(c) for c in structure[2])
