"""A jitted function holding compiled loops (tracer/loops.py), run as stages.

``Program`` cuts a trace at its ``loop`` nodes: a *segment* (one jitted sub-trace: planned, fused and
compiled as any function's, native steps included) computes what the next loop reads and has not been
computed yet; a *loop stage* runs the loop with a driver that re-enters the body's program once per
iteration; a last segment computes the results. The body is traced once (when the loop is traced) and
compiled once (its own segment, on the first iteration), whatever the trip count.

A body without a loop inside it is one segment: its kernel is looked up once per loop run, its operands
prepared and checked once, and each iteration calls the kernel on them with the carry's slots replaced by
the previous iteration's results (``Kernel.run_exact``): no tracing, planning or argument handling per
iteration. A loop nested in a body makes the body a program of its own (correct, with a lookup per stage and
iteration).

Values between stages are kernel operands: dense arrays and SparseTensors / scipy results; a 0-d value is
kept as a 1-element array (kernels take no 0-d operands) and read back as ``x[0]`` in the sub-trace.
"""

from __future__ import annotations

import numpy as np

from splyce.errors import TraceError
from splyce.tensors.tensor import SparseTensor
from splyce.tracer import loops
from splyce.tracer.tracer import Tracer, copy_of
from splyce.tracer.ir import Node, TensorType, Trace

_INDEX_TYPE = TensorType((1,), "int64", None)


def has_loops(trace: Trace) -> bool:
    return loops.has_loops(trace.outputs)


def _walk_until(roots, stop) -> list[Node]:
    """The nodes reachable from ``roots`` without passing through a node of ``stop`` (those included, not
    expanded), in dependency order."""
    order: dict[Node, None] = {}
    stack = [(n, False) for n in reversed(tuple(roots))]
    while stack:
        node, expanded = stack.pop()
        if node in order:
            continue
        if expanded or node in stop:
            order[node] = None
            continue
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in order)
    return list(order)


def as_operand(value, t: TensorType):
    """A stage's result as the next stage's operand: a 0-d value as a 1-element array."""
    if t.ndim == 0:
        return np.full(1, value, dtype=t.dtype)
    return value


def as_result(value, t: TensorType):
    """An operand back as a result: a 0-d value as the scalar of its dtype (a kernel's 0-d results)."""
    if t.ndim == 0:
        return np.dtype(t.dtype).type(value[0])
    return value


class Segment:
    """``targets`` computed from the program's values ``reads`` by one jitted sub-trace."""

    def __init__(self, targets: list[Node], available: dict[Node, int], make_jitted):
        reached = _walk_until(targets, available)
        inputs = sorted((n for n in reached if n in available), key=available.get)
        for n in reached:
            if n.op in ("loop", "loop_out", "loop_input") and n not in available:
                raise AssertionError(f"stage cut missed {n!r}")
        self.reads = tuple(available[n] for n in inputs)
        self.targets = tuple(targets)
        self.trace = sub_trace(targets, inputs)
        self.jitted = make_jitted(self.trace)
        # the kernel of a call whose operands it took as given (no conversion): it serves a later call whose
        # scipy operand the whole program's call left unchecked, for the native steps that check it as they read
        # it (runtime/deferred_checks.py, ``self_checked``; the operands' types are the program's, fixed by its key)
        self.trusted = None

    def run(self, env: list) -> list:
        args = [env[s] for s in self.reads]
        values = []
        kernel = self.jitted._filed(args, values)     # the dispatcher's cached fast path, else the full lookup
        if kernel is None and self.trusted is not None and any(
                type(a) is SparseTensor and not a.validated for a in args):
            kernel, values = self.trusted, args
        if kernel is None:
            kernel, values = self.jitted.kernel_for(*args)
        if self.trusted is None and len(values) == len(args) and all(v is a for v, a in zip(values, args)):
            self.trusted = kernel
        results = kernel.run_exact(values)
        return [as_operand(r, t.type) for r, t in zip(results, self.targets)]

    def kernel(self):
        """The compiled kernel, when a call has compiled it (for the plan's text), else None."""
        cache = self.jitted._cache
        return next(iter(cache.values()), None) if cache else None


class HostDot:
    """A dot product of two dense vectors computed on the host as NumPy computes ``x @ y`` (``np.matmul``:
    BLAS ``ddot`` / ``sdot``), so it equals NumPy's bit for bit (planner/cuts.py, ``host_dots``)."""

    def __init__(self, node: Node, available: dict[Node, int]):
        self.node = node
        self.reads = tuple(available[a] for a in node.args)
        self.dtype = np.dtype(node.type.dtype)

    def run(self, env: list) -> list:
        x, y = (np.asarray(env[s]) for s in self.reads)
        with np.errstate(all="ignore"):
            value = np.matmul(x, y)
        return [np.full(1, value, dtype=self.dtype)]


