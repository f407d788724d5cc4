"""``splyce.dask.blockwise(f)``: a ``@splyce.jit`` function run once per row block of its Dask arguments.

A Dask argument that the outer loop does not index (the vector of ``y = A @ y``, left in row blocks by
the step before) is read whole by every block, joined once per worker from its blocks: several steps of an
iterative method make one graph, the vector's blocks going from worker to worker, never through the client.

Whether that is correct is decided by the compiler's own thread-split analysis (``passes/parallel.py``): the
function is lowered with ``threads=2`` on a sample block; the analysis splits the outer loop only when every
iteration writes its own row of a dense result and nothing else. On top of it, the outer loop must be the
first index of every Dask (partitioned) argument and of the result, and no other argument may have it.
Otherwise ``blockwise`` raises and says why.
"""

from __future__ import annotations

import re

import numpy as np

from splyce.dask.blocks import is_dask, row_blocks, whole
from splyce.dask.ops import _partitioned_graph


def _sample(x, rows: int):
    """An empty operand like a block of ``x`` with ``rows`` rows (same type, dtype and other dimensions)."""
    meta = x._meta
    shape = (rows,) + tuple(x.shape[1:])
    family = type(meta).__module__.split(".")[0]
    if family == "scipy":
        return type(meta)(shape, dtype=meta.dtype)
    if family == "sparse":
        import sparse

        return sparse.COO(np.zeros((len(shape), 0), dtype=np.int64), np.zeros(0, dtype=meta.dtype), shape=shape)
    return np.zeros(shape, dtype=meta.dtype)


def _why_not_split(lowering) -> str:
    match = re.search(r"threads: one thread \((.*)\)", lowering.as_text("splyce"))
    return match.group(1) if match else "the outer loop is not split"


def _check_indices(lowering, partitioned: list[bool]):
    """Why the outer loop is not the partitioned row index of the operands and the result (a ``_ReadWhole``
    for a Dask argument without the outer loop's index), or None."""
    from splyce.lowering.to_mlir import loop_order

    trace = lowering.trace
    if len(trace.outputs) != 1:
        return "it returns several results"
    node = trace.outputs[0]
    if any(arg.op != "input" for arg in node.args):
        return "it is not one kernel over its arguments"
    if node.op not in ("combine", "contract"):
        return f"a {node.op} kernel is not split into row blocks"
    if node.op == "combine":
        subs, output = ["".join(chr(97 + d) for d in range(node.type.ndim))] * len(node.args), None
        output = subs[0]
    else:
        params = node.params[0]
        subs, output = list(params.inputs), params.output
    outer = loop_order([(s, a.type) for s, a in zip(subs, node.args)], output)[0]
    if output[:1] != outer:
        return f"the outer loop index {outer!r} is not the result's first index"
    for s, arg in zip(subs, node.args):
        n = arg.params[0]
        if partitioned[n] and outer not in s:
            return _ReadWhole(n, f"Dask argument {n} ({s!r}) is not indexed by the outer loop {outer!r} in "
                                 "its rows")
        if partitioned[n] and (s[:1] != outer or outer in s[1:]):
            return f"Dask argument {n} ({s!r}) is not indexed by the outer loop {outer!r} in its rows"
        if not partitioned[n] and outer in s:
            return (f"argument {n} ({s!r}) is indexed by the outer loop {outer!r}: pass it as a Dask array "
                    "so it is partitioned too")
    return None


class _TraceFailed(Exception):
    """Tracing on the sample blocks failed; ``error`` is what to raise when no other partition traces."""

    def __init__(self, error: ValueError):
        super().__init__(str(error))
        self.error = error


class _ReadWhole(Exception):
    """Dask argument ``n`` is not indexed by the outer loop: every block reads it whole."""

    def __init__(self, n: int, message: str):
        super().__init__(message)
        self.n = n


