"""How many threads a call runs on when it does not say: the process default.

``threads=None`` (the default of the drop-ins, ``splyce.jit`` and ``patch_scipy``) means this count: the
innermost ``splyce.use_threads(n)`` block, else ``splyce.set_threads(n)``, else the ``SPLYCE_NUM_THREADS``
environment variable (read at import and by ``set_threads(None)``), else every core this process may run on, of which a call takes those other processes leave idle (the
machine's runnable tasks now, as GNU OpenMP's ``OMP_DYNAMIC``).
Each op still keeps a call on one thread when its work is too small to gain from a second (the per-op
thresholds, docs/threads.md), and the result is bit-identical for any count.

A ground floor: imports nothing from splyce.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time

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


_CORES = cores()
_env = _from_env()
_process: int = _env or cores()
_chosen: bool = _env is not None     # set_threads(n) or SPLYCE_NUM_THREADS: the count as given, load or not
_scoped: contextvars.ContextVar = contextvars.ContextVar("splyce_threads", default=None)


def get_threads() -> int:
    """The default thread count (``use_threads`` / ``set_threads`` / ``SPLYCE_NUM_THREADS`` / every core):
    what a ``jit`` left at ``threads=None`` compiles for. A call may run on fewer (``call_threads``)."""
    scoped = _scoped.get()
    return _process if scoped is None else scoped


# -- the load: a default left to every core takes only the cores other processes leave idle ------------------
# On a machine whose cores are all busy with other processes (the shared 2-core VM: 7-17 runnable tasks),
# a second thread waits for a core and the call waits for it: every op measured 0.2-0.9x of one thread there
# (bench default_threads, 2026-12-07). As GNU OpenMP's OMP_DYNAMIC, the automatic default runs on the cores
# that are idle: the runnable tasks of the whole machine now (the 4th field of /proc/loadavg, this thread
# included), sampled at most every LOAD_SAMPLE_S.
LOAD_SAMPLE_S = 0.02
_load = [0.0, 0]          # [when sampled (time.monotonic), idle cores then (0: unknown)]


def _idle_cores() -> int:
    now = time.monotonic()
    if now - _load[0] < LOAD_SAMPLE_S and _load[1]:
        return _load[1]
    idle = _CORES
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
        idle = max(1, _CORES - max(running - 1, 0))
    except (OSError, ValueError, IndexError):
        pass
    _load[0], _load[1] = now, idle
    return idle


def call_threads() -> int:
    """The thread count of a call that does not give one (``threads=None``): ``get_threads()`` when it was
    chosen (``use_threads``, ``set_threads``, ``SPLYCE_NUM_THREADS``), else the cores idle now (at least 1)."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _chosen or _process == 1:
        return _process
    return min(_process, _idle_cores())


def set_threads(n: int | None) -> None:
    """Set the process default thread count: ``n`` threads, ``1`` for one thread (as scipy), ``None`` back to
    ``SPLYCE_NUM_THREADS`` or every core. Calls that give ``threads=`` keep it."""
    global _process, _chosen
    n = _checked(n, "set_threads(n)")
    env = _from_env() if n is None else None
    _process = n or env or cores()
    _chosen = n is not None or env is not None


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
        return call_threads()
    if type(threads) is int and threads >= 1:
        return threads
    return _checked(threads, "threads")


def compile_threads(threads) -> int:
    """The thread count a kernel is compiled for: ``threads``, or ``get_threads()`` for None (a call may then
    run it on fewer, ``call_threads``)."""
    return get_threads() if threads is None else resolve(threads)
