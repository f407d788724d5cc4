"""The jit's three-operand products on the native kernel library: masked SpGEMM ``(l @ l) * l``, the triangle
sum ``((l @ l.T) * l).sum()`` and SDDMM ``m * (x @ y.T)``, each computed as the sparsifier's kernel computes
the planned einsum, so the results are the MLIR kernel's bit for bit (jit_library.py asks ``provide``).

The plan's loop order ``o1 o2 o3`` fixes the sum's order, the einsum's operand order the order of each term's
multiplications (``(x0 * x1) * x2``, lowering/to_mlir.py). The native kernels loop rows ``o1``, then a CSR
row over ``o2``, then ``o3``: an operand is read in the role its subscripts give (``o1 o2``: A, ``o2 o3``: B,
``o1 o3``: the mask), and ``factors`` tells each kernel the roles in operand order.
"""

from __future__ import annotations

import numpy as np

from splyce.dropin.operands import _native_values
from splyce.dropin.operands import OperandInfo
from splyce.runtime.library import LibraryCall, LibraryOp, is_csr


def _roles(op: LibraryOp, names: dict, results: tuple) -> tuple[dict, str] | None:
    """``{role: operand index}`` and the roles in operand order, for ``names`` = ``{role: (letter positions
    in the loop order)}``; None unless every operand takes exactly one role and the output's letters are at
    one of the ``results`` positions in the loop order."""
    inputs, output = op.subscripts.split("->")
    inputs = inputs.split(",")
    order = op.order
    if order is None or len(order) != 3 or len(set(order)) != 3 or any(len(s) != 2 for s in inputs):
        return None
    want = {role: order[p] + order[q] for role, (p, q) in names.items()}
    roles = {}
    for n, subs in enumerate(inputs):
        hits = [role for role, w in want.items() if w == subs]
        if len(hits) != 1 or hits[0] in roles:
            return None
        roles[hits[0]] = n
    if len(roles) != 3 or output not in ["".join(order[p] for p in at) for at in results]:
        return None
    return roles, "".join(next(r for r, n in roles.items() if n == k) for k in range(3))


def _sddmm_roles(op: LibraryOp) -> tuple[dict, str] | None:
    """SDDMM's roles: the mask ``ij`` (the sparse operand), ``x`` = ``ik``, ``y`` = ``jk``, the result ``ij``,
    rows ``i`` outermost. Loops ``i, j, k`` and ``i, k, j`` (the planner takes either) sum each entry alike:
    over ``k`` ascending from the workspace's +0.0."""
    inputs, output = op.subscripts.split("->")
    inputs = inputs.split(",")
    mask = next(n for n, t in enumerate(op.types) if t.is_sparse)
    if op.order is None or any(len(s) != 2 for s in inputs) or inputs[mask] != output:
        return None
    i, j = output
    k = set(op.order) - {i, j}
    if len(op.order) != 3 or op.order[0] != i or len(k) != 1:
        return None
    k = k.pop()
    want = {"m": i + j, "x": i + k, "y": j + k}
    roles = {r: next((n for n, s in enumerate(inputs) if s == w and (n == mask) == (r == "m")), None)
             for r, w in want.items()}
    if None in roles.values() or len(set(roles.values())) != 3:
        return None
    return roles, "".join(next(r for r, n in roles.items() if n == q) for q in range(3))


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


def _masked(op: LibraryOp, roles: dict, factors: str) -> LibraryCall:
    from splyce.native import masked

    dtype, result, kept = np.dtype(op.out.dtype), _csr_result(op.out), masked.masked_kept

    def run(args, threads):
        m, a, b = (args[roles[r]] for r in "mab")
        return result(*kept(_parts(m), _parts(a), _parts(b), m.shape[1], dtype, threads, factors))
    return LibraryCall(op, "masked-gustavson, reached positions kept", run)


def _masked_sum(op: LibraryOp, roles: dict, factors: str) -> LibraryCall:
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
    return LibraryCall(op, "masked-sum", run)


def _sddmm(op: LibraryOp, roles: dict, factors: str) -> LibraryCall:
    from splyce.native import sddmm

    dtype, result, product = np.dtype(op.out.dtype), _csr_result(op.out), sddmm.sddmm

    def run(args, threads):
        m, x, y = (args[roles[r]] for r in "mxy")     # x, y: C-contiguous, of the dtype (arguments.prepare)
        return result(*product(_parts(m), x, y, dtype, threads, factors))
    return LibraryCall(op, "sddmm, every mask position kept", run)


def provide(op: LibraryOp, infos: list[OperandInfo]) -> LibraryCall | None:
    """The native call for a three-operand einsum of the jit (masked SpGEMM, the masked sum, SDDMM)."""
    if op.op != "einsum" or len(op.types) != 3 or not _native_values(*infos):
        return None
    sparse = [t.is_sparse for t in op.types]
    if all(sparse) and all(is_csr(t) for t in op.types):
        found = _roles(op, {"a": (0, 1), "b": (1, 2), "m": (0, 2)}, ((), (0, 2)))
        if found is None:
            return None
        if op.out.ndim == 0:
            return _masked_sum(op, *found)
        return _masked(op, *found) if is_csr(op.out) else None
    if sparse.count(True) == 1 and op.out.ndim == 2 and is_csr(op.out):
        found = _sddmm_roles(op)
        if found is None or not is_csr(op.types[found[0]["m"]]) or op.types[found[0]["x"]].shape[1] == 0:
            return None           # (no column: no term reaches a position, the MLIR kernel's empty result)
        return _sddmm(op, *found)
    return None
