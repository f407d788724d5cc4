"""Drop-ins for scipy.sparse / NumPy products on concrete operands.

Each call picks the formats and the formulation that is fast for the operands at hand, converts the
operands (no copy when they already are in that format), runs a kernel compiled once per signature and
cached here, and returns what scipy or NumPy returns for the same call: type family (scipy sparse array or
matrix, pydata-sparse, NumPy), shape and dtype.
"""

from __future__ import annotations

import enum
import functools
from collections import Counter
import os
import sys
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from splyce.native.spmv import FLAT_MAX_ROW as _FLAT_MAX_ROW, FLAT_MIN_BYTES as _FLAT_MIN_BYTES
from splyce.native.spmv import GROUPED_MAX_BYTES as _GROUPED_MAX_BYTES, GROUPED_MIN_ROW as _GROUPED_MIN_ROW
from splyce.native.spmv import SPMM_FIXED as _SPMM_FIXED
from splyce.native import masked as _native_masked
from splyce.native.array_objects import DATA_OFFSET as _ARRAY_OFFSET   # None: no array read natively by id
from splyce.planner import broadcast, diagonals, narrow_dtypes, nonfinite as _nonfinite, scipy_out
from splyce.tensors.formats import CSC, CSR, SPARSE_VECTOR, Format
from splyce.tensors.validation import SUPPORTED_DTYPES, check_buffers, check_dtype
from splyce.runtime.arguments import Checked
from splyce.tensors.tensor import SparseTensor, asarray

# A dense result of sparse @ sparse (asked for with out_format="dense") larger than this raises MemoryError.
DENSE_RESULT_BYTES = 4 << 30

_kernels: dict = {}
_lock = threading.Lock()


def _kernel(name: str, fun, out_format=None, threads: int = 1, reassociate: bool = False):
    """A jitted function per (name, out_format, threads, reassociate), shared by all calls (the jit caches
    per signature). ``reassociate``: compile with ``fast_math=True`` (sums may be reordered)."""
    key = (name, out_format, threads, reassociate)
    kernel = _kernels.get(key)
    if kernel is None:
        from splyce.runtime.dispatcher import Jitted

        with _lock:
            kernel = _kernels.setdefault(key, Jitted(fun, out_format=out_format, threads=threads,
                                                     fast_math=reassociate))
    return kernel


_FAMILIES: dict = {}   # type -> family, for types whose family follows from the type alone (looked up per call)


def _family(x) -> str:
    """Where an operand comes from: 'numpy', 'scipy-array', 'scipy-matrix', 'pydata' or 'splyce'."""
    family = _FAMILIES.get(type(x))
    if family is None:
        family = _family_of(x)
        if family in ("splyce", "scipy-array", "scipy-matrix") or type(x) is np.ndarray:
            _FAMILIES[type(x)] = family
    return family


def _family_of(x) -> str:
    if isinstance(x, SparseTensor):
        return "splyce"
    sps = sys.modules.get("scipy.sparse")
    if sps is not None and sps.issparse(x):
        return "scipy-array" if isinstance(x, sps.sparray) else "scipy-matrix"
    if type(x).__module__.split(".")[0] == "sparse" and (hasattr(x, "coords") or hasattr(x, "compressed_axes")):
        return "pydata"
    return "numpy"


def _sparse_family(*xs) -> str:
    families = [f for f in map(_family, xs) if f != "numpy"]
    if "scipy-array" in families:
        return "scipy-array"
    return families[0] if families else "numpy"


def _as_format(x, fmt: Format, name: str, threads: int = 1) -> Checked:
    """``x`` as a SparseTensor in ``fmt``, keeping its index width (scipy's int32 stays int32). ``asarray``
    validates it, so it is marked as checked for the kernel call."""
    wrapped = _csr_as_it_is(x, fmt, threads)
    if wrapped is not None:
        return wrapped
    fam = _family(x)
    if fam.startswith("scipy") and fmt.ndim == 2 and getattr(x, "format", None) in ("csr", "csc"):
        # scipy's own CSR <-> CSC conversion is a linear-time counting transpose; ours sorts
        wanted_kind = "csr" if fmt.order == (0, 1) else "csc"
        if x.format != wanted_kind:
            # scipy's conversion trusts the index arrays (an out-of-range one is written out of bounds):
            # validate (or canonicalize) first, then convert the checked buffers
            x = asarray(x, name=name).to_scipy()
            x = x.tocsr() if wanted_kind == "csr" else x.tocsc()
    if fam == "pydata":   # one conversion, straight into the wanted format (int64 coordinates: widths 64)
        return Checked(asarray(x, format=fmt.with_widths(64, 64), name=name))
    t = asarray(x, name=name)
    wanted = fmt.with_widths(t.format.pos_width, t.format.crd_width) if fmt.ndim == t.ndim else fmt
    return Checked(t if t.format == wanted else asarray(t, format=wanted, name=name))


def _converter(threads: int = 1):
    """``_as_format`` for the operands of one call, each distinct (operand, format) converted and checked once:
    ``einsum("ij,jk,ik->", L, L, L)`` passes one matrix three times."""
    done: dict = {}

    def convert(x, fmt: Format, name: str) -> Checked:
        key = (id(x), fmt)
        if key not in done:
            done[key] = (x, _as_format(x, fmt, name, threads))     # x kept: its id stays unique during the call
        return done[key][1]
    return convert


def _csr_as_it_is(x, fmt: Format, threads: int = 1) -> Checked | None:
    """What ``asarray`` makes of an exact scipy CSR asked for in CSR (up to index widths), by a shorter road:
    its own buffers wrapped as they are after one native canonical-CSR scan; None (the general road) for
    anything else, including a CSR that fails the scan (then ``asarray`` words the error or canonicalizes)."""
    from splyce.native import array_objects, validation as native_validation

    if not _csr_types:
        _scipy_csr_types()
    if type(x) not in _csr_types or fmt.order != _CSR_ORDER or fmt.levels != CSR.levels:
        return None
    data, indices, indptr = x.data, x.indices, x.indptr
    if not (isinstance(data, np.ndarray) and isinstance(indices, np.ndarray) and isinstance(indptr, np.ndarray)):
        return None
    idx, m, n = indices.dtype, *x.shape
    if (indptr.dtype != idx or idx not in _INT_MAX or not idx.isnative or data.dtype not in SUPPORTED_DTYPES
            or not data.dtype.isnative or array_objects.DATA_OFFSET is None or len(indptr) != m + 1
            or len(data) != len(indices) or indices.strides != (idx.itemsize,) or indptr.strides != (idx.itemsize,)
            or data.strides != (data.dtype.itemsize,)):
        return None
    if not native_validation.canonical_csr_threaded(indptr, indices, n, threads):
        return None
    bits = idx.itemsize * 8
    return Checked(SparseTensor((m, n), CSR.with_widths(bits, bits), (None, indptr), (None, indices), data,
                                validate=False))