def sub_trace(targets, inputs) -> Trace:
    """The trace of ``targets`` with ``inputs`` (nodes) read as its arguments, in order (a 0-d one as element 0
    of a 1-element array argument)."""
    mapping: dict[Node, Node] = {}
    types = []
    for k, n in enumerate(inputs):
        t = n.type
        if t.ndim == 0:
            arg = Node("input", (), (k,), TensorType((1,), t.dtype, None))
            mapping[n] = Tracer(arg)[0].node
            types.append(arg.type)
        else:
            mapping[n] = Node("input", (), (k,), t)
            types.append(t)
    for node in _walk_until(targets, mapping):
        if node not in mapping:
            mapping[node] = Node(node.op, tuple(mapping[a] for a in node.args), node.params, node.type)
    outputs = []
    for t in targets:
        out = mapping[t]
        outputs.append(copy_of(out) if out.op in ("input", "view") else out)
    return Trace(tuple(types), tuple(outputs))


class LoopStage:
    """One loop: its arguments read from the program's values, its results appended to them."""

    def __init__(self, loop: Node, available: dict[Node, int], make_jitted):
        spec: loops.LoopSpec = loop.params[0]
        self.spec = spec
        self.loop = loop
        self.reads = tuple(available[a] for a in loop.args)
        self.outputs = loops.outputs_of(loop)
        self.out_types = tuple(n.type for n in self.outputs)
        body_inputs = list(spec.placeholders) + list(spec.free)
        self.body = Program(list(spec.outputs), body_inputs, make_jitted)
        carry = spec.placeholders[(0 if spec.index is None else 1):][:spec.n_carry]
        self.carry_types = tuple(p.type for p in carry)
        self.xs_types = tuple(p.type for p in spec.placeholders[len(spec.placeholders) - spec.n_xs:])
        self.ys_types = tuple(n.type for n in spec.outputs[len(spec.outputs) - spec.n_ys:])
        self.iterations = 0      # of the last run (the plan's text, tests)

    def run(self, env: list) -> list:
        spec = self.spec
        args = [env[s] for s in self.reads]
        k = 0
        carry = args[k:k + spec.n_carry]
        k += spec.n_carry
        cond = None
        if spec.has_cond:
            cond = args[k]
            k += 1
        xs = [np.ascontiguousarray(x) for x in args[k:k + spec.n_xs]]
        k += spec.n_xs
        lower, upper = spec.lower, spec.upper
        if spec.traced_bounds:
            if lower is None:
                lower = int(args[k][0])
                k += 1
            if upper is None:
                upper = int(args[k][0])
                k += 1
        free = args[k:]
        if spec.kind == "fori":
            steps = range(lower, upper)
        elif spec.kind == "scan":
            steps = range(spec.length - 1, -1, -1) if spec.reverse else range(spec.length)
        else:
            steps = None
        ys = [np.empty((spec.length,) + t.shape, dtype=t.dtype) for t in self.ys_types] if spec.kind == "scan" else []
        n_carry, n_ys = spec.n_carry, spec.n_ys
        index = spec.index is not None
        first = 1 if index else 0          # the body's operands: [index], carry, xs slices, free values
        values = ([np.zeros(1, np.int64)] if index else []) + list(carry) \
            + [_slice(x, 0, t) for x, t in zip(xs, self.xs_types)] + list(free)
        xs_at = first + n_carry
        direct = self.body.single_kernel(values)   # the body's kernel on operands prepared once, or None
        if direct is not None:
            def put(k, value):
                values[k] = value
                direct.set(k, value)
            step = direct
        else:
            def put(k, value):
                values[k] = value
            step = self.body.run
        count = 0
        if steps is None:
            while bool(cond[0]):
                results = step(values)
                for j in range(n_carry):
                    put(first + j, results[j])
                cond = results[n_carry]
                count += 1
        else:
            for i in steps:
                if index:
                    put(0, np.full(1, i, dtype=np.int64))
                for j, (x, t) in enumerate(zip(xs, self.xs_types)):
                    put(xs_at + j, _slice(x, i, t))
                results = step(values)
                for j in range(n_carry):
                    put(first + j, results[j])
                for j in range(n_ys):
                    ys[j][i] = as_result(results[len(results) - n_ys + j], self.ys_types[j]) \
                        if self.ys_types[j].ndim == 0 else results[len(results) - n_ys + j]
                count += 1
        self.iterations = count
        final = [values[first + j] for j in range(n_carry)] if count else list(carry)
        return final + ys


