"""Call-time argument handling: classify each argument, convert it to what the kernel was compiled for,
validate it, and flatten it into the buffers the entry point takes.

Native code does not check bounds, so this is where malformed input must be stopped.
"""

from __future__ import annotations

import functools
import numbers
import sys

import numpy as np

from splyce.native.records import record
from splyce.runtime import deferred_checks
from splyce.tensors.formats import Format, Level
from splyce.tensors.held import Held, held_kind
from splyce.tensors.tensor import SparseTensor, asarray
from splyce.tracer.ir import TensorType
from splyce.tensors.validation import DTYPE_NAMES, validate

# dtype -> name by dict lookup: ``np.dtype.name`` is computed in Python on every access (slow per call)
_NAMES = {np.dtype(name): name for name in DTYPE_NAMES}


@record
class Static:
    """A non-array argument: part of the cache key, passed to the traced function as it is."""

    value: object


@record
class Checked:
    """A SparseTensor that splyce itself just built and validated (the drop-ins wrap the operands they
    convert), so the call does not validate it a second time."""

    tensor: SparseTensor


@functools.cache
def kernel_format(fmt: Format) -> Format:
    """The format a kernel reads for an operand stored in ``fmt``: the same, except that COO-style levels
    (singleton, non-unique, non-ordered) become compressed, which the sparsifier's coiteration needs."""
    if all(lv.kind != "singleton" and lv.unique and lv.ordered for lv in fmt.levels):
        return fmt
    levels = tuple(Level("dense") if lv.kind == "dense" else Level("compressed") for lv in fmt.levels)
    return Format(levels, fmt.order, fmt.pos_width, fmt.crd_width)


def _is_sparse_object(x) -> bool:
    sps = sys.modules.get("scipy.sparse")
    if sps is not None and sps.issparse(x):
        return True
    return type(x).__module__.split(".")[0] == "sparse" and hasattr(x, "shape")


def is_tensor(x) -> bool:
    """Whether ``prepare`` takes ``x`` as a tensor input (else a static argument, or a TypeError)."""
    return isinstance(x, (Checked, SparseTensor, np.ndarray, Held)) or _is_sparse_object(x)


def _check_dtype(dtype: np.dtype, name: str) -> None:
    if dtype not in _NAMES:
        raise TypeError(f"{name}: dtype {dtype} is not supported; use one of {', '.join(DTYPE_NAMES)}")


def prepare(x, name: str):
    """``(TensorType, value)`` for an array argument (value: a validated SparseTensor or a C-contiguous
    ndarray), or ``(Static, None)`` for anything else."""
    checked = isinstance(x, Checked)
    if checked:
        x = x.tensor
    if isinstance(x, SparseTensor):
        _check_dtype(x.dtype, name)
        if x.format.is_dense:
            return _dense(x.to_numpy(), name)
        if not (checked or x.validated):   # checked once, when made or on first use (docs/caches.md)
            validate(x, name)
        wanted = kernel_format(x.format)
        if wanted != x.format:
            x = asarray(x, format=wanted, name=name)
        return TensorType(x.shape, _NAMES[x.dtype], x.format), x
    if isinstance(x, Held):          # (a stage of a staged program hands it on)
        return held_type(x), x
    if _is_sparse_object(x) and held_kind(x) is not None:   # scipy BSR / DIA / COO: kept in its own format
        held = Held(x, name)
        return held_type(held), held
    if _is_sparse_object(x):
        t = prepare_sparse(x, name)
        deferred_checks.remember(x, t)     # wrapped as it is: a later call may leave its check to the kernels
        return TensorType(t.shape, _NAMES[t.dtype], t.format), t
    if isinstance(x, np.ndarray):
        return _dense(x, name)
    if isinstance(x, (numbers.Number, str, bytes, tuple, frozenset, type(None))) or _hashable(x):
        return Static(x), None
    raise TypeError(f"{name}: unsupported argument of type {type(x).__name__}")


def held_type(held: Held) -> TensorType:
    """The type of a held BSR / DIA / COO operand: the CSR the trace reads, and how it is held (tensors/held.py)."""
    return TensorType(held.shape, _NAMES[held.dtype], held.format, held.stored)


def prepare_sparse(x, name: str) -> SparseTensor:
    """``prepare``'s tensor for a scipy.sparse or pydata-sparse argument ``x``: converted (a canonical scipy
    CSR / CSC wrapped as it is), checked, in the format the kernels read."""
    t = asarray(x, name=name)
    _check_dtype(t.values.dtype, name)
    wanted = kernel_format(t.format)
    if wanted != t.format:
        t = asarray(t, format=wanted, name=name)
    return t


def prepare_deferred(x):
    """``prepare``'s ``(TensorType, value)`` for a scipy CSR operand checked canonical by an earlier call with
    the same arrays, its value an unvalidated SparseTensor over them (``deferred_checks``: the caller checks it
    with ``deferred_checks.confirm`` once the kernel is known); None for any other argument."""
    t = deferred_checks.unchecked(x) if _is_sparse_object(x) else None
    if t is None:
        return None
    return TensorType(t.shape, _NAMES[t.dtype], t.format), t


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _dense(x: np.ndarray, name: str):
    _check_dtype(x.dtype.newbyteorder("="), name)
    if x.ndim == 0:
        raise ValueError(f"{name}: 0-d arrays are not tensors; pass a Python scalar instead")
    if x.ndim > 4:
        raise ValueError(f"{name}: tensors of rank up to 4 are supported, got rank {x.ndim}")
    # Kernels are compiled for identity layouts and native byte order: anything else would be misread,
    # so make a contiguous, native copy where needed.
    x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    return TensorType(x.shape, _NAMES[x.dtype], None), x


def flatten(t: TensorType, value) -> list[np.ndarray]:
    """The entry point's memref arguments for one operand: per level its pos and crd, then the values."""
    if not t.is_sparse:
        return [value]
    index = {"pos": value.pos, "crd": value.crd}
    return [index[kind][l] for kind, l in value.format.index_buffers] + [value.values]


def result_buffer_dtypes(t: TensorType) -> list[np.dtype]:
    """The dtypes of the memrefs a sparse result comes back in, in order (mirrors ``flatten``)."""
    widths = {"pos": np.dtype(f"int{t.format.pos_width}"), "crd": np.dtype(f"int{t.format.crd_width}")}
    return [widths[kind] for kind, _ in t.format.index_buffers] + [np.dtype(t.dtype)]
