"""The drop-ins as the jit's kernel library: a jitted function that is one drop-in op on its arguments runs
the native kernel the drop-in would run (runtime/library.py asks this provider). The decision is the drop-in's
own: ``choose_*_formulation`` on the operands' types, so a drop-in call and the same op inside ``@splyce.jit``
take the same kernel. A native kernel serves the jit only where its results are the MLIR kernel's bit for bit
(the same summation order), or where ``fast_math=True`` allows another order."""

from __future__ import annotations

import numpy as np

from splyce.dropin.formulation import Formulation, _is_masked_sum, choose_matmul_formulation
from splyce.dropin.einsums import einsum
from splyce.dropin.operands import OperandInfo
from splyce.dropin.products import matmul
from splyce.runtime.library import LibraryCall, LibraryOp

def _info(t) -> OperandInfo:
    return OperandInfo("splyce" if t.is_sparse else "numpy", t.shape, np.dtype(t.dtype))


# The drop-ins' native kernels follow scipy's rules, the jit's MLIR kernels the sparsifier's: a union or
# intersection result stores every coiterated position where scipy drops zero results and keeps NaN times a
# missing entry, and SpGEMM / masked products / SDDMM differ in stored zeros or summation order. A native kernel
# serves the jit only where its results are the MLIR kernel's on every input, special values included (equal
# bits, but for the sign of a NaN, which depends on operand order in the hardware; tests/test_one_engine.py):
# SpMV, SpMM, SpMSpV and the masked sum (triangles).
def provide(op: LibraryOp, options) -> LibraryCall | None:
    if len({t.dtype for t in op.types}) != 1 or op.out.dtype != op.types[0].dtype:
        return None              # mixed or promoted value types: the jit's kernel (NumPy's promotion there)
    infos = [_info(t) for t in op.types]
    if op.op == "matmul" and not op.out.is_sparse:
        formulation = choose_matmul_formulation(*infos)
        if formulation not in (Formulation.SPARSE_TIMES_DENSE, Formulation.SCATTER_VECTOR):
            return None
        return LibraryCall(op, formulation.value, lambda args, t: matmul(*args, threads=t))
    if op.op == "einsum" and op.out.ndim == 0:
        inputs, output = op.subscripts.split("->")
        if not _is_masked_sum(inputs.split(","), output, infos):
            return None
        subscripts = op.subscripts
        return LibraryCall(op, "masked-sum", lambda args, t: einsum(subscripts, *args, threads=t))
    return None
