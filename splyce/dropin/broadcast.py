"""The drop-in ``multiply`` / ``add`` / ``subtract`` of a sparse matrix and an operand of another shape: a
scalar, or a row or column vector, with scipy.sparse's result for the same call (class, dtype, stored
positions, values bit for bit).

scipy's rules (``_cs_matrix.multiply``, ``_base.__add__`` / ``__sub__``), followed here:

- ``multiply`` by a scalar (a number, a 0-d array or any dense array of one element): the sparse operand's
  positions, its values times the scalar, in the operand's own class (CSR stays CSR, COO stays COO, ...;
  a one-element array makes COO, DIA, LIL and DOK a CSR, as scipy's ``tocsr().multiply``).
- ``multiply`` by a dense row (``(n,)``, ``(1, n)``) or column (``(m, 1)``): the matrix's stored positions
  times the vector's entry (a NaN or Inf of the vector against a missing entry is not multiplied), as a COO
  (a DIA stays a DIA; its stored count may differ from scipy's, which keeps its diagonals' padding).
  Computed by the einsum kernel ``ij,j->ij`` / ``ij,i->ij`` in O(nnz), never by expanding the vector.
- ``multiply`` by a sparse row or column: scipy multiplies by the diagonal matrix of the densified vector, so
  it is the dense rule with zero products dropped, as a CSR (a row against a CSC or BSR: that format).
- ``add`` / ``subtract`` of a scalar: zero gives a copy (``0 - A`` the negation); any other scalar raises
  ``NotImplementedError``, as scipy (the result would be dense).
- ``add`` / ``subtract`` of a dense operand: broadcast to the matrix's shape, a dense result.
- Anything else (a broadcast that would grow the sparse operand, a sparse row added to a matrix) raises
  ``ValueError`` naming both shapes.
"""

from __future__ import annotations

import numpy as np

from splyce.dropin.operands import _to_dense_vector, operand_family

# The same-shape ops and einsum that a broadcast form reduces to, bound by splyce.dropin's __init__ once they
# are defined (they use these rules in turn: binding them keeps the import graph free of cycles).
_OPS: dict = {}


def bind(**ops) -> None:
    """Set the ops the broadcast forms call: ``multiply``, ``add``, ``subtract`` and ``einsum``."""
    _OPS.update(ops)

_SCALAR_ADD_ERRORS = {   # scipy's words, by (op, sparse operand first)
    ("add", True): "adding a nonzero scalar to a sparse array is not supported",
    ("add", False): "adding a nonzero scalar to a sparse array is not supported",
    ("subtract", True): "subtracting a nonzero scalar from a sparse array is not supported",
    ("subtract", False): "subtracting a sparse array from a nonzero scalar is not supported",
}


def is_scalar(x) -> bool:
    """scipy's ``isscalarlike``: a number or a 0-d array."""
    return np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0)


def elementwise(name: str, a, b, sparse_a: bool, sparse_b: bool, out_format, threads: int):
    """``name(a, b)`` for operands whose shapes differ (or a one-element dense factor), at least one sparse;
    raises ValueError when scipy would not broadcast them either."""
    if sparse_a and sparse_b:
        if name == "multiply":
            # one sparse element is a scalar to scipy: the right one's element, or the left one's stored sum
            if np.shape(b) in ((1, 1), (1,)):
                return _as_asked(scaled(_as_scipy_keeps(a, _KEEPS_FOR_SPARSE), _element(b)), out_format)
            if np.shape(a) in ((1, 1), (1,)):
                return _as_asked(scaled(_as_scipy_keeps(b, _KEEPS_FOR_SPARSE), _stored_sum(a)), out_format)
            out = _times_sparse_vector(a, b, out_format, threads)
            if out is not None:
                return out
        raise _shape_error(name, a, b)
    s, o, sparse_first = (a, b, True) if sparse_a else (b, a, False)
    if is_scalar(o) or (name == "multiply" and np.size(o) == 1 and np.ndim(o) <= 2):
        value = o if is_scalar(o) else np.asarray(o).flat[0]   # scipy's scalar: the one element
        if name == "multiply":
            if not is_scalar(o):
                s = _as_scipy_keeps(s, _KEEPS_FOR_DENSE)
            return _as_asked(scaled(s, value), out_format)
        return _as_asked(_plus_scalar(name, s, value, sparse_first), out_format)
    if np.ndim(s) != 2:
        raise _shape_error(name, a, b)
    if name == "multiply":
        out = _times_dense_vector(s, np.asarray(o), out_format, threads)
        if out is None:
            raise _shape_error(name, a, b)
        return out
    # a sum or difference with a dense operand is dense: the operand broadcast to the matrix's shape (the
    # result's size), then the same-shape drop-in
    try:
        full = np.ascontiguousarray(np.broadcast_to(np.asarray(o), np.shape(s)))
    except ValueError:
        raise _shape_error(name, a, b) from None
    pair = (s, full) if sparse_first else (full, s)
    return _OPS[name](*pair, out_format=out_format, threads=threads)


# scipy formats whose multiply keeps their class for a one-element dense / sparse operand; the others multiply
# as a CSR (``tocsr().multiply``), and so give a CSR
_KEEPS_FOR_DENSE = ("csr", "csc", "bsr", "dia")
_KEEPS_FOR_SPARSE = ("csr", "csc", "bsr")


