"""A scipy BSR / DIA / COO operand of a jitted call held in its own format (docs/guide/formats.md, "Inside
``@jit``").

The trace reads such an operand as the CSR it equals (the tracer, the planner's cost model and the MLIR kernel
know CSR); its ``TensorType`` says how it is held (``stored``: ``"bsr 4x4"``, ``"dia"``, ``"coo"``), so kernels
are cached per format. The plan then runs each product the native kernel library has on that format (BSR /
DIA / COO times a dense vector or matrix: native/bsr.py, dia.py, coo.py, the drop-ins' kernels, scipy's sums
bit for bit) on the operand's own buffers, and converts the operand to CSR once per call only for what the
MLIR kernel reads (``to_csr``, the reason in ``as_text("plan")``).

What the native kernels read unchecked is checked here when the operand is held (array ranks, lengths and
shapes, a BSR's block shape against the matrix's and its ``indptr`` ends, a DIA's offsets): O(1) or O(number
of diagonals). Indices read one by one (a COO's coordinates, a BSR's block columns and ``indptr`` segments) the
kernels check as they read them; the conversion to CSR checks them first (scipy's conversions trust them).
"""

from __future__ import annotations

import functools

import numpy as np

from splyce.native.ir_text import VALUE
from splyce.tensors.formats import CSR, Format

KINDS = ("bsr", "dia", "coo")
_INDEX = (np.dtype(np.int32), np.dtype(np.int64))
_OFFSET_LIMIT = 1 << 62


def held_kind(x) -> str | None:
    """The format a scipy operand is held in inside ``@jit`` ("bsr", "dia", "coo"), or None (converted as
    before: another format or rank, or a value dtype the native kernels lack)."""
    fmt = getattr(x, "format", None)
    if fmt not in KINDS or not type(x).__module__.startswith("scipy.sparse") or len(getattr(x, "shape", ())) != 2:
        return None
    try:
        dtype = np.dtype(x.dtype)
    except TypeError:
        return None
    if dtype.newbyteorder("=") not in VALUE:
        return None
    return fmt


def _index(arr, what: str, name: str) -> np.ndarray:
    if type(arr) is np.ndarray and arr.dtype in _INDEX and arr.flags.c_contiguous:
        return arr
    arr = np.asarray(arr)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: the {what} must be integers, got dtype {arr.dtype}")
    if arr.dtype not in _INDEX or not arr.dtype.isnative:
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr)


def _values(data, dtype: np.dtype) -> np.ndarray:
    if type(data) is np.ndarray and data.dtype == dtype and data.flags.c_contiguous:
        return data
    return np.ascontiguousarray(np.asarray(data), dtype=dtype)