def _scipy_csr_types() -> None:
    global _csr_types
    sps = sys.modules.get("scipy.sparse")
    if sps is not None:
        _csr_types = (sps.csr_array, sps.csr_matrix)


def _sparse_result(csr_parts, shape, family):
    """Package (data, indices, indptr) as the family's 2-D sparse type."""
    import scipy.sparse as sps

    return _wrap_sparse(sps.csr_array(tuple(csr_parts), shape=shape), family)


def _wrap_sparse(result, family):
    """A kernel's sparse 2-D result (a scipy csr_array) in the operands' family."""
    if family == "scipy-matrix":
        import scipy.sparse as sps

        if vars(result).get("_has_canonical_format") is True:     # a kernel's canonical result
            return scipy_out.csr(sps.csr_matrix, result.data, result.indices, result.indptr, result.shape, True)
        return sps.csr_matrix(result)
    if family == "pydata":
        import sparse

        return sparse.COO.from_scipy_sparse(result)
    return result


def _dense_to_csr(block: np.ndarray, index_dtype=np.int64):
    """CSR parts ``(data, indices, indptr)`` of a dense block, dropping zeros (as scipy's product does)."""
    from splyce.native import compress as native_compress

    if native_compress.supported(block.dtype):
        return native_compress.dense_to_csr(block, index_dtype)
    mask = block != 0
    indptr = np.zeros(block.shape[0] + 1, dtype=index_dtype)
    np.cumsum(np.count_nonzero(mask, axis=1), out=indptr[1:])
    return block[mask], np.nonzero(mask)[1].astype(index_dtype, copy=False), indptr


def _index_dtype(nnz: int, n: int):
    return np.int32 if max(nnz, n) < 2**31 else np.int64


# -- matmul ----------------------------------------------------------------------------------------------
def _mm(a, b):
    return a @ b


class Formulation(enum.Enum):
    """How a drop-in ``a @ b`` is computed (``choose_matmul_formulation`` picks one)."""

    NUMPY = "numpy"                      # both dense: NumPy's own product
    SPARSE_TIMES_DENSE = "csr-x-dense"   # A CSR, rows times a dense operand (SpMV / SpMM), MLIR kernel
    DENSE_TIMES_SPARSE = "dense-x-csr"   # dense rows times B CSR, MLIR kernel
    SCATTER_VECTOR = "scatter-vector"    # sparse vector operand scattered dense in O(n), then SpMV
    GUSTAVSON_SPARSE = "gustavson-spa"   # CSR x CSR -> CSR, per-row sparse accumulator, O(flops), native
    GUSTAVSON_DENSE = "gustavson-dense"  # CSR x CSR -> dense result (asked for), MLIR kernel
    MASKED_GUSTAVSON = "masked-gustavson"  # einsum M * (A @ B), all sparse: mask-driven Gustavson, native
    SDDMM = "sddmm"                      # einsum M * (X @ Y.T), M sparse, X / Y dense: dots on M's entries, native
    MERGE_ROWS = "merge-rows"            # elementwise CSR op CSR -> CSR, one branch-free merge per row, native
    SPARSIFIER = "sparsifier"            # a product through the MLIR sparsifier's kernel: value types the
                                         # native kernels lack (bool, complex)
    COITERATE = "coiterate"              # elementwise through the MLIR kernel (any rank, dense operands)
    DENSE_SUM = "dense-sum"              # a sparse and a dense matrix added / subtracted: scipy's dense result


@dataclass(frozen=True)
class OperandInfo:
    """What the formulation choice looks at: the operand's family (numpy / scipy / pydata / splyce), shape
    and value dtype (None: not known, taken as one the native kernels support)."""

    family: str
    shape: tuple
    dtype: np.dtype | None = None

    @classmethod
    def of(cls, x, family: str | None = None) -> "OperandInfo":
        dtype = getattr(x, "dtype", None)
        return cls(family or _family(x), tuple(np.shape(x)), None if dtype is None else np.dtype(dtype))

    @property
    def sparse(self) -> bool:
        return self.family != "numpy"


def _native_values(*infos: OperandInfo) -> bool:
    """Whether the native kernels (splyce/native/*.py) compute in the operands' common value dtype
    (float64 / float32 / int64 / int32; bool and complex go through the sparsifier's kernels)."""
    from splyce.native.ir_text import VALUE

    dtypes = [i.dtype for i in infos if i.dtype is not None]
    return not dtypes or np.result_type(*dtypes) in VALUE


def _wants_sparse_result(a: OperandInfo, b: OperandInfo, out_format) -> bool:
    return (out_format == "sparse" or isinstance(out_format, Format)) or (
        out_format is None and a.sparse and b.sparse and len(a.shape) == len(b.shape) == 2)


