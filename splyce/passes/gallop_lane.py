"""Skew-aware intersection: galloping when one fiber is much longer than the other (two fibers), and
leapfrogging when the longest is much longer than the shortest (three or four fibers: ``add_leapfrog``).

The all-pairs fast lane consumes at most n coordinates of each operand per step, so when the fibers'
remaining lengths differ by a large ratio it walks the long fiber n coordinates at a time while the short
one barely moves. Galloping (exponential then binary search of the short side's next coordinate in the
long side; Demaine et al., Lemire et al.) costs O(log ratio) per short coordinate instead.

The choice is made at run time, once per fiber pair, from the lengths ``lenB = hiB - pb`` and
``lenC = hiC - pc`` on entry:

- when ``max(lenB, lenC) < skew_threshold(R, short)``, ``short = min(lenB, lenC)`` (comparable lengths: R is
  the ``gallop`` option, the ratio from which short fibers of fewer than 8 coordinates gallop; longer pairs
  need more), the fast lane and the scalar loop (the sparsifier's own ``scf.while``, the fast
  lane's epilogue) run exactly as without galloping;
- otherwise a copy of the scalar loop runs alone and, after each step, jumps the long side's cursor to the
  first coordinate ``>=`` the short side's current one. The coordinates skipped are exactly those the
  scalar loop would step over one at a time without a match, so the matched pairs, their order and every
  accumulation are unchanged: results are bit-identical to the plain sparsifier. Before that copy runs,
  the first lines of the long fiber's coordinates are prefetched (``_prefetch_long_fiber``): the searches'
  probes are dependent loads, each of which would otherwise wait for its line from memory in turn.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from mlir import ir
from mlir.dialects import arith, func, llvm, math, memref, scf, vector

from splyce.passes.coiteration_match import Coiteration
from splyce.passes.fast_lane import FastLaneBuilder, _apply_chain, _index, _tree, _vtype
from splyce.passes.ir_utils import CMPI_UGE, CMPI_UGT, CMPI_ULE, CMPI_ULT

WINDOW = 8  # positions counted branchlessly at the end of a search
# A galloping search first probes the last coordinate of each of the next cache lines in turn (their addresses do
# not depend on the loads: the core and the hardware prefetcher run ahead; one mispredicted exit), then doubles its
# step. How many lines, per skewed pair from its lengths: SCAN_SPAN x the expected gap (long / short coordinates),
# at most SCAN_LINES; none from a length ratio of SCAN_MAX_RATIO on, where the scan measured slower than the
# exponential search alone (docs/passes.md, "Galloping: a line scan sized per pair").
SCAN_LINES = 64
SCAN_SPAN = 2
SCAN_MAX_RATIO = 1024
LINE_BYTES = 64
# The scan as its own loop (one load, compare and branch a line) and, where it stops inside a line, the position
# counted by one vector compare of that line against the key (``_line_scan``); False: the scan as the first
# probes of the exponential search, then its binary search and window count (the lane before 2026-12-08).
VECTOR_SCAN = True
# Each line-scan probe also prefetches the coordinates SCAN_PREFETCH lines ahead (0: none; VECTOR_SCAN only):
# the scan's lines come from L3 or memory one after another and the exit mispredicts at every search, so the
# hardware prefetcher alone kept the scan waiting (docs/passes.md, "The line scan as its own loop").
SCAN_PREFETCH = 16
# Prefetching: when the long fiber has at least LINES_PER_SHORT cache lines of coordinates per short-side
# coordinate, its first min(PREFETCH_LINES, LINES_PER_SHORT x short length) lines (docs/passes.md,
# "Prefetching the long fiber": measured against 32, 128 and 256 lines, 2 per short coordinate, no gap test).
PREFETCH_LINES = 64
LINES_PER_SHORT = 4
PREFETCH_FUNCTION_PREFIX = "_splyce_prefetch_"  # prefetches only: calls to it write nothing
GALLOP_COUNTER_SLOT = 2  # profile counters: [fast lane, epilogue, galloping skips]
# The length ratio from which galloping wins grows with the short fiber's length from 8 coordinates (two
# lane steps) up to ~4K (docs/passes.md, "Threshold": crossover table by docs/scripts/gallop_crossover.py):
# gallop when long >= (R + LOG_SLOPE * L) * short, L = min(floor(log2(short)), LOG_CAP) from floor(log2(short))
# >= LOG_FROM on, else 0. With R alone, 1:16 pairs of 64K : 1M coordinates galloped at 0.49-0.78x the fast
# lane; with the log below 8 coordinates too, 4 : 64 pairs ran the lane at 1.8x galloping's time.
LOG_SLOPE = 2
LOG_CAP = 12
LOG_FROM = 3
# Pairs that run a conflict lane when they do not gallop (strict: every int32 pair, int64 ones of ratio >= 6;
# fast_math: the 16 x 16 / 8 x 8 lane) walk a long fiber at 0.35-0.5 ns per coordinate, 2-3x the all-pairs lane
# the rule above was measured against, so they gallop later: CONFLICT_SLOPE x (L - CONFLICT_FROM + 1) more, from
# short fibers of 2^CONFLICT_FROM (one block) on (docs/passes.md, "Galloping against the conflict lanes").
CONFLICT_SLOPE = 8
CONFLICT_FROM = 4


def _coordinate(match: Coiteration, crd, position):
    """crd[position] as the index the sparsifier's loop compares."""
    return _apply_chain(match.cast_chain, memref.load(crd, [position]))[-1]


