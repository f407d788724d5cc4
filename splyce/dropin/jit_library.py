"""The drop-ins as the jit's kernel library: a jitted function that is one drop-in op on its arguments runs
the native kernel the drop-in would run (runtime/library.py asks this provider). The decision is the drop-in's
own: ``choose_*_formulation`` on the operands' types, so a drop-in call and the same op inside ``@splyce.jit``
take the same kernel. A native kernel serves the jit only where its results are the MLIR kernel's bit for bit
(the same summation order), or where ``fast_math=True`` allows another order."""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from splyce.dropin import jit_products
from splyce.dropin.formulation import Formulation, choose_matmul_formulation
from splyce.dropin.operands import _native_values
from splyce.dropin.operands import OperandInfo
from splyce.native import memory_pool
from splyce.native.spmv import SPMM_FIXED
from splyce.dropin.products import matmul, scatter_tensor, spmspv_tensor, spmv_tensor, spmv_direct
from splyce.native import spmv_scatter
from splyce.runtime.library import LibraryCall, LibraryOp, is_csr

def _info(t) -> OperandInfo:
    return OperandInfo("splyce" if t.is_sparse else "numpy", t.shape, np.dtype(t.dtype))


# The drop-ins' native kernels follow scipy's rules, the jit's MLIR kernels the sparsifier's: a union or
# intersection result stores every coiterated position where scipy drops zero results and keeps NaN times a
# missing entry, and SpGEMM / masked products / SDDMM differ in stored zeros or summation order. A native kernel
# serves the jit only where its results are the MLIR kernel's on every input, special values included (equal
# bits, but for the sign of a NaN, which depends on operand order in the hardware; tests/runtime/test_one_engine.py):
# SpMV, SpMM, SpMSpV, the elementwise ops through their ``keep_zeros`` variants (native/elementwise/kept.py: the
# sparsifier's coiteration on the drop-in's kernels), and the sparsifier's own variants of SpGEMM, masked
# SpGEMM, the masked sum (triangles) and SDDMM (every reached position kept, the sparsifier's summation and
# multiplication order; jit_products.py).
_ELEMENTWISE = ("multiply", "add", "subtract")


def _pool(nbytes: int):
    """NumPy allocating from the cache of freed buffers for a result of 1 MiB or more, as the drop-in calls
    and the MLIR kernel's dense results do; no handler switch below that."""
    return memory_pool.active() if nbytes >= memory_pool.POOL_MIN else contextlib.nullcontext()


def _csr_times_dense(args, threads: int):
    """The drop-in's SpMV / SpMM kernel on the jit's operands as they come: a checked CSR SparseTensor and a
    C-contiguous array of its dtype (``arguments.prepare`` made them so), with no per-call conversion."""
    a, x = args
    y = spmv_tensor(a, x, threads)      # the drop-in's fast-path kernel on the tensor's buffers
    if y is None:                       # a dtype, column count or thread split that path does not take
        from splyce.native import spmv

        y = spmv.csr_times_dense(a.pos[1], a.crd[1], a.values, x, threads)
    return y


def _csr_times_sparse_vector(args, threads: int):
    """SpMSpV: the drop-in's scatter and fast-path SpMV on the tensors' buffers (``spmspv_tensor``), else the
    drop-in's general path on them."""
    y = spmspv_tensor(*args, threads)
    return matmul(*args, threads=threads) if y is None else y


def _coiterated(name: str, transposed, out, columns: bool = False):
    """The run of ``name(a, b)`` on two CSR SparseTensors with the sparsifier's semantics: a scipy CSR of the
    traced result's format, or None (then the MLIR kernel runs) when the result's index widths are not the
    format's. A transposed operand (``a.T``) is read as its argument's buffers, a CSC of the transpose: the
    drop-in's one pass with a cursor per column (``A * A.T``), no re-store. ``columns``: operands and result
    in column order (``a.T * b``): the same on the transposes, whose CSR buffers the CSCs are, and the result
    a CSC (the sparsifier's column-major coiteration is the transposes' row-major one, term for term). Modules
    bound once here: the call runs with cold caches in a loop of other work, where each import statement costs
    microseconds."""
    import scipy.sparse as sps

    from splyce.dropin import scipy_out
    from splyce.native.elementwise import kept

    dtype, shape = np.dtype(out.dtype), out.shape
    result_class, frame = (sps.csc_array, shape[::-1]) if columns else (sps.csr_array, shape)
    widths = (out.format.crd_width, out.format.pos_width)
    merge = kept.with_csc if any(transposed) else kept.rows
    extra = frame if any(transposed) else ()
    swap = transposed[0]              # a.T * b == b * a.T bit for bit (IEEE products and sums commute)

    def run(args, threads: int):
        a, b = args
        if swap:
            a, b = b, a
        with _pool(a.values.nbytes + b.values.nbytes):
            vals, cols, indptr = merge(name, (a.values, a.crd[1], a.pos[1]), (b.values, b.crd[1], b.pos[1]),
                                       dtype, *extra, threads=threads)
        if (cols.dtype.itemsize * 8, indptr.dtype.itemsize * 8) != widths:
            return None
        return scipy_out.csr(result_class, vals, cols, indptr, shape, True)
    return run


