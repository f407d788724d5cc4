"""Boundary checks for sparse tensor buffers, vectorized with NumPy.

`check_buffers` verifies that (shape, format, pos, crd, values) describe a well-formed tensor in MLIR's
standard storage; `validate(tensor)` runs it on a `SparseTensor`. Both read the buffers only: no copies of
index or value arrays, a few temporary arrays of O(nnz) booleans / differences; about 0.5 ms per million
stored entries. Errors name the tensor, the level and the first bad position.
"""

from __future__ import annotations

import operator

import sys

import numpy as np

from splyce.errors import NotCanonicalError
from splyce.native.dtypes import DTYPE_NAMES, SUPPORTED_DTYPES
from splyce.tensors.formats import Format

__all__ = ["DTYPE_NAMES", "SUPPORTED_DTYPES", "NotCanonicalError", "check_dtype", "check_shape", "check_buffers", "compressed_ok", "validate"]





def check_dtype(dtype, name: str = "tensor") -> np.dtype:
    """The value dtype as np.dtype, or TypeError when splyce cannot compute with it."""
    dtype = np.dtype(dtype)
    if dtype.newbyteorder("=") not in SUPPORTED_DTYPES:
        supported = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"{name}: unsupported dtype {dtype}; supported: {supported}")
    return dtype


def check_shape(shape, name: str = "tensor") -> tuple[int, ...]:
    """The shape as a tuple of non-negative Python ints (bools and non-integers rejected)."""
    try:
        entries = tuple(shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be a tuple of ints, not {shape!r}") from None
    out = []
    for axis, size in enumerate(entries):
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"{name}: shape[{axis}] must be an int, not {size!r}")
        if size < 0:
            raise ValueError(f"{name}: shape[{axis}] is negative ({size})")
        out.append(operator.index(size))
    return tuple(out)


def _check_index_array(arr, what: str, width: int, label: str) -> None:
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{label}: {what} must be a numpy array, not {type(arr).__name__}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{label}: {what} must be an integer array, not {arr.dtype}")
    if arr.dtype != np.dtype(f"int{width}"):
        raise TypeError(f"{label}: {what} have dtype {arr.dtype} but the format's width is {width} (int{width})")
    if arr.ndim != 1 or not arr.flags.c_contiguous:
        raise ValueError(f"{label}: {what} must be a C-contiguous 1-D array (got ndim={arr.ndim})")


def _check_order(crd: np.ndarray, within: np.ndarray, level, label: str, segment_of) -> np.ndarray | None:
    """Check sortedness / uniqueness of `crd` inside runs where `within[k]` says entries k, k+1 share a parent.

    Returns the mask "entries k and k+1 share parent and coordinate" (what a following singleton level needs).
    """
    if len(crd) < 2:
        return np.zeros(0, dtype=bool)
    diff = np.diff(crd)
    if level.ordered:
        bad = within & ((diff <= 0) if level.unique else (diff < 0))
        if bad.any():
            k = int(np.argmax(bad)) + 1
            where = segment_of(k)
            if crd[k] == crd[k - 1]:
                raise NotCanonicalError(f"{label}: duplicate coordinate {crd[k]} within {where} at position {k}")
            raise NotCanonicalError(
                f"{label}: coordinates not sorted within {where} at position {k} ({crd[k]} after {crd[k - 1]})"
            )
    elif level.unique:
        segment = np.concatenate(([0], np.cumsum(~within)))
        perm = np.lexsort((crd, segment))
        dup = (np.diff(crd[perm]) == 0) & (np.diff(segment[perm]) == 0)
        if dup.any():
            k = int(perm[int(np.argmax(dup)) + 1])
            raise NotCanonicalError(f"{label}: duplicate coordinate {crd[k]} within {segment_of(k)} at position {k}")
    return within & (diff == 0)


# The native single-pass scan (native/validation.py) answers True when the buffers are well formed;
# on False the NumPy checks below run and word the error. It is JIT-compiled with llvmlite, so it is used
# once splyce's compiler is loaded in this process anyway (a jitted call or a drop-in), or for tensors large
# enough that loading it costs less than the NumPy checks; `import splyce` and small conversions never load
# LLVM. Either way the verdict and the error messages are the same.
NATIVE_MIN_ENTRIES = 1 << 18


def _native_ok(shape, fmt, pos, crd, values) -> bool:
    if "splyce.native.codegen" not in sys.modules and len(values) < NATIVE_MIN_ENTRIES:
        return False
    from splyce.native.validation import buffers_ok

    return buffers_ok(shape, fmt, pos, crd, values)


def compressed_ok(n_major: int, n_minor: int, indptr, indices, data) -> bool:
    """True when a CSR's (a CSC's: by columns) arrays are well formed and canonical in the format of their
    index dtype's widths, checked in one short native call (``native.validation.compressed_ok``); False means
    "not shown here": the caller takes ``check_buffers``, which decides and words any defect. Like
    ``check_buffers``, it loads no LLVM for a small matrix when splyce's compiler is not loaded yet."""
    global _native_compressed_ok
    if _native_compressed_ok is None:
        if "splyce.native.codegen" not in sys.modules and len(data) < NATIVE_MIN_ENTRIES:
            return False
        from splyce.native.validation import compressed_ok as native_ok

        _native_compressed_ok = native_ok      # (an import statement per call is ~0.4 us of a ~10 us call)
    return _native_compressed_ok(n_major, n_minor, indptr, indices, data)


