"""Calling compiled kernels: MLIR memref descriptors over NumPy buffers, and results back to NumPy.

The entry point is ``splyce_entry``, which takes MLIR's C interface arguments (``_mlir_ciface_kernel``'s):
every argument is a pointer to a memref descriptor ``{allocated, aligned, offset, sizes[rank],
strides[rank]}``, and results are written through a pointer passed first; it returns nonzero when an
allocation inside the kernel failed (backend/alloc_guard.py), and we raise ``AllocationFailed``. Input
descriptors point at the caller's own buffers (no copies). Buffers that the kernel allocates (sparse outputs)
become NumPy arrays without copying; each allocation is freed exactly once, with the guard's ``free`` (the
kernel allocated it with the guard's ``malloc``), when no array uses it any more.
"""

from __future__ import annotations

import array
import ctypes
import functools

import numpy as np

from splyce.backend import alloc_guard
from splyce.backend.alloc_guard import free_address
from splyce.native.array_objects import address as _address
from splyce.native.ir_text import run_taken
from splyce.errors import AllocationFailed
from splyce.native import memory_pool

# Kernels' result buffers come from the cache of freed large buffers (a loop of calls reuses their backed
# pages; docs/memory.md), set before any kernel is loaded: the runtime imports this module first.
alloc_guard.set_heap(memory_pool.native_heap)


