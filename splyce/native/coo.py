"""COO times a dense vector (SpMV) or matrix (SpMM), native code on the coordinate arrays as they are stored:
``y[row[e]] += values[e] * x[col[e]]`` for every entry ``e`` in stored order, into a zeroed ``y``: scipy's
``coo_matvec`` / ``coo_matmat_dense`` loop, so the bits are scipy's (unsorted and repeated entries are fine: a
product needs no canonical form). ``A.T @ x`` of a COO is the same kernel on the swapped coordinate arrays.

Index checks: each entry's row (``< m``) and column (``< n``) are compared unsigned (a negative one fails too) as
they are read, a branch to an error return that the CPU predicts as never taken; the kernel returns 1, ``y``
incomplete, at the first defect. The caller words the error (``bad_entry``).

SpMM: ``k`` columns fixed at compile time (up to ``FIXED``, one straight-line axpy of the row that LLVM packs into
SIMD), else a loop over ``k``.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled
from splyce.native.ir_text import IR, VALUE, columns_axpy, load_index, returns

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (row, col, values, x, y, nnz, m, n, k) -> 0, or 1 at an index out of range
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I, _I)
FIXED = 32      # column counts of X up to this get a kernel with the row's axpy unrolled
_lock = threading.Lock()
_ready: dict = {}   # kernel key -> the compiled kernel, read without the lock


def coo_times_dense_ir(name: str, value: np.dtype, rbits: int, cbits: int, k: int | None) -> str:
    """``y += A @ x`` over the entries of a COO: ``k`` None for SpMV (``x``, ``y`` vectors), else SpMM with ``k``
    columns (0: any count, read from ``%k``). Returns 1 at the first row ``>= m`` or column ``>= n``."""
    t, mul, add, _ = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %row, ptr %col, ptr %vals, ptr %x, ptr noalias %y, i64 %nnz, i64 %m, i64 %n, "
       "i64 %k) {")
    ir.label("entry")
    ir("  br label %head")
    ir.label("head")
    ir("  %e = phi i64 [0, %entry], [%e1, %next]")
    ir("  %more = icmp slt i64 %e, %nnz")
    ir("  br i1 %more, label %body, label %done")
    ir.label("body")
    r = load_index(ir, "%row", rbits, "%e")
    c = load_index(ir, "%col", cbits, "%e")
    ir(f"  %r_in = icmp ult i64 {r}, %m")
    ir(f"  %c_in = icmp ult i64 {c}, %n")
    ir("  %inside = and i1 %r_in, %c_in")
    ir("  br i1 %inside, label %work, label %bad")
    ir.label("work")
    ir(f"  %pv = getelementptr {t}, ptr %vals, i64 %e")
    ir(f"  %v = load {t}, ptr %pv")
    width = "%k" if k == 0 else str(k or 1)
    ir(f"  %xb = mul i64 {c}, {width}")
    ir(f"  %yb = mul i64 {r}, {width}")

    columns_axpy(ir, t, mul, add, "%v", k, "work", "next", index="i")
    ir.label("next")
    ir("  %e1 = add i64 %e, 1")
    ir("  br label %head")
    return returns(ir)


@functools.cache
def _kernel(value: np.dtype, rbits: int, cbits: int, k: int | None):
    tag = "v" if k is None else f"k{k or 'any'}"
    name = f"splyce_coo_{VALUE[value][0]}_r{rbits}_c{cbits}_{tag}"
    return _compiled(coo_times_dense_ir(name, value, rbits, cbits, k), _SIG, name, "aaaaaiiii")


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


def coo_times_dense(row: np.ndarray, col: np.ndarray, data: np.ndarray, x: np.ndarray, m: int):
    """``A @ x`` for a COO's coordinate arrays (1-D, contiguous, native int32 / int64, ``len(data)`` each), its
    values and a C-contiguous ``x`` of the values' dtype (1-D: SpMV; 2-D: SpMM), ``A`` having ``m`` rows and
    ``len(x)`` columns; None when an entry's row or column is out of range (checked as read)."""
    n = x.shape[0]
    k = None if x.ndim == 1 else x.shape[1]
    y = np.zeros(m if k is None else (m, k), dtype=data.dtype)
    if len(data) == 0 or y.size == 0:
        return None if len(data) and _any_outside(row, col, m, n) else y
    key = (data.dtype, row.dtype.itemsize * 8, col.dtype.itemsize * 8, None if k is None else (k if k <= FIXED else 0))
    fn = _ready.get(key)        # a dict read needs no lock: a small call's fixed cost is most of its time
    if fn is None:
        with _lock:
            fn = _ready[key] = _kernel(*key)
    bad = fn(*_arrays(row, col, data, x, y), len(data), m, n, k or 1)
    return None if bad else y


def _any_outside(row, col, m, n) -> bool:
    return bool(((row < 0) | (row >= m) | (col < 0) | (col >= n)).any())


def bad_entry(row: np.ndarray, col: np.ndarray, m: int, n: int) -> str | None:
    """What is wrong with a COO's coordinates (the first entry out of range), or None."""
    outside = (row < 0) | (row >= m) | (col < 0) | (col >= n)
    if not outside.any():
        return None
    e = int(np.argmax(outside))
    return (f"entry {e} has coordinates ({int(row[e])}, {int(col[e])}) outside the shape ({m}, {n}); "
            "every row must be in [0, m) and every column in [0, n)")

