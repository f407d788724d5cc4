"""``matmul``: SpMV / SpMM on the native row kernels, SpMSpV, Gustavson SpGEMM into a sparse result, and
dense or jitted formulations otherwise; the per-call SpMV fast path for scipy CSR operands.
"""

from __future__ import annotations


import numpy as np

from splyce.native.spmv import spmv_variant
from splyce.native.spmv import SPMM_FIXED as _SPMM_FIXED
from splyce.dropin import narrow_dtypes, scipy_out
from splyce.planner import nonfinite as _nonfinite
from splyce.tensors.formats import CSC, CSR, SPARSE_VECTOR, compressed_order
from splyce.tensors.validation import check_dtype
from splyce.tensors.tensor import SparseTensor, asarray, last_level_buffers

from splyce.dropin.stored_formats import scipy_to_csr, fast_times_dense as _stored_fast, pydata_class as _stored_pydata_class
from splyce.planner.kernel_choice import Formulation, choose_matmul_formulation, wants_sparse_result
from splyce.thread_count import call_threads
from splyce.dropin.kernels import DENSE_RESULT_BYTES, SERIAL_MAX_WORK, _kernel, _mm, _several_threads, _threads
from splyce.dropin.operands import OperandInfo, _INT_MAX, as_format, _converter, _coo_array_type, _csc_first, _dense_out, operand_family, _keeps_left_format, _left_format, _raise_bad_product_operand, _raw_csr, scipy_csr_types, sparse_family, _to_dense_vector, _vector_out, _wrap_sparse


def matmul(a, b, *, out_format=None, threads=None):
    """scipy's / NumPy's ``a @ b``. ``threads``: worker threads (1 as scipy; None: all cores); results are
    bit-identical for any count."""
    if out_format is None:
        if type(b) is np.ndarray:
            out = _fast_spmv(a, b, threads)
            if out is None and getattr(a, "format", None) == "lil" and type(a).__module__.startswith("scipy."):
                # scipy's LIL @ dense is its own tocsr() per call then CSR's product: the same conversion here,
                # then the CSR fast path (or the general one, on the CSR: one conversion either way)
                a = scipy_to_csr(a, "a")         # (its rows and values checked first)
                out = _fast_spmv(a, b, threads)
        else:
            out = _fast_spmspv(a, b, threads)
        if out is not None:
            return out
    if narrow_dtypes.involved(a, b):
        return narrow_dtypes.call(matmul, (a, b), dict(out_format=out_format, threads=threads),
                                  prune=operand_family(a) != "numpy" and operand_family(b) != "numpy")
    if out_format is None and _csc_first(a, b) and np.shape(b)[1] != 1 and np.shape(a)[-1] == np.shape(b)[0]:
        # a CSC product is scipy's CSC: (B.T @ A.T).T, A.T being A's buffers as a CSR, and the CSR result
        # transposed that CSC with no copy (scipy's csc_matmat computes the same product of transposes)
        return _matmul(b.T, a.T, out_format, _threads(threads)).T
    if out_format is None and _csc_first(a, b) and np.shape(a)[-1] == np.shape(b)[0]:
        # a right operand of one column: the product by the general path, then scipy's class, a CSC
        out = _matmul(a, b, out_format, _threads(threads))
        return out.tocsc() if getattr(out, "format", None) == "csr" else out
    if out_format is None and getattr(a, "format", None) in ("bsr", "dia") and _keeps_left_format("matmul", a, b) \
            and np.shape(a)[-1] == np.shape(b)[0]:
        # scipy: a BSR times a sparse matrix is a BSR of the left's block rows by the right's block columns (1
        # for any other format)
        if a.format == "dia":
            from splyce.dropin import dia_ops

            out = dia_ops.matmul(a, b)          # DIA @ DIA, diagonal pairs (None: another dtype)
            if out is not None:
                return out
        elif getattr(b, "format", None) == "bsr":
            from splyce.dropin import bsr_ops

            out = bsr_ops.matmul(a, b)          # BSR @ BSR on the blocks (None: another dtype or block sizes)
            if out is not None:
                return out
        block = b.blocksize[1] if getattr(b, "format", None) == "bsr" else 1
        return _left_format(a, _matmul(scipy_to_csr(a, "a"), b, out_format, _threads(threads)), block)
    out = _stored_pydata_class(_matmul(a, b, out_format, _threads(threads)), a, b, matmul=True)
    if (type(a) is np.matrix or type(b) is np.matrix) and type(out) is np.ndarray \
            and sparse_family(a, b) == "scipy-matrix":
        return np.asmatrix(out)        # scipy: a sparse matrix times a numpy.matrix is a numpy.matrix
    return out


