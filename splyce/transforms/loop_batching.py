"""``splyce.vmap`` through compiled loops (tracer/loops.py), as JAX batches ``fori_loop`` / ``while_loop`` /
``scan``: one loop over batched carries, its body batched once (a batch of SpMVs per step becomes one SpMM).

When any of a loop's operands is batched, every carry leaf is (an unbatched initial value repeated along the
batch axis) and so is every per-step output of a scan; a batched scanned input is read with its batch axis
second (``(length, batch, ...)``), and a scan's stacked outputs are returned batch-first. A ``while_loop``
whose condition is batched runs, as JAX's, while any example's condition holds; an example whose condition
no longer holds keeps its carry (``where(cond, body(c), c)``)."""

from __future__ import annotations

import numpy as np

from splyce.tracer import captures, indexing, loops
from splyce.tracer.base import Tracer, contract
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer.ir import Node, TensorType
from splyce.tracer.tracer import sum_, transpose
from splyce.transforms.loop_adjoint import clone

_LETTERS = "abcde"


def repeated(node: Node, size: int) -> Node:
    """``node`` repeated along a new leading batch axis of ``size``."""
    subs = _LETTERS[1: 1 + node.type.ndim]
    ones = captures.constant_node(np.ones(size, dtype=node.type.dtype))
    return contract([ones, node], ["a", subs], "a" + subs, out_format="dense", op="vmap").node


def _batched_type(t: TensorType, size: int) -> TensorType:
    return TensorType((size,) + t.shape, t.dtype, None)


def _swap01(node: Node) -> Node:
    order = (1, 0) + tuple(range(2, node.type.ndim))
    return transpose(Tracer(node), order).node


def batch_body(outputs, mapping: dict, batch, size: int) -> dict:
    """The body's nodes reaching ``outputs`` batched: ``mapping`` holds its batched placeholders and free
    values (each with a leading batch axis); ``batch`` is vmap's rule for one node."""
    stop = set(mapping)
    order, seen = [], set()
    stack = [(n, False) for n in reversed(tuple(outputs))]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen or node in stop:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in seen and a not in stop)
    out = dict(mapping)
    for node in order:
        if node in out or not any(a in out for a in node.args):
            continue
        out[node] = batch(node, [out.get(a) for a in node.args], size)
    return out


def batch_loop(node: Node, new_args: list, size: int, batch) -> Node:
    """The loop ``node`` with its operands ``new_args`` (batched ones not None) batched: a new loop node."""
    spec: loops.LoopSpec = node.params[0]
    nc, nx = spec.n_carry, spec.n_xs
    args = list(node.args)
    k = nc + (1 if spec.has_cond else 0)
    n_bounds = (spec.lower is None) + (spec.upper is None) if spec.traced_bounds else 0
    for i, (a, b) in enumerate(zip(args, new_args)):
        if b is not None and (i == nc and spec.has_cond):
            continue
        if b is not None and k + nx <= i < k + nx + n_bounds:
            raise ValueError("vmap: a fori_loop whose bounds are batched values is not supported; give every "
                             "example the same bounds")
    hole = loops.Placeholders()          # the new loop's body placeholders, in order
    uid, holes = hole.uid, hole.made

    first = 0 if spec.index is None else 1
    index_ph = [spec.placeholders[0]] if spec.index is not None else []
    carry_ph = spec.placeholders[first:first + nc]
    x_ph = spec.placeholders[first + nc:first + nc + nx]
    new_carry_ph = [hole(_batched_type(p.type, size)) for p in carry_ph]
    new_x_ph = [hole(_batched_type(p.type, size)) if new_args[k + i] is not None else p for i, p in enumerate(x_ph)]
    frees = args[k + nx + n_bounds:]
    mapping = dict(zip(carry_ph, new_carry_ph))
    mapping.update({p: q for p, q in zip(x_ph, new_x_ph) if p is not q})
    batched_free = {f: new_args[k + nx + n_bounds + j] for j, f in enumerate(spec.free)
                    if new_args[k + nx + n_bounds + j] is not None}
    mapping.update(batched_free)
    body = batch_body(spec.outputs, mapping, batch, size)

    def batched_out(o):
        b = body.get(o)
        return b if b is not None else repeated(o, size)

    new_outputs = [batched_out(o) for o in spec.outputs[:nc]]
    cond_in = None
    if spec.has_cond:
        cond = spec.outputs[nc]
        if cond in body:    # a batched condition: any example's; the others keep their carry
            # the condition on the step's carry-in: the body's condition (on its carry-out) cloned onto it
            again = clone([cond], dict(zip(spec.outputs[:nc], carry_ph)))[cond]
            c_in = batch_body([again], mapping, batch, size)[again]
            kept = []
            for new, old in zip(new_outputs, new_carry_ph):
                shape = (size,) + (1,) * (old.type.ndim - 1)
                c = indexing.reshape(Tracer(c_in), shape) if old.type.ndim > 1 else Tracer(c_in)
                kept.append(apply("where", c, Tracer(new), Tracer(old)).node)
            new_outputs = kept
            any_cond = apply("gt", sum_(astype(Tracer(body[cond]), "int64")), 0).node
            cond_in = args[nc] if new_args[nc] is None else \
                apply("gt", sum_(astype(Tracer(new_args[nc]), "int64")), 0).node
            new_outputs.append(any_cond)
        else:
            new_outputs.append(cond)
            cond_in = args[nc]
    new_outputs += [batched_out(o) for o in spec.outputs[len(spec.outputs) - spec.n_ys:]]
    placeholders = index_ph + new_carry_ph + new_x_ph
    free, _ = loops.free_values(new_outputs, placeholders)
    rename = dict(zip(spec.free, frees))
    new_spec = loops.LoopSpec(spec.kind, nc, nx, spec.n_ys, spec.index, placeholders, new_outputs, free,
                              spec.lower, spec.upper, spec.traced_bounds, spec.length, spec.paths, uid,
                              reverse=spec.reverse)
    init = [new_args[j] if new_args[j] is not None else repeated(args[j], size) for j in range(nc)]
    xs = [_swap01(new_args[k + i]) if new_args[k + i] is not None else args[k + i] for i in range(nx)]
    bounds = args[k + nx:k + nx + n_bounds]
    loop_args = init + ([cond_in] if spec.has_cond else []) + xs + list(bounds) + [rename.get(f, f) for f in free]
    return loops.loop_node(new_spec, tuple(loop_args))


def batch_loop_out(node: Node, new_loop: Node) -> Node:
    """A result of the batched loop ``new_loop``, batch-first (a scan's stacked outputs swapped)."""
    spec: loops.LoopSpec = new_loop.params[0]
    k = node.params[0]
    out = loops.outputs_of(new_loop)[k]
    return out if k < spec.n_carry else _swap01(out)
