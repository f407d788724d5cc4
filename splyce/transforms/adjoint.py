"""Reverse mode over the trace IR: one adjoint rule per node kind (tracer/ir.py), each building the cotangent
of its operands from the cotangent of its result with the tracer's own constructors, so the backward program
is a trace like any other (planned, fused, compiled).

Cotangents are those of the dense equivalents, kept sparse where they are only needed at a pattern: the
cotangent of a sparse operand of a contraction is the contraction sampled at that operand's pattern (an
SDDMM: ``einsum("ij,ik,jk->ij", ones(A), G, X)`` for ``A @ X``), never a dense matrix. That is exact for the
gradient w.r.t. stored values: the value of a sparse node outside its pattern is structurally zero (a function
of no stored value), so only its cotangent at the pattern reaches the arguments.

A cotangent is a ``Tracer`` or a ``Fill``: one number broadcast to the node's shape (the seed 1.0 of a scalar
loss, and what ``sum`` passes back), folded into the rules' constants instead of built as an array of ones."""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sps

from splyce.errors import TraceError
from splyce.tracer import captures, indexing
from splyce.tracer.base import MAX_OPERANDS, Tracer, contract
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer.ir import ContractParams, Node, TensorType, walk
from splyce.tracer.tracer import add, multiply, sum_, todense
from splyce.transforms.derivatives import ONE, gradient

LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Parts(dict):
    """The cotangent of a ``loop`` node: its results' cotangents by position (what its ``loop_out`` nodes
    pass back)."""


class Fill:
    """A cotangent that is ``value`` at every position of ``shape``."""

    __slots__ = ("value", "shape")

    def __init__(self, value, shape):
        self.value, self.shape = value, tuple(shape)


def one_hot(i: int, n: int, dtype) -> Node:
    """The constant one-hot vector of length n at ``i``: the adjoint of a fixed index, as a contraction."""
    onehot = np.zeros(n, dtype=dtype)
    onehot[i] = 1
    return captures.constant_node(onehot)


def selection(start: int, step: int, m: int, n: int, dtype) -> Node:
    """The constant n x m 0/1 CSR matrix taking a strided slice's m positions ``start + step * j`` of an axis of
    n back to their places: the adjoint of a slice, as a contraction with it."""
    rows = start + step * np.arange(m)
    return captures.constant_node(sps.csr_array((np.ones(m, dtype=dtype), (rows, np.arange(m))), shape=(n, m)))


def materialize(ct, like: Node) -> Tracer:
    """A ``Fill`` as a dense tracer of ``like``'s shape (a Tracer is returned as it is)."""
    if not isinstance(ct, Fill):
        return ct
    if not ct.shape:
        return apply("where", True, ct.value, Tracer(like))
    dtype = like.type.dtype if inexact(like.type.dtype) else "float64"
    subs = LETTERS[: len(ct.shape)]
    ops = [ones_vector(n, dtype) for n in ct.shape]
    return contract_many(ops, list(subs), subs, None if ct.value == 1 else ct.value, "dense")


def inexact(dtype: str) -> bool:
    return dtype.startswith(("float", "complex"))