def _as_scipy_keeps(s, keeps):
    fmt = getattr(s, "format", None)
    return s.tocsr() if isinstance(fmt, str) and fmt not in keeps and hasattr(s, "tocsr") else s


def _element(x):
    """The one element of a one-element sparse operand (scipy: ``toarray()[0, 0]``)."""
    return x.toarray().flat[0] if hasattr(x, "toarray") else _to_dense_vector(x)[0]


def _stored_sum(x):
    """A one-element sparse operand's stored values summed (scipy: ``data.sum()``, 0 when none is stored)."""
    data = getattr(x, "data", None)
    if isinstance(data, np.ndarray):
        return data.sum()
    return _to_dense_vector(x).sum()


def _shape_error(name, a, b) -> ValueError:
    return ValueError(f"{name}: shapes {np.shape(a)} and {np.shape(b)} cannot be broadcast together (a sparse "
                      "matrix takes a scalar, a row or a column vector, or its own shape)")


def _as_asked(result, out_format):
    """A scalar rule's scipy-style result in the asked-for ``out_format`` (None / "sparse": as it is)."""
    if out_format is None or out_format == "sparse":
        return result
    if out_format == "dense":
        return result.toarray() if hasattr(result, "toarray") else result.todense()
    from splyce.tensors.tensor import asarray

    return asarray(result, format=out_format)


def scaled(s, value):
    """``s`` times the scalar ``value``: the same positions, values ``np.multiply(values, value)`` (NumPy's
    promotion, as scipy's ``_mul_scalar``), in ``s``'s own class."""
    return with_values(s, lambda v: np.multiply(v, value), lambda x: x * value)


def negated(s):
    """``-s`` as scipy's ``-A`` (``np.negative`` of the values: a NaN's sign flips too)."""
    if s.dtype == np.bool_:
        raise NotImplementedError("negating a boolean sparse array is not supported")
    return with_values(s, np.negative, lambda x: -x)


def with_values(s, values_fn, own_fn):
    """``s`` with ``values_fn`` of its values at the same positions, the index arrays copied (scipy's
    ``_with_data``), in ``s``'s own class; ``own_fn(s)`` for classes whose own operator keeps their class."""
    from splyce.tensors.tensor import SparseTensor

    if isinstance(s, SparseTensor):
        return s.with_values(values_fn(s.values))
    fmt = getattr(s, "format", None)
    cls = type(s)
    if fmt in ("csr", "csc", "bsr"):
        return cls((values_fn(s.data), s.indices.copy(), s.indptr.copy()), shape=s.shape)
    if fmt == "coo":
        return cls((values_fn(s.data), tuple(c.copy() for c in s.coords)), shape=s.shape)
    if fmt == "dia":
        return cls((values_fn(s.data), s.offsets.copy()), shape=s.shape)
    return own_fn(s)     # LIL, DOK, pydata-sparse: their own operator keeps their class


def _plus_scalar(name: str, s, value, sparse_first: bool):
    if value != 0:
        raise NotImplementedError(_SCALAR_ADD_ERRORS[(name, sparse_first)])
    if name == "subtract" and not sparse_first:
        return negated(s)
    return s.copy()


def _vector_letter(matrix_shape, vector_shape) -> str | None:
    """``"j"`` when ``vector_shape`` is a row of a ``matrix_shape`` matrix, ``"i"`` a column, else None."""
    m, n = matrix_shape
    if vector_shape in ((n,), (1, n)):
        return "j"
    if vector_shape == (m, 1):
        return "i"
    return None


def _times_dense_vector(s, v: np.ndarray, out_format, threads: int):
    """A sparse matrix times a dense row or column at its stored positions (einsum kernel, O(nnz)); scipy's
    result is a COO. None when ``v`` is neither."""
    letter = _vector_letter(np.shape(s), v.shape)
    if letter is None:
        return None
    sparse_out = out_format is None or out_format == "sparse"
    out = _OPS["einsum"](f"ij,{letter}->ij", s, np.ascontiguousarray(v.reshape(-1)),
                        out_format="sparse" if sparse_out else out_format, threads=threads)
    if out_format is None and operand_family(s).startswith("scipy"):
        # scipy: a COO, but DIA multiplies its diagonals and stays a DIA
        return out.todia() if s.format == "dia" else out.tocoo()
    return out


def _times_sparse_vector(a, b, out_format, threads: int):
    """A sparse matrix times a sparse row or column vector (either side): scipy's product with the vector's
    diagonal matrix, i.e. the dense rule with zero products dropped; a CSR (a CSC for a row against a CSC
    matrix). None when neither operand is a vector of the other's shape."""
    for s, v in ((a, b), (b, a)):
        if np.ndim(s) != 2:
            continue
        letter = _vector_letter(np.shape(s), tuple(np.shape(v)))
        if letter is None:
            continue
        pydata = operand_family(s) == "pydata"
        dense = _to_dense_vector(v)
        out = _OPS["einsum"](f"ij,{letter}->ij", s.to_scipy_sparse() if pydata else s, dense, out_format="sparse",
                            threads=threads)
        out.eliminate_zeros()                 # our own result: scipy's product stores no zero
        if letter == "j" and getattr(s, "format", None) in ("csc", "bsr"):
            out = out.tocsc() if s.format == "csc" else out.tobsr(blocksize=s.blocksize)
        if pydata:
            import sparse

            out = sparse.COO.from_scipy_sparse(out)
        return _as_asked(out, out_format)
    return None
