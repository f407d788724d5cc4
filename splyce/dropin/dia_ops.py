"""Two scipy DIA operands combined into a DIA (``+``, ``-``, ``multiply``, ``@``), as scipy 1.17 returns them,
diagonal by diagonal on the dense diagonals: no conversion to CSR and back (that road cost 30-300x scipy's).

A DIA holds diagonals as rows of ``data``: ``data[d, j]`` is the entry at column ``j``, row ``j - offsets[d]``;
positions outside the matrix (and columns at or beyond ``data.shape[1]``) hold nothing. Each operand is first
read as ``{offset: row}``, one row of ``n`` columns per distinct offset (a repeated offset summed in stored order,
positions outside the matrix zeroed), so every later step works on clean rows: a sum adds the rows of each
offset of the union (``0 + a + b``: scipy's ``a + b`` up to the sign of a zero), a product multiplies those of
the offsets both hold, a matrix product adds ``A[i, i + ka] * B[i + ka, i + ka + kb]`` into offset ``ka + kb``.
"""

from __future__ import annotations

import functools

import numpy as np

from splyce.dropin import scipy_out
from splyce.native.ir_text import VALUE


def _rows(x, dtype) -> dict:
    """``{offset: row of x.shape[1] columns}`` of a DIA, positions outside the matrix zero."""
    m, n = x.shape
    offsets, data = np.asarray(x.offsets), np.asarray(x.data)
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or data.ndim != 2 or data.shape[0] != len(offsets):
        raise ValueError(f"a malformed DIA: data of shape {data.shape} for {offsets.size} offsets (one row of data "
                         "per offset, integer offsets)")
    width = min(data.shape[1], n)
    rows: dict = {}
    for d, k in enumerate(offsets.tolist()):
        lo, hi = max(0, k), min(width, m + k)      # columns j whose row j - k is in [0, m)
        if hi <= lo:
            continue
        row = rows.get(k)
        if row is None:
            row = rows[k] = np.zeros(n, dtype=dtype)
        row[lo:hi] += data[d, lo:hi]
    return rows


def _same_diagonals(a, b):
    """Both DIAs' data (2-D ndarrays of one shape) when they hold the same distinct offsets in the same order,
    else None."""
    oa, ob = np.asarray(a.offsets), np.asarray(b.offsets)
    da, db = np.asarray(a.data), np.asarray(b.data)
    if (oa.ndim != 1 or oa.dtype.kind not in "iu" or da.ndim != 2 or da.shape != db.shape or da.shape[0] != len(oa)
            or not (oa is ob or np.array_equal(oa, ob))):
        return None
    listed = oa.tolist()
    if len(set(listed)) != len(listed):
        return None
    return da, db


def _result(cls, rows: dict, shape, dtype):
    offsets = np.array(sorted(rows), dtype=np.int32 if max(shape) < 2**31 else np.int64)
    data = np.stack([rows[k] for k in offsets.tolist()]) if len(offsets) else np.zeros((0, shape[1]), dtype)
    return cls((data, offsets), shape=shape)


def _class(a, b):
    """scipy's result class: the left operand's (``dia_matrix + dia_array`` is a ``dia_matrix``)."""
    import scipy.sparse as sps

    return sps.dia_array if isinstance(a, sps.sparray) else sps.dia_matrix


def elementwise(name: str, a, b):
    """``a + b`` / ``a - b`` / ``a.multiply(b)`` for two scipy DIAs of one shape, as a DIA of their class (an
    array if either is); None for a value dtype the native kernels lack (the general road then)."""
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype not in VALUE or a.shape != b.shape or len(a.shape) != 2:
        return None
    same = _same_diagonals(a, b)
    if same is not None:        # one set of diagonals, stored alike: the data rows combined as they are
        da, db = same
        data = da * db if name == "multiply" else (da + db if name == "add" else da - db)
        return scipy_out.dia(_class(a, b), data.astype(dtype, copy=False), np.array(a.offsets), a.shape)
    ra, rb = _rows(a, dtype), _rows(b, dtype)
    if name == "multiply":
        rows = {k: ra[k] * rb[k] for k in ra if k in rb}
    else:
        rows = {}
        for k in set(ra) | set(rb):
            row = np.zeros(a.shape[1], dtype=dtype)
            if k in ra:
                row += ra[k]
            if k in rb:
                row = row + rb[k] if name == "add" else row - rb[k]
            rows[k] = row
    return _result(_class(a, b), rows, a.shape, dtype)


