"""One engine: a planned program that is one library op runs on the native kernel library, as the drop-in does.

A jitted function whose plan is a single step over its arguments (``a @ x``, ``a @ b`` into a sparse result,
``a * b``, ``a + b``, ``a - b``, a masked product, SDDMM, the triangle sum) is the same computation as a
drop-in call on the same operands. Which of those run natively is decided in the one module that chooses
kernels (planner/kernel_choice.py: ``library_op``, ``jit_choice``, ``native_step_wanted``, the drop-ins'
``choose_*_formulation``); this module orders the questions and asks the provider that ``splyce`` registers in
runtime/providers.py for the drop-ins (they sit above the runtime, so they register instead of being
imported) to build the chosen call, and the dispatcher then runs that native kernel instead of compiling the
MLIR kernel: the same kernel, the same decision, for both entry points.

A plan that is one form over one CSR / CSC argument (``a.sum()``, a CSR's ``a.sum(axis=1)``, ``a.mean()``,
``a.max()``, ``-a``, ``a / 3.0``, ``a ** 2`` / ``a * a``, ``a != 0``, ``a * d[:, None]``...) runs on the argument's
arrays instead (runtime/forms.py: NumPy's pairwise sums, scipy's bits; maps over the same positions), chosen
here too, first, with or without the Splyce pass.

What is matched is structural (formats, dtypes, shapes, options), never values, so the choice is made once per
signature and cached with the kernel. The MLIR kernel is still compiled when asked for (``lower()``,
``accumulate``), and ``as_text("plan")`` says which runs and why.
"""

from __future__ import annotations

import threading

import numpy as np

from splyce.native.records import record
from splyce.planner.kernel_choice import (VIA_CSR, LibraryOp, held_times_dense, held_via_csr_reason, is_csc,
                                          is_csr, is_sparse_vector, library_op, native_step_wanted)
from splyce.planner.plan import NativeStep
from splyce.runtime import forms, providers
from splyce.runtime.kernel import factors_finite
from splyce.thread_count import call_threads
from splyce.tracer.ir import Node, TensorType



@record
class LibraryCall:
    """A provider's answer: the native formulation that computes ``op`` and the function that runs it."""

    op: LibraryOp
    formulation: str             # the drop-in's name for it (splyce.dropin.Formulation's value)
    run: object                  # (args: list, threads) -> the result (None: not for these values)
    guarded: bool = False        # the run checks the values (e.g. equal patterns) and may answer None: then
    #                              the MLIR kernel runs the call
    detail: str = ""             # how, in the plan's text
    # ``(fallback) -> (values) -> result``: the whole one-thread cached call on the arguments as it hands them
    # over, the result already the traced type, ``fallback(values)`` where it does not apply
    direct: object = None
    plan: object = None          # the plan the call computes when not the one asked about (a scattering
    #                              plan's kept twin: see ``choose``)

    def describe(self) -> str:
        call = self.op.op if self.op.subscripts is None else f'einsum("{self.op.subscripts}")'
        if self.detail:
            call += f" ({self.detail})"
        if self.formulation == "form":
            return (f"// runs as a one-op form on the argument's arrays (runtime/forms.py): {call}; the MLIR "
                    f"kernel is compiled only when asked for")
        if self.op.types and self.op.types[0].stored:
            t = self.op.types[0]
            how = ("converted in the call to a CSR in its own summation order, then the CSR kernel"
                   if self.formulation.endswith(VIA_CSR) else "kept, read on its own buffers")
            return (f"// runs on the native kernel library: {call} as '{self.formulation}': %arg{self.op.operands[0]} "
                    f"({t.stored} {t.shape[0]}x{t.shape[1]}) {how}; the conversion above is "
                    f"the MLIR kernel's, compiled only when asked for")
        if self.guarded:
            return (f"// runs on the native kernel library when the values allow: {call} as '{self.formulation}' "
                    f"(checked per call); otherwise the MLIR kernel, compiled on the first such call")
        return (f"// runs on the native kernel library: {call} as formulation '{self.formulation}' (the drop-in's "
                f"choice for these formats and dtypes); the MLIR kernel is compiled only when asked for")


register = providers.register   # ``provider(op: LibraryOp, options: Options) -> LibraryCall | None``


def _run_held(values, threads):
    """A held BSR / DIA / COO argument times a dense operand on its own buffers (tensors/held.py)."""
    return values[0].times_dense(values[1])


def _run_held_via_csr(values, threads):
    """The same converted in the call to a CSR in the held format's summation order, then the CSR kernel on
    ``threads`` threads (``kernel_choice.HELD_VIA_CSR_COLUMNS``)."""
    return values[0].times_dense(values[1], threads, via_csr=True)


