"""scipy.sparse routines on traced values, run by scipy itself between kernels (host steps, as NumPy's dense
linear algebra in tracer/linalg.py; planner/host_steps.py cuts the program there):

- ``sp.tril(a, k)`` / ``sp.triu(a, k)``: the entries with ``i - j >= k`` (``<= k``), a sparse result in the
  operand's format (CSR or CSC) and class (``spmatrix`` in, ``spmatrix`` out), whatever ``format=`` asks
  (scipy's default is COO: the same entries). The values are the operand's, copied: exact.
- ``scipy.sparse.linalg.spsolve(a, b)``: scipy's SuperLU (UMFPACK where scipy uses it) on the host, a dense
  ``b``, a dense result;
- ``scipy.sparse.linalg.spsolve_triangular(a, b, lower=True, unit_diagonal=False)``: scipy's own solve on the
  operand (a CSR / CSC copy in sorted index order, so a solve on an input with unsorted indices sums each row
  in another order than scipy's on that input: a few ulps), a dense ``b`` (1-D or 2-D), a dense result.

The sparse operand crosses the cut as a scipy array built from the kernel's result or the call's operand (no
densifying); a sparse result is handed to the kernels after it in the traced format.
"""

from __future__ import annotations

import numpy as np

from splyce.tracer import linalg
from splyce.tracer.base import TraceError, Tracer, _node
from splyce.tracer.ir import Node, TensorType


def _tril(A, k=0):
    import scipy.sparse as sps

    return sps.tril(A, k=k, format=A.format)


def _triu(A, k=0):
    import scipy.sparse as sps

    return sps.triu(A, k=k, format=A.format)


def _spsolve_triangular(A, b, lower=True, unit_diagonal=False):
    import scipy.sparse.linalg as spla

    return spla.spsolve_triangular(A, b, lower=lower, unit_diagonal=unit_diagonal)


def _spsolve(A, b, permc_spec=None, use_umfpack=True):
    import scipy.sparse.linalg as spla

    return spla.spsolve(A, b, permc_spec=permc_spec, use_umfpack=use_umfpack)


HOST = {"scipy.sparse.tril": _tril, "scipy.sparse.triu": _triu,
        "scipy.sparse.linalg.spsolve_triangular": _spsolve_triangular, "scipy.sparse.linalg.spsolve": _spsolve}
linalg.FUNCTIONS.update(HOST)      # evaluated by tracer/linalg.py's evaluate, between kernels


def _sparse_operand(a, name: str) -> Node:
    node = _node(a, name)
    if not node.type.is_sparse or node.type.ndim != 2:
        raise TraceError(f"{name} of a dense traced value: scipy's {name.rsplit('.', 1)[-1]} takes a sparse matrix; "
                         "for a dense array write np.tril(a, k) / np.triu(a, k)")
    return node


def _result_format(node: Node):
    from splyce.tensors.formats import CSC, CSR

    fmt = node.type.format
    return fmt if fmt.with_widths(64, 64) in (CSR, CSC) else CSR.with_widths(64, 64)


def _host(name: str, args: tuple, statics: tuple, slots: tuple, t: TensorType) -> Tracer:
    return Tracer(Node("host", args, (name, statics, slots, 0, 1), t))


def triangle(which: str, A, k=0, format=None):
    """``sp.tril`` / ``sp.triu`` of a traced sparse matrix (``format`` is scipy's; the traced result keeps the
    operand's CSR / CSC: the same entries)."""
    name = f"scipy.sparse.{which}"
    if isinstance(k, Tracer) or not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TraceError(f"{name}: k must be a Python int inside @splyce.jit, not {type(k).__name__}")
    node = _sparse_operand(A, name)
    t = TensorType(node.type.shape, node.type.dtype, _result_format(node))
    return _host(name, (node,), (("k", int(k)),), ("A",), t)


def _solve_operands(A, b, name: str, not_square: str):
    """A solve's traced sparse square ``A`` and dense right-hand side ``b`` (1-D or 2-D, ``A``'s rows), with
    scipy's own message for a matrix that is not square; ``(A's node, b's node, rows)``."""
    node = _sparse_operand(A, name)
    rows, cols = node.type.shape
    if rows != cols:
        raise ValueError(not_square.format(node.type.shape))      # scipy's own words
    rhs = _node(b, name)
    if rhs.type.is_sparse:
        raise TraceError(f"{name}: a sparse right-hand side is not supported inside @splyce.jit; write b.toarray()")
    if rhs.type.ndim not in (1, 2) or rhs.type.shape[0] != rows:
        raise ValueError(f"{name}: b of shape {rhs.type.shape} does not match A of shape {node.type.shape}")
    return node, rhs, rows


def spsolve_triangular(A, b, lower=True, overwrite_A=False, overwrite_b=False, unit_diagonal=False):
    name = "scipy.sparse.linalg.spsolve_triangular"
    node, rhs, rows = _solve_operands(A, b, name, "A must be a square matrix but its shape is {}.")
    for flag, value in (("lower", lower), ("unit_diagonal", unit_diagonal)):
        if not isinstance(value, (bool, np.bool_)):
            raise TraceError(f"{name}: {flag} must be a Python bool inside @splyce.jit")
    import scipy.sparse as sps

    example = _spsolve_triangular(sps.csr_array(sps.eye(rows, dtype=node.type.dtype)),
                                  np.ones(rhs.type.shape, rhs.type.dtype))      # scipy's result dtype
    t = TensorType(rhs.type.shape, example.dtype.name, None)
    statics = (("lower", bool(lower)), ("unit_diagonal", bool(unit_diagonal)))
    return _host(name, (node, rhs), statics, ("A", "b"), t)


def spsolve(A, b, permc_spec=None, use_umfpack=True):
    """``scipy.sparse.linalg.spsolve`` of a traced sparse matrix and a dense right-hand side: scipy's SuperLU
    (or UMFPACK) on the host, a dense result as scipy's."""
    name = "scipy.sparse.linalg.spsolve"
    node, rhs, rows = _solve_operands(A, b, name, "matrix must be square (has shape {})")
    if permc_spec is not None and not isinstance(permc_spec, str) or not isinstance(use_umfpack, bool):
        raise TraceError(f"{name}: permc_spec must be a string or None and use_umfpack a bool inside @splyce.jit")
    import scipy.sparse as sps

    example = _spsolve(sps.csc_array(sps.eye(rows, dtype=node.type.dtype)), np.ones(rhs.type.shape, rhs.type.dtype),
                       permc_spec, use_umfpack)
    t = TensorType(tuple(int(d) for d in np.shape(example)), example.dtype.name, None)
    statics = (("permc_spec", permc_spec), ("use_umfpack", use_umfpack))
    return _host(name, (node, rhs), statics, ("A", "b"), t)


__all__ = ["HOST", "spsolve", "spsolve_triangular", "triangle"]
