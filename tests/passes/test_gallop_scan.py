"""Galloping sized per fiber pair (passes/gallop_lane.py, issue 59): each search's line scan before the exponential
search (its budget from the pair's length ratio) and the later threshold of pairs that run a conflict lane.

IR checks on the stage-1 IR of the K1 fixture; execution checks against the plain sparsifier bit for bit and the
profile's galloped coordinates at the thresholds.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import splyce
from filecheck import check_in_order
from mlir import ir
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.native import codegen
from splyce.options import Options
from splyce.passes import gallop_lane
from splyce.passes.gallop_lane import (CONFLICT_FROM, CONFLICT_SLOPE, SCAN_LINES, SCAN_MAX_RATIO, SCAN_SPAN,
                                       skew_threshold)
from splyce.passes.splyce_pass import run_splyce_pass

FIXTURE = Path(__file__).parent / "kernels_mlir" / "k1_spgemm.mlir"
AHEAD = gallop_lane.SCAN_PREFETCH * 16   # elements of int32 coordinates the line scan prefetches ahead
CONFLICT_TEXT = f"+ {CONFLICT_SLOPE} (L - {CONFLICT_FROM - 1}) from short >= {1 << CONFLICT_FROM} (a conflict lane's pair)"


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def _stage1() -> ir.Module:
    module = ir.Module.parse(FIXTURE.read_text())
    run_passes(module, SPARSIFY)
    return module


def _zen4() -> codegen.Target:
    return codegen.Target(codegen.host_target().triple, "znver4", codegen.resolve_target("avx512").features)


def test_scan_budget_computed_once_per_skewed_pair_and_carried_by_the_search(ctx):
    module = _stage1()
    (decision,) = run_splyce_pass(module, Options(phases=5, gallop=16))
    assert f"each search first scans min({SCAN_LINES}, {SCAN_SPAN} x long / short) lines one by one, none from " \
           f"long >= {SCAN_MAX_RATIO} x short; the scan a loop of its own, {gallop_lane.SCAN_PREFETCH} lines ahead " \
           f"prefetched, the position in its last line by one vector compare" in decision.reason
    assert CONFLICT_TEXT not in decision.reason     # the all-pairs lane: the threshold as before
    text = str(module)
    check_in_order(text, [
        re.compile(r"scf\.if %\w+ -> \(index, index, f64\)"),          # the skewed branch
        re.compile(r"func\.call @_splyce_prefetch_"),
        # its budget, once: ratio = max / max(min, 1); min(SCAN_LINES, SCAN_SPAN x ratio / 16 per line), 0 from
        # SCAN_MAX_RATIO on
        re.compile(r"(%\w+) = arith\.divui %\w+, %\w+ : index"),
        re.compile(rf"arith\.muli %\w+, %c{SCAN_SPAN}\w* : index"),
        re.compile(r"arith\.divui %\w+, %c16\w* : index"),
        re.compile(rf"arith\.minui %\w+, %c{SCAN_LINES}\w* : index"),
        re.compile(rf"arith\.cmpi ult, %\w+, %c{SCAN_MAX_RATIO}\w* : index"),
        re.compile(r"(%\w+) = arith\.select %\w+, %\w+, %c0\w* : index"),
        "scf.while",                                                    # the scalar loop's copy
        # the line scan, a loop of its own: (position, probes) while a whole line (16 coordinates) is left, probes <
        # budget and the line's last coordinate < key; each probe prefetches SCAN_PREFETCH lines ahead
        re.compile(r"scf\.while \(%\w+ = %\w+, %\w+ = %c0\w*\) : \(index, index\) -> \(index, index\)"),
        re.compile(r"arith\.cmpi ule, %\w+, %\w+ : index"),
        re.compile(r"arith\.cmpi ult, %\w+, %\w+ : index"),
        re.compile(r"arith\.cmpi ult, %\w+, %\w+ : index"),
        "scf.condition",
        re.compile(rf"%c{AHEAD}\w* = arith\.constant {AHEAD} : index"),
        re.compile(r"memref\.prefetch %\w+\[%\w+\], read, locality<3>, data : memref<\?xi32>"),
        # stopped on the line holding the answer: one vector compare of the line against the raw key, a popcount
        re.compile(r"arith\.cmpi uge, %\w+, %\w+ : index"),
        re.compile(r"scf\.if %\w+ -> \(index\)"),
        re.compile(r"vector\.load %\w+\[%\w+#0\] : memref<\?xi32>, vector<16xi32>"),
        re.compile(r"vector\.broadcast %\w+ : i32 to vector<16xi32>"),
        re.compile(r"arith\.cmpi ult, %\w+, %\w+ : vector<16xi32>"),
        re.compile(r"vector\.bitcast %\w+ : vector<16xi1> to vector<1xi16>"),
        re.compile(r"math\.ctpop %\w+ : i16"),
        # else (budget spent, or less than a line left): the exponential search from there, the binary search
        re.compile(r"arith\.cmpi ult, %\w+#0, %\w+ : index"),
        re.compile(r"scf\.while \(%\w+ = %\w+#0, %\w+ = %\w+, %\w+ = %c0\w*\) : \(index, index, index\)"),
        re.compile(r"arith\.shli %\w+, %c1\w* : index"),
        "scf.while",                                                    # the binary search
    ])
    # one search per side (and the prefetch function's own prefetch of the long fiber's first lines)
    assert text.count("memref.prefetch") == 3 and text.count("math.ctpop") == 2
    # the budget is computed outside the scalar loop's copy: one divui of the lengths per skewed pair
    assert len(re.findall(r"arith\.divui %\w+, %(?!c)\w+ : index", text)) == 1


def test_scan_inside_the_exponential_search_without_vector_scan(ctx, monkeypatch):
    """``VECTOR_SCAN = False``: the lane before the line scan's own loop (the scan as the first probes of the
    exponential search, then the binary search and the window count); no prefetch, no popcount."""
    monkeypatch.setattr(gallop_lane, "VECTOR_SCAN", False)
    module = _stage1()
    (decision,) = run_splyce_pass(module, Options(phases=5, gallop=16))
    assert "a loop of its own" not in decision.reason
    text = str(module)
    check_in_order(text, [
        re.compile(r"func\.call @_splyce_prefetch_"),
        "scf.while",
        re.compile(r"arith\.select %\w+, %c16\w*, %c8\w* : index"),
        re.compile(r"scf\.while \(%\w+ = %\w+, %\w+ = %\w+, %\w+ = %c0\w*\) : \(index, index, index\)"),
        re.compile(r"arith\.shli %\w+, %c1\w* : index"),
        "scf.while",
    ])
    assert text.count("memref.prefetch") == 1 and "math.ctpop" not in text   # the prefetch function's only


@pytest.mark.parametrize("short", [1, 8, 15, 16, 64, 512, 4096, 1 << 14])
def test_conflict_threshold_values(short):
    """A conflict lane's pair gallops later from one block (16) on; below, and for other lanes, the rule as before."""
    log2 = short.bit_length() - 1
    plain = skew_threshold(16, short)
    later = skew_threshold(16, short, conflict=True)
    if log2 < CONFLICT_FROM:
        assert later == plain
    else:
        assert later == plain + CONFLICT_SLOPE * (min(log2, gallop_lane.LOG_CAP) - CONFLICT_FROM + 1) * short
    assert skew_threshold(16, 16, conflict=True) == (16 + 8 + 8) * 16
    assert skew_threshold(16, 1 << 14, conflict=True) == (16 + 24 + 72) * (1 << 14)


