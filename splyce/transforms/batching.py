"""``splyce.vmap``: JAX's batching transformation over dense arguments.

The function is traced once on per-example values (placeholders of the unbatched shapes), then its trace is
rebuilt with a leading batch axis on every value that depends on a batched argument: a contraction gets one
more index (a batch of SpMVs ``ik,k->i`` becomes the SpMM ``ik,zk->zi``, a batch of SDDMMs one wider
SDDMM), elementwise functions broadcast, reductions and views shift their axes. Sparse arguments are shared
across the batch (``in_axes=None``); batching a sparse argument raises."""

from __future__ import annotations

import itertools
import numbers

import numpy as np

from splyce.errors import TraceError
from splyce.runtime import pytree
from splyce.runtime.dispatcher import Jitted
from splyce.tracer import captures, indexing
from splyce.tracer.base import Tracer, contract
from splyce.tracer.ir import ContractParams, Node, TensorType, walk
from splyce.tracer.tracer import todense, transpose
from splyce.transforms import loop_batching

_PLACEHOLDER = itertools.count()
_LETTERS = "abcde"


def vmap(fun, in_axes=0, out_axes=0):
    """``fun`` mapped over a leading (or ``in_axes``) axis of its dense arguments, as ``jax.vmap``.

    Parameters
    ----------
    fun : callable
        A function splyce can trace (a jitted one too).
    in_axes : int, None or sequence of them
        Per positional argument, the axis to map over (None: the argument is shared by every example, as a
        sparse matrix must be). An int applies to every argument.
    out_axes : int
        Where the batch axis goes in each result.

    Returns
    -------
    callable
        Called with the batched arguments: traced into the caller's program inside ``splyce.jit``, else run as
        a jitted program of its own. A batch of ``A @ x_b`` runs as one sparse-dense matrix product.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
    >>> splyce.vmap(lambda A, x: A @ x, in_axes=(None, 0))(A, np.array([[1.0, 0.0], [0.0, 1.0]]))
    array([[1., 2.],
           [0., 3.]])
    """
    if not callable(fun):
        raise TypeError(f"vmap: the function must be callable, got {type(fun).__name__}")
    return _Vmapped(fun, in_axes, out_axes)


class _Vmapped:
    def __init__(self, fun, in_axes, out_axes):
        self._vmap_fun, self._vmap_in, self._vmap_out = fun, in_axes, out_axes
        self._vmap_jitted = None
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(fun, attr):
                setattr(self, attr, getattr(fun, attr))

    def __call__(self, *args):
        leaves, _, _ = pytree.flatten(args)
        if any(isinstance(x, Tracer) for x in leaves):
            return self.traced(*args)
        if self._vmap_jitted is None:
            def run(*a):
                return self.traced(*a)
            self._vmap_jitted = Jitted(run)
        return self._vmap_jitted(*args)

    def traced(self, *args):
        axes = self._vmap_in
        axes = (axes,) * len(args) if axes is None or isinstance(axes, numbers.Integral) else tuple(axes)
        if len(axes) != len(args):
            raise ValueError(f"vmap: in_axes has {len(axes)} entries for {len(args)} positional arguments")
        size = None
        call_args, batched = [], {}
        for n, (x, ax) in enumerate(zip(args, axes)):
            if ax is None:
                call_args.append(x)
                continue
            if not isinstance(x, Tracer):
                raise TypeError(f"vmap: argument {n} is {type(x).__name__}; a mapped argument must be an array "
                                "(in_axes=None for anything else)")
            if x.node.type.is_sparse:
                raise TraceError(f"vmap: argument {n} is sparse; sparse arguments are shared across the batch "
                                 "(in_axes=None), only dense ones are mapped")
            ndim = x.node.type.ndim
            if not -ndim <= ax < ndim:
                raise ValueError(f"vmap: in_axes {ax} out of range for argument {n} of rank {ndim}")
            ax %= ndim
            if ax != 0:
                x = transpose(x, (ax, *[d for d in range(ndim) if d != ax]))
            n_batch = x.node.type.shape[0]
            if size is not None and n_batch != size:
                raise ValueError(f"vmap: mapped axes have different sizes ({size} and {n_batch})")
            size = n_batch
            t = x.node.type
            holder = Node("input", (), (("vmap", next(_PLACEHOLDER)),), TensorType(t.shape[1:], t.dtype, None))
            batched[holder] = x.node
            call_args.append(Tracer(holder))
        if size is None:
            raise ValueError("vmap: at least one argument must be mapped (in_axes not all None)")
        out = self._vmap_fun(*call_args)
        leaves, _, structure = pytree.flatten(out)
        mapping = dict(batched)
        roots = [x.node for x in leaves if isinstance(x, Tracer)]
        for node in walk(roots):
            if node in mapping or not any(a in mapping for a in node.args):
                continue
            mapping[node] = _batch(node, [mapping.get(a) for a in node.args], size)
        results = []
        for x in leaves:
            if not isinstance(x, Tracer):
                results.append(x)
                continue
            new = mapping.get(x.node)
            if new is None:   # independent of the batch: the same value for every example, as JAX's
                subs = _LETTERS[1: 1 + x.node.type.ndim]
                ones = captures.constant_node(np.ones(size, dtype=x.node.type.dtype))
                new = contract([ones, x.node], ["a", subs], "a" + subs, out_format="dense", op="vmap").node
            result = Tracer(new)
            out_ax = self._vmap_out % (new.type.ndim or 1)
            if out_ax != 0:
                order = list(range(1, new.type.ndim))
                order.insert(out_ax, 0)
                result = transpose(result, tuple(order))
            results.append(result)
        return pytree.unflatten(structure, results)


