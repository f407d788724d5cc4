"""CSC times a dense vector, native: scipy's ``csc_matvec`` order, so the same values bit for bit.

``y = A @ x`` for ``A`` stored by columns (scipy's ``A.T`` of a CSR is one): column by column in storage
order, every entry adds ``value * x[column]`` to ``y[row]`` (from +0.0). Converting the operand to CSR first
(what the drop-in did) cost 10-14 ms on a 100000 x 100000 matrix of 1.6M entries, the product 1.5-2 ms. One
thread: the rows of a column scatter into all of ``y``, and a split over columns would change the order of
each row's sum. Checked as it reads, as the SpMV kernels are (spmv_rows.py): the two ends of the positions
first (``validation.position_ends_ir``), then each column's segment ``start <= stop <= nnz`` and each row
``< m`` (unsigned compares), an error return at the first defect. On columns of a few entries (where SpMV
goes flat, ``spmv.goes_flat``) one flat loop over the entries instead (``spmv_flat.SEGMENTS``): road-700's ``A.T @ z``
(490k columns of 2.5) 3.54 -> 1.90 ms on the 2-core Zen 3 VM, same bits (fem3d-100k's 16 a column: 1.74 ms
the column loop, 2.22 flat; 2026-12-07, thread CPU, best of 11).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import VALUE, ext, index_bits
from splyce.native.ir_text import supported  # noqa: F401  (``spmv_scatter.supported``: the one table's)
from splyce.native.spmv_flat import checked_entry, flat_ir
from splyce.native.spmv_rows import SCATTER_PARAMS, scatter_ir
from splyce.native.validation import position_ends_ir

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (pos, crd, values, x, y, m, n, nnz) -> 0, or 1 at a malformed segment or row
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I)
_lock = threading.Lock()


@functools.cache
def _kernel(value: np.dtype, p: int, c: int, flat: bool = False):
    """The column loop (``spmv_rows.scatter_ir``), or (``flat``) the same product as one loop over the entries
    of every column but the last two (spmv_flat.SEGMENTS), for columns of a few entries (road networks: 2.5 a
    column), where the column loop ends each column in a mispredicted exit: the column moves on by a flag at
    its last entry, x[j] is loaded at every entry (a hit), and the end of the next column comes from pos[j + 2],
    loaded one column ahead. ``resync`` checks each column it starts, sums one that cannot go flat by the
    column loop, and re-enters. Every y[row] gets its terms in the same order as the column loop."""
    from splyce.native.codegen import compile_host_helpers

    t, mul, add, _ = VALUE[value]
    name = f"splyce_csc_matvec{'_flat' if flat else ''}_{t}_p{p}_c{c}"
    if not flat:
        return compile_host_helpers(scatter_ir(name, value, p, c), {name: _SIG})[name]

    def entry(q: str, ok: str, x: str) -> str:
        return checked_entry(True, q=q, ok=ok, x=x, t=t, mul=mul, add=add, c=c, c_ext=ext(c))

    ends = position_ends_ir(p, segments="%n")
    text = flat_ir(name, p, SCATTER_PARAMS, entry=ends + "\n  br i1 %ends_ok, label %setup, label %bad\nsetup:\n",
                   first="setup", lo="0", hi="%n",
                   nonempty=f"  %px0 = getelementptr {t}, ptr %x, i64 %r0\n  %x0 = load {t}, ptr %px0\n",
                   single_entry=entry("s", "single_ok", "%x0"),
                   flat_entry=f"  %pxj = getelementptr {t}, ptr %x, i64 %r\n  %xj = load {t}, ptr %pxj\n"
                              + entry("", "row_ok", "%xj"))
    return compile_host_helpers(text, {name: _SIG})[name]


def csc_times_vector(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray, m: int,
                     flat: bool | None = None):
    """``A @ x`` for CSC buffers (``indptr`` over the ``len(x)`` columns, ``indices`` the rows in ``[0, m)``),
    C-contiguous, ``data`` and ``x`` of one supported dtype; None when the buffers are malformed (nothing is
    trusted: positions, their ends and every row are checked as they are read). ``flat``: the flat loop
    (``spmv_flat.SEGMENTS``; None: where SpMV goes flat, columns of a few entries, ``spmv.goes_flat``); the same bits."""
    if len(indptr) != len(x) + 1 or len(indices) != len(data):
        return None
    p, c = index_bits(indptr), index_bits(indices)
    if flat is None:
        from splyce.native.spmv import goes_flat     # its host tuning, read on first use, not at import

        flat = goes_flat(len(indices), len(x), c, data.dtype.itemsize)
    with _lock:
        fn = _kernel(data.dtype, p, c, bool(flat))
    y = np.zeros(m, dtype=data.dtype)
    bad = fn(_address(indptr), _address(indices), _address(data), _address(x), _address(y), m, len(x),
             len(indices))
    return None if bad else y
