"""Reverse mode through compiled loops (tracer/loops.py), as JAX differentiates ``fori_loop`` with static
bounds and ``scan``: the forward steps' carries are stored, then a reverse ``scan`` runs each step's adjoint.

The rule builds two loops out of the forward loop's traced body, never unrolling it:

1. a *history* scan: the same body, its carry-in of every step stacked as per-step outputs (a ``fori_loop``
   is a scan over its index ``arange(lower, upper)``);
2. a *reverse* scan (``reverse=True``) over those stored carries (and the scanned inputs, and the cotangents
   of the per-step outputs): its carry is the cotangent of the loop's carry, plus one accumulator per free
   value the loss needs a cotangent for (a weight matrix the body reads); its body is the forward body cloned
   onto the stored carry, differentiated by ``adjoint.backward`` (so the step's own products are planned,
   fused and compiled like any other program, once); its per-step outputs are the cotangents of the scanned
   inputs.

A ``while_loop``, or a ``fori_loop`` whose bounds are traced values, has no static trip count to store the
carries of: refused with JAX's own message, as ``jax.grad`` refuses it (forward mode, ``splyce.jvp``, is the
way through those, as in JAX).

A sparse free value's cotangent stays on its pattern: each step's cotangent of it is a sum of sampled
products (``contract(pattern_ones(A), G, H)``, the SDDMM the contraction rule builds); their per-step dense
factors are the reverse scan's per-step outputs, and after the loop each term is one sampled product that
contracts the step axis too (``einsum("ij,ti,tj->ij", ones(A), Gs, Hs)``), no carry of the matrix's shape.
What is not such a term (a sparse value built from it in the body, ``A * h[:, None]``) is accumulated in a
dense carry of its shape and sampled at its pattern after the loop."""

from __future__ import annotations

import numpy as np

from splyce.tracer import captures, loops
from splyce.tracer.base import Tracer, contract
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer.ir import Node, TensorType
from splyce.tracer.tracer import todense
from splyce.transforms import adjoint
from splyce.transforms.adjoint import Fill, Parts, backward, finalize, inexact, materialize, sample

WHILE_MESSAGE = ("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic "
                 "start/stop values. Try using lax.scan, or using fori_loop with static start/stop.")


def clone(outputs, mapping: dict) -> dict:
    """The nodes of a loop body reaching ``outputs`` rebuilt with ``mapping``'s nodes (its placeholders, its
    free values) replaced; returns the extended mapping (old node -> new)."""
    memo = dict(mapping)
    order: list[Node] = []
    seen: set[Node] = set()
    stack = [(n, False) for n in reversed(tuple(outputs))]
    while stack:
        node, expanded = stack.pop()
        if node in memo or (node in seen and not expanded):
            continue
        if expanded:
            order.append(node)
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in memo and a not in seen)
    for node in order:
        if node in memo:
            continue
        args = tuple(memo.get(a, a) for a in node.args)
        memo[node] = node if args == node.args else Node(node.op, args, node.params, node.type)
    return memo


def _dense(t: TensorType) -> TensorType:
    return TensorType(t.shape, t.dtype, None)


def _stacked(t: TensorType, n: int) -> TensorType:
    return TensorType((n,) + t.shape, t.dtype, None)