def _line_scan(match: Coiteration, crd, lo, hi, key, raw_key, scan):
    """``_lower_bound`` with a line scan: while a whole cache line of coordinates lies in ``[a, hi)``, the budget
    ``scan`` is not spent and the line's last coordinate is below ``key``, move ``a`` one line (a loop of one
    load, compare and branch a line, and a prefetch ``SCAN_PREFETCH`` lines ahead; the loads' addresses do not
    depend on their values). When the scan stops
    on a line holding the answer, the answer is ``a`` plus the count of that line's coordinates below the key
    (one vector compare against ``raw_key``, the key as a raw coordinate, and a popcount: no search, no
    branch); otherwise (budget spent, or fewer than a line left) ``_lower_bound``'s search from ``a``."""
    idx = ir.IndexType.get()
    per = _per_line(match)
    line = _index(per)
    scanning = scf.WhileOp([idx, idx], [lo, _index(0)])
    before = scanning.before.blocks.append(idx, idx)
    with ir.InsertionPoint(before):
        a, probes = before.arguments
        end = arith.addi(a, line)
        room = arith.andi(arith.cmpi(CMPI_ULE, end, hi), arith.cmpi(CMPI_ULT, probes, scan))
        probe = arith.select(room, arith.subi(end, _index(1)), lo)  # an in-bounds load either way
        below = arith.cmpi(CMPI_ULT, _coordinate(match, crd, probe), key)
        scf.condition(arith.andi(room, below), [a, probes])
    after = scanning.after.blocks.append(idx, idx)
    with ir.InsertionPoint(after):
        a, probes = after.arguments
        if SCAN_PREFETCH:
            # Not clamped to the fiber: the lowering's address arithmetic has no inbounds flag (a pointer past the
            # buffer is defined) and prefetcht0 never faults; the clamp (a min per probe) cost the gain (15 %)
            memref.prefetch(crd, [arith.addi(a, _index(SCAN_PREFETCH * per))], False, 3, True)
        scf.yield_([arith.addi(a, line), arith.addi(probes, _index(1))])
    a = scanning.results[0]
    end = arith.addi(a, line)
    whole = arith.cmpi(CMPI_ULE, end, hi)
    probe = arith.select(whole, arith.subi(end, _index(1)), lo)
    inside = arith.andi(whole, arith.cmpi(CMPI_UGE, _coordinate(match, crd, probe), key))
    found = scf.IfOp(inside, [idx], has_else=True)
    with ir.InsertionPoint(found.then_block):
        et = ir.MemRefType(crd.type).element_type
        keys = vector.load(_vtype(per, et), crd, [a])
        splat = vector.broadcast(_vtype(per, et), raw_key)
        mask = arith.cmpi(CMPI_ULT, keys, splat)
        bits = vector.bitcast(_vtype(1, ir.IntegerType.get_signless(per)), mask)
        word = vector.extract(bits, [], [0])
        count = arith.index_castui(idx, math.ctpop(word))
        scf.yield_([arith.addi(a, count)])
    with ir.InsertionPoint(found.else_block):
        rest = scf.IfOp(arith.cmpi(CMPI_ULT, a, hi), [idx], has_else=True)
        with ir.InsertionPoint(rest.then_block):
            scf.yield_([_lower_bound(match, crd, a, hi, key)])
        with ir.InsertionPoint(rest.else_block):
            scf.yield_([hi])
        scf.yield_(list(rest.results))
    return found.results[0]


