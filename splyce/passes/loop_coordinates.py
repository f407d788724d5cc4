"""A sparse ``linalg.generic``'s ``linalg.index`` reads become reads of a dense coordinate operand.

Views lower as gathers at ``linalg.index`` positions (lowering/dense.py), and MLIR's elementwise fusion
carries those into the sparse kernel that reads the view (``adj.multiply(s[:, None] + s[None, :]) @ h``).
MLIR 22's sparsifier then reorders the generic's loops to suit the sparse operands (``GenericOpScheduler``,
SparseReinterpretMap.cpp): it permutes the indexing maps and iterator types but leaves each ``linalg.index``
naming its old loop, so the gather reads at another loop's coordinate, a wrong answer without an error
(``s[j]`` for ``s[i]`` there; docs/toolchain.md). An operand's indexing map is permuted with the loops, so
each loop coordinate the body asks for is read from a dense operand instead: ``0, 1, ..., n - 1``
(int64, made once per extent at the top of the function and freed with the other intermediates) read
through ``(d0, ..., dk, ...) -> (dk)``. Dense generics are not reordered and keep their ``linalg.index``.

The extra read costs (``adj.multiply(s[:, None] + s[None, :]).sum(axis=1)``, 200k entries: 0.38 -> 0.82 ms),
so only a generic whose reading loops the sparsifier does move is rewritten: a copy of the module, with the
coordinate operands, goes through the passes the sparsifier runs up to its scheduler (``PROBE``), and a
generic whose coordinate operands then read other loops (or that the passes rewrote) gets them for real.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from splyce.lowering import linalg_ops as linalg   # (not mlir.dialects.linalg: its OpDSL import costs ~0.24 s)
from splyce.passes import pipeline
from splyce.passes.ir_utils import walk

# what sparsification-and-bufferization runs up to and including its loop scheduler (passes/pipeline.py)
PROBE = ("eliminate-empty-tensors", "pre-sparsification-rewrite", "sparse-reinterpret-map{scope=only-generic}")
_TAG = "splyce.coordinates_probe"


def _is_sparse(value) -> bool:
    t = value.type
    return isinstance(t, ir.RankedTensorType) and t.encoding is not None


def _loop_extents(generic) -> dict[int, int]:
    """Each loop's static extent, from the operands its maps read it with."""
    extents = {}
    for value, amap in zip(generic.operands, generic.indexing_maps):
        shape = ir.RankedTensorType(value.type).shape
        for axis, expr in enumerate(amap.value.results):
            if isinstance(expr, ir.AffineDimExpr) and not ir.ShapedType.is_dynamic_size(shape[axis]):
                extents.setdefault(expr.position, shape[axis])
    return extents


def _iota(extent: int, entry: ir.Block, made: dict):
    """The int64 tensor ``0 .. extent - 1``, made at the top of the function (once per extent)."""
    if extent in made:
        return made[extent]
    i64 = ir.IntegerType.get_signless(64)
    first = entry.operations[0]
    with ir.InsertionPoint(first):
        empty = tensor.EmptyOp([extent], i64).result
        maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))])
        kinds = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")])
        op = linalg.GenericOp([empty.type], [], [empty], maps, kinds)
        block = op.regions[0].blocks.append(i64)
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.index_cast(i64, linalg.IndexOp(0).result)])
    made[extent] = op.result
    return op.result