def loop_rule(node: Node, ct, emit) -> None:
    spec: loops.LoopSpec = node.params[0]
    if spec.kind == "while" or spec.traced_bounds:
        raise ValueError(WHILE_MESSAGE)
    parts = ct if isinstance(ct, Parts) else Parts()
    nc, nx, ny = spec.n_carry, spec.n_xs, spec.n_ys
    init = node.args[:nc]
    xs = node.args[nc:nc + nx]
    free_actual = node.args[nc + nx:]
    rename = dict(zip(spec.free, free_actual))
    outs = loops.outputs_of(node)

    first = 0 if spec.index is None else 1
    index_ph = spec.placeholders[0] if spec.index is not None else None
    carry_ph = list(spec.placeholders[first:first + nc])
    x_ph = list(spec.placeholders[first + nc:first + nc + nx])
    new_carry = list(spec.outputs[:nc])
    ys_out = list(spec.outputs[nc:nc + ny])
    if spec.kind == "fori":
        n, indices = spec.upper - spec.lower, np.arange(spec.lower, max(spec.lower, spec.upper), dtype=np.int64)
    else:
        n, indices = spec.length, None
    carry_cts = [parts.get(j) for j in range(nc)]
    if n <= 0:    # no step: the carry passes through
        for j in range(nc):
            emit(init[j], carry_cts[j])
        return

    extra_xs, extra_ph = [], []
    if index_ph is not None:
        extra_xs.append(captures.constant_node(indices))
        extra_ph.append(index_ph)

    # 1. the history: the forward steps again, each step's carry-in stacked
    uid = loops.new_uid()
    h_ph = carry_ph + x_ph + extra_ph
    h_out = new_carry + carry_ph
    h_free, _ = loops.free_values(h_out, h_ph)
    h_spec = loops.LoopSpec("scan", nc, nx + len(extra_ph), nc, None, h_ph, h_out, h_free, None, None, False, n,
                            spec.paths, uid, reverse=spec.reverse)
    history = loops.loop_node(h_spec, tuple(init) + tuple(xs) + tuple(extra_xs)
                              + tuple(rename.get(f, f) for f in h_free))
    stored = loops.outputs_of(history)[nc:]

    # 2. the reverse scan of the steps' adjoints
    relevant = getattr(emit, "relevant", None)
    hole = loops.Placeholders()          # the new loop's body placeholders, in order
    uid, holes = hole.uid, hole.made

    diff_c = [j for j in range(nc) if inexact(carry_ph[j].type.dtype)]
    diff_x = [i for i in range(nx) if inexact(x_ph[i].type.dtype) and (relevant is None or xs[i] in relevant)]
    body_free, _ = loops.free_values(spec.outputs, spec.placeholders)
    diff_f = [f for f in dict.fromkeys(rename.get(f, f) for f in body_free)
              if inexact(f.type.dtype) and (relevant is None or f in relevant)]
    ct_ph = [hole(carry_ph[j].type) for j in diff_c]
    acc_ph = [hole(_dense(f.type)) for f in diff_f]
    hist_ph = [hole(p.type) for p in carry_ph]
    bx_ph = [hole(p.type) for p in x_ph]
    bextra_ph = [hole(p.type) for p in extra_ph]
    y_cts = [parts.get(nc + k) for k in range(ny)]
    traced_y = [k for k in range(ny) if isinstance(y_cts[k], Tracer)]
    cty_ph = [hole(ys_out[k].type) for k in traced_y]

    mapping = dict(zip(carry_ph, hist_ph))
    mapping.update(zip(x_ph, bx_ph))
    mapping.update(zip(extra_ph, bextra_ph))
    mapping.update(rename)
    memo = clone(spec.outputs, mapping)
    seeds = [(memo[new_carry[j]], Tracer(p)) for j, p in zip(diff_c, ct_ph)]
    for k in range(ny):
        if isinstance(y_cts[k], Fill):
            seeds.append((memo[ys_out[k]], Fill(y_cts[k].value, ys_out[k].type.shape)))
    seeds += [(memo[ys_out[k]], Tracer(p)) for k, p in zip(traced_y, cty_ph)]
    wrt = [hist_ph[j] for j in diff_c] + [bx_ph[i] for i in diff_x] + diff_f
    cts = backward(seeds, wrt) if wrt else []
    c_cts = cts[:len(diff_c)]
    x_cts = cts[len(diff_c):len(diff_c) + len(diff_x)]
    f_cts = cts[len(diff_c) + len(diff_x):]
    b_out = [finalize(hist_ph[j], c).node for j, c in zip(diff_c, c_cts)]
    step_ph = set(hole.made)
    lifted_terms, lifted_ys = {}, {}    # sparse free value -> its sampled terms; per-step operand -> ys slot
    kept_f, kept_acc = [], []
    for f, acc, c in zip(diff_f, acc_ph, f_cts):
        if f.type.is_sparse and isinstance(c, Tracer):
            terms, rest = _sampled_terms(c.node, f, step_ph)
            if terms:
                lifted_terms[f] = terms
                for _, term in terms:
                    for o in term.args[1:]:
                        if o in _dependent(o, step_ph):
                            lifted_ys.setdefault(o, len(lifted_ys))
                if rest is None:
                    continue
                c = Tracer(rest)
        kept_f.append(f)
        kept_acc.append(acc)
        if c is None:
            b_out.append(acc)
            continue
        g = finalize(f, c)
        if g.node.type.is_sparse:
            g = todense(g)
        b_out.append(apply("add", Tracer(acc), g).node if g.node.type.dtype == acc.type.dtype
                     else astype(apply("add", Tracer(acc), g), acc.type.dtype).node)
    b_out += [finalize(bx_ph[i], c).node for i, c in zip(diff_x, x_cts)]
    b_out += list(lifted_ys)            # the per-step factors of the lifted terms, stacked by the scan
    diff_f, acc_ph = kept_f, kept_acc

    b_ph = ct_ph + acc_ph + hist_ph + bx_ph + bextra_ph + cty_ph
    b_free, _ = loops.free_values(b_out, b_ph)
    init_ct = [finalize(outs[j], carry_cts[j]).node for j in diff_c]
    init_acc = [materialize(Fill(0.0, f.type.shape), f).node if f.type.ndim
                else apply("where", False, Tracer(f), 0.0).node for f in diff_f]
    cty_xs = []
    for k in traced_y:
        c = y_cts[k]
        c = todense(c) if c.node.type.is_sparse else c
        if c.node.type.dtype != ys_out[k].type.dtype:
            c = astype(c, ys_out[k].type.dtype)
        cty_xs.append(c.node)
    b_spec = loops.LoopSpec("scan", len(ct_ph) + len(acc_ph), len(hist_ph) + len(bx_ph) + len(bextra_ph)
                            + len(cty_ph), len(diff_x) + len(lifted_ys), None, b_ph, b_out, b_free, None, None, False, n,
                            spec.paths, uid, reverse=not spec.reverse)
    args = tuple(init_ct) + tuple(init_acc) + tuple(stored) + tuple(xs) + tuple(extra_xs) + tuple(cty_xs) \
        + tuple(b_free)
    results = loops.outputs_of(loops.loop_node(b_spec, args))
    k = 0
    for j in diff_c:
        emit(init[j], Tracer(results[k]))
        k += 1
    for f in diff_f:
        g = Tracer(results[k])
        emit(f, sample(g, f) if f.type.is_sparse else g)
        k += 1
    for i in diff_x:
        emit(xs[i], Tracer(results[k]))
        k += 1
    stacked = {o: results[k + slot] for o, slot in lifted_ys.items()}
    for f, terms in lifted_terms.items():
        for sign, term in terms:
            emit(f, _summed_over_steps(term, sign, stacked, n))


