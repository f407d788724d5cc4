"""Dense elementwise glue in NumPy: a plan whose kernel would only map dense arrays (its products computed
before it, by BLAS or the native kernel library: GCN's ``np.maximum(a @ (x @ w), 0.0)`` is ``x @ w`` on the host,
``a @ xw`` by the drop-in's SpMM, then ``max($0, 0.0)``) runs that map with NumPy's ufuncs, operation by
operation in the MLIR kernel's order and dtype, so the bits are the kernel's, and no MLIR is compiled (nor its
Python bindings imported: ~0.5-0.9 s of a new program's first call on the 2-core Zen 4 VM, issue 58).

Only expressions whose NumPy evaluation is the kernel's exactly are taken (``exact``): additions,
subtractions, products, a division by a constant, integer powers (the lowering's repeated products), ``abs``,
and a maximum / minimum with a constant, of float32 / float64 operands of the result's dtype and shape (no
promotion, no broadcast). ``arith.maximumf`` orders -0.0 below +0.0 where NumPy's ``maximum`` may return either
zero: a maximum with +0.0 is then added to +0.0 (-0.0 + 0.0 is +0.0, any other value unchanged) and a minimum
with -0.0 negated around that; a maximum with -0.0 or a minimum with +0.0 keeps the MLIR kernel. NaN propagates in
both. Anything else (a sparse operand, a contraction, a reduction, a libm function, a cast) keeps the MLIR
kernel, as does ``library=False``, the plain sparsifier (``vectorize=False``), profiling and a target other than
the host.
"""

from __future__ import annotations

import numpy as np

from splyce.planner.kernel_choice import LibraryOp
from splyce.runtime.library import LibraryCall, LibraryKernel

FLOATS = ("float32", "float64")


class GlueKernel(LibraryKernel):
    """A ``LibraryKernel`` over a glue call: every call runs the plan's own steps before the glue
    (``plan.prepare``: its native products, which check each index they read) and then NumPy, never the MLIR
    kernel's loops (``run_exact``; a plan with a distributed factor or a scatter is never glue), so the
    dispatcher's deferred checks (runtime/deferred_checks.py) follow its plan as a ``Kernel``'s."""


def is_glue(call) -> bool:
    return call is not None and call.formulation == "numpy" and call.op.op == "glue"


def choose(plan, options) -> LibraryCall | None:
    """A call that computes ``plan`` with NumPy's ufuncs where its kernel is dense elementwise glue only (see
    the module docstring), else None."""
    if not (options.library and options.vectorize) or options.profile or not options.target.is_host_compatible:
        return None
    trace = plan.trace
    if len(trace.outputs) != 1 or plan.scatters or plan.distributed or not plan.steps:
        return None
    if getattr(trace, "views", ()) and any(trace.views):
        return None
    order = []
    for step in plan.steps:
        node = step.node
        t = node.type
        if node.op != "ewise" or t.is_sparse or t.dtype not in FLOATS or not t.shape:
            return None
        if len(node.params) > 1 and any(r != "abcd"[:t.ndim] for r in node.params[1]):
            return None        # a broadcast read
        if any(a.type.is_sparse or a.type.shape != t.shape or a.type.dtype != t.dtype for a in node.args):
            return None
        if not exact(node.params[0], len(node.args)):
            return None
        order.append(node)
    computed = set(order)
    for node in order:         # every operand an input of the kernel or a step before it
        if any(a.op != "input" and a not in computed for a in node.args):
            return None
    if trace.outputs[0] is not order[-1]:
        return None
    n_inputs = len(trace.inputs)
    out = trace.outputs[0].type
    op = LibraryOp("glue", None, tuple(range(n_inputs)), tuple(trace.inputs), out)
    return LibraryCall(op, "numpy", runner(tuple(order)),
                       detail="dense elementwise glue by NumPy's ufuncs, the MLIR kernel's bits (runtime/glue.py)")


