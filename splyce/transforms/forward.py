"""``splyce.jvp``: forward mode over the trace IR, one tangent rule per node kind, with the derivative table of
the reverse mode (derivatives.py). The tangent of a sparse value is sparse, on (a subset of) its pattern: a
sparse argument's tangent is a direction for its stored values, given as a matrix of the same pattern."""

from __future__ import annotations

import weakref

import numpy as np

from splyce.errors import TraceError
from splyce.runtime import pytree
from splyce.runtime.dispatcher import Jitted
from splyce.tracer import indexing, loops
from splyce.tracer.base import Tracer, contract
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer.ir import ContractParams, Node, TensorType, walk
from splyce.tracer.tracer import negative, sum_, todense
from splyce.transforms import adjoint
from splyce.transforms.derivatives import ONE, gradient


def tangents(outputs, seeds: dict) -> list:
    """The tangents of the nodes ``outputs`` (None where zero) given ``seeds``: node -> its tangent."""
    ts: dict[Node, Tracer] = dict(seeds)
    for node in walk(outputs):
        if node in ts or node.op == "input" or not adjoint.inexact(node.type.dtype):
            continue
        arg_ts = [ts.get(a) for a in node.args]
        if all(t is None for t in arg_ts):
            continue
        if node.op == "loop_out":
            ts[node] = arg_ts[0].get(node.params[0])
            continue
        rule = RULES.get(node.op)
        if rule is None:
            raise TraceError(f"jvp: the traced operation {node.op!r} ({node.type}) is not differentiable inside "
                             "splyce.jvp")
        t = rule(node, arg_ts)
        if node.op == "loop":
            ts[node] = t
            continue
        if t is not None and not node.type.is_sparse and t.node.type.is_sparse:
            t = todense(t)
        ts[node] = t
    return [ts.get(o) for o in outputs]


def _sum(terms):
    out = None
    for t in terms:
        if t is not None:
            out = t if out is None else adjoint.accumulate(out, t)
    return out


def contract_rule(node: Node, ts):
    params: ContractParams = node.params[0]
    fmt = node.type.format if node.type.is_sparse else "dense"
    terms = []
    for i, t in enumerate(ts):
        if t is None:
            continue
        args = list(node.args)
        args[i] = t.node
        terms.append(contract(args, list(params.inputs), params.output, scale=params.scale, out_format=fmt,
                              op="jvp"))
    return _sum(terms)


def combine_rule(node: Node, ts):
    sign = node.params[0]
    ta, tb = ts
    if sign in (1, -1):
        if tb is not None and sign == -1:
            tb = negative(tb)
        return _sum([ta, tb])
    if node.type.is_sparse or any(a.type.is_sparse for a in node.args):
        raise TraceError("jvp: maximum / minimum of sparse operands is not differentiable yet")
    full = adjoint.LETTERS[: node.type.ndim]
    return elementwise(node, node.args, (sign, ("arg", 0), ("arg", 1)), (full, full), ts)


def map_rule(node: Node, ts):
    kind = node.params[0]
    full = adjoint.LETTERS[: node.type.ndim]
    return elementwise(node, node.args, (kind[0], ("arg", 0), *kind[1:]), (full,), ts)


def ewise_rule(node: Node, ts):
    expr = node.params[0]
    reads = node.params[1] if len(node.params) > 1 else (adjoint.LETTERS[: node.type.ndim],) * len(node.args)
    return elementwise(node, node.args, expr, tuple(reads), ts)


def elementwise(node: Node, args, expr, reads, ts):
    """The tangent of an elementwise expression (nested ones too): the sum over the operands of the
    operand's tangent times the expression's derivative in it (derivatives.gradient)."""
    derivs = gradient(expr)
    terms = []
    n = len(args)
    for k, (arg, t) in enumerate(zip(args, ts)):
        if t is None or k not in derivs:
            continue
        deriv = derivs[k]
        if node.type.is_sparse:
            body = adjoint.distributed(("arg", n), deriv)
            fmt = node.type.format
        else:
            if t.node.type.is_sparse:
                t = todense(t)
            body = ("mul", ("arg", n), deriv)
            fmt = None
        if deriv == ONE and reads[k] == adjoint.LETTERS[: node.type.ndim] and t.node.type.shape == node.type.shape:
            terms.append(t)
            continue
        terms.append(Tracer(Node("ewise", tuple(args) + (t.node,), (body, tuple(reads) + (reads[k],)),
                                 TensorType(node.type.shape, node.type.dtype, fmt))))
    return _sum(terms)