def choose_matmul_formulation(a: OperandInfo, b: OperandInfo, out_format=None) -> Formulation:
    """The one place the drop-in ``matmul`` decides how to compute ``a @ b``: each index is iterated from one
    operand and looked up or scattered in the other, never co-iterated (no intersection is needed)."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if not _native_values(a, b) and len(a.shape) == 2 and (b.sparse and len(b.shape) == 2 or not b.sparse):
        return Formulation.SPARSIFIER if a.sparse else Formulation.DENSE_TIMES_SPARSE
    if a.sparse and b.sparse:
        if len(b.shape) == 1 or (len(b.shape) == 2 and b.shape[1] == 1 and len(a.shape) == 2) \
                or len(a.shape) == 1:
            return Formulation.SCATTER_VECTOR
        if _wants_sparse_result(a, b, out_format):
            return Formulation.GUSTAVSON_SPARSE
        return Formulation.GUSTAVSON_DENSE
    return Formulation.SPARSE_TIMES_DENSE if a.sparse else Formulation.DENSE_TIMES_SPARSE


def matmul(a, b, *, out_format=None, threads=1):
    """scipy's / NumPy's ``a @ b``. ``threads``: worker threads (1 as scipy; None: all cores); results are
    bit-identical for any count."""
    if out_format is None:
        if type(b) is np.ndarray:
            out = _fast_spmv(a, b, threads)
        else:
            out = _fast_spmspv(a, b, threads)
        if out is not None:
            return out
    if narrow_dtypes.involved(a, b):
        return narrow_dtypes.call(matmul, (a, b), dict(out_format=out_format, threads=threads),
                                  prune=_family(a) != "numpy" and _family(b) != "numpy")
    if out_format is None and _csc_first(a, b) and np.shape(b)[1] != 1 and np.shape(a)[-1] == np.shape(b)[0]:
        # a CSC product is scipy's CSC: (B.T @ A.T).T, A.T being A's buffers as a CSR, and the CSR result
        # transposed that CSC with no copy (scipy's csc_matmat computes the same product of transposes)
        return _matmul(b.T, a.T, out_format, _threads(threads)).T
    if out_format is None and getattr(a, "format", None) == "bsr" and _keeps_left_format("matmul", a, b) \
            and np.shape(a)[-1] == np.shape(b)[0]:
        # scipy: a BSR times a sparse matrix is a BSR of the left's block rows by the right's block columns (1
        # for any other format)
        block = b.blocksize[1] if getattr(b, "format", None) == "bsr" else 1
        return _left_format(a, _matmul(a.tocsr(), b, out_format, _threads(threads)), block)
    out = _matmul(a, b, out_format, _threads(threads))
    if (type(a) is np.matrix or type(b) is np.matrix) and type(out) is np.ndarray \
            and _sparse_family(a, b) == "scipy-matrix":
        return np.asmatrix(out)        # scipy: a sparse matrix times a numpy.matrix is a numpy.matrix
    return out


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
    family = _sparse_family(a, b)
    want_sparse = _wants_sparse_result(ia, ib, out_format)
    kernel = _kernel("matmul", _mm, threads=threads)
    if formulation is Formulation.SPARSE_TIMES_DENSE:
        if len(sa) == 2:
            return _dense_out(_csr_times_dense(a, b, threads), family, want_sparse)
        A = _as_format(a, SPARSE_VECTOR, "a")     # a sparse vector dotted with dense columns
        return _dense_out(kernel(A, np.ascontiguousarray(b)), family, want_sparse)
    if formulation is Formulation.DENSE_TIMES_SPARSE:
        B = _as_format(b, CSR if len(sb) == 2 else SPARSE_VECTOR, "b")
        return _dense_out(kernel(np.ascontiguousarray(a), B), family, want_sparse)
    if formulation is Formulation.SCATTER_VECTOR:
        if len(sa) == 1:
            dense_a = _to_dense_vector(a)
            out = matmul(dense_a, b, out_format="dense", threads=threads)
            if _nonfinite.maybe_nan(np.asarray(out)):   # a NaN / Inf of b times a missing entry of a: scipy
                stored = _nonfinite.stored_mask(asarray(a).coords()[0], sa[0])         # skips the pair
                if len(sb) == 2:
                    B = _as_format(b, CSC, "b").tensor
                    # B's columns (CSC, rows ascending) as the rows summed again: scipy's order
                    out = _nonfinite.resum_rows(out, B.pos[1], B.crd[1], B.values, stored, dense_a)
                else:
                    out = _nonfinite.resum_dot(out, stored, dense_a, asarray(b).coords()[0], _to_dense_vector(b))
            return _vector_out(out, family) if len(sb) == 2 else out     # sparse, as scipy / pydata return it
        # matrix times a sparse vector: scatter the vector once (O(n)), then a CSR row-times-vector kernel
        A = _as_format(a, CSR, "a")
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
    raw = _raw_csr(a)
    checked = raw is None
    if raw is not None:
        data, indices, indptr = raw
        # the kernels check positions and coordinates themselves as they read them (each thread its rows)
        if not (len(indptr) and indptr[0] == 0 and indptr[-1] == len(indices)):
            _raise_bad_product_operand(a)
    else:
        A = _as_format(a, CSR, "a").tensor
        data, indices, indptr = A.values, A.crd[1], A.pos[1]
    dtype = np.result_type(data.dtype, b.dtype)
    x = np.ascontiguousarray(b, dtype=dtype.newbyteorder("="))
    out = native_spmv.csr_times_dense(indptr, indices, data.astype(dtype, copy=False), x, threads, checked)
    if out is None:
        _raise_bad_product_operand(a)
    return out


# -- SpMV's per-call fast path --------------------------------------------------------------------------------
_csr_types: tuple = ()          # (csr_array, csr_matrix) once scipy.sparse is imported
_spmv_entries: dict = {}        # (value dtype, index dtype, variant) -> native product on array objects, or None
_spmv_last: tuple = (None, None, None, None)   # the last (value dtype, index dtype, variant, entry) used
# the last (value dtype, index dtype, value strides, index strides, bytes per entry, largest index) seen:
# computing them per call cost ~1 us of a ~5 us Python side (10 x 10 matrix, loaded machine)
_spmv_layout: tuple = (None, None, None, None, 0, 0)
_INT_MAX = {np.dtype(np.int32): 2**31 - 1, np.dtype(np.int64): 2**63 - 1}
_CSR_ORDER = (0, 1)


# Work (entries x columns; an SpMV entry, a gather and a short row's loop exit, counts as 4 columns) up to
# which a product asked for several threads runs on one (bit-identical results either way): ~1 ms of one
# thread here. Below it, handing half to a worker cost more than it saved: on the loaded machine ba-4k SpMV
# 45 us on one thread vs 319 us with threads=2, SpMM (16 columns) 135 vs 357 us; in the quiet corpus run
# (limit 2**19 then) rmat-s13 SpMV (work 816k, 0.55 ms) 0.50x of one thread, pyamg-ldg-diffusion SpMM (565k,
# 0.25 ms) 0.57x, rmat-s13 SpMM (3.3M, 1.8 ms) 0.96x, while ba-100k SpMV (3.2M, 3.0 ms) gained 1.49x; the
# hand-off costs ~0.2 ms of CPU time per call (rmat-s13 SpMV: 551 vs 347 us, kernels 375 vs 322 us).
SERIAL_MAX_WORK = 1 << 21


def _several_threads(threads) -> bool | None:
    """False for one thread, True for several (an int > 1 or None: all cores), None when ``threads`` is not a
    thread count (then the fast paths leave the call to the general path, which says so)."""
    if type(threads) is int:
        return None if threads < 1 else threads > 1
    return True if threads is None else None


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
    if several and _several_threads(threads) is None:
        return None                             # not a thread count: the general path says so
    if not _csr_types:
        _scipy_csr_types()
    ndim = x.ndim
    if type(a) not in _csr_types or not 1 <= ndim <= 2:
        return None
    global _spmv_last, _spmv_layout
    data, indices, indptr = a.data, a.indices, a.indptr
    # the kernel reads each array's data pointer from the object itself: ndarrays (or subclasses) only
    if not (isinstance(data, np.ndarray) and isinstance(indices, np.ndarray) and isinstance(indptr, np.ndarray)):
        return None
    nnz = len(data)
    if several and nnz * (x.shape[1] if ndim == 2 else 4) > SERIAL_MAX_WORK:
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
        # rows of a few entries: one flat loop over the entries (on some CPUs only beyond L2); else grouped rows
        # for a matrix that stays in cache where the CPU gains by them (on some only for long rows), else one
        # row at a time (a malformed indptr's length is refused below, whatever the choice);
        # native_spmv._tuned_for has the measurements
        if nnz <= _FLAT_MAX_ROW * (rows1 - 1) and nnz * layout[4] >= _FLAT_MIN_BYTES:
            variant = "flat"
        elif nnz * layout[4] <= _GROUPED_MAX_BYTES and nnz >= _GROUPED_MIN_ROW * (rows1 - 1):
            variant = "grouped"
        else:
            variant = "rows"
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
        _raise_bad_product_operand(a)
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
    if not _csr_types:
        _scipy_csr_types()
    if type(a) not in _csr_types or type(x) is not _coo_array_type() or len(x.shape) != 1:
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


@functools.cache
def _coo_array_type():
    import scipy.sparse as sps

    return sps.coo_array


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


def _raise_bad_product_operand(x) -> None:
    """Word what is wrong with a scipy CSR operand of a product (positions or column range)."""
    from splyce.tensors.formats import Level

    width = x.indptr.dtype.itemsize * 8
    fmt = Format(("dense", Level("compressed", unique=False, ordered=False)), None, width, width)
    check_buffers(x.shape, fmt, (None, x.indptr), (None, x.indices), x.data, "a")
    raise ValueError("a: malformed CSR index arrays")   # not reached: check_buffers names the defect


def _spgemm(A: SparseTensor, B: SparseTensor, family: str, threads: int):
    """CSR x CSR -> CSR in O(flops) (native sparse accumulator); values in the operands' common dtype."""
    from splyce.native import spgemm as native_spgemm

    dtype = np.result_type(A.dtype, B.dtype)
    parts = [(t.values.astype(dtype, copy=False), t.crd[1], t.pos[1]) for t in (A, B)]
    product = native_spgemm.spgemm(parts[0], parts[1], B.shape[1], dtype, threads)
    global last_spgemm_work
    last_spgemm_work = product.work
    import scipy.sparse as sps

    # columns in order of first appearance, as scipy's product: not sorted
    out = scipy_out.csr(sps.csr_array, product.data, product.indices, product.indptr, (A.shape[0], B.shape[1]),
                        False)
    return _wrap_sparse(out, family)