def _rebuild(generic, entry: ir.Block, made: dict) -> bool:
    index_ops = [inner for inner in walk(generic) if inner.name == "linalg.index"]
    if not index_ops:
        return False
    extents = _loop_extents(generic)
    dims = sorted({ir.IntegerAttr(inner.attributes["dim"]).value for inner in index_ops})
    if any(d not in extents for d in dims):
        return False   # a loop no operand bounds statically: left as it is (not built by this compiler)
    n_loops = len(generic.iterator_types)
    ins, outs = list(generic.inputs), list(generic.outputs)
    coords = [_iota(extents[d], entry, made) for d in dims]
    maps = [m.value for m in generic.indexing_maps]
    coord_maps = [ir.AffineMap.get(n_loops, 0, [ir.AffineDimExpr.get(d)]) for d in dims]
    new_maps = maps[:len(ins)] + coord_maps + maps[len(ins):]
    with ir.InsertionPoint(generic):
        new = linalg.GenericOp([r.type for r in generic.results], ins + coords, outs,
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps]),
                               generic.iterator_types)
    for name in [a if isinstance(a, str) else a.name for a in generic.operation.attributes]:
        if name not in ("indexing_maps", "iterator_types", "operandSegmentSizes"):
            new.operation.attributes[name] = generic.operation.attributes[name]
    old = generic.regions[0].blocks[0]
    types = [a.type for a in old.arguments]
    i64 = ir.IntegerType.get_signless(64)
    block = new.regions[0].blocks.append(*(types[:len(ins)] + [i64] * len(dims) + types[len(ins):]))
    for k, arg in enumerate(old.arguments):
        arg.replace_all_uses_with(block.arguments[k if k < len(ins) else k + len(dims)])
    for inner in list(old.operations):
        block.append(inner.operation)
    for inner in index_ops:
        coordinate = block.arguments[len(ins) + dims.index(ir.IntegerAttr(inner.attributes["dim"]).value)]
        with ir.InsertionPoint(inner):
            value = arith.index_cast(ir.IndexType.get(), coordinate)
        inner.results[0].replace_all_uses_with(value)
        inner.erase()
    for before, after in zip(generic.results, new.results):
        before.replace_all_uses_with(after)
    generic.operation.erase()
    return True


def _candidates(fn) -> list:
    """The sparse generics of ``fn`` whose body reads ``linalg.index``."""
    found = []
    for op in walk(fn):
        if op.name != "linalg.generic":
            continue
        generic = op.opview
        sparse = any(_is_sparse(v) for v in generic.operands) or any(_is_sparse(r) for r in generic.results)
        if sparse and any(inner.name == "linalg.index" for inner in walk(generic)):
            found.append(generic)
    return found


def _functions(module):
    for fn in module.body.operations:
        fn = fn.operation
        if fn.name == "func.func" and fn.regions[0].blocks:
            yield fn


def _moved(module: ir.Module, tags: list[int]) -> set[int]:
    """The tags of the generics whose coordinate loops the sparsifier's scheduler moves (see the module
    docstring); all of them when the probe does not run through."""
    probe = ir.Module.parse(str(module))
    coords = {}
    for fn in _functions(probe):
        entry, made = fn.regions[0].blocks[0], {}
        for generic in _candidates(fn):
            tag = ir.IntegerAttr(generic.operation.attributes[_TAG]).value
            n_in = len(generic.inputs)
            dims = sorted({ir.IntegerAttr(inner.attributes["dim"]).value for inner in walk(generic)
                           if inner.name == "linalg.index"})
            if _rebuild(generic, entry, made):
                coords[tag] = (n_in, dims)
    try:
        pipeline.run_passes(probe, PROBE)
    except ir.MLIRError:
        return set(tags)
    kept = set()
    for fn in _functions(probe):
        for op in walk(fn):
            if op.name != "linalg.generic" or _TAG not in op.attributes:
                continue
            tag = ir.IntegerAttr(op.attributes[_TAG]).value
            if tag not in coords:
                continue
            n_in, dims = coords[tag]
            maps = [m.value for m in op.opview.indexing_maps]
            if all(list(maps[n_in + k].results) == [ir.AffineDimExpr.get(d)] for k, d in enumerate(dims)):
                kept.add(tag)
    return set(tags) - kept


def coordinates_as_operands(module: ir.Module) -> int:
    """Rewrite each sparse generic whose body reads ``linalg.index`` and whose loops the sparsifier reorders
    (``_moved``); returns how many were rewritten."""
    with module.context, ir.Location.unknown():
        found = [(f, fn, generic) for f, fn in enumerate(_functions(module)) for generic in _candidates(fn)]
        if not found:
            return 0
        for tag, (_, _, generic) in enumerate(found):
            generic.operation.attributes[_TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), tag)
        moved = _moved(module, list(range(len(found))))
        count, made = 0, {}
        for tag, (f, fn, generic) in enumerate(found):
            del generic.operation.attributes[_TAG]
            if tag in moved:
                count += _rebuild(generic, fn.regions[0].blocks[0], made.setdefault(f, {}))
    return count