def matmul_in_scipy_order(a, b, threads=None):
    """``a @ b`` for two scipy CSR, or two CSC, 2-D operands of one value dtype (what ``patch_scipy()`` serves),
    with the buffers scipy's own product writes: the operands' buffers read as they are, in stored order
    (unsorted columns and duplicates summed as scipy's csr_matmat sums them), each result row's (a CSC's
    column's) entries in scipy's order (the reverse of first appearance, native spgemm's ``scipy_order``), zero
    sums dropped, not sorted; a CSC product computed as scipy computes it, ``(B.T @ A.T).T`` on the same
    buffers. The result is a scipy CSR / CSC of the operands' family. ``threads``: as ``matmul``'s (None: the
    process default; a product too small to gain on one thread), the same buffers for any count. ValueError for buffers a
    product cannot read (a decreasing ``indptr``, a column out of range), naming the operand."""
    from splyce.native import spgemm as native_spgemm

    csc = _csc_first(a, b)
    left, right = (b.T, a.T) if csc else (a, b)
    parts = []
    for x, name in ((left, "b" if csc else "a"), (right, "a" if csc else "b")):
        raw = _raw_csr(x)
        if raw is None:
            raise ValueError(f"matmul_in_scipy_order: {name} must be a scipy CSR or CSC of a supported value dtype "
                             f"with int32 / int64 index arrays of consistent lengths, got {type(x).__name__}")
        data, indices, indptr = raw
        if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != len(indices) or (
                len(indptr) > 1 and bool((indptr[1:] < indptr[:-1]).any())):
            raise ValueError(f"matmul_in_scipy_order: {name}'s indptr must start at 0, never decrease and end at "
                             f"its {len(indices)} entries")
        minor = x.shape[1]
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= minor):
            raise ValueError(f"matmul_in_scipy_order: {name} has a column index outside [0, {minor})")
        parts.append(raw)
    if left.shape[1] != right.shape[0]:
        raise ValueError(f"matmul_in_scipy_order: shapes {a.shape} and {b.shape} are not aligned")
    dtype = parts[0][0].dtype
    if parts[1][0].dtype != dtype:
        raise ValueError(f"matmul_in_scipy_order: one value dtype expected, got {dtype} and {parts[1][0].dtype} "
                         "(cast one first, as scipy does: to scipy.sparse._sputils.upcast of the two)")
    product = native_spgemm.spgemm(parts[0], parts[1], right.shape[1], dtype, _threads(threads), sort=False,
                                   scipy_order=True)
    global last_spgemm_work, last_spgemm_kernel
    last_spgemm_work, last_spgemm_kernel = product.work, product.kernel
    import scipy.sparse as sps

    out = _wrap_sparse(scipy_out.csr(sps.csr_array, product.data, product.indices, product.indptr,
                                     (left.shape[0], right.shape[1]), None), sparse_family(a, b))
    return out.T if csc else out