def _vector_scan_ok(match: Coiteration) -> bool:
    """Whether both fibers' coordinates are one integer type (the raw key compares with the long fiber's lines)."""
    types = {str(ir.MemRefType(crd.type).element_type) for crd in match.crd_memrefs}
    return VECTOR_SCAN and len(types) == 1 and isinstance(ir.MemRefType(match.crd_memrefs[0].type).element_type,
                                                          ir.IntegerType)


def _lower_bound(match: Coiteration, crd, lo, hi, key, scan=None):
    """The first position p in [lo, hi) with crd[p] >= key, else hi (requires lo < hi). An exponential
    search over blocks of WINDOW coordinates (probing each block's last coordinate) brackets it, a binary
    search narrows the bracket to at most WINDOW positions, and a branchless count of the coordinates
    below ``key`` in that window finishes: few dependent loads and one loop exit per search. ``scan`` (an
    index value, galloping's ``_scan_probes``): the bracket's step is first one cache line of coordinates for
    that many probes (a line scan: the probes' addresses do not depend on the loads, so they overlap), then
    doubles; None or 0: the exponential search from a step of WINDOW."""
    idx = ir.IndexType.get()
    one, window = _index(1), _index(WINDOW)
    last = arith.subi(hi, one)
    if scan is None:
        scan = _index(0)
    first = arith.select(arith.cmpi(CMPI_UGT, scan, _index(0)), _index(_per_line(match)), window)
    # [position, step, probes]: the step stays one line for ``scan`` probes, then doubles
    expo = scf.WhileOp([idx, idx, idx], [lo, first, _index(0)])
    before = expo.before.blocks.append(idx, idx, idx)
    with ir.InsertionPoint(before):
        a, step, probes = before.arguments
        end = arith.addi(a, step)
        inside = arith.cmpi(CMPI_ULE, end, hi)
        probe = arith.select(inside, arith.subi(end, one), last)  # an in-bounds load either way
        below = arith.cmpi(CMPI_ULT, _coordinate(match, crd, probe), key)
        scf.condition(arith.andi(inside, below), [a, step, probes])
    after = expo.after.blocks.append(idx, idx, idx)
    with ir.InsertionPoint(after):
        a, step, probes = after.arguments
        doubled = arith.select(arith.cmpi(CMPI_ULT, probes, scan), step, arith.shli(step, one))
        scf.yield_([arith.addi(a, step), doubled, arith.addi(probes, one)])
    a, step, _ = expo.results
    end = arith.addi(a, step)
    end = arith.select(arith.cmpi(CMPI_ULT, end, hi), end, hi)
    search = scf.WhileOp([idx, idx], [a, end])
    before = search.before.blocks.append(idx, idx)
    with ir.InsertionPoint(before):
        lo_, hi_ = before.arguments
        scf.condition(arith.cmpi(CMPI_UGT, arith.subi(hi_, lo_), window), [lo_, hi_])
    after = search.after.blocks.append(idx, idx)
    with ir.InsertionPoint(after):
        lo_, hi_ = after.arguments
        mid = arith.shrui(arith.addi(lo_, hi_), one)
        below = arith.cmpi(CMPI_ULT, _coordinate(match, crd, mid), key)
        scf.yield_([arith.select(below, arith.addi(mid, one), lo_), arith.select(below, hi_, mid)])
    lo_, hi_ = search.results
    count = []
    for i in range(WINDOW):
        at = arith.addi(lo_, _index(i)) if i else lo_
        inside = arith.cmpi(CMPI_ULT, at, hi_)
        safe = arith.select(inside, at, last)
        below = arith.andi(inside, arith.cmpi(CMPI_ULT, _coordinate(match, crd, safe), key))
        count.append(arith.index_castui(idx, below))
    while len(count) > 1:
        count = [arith.addi(count[i], count[i + 1]) for i in range(0, len(count), 2)]
    return arith.addi(lo_, count[0])