# Work of the last sparse-result product (rows + multiply-adds): tests check it scales with flops.
last_spgemm_work = 0


def _threads(threads) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return threads


def _dense_out(out, family, want_sparse):
    if not want_sparse or np.ndim(out) != 2:
        return out
    parts = _dense_to_csr(out, _index_dtype(out.size, max(out.shape)))
    return _sparse_result(parts, out.shape, family)


def _vector_out(out: np.ndarray, family: str):
    """A 1-D product of sparse operands, as scipy / pydata return it: sparse, zeros dropped."""
    if family.startswith("scipy"):
        return scipy_out.coo_vector(_coo_array_type(), out)
    if family == "pydata":
        import sparse

        return sparse.COO.from_numpy(out)
    return asarray(out)


def _to_dense_vector(x) -> np.ndarray:
    fam = _family(x)
    if fam == "numpy":
        return np.asarray(x).reshape(-1)
    if fam.startswith("scipy"):
        return np.asarray(x.toarray()).reshape(-1)
    if fam == "pydata":
        return x.todense().reshape(-1)
    return x.to_numpy().reshape(-1)


# -- multiply, add, subtract -------------------------------------------------------------------------------
def _mul(a, b):
    return a * b


def _add(a, b):
    return a + b


def _sub(a, b):
    return a - b