def backward(outputs, wrt) -> list:
    """The cotangents of the nodes ``wrt`` (None where no path leads to them) given ``outputs``: pairs of an
    output node and its cotangent (a Tracer of its shape, or a number for a 0-d output). ``wrt`` nodes are
    leaves: what they are computed from is not differentiated."""
    wrt_set = set(wrt)
    order = walk([node for node, _ in outputs])
    relevant: set[Node] = set()
    for node in order:
        if inexact(node.type.dtype) and (node in wrt_set or any(a in relevant for a in node.args)):
            relevant.add(node)
    cts: dict[Node, object] = {}

    def emit(node: Node, ct) -> None:
        if node not in relevant or ct is None:
            return
        if isinstance(ct, Tracer) and ct.node.type.dtype != node.type.dtype and node.op != "loop":
            # a cotangent has its primal's dtype, as JAX's (a float64 path into a float32 value is rounded
            # there; the elementwise rules build their nodes in the primal's dtype)
            ct = astype(ct, node.type.dtype)
        old = cts.get(node)
        cts[node] = ct if old is None else accumulate(old, ct)

    emit.relevant = relevant      # read by the loops' rule (loop_adjoint.py): which free values need a cotangent

    for node, seed in outputs:
        emit(node, seed)
    for node in reversed(order):
        ct = cts.get(node)
        if ct is None or node in wrt_set or node.op == "input":
            continue
        if node.op == "loop_out":
            emit(node.args[0], Parts({node.params[0]: ct}))
            continue
        rule = RULES.get(node.op)
        if rule is None:
            raise TraceError(f"grad: the traced operation {node.op!r} ({node.type}) is not differentiable "
                             "inside splyce.grad")
        rule(node, ct, emit)
    return [cts.get(node) for node in wrt]


def accumulate(a, b):
    if isinstance(a, Parts):
        out = Parts(a)
        for k, v in b.items():
            out[k] = v if k not in out else accumulate(out[k], v)
        return out
    if isinstance(a, Fill) and isinstance(b, Fill):
        return Fill(a.value + b.value, a.shape)
    if isinstance(a, Fill):
        a, b = b, a
    if isinstance(b, Fill):
        return apply("add", todense(a) if a.node.type.is_sparse else a, b.value)
    if a.node.type.is_sparse != b.node.type.is_sparse:   # sparse + dense is dense: add to the dense one
        sparse, dense = (a, b) if a.node.type.is_sparse else (b, a)
        return add(dense, sparse)
    return add(a, b)


def finalize(node, ct) -> Tracer:
    """The cotangent of an argument node in its own kind: dense for a dense one, on its pattern for a
    sparse one, in its dtype; zeros when the output does not depend on it."""
    t = node.type
    if ct is None:
        if t.is_sparse:
            return contract([pattern_ones(node).node], [LETTERS[: t.ndim]],
                            LETTERS[: t.ndim], scale=0.0, out_format=t.format, op="grad")
        return apply("where", False, Tracer(node), 0.0)
    if isinstance(ct, Fill):
        if t.is_sparse:
            return _cast(sample(ct, node), t.dtype)
        ct = materialize(ct, node)
    if t.is_sparse:
        if not ct.node.type.is_sparse or not exact(ct.node, node):   # a union's cotangent: sampled
            ct = sample(ct, node)
    elif ct.node.type.is_sparse:
        ct = todense(ct)
    return _cast(ct, t.dtype)


def _cast(ct: Tracer, dtype: str) -> Tracer:
    return ct if ct.node.type.dtype == dtype else astype(ct, dtype)



# -- helpers ------------------------------------------------------------------------------------------------

def pattern_ones(node: Node, dtype: str | None = None) -> Tracer:
    """1 at every stored entry of a sparse ``node`` (its pattern, explicit zeros included), in its format."""
    stored = apply("stored", Tracer(node), sparse_ok=True)
    return astype(stored, dtype or node.type.dtype)


def sample(ct, node: Node) -> Tracer:
    """The cotangent ``ct`` of a sparse ``node`` at the node's pattern (sparse, in its format)."""
    ones = pattern_ones(node, _ct_dtype(ct, node))
    subs = LETTERS[: node.type.ndim]
    if isinstance(ct, Fill):
        return contract([ones.node], [subs], subs, scale=None if ct.value == 1 else ct.value,
                        out_format=node.type.format, op="grad")
    return contract([ones.node, ct.node], [subs, subs], subs, out_format=node.type.format, op="grad")


def is_pattern_of(n: Node, node: Node) -> bool:
    """Whether ``n`` is ``pattern_ones(node)`` (of any dtype)."""
    return (n.op == "ewise" and n.params[0][0] == "cast" and n.args[0].op == "ewise"
            and n.args[0].params[0][0] == "stored" and n.args[0].args[0] is node)