def blockwise(f):
    """Run the ``@splyce.jit`` function ``f`` once per row block of its Dask arguments.

    Calling the wrapper with Dask arrays (row-partitioned) and concrete operands (broadcast to every block)
    returns a lazy Dask array whose ``.compute()`` equals ``f`` on the whole operands. Every block is padded
    to the largest block's row count, so all tasks share one compiled kernel.

    Parameters
    ----------
    f : Jitted
        A jitted function whose outer loop runs over the Dask arguments' rows.

    Returns
    -------
    callable
        The wrapper, taking ``f``'s arguments.

    Raises
    ------
    TypeError
        ``f`` is not a jitted function.
    ValueError
        (when the wrapper is called) no Dask argument, Dask arguments of different row counts, or a
        function whose row blocks the compiler cannot prove independent (a sparse result, a sum over the
        rows such as ``a.T @ a``), saying why.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce, splyce.dask
    >>> spmm = splyce.jit(lambda a, x: a @ x)
    >>> A = sps.random_array((1000, 1000), density=0.01, format="csr", rng=0)
    >>> X = np.ones((1000, 4))
    >>> Y = splyce.dask.blockwise(spmm)(splyce.dask.from_scipy(A, blocks=4), X).compute()
    >>> np.allclose(Y, A @ X)
    True
    """
    from splyce.runtime.dispatcher import Jitted
    from splyce.tracer.tracer import TraceError

    if not isinstance(f, Jitted):
        raise TypeError(f"splyce.dask.blockwise needs a @splyce.jit function, got {type(f).__name__}")
    name = getattr(f.fun, "__name__", "f")

    def run(*args):
        partitioned = [is_dask(x) for x in args]
        if not any(partitioned):
            raise ValueError(f"blockwise({name}): no Dask argument to partition")
        # a Dask argument the outer loop does not index (an iterative method's vector, left in row blocks by
        # the step before) is read whole by every block, joined once per worker: found by the index check, or
        # (when its length is not the rows') by tracing failing with it cut into row blocks; the first Dask
        # argument is always partitioned
        later = [n for n, p in enumerate(partitioned) if p][1:]
        while True:
            try:
                return _graph(args, partitioned)
            except _ReadWhole as exc:
                partitioned[exc.n] = False
            except _TraceFailed as exc:
                flip = next((n for n in later if partitioned[n]), None)
                if flip is None:
                    raise exc.error from None
                partitioned[flip] = False

    def _graph(args, partitioned):
        first = next(x for x, p in zip(args, partitioned) if p)
        rows = row_blocks(first).chunks[0]
        blocks = [row_blocks(x, rows) if p else x for x, p in zip(args, partitioned)]
        if len({x.shape[0] for x, p in zip(args, partitioned) if p}) != 1:
            raise ValueError(f"blockwise({name}): the Dask arguments have different numbers of rows")
        # a sample row count no other dimension has, so the outer loop's extent names its index
        others = {s for x, p in zip(args, partitioned) for s in (np.shape(x)[1:] if p else np.shape(x))}
        sample_rows = max(others | {max(rows, default=0)}) + 1
        samples = [_sample(b, sample_rows) if p else _sample(x, x.shape[0]) if is_dask(x) else x
                   for b, x, p in zip(blocks, args, partitioned)]
        split = f.with_options(threads=2)
        try:
            lowering = split.lower(*samples)
        except TraceError as exc:
            raise _TraceFailed(ValueError(
                f"blockwise({name}): tracing it on a row block failed ({exc}); every argument indexed by the "
                "rows must be a Dask array, so it is partitioned too")) from None
        if lowering.outer_extent is None:
            raise ValueError(f"blockwise({name}): its row blocks are not independent: {_why_not_split(lowering)}")
        if lowering.outer_reductions:
            raise ValueError(f"blockwise({name}): it reduces over the rows into one element; its row blocks "
                             "give partial results, not blocks of the result")
        reason = (_check_indices(lowering, partitioned) if lowering.outer_extent == sample_rows
                  else f"the outer loop (extent {lowering.outer_extent}) does not run over the Dask rows")
        if isinstance(reason, _ReadWhole):
            if sum(partitioned) > 1:
                raise reason
            reason = str(reason)
        if reason:
            raise ValueError(f"blockwise({name}): cannot run per row block: {reason}")
        out = lowering.trace.outputs[0].type
        parts = [b for b, p in zip(blocks, partitioned) if p]
        broadcast = [whole(x) for x, p in zip(args, partitioned) if not p]
        order, np_, nb = [], 0, 0
        for p in partitioned:
            order.append(("p", np_) if p else ("b", nb))
            np_, nb = np_ + p, nb + (not p)
        chunks = (parts[0].chunks[0],) + tuple((s,) for s in out.shape[1:])
        meta = np.empty((0,) * len(out.shape), dtype=out.dtype)
        return _partitioned_graph(f, parts, broadcast, order, chunks, meta, False, "blockwise-" + name)

    run.__name__ = run.__qualname__ = f"blockwise_{name}"
    run.__doc__ = f"{name} run per row block of its Dask arguments (splyce.dask.blockwise)."
    return run