def choose_elementwise_formulation(a: OperandInfo, b: OperandInfo, out_format=None,
                                   name: str = "multiply") -> Formulation:
    """The one place the drop-in ``multiply`` / ``add`` / ``subtract`` decides how to compute: two sparse
    matrices with a sparse result merge their rows natively; anything else runs the coiteration kernel."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if a.sparse and b.sparse and len(a.shape) == 2 and out_format in (None, "sparse") and _native_values(a, b):
        return Formulation.MERGE_ROWS
    if name != "multiply" and a.sparse != b.sparse and len(a.shape) == 2 and out_format in (None, "dense"):
        return Formulation.DENSE_SUM
    return Formulation.COITERATE


def _elementwise(name, fun, np_fun, a, b, out_format, threads=1):
    threads = _threads(threads)
    if out_format is None or out_format == "sparse":
        out = _fast_merge(name, a, b, threads)
        if out is not None:
            return out
    if narrow_dtypes.involved(a, b):
        return narrow_dtypes.call(globals()[name], (a, b),
                                  dict(out_format=out_format, threads=threads),
                                  prune=_family(a) != "numpy" and _family(b) != "numpy")
    if out_format in (None, "sparse") and _csc_first(a, b) and np.shape(a) == np.shape(b):
        # scipy's result takes a CSC left operand's format: the op on the transposes (a CSC's buffers are its
        # transpose's CSR), whose CSR result transposed is that CSC, with no copy
        return _elementwise(name, fun, np_fun, a.T, b.T, out_format, threads).T
    if out_format is None and _keeps_left_format(name, a, b) and np.shape(a) == np.shape(b):
        return _left_format(a, _elementwise(name, fun, np_fun, a.tocsr(), b, out_format, threads), 0)
    ia, ib = OperandInfo.of(a), OperandInfo.of(b)
    formulation = choose_elementwise_formulation(ia, ib, out_format, name)
    if formulation is Formulation.NUMPY:
        return np_fun(a, b)
    fa, fb = ia.family, ib.family
    sa, sb = ia.shape, ib.shape
    if sa != sb or (name == "multiply" and ia.sparse != ib.sparse and np.size(b if ia.sparse else a) == 1):
        # a scalar, a vector, or one element (scipy's scalar rule, even where the shapes match)
        return broadcast.elementwise(name, a, b, ia.sparse, ib.sparse, out_format, threads)
    family = _sparse_family(a, b)
    if formulation is Formulation.DENSE_SUM:
        return _dense_result(_dense_sum(name, a, b, ia.sparse), family)
    if formulation is Formulation.MERGE_ROWS:
        return _wrap_sparse(_merge_rows(name, a, b, threads), family)
    ndim = len(sa)
    subs = "abcd"[:ndim]
    shared = _rowwise_format(subs, list(subs))   # both operands in one storage order (CSR / CSF)

    def operand(x, label):
        return np.ascontiguousarray(x) if _family(x) == "numpy" else _as_format(x, shared, label)

    out = _kernel(name, fun, out_format, threads)(operand(a, "a"), operand(b, "b"))
    if isinstance(out, np.ndarray):
        return out
    if ndim == 2:
        out = _wrap_sparse(out, family)
        # scipy returns COO for a sparse-times-dense elementwise product
        return out.tocoo() if "numpy" in (fa, fb) and family.startswith("scipy") else out
    return out.to_pydata() if family == "pydata" else out


def _dense_sum(name: str, a, b, sparse_first: bool) -> np.ndarray:
    """scipy's sum or difference of a sparse and a dense matrix, bit for bit: ``A + D`` is a copy of D with A's
    stored values added (where A stores nothing, D's value stays, -0.0 included), ``A - D`` A's dense form
    (its entries added into zeros) minus D, ``D - A`` D minus that. O(m n), as the dense result; A validated
    first."""
    s, d = (a, b) if sparse_first else (b, a)
    S = _as_format(s, CSR, "a" if sparse_first else "b").tensor
    d = np.asarray(d)
    rows = np.repeat(np.arange(S.shape[0], dtype=np.intp), np.diff(S.pos[1]))
    if name == "add":
        out = np.array(d, dtype=np.result_type(S.dtype, d.dtype), order="C")
        out[rows, S.crd[1]] += S.values          # canonical: each position once
        return out
    dense = np.zeros(S.shape, dtype=S.dtype)
    dense[rows, S.crd[1]] += S.values            # scipy's todense adds into zeros: a stored -0.0 reads +0.0
    return np.subtract(dense, d) if sparse_first else np.subtract(d, dense)


def _dense_result(out: np.ndarray, family: str):
    """A dense result in the operands' family: scipy's matrix classes give ``numpy.matrix``, pydata-sparse a
    COO (its arrays stay its own), the rest a NumPy array."""
    if family == "scipy-matrix":
        return np.asmatrix(out)
    if family == "pydata":
        import sparse

        return sparse.COO.from_numpy(out)
    return out


def _keeps_left_format(name: str, a, b) -> bool:
    """scipy's result keeps a BSR left operand's format (``bsr op sparse``, ``bsr @ sparse``), and a DOK's in a
    sum (``dok + sparse``; its difference and product are CSR), the right operand 2-D scipy sparse."""
    fmt = getattr(a, "format", None)
    return ((fmt == "bsr" or fmt == "dok" and name == "add") and _family(a).startswith("scipy")
            and np.ndim(b) == 2 and _family(b).startswith("scipy"))


def _left_format(a, out, right_block: int):
    """A CSR result in the left operand's format, as scipy gives it: a BSR's blocks of ``a.blocksize`` (a
    product: its rows by ``right_block`` columns), a DOK."""
    if a.format == "dok":
        return out.todok()
    rows, cols = a.blocksize
    return out.tobsr(blocksize=(rows, right_block or cols))


def _csc_first(a, b) -> bool:
    """A scipy CSC left operand against a 2-D scipy sparse one: scipy returns a CSC (it converts the right one)."""
    return (getattr(a, "format", None) == "csc" and _family(a).startswith("scipy") and np.ndim(b) == 2
            and _family(b).startswith("scipy"))


def _merge_rows(op: str, a, b, threads: int):
    """``op(a, b)`` for two sparse matrices, as a canonical scipy csr_array (scipy's csr_binop_csr).

    A is converted to canonical CSR and validated. When B is a scipy CSR with exactly A's positions (a
    structurally symmetric matrix and its transpose, a copy with new values), B's index arrays are only
    compared with A's, never followed, so they need no validation of their own."""
    from splyce.native import elementwise as native_elementwise

    A = _as_format(a, CSR, "a").tensor
    raw_b = _raw_csr(b)
    if raw_b is not None:
        dtype = np.result_type(A.dtype, raw_b[0].dtype)
        parts_a = (A.values.astype(dtype, copy=False), A.crd[1], A.pos[1])
        same = native_elementwise.same_pattern(op, parts_a, (raw_b[0].astype(dtype, copy=False),) + raw_b[1:],
                                               dtype)
        if same is not None:
            return _canonical_csr(same, A.shape)
    B = _as_format(b, CSR, "b").tensor
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


_nd = np.ndarray


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
            or bp.dtype != idx):
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
_MERGE_DTYPES = {(np.dtype(v), np.dtype(i)) for v in (np.float64, np.float32, np.int64, np.int32)
                 for i in (np.int32, np.int64)}


def _canonical_csr(parts, shape):
    import scipy.sparse as sps

    return scipy_out.csr(sps.csr_array, *parts, shape, True)   # merged sorted rows: sorted, unique


def _raw_csr(x):
    """``(data, indices, indptr)`` of a scipy CSR whose buffers a kernel can read as they are (supported
    value dtype, native byte order, C-contiguous, consistent lengths), else None. Nothing is validated."""
    if not _family(x).startswith("scipy") or x.format != "csr" or x.ndim != 2:
        return None
    data, indices, indptr = x.data, x.indices, x.indptr
    if data.dtype not in SUPPORTED_DTYPES or not data.dtype.isnative or indices.dtype != indptr.dtype:
        return None
    if indices.dtype not in (np.int32, np.int64) or not indices.dtype.isnative:
        return None
    if not all(arr.ndim == 1 and arr.flags.c_contiguous for arr in (data, indices, indptr)):
        return None
    if len(data) != len(indices) or len(indptr) != x.shape[0] + 1:
        return None
    return data, indices, indptr