def _slice(x, i: int, t: TensorType):
    """Step ``i``'s slice of a scanned array, as the body's operand (a 0-d slice as a 1-element array)."""
    if x.shape[0] == 0:
        return np.zeros((1,) if t.ndim == 0 else t.shape, dtype=t.dtype)
    return x[i:i + 1] if t.ndim == 0 else x[i]


class Program:
    """``outputs`` from the values of ``inputs`` (nodes, in order), cut at its loops into stages."""

    def __init__(self, outputs: list[Node], inputs: list[Node], make_jitted):
        available = {n: k for k, n in enumerate(inputs)}
        self.n_inputs = len(inputs)
        self.stages: list = []
        self.output_types = tuple(n.type for n in outputs)
        slots = len(inputs)
        done: set[Node] = set()
        for node in _walk_until(outputs, available):
            if node.op != "loop" or node in done:
                continue
            need = [a for a in dict.fromkeys(node.args) if a not in available]
            if need:
                segment = Segment(need, available, make_jitted)
                self.stages.append(segment)
                for n in need:
                    available[n] = slots
                    slots += 1
            stage = LoopStage(node, available, make_jitted)
            self.stages.append(stage)
            for n in stage.outputs:
                available[n] = slots
                slots += 1
            done.add(node)
        need = [o for o in dict.fromkeys(outputs) if o not in available]
        if need:
            self.stages.append(Segment(need, available, make_jitted))
            for n in need:
                available[n] = slots
                slots += 1
        self.outputs = tuple(available[o] for o in outputs)

    @classmethod
    def cut(cls, outputs: list[Node], inputs: list[Node], level: dict, make_jitted, dots=()) -> "Program":
        """The program of a trace without loops cut into stages by ``level`` (planner/cuts.py): stage ``s``
        the host dots ``dots`` at level ``s`` (``HostDot``), then one segment computing the values at level
        ``s`` that a later stage or the results read."""
        self = cls.__new__(cls)
        available = {n: k for k, n in enumerate(inputs)}
        self.n_inputs = len(inputs)
        self.stages = []
        self.output_types = tuple(n.type for n in outputs)
        order = _walk_until(outputs, available)
        wanted = set(outputs)
        for node in order:
            for a in node.args:
                if level[a] < level[node]:
                    wanted.add(a)
        slots = len(inputs)
        host = set(dots)
        for s in range(max((level[o] for o in outputs), default=0) + 1):
            for n in order:
                if n in host and level[n] == s and n not in available:
                    self.stages.append(HostDot(n, available))
                    available[n] = slots
                    slots += 1
            targets = [n for n in order if level[n] == s and n in wanted and n not in available]
            if not targets:
                continue
            self.stages.append(Segment(targets, available, make_jitted))
            for n in targets:
                available[n] = slots
                slots += 1
        self.outputs = tuple(available[o] for o in outputs)
        return self

    def single_kernel(self, values: list):
        """For a program that is one segment (no loop inside): a ``Direct`` call of its compiled kernel on
        operands prepared once, else None (then ``run`` per call)."""
        if len(self.stages) != 1 or not isinstance(self.stages[0], Segment):
            return None
        segment = self.stages[0]
        kernel, operands = segment.jitted.kernel_for(*[values[s] for s in segment.reads])
        if len(operands) != len(segment.reads):
            return None
        return Direct(self, kernel, operands)

    def run(self, values: list) -> list:
        env = list(values)
        for stage in self.stages:
            env.extend(stage.run(env))
        return [env[s] for s in self.outputs]

    def describe(self, indent: str = "  ") -> list[str]:
        lines = []
        for k, stage in enumerate(self.stages):
            if isinstance(stage, HostDot):
                lines.append(f"{indent}stage {k}: host dot numpy.matmul of {stage.node.args[0].type} values "
                             "(BLAS, NumPy's order: equal to NumPy's x @ y bit for bit)")
            elif isinstance(stage, Segment):
                kernel = stage.kernel()
                lines.append(f"{indent}stage {k}: kernel of {len(stage.targets)} value(s) from "
                             f"{len(stage.reads)} operand(s)")
                text = _plan_text(kernel) if kernel is not None else stage.trace.as_text() + \
                    "\n(planned on its first call)"
                lines.extend(indent + "  " + line for line in text.splitlines())
            else:
                spec = stage.spec
                single = len(stage.body.stages) == 1 and isinstance(stage.body.stages[0], Segment)
                how = ("a driver loop re-entering the body's one compiled kernel once per iteration (operands "
                       "prepared once, the carry's buffers handed from each iteration to the next)") if single else \
                    "a driver loop running the body's stages once per iteration (a loop nested in the body)"
                lines.append(f"{indent}stage {k}: {spec.describe()} ({spec.n_carry} carry leaves; body traced and "
                             f"compiled once): {how}; last run: {stage.iterations} iterations")
                lines.extend(stage.body.describe(indent + "    "))
        return lines


