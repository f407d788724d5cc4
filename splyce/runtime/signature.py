"""The cached jitted call's key: a cheap signature of the arguments that ``arguments.prepare`` would hand on
unchanged (validated SparseTensors in a format the kernels read, C-contiguous arrays), under which the
dispatcher files a kernel once a general call showed that nothing was prepared (docs/caches.md)."""

from __future__ import annotations

import functools

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.runtime import arguments
from splyce.tensors.formats import Format
from splyce.tensors.tensor import SparseTensor

_SIGNATURE = "dispatcher.signature"      # a validated tensor's part of ``fast_signature``, in its memo


def fast_signature(args, values: list | None = None) -> tuple | None:
    """A cheap key for arguments that ``arguments.prepare`` passes through unchanged, or None: tensors the
    drop-ins just built and checked (``Checked``: keyed by shape, dtype and format, all that ``prepare`` looks
    at) and C-contiguous ndarrays (shape and dtype; byte order is part of the dtype). A drop-in call is tens of
    microseconds, and building the full ``CacheKey`` (a ``TensorType`` per argument, the options) costs ~30 us.
    A kernel is filed under a signature only after ``prepare`` returned the arguments themselves. ``values``,
    when given, receives the kernel's operands (a ``Checked``'s tensor, else the argument) in the same pass."""
    parts = []
    operands = [] if values is None else values
    for a in args:
        kind = type(a)
        operands.append(a.tensor if kind is arguments.Checked else a)
        if kind is arguments.Checked:
            t = a.tensor
            parts.append((t.shape, t.values.dtype, t.format))
        elif kind is SparseTensor:
            memo = a.memo()
            part = memo.get(_SIGNATURE)     # made once per tensor: its shape, dtype and format never change
            if part is None:
                if not (a.validated and _passes_through(a.format)):
                    return None
                part = memo[_SIGNATURE] = (a.shape, a.values.dtype, a.format)   # checked once already
            parts.append(part)                                                  # (docs/caches.md)
        elif kind is np.ndarray and a.flags.c_contiguous:
            parts.append((a.shape, a.dtype))
        else:
            return None
    return tuple(parts)


@functools.cache
def _passes_through(fmt: Format) -> bool:
    """Whether ``arguments.prepare`` hands a validated tensor in ``fmt`` on as it is (a sparse format the
    kernels read directly)."""
    return not fmt.is_dense and arguments.kernel_format(fmt) == fmt


def unchanged(value, arg) -> bool:
    """Whether ``arguments.prepare`` handed ``arg`` on as it is (the tensor itself, or a view of the same array
    with the same layout)."""
    if type(arg) is arguments.Checked:
        return value is arg.tensor
    if type(arg) is SparseTensor:
        return value is arg and arg.validated
    return value is arg or (type(value) is np.ndarray and value.shape == arg.shape and value.dtype == arg.dtype
                            and value.strides == arg.strides and _address(value) == _address(arg))