def _elementwise_call(op: LibraryOp, options) -> LibraryCall | None:
    """Two CSRs (one of them maybe a transposed argument) with a CSR result of their dtype: the drop-in's
    elementwise kernels with every coiterated position kept. Not when the jit was asked for the MLIR kernel's
    own lanes (``union=``, ``gallop=``): those options choose among MLIR loops the native kernel does not have."""
    from splyce.native.elementwise import keep_supported
    from splyce.options import DEFAULT_GALLOP_RATIO

    dtype = np.dtype(op.out.dtype)
    if not keep_supported(dtype) or (dtype == np.bool_ and op.op == "subtract"):
        return None
    if options.union is not None or options.gallop != DEFAULT_GALLOP_RATIO:
        return None
    if op.transposed == (True, True) or (op.transposed[:1] == (True,) and op.op == "subtract"):
        return None                   # a.T - b: the difference does not commute
    widths = {(t.format.pos_width, t.format.crd_width) for t in op.types + (op.out,)}
    if len(widths) != 1 or (any(op.transposed) and len(set(widths.pop())) != 1):
        return None                   # the kernels take one index dtype per operand pair (a CSC pass: one in all)
    name, out, transposed = op.op, op.out, op.transposed or (False, False)
    detail = "every coiterated position kept"
    if op.columns:
        detail += "; in column order: computed on the transposes (their CSR buffers), the result a CSC"
    if any(transposed):
        detail += "; the transpose read as its argument's CSC, one pass with a cursor per column, not re-stored"
    return LibraryCall(op, Formulation.MERGE_ROWS.value, _coiterated(name, transposed, out, op.columns),
                       detail=detail)


# How native/spgemm_sorted.py sums and orders each row (the plan's text says it), chosen per call by b's
# columns (spgemm_sorted.kind_for). The flags kernel's accumulator is Gilbert, Moler and Schreiber's: a dense
# row of sums, a flag per column, the list of columns met.
SPGEMM_SORTED_RULE = ("per call, by b's columns: when at least half of its neighbouring stored columns are "
                      "adjacent (banded, dense blocks) or the rows average at most 16 multiply-adds (road "
                      "networks), a map of output positions and a sort of each row, whose insert-or-add branch "
                      "such runs keep predictable; else each row summed in a dense row with a flag per column, "
                      "branch-free. Rows of up to 16 entries ranked by vector compares (on AVX-512 hosts, for "
                      "rows averaging at most 16: sorted by a 16-key bitonic network), longer ones in column order from a bitmap "
                      "(the map) or from the flags, 64 columns a step")


@functools.cache
def _unordered_rule() -> str:
    """The unordered result's kernel as the plan's text says it: chosen per call (native/spgemm.py,
    ``unordered_kernel``; the numbers are its constants). Written once per process."""
    from splyce.native import spgemm, spgemm_sorted

    return (f"every reached position kept (zero sums too), each sum from +0.0 in A's row order; per call, by a "
            f"sample of the product's rows (one native pass over up to {spgemm.SAMPLE_ROWS} rows at evenly spaced "
            f"multiply-adds, from {spgemm.SAMPLE_MIN_FLOPS} multiply-adds on): where its entries get at least "
            f"{spgemm.FLAGS_COMPRESSION:g} terms each on average, fewer than {spgemm_sorted.ADJACENT_SHARE:.0%} "
            f"of b's neighbouring columns are adjacent and the rows average more than "
            f"{spgemm_sorted.SHORT_ROW_FLOPS} terms, the sorted flags kernel (each row summed branch-free in a "
            f"dense row with a flag per column; the rows come sorted and scipy's flags say so); else the drop-in's "
            f"kernel, each row's columns in order of first appearance (the result's format: columns unordered)")


