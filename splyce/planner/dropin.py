"""Drop-ins for scipy.sparse / NumPy products on concrete operands.

Each call picks the formats and the formulation that is fast for the operands at hand, converts the
operands (no copy when they already are in that format), runs a kernel compiled once per signature and
cached here, and returns what scipy or NumPy returns for the same call: type family (scipy sparse array or
matrix, pydata-sparse, NumPy), shape and dtype.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from splyce.tensors.formats import CSR, SPARSE_VECTOR, Format
from splyce.runtime.arguments import Checked
from splyce.tensors.tensor import SparseTensor, asarray

# Gustavson products accumulate a dense block of rows at a time; this bounds that block's size.
DENSE_BLOCK_BYTES = 64 << 20

_kernels: dict = {}
_lock = threading.Lock()


def _kernel(name: str, fun, out_format=None):
    """A jitted function per (name, out_format), shared by all calls (the jit caches per signature)."""
    key = (name, out_format)
    kernel = _kernels.get(key)
    if kernel is None:
        from splyce.runtime.dispatcher import Jitted

        with _lock:
            kernel = _kernels.setdefault(key, Jitted(fun, out_format=out_format))
    return kernel


def _family(x) -> str:
    """Where an operand comes from: 'numpy', 'scipy-array', 'scipy-matrix', 'pydata' or 'splyce'."""
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


def _as_format(x, fmt: Format, name: str) -> Checked:
    """``x`` as a SparseTensor in ``fmt``, keeping its index width (scipy's int32 stays int32). ``asarray``
    validates it, so it is marked as checked for the kernel call."""
    fam = _family(x)
    if fam.startswith("scipy") and fmt.ndim == 2 and getattr(x, "format", None) in ("csr", "csc"):
        # scipy's own CSR <-> CSC conversion is a linear-time counting transpose; ours sorts
        wanted_kind = "csr" if fmt.order == (0, 1) else "csc"
        if x.format != wanted_kind:
            x = x.tocsr() if wanted_kind == "csr" else x.tocsc()
    if fam == "pydata":   # one conversion, straight into the wanted format (int64 coordinates: widths 64)
        return Checked(asarray(x, format=fmt.with_widths(64, 64), name=name))
    t = asarray(x, name=name)
    wanted = fmt.with_widths(t.format.pos_width, t.format.crd_width) if fmt.ndim == t.ndim else fmt
    return Checked(t if t.format == wanted else asarray(t, format=wanted, name=name))


def _sparse_result(csr_parts, shape, family):
    """Package (data, indices, indptr) as the family's 2-D sparse type."""
    import scipy.sparse as sps

    return _wrap_sparse(sps.csr_array(tuple(csr_parts), shape=shape), family)


def _wrap_sparse(result, family):
    """A kernel's sparse 2-D result (a scipy csr_array) in the operands' family."""
    if family == "scipy-matrix":
        import scipy.sparse as sps

        return sps.csr_matrix(result)
    if family == "pydata":
        import sparse

        return sparse.COO.from_scipy_sparse(result)
    return result


def _dense_to_csr(block: np.ndarray, index_dtype=np.int64):
    """CSR parts ``(data, indices, indptr)`` of a dense block, dropping zeros (as scipy's product does)."""
    from splyce.backend import native_compress

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


def matmul(a, b, *, out_format=None):
    fa, fb = _family(a), _family(b)
    if fa == fb == "numpy":
        return np.matmul(a, b)
    sa, sb = np.shape(a), np.shape(b)
    if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2):
        raise ValueError(f"matmul: operands must be 1-D or 2-D, got shapes {sa} and {sb}")
    if sa[-1] != sb[0]:
        raise ValueError(f"matmul: shapes {sa} and {sb} are not aligned ({sa[-1]} != {sb[0]})")
    family = _sparse_family(a, b)
    want_sparse = (out_format == "sparse" or isinstance(out_format, Format)) or (
        out_format is None and fa != "numpy" and fb != "numpy" and len(sa) == len(sb) == 2)
    if fa != "numpy" and fb != "numpy":
        return _sparse_sparse_matmul(a, b, sa, sb, family, want_sparse)
    if fa != "numpy":
        # sparse @ dense: rows of A (CSR) times rows of B, j innermost over contiguous memory
        A = _as_format(a, CSR if len(sa) == 2 else SPARSE_VECTOR, "a")
        out = _kernel("matmul", _mm)(A, np.ascontiguousarray(b))
    else:
        B = _as_format(b, CSR if len(sb) == 2 else SPARSE_VECTOR, "b")
        out = _kernel("matmul", _mm)(np.ascontiguousarray(a), B)
    return _dense_out(out, family, want_sparse)