def _batch(node: Node, new_args: list, size: int) -> Node:
    """``node`` with its batched operands (``new_args[k]`` not None: a leading batch axis) batched."""
    args = [b if b is not None else a for a, b in zip(node.args, new_args)]
    is_batched = [b is not None for b in new_args]
    t = node.type
    # a batch of sparse results (an SDDMM per example) is stored dense (a batch axis of sparse tensors is
    # not supported): computed at the sparse operands' pattern all the same
    if node.op == "contract":
        params: ContractParams = node.params[0]
        used = set("".join(params.inputs)) | set(params.output)
        z = next(c for c in "zyxwvutsrqponmlkjihgfedcba" if c not in used)
        subs = [z + s if b else s for s, b in zip(params.inputs, is_batched)]
        return contract(list(args), subs, z + params.output, scale=params.scale, out_format="dense",
                        op="vmap").node
    if node.op in ("ewise", "combine", "map"):
        if node.op == "ewise":
            expr = node.params[0]
            reads = node.params[1] if len(node.params) > 1 else (_LETTERS[: t.ndim],) * len(args)
        else:
            form_args = ("arg", 0), ("arg", 1)
            if node.op == "combine":
                head = {1: "add", -1: "sub", "max": "max", "min": "min"}[node.params[0]]
                expr = (head, *form_args)
            else:
                kind = node.params[0]
                expr = (kind[0], form_args[0], *kind[1:])
            reads = (_LETTERS[: t.ndim],) * len(args)
        shift = {c: _LETTERS[i + 1] for i, c in enumerate(_LETTERS[:-1])}
        new_reads = []
        operands = []
        for a, b, read in zip(args, is_batched, reads):
            moved = "".join(shift.get(c, c) for c in read)
            if a.type.is_sparse:
                a = todense(Tracer(a)).node
            new_reads.append("a" + moved if b else moved)
            operands.append(a)
        return Node("ewise", tuple(operands), (expr, tuple(new_reads)), TensorType((size,) + t.shape, t.dtype, None))
    if node.op == "reduce":
        kind, axes, keepdims = node.params[:3]
        (a,) = args
        shape = (size,) + t.shape
        return Node("reduce", (a,), (kind, tuple(d + 1 for d in axes), keepdims), TensorType(shape, t.dtype, None))
    if node.op == "view":
        (spec,) = node.params
        (a,) = args
        new_spec = (("dim", 0, 0, 1),) + tuple(e if e[0] == "at" else ("dim", e[1] + 1, e[2], e[3]) for e in spec)
        return indexing.view(a, new_spec, (size,) + t.shape, "vmap")
    if node.op == "loop":
        return loop_batching.batch_loop(node, new_args, size, _batch)
    if node.op == "loop_out":
        return loop_batching.batch_loop_out(node, new_args[0])
    raise TraceError(f"vmap: the traced operation {node.op!r} is not batched yet")
