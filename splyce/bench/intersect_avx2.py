"""Bench-only experiment (issue 36): AVX2 intersection steps, outside the pass (``bench limit``'s step rows on
hosts without AVX-512; ``intersect_step`` has the AVX-512 ones).

Hand-written LLVM IR (the kernel library's IR writer), compiled for the host, never used by the library. One
step takes 4 int32 coordinates of A and 4 of B (one xmm each: on AMD Zen 1 a 256-bit op is two 128-bit ones,
so 4 x 4 compares per xmm cost half the 8 x 8 of a ymm per coordinate) and compares A against B rotated by
0..3 lanes (``vpshufd``). The sum-only step (fast math: one vector accumulator, reduced after the loop):

* ``rotate``: B's values rotated the same ways and selected per A lane by the compares (the fast lane's
  phase 1, ``passes/fast_lane.py``; float64: ``vpermpd`` + ``vpmovsxdq`` + ``vblendvpd`` per rotation);
* ``permute``: per A lane the matched B lane as an index (an AND-OR of constants under the compares, ``r - 4``:
  the sign bit is the match), B's values permuted by it (float32: one ``vpermilps``; float64: the index spread
  to dword pairs, one ``vpermd``) and one blend under the sign bits.

The advance, ``advance``: ``pivot``: each fiber past its coordinates ``<=`` the other's last one (the fast
lane's, a popcount of a vector compare); ``block``: past the whole block when its last coordinate is ``<=`` the
other's (a ``cmov``; the conflict lane's). The tails run ``intersect_step``'s scalar merge.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from splyce.bench.intersect_step import _VAL, _dot_tail, _lanes
from splyce.native.ir_text import IR

N = 4
VALUES = ("rotate", "permute")
ADVANCES = ("pivot", "block")
STEPS = tuple(f"{v} {a}" for v in VALUES for a in ADVANCES)


def _rot(r: int) -> str:
    return f"<4 x i32> <{_lanes((k + r) % N for k in range(N))}>"


def _values(ir: IR, t: str, how: str, eqs: list) -> tuple[str, str]:
    """(B's value per A lane, the i1 / sign mask of A's matched lanes) from %pbv and the compares."""
    vt = f"<4 x {t}>"
    ir(f"  %bvals = load {vt}, ptr %pbv, align 4")
    if how == "rotate":
        sel = "%bvals"
        for r in range(1, N):
            rot, nxt = ir.name("rv"), ir.name("sel")
            ir(f"  {rot} = shufflevector {vt} %bvals, {vt} poison, {_rot(r)}")
            ir(f"  {nxt} = select <4 x i1> {eqs[r]}, {vt} {rot}, {vt} {sel}")
            sel = nxt
        m = eqs[0]
        for e in eqs[1:]:
            o = ir.name("or")
            ir(f"  {o} = or <4 x i1> {m}, {e}")
            m = o
        return sel, m
    # permute: idx = OR_r (eq_r ? r - 4 : 0) per A lane (lane k met B lane (k + r) % 4)
    idx = None
    for r in range(N):
        s, part = ir.name("sx"), ir.name("ix")
        ir(f"  {s} = sext <4 x i1> {eqs[r]} to <4 x i32>")
        ir(f"  {part} = and <4 x i32> {s}, <{_lanes((k + r) % N - 4 for k in range(N))}>")
        if idx is None:
            idx = part
        else:
            o = ir.name("ior")
            ir(f"  {o} = or <4 x i32> {idx}, {part}")
            idx = o
    hit = ir.name("hit")
    ir(f"  {hit} = icmp slt <4 x i32> {idx}, zeroinitializer")
    out = ir.name("bsel")
    if t == "float":
        ir(f"  {out} = call <4 x float> @llvm.x86.avx.vpermilvar.ps(<4 x float> %bvals, <4 x i32> {idx})")
        return out, hit
    dup, twice, pair, asi, perm = (ir.name(x) for x in ("dup", "tw", "pair", "asi", "perm"))
    ir(f"  {dup} = shufflevector <4 x i32> {idx}, <4 x i32> poison, <8 x i32> <{_lanes([0, 0, 1, 1, 2, 2, 3, 3])}>")
    ir(f"  {twice} = add <8 x i32> {dup}, {dup}")
    ir(f"  {pair} = or <8 x i32> {twice}, <{_lanes([0, 1] * 4)}>")
    ir(f"  {asi} = bitcast <4 x double> %bvals to <8 x i32>")
    ir(f"  {perm} = call <8 x i32> @llvm.x86.avx2.permd(<8 x i32> {asi}, <8 x i32> {pair})")
    ir(f"  {out} = bitcast <8 x i32> {perm} to <4 x double>")
    return out, hit


def dot_ir(vtype, step: str = "rotate pivot") -> str:
    """``T @dot(ptr a, ptr av, i64 na, ptr b, ptr bv, i64 nb)``: the sparse dot (fast math: any order)."""
    how, advance = step.split()
    if how not in VALUES or advance not in ADVANCES:
        raise ValueError(f"unknown AVX2 step {step!r}: one of {STEPS}")
    t, _ = _VAL[np.dtype(vtype)]
    vt = f"<4 x {t}>"
    ir = IR()
    ir(f"define {t} @dot(ptr noalias %a, ptr noalias %av, i64 %na, ptr noalias %b, ptr noalias %bv, i64 %nb) {{")
    ir("entry:")
    ir("  %na4 = sub i64 %na, 4")
    ir("  %nb4 = sub i64 %nb, 4")
    ir("  %ea = icmp sge i64 %na4, 0")
    ir("  %eb = icmp sge i64 %nb4, 0")
    ir("  %e = and i1 %ea, %eb")
    ir("  br i1 %e, label %loop, label %vdone")
    ir("loop:")
    ir("  %i = phi i64 [0, %entry], [%i2, %loop]")
    ir("  %j = phi i64 [0, %entry], [%j2, %loop]")
    ir(f"  %acc = phi {vt} [zeroinitializer, %entry], [%acc2, %loop]")
    ir("  %pa = getelementptr i32, ptr %a, i64 %i")
    ir("  %pb = getelementptr i32, ptr %b, i64 %j")
    ir("  %va = load <4 x i32>, ptr %pa, align 4")
    ir("  %vb = load <4 x i32>, ptr %pb, align 4")
    eqs = []
    for r in range(N):
        rot, eq = ir.name("rot"), ir.name("eq")
        ir(f"  {rot} = shufflevector <4 x i32> %vb, <4 x i32> poison, {_rot(r)}")
        ir(f"  {eq} = icmp eq <4 x i32> %va, {rot}")
        eqs.append(eq)
    ir(f"  %pav = getelementptr {t}, ptr %av, i64 %i")
    ir(f"  %pbv = getelementptr {t}, ptr %bv, i64 %j")
    ir(f"  %avals = load {vt}, ptr %pav, align 4")
    sel, hit = _values(ir, t, how, eqs)
    ir(f"  %vprod = fmul fast {vt} %avals, {sel}")
    ir(f"  %vsum4 = fadd fast {vt} %acc, %vprod")
    ir(f"  %acc2 = select <4 x i1> {hit}, {vt} %vsum4, {vt} %acc")
    ir("  %pal = getelementptr i32, ptr %pa, i64 3")
    ir("  %al = load i32, ptr %pal")
    ir("  %pbl = getelementptr i32, ptr %pb, i64 3")
    ir("  %bl = load i32, ptr %pbl")
    if advance == "block":
        ir("  %lea = icmp ule i32 %al, %bl")
        ir("  %leb = icmp ule i32 %bl, %al")
        ir("  %ia = add i64 %i, 4")
        ir("  %jb = add i64 %j, 4")
        ir("  %i2 = select i1 %lea, i64 %ia, i64 %i")
        ir("  %j2 = select i1 %leb, i64 %jb, i64 %j")
    else:
        for side, v, other, cur in (("a", "%va", "%bl", "%i"), ("b", "%vb", "%al", "%j")):
            ir(f"  %ins{side} = insertelement <4 x i32> poison, i32 {other}, i64 0")
            ir(f"  %spl{side} = shufflevector <4 x i32> %ins{side}, <4 x i32> poison, <4 x i32> zeroinitializer")
            ir(f"  %le{side} = icmp ule <4 x i32> {v}, %spl{side}")
            ir(f"  %bits{side} = bitcast <4 x i1> %le{side} to i4")
            ir(f"  %c{side} = call i4 @llvm.ctpop.i4(i4 %bits{side})")
            ir(f"  %z{side} = zext i4 %c{side} to i64")
            ir(f"  %{'i2' if side == 'a' else 'j2'} = add i64 {cur}, %z{side}")
    ir("  %ma = icmp sle i64 %i2, %na4")
    ir("  %mb = icmp sle i64 %j2, %nb4")
    ir("  %more = and i1 %ma, %mb")
    ir("  br i1 %more, label %loop, label %vdone")
    ir("vdone:")
    ir("  %vi = phi i64 [0, %entry], [%i2, %loop]")
    ir("  %vj = phi i64 [0, %entry], [%j2, %loop]")
    ir(f"  %fin = phi {vt} [zeroinitializer, %entry], [%acc2, %loop]")
    sfx = "v4f64" if t == "double" else "v4f32"
    ir(f"  %vsum = call fast {t} @llvm.vector.reduce.fadd.{sfx}({t} 0.0, {vt} %fin)")
    ir("  br label %tail")
    _dot_tail(ir, t)
    decl = ["declare i4 @llvm.ctpop.i4(i4)",
            f"declare {t} @llvm.vector.reduce.fadd.{sfx}({t}, {vt})",
            "declare <4 x float> @llvm.x86.avx.vpermilvar.ps(<4 x float>, <4 x i32>)",
            "declare <8 x i32> @llvm.x86.avx2.permd(<8 x i32>, <8 x i32>)"]
    return "\n".join(ir.lines) + "\n" + "\n".join(decl) + "\n"


@functools.cache
def available() -> bool:
    """The kernels need AVX2 on the host."""
    from splyce.native.codegen import host_target

    return "+avx2" in host_target().features.split(",")


@functools.cache
def dot_kernel(vtype, step: str):
    from splyce.native.codegen import compile_host_helpers

    ct = ctypes.c_double if np.dtype(vtype) == np.float64 else ctypes.c_float
    sig = ctypes.CFUNCTYPE(ct, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_int64)
    return compile_host_helpers(dot_ir(vtype, step), {"dot": sig})["dot"]


def dot(a: np.ndarray, av: np.ndarray, b: np.ndarray, bv: np.ndarray, step: str = "rotate pivot") -> float:
    """The sparse dot of two sorted, duplicate-free, non-negative int32 fibers (fast math: any order)."""
    if not available():
        raise RuntimeError("intersect_avx2: this CPU lacks AVX2")
    for crd, val in ((a, av), (b, bv)):
        if crd.dtype != np.int32 or not crd.flags.c_contiguous or not val.flags.c_contiguous \
                or val.shape != crd.shape or np.dtype(val.dtype) not in _VAL:
            raise TypeError("intersect_avx2: contiguous int32 coordinates and float32 / float64 values")
    if av.dtype != bv.dtype:
        raise TypeError("intersect_avx2.dot: both fibers' values of one dtype")
    fn = dot_kernel(av.dtype.type, step)
    return float(fn(a.ctypes.data, av.ctypes.data, a.size, b.ctypes.data, bv.ctypes.data, b.size))


def step_asm(step: str, vtype, target: str = "avx2") -> str:
    """The dot kernel's machine code for ``target`` (to check which instructions the step uses)."""
    from splyce.native.codegen import CodegenOptions, emit_assembly, optimize, resolve_target

    module, tm = optimize(dot_ir(vtype, step), resolve_target(target), CodegenOptions(opt_level=3))
    return emit_assembly(module, tm)
