"""Products of a sparse matrix held in its own stored format (scipy COO / DIA / BSR, pydata COO / GCXS) with a
dense vector or matrix, on that format's buffers as they are (native/coo.py, dia.py, bsr.py; pydata's GCXS by
rows on the CSR kernel): no conversion to CSR per call. Every kernel sums in scipy's order, so the values are
scipy's bit for bit; the result is a NumPy array, as scipy and pydata return it.

What the kernels read unchecked is checked here, each with an error naming the defect: array lengths and
shapes, a BSR's block shape against the matrix's and its ``indptr`` ends, a DIA's offsets. Indices that the
kernels read one by one (a COO's coordinates, a BSR's block columns and ``indptr`` segments) they check as
they read them; a failure is worded here after the fact.
"""

from __future__ import annotations

import numpy as np

from splyce.native.ir_text import VALUE

from splyce.planner.kernel_choice import STORED_LAYOUTS as LAYOUTS   # the formats served here
_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


def layout_of(x, family: str) -> str | None:
    """The stored format of a scipy or pydata operand ("csr", "coo", "dia", "bsr", "gcxs", ...), else None."""
    if family.startswith("scipy"):
        return getattr(x, "format", None)
    if family == "pydata":
        return type(x).__name__.lower()
    return None


def times_dense(a, b, family: str):
    """``a @ b`` for ``a`` a 2-D scipy COO / DIA / BSR or pydata COO / GCXS and ``b`` a dense 1-D or 2-D array
    whose first dimension matches ``a``'s columns, as an ndarray in the operands' common value dtype; None when
    the native kernels do not apply (a value dtype they lack, buffers of another kind): then the caller takes
    the general road. ValueError for malformed buffers."""
    b = np.asarray(b)
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype not in VALUE or b.ndim not in (1, 2) or len(a.shape) != 2:
        return None
    x = np.ascontiguousarray(b, dtype=dtype.newbyteorder("="))
    fmt = layout_of(a, family)
    if family.startswith("scipy"):
        if fmt == "coo":
            return _scipy_coo(a, x, dtype, family == "scipy-array")
        if fmt == "dia":
            return _dia(a, x, dtype)
        if fmt == "bsr":
            return _bsr(a, x, dtype)
        return None
    if family == "pydata":
        if fmt == "coo":
            coords = a.coords
            if not isinstance(coords, np.ndarray) or coords.ndim != 2 or coords.shape[0] != 2:
                return None
            return _coo(coords[0], coords[1], a.data, x, a.shape, dtype, "pydata COO")
        if fmt == "gcxs":
            return _gcxs(a, x, dtype)
    return None


def _values(data, dtype) -> np.ndarray:
    if type(data) is np.ndarray and data.dtype is dtype and dtype.isnative and data.flags.c_contiguous:
        return data
    data = np.asarray(data)
    return np.ascontiguousarray(data, dtype=dtype.newbyteorder("="))


def _index(arr, what: str) -> np.ndarray:
    if type(arr) is np.ndarray and (arr.dtype is _INDEX[0] or arr.dtype is _INDEX[1]) and arr.flags.c_contiguous:
        return arr          # the common case: nothing to convert (both dtypes are NumPy's native singletons)
    arr = np.asarray(arr)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"a: the {what} must be integers, got dtype {arr.dtype}")
    if arr.dtype not in _INDEX or not arr.dtype.isnative:
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr)


def _coo(row, col, data, x, shape, dtype, kind: str):
    from splyce.native import coo

    m, n = shape
    row, col, data = _index(row, "row coordinates"), _index(col, "column coordinates"), _values(data, dtype)
    if not (row.ndim == col.ndim == data.ndim == 1 and len(row) == len(col) == len(data)):
        raise ValueError(f"a: a malformed {kind}: {len(row)} row and {len(col)} column coordinates for "
                         f"{len(data)} values (one of each per entry)")
    y = coo.coo_times_dense(row, col, data, x, m)
    if y is None:
        raise ValueError(f"a: a malformed {kind}: {coo.bad_entry(row, col, m, n)}")
    return y


def _scipy_coo(a, x, dtype, array: bool):
    row, col = a.coords
    # (scipy 1.17 gives a one-row coo_array times a vector as a 0-d scalar; the drop-ins keep NumPy's (1,) shape,
    # as for every other format: tests/dropin/test_dropin_spmv.py)
    return _coo(row, col, a.data, x, a.shape, dtype, "COO")


