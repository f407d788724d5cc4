"""Bench-only experiment (issue 36): the best intersection step we can write for this CPU, outside the pass.

What is the least time per coordinate a sorted-fiber intersection can take on an AVX-512 machine without
``vp2intersect``? These kernels answer it for ``bench limit``'s fiber pairs. They are hand-written LLVM IR
(the kernel library's IR writer, ``native.ir_text``, compiled for the host by ``native.codegen`` like the
library's helpers), never used by the library. Each step takes a block of 16 int32 coordinates of A and 16
(or 8: the ``...8`` steps) of B:

* the advance is branch-free from the two blocks' last coordinates: a fiber moves past its block when its last
  coordinate is ``<=`` the other's (both when equal), so every pair of blocks whose ranges overlap meets once;
  it is a select between ``i`` and ``i + 16`` (a ``cmov``, or a branch where LLVM prefers one);
* the all-pairs compare of the two blocks (256 or 128 pairs), one of these ways:
  ``conflict``: 4 ``vpconflictd`` over 8 + 8 coordinates (a quarter of the pairs each): a B lane's conflict
  bits are the A lanes holding its coordinate (within one fiber coordinates are distinct);
  ``rotate``: 16 zmm compares of A against B rotated by 0..15 lanes (``valignd`` / ``vpermd``);
  ``broadcast`` / ``broadcast8``: 16 / 8 zmm compares of A against each B coordinate broadcast from memory
  (``{1to16}``);
* count-only: the popcount of A's matched lanes' mask (the compare masks OR-ed, ``korw``);
* sum-only (``dot``, fast math: reassociated, vector accumulators reduced after the loop), ``how``:
  ``conflict``: a matched B lane's A lane is ``31 - lzcnt`` of its conflict bits; A's values are permuted to
  B's lanes (``vpermpd`` / ``vpermps``) and multiplied under the match masks;
  ``broadcast`` / ``broadcast8``: each compare writes B's lane into an index per A lane (a masked move of a
  constant); the index's sign bits are A's matched lanes, its low bits index B's values
  (one ``vpermps`` / two ``vpermpd``), one masked FMA per 16 / 8 A lanes;
  ``fma`` / ``fma8``: one masked FMA per B lane (A's values times B's value broadcast from memory, masked
  by that lane's compare; float64: two, one per half of A), over 8 accumulators.

The tails (fewer than 16 coordinates left in a fiber) run a scalar branch-free merge.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from splyce.native.ir_text import IR

WIDTH = 16
COMPARES = ("conflict", "rotate", "broadcast", "broadcast8")
_VAL = {np.dtype(np.float64): ("double", 8), np.dtype(np.float32): ("float", 4)}


def _lanes(values) -> str:
    return ", ".join(f"i32 {v}" for v in values)


def _b_width(how: str) -> int:
    """B's coordinates per block: 8 for the ``broadcast8`` steps (16 of A x 8 of B), else 16."""
    return 8 if how.endswith("8") else WIDTH


def _prologue(ir: IR, name: str, ret: str, args: str, bw: int = WIDTH) -> None:
    """The entry block: %na16 / %nb16 = the lengths less one block, %e: both fibers hold a block."""
    ir(f"define {ret} @{name}({args}) {{")
    ir("entry:")
    ir("  %na16 = sub i64 %na, 16")
    ir(f"  %nb16 = sub i64 %nb, {bw}")
    ir("  %ea = icmp sge i64 %na16, 0")
    ir("  %eb = icmp sge i64 %nb16, 0")
    ir("  %e = and i1 %ea, %eb")


