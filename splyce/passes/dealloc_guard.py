"""Drop a ``memref.dealloc`` that would free memory the kernel does not own, on the stage-1 module.

``lower_trace`` frees every intermediate result before returning (``bufferization.dealloc_tensor``). MLIR's
folding may turn an intermediate into another value (an identity kernel such as integer ``x * 1`` folds to
``x``), so such a free could land on an argument (the caller's NumPy buffers), on a returned buffer, or on a
buffer already freed; constant folding can make it a global (integer ``(v - v).min()``: ``v - v`` is a
``memref.get_global`` of zeros, whose free crashed the process). Each dealloc's memref is followed through
view-like ops to the value it aliases; a free of a function argument, of a global, of a value that is
returned, or a second free of one value is erased.
"""

from __future__ import annotations

from mlir import ir

from splyce.passes.ir_utils import defining_op, walk

_VIEWS = ("memref.cast", "memref.reinterpret_cast", "memref.subview", "memref.collapse_shape",
          "memref.expand_shape", "memref.transpose", "memref.view", "memref.assume_alignment",
          "bufferization.to_memref", "bufferization.to_buffer")


def aliased_root(value: ir.Value) -> ir.Value:
    """The value ``value`` is a view of (itself when it is not a view)."""
    while True:
        op = defining_op(value)
        if op is None or op.name not in _VIEWS:
            return value
        value = op.operands[0]


def drop_foreign_deallocs(module: ir.Module) -> int:
    """Erase deallocs of arguments, of returned values and repeated ones; returns how many were erased."""
    erased = 0
    for fn in module.body.operations:
        fn = fn.operation
        if fn.name != "func.func" or not fn.regions[0].blocks:
            continue
        arguments = list(fn.regions[0].blocks[0].arguments)
        ops = list(walk(fn))
        returned = [aliased_root(v) for op in ops if op.name == "func.return" for v in op.operands
                    if isinstance(v.type, ir.MemRefType)]
        freed: list = []
        for op in ops:
            if op.name != "memref.dealloc":
                continue
            root = aliased_root(op.operands[0])
            owner = defining_op(root)
            constant = owner is not None and owner.name == "memref.get_global"   # folding made it a constant
            if constant or any(root == v for v in arguments + returned + freed):
                op.erase()
                erased += 1
            else:
                freed.append(root)
    return erased
