"""Drop-ins on the integer dtypes the kernels lack (int8, int16, uint8, uint16, uint32, uint64), which scipy
supports (a 0/1 uint8 adjacency matrix is common in graph code).

The operands are cast to a dtype the kernels have, the drop-in runs, and the result is cast to NumPy's result
dtype. That is exact: with an integer result, sums and products in int64 equal scipy's narrow ones modulo
2^bits (two's complement wraps the same way, and the cast back keeps the low bits); a float or complex result
dtype is computed in that dtype, from operands it holds exactly, as scipy upcasts them. Where scipy's sparse
result drops zeros (sparse @ sparse, a sparse op sparse), the zeros that appear only in the narrow type (256
in uint8) are dropped after the cast. float16 stays unsupported, as in scipy.sparse.
"""

from __future__ import annotations

import numpy as np

NARROW = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64))


def _dtype(x):
    dtype = getattr(x, "dtype", None)
    return None if dtype is None or np.ndim(x) == 0 else np.dtype(dtype)


def involved(*operands) -> bool:
    """Whether an array operand has a narrow integer dtype (a scalar operand needs no kernel: its rules run
    in the operand's own dtype). Per call on every drop-in's general path: the common answer (no) costs one
    set lookup per operand."""
    for x in operands:
        if getattr(x, "dtype", None) in NARROW:
            return not any(np.ndim(y) == 0 for y in operands)
    return False


def call(fn, operands, kwargs: dict, prune: bool):
    """``fn(*operands, **kwargs)`` computed in a kernel dtype and cast to NumPy's result dtype."""
    from splyce.tensors.validation import SUPPORTED_DTYPES

    target = np.result_type(*[d for d in map(_dtype, operands) if d is not None])
    if target in SUPPORTED_DTYPES:
        compute = target
    elif target.kind in "iu":
        compute = np.dtype(np.int64)
    else:
        raise TypeError(f"unsupported dtype {target}; supported: "
                        + ", ".join(str(np.dtype(d)) for d in SUPPORTED_DTYPES) + " and narrower integers")
    cast = [x if _dtype(x) in (None, compute) else _astype(x, compute) for x in operands]
    out = fn(*cast, **kwargs)
    return out if compute == target else _cast_result(out, target, prune)


def _astype(x, dtype):
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    return x.astype(dtype)


def _cast_result(out, target: np.dtype, prune: bool):
    if np.ndim(out) == 0:
        return np.asarray(out).astype(target)[()]
    out = out.astype(target)
    if prune and hasattr(out, "eliminate_zeros"):
        out.eliminate_zeros()        # our own result: scipy's narrow sum or product stored no zero
    return out
