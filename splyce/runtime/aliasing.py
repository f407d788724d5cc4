"""``Jitted.accumulate``'s inputs that may share memory with the array it accumulates into, copied first (the
kernel reads its inputs while it writes ``out``, compiled assuming they do not overlap), as NumPy does for
``out=``."""

from __future__ import annotations

import numpy as np

from splyce.tensors.tensor import SparseTensor


def arrays_of(arg) -> list:
    """The NumPy buffers behind an argument: an ndarray, a SparseTensor's, scipy.sparse's or pydata's."""
    if isinstance(arg, np.ndarray):
        return [arg]
    if isinstance(arg, SparseTensor):
        return arg._buffers()
    found = []
    for name in ("data", "indices", "indptr", "row", "col", "offsets", "coords"):
        x = getattr(arg, name, None)
        if isinstance(x, np.ndarray):
            found.append(x)
        elif isinstance(x, tuple):       # scipy coo_array's coords
            found.extend(c for c in x if isinstance(c, np.ndarray))
    return found


def unaliased(arg, out: np.ndarray):
    """``arg``, or a copy of it when one of its buffers may share memory with ``out`` (``np.may_share_memory``:
    a bounds test, no data read)."""
    if any(np.may_share_memory(x, out) for x in arrays_of(arg)):
        return arg.copy()
    return arg