def _dense_out(out, family, want_sparse):
    if not want_sparse or np.ndim(out) != 2:
        return out
    parts = _dense_to_csr(out, _index_dtype(out.size, max(out.shape)))
    return _sparse_result(parts, out.shape, family)


def _sparse_sparse_matmul(a, b, sa, sb, family, want_sparse):
    if len(sb) == 1 or (len(sb) == 2 and sb[1] == 1 and len(sa) == 2):
        # matrix times a sparse vector: scatter the vector once (O(n)), then a CSR row-times-vector kernel
        x = _to_dense_vector(b)
        A = _as_format(a, CSR if len(sa) == 2 else SPARSE_VECTOR, "a")
        out = _kernel("matmul", _mm)(A, x)
        if len(sb) == 2:
            out = out.reshape(-1, 1)
            return _dense_out(out, family, want_sparse)
        return _vector_out(out, family)
    if len(sa) == 1:
        return matmul(_to_dense_vector(a), b, out_format="dense")
    # Gustavson (row-wise) product: A CSR, B CSR, loops i, k, j; dense row accumulation per block of rows
    A = _as_format(a, CSR, "a")
    B = _as_format(b, CSR, "b")
    m, n = sa[0], sb[1]
    dtype = np.result_type(A.tensor.dtype, B.tensor.dtype)
    rows = max(1, min(m, DENSE_BLOCK_BYTES // max(1, n * dtype.itemsize)))
    if not want_sparse:
        if rows >= m:
            return _kernel("matmul", _mm)(A, B)
        raise MemoryError(f"matmul: a dense {m}x{n} result does not fit the dense block budget; "
                          "request a sparse result")
    if rows >= m:
        parts = _dense_to_csr(_kernel("matmul", _mm)(A, B), _index_dtype(m * n, max(m, n)))
    else:
        parts = _blocked_gustavson(A, B, rows, dtype)
        idx = _index_dtype(len(parts[0]), max(m, n))
        parts = (parts[0], parts[1].astype(idx, copy=False), parts[2].astype(idx, copy=False))
    return _sparse_result(parts, (m, n), family)


def _blocked_gustavson(A: Checked, B: Checked, rows: int, dtype):
    """Rows of A in blocks of ``rows`` (the last block padded with empty rows, so one kernel serves all)."""
    A = A.tensor
    m = A.shape[0]
    indptr = A.pos[1]
    datas, indices, counts = [], [], []
    kernel = _kernel("matmul", _mm)
    for start in range(0, m, rows):
        stop = min(start + rows, m)
        lo, hi = int(indptr[start]), int(indptr[stop])
        block_pos = np.empty(rows + 1, dtype=indptr.dtype)
        block_pos[: stop - start + 1] = indptr[start: stop + 1] - lo
        block_pos[stop - start + 1:] = hi - lo
        block = SparseTensor.from_buffers((rows, A.shape[1]), A.format, (None, block_pos),
                                          (None, A.crd[1][lo:hi]), A.values[lo:hi], validate=False)
        dense = kernel(Checked(block), B)[: stop - start]
        data, idx, ptr = _dense_to_csr(dense)
        datas.append(data)
        indices.append(idx)
        counts.append(np.diff(ptr))
    indptr_out = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=indptr_out[1:])
    return np.concatenate(datas), np.concatenate(indices), indptr_out


def _vector_out(out: np.ndarray, family: str):
    """A 1-D product of sparse operands, as scipy / pydata return it: sparse, zeros dropped."""
    if family.startswith("scipy"):
        import scipy.sparse as sps

        return sps.coo_array(out)
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


def _elementwise(name, fun, np_fun, a, b, out_format):
    fa, fb = _family(a), _family(b)
    if fa == fb == "numpy":
        return np_fun(a, b)
    sa, sb = np.shape(a), np.shape(b)
    if sa != sb:
        raise ValueError(f"{name}: shapes {sa} and {sb} differ (broadcasting is not supported)")
    family = _sparse_family(a, b)
    ndim = len(sa)
    subs = "abcd"[:ndim]
    shared = _rowwise_format(subs, list(subs))   # both operands in one storage order (CSR / CSF)

    def operand(x, label):
        return np.ascontiguousarray(x) if _family(x) == "numpy" else _as_format(x, shared, label)

    out = _kernel(name, fun, out_format)(operand(a, "a"), operand(b, "b"))
    if isinstance(out, np.ndarray):
        return out
    if ndim == 2:
        out = _wrap_sparse(out, family)
        # scipy returns COO for a sparse-times-dense elementwise product
        return out.tocoo() if "numpy" in (fa, fb) and family.startswith("scipy") else out
    return out.to_pydata() if family == "pydata" else out


def multiply(a, b, *, out_format=None):
    """scipy's ``a.multiply(b)``: a sparse result (CSR for 2-D) unless both operands are dense."""
    return _elementwise("multiply", _mul, np.multiply, a, b, out_format)


def add(a, b, *, out_format=None):
    return _elementwise("add", _add, np.add, a, b, out_format)


def subtract(a, b, *, out_format=None):
    return _elementwise("subtract", _sub, np.subtract, a, b, out_format)


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


def _rowwise_format(subs: str, order: list[str]) -> Format:
    """The operand's levels in the global loop order: dense outermost, compressed below (CSR / CSF-like)."""
    from splyce.tensors.formats import Level

    perm = tuple(sorted(range(len(subs)), key=lambda d: order.index(subs[d])))
    kinds = ("compressed",) if len(subs) == 1 else ("dense",) + ("compressed",) * (len(subs) - 1)
    return Format(tuple(Level(k) for k in kinds), perm)


def einsum(subscripts, *operands, out_format=None):
    """NumPy's einsum on sparse and dense operands (no ellipses; up to 4 operands of rank up to 4).

    Loops run in the order the indices first appear, and every sparse operand is stored in that order
    (CSR / CSF-like), so each index is iterated from one operand and looked up in the others: a row-wise
    (Gustavson-style) product with dense accumulation, no intersection where the expression needs none.
    """
    from splyce.tracer.tracer import parse_einsum

    if all(_family(x) == "numpy" for x in operands):
        return np.einsum(subscripts, *operands)
    family = _sparse_family(*operands)
    inputs, _ = parse_einsum(subscripts, len(operands))
    order = list(dict.fromkeys("".join(inputs)))
    ops = []
    for i, (x, subs) in enumerate(zip(operands, inputs)):
        if _family(x) == "numpy":
            ops.append(np.ascontiguousarray(x))
        else:
            ops.append(_as_format(x, _rowwise_format(subs, order), f"operand {i}"))
    out = _kernel("einsum:" + subscripts, _Einsum(subscripts), out_format)(*ops)
    if isinstance(out, np.ndarray):
        if family == "pydata" and out.ndim:
            import sparse

            return sparse.COO.from_numpy(out)      # NumPy's einsum on pydata arrays returns theirs
        return out
    if np.ndim(out) == 2 and hasattr(out, "tocsr"):
        return _wrap_sparse(out, family)
    return out.to_pydata() if family == "pydata" else out
