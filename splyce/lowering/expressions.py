"""Scalar expressions of the trace IR lowered to MLIR arithmetic: the body of an elementwise ``linalg.generic``
(``expression``, NumPy's promotion and its ufuncs, zero-preserving maps of sparse operands), the dtype an
expression evaluates in (``expression_dtype``) and NumPy's maximum / minimum over sparse operands as a
``sparse_tensor.binary`` (``sparse_extremum``). lowering/to_mlir.py builds the loop nests around them.
"""

from __future__ import annotations

from splyce.errors import LoweringError
from splyce.lowering import dense
from splyce.lowering.scalars import (absolute, binary, cast, conjugate, constant, divide_by, element_type, extremum, is_complex, needs_unary, real_dtype)
from splyce.tracer import dense_ops
from splyce.tracer.ir import Node


def frozen(value, dtype: str):
    """The value read from a buffer the op writes back, behind an ``llvm.freeze`` (a no-op in machine code).
    Without it LLVM's x86 back end folds ``store(select(c, k, load p), p)``, the shape of ``maximum(y, 0)``
    written over ``y``, into a masked store: ``vmaskmovpd`` on AVX2 ran that loop at 2x the time of a plain
    store (docs/guide/planner.md, "Glue written over the step's array"). Complex values are structs only
    after lowering: not frozen."""
    if dtype.startswith("complex"):
        return value
    from mlir.dialects import llvm

    return llvm.freeze(value)


def expression(expr, args, node: Node, dtype: str, sparse: bool):
    """Evaluate ``expr`` in ``dtype`` (the promotion of its leaves, so every operand converts up to it) except
    below ``abs``, which evaluates its operand in the operand's own dtype (complex -> real magnitude)."""
    head = expr[0]
    if head == "arg":
        k = expr[1]
        return converted(args[k], node.args[k].type.dtype, dtype, sparse)
    if head == "const":
        return constant(expr[1], dtype)
    if head in NUMPY_HEADS or (sparse and head in ("max", "min") and _one_sparse_child(expr, node)):
        natural = expression_dtype(expr, node)
        return dense.convert(_numpy_head(expr, args, node, natural, sparse), natural, dtype)
    if head == "abs":
        inner = expression_dtype(expr[1], node) or dtype
        magnitude = absolute(expression(expr[1], args, node, inner, sparse), inner)
        return cast(magnitude, real_dtype(inner), dtype)
    x = expression(expr[1], args, node, dtype, sparse)
    if head in ("add", "sub", "mul"):
        return binary(head, x, expression(expr[2], args, node, dtype, sparse), dtype)
    if head == "conj":
        return _zero_preserving(x, dtype, dtype, lambda v: conjugate(v, dtype), sparse)
    if head == "neg":
        from mlir.dialects import complex as cplx

        return cplx.neg(x)   # complex values only (real negation is a scale by -1)
    if head == "pow":
        result = x
        for _ in range(expr[2] - 1):
            result = binary("mul", result, x, dtype)
        return result
    if head == "div":
        return divide_by(x, expr[2], dtype)
    if head in ("max", "min"):
        y = expression(expr[2], args, node, dtype, sparse)
        return sparse_extremum(head, x, y, dtype, sparse)
    raise LoweringError(f"internal error: unknown elementwise operation {head!r}")


# heads of NumPy's functions (tracer/dense_ops.py); the others above are the planner's own
NUMPY_HEADS = (set(dense_ops.UFUNCS) | {"cast"}) - {"add", "sub", "mul", "max", "min"}


def _numpy_head(expr, args, node: Node, natural: str, sparse: bool):
    """A NumPy head in its ``natural`` dtype (``expression_dtype``). With one operand that reads a sparse
    value (the others constants: the tracer allows only functions with f(0) = 0 there) it is computed in a
    ``sparse_tensor.unary``'s present region, so the sparsifier keeps that operand's pattern."""
    head, children = expr[0], [x for x in expr[1:] if isinstance(x, tuple)]
    kind = dense_ops.UFUNCS[head].kind if head in dense_ops.UFUNCS else "cast"
    own = [expression_dtype(c, node) or natural for c in children]
    if kind == "compare":
        wanted = [dense_ops.compute_dtype(head, [d if d is not None else c[1] for d, c in zip(
            (expression_dtype(c, node) for c in children), children)])] * len(children)
    elif kind in ("logical", "predicate", "cast"):
        wanted = own
    elif kind == "where":
        wanted = [own[0], natural, natural]
    else:
        wanted = [natural] * len(children)

    def build(values):
        if kind in ("logical",) or (kind == "where"):
            values = [dense.truth(v, d) if k == 0 or kind == "logical" else v
                      for k, (v, d) in enumerate(zip(values, wanted))]
        if kind == "cast":
            return dense.convert(values[0], wanted[0], expr[2])
        result = dense.SCALAR_OPS[head](values, wanted[-1] if kind != "where" else natural)
        return dense.to_bool(result) if kind in ("compare", "logical", "predicate") else result

    reading = [k for k, c in enumerate(children) if _reads_sparse(c, node)] if sparse else []
    if len(reading) != 1 or any(c[0] != "const" for k, c in enumerate(children) if k != reading[0]):
        return build([expression(c, args, node, d, sparse) for c, d in zip(children, wanted)])
    from mlir import ir
    from mlir.dialects import sparse_tensor

    (k,) = reading
    value = expression(children[k], args, node, wanted[k], sparse)
    op = sparse_tensor.UnaryOp(element_type(natural), value)
    block = op.presentRegion.blocks.append(element_type(wanted[k]))
    with ir.InsertionPoint(block):
        values = [block.arguments[0] if j == k else constant(c[1], wanted[j]) for j, c in enumerate(children)]
        sparse_tensor.YieldOp([build(values)])
    return op.result


