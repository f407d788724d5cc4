"""Scalar arithmetic of the kernel bodies, per value dtype: the MLIR element type of each NumPy dtype and the
ops that compute NumPy's results on it.

- floats and integers: ``arith`` (integers signed, as NumPy's int32 / int64);
- ``bool`` is stored as ``i8`` holding 0 / 1 (NumPy's byte layout; ``i1`` memrefs abort MLIR's MemRefToLLVM,
  docs/toolchain.md): NumPy's ``+`` and ``*`` on bools are logical or / and, so are its sums of products;
- ``complex64`` / ``complex128`` are ``complex<f32>`` / ``complex<f64>`` (NumPy's interleaved layout), with
  the ``complex`` dialect's ops, lowered by ``convert-complex-to-standard``.
"""

from __future__ import annotations

import numpy as np

from splyce.native.dtypes import real_dtype  # re-exported for the lowering rules


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_complex(dtype: str) -> bool:
    return dtype.startswith("complex")


def element_type(dtype: str):
    from mlir import ir

    if is_complex(dtype):
        return ir.ComplexType.get(element_type(real_dtype(dtype)))
    return {
        "float64": ir.F64Type.get, "float32": ir.F32Type.get, "bool": lambda: ir.IntegerType.get_signless(8),
        "int64": lambda: ir.IntegerType.get_signless(64), "int32": lambda: ir.IntegerType.get_signless(32),
    }[dtype]()


def cast(value, from_dtype: str, to_dtype: str):
    """Convert a scalar SSA value between our dtypes (NumPy's promotion already chose ``to_dtype``, so the
    conversion is always a widening: never from complex to real, never to bool)."""
    from mlir.dialects import arith, complex as cplx

    if from_dtype == to_dtype:
        return value
    target = element_type(to_dtype)
    if is_complex(to_dtype):
        part = real_dtype(to_dtype)
        if is_complex(from_dtype):   # complex64 -> complex128
            re, im = (cast(op(value), real_dtype(from_dtype), part) for op in (cplx.re, cplx.im))
        else:
            re, im = cast(value, from_dtype, part), constant(0, part)
        return cplx.create_(target, re, im)
    if is_float(to_dtype):
        if is_float(from_dtype):
            return arith.extf(target, value)
        return (arith.uitofp if from_dtype == "bool" else arith.sitofp)(target, value)
    return (arith.extui if from_dtype == "bool" else arith.extsi)(target, value)


def constant(value, dtype: str):
    from mlir import ir
    from mlir.dialects import arith, complex as cplx

    typ = element_type(dtype)
    if is_complex(dtype):
        part = element_type(real_dtype(dtype))
        value = complex(value)
        parts = [ir.FloatAttr.get(part, value.real), ir.FloatAttr.get(part, value.imag)]
        return cplx.constant(typ, ir.ArrayAttr.get(parts))
    attr = ir.FloatAttr.get(typ, float(value)) if is_float(dtype) else ir.IntegerAttr.get(typ, int(value))
    return arith.constant(typ, attr)


def binary(op: str, a, b, dtype: str):
    """``a op b`` for op in add / sub / mul, as NumPy computes it in ``dtype``."""
    from mlir.dialects import arith, complex as cplx

    if dtype == "bool":
        return {"add": arith.ori, "mul": arith.andi}[op](a, b)
    if is_complex(dtype):
        return {"add": cplx.add, "sub": cplx.sub, "mul": cplx.mul}[op](a, b)
    fns = {"mul": (arith.mulf, arith.muli), "add": (arith.addf, arith.addi), "sub": (arith.subf, arith.subi)}
    return fns[op][0 if is_float(dtype) else 1](a, b)


def absolute(x, dtype: str):
    """NumPy's ``abs``: a real magnitude for complex values, the identity on bools."""
    from mlir.dialects import complex as cplx, math

    if is_complex(dtype):
        return cplx.abs(x)
    if dtype == "bool":
        return x
    return math.absf(x) if is_float(dtype) else math.absi(x)


def conjugate(x, dtype: str):
    from mlir.dialects import complex as cplx

    return cplx.conj(x) if is_complex(dtype) else x


def divide_by(x, divisor, dtype: str):
    """``x / divisor`` for a Python scalar (a complex value divides by ``divisor + 0j``, as NumPy does)."""
    from mlir.dialects import arith, complex as cplx

    if is_complex(dtype):
        return cplx.div(x, constant(divisor, dtype))
    return arith.divf(x, constant(divisor, dtype))


def needs_unary(from_dtype: str, to_dtype: str) -> bool:
    """Whether converting between the dtypes uses ops the sparsifier cannot derive an iteration from
    (``complex.create``): such conversions of sparse values go inside a ``sparse_tensor.unary``."""
    return is_complex(to_dtype) and from_dtype != to_dtype


def extremum(kind: str, dtype: str):
    """The builder of NumPy's maximum / minimum of two values (NaN propagates; on bools: or / and)."""
    from mlir.dialects import arith

    if is_float(dtype):
        return arith.maximumf if kind == "max" else arith.minimumf
    return arith.maxsi if kind == "max" else arith.minsi   # bools are 0 / 1: max is or, min is and


def extremum_identity(kind: str, dtype: str):
    """The identity of max / min: -inf / +inf, the integer type's min / max, False / True."""
    if is_float(dtype):
        return constant(-np.inf if kind == "max" else np.inf, dtype)
    if dtype == "bool":
        return constant(0 if kind == "max" else 1, dtype)
    info = np.iinfo(np.dtype(dtype))
    return constant(info.min if kind == "max" else info.max, dtype)
