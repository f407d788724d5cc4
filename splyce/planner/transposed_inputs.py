"""Transposes of sparse inputs read in place: ``b.T`` of a CSR ``b`` is ``b``'s buffers seen as CSC.

The tracer gives the transpose of a sparse value the relabelled format (tracer.relabel_axes), as scipy's
``csr.T`` is a CSC array over the same arrays. For a function's input that costs nothing at all: the planner
replaces the transpose by a derived input, the argument's buffers under the relabelled format (built per
call by ``transposed``, no entry moved), and the kernels read it as any other input. A transpose returned
as a result is still a copy (results never alias arguments), written in storage order."""

from __future__ import annotations


from splyce.native.records import record
from splyce.tracer.ir import Node, TensorType, Trace, walk


@record
class Derived:
    """Kernel input ``len(trace.inputs) + k``: argument ``source`` transposed by ``axes``, stored as ``type``."""

    source: int
    axes: tuple[int, ...]
    type: TensorType


def relabel_inputs(trace: Trace) -> tuple[Trace, tuple[Derived, ...]]:
    """``trace`` with every relabelling transpose of an input read through a derived input (one per
    distinct transpose), and the derived inputs in order. O(nodes)."""
    from splyce.tracer.tracer import copy_of, relabel_axes

    derived: dict[tuple[int, tuple[int, ...]], Node] = {}
    found: list[Derived] = []
    mapping: dict[Node, Node] = {}
    outputs = set(trace.outputs)
    for node in walk(trace.outputs):
        args = tuple(mapping.get(a, a) for a in node.args)
        new = node if args == node.args else Node(node.op, args, node.params, node.type)
        axes = relabel_axes(node)
        if axes is not None and node.args[0].op == "input" and axes != tuple(range(len(axes))):
            key = (node.args[0].params[0], axes)
            if key not in derived:
                found.append(Derived(key[0], axes, node.type))
                derived[key] = Node("input", (), (len(trace.inputs) + len(found) - 1,), node.type)
            new = derived[key]
            if node in outputs:   # a result: a copy of the relabelled buffers, in their storage order
                new = copy_of(new, op="transpose")
        mapping[node] = new
    if not found:
        return trace, ()
    inputs = trace.inputs + tuple(d.type for d in found)
    return Trace(inputs, tuple(mapping[o] for o in trace.outputs)), tuple(found)


def transposed(value, axes: tuple[int, ...], type_: TensorType):
    """``value`` (a validated SparseTensor) transposed by ``axes``: its own buffers under the relabelled
    format, not validated again (no entry moves, so what held for ``value`` holds for it)."""
    from splyce.tensors.tensor import SparseTensor

    shape = tuple(value.shape[a] for a in axes)
    return SparseTensor(shape, type_.format, value.pos, value.crd, value.values, validate=False)
