"""A compiled specialization of a jitted function and how it is called: its lowering and native entry point,
the operands' buffers passed as memref descriptors (packed once per tensor), dense results allocated here
(from 1 MiB through the cache of freed buffers) and zeroed but for those the kernel writes whole, the outer
loop's chunks run on threads, and the kernel's buffers handed back as NumPy arrays or scipy.sparse results.
The dispatcher (dispatcher.py) finds or builds one per signature; this module runs it.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from splyce.backend.compiler import Lowering, lower   # no MLIR until lower() runs
from splyce.lowering.to_mlir import overwritten_results
from splyce.native import memory_pool
from splyce.native.array_objects import address as _address
from splyce.native.ir_text import context_pool
from splyce.planner import nonfinite
from splyce.planner.plan import Plan
from splyce.runtime import arguments
from splyce.runtime import calls
from splyce.tensors.tensor import SparseTensor
from splyce.tensors.held import Held
from splyce.thread_count import call_threads
from splyce.tracer.ir import TensorType


class Kernel:
    """One compiled specialization: its lowering, native entry point and output layout."""

    # set by the dispatcher for a jit left at threads=None: each call runs on at most the compiled thread
    # count, fewer when other processes hold the cores (thread_count.call_threads)
    follow_default = False

    def _threads(self) -> int:
        threads = self.lowering.options.threads
        return min(threads, call_threads()) if self.follow_default and threads > 1 else threads

    direct = None      # no one-closure cached call (runtime/library.py's kernels have one)

    def __init__(self, lowering: Lowering, result_tree, plan: Plan):
        self.lowering = lowering
        self.result_tree = result_tree
        self.plan = plan
        self.trace = lowering.trace
        self._compiled = lowering.load()
        from splyce.backend.alloc_guard import GUARDED_ENTRY

        dense_out = list(dict.fromkeys(o for o in self.trace.outputs if not o.type.is_sparse))   # one buffer each
        input_ranks = tuple(_input_ranks(self.trace.inputs)) + tuple(o.type.ndim for o in dense_out)
        self._call = calls.KernelCall(
            self._compiled.function_address(GUARDED_ENTRY), input_ranks, lowering.result_ranks,
            n_indices=2 if lowering.outer_extent is not None else 0)
        self.scatters = plan.scatters    # decided once per compile, read on every call
        self.distributed = plan.distributed if isinstance(plan, Plan) else ()
        # transposed reads, re-stored operands, host products, constants frozen at trace time
        self._prepares = bool(plan.derived) or bool(plan.gathered) or plan.needs_conversion or bool(plan.constants)
        self._input_sparse = tuple(t.is_sparse for t in self.trace.inputs)
        # per dense result: its node, shape, dtype, whether the kernel writes it whole without reading it
        # (lowering's ``overwritten_results``: the caller's buffer is not zeroed) and the kernel input whose
        # array it is written over (planner/in_place.py; None: a buffer of its own)
        overwritten = overwritten_results(self.trace)
        over = {self.trace.outputs[o]: i for o, i in self.trace.in_place}
        self._dense_outputs = tuple((o, o.type.shape, o.type.dtype, o in overwritten or o in over, over.get(o))
                                    for o in dict.fromkeys(o for o in self.trace.outputs if not o.type.is_sparse))
        # per result, the input it keeps a scipy COO of (None: none), on the function as traced
        sources = tuple(coo_source(n) for n in plan.source.outputs)
        self.coo_sources = sources if len(sources) == len(self.trace.outputs) and any(
            i is not None for i in sources) else None
        self.sparse_results = any(o.type.is_sparse and o.type.ndim == 2 for o in self.trace.outputs)
        self._kept: Kernel | None = None
        self._kept_lock = threading.Lock()

    def kept(self) -> "Kernel":
        """The twin of a scattering plan with every sparse operand kept sparse, compiled on first use (kept
        in memory with this kernel). A scattered operand's missing entries are stored zeros: a NaN or Inf
        of its partners times one is NaN where the sparsifier skips the term (docs/semantics.md)."""
        with self._kept_lock:
            if self._kept is None:
                plan = self.plan.kept()
                self._kept = Kernel(_labelled(lower(plan.trace, self.lowering.options), plan),
                                    self.result_tree, plan)
            return self._kept

    def run_exact(self, values: list) -> list:
        """``run``, with the kept twin's results where a scattering plan's results hold a NaN. Every traced
        op propagates NaN, so a NaN that a scattered zero made shows in a result, or is skipped by a missing
        partner downstream (as the kept plan skips the term itself); without a NaN the results are the kept
        plan's (a scattered zero adds a zero product to sums that start at +0.0)."""
        if self.distributed and not factors_finite(self.distributed, values):
            return self.kept().run(values)    # a NaN / Inf factor: multiplied by the sum, not into its terms
        results = self.run(values)
        if self.scatters and any(nonfinite.maybe_nan(_values_of(r)) for r in results):
            return self.kept().run(values)
        return results

    @property
    def compiled(self):
        return self._compiled

    def run(self, values: list, accumulate_into: np.ndarray | None = None):
        if accumulate_into is not None and self._dense_outputs[0][3]:   # a kernel that writes its one dense
            result = self.run(values)[0]                                # result: the sum taken here
            with np.errstate(all="ignore"):                             # (the kernel's add: the same bits)
                return [np.add(accumulate_into, result, out=accumulate_into)]
        given = values
        if self._prepares:
            values = self.plan.prepare(values, self._threads())
        dense_outputs = {}
        for out, shape, dtype, overwrites, over in self._dense_outputs:
            if accumulate_into is not None:
                dense_outputs[out] = accumulate_into
            elif over is not None:           # a fresh array of the plan's, read only here (planner/in_place.py)
                dense_outputs[out] = _writable_copy(values[over], list(given) + list(self.plan.constants))
            else:
                dense_outputs[out] = _result_buffer(shape, dtype, zeroed=not overwrites)
        extent = self.lowering.outer_extent
        threads = 1
        if extent is not None:
            threads = self._threads()
            if threads > 1 and _stored_work(values) <= SERIAL_MAX_ENTRIES:
                threads = 1      # too little work to gain from a second thread: the same chunks' result, one
        try:
            if extent is None or threads == 1:   # one call: descriptors from each operand's (memoized) words
                words = []
                for sparse, v in zip(self._input_sparse, values):
                    words += calls.tensor_words(v) if sparse else calls.descriptor_words(v)
                for array in dense_outputs.values():
                    words += calls.descriptor_words(array)
                # a split kernel on one thread: all its rows as one chunk, (0, extent)
                descs = self._call.call_words(words, () if extent is None else (0, extent))
                return self._results(descs, dense_outputs, words)
            buffers = []
            for t, v in zip(self.trace.inputs, values):
                buffers.extend(arguments.flatten(t, v))
            buffers.extend(dense_outputs.values())
            chunks = _outer_chunks(extent, threads * CHUNKS_PER_THREAD if threads > 1 else 1, self.trace.inputs,
                                   values)
            if not self.lowering.outer_reductions or len(chunks) == 1:
                descs = self._call.call_chunks(buffers, chunks, _pool(threads), threads)[0]
                return self._results(descs, dense_outputs, buffers)
            return self._run_reduced_chunks(buffers, dense_outputs, chunks, threads)
        except calls.AllocationFailed as failure:
            raise MemoryError(self._allocation_message(failure.nbytes)) from None

    def _run_reduced_chunks(self, buffers: list, dense_outputs: dict, chunks, threads: int) -> list:
        """Chunks of a loop that reduces into rank-0 outputs (passes/parallel.py): every chunk but the first
        reduces into private outputs that start at the combining op's identity; the partial results are
        combined in chunk order."""
        nodes = list(dense_outputs)
        first_output = len(buffers) - len(nodes)
        combine_at = {}                       # dense output node -> combine
        for k, combine in self.lowering.outer_reductions:
            combine_at[nodes[len(buffers) - k - first_output]] = combine
        per_chunk, outputs = [buffers], [dense_outputs]
        for _ in chunks[1:]:
            private = dict(dense_outputs)
            for node, combine in combine_at.items():
                private[node] = np.full((), _identity(combine, node.type.dtype), dtype=node.type.dtype)
            per_chunk.append(buffers[:first_output] + list(private.values()))
            outputs.append(private)
        descs = self._call.call_each(per_chunk, chunks, _pool(threads), threads)
        results = [self._results(d, o, buffers) for d, o in zip(descs, outputs)]
        combined = list(results[0])
        for i, out in enumerate(self.trace.outputs):
            if out in combine_at:
                total = np.array(combined[i], dtype=out.type.dtype)
                with np.errstate(all="ignore"):       # inf - inf gives NaN silently, as in the kernel
                    for partial in results[1:]:
                        _COMBINE[combine_at[out]](total, partial[i], out=total)
                combined[i] = total[()]
        return combined

    def _allocation_message(self, nbytes: int) -> str:
        from splyce.planner.memory import budget_bytes, format_bytes
        from splyce.planner.fusion import describe

        asked = "more than 2**63 bytes" if nbytes >= 2**63 - 2 else f"{nbytes} bytes ({format_bytes(nbytes)})"
        ops = "; ".join(describe(o) for o in self.trace.outputs)
        return (f"splyce: the kernel computing {ops} could not allocate {asked}: the system is out of memory "
                f"(the plan's estimate fitted the budget of {format_bytes(budget_bytes())}). Everything the "
                "kernel had allocated was freed; the inputs are unchanged.")

    def _results(self, descs, dense_outputs, buffers):
        """``buffers``: the arrays passed in, or their packed descriptor words (``calls.descriptor_words``)."""
        results = []
        owners: dict = {}
        borrowed = None   # the caller's buffers: copied if returned, never freed (asked for by sparse results)
        k = 0
        for out in self.trace.outputs:
            t = out.type
            if not t.is_sparse:
                array = dense_outputs[out]
                desc = descs[k]
                k += 1
                if desc.aligned != _address(array):  # the kernel wrote elsewhere: take its buffer
                    flat = calls.take_buffer_nd(desc, array.dtype, array.shape, owners)
                    array = flat
                results.append(array[()] if array.ndim == 0 else array)
                continue
            if borrowed is None:
                borrowed = (self._call.borrowed(buffers) if buffers and type(buffers[0]) is int
                            else {_address(b) for b in buffers})
            dtypes = arguments.result_buffer_dtypes(t)
            bufs = [calls.take_or_copy(descs[k + i], dt, owners, borrowed) for i, dt in enumerate(dtypes)]
            k += len(dtypes)
            results.append(_sparse_result(t, bufs))
        return results