def _dependent(node: Node, step_ph: set) -> set:
    """The nodes of ``node``'s graph that read one of the reverse scan's placeholders ``step_ph``."""
    return loops.free_values([node], step_ph)[1]


def _sampled_terms(node: Node, f: Node, step_ph: set):
    """A sparse free value's cotangent in a step, split into ``(terms, rest)``: the terms are ``(sign,
    contraction)`` pairs of SDDMMs at ``f``'s pattern (``contract(pattern_ones(f), dense operands...)``, what
    the contraction rule builds) whose operands are dense, summed / subtracted; ``rest`` (None when nothing
    is left) what is not such a term. A term's operands that change per step become the reverse scan's
    per-step outputs and the term is summed over the steps after the loop as one sampled product with the
    step as one more contracted axis (``_summed_over_steps``): the cotangent stays on ``f``'s pattern, no
    dense accumulator of ``f``'s shape is carried through the loop."""
    terms, rest = [], []

    def split(n: Node, sign: int) -> None:
        if n.op == "combine" and n.params[0] in (1, -1) and n.type.is_sparse:
            split(n.args[0], sign)
            split(n.args[1], sign * n.params[0])
            return
        if (n.op == "contract" and n.type.is_sparse and n.type.format == f.type.format and n.args
                and adjoint.is_pattern_of(n.args[0], f) and n.params[0].order is None
                and n.params[0].inputs[0] == n.params[0].output
                and all(not o.type.is_sparse for o in n.args[1:])):
            terms.append((sign, n))
            return
        rest.append((sign, n))

    split(node, 1)
    if not terms:
        return [], node
    out = None
    for sign, n in rest:
        t = Tracer(n) if sign == 1 else adjoint.scaled(Tracer(n), -1.0)
        out = t if out is None else adjoint.accumulate(out, t)
    return terms, None if out is None else out.node


def _summed_over_steps(term: Node, sign: int, stacked: dict, steps: int) -> Tracer:
    """``term`` (an SDDMM at a sparse free value's pattern, built in the reverse scan's body) summed over the
    loop's steps: each per-step operand read from its stacked per-step outputs along a new axis that the
    product contracts."""
    params = term.params[0]
    used = set("".join(params.inputs)) | set(params.output)
    step = next(c for c in adjoint.LETTERS if c not in used)
    ops, subs, per_step = [], [], False
    for o, s in zip(term.args, params.inputs):
        if o in stacked:
            ops.append(stacked[o])
            subs.append(step + s)
            per_step = True
        else:
            ops.append(o)
            subs.append(s)
    scale = 1.0 if params.scale is None else params.scale
    scale = scale * sign * (1 if per_step else steps)
    return contract(ops, subs, params.output, scale=None if scale == 1 else scale,
                    out_format=term.type.format, op="grad")


adjoint.RULES["loop"] = loop_rule
