"""scipy's result classes for a jitted call on scipy operands: a COO kept a COO where scipy keeps it, and the
``spmatrix`` / ``np.matrix`` classes for results of the matrix kind (tracer/matrix.py; the general call path
only: a cached call on the signature path has no scipy operand)."""

from __future__ import annotations

import sys

import numpy as np

from splyce.runtime import arguments


def as_coo_where_scipy_keeps_it(sources, results: list, args) -> list:
    """``results`` with each CSR / CSC result whose ``sources`` entry names a scipy COO argument converted to
    a COO of that argument's class, as scipy returns it."""
    sps = sys.modules.get("scipy.sparse")
    inputs = [a for a in args if arguments.is_tensor(a)]   # the arguments that became inputs, in order
    out = list(results)
    for k, i in enumerate(sources):
        arg = inputs[i] if i is not None and i < len(inputs) else None
        if sps is not None and isinstance(arg, (sps.coo_array, sps.coo_matrix)) \
                and getattr(out[k], "format", None) in ("csr", "csc"):
            out[k] = out[k].tocoo() if isinstance(arg, sps.coo_array) else sps.coo_matrix(out[k])
    return out


def as_matrix(r):
    """A result as scipy / NumPy give the matrix kind: ``csr_matrix`` and kin (sharing the buffers), ``np.matrix``."""
    sps = sys.modules.get("scipy.sparse")
    if sps is not None and isinstance(r, sps.sparray) and r.ndim == 2:
        classes = {"csr": sps.csr_matrix, "csc": sps.csc_matrix, "coo": sps.coo_matrix}
        return classes[r.format](r, copy=False) if r.format in classes else sps.csr_matrix(r)
    if type(r) is np.ndarray and r.ndim == 2:
        return r.view(np.matrix)
    return r


def as_coo(r, matrix: bool):
    """A dense reduction of a sparse value (``A.max(axis=0)``) as scipy returns it: a COO of its nonzero
    entries, a ``coo_matrix`` for the matrix kind (2-D), else a ``coo_array`` (1-D for a 1-D result)."""
    import scipy.sparse as sps

    return sps.coo_matrix(np.asarray(r)) if matrix else sps.coo_array(np.asarray(r))


def pydata_class(operands):
    """pydata-sparse's ``COO`` or ``GCXS`` when an operand of that class is among ``operands`` (the first one
    found, possibly nested), else None."""
    pydata = sys.modules.get("sparse")
    if pydata is None or not hasattr(pydata, "SparseArray"):
        return None
    stack = list(operands)[::-1]
    while stack:
        x = stack.pop()
        if isinstance(x, pydata.SparseArray):
            return type(x)
        if isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
    return None


def as_pydata(r, cls):
    """A reduction of a sparse value as pydata returns it: a 0-d ``COO`` (its value the fill value) for a full
    reduction, else an array of the operand's class (``COO`` / ``GCXS``) of the reduction's nonzero entries."""
    import sparse as pydata

    array = np.asarray(r)
    if array.ndim == 0 or cls is not pydata.GCXS:
        return pydata.COO.from_numpy(array)
    return pydata.GCXS.from_numpy(array)


def any_scipy_sparse(operands) -> bool:
    """Whether a scipy.sparse object is among ``operands`` (a call's arguments, possibly nested)."""
    sps = sys.modules.get("scipy.sparse")
    if sps is None:
        return False
    stack = list(operands)
    while stack:
        x = stack.pop()
        if isinstance(x, (sps.spmatrix, sps.sparray)):
            return True
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return False