def _per_line(match: Coiteration) -> int:
    """Coordinates per 64-byte cache line."""
    t = match.crd_type
    width = ir.IntegerType(t).width if isinstance(t, ir.IntegerType) else 64
    return LINE_BYTES * 8 // width


def _prefetch_lines(match: Coiteration, crd, lo, short_len) -> None:
    """Prefetch (read, all cache levels) crd[lo:] one line at a time, min(PREFETCH_LINES, LINES_PER_SHORT *
    short_len) lines (in bounds: the caller checked the fiber holds that many): all independent, so their
    misses overlap, where the searches' probes are dependent loads that would each wait for their line."""
    per = _per_line(match)
    span = arith.minui(_index(per * PREFETCH_LINES), arith.muli(short_len, _index(per * LINES_PER_SHORT)))
    func.CallOp([], ir.FlatSymbolRefAttr.get(_prefetch_function(crd, per)), [crd, lo, arith.addi(lo, span)])


def _prefetch_loop(crd, lo, end, per: int) -> None:
    loop = scf.ForOp(lo, end, _index(per))
    with ir.InsertionPoint(loop.body):
        memref.prefetch(crd, [loop.induction_variable], False, 3, True)
        scf.yield_([])


def _prefetch_function(crd, per: int) -> str:
    """A private, never-inlined function prefetching crd[lo:end] every ``per`` positions (one per crd memref
    type), called from the galloping branch: with the loop inline there, the comparable pairs' fast lane,
    whose instructions are unchanged, moved in the code and K1 (uniform, no skewed pair) ran 0.95-0.97x;
    with the call, 1.00x (and with innermost loops 64-byte aligned, both 1.00x: placement, not work)."""
    op = ir.InsertionPoint.current.block.owner
    while op.name != "builtin.module":
        op = op.parent
    name = PREFETCH_FUNCTION_PREFIX + hashlib.sha1(str(crd.type).encode()).hexdigest()[:10]
    body = op.regions[0].blocks[0]
    if not any(o.operation.name == "func.func" and ir.StringAttr(o.operation.attributes["sym_name"]).value == name
               for o in body.operations):
        idx = ir.IndexType.get()
        with ir.InsertionPoint(body):
            fn = func.FuncOp(name, ir.FunctionType.get([crd.type, idx, idx], []))
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            fn.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
            entry = fn.add_entry_block()
            with ir.InsertionPoint(entry):
                _prefetch_loop(entry.arguments[0], entry.arguments[1], entry.arguments[2], per)
                func.ReturnOp([])
    return name


def _prefetch_long_fiber(match: Coiteration, inits) -> None:
    """At the start of a skewed pair, prefetch the long fiber's first coordinates (not its values: only
    matches read those) when the searches will jump LINES_PER_SHORT lines or more on average. Closer, the
    probes fall in consecutive lines the hardware prefetcher streams anyway (ratio 32 with 32-bit
    coordinates measured 0.93-1.00x with the prefetch, data in cache). Nothing when the short fiber is empty."""
    pb, pc = (inits[p] for p in match.cursor_pos)
    (hb, hc), (crd_b, crd_c) = match.bounds, match.crd_memrefs
    len_b, len_c = arith.subi(hb, pb), arith.subi(hc, pc)
    gap, zero = _index(_per_line(match) * LINES_PER_SHORT), _index(0)

    def wide(long_len, short_len):
        return arith.andi(arith.cmpi(CMPI_UGT, short_len, zero),
                          arith.cmpi(CMPI_UGE, long_len, arith.muli(short_len, gap)))

    c_long = scf.IfOp(wide(len_c, len_b), [], has_else=True)
    with ir.InsertionPoint(c_long.then_block):
        _prefetch_lines(match, crd_c, pc, len_b)
        scf.yield_([])
    with ir.InsertionPoint(c_long.else_block):
        b_long = scf.IfOp(wide(len_b, len_c), [], has_else=False)
        with ir.InsertionPoint(b_long.then_block):
            _prefetch_lines(match, crd_b, pb, len_c)
            scf.yield_([])
        scf.yield_([])


def _skewed(long_rem, short_rem, ratio):
    """long_rem >= ratio * short_rem."""
    return arith.cmpi(CMPI_UGE, long_rem, arith.muli(short_rem, _index(ratio)))


