"""The drop-ins as the jit's kernel library: a jitted function that is one drop-in op on its arguments runs
the native kernel the drop-in would run (runtime/library.py asks this provider). The decision is made in
planner/kernel_choice.py (``jit_choice``: the drop-ins' ``choose_*_formulation`` on the operands' types,
narrowed to kernels whose results are the MLIR kernel's bit for bit), so a drop-in call and the same op inside
``@splyce.jit`` take the same kernel; this module builds the call for the choice."""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from splyce.dropin import jit_products
from splyce.native import memory_pool
from splyce.dropin.products import matmul, scatter_tensor, spmspv_tensor, spmv_tensor, spmv_direct
from splyce.planner.kernel_choice import Formulation, JitChoice, LibraryOp, jit_choice
from splyce.runtime.library import LibraryCall


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

        indptr, indices = a.pos[1], a.crd[1]
        if a.validated:
            return spmv.csr_times_dense(indptr, indices, a.values, x, threads)
        # a scipy operand whose check was left to this kernel (runtime/deferred_checks.py): the ends of the
        # positions here, every segment and column inside the kernel as it reads them
        ok = len(indptr) == a.shape[0] + 1 and len(indices) == len(a.values) and indptr[0] == 0 \
            and indptr[-1] == len(indices)
        y = spmv.csr_times_dense(indptr, indices, a.values, x, threads, coordinates_checked=False) if ok else None
        if y is None:
            raise ValueError("a scipy CSR operand: malformed index arrays (indptr / indices out of range); "
                             "check them with A.check_format()")
    return y


# The kernel checks every position and column it reads (``spmv_tensor``'s checking kernels, the split path's
# coordinates_checked=False): a plan reading a scipy operand only through it leaves that operand's check here
_csr_times_dense.checks_indices = True


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


def _elementwise_call(op: LibraryOp, choice: JitChoice) -> LibraryCall:
    """The drop-in's elementwise kernels with every coiterated position kept (``jit_choice`` said which ops)."""
    return LibraryCall(op, choice.label, _coiterated(op.op, op.transposed or (False, False), op.out, op.columns),
                       detail=choice.detail)


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
    """The native call for ``op``, as planner/kernel_choice.py's ``jit_choice`` chose it, or None."""
    choice = jit_choice(op, options)
    if choice is None:
        return None
    f = choice.formulation
    if f is Formulation.SCATTER_CSC:
        m = op.out.shape[0]
        return LibraryCall(op, choice.label, lambda args, threads: scatter_tensor(*args, m))
    if f in (Formulation.SPARSE_TIMES_DENSE, Formulation.SCATTER_VECTOR):
        nbytes = int(np.prod(op.out.shape)) * np.dtype(op.out.dtype).itemsize
        product = _csr_times_dense if f is Formulation.SPARSE_TIMES_DENSE else _csr_times_sparse_vector
        if nbytes < memory_pool.POOL_MIN:                       # no handler switch: the call as it is
            fast = spmv_direct if f is Formulation.SPARSE_TIMES_DENSE else None
            return LibraryCall(op, choice.label, product, direct=fast)

        def run(args, t):
            with _pool(nbytes):
                return product(args, t)
        run.checks_indices = getattr(product, "checks_indices", False)
        return LibraryCall(op, choice.label, run)
    if f is Formulation.MERGE_ROWS:
        return _elementwise_call(op, choice)
    if f is Formulation.GUSTAVSON_SPARSE:
        from splyce.planner.kernel_choice import is_csr

        if is_csr(op.out):
            return LibraryCall(op, choice.label, _spgemm_kept(op.out, True), detail=SPGEMM_SORTED_RULE)
        return LibraryCall(op, choice.label, _spgemm_kept(op.out, False), detail=_unordered_rule())
    return jit_products.call(op, choice)      # masked SpGEMM, the masked sum (triangles), SDDMM
