"""With ``fast_math=True``: float sums over dense loops marked reassociable, so that LLVM vectorizes them.

A dot product of two dense vectors the kernel computes (``p @ (a @ p)``'s second step, a CG step's
``r_new @ r_new``) is an ``scf.for`` carrying its sum: one dependent addition per element (~3-4 cycles each on
Zen 4), because without leave to reorder the additions LLVM keeps them in order. ``fast_math=True`` gives that
leave (the option's contract: float sums may be reassociated), but only the Splyce pass's lanes took it. This
marks the sum's ``arith.addf`` ``fastmath<reassoc>`` where the loop reads its buffers at the induction variable
(contiguous, so the vectorized loop uses plain vector loads; a loop that gathers, a sparse row's sum, keeps
its order); LLVM's loop vectorizer then keeps several partial sums in vector registers.
"""

from __future__ import annotations

from mlir import ir

from splyce.passes.ir_utils import defined_inside, defining_op, walk


def mark_dense_sums(module: ir.Module) -> int:
    """Mark the float sums of dense ``linalg.generic`` reductions (what the sparsifier left: every operand
    dense) and of contiguous dense ``scf.for`` loops reassociable; returns how many."""
    marked = 0
    for generic in [op for op in walk(module.operation) if op.name == "linalg.generic"]:
        marked += _mark_generic(generic)
    for loop in [op for op in walk(module.operation) if op.name == "scf.for"]:
        body = loop.regions[0].blocks[0]
        iv = body.arguments[0]
        ops = [o.operation for o in body.operations]
        if len(loop.results) == 0 or any(o.regions for o in ops) or not _contiguous(ops, iv, loop):
            continue
        terminator = ops[-1]
        for position, value in enumerate(terminator.operands):
            add = defining_op(value)
            carried = body.arguments[1 + position]
            if add is not None and add.name == "arith.addf" and carried in list(add.operands) \
                    and isinstance(add.results[0].type, (ir.F32Type, ir.F64Type)):
                add.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<reassoc>")
                marked += 1
    return marked


def _mark_generic(generic) -> int:
    """A dense ``linalg.generic`` with a reduction iterator whose body adds to its output: its loops read
    the operands through affine maps of the loop indices (unit steps), which LLVM vectorizes once the
    additions may be reordered."""
    if not all(isinstance(v.type, ir.MemRefType) for v in generic.operands):
        return 0
    if not any("reduction" in str(it) for it in ir.ArrayAttr(generic.attributes["iterator_types"])):
        return 0
    body = generic.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    marked = 0
    outs = list(body.arguments)[-len(ops[-1].operands):] if ops[-1].operands else []
    for out, value in zip(outs, ops[-1].operands):
        add = defining_op(value)
        if add is not None and add.name == "arith.addf" and out in list(add.operands) \
                and isinstance(add.results[0].type, (ir.F32Type, ir.F64Type)):
            add.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<reassoc>")
            marked += 1
    return marked


def _contiguous(ops: list, iv: ir.Value, loop) -> bool:
    """Whether every load of the loop reads at the induction variable or at a value from outside the loop,
    and nothing is stored."""
    for op in ops:
        if op.name == "memref.store" or op.name.startswith(("vector.", "llvm.")):
            return False
        if op.name == "memref.load":
            for index in list(op.operands)[1:]:
                if index != iv and defined_inside(index, loop):
                    return False
    return True
