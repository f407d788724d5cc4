"""``multiply`` / ``add`` / ``subtract``: row merges of two sparse operands (native, one pass with the
boundary checks for scipy CSR / CSC pairs), scipy's broadcasting and dense sums otherwise.
"""

from __future__ import annotations

import sys

import numpy as np

from splyce.dropin import broadcast, narrow_dtypes, scipy_out
from splyce.tensors.formats import CSR, compressed_order
from splyce.tensors.tensor import SparseTensor, last_level_buffers

from splyce.dropin.operands import rowwise_format
from splyce.planner.kernel_choice import Formulation, choose_elementwise_formulation
from splyce.dropin.kernels import _kernel, _threads
from splyce.dropin.stored_formats import scipy_to_csr, pydata_class as _pydata_class
from splyce.dropin.operands import OperandInfo, _INT_MAX, as_format, _canonical_csr, _csc_first, _dense_result, operand_family, _keeps_left_format, _left_format, _nd, _raw_csr, sparse_family, _wrap_sparse


# -- multiply, add, subtract -------------------------------------------------------------------------------
def _mul(a, b):
    return a * b


def _add(a, b):
    return a + b


def _sub(a, b):
    return a - b


def _elementwise(name, fun, np_fun, a, b, out_format, threads=1):
    if name == "subtract" and out_format is None and _scipy_bool_pair(a, b):
        if a.format == b.format == "dia":        # scipy's DIA difference is NumPy's on the diagonals: refused
            np.subtract(np.zeros(1, bool), np.zeros(1, bool))      # NumPy's own TypeError and message
        if a.format != "bsr":
            # scipy's bool difference of two sparse operands: the positions where they differ (its CSR kernels'
            # bool wrapper), where NumPy refuses ``-`` on bools; as scipy, its own sparse ``!=``
            return a != b
    if out_format is None and getattr(a, "format", None) == "dia" and _keeps_left_format(name, a, b) \
            and np.shape(a) == np.shape(b):
        from splyce.dropin import dia_ops

        out = dia_ops.elementwise(name, a, b)       # DIA op DIA, diagonal by diagonal (None: another dtype)
        if out is not None:
            return out
    if out_format is None and getattr(a, "format", None) == "bsr" and getattr(b, "format", None) == "bsr" \
            and _keeps_left_format(name, a, b):
        from splyce.dropin import bsr_ops

        out = bsr_ops.elementwise(name, a, b)   # canonical blocks of one shape: block by block
        if out is not None:
            return out
    threads = _threads(threads)
    if out_format is None or out_format == "sparse":
        out = _fast_merge(name, a, b, threads)
        if out is not None:
            return out
    if narrow_dtypes.involved(a, b):
        return narrow_dtypes.call(globals()[name], (a, b),
                                  dict(out_format=out_format, threads=threads),
                                  prune=operand_family(a) != "numpy" and operand_family(b) != "numpy")
    if out_format in (None, "sparse") and _csc_first(a, b) and np.shape(a) == np.shape(b):
        # scipy's result takes a CSC left operand's format: the op on the transposes (a CSC's buffers are its
        # transpose's CSR), whose CSR result transposed is that CSC, with no copy
        return _elementwise(name, fun, np_fun, a.T, b.T, out_format, threads).T
    if out_format is None and _keeps_left_format(name, a, b) and np.shape(a) == np.shape(b):
        return _left_format(a, _elementwise(name, fun, np_fun, scipy_to_csr(a, "a"), b, out_format, threads), 0)
    ia, ib = OperandInfo.of(a), OperandInfo.of(b)
    formulation = choose_elementwise_formulation(ia, ib, out_format, name)
    if formulation is Formulation.NUMPY:
        return np_fun(a, b)
    fa, fb = ia.family, ib.family
    sa, sb = ia.shape, ib.shape
    if sa != sb or (name == "multiply" and ia.sparse != ib.sparse and np.size(b if ia.sparse else a) == 1):
        # a scalar, a vector, or one element (scipy's scalar rule, even where the shapes match)
        return broadcast.elementwise(name, a, b, ia.sparse, ib.sparse, out_format, threads)
    family = sparse_family(a, b)
    if formulation is Formulation.DENSE_SUM:
        return _dense_result(_dense_sum(name, a, b, ia.sparse), family)
    if formulation is Formulation.MERGE_ROWS:
        return _wrap_sparse(_merge_rows(name, a, b, threads), family)
    ndim = len(sa)
    subs = "abcd"[:ndim]
    shared = rowwise_format(subs, list(subs))   # both operands in one storage order (CSR / CSF)

    def operand(x, label):
        return np.ascontiguousarray(x) if operand_family(x) == "numpy" else as_format(x, shared, label)

    oa, ob = operand(a, "a"), operand(b, "b")
    out = _kernel(name, fun, out_format, threads)(oa, ob)
    if isinstance(out, np.ndarray):
        return out
    if name == "multiply" and ndim == 2 and ia.sparse and ib.sparse:
        out = _with_unpartnered(out, oa.tensor, ob.tensor)
    if ndim == 2:
        out = _wrap_sparse(out, family)
        # scipy returns COO for a sparse-times-dense elementwise product
        return out.tocoo() if "numpy" in (fa, fb) and family.startswith("scipy") else out
    return out.to_pydata() if family == "pydata" else out


