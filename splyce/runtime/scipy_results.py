"""scipy's result classes for a jitted call on scipy operands: a COO kept a COO where scipy keeps it, and the
``spmatrix`` / ``np.matrix`` classes for results of the matrix kind (tracer/matrix.py; the general call path
only: a cached call on the signature path has no scipy operand)."""

from __future__ import annotations

import sys

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


def with_kinds(results: list, kinds: tuple, tree) -> list:
    """``results`` given the class of their kind (tracer/matrix.py), in the order of the returned values
    (``tree``'s positions map the kernel's results to them): a sparse result of the matrix kind as its
    ``spmatrix`` class (``csr_matrix``, sharing the buffers), a dense 2-D one as an ``np.matrix`` view; of the
    array kind, a scipy ``sparray``."""
    positions = tree[2] if tree is not None and len(tree) > 2 else range(len(kinds))
    out = list(results)
    for k, p in enumerate(positions):
        if p < len(out) and kinds[k] == "matrix":
            out[p] = as_matrix(out[p])
    return out


def as_matrix(r):
    """A result as scipy / NumPy give the matrix kind: ``csr_matrix`` and kin (sharing the buffers), ``np.matrix``."""
    import numpy as np

    sps = sys.modules.get("scipy.sparse")
    if sps is not None and isinstance(r, sps.sparray) and r.ndim == 2:
        classes = {"csr": sps.csr_matrix, "csc": sps.csc_matrix, "coo": sps.coo_matrix}
        return classes[r.format](r, copy=False) if r.format in classes else sps.csr_matrix(r)
    if type(r) is np.ndarray and r.ndim == 2:
        return r.view(np.matrix)
    return r
