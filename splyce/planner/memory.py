"""The memory budget the planner checks plans against (default: half of physical memory)."""

from __future__ import annotations

import os

_budget: int | None = None
DEFAULT_FRACTION = 0.5


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def budget_bytes() -> int:
    """The budget in force: ``set_memory_budget``'s, else ``$SPLYCE_MEMORY_BUDGET`` (bytes, or a fraction
    of physical memory when below 1), else half of physical memory."""
    if _budget is not None:
        return _budget
    text = os.environ.get("SPLYCE_MEMORY_BUDGET", "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"SPLYCE_MEMORY_BUDGET must be a number of bytes or a fraction of physical "
                             f"memory, got {text!r}") from None
        if value <= 0:
            raise ValueError(f"SPLYCE_MEMORY_BUDGET must be positive, got {text!r}")
        return int(value * physical_memory()) if value < 1 else int(value)
    return int(DEFAULT_FRACTION * physical_memory())


def set_memory_budget(nbytes: int | None) -> None:
    """Cap the memory a jitted function's kernels may allocate (results and intermediates).

    Plans over the cap raise ``MemoryError`` naming the op before anything runs. The default budget is
    ``$SPLYCE_MEMORY_BUDGET`` (bytes, or a fraction of physical memory when below 1), else half of
    physical memory.

    Parameters
    ----------
    nbytes : int or None
        The budget in bytes; None restores the default.

    Raises
    ------
    ValueError
        `nbytes` is not a positive int or None.

    Examples
    --------
    >>> import splyce
    >>> splyce.set_memory_budget(2 * 2**30)
    >>> splyce.set_memory_budget(None)
    """
    global _budget
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0):
        raise ValueError(f"the memory budget must be a positive number of bytes or None, got {nbytes!r}")
    _budget = nbytes


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
