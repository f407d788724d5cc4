"""The jit's three-operand products on the native kernel library: masked SpGEMM ``(l @ l) * l``, the triangle
sum ``((l @ l.T) * l).sum()`` and SDDMM ``m * (x @ y.T)``, each computed as the sparsifier's kernel computes
the planned einsum, so the results are the MLIR kernel's bit for bit (jit_library.py asks ``provide``).

The operands' roles and the order of each term's multiplications (``factors``) are chosen in
planner/kernel_choice.py (``jit_choice``); this module builds the call.
"""

from __future__ import annotations

import numpy as np

from splyce.planner.kernel_choice import Formulation, JitChoice, LibraryOp
from splyce.runtime.library import LibraryCall


def _parts(t):
    return (t.values, t.crd[1], t.pos[1])


def _csr_result(out):
    """A function of the kernel's CSR parts giving a scipy CSR of the traced result's format (index widths
    widened to it), or None when they need more than its widths (then the MLIR kernel runs). Built over the
    kernel's buffers without scipy's constructor checks (``scipy_out.csr``: the mask's positions, canonical)."""
    import scipy.sparse as sps

    from splyce.dropin import scipy_out

    crd_width, pos_width, shape, csr_array = out.format.crd_width, out.format.pos_width, out.shape, sps.csr_array
    crd_dtype, pos_dtype = np.dtype(f"int{crd_width}"), np.dtype(f"int{pos_width}")

    def result(vals, cols, indptr):
        if cols.dtype.itemsize * 8 > crd_width or indptr.dtype.itemsize * 8 > pos_width:
            return None
        return scipy_out.csr(csr_array, vals, cols.astype(crd_dtype, copy=False),
                             indptr.astype(pos_dtype, copy=False), shape, True)
    return result


def _masked(op: LibraryOp, roles: dict, factors: str, label: str) -> LibraryCall:
    from splyce.native import masked

    dtype, result, kept = np.dtype(op.out.dtype), _csr_result(op.out), masked.masked_kept

    def run(args, threads):
        m, a, b = (args[roles[r]] for r in "mab")
        return result(*kept(_parts(m), _parts(a), _parts(b), m.shape[1], dtype, threads, factors))
    return LibraryCall(op, label, run)


def _masked_sum(op: LibraryOp, roles: dict, factors: str, label: str) -> LibraryCall:
    from splyce.native import masked_sum, masked_sum_checked

    dtype = np.dtype(op.out.dtype)
    factors = factors.replace("m", "c")
    general, trusted = masked_sum.masked_sum, masked_sum_checked.masked_sum_trusted
    widths = {w for t in op.types for w in (t.format.pos_width, t.format.crd_width)}
    index = np.dtype(f"int{widths.pop()}") if len(widths) == 1 else None
    # one thread, one index width: the drop-in's one native call (sample, count or sum) without its checks, the
    # operands being validated tensors; the same bits as ``masked_sum`` (the sum in ``factors``' order)
    one_call = index is not None and masked_sum_checked.trusted_supported(dtype, index)

    def run(args, threads):
        a, b, c = (args[roles[r]] for r in "abm")
        # floats split only where no bit changes: a 0/1 pattern (triangle counting) is counted, branch-free,
        # each term exactly one, the sum the count (``exact_only``); other float sums stay on one thread (a
        # split would reassociate them); integers split (the same sum)
        if one_call and threads == 1:
            return trusted((a.values, a.crd[1], a.pos[1]), (b.values, b.crd[1], b.pos[1]),
                           (c.values, c.crd[1], c.pos[1]), c.shape[0], c.shape[1], b is not a,
                           c is not a and c is not b, factors)
        return general(_parts(a), _parts(b), _parts(c), c.shape[1], dtype, threads, factors=factors,
                       count_ones=True, exact_only=dtype.kind not in "iu")
    return LibraryCall(op, label, run)


def _sddmm(op: LibraryOp, roles: dict, factors: str, label: str) -> LibraryCall:
    from splyce.native import sddmm

    dtype, result, product = np.dtype(op.out.dtype), _csr_result(op.out), sddmm.sddmm

    def run(args, threads):
        m, x, y = (args[roles[r]] for r in "mxy")     # x, y: C-contiguous, of the dtype (arguments.prepare)
        return result(*product(_parts(m), x, y, dtype, threads, factors))
    return LibraryCall(op, label, run)


def call(op: LibraryOp, choice: JitChoice) -> LibraryCall | None:
    """The native call for a three-operand einsum of the jit that planner/kernel_choice.py's ``jit_choice``
    chose (masked SpGEMM, the masked sum, SDDMM), its operands in the roles chosen there."""
    build = {Formulation.MASKED_GUSTAVSON: _masked, Formulation.MASKED_SUM: _masked_sum,
             Formulation.SDDMM: _sddmm}.get(choice.formulation)
    return None if build is None else build(op, dict(choice.roles), choice.factors, choice.label)