def _advance(ir: IR, bw: int = WIDTH) -> None:
    """%i2 / %j2 from %i / %j: past the block whose last coordinate is <= the other's (A's blocks 16 wide,
    B's ``bw``); %more: both have a block left."""
    ir("  %pal = getelementptr i32, ptr %a, i64 %i")
    ir("  %pal15 = getelementptr i32, ptr %pal, i64 15")
    ir("  %al = load i32, ptr %pal15")
    ir("  %pbl = getelementptr i32, ptr %b, i64 %j")
    ir(f"  %pbl15 = getelementptr i32, ptr %pbl, i64 {bw - 1}")
    ir("  %bl = load i32, ptr %pbl15")
    ir("  %lea = icmp ule i32 %al, %bl")
    ir("  %leb = icmp ule i32 %bl, %al")
    # select between i and i + 16, not i + select(16, 0) (setcc, shift, add: the loop-carried chain 2 cycles
    # longer): LLVM emits a cmov (the dot steps) or, where the cmov is the loop's critical path, a branch (the
    # count steps: x86's cmov conversion), both faster here than setcc + add (Sapphire Rapids, 2^20 fibers:
    # the dot 0.36 vs 0.62 ns per coordinate for broadcast8 float32, the count 0.34 vs 0.42)
    ir("  %ia = add i64 %i, 16")
    ir(f"  %jb = add i64 %j, {bw}")
    ir("  %i2 = select i1 %lea, i64 %ia, i64 %i")
    ir("  %j2 = select i1 %leb, i64 %jb, i64 %j")
    ir("  %ma = icmp sle i64 %i2, %na16")
    ir("  %mb = icmp sle i64 %j2, %nb16")
    ir("  %more = and i1 %ma, %mb")


def _quarter_shuffles():
    """(A lanes, B lanes) of the 4 quarters, as shufflevector masks over (A block, B block): 8 A lanes in
    lanes 0-7, 8 B lanes in 8-15 (lo/lo, hi/hi, lo/hi, hi/lo)."""
    out = []
    for qa, qb in ((0, 0), (8, 8), (0, 8), (8, 0)):
        out.append((qa, qb, [qa + k for k in range(8)] + [16 + qb + k for k in range(8)]))
    return out


def _matched_mask(ir: IR, how: str) -> str:
    """An i64 whose set bits are the matched pairs of this step (each pair once), from %va / %vb / %pbl."""
    if how == "conflict":
        parts = []
        for qa, qb, shuf in _quarter_shuffles():
            q, c, h, m, z = (ir.name(x) for x in ("q", "c", "h", "m", "z"))
            ir(f"  {q} = shufflevector <16 x i32> %va, <16 x i32> %vb, <16 x i32> <{_lanes(shuf)}>")
            ir(f"  {c} = call <16 x i32> @llvm.x86.avx512.conflict.d.512(<16 x i32> {q})")
            ir(f"  {h} = icmp ne <16 x i32> {c}, zeroinitializer")
            ir(f"  {m} = bitcast <16 x i1> {h} to i16")
            ir(f"  {z} = zext i16 {m} to i64")
            parts.append(z)
        out = parts[0]
        for k, part in enumerate(parts[1:], 1):
            s, o = ir.name("s"), ir.name("o")
            ir(f"  {s} = shl i64 {part}, {16 * k}")
            ir(f"  {o} = or i64 {out}, {s}")
            out = o
        return out
    eqs = []
    for r in range(_b_width(how)):
        if how == "rotate":
            rot, eq = ir.name("rot"), ir.name("eq")
            ir(f"  {rot} = shufflevector <16 x i32> %vb, <16 x i32> poison, "
               f"<16 x i32> <{_lanes((k + r) % WIDTH for k in range(WIDTH))}>")
            ir(f"  {eq} = icmp eq <16 x i32> %va, {rot}")
        else:
            eq = _broadcast_eq(ir, r)
        eqs.append(eq)
    while len(eqs) > 1:
        nxt = []
        for x, y in zip(eqs[0::2], eqs[1::2]):
            o = ir.name("or")
            ir(f"  {o} = or <16 x i1> {x}, {y}")
            nxt.append(o)
        eqs = nxt
    m, z = ir.name("m"), ir.name("z")
    ir(f"  {m} = bitcast <16 x i1> {eqs[0]} to i16")
    ir(f"  {z} = zext i16 {m} to i64")
    return z


