"""Free every intermediate tensor before the kernel returns, once MLIR has fused what it fuses.

``linalg-fuse-elementwise-ops`` fuses a producer into its consumer only when nothing else uses the
producer's result, so the frees are added after that pass and before bufferization. A dense intermediate
gets ``bufferization.dealloc_tensor``, which bufferization turns into ``memref.dealloc``. A sparse one cannot:
the textual ``sparsification-and-bufferization`` pass runs the sparse codegen with ``createSparseDeallocs``
off (only the C++ ``sparsifier`` pipeline's ``create-sparse-deallocs`` option turns it on), and with it off
the codegen erases ``dealloc_tensor`` of a sparse tensor, so every sparse intermediate leaked its positions,
coordinates and values (~199 KB a call for a 300 x 300 2 % product). A sparse intermediate is passed instead
to a call of an external function declared here (``__splyce_free_sparse_N``): the codegen flattens the call's
sparse operand into the tensor's final buffers (after the reallocs of its insertions), and ``lower_sparse_frees``
(run after bufferization) replaces the call with a ``memref.dealloc`` of each buffer, as the codegen's own
dealloc converter does, and erases the declarations.

An intermediate is a result of ``linalg.generic``, ``sparse_tensor.convert`` or ``sparse_tensor.reorder_coo``
(which sorts its operand in place: the operand is freed through it) that is not returned (or put in an output
argument) and not the ``outs`` of another op (a chain of ops writing one buffer is freed once, at its end),
whose buffer is fresh (its ``outs`` chain starts at ``tensor.empty``), never a caller's output argument.
``passes/dealloc_guard.py`` drops any free that later folding moves onto a buffer the kernel does not own.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import bufferization, func, memref, sparse_tensor

_FREE_SPARSE = "__splyce_free_sparse_"   # the external functions standing for a sparse tensor's free
# a fill is freed through the generic it feeds; a COO sorted in place (reorder_coo) through the sorted one
_PRODUCERS = ("linalg.generic", "sparse_tensor.convert", "sparse_tensor.reorder_coo")
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
        if op.name == "sparse_tensor.reorder_coo":     # sorts its operand's buffers in place
            value = op.operands[0]
            continue
        init = _outs(op)
        if init is None:
            return False
        value = init


def _is_sparse(t: ir.RankedTensorType) -> bool:
    if t.encoding is None:
        return False
    try:
        sparse_tensor.EncodingAttr(t.encoding)
    except ValueError:
        return False
    return True


def free_intermediates(module: ir.Module, sparse: bool = True) -> int:
    """Insert a free before each function's return for its intermediates (``dealloc_tensor`` for a dense
    one, a call of ``__splyce_free_sparse_N`` for a sparse one; none for a sparse one with ``sparse=False``:
    the compiler's fallback where the codegen cannot resolve the call's buffers); returns how many."""
    count = 0
    declared: dict[str, str] = {}    # sparse tensor type -> the name of its free function

    def sparse_free(t: ir.RankedTensorType) -> str:
        key = str(t)
        if key not in declared:
            declared[key] = f"{_FREE_SPARSE}{len(declared)}"
            with ir.InsertionPoint.at_block_begin(module.body):
                decl = func.FuncOp(declared[key], ir.FunctionType.get([t], []), visibility="private")
                # external: one-shot bufferization would assume it writes its operand (a copy if read later)
                decl.arg_attrs = ir.ArrayAttr.get(
                    [ir.DictAttr.get({"bufferization.access": ir.StringAttr.get("read")})])
        return declared[key]

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
                    if any(use.owner.name == "sparse_tensor.reorder_coo" for use in result.uses):
                        continue                   # its buffers are the sorted COO's, freed with it
                    if not sparse and _is_sparse(result.type):
                        continue
                    with ir.InsertionPoint(ret):
                        if _is_sparse(result.type):
                            func.CallOp([], ir.FlatSymbolRefAttr.get(sparse_free(result.type)), [result])
                        else:
                            bufferization.DeallocTensorOp(result)
                    count += 1
    return count


def lower_sparse_frees(module: ir.Module) -> int:
    """After bufferization: each call of a ``__splyce_free_sparse_N`` (its operands are now the sparse
    tensor's buffers and storage specifier) becomes a ``memref.dealloc`` of each distinct buffer; the
    declarations are erased. Returns how many buffers are freed."""
    count = 0
    with module.context, ir.Location.unknown():
        for fn in list(module.body.operations):
            fn = fn.operation
            if fn.name != "func.func":
                continue
            if ir.StringAttr(fn.attributes["sym_name"]).value.startswith(_FREE_SPARSE):
                fn.erase()
                continue
            for block in (b for region in fn.regions for b in region.blocks):
                for op in list(block.operations):
                    op = op.operation
                    if op.name != "func.call" or not ir.FlatSymbolRefAttr(
                            op.attributes["callee"]).value.startswith(_FREE_SPARSE):
                        continue
                    buffers: list = []
                    for v in op.operands:
                        if isinstance(v.type, ir.MemRefType) and not any(v == b for b in buffers):
                            buffers.append(v)
                    with ir.InsertionPoint(op):
                        for v in buffers:
                            memref.DeallocOp(v)
                    op.erase()
                    count += len(buffers)
    return count
