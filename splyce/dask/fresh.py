"""Result blocks that Dask's ``.compute()`` hands over without a copy when they leave the worker by the wire.

Dask's ``finalize`` (``dask.array.core.finalize``) ends a ``.compute()`` of a one-chunk array with
``result.copy()``, in case the chunk is a buffer a local scheduler's graph still holds. On a worker whose
results go to the client serialized (any distributed transport but ``inproc://``), that copy is never seen by
anyone: the client receives its own deserialized arrays. For a 216k-row 3-D mesh SpGEMM (one block per worker
thread: one block on a 1-thread worker) it was a 63 MB copy on the worker, 10-25 ms. A matmul task's sparse
scipy result is returned as a ``FreshRows`` CSR, whose ``copy()`` gives Dask's ``finalize`` on such a worker
a plain CSR of the block's own arrays; every other caller (user code, scipy's own methods, a local scheduler,
an in-process worker) gets a real copy. ``FreshRows`` is otherwise the plain CSR array or matrix (a subclass:
``isinstance`` holds, Dask's concatenation and ``sizeof`` find scipy's), and never reaches the user: Dask's
concatenation of several blocks and every ``copy()`` return the plain class.
"""

from __future__ import annotations

import sys

import dask.array.core
import scipy.sparse as sps

# the code object of the one caller whose copy is skipped (compared by identity: a Dask that changes its
# finalize makes every copy a real one)
_FINALIZE = dask.array.core.finalize.__code__


def _plain(x, cls):
    """A ``cls`` CSR over ``x``'s own arrays (no copy, no check: they are a kernel's checked result)."""
    out = cls(x.shape, dtype=x.dtype)
    out.data, out.indices, out.indptr = x.data, x.indices, x.indptr
    return out


def _leaves_by_wire() -> bool:
    """Whether this thread runs a task on a distributed worker whose results are sent serialized."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        worker = distributed.get_worker()
    except ValueError:
        return False
    return not str(worker.address).startswith("inproc://")


class _FreshRows:
    _plain_class: type

    def copy(self):
        plain = _plain(self, self._plain_class)
        if sys._getframe(1).f_code is _FINALIZE and _leaves_by_wire():
            return plain
        return plain.copy()


class FreshRowsArray(_FreshRows, sps.csr_array):
    _plain_class = sps.csr_array


class FreshRowsMatrix(_FreshRows, sps.csr_matrix):
    _plain_class = sps.csr_matrix


def plain(x):
    """``x`` as its plain scipy class over the same arrays when it is a ``FreshRows``, else ``x``."""
    return _plain(x, x._plain_class) if isinstance(x, _FreshRows) else x


def fresh_rows(x):
    """``x`` as a ``FreshRows`` CSR over the same arrays when it is a plain scipy CSR array or matrix, else
    ``x``."""
    cls = FreshRowsArray if type(x) is sps.csr_array else FreshRowsMatrix if type(x) is sps.csr_matrix else None
    return x if cls is None else _plain(x, cls)
