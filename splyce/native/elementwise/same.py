"""Operands holding the same positions: one flat, vectorizable pass over all entries."""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.elementwise.common import _lock, _same_bytes, value_type
from splyce.native.ir_text import IR, counted


def _same_ir(name: str, t: str, zero: str, nonzero: str, op: str, c: int) -> str:
    """Same positions in both operands: one flat, vectorizable pass over all entries writes every column and
    op(a, b), counts the nonzero results, and records whether any column differs (then the caller merges):
    ``out[0]`` (any column differs), ``out[1]`` (results kept)."""
    ir = IR()
    ir(f"define void @{name}(ptr %ac, ptr %bc, ptr %av, ptr %bv, i64 %n, ptr %cc, ptr %cv, ptr %out) {{")
    ir.label("entry")

    def entry(k, diff, kept):
        ca, cb = ir.load(f"i{c}", "%ac", k), ir.load(f"i{c}", "%bc", k)
        v = ir.op(op, t, ir.load(t, "%av", k), ir.load(t, "%bv", k))
        ir.store(f"i{c}", ca, "%cc", k)
        ir.store(t, v, "%cv", k)
        ne, nz, diff1, kept1 = ir.op("icmp ne", f"i{c}", ca, cb), ir.name("ne"), ir.name("diff"), ir.name("kept")
        ir(f"  {nz} = zext i1 {ne} to i32")
        ir(f"  {diff1} = or i32 {diff}, {nz}")
        keep, step = ir.op(nonzero, t, v, zero), ir.name("step")
        ir(f"  {step} = zext i1 {keep} to i64")
        ir(f"  {kept1} = add i64 {kept}, {step}")
        return diff1, kept1

    diff, kept = counted(ir, "0", "%n", entry, carried=(("i32", "0"), ("i64", "0")), base="k")
    d64 = ir.name("d")
    ir(f"  {d64} = zext i32 {diff} to i64")
    ir(f"  store i64 {d64}, ptr %out")
    ir.store("i64", kept, "%out", "1")
    ir("  ret void")
    ir("}")
    return ir.text()


_SAME_SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 4), ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


@functools.cache
def _same_kernel(op: str, value: np.dtype, crd_bits: int, keep_zeros: bool = False):
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, ops = value_type(value, keep_zeros)
    name = f"splyce_elementwise_same_{op}_{t}_c{crd_bits}{'_k' if keep_zeros else ''}"
    text = _same_ir(name, t, zero, nonzero, ops[op], crd_bits)
    return compile_host_helpers(text, {name: _SAME_SIG})[name]


def same_pattern(op: str, a, b, dtype, drop_zeros: bool = True):
    """``op(A, B)`` as ``(data, indices, indptr)`` when B holds exactly A's positions (equal ``indptr`` and
    ``indices``), else None. Only A needs to be validated: B's index arrays are compared, never followed.
    ``drop_zeros``: scipy's rule (a zero result is not stored); False keeps every position, as the sparsifier's
    coiteration does (the jit's semantics; bool too)."""
    av, ac, ap = a
    bv, bc, bp = b
    if ac.dtype != bc.dtype or ap.dtype != bp.dtype or not _same_bytes(ap, bp) or len(ac) != len(bc):
        return None
    dtype = np.dtype(dtype)
    n = len(ac)
    with _lock:
        kernel = _same_kernel(op, dtype, ac.dtype.itemsize * 8, not drop_zeros)
    cols = np.empty(n, dtype=ac.dtype)
    vals = np.empty(n, dtype=dtype)
    out = np.zeros(2, dtype=np.int64)
    kernel(_address(ac), _address(bc), _address(av), _address(bv), n, _address(cols),
           _address(vals), _address(out))
    if out[0]:
        return None
    if not drop_zeros:
        return vals, cols, ap.copy()
    return _drop_zeros(vals, cols, ap.copy(), int(out[1]))


def _drop_zeros(vals, cols, indptr, kept: int):
    """The entries of (vals, cols, indptr) whose value is not zero (``kept`` of them), as scipy's products drop
    them; NaN != 0 is kept."""
    n = len(vals)
    if kept != n:
        keep = vals != 0
        kept_before = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        vals, cols, indptr = vals[keep], cols[keep], kept_before[indptr].astype(indptr.dtype)
    return vals, cols, indptr