def _with_unpartnered(out, ta: SparseTensor, tb: SparseTensor):
    """scipy's ``A.multiply(B)`` evaluates over the union of the stored positions: a NaN or Inf stored on one
    side whose partner is missing gives ``x * 0``, a NaN, stored. The coiteration kernel (the value types the
    native merge lacks: complex) visits the intersection only; those positions are added to its result ``out``
    (a scipy CSR, which stores nothing there). O(nnz) to find the non-finite values; nothing else when there
    are none."""
    rows, cols, vals = [], [], []
    for mine, other, left in ((ta, tb, True), (tb, ta, False)):
        bad = ~np.isfinite(mine.values)
        if not bad.any():
            continue
        n = mine.shape[1]
        r = np.repeat(np.arange(mine.shape[0], dtype=np.int64), np.diff(mine.pos[1]))[bad]
        c = mine.crd[1][bad].astype(np.int64)
        other_keys = np.repeat(np.arange(other.shape[0], dtype=np.int64), np.diff(other.pos[1])) * n \
            + other.crd[1].astype(np.int64)
        alone = ~np.isin(r * n + c, other_keys)
        if not alone.any():
            continue
        zero = np.zeros((), dtype=other.values.dtype)
        v = mine.values[bad][alone]
        rows.append(r[alone])
        cols.append(c[alone])
        with np.errstate(invalid="ignore"):
            vals.append(np.multiply(v, zero) if left else np.multiply(zero, v))
    if not rows:
        return out
    import scipy.sparse as sps

    vals = np.concatenate(vals).astype(out.dtype, copy=False)
    extra = sps.csr_array((vals, (np.concatenate(rows), np.concatenate(cols))), shape=out.shape)
    merged = sps.csr_array(out + extra)
    merged.sum_duplicates()
    return merged


def _scipy_bool_pair(a, b) -> bool:
    """Two scipy sparse bool matrices of one shape."""
    sps = sys.modules.get("scipy.sparse")
    return sps is not None and sps.issparse(a) and sps.issparse(b) and a.dtype == np.bool_ \
        and b.dtype == np.bool_ and a.shape == b.shape


def _dense_sum(name: str, a, b, sparse_first: bool) -> np.ndarray:
    """scipy's sum or difference of a sparse and a dense matrix, bit for bit: ``A + D`` is a copy of D with A's
    stored values added (where A stores nothing, D's value stays, -0.0 included), ``A - D`` A's dense form
    (its entries added into zeros) minus D, ``D - A`` D minus that. O(m n), as the dense result; A validated
    first."""
    s, d = (a, b) if sparse_first else (b, a)
    S = as_format(s, CSR, "a" if sparse_first else "b").tensor
    d = np.asarray(d)
    rows = np.repeat(np.arange(S.shape[0], dtype=np.intp), np.diff(S.pos[1]))
    if name == "add":
        out = np.array(d, dtype=np.result_type(S.dtype, d.dtype), order="C")
        out[rows, S.crd[1]] += S.values          # canonical: each position once
        return out
    dense = np.zeros(S.shape, dtype=S.dtype)
    dense[rows, S.crd[1]] += S.values            # scipy's todense adds into zeros: a stored -0.0 reads +0.0
    return np.subtract(dense, d) if sparse_first else np.subtract(d, dense)


