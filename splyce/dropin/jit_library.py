"""The drop-ins as the jit's kernel library: a jitted function that is one drop-in op on its arguments runs
the native kernel the drop-in would run (runtime/library.py asks this provider). The decision is the drop-in's
own: ``choose_*_formulation`` on the operands' types, so a drop-in call and the same op inside ``@splyce.jit``
take the same kernel. A native kernel serves the jit only where its results are the MLIR kernel's bit for bit
(the same summation order), or where ``fast_math=True`` allows another order."""

from __future__ import annotations

import contextlib

import numpy as np

from splyce.dropin import jit_products
from splyce.dropin.formulation import Formulation, choose_matmul_formulation
from splyce.dropin.operands import _native_values
from splyce.dropin.operands import OperandInfo
from splyce.native import memory_pool
from splyce.dropin.products import matmul
from splyce.runtime.library import LibraryCall, LibraryOp

def _info(t) -> OperandInfo:
    return OperandInfo("splyce" if t.is_sparse else "numpy", t.shape, np.dtype(t.dtype))


# The drop-ins' native kernels follow scipy's rules, the jit's MLIR kernels the sparsifier's: a union or
# intersection result stores every coiterated position where scipy drops zero results and keeps NaN times a
# missing entry, and SpGEMM / masked products / SDDMM differ in stored zeros or summation order. A native kernel
# serves the jit only where its results are the MLIR kernel's on every input, special values included (equal
# bits, but for the sign of a NaN, which depends on operand order in the hardware; tests/test_one_engine.py):
# SpMV, SpMM, SpMSpV, and the sparsifier's own variants of SpGEMM, masked SpGEMM, the masked sum (triangles)
# and SDDMM (every reached position kept, the sparsifier's summation and multiplication order; jit_products.py).
_SAME_PATTERN_OPS = ("multiply", "add", "subtract")


def _pool(nbytes: int):
    """NumPy allocating from the cache of freed buffers for a result of 1 MiB or more, as the drop-in calls
    and the MLIR kernel's dense results do; no handler switch below that."""
    return memory_pool.active() if nbytes >= memory_pool.POOL_MIN else contextlib.nullcontext()


def _csr_times_dense(args, threads: int):
    """The drop-in's SpMV / SpMM kernel on the jit's operands as they come: a checked CSR SparseTensor and a
    C-contiguous array of its dtype (``arguments.prepare`` made them so), with no per-call conversion."""
    from splyce.native import spmv

    a, x = args
    return spmv.csr_times_dense(a.pos[1], a.crd[1], a.values, x, threads)


def _same_pattern(name: str, args, out):
    """``name(a, b)`` of two CSR SparseTensors with identical positions as a scipy CSR of the traced result's
    format, or None when their positions differ."""
    from splyce.native import elementwise
    from splyce.tensors.tensor import SparseTensor

    a, b = args
    parts = [(x.values, x.crd[1], x.pos[1]) for x in (a, b)]
    with _pool(a.values.nbytes):
        got = elementwise.same_pattern(name, *parts, np.dtype(out.dtype), drop_zeros=False)
    if got is None or got[1].dtype.itemsize * 8 != out.format.crd_width \
            or got[2].dtype.itemsize * 8 != out.format.pos_width:
        return None
    vals, cols, indptr = got
    return SparseTensor.from_buffers(out.shape, out.format, [None, indptr], [None, cols], vals,
                                     validate=False).to_scipy()


def _spgemm_kept(args, out, threads: int):
    """``a @ b`` of two CSR SparseTensors as a scipy CSR of the traced result's format: the sparsifier's stored
    positions and values (every position reached, columns ascending, sums from +0.0; native/spgemm_sorted.py),
    or None (then the MLIR kernel runs) when the result does not fit the format's index widths."""
    import scipy.sparse as sps

    from splyce.native import spgemm

    a, b = args
    parts = [(x.values, x.crd[1], x.pos[1]) for x in (a, b)]
    with memory_pool.active():
        product = spgemm.spgemm(parts[0], parts[1], b.shape[1], np.dtype(out.dtype), threads, keep_zeros=True,
                                sort=True)
    # the traced format's index widths (64-bit operands give a 64-bit result; the kernel writes the narrowest)
    if product.indices.dtype.itemsize * 8 > out.format.crd_width \
            or product.indptr.dtype.itemsize * 8 > out.format.pos_width:
        return None                               # the result needs wider indices than the format's
    indices = product.indices.astype(f"int{out.format.crd_width}", copy=False)
    indptr = product.indptr.astype(f"int{out.format.pos_width}", copy=False)
    result = sps.csr_array((product.data, indices, indptr), shape=out.shape, copy=False)
    result.has_sorted_indices = True              # as written (scipy would otherwise check on first use)
    return result


def provide(op: LibraryOp, options) -> LibraryCall | None:
    if len({t.dtype for t in op.types}) != 1 or op.out.dtype != op.types[0].dtype:
        return None              # mixed or promoted value types: the jit's kernel (NumPy's promotion there)
    infos = [_info(t) for t in op.types]
    if op.op == "matmul" and not op.out.is_sparse:
        formulation = choose_matmul_formulation(*infos)
        if formulation not in (Formulation.SPARSE_TIMES_DENSE, Formulation.SCATTER_VECTOR):
            return None
        nbytes = int(np.prod(op.out.shape)) * np.dtype(op.out.dtype).itemsize
        product = _csr_times_dense if formulation is Formulation.SPARSE_TIMES_DENSE else \
            (lambda args, t: matmul(*args, threads=t))

        def run(args, t):
            with _pool(nbytes):
                return product(args, t)
        return LibraryCall(op, formulation.value, run)
    if op.op in _SAME_PATTERN_OPS and _native_values(*infos):
        # two CSRs holding the same positions (a structurally symmetric A and A.T, a matrix and new values):
        # one flat native pass keeping every position, the sparsifier's result exactly; other pairs return
        # None and run the MLIR kernel (runtime/library.py)
        name, out = op.op, op.out
        return LibraryCall(op, "same-pattern", lambda args, t: _same_pattern(name, args, out), guarded=True)
    if op.op == "matmul" and op.out.is_sparse and _native_values(*infos):
        # Gustavson's product keeping every reached position (zero sums too), each row written sorted: the
        # sparsifier's result; each entry sums from +0.0 over k in A's row order, as its i, k, j loop nest does
        out = op.out
        return LibraryCall(op, "gustavson-spa, every position kept, rows sorted",
                           lambda args, t: _spgemm_kept(args, out, t))
    if op.op == "einsum":        # masked SpGEMM, the masked sum (triangles), SDDMM: jit_products.py
        return jit_products.provide(op, infos)
    return None