@functools.cache
def descriptor_class(rank: int) -> type[ctypes.Structure]:
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def descriptor_words(a: np.ndarray) -> list[int]:
    """The int64 words of ``a``'s memref descriptor (allocated, aligned, offset, sizes, strides)."""
    address = _address(a)
    if a.ndim == 1:
        return [address, address, 0, a.shape[0], a.strides[0] // a.itemsize]
    itemsize = a.itemsize
    return [address, address, 0, *a.shape, *(stride // itemsize for stride in a.strides)]


def tensor_words(tensor) -> list[int]:
    """The descriptor words of a SparseTensor operand's buffers (per level its pos and crd, then its values),
    computed once per tensor: its buffers never change (they are a tuple of arrays it holds)."""
    memo = tensor.memo()
    words = memo.get("descriptor_words")
    if words is None:
        index = {"pos": tensor.pos, "crd": tensor.crd}
        words = []
        for kind, level in tensor.format.index_buffers:
            words += descriptor_words(index[kind][level])
        words += descriptor_words(tensor.values)
        memo["descriptor_words"] = words
    return words


def pack_descriptors(arrays) -> tuple[array.array, list[int]]:
    """All descriptors of ``arrays`` in one int64 buffer (cheaper than a ctypes Structure per array: this
    runs on every call); returns the buffer and the address of each descriptor in it."""
    words: list[int] = []
    offsets = []
    for a in arrays:
        offsets.append(len(words))
        address = _address(a)
        ndim = a.ndim
        if ndim == 1:          # most buffers: pos, crd, values
            words += (address, address, 0, a.shape[0], a.strides[0] // a.itemsize)
        elif ndim == 0:
            words += (address, address, 0)
        else:
            words += (address, address, 0)
            words += a.shape
            itemsize = a.itemsize
            words += [stride // itemsize for stride in a.strides]
    packed = array.array("q", words)
    base = packed.buffer_info()[0]
    return packed, [base + 8 * offset for offset in offsets]


@functools.cache
def results_class(ranks: tuple[int, ...]) -> type[ctypes.Structure]:
    """The struct MLIR returns several memrefs in."""
    fields = [(f"r{i}", descriptor_class(rank)) for i, rank in enumerate(ranks)]
    return type("Results", (ctypes.Structure,), {"_fields_": fields})


class _Allocation:
    """Owns one kernel ``malloc`` block; frees it exactly once, when the last array viewing it is gone."""

    __slots__ = ("address", "__weakref__")

    def __init__(self, address: int):
        self.address = address

    def __del__(self):
        if self.address:
            free_address(self.address)
            self.address = 0


def take_buffer(desc: ctypes.Structure, dtype: np.dtype, owners: dict) -> np.ndarray:
    """A NumPy array over a kernel-allocated 1-D buffer, without copying. The array keeps the allocation
    alive; it is freed once, when no array views it any more (``owners`` maps allocations already wrapped,
    so two results sharing a block share its owner)."""
    size = max(int(desc.sizes[0]), 0)
    stride = int(desc.strides[0]) or 1
    if desc.allocated and desc.allocated not in owners:
        owners[desc.allocated] = _Allocation(desc.allocated)
    if not size:
        return np.empty(0, dtype=dtype)
    start = desc.aligned + desc.offset * dtype.itemsize
    nbytes = (size - 1) * stride * dtype.itemsize + dtype.itemsize
    raw = (ctypes.c_char * nbytes).from_address(start)
    raw._splyce_owner = owners.get(desc.allocated)   # the ctypes buffer (the array's base) holds the owner
    view = np.frombuffer(raw, dtype=dtype)
    return view if stride == 1 else view[::stride]


def take_or_copy(desc: ctypes.Structure, dtype: np.dtype, owners: dict, borrowed: set) -> np.ndarray:
    """``take_buffer``, except that a buffer the caller passed in (``borrowed``: their addresses) is copied,
    never owned: MLIR folds a kernel that returns its input unchanged (``x * 1`` on integers, ``abs`` of
    bools) into returning the argument's own buffer, which must not be freed as a kernel allocation."""
    if desc.allocated not in borrowed and desc.aligned not in borrowed:
        return take_buffer(desc, dtype, owners)
    return take_buffer(desc, dtype, {desc.allocated: None}).copy()


class KernelCall:
    """A compiled entry point with a fixed signature: input arrays in, dense outputs in place, sparse
    output buffers out.

    ``input_ranks``: the rank of each memref argument (dense outputs included, as the last arguments).
    ``result_ranks``: ranks of the memrefs the function returns (empty for a function returning nothing).
    """

    def __init__(self, address: int, input_ranks: tuple[int, ...], result_ranks: tuple[int, ...],
                 n_indices: int = 0):
        self.input_ranks = input_ranks
        self.result_ranks = result_ranks
        nargs = len(input_ranks) + (1 if result_ranks else 0)
        # ``n_indices`` trailing ``index`` arguments (the outer loop's lo, hi). A CFUNCTYPE call releases the
        # GIL, so several threads can run the kernel at once.
        argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int64] * n_indices
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int64, *argtypes)(address)
        offsets, at = [], 0
        for rank in input_ranks:   # where each argument's descriptor starts in the packed words
            offsets.append(at)
            at += 3 + 2 * rank
        self._offsets = tuple(offsets)
        self._size = at
        if len(result_ranks) == 1:
            self._result_cls = descriptor_class(result_ranks[0])
        elif result_ranks:
            self._result_cls = results_class(result_ranks)
        else:
            self._result_cls = None

    def __call__(self, arrays, indices: tuple[int, ...] = ()) -> list[ctypes.Structure]:
        """Run the kernel on ``arrays`` (kept alive by the caller); returns the result descriptors."""
        return self.call_chunks(arrays, [indices])[0]

    def call_words(self, words: list[int], indices: tuple = ()) -> list[ctypes.Structure]:
        """Run the kernel once on descriptors already packed as words (``descriptor_words`` of each argument,
        in order; the arrays kept alive by the caller), ``indices`` its trailing index arguments (a split
        kernel's ``(lo, hi)``); returns the result descriptors."""
        if len(words) != self._size:
            raise RuntimeError(f"internal error: {len(words)} descriptor words for a kernel taking {self._size}")
        packed = array.array("q", words)
        base = packed.buffer_info()[0]
        status, descs = self._call_one([base + 8 * offset for offset in self._offsets], indices)
        if status:
            raise AllocationFailed(status - 1)
        return descs

    def borrowed(self, words: list[int]) -> set[int]:
        """The data addresses of the arguments packed in ``words``."""
        return {words[offset + 1] for offset in self._offsets}

    def call_chunks(self, arrays, chunks: list[tuple[int, ...]], pool=None, workers: int = 0
                    ) -> list[list[ctypes.Structure]]:
        """Run the kernel once per entry of ``chunks`` (its trailing index arguments) on ``workers`` threads
        (this one and ``workers - 1`` of ``pool``; 0: one per chunk), each taking the next chunk not yet
        taken until none is left, so a thread whose chunks ran faster takes more of them; returns each call's
        result descriptors, in chunk order. Raises ``AllocationFailed`` once every call has returned if an
        allocation failed in any of them."""
        return self.call_each([arrays] * len(chunks), chunks, pool, workers)

    def call_each(self, arrays_per_chunk, chunks: list[tuple[int, ...]], pool=None, workers: int = 0
                  ) -> list[list[ctypes.Structure]]:
        """``call_chunks`` where chunk ``i`` gets its own ``arrays_per_chunk[i]`` (private outputs)."""
        packed = {}   # one packing per distinct argument list, alive until the calls return
        pointers = []
        for arrays in arrays_per_chunk:
            if id(arrays) not in packed:
                packed[id(arrays)] = pack_descriptors(arrays)
            pointers.append(packed[id(arrays)][1])
        if len(chunks) == 1 or pool is None:
            calls = [self._call_one(p, c) for p, c in zip(pointers, chunks)]
        else:     # each thread takes the next chunk left
            calls = run_taken(lambda i, *_: self._call_one(pointers[i], chunks[i]), chunks,
                              min(workers or len(chunks), len(chunks)), executor=pool)
        failed = [status - 1 for status, _ in calls if status]
        if failed:
            raise AllocationFailed(max(failed))
        return [descs for _, descs in calls]

    def _call_one(self, pointers, indices) -> tuple[int, list[ctypes.Structure]]:
        if self._result_cls is None:
            return self._fn(*pointers, *indices), []
        result = self._result_cls()
        status = self._fn(ctypes.addressof(result), *pointers, *indices)
        if len(self.result_ranks) == 1:
            return status, [result]
        return status, [getattr(result, f"r{i}") for i in range(len(self.result_ranks))]


def take_buffer_nd(desc: ctypes.Structure, dtype: np.dtype, shape: tuple[int, ...], owners: dict) -> np.ndarray:
    """A kernel-allocated dense result of ``shape`` (identity layout) as NumPy, without copying."""
    count = int(np.prod(shape))
    flat = descriptor_class(1)()
    flat.allocated, flat.aligned, flat.offset = desc.allocated, desc.aligned, desc.offset
    flat.sizes[0], flat.strides[0] = count, 1
    return take_buffer(flat, dtype, owners).reshape(shape)
