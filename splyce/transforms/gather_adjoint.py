"""The adjoint of a gather (tracer/gather.py: ``x[idx]``, ``np.take``, row / column slices and gathers of a
sparse matrix): the cotangent scattered back, summed where an index repeats (JAX's scatter-add).

Like a view's (adjoint.view_rule), it is a contraction of the result's cotangent with one selection operator
per operand axis: a constant 0/1 matrix for a slice, a one-hot vector for an integer, and for the index array
``idx`` (of ``m`` entries into an axis of ``n``) the ``m x n`` matrix ``I[idx]``: the rows of the sparse identity
at ``idx``, itself a gather the planner computes before the kernel from the call's index (checked there), so
the scatter-add is one sparse product ``I[idx].T @ g``, O(m) work. An index the kernel computes (an argmax
known to be in range) is compared with ``arange(n)`` instead: a dense ``m x n`` one-hot. A sparse operand's
cotangent is sampled at its pattern (the gradient of its stored values)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sps

from splyce.tracer import captures, indexing
from splyce.tracer.base import Tracer
from splyce.tracer.dense_ops import apply, astype
from splyce.tracer.gather import result_axes, sparse_gather
from splyce.tracer.ir import Node
from splyce.tracer.tracer import todense
from splyce.transforms import adjoint
from splyce.transforms.adjoint import LETTERS, contract_many, inexact, materialize, pattern_ones


def _host(node: Node) -> bool:
    return node.op == "input" or (node.op == "gather" and all(_host(a) for a in node.args))


def selector(index: Node, n: int, dtype: str) -> Tracer:
    """The 0/1 operator of shape ``index.shape + (n,)``, 1 at ``[j..., index[j...]]``."""
    if index.type.ndim == 1 and _host(index):
        eye = captures.constant_node(sps.identity(n, dtype=dtype, format="csr"))
        return sparse_gather(Tracer(eye), (Tracer(index), slice(None)))
    shape = (1,) * index.type.ndim + (n,)
    grid = indexing.reshape(Tracer(captures.constant_node(np.arange(n, dtype=np.int64))), shape)
    column = indexing.reshape(Tracer(index), index.type.shape + (1,))
    return astype(apply("eq", column, grid), dtype)


def gather_rule(node: Node, ct, emit) -> None:
    arg = node.args[0]
    if not inexact(arg.type.dtype) or not inexact(node.type.dtype):
        return
    (spec,) = node.params
    index = node.args[1] if len(node.args) > 1 else None
    dtype = node.type.dtype
    ct = materialize(ct, node)
    g = ct if arg.type.is_sparse else (todense(ct) if ct.node.type.is_sparse else ct)
    letters = LETTERS[: node.type.ndim]
    idx_ndim = index.type.ndim if index is not None else 0
    if any(e[0] in ("a", "i") for e in spec):
        axes, at = result_axes(spec, idx_ndim)
    else:
        axes, at = tuple(range(len(spec))), 0
    used = iter(LETTERS[node.type.ndim:])
    ops, subs, target = [g.node], [letters], ""
    d = 0
    for entry, k in zip(spec, axes):
        if entry[0] == "n":    # a unit axis of the result: summed out
            continue
        n = arg.type.shape[d]
        d += 1
        if entry[0] == "s":
            _, start, step, m = entry
            if start == 0 and step == 1 and m == n:
                target += letters[k]
                continue
            c = next(used)
            ops.append(adjoint.selection(start, step, m, n, dtype))
            subs.append(c + letters[k])
            target += c
        elif entry[0] == "i":
            c = next(used)
            ops.append(adjoint.one_hot(entry[1], n, dtype))
            subs.append(c)
            target += c
        else:
            c = next(used)
            ops.append(selector(index, n, dtype).node)
            subs.append(letters[at:at + idx_ndim] + c)
            target += c
    if arg.type.is_sparse:
        ops.insert(0, pattern_ones(arg, dtype).node)
        subs.insert(0, target)
        emit(arg, contract_many(ops, subs, target, None, arg.type.format))
        return
    emit(arg, contract_many(ops, subs, target, None, "dense"))


adjoint.RULES["gather"] = gather_rule