_native_compressed_ok = None


def check_buffers(shape, fmt: Format, pos, crd, values, name: str = "tensor") -> None:
    """Raise ValueError / TypeError unless the buffers are a well-formed tensor of `shape` in `fmt`.

    Unsorted or duplicate coordinates raise `NotCanonicalError` (a ValueError), checked last for each level.
    """
    if isinstance(fmt, Format) and _native_ok(shape, fmt, pos, crd, values):
        return
    if not isinstance(fmt, Format):
        raise TypeError(f"{name}: format must be a splyce Format, not {type(fmt).__name__}")
    shape = check_shape(shape, name)
    if len(shape) != fmt.ndim:
        raise ValueError(f"{name}: shape {shape} has {len(shape)} dimensions but the format has {fmt.ndim} levels")
    pos, crd = tuple(pos), tuple(crd)
    if len(pos) != fmt.ndim or len(crd) != fmt.ndim:
        raise ValueError(f"{name}: expected {fmt.ndim} pos and crd entries (one per level, None where unused), "
                         f"got {len(pos)} and {len(crd)}")
    n_parent = 1          # number of positions of the parent level
    same_prev = None      # entries k, k+1 share all coordinates so far (for singleton levels)
    for l, level in enumerate(fmt.levels):
        size = shape[fmt.order[l]]
        label = f"{name}: level {l} ({level})"
        p, c = pos[l], crd[l]
        if level.kind == "dense":
            if p is not None or c is not None:
                raise ValueError(f"{label}: a dense level has no pos / crd buffers (pass None)")
            n_parent *= size
            same_prev = None
            continue
        if level.kind == "singleton" and p is not None:
            raise ValueError(f"{label}: a singleton level has no pos buffer (pass None)")
        if c is None:
            raise ValueError(f"{label}: missing crd buffer")
        _check_index_array(c, "coordinates", fmt.crd_width, label)
        if size - 1 > np.iinfo(c.dtype).max:
            raise ValueError(f"{label}: dimension of size {size} does not fit crd_width {fmt.crd_width}")
        if level.kind == "compressed":
            if p is None:
                raise ValueError(f"{label}: missing pos buffer")
            _check_index_array(p, "positions", fmt.pos_width, label)
            if len(p) != n_parent + 1:
                raise ValueError(f"{label}: positions have length {len(p)}, expected {n_parent + 1} "
                                 f"(parent positions + 1)")
            if p[0] != 0:
                raise ValueError(f"{label}: positions must start at 0, not {p[0]}")
            steps = np.diff(p)
            if len(steps) and steps.min() < 0:
                k = int(np.argmax(steps < 0)) + 1
                raise ValueError(f"{label}: positions decrease at position {k} ({p[k]} after {p[k - 1]})")
            if p[-1] != len(c):
                raise ValueError(f"{label}: positions end at {p[-1]} but there are {len(c)} coordinates")
        elif len(c) != n_parent:
            raise ValueError(f"{label}: coordinates have length {len(c)}, expected {n_parent} (one per parent entry)")
        if len(c):
            low, high = c.min(), c.max()
            if low < 0 or high >= size:
                k = int(np.argmax((c < 0) | (c >= size)))
                raise ValueError(f"{label}: coordinate {c[k]} out of range [0, {size}) at position {k}")
        if level.kind == "compressed":
            within = np.ones(max(len(c) - 1, 0), dtype=bool)
            starts = p[1:-1]
            starts = starts[(starts > 0) & (starts < len(c))]
            within[starts - 1] = False

            def segment_of(k, p=p):
                return f"segment {int(np.searchsorted(p, k, side='right')) - 1}"
        else:
            within = same_prev

            def segment_of(_k):
                return "a run of equal parent coordinates"
        same_prev = _check_order(c, within, level, label, segment_of)
        n_parent = len(c)
    if not isinstance(values, np.ndarray):
        raise TypeError(f"{name}: values must be a numpy array, not {type(values).__name__}")
    check_dtype(values.dtype, name)
    if not values.dtype.isnative:
        raise TypeError(f"{name}: values have non-native byte order ({values.dtype.str})")
    if values.ndim != 1 or not values.flags.c_contiguous:
        raise ValueError(f"{name}: values must be a C-contiguous 1-D array (got ndim={values.ndim})")
    if len(values) != n_parent:
        raise ValueError(f"{name}: values have length {len(values)}, expected {n_parent}")


def validate(tensor, name: str = "tensor") -> None:
    """Check a SparseTensor's buffers (cheap, vectorized, no copies) and mark it validated (trusted by later
    kernel calls): call before handing a tensor that is not ``validated`` to a kernel."""
    check_buffers(tensor.shape, tensor.format, tensor.pos, tensor.crd, tensor.values, name)
    tensor._validated = True   # tensor.py's class, same package