def skew_threshold(ratio: int, short: int, conflict: bool = False) -> int:
    """The long fiber's length from which a pair with a ``short``-coordinate fiber (>= 1) gallops: what the
    IR of ``_skew_threshold`` computes, for tests and docs (``conflict``: the pair's lane is a conflict lane)."""
    log2 = short.bit_length() - 1
    extra = CONFLICT_SLOPE * (min(log2, LOG_CAP) - CONFLICT_FROM + 1) if conflict and log2 >= CONFLICT_FROM else 0
    return (ratio + (LOG_SLOPE * min(log2, LOG_CAP) if log2 >= LOG_FROM else 0) + extra) * short


def _skew_threshold(short_len, ratio: int, conflict: bool = False):
    """``skew_threshold(ratio, short_len)`` in IR (``short_len >= 1``: the empty-fiber guard is outside).
    Below 8 coordinates (``LOG_FROM``) the fast lane runs one step or none (the scalar loop walks the long
    fiber), so galloping wins from low ratios (S = 1-4: 0.62-0.71x the lane at r = 16). Why the log above:
    a search costs O(log gap) dependent probes per short coordinate whatever the lengths, but the fast
    lane runs a long pair at its best (the hardware prefetcher ahead, the entry and the epilogue paid
    once), so the crossover ratio grows with the pair's length: ~20 for 8-coordinate short fibers, ~25 for
    64, 32-48 from 512 on (docs/passes.md, "Threshold")."""
    i64 = ir.IntegerType.get_signless(64)
    log2 = arith.subi(arith.constant(i64, 63), math.ctlz(arith.index_castui(i64, short_len)))
    extra = arith.muli(arith.minui(log2, arith.constant(i64, LOG_CAP)), arith.constant(i64, LOG_SLOPE))
    extra = arith.select(arith.cmpi(CMPI_UGE, log2, arith.constant(i64, LOG_FROM)), extra, arith.constant(i64, 0))
    if conflict:   # + CONFLICT_SLOPE x (min(L, LOG_CAP) - CONFLICT_FROM + 1) from L >= CONFLICT_FROM
        capped = arith.minui(log2, arith.constant(i64, LOG_CAP))
        more = arith.muli(arith.subi(capped, arith.constant(i64, CONFLICT_FROM - 1)), arith.constant(i64, CONFLICT_SLOPE))
        extra = arith.addi(extra, arith.select(arith.cmpi(CMPI_UGE, log2, arith.constant(i64, CONFLICT_FROM)), more,
                                               arith.constant(i64, 0)))
    factor = arith.addi(_index(ratio), arith.index_castui(ir.IndexType.get(), extra))
    return arith.muli(short_len, factor)


def _skew_flags(match: Coiteration, fast_op, ratio: int, conflict: bool = False):
    """(skewed, C longer, B longer) from the fiber pair's lengths on entry, once per pair, before the fast
    lane. ``skewed`` is one test, ``max(lenB, lenC) >= threshold(min(lenB, lenC))``, computed for every
    pair (testing ``max >= ratio * min`` first, under an ``scf.if``, ran K1 1.03x and K5 1.03x: more of the
    fast lane's values spilled), and the other two are only read in the skewed branch (where the lengths
    differ): with the or of two ``len >= R * len`` tests LLVM kept both loop-invariant products live across
    the j loop (spilled) and K1 ran 3-4 % slower than without galloping; with one test, as fast."""
    inits = _inits(match, fast_op)
    pb, pc = (inits[p] for p in match.cursor_pos)
    hb, hc = match.bounds
    with ir.InsertionPoint(fast_op):
        len_b, len_c = arith.subi(hb, pb), arith.subi(hc, pc)
        longer, shorter = arith.maxui(len_b, len_c), arith.minui(len_b, len_c)
        skewed = arith.cmpi(CMPI_UGE, longer, _skew_threshold(shorter, ratio, conflict))
        return skewed, arith.cmpi(CMPI_UGT, len_c, len_b), arith.cmpi(CMPI_UGT, len_b, len_c)


def _inits(match: Coiteration, fast_op) -> list:
    """The scalar loop's initial values: the fast lane's first operands (its vector accumulators follow)."""
    return list(fast_op.operation.operands)[:len(match.while_op.operation.operands)]


