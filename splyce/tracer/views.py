"""Which traced results are views of an argument: the argument itself or its transpose (``a.T``), returned as
scipy returns ``A.T``, over the argument's own buffers (docs/semantics.md, "Results and aliasing").

While a function is traced, ``transpose`` notes each sparse transpose it makes with the tracer it was taken
of (``note``); the dispatcher asks, for each tracer returned, whether it leads back to one of the argument
tracers through such transposes alone (``aliases``). A tracer is an object: ``a.copy()`` is a new tracer
of the same node, noted nowhere, so a copy never aliases, though the trace (hash-consed nodes) cannot tell it
from ``a``. Outside a recording nothing is noted."""

from __future__ import annotations

import contextlib
import contextvars

_noted: contextvars.ContextVar = contextvars.ContextVar("splyce_views", default=None)


@contextlib.contextmanager
def recording():
    """Note transposes made while the block runs (one function's trace)."""
    token = _noted.set({})
    try:
        yield
    finally:
        _noted.reset(token)


def note(result, source) -> None:
    """``result`` is ``source`` relabelled (a sparse transpose over the same buffers)."""
    noted = _noted.get()
    if noted is not None:
        noted[id(result)] = (result, source)


def aliases(tracer, arguments) -> bool:
    """Whether ``tracer`` is one of ``arguments`` (the argument tracers) or a chain of noted transposes of
    one."""
    noted = _noted.get() or {}
    for _ in range(64):
        if any(tracer is a for a in arguments):
            return True
        entry = noted.get(id(tracer))
        if entry is None or entry[0] is not tracer:
            return False
        tracer = entry[1]
    return False
