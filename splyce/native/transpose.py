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
from splyce.native.ir_text import IR, counted, ext, load_index, narrow

def _count_ir(name: str, p: int) -> str:
    """``void name(pos, crd, lo, hi, cnt)``: ``cnt[c] += 1`` for the column ``c`` of every entry of rows
    ``[lo, hi)`` (counters of the index width)."""
    ir = IR()
    ir(f"define void @{name}(ptr %pos, ptr %crd, i64 %lo, i64 %hi, ptr %cnt) {{")
    ir.label("entry")
    k0, k1 = load_index(ir, "%pos", p, "%lo"), load_index(ir, "%pos", p, "%hi")

    def entry(k):
        c = load_index(ir, "%crd", p, k)
        at = ir.gep(f"i{p}", "%cnt", c)
        n, n1 = ir.name("n"), ir.name("n")
        ir(f"  {n} = load i{p}, ptr {at}")
        ir(f"  {n1} = add i{p} {n}, 1")
        ir(f"  store i{p} {n1}, ptr {at}")

    counted(ir, k0, k1, entry, base="k")
    ir("  ret void")
    ir("}")
    return ir.text()


def _scatter_ir(name: str, p: int, v: int) -> str:
    """``void name(pos, crd, val, lo, hi, next, out_crd, out_val)``: each entry of rows ``[lo, hi)`` in row
    order to its column's next place ``next[c]`` (incremented): its row and its value (moved as ``i{v}``)."""
    ir = IR()
    ir(f"define void @{name}(ptr %pos, ptr %crd, ptr %val, i64 %lo, i64 %hi, ptr %next, ptr %out_crd, "
       "ptr %out_val) {")
    ir.label("entry")

    def row(r):
        r1 = ir.name("r")
        ir(f"  {r1} = add i64 {r}, 1")
        k0, k1, row_c = load_index(ir, "%pos", p, r), load_index(ir, "%pos", p, r1), ir.name("row")
        ir(f"  {row_c} = {narrow(p)} {r} to i{p}")

        def entry(k):
            c = load_index(ir, "%crd", p, k)
            pn = ir.gep(f"i{p}", "%next", c)
            raw, at, at1 = ir.name("raw"), ir.name("at"), ir.name("at")
            ir(f"  {raw} = load i{p}, ptr {pn}")
            ir(f"  {at} = {ext(p)} {raw} to i64")
            ir(f"  {at1} = add i{p} {raw}, 1")
            ir(f"  store i{p} {at1}, ptr {pn}")
            ir.store(f"i{p}", row_c, "%out_crd", at)
            ir.store(f"i{v}", ir.load(f"i{v}", "%val", k), "%out_val", at)

        counted(ir, k0, k1, entry, base="k")

    counted(ir, "%lo", "%hi", row, base="r")
    ir("  ret void")
    ir("}")
    return ir.text()


_COUNT_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p)
_SCATTER_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_lock = threading.Lock()


@functools.cache
def _kernels(index_bits: int, value_bits: int):
    from splyce.native.codegen import compile_host_helpers

    names = (f"splyce_transpose_count_i{index_bits}", f"splyce_transpose_scatter_i{index_bits}_v{value_bits}")
    text = _count_ir(names[0], index_bits) + _scatter_ir(names[1], index_bits, value_bits)
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
