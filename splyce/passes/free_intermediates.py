"""Free every intermediate tensor before the kernel returns, once MLIR has fused what it fuses.

``linalg-fuse-elementwise-ops`` fuses a producer into its consumer only when nothing else uses the
producer's result, so the frees (``bufferization.dealloc_tensor``) are added after that pass and before
bufferization, which turns them into ``memref.dealloc`` of the intermediate's buffers (all of a sparse
tensor's). An intermediate is a result of ``linalg.generic`` or ``sparse_tensor.convert`` that is not
returned (or put in an output argument) and not the ``outs`` of another op (a chain of ops writing one buffer is freed once, at its end),
whose buffer is fresh (its ``outs`` chain starts at ``tensor.empty``), never a caller's output argument.
``passes/dealloc_guard.py`` drops any free that later folding moves onto a buffer the kernel does not own.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import bufferization

_PRODUCERS = ("linalg.generic", "sparse_tensor.convert")   # a fill is freed through the generic it feeds
_FRESH = ("tensor.empty", "bufferization.alloc_tensor")


def _outs(op) -> ir.Value | None:
    """The init operand a destination-style op writes into (its last operand), or None."""
    if op.name in ("linalg.generic", "linalg.fill"):
        return op.operands[len(op.operands) - 1]
    return None


def _fresh(value: ir.Value) -> bool:
    """Whether ``value``'s buffer is allocated by the kernel: its outs chain starts at ``tensor.empty``."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return False                       # a function argument (a caller's output buffer)
        op = owner.operation
        if op.name in _FRESH or op.name == "sparse_tensor.convert":
            return True
        init = _outs(op)
        if init is None:
            return False
        value = init


def free_intermediates(module: ir.Module) -> int:
    """Insert ``dealloc_tensor`` before each function's return for its intermediates; returns how many."""
    count = 0
    with module.context, ir.Location.unknown():
        for fn in module.body.operations:
            fn = fn.operation
            if fn.name != "func.func" or not fn.regions[0].blocks:
                continue
            block = fn.regions[0].blocks[0]
            ops = [op.operation for op in block.operations]
            ret = ops[-1]
            if ret.name != "func.return":
                continue
            returned = list(ret.operands)
            # a result put in an output argument (materialize_in_destination: written there in place)
            returned += [op.operands[0] for op in ops if op.name == "bufferization.materialize_in_destination"]
            outs = [v for op in ops if _outs(op) is not None for v in [_outs(op)]]
            for op in ops:
                if op.name not in _PRODUCERS:
                    continue
                for result in op.results:
                    if not isinstance(result.type, ir.RankedTensorType):
                        continue
                    if any(result == v for v in returned + outs) or not _fresh(result):
                        continue
                    with ir.InsertionPoint(ret):
                        bufferization.DeallocTensorOp(result)
                    count += 1
    return count