def _matmul(a, b, out_format, threads: int):
    ia, ib = OperandInfo.of(a), OperandInfo.of(b)
    formulation = choose_matmul_formulation(ia, ib, out_format)
    if formulation is Formulation.NUMPY:
        return np.matmul(a, b)
    sa, sb = ia.shape, ib.shape
    if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2):
        raise ValueError(f"matmul: operands must be 1-D or 2-D, got shapes {sa} and {sb}")
    if sa[-1] != sb[0]:
        raise ValueError(f"matmul: shapes {sa} and {sb} are not aligned ({sa[-1]} != {sb[0]})")
    family = sparse_family(a, b)
    want_sparse = wants_sparse_result(ia, ib, out_format)

    def kernel(*args):   # the jitted kernel, made on first need (a Gustavson product never imports the jit)
        return _kernel("matmul", _mm, threads=threads)(*args)

    if formulation is Formulation.STORED_TIMES_DENSE:
        from splyce.dropin import stored_formats

        out = stored_formats.times_dense(a, b, family, threads)      # None: a dtype or buffers the kernels lack
        return _dense_out(_csr_times_dense(a, b, threads) if out is None else out, family, want_sparse)
    if formulation is Formulation.SPARSE_TIMES_DENSE:
        if len(sa) == 2:
            return _dense_out(_csr_times_dense(a, b, threads), family, want_sparse)
        A = as_format(a, SPARSE_VECTOR, "a")     # a sparse vector dotted with dense columns
        return _dense_out(kernel(A, np.ascontiguousarray(b)), family, want_sparse)
    if formulation is Formulation.DENSE_TIMES_SPARSE:
        B = as_format(b, CSR if len(sb) == 2 else SPARSE_VECTOR, "b")
        return _dense_out(kernel(np.ascontiguousarray(a), B), family, want_sparse)
    if formulation is Formulation.SCATTER_VECTOR:
        if len(sa) == 1:
            dense_a = _to_dense_vector(a)
            out = matmul(dense_a, b, out_format="dense", threads=threads)
            if _nonfinite.maybe_nan(np.asarray(out)):   # a NaN / Inf of b times a missing entry of a: scipy
                stored = _nonfinite.stored_mask(asarray(a).coords()[0], sa[0])         # skips the pair
                if len(sb) == 2:
                    B = as_format(b, CSC, "b").tensor
                    # B's columns (CSC, rows ascending) as the rows summed again: scipy's order
                    out = _nonfinite.resum_rows(out, B.pos[1], B.crd[1], B.values, stored, dense_a)
                else:
                    out = _nonfinite.resum_dot(out, stored, dense_a, asarray(b).coords()[0], _to_dense_vector(b))
            return _vector_out(out, family) if len(sb) == 2 else out     # sparse, as scipy / pydata return it
        # matrix times a sparse vector: scatter the vector once (O(n)), then a CSR row-times-vector kernel
        A = as_format(a, CSR, "a")
        dense_b = _to_dense_vector(b)
        out = kernel(A, dense_b)
        if _nonfinite.maybe_nan(out):       # a NaN / Inf of a times a missing entry of b: scipy skips it
            stored = _nonfinite.stored_mask(asarray(b).coords()[0], sb[0])
            t = A.tensor
            out = _nonfinite.resum_rows(out, t.pos[1], t.crd[1], t.values, stored, dense_b)
        if len(sb) == 2:
            return _dense_out(out.reshape(-1, 1), family, want_sparse)
        return _vector_out(out, family)
    convert = _converter(threads)    # A @ A: the operand converted and checked once (split across threads)
    A = convert(a, CSR, "a")
    if formulation is Formulation.SPARSIFIER and not ib.sparse:
        return _dense_out(kernel(A, np.ascontiguousarray(b)), family, want_sparse)
    B = convert(b, CSR, "b")
    if formulation is Formulation.GUSTAVSON_SPARSE:
        return _spgemm(A.tensor, B.tensor, family, threads)
    if formulation is Formulation.SPARSIFIER and want_sparse:
        return _wrap_sparse(_kernel("matmul", _mm, "sparse", threads)(A, B), family)
    m, n = sa[0], sb[1]
    dtype = np.result_type(A.tensor.dtype, B.tensor.dtype)
    if m * n * dtype.itemsize > DENSE_RESULT_BYTES:
        raise MemoryError(f"matmul: a dense {m}x{n} result needs {m * n * dtype.itemsize / 2**30:.1f} GiB; "
                          "request a sparse result (out_format='sparse')")
    return kernel(A, B)


