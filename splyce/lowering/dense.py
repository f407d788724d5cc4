"""Lowering rules for NumPy's elementwise functions (tracer/dense_ops.py) and for views of dense values
(tracer/indexing.py).

``SCALAR_OPS`` has one rule per elementwise head: a builder of its ``arith`` / ``math`` / ``complex`` ops on
operands already converted as the head's kind says (``Ufunc.kind``). Comparisons and predicates build an
``i1``; ``to_bool`` widens it to the ``i8`` that stores a bool (lowering/scalars.py).
"""

from __future__ import annotations

import threading

from splyce.lowering.scalars import (binary, cast, constant, element_type, extremum, is_complex, is_float,
                                     real_dtype)


def _math(name: str):
    def build(values, dtype):
        from mlir.dialects import complex as cplx, math

        if is_complex(dtype):
            return getattr(cplx, name)(values[0])
        return getattr(math, name)(values[0])
    return build


# MLIR's math-to-llvm lowers expm1 as exp(x) - 1 and log1p as log(1 + x), hundreds of ulps off for small x:
# these call libm's functions (as NumPy computes them), declared in the module by ``declare_libm``.
_LIBM = threading.local()


def _libm(name: str):
    def build(values, dtype):
        from mlir import ir
        from mlir.dialects import func

        symbol = name if dtype == "float64" else name + "f"
        needed = getattr(_LIBM, "needed", None)
        if needed is None:
            needed = _LIBM.needed = {}
        needed[symbol] = dtype
        return func.CallOp([element_type(dtype)], ir.FlatSymbolRefAttr.get(symbol), list(values)).result
    return build


def declare_libm(module) -> None:
    """Declare the libm functions the module's kernels call (and forget them for the next module)."""
    from mlir import ir
    from mlir.dialects import func

    needed = getattr(_LIBM, "needed", None) or {}
    _LIBM.needed = {}
    with ir.InsertionPoint.at_block_begin(module.body):
        for symbol, dtype in needed.items():
            t = element_type(dtype)
            func.FuncOp(symbol, ir.FunctionType.get([t], [t]), visibility="private")


def forget_libm() -> None:
    _LIBM.needed = {}


def _float_only(name: str, integer=None):
    """A math op on floats; on integers ``integer(value, dtype)`` (NumPy's floor / ceil / trunc / rint of
    integers are the identity; NumPy computes the others in float)."""
    def build(values, dtype):
        from mlir.dialects import math

        if not is_float(dtype):
            return integer(values[0], dtype)
        return getattr(math, name)(values[0])
    return build


def _compare(predicate: str):
    float_predicates = {"eq": "OEQ", "ne": "UNE", "lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE"}
    int_predicates = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}

    def build(values, dtype):
        from mlir.dialects import arith, complex as cplx

        a, b = values
        if is_complex(dtype):
            return (cplx.eq if predicate == "eq" else cplx.neq)(a, b)
        if is_float(dtype):
            return arith.cmpf(getattr(arith.CmpFPredicate, float_predicates[predicate]), a, b)
        return arith.cmpi(getattr(arith.CmpIPredicate, int_predicates[predicate]), a, b)
    return build


def _truediv(values, dtype):
    from mlir.dialects import arith, complex as cplx

    return (cplx.div if is_complex(dtype) else arith.divf)(*values)


def _powf(values, dtype):
    from mlir.dialects import math

    return math.powf(*values)   # floats only: the tracer gives integer powers as products


def _sign(values, dtype):
    """NumPy's sign: -1, 0 or 1 (NaN stays NaN, as NumPy's)."""
    from mlir.dialects import arith

    (x,) = values
    zero, one, minus = constant(0, dtype), constant(1, dtype), constant(-1, dtype)
    if is_float(dtype):
        positive = arith.cmpf(arith.CmpFPredicate.OGT, x, zero)
        negative = arith.cmpf(arith.CmpFPredicate.OLT, x, zero)
        is_zero = arith.cmpf(arith.CmpFPredicate.OEQ, x, zero)
        return arith.select(positive, one, arith.select(negative, minus, arith.select(is_zero, zero, x)))
    if dtype == "bool":
        return x
    positive = arith.cmpi(arith.CmpIPredicate.sgt, x, zero)
    negative = arith.cmpi(arith.CmpIPredicate.slt, x, zero)
    return arith.select(positive, one, arith.select(negative, minus, zero))


