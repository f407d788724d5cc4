"""The planning stage: a traced function -> a fused trace with each contraction's formulation chosen by cost.

``make_plan(trace, nnz)`` (``nnz``: the stored entries of each input of the first call) fuses contractions
into their consumers where the cost model says it pays (planner/rewrite.py), then picks for every contraction
its loop order and each operand's storage (kept, converted on the host to the storage order the loops need,
or scattered into a dense array), and checks the memory the kernels will allocate against the budget. The
plan is cached with the kernel (per input shapes, dtypes and formats); ``lower(...).as_text("plan")`` shows it.
"""

from __future__ import annotations

import math

import numpy as np

from splyce.native.records import record
from splyce.planner.before_kernel import host_product, native_product
from splyce.planner.gathers import Gathered, describe as describe_gather, gather_inputs, host_gather
from splyce.planner.elementwise import fuse_elementwise, fuse_reductions, propagates_nan
from splyce.planner.fusion import Planner, describe, distributed_factors, input_node, on_host, pinned
from splyce.planner.in_place import in_place_results
from splyce.planner.kernel_choice import VIA_CSR, held_via_csr_reason
from splyce.planner.memory import budget_bytes, format_bytes
from splyce.planner.restored_operands import restore_blocked_operands
from splyce.planner.rewrite import Fusion, readers, uses, with_args, with_order
from splyce.planner.transposed_inputs import Derived, relabel_inputs, transposed
from splyce.planner.unordered import UNORDERED_PRODUCT_RULE, is_unordered_csr, unordered_product_results
from splyce.tensors.formats import Format
from splyce.tracer.ir import ContractParams, Node, TensorType, Trace, params_text, walk


@record(compare=("op", "operands", "formulation"))
class NativeStep:
    """An intermediate product computed before the kernel by the native kernel library: the kernel the drop-in
    runs for the same op on the same formats and dtypes (runtime/library.py, ``native_steps``), whose results
    are the MLIR kernel's bit for bit (each sum from +0.0 in stored order)."""

    op: str                      # the drop-in op ("matmul")
    operands: tuple[int, ...]    # the kernel inputs it reads (indices into the plan's sources)
    formulation: str             # the drop-in's name for the kernel
    run: object                  # (operand values, threads) -> the product
    detail: str = ""


@record
class Source:
    """Where a planned kernel input comes from: original input ``index``, stored as ``type`` (converted
    on the host when ``converted``); or, with ``host``, a product of dense inputs computed on the host by
    NumPy (BLAS) before the kernel runs: ``(einsum subscripts, input indices, scale)``; or, with ``native``,
    a product computed before the kernel by the native kernel library."""

    index: int
    type: TensorType
    converted: bool
    host: tuple | None = None
    native: NativeStep | None = None


@record
class Step:
    node: Node                 # a contraction or combination of the planned trace
    storage: tuple[str, ...]   # per operand: keep | convert | scatter | dense | "" (not costed)
    cost: float                # expected steps (planner/cost.py)
    entries: float             # expected stored entries of its result
    nbytes: int                # memory of its result
    result: bool               # a result of the function (else an intermediate the kernel allocates)


