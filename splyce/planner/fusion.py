"""Fusion by cost: which contractions of a trace fuse into their consumers (``Planner.fuse``), with the cost of
each node under its cheapest formulation (``Planner.choice``, planner/cost.py) and the rules that keep a
fusion exact (``distributed_factors``: outer factors multiplied into a fused sum only where they are kernel
inputs) or fast (an SpMV over rows of a few entries kept apart). ``make_plan`` (planner/plan.py) asks it.
"""

from __future__ import annotations

import math

import numpy as np

from splyce.planner import cost
from splyce.planner.rewrite import Fusion, substitute, uses, with_args
from splyce.tensors.formats import compressed_order
from splyce.tracer.ir import ContractParams, Node, TensorType, Trace, walk


def input_node(trace: Trace, index: int) -> Node:
    return Node("input", (), (index,), trace.inputs[index])


def describe(node: Node) -> str:
    return f"{node.op}[{node.params[0] if node.params else ''}] : {node.type}"


class Planner:
    """Per-plan state: the expected entries of each node and its cheapest formulation (memoized; nodes are
    hash-consed, so identity keys are structural)."""

    def __init__(self, trace: Trace, nnz: tuple[int, ...], scatter: bool = True, distribute: bool = True):
        self.trace = trace
        self.nnz = nnz
        self.scatter = scatter
        self.distribute = distribute
        self._entries: dict[Node, float] = {}
        self._choice: dict[Node, cost.Choice | None] = {}

    # -- statistics ------------------------------------------------------------------------------------
    def entries(self, node: Node) -> float:
        found = self._entries.get(node)
        if found is not None:
            return found
        size = float(math.prod(node.type.shape))
        if node.op == "input":
            value = float(self.nnz[node.params[0]]) if node.type.is_sparse else size
        elif not node.type.is_sparse:
            value = size
        elif node.op == "contract":
            choice = self.choice(node)
            value = choice.out_entries if choice else size
        else:   # a union
            value = min(size, sum(self.entries(a) for a in node.args))
        self._entries[node] = value
        return value

    def operands(self, node: Node) -> list[cost.Operand]:
        params: ContractParams = node.params[0]
        return [cost.Operand(subs, arg.type.shape, self.entries(arg),
                             arg.type.format.order if arg.type.is_sparse else None,
                             convertible=arg.op == "input", walked=_walked(arg.type))
                for subs, arg in zip(params.inputs, node.args)]

    def choice(self, node: Node) -> cost.Choice | None:
        if node in self._choice:
            return self._choice[node]
        params: ContractParams = node.params[0]
        out_stored = None
        if node.type.is_sparse:
            out_stored = "".join(params.output[d] for d in node.type.format.order)
        if params.order is not None:   # pinned by the user (einsum(..., order=)): formulation as written
            found = cost.evaluate(self.operands(node), params.output, out_stored, params.order)
        elif not node.type.is_sparse and not any(a.type.is_sparse for a in node.args):
            # dense only: every order costs the same steps; the one that walks memory contiguously wins
            found = cost.evaluate(self.operands(node), params.output, None, dense_order(params))
        else:
            found = cost.choose(self.operands(node), params.output, out_stored, _heuristic_order(node),
                                scatter=self.scatter)
        self._choice[node] = found
        return found

    def node_cost(self, node: Node) -> float:
        if node.op == "reduce":   # one pass over the stored entries (two for a sparse operand) and the result
            return sum((2 if arg.type.is_sparse else 1) * self.entries(arg) for arg in node.args) \
                + 2 * float(math.prod(node.type.shape))
        if node.op != "contract":
            return float(math.prod(node.type.shape)) if not node.type.is_sparse else self.entries(node)
        choice = self.choice(node)
        return choice.cost if choice else math.inf

    # -- fusion ----------------------------------------------------------------------------------------
    def _short_row_spmv(self, node: Node) -> bool:
        """Whether ``node`` is a CSR argument times a dense vector over rows of a few entries (``goes_flat`` for
        the first call's entries, as the drop-in decides), which stays apart from the contraction reading it:
        on its own its row sums run flat (the flat-rows pass in the MLIR kernel, or the native flat kernel as
        a step before it), where the fused loop nest pays a mispredicted exit per row (road-700 ``v @ (a @
        v)`` on the Zen 3 VM: fused 3.99 ms, split 3.47 in the MLIR kernel, 2.56 with the native step). A rule
        of the operands only, never of the options: the plain sparsifier's plan is the same, so are its sums'
        order and bits."""
        if node.op != "contract" or len(node.args) != 2 or any(a.op != "input" for a in node.args):
            return False
        params: ContractParams = node.params[0]
        (x, y), a, v = params.inputs, node.args[0].type, node.args[1].type
        fmt = a.format
        if not (len(x) == 2 and y == x[1] and params.output == x[0] and v.ndim == 1 and not v.is_sparse
                and fmt is not None and compressed_order(fmt) == (0, 1)):
            return False
        from splyce.native.spmv import goes_flat     # the host's tuning, read on first use, not at import

        return goes_flat(int(self.nnz[node.args[0].params[0]]), a.shape[0], fmt.crd_width,
                         np.dtype(a.dtype).itemsize)

    def fuse(self) -> tuple[tuple[Node, ...], list[Fusion]]:
        outputs = self.trace.outputs
        fusions: list[Fusion] = []
        for _ in range(64):   # each pass fuses at least one pair, or stops
            count = uses(outputs)
            mapping: dict[Node, Node] = {}
            changed = False
            for node in walk(outputs):
                new = with_args(node, tuple(mapping.get(a, a) for a in node.args))
                if new.op == "contract":
                    for position, old_arg in enumerate(node.args):
                        inner = new.args[position]
                        if count.get(old_arg) != 1 or inner.op != "contract" or pinned(inner) or pinned(new):
                            continue
                        if self._short_row_spmv(inner):  # its rows flat on their own, then its reader
                            continue
                        factors = distributed_factors(new, position)
                        if factors and (not self.distribute or any(f.op != "input" for f in factors)):
                            continue     # a factor multiplied into a sum: checked for NaN / Inf on each call
                        if _scale_of_a_reduction(new, inner) and \
                                math.prod(new.type.shape) < cost.body_executions(self.operands(inner)):
                            continue
                        if _dense_factor(inner) and _reduces(new) and \
                                math.prod(inner.type.shape) < cost.body_executions(self.operands(new)):
                            continue
                        fused = substitute(new, position)
                        if fused is None or self.choice(fused) is None:
                            continue
                        if self.node_cost(fused) <= self.node_cost(inner) + self.node_cost(new):
                            fusions.append(Fusion(inner, new, fused))
                            new = fused
                            changed = True
                            break
                mapping[node] = new
            outputs = tuple(mapping[o] for o in outputs)
            if not changed:
                break
        return outputs, fusions


