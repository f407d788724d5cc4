"""Sparse results the loops do not visit in their storage order: written in loop order, then re-stored.

The sparsifier inserts a sparse result's entries in its storage order only. A result whose loops visit its
indices in another order (the transpose of a CSC into a CSC: ``(b - a).T + 0.5 * (b - a)`` of CSR operands,
which the planner stores as CSC; a format asked for against a pinned loop order) is written in a format with
the same levels ordered as the loops visit them (``written_format``), then re-stored in its own format
(``restored``): a sort of its entries, as scipy's ``tocsc``. It was refused with a LoweringError before.
"""

from __future__ import annotations

from splyce.tensors.formats import Format


def written_format(fmt: Format, output: str, order: str) -> Format | None:
    """The format a sparse result of format ``fmt`` (indices ``output``) is written in by the loops
    ``order``: ``fmt``'s levels ordered as the loops visit its indices; None when they visit ``fmt``'s
    storage order (written as it is)."""
    stored = "".join(output[d] for d in fmt.order)
    if "".join(c for c in order if c in stored) == stored:
        return None
    dims = tuple(sorted(range(len(output)), key=lambda d: order.index(output[d])))
    return Format(fmt.levels, dims, fmt.pos_width, fmt.crd_width)


def restored(value, result_type, fmt: Format):
    """``value`` (a sparse tensor written in another level order) re-stored as ``result_type`` (of format
    ``fmt``).

    The steps MLIR's ``stage-sparse-ops`` makes of a ``sparse_tensor.convert`` that needs a sort, spelled
    out: a convert to an unordered COO in the result's level order (appends), ``reorder_coo`` (sorts it in
    place), a convert to the result's format. Staged by MLIR, the COO would be freed by a ``dealloc_tensor``
    that the textual pipeline's sparse codegen erases (66 KB a call unfreed at 300 x 300, 2 %); here it is
    an intermediate like any other, freed through the sorted one (passes/free_intermediates.py)."""
    from mlir import ir
    from mlir.dialects import sparse_tensor as st

    shape = list(ir.RankedTensorType(result_type).shape)
    rank = len(shape)
    dtype = ir.RankedTensorType(result_type).element_type

    def coo(ordered: bool):
        unordered = [] if ordered else [st.LevelProperty.non_ordered]
        kinds = [st.EncodingAttr.build_level_type(st.LevelFormat.compressed,
                                                  [st.LevelProperty.non_unique] + unordered)]
        kinds += [st.EncodingAttr.build_level_type(st.LevelFormat.singleton,
                                                   [st.LevelProperty.non_unique] + unordered)] * (rank - 2)
        kinds += [st.EncodingAttr.build_level_type(st.LevelFormat.singleton, unordered)]
        enc = st.EncodingAttr.get(kinds, ir.AffineMap.get_permutation(list(fmt.order)), None, fmt.pos_width,
                                  fmt.crd_width)
        return ir.RankedTensorType.get(shape, dtype, enc)

    appended = st.ConvertOp(coo(False), value).result
    sorted_ = st.ReorderCOOOp(coo(True), appended, st.SparseTensorSortKind.HybridQuickSort).result
    return st.ConvertOp(result_type, sorted_).result