@record(compare=("source", "trace", "sources", "steps", "fusions", "nnz", "derived"))
class Plan:
    source: Trace
    trace: Trace               # what is lowered: fused, loop orders chosen, converted inputs appended
    sources: tuple[Source, ...]
    steps: tuple[Step, ...]
    fusions: tuple[Fusion, ...]
    nnz: tuple[int, ...]       # of the call's arguments (the source trace's inputs)
    derived: tuple[Derived, ...] = ()   # kernel inputs after the arguments: transposes read in place
    gathered: tuple[Gathered, ...] = ()  # kernel inputs after those: gathers computed before the kernel
    # values of the constants frozen at trace time (tracer/captures.py): the source trace's last inputs
    constants: tuple = ()      # (not compared)
    # per argument held in its own format (a scipy BSR / DIA / COO: tensors/held.py, ``TensorType.stored``):
    # ``(argument, why it is converted to CSR, or "" when only native steps read it)`` (not compared)
    held: tuple = ()

    @property
    def cost(self) -> float:
        return sum(step.cost for step in self.steps)

    @property
    def scatters(self) -> bool:
        """Whether a sparse input is scattered into a dense array: then its missing entries are stored zeros,
        and a NaN or Inf they meet gives NaN where the sparsifier on the kept operands skips the term."""
        return any(s.converted and not s.type.is_sparse and s.host is None and s.native is None
                   for s in self.sources)

    def kept(self) -> "Plan":
        """The same function planned with every sparse operand kept sparse (the dispatcher runs it when a
        scattering plan's result holds a NaN: docs/semantics.md)."""
        return make_plan(self.source, self.nnz, scatter=False, constants=self.constants, distribute=False)

    @property
    def distributed(self) -> tuple[int, ...]:
        """The kernel inputs (argument positions) multiplied into a fused sum (``distributed_factors``): a call
        whose values there hold a NaN or Inf runs the twin without such fusions (``kept``), which multiplies
        each factor by the sum as NumPy does."""
        found = set()
        n_args = len(self.source.inputs)
        for f in self.fusions:
            position = next((i for i, a in enumerate(f.outer.args) if a is f.inner), None)
            if position is None:
                continue
            for factor in distributed_factors(f.outer, position):
                k = factor.params[0]       # (a factor is an input: ``distributed_factors``)
                if k < n_args:
                    found.add(k)
                elif k < n_args + len(self.derived):        # an argument's transpose read in place
                    found.add(self.derived[k - n_args].source)
                else:                                       # a gather computed before the kernel, from
                    found.update(range(n_args))             # some argument's values: all are checked
        return tuple(sorted(found))

    def kept_as_given(self) -> "Plan | None":
        """The kept twin with its one contraction over the arguments as the call gives them (nothing re-stored,
        nothing scattered), or None when the source is not one contraction of arguments. Its result is the kept
        twin's whatever order the cost model picked for that twin (a product's sums run over the contracted
        index ascending either way), for a native kernel that reads the arguments as they are (runtime/library.py:
        SpMSpV on a long matrix, whose kept twin re-stores it as CSC)."""
        outputs = self.source.outputs
        if len(outputs) != 1 or outputs[0].op != "contract" or self.constants \
                or any(a.op != "input" for a in outputs[0].args):
            return None
        node = outputs[0]
        sources = tuple(Source(i, t, False) for i, t in enumerate(self.source.inputs))
        entries = float(np.prod(node.type.shape)) if node.type.shape else 1.0
        step = Step(node, ("keep",) * len(node.args), self.cost, entries, _nbytes(node.type, entries), True)
        return Plan(self.source, self.source, sources, (step,), (), self.nnz)

    @property
    def needs_conversion(self) -> bool:
        """Whether ``prepare`` changes the operands (a conversion, a host or native product, or a held BSR / DIA /
        COO argument, whose slot the kernel never reads: ``prepare`` puts an empty CSR there)."""
        return bool(self.held) or any(s.converted for s in self.sources)

    def prepare(self, values: list, threads: int = 1) -> list:
        """The kernel's operands from the call's (validated) operands: the frozen constants after them,
        transposes read in place, then the conversions, host products and native products the plan asks
        for (a native product on ``threads`` threads)."""
        if self.constants:
            values = list(values) + list(self.constants)
        as_csr: dict[int, object] = {}    # a held argument converted once a call, for what the kernel reads

        def csr(i: int):
            if i not in as_csr:
                as_csr[i] = values[i].to_csr()
            return as_csr[i]
        if self.held and (self.derived or self.gathered):   # transposes and gathers of a held argument: its CSR
            values = list(values)
            originals = {i: values[i] for i, _ in self.held}
            for i in originals:
                if any(d.source == i for d in self.derived) or any(
                        g.operand == i or g.index == i for g in self.gathered):
                    values[i] = csr(i)
        else:
            originals = None
        if self.derived:
            values = list(values) + [transposed(values[d.source], d.axes, d.type) for d in self.derived]
        values = list(values) if self.gathered else values
        for g in self.gathered:           # each reads the values before it (a gather of a gather)
            values.append(host_gather(g, values))
        if originals:
            for i, v in originals.items():
                values[i] = v
        if not self.needs_conversion:
            return values
        from splyce.tensors.tensor import asarray

        held = {i for i, _ in self.held}
        out = []
        for s in self.sources:
            if s.host is not None:
                out.append(host_product(s.host, s.type, values))
                continue
            if s.native is not None:      # its operands are earlier sources (arguments, host products)
                out.append(native_product(s.native, s.type, out, threads))
                continue
            value = values[s.index]
            if s.converted and s.index in held:
                value = csr(s.index)
                if value.format != s.type.format or not s.type.is_sparse:
                    value = asarray(value, format=s.type.format) if s.type.is_sparse else \
                        np.ascontiguousarray(value.to_numpy())
            elif s.converted:
                if s.type.is_sparse:
                    value = asarray(value, format=s.type.format)
                else:
                    value = np.ascontiguousarray(value.to_numpy())
            out.append(value)
        for i in held:                    # the kernel never reads a held argument's own slot (native steps do)
            out[i] = out[i].empty()
        return out

    def as_text(self) -> str:
        names: dict[Node, str] = {}
        for s_index, s in enumerate(self.sources):
            names[input_node(self.trace, s_index)] = f"%arg{s_index}"
        lines = ["plan {"]
        nnz = ", ".join(f"%arg{i}: {n}" for i, n in enumerate(self.nnz))
        lines.append(f"  // costed for the first call's stored entries ({nnz})")
        for i, why in self.held:
            t = self.source.inputs[i]
            if why == "unread":
                lines.append(f"  // %arg{i}: {t.stored} {t.shape[0]}x{t.shape[1]}, kept (nothing reads it)")
            elif why:
                lines.append(f"  // %arg{i}: {t.stored} {t.shape[0]}x{t.shape[1]}, converted to csr: {why}")
            else:
                lines.append(f"  // %arg{i}: {t.stored} {t.shape[0]}x{t.shape[1]}, kept (only the native kernels "
                             f"on its own {t.stored.split()[0]} buffers read it)")
        for k, d in enumerate(self.derived):
            lines.append(f"  %arg{len(self.source.inputs) + k} = transpose %arg{d.source} "
                         f"(axes {d.axes}: its buffers relabelled) : {d.type}")
        first = len(self.source.inputs) + len(self.derived)
        for k, g in enumerate(self.gathered):
            lines.append("  " + describe_gather(g, first, k))
        for s_index, s in enumerate(self.sources):
            if s.host is not None:
                subs, operands, scale = s.host
                factor = f" * {scale!r}" if scale is not None else ""
                lines.append(f"  %arg{s_index} = host einsum('{subs}', {', '.join(f'%arg{i}' for i in operands)})"
                             f"{factor} (NumPy, BLAS: dense inputs only, computed before the kernel) : {s.type}")
            elif s.native is not None:
                step = s.native
                detail = f"; {step.detail}" if step.detail else ""
                lines.append(f"  %arg{s_index} = native {step.op}({', '.join(f'%arg{i}' for i in step.operands)}) as "
                             f"'{step.formulation}' (the drop-in's kernel for these formats and dtypes, computed "
                             f"before the kernel{detail}) : {s.type}")
            elif s.converted:
                how = f"stored as {s.type.format}" if s.type.is_sparse else "scattered into a dense array"
                lines.append(f"  %arg{s_index} = convert %arg{s.index} ({how}) : {s.type}")
        if self.scatters:
            lines.append("  // a scattered operand's missing entries are stored zeros: a result holding a NaN is "
                         "recomputed with every operand kept sparse")
        for f in self.fusions:
            lines.append(f"  // fused {describe(f.inner)} into {describe(f.outer)}")
        for k, step in enumerate(self.steps):
            names[step.node] = f"%{k}"
            if step.result and is_unordered_csr(step.node.type):
                lines.append(f"  // %{k}: {UNORDERED_PRODUCT_RULE}")
            operands = ", ".join(names.get(a, "?") for a in step.node.args)
            storage = f" storage=({', '.join(step.storage)})" if any(step.storage) else ""
            kind = "result" if step.result else "intermediate"
            params = (params_text(step.node) if step.node.op in ("ewise", "reduce", "gather")
                      else ", ".join(str(p) for p in step.node.params))
            lines.append(f"  %{k} = {step.node.op}[{params}]({operands}) : {step.node.type}")
            lines.append(f"      // cost ~{step.cost:.3g} steps{storage}; {kind} ~{step.entries:.3g} entries, "
                         f"{format_bytes(step.nbytes)}")
        results = ", ".join(names.get(o, "?") for o in self.trace.outputs)
        for o, i in self.trace.in_place:
            lines.append(f"  // {names.get(self.trace.outputs[o], '?')} written over %arg{i}'s array, which "
                         "nothing reads after it: no buffer allocated for it")
        lines.append(f"  return {results}")
        lines.append(f"  // total cost ~{self.cost:.3g} steps; kernel memory "
                     f"{format_bytes(sum(s.nbytes for s in self.steps))} (budget {format_bytes(budget_bytes())})")
        lines.append("}")
        return "\n".join(lines)


