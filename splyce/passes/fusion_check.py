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
# elementwise functions of two sparse matrices, tests/transforms/test_grad.py's "sparse_elementwise"); unfused, each
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


# arith ops the sparsifier computes as a union of their operands' patterns (a value where either is stored)
_UNIONS = {"arith.addf", "arith.subf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
           "arith.addi", "arith.subi", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui", "arith.ori",
           "arith.xori"}


def broadcast_union(module: ir.Module) -> bool:
    """Whether some ``linalg.generic`` of ``module`` takes, in its body, a union (``+``, ``-``, ``maximum``...)
    while reading a dense operand broadcast along a loop that a sparse operand's compressed level iterates
    (read at fewer loops than that), and no dense operand it reads is indexed by that loop. Elementwise fusion
    makes one of
    ``(a.toarray() + d[:, None]).sum(axis=1)`` (the row sums of a sparse matrix plus a column vector): the
    dense value is invariant in the loop over the stored entries, and the sparsifier segfaults on the union
    (``sparsification-and-bufferization``, MLIR 22; also ``-``, ``np.maximum``, a full ``sum()``). The same
    with the dense value read at the compressed loop (``d[None, :]``), with a constant (``+ 1.0``) or with a
    product (``d[:, None] * a``) compiles. The lowering copies such an operand out to the result's shape
    (to_mlir.py, ``_broadcasts_materialized``), which fusion folds back in; the compiler then lowers the
    trace without the fusion, where the copy stays."""
    for fn in module.body.operations:
        for op in walk(fn.operation):
            if op.name != "linalg.generic":
                continue
            maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
            n_inputs = len(op.operands) - len(op.results)
            sparse_loops: set[int] = set()
            for value, amap in zip(list(op.operands)[:n_inputs], maps):
                loops = _loops_by_level(value.type, amap)
                if loops is None:
                    continue
                levels = _level_kinds(value.type)
                sparse_loops.update(loop for loop, kind in zip(loops, levels) if kind != "dense")
            if not sparse_loops:
                continue
            block = op.regions[0].blocks[0]
            broadcast, broadcast_input, driving = [], False, False
            for k, (value, amap) in enumerate(zip(op.operands, maps)):
                if k < n_inputs and _loops_by_level(value.type, amap) is not None:
                    continue          # a sparse operand
                if k >= n_inputs and not _used(block.arguments[k]):
                    continue          # an output the body does not read
                read = {r.position for r in amap.results if isinstance(r, ir.AffineDimExpr)}
                if sparse_loops - read:
                    broadcast.append(block.arguments[k])
                    broadcast_input = broadcast_input or k < n_inputs
                else:
                    driving = True    # a dense operand the sparsifier iterates over those loops
            # (an input among them: a union of sparse operands into a reduction's accumulator alone compiles,
            # ``abs(a - b).sum()``, the union reduce lane's form)
            if broadcast_input and not driving and any(_used(arg) for arg in broadcast) \
                    and any(inner.name in _UNIONS for inner in walk(op) if inner is not op):
                return True
    return False


def _used(arg) -> bool:
    return any(True for _ in arg.uses)


def _level_kinds(value_type) -> list[str]:
    """The level formats of a sparse tensor type, outermost first ("dense", "compressed", "singleton"...)."""
    import re

    text = str(value_type.encoding)
    levels = text.split("->", 1)[1] if "->" in text else text
    return re.findall(r":\s*([a-z_]+)", levels.split("}")[0])
