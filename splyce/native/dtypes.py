"""The value dtypes every stage supports (the lowering maps each to an MLIR element type): defined once, on the
ground floor, so that the boundary checks in tensors/ and the native scans here share it without a cycle."""

import numpy as np

DTYPE_NAMES = ("float64", "float32", "int64", "int32", "bool", "complex128", "complex64")
SUPPORTED_DTYPES = tuple(np.dtype(t) for t in DTYPE_NAMES)


def real_dtype(dtype: str) -> str:
    """The dtype of ``abs`` of a value (NumPy: complex128 -> float64, complex64 -> float32)."""
    return {"complex128": "float64", "complex64": "float32"}.get(dtype, dtype)
