"""Which kernel computes a drop-in call: the formulation chosen from the operands' families, formats and
dtypes (a native kernel from splyce.native, or a jitted einsum through the planner), shared with splyce.dask.
"""

from __future__ import annotations

import enum
import functools


from splyce.tensors.formats import Format

from splyce.dropin.operands import OperandInfo, _native_values
from splyce.dropin.stored_formats import LAYOUTS as _STORED_LAYOUTS


class Formulation(enum.Enum):
    """How a drop-in ``a @ b`` is computed (``choose_matmul_formulation`` picks one)."""

    NUMPY = "numpy"                      # both dense: NumPy's own product
    SPARSE_TIMES_DENSE = "csr-x-dense"   # A CSR, rows times a dense operand (SpMV / SpMM), MLIR kernel
    STORED_TIMES_DENSE = "stored-x-dense"  # A in its own stored format (COO, DIA, BSR, GCXS) times a dense
                                           # operand, on its buffers as they are: native (dropin/stored_formats.py)
    DENSE_TIMES_SPARSE = "dense-x-csr"   # dense rows times B CSR, MLIR kernel
    SCATTER_VECTOR = "scatter-vector"    # sparse vector operand scattered dense in O(n), then SpMV
    SCATTER_CSC = "csc-x-vector"         # a matrix stored by columns (a CSC, a CSR's transpose) times a vector:
                                         # each column's entries added into the result's rows, native
    GUSTAVSON_SPARSE = "gustavson-spa"   # CSR x CSR -> CSR, per-row sparse accumulator, O(flops), native
    GUSTAVSON_DENSE = "gustavson-dense"  # CSR x CSR -> dense result (asked for), MLIR kernel
    MASKED_GUSTAVSON = "masked-gustavson"  # einsum M * (A @ B), all sparse: mask-driven Gustavson, native
    SDDMM = "sddmm"                      # einsum M * (X @ Y.T), M sparse, X / Y dense: dots on M's entries, native
    MERGE_ROWS = "merge-rows"            # elementwise CSR op CSR -> CSR, one branch-free merge per row, native
    SPARSIFIER = "sparsifier"            # a product through the MLIR sparsifier's kernel: value types the
                                         # native kernels lack (bool, complex)
    COITERATE = "coiterate"              # elementwise through the MLIR kernel (any rank, dense operands)
    DENSE_SUM = "dense-sum"              # a sparse and a dense matrix added / subtracted: scipy's dense result


def _wants_sparse_result(a: OperandInfo, b: OperandInfo, out_format) -> bool:
    return (out_format == "sparse" or isinstance(out_format, Format)) or (
        out_format is None and a.sparse and b.sparse and len(a.shape) == len(b.shape) == 2)


def choose_matmul_formulation(a: OperandInfo, b: OperandInfo, out_format=None) -> Formulation:
    """The one place the drop-in ``matmul`` decides how to compute ``a @ b``: each index is iterated from one
    operand and looked up or scattered in the other, never co-iterated (no intersection is needed)."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if not _native_values(a, b) and len(a.shape) == 2 and (b.sparse and len(b.shape) == 2 or not b.sparse):
        return Formulation.SPARSIFIER if a.sparse else Formulation.DENSE_TIMES_SPARSE
    if a.sparse and b.sparse:
        if len(b.shape) == 1 or (len(b.shape) == 2 and b.shape[1] == 1 and len(a.shape) == 2) \
                or len(a.shape) == 1:
            return Formulation.SCATTER_VECTOR
        if _wants_sparse_result(a, b, out_format):
            return Formulation.GUSTAVSON_SPARSE
        return Formulation.GUSTAVSON_DENSE
    if a.sparse and a.layout in _STORED_LAYOUTS and len(a.shape) == 2:
        return Formulation.STORED_TIMES_DENSE
    return Formulation.SPARSE_TIMES_DENSE if a.sparse else Formulation.DENSE_TIMES_SPARSE


def choose_elementwise_formulation(a: OperandInfo, b: OperandInfo, out_format=None,
                                   name: str = "multiply") -> Formulation:
    """The one place the drop-in ``multiply`` / ``add`` / ``subtract`` decides how to compute: two sparse
    matrices with a sparse result merge their rows natively; anything else runs the coiteration kernel."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if a.sparse and b.sparse and len(a.shape) == 2 and out_format in (None, "sparse") \
            and (_native_values(a, b) or _bool_pattern(name, a, b)):
        return Formulation.MERGE_ROWS
    if name != "multiply" and a.sparse != b.sparse and len(a.shape) == 2 and out_format in (None, "dense"):
        return Formulation.DENSE_SUM
    return Formulation.COITERATE


