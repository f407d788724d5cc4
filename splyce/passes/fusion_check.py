"""Find a fused ``linalg.generic`` whose sparse operands ask for loop orders that contradict each other.

MLIR's elementwise fusion may fuse a transposed copy into its consumer: ``b.T + b`` becomes one generic that
reads the same CSR operand through ``(i, j)`` and through ``(j, i)``. Each sparse operand orders the loops
by its levels, so no loop order serves both, and the sparsifier's attempt to resolve the cycle aborts the
process (``SparseReinterpretMap.cpp``: ``Assertion `!dimToLvl.isIdentity()' failed``, MLIR 22). The
compiler checks the fused module before sparsifying and, on a cycle, lowers the trace again without the
fusion (the transposed copy is then its own kernel, which the sparsifier compiles).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import sparse_tensor as st

from splyce.passes.ir_utils import walk


def _loops_by_level(value_type, operand_map) -> list[int] | None:
    """The loop dimension of each level of a sparse operand (outermost level first), or None when it is not
    sparse or its maps are not plain permutations (then it is left to MLIR)."""
    if not isinstance(value_type, ir.RankedTensorType) or value_type.encoding is None:
        return None
    try:
        dim_to_lvl = st.EncodingAttr(value_type.encoding).dim_to_lvl
    except (ValueError, TypeError):
        return None
    results = list(operand_map.results)
    if dim_to_lvl is None:
        dims = list(range(len(results)))
    else:
        dims = []
        for e in dim_to_lvl.results:
            if not isinstance(e, ir.AffineDimExpr):
                return None
            dims.append(e.position)
    loops = []
    for d in dims:
        if d >= len(results) or not isinstance(results[d], ir.AffineDimExpr):
            return None
        loops.append(results[d].position)
    return loops


def _has_cycle(edges: dict[int, set[int]]) -> bool:
    state: dict[int, int] = {}     # 1 on the current path, 2 done

    def visit(node: int) -> bool:
        state[node] = 1
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1 or (nxt not in state and visit(nxt)):
                return True
        state[node] = 2
        return False

    return any(node not in state and visit(node) for node in list(edges))


def contradicting_sparse_orders(module: ir.Module) -> bool:
    """Whether some ``linalg.generic`` of ``module`` has sparse operands whose level orders, read through
    their indexing maps, form a cycle among the loops."""
    for fn in module.body.operations:
        for op in walk(fn.operation):
            if op.name != "linalg.generic":
                continue
            maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
            edges: dict[int, set[int]] = {}
            for value, amap in zip(op.operands, maps):
                loops = _loops_by_level(value.type, amap)
                if loops is None:
                    continue
                for outer, inner in zip(loops, loops[1:]):
                    if outer != inner:
                        edges.setdefault(outer, set()).add(inner)
            if _has_cycle(edges):
                return True
    return False


# A fused generic reading this many sparse operands (of one shape, in a union) crashed the sparsifier (a
# segfault in sparsification-and-bufferization, MLIR 22, 2026-12-07: the gradient of a loss through four
# elementwise functions of two sparse matrices, tests/test_grad.py's "sparse_elementwise"); unfused, each
# kernel compiles.
MAX_FUSED_SPARSE_OPERANDS = 4


def crowded_generic(module: ir.Module, limit: int = MAX_FUSED_SPARSE_OPERANDS) -> bool:
    """Whether some ``linalg.generic`` of ``module`` reads more than ``limit`` sparse operands."""
    for fn in module.body.operations:
        for op in walk(fn.operation):
            if op.name != "linalg.generic":
                continue
            sparse = sum(1 for value in op.operands[: len(op.operands) - op.attributes["operandSegmentSizes"][1]]
                         if isinstance(value.type, ir.RankedTensorType) and value.type.encoding is not None)
            if sparse > limit:
                return True
    return False
