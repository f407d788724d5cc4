"""The sparsifier's elementwise semantics on the native kernels: what ``@splyce.jit``'s MLIR kernel computes for
``a * b``, ``a + b``, ``a - b`` of two CSR tensors, bit for bit (but for the sign of a NaN), at the drop-ins'
speed (runtime/library.py runs these for the jit).

The sparsifier coiterates: a product stores every position both operands hold (a zero or NaN product too,
while NaN or Inf times a missing entry is not stored), a sum every position either holds, a missing entry
leaving the other value as it is (``a - missing`` is a, ``missing - b`` is -b, -0.0 included). scipy's rule,
which the drop-ins follow, drops zero results and keeps NaN times a missing entry: hence the ``keep_zeros``
variant of each kernel. Operands come from checked ``SparseTensor``s (canonical CSR).
"""

from __future__ import annotations

import numpy as np

from splyce.native import ir_text
from splyce.native.elementwise.csc import csr_with_csc, csr_with_csc_ranges, prefetch_distance
from splyce.native.elementwise.merge import elementwise


def rows(op: str, a, b, dtype, threads: int = 1):
    """``op(A, B)`` of two canonical CSRs ``(data, indices, indptr)`` of one shape and index dtypes: the flat
    pass when both hold the same positions, else the row merge."""
    return elementwise(op, a, b, np.dtype(dtype), threads, keep_zeros=True)


def with_csc(op: str, a, b_csc, dtype, m: int, n: int, threads: int = 1):
    """``op(A, B)`` of a canonical CSR ``a`` (m x n) and a canonical CSC ``b_csc`` of the same shape (``X.T`` of a
    CSR X: X's own buffers), every index array of one dtype: the one pass with a cursor per column of B (no
    transpose; B's checks skipped when its arrays are A's, as in ``A * A.T``); a sum whose B holds other
    positions than A transposes B (a counting pass) and merges rows."""
    dtype = np.dtype(dtype)
    av, ac, ap = a
    prefetch = prefetch_distance(ap, ac, ac.dtype.itemsize + dtype.itemsize)
    if threads > 1 and len(ac) >= 2 * ir_text.MIN_CHUNK:     # operands checked: SparseTensors
        out = csr_with_csc_ranges(op, a, b_csc, dtype, m, n, threads, prefetch, keep_zeros=True)
    else:
        out = csr_with_csc(op, a, b_csc, dtype, m, n, prefetch, keep_zeros=True)
    if type(out) is tuple:
        return out
    if out != 1:
        raise ValueError(f"{op}: an operand is not a canonical CSR / CSC (code {out})")
    return elementwise(op, a, _transposed(b_csc, n, m, threads), dtype, threads, keep_zeros=True)


def _transposed(x, rows: int, cols: int, threads: int):
    """The CSR of a CSR's transpose (a CSC's CSR); values of other widths than 4 or 8 bytes (bool) through a
    transpose of their positions."""
    from splyce.native import transpose

    xv, xc, xp = x
    if xv.dtype.itemsize in (4, 8):
        return transpose.transpose(xv, xc, xp, rows, cols, threads)
    at, tc, tp = transpose.transpose(np.arange(len(xc), dtype=xc.dtype), xc, xp, rows, cols, threads)
    return xv.take(at), tc, tp