def exact(n: Node, node: Node) -> bool:
    """Whether the sparse cotangent ``n`` is known to store exactly ``node``'s pattern (built by ``sample`` or
    an SDDMM at it, and sums, scalings and elementwise products of those); else a superset (a union's)."""
    if not n.type.is_sparse:
        return False
    if n.op == "contract":
        if is_pattern_of(n.args[0], node):
            return True
        return len(n.args) == 1 and exact(n.args[0], node)
    if n.op == "combine" and n.params[0] in (1, -1):
        return exact(n.args[0], node) and exact(n.args[1], node)
    if n.op == "ewise":   # the sparse elementwise rule: every term times its last operand, the sampled cotangent
        return n.params[0][0] == "cast" and exact(n.args[0], node) or exact(n.args[-1], node)
    return False


def _ct_dtype(ct, node: Node) -> str:
    if isinstance(ct, Tracer) and inexact(ct.node.type.dtype):
        return ct.node.type.dtype
    return node.type.dtype


def ones_vector(n: int, dtype: str) -> Node:
    """A constant vector of ones (frozen into the trace): it broadcasts a cotangent along an axis."""
    return captures.constant_node(np.ones(n, dtype=dtype))


def contract_many(ops: list[Node], subs: list[str], output: str, scale, out_format) -> Tracer:
    """``contract`` of any number of operands: the last two merge while more than ``MAX_OPERANDS`` remain."""
    ops, subs = list(ops), list(subs)
    while len(ops) > MAX_OPERANDS:
        a, b = ops.pop(), ops.pop()
        sa, sb = subs.pop(), subs.pop()
        keep = set(output) | set("".join(subs))
        out = "".join(dict.fromkeys(c for c in sb + sa if c in keep))
        ops.append(contract([b, a], [sb, sa], out, out_format="dense", op="grad").node)
        subs.append(out)
    return contract(ops, subs, output, scale=scale, out_format=out_format, op="grad")


def unbroadcast(ct: Tracer, read: str, shape: tuple[int, ...]) -> Tracer:
    """The cotangent of an operand read through ``read`` (an ``ewise`` reads string) from the cotangent
    ``ct`` of the broadcast result: summed over the axes the operand was broadcast along."""
    ndim = ct.node.type.ndim
    full = LETTERS[:ndim]
    target = read.replace("0", "")
    if read == full:
        return ct
    if ct.node.type.is_sparse:
        ct = todense(ct)
    out = contract([ct.node], [full], target, out_format="dense", op="grad")
    if "0" in read:
        out = Tracer(indexing.expand(out.node, shape, "grad"))
    return out


# -- rules --------------------------------------------------------------------------------------------------

def contract_rule(node: Node, ct, emit) -> None:
    params: ContractParams = node.params[0]
    for i, arg in enumerate(node.args):
        if not inexact(arg.type.dtype):
            continue
        factor = 1 if params.scale is None else params.scale
        ops, subs = [], []
        if isinstance(ct, Fill):   # a constant cotangent: a factor (the sum over its indices is the others')
            factor = factor * ct.value
        else:
            ops.append(ct.node)
            subs.append(params.output)
        for j, (other, s) in enumerate(zip(node.args, params.inputs)):
            if j != i:
                ops.append(other)
                subs.append(s)
        target = params.inputs[i]
        if isinstance(ct, Fill) and len(node.args) == 1 and not arg.type.is_sparse:   # sum, transpose, scale
            emit(arg, Fill(factor, arg.type.shape))
            continue
        if arg.type.is_sparse:   # sampled at the operand's pattern: an SDDMM, never a dense matrix
            dtype = node.type.dtype if inexact(node.type.dtype) else arg.type.dtype
            ops.insert(0, pattern_ones(arg, dtype).node)
            subs.insert(0, target)
            out_format = arg.type.format
        else:
            have = set("".join(subs))
            for c in target:
                if c not in have:
                    ops.append(ones_vector(arg.type.shape[target.index(c)], node.type.dtype))
                    subs.append(c)
            # the contraction's own default: the cotangent of a dense value read by an elementwise product
            # with a sparse one (``m * (u @ v.T)``) is sparse, and stays so (its dense array is never built)
            out_format = None
        scale = None if factor == 1 else factor
        if not ops:   # a 0-d operand scaled into a 0-d result, with a number for cotangent
            emit(arg, Fill(factor, ()))
            continue
        order = reduction_order(ops, subs, target) if not arg.type.is_sparse else None
        if order is not None:
            emit(arg, contract(ops, subs, target, scale=scale, out_format="dense", op="grad", order=order))
            continue
        emit(arg, contract_many(ops, subs, target, scale, out_format))


