"""Building the kernel of a jitted function for one cache key: trace and plan it (``_plan``), choose what runs
it (the native library's call, NumPy glue, stages of loops or host steps, a switch from native stages to the
fused kernel, or the MLIR kernel: ``_compile``), and lower and compile the MLIR kernel or load it from the disk
cache (``_lower``, ``_mlir_kernel``). ``Jitted`` (runtime/dispatcher.py) is a ``Building``: the per-call path
(keys, signatures, running a kernel) lives there, this is what a cache miss runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading

from splyce.backend.compiler import lower, prewarm   # no MLIR until lower() runs
from splyce.planner import cuts
from splyce.planner.host_steps import has_host_steps
from splyce.planner.plan import make_plan
from splyce.runtime import disk_cache, disk_kernels, glue, host_stages, library, staged, switching
from splyce.runtime.cache_key import CacheKey
from splyce.runtime.kernel import Kernel, _labelled, _stored_entries

_log = logging.getLogger("splyce.cache")


class Building:
    """The cache-miss half of ``Jitted``: each method reads the jitted function's caches, locks, counters and
    options (``self._cache``, ``self._lowerings``, ``self._lock``, ``self._option_args``...), set by
    ``Jitted.__init__``, and its ``_trace`` / ``_stage_jitted``."""

    def _compile(self, key: CacheKey, specs, values) -> Kernel:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            kernel = self._cache.get(key)
            if kernel is not None:
                with self._lock:
                    self.hits += 1
                return kernel
            planned = None if key in self._lowerings else self._plan(specs, values, key)
            _, tree, plan = planned or self._lowerings[key]
            call = library.choose(plan, key.options, self.out_format) if key.options.library and \
                not isinstance(plan, (staged.StagedPlan, host_stages.StagedPlan)) else None
            if call is None and not isinstance(plan, (staged.StagedPlan, host_stages.StagedPlan)):
                call = glue.choose(plan, key.options)    # dense elementwise glue only: NumPy, no MLIR
            if isinstance(plan, staged.StagedPlan):      # compiled loops: run as stages (runtime/staged.py)
                kernel = staged.StagedKernel(plan, tree)
            elif isinstance(plan, host_stages.StagedPlan):   # cut at its host steps: a kernel per stage
                kernel = host_stages.StagedKernel(plan, tree, lambda p: self._stage_kernel(key, p))
            elif call is not None:     # the drop-in's native kernel: no MLIR compile unless asked for
                kernel = (glue.GlueKernel if glue.is_glue(call) else library.LibraryKernel)(
                                               call, tree, plan, key.options.threads,
                                               lambda: self._mlir_kernel(key, specs, values, planned),
                                               follow_default=self._option_args["threads"] is None)
            else:
                # a program of native products and glue: its first calls from native stages while the fused
                # kernel compiles on another thread (runtime/switching.py)
                first = switching.native_first(plan, key.options, self._stage_jitted) if planned else None
                if first is not None:
                    kernel = switching.SwitchKernel(staged.StagedKernel(first, tree),
                                                    lambda: self._mlir_kernel(key, specs, values, planned),
                                                    (self._cache, self._by_signature))
                else:
                    prewarm()      # the allocator helpers build on another thread while MLIR lowers this plan
                    kernel = self._mlir_kernel(key, specs, values, planned)
            with self._lock:
                self.misses += 1
                self._cache[key] = kernel
            return kernel

    def _stage_kernel(self, key: CacheKey, plan) -> Kernel:
        """The kernel of one stage of a program cut at its host steps (runtime/host_stages.py): the native library's
        call where it serves the stage's plan, else its MLIR kernel (from the disk cache, else compiled)."""
        def mlir() -> Kernel:
            disk_key = disk_kernels.disk_key(plan.trace, key) if disk_cache.enabled() else None
            low = disk_kernels.load(disk_key, plan.trace, key.options) if disk_key else None
            fresh = low is None
            if fresh:
                low = lower(plan.trace, key.options)
            low.disk_key = disk_key
            kernel = Kernel(_labelled(low, plan), None, plan)
            if disk_key and fresh:
                disk_kernels.store(low, kernel)
            with self._lock:
                self.compiles += fresh
                self.disk_hits += not fresh
            return kernel

        call = library.choose(plan, key.options, key.out_format) if key.options.library else None
        call = call or glue.choose(plan, key.options)
        if call is not None:
            return (glue.GlueKernel if glue.is_glue(call) else library.LibraryKernel)(
                call, None, plan, key.options.threads, mlir)
        return mlir()

    def _mlir_kernel(self, key: CacheKey, specs, values, planned) -> Kernel:
        """The MLIR kernel for ``key``: from the disk cache, else compiled (and stored)."""
        with self._machine_lock(key, planned):
            lowering, tree, plan = self._lower(key, specs, values, disk=True, planned=planned)
            kernel = Kernel(lowering, tree, plan)
            # threads=None: each call on at most the compiled count, fewer when other processes hold the cores
            kernel.follow_default = self._option_args["threads"] is None
            if lowering.disk_key and not lowering.from_disk:
                disk_kernels.store(lowering, kernel)
        with self._lock:
            if lowering.from_disk:
                self.disk_hits += 1
            else:
                self.compiles += 1
        return kernel

    def _machine_lock(self, key: CacheKey, planned):
        """The disk cache's lock on this kernel (processes on one machine compile it once), or none."""
        if planned is None or not disk_cache.enabled():
            return contextlib.nullcontext()
        return disk_cache.compile_lock(disk_kernels.disk_key(planned[2].trace, key))

    def _plan(self, specs, values, key: CacheKey):
        """Trace the function and plan it, costed for these operands' stored entries; its intermediate products
        on the native kernel library where the drop-in would run them there (``library.native_steps``)."""
        source, tree, constants = self._trace(specs, key.call[0], key.kinds)
        if staged.has_loops(source):     # cut at its loops into stages, each planned on its own
            return source, tree, staged.StagedPlan(source, constants, self._stage_jitted)
        nnz = tuple(_stored_entries(v) for v in (*values, *constants))
        native = library.native_steps(key.options)
        if has_host_steps(source):   # NumPy's dense linear algebra between kernels: cut there
            return source, tree, host_stages.StagedPlan(source, nnz, tuple(constants), native)
        # native products anywhere (planner/cuts.py): cut where they pay, with or without the Splyce pass (the
        # plain sparsifier's stages are the same, so the pass changes no result)
        found = cuts.cut_points(source, nnz, library.native_steps(dataclasses.replace(key.options, vectorize=True)),
                                threads=key.options.threads)
        dots = cuts.host_dots(source)    # dense dot products as NumPy computes them (BLAS), stages of their own
        if found or dots:
            return source, tree, staged.StagedPlan(source, constants, self._stage_jitted,
                                                   cuts.levels(source, found, dots), dots)
        return source, tree, make_plan(source, nnz, constants=tuple(constants), native=native)

    def _lower(self, key: CacheKey, specs, values, disk: bool = False, planned=None):
        """The lowering for ``key``: from memory, else trace and plan; then (``disk``) the disk cache, else
        compile. The disk key is computed either way, so a kernel first asked for by ``lower()`` is still
        stored."""
        cached = self._lowerings.get(key)
        if cached is None:
            ran = self._cache.get(key)
            _, tree, plan = planned or ((None, ran.result_tree, ran.plan) if isinstance(ran, staged.StagedKernel)
                                        else self._plan(specs, values, key))
            if isinstance(plan, host_stages.StagedPlan):   # its stages' lowerings (compiled, as the kernel needs them)
                kernel = host_stages.StagedKernel(plan, tree, lambda p: self._stage_kernel(key, p))
                cached = (kernel.lowering, tree, plan)
                self._lowerings[key] = cached
                return cached
            if isinstance(plan, staged.StagedPlan):
                cached = (staged.StagedLowering(plan), tree, plan)
                self._lowerings[key] = cached
                return cached
            trace = plan.trace
            low = None
            disk_key = None
            if disk_cache.enabled():
                parts = disk_cache.key_parts(trace, key.static_args, key.out_format, key.options)
                disk_key = disk_cache.digest(parts)
                if disk:
                    low = disk_kernels.load(disk_key, trace, key.options)
                    if low is None:
                        self._log_disk_miss(parts)
            if low is None:
                low = lower(trace, key.options)
            low.disk_key = disk_key
            call = library.choose(plan, key.options, key.out_format) if key.options.library else None
            cached = (_labelled(low, plan, call), tree, plan)
            self._lowerings[key] = cached
        return cached

    def _log_disk_miss(self, parts: dict) -> None:
        """Debug log (logger ``splyce.cache``) of what changed since this function's previous disk miss."""
        if _log.isEnabledFor(logging.DEBUG):
            previous = self._last_disk_parts
            changed = disk_cache.explain(previous, parts) if previous else ["(first compile of this function)"]
            _log.debug("disk cache miss for %r: key differs from the previous compile in %s", self,
                       ", ".join(changed))
        self._last_disk_parts = parts
