"""Widen every ``i1`` memref to ``i8`` on the stage-1 module, before MemRefToLLVM can see one.

MLIR 22's MemRefToLLVM asserts (aborting the process) on a store to ``memref<?xi1>``. The sparsifier makes
such a buffer for the expanded-access workspace ("filled" flags) of every kernel with a sparse output and a
reduction, e.g. CSR x CSR -> CSR SpGEMM. Here each op making an i1 memref (``memref.alloc`` / ``alloca`` and
the view ops on it) is rebuilt with ``i8`` elements; loads read i8 and ``arith.trunci`` to i1, stores
``arith.extui`` their i1 value, ``linalg.fill`` fills with the extended value, and ops that only pass the
buffer on (``dealloc``, ``copy``) take the widened one. Values stored are 0 or 1, so truncating is exact.

``check_no_i1_memrefs`` then refuses (``LoweringError``), with the op's name, any i1 memref left (an op this
rewrite does not know), so that none can reach the conversion that aborts.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref

from splyce.errors import LoweringError
from splyce.lowering import linalg_ops as linalg   # (not mlir.dialects.linalg: its OpDSL import costs ~0.24 s)
from splyce.passes.ir_utils import walk

# Ops that make a new memref value from an i1 one (or from nothing) without reading its elements.
_REBUILT = ("memref.alloc", "memref.alloca", "memref.realloc", "memref.subview", "memref.cast",
            "memref.reinterpret_cast", "memref.expand_shape", "memref.collapse_shape", "memref.transpose")


def _is_i1_memref(t: ir.Type) -> bool:
    return isinstance(t, ir.MemRefType) and isinstance(t.element_type, ir.IntegerType) and \
        t.element_type.width == 1


def _widened(t: ir.MemRefType) -> ir.MemRefType:
    return ir.MemRefType.get(t.shape, ir.IntegerType.get_signless(8), layout=t.layout,
                             memory_space=t.memory_space)


def widen_i1_memrefs(module: ir.Module) -> int:
    """Rewrite ``module`` in place, then ``check_no_i1_memrefs``; returns the number of i1 memref values
    widened."""
    widened: set = set()    # the new i8 memref values (their users still expect i1)
    with module.context, ir.Location.unknown():
        _widen_block_ops(module.body, widened)
    check_no_i1_memrefs(module, verify=bool(widened))
    return len(widened)


def _widen_block_ops(block: ir.Block, widened: set) -> None:
    """Pre-order over ``block``: rewrite each op that makes or uses an i1 memref, before its nested ops;
    an op that was replaced is not entered (it is erased)."""
    for op in list(block.operations):
        op = op.operation
        if not _rewrite(op, widened):
            for region in op.regions:
                for inner in region.blocks:
                    _widen_block_ops(inner, widened)


def _rewrite(op: ir.Operation, widened: set) -> bool:
    """Rewrite one op; True if it was replaced (and erased)."""
    name = op.name
    operands = list(op.operands)
    hit = [i for i, v in enumerate(operands) if v in widened]
    if name in _REBUILT and any(_is_i1_memref(r.type) for r in op.results):
        with ir.InsertionPoint(op):
            new = ir.Operation.create(name, results=[_widened(r.type) if _is_i1_memref(r.type) else r.type
                                                     for r in op.results],
                                      operands=operands, attributes={k: op.attributes[k] for k in op.attributes})
        for old, value in zip(op.results, new.results):
            if _is_i1_memref(old.type):
                widened.add(value)
            old.replace_all_uses_with(value)
        op.erase()
        return True
    if not hit:
        return False
    if name == "memref.load":
        with ir.InsertionPoint(op):
            narrow = arith.trunci(op.results[0].type, memref.load(operands[0], operands[1:]))
        op.results[0].replace_all_uses_with(narrow)
        op.erase()
        return True
    if name == "memref.store" and hit == [1]:
        with ir.InsertionPoint(op):
            op.operands[0] = arith.extui(ir.IntegerType.get_signless(8), operands[0])
    elif name == "linalg.fill" and hit == [1]:
        with ir.InsertionPoint(op):
            linalg.fill(arith.extui(ir.IntegerType.get_signless(8), operands[0]), outs=[operands[1]])
        op.erase()
        return True
    # memref.dealloc / memref.copy just pass the buffer on: they already take the widened one (its uses
    # were replaced). Any other op now uses an i8 buffer as if it were i1: check_no_i1_memrefs reports it.
    return False


def check_no_i1_memrefs(module: ir.Module, verify: bool = True) -> None:
    """Raise ``LoweringError`` naming the first op that still has an i1 memref operand, result or block
    argument, or (``verify``) that uses a widened buffer it was not rewritten for (then the module does not
    verify)."""
    for op in walk(module):
        types = [v.type for v in op.operands] + [r.type for r in op.results] + [
            a.type for region in op.regions for block in region.blocks for a in block.arguments]
        if any(_is_i1_memref(t) for t in types):
            raise LoweringError(f"internal error: {op.name} uses a memref of i1, which MLIR 22's MemRefToLLVM "
                                f"cannot lower (it aborts); splyce widens i1 buffers to i8 but does not "
                                f"handle this op:\n{op}")
    if not verify:
        return
    try:
        module.operation.verify()
    except ir.MLIRError as exc:
        raise LoweringError(f"internal error: widening i1 memrefs to i8 left an invalid module: {exc}") from None