PIN_REDUCTIONS = True      # (a switch for the before / after measurement of docs/guide/transformations.md)
REDUCTION_MIN = 4096


def reduction_order(ops: list[Node], subs: list[str], target: str) -> str | None:
    """The loop order pinned for a weight's cotangent: a dense product of two dense operands summed over a
    long axis into a small result (``X.T @ (A.T @ G)``, 100000 x 16 by 100000 x 16 into 16 x 16), run with
    the summed axis outermost, so each operand is streamed once and a fused producer computed once per entry;
    the planner's order (the result's axes outside) streamed the operands once per result row and recomputed
    the producer each time: 1.32 s vs 0.14 s (``einsum("ik,ij->kj", X, tanh(Y))``, n = 100000, 2-core Zen 4,
    loaded). None when that is not the shape of the product."""
    if not PIN_REDUCTIONS or len(ops) != 2 or any(n.type.is_sparse for n in ops):
        return None
    sizes = {}
    for n, s in zip(ops, subs):
        sizes.update(zip(s, n.type.shape))
    summed = [c for c in dict.fromkeys("".join(subs)) if c not in target]
    if not summed or int(np.prod([sizes[c] for c in summed])) < REDUCTION_MIN \
            or int(np.prod([sizes[c] for c in target])) > REDUCTION_MIN:
        return None
    return "".join(sorted(summed, key=lambda c: -sizes[c])) + target


def combine_rule(node: Node, ct, emit) -> None:
    sign = node.params[0]
    a, b = node.args
    if sign in (1, -1):
        emit(a, ct)
        emit(b, ct if sign == 1 else scaled(ct, -1.0))
        return
    if a.type.is_sparse or b.type.is_sparse:
        _sparse_extremum_rule(node, ct, emit)
        return
    elementwise_rule(node, (a, b), (sign, ("arg", 0), ("arg", 1)), (LETTERS[:node.type.ndim],) * 2, ct, emit)


def _sparse_extremum_rule(node: Node, ct, emit) -> None:
    """``maximum`` / ``minimum`` with a sparse operand: the dense function's derivative (1 where an operand
    wins, 0.5 each on a tie, JAX's; an entry a sparse operand does not store is its 0), sampled at each sparse
    operand's pattern. The operands are compared as dense arrays (O(size), not O(nnz))."""
    a, b = node.args
    x = todense(Tracer(a)) if a.type.is_sparse else Tracer(a)
    y = todense(Tracer(b)) if b.type.is_sparse else Tracer(b)
    g = materialize(ct, node)
    g = todense(g) if g.node.type.is_sparse else g
    wins = apply("gt" if node.params[0] == "max" else "lt", x, y)
    w_a = apply("where", wins, 1.0, apply("where", apply("eq", x, y), 0.5, 0.0))
    for arg, w in ((a, w_a), (b, apply("sub", 1.0, w_a))):
        if not inexact(arg.type.dtype):
            continue
        c = apply("mul", g, w)
        c = c if c.node.type.dtype == node.type.dtype else astype(c, node.type.dtype)
        emit(arg, sample(c, arg) if arg.type.is_sparse else c)