def make_plan(trace: Trace, nnz: tuple[int, ...], scatter: bool = True, constants: tuple = (),
              native=None, distribute: bool = True) -> Plan:
    """``scatter=False``: the plan that keeps every sparse operand sparse (``Plan.kept``). ``constants``: the
    values of the trace's frozen constants (its last inputs; ``nnz`` counts them too). ``native``: asked
    ``native(node, input types, stored entries of the trace's inputs, glue=read by elementwise ops and full reductions only,
    contracted=read by those and by contractions with dense results)`` about every intermediate contraction over kernel inputs (arguments, host
    products), it names the native kernel library's call for it (a ``NativeStep``) or None; a named one is
    computed before the kernel, as the drop-in computes it, instead of by a loop nest of the kernel (one
    engine for a program of several ops: runtime/library.py, ``native_steps``)."""
    source = trace
    # a scattered operand's NaN is caught in the results (Kernel.run_exact) only where every op propagates it
    scatter = scatter and all(propagates_nan(n) for n in walk(trace.outputs))
    trace, derived = relabel_inputs(trace)
    all_nnz = tuple(nnz) + tuple(nnz[d.source] for d in derived)
    trace, gathered, gathered_nnz = gather_inputs(trace, all_nnz)
    planner = Planner(trace, all_nnz + gathered_nnz, scatter, distribute)
    outputs, fusions = planner.fuse()
    outputs, _ = fuse_elementwise(outputs, uses(outputs))
    outputs = _align_intermediate_orders(outputs)
    outputs = fuse_reductions(outputs, uses(outputs))
    outputs = unordered_product_results(outputs)
    outputs = restore_blocked_operands(planner, outputs)

    sources = [Source(i, t, False) for i, t in enumerate(trace.inputs)]
    slots: dict[tuple[int, TensorType], Node] = {}

    def converted_input(arg: Node, type_: TensorType) -> Node:
        key = (arg.params[0], type_)
        if key not in slots:
            sources.append(Source(arg.params[0], type_, True))
            slots[key] = Node("input", (), (len(sources) - 1,), type_)
        return slots[key]

    # arguments held in their own format (a scipy BSR / DIA / COO: ``TensorType.stored``): read by native steps
    # on their buffers, else converted to CSR once a call for whatever the kernel reads (the reasons, per argument)
    held_args = {i for i, t in enumerate(source.inputs) if t.stored}
    why_converted: dict[int, list[str]] = {i: [] for i in held_args}
    for d in derived:
        if d.source in held_args:
            why_converted[d.source].append(f"its transpose (axes {d.axes}) is read as the CSR's buffers")
    for g in gathered:
        for i in (g.operand, g.index):
            if i in held_args:
                why_converted[i].append("a gather reads it")

    def kernel_reads(new: Node) -> Node:
        """``new`` with each held argument it reads replaced by that argument converted to its CSR."""
        if not held_args or not any(a.op == "input" and a.params[0] in held_args and a.type.stored
                                    for a in new.args):
            return new
        args = list(new.args)
        for k, a in enumerate(args):
            if a.op == "input" and a.params[0] in held_args and a.type.stored:
                t = a.type
                args[k] = converted_input(a, TensorType(t.shape, t.dtype, t.format))
                why_converted[a.params[0]].append(
                    _no_native_kernel(new, t.stored) if native is not None else
                    "the native kernel library is off for this jit (library=False, vectorize=False or profile=True)")
        return with_args(new, tuple(args))

    mapping: dict[Node, Node] = {}
    steps: list[Step] = []
    result_nodes = set(outputs)
    read_by = readers(outputs)                # elementwise glue and full reductions only, or not
    for node in walk(outputs):
        if on_host(node) and node not in result_nodes:
            params = node.params[0]
            host = (",".join(params.inputs) + "->" + params.output, tuple(a.params[0] for a in node.args),
                    params.scale)
            if ("host", host) not in slots:
                sources.append(Source(-1, node.type, True, host))
                slots[("host", host)] = Node("input", (), (len(sources) - 1,), node.type)
            mapping[node] = slots[("host", host)]
            continue
        new = with_args(node, tuple(mapping.get(a, a) for a in node.args))
        if native is not None and node.op == "contract" and node not in result_nodes and not pinned(node) \
                and all(a.op == "input" for a in new.args):
            reads = read_by.get(node) or ()
            glue = bool(reads) and all(r.op == "ewise" or r.type.ndim == 0 for r in reads)
            # read (also) by contractions with dense results: a.T @ (a @ x), the logistic gradient's a.T @ r
            contracted = bool(reads) and not glue and all(
                r.op == "ewise" or r.type.ndim == 0 or (r.op == "contract" and not r.type.is_sparse) for r in reads)
            step = native(new, tuple(s.type for s in sources), planner.nnz, glue=glue, contracted=contracted)
            if step is not None:
                sources.append(Source(-1, node.type, True, native=step))
                mapping[node] = Node("input", (), (len(sources) - 1,), node.type)
                continue
        storage: tuple[str, ...] = ("",) * len(node.args)
        if node.op == "contract":
            choice = planner.choice(node)
            if choice is not None:
                params: ContractParams = node.params[0]
                args = list(new.args)
                for k, (how, subs) in enumerate(zip(choice.storage, params.inputs)):
                    arg = node.args[k]
                    if how == "convert":
                        args[k] = converted_input(arg, _stored_in_order(arg.type, subs, choice.order))
                    elif how == "scatter":
                        args[k] = converted_input(arg, TensorType(arg.type.shape, arg.type.dtype, None))
                new = with_order(with_args(new, tuple(args)), choice.order)
                storage = choice.storage
        elif node.op in ("ewise", "combine"):
            new, storage = _elementwise_storage(node, new, converted_input)
        elif node.op == "reduce" and len(node.params) > 3:   # an expression fused in: operands as they are
            storage = ("keep",) * len(node.args)
        elif node.op == "reduce":
            new, storage = _reduce_storage(node, new, converted_input)
        new = kernel_reads(new)
        mapping[node] = new
        if node.op != "input":
            entries = planner.entries(node)
            steps.append(Step(new, storage, planner.node_cost(node), entries, _nbytes(node.type, entries),
                              node in result_nodes))
    planned = Trace(tuple(s.type for s in sources), tuple(mapping[o] for o in outputs))
    first = len(trace.inputs) - len(gathered)   # dense gathers are fresh arrays too (planner/gathers.py)
    fresh = frozenset(i for i, s in enumerate(sources) if s.host is not None or s.native is not None or (
        first <= i < len(trace.inputs) and not s.type.is_sparse and gathered[i - first].spec[0][0] != "check"))
    planned = Trace(planned.inputs, planned.outputs, in_place_results(planned, fresh))
    natively = {k for s in sources if s.native is not None for k in s.native.operands}
    for s in sources:       # a held product converted in the call by the chooser's rule (``VIA_CSR``)
        if s.native is not None and s.native.formulation.endswith(VIA_CSR) and s.native.operands[0] in held_args:
            why_converted[s.native.operands[0]].append(
                held_via_csr_reason(s.native.formulation.split()[0], s.type))
    held = tuple((i, "; ".join(dict.fromkeys(why_converted[i])) or ("" if i in natively else "unread"))
                 for i in sorted(held_args))
    plan = Plan(source, planned, tuple(sources), tuple(steps), tuple(fusions), tuple(nnz), derived, gathered,
                constants=tuple(constants), held=held)
    check_memory(plan)
    return plan


