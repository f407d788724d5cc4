"""scipy's result classes for a jitted call on scipy operands: a COO kept a COO where scipy keeps it, and the
``spmatrix`` classes where every scipy operand is one (the general call path only: a cached call on the
signature path has no scipy operand)."""

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


def as_matrix_where_scipy_gives_it(results: list, args) -> list:
    """``results`` with each scipy sparse array converted to its ``spmatrix`` class (``csr_matrix``, sharing the
    buffers) when the arguments' scipy operands are all ``spmatrix`` ones, as scipy computes ``csr_matrix``
    with ``csr_matrix`` (an ``sparray`` among them makes the result an ``sparray``, as the drop-ins do)."""
    sps = sys.modules.get("scipy.sparse")
    if sps is None or not any(isinstance(a, sps.spmatrix) for a in args) \
            or any(isinstance(a, sps.sparray) for a in args):
        return results
    classes = {"csr": sps.csr_matrix, "csc": sps.csc_matrix, "coo": sps.coo_matrix}
    return [classes[r.format](r, copy=False) if isinstance(r, sps.sparray) and r.format in classes else r
            for r in results]
