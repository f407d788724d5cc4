"""``@splyce.jit``: trace a NumPy-style function on sparse tensors, compile it through MLIR, cache it.

Dispatch on every call: classify and validate the arguments, look the kernel up in memory by a typed key
(function, static arguments, each input's shape / dtype / format, options, target), compile on a miss, then
call the native entry point on the operands' own buffers.
"""

from __future__ import annotations

import functools
import itertools
import threading
import uuid
import weakref

import numpy as np

from splyce.planner import nonfinite
from splyce.runtime import (aliasing, arguments, call_args, disk_cache, lane_tuning, result_tree, scipy_results,
                            staged)
from splyce.runtime import glue, switching
from splyce.runtime import deferred_checks
from splyce.runtime.building import Building
from splyce.runtime.cache_key import CacheInfo, CacheKey, count_of
from splyce.runtime.signature import fast_signature, filed_signature, prepared_signature, signature_of, unchanged
from splyce.runtime.kernel import Kernel, _values_of
from splyce.runtime.arguments import Static
from splyce.backend.compiler import Lowering
from splyce.options import DEFAULT_GALLOP_RATIO, DEFAULT_PHASES, Options
from splyce.thread_count import compile_threads
from splyce.tensors.formats import Format
from splyce.tracer import captures, matrix, namespaces, views
from splyce.tracer.ir import Node, Trace
from splyce.tracer.tracer import OUT_FORMATS, Tracer, copy_of

_LIVE: "weakref.WeakSet[Jitted]" = weakref.WeakSet()   # for splyce.clear_cache()
_CHECKING = (Kernel, staged.StagedKernel, glue.GlueKernel)    # kernels whose checking native steps deferred_checks follows
_BY_TOKEN: "weakref.WeakValueDictionary[str, Jitted]" = weakref.WeakValueDictionary()   # unpickling


class Jitted(Building):
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

    def _stage_jitted(self, trace: Trace) -> "Jitted":
        """A stage of a function with compiled loops (runtime/staged.py): ``trace`` jitted with these options."""
        return _StageJitted(trace, **dict(self._option_args, target=self._target_name))

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