@pytest.mark.parametrize("change, conflict", [({}, True), ({"fast_math": True, "vector_width": 16}, True),
                                              ({"target": "avx2"}, False), ({"fast_math": True, "vector_width": 4},
                                                                            False)])
def test_conflict_threshold_only_for_conflict_lanes(ctx, change, conflict):
    """Strict pairs on a Zen 4 target start in the strict conflict lane, fast_math n = 16 runs the conflict lane:
    their threshold has the conflict term in the IR (CONFLICT_FROM - 1 subtracted, x CONFLICT_SLOPE, from
    log2 >= CONFLICT_FROM); AVX2 code and the all-pairs n = 4 lane keep the rule as before."""
    options = dict(change)
    name = options.pop("target", None)
    target = codegen.resolve_target(name) if name else _zen4()
    module = _stage1()
    (decision,) = run_splyce_pass(module, Options(phases=7, gallop=16, target=target, **options))
    assert (CONFLICT_TEXT in decision.reason) == conflict, decision.reason
    text = str(module)
    pattern = [re.compile(r"math\.ctlz %\w+ : i64"),
               re.compile(rf"arith\.subi %\w+, %c{CONFLICT_FROM - 1}\w* : i64"),
               re.compile(rf"arith\.muli %\w+, %c{CONFLICT_SLOPE}\w* : i64"),
               re.compile(rf"arith\.cmpi uge, %\w+, %c{CONFLICT_FROM}\w* : i64"),
               re.compile(r"arith\.addi %c16\w*, %\w+ : index")]
    if conflict:
        check_in_order(text, pattern)
    else:
        assert not re.search(rf"arith\.muli %\w+, %c{CONFLICT_SLOPE}\w* : i64", text)