def multiply(a, b, *, out_format=None, threads=1):
    """scipy's ``a.multiply(b)``: a sparse result (CSR for 2-D) unless both operands are dense."""
    return _elementwise("multiply", _mul, np.multiply, a, b, out_format, threads)


def add(a, b, *, out_format=None, threads=1):
    return _elementwise("add", _add, np.add, a, b, out_format, threads)


def subtract(a, b, *, out_format=None, threads=1):
    return _elementwise("subtract", _sub, np.subtract, a, b, out_format, threads)


# -- einsum ----------------------------------------------------------------------------------------------
class _Einsum:
    """A traced einsum for one subscripts string (hashable, so it keys the kernel cache)."""

    def __init__(self, subscripts: str):
        self.subscripts = subscripts

    def __call__(self, *operands):
        from splyce.tracer.tracer import einsum

        return einsum(self.subscripts, *operands)

    def __eq__(self, other):
        return isinstance(other, _Einsum) and other.subscripts == self.subscripts

    def __hash__(self):
        return hash(("einsum", self.subscripts))


def _rowwise_format(subs: str, order) -> Format:
    """The operand's levels in the global loop order: dense outermost, compressed below (CSR / CSF-like)."""
    return _rowwise_format_cached(subs, tuple(order))


@functools.lru_cache(maxsize=256)
def _rowwise_format_cached(subs: str, order: tuple) -> Format:
    # a Format validates itself when built (~80 us): once per (subscripts, loop order)
    from splyce.tensors.formats import Level

    perm = tuple(sorted(range(len(subs)), key=lambda d: order.index(subs[d])))
    kinds = ("compressed",) if len(subs) == 1 else ("dense",) + ("compressed",) * (len(subs) - 1)
    return Format(tuple(Level(k) for k in kinds), perm)


def choose_einsum_formulation(inputs: list[str], output: str, infos: list[OperandInfo],
                              out_format=None) -> tuple[Formulation, tuple[int, ...]]:
    """The one place the drop-in ``einsum`` decides how to compute, and the operand roles: a product whose
    result lies on a sparse operand's positions (``"ik,kj,ij->ij"``: masked SpGEMM; ``"ij,ik,jk->ij"`` with
    dense ``ik``, ``jk``: SDDMM) runs natively in O(work) with the mask's positions as result, returned as
    ``(formulation, (mask, left, right))``; anything else runs the traced einsum kernel (``()``)."""
    if len(inputs) != 3 or len(output) != 2 or output[0] == output[1] or out_format not in (None, "sparse"):
        return Formulation.COITERATE, ()
    i, j = output
    for mask in range(3):
        if inputs[mask] != output or not infos[mask].sparse or len(infos[mask].shape) != 2:
            continue
        p, q = (x for x in range(3) if x != mask)
        for left, right in ((p, q), (q, p)):
            a, b = inputs[left], inputs[right]
            if len(a) != 2 or len(b) != 2 or a[0] != i or a[1] in output:
                continue
            k = a[1]
            native = _native_values(*infos)   # else the sparsifier's kernel, fused on the mask's positions
            if infos[left].sparse and infos[right].sparse and b == k + j:
                return Formulation.MASKED_GUSTAVSON if native else Formulation.SPARSIFIER, (mask, left, right)
            if not infos[left].sparse and not infos[right].sparse and b == j + k:
                return Formulation.SDDMM if native else Formulation.SPARSIFIER, (mask, left, right)
    return Formulation.COITERATE, ()


def _masked_product(formulation, roles, operands, threads):
    """Masked SpGEMM or SDDMM (see ``choose_einsum_formulation``): a canonical csr_array on the mask's
    positions, zero results dropped."""
    from splyce.native import masked as native_masked

    mask, left, right = roles
    convert = _converter(threads)
    M = convert(operands[mask], CSR, "mask").tensor
    dtype = np.result_type(*(x.dtype for x in operands))
    m_parts = (M.values.astype(dtype, copy=False), M.crd[1], M.pos[1])
    if formulation is Formulation.MASKED_GUSTAVSON:
        A = convert(operands[left], CSR, "a").tensor
        B = convert(operands[right], CSR, "b").tensor
        parts = [(t.values.astype(dtype, copy=False), t.crd[1], t.pos[1]) for t in (A, B)]
        out = native_masked.masked_spgemm(m_parts, parts[0], parts[1], M.shape[1], dtype, threads)
    else:
        x, y = (np.ascontiguousarray(operands[r], dtype=dtype.newbyteorder("=")) for r in (left, right))
        check_dtype(x.dtype, "x")
        out = native_masked.sddmm(m_parts, x, y, dtype, threads)
    return _canonical_csr(out, M.shape)