def _move_lane(fast_op, w, before) -> None:
    """Move the fast lane, the ops between it and the scalar loop ``w`` (the vector accumulators' reductions)
    and ``w`` before ``before``, in order."""
    ops, inside = [], False
    for op in fast_op.operation.block.operations:
        inside = inside or op.operation == fast_op.operation
        if inside:
            ops.append(op.operation)
            if op.operation == w.operation:
                break
    if not ops or ops[-1] != w.operation:
        raise RuntimeError("gallop_lane: the scalar loop does not follow the fast lane in its block")
    for op in ops:
        op.move_before(before)


def _guard_empty_fibers(match: Coiteration, fast_op) -> None:
    """Put the fast lane and the scalar loop under ``scf.if`` "some fiber is empty" (a cursor not below
    its bound on entry: the negation of that fiber's term of the scalar loop's condition), whose then-branch
    yields the loop's initial values: what the scalar loop returns after zero steps. The skew decision is
    then built in the else-branch, so an empty pair pays one test and no decision. Without it, at 0.01 %
    density (K1, N = 6000: 36M fiber pairs of ~0.6 coordinates, most with an empty fiber) every pair paid
    the skew test (and an empty fiber is always "skewed": ``max >= R * 0``), then the prefetch tests and the
    galloping copy's entry: 0.56x the plain sparsifier. The test of a fiber invariant in the enclosing loop
    (K1's row of B in the j loop) lets LLVM unswitch that loop: for an empty row of B the j loop is gone,
    as with ``gallop=0`` (docs/passes.md, "Near-empty fibers")."""
    w = match.while_op
    inits = _inits(match, fast_op)
    types = [r.type for r in w.results]
    with ir.InsertionPoint(fast_op):
        empty = [arith.cmpi(CMPI_UGE, inits[p], hi) for p, hi in zip(match.cursor_pos, match.bounds)]
        guard = scf.IfOp(_tree(empty, arith.ori), types, has_else=True)
    for old, new in zip(w.results, guard.results):
        old.replace_all_uses_with(new)
    with ir.InsertionPoint(guard.then_block):
        scf.yield_(inits)
    with ir.InsertionPoint(guard.else_block):
        done = scf.yield_(list(w.results))
    _move_lane(fast_op, w, done)


def _expect_false(flag, fast_op):
    """``llvm.intr.expect(flag, false)`` before ``fast_op``: the skewed branch marked unlikely. LLVM then
    lays the galloping copy out of line and spills for its registers there, not in the comparable path: at
    0.01 % density (K1, N = 6000) the j loop's counter and pointers went to the stack otherwise, since
    LLVM weighed the galloping code as half of the loop's iterations, and K1 ran 0.92x the plain sparsifier
    with the empty-fiber test alone, 1.08-1.13x with both (kernel only) (docs/passes.md, "Near-empty fibers"). A skewed pair's
    searches outweigh the jump to out-of-line code."""
    with ir.InsertionPoint(fast_op):
        return llvm.intr_expect(flag, arith.constant(ir.IntegerType.get_signless(1), 0))


def _split_by_skew(match: Coiteration, fast_op, skewed) -> Coiteration:
    """Choose the path once per fiber tuple, before any loop: ``scf.if skewed`` runs a copy of the scalar
    loop (returned as a match whose ``after_yield`` is the copy's, for the caller to add its jumps), else
    the fast lane and the scalar loop exactly as without galloping. (Limiting the fast lane's condition
    with the flag and jumping inside the one scalar loop left a flag test in every scalar step, which LLVM
    did not unswitch, and the jump code's registers spilled the loop's: 3-7 % on uniform K1 / K5.)"""
    w = match.while_op
    inits = _inits(match, fast_op)
    types = [r.type for r in w.results]
    with ir.InsertionPoint(fast_op):
        split = scf.IfOp(skewed, types, has_else=True)
    for old, new in zip(w.results, split.results):
        old.replace_all_uses_with(new)
    with ir.InsertionPoint(split.then_block):
        copy = w.operation.clone()
        for i, value in enumerate(inits):
            copy.operands[i] = value
        scf.yield_(list(copy.results))
    with ir.InsertionPoint(split.else_block):
        done = scf.yield_(list(w.results))
    _move_lane(fast_op, w, done)
    after = copy.regions[1].blocks[0]
    nexts = tuple(list(after.operations)[-1].operands[p] for p in match.cursor_pos)
    return replace(match, while_op=copy.opview, after_yield=list(after.operations)[-1], next_cursors=nexts)