def scaled(ct, factor: float):
    if isinstance(ct, Fill):
        return Fill(ct.value * factor, ct.shape)
    return multiply(ct, factor)


def map_rule(node: Node, ct, emit) -> None:
    kind = node.params[0]
    full = LETTERS[: node.type.ndim]
    elementwise_rule(node, node.args, (kind[0], ("arg", 0), *kind[1:]), (full,), ct, emit)


def ewise_rule(node: Node, ct, emit) -> None:
    expr = node.params[0]
    reads = node.params[1] if len(node.params) > 1 else (LETTERS[: node.type.ndim],) * len(node.args)
    elementwise_rule(node, node.args, expr, tuple(reads), ct, emit)


def elementwise_rule(node: Node, args, expr, reads, ct, emit) -> None:
    """The cotangent of each operand of an elementwise expression (nested ones too: the chain rule,
    derivatives.gradient), summed over the axes it is broadcast along."""
    if not inexact(node.type.dtype):
        return
    derivs = gradient(expr)
    full = LETTERS[: node.type.ndim]
    dtype = node.type.dtype
    for k, arg in enumerate(args):
        if not inexact(arg.type.dtype) or k not in derivs:
            continue
        deriv = derivs[k]
        if node.type.is_sparse:   # one sparse operand and numbers: the cotangent at its pattern
            g = sample(ct, arg if len(args) == 1 and arg.type.is_sparse else node)
            if deriv == ONE:
                emit(arg, g)
                continue
            body = distributed(("arg", len(args)), deriv)
            out = Node("ewise", tuple(args) + (g.node,), (body, tuple(reads) + (full,)),
                       TensorType(node.type.shape, dtype, node.type.format))
            emit(arg, Tracer(out))
            continue
        if isinstance(ct, Fill) and deriv[0] == "const":   # a constant cotangent, summed where broadcast
            count = int(np.prod(node.type.shape, dtype=np.int64)) // max(1, int(np.prod(arg.type.shape,
                                                                                         dtype=np.int64)))
            emit(arg, Fill(ct.value * deriv[1] * count, arg.type.shape))
            continue
        if isinstance(ct, Fill) and not _covers(deriv, reads, full):
            ct = materialize(ct, node)
        if isinstance(ct, Fill):
            operands, g_expr, g_reads = tuple(args), ("const", float(ct.value)), ()
        else:
            g = todense(ct) if ct.node.type.is_sparse else ct
            operands, g_expr, g_reads = tuple(args) + (g.node,), ("arg", len(args)), (full,)
        if deriv == ONE and g_reads:
            full_ct = g
        else:
            body = g_expr if deriv == ONE else ("mul", g_expr, deriv)
            used = _used_args(body)
            keep = [i for i in range(len(operands)) if i in used]
            remap = {old: new for new, old in enumerate(keep)}
            body = _renumber(body, remap)
            all_reads = tuple(reads) + g_reads
            full_ct = Tracer(Node("ewise", tuple(operands[i] for i in keep), (body, tuple(all_reads[i] for i in keep)),
                                  TensorType(node.type.shape, dtype, None)))
        if arg.type.ndim == 0 and node.type.ndim == 0:
            emit(arg, full_ct)
        else:
            emit(arg, unbroadcast(full_ct, reads[k], arg.type.shape))


def distributed(g, deriv):
    """``g * deriv`` with a constant term of ``deriv`` multiplied out (``g * (1 - t*t)`` as ``g - g*(t*t)``),
    so that every term of a sparse value's cotangent is zero where ``g`` is: the MLIR sparsifier crashed on
    a non-zero-preserving subexpression fused into a union of sparse cotangents (2026-12-07)."""
    if deriv[0] in ("add", "sub") and deriv[1][0] == "const":
        rest = distributed(g, deriv[2])
        return (deriv[0], ("mul", g, deriv[1]), rest)
    return ("mul", g, deriv)