def einsum(subscripts, *operands, out_format=None, threads=1):
    """NumPy's einsum on sparse and dense operands (no ellipses; up to 4 operands of rank up to 4).

    A product whose result lies on a sparse operand's positions (masked SpGEMM, SDDMM) runs natively in
    O(work) (``choose_einsum_formulation``). Otherwise loops run in the order the indices first appear, and
    every sparse operand is stored in that order (CSR / CSF-like), so each index is iterated from one operand
    and looked up in the others: a row-wise (Gustavson-style) product with dense accumulation, no
    intersection where the expression needs none.

    ``threads`` > 1 with a scalar result (``"ij,jk,ik->"``, triangle counting): each thread sums its rows and
    the partial sums are added, so a float result may differ from one thread's in the last bits, as any
    parallel sum does (one thread: the exact left-to-right sum).
    """
    from splyce.tracer.tracer import parse_einsum

    families = [_family(x) for x in operands]
    if all(f == "numpy" for f in families):
        return np.einsum(subscripts, *operands)
    inputs, output = parse_einsum(subscripts, len(operands))
    if diagonals.has_repeats(inputs):     # "ii->i", "ii->": the diagonals first, as NumPy does
        operands, inputs = diagonals.take(operands, inputs, families, out_format is not None)
        return einsum(",".join(inputs) + "->" + output, *operands, out_format=out_format, threads=threads)
    if narrow_dtypes.involved(*operands):
        return narrow_dtypes.call(functools.partial(einsum, subscripts), operands,
                                  dict(out_format=out_format, threads=threads), prune=False)
    threads = _threads(threads)
    family = _sparse_family(*operands)
    inputs, output = parse_einsum(subscripts, len(operands))
    infos = [OperandInfo.of(x, f) for f, x in zip(families, operands)]
    if (len(inputs) == 2 and inputs[0] == output and inputs[1] in (output, output[::-1]) and len(output) == 2
            and len(set(output)) == 2 and infos[0].sparse and infos[1].sparse
            and (inputs[1] == output or hasattr(operands[1], "T"))):
        # a Hadamard product (``"ij,ij->ij"``, ``"ij,ji->ij"`` of a scipy / pydata B): the drop-in multiply,
        # whose result keeps scipy's and NumPy's NaN for a NaN or Inf against a missing entry (the coiterating
        # kernel skips that pair), and runs the native merge (a CSC B.T without a transpose)
        _check_einsum_shapes(inputs, infos)         # (worded by index, not by the transposed shape)
        b = operands[1] if inputs[1] == output else operands[1].T
        return multiply(operands[0], b, out_format=out_format, threads=threads)
    formulation, roles = choose_einsum_formulation(inputs, output, infos, out_format)
    if formulation is Formulation.SPARSIFIER:
        out_format = "sparse"   # a result on the mask's positions, as the native masked products return
    elif formulation is not Formulation.COITERATE:
        _check_einsum_shapes(inputs, infos)
        return _wrap_sparse(_masked_product(formulation, roles, operands, threads), family)
    operands, inputs, subscripts = _sum_lone_dense_letters(subscripts, operands, inputs, output, families)
    order = list(dict.fromkeys("".join(inputs)))
    ops = []
    convert = _converter(threads)
    for i, (x, subs, f) in enumerate(zip(operands, inputs, families)):
        if f == "numpy":
            ops.append(np.ascontiguousarray(x))
        else:
            ops.append(convert(x, _rowwise_format(subs, order), f"operand {i}"))
    jitted = _kernel("einsum:" + subscripts, _Einsum(subscripts), out_format, threads,
                     reassociate=threads > 1 and not output)
    if out_format is None and _is_masked_sum(inputs, output, infos):
        summed = _masked_sum(jitted, ops, inputs, threads)
        if summed is not None:
            return _numpy_sum(inputs, ops, *summed)
    out = jitted(*ops)
    if not output:
        return _numpy_sum(inputs, ops, out)
    if isinstance(out, np.ndarray):
        if family == "pydata" and out.ndim:
            import sparse

            return sparse.COO.from_numpy(out)      # NumPy's einsum on pydata arrays returns theirs
        return out
    if np.ndim(out) == 2 and hasattr(out, "tocsr"):
        return _wrap_sparse(out, family)
    return out.to_pydata() if family == "pydata" else out


def _sum_lone_dense_letters(subscripts, operands, inputs, output, families):
    """Sum a dense operand over its letters that are in no other operand and not in the result, before the
    kernel, as NumPy's einsum does: ``"ij,jk->"`` with a dense B is ``A``'s entries times B's row sums, not
    each entry times every element of its row (O(nnz + size of B), not O(nnz * columns)), and an Inf in A
    against a zero in B's row is then Inf, as NumPy and pydata-sparse give. Returns the operands, their
    subscripts and the subscripts string."""
    counts = Counter("".join(inputs) + output)
    operands, inputs, changed = list(operands), list(inputs), False
    for n, (x, subs, family) in enumerate(zip(operands, inputs, families)):
        if family != "numpy" or np.ndim(x) != len(subs):
            continue                       # (a subscript / shape mismatch: the tracer words it)
        lone = [d for d, letter in enumerate(subs) if counts[letter] == 1]
        if lone and len(lone) < len(subs):
            x = np.asarray(x)
            operands[n] = np.add.reduce(x, axis=tuple(lone), dtype=x.dtype)
            inputs[n] = "".join(letter for d, letter in enumerate(subs) if d not in lone)
            changed = True
    return operands, inputs, (",".join(inputs) + "->" + output) if changed else subscripts


def _is_masked_sum(inputs: list[str], output: str, infos: list[OperandInfo]) -> bool:
    """``"ij,jk,ik->"`` (up to the letters: triangle counting with L three times), all three operands sparse
    matrices of one value dtype the native kernels compute in."""
    if output or len(inputs) != 3 or any(len(s) != 2 for s in inputs):
        return False
    (i, j), (j2, k), (i2, k2) = inputs
    if not (i == i2 and j == j2 and k == k2 and len({i, j, k}) == 3):
        return False
    dtypes = {info.dtype for info in infos}
    return all(info.sparse and len(info.shape) == 2 for info in infos) and len(dtypes) == 1 \
        and _native_values(*infos)


_plain_plans = weakref.WeakKeyDictionary()   # Kernel -> whether its plan is the loop nest masked_sum runs


def _masked_sum(jitted, ops, inputs, threads: int = 1):
    """``"ij,jk,ik->"`` (rows split across ``threads`` by work, see ``native_masked.masked_sum``). The jitted
    kernel's plan, chosen by cost for the first call of these
    shapes and formats, sets the order of the sum; when it is the plain one (loops i, j, k, every operand kept
    in its CSR, nothing fused: the corpus's triangle counts), the native ``masked_sum`` runs the same sum in
    the same order, bit for bit, without the kernel call's descriptors and results (~0.3 ms on a small
    matrix), as ``(sum, whether every value was proved finite)``; any other plan: None (the caller runs the
    kernel)."""
    from splyce.native import masked as native_masked

    kernel, _ = jitted.kernel_for(*ops)
    plain = _plain_plans.get(kernel)
    if plain is None:
        plain = _plain_plans[kernel] = _plain_masked_sum_plan(kernel.plan, inputs)
    if not plain:
        return None
    A, B, C = (op.tensor for op in ops)
    return native_masked.masked_sum(*((t.values, t.crd[1], t.pos[1]) for t in (A, B, C)), C.shape[1], A.dtype,
                                    threads, with_proof=True)


def _numpy_sum(inputs, ops, out, values_known_finite: bool = False):
    """A scalar einsum's value with NumPy's NaN / Inf rule for missing entries (``planner.nonfinite``)."""
    sparse = [None if isinstance(op, np.ndarray) else op.tensor for op in ops]
    return _nonfinite.sum_value(inputs, [np.shape(op) if isinstance(op, np.ndarray) else op.tensor.shape
                                        for op in ops], sparse, out, values_known_finite)


