"""The registry of the jit's native kernel library providers (runtime/library.py asks them; ``splyce``'s
``__init__`` registers the drop-ins'). A module of its own, importing nothing, so that registering at
``import splyce`` imports neither the jit's runtime (library.py needs the tracer's types) nor the drop-ins."""

from __future__ import annotations

import threading

_providers: list = []
_lock = threading.Lock()


def register(provider) -> None:
    """Add a provider: ``provider(op: LibraryOp, options: Options) -> LibraryCall | None``."""
    with _lock:
        if provider not in _providers:
            _providers.append(provider)


def registered() -> list:
    """The providers, in the order they were registered."""
    return list(_providers)


_result_builders: dict = {}


def register_result_builder(kind: str, build) -> None:
    """Register how a result of ``kind`` is made: ``"csr"``: ``build(cls, data, indices, indptr, shape,
    sorted_unique)``, a scipy CSR / CSC class's object over the arrays without scipy's checking constructor
    (the drop-ins' ``scipy_out.csr``, which ``splyce`` registers: the arrays are a kernel's well-formed result)."""
    with _lock:
        _result_builders[kind] = build


def result_builder(kind: str):
    """The registered builder of ``kind``, or None."""
    return _result_builders.get(kind)
