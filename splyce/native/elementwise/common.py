"""What the elementwise kernels share: value types and their instructions, a constant-or-value select as
bit operations, and a byte compare of index arrays."""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address


# ``%out = cond ? %raw : +0`` as bit operations (an AND with the condition's all-ones or all-zeros mask): LLVM
# turns a select between a loaded value and a constant into a branch around the load, and which operand holds
# the next column is a coin flip in a merge (a misprediction per output entry: blockdiag-1500's sum took 11 ns
# per result, in cache)
def _keep(out: str, cond: str, raw: str, t: str) -> str:
    bits = {"double": 64, "float": 32, "i64": 64, "i32": 32}[t]
    lines = [f"  %{out}_mask = sext i1 %{cond} to i{bits}"]
    if t in ("double", "float"):
        lines += [f"  %{out}_raw_bits = bitcast {t} %{raw} to i{bits}",
                  f"  %{out}_bits = and i{bits} %{out}_raw_bits, %{out}_mask",
                  f"  %{out} = bitcast i{bits} %{out}_bits to {t}"]
    else:
        lines += [f"  %{out} = and i{bits} %{raw}, %{out}_mask"]
    return "\n".join(lines) + "\n"


# value dtype -> (LLVM type, zero, "is not zero" compare, {op name: instruction})
_VALUE = {
    np.dtype(np.float64): ("double", "0.0", "fcmp une", {"multiply": "fmul", "add": "fadd", "subtract": "fsub"}),
    np.dtype(np.float32): ("float", "0.0", "fcmp une", {"multiply": "fmul", "add": "fadd", "subtract": "fsub"}),
    np.dtype(np.int64): ("i64", "0", "icmp ne", {"multiply": "mul", "add": "add", "subtract": "sub"}),
    np.dtype(np.int32): ("i32", "0", "icmp ne", {"multiply": "mul", "add": "add", "subtract": "sub"}),
}
OPS = ("multiply", "add", "subtract")
_lock = threading.Lock()
_POS_MAX = {32: 2**31 - 1, 64: 2**63 - 1}   # result entries a positions dtype can count


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


@functools.cache
def _memcmp():
    fn = ctypes.CDLL(None).memcmp
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    fn.restype = ctypes.c_int
    return fn


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal C-contiguous arrays of one dtype (libc's memcmp: SIMD, stops at the first difference)."""
    return len(x) == len(y) and (x.nbytes == 0 or _memcmp()(_address(x), _address(y), x.nbytes) == 0)