def _reciprocal(values, dtype):
    from mlir.dialects import arith, complex as cplx

    return (cplx.div if is_complex(dtype) else arith.divf)(constant(1, dtype), values[0])


def _logical(op: str):
    def build(values, dtype):
        from mlir.dialects import arith

        if op == "not":
            return arith.xori(values[0], _true())
        return {"and": arith.andi, "or": arith.ori, "xor": arith.xori}[op](*values)
    return build


def _true():
    from mlir import ir
    from mlir.dialects import arith

    i1 = ir.IntegerType.get_signless(1)
    return arith.constant(i1, ir.IntegerAttr.get(i1, 1))


def _predicate(name: str):
    def build(values, dtype):
        from mlir.dialects import arith, math

        (x,) = values
        if not is_float(dtype):   # integers and bools are never NaN or infinite
            return _true() if name == "isfinite" else arith.xori(_true(), _true())
        if name == "isnan":
            return arith.cmpf(arith.CmpFPredicate.UNO, x, x)
        magnitude = math.absf(x)
        infinity = constant(float("inf"), dtype)
        return arith.cmpf(arith.CmpFPredicate.OEQ if name == "isinf" else arith.CmpFPredicate.OLT, magnitude,
                          infinity)
    return build


def _where(values, dtype):
    from mlir.dialects import arith

    return arith.select(*values)


def _identity(value, dtype):
    return value