def on_host(node: Node) -> bool:
    """A contraction of dense inputs (arguments or constants) that reduces an index: a matrix product or a
    dot product of arrays the call passes in (``X @ W`` of a GCN layer's captured weights, ``r @ r``), which
    NumPy's BLAS computes faster than a loop nest, once per call before the kernel."""
    if node.op != "contract" or pinned(node) or len(node.args) < 2:
        return False
    if any(a.op != "input" or a.type.is_sparse for a in node.args) or node.type.is_sparse:
        return False
    params: ContractParams = node.params[0]
    return bool(set("".join(params.inputs)) - set(params.output)) and node.type.dtype in (
        "float64", "float32", "complex128", "complex64")


def dense_order(params: ContractParams) -> str:
    """The loop order of a contraction of dense (row-major) operands: innermost the index that is the last,
    contiguous axis of most operands and of the result (``j`` of ``ik,kj->ij``, ``k`` of ``ik,k->i``), then
    outward the result's indices in order, then the reductions."""
    letters = list(dict.fromkeys(params.output + "".join(params.inputs)))
    if not letters:
        return ""
    last = [s[-1] for s in (*params.inputs, params.output) if s]
    inner = max(letters, key=lambda c: (last.count(c), c in params.output, -letters.index(c)))
    outer = [c for c in params.output if c != inner] + [c for c in letters if c not in params.output and c != inner]
    return "".join(outer) + inner