def _csr_times_dense(a, b, threads: int) -> np.ndarray:
    """SpMV / SpMM: a sparse matrix times a dense vector or matrix (native, rows summed in stored order from
    +0.0 as scipy does: the same values bit for bit). A scipy CSR is read as it is and checked only for what
    a product needs (positions, column range; unsorted or repeated columns are fine), by the kernel itself as
    it reads them."""
    from splyce.native import spmv as native_spmv

    b = np.asarray(b)
    check_dtype(b.dtype, "b")
    if b.ndim == 1:
        out = _csc_times_vector(a, b)
        if out is not None:
            return out
    raw = _raw_csr(a)
    checked = raw is None
    if raw is not None:
        data, indices, indptr = raw
        # the kernels check positions and coordinates themselves as they read them (each thread its rows)
        if not (len(indptr) and indptr[0] == 0 and indptr[-1] == len(indices)):
            _raise_bad_product_operand(a)
    else:
        A = as_format(a, CSR, "a").tensor
        data, indices, indptr = A.values, A.crd[1], A.pos[1]
    dtype = np.result_type(data.dtype, b.dtype)
    x = np.ascontiguousarray(b, dtype=dtype.newbyteorder("="))
    out = native_spmv.csr_times_dense(indptr, indices, data.astype(dtype, copy=False), x, threads, checked)
    if out is None:
        _raise_bad_product_operand(a)
    return out


def _csc_times_vector(a, b: np.ndarray):
    """``a @ b`` for a scipy CSC ``a`` (``A.T`` of a CSR) or a CSC ``SparseTensor`` (``t.T`` of a CSR one) and
    a vector, on its buffers as they are, in scipy's order (native/spmv_scatter.py: each row's sum in column
    order from +0.0, the bits of the CSR product), or None for another operand (then it is converted to CSR:
    road-700's ``t.T @ z`` took 7.0 ms that way, 3.8 ms here, Zen 3)."""
    if type(a) is SparseTensor:       # checked when made; the kernel checks what it reads as it goes
        return scatter_tensor(a, b, a.shape[0]) if compressed_order(a.format) == (1, 0) else None
    raw = _raw_csr(a, "csc")
    return None if raw is None else _scatter(a, *raw, b, a.shape[0])


def scatter_tensor(a: SparseTensor, x: np.ndarray, m: int):
    """The vector of ``m`` entries that ``a``'s last level gives read as the columns of a matrix times ``x``:
    a CSC tensor's product with ``x``, or a CSR tensor's transpose's (``a.T @ x`` inside ``@splyce.jit``). None
    for a value dtype the kernel lacks; ValueError where the buffers are broken (they are checked as read)."""
    return _scatter(a, *last_level_buffers(a), x, m)


def _scatter(a, data, indices, indptr, b, m: int):
    from splyce.native import spmv_scatter

    dtype = np.result_type(data.dtype, b.dtype)
    if not spmv_scatter.supported(dtype):
        return None
    x = np.ascontiguousarray(b, dtype=dtype.newbyteorder("="))
    out = spmv_scatter.csc_times_vector(indptr, indices, data.astype(dtype, copy=False), x, m)
    if out is None:
        if type(a) is SparseTensor:       # checked when made: its buffers were changed in place since
            raise ValueError("a: malformed compressed index arrays (the SparseTensor's buffers were modified "
                             "after it was made)")
        _raise_bad_product_operand(a)
    return out


_spmv_entries: dict = {}        # (value dtype, index dtype, variant) -> native product on array objects, or None
_spmv_last: tuple = (None, None, None, None)   # the last (value dtype, index dtype, variant, entry) used


# the last (value dtype, index dtype, value strides, index strides, bytes per entry, largest index) seen:
# computing them per call cost ~1 us of a ~5 us Python side (10 x 10 matrix, loaded machine)
_spmv_layout: tuple = (None, None, None, None, 0, 0)


# ``threads=None`` on the fast path: one thread unless the product is large enough to split and cores are idle
_DEFAULT = "default"