def reduce_rule(node: Node, ts):
    (arg,) = node.args
    (t,) = ts
    if arg.type.is_sparse:
        raise TraceError("jvp: max / min of a sparse tensor is not differentiable yet")
    kind, axes, keepdims = node.params[:3]
    kept = tuple(1 if d in axes else n for d, n in enumerate(arg.type.shape))
    y = Tracer(indexing.expand(node, kept, "jvp")) if kept != node.type.shape else Tracer(node)
    hits = astype(apply("eq", Tracer(arg), y), node.type.dtype)
    count = sum_(hits, tuple(axes), keepdims=keepdims)
    return apply("truediv", sum_(apply("mul", hits, t), tuple(axes), keepdims=keepdims), count)


def view_rule(node: Node, ts):
    (t,) = ts
    (spec,) = node.params
    return Tracer(indexing.view(t.node, spec, node.type.shape, "jvp"))


def loop_rule(node: Node, ts) -> dict:
    """A loop's tangents (``jax.jvp`` through ``fori_loop`` / ``while_loop`` / ``scan``, traced bounds too): one
    loop whose carry is the primal carry and its tangent, its body the forward body and its tangent program
    (the same placeholders, so the primal steps are the loop's own), the scanned inputs' tangents scanned
    beside them; a free value's tangent is a free value. Returns {result position: tangent}."""
    spec: loops.LoopSpec = node.params[0]
    nc, nx, ny = spec.n_carry, spec.n_xs, spec.n_ys
    k_x = nc + (1 if spec.has_cond else 0)
    n_bounds = len(node.args) - k_x - nx - len(spec.free)
    first = 0 if spec.index is None else 1
    carry_ph = spec.placeholders[first:first + nc]
    x_ph = spec.placeholders[first + nc:first + nc + nx]
    free_actual = node.args[k_x + nx + n_bounds:]
    hole = loops.Placeholders()          # the new loop's body placeholders, in order
    uid, holes = hole.uid, hole.made

    diff_c = [j for j in range(nc) if adjoint.inexact(carry_ph[j].type.dtype)]
    diff_x = [i for i in range(nx) if ts[k_x + i] is not None]
    tan_c = [hole(carry_ph[j].type) for j in diff_c]
    tan_x = [hole(x_ph[i].type) for i in diff_x]
    seeds = {carry_ph[j]: Tracer(p) for j, p in zip(diff_c, tan_c)}
    seeds.update({x_ph[i]: Tracer(p) for i, p in zip(diff_x, tan_x)})
    for f, t in zip(spec.free, ts[k_x + nx + n_bounds:]):
        if t is not None:
            seeds[f] = t
    outs = list(spec.outputs)
    ys = outs[len(outs) - ny:]
    diff_y = [k for k in range(ny) if adjoint.inexact(ys[k].type.dtype)]
    found = tangents([outs[j] for j in diff_c] + [ys[k] for k in diff_y], seeds)

    def dense_of(t, like: Node) -> Node:
        t = _zeros_like(like) if t is None else t
        t = todense(t) if t.node.type.is_sparse else t
        return (t if t.node.type.dtype == like.type.dtype else astype(t, like.type.dtype)).node

    t_carry = [dense_of(t, outs[j]) for j, t in zip(diff_c, found)]
    t_ys = [dense_of(t, ys[k]) for k, t in zip(diff_y, found[len(diff_c):])]
    new_outputs = outs[:nc] + t_carry + outs[nc:len(outs) - ny] + ys + t_ys
    placeholders = list(spec.placeholders[:first]) + list(carry_ph) + tan_c + list(x_ph) + tan_x
    free, _ = loops.free_values(new_outputs, placeholders)
    rename = dict(zip(spec.free, free_actual))
    new_spec = loops.LoopSpec(spec.kind, nc + len(tan_c), nx + len(tan_x), ny + len(t_ys),
                              spec.index, placeholders, new_outputs, free, spec.lower, spec.upper,
                              spec.traced_bounds, spec.length, spec.paths, uid, reverse=spec.reverse)
    init = list(node.args[:nc]) + [dense_of(ts[j], node.args[j]) for j in diff_c]
    xs = list(node.args[k_x:k_x + nx]) + [dense_of(ts[k_x + i], node.args[k_x + i]) for i in diff_x]
    args = init + list(node.args[nc:k_x]) + xs + list(node.args[k_x + nx:k_x + nx + n_bounds]) \
        + [rename.get(f, f) for f in free]
    results = loops.outputs_of(loops.loop_node(new_spec, tuple(args)))
    out = {}
    for n, j in enumerate(diff_c):
        out[j] = Tracer(results[nc + n])
    base = nc + len(tan_c) + ny
    for n, k in enumerate(diff_y):
        out[nc + k] = Tracer(results[base + n])
    return out


