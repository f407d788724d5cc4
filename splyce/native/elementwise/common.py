"""What the elementwise kernels share: value types and their instructions, a constant-or-value select as
bit operations, and a byte compare of index arrays."""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import FLOAT_TYPES, SCALARS, supported as ir_supported

_BITS = {s.t: s.bits for s in SCALARS.values()}


# ``%out = cond ? %raw : +0`` as bit operations (an AND with the condition's all-ones or all-zeros mask): LLVM
# turns a select between a loaded value and a constant into a branch around the load, and which operand holds
# the next column is a coin flip in a merge (a misprediction per output entry: blockdiag-1500's sum took 11 ns
# per result, in cache). ``neg``: -0.0 instead of +0 (x + -0.0 is x for every x, -0.0 included; +0 is not)
def _keep(out: str, cond: str, raw: str, t: str, neg: bool = False) -> str:
    bits = _BITS[t]
    lines = [f"  %{out}_mask = sext i1 %{cond} to i{bits}"]
    if t in FLOAT_TYPES:
        lines += [f"  %{out}_raw_bits = bitcast {t} %{raw} to i{bits}",
                  f"  %{out}_bits = and i{bits} %{out}_raw_bits, %{out}_mask"]
        if neg:
            lines += [f"  %{out}_off = xor i{bits} %{out}_mask, -1",
                      f"  %{out}_sign = and i{bits} %{out}_off, {-(1 << (bits - 1))}",
                      f"  %{out}_bits_n = or i{bits} %{out}_bits, %{out}_sign"]
        lines += [f"  %{out} = bitcast i{bits} %{out}_bits{'_n' if neg else ''} to {t}"]
    else:
        lines += [f"  %{out} = and i{bits} %{raw}, %{out}_mask"]
    return "\n".join(lines) + "\n"


# value dtype -> (LLVM type, zero, "is not zero" compare, {op name: instruction}): the view of the one dtype
# table (ir_text.SCALARS) the merges unpack; bool has a product (AND) and a sum (OR), no difference. scipy's
# rule drops a False result as it drops a zero
_VALUE = {d: (s.t, s.zero, s.nonzero, {"multiply": s.mul, "add": s.add, **({"subtract": s.sub} if s.sub else {})})
          for d, s in SCALARS.items()}
OPS = ("multiply", "add", "subtract")

# The sparsifier's coiteration (``keep_zeros``, the jit's semantics): every coiterated position is stored, so
# ``{nonzero}`` is a compare that is always true (``fcmp true``; ``icmp uge x, 0``), which LLVM folds away
_ALWAYS = {s.t: "fcmp true" if s.t in FLOAT_TYPES else "icmp uge" for s in SCALARS.values()}
# A value missing from one side of a sum (the sparsifier's rule: a + missing is a, missing + b is b,
# a - missing is a, missing - b is -b): -0.0 where +0.0 would change a -0.0 (x + -0.0 == x and -0.0 - x == -x
# for every x, -0.0 included; x - +0.0 == x); ints and bools 0
_NEG_ZERO = "0x8000000000000000"      # LLVM's hex form of a double or float constant


def value_type(dtype: np.dtype, keep_zeros: bool) -> tuple:
    """``(LLVM type, zero, "is not zero" compare, {op: instruction})`` of ``dtype``; with ``keep_zeros`` the
    compare keeps every result."""
    if not keep_zeros:
        return _VALUE[dtype]
    t, zero, _, ops = _VALUE[dtype]
    return t, zero, _ALWAYS[t], ops


def missing_values(op: str, t: str, keep_zeros: bool) -> tuple[str, str]:
    """The value a sum's missing entry takes on the left and on the right: the constants of ``op(missing, b)``
    and ``op(a, missing)``; scipy's rule (not ``keep_zeros``) is +0 on both sides."""
    if not keep_zeros or t not in FLOAT_TYPES:
        return ("0.0", "0.0") if t in FLOAT_TYPES else ("0", "0")
    return _NEG_ZERO, (_NEG_ZERO if op == "add" else "0.0")


def keep_supported(dtype) -> bool:
    """Whether ``keep_zeros`` kernels exist for ``dtype`` (bool too: product and sum)."""
    return np.dtype(dtype) in _VALUE


def op_supported(op: str, dtype) -> bool:
    """Whether the kernels compute ``op`` in ``dtype`` (either rule): bool has a product and a sum only."""
    entry = _VALUE.get(np.dtype(dtype))
    return entry is not None and op in entry[3]
_lock = threading.Lock()
_POS_MAX = {32: 2**31 - 1, 64: 2**63 - 1}   # result entries a positions dtype can count


def supported(dtype) -> bool:
    return ir_supported(dtype, bool_ok=True)


@functools.cache
def _memcmp():
    fn = ctypes.CDLL(None).memcmp
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    fn.restype = ctypes.c_int
    return fn


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal C-contiguous arrays of one dtype (libc's memcmp: SIMD, stops at the first difference)."""
    return len(x) == len(y) and (x.nbytes == 0 or _memcmp()(_address(x), _address(y), x.nbytes) == 0)