def _held_runner(formulation: str):
    return _run_held_via_csr if formulation.endswith(VIA_CSR) else _run_held


def _pinned(trace) -> bool:
    """Whether a contraction's loop order was pinned (``einsum(..., order=)``): the formulation as written, on
    the MLIR kernel (the paper's kernels are measured that way)."""
    seen, todo = set(), list(trace.outputs)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "contract" and node.params[0].order is not None:
            return True
        todo.extend(node.args)
    return False


def choose(plan, options, out_format) -> LibraryCall | None:
    """The native call that computes ``plan``, or None (then the MLIR kernel runs). First a one-op form of one
    CSR / CSC argument (runtime/forms.py: a sum, a max / min, a zero-preserving map), with or without the
    Splyce pass: its sums are NumPy's, whose order the plain sparsifier (``vectorize=False``) then shares, so
    the pass never changes a result. Else only for a plan of one
    step on its inputs (the arguments, their transposes read in place, or re-stored ones: the plan prepares
    them as for the MLIR kernel; never a sparse operand scattered dense), on the host CPU with the Splyce pass
    on (``vectorize=False`` is the plain sparsifier, the baseline by contract). Any ``out_format``: the traced
    result type says it (an explicit ``splyce.CSR`` product keeps the sorted kernels), and a provider whose
    result would not be that type declines."""
    if options.profile or not options.target.is_host_compatible:
        return None
    form = forms.recognize(plan) if not plan.held else None    # (forms read a CSR argument's own arrays)
    if form is not None:
        return _form_call(form)
    if not options.vectorize:
        return None
    if len(plan.steps) != 1 or len(plan.trace.outputs) != 1 or _pinned(plan.source):
        return None
    if not options.target.is_host_compatible:
        return None
    if plan.scatters:
        # A scattering plan's exact results (``Kernel.run_exact``) are its kept twin's on every input: the same
        # without a NaN (a scattered zero adds a zero product to a sum from +0.0), the twin's own where a NaN
        # shows. So the twin's native call serves it (SpMSpV, the sparse x scattered: the drop-in's scatter
        # and SpMV, which skips a NaN / Inf times a missing entry itself; Zen 1 AVX2 VM, fem2d-3k 139 ->
        # ~55 us); the call carries the twin, whose operands it reads. Any other scattered op: the MLIR kernel.
        kept = plan.kept()
        call = None if kept.scatters else choose(kept, options, out_format)
        if call is None and not kept.scatters:
            # the twin re-stores an operand (a long matrix as CSC, x's entries driving): the same result as the
            # arguments read as given (road-700, 2-core Zen 4 VM: the MLIR kernel 4.0 ms, the drop-in 3.6)
            kept = plan.kept_as_given()
            call = None if kept is None else choose(kept, options, out_format)
        if call is None or call.op.op != "matmul" or not is_sparse_vector(call.op.types[-1]):
            return None
        return call._replace(plan=kept, detail=(call.detail + "; " if call.detail else "")
                             + "the plan's scattered x kept sparse (its kept twin's result, as the MLIR kernel's "
                             "NaN fallback gives)")
    step = plan.steps[0]
    if plan.trace.outputs[0] is not step.node:
        return None
    if plan.held:
        return _held_call(plan, step.node)
    op = library_op(step.node, plan.trace.inputs)
    if op is None:
        return None
    ops = [op]
    if op.subscripts is None and op.op != "matmul":
        direct = _argument_reads(plan, op.operands, op.columns)
        if direct is not None and (any(direct[1]) or op.columns):     # offered first: nothing re-stored
            ops.insert(0, op._replace(reads=direct[0], transposed=direct[1]))
    for candidate in ops:
        call = _provided(candidate, options)
        if call is not None:
            return call
    return None