def exact(expr, n_args: int) -> bool:
    """Whether ``evaluate`` gives the MLIR kernel's bits for ``expr`` over float operands of one dtype."""
    head = expr[0]
    if head == "arg":
        return isinstance(expr[1], int) and 0 <= expr[1] < n_args
    if head == "const":
        return _number(expr[1])
    if head in ("add", "sub", "mul"):
        return len(expr) == 3 and exact(expr[1], n_args) and exact(expr[2], n_args)
    if head == "div":
        return len(expr) == 3 and _number(expr[2]) and exact(expr[1], n_args)
    if head == "pow":
        return isinstance(expr[2], int) and not isinstance(expr[2], bool) and 1 <= expr[2] <= 64 \
            and exact(expr[1], n_args)
    if head == "abs":
        return exact(expr[1], n_args)
    if head in ("max", "min"):
        if len(expr) != 3:
            return False
        consts = [x for x in expr[1:] if x[0] == "const"]
        if len(consts) != 1 or not _number(consts[0][1]):
            return False
        c = float(consts[0][1])
        if c == 0.0 and (np.signbit(c) == (head == "max")):
            return False       # max with -0.0, min with +0.0: the zero rule below does not hold
        other = expr[2] if expr[1][0] == "const" else expr[1]
        return exact(other, n_args)
    return False


def _number(v) -> bool:
    """A real constant (an Inf or NaN constant keeps the MLIR kernel: its zero rule is not checked there)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(float(v)))


def evaluate(expr, args: list, dtype: np.dtype, fresh: list):
    """``expr`` over ``args`` in ``dtype``, operation by operation as the MLIR kernel evaluates it. ``fresh``
    collects the arrays made here, which later operations overwrite (never an argument)."""
    head = expr[0]
    if head == "arg":
        return args[expr[1]]
    if head == "const":
        return dtype.type(expr[1])
    if head in ("add", "sub", "mul", "div", "max", "min"):
        x = evaluate(expr[1], args, dtype, fresh)
        y = dtype.type(expr[2]) if head == "div" else evaluate(expr[2], args, dtype, fresh)
        ufunc = _BINARY[head]
        target = next((v for v in (x, y) if isinstance(v, np.ndarray) and any(v is f for f in fresh)), None)
        if target is None:
            target = ufunc(x, y)
            fresh.append(target)
        else:
            ufunc(x, y, out=target)
        if head == "max" and (y if np.ndim(y) == 0 else x) == 0:    # maximumf: +0.0 above -0.0
            np.add(target, dtype.type(0.0), out=target)
        elif head == "min" and (y if np.ndim(y) == 0 else x) == 0:  # minimumf: -0.0 below +0.0
            np.negative(target, out=target)
            np.add(target, dtype.type(0.0), out=target)
            np.negative(target, out=target)
        return target
    if head == "pow":
        base = evaluate(expr[1], args, dtype, fresh)
        result = np.array(base, copy=True)
        fresh.append(result)
        for _ in range(expr[2] - 1):          # the lowering's repeated products, in its order
            np.multiply(result, base, out=result)
        return result
    if head == "abs":
        x = evaluate(expr[1], args, dtype, fresh)
        if any(x is f for f in fresh):
            return np.absolute(x, out=x)
        out = np.absolute(x)
        fresh.append(out)
        return out
    raise AssertionError(f"internal error: glue expression {head!r} was not checked exact")


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "max": np.maximum,
           "min": np.minimum}


def runner(order: tuple):
    """``run(args, threads) -> array``: the steps in turn over the kernel's inputs (``args``: every input, in
    order), each step's value handed to the steps after it."""
    dtype = np.dtype(order[-1].type.dtype)

    def run(args, threads=1):
        values = {}
        with np.errstate(all="ignore"):      # NaN / Inf as the kernel gives them, silently
            for node in order:
                operands = [values[a] if a in values else args[a.params[0]] for a in node.args]
                fresh: list = []
                result = evaluate(node.params[0], operands, dtype, fresh)
                if not any(result is f for f in fresh):      # the expression is an operand itself
                    result = np.array(result, dtype=dtype, copy=True)
                values[node] = result
        return values[order[-1]]
    return run