def _spgemm_kept(out, sort: bool):
    """``a @ b`` of two CSR SparseTensors as a scipy CSR of the traced result's format: the sparsifier's stored
    positions and values (every position reached, sums from +0.0 in A's row order), or None (then the MLIR
    kernel runs) when the result does not fit the format's index widths. ``sort``: columns ascending
    (native/spgemm_sorted.py); else rows in any order, the result's format having an unordered column level
    (planner/unordered.py, ``unordered_product_results``): native/spgemm.py's choice per call (``unordered_kernel``:
    each row's columns in order of first appearance, or sorted where the sorted kernel is expected faster).
    The result is built over the kernel's buffers without scipy's constructor checks (``scipy_out.csr``: the
    kernel wrote it well formed; scipy's flags say whether its rows came sorted). Modules bound once here, as
    in ``_coiterated``."""
    import scipy.sparse as sps

    from splyce.dropin import scipy_out
    from splyce.native import spgemm

    dtype, shape, csr_array, product_of = np.dtype(out.dtype), out.shape, sps.csr_array, spgemm.spgemm
    crd_width, pos_width = out.format.crd_width, out.format.pos_width
    crd_dtype, pos_dtype = np.dtype(f"int{crd_width}"), np.dtype(f"int{pos_width}")
    pool = memory_pool.active
    order = True if sort else None          # None: either order, whichever kernel is expected faster

    def run(args, threads: int):
        a, b = args
        with pool():
            product = product_of((a.values, a.crd[1], a.pos[1]), (b.values, b.crd[1], b.pos[1]), b.shape[1], dtype,
                                 threads, keep_zeros=True, sort=order)
        indices, indptr = product.indices, product.indptr
        # the traced format's index widths (64-bit operands give a 64-bit result; the kernel writes the narrowest)
        if indices.dtype.itemsize * 8 > crd_width or indptr.dtype.itemsize * 8 > pos_width:
            return None                           # the result needs wider indices than the format's
        return scipy_out.csr(csr_array, product.data, indices.astype(crd_dtype, copy=False),
                             indptr.astype(pos_dtype, copy=False), shape, product.sorted)
    return run


def provide(op: LibraryOp, options) -> LibraryCall | None:
    if len({t.dtype for t in op.types}) != 1 or op.out.dtype != op.types[0].dtype:
        return None              # mixed or promoted value types: the jit's kernel (NumPy's promotion there)
    infos = [_info(t) for t in op.types]
    if op.op == "matmul" and op.transposed[:1] == (True,):
        # a matrix stored by the product's columns times a vector: the drop-in's CSC x vector scatter, in the
        # MLIR kernel's order (columns ascending, each row's sum from +0.0); one thread, as the drop-in's
        if not spmv_scatter.supported(op.out.dtype):
            return None
        m = op.out.shape[0]
        return LibraryCall(op, Formulation.SCATTER_CSC.value, lambda args, threads: scatter_tensor(*args, m))
    if op.op == "matmul" and not op.out.is_sparse:
        formulation = choose_matmul_formulation(*infos)
        if formulation not in (Formulation.SPARSE_TIMES_DENSE, Formulation.SCATTER_VECTOR):
            return None
        if op.types[1].ndim == 2 and op.types[1].shape[1] > SPMM_FIXED:
            # SpMM beyond the columns the native kernel keeps in registers: the MLIR kernel is faster (2-core
            # Zen 4 VM, 2026-12-06, thread CPU, median of 9, 64 columns: native 0.79x / 0.83x / 0.94x its time
            # on fem3d-100k / ba-100k / road-700)
            return None
        nbytes = int(np.prod(op.out.shape)) * np.dtype(op.out.dtype).itemsize
        product = _csr_times_dense if formulation is Formulation.SPARSE_TIMES_DENSE else _csr_times_sparse_vector
        if nbytes < memory_pool.POOL_MIN:                       # no handler switch: the call as it is
            fast = spmv_direct if formulation is Formulation.SPARSE_TIMES_DENSE else None
            return LibraryCall(op, formulation.value, product, direct=fast)

        def run(args, t):
            with _pool(nbytes):
                return product(args, t)
        return LibraryCall(op, formulation.value, run)
    if op.op in _ELEMENTWISE:
        return _elementwise_call(op, options)
    if op.op == "matmul" and op.out.is_sparse and _native_values(*infos):
        # Gustavson's product keeping every reached position (zero sums too): the sparsifier's result; each
        # entry sums from +0.0 over k in A's row order, as its i, k, j loop nest does. Rows sorted where the
        # result's format is ordered (an explicit out_format=splyce.CSR), else as the drop-in writes them.
        if is_csr(op.out):
            return LibraryCall(op, "gustavson-spa, every position kept, rows sorted", _spgemm_kept(op.out, True),
                               detail=SPGEMM_SORTED_RULE)
        return LibraryCall(op, Formulation.GUSTAVSON_SPARSE.value, _spgemm_kept(op.out, False),
                           detail=_unordered_rule())
    if op.op == "einsum":        # masked SpGEMM, the masked sum (triangles), SDDMM: jit_products.py
        return jit_products.provide(op, infos)
    return None