def _held_call(plan, node: Node) -> LibraryCall | None:
    """The one-product plan ``a @ z`` of an argument held in its own format (a scipy BSR / DIA / COO) as the
    native kernel on its buffers (``kernel_choice.held_times_dense``), reading the arguments as they are; the plan it
    carries says the argument is kept."""
    n_args = len(plan.source.inputs) - len(plan.constants)
    args = []
    for a in node.args:     # back from the kernel inputs to the arguments they convert (or are)
        if a.op != "input":
            return None
        s = plan.sources[a.params[0]]
        if s.host is not None or s.native is not None or not (0 <= s.index < n_args) \
                or (s.converted and not plan.source.inputs[s.index].stored):
            return None
        args.append(Node("input", (), (s.index,), plan.source.inputs[s.index]))
    if not any(a.type.stored for a in args):
        return None
    source = Node(node.op, tuple(args), node.params, node.type)
    found = held_times_dense(source, plan.source.inputs)
    if found is None:
        return None
    operands, formulation = found
    op = LibraryOp("matmul", None, operands, tuple(plan.source.inputs[i] for i in operands), node.type,
                   reads=operands, transposed=(False, False))
    via = formulation.endswith(VIA_CSR)
    why_kept = held_via_csr_reason(formulation.split()[0], node.type) if via else ""
    kept = plan._replace(held=tuple((i, why_kept) if i == operands[0] else (i, why) for i, why in plan.held))
    return LibraryCall(op, formulation, _held_runner(formulation), plan=kept,
                       detail="converted in the call to a CSR in its own summation order" if via else
                       "the held operand's own buffers, not converted")


def _form_call(form: forms.Form) -> LibraryCall:
    """A one-op form over one argument's stored values (runtime/forms.py): chosen here, with or without the
    Splyce pass (``vectorize``), so that the plain sparsifier and the fast lane give the same bits for it
    (NumPy's and scipy's sums); ``library=False`` keeps the MLIR kernel."""
    types = (form.type,) if form.vector is None else (form.type, form.vector_type)
    op = LibraryOp(form.kind, None, form.arguments, types, form.out, reads=form.arguments,
                   transposed=(False,) * len(form.arguments))
    return LibraryCall(op, "form", forms.runner(form), detail=form.describe())


def _provided(op: LibraryOp, options) -> LibraryCall | None:
    """The first registered provider's call for ``op``, or None."""
    for provider in providers.registered():
        call = provider(op, options)
        if call is not None:
            return call
    return None


def native_steps(options):
    """What ``make_plan`` asks (``native``) about each intermediate product of a program of several ops whose
    operands are kernel inputs: the native call the drop-in makes for the same op on the same formats and
    dtypes (sums from +0.0 in stored order, the MLIR kernel's bits), as a ``NativeStep`` the plan computes
    before its kernel, where that call is measured faster than the kernel's loop nest; None for any other step,
    which stays a loop nest of the kernel. A product taken out of the kernel costs a second call and a
    materialized result, so only where the native kernel gains more than that (2-core Zen 4 VM, 2026-12-06,
    thread CPU, median of 9):

    - SpMM (a CSR times a dense matrix): one-op native vs ``library=False`` 16 columns 1.15-1.17x on
      fem3d-100k / ba-100k / road-700, 4 columns 1.01-1.19x; the provider declines beyond 32 columns, where the
      MLIR kernel is faster. So GCN's ``np.maximum(a @ xw, 0)`` takes the drop-in's SpMM, as ``a @ xw`` alone
      does (``choose``).
    - SpMV (a CSR times a vector) where the drop-in runs its flat kernel (rows of a few entries,
      ``spmv.goes_flat`` for the first call's stored entries): road-700 (490k rows, 2.5 entries a row), the
      MLIR loop nest 3.6-3.8 ms, the MLIR kernel's own flat row loop (passes/flat_rows.py) 2.4 ms, the native
      flat kernel 1.8-2.0 ms.
    - SpMV on any rows whose result only elementwise glue and full reductions read (``glue``: ``a @ x + b @
      x``, ``0.85 * (a @ x) + c``, CG's ``ap``): the glue is then written over the step's array
      (planner/in_place.py), where in the kernel the product needs a zeroed intermediate that the glue reads
      into a result buffer of its own. ``a @ x + b @
      x`` on the 2-core Zen 3 VM (2026-12-07, thread CPU, best of 15, same process): fem3d-100k 3.65 -> 3.42
      ms, ba-100k 2.79 -> 2.64 ms; PageRank even (1.77 / 1.74, 1.30 / 1.33).

    - SpMV beyond the core's cache (``spmv.beyond_cache``) whose result contractions with dense results read
      too (``contracted``: ``a.T @ (a @ x)``, the logistic gradient's ``a.T @ r``): the loop nest and the native
      kernel run alike there (fem3d-100k, ba-100k: 3.4-3.8 / 2.6-3.3 ms for ``a.T @ (a @ x)`` either way,
      2-core Zen 4, 2026-12-07, thread CPU, median / min of 25), and a scipy operand that native steps check
      as they read is not scanned again on every call (runtime/deferred_checks.py). In cache the loop nest
      stays: a step there costs its own call.

    Only products the planner keeps apart from their readers are asked about: it fuses or not by the operands
    alone (planner/plan.py, ``_short_row_spmv``: an SpMV over rows of a few entries stays apart from the
    contraction reading it, ``v @ (a @ v)`` on road-700), so the plain sparsifier's plan sums in the same order.

    No chooser (None) where ``choose`` would not run a native call either: the plain sparsifier
    (``vectorize=False``), profiling, a target the host cannot run, ``library=False``."""
    if not (options.library and options.vectorize) or options.profile or not options.target.is_host_compatible:
        return None

    def step(node: Node, inputs: tuple[TensorType, ...], nnz: tuple[int, ...], glue: bool = False,
             contracted: bool = False) -> NativeStep | None:
        if not node.type.is_sparse:
            held = held_times_dense(node, inputs)
            if held is not None:    # an argument held as BSR / DIA / COO: its own kernel, never a conversion
                if held[1].endswith(VIA_CSR):
                    return NativeStep("matmul", held[0], held[1], _run_held_via_csr,
                                      "converted in the call to a CSR in its own summation order")
                return NativeStep("matmul", held[0], held[1], _run_held, "on the operand's own buffers, not converted")
        if any(a.op == "input" and inputs[a.params[0]].stored for a in node.args):
            return None             # (any other op on a held argument reads its CSR)
        op = None if node.type.is_sparse else library_op(node, inputs)
        if not native_step_wanted(op, nnz, glue, contracted):
            return None
        call = _provided(op, options)
        if call is None or call.guarded or call.plan is not None:
            return None
        return NativeStep(op.op, op.operands, call.formulation, call.run, call.detail)
    return step