def _writable_copy(array: np.ndarray, given: list) -> np.ndarray:
    """``array`` (a product the plan computed before the kernel) to be written over, or a copy where it could
    share memory with an argument of the call (a product NumPy returned as a view of its operand): the
    caller's arrays are never modified."""
    if array.flags.writeable and not any(type(v) is np.ndarray and np.may_share_memory(array, v) for v in given):
        return array
    return array.copy()


def _result_buffer(shape, dtype, zeroed: bool = True) -> np.ndarray:
    """A dense result, zeroed (or not: one the kernel writes whole); from 1 MiB through the cache of freed
    buffers (native/memory_pool.py), so a loop of calls reuses backed pages instead of faulting fresh ones."""
    make = np.zeros if zeroed else np.empty
    if math.prod(shape) * np.dtype(dtype).itemsize < memory_pool.POOL_MIN:
        return make(shape, dtype=dtype)
    with memory_pool.active():
        return make(shape, dtype=dtype)


def _labelled(low: Lowering, plan: Plan, call=None) -> Lowering:
    """``low`` with the texts of the stages before lowering (``as_text("trace")``, ``as_text("plan")``; the
    latter says when the plan runs on the native kernel library instead, ``call``)."""
    low.texts["trace"] = plan.source.as_text()
    low.texts["plan"] = plan.as_text() + ("\n" + call.describe() if call is not None else "") + _lanes(low)
    return low