def _no_native_kernel(node: Node, stored: str) -> str:
    """Why the kernel reads a held argument as CSR: the op reading it has no native kernel on its format."""
    kind = stored.split()[0]
    if node.op == "contract":
        p: ContractParams = node.params[0]
        return (f"einsum '{','.join(p.inputs)}->{p.output}' has no native kernel on {kind} (those: {kind} @ a dense "
                f"vector or matrix of its dtype)")
    return f"{node.op} has no native kernel on {kind}"


def _align_intermediate_orders(outputs):
    """Store each sparse elementwise intermediate in the order its elementwise consumer co-iterates.

    An input read in another order is re-stored on the host (``_elementwise_storage``), an intermediate
    cannot be; but its format is the planner's to choose (only results are seen by the caller), so the
    consumer's order, decided first (consumers before producers), is passed down to it. Elementwise ops
    that stay apart (a dtype change: ``abs(b) * -0.5`` of integers) would otherwise meet in three orders. A
    sparse contraction intermediate in another order (a transpose, ``maximum(b ** 2, (b * 3.0).T)``: the
    sparsifier cannot write it out of order) becomes dense, as contractions are by default."""
    nodes = walk(outputs)
    results = set(outputs)
    want: dict[Node, tuple[int, ...] | None] = {}   # None: dense
    for node in reversed(nodes):
        if node.op not in ("ewise", "combine"):
            continue
        sparse = [a for a in node.args if a.type.is_sparse]
        if not sparse:
            continue
        order = want.get(node, node.type.format.order) if node.type.is_sparse else sparse[0].type.format.order
        for arg in sparse:
            if arg in results or arg.type.format.order == order or arg.type.ndim != len(order):
                continue
            if arg.op in ("ewise", "combine"):
                want.setdefault(arg, order)
            elif arg.op == "contract":
                want.setdefault(arg, None)   # a transposed intermediate (``(b * 3.0).T``) in the other order: dense
    if not want:
        return outputs
    mapping: dict[Node, Node] = {}
    for node in nodes:
        args = tuple(mapping.get(a, a) for a in node.args)
        type_ = node.type
        if node in want:
            fmt, order = type_.format, want[node]
            type_ = TensorType(type_.shape, type_.dtype,
                               None if order is None else Format(fmt.levels, order, fmt.pos_width, fmt.crd_width))
        mapping[node] = node if args == node.args and node not in want else Node(node.op, args, node.params, type_)
    return tuple(mapping[o] for o in outputs)