def _argument_reads(plan, operands, columns: bool = False) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
    """The arguments that kernel inputs ``operands`` come from (as they are, transposed in place, or re-stored:
    a CSR or CSC argument), and whether each argument's buffers are in the other order than the op's frame
    (rows; ``columns``: the transposes' rows): a CSC of the operand, read with a cursor per column instead of
    re-stored (``a.T`` in ``a * a.T``). None when an operand is anything else (a constant, a host product) or
    would be read at other index widths than the plan's."""
    n_in = len(plan.source.inputs)
    n_args = n_in - len(plan.constants)
    reads, flips = [], []
    for k in operands:
        s = plan.sources[k]
        if s.host is not None or s.native is not None:
            return None
        index = s.index if s.converted else k
        derived = plan.derived[index - n_in] if n_in <= index < n_in + len(plan.derived) else None   # not a gather
        if index < n_args:
            arg, transposed = index, False
        elif derived is not None and derived.axes == (1, 0) and derived.source < n_args:
            arg, transposed = derived.source, True
        else:
            return None
        t = plan.source.inputs[arg]
        if not (is_csr(t) or is_csc(t)) or not s.type.is_sparse \
                or (t.format.pos_width, t.format.crd_width) != (s.type.format.pos_width, s.type.format.crd_width):
            return None
        rows = is_csr(t) != transposed        # the buffers are the operand's CSR
        reads.append(arg)
        flips.append(rows == columns)
    return tuple(reads), tuple(flips)


