"""Elementwise chains fuse into one ``ewise`` node: one ``linalg.generic`` whose body evaluates the chain.

``2 * a + b``, ``abs(a - b) ** 2``, ``maximum(a, b) * 0.5``: every elementwise op (sums and differences,
products of same-shaped operands, scalar factors and divisors, ``abs``, integer powers, maximum / minimum)
of a value read once folds into the op that reads it. The sparsifier derives the iteration from the body
(a sum iterates the union of its operands' entries, a product the intersection), so one kernel does the
whole chain in one pass with no intermediate tensors.

An expression is nested tuples: ``("arg", k)`` (the k-th operand), ``("const", value)``, ``(op, x, y)``
for ``op`` in add / sub / mul / max / min, ``("abs", x)``, ``("neg", x)``, ``("conj", x)``, ``("pow", x, k)``,
``("div", x, value)``, and NumPy's functions (``("exp", x)``, ``("gt", x, y)``, ``("where", c, x, y)``,
``("cast", x, dtype)``...: tracer/dense_ops.py). An ``ewise`` node's params are ``(expression, reads)``:
per operand, how the result's axes read it (``"ab"`` in place, ``"b"`` / ``"0b"`` broadcast along the first
axis). A chain fuses through operands read in place; a broadcast operand stays an operand (fusing it would
recompute it at every position it is broadcast to).
"""

from __future__ import annotations

from splyce.tracer.ir import ContractParams, Node

BINARY = {1: "add", -1: "sub", "max": "max", "min": "min"}


def elementwise_form(node: Node):
    """``(args, expression, reads)`` when ``node`` is elementwise, else None."""
    form = _form(node)
    if form is None:
        return None
    args, expr = form
    if node.op == "ewise":
        reads = node.params[1] if len(node.params) > 1 else (_axes(node),) * len(args)
    elif node.op == "contract":   # a scalar factor is read at no axis
        reads = tuple(_axes(node) if subs else "" for subs in node.params[0].inputs)
    else:
        reads = (_axes(node),) * len(args)
    return args, expr, tuple(reads)


def _axes(node: Node) -> str:
    return "abcd"[: node.type.ndim]


def _form(node: Node):
    if node.op == "combine":
        return node.args, (BINARY[node.params[0]], ("arg", 0), ("arg", 1))
    if node.op == "map":
        kind = node.params[0]
        if len(kind) == 1:   # abs, neg, conj
            return node.args, (kind[0], ("arg", 0))
        return node.args, (kind[0], ("arg", 0), kind[1])
    if node.op == "ewise":
        return node.args, node.params[0]
    if node.op == "contract":
        params: ContractParams = node.params[0]
        if params.order is not None or any(subs not in (params.output, "") for subs in params.inputs):
            return None   # pinned, a reduction or a transposition
        if any(not subs for subs in params.inputs) and (not params.output or node.type.is_sparse
                                                        or any(a.type.is_sparse for a in node.args)):
            return None   # a scalar factor of dense values only (CG's ``alpha * p``): NumPy's product, no
            #               temporary once it fuses with the update that reads it
        expr = ("arg", 0)
        for k in range(1, len(node.args)):
            expr = ("mul", expr, ("arg", k))
        if params.scale is not None:
            expr = ("mul", expr, ("const", params.scale))
        return node.args, expr
    return None


def _remap(expr, mapping):
    """``expr`` with operand k renamed to ``mapping[k]`` (an index or a whole sub-expression)."""
    if expr[0] == "arg":
        return mapping[expr[1]]
    if expr[0] == "const":
        return expr
    head, *rest = expr
    return (head, *[_remap(x, mapping) if isinstance(x, tuple) else x for x in rest])


FUSE_PREDICATE_CASTS = True     # (False: the switch of the before / after measurement, docs/guide/transformations.md)


def _cast_of_predicate(arg: Node, expr, k: int) -> bool:
    """Whether ``expr`` casts its operand ``k``, a boolean value (``stored(a)``, ``x > 0``), to another dtype:
    the predicate fuses into the cast (a 0 / 1 at each entry, as the cast of the stored boolean), so the
    ones at a sparse matrix's pattern that a gradient samples at are one pass, not a boolean copy of the
    matrix and its cast."""
    return FUSE_PREDICATE_CASTS and arg.type.dtype == "bool" and expr[0] == "cast" and expr[1] == ("arg", k)


