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
