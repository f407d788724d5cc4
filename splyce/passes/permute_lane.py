"""The fast-math all-pairs lane with the other operand's float64 values permuted by an index, for AVX2 targets
(issue 36, measured on AMD Zen 1).

The all-pairs lane of n = 4 (``fast_lane``) compares B's 4 coordinates against C's rotated by 0..3 lanes and
brings C's values into B's lanes the same way: per rotation a permute of C's 4 doubles (``vpermpd``), the
compare's mask sign-extended to 64 bits (``vpmovsxdq``) and a blend (``vblendvpd``): 9 ymm instructions on the
value path of every step, on Zen 1 (256-bit ops split in two) the larger part of the loop's work. This lane
builds, from the same compares, the C lane matched by each B lane as an index instead: ``(i + r) % 4 - 4``
under rotation r's mask, AND-ed and OR-ed in 4 x i32 (xmm; negative: matched, the low 2 bits: C's lane), spread
to the dword pairs of the doubles and applied by one ``vpermd`` (``llvm.x86.avx2.permd``; no ``vector`` dialect
op permutes by a vector of indices). Unmatched lanes get some C value; the vector accumulators' masked add
(``fast_lane``'s phase 2) never reads it. Phases 2 and 3 are the all-pairs lane's.

Built for ``fast_math`` two-finger sums without stores (``permute_blocker``: vector accumulators, n = 4,
phase 1 in SIMD), int32 coordinates and the other operand's values float64, on targets with AVX2 and without
AVX-512 F (the conflict and broadcast lanes' targets, where this was not measured). Measured on Zen 1
(docs/passes.md, "AMD Zen 1"): 1.12-1.17x the rotations on ``bench limit``'s f64 pairs. float32 values keep the
rotations (one ``vpermilps`` instead of three in-lane shuffles and blends: no faster), and so do int64
coordinates (their masks are 4 x i64: 1.03-1.06x slower with the index).
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, llvm, vector

from splyce.options import Options, has_features
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.fast_lane import FastLaneBuilder, Lanes, _vtype, sum_lane_blocker

WIDTH = 4
PERMUTE_FEATURES = ("+avx2",)
AVX512 = ("+avx512f",)
PERMD = "llvm.x86.avx2.permd"


def has_permute_lane_target(target) -> bool:
    """Whether ``target`` gets the permute lane: AVX2 without AVX-512 F."""
    return target is not None and has_features(target, PERMUTE_FEATURES) and not has_features(target, AVX512)


def permute_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the permute lane is not built for ``match`` (then the all-pairs lane is), or None."""
    if not options.simd_compare:
        return "phase 1 is scalar"
    blocker = sum_lane_blocker(match, options, builder, WIDTH)
    if blocker:
        return blocker
    others = [ll for ll in match.lane_loads.values() if ll.side == 1]
    if not others:
        return "no values of the other operand"
    for ll in others:
        et = ir.MemRefType(ll.memref.type).element_type
        if not (isinstance(et, ir.FloatType) and et.width == 64):
            return f"the other operand's values are {et}, not f64"
    if not has_permute_lane_target(options.target):
        return "the target has no AVX2, or has AVX-512 F"
    return None


def _const(vt: ir.VectorType, values) -> ir.Value:
    return arith.constant(vt, ir.DenseElementsAttr.get(np.array(values, dtype=np.int32), type=vt))


class PermuteLaneBuilder(FastLaneBuilder):
    """``FastLaneBuilder`` with C's values brought to B's lanes by one ``vpermd`` (``permute_blocker`` must have
    said None)."""

    def _phase1(self, cursors):
        st = super()._phase1(cursors)   # the rotated values it builds for C are left unused (removed by LLVM)
        n = self.n
        i32 = ir.IntegerType.get_signless(32)
        vt, v8 = _vtype(n, i32), _vtype(2 * n, i32)
        index = None
        for r, mask in enumerate(st["masks"][1]):   # rotation r: B lane i met C lane (i + r) % n
            part = arith.andi(arith.extsi(vt, mask), _const(vt, [(i + r) % n - n for i in range(n)]))
            index = part if index is None else arith.ori(index, part)
        # double k of C is dwords 2k, 2k + 1: B lane i reads dwords 2c, 2c + 1 (vpermd reads the low 3 bits)
        spread = vector.shuffle(index, index, [k // 2 for k in range(2 * n)])
        pairs = arith.ori(arith.addi(spread, spread), _const(v8, [0, 1] * n))
        for (mem, side) in list(st["values"]):
            if side != 1:
                continue
            vf = _vtype(n, ir.MemRefType(mem.type).element_type)
            words = vector.bitcast(v8, vector.load(vf, mem, [cursors[1]]))
            permuted = llvm.call_intrinsic(v8, PERMD, [words, pairs], [], [])
            st["values"][(mem, side)] = Lanes(n, vec=vector.bitcast(vf, permuted))
        return st