def _reads_sparse(expr, node: Node) -> bool:
    if expr[0] == "arg":
        return node.args[expr[1]].type.is_sparse
    return any(_reads_sparse(x, node) for x in expr[1:] if isinstance(x, tuple))


def _one_sparse_child(expr, node: Node) -> bool:
    """A binary head of one operand reading a sparse value and a constant (``maximum(a, 0)``)."""
    children = [x for x in expr[1:] if isinstance(x, tuple)]
    return any(c[0] == "const" for c in children) and any(_reads_sparse(c, node) for c in children)


def converted(value, from_dtype: str, to_dtype: str, sparse: bool):
    """``cast``, inside a ``sparse_tensor.unary`` where the sparsifier needs one (scalars.needs_unary)."""
    if sparse and needs_unary(from_dtype, to_dtype):
        return _zero_preserving(value, from_dtype, to_dtype, lambda v: cast(v, from_dtype, to_dtype), sparse)
    return cast(value, from_dtype, to_dtype)


def _zero_preserving(value, from_dtype: str, to_dtype: str, build, sparse: bool):
    """``build(value)`` for a function with f(0) = 0; in a sparse kernel wrapped in ``sparse_tensor.unary``
    (present: ``build``, absent: nothing), so that ops the sparsifier has no rule for (``complex.conj``,
    ``complex.create``) keep the operand's iteration."""
    from mlir import ir
    from mlir.dialects import sparse_tensor

    if not sparse:
        return build(value)
    op = sparse_tensor.UnaryOp(element_type(to_dtype), value)
    block = op.presentRegion.blocks.append(element_type(from_dtype))
    with ir.InsertionPoint(block):
        sparse_tensor.YieldOp([build(block.arguments[0])])
    return op.result


def expression_dtype(expr, node: Node) -> str | None:
    """The dtype NumPy computes ``expr`` in (None for a lone constant: Python scalars are weak)."""
    import numpy as np

    head = expr[0]
    if head == "arg":
        return node.args[expr[1]].type.dtype
    if head == "const":
        return None
    if head == "abs":
        inner = expression_dtype(expr[1], node)
        return inner and real_dtype(inner)
    if head == "cast":
        return expr[2]
    if head in NUMPY_HEADS:
        children = [x for x in expr[1:] if isinstance(x, tuple)]
        return dense_ops.result_dtype(head, [expression_dtype(c, node) if c[0] != "const" else c[1]
                                             for c in children])
    parts = [x for x in expr[1:] if isinstance(x, tuple)]
    known = [np.dtype(d) for d in (expression_dtype(x, node) for x in parts) if d is not None]
    if not known:
        return None
    # a constant is a weak Python scalar (NEP 50): int64 * -0.5 is float64, float32 * 2.0 stays float32
    weak = [x[1] for x in parts if x[0] == "const"]
    result = np.result_type(*known, *weak).name
    if head == "div" and not (result.startswith("float") or is_complex(result)):
        result = "float64"
    return result


def sparse_extremum(head: str, x, y, dtype: str, sparse: bool):
    """NumPy's maximum / minimum (NaN propagates). Over sparse operands a ``sparse_tensor.binary`` tells
    the sparsifier the union semantics: an entry stored on one side only meets an implicit zero."""
    from mlir import ir
    from mlir.dialects import sparse_tensor

    pick = extremum(head, dtype)
    if not sparse:
        return pick(x, y)
    typ = element_type(dtype)
    op = sparse_tensor.BinaryOp(typ, x, y)
    regions = ((op.overlapRegion, 2, lambda a: pick(a[0], a[1])),
               (op.leftRegion, 1, lambda a: pick(a[0], constant(0, dtype))),
               (op.rightRegion, 1, lambda a: pick(constant(0, dtype), a[0])))
    for region, arity, build in regions:
        block = region.blocks.append(*([typ] * arity))
        with ir.InsertionPoint(block):
            sparse_tensor.YieldOp([build(list(block.arguments))])
    return op.result
