"""A jitted function's results: what it returned, flattened to the trace's output nodes (each in the jit's
``out_format``), and the kernel's results put back in that shape (one value, a tuple or a list; a value
returned twice is the same object twice)."""

from __future__ import annotations

import dataclasses

from splyce.runtime import scipy_results
from splyce.tensors.formats import Format
from splyce.tracer import matrix
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


def flatten_outputs(out):
    """The result nodes of what the function returned, and its tree: None for one array, else a tuple whose
    first entry is the container type; a result of the matrix kind (a ``csr_matrix``, an ``np.matrix``:
    tracer/matrix.py) wraps the tree as ``(KINDS, kinds, tree)``, so that ``unflatten`` returns it as such."""
    leaves = [out] if isinstance(out, Tracer) else list(out) if isinstance(out, (tuple, list)) and out \
        and all(isinstance(o, Tracer) for o in out) else None
    if leaves is None:
        raise TraceError("a jitted function must return a traced tensor or a tuple / list of them, got "
                         f"{type(out).__name__}")
    tree = None if isinstance(out, Tracer) else (type(out), len(out))
    kinds = tuple(matrix.kind_of(o) for o in leaves)
    if matrix.MATRIX in kinds:
        tree = (KINDS, kinds, tree)
    return [o.node for o in leaves], tree


KINDS = "kinds"   # the first entry of a tree whose results have kinds (never a container type)


def with_positions(tree, positions: tuple):
    """``tree`` of a function that returns a value twice: ``positions`` maps each returned value to its result."""
    if tree is not None and tree[0] == KINDS:
        return (KINDS, tree[1], with_positions(tree[2], positions))
    return (*tree, positions)


def unflatten(tree, results):
    if tree is None:
        return results[0]
    if tree[0] == KINDS:
        _, kinds, tree = tree
        results = scipy_results.with_kinds(results, kinds, tree)
        return unflatten(tree, results)
    kind, _, *positions = tree
    if positions:   # `return y, y` gives the same object twice, as the Python function does
        results = [results[p] for p in positions[0]]
    return kind(results)