def _fast_spmv(a, x, threads=1):
    """``a @ x`` for the commonest calls, or None (then the general path runs): ``a`` an exact scipy
    ``csr_array`` / ``csr_matrix``, ``x`` a NumPy vector (SpMV) or a matrix of up to ``SPMM_FIXED`` columns
    (SpMM) of ``a``'s value dtype, every buffer C-contiguous; one thread, or more asked for a product of at
    most ``SERIAL_MAX_WORK`` (then one thread is faster). A small matrix's product takes tens of microseconds,
    so this path reads a handful of attributes, trusts none of scipy's flags, and leaves every check on the
    index arrays to native code: the two ends of ``indptr``, ``indptr`` monotone and every column in range
    (what a product needs; order and duplicates do not matter), as the kernel reads them. A malformed operand
    raises the general path's error, naming the defect."""
    several = type(threads) is not int or threads != 1     # the common one-thread call decided inline
    # the default (None) is several threads here: a product too small to split runs on one all the same, and a
    # larger one runs here too when the cores idle now give it one thread (thread_count.call_threads: another
    # process holds the other core), else it goes to the general path, which splits it
    if threads is None:
        several = _DEFAULT
    elif several and _several_threads(threads) is None:
        return None                             # not a thread count: the general path says so
    ndim = x.ndim
    if type(a) is SparseTensor:                 # checked when made: its CSR buffers go to the kernel as they are
        if not 1 <= ndim <= 2 or compressed_order(a.format) != (0, 1):
            return None
        return _spmv_buffers(a, *last_level_buffers(a), x, several)
    if type(a) not in scipy_csr_types() or not 1 <= ndim <= 2:
        return _stored_fast(a, x, threads)     # a scipy COO / DIA / BSR on its own buffers (else None)
    data, indices, indptr = a.data, a.indices, a.indptr
    # the kernel reads each array's data pointer from the object itself: ndarrays (or subclasses) only
    if not (isinstance(data, np.ndarray) and isinstance(indices, np.ndarray) and isinstance(indptr, np.ndarray)):
        return None
    return _spmv_buffers(a, data, indices, indptr, x, several)


def spmv_tensor(a: SparseTensor, x: np.ndarray, threads: int = 1):
    """``a @ x`` for a validated CSR SparseTensor ``a`` and a NumPy ``x`` (1-D, or 2-D of up to ``SPMM_FIXED``
    columns) of its value dtype, on the drop-in's fast-path kernel (the same kernel, the same bits, as
    ``_fast_spmv``), or None when that path does not apply. The jit's library route calls it: the tensor
    was checked when it was made, so nothing is re-checked here but what the kernel reads as it goes."""
    several = type(threads) is not int or threads != 1
    ndim = x.ndim
    if type(x) is not np.ndarray or not 1 <= ndim <= 2 or (several and threads is not None
                                                           and _several_threads(threads) is None):
        return None
    return _spmv_buffers(a, *last_level_buffers(a), x, several)


def spmv_direct(fallback, several: bool = False):
    """The jit's whole cached SpMV / SpMM call on one thread (``several``: when the work is at most
    ``SERIAL_MAX_WORK``, else ``fallback`` splits it): ``spmv_tensor(a, x)`` for ``values == [a, x]`` as
    the cached call hands them over (a checked CSR SparseTensor, a C-contiguous ndarray: its signature said
    so), else ``fallback(values)``. No layer between the jit's dispatch and the drop-in's kernel: each Python
    frame or property read is ~0.1-0.2 us of a 20-50 us call on a Zen 1, where the drop-in's own call is the
    bar (the tensor's buffers read in one call: they never change once made)."""
    def direct(values: list):
        a, x = values
        out = _spmv_buffers(a, *last_level_buffers(a), x, several)    # several: None past SERIAL_MAX_WORK
        return fallback(values) if out is None else out
    return direct