SCALAR_OPS = {
    "add": lambda v, d: binary("add", v[0], v[1], d), "sub": lambda v, d: binary("sub", v[0], v[1], d),
    "mul": lambda v, d: binary("mul", v[0], v[1], d), "max": lambda v, d: extremum("max", d)(*v),
    "min": lambda v, d: extremum("min", d)(*v), "truediv": _truediv, "powf": _powf,
    "exp": _math("exp"), "expm1": _libm("expm1"), "log": _math("log"), "log1p": _libm("log1p"),
    "log2": _math("log2"), "log10": _math("log10"), "sqrt": _math("sqrt"), "sin": _math("sin"),
    "cos": _math("cos"), "tan": _math("tan"), "tanh": _math("tanh"), "sinh": _math("sinh"),
    "cosh": _math("cosh"), "arctan": _math("atan"), "arcsinh": _math("asinh"),
    "floor": _float_only("floor", _identity), "ceil": _float_only("ceil", _identity),
    "trunc": _float_only("trunc", _identity), "rint": _float_only("roundeven", _identity),
    "sign": _sign, "square": lambda v, d: binary("mul", v[0], v[0], d), "reciprocal": _reciprocal,
    **{p: _compare(p) for p in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{op: _logical(op) for op in ("and", "or", "xor", "not")},
    **{p: _predicate(p) for p in ("isnan", "isinf", "isfinite")},
    "where": _where,
    "stored": lambda v, d: _true(),   # at each stored entry of a sparse operand (scipy's nnz counts them)
}


def to_bool(flag):
    """An ``i1`` as NumPy's bool (an ``i8`` holding 0 / 1)."""
    from mlir.dialects import arith

    return arith.extui(element_type("bool"), flag)


def truth(value, dtype: str):
    """``value != 0`` as an ``i1`` (NaN is true, as NumPy's ``bool(nan)``)."""
    from mlir.dialects import arith, complex as cplx

    zero = constant(0, dtype)
    if is_complex(dtype):
        return cplx.neq(value, zero)
    if is_float(dtype):
        return arith.cmpf(arith.CmpFPredicate.UNE, value, zero)
    return arith.cmpi(arith.CmpIPredicate.ne, value, zero)


def convert(value, from_dtype: str, to_dtype: str):
    """NumPy's ``astype``: widening as ``cast``, narrowing with C's conversions (floats truncate toward zero
    to integers, float64 rounds to float32, integers wrap, nonzero is True)."""
    from mlir.dialects import arith

    if from_dtype == to_dtype:
        return value
    if to_dtype == "bool":
        return to_bool(truth(value, from_dtype))
    if is_complex(from_dtype):   # the tracer refuses complex -> real; complex128 -> complex64
        from mlir.dialects import complex as cplx

        part = real_dtype(to_dtype)
        re = convert(cplx.re(value), real_dtype(from_dtype), part)
        im = convert(cplx.im(value), real_dtype(from_dtype), part)
        return cplx.create_(element_type(to_dtype), re, im)
    target = element_type(to_dtype)
    if is_float(from_dtype) and is_float(to_dtype) and from_dtype == "float64" and to_dtype == "float32":
        return arith.truncf(target, value)
    if is_float(from_dtype) and not is_float(to_dtype) and not is_complex(to_dtype):
        return arith.fptosi(target, value)
    if from_dtype == "int64" and to_dtype in ("int32",):
        return arith.trunci(target, value)
    return cast(value, from_dtype, to_dtype)


def lower_view(node, ctx, init, dense_out: bool):
    """A ``view`` node: a ``tensor.extract_slice`` of the operand, then one ``linalg.generic`` over the
    result that reads the slice through an affine map, which MLIR's elementwise fusion composes into the
    reader's, so a sparse kernel reads the operand at its own loops.

    Per operand axis (``spec``, tracer/indexing.py): ``("at", i)``, and a ``("dim", k, start, step)`` axis of
    length 1, is a unit slice at its index, dropped from the slice's rank (the result axis, if any, reads
    nothing: a unit axis). Another ``("dim", ...)`` axis is sliced from its lowest index, as long as result
    axis ``k``, every ``abs(step)``-th element (a strided subview once bufferized, no copy), and read at
    ``d_k``, or at ``n - 1 - d_k`` for a negative step. A diagonal reads one loop on two axes.

    Three forms are miscompiled downstream, so none is emitted. A gather at ``linalg.index`` positions: MLIR
    22's sparsifier reorders a fused sparse generic's loops (``GenericOpScheduler``, SparseReinterpretMap.cpp)
    by permuting its indexing maps and leaves ``linalg.index`` naming the old loop, so ``x[:, None] @ E`` read
    ``x`` at ``E``'s column (docs/planner.md). Offsets and steps in the map next to a constant result (a
    dense operand read at ``(d0 * 2, 1)``, ``S.multiply(X[::2, 1])``; or at a unit axis the reader broadcasts)
    crash the sparsifier. A subview with a negative stride came out of the LLVM lowering reading other
    elements (``S @ X[::-1, ::-2]``)."""
    from mlir import ir
    from mlir.dialects import tensor
    from splyce.lowering import linalg_ops as linalg

    (spec,) = node.params
    (arg,) = node.args
    rank = node.type.ndim
    source = ctx.values[arg]
    element = element_type(node.type.dtype)
    offsets, sizes, strides, kept, exprs = [], [], [], [], []
    for entry in spec:
        n = 1 if entry[0] == "at" else node.type.shape[entry[1]]
        if n == 1:
            offsets.append(entry[1] if entry[0] == "at" else entry[2]), sizes.append(1), strides.append(1)
            continue
        _, k, start, step = entry
        offsets.append(start if step > 0 else start + step * (n - 1))
        sizes.append(n), strides.append(abs(step)), kept.append(n)
        dim = ir.AffineDimExpr.get(k)
        exprs.append(dim if step > 0 else ir.AffineConstantExpr.get(n - 1) - dim)
    if len(kept) < len(spec) or sizes != list(arg.type.shape) or any(offsets) or any(s != 1 for s in strides):
        source = tensor.extract_slice(ir.RankedTensorType.get(kept, element), source, [], [], [], offsets, sizes,
                                      strides)
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, exprs)),
                             ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))])
    kinds = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)
    op = linalg.GenericOp([init.type], [source], [init], maps, kinds)
    block = op.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        value = block.arguments[0]
        if dense_out:
            value = binary("add", block.arguments[1], value, node.type.dtype)
        linalg.YieldOp([value])
    return op.result


