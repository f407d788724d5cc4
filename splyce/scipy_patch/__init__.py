"""``splyce.patch_scipy()``: scipy.sparse's own products and elementwise operations, routed through splyce.

While the switch is on, ``A @ B``, ``A.dot(B)``, ``A * B`` (spmatrix), ``A.multiply(B)``, ``A + B`` and
``A - B`` on scipy CSR / CSC arrays and matrices (and the COO / other formats scipy turns into CSR first)
go through the drop-ins (``splyce.matmul`` / ``multiply`` / ``add`` / ``subtract``) whenever the call is
exactly a case splyce accelerates and matches scipy on, and large enough to gain (``routes.py`` says which
and why). Everything else runs scipy's own code, so results, classes, dtypes, errors and messages are scipy's.

Usage::

    splyce.patch_scipy()            # on, for the whole process (every thread)
    ...
    splyce.unpatch_scipy()          # off: scipy's original methods restored, exactly

    with splyce.patched_scipy():    # on inside the block only (nests; restores the state it found)
        ...

    splyce.scipy_patch_stats()      # {"matmul_sparse": {"served": 12, "fallback": {"small": 3}}, ...}
"""

from __future__ import annotations

import contextlib
import threading

from splyce.scipy_patch import routes

__all__ = ["patch_scipy", "unpatch_scipy", "patched_scipy", "scipy_patch_stats", "is_scipy_patched"]

_lock = threading.Lock()
_saved: list | None = None     # [(class, name, original value or _ABSENT)] while patched


class _Absent:
    pass


_ABSENT = _Absent()


def patch_scipy(*, route_small: bool = False) -> bool:
    """Route scipy.sparse's products and elementwise ops through splyce (see the module doc). Idempotent and
    thread-safe; returns True if this call turned the switch on, False if it was on already.
    ``route_small=True`` also routes calls below the measured break-even sizes (slower: for tests that
    prove served results equal scipy's on small matrices); it applies until ``unpatch_scipy()``."""
    global _saved
    with _lock:
        if _saved is not None:
            return False
        routes.set_route_small(route_small)
        saved = []
        for cls, name, make_hook in routes.hooks():
            original = cls.__dict__.get(name, _ABSENT)
            current = getattr(cls, name)       # what instances call now (maybe inherited)
            saved.append((cls, name, original))
            setattr(cls, name, make_hook(current))
        _saved = saved
        return True


def unpatch_scipy() -> bool:
    """Restore scipy's original methods exactly (the same objects; a name that was inherited is removed
    again). Returns True if the switch was on."""
    global _saved
    with _lock:
        if _saved is None:
            return False
        for cls, name, original in reversed(_saved):
            if original is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
        _saved = None
        routes.set_route_small(False)
        return True


def is_scipy_patched() -> bool:
    return _saved is not None


@contextlib.contextmanager
def patched_scipy(*, route_small: bool = False):
    """``with splyce.patched_scipy(): ...``: the switch on inside the block, back to the state it found after
    (a block inside another one, or after ``patch_scipy()``, leaves the switch on)."""
    turned_on = patch_scipy(route_small=route_small)
    try:
        yield
    finally:
        if turned_on:
            unpatch_scipy()


def scipy_patch_stats(reset: bool = False) -> dict:
    """Per routed operation: how many calls splyce served and how many fell back to scipy, by reason
    (``{"add": {"served": 5, "fallback": {"dtype": 2, "small": 7}}, ...}``). Counted since the process
    started or the last ``reset=True`` (which returns the counts and clears them)."""
    return routes.stats(reset)