def _scalar_compare(ir: IR) -> None:
    """The scalar merge's step head, shared by both tails: leave for ``done`` when a fiber is exhausted, else
    load a[%si], b[%sj] into %x / %y and compare them (%xle, %yle)."""
    ir("  %sa = icmp slt i64 %si, %na")
    ir("  %sb = icmp slt i64 %sj, %nb")
    ir("  %sc = and i1 %sa, %sb")
    ir("  br i1 %sc, label %sbody, label %done")
    ir("sbody:")
    ir("  %px = getelementptr i32, ptr %a, i64 %si")
    ir("  %x = load i32, ptr %px")
    ir("  %py = getelementptr i32, ptr %b, i64 %sj")
    ir("  %y = load i32, ptr %py")
    ir("  %xle = icmp ule i32 %x, %y")
    ir("  %yle = icmp ule i32 %y, %x")


def _scalar_advance(ir: IR) -> None:
    """The scalar merge's step end: each finger moves past its coordinate when it is <= the other's."""
    ir("  %dx = zext i1 %xle to i64")
    ir("  %dy = zext i1 %yle to i64")
    ir("  %si2 = add i64 %si, %dx")
    ir("  %sj2 = add i64 %sj, %dy")
    ir("  br label %scal")
    ir("done:")


def _scalar_tail(ir: IR, acc_t: str, acc0: str, body) -> None:
    """The branch-free scalar merge from %ti / %tj / %tacc to the end: ``body(ir, x, y, acc)`` -> new acc."""
    ir("tail:")
    ir(f"  %ti = phi i64 [0, %entry], [%i2, %loop]")
    ir(f"  %tj = phi i64 [0, %entry], [%j2, %loop]")
    ir(f"  %tacc = phi {acc_t} [{acc0}, %entry], [%accout, %loop]")
    ir("  br label %scal")
    ir("scal:")
    ir("  %si = phi i64 [%ti, %tail], [%si2, %sbody]")
    ir("  %sj = phi i64 [%tj, %tail], [%sj2, %sbody]")
    ir(f"  %sacc = phi {acc_t} [%tacc, %tail], [%sacc2, %sbody]")
    _scalar_compare(ir)
    ir("  %xeq = icmp eq i32 %x, %y")
    new = body(ir, "%xeq", acc_t)
    ir(f"  %sacc2 = select i1 %xeq, {acc_t} {new}, {acc_t} %sacc")
    _scalar_advance(ir)


def count_ir(how: str) -> str:
    """``i64 @count_<how>(ptr a, i64 na, ptr b, i64 nb)``: the number of common coordinates."""
    ir = IR()
    name = f"count_{how}"
    _prologue(ir, name, "i64", "ptr noalias %a, i64 %na, ptr noalias %b, i64 %nb", _b_width(how))
    ir("  br i1 %e, label %loop, label %tail")
    ir("loop:")
    ir("  %i = phi i64 [0, %entry], [%i2, %loop]")
    ir("  %j = phi i64 [0, %entry], [%j2, %loop]")
    ir("  %acc = phi i64 [0, %entry], [%accout, %loop]")
    _advance(ir, _b_width(how))
    ir("  %va = load <16 x i32>, ptr %pal, align 4")
    if how in ("conflict", "rotate"):
        ir("  %vb = load <16 x i32>, ptr %pbl, align 4")
    bits = _matched_mask(ir, how)
    ir(f"  %pc = call i64 @llvm.ctpop.i64(i64 {bits})")
    ir("  %accout = add i64 %acc, %pc")
    ir("  br i1 %more, label %loop, label %tail")
    def plus_one(ir, eq, t):
        ir("  %sinc = add i64 %sacc, 1")
        return "%sinc"

    _scalar_tail(ir, "i64", "0", plus_one)
    text = "\n".join(ir.lines) + "\n  ret i64 %sacc\n}\n"
    return text + "declare i64 @llvm.ctpop.i64(i64)\n" + \
        "declare <16 x i32> @llvm.x86.avx512.conflict.d.512(<16 x i32>)\n"


