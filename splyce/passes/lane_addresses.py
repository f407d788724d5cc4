"""Per-lane addresses of the fast lanes' scalar loads and stores: the real element when the lane matched, else
a one-element scratch buffer allocated once at function entry, so an unmatched lane never touches the operand
(``FastLaneBuilder``'s phase 2 in scalar form, the insert lane's stores)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref

from splyce.passes.ir_utils import strides_and_offset


class LaneAddresses:
    """Scratch buffers and selected addresses for a lane builder with the matched loop in ``self.m`` and a
    ``self._scratches`` dict."""

    def _scratch(self, mt: ir.MemRefType, store: bool):
        """A zeroed one-element scratch buffer standing in for ``mt`` (same element type, rank and
        strides), allocated once at function entry; returned cast to ``mt`` with dynamic sizes (and a
        dynamic offset if ``mt``'s is not 0), or None if unsupported. Keeping ``mt``'s static strides
        lets a lane address be one pointer select plus index selects (all indices 0 for the scratch).
        Loads and stores get separate buffers: unmatched lanes then never read what an earlier lane
        wrote (no store-to-load chain through the scratch across lanes and iterations)."""
        et, rank = mt.element_type, mt.rank
        if isinstance(et, ir.FloatType):
            zero_attr = ir.FloatAttr.get(et, 0.0)
        elif isinstance(et, (ir.IntegerType, ir.IndexType)):
            zero_attr = ir.IntegerAttr.get(et, 0)
        else:
            return None
        layout = strides_and_offset(mt)
        if layout is None:  # no strides to give the scratch: the lane writes back the old value instead
            return None
        strides, offset = layout
        dyn, dyn_so = ir.ShapedType.get_dynamic_size(), ir.ShapedType.get_dynamic_stride_or_offset()
        ms = mt.memory_space
        target_offset = 0 if offset == 0 else dyn_so
        layout = ir.StridedLayoutAttr.get(target_offset, list(strides))
        dyn_type = ir.MemRefType.get([dyn] * rank, et, layout=layout, memory_space=ms)
        key = (str(dyn_type), store)
        if key in self._scratches:
            return self._scratches[key]
        func = self.m.while_op.operation
        while func is not None and func.name != "func.func":
            func = func.parent
        if func is None:
            self._scratches[key] = None
            return None
        entry = func.regions[0].blocks[0]
        scratch_strides = [1 if st == dyn_so else st for st in strides]
        with ir.InsertionPoint.at_block_begin(entry):
            buf = memref.alloca(ir.MemRefType.get([1], et, memory_space=ms), [], [])
            c0 = arith.constant(ir.IndexType.get(), 0)
            memref.store(arith.constant(et, zero_attr), buf, [c0])
            view_t = ir.MemRefType.get([1] * rank, et, memory_space=ms,
                                       layout=ir.StridedLayoutAttr.get(0, scratch_strides))
            view = memref.reinterpret_cast(view_t, buf, [], [], [], [0], [1] * rank, scratch_strides)
            scratch = memref.cast(dyn_type, view)
        self._scratches[key] = scratch
        return scratch

    def _store_lane(self, matched, value, mem, idx, casts) -> None:
        """Store one lane's value, branchlessly: to the real element when matched, else to the scratch
        (or, without a scratch, write back the old value)."""
        addr = self._lane_address(matched, mem, idx, casts, True)
        if addr is None:
            old = memref.load(mem, idx)
            memref.store(arith.select(matched, value, old), mem, idx)
        else:
            memref.store(value, addr[0], addr[1])

    def _lane_address(self, matched, mem, idx, casts, store: bool):
        """(memref, indices) for one lane: ``mem[idx]`` when ``matched``, else the scratch element."""
        mt = mem.type
        if not isinstance(mt, ir.MemRefType):
            return None
        scratch = self._scratch(mt, store)
        if scratch is None:
            return None
        if mem not in casts:
            casts[mem] = mem if mt == scratch.type else memref.cast(scratch.type, mem)
        zero = arith.constant(ir.IndexType.get(), 0)
        return (arith.select(matched, casts[mem], scratch),
                [arith.select(matched, v, zero) for v in idx])