def _lanes(low: Lowering) -> str:
    """The plan text's last lines: the Splyce pass's lane per coiteration loop (which lanes, the per-pair rules
    that choose between them: galloping, the strict conflict lane, the all-pairs lane); ``splyce.profile``
    counts what each took on a call."""
    if not low.decisions:
        return ""
    lines = [f"  loop {d.index} of @{d.function}: {'lane' if d.vectorized else 'scalar'}: {d.reason}"
             for d in low.decisions]
    return "\nSplyce lanes (per coiteration loop; splyce.profile counts them per call):\n" + "\n".join(lines)


def factors_finite(distributed: tuple[int, ...], values: list) -> bool:
    """Whether the operands a plan multiplies into a fused sum (``Plan.distributed``) hold only finite values:
    else the call runs the unfused twin (``Kernel.kept``), as NumPy multiplies a factor by the sum."""
    return all(nonfinite.values_finite(_values_of(values[i])) for i in distributed if i < len(values))


def _values_of(x) -> np.ndarray:
    """The stored values of a kernel operand or result (a SparseTensor, a scipy.sparse result, an array)."""
    if isinstance(x, SparseTensor):
        return x.values
    if hasattr(x, "format") and hasattr(x, "data"):   # a scipy.sparse result
        return x.data
    return np.ravel(x)


def _stored_entries(value) -> int:
    """What the planner costs an operand by: stored entries of a sparse tensor, size of a dense array."""
    if isinstance(value, SparseTensor) or isinstance(value, Held):   # (a held BSR / DIA / COO: tensors/held.py)
        return value.nnz
    return int(np.size(value))


# A split kernel call whose operands hold at most this many stored entries (sparse entries plus dense
# elements, ``_stored_work``) runs as one chunk on the calling thread: handing chunks to a pool thread costs
# ~0.1-0.2 ms of wake-up and balance (docs/threads.md), more than such a call gains (measured: bench
# default_threads).
SERIAL_MAX_ENTRIES = 1 << 17