class Held:
    """A scipy BSR / DIA / COO operand, checked where the native kernels read it unchecked; never modified.

    ``stored``: the format text of its ``TensorType`` (``"bsr 4x4"``, ``"dia"``, ``"coo"``); ``format``: the
    CSR format the trace reads it as (index widths 32 where its index arrays are int32); ``nnz``: the entries
    the planner costs it by (a BSR's stored block entries, a DIA's in-range diagonal positions, a COO's
    entries, duplicates counted)."""

    __slots__ = ("obj", "kind", "name", "shape", "dtype", "stored", "format", "_nnz", "parts")

    def __init__(self, x, name: str):
        kind = held_kind(x)
        if kind is None:
            raise TypeError(f"{name}: not a 2-D scipy BSR / DIA / COO of a supported value dtype")
        self.obj, self.kind, self.name = x, kind, name
        self.shape = tuple(int(d) for d in x.shape)
        self.dtype = np.dtype(x.dtype).newbyteorder("=")
        m, n = self.shape
        if kind == "bsr":
            data = np.asarray(x.data)
            indptr, indices = _index(x.indptr, "BSR indptr", name), _index(x.indices, "BSR indices", name)
            if indptr.dtype != indices.dtype:
                indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
            if data.ndim != 3 or data.shape[1] == 0 or data.shape[2] == 0:
                raise ValueError(f"{name}: a malformed BSR: data of shape {data.shape} (expected (blocks, R, C))")
            nnzb, R, C = data.shape
            if m % R or n % C:
                raise ValueError(f"{name}: a malformed BSR: blocks of {R} x {C} do not tile the shape {self.shape}")
            if indptr.ndim != 1 or len(indptr) != m // R + 1:
                raise ValueError(f"{name}: a malformed BSR: indptr has {indptr.size} entries, expected "
                                 f"{m // R + 1} (block rows + 1)")
            if indices.ndim != 1 or len(indices) != nnzb:
                raise ValueError(f"{name}: a malformed BSR: {indices.size} block column indices for {nnzb} blocks")
            if indptr[0] != 0 or indptr[-1] != nnzb:
                raise ValueError(f"{name}: a malformed BSR: indptr must start at 0 and end at the {nnzb} blocks, "
                                 f"got {int(indptr[0])} ... {int(indptr[-1])}")
            self.parts = (indptr, indices, _values(data, self.dtype))
            self.stored = f"bsr {R}x{C}"
            self._nnz = nnzb * R * C
            wide = indices.dtype == np.int64 or m >= 2**31 or n >= 2**31 or self.nnz >= 2**31
        elif kind == "dia":
            offsets, data = _index(x.offsets, "DIA offsets", name), np.asarray(x.data)
            if offsets.ndim != 1 or data.ndim != 2 or data.shape[0] != len(offsets):
                raise ValueError(f"{name}: a malformed DIA: data of shape {data.shape} for {offsets.size} offsets "
                                 "(one row of data per offset)")
            # (int32 offsets are within the limit by their type: no scan on the common small call)
            if offsets.dtype != np.int32 and len(offsets) and \
                    max(-int(offsets.min()), int(offsets.max())) >= _OFFSET_LIMIT:
                raise ValueError(f"{name}: a malformed DIA: an offset of magnitude 2**62 or more")
            self.parts = (offsets, _values(data, self.dtype))
            self.stored = "dia"
            self._nnz = None          # (counted when the planner asks: ``nnz``)
            wide = m >= 2**31 or n >= 2**31 or data.size >= 2**31
        else:
            row, col = (_index(c, f"COO {w} coordinates", name) for c, w in zip(x.coords, ("row", "column")))
            data = _values(x.data, self.dtype)
            if not (row.ndim == col.ndim == data.ndim == 1 and len(row) == len(col) == len(data)):
                raise ValueError(f"{name}: a malformed COO: {row.size} row and {col.size} column coordinates for "
                                 f"{data.size} values (one of each per entry)")
            self.parts = (row, col, data)
            self.stored = "coo"
            self._nnz = len(data)
            wide = row.dtype == np.int64 or col.dtype == np.int64 or m >= 2**31 or n >= 2**31 or self._nnz >= 2**31
        self.format: Format = CSR if wide else CSR.with_widths(32, 32)

    @property
    def nnz(self) -> int:
        if self._nnz is None:         # a DIA: the in-range positions of its diagonals
            offsets, data = self.parts
            m, n = self.shape
            width = min(data.shape[1], n)
            lo = np.maximum(offsets.astype(np.int64), 0)
            hi = np.minimum(width, m + offsets.astype(np.int64))
            self._nnz = int(np.maximum(hi - lo, 0).sum())
        return self._nnz

    # -- the products the native kernel library has on the held format ------------------------------------------
    def times_dense(self, x: np.ndarray, threads: int = 1, via_csr: bool = False) -> np.ndarray:
        """``A @ x`` for a dense 1-D or 2-D ``x`` of the operand's value dtype whose first dimension is its
        column count, on the held buffers (scipy's sums, bit for bit). ``via_csr`` (the planner's choice:
        ``kernel_choice.HELD_VIA_CSR_COLUMNS``): converted first to a CSR whose rows keep the held format's
        summation order (``in_row_order``), then the CSR kernel on ``threads`` threads: the same sums."""
        from splyce.native import bsr, coo, dia

        x = np.ascontiguousarray(x, dtype=self.dtype)
        m, n = self.shape
        if via_csr:
            from splyce.native.spmv import csr_times_dense

            indptr, indices, data = self.in_row_order()
            return csr_times_dense(indptr, indices, data, x, threads)
        if self.kind == "bsr":
            indptr, indices, data = self.parts
            y = bsr.bsr_times_dense(indptr, indices, data, x, m)
            if y is None:
                if bool((np.diff(indptr) < 0).any()):
                    raise ValueError(f"{self.name}: a malformed BSR: indptr decreases")
                raise ValueError(f"{self.name}: a malformed BSR: a block column index outside "
                                 f"[0, {n // data.shape[2]})")
            return y
        if self.kind == "dia":
            offsets, data = self.parts
            return dia.dia_times_dense(offsets, data, x, m)
        row, col, data = self.parts
        y = coo.coo_times_dense(row, col, data, x, m)
        if y is None:
            raise ValueError(f"{self.name}: a malformed COO: {coo.bad_entry(row, col, m, n)}")
        return y

    def _check_indices(self) -> None:
        """What a conversion writes through and scipy's conversions trust: a BSR's ``indptr`` order and block
        columns, a COO's coordinates (each error names the first defect)."""
        m, n = self.shape
        if self.kind == "bsr":
            indptr, indices, data = self.parts
            C = data.shape[2]
            if bool((np.diff(indptr) < 0).any()):
                raise ValueError(f"{self.name}: a malformed BSR: indptr decreases")
            if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= n // C):
                raise ValueError(f"{self.name}: a malformed BSR: a block column index outside [0, {n // C})")
        elif self.kind == "coo":
            row, col, _ = self.parts
            if len(row):
                from splyce.native.coo import bad_entry

                bad = bad_entry(row, col, m, n)
                if bad is not None:
                    raise ValueError(f"{self.name}: a malformed COO: {bad}")

    def in_row_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Checked CSR buffers ``(indptr, indices, data)`` (one index dtype) of the operand whose rows hold its
        entries in the order the held kernel sums them: a COO's by a stable counting sort on rows (entry order
        within a row, duplicates and explicit zeros kept: scipy's ``coo_tocsr`` without ``sum_duplicates``), a
        DIA's diagonal by diagonal (every in-range stored position, zeros kept), a BSR's block by block (scipy's
        ``bsr_tocsr``, which keeps every block entry). O(nnz + rows); the CSR kernel's row sums over them from
        +0.0 are then the held kernel's, bit for bit."""
        m, n = self.shape
        self._check_indices()
        if self.kind == "bsr":
            c = self.obj.tocsr()
            index = np.int32 if self.format.crd_width == 32 else np.int64
            return (np.ascontiguousarray(c.indptr, dtype=index), np.ascontiguousarray(c.indices, dtype=index),
                    _values(c.data, self.dtype))
        if self.kind == "dia":
            offsets, data = self.parts
            width = min(data.shape[1], n)
            rows, cols, vals = [], [], []
            for k, off in enumerate(offsets.tolist()):
                lo, hi = max(off, 0), min(width, m + off)
                if hi > lo:
                    j = np.arange(lo, hi, dtype=np.int64)
                    rows.append(j - off)
                    cols.append(j)
                    vals.append(data[k, lo:hi])
            row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            col = np.concatenate(cols) if cols else np.zeros(0, np.int64)
            val = np.concatenate(vals) if vals else np.zeros(0, self.dtype)
        else:
            row, col, val = self.parts
        index = np.dtype(np.int32 if self.format.crd_width == 32 else np.int64)
        row, col = row.astype(index, copy=False), col.astype(index, copy=False)
        return _row_sort(row, col, np.ascontiguousarray(val), m, n, index)

    # -- the conversion for what the MLIR kernel reads -------------------------------------------------------
    def to_csr(self):
        """The operand as a checked CSR ``SparseTensor`` in ``self.format`` (a COO's duplicates summed, as scipy's
        ``tocsr``), made by scipy's linear-time conversion after checking the indices it writes through."""
        from splyce.tensors.tensor import asarray

        self._check_indices()
        return asarray(self.obj.tocsr(), format=self.format, name=self.name)

    def empty(self):
        """An empty CSR of the operand's shape, dtype and format: the kernel argument in its place when the
        MLIR kernel does not read it (native steps read the held buffers). One per type, shared: never written."""
        return _empty(self.shape, self.dtype, self.format)

    def __repr__(self) -> str:
        return f"Held({self.stored}, {self.shape[0]}x{self.shape[1]}, {self.dtype})"