def _dia(a, x, dtype):
    from splyce.native import dia

    offsets, data = _index(a.offsets, "DIA offsets"), np.asarray(a.data)
    if offsets.ndim != 1 or data.ndim != 2 or data.shape[0] != len(offsets):
        raise ValueError(f"a: a malformed DIA: data of shape {data.shape} for {offsets.size} offsets (one row of "
                         "data per offset)")
    # (int32 offsets are within the limit by their type: no scan, the common small-call case)
    if offsets.dtype is not _INDEX[0] and len(offsets) and max(-int(offsets.min()), int(offsets.max())) >= \
            dia.OFFSET_LIMIT:
        raise ValueError("a: a malformed DIA: an offset of magnitude 2**62 or more (no matrix has such a diagonal)")
    return dia.dia_times_dense(offsets, _values(data, dtype), x, a.shape[0])


def _bsr(a, x, dtype):
    from splyce.native import bsr

    m, n = a.shape
    data = np.asarray(a.data)
    indptr, indices = _index(a.indptr, "BSR indptr"), _index(a.indices, "BSR indices")
    if indptr.dtype != indices.dtype:
        indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
    if data.ndim != 3 or data.shape[1] == 0 or data.shape[2] == 0:
        raise ValueError(f"a: a malformed BSR: data of shape {data.shape} (expected (blocks, R, C))")
    nnzb, R, C = data.shape
    if m % R or n % C:
        raise ValueError(f"a: a malformed BSR: blocks of {R} x {C} do not tile the shape {a.shape}")
    if indptr.ndim != 1 or len(indptr) != m // R + 1:
        raise ValueError(f"a: a malformed BSR: indptr has {indptr.size} entries, expected {m // R + 1} (block "
                         "rows + 1)")
    if indices.ndim != 1 or len(indices) != nnzb:
        raise ValueError(f"a: a malformed BSR: {indices.size} block column indices for {nnzb} blocks")
    if indptr[0] != 0 or indptr[-1] != nnzb:
        raise ValueError(f"a: a malformed BSR: indptr must start at 0 and end at the {nnzb} blocks, got "
                         f"{int(indptr[0])} ... {int(indptr[-1])}")
    y = bsr.bsr_times_dense(indptr, indices, _values(data, dtype), x, m)
    if y is None:
        if bool((np.diff(indptr) < 0).any()):
            raise ValueError("a: a malformed BSR: indptr decreases")
        raise ValueError(f"a: a malformed BSR: a block column index outside [0, {n // C})")
    return y


def _gcxs(a, x, dtype):
    """A 2-D pydata GCXS: compressed rows on the CSR kernel, compressed columns as a COO (columns expanded)."""
    from splyce.native import spmv

    if a.ndim != 2 or tuple(a.compressed_axes) not in ((0,), (1,)):
        return None
    indptr, indices, data = _index(a.indptr, "GCXS indptr"), _index(a.indices, "GCXS indices"), _values(a.data, dtype)
    if indptr.dtype != indices.dtype:
        indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
    major = a.shape[a.compressed_axes[0]]
    if indptr.ndim != 1 or len(indptr) != major + 1 or len(indices) != len(data) or indptr[0] != 0 \
            or indptr[-1] != len(indices):
        raise ValueError(f"a: a malformed GCXS: indptr of {indptr.size} entries from {indptr[:1]} to {indptr[-1:]} "
                         f"for {major} compressed slices and {len(indices)} entries")
    if tuple(a.compressed_axes) == (0,):
        y = spmv.csr_times_dense(indptr, indices, data, x, 1, coordinates_checked=False)
        if y is None:
            raise ValueError(f"a: a malformed GCXS: indptr decreases or a column index is outside [0, {a.shape[1]})")
        return y
    counts = np.diff(indptr)
    if (counts < 0).any():
        raise ValueError("a: a malformed GCXS: indptr decreases")
    col = np.repeat(np.arange(major, dtype=indices.dtype), counts)
    return _coo(indices, col, data, x, a.shape, dtype, "GCXS")


_kinds: dict = {}       # exact scipy COO / DIA / BSR type -> its format, filled once scipy.sparse is imported


def fast_times_dense(a, x: np.ndarray):
    """``times_dense`` for the commonest calls, with the general path's checks on the operands left out: ``a``
    an exact scipy COO / DIA / BSR (array or matrix), ``x`` an ndarray of ``a``'s value dtype (one the kernels
    compute in) whose length is ``a``'s column count; None for anything else (the general path decides)."""
    if not _kinds:
        import sys

        sps = sys.modules.get("scipy.sparse")
        if sps is None:
            return None
        _kinds.update({sps.coo_array: "coo", sps.coo_matrix: "coo", sps.dia_array: "dia", sps.dia_matrix: "dia",
                       sps.bsr_array: "bsr", sps.bsr_matrix: "bsr"})
    fmt = _kinds.get(type(a))
    if fmt is None or x.ndim not in (1, 2) or len(a.shape) != 2 or x.shape[0] != a.shape[1]:
        return None
    dtype = x.dtype
    if dtype != a.dtype or dtype not in VALUE:
        return None
    if not (x.flags.c_contiguous and dtype.isnative):
        x = np.ascontiguousarray(x, dtype=dtype.newbyteorder("="))
    if fmt == "coo":
        return _scipy_coo(a, x, dtype, type(a).__name__ == "coo_array")
    return _dia(a, x, dtype) if fmt == "dia" else _bsr(a, x, dtype)