def _row(dim, idx, values, itype):
    return splyce.SparseTensor.from_buffers(
        (dim,), splyce.SPARSE_VECTOR.with_widths(np.dtype(itype).itemsize * 8, np.dtype(itype).itemsize * 8),
        pos=(np.array([0, idx.size], itype),), crd=(np.asarray(idx, itype),), values=values).copy()


def _dot(x, y):
    return splyce.einsum("i,i->", x, y)


def _same(x, y) -> bool:
    return np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _skewed(short, ratio, itype, vtype, seed):
    """A long fiber of short x ratio coordinates (density 1/2) and a short one over the same range, a third of
    its coordinates in the long one; order-sensitive values (any other order of the additions gives other bits)."""
    rng = np.random.default_rng(seed)
    long = short * ratio
    dim = 2 * long + 2
    b = np.sort(rng.choice(dim, long, replace=False))
    shared = rng.choice(b, max(1, short // 3), replace=False)
    others = rng.choice(np.setdiff1d(np.arange(dim), b), short - shared.size, replace=False)
    c = np.sort(np.concatenate([shared, others]))
    bv = (rng.choice([-1, 1], b.size) * 10.0 ** rng.uniform(-8, 8, b.size)).astype(vtype)
    cv = rng.uniform(0.5, 2, c.size).astype(vtype)
    return dim, b, bv, c, cv


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_scanning_searches_bit_identical_to_plain_sparsifier(vtype, itype):
    """Skewed pairs whose budgets span none to SCAN_LINES lines (ratios 20-3000: a search's gap below, at and far
    past its scan, and past SCAN_MAX_RATIO), both orders, NaN / Inf / -0.0 among the values: the strict lanes
    (gallop 2 and 16) bit-identical to the plain sparsifier, and the galloping branch taken."""
    plain = splyce.jit(_dot, vectorize=False)
    lanes = [splyce.jit(_dot, gallop=g) for g in (2, 16)]
    fast = splyce.jit(_dot, fast_math=True, gallop=2)
    galloped = 0
    for short, ratio in ((3, 20), (20, 40), (20, 100), (16, 300), (9, 700), (40, 1023), (5, 1024), (4, 3000),
                         (200, 300)):
        dim, b, bv, c, cv = _skewed(short, ratio, itype, vtype, short * ratio)
        if short == 20:
            bv[np.flatnonzero(np.isin(b, c))[0]] = np.nan
            bv[~np.isin(b, c)] = np.inf
            cv[::4] = -0.0
        A, B = _row(dim, b, bv, itype), _row(dim, c, cv, itype)
        for lane in lanes:
            assert _same(lane(A, B), plain(A, B)), (short, ratio)
            assert _same(lane(B, A), plain(B, A)), (short, ratio)
        prof = splyce.profile(lanes[0], A, B)
        galloped += prof.gallop > 0
        want = float(plain(A, B))
        if np.isfinite(want):
            assert np.isclose(float(fast(A, B)), want, rtol=1e-5 if vtype == np.float32 else 1e-12)
    assert galloped == 9


def test_conflict_lane_pairs_gallop_from_the_later_threshold():
    """fast_math n = 16 (the conflict lane where the host has AVX-512 CD, else the all-pairs lane: the decision text
    says which): a pair gallops (profile's galloped coordinates) from long = skew_threshold(16, short, conflict), not
    one coordinate before; short fibers of 8, 16, 64 and 2^13 coordinates."""
    f = splyce.jit(_dot, fast_math=True, vector_width=16)
    for short in (8, 16, 64, 1 << 13):
        for swap in (False, True):
            x = _row(10, np.arange(2), np.ones(2), np.int32)
            conflict = "conflict compares" in f.lower(x, x).as_text("splyce")
            edge = skew_threshold(16, short, conflict)
            for long, gallops in ((edge - 1, False), (edge, True)):
                dim = 2 * long + 1
                b = 2 * np.arange(long)
                c = (np.arange(1, short + 1) * (dim - 1)) // short - (np.arange(short) % 2)
                A, B = _row(dim, b, np.ones(long), np.int32), _row(dim, c, np.full(short, 0.5), np.int32)
                A, B = (B, A) if swap else (A, B)
                prof = splyce.profile(f, A, B)
                assert (prof.gallop > 0) == gallops, (short, long, swap, conflict, prof)
                assert float(f(A, B)) == 0.5 * np.intersect1d(b, c).size


def _drawn_pair(seed):
    """A skewed pair drawn from ``seed`` (not designed per case): the long fiber uniform, in runs or with power-law
    gaps, anywhere up to the top of the int32 range; the short one partly from the long one, partly past its end;
    values with NaN / +-Inf / -0.0 / subnormals / huge magnitudes (sums whose bits depend on the order)."""
    rng = np.random.default_rng(seed)
    itype = (np.int32, np.int64)[rng.integers(2)]
    vtype = (np.float32, np.float64)[rng.integers(2)]
    short = int(rng.integers(1, 300))
    long = short * int(rng.integers(60, 2500))
    kind = rng.integers(3)
    if kind == 0:
        b = np.sort(rng.choice(long * int(rng.integers(1, 5)), long, replace=False))
    elif kind == 1:
        run = int(rng.integers(2, 70))
        starts = np.sort(rng.choice(4 * long // run + 1, long // run + 1, replace=False)) * run
        b = (starts[:, None] + np.arange(run)).ravel()[:long]
    else:
        b = np.cumsum(1 + np.floor(rng.pareto(1.3, long)).astype(np.int64).clip(0, 1 << 16))
    b = b + int(rng.integers(0, np.iinfo(np.int32).max - int(b[-1]) - 2 * long - 10))
    share = rng.uniform(0, 1)
    hits = rng.choice(b, int(round(short * share)), replace=False)
    pool = np.arange(int(b[0]) - 3, int(b[-1]) + 2 * long + 5)   # around and past the long fiber
    misses = rng.choice(np.setdiff1d(pool, b, assume_unique=False), short - hits.size, replace=False)
    c = np.unique(np.concatenate([hits, misses]).clip(0))
    dim = int(max(b[-1], c[-1])) + 1
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 1e38, -1e38, 5e-324])

    def values(n):
        v = rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-7, 7, n)
        mask = rng.random(n) < 0.02
        v[mask] = rng.choice(specials, int(mask.sum()))
        return v.astype(vtype)

    return dim, b.astype(itype), values(b.size), c.astype(itype), values(c.size), itype


def _bit_identical_on_drawn_pairs(seeds):
    plain = splyce.jit(_dot, vectorize=False)
    lane = splyce.jit(_dot)
    galloped = 0
    for seed in seeds:
        dim, b, bv, c, cv, itype = _drawn_pair(seed)
        A, B = _row(dim, b, bv, itype), _row(dim, c, cv, itype)
        assert _same(lane(A, B), plain(A, B)), seed
        assert _same(lane(B, A), plain(B, A)), seed
        galloped += splyce.profile(lane, A, B).gallop > 0
    return galloped


def test_line_scan_bit_identical_on_drawn_pairs_quick():
    """Four drawn skewed pairs (both operand orders): the strict lane with the line scan bit-identical to the
    plain sparsifier."""
    assert _bit_identical_on_drawn_pairs(range(4)) >= 3


@pytest.mark.slow
def test_line_scan_bit_identical_on_drawn_pairs():
    """60 drawn skewed pairs (both operand orders), every search shape: the scan stopping inside a line, at the
    budget, with less than a line left, keys past the long fiber's end."""
    assert _bit_identical_on_drawn_pairs(range(100, 160)) >= 50