def _covers(expr, reads, full: str) -> bool:
    """Whether the operands ``expr`` uses read every axis of the result (an ``ewise`` node needs them)."""
    axes = set()
    for k in _used_args(expr):
        axes |= set(reads[k]) - {"0"}
    return axes == set(full) if full else bool(_used_args(expr))


def _used_args(expr) -> set[int]:
    if expr[0] == "arg":
        return {expr[1]}
    if expr[0] == "const":
        return set()
    out = set()
    for x in expr[1:]:
        if isinstance(x, tuple):
            out |= _used_args(x)
    return out


def _renumber(expr, remap):
    if expr[0] == "arg":
        return ("arg", remap[expr[1]])
    if expr[0] == "const":
        return expr
    return (expr[0], *[_renumber(x, remap) if isinstance(x, tuple) else x for x in expr[1:]])


def reduce_rule(node: Node, ct, emit) -> None:
    """max / min: the cotangent shared among the entries equal to the result (JAX's rule)."""
    (arg,) = node.args
    kind, axes, keepdims = node.params[:3]
    kept = tuple(1 if d in axes else n for d, n in enumerate(arg.type.shape))
    # a sparse operand: compared as its dense array (an entry it does not store is a 0 that may win or tie),
    # the cotangent sampled at its pattern
    x = todense(Tracer(arg)) if arg.type.is_sparse else Tracer(arg)
    y = Tracer(indexing.expand(node, kept, "grad")) if kept != node.type.shape else Tracer(node)
    g = ct.value if isinstance(ct, Fill) else ct
    if isinstance(ct, Tracer):
        g = todense(ct) if ct.node.type.is_sparse else ct
        if kept != ct.node.type.shape:
            g = Tracer(indexing.expand(g.node, kept, "grad"))
    hits = astype(apply("eq", x, y), node.type.dtype)
    count = sum_(hits, tuple(axes), keepdims=True)
    out = apply("truediv", apply("mul", hits, g), count)
    emit(arg, sample(out, arg) if arg.type.is_sparse else out)


def view_rule(node: Node, ct, emit) -> None:
    """A view's cotangent scattered back: a contraction with constant 0/1 selection matrices per sliced axis
    (one-hot vectors for fixed indices), the identity where an axis is read whole."""

    (arg,) = node.args
    (spec,) = node.params
    dtype = node.type.dtype
    if isinstance(ct, Fill) and not ct.shape:   # a 0-d view: ct * onehot
        ops, subs, scale = [], [], ct.value
    else:
        ct = materialize(ct, node)
        g = todense(ct) if ct.node.type.is_sparse else ct
        ops, subs, scale = [g.node], [None], None
    result_letters = LETTERS[: node.type.ndim]
    used = iter(LETTERS[node.type.ndim:])
    readers = {}
    for entry in spec:
        if entry[0] == "dim":
            readers[entry[1]] = readers.get(entry[1], 0) + 1
    target = ""
    for d, entry in enumerate(spec):
        n = arg.type.shape[d]
        if entry[0] == "at":
            c = next(used)
            ops.append(one_hot(entry[1], n, dtype))
            subs.append(c)
            target += c
            continue
        _, k, start, step = entry
        m = node.type.shape[k]
        if start == 0 and step == 1 and m == n and readers[k] == 1:
            target += result_letters[k]
            continue
        c = next(used)
        ops.append(selection(start, step, m, n, dtype))
        subs.append(c + result_letters[k])
        target += c
    if subs and subs[0] is None:
        subs[0] = result_letters
    if not ops:
        emit(arg, Fill(scale, ()))
        return
    emit(arg, contract_many(ops, subs, target, scale, "dense"))


RULES = {"contract": contract_rule, "combine": combine_rule, "map": map_rule, "ewise": ewise_rule,
         "reduce": reduce_rule, "view": view_rule}
# "gather": gather_adjoint.py, "loop": loop_adjoint.py (registered there)