def _stored_work(values) -> int:
    total = 0
    for v in values:
        if isinstance(v, SparseTensor):
            total += v.nnz
        elif isinstance(v, np.ndarray):
            total += v.size
    return total


def _outer_chunks(extent: int, threads: int, inputs, values) -> list[tuple[int, int]]:
    """Split the outer loop's rows [0, extent) into at most ``threads`` contiguous chunks with about equal
    nonzeros, counted in the first sparse operand whose first level is dense over ``extent`` rows (equal row
    counts when there is none). Balance only; any split gives the same, bit-identical results."""
    threads = min(threads, extent)
    if threads <= 1:
        return [(0, extent)]
    cumulative = None
    for t, v in zip(inputs, values):
        fmt = t.format
        if t.is_sparse and fmt.levels[0].kind == "dense" and t.shape[fmt.order[0]] == extent and fmt.ndim > 1:
            levels, positions = fmt.levels[1:], v.pos[1:]
            if levels[0].kind == "compressed":     # CSR-like: level 1's positions as they are (searched only)
                cumulative, levels, positions = positions[0], levels[1:], positions[1:]
            else:
                cumulative = np.arange(extent + 1, dtype=np.int64)   # positions at level 0: the rows themselves
            for level, pos in zip(levels, positions):
                if level.kind == "compressed":
                    cumulative = np.asarray(pos, dtype=np.int64)[cumulative]
            break
    if cumulative is None or cumulative[-1] == 0:
        bounds = [extent * k // threads for k in range(threads + 1)]
    else:
        targets = np.array([int(cumulative[-1]) * k // threads for k in range(1, threads)], dtype=cumulative.dtype)
        inner = np.searchsorted(cumulative, targets, side="left").tolist()   # same dtype: no copy of the array
        bounds = [0, *inner, extent]
    bounds = sorted(min(max(b, 0), extent) for b in bounds)
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, extent)]


_COMBINE = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "fmax": np.fmax, "fmin": np.fmin}


def _identity(combine: str, dtype):
    """The value a private partial result starts from: neutral for ``combine``."""
    dtype = np.dtype(dtype)
    if combine == "add":
        return 0
    low = combine in ("maximum", "fmax")
    if dtype.kind == "f":
        return -np.inf if low else np.inf
    if dtype.kind == "b":   # bools: maximum is or, minimum is and
        return not low
    info = np.iinfo(dtype)
    return info.min if low else info.max


# Chunks of the outer loop per thread: rows of equal entries can differ in cost (power-law graphs: a row's
# intersections are as long as its neighbours' rows, and far rows miss the cache), so each thread takes the
# next chunk as it finishes one; a few chunks each even out what the split by entries cannot see.
CHUNKS_PER_THREAD = 4


@functools.cache
def _pool(threads: int):
    """Worker threads for kernels run on ``threads`` threads (the caller's thread is one of them)."""
    return context_pool(max(threads - 1, 1), "splyce")


def _input_ranks(inputs):
    """The rank of each memref the entry point takes for the inputs (a sparse operand: 1-D buffers)."""
    for t in inputs:
        if not t.is_sparse:
            yield t.ndim
        else:
            yield from [1] * len(arguments.result_buffer_dtypes(t))


def _sparse_result(t: TensorType, bufs: list[np.ndarray]):
    fmt = t.format
    pos, crd = [None] * fmt.ndim, [None] * fmt.ndim
    i = 0
    for l, level in enumerate(fmt.levels):
        if level.kind == "compressed":
            pos[l] = bufs[i]
            i += 1
        if level.kind != "dense":
            crd[l] = bufs[i]
            i += 1
    tensor = SparseTensor.from_buffers(t.shape, fmt, pos, crd, bufs[i], validate=False)
    return tensor.to_scipy() if len(t.shape) == 2 else tensor


def coo_source(node) -> int | None:
    """The input index of the one sparse argument ``node`` is made from by ops that keep a scipy COO a COO
    (transposes, scalar multiples and divisions, abs / neg / conj / power, a copy, row / column selections),
    else None. Kernels read
    a COO operand as DCSR; scipy returns ``coo.T``, ``coo * 2.0``, ``abs(coo)`` as COO and a product or sum
    of two operands as CSR."""
    while True:
        if node.op == "input":
            return node.params[0] if node.type.is_sparse else None
        if node.op == "gather" and node.type.is_sparse:     # scipy's coo_array[idx] is a COO (read as CSR)
            node = node.args[0]
            continue
        if len(node.args) != 1 or not node.type.is_sparse or not node.args[0].type.is_sparse:
            return None
        if node.op == "contract":
            params = node.params[0]
            (source,) = params.inputs
            if sorted(source) != sorted(params.output):      # a reduction, not a relabelling
                return None
        elif node.op != "map":
            return None
        node = node.args[0]