def _elementwise_storage(node: Node, new: Node, converted_input):
    """An elementwise node co-iterates its sparse operands in one storage order (the result's when it is
    sparse, else the first sparse operand's): inputs stored otherwise are re-stored on the host."""
    sparse = [a for a in node.args if a.type.is_sparse]
    if not sparse:
        return new, ("dense",) * len(node.args)
    order = (node.type.format if node.type.is_sparse else sparse[0].type.format).order
    args, storage = list(new.args), []
    for k, arg in enumerate(node.args):
        if not arg.type.is_sparse:
            storage.append("dense")
        elif arg.type.format.order == order or arg.op != "input":
            storage.append("keep")
        else:
            fmt = arg.type.format
            args[k] = converted_input(arg, TensorType(arg.type.shape, arg.type.dtype,
                                                      Format(fmt.levels, order, fmt.pos_width, fmt.crd_width)))
            storage.append("convert")
    return with_args(new, tuple(args)), tuple(storage)


def _reduce_storage(node: Node, new: Node, converted_input):
    """A max / min reduction whose sparse argument is stored with a reduced dimension above a kept one and
    another below it re-stores the argument with the kept dimensions first (lowering/to_mlir.py,
    ``restarts_custom_reduction``: the sparsifier's custom reduction would lose values)."""
    from splyce.lowering.to_mlir import LoweringError, loop_order, restarts_custom_reduction

    (arg,) = node.args
    if not arg.type.is_sparse:
        return new, ("dense",)
    _, axes, _ = node.params
    subs = "abcd"[: arg.type.ndim]
    out = "".join(c for d, c in enumerate(subs) if d not in axes)
    try:
        if not restarts_custom_reduction(loop_order([(subs, arg.type)], out), out):
            return new, ("keep",)
    except LoweringError:
        pass
    if arg.op != "input":
        return new, ("keep",)   # an intermediate cannot be re-stored: the lowering raises a clear error
    fmt = arg.type.format
    order = tuple(d for d in range(arg.type.ndim) if d not in axes) + tuple(sorted(axes))
    restored = TensorType(arg.type.shape, arg.type.dtype, Format(fmt.levels, order, fmt.pos_width, fmt.crd_width))
    return with_args(new, (converted_input(arg, restored),)), ("convert",)


