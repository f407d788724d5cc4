"""The cached jitted call's key: a cheap signature of the arguments that ``arguments.prepare`` would hand on
unchanged (validated SparseTensors in a format the kernels read, C-contiguous arrays), under which the
dispatcher files a kernel once a general call showed that nothing was prepared (docs/caches.md)."""

from __future__ import annotations

import functools
import sys
import itertools

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.runtime import arguments, deferred_checks
from splyce.tensors.formats import Format
from splyce.tensors.held import Held, held_kind
from splyce.tensors.tensor import SparseTensor, wrap_canonical_compressed

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


# -- scipy CSR / CSC operands --------------------------------------------------------------------------------
# A scipy operand is converted and checked on every call (its buffers may have changed since the last one:
# nothing cheap proves them unchanged, and scipy's own format flags are not proof). What the signature saves is
# the rest of a general call: the full ``CacheKey`` (a ``TensorType`` per argument, the options, the kinds).
# ``prepared_signature`` files a kernel under the parts of the *prepared* operands, so the kernel found is the
# one a general call with these arguments would find: ``(the scipy class, tensor_part of the tensor prepare
# made)``; the class stands for the operand's kind (an spmatrix's results follow np.matrix rules).
_SCIPY_COMPRESSED: set = set()     # exact scipy CSR / CSC classes, filled when scipy.sparse is first seen


def _is_scipy_compressed(kind) -> bool:
    if kind in _SCIPY_COMPRESSED:
        return True
    module = sys.modules.get("scipy.sparse")
    if module is None or not kind.__module__.startswith("scipy.sparse"):
        return False
    _SCIPY_COMPRESSED.update((module.csr_array, module.csc_array, module.csr_matrix, module.csc_matrix))
    return kind in _SCIPY_COMPRESSED


_SCIPY_HELD: set = set()       # exact scipy BSR / DIA / COO classes (held in their format: tensors/held.py)


def _is_scipy_held(kind) -> bool:
    if kind in _SCIPY_HELD:
        return True
    module = sys.modules.get("scipy.sparse")
    if module is None or not kind.__module__.startswith("scipy.sparse"):
        return False
    _SCIPY_HELD.update((module.bsr_array, module.bsr_matrix, module.dia_array, module.dia_matrix,
                        module.coo_array, module.coo_matrix))
    return kind in _SCIPY_HELD


def _held_part(kind, held: Held) -> tuple:
    return (kind, tensor_part(held.shape, held.dtype, held.format), held.stored)


def prepared_signature(args, values: list, deferred: list | None = None) -> tuple | None:
    """The key a kernel is filed under (``filed_signature``) for positional ``args`` with at least one scipy
    CSR / CSC among them, each of which is converted and checked here (``arguments.prepare``, as a general
    call does); the others as ``fast_signature`` takes them. None when some argument is neither, or preparing
    a scipy one raised or changed its format (the general call then decides and words the error). ``values``
    receives the kernel's operands. With a list ``deferred``, a scipy CSR checked canonical by an earlier call with
    the same arrays is wrapped unchecked (``deferred_checks.unchecked``) and ``(position, object)`` appended: the
    caller confirms it once the kernel is known (``deferred_checks.confirm``)."""
    for a in args:      # first the types: nothing converted for a call this key cannot serve
        kind = type(a)
        if kind is not SparseTensor and kind is not np.ndarray and kind is not arguments.Checked \
                and not _is_scipy_compressed(kind) and not _is_scipy_held(kind):
            return None
    parts, prepared = ["prepared"], None
    for i, a in enumerate(args):
        kind = type(a)
        if kind in _SCIPY_HELD:      # a scipy BSR / DIA / COO held in its format, checked as a general call does
            if held_kind(a) is None:
                return None
            try:
                held = Held(a, f"argument {i}")
            except (TypeError, ValueError):
                return None          # (the general call words the error)
            parts.append(_held_part(kind, held))
            values.append(held)
            continue
        if _is_scipy_compressed(kind):
            t = prepared.get(id(a)) if prepared is not None else None    # f(A, A): A checked once a call
            if deferred is not None and (t is None or any(o is a for _, o in deferred)):
                t = t if t is not None else deferred_checks.unchecked(a)
                if t is not None:
                    deferred.append((i, a))      # (one tensor at each of its positions: confirmed once)
                    if prepared is None:
                        prepared = {}
                    prepared[id(a)] = t
            if t is None:
                t = wrap_canonical_compressed(a)     # (the check; None: prepare's full route, which may copy)
                if t is None or not _passes_through(t.format):
                    try:
                        t = arguments.prepare_sparse(a, f"argument {i}")
                    except (TypeError, ValueError):
                        return None
                if prepared is None:
                    prepared = {}
                prepared[id(a)] = t
            if type(t) is not SparseTensor or not _passes_through(t.format):
                return None
            parts.append((kind, tensor_part(t.shape, t.values.dtype, t.format)))
            values.append(t)
        else:
            part = fast_signature((a,), values)
            if part is None:
                return None
            parts.append(part[0])
    return tuple(parts)


def filed_signature(args, values) -> tuple | None:
    """``prepared_signature``'s key for ``args`` whose general call prepared them into ``values`` (one each),
    or None when that call prepared some argument in a way ``prepared_signature`` would not repeat (a
    conversion, a copy), or none of them is a scipy CSR / CSC (``fast_signature`` keys those calls)."""
    if len(values) != len(args):
        return None
    parts, scipy_seen = ["prepared"], False
    for a, v in zip(args, values):
        kind = type(a)
        if _is_scipy_held(kind):
            if type(v) is not Held or v.obj is not a:
                return None
            parts.append(_held_part(kind, v))
            scipy_seen = True
            continue
        if _is_scipy_compressed(kind):
            if type(v) is not SparseTensor or not v.validated or not _passes_through(v.format):
                return None
            parts.append((kind, tensor_part(v.shape, v.values.dtype, v.format)))
            scipy_seen = True
        else:
            if not unchanged(v, a):
                return None
            part = fast_signature((a,))
            if part is None:
                return None
            parts.append(part[0])
    return tuple(parts) if scipy_seen else None