_CONVERTED = frozenset({"coo", "lil", "dok", "bsr", "dia"})


def scipy_to_csr(x, name: str):
    """A scipy COO / LIL / DOK / BSR / DIA operand as a scipy CSR, by scipy's own linear-time conversion (a COO's
    duplicates summed, its rows sorted), once per call at the boundary, or ``x`` itself for any other operand.
    The index arrays a conversion writes through (a COO's coordinates, a BSR's ``indptr`` and block columns)
    are checked first: scipy's conversions trust them and write out of bounds otherwise."""
    fmt = getattr(x, "format", None)
    if fmt not in _CONVERTED or len(x.shape) != 2:
        return x
    if fmt == "dok":
        x = x.tocoo()
        fmt = "coo"
    m, n = x.shape
    if fmt == "coo":
        row, col = (np.asarray(c) for c in x.coords)
        if not (row.ndim == col.ndim == np.ndim(x.data) == 1 and len(row) == len(col) == len(x.data)):
            raise ValueError(f"{name}: a malformed COO: {np.size(row)} row and {np.size(col)} column coordinates for "
                             f"{np.size(x.data)} values (one of each per entry)")
        if len(row) and (row.min() < 0 or row.max() >= m or col.min() < 0 or col.max() >= n):
            from splyce.native import coo

            raise ValueError(f"{name}: a malformed COO: {coo.bad_entry(row, col, m, n)}")
    elif fmt == "bsr":
        data, indptr, indices = np.asarray(x.data), np.asarray(x.indptr), np.asarray(x.indices)
        R, C = x.blocksize
        if data.shape[1:] != (R, C) or m % R or n % C or len(indptr) != m // R + 1 or len(indices) != len(data):
            raise ValueError(f"{name}: a malformed BSR: data {data.shape}, indptr of {len(indptr)} and {len(indices)} "
                             f"block columns for blocks of {R} x {C} in a {m} x {n} matrix")
        if indptr[0] != 0 or indptr[-1] != len(indices) or bool((np.diff(indptr) < 0).any()):
            raise ValueError(f"{name}: a malformed BSR: indptr must start at 0, never decrease and end at the "
                             f"{len(indices)} blocks")
        if len(indices) and (indices.min() < 0 or indices.max() >= n // C):
            raise ValueError(f"{name}: a malformed BSR: a block column index outside [0, {n // C})")
    elif fmt == "dia":
        data = np.asarray(x.data)
        if np.ndim(x.offsets) != 1 or data.ndim != 2 or data.shape[0] != len(x.offsets):
            raise ValueError(f"{name}: a malformed DIA: data of shape {data.shape} for {np.size(x.offsets)} offsets")
    return x.tocsr()


def pydata_class(out, a, b, matmul: bool = False):
    """A sparse result in pydata's class as pydata 0.19 returns it (the kernels' results come back as pydata
    COO): an elementwise op is a ``GCXS`` when every pydata operand is one (compressed along their axes when
    they agree, else along pydata's default, the shortest dimension), else a ``COO``; a product of two pydata
    operands of which one is a ``GCXS`` is a ``GCXS`` compressed as ``a`` is (a ``COO`` ``a``: along its shortest
    dimension), pydata converting both to ``a``'s axes; ``out`` itself otherwise."""
    if type(out).__name__ != "COO" or type(out).__module__.split(".")[0] != "sparse":
        return out
    pydata = [x for x in (a, b) if type(x).__name__ in ("COO", "GCXS") and type(x).__module__.split(".")[0] == "sparse"]
    gcxs = [x for x in pydata if type(x).__name__ == "GCXS"]
    if not gcxs:
        return out
    import sparse

    if matmul and len(pydata) == 2:
        axes = tuple(int(i) for i in a.compressed_axes) if any(x is a for x in gcxs) else (int(np.argmin(a.shape)),)
        return sparse.GCXS(out, compressed_axes=axes if out.ndim == 2 else None)
    if not matmul and len(gcxs) != len(pydata):
        return out                  # a pydata COO among the operands: pydata's result is a COO
    kinds = {tuple(int(i) for i in x.compressed_axes) for x in gcxs}
    axes = kinds.pop() if len(kinds) == 1 and gcxs[0].ndim == out.ndim else None
    return sparse.GCXS(out, compressed_axes=axes)
