"""The registry of the jit's native kernel library providers (runtime/library.py asks them; ``splyce.dropin``
registers its own). A module of its own, importing nothing, so that registering costs a drop-in process no
import of the jit's runtime (library.py needs NumPy and the tracer's types)."""

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