class LibraryKernel:
    """A kernel that is a native library call: the dispatcher's ``Kernel`` interface over ``LibraryCall``. The
    MLIR kernel of the same plan is built on first need (``accumulate`` into a caller's array, profiling)."""

    coo_sources = None

    def __init__(self, call: LibraryCall, result_tree, plan, threads: int, build_kernel, follow_default=False):
        self.call = call
        self.result_tree = result_tree
        # a view of an argument's arrays (runtime/forms.py): no index read, so an operand checked canonical by an
        # earlier call is not scanned again (runtime/deferred_checks.py)
        self.reads_no_indices = call.formulation == "form" and call.op.op == "view"
        # ``plan``'s MLIR kernel, built on need, scatters when the call computes its kept twin (``accumulate``
        # then takes that kernel's kept twin for non-finite values, as for an MLIR kernel)
        self.scatters = plan.scatters
        plan = call.plan if call.plan is not None else plan
        self.plan = plan
        self.trace = plan.trace
        # operands multiplied into a fused sum (``Plan.distributed``): where one holds a NaN or Inf, the MLIR
        # kernel's unfused twin runs (``Kernel.run_exact``), as NumPy multiplies the factor by the sum
        self.distributed = plan.distributed
        self.threads = threads
        # a jit left at threads=None: each call on at most ``threads``, fewer when other processes hold the cores
        # (thread_count.call_threads); a call too small to split stays on one thread inside the native call
        self._follow = follow_default and threads > 1
        out = plan.trace.outputs[0].type
        self.sparse_results = out.is_sparse and out.ndim == 2
        self._dtype = np.dtype(out.dtype)
        self._shape = out.shape
        self._build_kernel = build_kernel
        # transposed reads, re-stored operands, constants frozen at trace time (tracer/captures.py)
        self._prepares = bool(plan.derived) or bool(plan.gathered) or plan.needs_conversion or bool(plan.constants)
        self._kernel = None
        self._kernel_lock = threading.Lock()
        self.direct = self._direct() if result_tree is None else None

    def _direct(self):
        """The whole cached call as one closure, for a plan whose one result is the call's value and whose
        operands are arguments as they come or read in place (``Jitted.__call__`` runs it on a signature hit,
        where every argument is a checked SparseTensor or a C-contiguous array, never a scipy operand whose
        result class would follow it): the native call, and ``run_exact``'s result rules only when the
        result is not already what they give (a 0-d result: the scalar of the traced dtype, the masked
        sum's; a sparse one: the scipy CSR the provider built over the kernel's buffers, as it is). None
        otherwise (re-stored operands or frozen constants: ``plan.prepare`` on every call)."""
        reads = self.call.op.reads
        if reads is None and self._prepares:
            return None
        direct = self._direct_call()
        if not self.distributed:
            return direct
        distributed, exact = self.distributed, self.kernel

        def checked(values: list):      # a NaN / Inf factor of a fused sum: the unfused twin (run_exact)
            return direct(values) if factors_finite(distributed, values) else exact().run_exact(values)[0]
        return checked

    def _direct_call(self):
        reads = self.call.op.reads
        run, finish = self.call.run, self._finish
        if self._follow:
            most = self.threads

            def run(args, _threads, run=self.call.run):     # the thread count decided per call
                return run(args, min(most, call_threads()))
        threads = self.threads
        picks = reads if reads is not None else self.call.op.operands
        every = picks == tuple(range(len(self.plan.source.inputs) - len(self.plan.constants)))
        dtype, shape = self._dtype, self._shape

        if self.sparse_results:
            def direct_sparse(values: list):
                out = run(values if every else [values[i] for i in picks], threads)
                return finish(None, values)[0] if out is None else out     # None: a guarded call declined
            return direct_sparse
        if shape == ():
            scalar = dtype.type

            def direct_scalar(values: list):
                out = run(values if every else [values[i] for i in picks], threads)
                if out is None or hasattr(out, "to_numpy"):
                    return finish(out, values)[0]
                return scalar(out)
            return direct_scalar

        def direct(values: list):
            out = run(values if every else [values[i] for i in picks], threads)
            if type(out) is np.ndarray and (out.dtype is dtype or out.dtype == dtype) and out.shape == shape:
                return out
            return finish(out, values)[0]
        fast = self.call.direct if every and type(threads) is int else None
        return direct if fast is None else fast(direct, threads > 1)

    def call_threads(self) -> int:
        return min(self.threads, call_threads()) if self._follow else self.threads

    def kernel(self):
        """The MLIR kernel of the same plan, compiled on first use."""
        with self._kernel_lock:
            if self._kernel is None:
                self._kernel = self._build_kernel()
            return self._kernel

    def run_exact(self, values: list) -> list:
        if self.distributed and not factors_finite(self.distributed, values):
            return self.kernel().run_exact(values)
        reads = self.call.op.reads
        if reads is not None:                   # the arguments themselves (a transpose read in place)
            out = self.call.run([values[i] for i in reads], self.call_threads())
        else:
            inputs = self.plan.prepare(values, self.call_threads()) if self._prepares else values
            out = self.call.run([inputs[i] for i in self.call.op.operands], self.call_threads())
        return self._finish(out, values)

    def _finish(self, out, values: list) -> list:
        """``run_exact``'s results from the native call's ``out``: the MLIR kernel's when a guarded call
        declined the values; a dense result as the traced array."""
        if out is None:                         # a guarded call declined these values
            return self.kernel().run_exact(values)
        if not self.sparse_results:
            if hasattr(out, "to_numpy"):        # a SparseTensor vector where the traced result is dense
                out = out.to_numpy()
            if self._shape == ():
                out = self._dtype.type(out)
            elif type(out) is not np.ndarray or out.dtype != self._dtype or out.shape != self._shape:
                out = np.asarray(out, dtype=self._dtype).reshape(self._shape)
        return [out]

    def run(self, values: list, accumulate_into: np.ndarray | None = None):
        return self.kernel().run(values, accumulate_into=accumulate_into)

    def kept(self):
        return self.kernel().kept()

    @property
    def lowering(self):
        return self.kernel().lowering

    @property
    def compiled(self):
        return self.kernel().compiled
