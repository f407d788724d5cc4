"""CSC times a dense vector, native: scipy's ``csc_matvec`` order, so the same values bit for bit.

``y = A @ x`` for ``A`` stored by columns (scipy's ``A.T`` of a CSR is one): column by column in storage
order, every entry adds ``value * x[column]`` to ``y[row]`` (from +0.0). Converting the operand to CSR first
(what the drop-in did) cost 10-14 ms on a 100000 x 100000 matrix of 1.6M entries, the product 1.5-2 ms. One
thread: the rows of a column scatter into all of ``y``, and a split over columns would change the order of
each row's sum. Checked as it reads, as the SpMV kernels are (spmv_rows.py): the two ends of the positions
first (``validation.position_ends_ir``), then each column's segment ``start <= stop <= nnz`` and each row
``< m`` (unsigned compares), an error return at the first defect.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import VALUE as _VALUE, ext as _ext, index_bits
from splyce.native.validation import position_ends_ir

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (pos, crd, values, x, y, m, n, nnz) -> 0, or 1 at a malformed segment or row
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I)
_lock = threading.Lock()

_SCATTER = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr %y, i64 %m, i64 %n, i64 %nnz) {{
entry:
{ends}
  br i1 %ends_ok, label %col_head, label %bad
col_head:
  %j = phi i64 [0, %entry], [%j1, %col_done]
  %more = icmp slt i64 %j, %n
  br i1 %more, label %col_body, label %ok
col_body:
  %ps = getelementptr i{p}, ptr %pos, i64 %j
  %s_raw = load i{p}, ptr %ps
  %start = {p_ext} %s_raw to i64
  %j1 = add i64 %j, 1
  %pt = getelementptr i{p}, ptr %pos, i64 %j1
  %t_raw = load i{p}, ptr %pt
  %stop = {p_ext} %t_raw to i64
  %down = icmp ugt i64 %start, %stop
  %over = icmp ugt i64 %stop, %nnz
  %badseg = or i1 %down, %over
  br i1 %badseg, label %bad, label %col_ok
col_ok:
  %pxj = getelementptr {t}, ptr %x, i64 %j
  %xj = load {t}, ptr %pxj
  br label %k_head
k_head:
  %k = phi i64 [%start, %col_ok], [%k1, %k_ok]
  %kmore = icmp ult i64 %k, %stop
  br i1 %kmore, label %k_body, label %col_done
k_body:
  %pc = getelementptr i{c}, ptr %crd, i64 %k
  %row_raw = load i{c}, ptr %pc
  %row = {c_ext} %row_raw to i64
  %inside = icmp ult i64 %row, %m
  br i1 %inside, label %k_ok, label %bad
k_ok:
  %pv = getelementptr {t}, ptr %vals, i64 %k
  %v = load {t}, ptr %pv
  %prod = {mul} {t} %v, %xj
  %py = getelementptr {t}, ptr %y, i64 %row
  %old = load {t}, ptr %py
  %new = {add} {t} %old, %prod
  store {t} %new, ptr %py
  %k1 = add i64 %k, 1
  br label %k_head
col_done:
  br label %col_head
ok:
  ret i64 0
bad:
  ret i64 1
}}
"""


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


@functools.cache
def _kernel(value: np.dtype, p: int, c: int):
    from splyce.native.codegen import compile_host_helpers

    t, mul, add, _ = _VALUE[value]
    name = f"splyce_csc_matvec_{t}_p{p}_c{c}"
    text = _SCATTER.format(name=name, t=t, mul=mul, add=add, p=p, c=c, p_ext=_ext(p), c_ext=_ext(c),
                           ends=position_ends_ir(p, segments="%n"))
    return compile_host_helpers(text, {name: _SIG})[name]


def csc_times_vector(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray, m: int):
    """``A @ x`` for CSC buffers (``indptr`` over the ``len(x)`` columns, ``indices`` the rows in ``[0, m)``),
    C-contiguous, ``data`` and ``x`` of one supported dtype; None when the buffers are malformed (nothing is
    trusted: positions, their ends and every row are checked as they are read)."""
    if len(indptr) != len(x) + 1 or len(indices) != len(data):
        return None
    with _lock:
        fn = _kernel(data.dtype, index_bits(indptr), index_bits(indices))
    y = np.zeros(m, dtype=data.dtype)
    bad = fn(_address(indptr), _address(indices), _address(data), _address(x), _address(y), m, len(x),
             len(indices))
    return None if bad else y