def matmul(a, b):
    """``a @ b`` for two scipy DIAs (``a``'s columns ``b``'s rows) as a DIA of their class; None for a value dtype
    the native kernels lack."""
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype not in VALUE or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return None
    m, n = a.shape[0], b.shape[1]
    oa, rows_a = _diagonals(a, dtype)
    ob, rows_b = _diagonals(b, dtype)
    # every pair (A's diagonals in order, then B's): result column j (row j - ka - kb) takes A[., j - kb] *
    # B[j - kb, j], A's row at column j - kb, for j where that column of A is one (j - kb in [0, A's columns))
    # and the result's row is one (j - k in [0, m)): nothing is written outside the result
    wa = a.shape[1]
    offsets, pairs = _pairs(tuple(oa), tuple(ob), m, n, wa)
    out = np.zeros((len(offsets), n), dtype=dtype)
    if len(pairs):
        from splyce.native import dia_matmat

        dia_matmat.dia_matmat(pairs, rows_a, rows_b, out)
    index = np.int32 if max(m, n) < 2**31 else np.int64
    return scipy_out.dia(_class(a, b), out, np.array(offsets, dtype=index), (m, n))


@functools.lru_cache(maxsize=64)
def _pairs(oa: tuple, ob: tuple, m: int, n: int, wa: int):
    """(result offsets, the pairs' table) of two operands' offsets and the shapes, kept for the next product of
    the same structure (a stencil applied again, a power of a band): building the table of a 5-point
    Laplacian's square (25 pairs) took ~25 us of a ~60 us product on 3,600 rows. The table is read-only."""
    offsets, pairs = (_pair_table if len(oa) * len(ob) <= 32 else _pair_array)(list(oa), list(ob), m, n, wa)
    pairs.flags.writeable = False
    return tuple(offsets), pairs


def _pair_table(oa: list, ob: list, m: int, n: int, wa: int):
    """(result offsets, the pairs' table for native/dia_matmat.py) in Python (few pairs: faster than NumPy's
    calls). A pair of offsets ``(ka, kb)`` takes result columns ``j`` where ``j - kb`` is a column of ``A``
    (``[0, wa)``) and ``j - ka - kb`` a row of the result (``[0, m)``): nothing is written outside the result.
    The pairs of one result diagonal come one after another (a stable sort, so each diagonal's pairs keep
    ``A``'s order then ``B``'s and every entry sums in that order), its row staying in cache across them."""
    table = []
    for da, ka in enumerate(oa):
        for db, kb in enumerate(ob):
            k = ka + kb
            lo, hi = max(0, kb, k), min(n, wa + kb, m + k)
            if hi > lo:
                table.append((da, db, kb, lo, hi, k))
    table.sort(key=lambda row: row[5])
    offsets = sorted({row[5] for row in table})
    at = {k: t for t, k in enumerate(offsets)}
    return offsets, np.array([row[:5] + (at[row[5]],) for row in table], dtype=np.int64).reshape(-1, 6)


def _pair_array(oa: list, ob: list, m: int, n: int, wa: int):
    """``_pair_table`` in NumPy (many pairs), the same table."""
    ka, kb = np.array(oa, dtype=np.int64), np.array(ob, dtype=np.int64)
    da, db = np.divmod(np.arange(len(ka) * len(kb), dtype=np.int64), len(kb))
    kbp = kb[db]
    k = ka[da] + kbp
    lo = np.maximum(np.maximum(kbp, 0), k)
    hi = np.minimum(np.minimum(n, wa + kbp), m + k)
    keep = np.flatnonzero(hi > lo)
    keep = keep[np.argsort(k[keep], kind="stable")]
    offsets, target = np.unique(k[keep], return_inverse=True)
    pairs = np.stack([da[keep], db[keep], kbp[keep], lo[keep], hi[keep], target.ravel()], axis=1)
    return offsets.tolist(), np.ascontiguousarray(pairs, dtype=np.int64)


def _diagonals(x, dtype) -> tuple[list, np.ndarray]:
    """(offsets, rows) of a DIA for the product: ``rows`` C-contiguous of ``dtype``, one row per distinct offset
    of at least ``x.shape[1]`` columns: the stored data as it is when its offsets are distinct and its rows
    cover every column (entries outside the matrix reach only positions outside the product, never written),
    else the rows of ``_rows`` (repeated offsets summed)."""
    offsets, data = np.asarray(x.offsets), np.asarray(x.data)
    if (offsets.ndim == 1 and offsets.dtype.kind in "iu" and data.ndim == 2 and data.shape[0] == len(offsets)
            and data.shape[1] >= x.shape[1] and data.dtype == dtype and data.flags.c_contiguous):
        listed = offsets.tolist()
        if len(set(listed)) == len(listed):
            return listed, data
    rows = _rows(x, dtype)
    if not rows:
        return [], np.zeros((0, max(x.shape[1], 1)), dtype=dtype)
    return list(rows), np.ascontiguousarray(np.stack(list(rows.values())), dtype=dtype)