def _spmv_buffers(a, data, indices, indptr, x, several: bool):
    """``_fast_spmv`` on ``a``'s buffers (``a`` for its shape and an error's wording)."""
    global _spmv_last, _spmv_layout
    ndim = x.ndim
    nnz = len(data)
    if several and nnz * (x.shape[1] if ndim == 2 else 4) > SERIAL_MAX_WORK \
            and (several is not _DEFAULT or call_threads() > 1):
        return None
    dtype, idx = data.dtype, indices.dtype
    # identity first: NumPy's built-in dtypes are singletons, and hashing or comparing dtypes costs ~0.3 us
    if (x.dtype is not dtype and x.dtype != dtype) or (indptr.dtype is not idx and indptr.dtype != idx):
        return None
    layout = _spmv_layout                       # the strides and sizes of the last dtypes, made once
    if dtype is not layout[0] or idx is not layout[1]:
        if idx not in _INT_MAX:
            return None
        layout = _spmv_layout = (dtype, idx, (dtype.itemsize,), (idx.itemsize,), dtype.itemsize + idx.itemsize,
                                 _INT_MAX[idx])
    rows1 = len(indptr)
    if ndim == 1:
        # the one SpMV rule (native/spmv.py): flat, grouped or one row at a time (a malformed indptr's length
        # is refused below, whatever the choice)
        variant = spmv_variant(nnz, rows1 - 1, layout[4])
        x_strides = layout[2]
    else:
        variant = x.shape[1]                    # SpMM: one kernel per column count, up to SPMM_FIXED
        x_strides = (variant * dtype.itemsize, dtype.itemsize)
        if not 0 < variant <= _SPMM_FIXED:
            return None
    last_dtype, last_idx, last_variant, entry = _spmv_last
    if dtype is not last_dtype or idx is not last_idx or variant != last_variant:
        key = (dtype, idx, variant)
        entry = _spmv_entries.get(key, False)
        if entry is False:
            entry = _spmv_entries[key] = _spmv_entry(dtype, idx, variant)
        _spmv_last = (dtype, idx, variant, entry)
    if entry is None:
        return None
    m, n = a.shape
    idx_strides = layout[3]
    # strides == (itemsize,): 1-D and contiguous (anything else: the general path copies or refuses)
    if (rows1 != m + 1 or len(indices) != nnz or len(x) != n or n - 1 > layout[5]
            or indptr.strides != idx_strides or indices.strides != idx_strides
            or data.strides != layout[2] or x.strides != x_strides):
        return None
    y = np.empty(m if ndim == 1 else (m, variant), dtype=dtype)
    if entry(id(indptr), id(indices), id(data), id(x), id(y), n, m, nnz):
        if type(a) is SparseTensor and not a.validated:   # a scipy operand left to this check (deferred_checks)
            raise ValueError("a: malformed CSR index arrays (indptr / indices out of range); check them with "
                             "A.check_format()")
        if type(a) is SparseTensor:       # checked when made: its buffers were changed in place since
            raise ValueError("a: malformed CSR index arrays (the SparseTensor's buffers were modified after it "
                             "was made)")
        _raise_bad_product_operand(a)
    return y


def spmspv_tensor(a: SparseTensor, x: SparseTensor, threads: int = 1):
    """``a @ x`` for a validated CSR SparseTensor ``a`` and a validated sparse vector ``x`` (one compressed
    level of unique coordinates) of ``a``'s value dtype, as a dense NumPy vector, or None when the fast path
    does not apply: ``x`` scattered dense (as ``x.to_numpy()`` does), ``spmv_tensor``, and the pairs of a NaN /
    Inf of ``a`` and a missing entry of ``x`` skipped, as the general path does (``_matmul``'s SCATTER_VECTOR),
    without its conversions and result wrapping. The jit's library route calls it."""
    level = x.format.levels[0]
    if not level.unique or x.values.dtype != a.values.dtype:
        return None
    coords = x.crd[0]
    n = x.shape[0]
    dense = np.zeros(n, dtype=x.values.dtype)
    dense[coords] = x.values
    y = spmv_tensor(a, dense, threads)
    if y is None:
        return None
    if _nonfinite.maybe_nan(y):        # a NaN / Inf of a times a missing entry of x: the pair is skipped
        y = _nonfinite.resum_rows(y, a.pos[1], a.crd[1], a.values, _nonfinite.stored_mask(coords, n), dense)
    return y


