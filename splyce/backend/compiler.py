"""The compile driver: trace -> linalg -> scf -> (Splyce) -> LLVM dialect -> LLVM IR -> native code.

``lower`` names every stage and pass in order, in one function (lowering/ lowers, passes/ transforms). Each
stage's IR is verified, kept as text for ``lower(...).as_text(stage)``, and written to ``$SPLYCE_DUMP_DIR``
when that environment variable is set.
"""

from __future__ import annotations

from splyce.errors import LoweringError

import os
import threading
import time
from pathlib import Path

from splyce.backend import alloc_guard, vector_math
from splyce.native import codegen
from splyce.options import Options
from splyce.tracer.ir import Trace

# The lowering steps import MLIR's Python bindings (~170 ms): inside ``lower``, so that a kernel loaded from
# the disk cache never pays for them.

STAGES = ("trace", "plan", "linalg", "scf", "splyce", "llvm", "asm")


class Lowering:
    """The IR of every stage for one trace and options, as ``Jitted.lower`` returns it.

    Native code is produced on demand. ``as_text`` reads one stage. (A plain class: a dataclass costs a warm
    process ~1 ms to create at import.)
    """

    def __init__(self, trace: Trace, options: Options, texts: dict | None = None, decisions=(),
                 result_ranks: tuple = (), loaded=None, outer_extent: int | None = None, outer_reductions=()):
        self.trace = trace
        self.options = options
        self.texts = {} if texts is None else texts
        self.timings: dict = {}
        self.decisions = list(decisions)
        self.result_ranks = tuple(result_ranks)
        self._llvm_module = None
        self._target_machine = None
        self.loaded = loaded                 # the native code, when it came from the disk cache (no IR until asked)
        self.disk_key: str | None = None     # its disk cache key, when the disk cache is on
        self.outer_extent = outer_extent     # set when the entry takes (lo, hi) outer-loop bounds (threads > 1)
        self.outer_reductions = tuple(outer_reductions)   # (k, combine) per rank-0 output the loop reduces into
        self.vector_math: list[str] = []     # the libmvec functions its code calls (backend/vector_math.py)

    @classmethod
    def from_loaded(cls, trace: Trace, options: "Options", loaded, result_ranks: tuple, decisions: list,
                    outer_extent: int | None = None, outer_reductions=()) -> "Lowering":
        """A lowering whose native code came from the disk cache, already loaded (``load_entry``); ``as_text``
        recompiles lazily."""
        return cls(trace, options, texts={"trace": trace.as_text()}, decisions=list(decisions),
                   result_ranks=tuple(result_ranks), loaded=loaded, outer_extent=outer_extent,
                   outer_reductions=tuple((int(k), str(c)) for k, c in outer_reductions))

    @property
    def from_disk(self) -> bool:
        return self.loaded is not None

    def as_text(self, stage: str = "scf") -> str:
        """One stage's text.

        Parameters
        ----------
        stage : str, optional
            One of "trace", "plan", "linalg", "scf", "splyce", "llvm", "asm". "trace": the traced operations; "plan": the planner's formulation (fusion, loop order, operand
            storage, modelled cost); "linalg": ``linalg.generic`` on sparse tensor encodings; "scf": the
            sparsifier's loops; "splyce": the loops after the Splyce pass, with its decision per loop;
            "llvm": LLVM IR; "asm": the target's assembly.

        Returns
        -------
        str
            The text of that stage.

        Raises
        ------
        ValueError
            An unknown stage.

        Examples
        --------
        >>> import scipy.sparse as sps, splyce
        >>> f = splyce.jit(lambda a, b: a * b)
        >>> A = sps.random_array((50, 50), density=0.1, format="csr", rng=0)
        >>> "scf.while" in f.lower(A, A).as_text("scf")
        True
        """
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
        if stage not in self.texts and self._llvm_module is None:  # loaded from disk: lower again, lazily
            full = lower(self.trace, self.options)
            self.texts = {**full.texts, **self.texts}
            self._llvm_module, self._target_machine = full._llvm_module, full._target_machine
        if stage == "asm" and "asm" not in self.texts:
            self.texts["asm"] = codegen.emit_assembly(self._llvm_module, self._target_machine)
            _dump(self, "asm")
        return self.texts[stage]

    def load(self):
        """The native code (``codegen.CompiledModule`` or ``shared_lib.SharedModule``): loaded from the disk
        cache, or built from the optimized module."""
        if self.loaded is not None:
            return self.loaded
        start = time.perf_counter()
        alloc_guard.install()   # the checked allocator the kernel's heap calls resolve to
        if self.vector_math:
            vector_math.ensure_loaded()   # libmvec, which its transcendental calls resolve to
        compiled = codegen.build(self._llvm_module, self._target_machine, self.options.target)
        self.timings["load"] = time.perf_counter() - start
        return compiled