def pinned(node: Node) -> bool:
    return node.op == "contract" and node.params[0].order is not None


def distributed_factors(outer: Node, position: int) -> tuple[Node, ...]:
    """The other operands of contraction ``outer`` when its ``position``-th operand is a contraction that sums
    over an index: fusing them multiplies each factor into the sum's terms (``v @ (A @ v)`` as ``sum v_k A_ka
    v_a``). Exact for finite values, but a factor's Inf or NaN is not: ``inf * (x - y)`` is +-inf where
    ``inf * x - inf * y`` is NaN, and ``inf`` times an empty row's sum is NaN where the fused sum has no term.
    So such a fusion is made only where every factor is a kernel input (the kernel checks their values on each
    call and runs the unfused twin when one is not finite: ``Plan.distributed``); () where nothing distributes."""
    inner = outer.args[position]
    if inner.op != "contract" or len(outer.args) < 2:
        return ()
    p: ContractParams = inner.params[0]
    if not set("".join(p.inputs)) - set(p.output):
        return ()
    return tuple(a for i, a in enumerate(outer.args) if i != position)


def _scale_of_a_reduction(outer: Node, inner: Node) -> bool:
    """Whether ``outer`` only scales the dense result of a contraction that sums (``0.85 * (P @ x)``). Where
    the result holds fewer entries than the sum has products (the caller checks), it stays apart: an
    elementwise factor (planner/elementwise.py) applied once per result entry and fused with the glue after
    it, as NumPy applies it. Folded into the sum it multiplied every product (PageRank's SpMV 0.13-0.2 ms
    slower on 0.8-1.6M entries, Zen 4) and rounded otherwise than NumPy's ``0.85 * (P @ x)``. A sparse result
    keeps the fold: a separate elementwise pass would write a second sparse result."""
    po: ContractParams = outer.params[0]
    pi: ContractParams = inner.params[0]
    if po.scale is None or len(outer.args) != 1 or po.inputs != (po.output,) or outer.type.is_sparse:
        return False
    return set("".join(pi.inputs)) != set(pi.output)


def _dense_factor(node: Node) -> bool:
    """An elementwise product of dense operands (``x * d``, ``(b - y) * dinv``: ``a,a->a``, no index summed).
    Read by a reduction whose loop body runs more often than the product has entries (``R @ (x * d)``: once per
    stored entry of ``R``), it stays apart, computed once per entry as NumPy computes it: fused, every product
    of the reduction multiplied by it, a second gather per stored entry (Jacobi's ``(b - R @ x) * dinv``
    unrolled ten steps on ba-100k, 800k entries, 2-core Zen 4 VM: fused 0.15 s, the one-step function called
    ten times 0.05 s)."""
    if node.op != "contract" or node.type.is_sparse or any(a.type.is_sparse for a in node.args):
        return False
    params: ContractParams = node.params[0]
    return len(node.args) >= 2 and all(s == params.output for s in params.inputs)


def _reduces(node: Node) -> bool:
    params: ContractParams = node.params[0]
    return bool(set("".join(params.inputs)) - set(params.output))


def _walked(t: TensorType) -> tuple[bool, ...]:
    """Per level of ``t``: compressed / singleton (walked) rather than dense (indexed)."""
    return tuple(level.kind != "dense" for level in t.format.levels) if t.is_sparse else ()


def _heuristic_order(node: Node) -> str | None:
    """The lowering's usual order, or None when the operands' storage orders admit none as stored."""
    from splyce.lowering.to_mlir import LoweringError, loop_order

    params: ContractParams = node.params[0]
    try:
        return loop_order([(s, a.type) for s, a in zip(params.inputs, node.args)], params.output)
    except LoweringError:
        return None