def _dot_tail(ir: IR, t: str) -> None:
    """The scalar merge of the tails, from %vi / %vj / %vsum (block ``tail``) to ``ret``."""
    ir("tail:")
    ir("  br label %scal")
    ir("scal:")
    ir("  %si = phi i64 [%vi, %tail], [%si2, %snext]")
    ir("  %sj = phi i64 [%vj, %tail], [%sj2, %snext]")
    ir(f"  %sacc = phi {t} [%vsum, %tail], [%sacc2, %snext]")
    _scalar_compare(ir)
    ir("  br i1 %xle, label %sle, label %snext")
    ir("sle:")
    ir("  br i1 %yle, label %smatch, label %snext")
    ir("smatch:")
    ir(f"  %pxv = getelementptr {t}, ptr %av, i64 %si")
    ir(f"  %xv = load {t}, ptr %pxv")
    ir(f"  %pyv = getelementptr {t}, ptr %bv, i64 %sj")
    ir(f"  %yv = load {t}, ptr %pyv")
    ir(f"  %prod = fmul {t} %xv, %yv")
    ir(f"  %sum = fadd {t} %sacc, %prod")
    ir("  br label %snext")
    ir("snext:")
    ir(f"  %sacc2 = phi {t} [%sacc, %sbody], [%sacc, %sle], [%sum, %smatch]")
    _scalar_advance(ir)
    ir(f"  ret {t} %sacc")
    ir("}")


DOTS = ("conflict", "broadcast", "broadcast8", "fma", "fma8")


def _conflict_values(ir: IR, t: str, vt: str, sfx: str, accs: list, bw: int) -> list:
    """The conflict dot step's value work (see ``dot_ir``): the new accumulators."""
    outs = [ir.name("nacc") for _ in accs]
    lanes = 8 if t == "double" else 16
    tables, bvals = {}, {}
    if t == "double":
        for half in (0, 8):
            for side, ptr, store in (("a", "%pav", tables), ("b", "%pbv", bvals)):
                p, v = ir.name("pv"), ir.name(f"v{side}")
                ir(f"  {p} = getelementptr {t}, ptr {ptr}, i64 {half}")
                ir(f"  {v} = load {vt}, ptr {p}, align 4")
                store[half] = v
    else:
        ir(f"  %avals = load {vt}, ptr %pav, align 4")
        ir(f"  %rev = shufflevector {vt} %avals, {vt} poison, <16 x i32> <{_lanes(range(15, -1, -1))}>")
        ir(f"  %bhi = load {vt}, ptr %pbv, align 4")
        ir(f"  %pblo = getelementptr {t}, ptr %pbv, i64 -8")
        mask = ", ".join(["i1 false"] * 8 + ["i1 true"] * 8)
        ir(f"  %blo = call {vt} @llvm.masked.load.{sfx}.p0(ptr %pblo, i32 4, <16 x i1> <{mask}>, "
           f"{vt} zeroinitializer)")
        bvals = {0: "%blo", 8: "%bhi"}
    conf = {}
    for qa, qb, shuf in _quarter_shuffles():
        qv, c = ir.name("q"), ir.name("c")
        ir(f"  {qv} = shufflevector <16 x i32> %va, <16 x i32> %vb, <16 x i32> <{_lanes(shuf)}>")
        ir(f"  {c} = call <16 x i32> @llvm.x86.avx512.conflict.d.512(<16 x i32> {qv})")
        conf[(qa, qb)] = c
    for q, qb in enumerate((0, 8)):
        # B's half qb against all 16 of A: the two quarters' conflict bits as one 16-bit one-hot (A's upper half
        # shifted up by 8), so that one lzcnt and one permute of A's 16 values serve both
        sh, both, h, lz, av, f = (ir.name(x) for x in ("sh", "both", "h", "lz", "pa", "f"))
        ir(f"  {sh} = shl <16 x i32> {conf[(8, qb)]}, <{_lanes([8] * 16)}>")
        ir(f"  {both} = or <16 x i32> {conf[(0, qb)]}, {sh}")
        ir(f"  {h} = icmp ne <16 x i32> {both}, zeroinitializer")
        ir(f"  {lz} = call <16 x i32> @llvm.ctlz.v16i32(<16 x i32> {both}, i1 false)")
        if t == "float":    # low 4 bits of lzcnt: 15 - A lane, into A's values reversed
            ir(f"  {av} = call {vt} @llvm.x86.avx512.permvar.sf.512({vt} %rev, <16 x i32> {lz})")
            hit = h
        else:               # NOT lzcnt: the A lane; B's 8 lanes spread to qwords (permutes read 4 low bits)
            idx, spread, wide, hit = ir.name("idx"), ir.name("spread"), ir.name("wide"), ir.name("hit")
            ir(f"  {idx} = xor <16 x i32> {lz}, <{_lanes([-1] * 16)}>")
            ir(f"  {spread} = shufflevector <16 x i32> {idx}, <16 x i32> poison, <16 x i32> "
               f"<{_lanes(8 + k // 2 for k in range(16))}>")
            ir(f"  {wide} = bitcast <16 x i32> {spread} to <8 x i64>")
            ir(f"  {av} = call {vt} @llvm.x86.avx512.vpermi2var.pd.512({vt} {tables[0]}, <8 x i64> {wide}, "
               f"{vt} {tables[8]})")
            ir(f"  {hit} = shufflevector <16 x i1> {h}, <16 x i1> poison, <8 x i32> <{_lanes(range(8, 16))}>")
        ir(f"  {f} = call fast {vt} @llvm.fma.{sfx}({vt} {av}, {vt} {bvals[qb]}, {vt} {accs[q]})")
        ir(f"  {outs[q]} = select <{lanes} x i1> {hit}, {vt} {f}, {vt} {accs[q]}")
    return outs


