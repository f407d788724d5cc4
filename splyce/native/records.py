"""``record``: small immutable value classes (keys, plans, descriptions) at a fraction of a dataclass's import
cost.

Why: ``@dataclass(frozen=True)`` compiles five or six generated methods per class when its module is imported,
~0.5-1.3 ms a class; a fresh process's first drop-in or jitted call imports a dozen such classes, a good part
of its fixed cost (docs/caches.md). ``record`` compiles only ``__init__`` (one small function, so that making
an instance stays as fast as a dataclass's) and takes equality, hashing and ``repr`` from one ``attrgetter``
over the fields.

The fields are the class's annotations, in order; a class attribute of the same name is the default. Instances
are frozen (assigning a field raises ``AttributeError``), compare equal by type and fields (``compare``: the
fields that count, all by default), hash accordingly, pickle, and have ``_fields`` and ``_replace(**changes)``.
"""

from __future__ import annotations

from operator import attrgetter


class FrozenRecordError(AttributeError):
    pass


def record(cls=None, *, compare: tuple | None = None):
    """Decorate a class with annotated fields (see the module's docstring)."""
    if cls is None:
        return lambda c: record(c, compare=compare)
    fields = tuple(cls.__dict__.get("__annotations__", {}))
    defaults = {name: cls.__dict__[name] for name in fields if name in cls.__dict__}
    seen_default = False
    for name in fields:
        if name in defaults:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
    params = ", ".join(f"{name}=_defaults[{name!r}]" if name in defaults else name for name in fields)
    body = "".join(f"    _set(self, {name!r}, {name})\n" for name in fields) or "    pass\n"
    if "__post_init__" in cls.__dict__:
        body += "    self.__post_init__()\n"
    namespace = {"_set": object.__setattr__, "_defaults": defaults}
    exec(f"def __init__(self, {params}):\n{body}", namespace)   # noqa: S102 - built from the field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"

    compared = fields if compare is None else tuple(compare)
    single = len(compared) == 1
    get = attrgetter(*compared) if compared else (lambda self: ())
    get_all = attrgetter(*fields) if fields else (lambda self: ())

    def values(self):
        value = get(self)
        return (value,) if single else value

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values(self) == values(other)

    def __hash__(self):
        return hash(values(self))

    def __repr__(self):
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in fields)})"

    def __setattr__(self, name, value):
        raise FrozenRecordError(f"cannot assign to field {name!r} of a {self.__class__.__name__}")

    def __delattr__(self, name):
        raise FrozenRecordError(f"cannot delete field {name!r} of a {self.__class__.__name__}")

    def __reduce__(self):
        every = get_all(self)
        return self.__class__, ((every,) if len(fields) == 1 else tuple(every))

    def _replace(self, **changes):
        return self.__class__(**{n: changes.pop(n, getattr(self, n)) for n in fields}, **changes)

    for name, value in (("__init__", init), ("__eq__", __eq__), ("__hash__", __hash__), ("__repr__", __repr__),
                        ("__setattr__", __setattr__), ("__delattr__", __delattr__), ("__reduce__", __reduce__),
                        ("_replace", _replace)):
        if name == "__repr__" and "__repr__" in cls.__dict__:
            continue
        setattr(cls, name, value)
    cls._fields = fields
    cls.__match_args__ = fields
    return cls
