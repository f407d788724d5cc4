"""Cutting a program at its host steps: NumPy's dense linear algebra between kernels (tracer/linalg.py).

A traced function that calls ``np.linalg.solve`` (or another function of tracer/linalg.py) on traced values
holds ``host`` nodes. The program is cut there into stages run in turn: a kernel computing everything the
first host steps read (and every result that does not wait for them), the host steps (NumPy on the host),
a kernel computing what reads their results, and so on. Each kernel stage is an ordinary trace, planned and
compiled as any other; its inputs are the call's operands it reads, then the values earlier stages computed
for it (dense arrays: host results, or dense values of an earlier kernel), then the frozen constants it reads.

Where a value is computed: the ``level`` of a node is the number of host steps on its longest path from
the inputs; the kernel of stage k computes the nodes of level k. A dense value a later stage reads is
handed over (one more result of its kernel); a sparse one is computed again where it is read (its kernel
reads it from the operands it is made of), so no sparse intermediate crosses a cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from splyce.tracer.ir import Node, Trace, walk


@dataclass(frozen=True)
class KernelStage:
    """One kernel of a cut program. ``trace``'s inputs: ``reads`` (a source input index, or an earlier
    stage's node whose value is handed over), then the frozen constants ``constants`` (source input indices);
    its outputs stand for the source nodes ``outputs``."""

    trace: Trace
    reads: tuple            # per input before the constants: int (a source input) or Node (a handed-over value)
    constants: tuple[int, ...]
    outputs: tuple[Node, ...]


@dataclass(frozen=True)
class HostStage:
    """NumPy's calls between two kernels: ``host`` nodes (several results of one call are computed once)."""

    nodes: tuple[Node, ...]


def has_host_steps(trace: Trace) -> bool:
    return any(n.op == "host" for n in walk(trace.outputs))


def split(source: Trace, frozen: int) -> tuple:
    """The stages of ``source`` (whose last ``frozen`` inputs are the constants frozen at trace time), in the
    order they run: ``KernelStage`` and ``HostStage``; a stage with nothing to do is left out."""
    nodes = walk(source.outputs)
    level: dict[Node, int] = {}
    for n in nodes:
        if n.op == "input":
            level[n] = 0
        elif n.op == "host":
            level[n] = max((level[a] for a in n.args), default=0) + 1
        else:
            level[n] = max((level[a] for a in n.args), default=0)
    top = max(level.values(), default=0)
    needed: list[dict[Node, None]] = [{} for _ in range(top + 1)]   # per level: the values its kernel returns
    for o in source.outputs:
        if o.op not in ("input", "host"):
            needed[level[o]][o] = None
    hosts = [n for n in nodes if n.op == "host"]
    for h in hosts:
        for a in h.args:
            if a.op not in ("input", "host"):
                needed[level[a]][a] = None
    first_frozen = len(source.inputs) - frozen
    kernels: dict[int, KernelStage] = {}
    for k in range(top, -1, -1):      # later stages ask earlier ones for the dense values they read
        if needed[k]:
            kernels[k] = _stage(source, tuple(needed[k]), k, level, needed, first_frozen)
    stages = []
    for k in range(top + 1):
        calls = tuple(h for h in hosts if level[h] == k)
        if calls:
            stages.append(HostStage(calls))
        if k in kernels:
            stages.append(kernels[k])
    return tuple(stages)


def _stage(source: Trace, roots: tuple, k: int, level: dict, needed: list, first_frozen: int) -> KernelStage:
    """The kernel of level ``k`` computing ``roots``."""
    def handed_over(n: Node) -> bool:
        return n.op == "host" or (level[n] < k and not n.type.is_sparse and n.op != "input")

    order: dict[Node, None] = {}
    stack = [(r, False) for r in reversed(roots)]
    while stack:                        # dependency order, not entering inputs and handed-over values
        n, expanded = stack.pop()
        if n in order:
            continue
        if expanded or n.op == "input" or (handed_over(n) and n not in roots):
            order[n] = None
            continue
        stack.append((n, True))
        stack.extend((a, False) for a in reversed(n.args) if a not in order)
    args = sorted(n.params[0] for n in order if n.op == "input" and n.params[0] < first_frozen)
    frozen = sorted(n.params[0] for n in order if n.op == "input" and n.params[0] >= first_frozen)
    over = [n for n in order if handed_over(n) and n not in roots]
    for n in over:
        if n.op != "host":
            needed[level[n]][n] = None    # its own stage returns it
    reads = tuple(args) + tuple(over)
    position = {("input", i): p for p, i in enumerate(args)}
    position.update({("node", n): len(args) + p for p, n in enumerate(over)})
    position.update({("input", i): len(reads) + p for p, i in enumerate(frozen)})
    built: dict[Node, Node] = {}
    for n in order:
        if n.op == "input":
            built[n] = Node("input", (), (position[("input", n.params[0])],), n.type)
        elif handed_over(n) and n not in roots:
            built[n] = Node("input", (), (position[("node", n)],), n.type)
        else:
            built[n] = Node(n.op, tuple(built[a] for a in n.args), n.params, n.type)
    inputs = tuple(source.inputs[i] for i in args) + tuple(n.type for n in over) + \
        tuple(source.inputs[i] for i in frozen)
    return KernelStage(Trace(inputs, tuple(built[r] for r in roots)), reads, tuple(frozen), roots)