@functools.lru_cache(maxsize=64)
def _empty(shape: tuple, dtype: np.dtype, fmt: Format):
    from splyce.tensors.tensor import SparseTensor

    pos = np.zeros(shape[0] + 1, dtype=f"int{fmt.pos_width}")
    crd = np.zeros(0, dtype=f"int{fmt.crd_width}")
    values = np.zeros(0, dtype=dtype)
    for v in (pos, crd, values):
        v.flags.writeable = False
    return SparseTensor(shape, fmt, (None, pos), (None, crd), values)



def _row_sort(row, col, val, m: int, n: int, index: np.dtype):
    """CSR buffers of in-range coordinates by a stable counting sort on rows (scipy's ``coo_tocsr``: entry order
    kept within a row, duplicates not summed), or NumPy's stable sort where scipy no longer offers it."""
    nnz = len(val)
    try:
        from scipy.sparse._sparsetools import coo_tocsr
    except ImportError:
        coo_tocsr = None
    indptr = np.empty(m + 1, dtype=index)
    if coo_tocsr is not None and val.dtype.kind in "fiuc" and val.dtype.isnative:
        indices, data = np.empty(nnz, dtype=index), np.empty(nnz, dtype=val.dtype)
        coo_tocsr(m, n, nnz, row, col, val, indptr, indices, data)
        return indptr, indices, data
    order = np.argsort(row, kind="stable")
    indptr[0] = 0
    np.cumsum(np.bincount(row, minlength=m), out=indptr[1:])
    return indptr, np.ascontiguousarray(col[order]), np.ascontiguousarray(val[order])