def fuse_elementwise(outputs, uses: dict[Node, int]):
    """Rebuild the DAG with every elementwise op as an ``ewise`` node that has absorbed the elementwise
    ops feeding it which nothing else reads. Returns the new outputs and the number of ops absorbed."""
    mapping: dict[Node, Node] = {}
    absorbed = 0
    from splyce.tracer.ir import walk

    for node in walk(outputs):
        args = tuple(mapping.get(a, a) for a in node.args)
        new = node if args == node.args else Node(node.op, args, node.params, node.type)
        form = elementwise_form(new)
        if form is None:
            mapping[node] = new
            continue
        f_args, expr, f_reads = form
        slots: list[Node] = []
        reads: list[str] = []
        index: dict[tuple, int] = {}

        def slot(arg: Node, read: str):
            if (arg, read) not in index:
                index[(arg, read)] = len(slots)
                slots.append(arg)
                reads.append(read)
            return ("arg", index[(arg, read)])

        parts = []
        for old_arg, arg, read in zip(node.args, f_args, f_reads):
            inner = elementwise_form(arg) if uses.get(old_arg) == 1 else None
            if inner is not None and arg.type.shape == new.type.shape \
                    and (arg.type.dtype == new.type.dtype or _cast_of_predicate(arg, expr, len(parts))) \
                    and read == _axes(new) and not _dense_union_into_numpy(arg, inner[0], expr):
                inner_args, inner_expr, inner_reads = inner
                parts.append(_remap(inner_expr, [slot(a, r) for a, r in zip(inner_args, inner_reads)]))
                absorbed += 1
            else:
                parts.append(slot(arg, read))
        fused = _remap(expr, parts)
        mapping[node] = Node("ewise", tuple(slots), (fused, tuple(reads)), new.type)
    return tuple(mapping[o] for o in outputs), absorbed


def fuse_reductions(outputs, uses: dict[Node, int]):
    """A max / min over every axis of a sparse ``ewise`` value that nothing else reads (``abs(a - b).max()``)
    evaluates the expression in the reduction's own loop: the ``reduce`` node takes the expression's
    operands and the expression as a fourth param, and no sparse intermediate is written (the sparsifier's
    sparse output inserts every entry through its workspace: on two 100000 x 100000 meshes of 1.6M entries
    each, 26 ms against 3 ms for the reduction of a stored matrix). Only when every operand is sparse, read
    in place and stored in one order (the reduction co-iterates them as the elementwise loop would have).
    The values folded are the intermediate's, in the same order, and the intermediate's stored positions
    (where an implicit zero joins the candidates) are the expression's iteration points, counted the same way
    (lowering/to_mlir.py)."""
    from splyce.tracer.ir import walk

    mapping: dict[Node, Node] = {}
    results = set(outputs)
    for node in walk(outputs):
        args = tuple(mapping.get(a, a) for a in node.args)
        new = node if args == node.args else Node(node.op, args, node.params, node.type)
        if node.op == "reduce" and len(node.params) == 3 and _fusable_into_reduction(new, node.args[0], uses,
                                                                                     results):
            (arg,) = new.args
            new = Node("reduce", arg.args, (*node.params, arg.params[0]), node.type)
        mapping[node] = new
    return tuple(mapping[o] for o in outputs)


def _fusable_into_reduction(node: Node, old_arg: Node, uses: dict[Node, int], results) -> bool:
    (arg,) = node.args
    if arg.op != "ewise" or uses.get(old_arg) != 1 or old_arg in results or not arg.type.is_sparse:
        return False
    _, axes, _ = node.params
    if sorted(axes) != list(range(arg.type.ndim)) or arg.type.dtype != node.type.dtype:
        return False
    _, _, reads = elementwise_form(arg)
    if any(r != _axes(arg) for r in reads) or not all(a.type.is_sparse for a in arg.args):
        return False
    return len({a.type.format.order for a in arg.args} | {arg.type.format.order}) == 1


_PLANNER_HEADS = {"arg", "const", "add", "sub", "mul", "max", "min", "abs", "neg", "conj", "pow", "div"}


def _dense_union_into_numpy(inner: Node, inner_args, outer_expr) -> bool:
    """Whether absorbing ``inner`` would put a value that reads a sparse operand but is not zero where it
    stores nothing (a dense result: ``a - d``) under one of NumPy's functions. The lowering computes such a
    function of a sparse-reading value on the stored entries only (``sparse_tensor.unary``: valid for f(0) = 0
    of a sparse value), so ``maximum(a - d, -0.5)`` stays two loops."""
    if inner.type.is_sparse or not any(a.type.is_sparse for a in inner_args):
        return False
    return _has_numpy_head(outer_expr)


def _has_numpy_head(expr) -> bool:
    if not isinstance(expr, tuple) or not expr or not isinstance(expr[0], str):
        return False
    if expr[0] not in _PLANNER_HEADS:
        return True
    if expr[0] in ("max", "min") and any(isinstance(x, tuple) and x[0] == "const" for x in expr[1:]):
        return True
    return any(_has_numpy_head(x) for x in expr[1:] if isinstance(x, tuple))


# heads that can map a NaN to a number (NaN > 0 is False, NaN ** 0 is 1, int(NaN) is undefined)
_HIDE_NAN = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "not", "isnan", "isinf", "isfinite", "where",
             "powf", "stored"}


def propagates_nan(node: Node) -> bool:
    """Whether a NaN in an operand of ``node`` shows in its result at the same position (or is dropped with
    the position, as a view does): what lets a scattering plan be checked by its results (plan.Plan.kept)."""
    if node.op == "reduce" and len(node.params) > 3:    # an expression fused into the reduction
        return not _hides_nan(node.params[3])
    if node.op != "ewise":
        return True
    return not _hides_nan(node.params[0])


def _hides_nan(expr) -> bool:
    head = expr[0]
    if head in _HIDE_NAN or (head == "cast" and not expr[2].startswith(("float", "complex"))):
        return True
    return any(_hides_nan(x) for x in expr[1:] if isinstance(x, tuple) and x and isinstance(x[0], str)
               and x[0] not in ("arg", "const"))
