"""How many threads a call runs on when it does not say: the process default.

``threads=None`` (the default of the drop-ins, ``splyce.jit`` and ``patch_scipy``) means this count: the
innermost ``splyce.use_threads(n)`` block, else ``splyce.set_threads(n)``, else the ``SPLYCE_NUM_THREADS``
environment variable (read at import and by ``set_threads(None)``), else every core this process may run on.
Each op still keeps a call on one thread when its work is too small to gain from a second (the per-op
thresholds, docs/threads.md), and the result is bit-identical for any count.

A ground floor: imports nothing from splyce.
"""

from __future__ import annotations

import contextlib
import contextvars
import os

ENV = "SPLYCE_NUM_THREADS"


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else ``os.cpu_count()``)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _checked(n, what: str) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be a positive int or None (all cores), got {n!r}")
    return int(n)


def _from_env() -> int | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV}={text!r}: write a positive number of threads (1: one thread, as scipy), "
                         f"or unset it for every core")
    return n


_process: int = _from_env() or cores()
_scoped: contextvars.ContextVar = contextvars.ContextVar("splyce_threads", default=None)


def get_threads() -> int:
    """The thread count of a call that does not give one (``threads=None``)."""
    scoped = _scoped.get()
    return _process if scoped is None else scoped


def set_threads(n: int | None) -> None:
    """Set the process default thread count: ``n`` threads, ``1`` for one thread (as scipy), ``None`` back to
    ``SPLYCE_NUM_THREADS`` or every core. Calls that give ``threads=`` keep it."""
    global _process
    n = _checked(n, "set_threads(n)")
    _process = n if n is not None else (_from_env() or cores())


@contextlib.contextmanager
def use_threads(n: int | None):
    """``with splyce.use_threads(1): ...``: the default thread count inside the block (in this thread and the
    context it runs in); ``None``: every core."""
    token = _scoped.set(_checked(n, "use_threads(n)") or cores())
    try:
        yield
    finally:
        _scoped.reset(token)


def resolve(threads) -> int:
    """A call's thread count: ``threads`` itself, or the default for None. ValueError for anything else."""
    if threads is None:
        scoped = _scoped.get()
        return _process if scoped is None else scoped
    if type(threads) is int and threads >= 1:
        return threads
    return _checked(threads, "threads")
