"""A jitted function's results: what it returned, flattened to the trace's output nodes (each in the jit's
``out_format``), and the kernel's results put back in that shape: one value, or a pytree (runtime/pytree.py:
tuples, lists, dicts, NamedTuples, dataclasses, None) of traced results and constants (Python scalars and
strings returned as they are, NumPy arrays computed while tracing copied on every call); a value returned
twice is the same object twice."""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from splyce.runtime import pytree, scipy_results
from splyce.tensors.formats import Format
from splyce.tracer import matrix, views
from splyce.tracer.ir import Node, TensorType
from splyce.tracer.tracer import Tracer, TraceError


def with_format(node: Node, out_format) -> Node:
    """Apply the jit-level ``out_format`` to a result node."""
    from splyce.tracer.tracer import check_out_format, resolve_format

    if node.op == "input":
        return node
    out_format = check_out_format(out_format, node.type.ndim)
    if node.op == "reduce":
        if out_format == "sparse" or (isinstance(out_format, Format) and not out_format.is_dense):
            raise TraceError(f"{node.params[0]}: max / min reductions return dense arrays; "
                             f"out_format={out_format!r} is not supported for them")
        return node
    sparse_like = [a.type.format for a in node.args if a.type.is_sparse]
    fmt = resolve_format(out_format, False, sparse_like, node.type.ndim)
    params = node.params
    if node.op == "contract":       # the jit's request replaces the op's: a Format pins the result's storage
        params = (dataclasses.replace(params[0], format_left=fmt is not None and not isinstance(out_format, Format)),
                  *params[1:])
    return Node(node.op, node.args, params, TensorType(node.type.shape, node.type.dtype, fmt))


class ResultTree:
    """Where each leaf of a returned pytree comes from: a kernel result (its index) or a constant."""

    __slots__ = ("structure", "slots", "kinds")

    def __init__(self, structure, slots: tuple, kinds: tuple = ()):
        self.structure = structure
        self.slots = slots        # per leaf: an int (the kernel result) or a ``_Constant``
        self.kinds = kinds        # per leaf, "matrix" where it is returned as scipy / NumPy return that kind

    def renumbered(self, results: list) -> "ResultTree":
        """The tree with result ``i`` read from ``results[i]`` (the deduplicated outputs' indices)."""
        return ResultTree(self.structure, tuple(results[s] if type(s) is int else s for s in self.slots),
                          self.kinds)


class _Constant:
    """A leaf returned that is not traced: the value itself, or (an array) a copy per call."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value.copy() if isinstance(self.value, np.ndarray) else self.value


def flatten_outputs(out):
    """``(nodes, tree)``: the traced results' nodes and where they go (``tree`` None for one bare result)."""
    if isinstance(out, Tracer) and not isinstance(out, matrix.MatrixTracer) and not _sparse_extremum(out.node):
        return [out.node], None
    leaves, paths, structure = pytree.flatten(out, "the result")
    nodes, slots, kinds = [], [], []
    for leaf, path in zip(leaves, paths):
        kinds.append(matrix.kind_of(leaf))
        if isinstance(leaf, Tracer) and _sparse_extremum(leaf.node):
            kinds[-1] = COO_OF[kinds[-1]]
        if isinstance(leaf, Tracer):
            slots.append(len(nodes))
            nodes.append(leaf.node)
        elif isinstance(leaf, (numbers.Number, str, bytes, np.generic, np.ndarray)):
            slots.append(_Constant(leaf))
        else:
            raise TraceError(f"a jitted function returns traced tensors, Python scalars or strings, or NumPy "
                             f"arrays, nested in tuples, lists, dicts, NamedTuples or dataclasses; {path} is of "
                             f"type {type(leaf).__name__}")
    if not nodes:
        raise TraceError("a jitted function must return at least one traced tensor (alone or in a tuple, list, "
                         f"dict, NamedTuple or dataclass), got {_described(out)}")
    return nodes, ResultTree(structure, tuple(slots), tuple(kinds) if any(k != matrix.ARRAY for k in kinds) else ())


def views_of(out, arguments) -> list[bool]:
    """Per traced result of ``out`` (in ``flatten_outputs``' order): whether it is a 2-D sparse argument or its
    transpose returned as is (tracer/views.py), a view of that argument's buffers as scipy's ``A.T``."""
    if isinstance(out, Tracer) and not isinstance(out, matrix.MatrixTracer) and not _sparse_extremum(out.node):
        leaves = [out]
    else:
        leaves = [leaf for leaf in pytree.flatten(out, "the result")[0] if isinstance(leaf, Tracer)]
    return [leaf.node.type.is_sparse and leaf.node.type.ndim == 2 and views.aliases(leaf, arguments)
            for leaf in leaves]


# a sparse value's max / min along an axis, returned: scipy's COO of the reduction's nonzero entries (a 1-D
# ``coo_array`` of an array, a (1, n) / (m, 1) ``coo_matrix`` of a matrix), computed dense by the kernel;
# with no scipy operand in the call (SparseTensor, pydata-sparse), the dense array
COO_OF = {matrix.ARRAY: "coo array", matrix.MATRIX: "coo matrix"}


def _sparse_extremum(node: Node) -> bool:
    return node.op == "reduce" and node.params[0] in ("max", "min") and node.args[0].type.is_sparse \
        and node.type.ndim > 0


def _described(out) -> str:
    empty = isinstance(out, (tuple, list, dict)) and not out
    return f"an empty {type(out).__name__}" if empty else type(out).__name__


def unflatten(tree, results, operands=()):
    """The value the function returned, with the kernel's ``results`` in place of its traced results;
    ``operands``: the call's arguments (whether scipy's classes are among them)."""
    if tree is None:
        return results[0]
    leaves = [results[s] if type(s) is int else s.get() for s in tree.slots]
    if tree.kinds:   # scipy's spmatrix classes and np.matrix for results of the matrix kind, scipy's COO
        scipy_in = COO_OF[matrix.ARRAY] in tree.kinds and scipy_results.any_scipy_sparse(operands)
        leaves = [scipy_results.as_matrix(v) if k == matrix.MATRIX else scipy_results.as_coo(v, True)
                  if k == COO_OF[matrix.MATRIX] else scipy_results.as_coo(v, False)
                  if k == COO_OF[matrix.ARRAY] and scipy_in else v for v, k in zip(leaves, tree.kinds)]
    return pytree.unflatten(tree.structure, leaves)