def _broadcast_eq(ir: IR, r: int) -> str:
    """A's 16 coordinates == B's coordinate r (broadcast from memory, folded into the compare)."""
    p, s, ins, bc, eq = (ir.name(x) for x in ("p", "s", "ins", "bc", "eq"))
    ir(f"  {p} = getelementptr i32, ptr %pbl, i64 {r}")
    ir(f"  {s} = load i32, ptr {p}")
    ir(f"  {ins} = insertelement <16 x i32> poison, i32 {s}, i64 0")
    ir(f"  {bc} = shufflevector <16 x i32> {ins}, <16 x i32> poison, <16 x i32> zeroinitializer")
    ir(f"  {eq} = icmp eq <16 x i32> %va, {bc}")
    return eq


def _half_values(ir: IR, t: str, vt: str, ptr: str) -> list:
    """The block's 16 values of ``ptr`` as 2 x 8 (double) or 1 x 16 (float) vectors."""
    out = []
    for half in ((0, 8) if t == "double" else (0,)):
        p, v = ir.name("pv"), ir.name("v")
        ir(f"  {p} = getelementptr {t}, ptr {ptr}, i64 {half}")
        ir(f"  {v} = load {vt}, ptr {p}, align 4")
        out.append(v)
    return out


def _broadcast_values(ir: IR, t: str, vt: str, sfx: str, accs: list, bw: int) -> list:
    """The broadcast dot step: ``bw`` compares of A against B's coordinates broadcast, each match written into
    a per-A-lane index (B lane r as r - 16, 0 = none: 2 chains of masked moves of constants (LLVM: masked
    broadcasts from the constant pool), OR-ed; constants kept in registers instead, behind an opaque zero, were
    no faster: 0.49-0.73 vs 0.36-0.48 ns per coordinate for broadcast8 in one process, equal in another); the index's sign bits are A's matched lanes (``vpmovd2m``), its low bits B's lane: one permute of
    B's values per 8 (double) / 16 (float) A lanes and one masked FMA."""
    chains = []
    for lo in (0, bw // 2):
        idx = "zeroinitializer"
        for r in range(lo, lo + bw // 2):
            eq, nxt = _broadcast_eq(ir, r), ir.name("ix")
            ir(f"  {nxt} = select <16 x i1> {eq}, <16 x i32> <{_lanes([r - 16] * 16)}>, <16 x i32> {idx}")
            idx = nxt
        chains.append(idx)
    ir(f"  %idx = or <16 x i32> {chains[0]}, {chains[1]}")
    avals = _half_values(ir, t, vt, "%pav")
    if t == "float":
        ir(f"  %bload = load <{bw} x float>, ptr %pbv, align 4")
        ir(f"  %bvals = shufflevector <{bw} x float> %bload, <{bw} x float> poison, <16 x i32> "
           f"<{_lanes(k if k < bw else 'poison' for k in range(16))}>")
        ir("  %hit = icmp slt <16 x i32> %idx, zeroinitializer")
        ir(f"  %bsel = call {vt} @llvm.x86.avx512.permvar.sf.512({vt} %bvals, <16 x i32> %idx)")
        ir(f"  %f = call fast {vt} @llvm.fma.{sfx}({vt} {avals[0]}, {vt} %bsel, {vt} {accs[0]})")
        ir(f"  %out = select <16 x i1> %hit, {vt} %f, {vt} {accs[0]}")
        return ["%out"]
    bvals = _half_values(ir, t, vt, "%pbv")[:bw // 8]
    outs = []
    for q, lo in enumerate((0, 8)):
        half, wide, hit, bsel, f, out = (ir.name(x) for x in ("half", "wide", "hit", "bsel", "f", "nacc"))
        ir(f"  {half} = shufflevector <16 x i32> %idx, <16 x i32> poison, <8 x i32> <{_lanes(range(lo, lo + 8))}>")
        ir(f"  {wide} = sext <8 x i32> {half} to <8 x i64>")
        ir(f"  {hit} = icmp slt <8 x i64> {wide}, zeroinitializer")
        if bw == 8:
            ir(f"  {bsel} = call {vt} @llvm.x86.avx512.permvar.df.512({vt} {bvals[0]}, <8 x i64> {wide})")
        else:
            ir(f"  {bsel} = call {vt} @llvm.x86.avx512.vpermi2var.pd.512({vt} {bvals[0]}, <8 x i64> {wide}, "
               f"{vt} {bvals[1]})")
        ir(f"  {f} = call fast {vt} @llvm.fma.{sfx}({vt} {avals[q]}, {vt} {bsel}, {vt} {accs[q]})")
        ir(f"  {out} = select <8 x i1> {hit}, {vt} {f}, {vt} {accs[q]}")
        outs.append(out)
    return outs


FMA_ACCS = 8    # the masked-FMA steps' accumulators: 4-cycle FMAs, 16 per step, in chains of <= 2 (float)


def _fma_values(ir: IR, t: str, vt: str, sfx: str, accs: list, bw: int) -> list:
    """The masked-FMA dot step: per B lane r, A's values times B's value r broadcast from memory, masked to A's
    lanes equal to B's coordinate r (``bw`` compares, ``bw`` (float) / 2 ``bw`` (double) masked FMAs, spread
    over ``FMA_ACCS`` accumulators so that no chain of dependent FMAs is longer than the step)."""
    lanes = 8 if t == "double" else 16
    avals = _half_values(ir, t, vt, "%pav")
    per = len(accs) // len(avals)
    cur = list(accs)
    for r in range(bw):
        eq = _broadcast_eq(ir, r)
        p, s, ins, bc = ir.name("p"), ir.name("s"), ir.name("ins"), ir.name("bv")
        ir(f"  {p} = getelementptr {t}, ptr %pbv, i64 {r}")
        ir(f"  {s} = load {t}, ptr {p}")
        ir(f"  {ins} = insertelement {vt} poison, {t} {s}, i64 0")
        ir(f"  {bc} = shufflevector {vt} {ins}, {vt} poison, <{lanes} x i32> zeroinitializer")
        for h, av in enumerate(avals):
            k = per * h + r % per
            m, f, nxt = ir.name("m"), ir.name("f"), ir.name("a")
            ir(f"  {m} = shufflevector <16 x i1> {eq}, <16 x i1> poison, <{lanes} x i32> "
               f"<{_lanes(range(8 * h, 8 * h + lanes))}>")
            ir(f"  {f} = call fast {vt} @llvm.fma.{sfx}({vt} {av}, {vt} {bc}, {vt} {cur[k]})")
            ir(f"  {nxt} = select <{lanes} x i1> {m}, {vt} {f}, {vt} {cur[k]}")
            cur[k] = nxt
    return cur


def dot_ir(vtype, how: str = "conflict") -> str:
    """``T @dot(ptr a, ptr av, i64 na, ptr b, ptr bv, i64 nb)``: the sum of av[x] * bv[y] over a[x] == b[y],
    fast math, vector accumulators reduced after the block loop. ``how``:

    ``conflict``: per quarter, B's 8 lanes' conflict bits. float64: -> 8 qword indices (``vplzcntd``, a NOT,
    ``vpmovzxdq``) -> ``vpermpd`` of A's 8 values -> masked FMA. float32: all 16 lanes, no extraction:
    ``vplzcntd`` of the whole conflict vector indexes (low 4 bits: 15 - A lane) A's 16 values reversed
    (``vpermps``), B's values are loaded into lanes 8-15 (B's upper half as is, the lower half by a load masked
    to lanes 8-15 at 8 before it).
    ``broadcast``: ``_broadcast_values`` (16 compares, B's lane per A lane by masked moves, 1-2 permutes).
    ``fma``: ``_fma_values`` (16 compares, one masked FMA per B lane and A vector)."""
    if how not in DOTS:
        raise ValueError(f"unknown dot step {how!r}: one of {DOTS}")
    t, _size = _VAL[np.dtype(vtype)]
    lanes = 8 if t == "double" else 16
    vt = f"<{lanes} x {t}>"
    sfx = f"v{lanes}{'f64' if t == 'double' else 'f32'}"
    ir = IR()
    bw = _b_width(how)
    _prologue(ir, "dot", t, "ptr noalias %a, ptr noalias %av, i64 %na, ptr noalias %b, ptr noalias %bv, i64 %nb",
              bw)
    ir("  br i1 %e, label %loop, label %vdone")
    ir("loop:")
    ir("  %i = phi i64 [0, %entry], [%i2, %loop]")
    ir("  %j = phi i64 [0, %entry], [%j2, %loop]")
    nacc = FMA_ACCS if how.startswith("fma") else 1 if how.startswith("broadcast") and t == "float" else 2
    accs = [f"%acc{q}" for q in range(nacc)]
    at = len(ir.lines)
    _advance(ir, bw)
    ir("  %va = load <16 x i32>, ptr %pal, align 4")
    if how == "conflict":
        ir("  %vb = load <16 x i32>, ptr %pbl, align 4")
    ir(f"  %pav = getelementptr {t}, ptr %av, i64 %i")
    ir(f"  %pbv = getelementptr {t}, ptr %bv, i64 %j")
    step = {"conflict": _conflict_values, "fma": _fma_values, "fma8": _fma_values}.get(how, _broadcast_values)
    outs = step(ir, t, vt, sfx, accs, bw)
    ir.lines[at:at] = [f"  {acc} = phi {vt} [zeroinitializer, %entry], [{out}, %loop]"
                       for acc, out in zip(accs, outs)]
    ir("  br i1 %more, label %loop, label %vdone")
    ir("vdone:")
    ir("  %vi = phi i64 [0, %entry], [%i2, %loop]")
    ir("  %vj = phi i64 [0, %entry], [%j2, %loop]")
    for q, out in enumerate(outs):
        ir(f"  %fin{q} = phi {vt} [zeroinitializer, %entry], [{out}, %loop]")
    total = "%fin0"
    for q in range(1, nacc):
        s = ir.name("s")
        ir(f"  {s} = fadd fast {vt} {total}, %fin{q}")
        total = s
    ir(f"  %vsum = call fast {t} @llvm.vector.reduce.fadd.{sfx}({t} 0.0, {vt} {total})")
    ir("  br label %tail")
    _dot_tail(ir, t)
    decl = [
        "declare <16 x i32> @llvm.x86.avx512.conflict.d.512(<16 x i32>)",
        "declare <8 x i32> @llvm.ctlz.v8i32(<8 x i32>, i1)",
        "declare <16 x i32> @llvm.ctlz.v16i32(<16 x i32>, i1)",
        f"declare {vt} @llvm.fma.{sfx}({vt}, {vt}, {vt})",
        f"declare {t} @llvm.vector.reduce.fadd.{sfx}({t}, {vt})",
        "declare <8 x double> @llvm.x86.avx512.vpermi2var.pd.512(<8 x double>, <8 x i64>, <8 x double>)",
        "declare <16 x float> @llvm.x86.avx512.permvar.sf.512(<16 x float>, <16 x i32>)",
        "declare <8 x double> @llvm.x86.avx512.permvar.df.512(<8 x double>, <8 x i64>)",
        "declare <16 x float> @llvm.masked.load.v16f32.p0(ptr, i32, <16 x i1>, <16 x float>)",
    ]
    return "\n".join(ir.lines) + "\n" + "\n".join(decl) + "\n"


_COUNT_SIG = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)


@functools.cache
def available() -> bool:
    """The kernels need AVX-512 F + CD (conflict) + VL on the host."""
    from splyce.native.codegen import host_target

    features = set(host_target().features.split(","))
    return {"+avx512f", "+avx512cd", "+avx512vl"} <= features


@functools.cache
def count_kernel(how: str):
    from splyce.native.codegen import compile_host_helpers

    if how not in COMPARES:
        raise ValueError(f"unknown compare {how!r}: one of {COMPARES}")
    return compile_host_helpers(count_ir(how), {f"count_{how}": _COUNT_SIG})[f"count_{how}"]


@functools.cache
def dot_kernel(vtype, how: str = "conflict"):
    from splyce.native.codegen import compile_host_helpers

    ct = ctypes.c_double if np.dtype(vtype) == np.float64 else ctypes.c_float
    sig = ctypes.CFUNCTYPE(ct, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_int64)
    return compile_host_helpers(dot_ir(vtype, how), {"dot": sig})["dot"]


def _check(crd: np.ndarray, values: np.ndarray | None = None) -> None:
    if not available():
        raise RuntimeError("intersect_step: this CPU lacks AVX-512 F / CD / VL (the kernels use vpconflictd)")
    if crd.dtype != np.int32 or not crd.flags.c_contiguous:
        raise TypeError("intersect_step: contiguous int32 coordinates only")
    if values is not None and (values.shape != crd.shape or not values.flags.c_contiguous
                               or np.dtype(values.dtype) not in _VAL):
        raise TypeError("intersect_step: contiguous float32 / float64 values of the coordinates' length")


def count(a: np.ndarray, b: np.ndarray, how: str = "conflict") -> int:
    """The number of coordinates two sorted, duplicate-free, non-negative int32 fibers share."""
    _check(a)
    _check(b)
    return int(count_kernel(how)(a.ctypes.data, a.size, b.ctypes.data, b.size))


def dot(a: np.ndarray, av: np.ndarray, b: np.ndarray, bv: np.ndarray, how: str = "conflict") -> float:
    """The sparse dot of two sorted, duplicate-free, non-negative int32 fibers (fast math: any order)."""
    _check(a, av)
    _check(b, bv)
    if av.dtype != bv.dtype:
        raise TypeError("intersect_step.dot: both fibers' values of one dtype")
    if how not in DOTS:
        raise ValueError(f"unknown dot step {how!r}: one of {DOTS}")
    fn = dot_kernel(av.dtype.type, how)
    return float(fn(a.ctypes.data, av.ctypes.data, a.size, b.ctypes.data, bv.ctypes.data, b.size))


def step_asm(how: str, target: str = "avx512", vtype=None) -> str:
    """The count kernel's (``vtype`` None) or the ``vtype`` dot kernel's machine code for ``target``
    (``codegen.resolve_target``; to check which instructions the step uses: any host can emit it)."""
    from splyce.native.codegen import CodegenOptions, emit_assembly, optimize, resolve_target

    text = count_ir(how) if vtype is None else dot_ir(vtype, how)
    module, tm = optimize(text, resolve_target(target), CodegenOptions(opt_level=3))
    return emit_assembly(module, tm)