_prewarm_lock = threading.Lock()
_prewarm_thread: threading.Thread | None = None


def prewarm() -> None:
    """Start building, on a background thread, what loading any kernel needs once per process: the checked
    allocator and the buffer cache's heap (``alloc_guard.install``: two LLVM modules compiled and linked, or
    loaded from the disk cache). The dispatcher calls this when a first call's plan needs an MLIR kernel,
    before lowering it: LLVM and the linker release the GIL, so on a machine of two cores or more these
    overlap the import of MLIR's bindings and the kernel's lowering, which hold it (a new program's first call
    from an empty cache: ``python -m splyce.bench.first_call``). Kernel loads call ``install`` themselves and
    wait on its lock; a failure here is left for them to raise. ``SPLYCE_PREWARM=0``: off (they build on the
    caller's thread when a kernel first loads, as before)."""
    global _prewarm_thread
    if _prewarm_thread is not None or alloc_guard.installed() or os.environ.get("SPLYCE_PREWARM") == "0":
        return
    with _prewarm_lock:
        if _prewarm_thread is None:
            _prewarm_thread = threading.Thread(target=_prewarm_body, name="splyce-prewarm", daemon=True)
            _prewarm_thread.start()


def _prewarm_body() -> None:
    try:
        alloc_guard.install()
    except Exception:       # the kernel's own load raises it, worded, on the caller's thread
        pass


def load_entry(path, entry, options: Options):
    """A disk cache entry's kernel, loaded (after the checked allocator it calls); raises OSError /
    LookupError / RuntimeError when it does not load."""
    alloc_guard.install()
    vector_math.ensure_loaded()   # in case the entry calls libmvec (a dlopen once per process)
    loaded = codegen.load_entry(path, entry, options.target)
    loaded.function_address(alloc_guard.GUARDED_ENTRY)
    return loaded


def _dump(lowering: Lowering, stage: str) -> None:
    folder = os.environ.get("SPLYCE_DUMP_DIR")
    if not folder:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    digest = f"{abs(hash((lowering.trace, lowering.options))):016x}"[:12]
    suffix = {"trace": "txt", "llvm": "ll", "asm": "s"}.get(stage, "mlir")
    (path / f"{digest}.{STAGES.index(stage)}-{stage}.{suffix}").write_text(lowering.texts[stage])


