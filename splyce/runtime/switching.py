"""A new program's first calls from native steps while its fused kernel compiles off the critical path.

A program of several sparse products with dense elementwise glue between them (ten PageRank steps unrolled by
a Python loop: ``r = 0.85 * (p @ r) + c`` ten times) plans as one fused MLIR kernel, whose first call
compiles ~3,300 lines of LLVM IR: 1.0-2.4 s on the 2-core Zen 4 VM, where ``jax.jit`` takes 0.8-1.3 s
(issue 58). The same program cut at every such product (planner/cuts.py, ``cut_points`` asked with every
product wanted) is stages of one native SpMV / SpMM (the drop-in's kernel: sums from +0.0 in stored order, the
fused kernel's bits) and NumPy glue (runtime/glue.py: the kernel's bits): nothing compiled, 0.14 s.
``native_first`` plans that cut; ``SwitchKernel`` runs it for the first call, then compiles the fused kernel
on a background thread and runs each call on whichever is ready: the fused kernel once built (the faster in
steady state: median 4.3 vs 7.0 ms on a 30k-row graph, the stages' own calls), the stages until then. Both
give the same bits, so which one answered is never visible in a result.

Taken only when every node of the program is an input, a product ``cut_points`` cuts, or dense float glue that
runtime/glue.py computes exactly (``glue.exact``): otherwise a stage would compile a kernel of its own, and
the fused kernel compiles on the first call as before. ``SPLYCE_BACKGROUND_COMPILE=0`` turns it off (every
first call compiles its fused kernel before returning). ``Jitted.cache_info()`` waits for a compile in
flight, so its counters do not depend on timing.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from splyce.planner import cuts
from splyce.runtime import glue, library, staged
from splyce.tracer.ir import Node, walk

ENV = "SPLYCE_BACKGROUND_COMPILE"


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def native_first(plan, options, stage_jitted) -> "staged.StagedPlan | None":
    """The program of ``plan`` cut at every sparse product the native library computes, when no stage of it
    compiles (see the module docstring), else None."""
    if not enabled() or not (options.library and options.vectorize) or options.profile \
            or not options.target.is_host_compatible:
        return None
    source = plan.source
    native = library.native_steps(dataclasses.replace(options, vectorize=True))
    if native is None:
        return None

    def wanted(node, inputs, nnz, glue=False, contracted=False):      # every product, as the glue's would be
        return native(node, inputs, nnz, glue=True, contracted=contracted)
    found = cuts.cut_points(source, plan.nnz, wanted, min_entries=0, threads=options.threads)
    if not found:
        return None
    cut = set(found)
    for node in walk(source.outputs):
        if node.op == "input" or node in cut:
            continue
        if node.op == "contract" and len(node.args) == 2 and all(a.op == "input" for a in node.args):
            # a product of arguments: its stage's plan computes it natively where the chooser takes it
            a, x = node.args
            sizes = tuple(plan.nnz[v.params[0]] if v.params[0] < len(plan.nnz) else 0 for v in (a, x))
            candidate = Node(node.op, (Node("input", (), (0,), a.type), Node("input", (), (1,), x.type)),
                             node.params, node.type)
            if a.type.is_sparse and not x.type.is_sparse and wanted(candidate, (a.type, x.type), sizes) is not None:
                continue
            return None
        if not _glue_node(node):
            return None
    if cuts.host_dots(source):
        return None
    return staged.StagedPlan(source, plan.constants, stage_jitted, cuts.levels(source, found, ()), ())


def _glue_node(node) -> bool:
    """Dense float glue that runtime/glue.py computes with the kernel's bits: an ``ewise`` node of exact heads,
    or a scaling written as a contraction (``0.85 * y``: ``contract[a->a, scale]``)."""
    t = node.type
    if t.is_sparse or t.dtype not in glue.FLOATS or not t.shape:
        return False
    if any(a.type.is_sparse or a.type.shape != t.shape or a.type.dtype != t.dtype for a in node.args):
        return False
    if node.op == "ewise":
        if len(node.params) > 1 and any(r != "abcd"[:t.ndim] for r in node.params[1]):
            return False
        return glue.exact(node.params[0], len(node.args))
    if node.op == "contract" and len(node.args) == 1:
        p = node.params[0]
        return p.order is None and tuple(p.inputs) == (p.output,) and isinstance(p.scale, (int, float)) \
            and not isinstance(p.scale, bool)
    return False


class SwitchKernel:
    """The dispatcher's kernel interface over ``provisional`` (the native stages) and the fused kernel
    ``build()`` compiles on a background thread, started after the first call returns."""

    reads_no_indices = False     # (runtime/deferred_checks.py: the stages' operands are checked as any call's)

    def __init__(self, provisional, build, caches=()):
        self.provisional = provisional
        self._build = build
        self._caches = caches       # the dispatcher's dicts holding this kernel: the fused one replaces it there
        self._fused = None
        self._failed = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.provisional_calls = 0
        self.result_tree = provisional.result_tree

    # -- which kernel answers ---------------------------------------------------------------------------------
    def _current(self):
        return self._fused if self._fused is not None else self.provisional

    @property
    def direct(self):
        return self._fused.direct if self._fused is not None else None

    @property
    def coo_sources(self):
        return self._current().coo_sources

    def run_exact(self, values: list) -> list:
        fused = self._fused
        if fused is not None:
            return fused.run_exact(values)
        out = self.provisional.run_exact(values)
        self.provisional_calls += 1
        self._start()
        return out

    # -- the fused kernel -------------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            # not a daemon: an interpreter that exits while LLVM runs would tear down under it
            self._thread = threading.Thread(target=self._compile, name="splyce-fused-compile")
            self._thread.start()

    def _compile(self) -> None:
        try:
            fused = self._build()
        except BaseException as e:     # noqa: BLE001 (the stages keep answering; ``fused()`` raises it)
            self._failed = e
            return
        self._fused = fused
        for cache in self._caches:     # later calls find the fused kernel itself (its fast paths, its checks)
            for k, v in list(cache.items()):
                if v is self:
                    cache[k] = fused

    def settle(self) -> None:
        """Wait for a compile in flight (``Jitted.cache_info``)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def fused(self):
        """The fused kernel: compiled now if it is not yet (on this thread, or waited for)."""
        self._start()
        self.settle()
        if self._fused is None:
            raise self._failed
        return self._fused

    def run(self, values: list, accumulate_into=None):
        return self.fused().run(values, accumulate_into=accumulate_into)

    def kept(self):
        return self.fused().kept()

    @property
    def lowering(self):
        return self.fused().lowering

    @property
    def compiled(self):
        return self.fused().compiled

    def __getattr__(self, name):       # plan, trace, scatters, distributed, follow_default, ...
        if name.startswith("__") or name in ("provisional", "_fused", "_build"):
            raise AttributeError(name)
        return getattr(self.fused(), name)