RULES = {"contract": contract_rule, "combine": combine_rule, "map": map_rule, "ewise": ewise_rule,
         "reduce": reduce_rule, "view": view_rule, "loop": loop_rule}


def _zeros_like(node: Node) -> Tracer:
    if node.type.is_sparse:
        subs = adjoint.LETTERS[: node.type.ndim]
        return contract([adjoint.pattern_ones(node).node], [subs], subs, scale=0.0, out_format=node.type.format,
                        op="jvp")
    return apply("where", False, Tracer(node), 0.0)


def traced_jvp(fun, primals, tangents_in):
    p_leaves, _, p_structure = pytree.flatten(tuple(primals))
    t_leaves, _, t_structure = pytree.flatten(tuple(tangents_in))
    if p_structure != t_structure or len(p_leaves) != len(t_leaves):
        raise ValueError("jvp: primals and tangents must have the same structure")
    seeds = {}
    for p, t in zip(p_leaves, t_leaves):
        if not isinstance(p, Tracer) or not isinstance(t, Tracer):
            raise TypeError(f"jvp: primals and tangents must be arrays, got {type(p).__name__} and "
                            f"{type(t).__name__}")
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"jvp: a tangent of shape {t.shape} for a primal of shape {p.shape}")
        if not adjoint.inexact(p.node.type.dtype):
            raise TypeError(f"jvp: primal dtype {p.node.type.dtype} is not a float dtype")
        if p.node in seeds:
            raise ValueError("jvp: the same traced value is passed as two primals; pass it once")
        if p.node.type.is_sparse != t.node.type.is_sparse:
            raise ValueError("jvp: the tangent of a sparse primal is a sparse matrix of its pattern (and of a dense "
                             "primal a dense array)")
        seeds[p.node] = t
    out = fun(*primals)
    o_leaves, _, o_structure = pytree.flatten(out)
    nodes = [o.node for o in o_leaves if isinstance(o, Tracer)]
    found = dict(zip(nodes, tangents(nodes, seeds)))
    t_out = []
    for o in o_leaves:
        if not isinstance(o, Tracer):
            t_out.append(o)
            continue
        t = found.get(o.node)
        t = _zeros_like(o.node) if t is None else t
        if t.node.type.dtype != o.node.type.dtype:
            t = astype(t, o.node.type.dtype)
        t_out.append(t)
    return out, pytree.unflatten(o_structure, t_out)


def _same_pattern(p, t) -> bool:
    if hasattr(p, "indptr") and hasattr(t, "indptr"):
        return (p.format == t.format and np.array_equal(p.indptr, t.indptr) and np.array_equal(p.indices, t.indices))
    if hasattr(p, "coords") and callable(p.coords) and hasattr(t, "coords") and callable(t.coords):
        return p.nnz == t.nnz and all(np.array_equal(a, b) for a, b in zip(p.coords(), t.coords()))
    return True


def jvp(fun, primals, tangents):
    """``(fun(*primals), the derivative of fun at primals along tangents)``, as ``jax.jvp``.

    ``primals`` and ``tangents`` are tuples of the same structure; the tangent of a sparse primal is a sparse
    matrix (or SparseTensor) with the primal's pattern (a direction for its stored values). Inside a jitted
    function it is traced in place; called on arrays it runs as a jitted program of its own."""
    primals, tangents = tuple(primals), tuple(tangents)
    leaves, _, _ = pytree.flatten((primals, tangents))
    if any(isinstance(x, Tracer) for x in leaves):
        return traced_jvp(fun, primals, tangents)
    p_leaves, _, _ = pytree.flatten(primals)
    t_leaves, _, _ = pytree.flatten(tangents)
    for p, t in zip(p_leaves, t_leaves):
        if not _same_pattern(p, t):
            raise ValueError("jvp: the tangent of a sparse primal must have the primal's pattern (the same "
                             "format, indptr and indices): it is a direction for the stored values")
    runner = _RUNNERS.get(fun)
    if runner is None:
        runner = _RUNNERS[fun] = Jitted(lambda p, t: traced_jvp(fun, p, t))
    return runner(primals, tangents)


_RUNNERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # fun -> its jitted jvp
