"""The fast-math 16 x 16 lane with broadcast compares, for AVX-512 targets without ``vpconflictd`` (issue 36).

``bench/intersect_step.py`` measured on an Intel Sapphire-Rapids-class Xeon, where ``vpconflictd`` is slow
(~1.5 ns per coordinate for the conflict step), that the fastest step compares B's 16 coordinates against each
of C's 16 broadcast (16 ``vpcmpeqd`` with a ``{1to16}`` memory operand) and writes C's lane into an index per
B lane (a masked move of the constant ``r - 16`` per compare): the index's sign bits are B's matched lanes
(``vpmovd2m``), its low 4 bits C's lane, which the permutes of C's values read as the conflict lane's
``31 - ctlz`` (``ConflictLaneBuilder._permuted``). Phase 2 and the block advance are the conflict lane's.

Built where the conflict lane would be (``conflict_lane.conflict_blocker``'s conditions: ``fast_math``,
``vector_width=16``, two fingers summing, int32 coordinates, f32 / f64 values) on a target with AVX-512 F,
BW and DQ but without CD: the switch is the target (a ``Target`` whose features say ``-avx512cd``). On a target
with CD the conflict lane is built, as before.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, vector

from splyce.options import CONFLICT_FEATURES, Options, has_features
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.conflict_lane import HALF, NO_CONFLICT, WIDTH, ConflictLaneBuilder, conflict_blocker
from splyce.passes.fast_lane import FastLaneBuilder, _index, _vtype
from splyce.passes.ir_utils import CMPI_EQ

BROADCAST_FEATURES = ("+avx512f", "+avx512bw", "+avx512dq")
CMPI_SLT = 2


def broadcast_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the broadcast lane is not built for ``match``, or None: the conflict lane's conditions, but a target
    with AVX-512 F / BW / DQ and without CD."""
    blocker = conflict_blocker(match, options, builder)
    if blocker != NO_CONFLICT:
        return blocker or "the target has AVX-512 CD: the conflict lane"
    if options.target is None or not has_features(options.target, BROADCAST_FEATURES):
        return "the target has no AVX-512 F / BW / DQ"
    return None


def has_broadcast_lane_target(target) -> bool:
    """Whether ``target`` gets the broadcast lane (not the conflict lane) for width-16 fast_math sums."""
    return target is not None and has_features(target, BROADCAST_FEATURES) and \
        not has_features(target, CONFLICT_FEATURES)


def _splat(vt: ir.VectorType, value: int):
    return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.IntegerAttr.get(vt.element_type, value)))


class BroadcastLaneBuilder(ConflictLaneBuilder):
    """``ConflictLaneBuilder`` with phase 1 by 16 broadcast compares (``broadcast_blocker`` must have said
    None)."""

    def _phase1(self, cursors):
        m = self.m
        vt = _vtype(WIDTH, m.crd_type)
        kb = vector.load(vt, m.crd_memrefs[0], [cursors[0]])
        kc = vector.load(vt, m.crd_memrefs[1], [cursors[1]])
        # B lane i: r - 16 when C's coordinate r equals it (at most one r: coordinates are distinct), else 0;
        # two chains of 8 masked moves, OR-ed (one of the two is 0 in every lane)
        chains = []
        for lo in (0, HALF):
            idx = _splat(vt, 0)
            for r in range(lo, lo + HALF):
                c = memref.load(m.crd_memrefs[1], [arith.addi(cursors[1], _index(r))])
                eq = arith.cmpi(CMPI_EQ, kb, vector.broadcast(vt, c))
                idx = arith.select(eq, _splat(vt, r - WIDTH), idx)
            chains.append(idx)
        lane_of = arith.ori(chains[0], chains[1])
        matched = arith.cmpi(CMPI_SLT, lane_of, _splat(vt, 0))   # the permutes read the low 4 bits: r
        return self._block_state(cursors, kb, kc, matched, lane_of)
