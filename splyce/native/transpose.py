"""The transpose of a checked CSR (CSR -> CSC arrays, what ``csc.tocsr()`` does to ``A.T``), native code, split
across threads.

A counting transpose in two passes over row ranges balanced by entries: each range counts its entries per
column into its own counters; the counts are summed into the result's positions and turned into a start per
(range, column) (the ranges before it come first within a column); then each range scatters its entries to
its own starts. Entries of a column come out in row order, as from scipy's ``csr_tocsc`` (sorted unique rows
in, sorted unique rows out): the result is the same for any number of threads. Values are moved as integers
of their width (bits copied, NaN payloads and signed zeros kept).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native import ir_text
from splyce.native.array_objects import address as _address
from splyce.native.ir_text import index_at, load_at, store_at

_COUNT = """
define void @{name}(ptr %pos, ptr %crd, i64 %lo, i64 %hi, ptr %cnt) {{
entry:
""" + index_at("%pos", "%lo", "%k0", "p", "ext") + index_at("%pos", "%hi", "%k1", "p", "ext") + """  br label %head
head:
  %k = phi i64 [%k0, %entry], [%kn, %body]
  %more = icmp slt i64 %k, %k1
  br i1 %more, label %body, label %done
body:
""" + index_at("%crd", "%k", "%c", "p", "ext") + """  %pn = getelementptr i{p}, ptr %cnt, i64 %c
  %n = load i{p}, ptr %pn
  %n1 = add i{p} %n, 1
  store i{p} %n1, ptr %pn
  %kn = add i64 %k, 1
  br label %head
done:
  ret void
}}
"""

_SCATTER = """
define void @{name}(ptr %pos, ptr %crd, ptr %val, i64 %lo, i64 %hi, ptr %next, ptr %out_crd, ptr %out_val) {{
entry:
  br label %row
row:
  %r = phi i64 [%lo, %entry], [%r1, %entries]
  %rin = icmp slt i64 %r, %hi
  br i1 %rin, label %row_body, label %done
row_body:
  %r1 = add i64 %r, 1
""" + index_at("%pos", "%r", "%k0", "p", "ext") + """\
""" + index_at("%pos", "%r1", "%k1", "p", "ext") + """  %r_c = {narrow} %r to i{p}
  br label %entries
entries:
  %k = phi i64 [%k0, %row_body], [%kn, %entry_body]
  %kin = icmp slt i64 %k, %k1
  br i1 %kin, label %entry_body, label %row
entry_body:
""" + index_at("%crd", "%k", "%c", "p", "ext") + """  %pn = getelementptr i{p}, ptr %next, i64 %c
  %at_raw = load i{p}, ptr %pn
  %at = {ext} %at_raw to i64
  %at1 = add i{p} %at_raw, 1
  store i{p} %at1, ptr %pn
""" + store_at("i{p}", "%r_c", "%out_crd", "%at", "%po") + """\
""" + load_at("i{v}", "%val", "%k", "%v") + """\
""" + store_at("i{v}", "%v", "%out_val", "%at", "%pov") + """  %kn = add i64 %k, 1
  br label %entries
done:
  ret void
}}
"""
_COUNT_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p)
_SCATTER_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_lock = threading.Lock()


@functools.cache
def _kernels(index_bits: int, value_bits: int):
    from splyce.native.codegen import compile_host_helpers

    names = (f"splyce_transpose_count_i{index_bits}", f"splyce_transpose_scatter_i{index_bits}_v{value_bits}")
    ext = "zext i32" if index_bits == 32 else "bitcast i64"
    narrow = "trunc i64" if index_bits == 32 else "bitcast i64"
    text = (_COUNT.format(name=names[0], p=index_bits, ext=ext)
            + _SCATTER.format(name=names[1], p=index_bits, v=value_bits, ext=ext, narrow=narrow))
    fns = compile_host_helpers(text, dict(zip(names, (_COUNT_SIG, _SCATTER_SIG))))
    return fns[names[0]], fns[names[1]]


def supported(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> bool:
    return (indices.dtype == indptr.dtype and indices.dtype in (np.int32, np.int64)
            and data.dtype.itemsize in (4, 8) and all(x.flags.c_contiguous for x in (data, indices, indptr)))


def _scipy_transpose(data, indices, indptr, rows: int, cols: int):
    """One range: scipy's counting transpose (``csr_tocsc``, what ``csc.tocsr()`` runs, without its two
    constructors): the same arrays, and on small matrices less fixed cost than our two kernels' set-up (~100
    vs ~200 us on a 1k-row matrix). None when scipy no longer offers it."""
    try:
        from scipy.sparse._sparsetools import csr_tocsc
    except ImportError:
        return None
    t_indptr = np.empty(cols + 1, dtype=indptr.dtype)
    t_indices = np.empty(len(indices), dtype=indices.dtype)
    t_data = np.empty(len(data), dtype=data.dtype)
    csr_tocsc(rows, cols, indptr, indices, data, t_indptr, t_indices, t_data)
    return t_data, t_indices, t_indptr


def transpose(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, rows: int, cols: int,
              threads: int = 1):
    """``(data, indices, indptr)`` of the transpose (``cols`` x ``rows``, CSR) of a checked CSR (``rows`` x
    ``cols``; one index dtype, int32 / int64; 4- or 8-byte values; C-contiguous)."""
    with _lock:
        count, scatter = _kernels(indices.dtype.itemsize * 8, data.dtype.itemsize * 8)
    chunks = ir_text.work_chunks(indptr, threads)
    if len(chunks) == 1:
        done = _scipy_transpose(data, indices, indptr, rows, cols)
        if done is not None:
            return done
    counts = np.zeros((len(chunks), cols), dtype=indptr.dtype)   # entries fit the index dtype
    ir_text.run_chunks(lambda t, lo, hi: count(_address(indptr), _address(indices), lo, hi, _address(counts[t])),
                       chunks, threads)
    total = counts[0].copy()
    for t in range(1, len(chunks)):
        total += counts[t]
    t_indptr = np.empty(cols + 1, dtype=indptr.dtype)
    t_indptr[0] = 0
    np.cumsum(total, out=t_indptr[1:])
    starts = np.empty_like(counts)          # starts[t, j]: where range t's first entry of column j goes
    starts[0] = t_indptr[:-1]
    for t in range(1, len(chunks)):         # the ranges before t come first within each column
        np.add(starts[t - 1], counts[t - 1], out=starts[t])
    t_indices = np.empty(len(indices), dtype=indices.dtype)
    t_data = np.empty(len(data), dtype=data.dtype)
    ir_text.run_chunks(lambda t, lo, hi: scatter(_address(indptr), _address(indices), _address(data), lo, hi,
                                                 _address(starts[t]), _address(t_indices), _address(t_data)),
                       chunks, threads)
    return t_data, t_indices, t_indptr