def _merge_rows(op: str, a, b, threads: int):
    """``op(a, b)`` for two sparse matrices, as a canonical scipy csr_array (scipy's csr_binop_csr).

    A is converted to canonical CSR and validated. When B is a scipy CSR with exactly A's positions (a
    structurally symmetric matrix and its transpose, a copy with new values), B's index arrays are only
    compared with A's, never followed, so they need no validation of their own."""
    from splyce.native import elementwise as native_elementwise

    A = as_format(a, CSR, "a").tensor
    raw_b = _raw_csr(b)
    if raw_b is None and b is a:     # one operand on both sides (a COO's ``A + A``): converted once
        raw_b = (A.values, A.crd[1], A.pos[1])
    if raw_b is not None:
        dtype = np.result_type(A.dtype, raw_b[0].dtype)
        parts_a = (A.values.astype(dtype, copy=False), A.crd[1], A.pos[1])
        same = native_elementwise.same_pattern(op, parts_a, (raw_b[0].astype(dtype, copy=False),) + raw_b[1:],
                                               dtype)
        if same is not None:
            return _canonical_csr(same, A.shape)
    B = as_format(b, CSR, "b").tensor
    dtype = np.result_type(A.dtype, B.dtype)
    pos_dtype = np.promote_types(A.pos[1].dtype, B.pos[1].dtype)
    crd_dtype = np.promote_types(A.crd[1].dtype, B.crd[1].dtype)
    parts = [(t.values.astype(dtype, copy=False), t.crd[1].astype(crd_dtype, copy=False),
              t.pos[1].astype(pos_dtype, copy=False)) for t in (A, B)]
    return _canonical_csr(native_elementwise.elementwise(op, parts[0], parts[1], dtype, threads), A.shape)


# -- the per-call fast path of two scipy sparse matrices (multiply / add / subtract) ---------------------------
# type(a) -> (result class, accepted types of b, CSC type of that family); filled on first use, empty (no fast
# path) when numpy's array layout is not confirmed (the native code reads buffers by object address)
_merge_types: dict = {}
_merge_native = None    # the native helper modules, imported on the first call (not per call: imports cost)


def _merge_classes(a):
    global _merge_native
    if _merge_native is None:
        sps = sys.modules.get("scipy.sparse")
        if sps is None:
            return None
        from splyce.native import array_objects, ir_text, elementwise as native_elementwise, transpose as native_transpose, validation as native_validation

        if array_objects.DATA_OFFSET is not None:
            _merge_types[sps.csr_array] = (sps.csr_array, (sps.csr_array, sps.csc_array), sps.csc_array)
            _merge_types[sps.csr_matrix] = (sps.csr_matrix, (sps.csr_matrix, sps.csc_matrix), sps.csc_matrix)
        _merge_native = (ir_text, native_elementwise, native_transpose, native_validation, array_objects.address)
    return _merge_types.get(type(a))


_VIEW_CLASSES: dict = {}     # a compressed layout's order -> scipy's class for it


def _scipy_view(t: SparseTensor):
    """A CSR / CSC ``SparseTensor`` of int32 indices as the scipy ``csr_array`` / ``csc_array`` over its
    buffers (no copy, no check: what the general path makes of it, and the class it returns for two tensors),
    or None."""
    layout = compressed_order(t.format)
    values, crd, pos = last_level_buffers(t) if layout is not None else (None, None, None)
    if layout is None or crd.dtype != np.int32 or pos.dtype != np.int32:
        return None
    if not _VIEW_CLASSES:                     # bound once: an import statement costs microseconds per call
        import scipy.sparse as sps

        _VIEW_CLASSES.update({(0, 1): sps.csr_array, (1, 0): sps.csc_array})
    return scipy_out.csr(_VIEW_CLASSES[layout], values, crd, pos, t.shape, True)


