"""What the elementwise kernels share: a value dtype's instructions (read from the one dtype table,
``ir_text.SCALARS``), a constant-or-value select as bit operations."""

from __future__ import annotations

import threading

import numpy as np

from splyce.native.ir_text import BY_TYPE, FLOAT_TYPES, MERGE_OPS, SCALARS, instruction, supported as ir_supported


# ``%out = cond ? %raw : +0`` as bit operations (an AND with the condition's all-ones or all-zeros mask): LLVM
# turns a select between a loaded value and a constant into a branch around the load, and which operand holds
# the next column is a coin flip in a merge (a misprediction per output entry: blockdiag-1500's sum took 11 ns
# per result, in cache). ``neg``: -0.0 instead of +0 (x + -0.0 is x for every x, -0.0 included; +0 is not)
def _keep(out: str, cond: str, raw: str, t: str, neg: bool = False) -> str:
    bits = BY_TYPE[t].bits
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


OPS = MERGE_OPS


def value_type(dtype: np.dtype, keep_zeros: bool, op: str) -> tuple:
    """``(LLVM type, zero, "is not zero" compare, op's instruction)`` in ``dtype``, from its row of the one dtype
    table (``ir_text.SCALARS``; bool too: a product is AND, a sum OR; scipy's rule drops a False result as it drops
    a zero). ``keep_zeros`` (the sparsifier's coiteration, the jit's semantics: every coiterated position stored):
    the compare is one that always holds (``fcmp true``; ``icmp uge x, 0``), which LLVM folds away."""
    s = SCALARS[dtype]
    nonzero = ("fcmp true" if s.t in FLOAT_TYPES else "icmp uge") if keep_zeros else s.nonzero
    return s.t, s.zero, nonzero, instruction(dtype, op)


# A value missing from one side of a sum (the sparsifier's rule: a + missing is a, missing + b is b,
# a - missing is a, missing - b is -b): -0.0 where +0.0 would change a -0.0 (x + -0.0 == x and -0.0 - x == -x
# for every x, -0.0 included; x - +0.0 == x); ints and bools 0
_NEG_ZERO = "0x8000000000000000"      # LLVM's hex form of a double or float constant


def missing_values(op: str, t: str, keep_zeros: bool) -> tuple[str, str]:
    """The value a sum's missing entry takes on the left and on the right: the constants of ``op(missing, b)``
    and ``op(a, missing)``; scipy's rule (not ``keep_zeros``) is +0 on both sides."""
    if not keep_zeros or t not in FLOAT_TYPES:
        return ("0.0", "0.0") if t in FLOAT_TYPES else ("0", "0")
    return _NEG_ZERO, (_NEG_ZERO if op == "add" else "0.0")


def supported(dtype) -> bool:
    """Whether the merges compute in ``dtype`` (either rule; bool too: product and sum)."""
    return ir_supported(dtype, bool_ok=True)


keep_supported = supported      # the ``keep_zeros`` kernels: the same dtypes


def op_supported(op: str, dtype) -> bool:
    """Whether the kernels compute ``op`` in ``dtype`` (either rule): bool has a product and a sum only."""
    return supported(dtype) and instruction(dtype, op) is not None


_lock = threading.Lock()
_POS_MAX = {32: 2**31 - 1, 64: 2**63 - 1}   # result entries a positions dtype can count