_SUM_SUBSCRIPTS: dict = {}    # einsum subscripts -> whether they read "ij,jk,ik->" (up to the letters)
_SUM_FORMATS: dict = {}       # index bits -> the CSR format a checked scipy CSR of that width gets
_SUM_VALUES = frozenset(np.dtype(v) for v in (np.float64, np.float32, np.int64, np.int32))   # native, native order


def _sum_subscripts(subscripts: str) -> bool:
    known = _SUM_SUBSCRIPTS.get(subscripts)
    if known is None:
        from splyce.tracer.tracer import TraceError, parse_einsum

        try:
            inputs, output = parse_einsum(subscripts, 3)
        except TraceError:
            return False                   # the general path words the error
        known = not output and len(inputs) == 3 and all(len(s) == 2 for s in inputs) and \
            inputs[0][0] == inputs[2][0] and inputs[0][1] == inputs[1][0] and inputs[1][1] == inputs[2][1] and \
            len(set(inputs[0] + inputs[1])) == 3
        if len(_SUM_SUBSCRIPTS) < 256:
            _SUM_SUBSCRIPTS[subscripts] = known
    return known


def _sum_parts(x, dtype, idx, rows: int):
    """``(data, indices, indptr)`` of a scipy CSR of ``rows`` rows as the fast triangle sum reads them by id:
    exact ndarrays, 1-D and contiguous, values of a native-kernel dtype (``dtype`` when given), int32 / int64
    indices (``idx`` when given) for both index arrays; else None. Nothing is validated."""
    data, indices, indptr = x.data, x.indices, x.indptr
    if not (type(data) is _nd and type(indices) is _nd and type(indptr) is _nd):
        return None
    vt, it = data.dtype, indices.dtype
    if dtype is None:
        if vt not in _SUM_VALUES or it not in _INT_MAX or not it.isnative:
            return None
    elif vt != dtype or it != idx:
        return None
    if (indptr.dtype != it or len(indptr) != rows + 1 or len(data) != len(indices)
            or data.strides != (vt.itemsize,) or indices.strides != (it.itemsize,)
            or indptr.strides != (it.itemsize,)):
        return None
    return data, indices, indptr


def _fast_masked_sum(subscripts, a, b, c, threads=1):
    """``einsum("ij,jk,ik->", a, b, c)`` on one thread for three exact scipy CSRs (triangle counting passes L
    three times), or None (then the general path runs, which also words any error): one value dtype the native
    kernels compute in, one index dtype, every buffer 1-D and contiguous, and a plain plan already filed for
    these shapes and formats by an earlier general call (the first call of a signature goes the general way;
    another plan runs the kernel there, as before). Then the whole call is one native pass
    (``native_masked.masked_sum_checked``: each distinct operand checked canonical, then the sum), with the
    general path's exact result. On the corpus' small matrices the call is a few hundred microseconds and the
    bench's ``gc.collect()`` before it leaves the caches cold, so each Python step dropped here counts.

    ``threads`` other than 1 (a positive int or None) takes this path too when the work is surely below
    ``native_masked.serial_max_work()`` (the general path would run it on one thread anyway, after 0.1-0.2 ms
    of its own steps): mask entries plus an upper bound of the products, ``nnz(a)`` times ``b``'s longest row
    (from the row starts' differences, which are not trusted yet: a bad bound only picks the path), or, when
    that bound fails for a small ``a``, the products counted exactly."""
    if type(subscripts) is not str or not _sum_subscripts(subscripts) or _ARRAY_OFFSET is None:
        return None
    if threads != 1 and (threads is not None and threads < 1):
        return None                      # the general path words the error
    if not _csr_types:
        _scipy_csr_types()
    types = _csr_types
    if type(a) not in types or type(b) not in types or type(c) not in types:
        return None
    jitted = _kernels.get(("einsum:" + subscripts, None, 1, False))
    if jitted is None and threads != 1:   # the general path's kernel for these threads (sums may reassociate)
        t = (os.cpu_count() or 1) if threads is None else threads
        jitted = _kernels.get(("einsum:" + subscripts, None, t, t > 1))
    if jitted is None:
        return None
    sa, sb, sc = a.shape, b.shape, c.shape
    (m, n1), (n1b, n2), (mc, n2c) = sa, sb, sc
    if n1b != n1 or mc != m or n2c != n2:
        return None
    pa = _sum_parts(a, None, None, m)
    if pa is None:
        return None
    dtype, idx = pa[0].dtype, pa[1].dtype
    if max(m, n1, n2) - 1 > _INT_MAX[idx]:
        return None
    pb = pa if b is a else _sum_parts(b, dtype, idx, n1)
    pc = pa if c is a else pb if c is b else _sum_parts(c, dtype, idx, m)
    if pb is None or pc is None:
        return None
    if threads != 1:        # only a small a (whose columns index the count: checked in range first; the
        ac, limit = pa[1], _native_masked.serial_max_work()      # native call checks everything again)
        if len(ac) * 8 > limit or (len(ac) and (int(ac.min()) < 0 or int(ac.max()) >= n1)):
            return None
        if not _native_masked.small_masked_work(len(pc[1]), ac, pb[2], limit):
            return None
    fmt = _SUM_FORMATS.get(idx)
    if fmt is None:
        fmt = _SUM_FORMATS[idx] = CSR.with_widths(idx.itemsize * 8, idx.itemsize * 8)
    kernel = jitted.filed_kernel(((sa, dtype, fmt), (sb, dtype, fmt), (sc, dtype, fmt)))
    if kernel is None or not _plain_plans.get(kernel):
        return None
    return _native_masked.masked_sum_checked(pa, pb, pc, m, n1, n2, b is not a, c is not a and c is not b)


def _plain_masked_sum_plan(plan, inputs: list[str]) -> bool:
    if len(plan.steps) != 1 or plan.fusions or len(plan.sources) != 3 or plan.needs_conversion:
        return False
    step = plan.steps[0]
    params = step.node.params[0] if step.node.op == "contract" else None
    return (params is not None and tuple(params.inputs) == tuple(inputs) and params.output == ""
            and params.order == "".join(dict.fromkeys("".join(inputs))) and step.storage == ("keep",) * 3)


def _check_einsum_shapes(inputs: list[str], infos: list[OperandInfo]) -> None:
    sizes: dict = {}
    for subs, info in zip(inputs, infos):
        if len(subs) != len(info.shape):
            raise ValueError(f"einsum: subscripts {subs!r} for an operand of shape {info.shape}")
        for letter, size in zip(subs, info.shape):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(f"einsum: index {letter!r} has sizes {sizes[letter]} and {size}")
