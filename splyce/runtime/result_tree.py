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


def flatten_outputs(out, pydata_in: bool = False):
    """``(nodes, tree)``: the traced results' nodes and where they go (``tree`` None for one bare result);
    ``pydata_in``: a pydata-sparse operand is among the call's (its reductions are returned as pydata's)."""
    if isinstance(out, Tracer) and not isinstance(out, matrix.MatrixTracer) and not _sparse_extremum(out.node) \
            and not (pydata_in and _sparse_reduction(out.node)):
        return [out.node], None
    leaves, paths, structure = pytree.flatten(out, "the result")
    nodes, slots, kinds = [], [], []
    for leaf, path in zip(leaves, paths):
        kinds.append(matrix.kind_of(leaf))
        if isinstance(leaf, Tracer) and _sparse_extremum(leaf.node):
            kinds[-1] = COO_OF[kinds[-1]]
        if pydata_in and isinstance(leaf, Tracer) and _sparse_reduction(leaf.node):
            kinds[-1] = PYDATA + kinds[-1]
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


# a reduction of a sparse value (``sum`` / ``mean`` / ``max`` / ``min``, over all axes or some), returned from a
# call with a pydata-sparse operand: pydata's class, as pydata returns it (a COO of a COO, or of any full
# reduction, 0-d; a GCXS of a GCXS along an axis); with no pydata operand the kind after the prefix holds
PYDATA = "pydata reduction|"


def _sparse_reduction(node: Node) -> bool:
    if node.op in ("map", "ewise") and len(node.args) == 1:   # mean: the sum divided by the count; a dtype change
        node = node.args[0]
    if node.op == "reduce":
        return node.params[0] in ("max", "min") and node.args[0].type.is_sparse
    if node.op != "contract" or len(node.args) != 1 or node.type.is_sparse:
        return False
    (arg,) = node.args
    params = node.params[0]
    return arg.type.is_sparse and len(params.output) < len(params.inputs[0])


def _leaf(value, kind: str, scipy_in: bool, pydata_class):
    if kind.startswith(PYDATA):
        if pydata_class is not None:
            return scipy_results.as_pydata(value, pydata_class)
        kind = kind[len(PYDATA):]
    if kind == matrix.MATRIX:
        return scipy_results.as_matrix(value)
    if kind == COO_OF[matrix.MATRIX]:
        return scipy_results.as_coo(value, True)
    if kind == COO_OF[matrix.ARRAY] and scipy_in:
        return scipy_results.as_coo(value, False)
    return value


def _described(out) -> str:
    empty = isinstance(out, (tuple, list, dict)) and not out
    return f"an empty {type(out).__name__}" if empty else type(out).__name__


def unflatten(tree, results, operands=()):
    """The value the function returned, with the kernel's ``results`` in place of its traced results;
    ``operands``: the call's arguments (whether scipy's classes are among them)."""
    if tree is None:
        return results[0]
    leaves = [results[s] if type(s) is int else s.get() for s in tree.slots]
    if tree.kinds:   # scipy's spmatrix classes and np.matrix for results of the matrix kind, scipy's COO,
        # pydata's classes of reductions
        scipy_in = any(k.endswith(COO_OF[matrix.ARRAY]) for k in tree.kinds) and \
            scipy_results.any_scipy_sparse(operands)
        pydata_class = scipy_results.pydata_class(operands) if any(k.startswith(PYDATA) for k in tree.kinds) \
            else None
        leaves = [_leaf(v, k, scipy_in, pydata_class) for v, k in zip(leaves, tree.kinds)]
    return pytree.unflatten(tree.structure, leaves)
