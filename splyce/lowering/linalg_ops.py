"""The linalg op builders the lowering and the passes use, without importing ``mlir.dialects.linalg``: that
package also builds every named op of its OpDSL (``opdsl.ops.core_named_ops``) in Python when imported,
~0.24-0.30 s of a new program's first call (of ~0.9 s importing MLIR's bindings in all; 2026-12-07, 2-core
Zen 4 VM, ``python -X importtime`` and cProfile of ``bench first_call``'s GCN layer), and only ``fill`` of
them is used here.

``GenericOp``, ``YieldOp``, ``IndexOp`` are the generated op classes themselves (``mlir.dialects.linalg``
re-exports the same classes). ``fill`` builds the op OpDSL's ``linalg.fill`` builds, the same IR (tested
text-equal): a ``linalg.fill`` whose region yields the value (OpDSL's body is ``cast_signed(U, value)``,
which is the value itself when the types agree); a value of another type goes to OpDSL's own builder.

The bindings import a dialect's Python module the first time they return one of its ops or attributes (to
find its op classes), by default ``mlir.dialects.linalg``. ``_register`` has them load
``splyce.lowering.mlir_dialects.linalg`` for that one look-up instead (the generated classes only, the same
registrations), then restores their search list: a later ``import mlir.dialects.linalg`` (by a user, or by
``fill``'s fallback) works as ever. With bindings that lack the hooks, nothing changes.
"""

from __future__ import annotations

import sys
import threading

from mlir import ir
from mlir.dialects._linalg_ops_gen import FillOp, GenericOp, IndexOp, YieldOp

__all__ = ["GenericOp", "IndexOp", "YieldOp", "fill"]

_lock = threading.Lock()


def _register() -> None:
    if "mlir.dialects.linalg" in sys.modules:
        return
    try:
        from mlir._mlir_libs import _mlir

        state = _mlir.globals
        with _lock:
            before = list(state.dialect_search_modules)
            state.dialect_search_modules = ["splyce.lowering.mlir_dialects"] + before
            try:
                state._check_dialect_module_loaded("linalg")
            finally:
                state.dialect_search_modules = before
    except (AttributeError, TypeError, ImportError):
        pass     # other bindings: they import mlir.dialects.linalg when they need it


_register()


def fill(value: ir.Value, *, outs: list):
    """``linalg.fill ins(value) outs(outs[0])``: its result (a tensor output) or the op (a memref output)."""
    (out,) = outs
    shaped = ir.ShapedType(out.type)
    if value.type != shaped.element_type:
        from mlir.dialects import linalg     # a cast in the body: OpDSL's builder (the package imported)

        return linalg.fill(value, outs=outs)
    is_tensor = str(out.type).startswith("tensor<")     # else a memref (after bufferization)
    op = FillOp([out.type] if is_tensor else [], [value], [out])
    block = op.regions[0].blocks.append(value.type, shaped.element_type)
    with ir.InsertionPoint(block):
        YieldOp([block.arguments[0]])
    return op.result if is_tensor else op
