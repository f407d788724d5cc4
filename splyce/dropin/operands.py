"""Operands and results of the drop-ins: each operand's family (numpy, scipy array / matrix, pydata,
SparseTensor), its conversion to the format a kernel reads (checked at the boundary), and the wrapping of a
kernel's buffers into the class scipy would return.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from splyce.dropin import scipy_out
from splyce.native.records import record
from splyce.tensors.formats import CSR, Format
from splyce.tensors.validation import SUPPORTED_DTYPES, check_buffers
from splyce.runtime.arguments import Checked
from splyce.tensors.tensor import SparseTensor, asarray


_FAMILIES: dict = {}   # type -> family, for types whose family follows from the type alone (looked up per call)


def operand_family(x) -> str:
    """Where an operand comes from: 'numpy', 'scipy-array', 'scipy-matrix', 'pydata' or 'splyce'."""
    family = _FAMILIES.get(type(x))
    if family is None:
        family = family_of(x)
        if family in ("splyce", "scipy-array", "scipy-matrix") or type(x) is np.ndarray:
            _FAMILIES[type(x)] = family
    return family


def family_of(x) -> str:
    if isinstance(x, SparseTensor):
        return "splyce"
    sps = sys.modules.get("scipy.sparse")
    if sps is not None and sps.issparse(x):
        return "scipy-array" if isinstance(x, sps.sparray) else "scipy-matrix"
    if type(x).__module__.split(".")[0] == "sparse" and (hasattr(x, "coords") or hasattr(x, "compressed_axes")):
        return "pydata"
    return "numpy"


def sparse_family(*xs) -> str:
    families = [f for f in map(operand_family, xs) if f != "numpy"]
    if "scipy-array" in families:
        return "scipy-array"
    return families[0] if families else "numpy"


def as_format(x, fmt: Format, name: str, threads: int = 1) -> Checked:
    """``x`` as a SparseTensor in ``fmt``, keeping its index width (scipy's int32 stays int32). ``asarray``
    validates it, so it is marked as checked for the kernel call."""
    fam = operand_family(x)
    if fam.startswith("scipy") and fmt.ndim == 2 and fmt.order == _CSR_ORDER:
        from splyce.dropin.stored_formats import scipy_to_csr

        x = scipy_to_csr(x, name)     # COO / LIL / DOK / BSR / DIA: scipy's own conversion, checked first
    wrapped = _csr_as_it_is(x, fmt, threads)
    if wrapped is not None:
        return wrapped
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
    """``as_format`` for the operands of one call, each distinct (operand, format) converted and checked once:
    ``einsum("ij,jk,ik->", L, L, L)`` passes one matrix three times."""
    done: dict = {}

    def convert(x, fmt: Format, name: str) -> Checked:
        key = (id(x), fmt)
        if key not in done:
            done[key] = (x, as_format(x, fmt, name, threads))     # x kept: its id stays unique during the call
        return done[key][1]
    return convert


def _csr_as_it_is(x, fmt: Format, threads: int = 1) -> Checked | None:
    """What ``asarray`` makes of an exact scipy CSR asked for in CSR (up to index widths), by a shorter road:
    its own buffers wrapped as they are after one native canonical-CSR scan; None (the general road) for
    anything else, including a CSR that fails the scan (then ``asarray`` words the error or canonicalizes)."""
    from splyce.native import array_objects, validation as native_validation

    if type(x) not in (_csr_types or scipy_csr_types()) or fmt.order != _CSR_ORDER or fmt.levels != CSR.levels:
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


def scipy_csr_types() -> tuple:
    """(csr_array, csr_matrix) once scipy.sparse is imported, else () (looked up per call: kept in a global)."""
    global _csr_types
    if not _csr_types:
        sps = sys.modules.get("scipy.sparse")
        if sps is not None:
            _csr_types = (sps.csr_array, sps.csr_matrix)
    return _csr_types


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


@record
class OperandInfo:
    """What the formulation choice looks at: the operand's family (numpy / scipy / pydata / splyce), shape
    and value dtype (None: not known, taken as one the native kernels support)."""

    family: str
    shape: tuple
    dtype: np.dtype | None = None
    layout: str | None = None       # a scipy / pydata operand's stored format ("csr", "coo", "bsr", "gcxs", ...)

    @classmethod
    def of(cls, x, family: str | None = None) -> "OperandInfo":
        from splyce.dropin.stored_formats import layout_of

        dtype = getattr(x, "dtype", None)
        family = family or operand_family(x)
        return cls(family, tuple(np.shape(x)), None if dtype is None else np.dtype(dtype), layout_of(x, family))

    @property
    def sparse(self) -> bool:
        return self.family != "numpy"


def rowwise_format(subs: str, order) -> Format:
    """The operand's levels in the global loop order: dense outermost, compressed below (CSR / CSF-like)."""
    return rowwise_format_cached(subs, tuple(order))


@functools.lru_cache(maxsize=256)
def rowwise_format_cached(subs: str, order: tuple) -> Format:
    # a Format validates itself when built (~80 us): once per (subscripts, loop order)
    from splyce.tensors.formats import Level

    perm = tuple(sorted(range(len(subs)), key=lambda d: order.index(subs[d])))
    kinds = ("compressed",) if len(subs) == 1 else ("dense",) + ("compressed",) * (len(subs) - 1)
    return Format(tuple(Level(k) for k in kinds), perm)



# -- SpMV's per-call fast path --------------------------------------------------------------------------------
_csr_types: tuple = ()          # (csr_array, csr_matrix) once scipy.sparse is imported
_INT_MAX = {np.dtype(np.int32): 2**31 - 1, np.dtype(np.int64): 2**63 - 1}
_CSR_ORDER = (0, 1)


@functools.cache
def _coo_array_type():
    import scipy.sparse as sps

    return sps.coo_array


def _raise_bad_product_operand(x) -> None:
    """Word what is wrong with a scipy CSR (or CSC) operand of a product (positions or coordinate range)."""
    from splyce.tensors.formats import Level

    width = x.indptr.dtype.itemsize * 8
    order = (1, 0) if x.format == "csc" else None
    fmt = Format(("dense", Level("compressed", unique=False, ordered=False)), order, width, width)
    check_buffers(x.shape, fmt, (None, x.indptr), (None, x.indices), x.data, "a")
    raise ValueError(f"a: malformed {x.format.upper()} index arrays")   # not reached: check_buffers names it


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
    fam = operand_family(x)
    if fam == "numpy":
        return np.asarray(x).reshape(-1)
    if fam.startswith("scipy"):
        return np.asarray(x.toarray()).reshape(-1)
    if fam == "pydata":
        return x.todense().reshape(-1)
    return x.to_numpy().reshape(-1)


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
    """scipy's result keeps a BSR left operand's format (``bsr op sparse``, ``bsr @ sparse``), a DOK's in a sum
    (``dok + sparse``; its difference and product are CSR), a DIA's with a DIA right operand (any op), the right
    operand 2-D scipy sparse."""
    fmt = getattr(a, "format", None)
    if fmt == "dia":    # a DIA's op with a DIA is a DIA (scipy 1.17: +, -, multiply, @); with any other, a CSR
        return getattr(b, "format", None) == "dia" and operand_family(a).startswith("scipy") \
            and operand_family(b).startswith("scipy")
    return ((fmt == "bsr" or fmt == "dok" and name == "add") and operand_family(a).startswith("scipy")
            and np.ndim(b) == 2 and operand_family(b).startswith("scipy"))


def _left_format(a, out, right_block: int):
    """A CSR result in the left operand's format, as scipy gives it: a BSR's blocks of ``a.blocksize`` (a
    product: its rows by ``right_block`` columns), a DOK."""
    import scipy.sparse as sps

    if a.format == "dok":
        out = out.todok()
    elif a.format == "dia":
        out = out.todia()
    else:
        rows, cols = a.blocksize
        out = out.tobsr(blocksize=(rows, right_block or cols))
    # scipy: the left operand's class (a bsr_matrix op a bsr_array is a bsr_matrix, and the reverse an array)
    array = isinstance(a, sps.sparray)
    if array != isinstance(out, sps.sparray):
        out = getattr(sps, f"{out.format}_{'array' if array else 'matrix'}")(out)
    return out


def _csc_first(a, b) -> bool:
    """A scipy CSC left operand against a 2-D scipy sparse one: scipy returns a CSC (it converts the right one)."""
    return (getattr(a, "format", None) == "csc" and operand_family(a).startswith("scipy") and np.ndim(b) == 2
            and operand_family(b).startswith("scipy"))


_nd = np.ndarray


def _canonical_csr(parts, shape):
    import scipy.sparse as sps

    return scipy_out.csr(sps.csr_array, *parts, shape, True)   # merged sorted rows: sorted, unique


def _raw_csr(x, fmt: str = "csr"):
    """``(data, indices, indptr)`` of a scipy CSR (``fmt="csc"``: CSC) whose buffers a kernel can read as
    they are (supported value dtype, native byte order, C-contiguous, consistent lengths), else None. Nothing
    is validated."""
    if not operand_family(x).startswith("scipy") or x.format != fmt or x.ndim != 2:
        return None
    data, indices, indptr = x.data, x.indices, x.indptr
    if data.dtype not in SUPPORTED_DTYPES or not data.dtype.isnative or indices.dtype != indptr.dtype:
        return None
    if indices.dtype not in (np.int32, np.int64) or not indices.dtype.isnative:
        return None
    if not all(arr.ndim == 1 and arr.flags.c_contiguous for arr in (data, indices, indptr)):
        return None
    if len(data) != len(indices) or len(indptr) != x.shape[0 if fmt == "csr" else 1] + 1:
        return None
    return data, indices, indptr
