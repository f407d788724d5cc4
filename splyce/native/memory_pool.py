"""A cache of large freed array buffers, used by the drop-ins through NumPy's allocator hook (NEP 49).

Why: a product's result is fresh memory on every call (scipy's too), and fresh memory costs page faults:
the kernel zeroes every page it hands out, and on a virtual machine whose host reclaims freed guest memory
(free-page reporting) it also has to be backed again. Measured on the 2-core EPYC VM (docs/memory.md):
the 63 MB result of road-700's SpMM took 17.3 ms per call fresh and 11.0 ms reused; a two-thread SpGEMM on
banded-150k spent 50 ms of its 71 ms in the kernel's page faults. glibc returns every block above 32 MB to
the system when it is freed, so a loop of products pays that on every call.

How: while a drop-in on large operands runs, NumPy allocates arrays with this module's handler (set for the
current context only, as NEP 49 intends; worker threads run in a copy of the caller's context). A block of
at least ``POOL_MIN`` bytes freed later, wherever that happens, is kept (up to ``limit()`` bytes in all, at
most ``SLOTS`` blocks) instead of going back to libc, and the next allocation of about its size (the block
is at most twice as large as asked; the most recently kept of those, the likeliest still in cache) takes it,
its pages already backed. Smaller blocks go to libc's
malloc / free. Each block has a 64-byte header before the address NumPy sees: the libc block, its capacity
and whether it may be kept. Arrays stay ordinary NumPy arrays that own their data (``resize`` works: it goes
through the same handler). ``release()`` gives every kept block back; ``SPLYCE_POOL_BYTES=0`` (or
``set_limit(0)``) turns the cache off, and then no handler is ever installed.

The handler's functions are native (LLVM IR compiled once per process) and take a spin lock around the
table, so a block may be freed on any thread. They, their table and the handler stay alive until the
process ends: arrays that carry the handler may be freed during interpreter shutdown.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings

import numpy as np

from splyce.native.memory_pool_ir import (   # noqa: F401 (the layout, part of this module's interface)
    HEADER, HUGE_MIN, POOL_MIN, SLACK, SLOTS, _HITS, _KEPT, _LIMIT, _LOCK, _MISSES, _POOLED, _RELEASED,
    _WORDS, ir as _ir,
)


def _default_limit() -> int:
    text = os.environ.get("SPLYCE_POOL_BYTES")
    if text is not None:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"SPLYCE_POOL_BYTES must be a number of bytes, got {text!r}") from None
        if value < 0:
            raise ValueError(f"SPLYCE_POOL_BYTES must be >= 0, got {value}")
        return value
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 8 << 30
    return min(1 << 30, ram // 16)



class _Handler(ctypes.Structure):     # NumPy's PyDataMem_Handler, version 1
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8), ("ctx", ctypes.c_void_p),
                ("malloc", ctypes.c_void_p), ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


_HEAP_FUNCTIONS = ("malloc", "calloc", "realloc", "free")   # in the order of NumPy's handler struct
_P = ctypes.c_void_p
_SIGNATURES = {"pool_malloc": ctypes.CFUNCTYPE(_P, _P, ctypes.c_size_t),
               "pool_calloc": ctypes.CFUNCTYPE(_P, _P, ctypes.c_size_t, ctypes.c_size_t),
               "pool_realloc": ctypes.CFUNCTYPE(_P, _P, _P, ctypes.c_size_t),
               "pool_free": ctypes.CFUNCTYPE(None, _P, _P, ctypes.c_size_t),
               "pool_release": ctypes.CFUNCTYPE(None, _P)}

_lock = threading.Lock()
_state: dict = {}           # built once: the table, the functions, the handler capsule, NumPy's setter
_table = np.zeros(_WORDS, dtype=np.int64)
_table[_LIMIT] = _default_limit()


def _after_fork_in_child() -> None:
    # Only the forking thread lives on in the child, and it never holds the spin lock while running Python: a
    # lock word still set belonged to a thread that is gone (so did a held build lock).
    global _lock
    _table[_LOCK] = 0
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _multiarray_umath():
    try:
        from numpy._core import _multiarray_umath     # NumPy 2
    except ImportError:
        from numpy.core import _multiarray_umath      # NumPy 1.x
    return _multiarray_umath


def _numpy_set_handler():
    """NumPy's ``PyDataMem_SetHandler`` (C API slot 304 since NumPy 1.22), called through ctypes."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = ctypes.cast(get_pointer(_multiarray_umath()._ARRAY_API, None), ctypes.POINTER(ctypes.c_void_p))
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[304])