def _scan_probes(match: Coiteration, inits):
    """The line-scan budget of a skewed pair's searches (``_lower_bound``'s ``scan``), from its lengths on entry:
    ``min(SCAN_LINES, SCAN_SPAN x long / short / coordinates per line)`` lines, 0 from a ratio of
    ``SCAN_MAX_RATIO`` on (the short fiber is not empty: the empty-fiber guard is outside)."""
    pb, pc = (inits[p] for p in match.cursor_pos)
    hb, hc = match.bounds
    len_b, len_c = arith.subi(hb, pb), arith.subi(hc, pc)
    ratio = arith.divui(arith.maxui(len_b, len_c), arith.maxui(arith.minui(len_b, len_c), _index(1)))
    lines = arith.minui(arith.divui(arith.muli(ratio, _index(SCAN_SPAN)), _index(_per_line(match))),
                        _index(SCAN_LINES))
    return arith.select(arith.cmpi(CMPI_ULT, ratio, _index(SCAN_MAX_RATIO)), lines, _index(0))


def _gallop_epilogue(match: Coiteration, long_c, long_b, counters, scan=None) -> None:
    """After each step of the scalar loop of a skewed fiber pair, jump the long side's cursor past the
    coordinates below the short side's current one (``scan``: the searches' line-scan budget)."""
    yield_op = match.after_yield
    sb, sc = match.cursor_pos
    nb, nc = (yield_op.operands[p] for p in (sb, sc))
    (hb, hc), (crd_b, crd_c) = match.bounds, match.crd_memrefs
    idx = ir.IndexType.get()
    lines = scan is not None and _vector_scan_ok(match)

    def search(crd, lo, hi, key_crd, key_pos):
        raw = memref.load(key_crd, [key_pos])
        key = _apply_chain(match.cast_chain, raw)[-1]
        if lines:
            return _line_scan(match, crd, lo, hi, key, raw, scan)
        return _lower_bound(match, crd, lo, hi, key, scan)

    with ir.InsertionPoint(yield_op):
        both = arith.andi(arith.cmpi(CMPI_ULT, nb, hb), arith.cmpi(CMPI_ULT, nc, hc))
        outer = scf.IfOp(arith.andi(long_c, both), [idx, idx], has_else=True)
        with ir.InsertionPoint(outer.then_block):
            scf.yield_([nb, search(crd_c, nc, hc, crd_b, nb)])
        with ir.InsertionPoint(outer.else_block):
            inner = scf.IfOp(arith.andi(long_b, both), [idx, idx], has_else=True)
            with ir.InsertionPoint(inner.then_block):
                scf.yield_([search(crd_b, nb, hb, crd_c, nc), nc])
            with ir.InsertionPoint(inner.else_block):
                scf.yield_([nb, nc])
            scf.yield_(list(inner.results))
        gb, gc = outer.results
        if counters is not None:
            skipped = arith.addi(arith.subi(gb, nb), arith.subi(gc, nc))
            FastLaneBuilder._count(counters, GALLOP_COUNTER_SLOT, skipped)
    yield_op.operands[sb] = gb
    yield_op.operands[sc] = gc


def add_galloping(match: Coiteration, fast_op, ratio: int, counters=None, conflict: bool = False) -> None:
    """Give the matched loop and its fast lane ``fast_op`` the skew-aware path choice (``conflict``: the pairs
    that do not gallop run a conflict lane: the threshold with ``CONFLICT_SLOPE``)."""
    inits = _inits(match, fast_op)
    _guard_empty_fibers(match, fast_op)
    skewed, long_c, long_b = _skew_flags(match, fast_op, ratio, conflict)
    skewed_match = _split_by_skew(match, fast_op, _expect_false(skewed, fast_op))
    with ir.InsertionPoint(skewed_match.while_op):
        _prefetch_long_fiber(match, inits)
        scan = _scan_probes(match, inits)
    _gallop_epilogue(skewed_match, long_c, long_b, counters, scan)