def _check_unchanged(*tensors) -> None:
    """Raise ``ValueError`` for a CSR / CSC tensor whose index arrays are no longer canonical: arrays it wraps
    were changed in place after it was made, and the general path, which trusts a checked tensor, would read
    out of bounds. O(nnz), on the fast merge's fallback only."""
    from splyce.native.validation import canonical_csr

    for t, name in tensors:
        values, crd, pos = last_level_buffers(t)
        extent = t.shape[1] if compressed_order(t.format) == (0, 1) else t.shape[0]
        if pos.dtype != crd.dtype:             # the native check reads one index width
            pos, crd = pos.astype(np.int64), crd.astype(np.int64)
        if not canonical_csr(np.ascontiguousarray(pos), np.ascontiguousarray(crd), extent):
            raise ValueError(f"{name}: malformed index arrays (not sorted and unique in range, or positions "
                             "that do not increase): the SparseTensor's buffers were modified after it was made")


def _fast_merge(op: str, a, b, threads: int):
    """``op(a, b)`` for the commonest call, or None (then the general path runs, which also words any error):
    ``a`` an exact scipy CSR, ``b`` a CSR or a CSC (``A.T``) of the same family, one value dtype, one index
    dtype, every buffer 1-D and contiguous. On one thread (or a small matrix) with a CSC ``b`` the whole call is
    one native pass (``native_elementwise.csr_with_csc``: both operands checked, a cursor per column of ``b``,
    no transpose); a sum whose ``b`` does not hold exactly ``a``'s positions, or a product where a NaN / Inf
    lacks a partner, then merges as below. On several threads the operands are checked first (split in row
    ranges; a non-canonical operand goes to the general path, which sums duplicates on a copy as before), then
    the same pass runs on row ranges (``csr_with_csc_ranges``). Otherwise (a CSR ``b``, or the pass failed) ``b``
    is checked canonical, a CSC one turned into CSR by a native counting transpose (``native_transpose``,
    split across threads like the checks and the merge), and the rows are merged natively. The result is built without scipy's constructor (``scipy_out``). On the corpus' small matrices
    the bench's ``gc.collect()`` before each call leaves the caches cold, so every Python or NumPy step here
    costs 5-20 us: the steps are few."""
    if type(a) is SparseTensor and type(b) is SparseTensor:
        views = _scipy_view(a), _scipy_view(b)     # checked when made: their buffers, as scipy arrays
        if None in views:
            if compressed_order(a.format) is not None and compressed_order(b.format) is not None:
                _check_unchanged((a, "a"), (b, "b"))   # int64 indices: the general path trusts them
            return None
        out = _fast_merge(op, *views, threads)
        if out is None:        # the native checks refused one, or another case: the general path trusts them
            _check_unchanged((a, "a"), (b, "b"))
        return out
    classes = _merge_types.get(type(a)) or _merge_classes(a)
    if classes is None or type(b) not in classes[1]:
        return None
    cls, _, csc = classes
    av, ac, ap = a.data, a.indices, a.indptr
    bv, bc, bp = b.data, b.indices, b.indptr
    if not (isinstance(av, _nd) and isinstance(ac, _nd) and isinstance(ap, _nd) and isinstance(bv, _nd)
            and isinstance(bc, _nd) and isinstance(bp, _nd)):   # native code reads them by id
        return None
    dtype, idx = av.dtype, ac.dtype
    if ((dtype, idx) not in _MERGE_DTYPES or bv.dtype != dtype or ap.dtype != idx or bc.dtype != idx
            or bp.dtype != idx or (op == "subtract" and dtype.kind == "b")):
        return None
    shape = a.shape
    if b.shape != shape:
        return None
    m, n = shape
    is_csc = type(b) is csc
    rows_b, cols_b = (n, m) if is_csc else (m, n)
    step, vstep = (idx.itemsize,), (dtype.itemsize,)
    if (len(ap) != m + 1 or len(bp) != rows_b + 1 or len(ac) != len(av) or len(bc) != len(bv)
            or ap.strides != step or ac.strides != step or bp.strides != step or bc.strides != step
            or av.strides != vstep or bv.strides != vstep or max(m, n) - 1 > _INT_MAX[idx]):
        return None
    ir_text, native_elementwise, native_transpose, native_validation, _address = _merge_native
    if threads is None:     # the default: one thread below the split size, else the cores idle now
        threads = 1 if len(ac) + len(bc) < 2 * ir_text.MIN_CHUNK else _threads(None)
    b_checked = False
    if is_csc and (threads <= 1 or len(ac) < 2 * ir_text.MIN_CHUNK):
        out = native_elementwise.csr_with_csc(op, (av, ac, ap), (bv, bc, bp), dtype, m, n,
                                              native_elementwise.prefetch_distance(ap, ac, idx.itemsize + dtype.itemsize))
        if type(out) is tuple:
            return scipy_out.csr(cls, *out, shape, True)
        if out == 2 or out == 3:
            return None
        # else A is canonical and B's positions differ (a sum) or a NaN / Inf lacks a partner (a product)
    elif not native_validation.canonical_csr_threaded(ap, ac, n, threads):
        return None
    elif is_csc:
        # the same pass on row ranges: a sum needs B's positions checked (each entry is matched against A's), a
        # product all of B; neither when B's index arrays are A's memory (A.T of a square A)
        own = b_checked = _owns(ac, ap, bc, bp, _address)
        if op == "multiply" and not own:
            if not native_validation.canonical_csr_threaded(bp, bc, cols_b, threads):
                return None
            b_checked = True
        elif not own and not native_validation.positions_ok(bp, len(bc)):
            return None
        out = native_elementwise.csr_with_csc_ranges(
            op, (av, ac, ap), (bv, bc, bp), dtype, m, n, threads,
            native_elementwise.prefetch_distance(ap, ac, idx.itemsize + dtype.itemsize))
        if type(out) is tuple:
            return scipy_out.csr(cls, *out, shape, True)
    if not (b_checked or is_csc and _owns(ac, ap, bc, bp, _address)) and \
            not native_validation.canonical_csr_threaded(bp, bc, cols_b, threads):
        return None
    if is_csc:
        bv, bc, bp = native_transpose.transpose(bv, bc, bp, rows_b, cols_b, threads)
    vals, cols, indptr = native_elementwise.elementwise(op, (av, ac, ap), (bv, bc, bp), dtype, threads)
    return scipy_out.csr(cls, vals, cols, indptr, shape, True)