def lower(trace: Trace, options: Options) -> Lowering:
    """THE compile pipeline: every stage from trace to object code, in order. Up to optimized LLVM IR here;
    assembly and native code are produced lazily (``Lowering.as_text("asm")``, ``Lowering.load``). Each
    recorded stage (``STAGES``) is kept as text and dumped to ``$SPLYCE_DUMP_DIR``.

    trace    the traced program (tracer/)
    linalg   lowering.to_mlir.lower_trace: linalg.generic on sparse_tensor types (the only lowering)
    scf      passes.pipeline.FUSE, passes.noop_generics, passes.outer_arguments, passes.fusion_check (else
             unfused: passes.pipeline.UNFUSED), passes.loop_coordinates, passes.free_intermediates,
             passes.pipeline.BUFFERIZE (the sparsifier), passes.free_intermediates.lower_sparse_frees
    splyce   passes.dealloc_guard, passes.widen_i1, passes.parallel (threads > 1), passes.splyce_pass,
             passes.flat_rows, passes.dense_sums (fast_math) (vectorize)
    (to_llvm) passes.flatten_elementwise, passes.noalias (plan), passes.pipeline.TO_LLVM, passes.noalias
             (marks), LLVM IR translation
    llvm     backend.vector_math (transcendental calls to libmvec), backend.alloc_guard's entry wrapper, LLVM O3 (native.codegen), alloc_guard's heap routing
    asm      native.codegen, on demand; then object code (native.codegen.build / the disk cache)
    """
    from mlir import ir
    from mlir.dialects import llvm as llvm_dialect

    from splyce.lowering.to_mlir import lower_trace
    from splyce.passes import pipeline
    from splyce.passes.dealloc_guard import drop_foreign_deallocs
    from splyce.passes.flatten_elementwise import flatten_elementwise
    from splyce.passes.free_intermediates import free_intermediates, lower_sparse_frees
    from splyce.passes.fusion_check import broadcast_union, contradicting_sparse_orders, crowded_generic
    from splyce.passes.loop_coordinates import coordinates_as_operands
    from splyce.passes.noop_generics import drop_noop_generics
    from splyce.passes.outer_arguments import shield_outer_arguments
    from splyce.passes.widen_i1 import widen_i1_memrefs

    low = Lowering(trace, options)

    def record(stage: str, text: str, start: float):
        low.texts[stage] = text
        low.timings[stage] = time.perf_counter() - start
        _dump(low, stage)

    def sparsified(module, fuse: bool, sparse_frees: bool = True):
        """The sparsifier's loops, fused (None where fusion made a kernel it cannot compile) or unfused.
        lower_trace refuses what the sparsifier cannot compile one kernel at a time (loop orders, sparse
        results); fusion can still make one: a sparse operand read in two orders (``b.T + b``: the sparsifier
        aborts the process, so that is checked before it runs) or a dense-derived loop order kept for a sparse
        operand (``(b + a).max(axis=0)``: an MLIRError). Both compile unfused, each kernel on its own."""
        pipeline.run_passes(module, pipeline.FUSE if fuse else pipeline.UNFUSED)
        drop_noop_generics(module)   # the sparsifier segfaults on a generic that ignores its sparse operand
        shield_outer_arguments(module)   # and aborts on a late argument read inside a sparse generic's body
        if fuse and (contradicting_sparse_orders(module) or crowded_generic(module) or broadcast_union(module)):
            return None     # (a fused generic of many sparse operands: the sparsifier segfaulted on one)
        frees = 0
        try:
            coordinates_as_operands(module)   # its loop scheduler leaves linalg.index on the old loop
            frees = free_intermediates(module, sparse=sparse_frees)
            pipeline.run_passes(module, pipeline.BUFFERIZE)
            lower_sparse_frees(module)   # a sparse intermediate's free: a dealloc of each of its buffers
        except ir.MLIRError:
            if fuse:
                return None
            if sparse_frees and frees:
                # the codegen left a sparse free's buffers unresolved (a re-stored product read by another
                # op: "failed to legalize unresolved materialization"): compiled without the sparse frees,
                # those intermediates leak (docs/planner.md), rather than the program failing
                try:
                    return sparsified(lower_trace(trace), fuse=False, sparse_frees=False)
                except ir.MLIRError as again:
                    first = next((line for line in str(again).splitlines() if "error:" in line), str(again)[:300])
                    raise LoweringError(
                        "MLIR's sparse codegen cannot lower this program's sparse intermediates (a sparse value "
                        "computed by one kernel step and read by another, stored in another order than its loops "
                        "write it); compute that value in a jitted function of its own, or make it dense with "
                        f".toarray(). MLIR said: {first.strip()}") from again
            raise           # a failure of the unfused module surfaces with its diagnostics
        return module

    record("trace", trace.as_text(), time.perf_counter())
    with ir.Context(), ir.Location.unknown():
        start = time.perf_counter()
        module = lower_trace(trace)
        module.operation.verify()   # raises ir.MLIRError with the diagnostics (it never returns False)
        record("linalg", str(module), start)

        start = time.perf_counter()
        fused = sparsified(module, fuse=True)
        module = fused if fused is not None else sparsified(lower_trace(trace), fuse=False)
        record("scf", str(module), start)

        start = time.perf_counter()
        drop_foreign_deallocs(module)   # frees of intermediates that folding moved onto other buffers
        widen_i1_memrefs(module)   # MemRefToLLVM aborts on i1 memrefs (the sparsifier's workspace flags)
        notes = ""        # the thread split's and the flat row loops' lines above the "splyce" stage text
        if options.threads > 1:
            notes = _split_outer_loop(low, module) + "\n"
        if options.vectorize:
            from splyce.passes.dense_sums import mark_dense_sums
            from splyce.passes.flat_rows import flatten_row_loops
            from splyce.passes.splyce_pass import decisions_as_comments, run_splyce_pass

            low.decisions = run_splyce_pass(module, options)
            flat = flatten_row_loops(module, options.profile)   # rows of a few entries: one flat loop
            if options.fast_math:
                mark_dense_sums(module)   # dense dot products vectorized by LLVM (reassociated)
            module.operation.verify()
            if flat:
                notes += f"// splyce: {flat} row loop nest(s) with a flat twin for rows of a few entries\n"
            record("splyce", notes + decisions_as_comments(low.decisions) + "\n" + str(module), start)
        else:
            record("splyce", notes + "// splyce: vectorize=False, the plain sparsifier's loops\n" +
                   str(module), start)

        flatten_elementwise(module)   # dense elementwise loop nests as one flat loop (no gathers)
        module.operation.verify()
        entry = _entry_function(module)
        entry.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        low.result_ranks = tuple(ir.MemRefType(t).rank for t in ir.FunctionType(
            ir.TypeAttr(entry.attributes["function_type"]).value).results)
        start = time.perf_counter()
        plan = _noalias_plan(low, module)
        pipeline.run_passes(module, pipeline.TO_LLVM)
        if plan is not None:
            from splyce.passes import noalias

            noalias.mark_noalias(module, plan)
            noalias.offset_aligned_allocations(module)
        llvm_ir = llvm_dialect.translate_module_to_llvmir(module.operation)
        low.timings["to_llvm"] = time.perf_counter() - start

    start = time.perf_counter()
    llvm_ir, low.vector_math = vector_math.rewrite(llvm_ir, options.target)   # exp, log, ...: libmvec
    fast_lanes = any(d.vectorized for d in low.decisions)
    slp = options.slp if options.slp is not None else not fast_lanes
    low._llvm_module, low._target_machine = optimize_kernel(
        llvm_ir, options.target, codegen.CodegenOptions(opt_level=3, slp_vectorize=slp))
    record("llvm", str(low._llvm_module), start)
    return low