def describe_galloping(ratio: int, conflict: bool = False) -> str:
    """The decision text of a two-fiber intersection's skew-aware path."""
    if not ratio:
        return "no galloping (gallop=0)"
    more = (f" + {CONFLICT_SLOPE} (L - {CONFLICT_FROM - 1}) from short >= {1 << CONFLICT_FROM} (a conflict lane's pair)"
            if conflict else "")
    return (f"galloping when long >= ({ratio} + {LOG_SLOPE} L{more}) x short, L = min(floor(log2 short), {LOG_CAP}) "
            f"from short >= {1 << LOG_FROM}, else 0 (the long fiber's first min({PREFETCH_LINES}, "
            f"{LINES_PER_SHORT} x short length) coordinate lines prefetched when it has {LINES_PER_SHORT} per short "
            f"coordinate; each search first scans min({SCAN_LINES}, {SCAN_SPAN} x long / short) lines one by one, "
            f"none from long >= {SCAN_MAX_RATIO} x short{_scan_text()})")


def _scan_text() -> str:
    if not VECTOR_SCAN:
        return ""
    ahead = f", {SCAN_PREFETCH} lines ahead prefetched" if SCAN_PREFETCH else ""
    return f"; the scan a loop of its own{ahead}, the position in its last line by one vector compare"



# ---------------------------------------------------------------- three- and four-way: leapfrogging
def _fold(values, pick):
    """The value ``pick`` prefers among ``values`` (a chain of compare-and-selects)."""
    best = values[0]
    for v in values[1:]:
        best = arith.select(arith.cmpi(pick, v, best), v, best)
    return best


def add_leapfrog(match: Coiteration, fast_op, ratio: int, counters=None) -> None:
    """Skew-aware k-way intersection (k > 2), the leapfrog join's step: when, on entry, the longest fiber
    is ``ratio`` times the shortest or more, a copy of the scalar loop runs instead of the fast lane and
    scalar loop (``_split_by_skew``) and, after each step, moves every cursor whose coordinate is below the
    largest current coordinate to the first coordinate ``>=`` it. No coordinate below the largest can be in every fiber (the fiber holding the largest has
    none left below it), so the skipped coordinates are exactly some the scalar loop would step over
    without a match: the same matches in the same order, bit-identical results."""
    inits = _inits(match, fast_op)
    cursors = [inits[p] for p in match.cursor_pos]
    _guard_empty_fibers(match, fast_op)
    with ir.InsertionPoint(fast_op):
        lengths = [arith.subi(hi, p) for hi, p in zip(match.bounds, cursors)]
        skewed = _skewed(_fold(lengths, CMPI_UGT), _fold(lengths, CMPI_ULT), ratio)
    match = _split_by_skew(match, fast_op, _expect_false(skewed, fast_op))
    yield_op = match.after_yield
    nexts = [yield_op.operation.operands[p] for p in match.cursor_pos]
    idx = ir.IndexType.get()
    k = match.fingers
    with ir.InsertionPoint(yield_op):
        inside = [arith.cmpi(CMPI_ULT, nxt, hi) for nxt, hi in zip(nexts, match.bounds)]
        leap = scf.IfOp(_tree(inside, arith.andi), [idx] * k, has_else=True)
        with ir.InsertionPoint(leap.then_block):
            keys = [_coordinate(match, crd, nxt) for crd, nxt in zip(match.crd_memrefs, nexts)]
            key = _fold(keys, CMPI_UGT)
            jumped = []
            for crd, nxt, hi, own in zip(match.crd_memrefs, nexts, match.bounds, keys):
                behind = scf.IfOp(arith.cmpi(CMPI_ULT, own, key), [idx], has_else=True)
                with ir.InsertionPoint(behind.then_block):
                    scf.yield_([_lower_bound(match, crd, nxt, hi, key)])
                with ir.InsertionPoint(behind.else_block):
                    scf.yield_([nxt])
                jumped.append(behind.results[0])
            scf.yield_(jumped)
        with ir.InsertionPoint(leap.else_block):
            scf.yield_(nexts)
        if counters is not None:
            skipped = [arith.subi(j, nxt) for j, nxt in zip(leap.results, nexts)]
            FastLaneBuilder._count(counters, GALLOP_COUNTER_SLOT, _tree(skipped, arith.addi))
    for p, value in zip(match.cursor_pos, leap.results):
        yield_op.operation.operands[p] = value