def _owns(ac, ap, bc, bp, address) -> bool:
    """Whether a CSC B's index arrays are a CSR A's memory (``A.T`` of a square A: scipy hands over new views of
    them), so that A's check covers them."""
    return len(bc) == len(ac) and len(bp) == len(ap) and address(bc) == address(ac) and address(bp) == address(ap)


# (value dtype, index dtype) pairs of the fast path: native byte order (a swapped dtype compares unequal)
# (bool: a product or sum, AND / OR; a bool difference goes to the general path, which refuses it as NumPy does)
_MERGE_DTYPES = {(np.dtype(v), np.dtype(i)) for v in (np.float64, np.float32, np.int64, np.int32, np.bool_)
                 for i in (np.int32, np.int64)}


def multiply(a, b, *, out_format=None, threads=None):
    """scipy's ``a.multiply(b)``: a sparse result (CSR for 2-D) unless both operands are dense."""
    return _pydata_class(_elementwise("multiply", _mul, np.multiply, a, b, out_format, threads), a, b)


def add(a, b, *, out_format=None, threads=None):
    return _pydata_class(_elementwise("add", _add, np.add, a, b, out_format, threads), a, b)


def subtract(a, b, *, out_format=None, threads=None):
    return _pydata_class(_elementwise("subtract", _sub, np.subtract, a, b, out_format, threads), a, b)
