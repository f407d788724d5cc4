"""Two scipy BSR operands combined into a BSR as scipy 1.17 returns them, on their blocks: elementwise ``+``, ``-``,
``multiply`` of two BSRs holding one canonical block pattern (block by block), and ``A @ B`` of two BSRs whose
inner block sizes agree (native/bsr_spgemm.py: scipy's ``bsr_matmat`` on the blocks, its buffers bit for bit).
No conversion to CSR and back (that road cost 2-3x scipy's time; scipy's ``tobsr`` alone costs more than its
product).
"""

from __future__ import annotations

import numpy as np

from splyce.dropin import scipy_out
from splyce.native.ir_text import VALUE


def elementwise(name: str, a, b):
    """``a + b`` / ``a - b`` / ``a.multiply(b)`` for two scipy BSRs of one shape and block shape, each in canonical
    form (block columns strictly increasing in every block row), as scipy's canonical ``bsr_binop`` computes them
    (native/bsr_binop.py): the union of the blocks in order, each block combined entry by entry against zeros
    where an operand lacks it, blocks whose entries all come out zero dropped, so the buffers are scipy's; a
    BSR of the left operand's class. None otherwise (another dtype or block shape, or buffers not canonical:
    then the general road, which refuses malformed ones)."""
    import scipy.sparse as sps
    from splyce.native import bsr_binop

    dtype = np.result_type(a.dtype, b.dtype)
    if (dtype not in VALUE or a.shape != b.shape or len(a.shape) != 2 or getattr(b, "format", None) != "bsr"
            or a.blocksize != b.blocksize):
        return None
    pa = _parts(a, "a", dtype)
    pb = pa if b is a else _parts(b, "b", dtype)
    R, C = a.blocksize
    out = bsr_binop.bsr_binop(name, pa, pb, a.shape[1] // C)
    if out is None:
        return None
    cls = sps.bsr_array if isinstance(a, sps.sparray) else sps.bsr_matrix     # scipy: the left operand's class
    return scipy_out.bsr(cls, out[2], out[1], out[0], a.shape)


def _parts(x, name: str, dtype):
    """(indptr, indices, data) of a scipy BSR as the native kernels read them (one native int32 / int64 index
    dtype, ``data`` C-contiguous ``(nnzb, R, C)`` of ``dtype``); ValueError naming the defect for what the kernels
    read unchecked (lengths, the block shape against the matrix's, ``indptr``'s ends)."""
    m, n = x.shape
    data, indptr, indices = np.asarray(x.data), np.asarray(x.indptr), np.asarray(x.indices)
    if data.ndim != 3 or 0 in data.shape[1:]:
        raise ValueError(f"{name}: a malformed BSR: data of shape {data.shape} (expected (blocks, R, C))")
    nnzb, R, C = data.shape
    if m % R or n % C:
        raise ValueError(f"{name}: a malformed BSR: blocks of {R} x {C} do not tile the shape {x.shape}")
    if indptr.ndim != 1 or len(indptr) != m // R + 1 or indptr.dtype.kind not in "iu":
        raise ValueError(f"{name}: a malformed BSR: indptr of {indptr.size} {indptr.dtype} entries, expected "
                         f"{m // R + 1} integers (block rows + 1)")
    if indices.ndim != 1 or len(indices) != nnzb or indices.dtype.kind not in "iu":
        raise ValueError(f"{name}: a malformed BSR: {indices.size} {indices.dtype} block column indices for "
                         f"{nnzb} blocks")
    if indptr[0] != 0 or indptr[-1] != nnzb:
        raise ValueError(f"{name}: a malformed BSR: indptr must start at 0 and end at the {nnzb} blocks, got "
                         f"{int(indptr[0])} ... {int(indptr[-1])}")
    index = np.dtype(np.int32) if indptr.dtype == indices.dtype == np.int32 else np.dtype(np.int64)
    indptr, indices = (np.ascontiguousarray(v, dtype=index) for v in (indptr, indices))
    return indptr, indices, np.ascontiguousarray(data, dtype=dtype)


def matmul(a, b):
    """``a @ b`` for two scipy BSRs whose inner block sizes agree (``a``'s blocks R x K, ``b``'s K x C), as
    scipy's ``bsr_matmat`` computes it: a BSR of blocks R x C in the left operand's class, the same buffers
    (block columns in order of first appearance, zero blocks kept, sums in scipy's order). None when the
    native kernel does not apply (a value dtype it lacks, other block sizes, 1 x 1 blocks): then the general
    road."""
    import scipy.sparse as sps
    from splyce.native import bsr_spgemm

    dtype = np.result_type(a.dtype, b.dtype)
    if (dtype not in VALUE or getattr(b, "format", None) != "bsr" or len(a.shape) != 2 or len(b.shape) != 2
            or a.shape[1] != b.shape[0] or a.blocksize[1] != b.blocksize[0]
            or a.blocksize[0] * a.blocksize[1] * b.blocksize[1] == 1):
        return None     # (1 x 1 blocks: scipy runs its CSR product, zero sums dropped; the general road is that)
    pa, pb = _parts(a, "a", dtype), _parts(b, "b", dtype)
    nb = b.shape[1] // pb[2].shape[2]
    out = bsr_spgemm.bsr_matmat(pa, pb, nb)
    if out is None:
        for x, (indptr, indices, _) in (("a", pa), ("b", pb)):
            if bool((np.diff(indptr) < 0).any()):
                raise ValueError(f"{x}: a malformed BSR: indptr decreases")
        kb = b.shape[0] // pb[2].shape[1]       # a's block columns are b's block rows
        if len(pa[1]) and (int(pa[1].max()) >= kb or int(pa[1].min()) < 0):
            raise ValueError(f"a: a malformed BSR: a block column index outside [0, {kb})")
        raise ValueError(f"b: a malformed BSR: a block column index outside [0, {nb})")
    indptr, indices, data = out
    cls = sps.bsr_array if isinstance(a, sps.sparray) else sps.bsr_matrix     # scipy: the left operand's class
    return scipy_out.bsr(cls, data, indices, indptr, (a.shape[0], b.shape[1]))