def _fast_spmspv(a, x, threads=1):
    """``a @ x`` for a scipy CSR ``a`` and a 1-D scipy ``coo_array`` ``x`` of ``a``'s value dtype (a BFS
    frontier), or None (then the general path runs): ``x`` scattered into a dense vector (O(n), duplicates
    summed in stored order, as ``x.toarray()`` does), then ``_fast_spmv`` (rows summed in stored order from
    +0.0, the general path's kernel's order), the result built as ``coo_array(y)`` builds it
    (``scipy_out.coo_vector``). An SpMV reads all of ``a`` (O(nnz)), but on the matrices where this path
    matters its ~20-50 us are less than a general path's fixed cost. Coordinates outside ``[0, n)`` raise.
    ``threads``: as SpMV's (a product too small to split on one thread, a larger one split by rows); the
    general path's compiled kernel cost ~0.7 ms more per call on small matrices (fem2d-3k: 0.87 vs 0.21 ms)."""
    several = _several_threads(threads)
    if several is None:
        return None
    if type(a) not in scipy_csr_types() or type(x) is not _coo_array_type() or len(x.shape) != 1:
        return None
    coords, values = x.coords[0], x.data
    n = x.shape[0]
    if (not isinstance(coords, np.ndarray) or not isinstance(values, np.ndarray) or coords.ndim != 1
            or coords.dtype.kind not in "iu" or values.shape != coords.shape or a.shape[1] != n):
        return None
    dtype = a.data.dtype
    if values.dtype is not dtype and values.dtype != dtype:
        return None
    if len(coords) and (coords.min() < 0 or coords.max() >= n):
        k = int(np.argmax((coords < 0) | (coords >= n)))
        raise ValueError(f"b: coordinate {coords[k]} out of range [0, {n}) at position {k}")
    dense = np.zeros(n, dtype=dtype)
    np.add.at(dense, coords, values)          # in stored order, from +0.0: what x.toarray() computes
    y = _fast_spmv(a, dense, threads)
    if y is None:
        if not several:
            return None
        y = _csr_times_dense(a, dense, _threads(threads))   # too much work for one thread: split, same bits
    if _nonfinite.maybe_nan(y):        # a NaN / Inf of a times a missing entry of x: scipy skips the pair
        y = _nonfinite.resum_rows(y, a.indptr, a.indices, a.data, _nonfinite.stored_mask(coords, n), dense)
    return scipy_out.coo_vector(_coo_array_type(), y)


def _spmv_entry(dtype: np.dtype, idx: np.dtype, variant):
    """The compiled fast-path SpMV (``variant`` "flat", "grouped" or "rows") or SpMM (``variant`` the column count)
    for these dtypes, or None when it does not apply (non-native byte order, an unsupported dtype, or numpy's
    array layout not confirmed by ``array_objects``)."""
    from splyce.native import array_objects, spmv as native_spmv

    if (array_objects.DATA_OFFSET is None or not native_spmv.supported(dtype) or not dtype.isnative
            or idx not in _INT_MAX or not idx.isnative):
        return None
    bits = idx.itemsize * 8
    with native_spmv._lock:
        if type(variant) is str:
            return native_spmv._spmv_objects(dtype, bits, bits, variant)
        return native_spmv._spmm_objects(dtype, bits, bits, variant)


def _spgemm(A: SparseTensor, B: SparseTensor, family: str, threads: int):
    """CSR x CSR -> CSR in O(flops) (native sparse accumulator); values in the operands' common dtype; each row's
    columns in any order, the kernel expected faster (scipy's order: :func:`matmul_in_scipy_order`)."""
    from splyce.native import spgemm as native_spgemm

    dtype = np.result_type(A.dtype, B.dtype)
    parts = [(t.values.astype(dtype, copy=False), t.crd[1], t.pos[1]) for t in (A, B)]
    # rows in any order: the kernel per call, the jit's rule (native spgemm.unordered_kernel)
    product = native_spgemm.spgemm(parts[0], parts[1], B.shape[1], dtype, threads, sort=None)
    global last_spgemm_work, last_spgemm_kernel
    last_spgemm_work, last_spgemm_kernel = product.work, product.kernel
    import scipy.sparse as sps

    # columns in order of first appearance (the reverse of scipy's), or sorted by the flags kernel
    out = scipy_out.csr(sps.csr_array, product.data, product.indices, product.indptr, (A.shape[0], B.shape[1]),
                        product.sorted)
    return _wrap_sparse(out, family)


# Work of the last sparse-result product (rows + multiply-adds): tests check it scales with flops; and its
# kernel (native spgemm.Product.kernel: "sparse", "dense" or "flags").
last_spgemm_work = 0
last_spgemm_kernel = ""
