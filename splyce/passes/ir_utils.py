"""Small queries on MLIR Python objects shared by the passes (matcher, fast lane, thread split, i1 widening).

Ops are handled as ``ir.Operation`` (an ``OpView``'s ``.operation``); helpers accept either.
"""

from __future__ import annotations

from collections.abc import Iterator

from mlir import ir
from mlir.dialects import arith

# arith.cmpi predicates (the ArithBase.td numbering).
CMPI_EQ, CMPI_NE, CMPI_ULT, CMPI_ULE, CMPI_UGT, CMPI_UGE = 0, 1, 6, 7, 8, 9
CMPI_SGE = 5


def walk(op) -> Iterator[ir.Operation]:
    """Every op nested in ``op``'s regions (not ``op`` itself), in pre-order."""
    for region in op.operation.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from walk(inner)


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op producing ``value``, or None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def defined_inside(value: ir.Value, op) -> bool:
    """Whether ``value`` is a result of an op nested in ``op`` (or of ``op``) or an argument of one of its
    blocks: then it may change from one iteration of ``op`` to the next."""
    owner = value.owner
    current = (owner.owner if isinstance(owner, ir.Block) else owner).operation
    target = op.operation
    while current is not None:
        if current == target:
            return True
        current = current.parent
        current = current.operation if current is not None else None
    return False


def defined_outside(value: ir.Value, op) -> bool:
    """Whether ``value`` is defined outside ``op`` (so it is invariant across ``op``'s iterations)."""
    return not defined_inside(value, op)


def const_int(value: ir.Value) -> int | None:
    """The value of an integer or index ``arith.constant``, or None."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return attr.value if isinstance(attr, ir.IntegerAttr) else None


def strides_and_offset(memref_type: ir.MemRefType) -> tuple[list[int], int] | None:
    """(strides, offset) of a memref with a strided or identity layout; None for any other layout (MLIR
    cannot give strides for those)."""
    layout = memref_type.layout
    if isinstance(layout, ir.StridedLayoutAttr) or (
            isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(memref_type.rank)):
        strides, offset = memref_type.get_strides_and_offset()
        return list(strides), offset
    return None


def int_splat(vt: ir.VectorType, value: int) -> ir.Value:
    """An integer vector constant of ``value`` in every lane (at the insertion point)."""
    return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.IntegerAttr.get(vt.element_type, value)))
