"""CSC times a dense vector, native: scipy's ``csc_matvec`` order, so the same values bit for bit.

``y = A @ x`` for ``A`` stored by columns (scipy's ``A.T`` of a CSR is one): column by column in storage
order, every entry adds ``value * x[column]`` to ``y[row]`` (from +0.0). Converting the operand to CSR first
(what the drop-in did) cost 10-14 ms on a 100000 x 100000 matrix of 1.6M entries, the product 1.5-2 ms. One
thread: the rows of a column scatter into all of ``y``, and a split over columns would change the order of
each row's sum. Checked as it reads, as the SpMV kernels are (spmv_rows.py): the two ends of the positions
first (``validation.position_ends_ir``), then each column's segment ``start <= stop <= nnz`` and each row
``< m`` (unsigned compares), an error return at the first defect. On columns of a few entries (where SpMV
goes flat, ``spmv.goes_flat``) one flat loop over the entries instead (``_FLAT``): road-700's ``A.T @ z``
(490k columns of 2.5) 3.54 -> 1.90 ms on the 2-core Zen 3 VM, same bits (fem3d-100k's 16 a column: 1.74 ms
the column loop, 2.22 flat; 2026-12-07, thread CPU, best of 11).
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


# The same product as one loop over the entries of every column but the last two, for columns of a few entries
# (road networks: 2.5 a column), where the loop above ends each column in a mispredicted exit: the column j
# moves on by a flag at its last entry (kept opaque: LLVM would make the add a branch), x[j] is loaded at every
# entry (a hit), and the end of the next column comes from pos[j + 2], loaded one column ahead. One unsigned
# compare, predicted, leaves the flat loop when the next column is empty or ends beyond kstop = min(pos[n - 2],
# nnz) (which bounds every entry the flat loop reads); ``resync`` checks each column it starts, sums one that
# cannot go flat by the column loop, and re-enters. Every y[row] gets its terms in the same order as above.
_FLAT = """
define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr %y, i64 %m, i64 %n, i64 %nnz) {{
entry:
{ends}
  br i1 %ends_ok, label %setup, label %bad
setup:
  %nf = sub i64 %n, 2
  %nf_low = icmp slt i64 %nf, 0
  %nfc = select i1 %nf_low, i64 0, i64 %nf
  %pks = getelementptr i{p}, ptr %pos, i64 %nfc
  %ks_raw = load i{p}, ptr %pks
  %ks_pos = {p_ext} %ks_raw to i64
  %ks_over = icmp ugt i64 %ks_pos, %nnz
  %kstop = select i1 %ks_over, i64 %nnz, i64 %ks_pos
  br label %resync
resync:
  %j0 = phi i64 [0, %setup], [%j0n, %empty], [%jx, %leave], [%j0n, %single_done]
  %jmore = icmp slt i64 %j0, %n
  br i1 %jmore, label %segment, label %ok
segment:
  %ps0 = getelementptr i{p}, ptr %pos, i64 %j0
  %s0_raw = load i{p}, ptr %ps0
  %s0 = {p_ext} %s0_raw to i64
  %j0n = add i64 %j0, 1
  %pt0 = getelementptr i{p}, ptr %pos, i64 %j0n
  %t0_raw = load i{p}, ptr %pt0
  %t0 = {p_ext} %t0_raw to i64
  %down = icmp ugt i64 %s0, %t0
  %over = icmp ugt i64 %t0, %nnz
  %badseg = or i1 %down, %over
  br i1 %badseg, label %bad, label %segment_ok
segment_ok:
  %is_empty = icmp eq i64 %s0, %t0
  br i1 %is_empty, label %empty, label %nonempty
empty:
  br label %resync
nonempty:
  %px0 = getelementptr {t}, ptr %x, i64 %j0
  %x0 = load {t}, ptr %px0
  %below = icmp slt i64 %j0, %nf
  %inside_kstop = icmp ule i64 %t0, %kstop
  %in_flat = and i1 %below, %inside_kstop
  br i1 %in_flat, label %prime, label %single
single:
  %sk = phi i64 [%s0, %nonempty], [%sk1, %single_ok]
  %spc = getelementptr i{c}, ptr %crd, i64 %sk
  %srow_raw = load i{c}, ptr %spc
  %srow = {c_ext} %srow_raw to i64
  %sinside = icmp ult i64 %srow, %m
  br i1 %sinside, label %single_ok, label %bad
single_ok:
  %spv = getelementptr {t}, ptr %vals, i64 %sk
  %sv = load {t}, ptr %spv
  %sprod = {mul} {t} %sv, %x0
  %spy = getelementptr {t}, ptr %y, i64 %srow
  %sold = load {t}, ptr %spy
  %snew = {add} {t} %sold, %sprod
  store {t} %snew, ptr %spy
  %sk1 = add i64 %sk, 1
  %smore = icmp ult i64 %sk1, %t0
  br i1 %smore, label %single, label %single_done
single_done:
  br label %resync
prime:
  %jn = add i64 %j0, 2
  %pjn = getelementptr i{p}, ptr %pos, i64 %jn
  %jn_raw = load i{p}, ptr %pjn
  %next0 = {p_ext} %jn_raw to i64
  br label %flat
flat:
  %k = phi i64 [%s0, %prime], [%k1, %flat_ok]
  %j = phi i64 [%j0, %prime], [%j1, %flat_ok]
  %end = phi i64 [%t0, %prime], [%end1, %flat_ok]
  %next = phi i64 [%next0, %prime], [%next1, %flat_ok]
  %pc = getelementptr i{c}, ptr %crd, i64 %k
  %row_raw = load i{c}, ptr %pc
  %row = {c_ext} %row_raw to i64
  %inside = icmp ult i64 %row, %m
  br i1 %inside, label %row_ok, label %bad
row_ok:
  %pxj = getelementptr {t}, ptr %x, i64 %j
  %xj = load {t}, ptr %pxj
  %pv = getelementptr {t}, ptr %vals, i64 %k
  %v = load {t}, ptr %pv
  %prod = {mul} {t} %v, %xj
  %py = getelementptr {t}, ptr %y, i64 %row
  %old = load {t}, ptr %py
  %new = {add} {t} %old, %prod
  store {t} %new, ptr %py
  %k1 = add i64 %k, 1
  %colend = icmp eq i64 %k1, %end
  %colendw_i = zext i1 %colend to i64
  %colendw = call i64 asm "", "=r,0"(i64 %colendw_i)
  %j1 = add i64 %j, %colendw
  %end1 = select i1 %colend, i64 %next, i64 %end
  %pa = add i64 %j, 3
  %ppa = getelementptr i{p}, ptr %pos, i64 %pa
  %ahead_raw = load i{p}, ptr %ppa
  %ahead = {p_ext} %ahead_raw to i64
  %next1 = select i1 %colend, i64 %ahead, i64 %next
  ; leave after a column whose successor is empty or ends beyond kstop: inside a column end1 = end, k1 < end
  ; <= kstop; after it end1 = next: one unsigned compare
  %gap = sub i64 %end1, %k1
  %gap1 = sub i64 %gap, 1
  %room = sub i64 %kstop, %k1
  ; (so column n - 2 is never entered, whatever the positions hold: at its start k1 = pos[n - 2] >= kstop, and
  ; staying needs k1 < end1 <= kstop; hence j + 3 <= n and j < n at every entry)
  %leaving = icmp uge i64 %gap1, %room
  br i1 %leaving, label %leave, label %flat_ok
flat_ok:
  br label %flat
leave:
  %jx = add i64 %j, 1
  br label %resync
ok:
  ret i64 0
bad:
  ret i64 1
}}
"""


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


@functools.cache
def _kernel(value: np.dtype, p: int, c: int, flat: bool = False):
    from splyce.native.codegen import compile_host_helpers

    t, mul, add, _ = _VALUE[value]
    name = f"splyce_csc_matvec{'_flat' if flat else ''}_{t}_p{p}_c{c}"
    text = (_FLAT if flat else _SCATTER).format(name=name, t=t, mul=mul, add=add, p=p, c=c, p_ext=_ext(p),
                                                c_ext=_ext(c), ends=position_ends_ir(p, segments="%n"))
    return compile_host_helpers(text, {name: _SIG})[name]


def csc_times_vector(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray, m: int,
                     flat: bool | None = None):
    """``A @ x`` for CSC buffers (``indptr`` over the ``len(x)`` columns, ``indices`` the rows in ``[0, m)``),
    C-contiguous, ``data`` and ``x`` of one supported dtype; None when the buffers are malformed (nothing is
    trusted: positions, their ends and every row are checked as they are read). ``flat``: the flat loop
    (``_FLAT``; None: where SpMV goes flat, columns of a few entries, ``spmv.goes_flat``); the same bits."""
    if len(indptr) != len(x) + 1 or len(indices) != len(data):
        return None
    p, c = index_bits(indptr), index_bits(indices)
    if flat is None:
        from splyce.native.spmv import goes_flat

        flat = goes_flat(len(indices), len(x), c, data.dtype.itemsize)
    with _lock:
        fn = _kernel(data.dtype, p, c, bool(flat))
    y = np.zeros(m, dtype=data.dtype)
    bad = fn(_address(indptr), _address(indices), _address(data), _address(x), _address(y), m, len(x),
             len(indices))
    return None if bad else y