def lower_gather(node, ctx, init, dense_out: bool):
    """A ``gather`` node the kernel computes (tracer/gather.py: a dense operand computed in the kernel, at an
    index argument the planner checked and wrapped into ``[0, n)`` before the kernel): one ``linalg.generic``
    over the result that reads the index through an affine map (its axes are the result's where NumPy puts
    them) and the operand by ``tensor.extract`` at the index's value (``arith.index_cast``) on the gathered
    axis, at ``start + step * i`` or a fixed index on the others."""
    from mlir import ir
    from mlir.dialects import arith, tensor
    from splyce.lowering import linalg_ops as linalg

    from splyce.tracer.gather import result_axes

    (spec,) = node.params
    arg, index = node.args
    rank = node.type.ndim
    axes, at = result_axes(spec, index.type.ndim)
    dims = [ir.AffineDimExpr.get(d) for d in range(rank)]
    index_map = ir.AffineMap.get(rank, 0, dims[at:at + index.type.ndim])
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(index_map), ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))])
    kinds = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)
    source = ctx.values[arg]
    op = linalg.GenericOp([init.type], [ctx.values[index]], [init], maps, kinds)
    element = element_type(node.type.dtype)
    block = op.regions[0].blocks.append(element_type(index.type.dtype), element)
    with ir.InsertionPoint(block):
        index_type = ir.IndexType.get()

        def const(v):
            return arith.constant(index_type, ir.IntegerAttr.get(index_type, v))

        loops = [linalg.IndexOp(k).result for k in range(rank)]
        indices = []
        for entry, k in zip(spec, axes):
            if entry[0] == "n":
                continue
            if entry[0] == "i":
                indices.append(const(entry[1]))
            elif entry[0] == "a":
                indices.append(arith.index_cast(index_type, block.arguments[0]))
            else:
                _, start, step, _ = entry
                position = loops[k] if step == 1 else arith.muli(loops[k], const(step))
                indices.append(position if start == 0 else arith.addi(position, const(start)))
        value = tensor.extract(source, indices)
        if dense_out:
            value = binary("add", block.arguments[1], value, node.type.dtype)
        linalg.YieldOp([value])
    return op.result


def lower_argreduce(node, ctx, init):
    """NumPy's argmax / argmin along one axis: one ``linalg.generic`` with two outputs, the running extremum
    (from the identity, an intermediate) and its index (the result). The reduced loop runs in increasing
    order and only a strictly better value (or a first NaN, as NumPy's) moves the index: the first
    occurrence wins."""
    from mlir import ir
    from mlir.dialects import arith, tensor
    from splyce.lowering import linalg_ops as linalg

    from splyce.lowering.scalars import extremum_identity

    kind, axis = node.params
    (arg,) = node.args
    dtype = arg.type.dtype
    rank = arg.type.ndim
    dims = [ir.AffineDimExpr.get(d) for d in range(rank)]
    out_map = ir.AffineMap.get(rank, 0, [e for d, e in enumerate(dims) if d != axis])
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank)),
                             ir.AffineMapAttr.get(out_map), ir.AffineMapAttr.get(out_map)])
    kinds = ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{'reduction' if d == axis else 'parallel'}>")
                              for d in range(rank)])
    element = element_type(dtype)
    best = linalg.fill(extremum_identity(kind, dtype),
                       outs=[tensor.EmptyOp(list(node.type.shape), element).result])
    op = linalg.GenericOp([best.type, init.type], [ctx.values[arg]], [best, init], maps, kinds)
    block = op.regions[0].blocks.append(element, element, element_type("int64"))
    with ir.InsertionPoint(block):
        value, current, index = block.arguments
        position = arith.index_cast(element_type("int64"), linalg.IndexOp(axis).result)
        if is_float(dtype):
            better = arith.cmpf(arith.CmpFPredicate.OGT if kind == "max" else arith.CmpFPredicate.OLT, value, current)
            first_nan = arith.andi(arith.cmpf(arith.CmpFPredicate.UNO, value, value),
                                   arith.cmpf(arith.CmpFPredicate.ORD, current, current))
            better = arith.ori(better, first_nan)
        else:
            better = arith.cmpi(arith.CmpIPredicate.sgt if kind == "max" else arith.CmpIPredicate.slt, value, current)
        linalg.YieldOp([arith.select(better, value, current), arith.select(better, position, index)])
    return op.results[1]
