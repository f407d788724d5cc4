"""``@splyce.jit``: trace a NumPy-style function on sparse tensors, compile it through MLIR, cache it.

Dispatch on every call: classify and validate the arguments, look the kernel up in memory by a typed key
(function, static arguments, each input's shape / dtype / format, options, target), compile on a miss, then
call the native entry point on the operands' own buffers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import threading
import uuid
import weakref

import numpy as np

from splyce.planner import cuts, nonfinite
from splyce.planner.plan import make_plan
from splyce.runtime import (aliasing, arguments, call_args, disk_cache, disk_kernels, lane_tuning, library,
                            result_tree, scipy_results, staged)
from splyce.runtime import glue, host_stages, switching
from splyce.runtime import deferred_checks
from splyce.planner.host_steps import has_host_steps
from splyce.runtime.cache_key import CacheInfo, CacheKey, count_of
from splyce.runtime.signature import fast_signature, filed_signature, prepared_signature, signature_of, unchanged
from splyce.runtime.kernel import (
    Kernel, _labelled, _stored_entries, _values_of,
)
from splyce.runtime.arguments import Static
from splyce.backend.compiler import Lowering, lower, prewarm   # no MLIR until lower() runs
from splyce.options import DEFAULT_GALLOP_RATIO, DEFAULT_PHASES, Options
from splyce.thread_count import compile_threads
from splyce.tensors.formats import Format
from splyce.tracer import captures, matrix, namespaces, views
from splyce.tracer.ir import Node, Trace
from splyce.tracer.tracer import OUT_FORMATS, Tracer, copy_of

_LIVE: "weakref.WeakSet[Jitted]" = weakref.WeakSet()   # for splyce.clear_cache()
_log = logging.getLogger("splyce.cache")
_CHECKING = (Kernel, staged.StagedKernel, glue.GlueKernel)    # kernels whose checking native steps deferred_checks follows
_BY_TOKEN: "weakref.WeakValueDictionary[str, Jitted]" = weakref.WeakValueDictionary()   # unpickling


class Jitted:
    """A jitted function, as ``splyce.jit`` returns it: call it like the original function.

    The first call with a new signature (shapes, dtypes, formats and index widths of the arguments, the
    values of static arguments) traces, plans, lowers and compiles; later calls find the kernel in memory
    (or on disk, in a new process). Called with keywords and pytrees as ``jax.jit`` functions are (see
    ``jit``). A jitted function called from another one is inlined into the caller's trace. It pickles as
    its function and options, never machine code.

    Attributes
    ----------
    fun : callable
        The original Python function.
    out_format : {None, "dense", "sparse"} or Format
        The results' storage, as given to ``jit``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> @splyce.jit
    ... def spmv(a, x):
    ...     return a @ x
    >>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
    >>> spmv(A, np.ones(2))
    array([1., 5.])
    >>> spmv.cache_info().misses
    1
    """

    def __init__(self, fun, *, vectorize=True, vector_width=None, phases=DEFAULT_PHASES, fast_math=False,
                 target="native", out_format=None, slp=None, profile=False, threads=None,
                 gallop=DEFAULT_GALLOP_RATIO, union=None, library=True, static_argnums=None,
                 static_argnames=None):
        if not callable(fun):
            raise TypeError(f"splyce.jit needs a callable, got {type(fun).__name__}")
        self.fun = fun
        self._convention = call_args.Convention(fun, static_argnums, static_argnames)
        self._target_name = target
        self._option_args = dict(vectorize=vectorize, vector_width=vector_width, phases=phases,
                                 fast_math=fast_math, slp=slp, profile=profile, gallop=gallop, union=union,
                                 library=library, threads=threads)
        # validate now, resolve the target lazily (no LLVM at import); threads=None: the process default
        # (thread_count: all cores unless set_threads / SPLYCE_NUM_THREADS say otherwise) at the first call
        Options(**dict(self._option_args, threads=compile_threads(threads)))
        if not (out_format is None or isinstance(out_format, Format) or out_format in OUT_FORMATS):
            raise ValueError(f"out_format must be 'dense', 'sparse', a splyce.Format or None, got {out_format!r}")
        self.out_format = out_format
        self._options = None
        self._cache: dict[CacheKey, Kernel] = {}
        # kernels by a cheap signature of arguments that need no preparation (see ``signature.fast_signature``)
        self._by_signature: dict[tuple, Kernel] = {}
        self._lowerings: dict[CacheKey, tuple] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[CacheKey, threading.Lock] = {}
        self.hits = self.misses = self.compiles = self.disk_hits = 0
        # the fast path's hits: ``next()`` on an ``itertools.count`` is one C call under the GIL, so concurrent
        # calls lose no count without taking ``_lock`` (~0.2 us of a ~4 us call); read by ``cache_info``
        self._fast_hits = itertools.count()
        self._last_disk_parts: dict | None = None
        self._sites = captures.sites(fun)   # where its named constants are read from, on every call
        functools.update_wrapper(self, fun)
        _LIVE.add(self)
        self._token = uuid.uuid4().hex
        _BY_TOKEN[self._token] = self

    def __reduce__(self):
        """Pickled as its function and options, never its machine code: the receiving process (a Dask
        worker) rebuilds one ``Jitted`` per original and loads its kernels from the machine's disk cache."""
        return _unpickle_jitted, (self._token, self.fun, self._target_name, self._option_args, self.out_format,
                                  self._statics())

    def _statics(self) -> dict:
        """The ``static_argnums`` / ``static_argnames`` given to ``jit`` (as resolved)."""
        c = self._convention
        return dict(static_argnums=c.static_argnums or None, static_argnames=c.static_argnames or None)

    @property
    def options(self) -> Options:
        """The resolved compile options (the target CPU resolved on first use)."""
        if self._options is None:
            from splyce.native.codegen import resolve_target

            target = resolve_target(self._target_name)
            if self._option_args["fast_math"] and self._option_args["vector_width"] is None:
                lane_tuning.resolve(target, Jitted)   # the host's lane measured once (memoized on disk)
            self._options = Options(target=target, **dict(self._option_args,
                                                           threads=compile_threads(self._option_args["threads"])))
        return self._options

    def __repr__(self) -> str:
        return f"<splyce.jit {getattr(self.fun, '__qualname__', self.fun)!r}>"

    def with_options(self, **changes) -> "Jitted":
        """A jitted twin of the same function with some options changed, and caches of its own.

        Parameters
        ----------
        **changes
            Any keyword argument of ``splyce.jit``.

        Returns
        -------
        Jitted
            The twin; this function is unchanged.

        Examples
        --------
        >>> import splyce
        >>> f = splyce.jit(lambda a, b: a @ b)
        >>> plain = f.with_options(vectorize=False)     # the unmodified MLIR sparsifier
        >>> plain.options.vectorize
        False
        """
        args = dict(self._option_args, target=self._target_name, out_format=self.out_format, **self._statics())
        args.update(changes)
        return Jitted(self.fun, **args)

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    # -- dispatch --------------------------------------------------------------------------------------
    def _captured(self) -> list:
        """The arrays bound to the names the function reads from its closure and globals now (each once)."""
        found, seen = [], set()
        for site in self._sites:
            value = site.read()
            if id(value) in seen or not arguments.is_tensor(value) or isinstance(value, arguments.Checked) \
                    or (isinstance(value, np.ndarray) and value.ndim == 0):
                continue
            seen.add(id(value))
            found.append((site.label, value))
        return found

    def _key(self, args, captured=None, call: call_args.Call | None = None, deferred: list | None = None):
        """``(key, specs, operands)`` of a call with positional ``args`` (or the flattened ``call``). With a
        list ``deferred``, a scipy CSR checked by an earlier call is wrapped unchecked and ``(position in the
        operands, object)`` appended to it (runtime/deferred_checks.py: the caller confirms it)."""
        if call is None:
            call = self._flattened(args, {})
        specs, values = [], []
        prepared = {}    # one object passed twice (f(A, A)) is converted and checked once per call
        for x, name in zip(call.leaves, call.paths):
            once = not isinstance(x, np.ndarray) and arguments.is_tensor(x)
            hit = prepared.get(id(x)) if once else None
            if hit is None and deferred is not None and once:
                lazy = arguments.prepare_deferred(x)
                if lazy is not None:
                    deferred.append((sum(1 for s in specs if not isinstance(s, Static)), x))
                    hit = (x, lazy)
            elif hit is not None and deferred is not None and any(o is x for _, o in deferred):
                deferred.append((sum(1 for s in specs if not isinstance(s, Static)), x))
            spec, value = hit[1] if hit is not None else arguments.prepare(x, name)
            if once:
                prepared[id(x)] = (x, (spec, value))   # the object kept: its id stays its own
            specs.append(spec)
            values.append(value)
        statics = tuple((i, s.value) for i, s in enumerate(specs) if isinstance(s, Static))
        inputs = tuple(s for s in specs if not isinstance(s, Static))
        kinds = [matrix.kind_of_object(x) for x, s in zip(call.leaves, specs) if not isinstance(s, Static)]
        constants = []
        for label, obj in (self._captured() if captured is None else captured):
            spec, value = arguments.prepare(obj, f"captured constant {label!r}")
            constants.append(spec)
            specs.append(captures.Captured(obj, label, spec))
            values.append(value)
            kinds.append(matrix.kind_of_object(obj))
        # the call's structure, and the static leaves' types (1, 1.0 and True are equal values)
        tree = (call.structure, tuple(type(s.value) for s in specs if isinstance(s, Static)))
        key = CacheKey(self.fun, statics, inputs, self.out_format, self.options, tuple(constants), tree,
                       kinds=tuple(kinds) if any(k != matrix.ARRAY for k in kinds) else ())
        return key, specs, [v for v in values if v is not None]

    def __call__(self, *args, **kwargs):
        values = []
        # the fast path (``_filed``, inlined: a call frame is ~5 % of a cached call on a small operand)
        kernel = None if kwargs or self._sites else self._by_signature.get(fast_signature(args, values))
        leaves = args
        if kernel is not None:
            next(self._fast_hits)
            direct = kernel.direct
            if direct is not None:        # the kernel's whole call, result rules included, as one closure
                return direct(values)
        else:
            values.clear()
            # a scipy CSR / CSC among positional arguments: converted and checked here, the rest of the key skipped
            deferred = []     # (checked canonical by an earlier call: left to the kernel's checking steps)
            kernel = None if kwargs or self._sites else self._by_signature.get(
                prepared_signature(args, values, deferred))
            if kernel is not None and deferred and not deferred_checks.confirm(
                    values, deferred, kernel if type(kernel) in _CHECKING or getattr(kernel, "reads_no_indices", False)
                    else None):
                kernel = None      # an operand changed since: the general call prepares it again
            if kernel is not None:
                next(self._fast_hits)
                direct = kernel.direct     # (its result is run_exact's: no result rules follow a CSR / CSC)
                if direct is not None and kernel.coo_sources is None:
                    return direct(values)
            else:
                call = self._convention.flatten(args, kwargs)
                if call.traced:               # called from another jitted function: inline
                    return self.fun(*args, **kwargs)
                kernel, values = self._kernel_for_call(call)
                leaves = call.leaves
        results = kernel.run_exact(values)
        if kernel.coo_sources is not None and self.out_format is None:
            results = scipy_results.as_coo_where_scipy_keeps_it(kernel.coo_sources, results, leaves)
        return result_tree.unflatten(kernel.result_tree, results, leaves)

    def _filed(self, args, values: list | None = None):
        """The kernel filed under ``args``' cheap signature (``signature.fast_signature``; a hit counted), or
        None: the whole of a cached call's work before the kernel runs, for a function that captures no
        constants (a Tracer, a scipy operand or a strided array gives no signature). ``values`` receives the
        operands. The hit is counted without the lock (``_fast_hits``): ~0.2 us of a ~4 us call."""
        if self._sites:
            return None
        signature = fast_signature(args, values)
        kernel = self._by_signature.get(signature) if signature is not None else None
        if kernel is not None:
            next(self._fast_hits)
        return kernel

    def kernel_for(self, *args, **kwargs) -> tuple[Kernel, list]:
        """The compiled kernel for these arguments (compiling on a miss) and the prepared operands."""
        kernel, values = self._kernel_for_call(self._flattened(args, kwargs))
        if isinstance(kernel, switching.SwitchKernel):   # compiling off the critical path: waited for
            kernel = kernel.fused()
        return kernel, values

    def _flattened(self, args, kwargs) -> call_args.Call:
        """The call, canonicalized and flattened; refused when called with tracers (no kernel of its own)."""
        call = self._convention.flatten(args, kwargs)
        if call.traced:
            raise TypeError(f"{self!r}: compiling or lowering needs concrete arguments, not tracers; call the "
                            "function itself inside a jitted function")
        return call

    def _kernel_for_call(self, call: call_args.Call) -> tuple[Kernel, list]:
        captured = self._captured() if self._sites else ()
        values = []    # the operands, from the signature's pass (as in ``_filed``)
        signature, args = call_args.signature(call, values) if not captured else (None, None)
        kernel = self._by_signature.get(signature) if signature is not None else None
        if kernel is not None:
            next(self._fast_hits)
            return kernel, values
        if signature is None and self._sites and not captured and call.operands is not None:
            prepared, deferred = [], []    # scipy operands of a function reading names from outside
            kernel = self._by_signature.get(prepared_signature(call.operands, prepared, deferred))
            if kernel is not None and deferred and not deferred_checks.confirm(
                    prepared, deferred, kernel if type(kernel) in _CHECKING or getattr(kernel, "reads_no_indices", False)
                    else None):
                kernel = None
            if kernel is not None:
                next(self._fast_hits)
                return kernel, prepared
        deferred = [] if signature is None else None     # a scipy operand gives no signature
        key, specs, values = self._key(args, captured, call, deferred)
        kernel = self._cache.get(key)
        if deferred and (kernel is None or not deferred_checks.confirm(
                values, deferred, kernel if type(kernel) in _CHECKING else None)):
            key, specs, values = self._key(args, captured, call)    # checked as any first call is
            kernel = self._cache.get(key)
        if kernel is None:
            kernel = self._compile(key, specs, values)
        else:
            with self._lock:
                self.hits += 1
        if signature is not None and len(values) == len(args) and all(unchanged(v, a) for v, a in zip(values, args)):
            self._by_signature[signature] = kernel     # preparing these arguments changed nothing
        elif signature is None and not captured and call.operands is not None:
            prepared = filed_signature(call.operands, values)    # scipy operands, prepared on every call
            if prepared is not None:
                self._by_signature[prepared] = kernel
        return kernel, values

    def filed_kernel(self, signature: tuple):
        """The kernel already filed under ``signature`` (``signature.fast_signature``'s key: ``(shape, value dtype,
        format)`` per checked tensor), or None; compiles nothing. A drop-in fast path that runs natively asks
        it for the plan a general call with these operands would run."""
        return self._by_signature.get(signature_of(signature))

    def accumulate(self, out: np.ndarray, *args, **kwargs) -> np.ndarray:
        """``out += f(*args)`` in place, for a function with one dense result.

        The kernel accumulates straight into ``out``, so no result buffer is allocated or zeroed (the
        benchmarks time kernels without their output allocation this way). An argument or a captured constant
        sharing memory with ``out`` is copied first, as NumPy does for ``out=`` (the kernel reads its inputs
        while it writes ``out``, and is compiled assuming they do not overlap).

        Parameters
        ----------
        out : ndarray
            C-contiguous and writeable, of the result's shape and dtype.
        *args
            The function's positional arguments.
        **kwargs
            Its keyword arguments.

        Returns
        -------
        ndarray
            ``out``.

        Raises
        ------
        ValueError
            The function does not have exactly one dense result, or ``out`` has another shape or dtype, or is
            not a writeable C-contiguous array.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sps, splyce
        >>> f = splyce.jit(lambda a, x: a @ x)
        >>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
        >>> out = np.ones(2)
        >>> f.accumulate(out, A, np.ones(2))
        array([2., 6.])
        """
        kernel, values = self.kernel_for(*args, **kwargs)
        if isinstance(out, np.ndarray):   # the prepared operands, captured constants included (they follow
            values = [aliasing.unaliased(v, out) for v in values]   # the arguments): the kernel reads them as it writes
        outputs = kernel.trace.outputs
        if len(outputs) != 1 or outputs[0].type.is_sparse:
            raise ValueError("accumulate needs a function with exactly one dense result")
        t = outputs[0].type
        if not isinstance(out, np.ndarray) or out.shape != t.shape or out.dtype != np.dtype(t.dtype):
            raise ValueError(f"out must be a {t.dtype} array of shape {t.shape}, got "
                             f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable C-contiguous array")
        if (kernel.scatters or getattr(kernel, "distributed", ())) and \
                not all(nonfinite.values_finite(_values_of(v)) for v in values):
            kernel = kernel.kept()   # ``out`` cannot be recomputed after the fact: decided from the inputs
        kernel.run(values, accumulate_into=out)
        return out

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

    def _stage_jitted(self, trace: Trace) -> "Jitted":
        """A stage of a function with compiled loops (runtime/staged.py): ``trace`` jitted with these options."""
        return _StageJitted(trace, **dict(self._option_args, target=self._target_name))

    def _log_disk_miss(self, parts: dict) -> None:
        """Debug log (logger ``splyce.cache``) of what changed since this function's previous disk miss."""
        if _log.isEnabledFor(logging.DEBUG):
            previous = self._last_disk_parts
            changed = disk_cache.explain(previous, parts) if previous else ["(first compile of this function)"]
            _log.debug("disk cache miss for %r: key differs from the previous compile in %s", self,
                       ", ".join(changed))
        self._last_disk_parts = parts

    def _trace(self, specs, structure=None, kinds=()):
        """The trace, the result tree and the values of the frozen constants (tracer/captures.py), whose
        inputs follow the arguments' and the named constants'. ``structure``: the call's (call_args.py) the
        leaves are put back in; None, positional leaves. ``kinds``: per input, ``"matrix"`` for an
        ``spmatrix`` / ``np.matrix`` (traced with their operators: tracer/matrix.py); empty: all arrays."""
        tracers, inputs, named = [], [], []
        kind = iter(kinds or ())
        for spec in specs:
            if isinstance(spec, Static):
                tracers.append(spec.value)
            elif isinstance(spec, captures.Captured):
                named.append(spec)
            else:
                tracers.append(matrix.tracer_of(Node("input", (), (len(inputs),), spec), next(kind, matrix.ARRAY)))
                inputs.append(spec)
        context = captures.TraceContext(_prepare_constant, len(inputs) + len(named))
        bound = {}
        for constant in named:
            node = context.add(constant.obj, len(inputs), constant.type)
            bound[id(constant.obj)] = matrix.tracer_of(node, next(kind, matrix.ARRAY))
            inputs.append(constant.type)
        positional, keywords = (tracers, {}) if structure is None else call_args.arguments_of(structure, tracers)
        with captures.tracing(context), views.recording():
            out = namespaces.rebound(self.fun, bound)(*positional, **keywords)
            aliased = result_tree.views_of(out, [t for t in tracers if isinstance(t, Tracer)])
        inputs.extend(t for _, t, _ in context.frozen)
        leaves, tree = result_tree.flatten_outputs(out, pydata_in=matrix.PYDATA in (kinds or ()))
        # a view of an argument (itself, its transpose: tracer/views.py) only where no copy of the same node
        # is returned too (``(a, a.copy())``: one result, a copy) and the jit's out_format leaves it as it is
        shared = {n for n, v in zip(leaves, aliased) if v} - {n for n, v in zip(leaves, aliased) if not v}
        leaves = [copy_of(n) if n.op == "input" else n for n in leaves]   # an argument returned as is
        shared = {copy_of(n) if n.op == "input" else n for n in shared} if self.out_format is None else set()
        if self.out_format is not None:
            leaves = [result_tree.with_format(n, self.out_format) for n in leaves]
        unique = list(dict.fromkeys(leaves))   # a value returned twice is computed and returned once
        if tree is not None:
            tree = tree.renumbered([unique.index(n) for n in leaves])
        flags = tuple(n in shared for n in unique) if shared else ()
        return Trace(tuple(inputs), tuple(unique), views=flags), tree, [v for _, _, v in context.frozen]

    def lower(self, *args, **kwargs) -> Lowering:
        """The IR of every stage for these arguments, without running anything.

        Works for any target, including CPUs this machine cannot run.

        Parameters
        ----------
        *args
            Arguments as the function would be called with (only their types, shapes and formats matter,
            and the nonzeros the planner's cost model counts).
        **kwargs
            Keyword arguments, likewise.

        Returns
        -------
        Lowering
            ``.as_text(stage)`` gives one stage's text: "trace", "plan", "linalg", "scf", "splyce", "llvm"
            or "asm".

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sps, splyce
        >>> f = splyce.jit(lambda a, b: a @ b)
        >>> A = sps.random_array((50, 50), density=0.1, format="csr", rng=0)
        >>> "linalg.generic" in f.lower(A, A).as_text("linalg")
        True
        """
        key, specs, values = self._key(args, call=self._flattened(args, kwargs))
        return self._lower(key, specs, values)[0]

    def cache_info(self) -> CacheInfo:
        """The in-memory cache's counters, as ``functools.lru_cache``'s ``cache_info``.

        Returns
        -------
        CacheInfo
            A named tuple ``(hits, misses, currsize, compiles, disk_hits)``: ``compiles`` counts kernels the
            compiler built, ``disk_hits`` misses served by the on-disk cache instead.
        """
        for kernel in list(self._cache.values()):
            if isinstance(kernel, switching.SwitchKernel):
                kernel.settle()          # a fused kernel compiling off the critical path: counted once built
        return CacheInfo(self.hits + count_of(self._fast_hits), self.misses, len(self._cache), self.compiles,
                         self.disk_hits)

    def cache_clear(self) -> None:
        """Forget this function's compiled kernels and reset its counters (the disk cache is kept)."""
        with self._lock:
            self._cache.clear()
            self._by_signature.clear()
            self._lowerings.clear()
            self._key_locks.clear()
            self.hits = self.misses = self.compiles = self.disk_hits = 0
            self._fast_hits = itertools.count()


def _stage(*args):
    return args


class _StageJitted(Jitted):
    """A given trace (a stage of a function with compiled loops, runtime/staged.py), planned, compiled and
    cached as a function's: its arguments are the stage's operands, in order."""

    def __init__(self, trace: Trace, **options):
        super().__init__(_stage, **options)
        self._given = trace

    def __reduce__(self):
        raise TypeError("a stage of a function with compiled loops does not pickle; pickle the jitted function")

    def _trace(self, specs, structure=None, kinds=()):
        types = tuple(s for s in specs if not isinstance(s, (Static, captures.Captured)))
        if types != self._given.inputs:
            raise TypeError(f"a stage of a compiled loop was called with operands of types "
                            f"{[str(t) for t in types]}, traced for {[str(t) for t in self._given.inputs]}")
        return self._given, None, []


def _unpickle_jitted(token, fun, target, option_args, out_format, statics=None) -> Jitted:
    """The process's ``Jitted`` for ``token`` (so every task of a worker shares its in-memory cache)."""
    jitted = _BY_TOKEN.get(token)
    if jitted is None:
        jitted = Jitted(fun, target=target, out_format=out_format, **option_args, **(statics or {}))
        _BY_TOKEN.pop(jitted._token, None)
        jitted._token = token
        _BY_TOKEN[token] = jitted
    return jitted


def clear_cache(disk: bool = False) -> None:
    """Empty the in-memory kernel cache of every live jitted function.

    Parameters
    ----------
    disk : bool, optional
        Also delete the on-disk cache's entries (``$SPLYCE_CACHE_DIR``, default the user cache directory).

    Examples
    --------
    >>> import splyce
    >>> splyce.clear_cache()
    """
    for jitted in list(_LIVE):
        jitted.cache_clear()
    if disk:
        disk_cache.clear()


def _prepare_constant(obj, name: str):
    """A constant array read while tracing, as a kernel operand: ``(TensorType, value)``."""
    spec, value = arguments.prepare(obj, name)
    if isinstance(spec, Static):
        raise TypeError(f"{name}: unsupported array of type {type(obj).__name__}")
    return spec, value