def optimize_kernel(llvm_ir: str, target, options: codegen.CodegenOptions):
    """A kernel's LLVM IR (defining ``_mlir_ciface_kernel``) -> optimized module with the guarded entry
    ``splyce_entry`` and checked heap calls (backend/alloc_guard.py), and its target machine."""
    module = codegen.parse(llvm_ir, target)
    alloc_guard.add_entry_wrapper(module)
    module, tm = codegen.optimize(module, target, options)
    alloc_guard.route_heap_calls(module)   # after O3, which still knew malloc / calloc / free for what they are
    return module, tm


def _noalias_plan(low: Lowering, module):
    """passes/noalias.py's plan for ``module``, or None: kernels with a Splyce fast lane keep their code (the
    lane already keeps its values in registers; noalias made K1 4 % slower), as does a split outer loop."""
    from splyce.lowering.to_mlir import ENTRY
    from splyce.passes import noalias

    if any(d.vectorized for d in low.decisions) or low.outer_extent is not None:
        return None
    n_outputs = len(dict.fromkeys(o for o in low.trace.outputs if not o.type.is_sparse))
    plan = noalias.analyze(module, ENTRY, n_outputs)
    return plan if plan.applies else None


def _split_outer_loop(low: Lowering, module) -> str:
    """threads > 1: give the outer loop (lo, hi) entry arguments when its iterations are independent."""
    from splyce.passes.parallel import OuterLoop, split_outer_loop

    if low.options.profile:
        return "// splyce: threads: one thread (profile counters are shared)"
    result = split_outer_loop(module, reassociate=low.options.fast_math)
    if isinstance(result, OuterLoop):
        low.outer_extent = result.extent
        low.outer_reductions = result.reductions
        partial = "".join(f", partial {combine} results combined" for _, combine in result.reductions[:1])
        return f"// splyce: threads: outer loop split into chunks of [0, {result.extent}){partial}"
    return f"// splyce: threads: one thread ({result.reason})"


def _entry_function(module):
    from splyce.lowering.to_mlir import ENTRY

    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == ENTRY:
            return op
    raise RuntimeError("internal error: the entry function disappeared")