def _build() -> dict:
    from splyce.native.codegen import compile_host_helpers

    functions = compile_host_helpers(_ir(), _SIGNATURES)
    heap = {name: ctypes.cast(functions[f"pool_{name}"], ctypes.c_void_p).value for name in _HEAP_FUNCTIONS}
    handler = _Handler(b"splyce_pool", 1, _table.ctypes.data, *(heap[name] for name in _HEAP_FUNCTIONS))
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = ctypes.c_char_p(b"mem_handler")      # the capsule keeps this pointer: the buffer must outlive it
    capsule = new_capsule(ctypes.addressof(handler), name, None)
    state = {"functions": functions, "heap": dict(heap, ctx=_table.ctypes.data), "handler": handler, "name": name,
             "capsule": capsule, "set": _numpy_set_handler()}
    # Arrays carrying the handler can be freed at interpreter shutdown, after this module's globals are
    # gone: the code, the table and the handler are never collected.
    for keep in (state, _table):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep))
    return state


def native_heap() -> dict | None:
    """The handler's native functions for code that allocates outside NumPy (the kernels' checked allocator,
    backend/alloc_guard.py): their addresses (``malloc(ctx, size)``, ``calloc(ctx, n, size)``,
    ``realloc(ctx, p, size)``, ``free(ctx, p, size)``) and the table they share (``ctx``); None when the cache
    is off (``SPLYCE_POOL_BYTES=0``) or cannot be built here. Blocks of such code are cached as NumPy's are
    (the same table and limit) whether or not the handler is installed."""
    state = _ensure()
    return dict(state["heap"]) if state else None


def _ensure() -> dict:
    """The built handler, or {} when it cannot be built here (then the cache turns itself off, with a
    warning: drop-ins allocate as NumPy does, nothing else changes)."""
    if not _state:
        with _lock:
            if not _state and _table[_LIMIT] > 0:
                try:
                    _state.update(_build())
                except Exception as e:                 # an unknown NumPy or LLVM: no cache, not a failure
                    _table[_LIMIT] = 0
                    warnings.warn(f"splyce: the cache of freed buffers is off ({type(e).__name__}: {e})",
                                  RuntimeWarning, stacklevel=3)
    return _state


def install():
    """Make the pool NumPy's allocator for the current context; returns the token for :func:`restore`
    (None when the cache is off: nothing installed)."""
    if _table[_LIMIT] <= 0:
        return None
    state = _state or _ensure()
    return state["set"](state["capsule"]) if state else None


def restore(token) -> None:
    """Put back the handler that :func:`install` replaced."""
    if token is not None:
        _state["set"](token)


class active:
    """``with memory_pool.active(): ...``: NumPy allocates with the pool inside the block (this context)."""

    def __enter__(self):
        self._token = install()
        return self

    def __exit__(self, *exc):
        restore(self._token)
        return False


def set_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed blocks (0: keep none, and install no handler from now on)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"the pool limit must be a number of bytes >= 0, got {nbytes!r}")
    _table[_LIMIT] = int(nbytes)
    if nbytes == 0:
        release()


def limit() -> int:
    return int(_table[_LIMIT])


def release() -> None:
    """Give every kept block back to libc (and so, for blocks of glibc's mmap size, to the system)."""
    if _state:
        _state["functions"]["pool_release"](_table.ctypes.data)


def stats() -> dict:
    """Counters since the process started: kept bytes now, reuses (hits), fresh large blocks (misses),
    frees kept and frees given back to libc."""
    return {"pooled_bytes": int(_table[_POOLED]), "hits": int(_table[_HITS]), "misses": int(_table[_MISSES]),
            "kept": int(_table[_KEPT]), "released": int(_table[_RELEASED]), "limit": int(_table[_LIMIT])}


def handler_name(array: np.ndarray) -> str | None:
    """The name of the allocator that holds ``array``'s data (None for a view: its base's)."""
    return _multiarray_umath().get_handler_name(array)


def is_pooled(array: np.ndarray) -> bool:
    """Whether ``array``'s data (a view's: its base array's) was allocated by this pool's handler."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return handler_name(array) == "splyce_pool"