def _plan_text(kernel) -> str:
    plan = getattr(kernel, "plan", None)
    text = plan.as_text() if plan is not None else "(no plan)"
    call = getattr(kernel, "call", None)
    return text + ("\n" + call.describe() if call is not None else "")


class Direct:
    """A one-segment program's kernel called on operands prepared once: ``set(k, value)`` replaces the
    program's input ``k`` (a carry leaf, the index), ``__call__`` runs the kernel and returns the program's
    outputs (0-d ones as 1-element arrays)."""

    def __init__(self, program: Program, kernel, operands: list):
        segment = program.stages[0]
        n = program.n_inputs
        self.run = kernel.run_exact
        self.operands = operands
        self.position = {s: k for k, s in enumerate(segment.reads)}
        self.inputs: dict[int, object] = {}
        # per output: the kernel's result k (>= 0), or the program's input -1 - slot (returned as it is)
        self.picks = tuple(s - n if s >= n else -1 - s for s in program.outputs)
        self.scalar = tuple(np.dtype(t.type.dtype) if t.type.ndim == 0 else None for t in segment.targets)

    def set(self, k: int, value) -> None:
        self.inputs[k] = value
        at = self.position.get(k)
        if at is not None:
            self.operands[at] = value

    def __call__(self, inputs: list) -> list:
        results = self.run(self.operands)
        scalar = self.scalar
        return [(results[p] if scalar[p] is None else np.full(1, results[p], dtype=scalar[p])) if p >= 0
                else inputs[-1 - p] for p in self.picks]


class StagedPlan:
    """A traced function with loops, as the dispatcher keeps it in place of a ``Plan``."""

    def __init__(self, source: Trace, constants: list, make_jitted, level: dict | None = None, dots=()):
        self.source = source
        self.trace = source
        self.constants = tuple(constants)
        self.cut = level is not None
        inputs = [Node("input", (), (k,), t) for k, t in enumerate(source.inputs)]
        if level is None:
            self.program = Program(list(source.outputs), inputs, make_jitted)
        else:
            self.program = Program.cut(list(source.outputs), inputs, level, make_jitted, dots)

    def as_text(self) -> str:
        what = ("a program cut at its products into stages, each product native at the start of its stage, "
                "dot products of dense vectors on the host (planner/cuts.py)") if self.cut else "a function with compiled loops, run as stages"
        lines = [f"staged plan {{  // {what} (runtime/staged.py)"]
        lines.extend(self.program.describe())
        lines.append("}")
        return "\n".join(lines)


class StagedKernel:
    """The dispatcher's kernel interface over a ``StagedPlan``."""

    coo_sources = None
    direct = None
    scatters = False

    def __init__(self, plan: StagedPlan, result_tree):
        self.plan = plan
        self.result_tree = result_tree
        self.trace = plan.source

    def run_exact(self, values: list) -> list:
        given = list(values) + list(self.plan.constants)
        types = self.plan.source.inputs
        operands = [as_operand(v, t) if t.ndim == 0 else v for v, t in zip(given, types)]
        results = self.plan.program.run(operands)
        out = []
        for r, t in zip(results, self.plan.program.output_types):
            r = as_result(r, t)
            if any(r is v for v in given) or (type(r) is np.ndarray and any(
                    type(v) is np.ndarray and np.may_share_memory(r, v) for v in given)):
                r = r.copy()           # a loop of no iterations returns its initial carry: never the caller's
            out.append(r)
        return out

    def run(self, values: list, accumulate_into=None):
        results = self.run_exact(values)
        if accumulate_into is not None:
            with np.errstate(all="ignore"):
                return [np.add(accumulate_into, results[0], out=accumulate_into)]
        return results

    def kept(self):
        return self

    @property
    def lowering(self):
        return StagedLowering(self.plan)

    @property
    def compiled(self):
        raise TypeError("splyce.profile counts the lanes of one kernel, and a function with compiled loops (or "
                        "cut products) runs as stages, each its own kernel: profile a loop's body as a jitted "
                        "function of its own, and read f.lower(...).as_text('plan') for the stages")


class StagedLowering:
    """``Jitted.lower`` of a function with loops: the trace and the staged plan as text; the other stages are
    each segment's own (``Jitted.lower`` of the segment), not one module."""

    def __init__(self, plan: StagedPlan):
        self.plan = plan
        self.trace = plan.source

    def as_text(self, stage: str = "plan") -> str:
        if stage == "trace":
            return self.plan.source.as_text()
        if stage == "plan":
            return self.plan.as_text()
        raise TraceError(f"a function with compiled loops runs as stages, each its own kernel: as_text({stage!r}) "
                         "is per stage; as_text('plan') lists them (with each kernel's plan once it has run)")