def _bool_pattern(name: str, a: OperandInfo, b: OperandInfo) -> bool:
    """A product or sum of two bool matrices: the merge's AND / OR kernels (the jit's too, every position kept
    there; scipy's rule here: a False result is not stored). NumPy has no bool difference: that call goes to
    the coiteration kernel, which says so."""
    import numpy as np

    return name in ("multiply", "add") and a.dtype == np.bool_ and b.dtype == np.bool_


def rowwise_format(subs: str, order) -> Format:
    """The operand's levels in the global loop order: dense outermost, compressed below (CSR / CSF-like)."""
    return rowwise_format_cached(subs, tuple(order))


@functools.lru_cache(maxsize=256)
def rowwise_format_cached(subs: str, order: tuple) -> Format:
    # a Format validates itself when built (~80 us): once per (subscripts, loop order)
    from splyce.tensors.formats import Level

    perm = tuple(sorted(range(len(subs)), key=lambda d: order.index(subs[d])))
    kinds = ("compressed",) if len(subs) == 1 else ("dense",) + ("compressed",) * (len(subs) - 1)
    return Format(tuple(Level(k) for k in kinds), perm)


def choose_einsum_formulation(inputs: list[str], output: str, infos: list[OperandInfo],
                              out_format=None) -> tuple[Formulation, tuple[int, ...]]:
    """The one place the drop-in ``einsum`` decides how to compute, and the operand roles: a product whose
    result lies on a sparse operand's positions (``"ik,kj,ij->ij"``: masked SpGEMM; ``"ij,ik,jk->ij"`` with
    dense ``ik``, ``jk``: SDDMM) runs natively in O(work) with the mask's positions as result, returned as
    ``(formulation, (mask, left, right))``; anything else runs the traced einsum kernel (``()``)."""
    if len(inputs) != 3 or len(output) != 2 or output[0] == output[1] or out_format not in (None, "sparse"):
        return Formulation.COITERATE, ()
    i, j = output
    for mask in range(3):
        if inputs[mask] != output or not infos[mask].sparse or len(infos[mask].shape) != 2:
            continue
        p, q = (x for x in range(3) if x != mask)
        for left, right in ((p, q), (q, p)):
            a, b = inputs[left], inputs[right]
            if len(a) != 2 or len(b) != 2 or a[0] != i or a[1] in output:
                continue
            k = a[1]
            native = _native_values(*infos)   # else the sparsifier's kernel, fused on the mask's positions
            if infos[left].sparse and infos[right].sparse and b == k + j:
                return Formulation.MASKED_GUSTAVSON if native else Formulation.SPARSIFIER, (mask, left, right)
            if not infos[left].sparse and not infos[right].sparse and b == j + k:
                return Formulation.SDDMM if native else Formulation.SPARSIFIER, (mask, left, right)
    return Formulation.COITERATE, ()


def _is_masked_sum(inputs: list[str], output: str, infos: list[OperandInfo]) -> bool:
    """``"ij,jk,ik->"`` (up to the letters: triangle counting with L three times), all three operands sparse
    matrices of one value dtype the native kernels compute in."""
    if output or len(inputs) != 3 or any(len(s) != 2 for s in inputs):
        return False
    (i, j), (j2, k), (i2, k2) = inputs
    if not (i == i2 and j == j2 and k == k2 and len({i, j, k}) == 3):
        return False
    dtypes = {info.dtype for info in infos}
    return all(info.sparse and len(info.shape) == 2 for info in infos) and len(dtypes) == 1 \
        and _native_values(*infos)


def _check_einsum_shapes(inputs: list[str], infos: list[OperandInfo]) -> None:
    sizes: dict = {}
    for subs, info in zip(inputs, infos):
        if len(subs) != len(info.shape):
            raise ValueError(f"einsum: subscripts {subs!r} for an operand of shape {info.shape}")
        for letter, size in zip(subs, info.shape):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(f"einsum: index {letter!r} has sizes {sizes[letter]} and {size}")
