"""The public operations. Inside ``@splyce.jit`` they record trace nodes; called on concrete operands
(NumPy, scipy.sparse, pydata-sparse, SparseTensor) they are drop-ins for the scipy / NumPy product of the
same name: they choose formats and a loop order, compile once per signature, and return what scipy would.
"""

from __future__ import annotations

from .tracer import tracer as T
from .tracer.tracer import Tracer


def _traced(*operands) -> bool:
    return any(isinstance(x, Tracer) for x in operands)


def matmul(a, b, *, out_format=None):
    """``a @ b``. Traced: a contraction node. Concrete: see ``splyce.dropin.matmul``."""
    if _traced(a, b):
        return T.matmul(a, b, out_format=out_format)
    from . import dropin

    return dropin.matmul(a, b, out_format=out_format)


def multiply(a, b, *, out_format=None):
    """Elementwise product (sparse x sparse is an intersection; the default result is sparse)."""
    if _traced(a, b):
        return T.multiply(a, b, out_format=out_format)
    from . import dropin

    return dropin.multiply(a, b, out_format=out_format)


def einsum(subscripts, *operands, out_format=None):
    """NumPy's einsum (no ellipses, up to 4 operands of rank up to 4)."""
    if _traced(*operands):
        return T.einsum(subscripts, *operands, out_format=out_format)
    from . import dropin

    return dropin.einsum(subscripts, *operands, out_format=out_format)


def add(a, b, *, out_format=None):
    """Elementwise sum (a union of sparse operands)."""
    if _traced(a, b):
        return T.add(a, b, out_format=out_format)
    from . import dropin

    return dropin.add(a, b, out_format=out_format)


def subtract(a, b, *, out_format=None):
    if _traced(a, b):
        return T.subtract(a, b, out_format=out_format)
    from . import dropin

    return dropin.subtract(a, b, out_format=out_format)
