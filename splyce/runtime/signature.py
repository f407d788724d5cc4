"""The cached jitted call's key: a cheap signature of the arguments that ``arguments.prepare`` would hand on
unchanged (validated SparseTensors in a format the kernels read, C-contiguous arrays), under which the
dispatcher files a kernel once a general call showed that nothing was prepared (docs/caches.md)."""

from __future__ import annotations

import functools
import itertools

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.runtime import arguments
from splyce.tensors.formats import Format
from splyce.tensors.tensor import SparseTensor

_SIGNATURE = "dispatcher.signature"      # a validated tensor's part of ``fast_signature``, in its memo
# a tensor's ``(shape, value dtype, format)`` stands as one int in a signature: hashing a Format is a Python
# call (0.17 us) and a signature is hashed on every cached call; ``next`` on a count is atomic under the GIL, so
# two threads interning different parts never get one number
_PARTS: dict[tuple, int] = {}
_NUMBERS = itertools.count()


def tensor_part(shape: tuple, dtype: np.dtype, fmt: Format) -> int:
    """A tensor's part of a signature: the number standing for ``(shape, dtype, fmt)``."""
    key = (shape, dtype, fmt)
    part = _PARTS.get(key)
    return _PARTS.setdefault(key, next(_NUMBERS)) if part is None else part


def signature_of(parts) -> tuple:
    """The signature ``fast_signature`` gives arguments of these parts: ``(shape, value dtype, format)`` for a
    tensor, ``(shape, dtype)`` for an array (for a drop-in that asks the dispatcher for a kernel filed under
    it)."""
    return tuple(tensor_part(*p) if len(p) == 3 else p for p in parts)


def fast_signature(args, values: list | None = None, _tensor=SparseTensor, _checked=arguments.Checked,
                   _ndarray=np.ndarray) -> tuple | None:
    """A cheap key for arguments that ``arguments.prepare`` passes through unchanged, or None: tensors the
    drop-ins just built and checked (``Checked``: keyed by shape, dtype and format, all that ``prepare`` looks
    at) and C-contiguous ndarrays (shape and dtype; byte order is part of the dtype). A drop-in call is tens of
    microseconds, and building the full ``CacheKey`` (a ``TensorType`` per argument, the options) costs ~30 us.
    A kernel is filed under a signature only after ``prepare`` returned the arguments themselves. ``values``,
    when given, receives the kernel's operands (a ``Checked``'s tensor, else the argument) in the same pass.
    (The classes are bound as defaults: local names, no module look-ups on the cached call.)"""
    parts = []
    operands = [] if values is None else values
    for a in args:
        kind = type(a)
        if kind is _tensor:
            memo = a.memo()
            part = memo.get(_SIGNATURE)     # made once per tensor: its shape, dtype and format never change
            if part is None:
                if not (a.validated and _passes_through(a.format)):
                    return None
                part = memo[_SIGNATURE] = tensor_part(a.shape, a.values.dtype, a.format)  # checked once already
            parts.append(part)                                                          # (docs/caches.md)
            operands.append(a)
        elif kind is _ndarray:
            if not a.flags.c_contiguous:
                return None
            parts.append((a.shape, a.dtype))
            operands.append(a)
        elif kind is _checked:
            t = a.tensor
            parts.append(tensor_part(t.shape, t.values.dtype, t.format))
            operands.append(t)
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