def _stored_in_order(t: TensorType, subs: str, order: str) -> TensorType:
    """``t`` re-stored with its levels in loop order (same level kinds and index widths)."""
    fmt = t.format
    dims = tuple(sorted(range(len(subs)), key=lambda d: order.index(subs[d])))
    return TensorType(t.shape, t.dtype, Format(fmt.levels, dims, fmt.pos_width, fmt.crd_width))


def _nbytes(t: TensorType, entries: float) -> int:
    item = np.dtype(t.dtype).itemsize
    if not t.is_sparse:
        return int(math.prod(t.shape)) * item
    levels = len(t.format.levels)
    return int(entries * (item + levels * t.format.crd_width // 8) + entries * t.format.pos_width // 8)


def check_memory(plan: Plan) -> None:
    """Raise MemoryError, before anything is compiled or allocated, when the kernels' results and
    intermediates would not fit the memory budget."""
    total = sum(step.nbytes for step in plan.steps)
    limit = budget_bytes()
    if total <= limit:
        return
    worst = max(plan.steps, key=lambda s: s.nbytes)
    what = "an intermediate" if not worst.result else "a result"
    hint = ("multiply it elementwise by a sparse operand or reduce it (e.g. ((l @ l) * l).sum()) in the same "
            "jitted function so that the planner fuses it away, or ask for a sparse result "
            "(out_format='sparse')") if not worst.node.type.is_sparse else "split the problem"
    raise MemoryError(
        f"splyce: the plan needs {format_bytes(total)}, over the memory budget of {format_bytes(limit)}: "
        f"{what} {describe(worst.node)} takes {format_bytes(worst.nbytes)}; {hint}. "
        f"The budget is set by splyce.set_memory_budget(nbytes) or SPLYCE_MEMORY_BUDGET.")


