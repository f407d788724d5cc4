"""Dense results written over a buffer the plan computed before the kernel.

The glue after a product the plan computes before its kernel (``np.maximum(a @ xw, 0)``, ``0.85 * (a @ x) + c``:
the product is a native step or a host product, an input of the kernel) reads that product element by element
and dies with it. Writing the result over the product's own array, a fresh one nothing else holds, saves the
result's allocation and writes into lines the read just brought to the cache, where a fresh result buffer
costs a second stream of cache misses (NumPy's chain pays the same, and elides the temporary of ``0.85 * y +
c`` by itself). The kernel then reads the product from its output buffer (``linalg.generic`` whose ``outs``
is that buffer and whose body reads it), and the runtime passes the product's array as that buffer
(runtime/kernel.py): no argument of the kernel aliases another one it reads.
"""

from __future__ import annotations

from splyce.lowering.to_mlir import overwritten_results
from splyce.planner.rewrite import readers
from splyce.tracer.ir import Trace, walk


def in_place_results(trace: Trace, fresh: frozenset[int]) -> tuple[tuple[int, int], ...]:
    """``(output position, input index)`` for each dense elementwise result the kernel may write over an
    input in ``fresh`` (arrays the plan computed before the kernel): a result written whole without reading
    its buffer (lowering's ``overwritten_results``), of that input's shape and dtype, reading it at the
    result's own positions (no broadcast), where the input is not returned and nothing else reads it but
    full reductions the result depends on (CG's ``p @ ap`` before ``r - alpha * ap``): a scalar the result
    needs is complete before its loop starts, and no loop can fuse into the result's.
    One input per result, one result per input."""
    read_by = readers(trace.outputs)
    returned = set(trace.outputs)
    written_whole = overwritten_results(trace)
    taken: set[int] = set()
    found = []
    for position, out in enumerate(trace.outputs):
        if out.op != "ewise" or out not in written_whole or trace.outputs.index(out) != position:
            continue
        subs = "abcd"[: out.type.ndim]
        reads = out.params[1] if len(out.params) > 1 else (subs,) * len(out.args)
        before = set(walk(out.args))      # what the result is computed from
        for arg, read in zip(out.args, reads):
            if (arg.op == "input" and arg.params[0] in fresh and arg.params[0] not in taken
                    and arg not in returned and read == subs
                    and all(r is out or (r.type.ndim == 0 and r in before) for r in read_by.get(arg, ()))
                    and arg.type.shape == out.type.shape and arg.type.dtype == out.type.dtype
                    and not arg.type.is_sparse):
                taken.add(arg.params[0])
                found.append((position, arg.params[0]))
                break
    return tuple(found)

