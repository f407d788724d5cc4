"""The fast-math 16 x 8 lane with broadcast compares, for AVX-512 targets without ``vpconflictd`` (issue 36).

``bench/intersect_step.py`` measured on an Intel Sapphire-Rapids-class Xeon, where ``vpconflictd`` is slow
(~1.5 ns per coordinate for the conflict step), that the fastest dot step compares B's 16 coordinates against
each of C's next 8 broadcast (8 ``vpcmpeqd`` with a ``{1to16}`` memory operand) and writes C's lane into an
index per B lane (a masked move of the constant ``r - 16`` per compare): the index's sign bits are B's matched
lanes (``vpmovd2m``), its low 4 bits C's lane, which the permutes of C's values read as they read the conflict
lane's ``31 - ctlz`` (``ConflictLaneBuilder._permuted``). Phase 2 is the conflict lane's; the block advance
moves B by 16 and C by 8, each new cursor a select of the advanced cursor or the cursor (a ``cmov``).

Built where the conflict lane would be (``conflict_lane.conflict_blocker``'s conditions: ``fast_math``,
``vector_width=16``, two fingers summing, int32 coordinates, f32 / f64 values) on a target with AVX-512 F,
BW and DQ but without CD: the switch is the target (a ``Target`` whose features say ``-avx512cd``; no named
target or ``Options`` field selects it on a CPU with CD). On a target with CD the conflict lane is built, as
before. Measured on Sapphire Rapids it is not faster than the all-pairs lane at n = 8 (docs/passes.md,
"Intel Sapphire Rapids"), so no width choice names it.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, vector

from splyce.options import CONFLICT_FEATURES, Options, has_features
from splyce.passes.coiteration_match import Coiteration
from splyce.passes.conflict_lane import NO_CONFLICT, WIDTH, ConflictLaneBuilder, conflict_blocker
from splyce.passes.fast_lane import FastLaneBuilder, _index, _vtype
from splyce.passes.ir_utils import CMPI_EQ, CMPI_ULE, int_splat

BROADCAST_FEATURES = ("+avx512f", "+avx512bw", "+avx512dq")
CMPI_SLT = 2
C_BLOCK = 8     # C's coordinates per step: 16 of B x 8 of C (measured faster than 16 x 16 on Sapphire Rapids)


def broadcast_blocker(match: Coiteration, options: Options, builder: FastLaneBuilder) -> str | None:
    """Why the broadcast lane is not built for ``match``, or None: the conflict lane's conditions, but a target
    with AVX-512 F / BW / DQ and without CD."""
    blocker = conflict_blocker(match, options, builder)
    if blocker != NO_CONFLICT:
        return blocker or "the target has AVX-512 CD: the conflict lane"
    if ir.IntegerType(match.crd_type).width != 32:   # conflict_blocker passed it: int32 or int64
        return "int32 coordinates only"
    if options.target is None or not has_features(options.target, BROADCAST_FEATURES):
        return "the target has no AVX-512 F / BW / DQ"
    return None


def has_broadcast_lane_target(target) -> bool:
    """Whether ``target`` gets the broadcast lane (not the conflict lane) for width-16 fast_math sums."""
    return target is not None and has_features(target, BROADCAST_FEATURES) and \
        not has_features(target, CONFLICT_FEATURES)


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
        for lo in (0, C_BLOCK // 2):
            idx = int_splat(vt, 0)
            for r in range(lo, lo + C_BLOCK // 2):
                c = memref.load(m.crd_memrefs[1], [arith.addi(cursors[1], _index(r))])
                eq = arith.cmpi(CMPI_EQ, kb, vector.broadcast(vt, c))
                idx = arith.select(eq, int_splat(vt, r - WIDTH), idx)
            chains.append(idx)
        lane_of = arith.ori(chains[0], chains[1])
        matched = arith.cmpi(CMPI_SLT, lane_of, int_splat(vt, 0))   # the permutes read the low 4 bits: r
        return self._block_state(cursors, kb, kc, matched, lane_of, C_BLOCK)

    def _phase3(self, st):
        """Block advance: B moves past its 16 coordinates when its last one is <= C's block's last, C past its
        ``C_BLOCK`` when its last is <= B's."""
        lb, lc = st["lasts"]
        none = _index(0)
        self._moves = [arith.cmpi(CMPI_ULE, lb, lc), arith.cmpi(CMPI_ULE, lc, lb)]
        return [arith.select(self._moves[0], _index(WIDTH), none),
                arith.select(self._moves[1], _index(C_BLOCK), none)]

    def _body(self, args):
        """The lane's body, with each new cursor a select of ``cursor + block`` or ``cursor`` (LLVM: a cmov, or
        a branch) rather than ``cursor + select(block, 0)`` (setcc, shift, add: 2 more cycles on the
        loop-carried chain; the bench step ran 1.7x faster with the select on Sapphire Rapids)."""
        out = super()._body(args)
        for pos, move, block in zip(self.m.cursor_pos, self._moves, (WIDTH, C_BLOCK)):
            cursor = args[pos]
            out[pos] = arith.select(move, arith.addi(cursor, _index(block)), cursor)
        return out
