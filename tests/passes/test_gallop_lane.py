"""Skew-aware intersection (passes/gallop_lane.py): chosen once per fiber pair, the fast lane and scalar loop
as without galloping for comparable fiber lengths, a copy of the scalar loop galloping (exponential + binary
search) past the long side's coordinates otherwise.

IR checks run on the stage-1 IR of the K1 fixture; execution checks compare against the plain sparsifier
bit for bit (Inf, NaN, -0 included) and against NumPy, in a child process (MLIR/LLVM may abort).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from filecheck import check_in_order
from mlir import ir
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.options import Options
from splyce.passes import gallop_lane
from splyce.passes.ir_utils import CMPI_UGE, walk
from splyce.passes.splyce_pass import PROFILE_COUNTERS_SYMBOL, PROFILE_SLOTS, run_splyce_pass

FIXTURE = Path(__file__).parent / "kernels_mlir" / "k1_spgemm.mlir"


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def _stage1() -> ir.Module:
    module = ir.Module.parse(FIXTURE.read_text())
    run_passes(module, SPARSIFY)
    return module


def test_path_chosen_once_per_fiber_pair_and_skewed_pairs_gallop(ctx):
    module = _stage1()
    decisions = run_splyce_pass(module, Options(phases=5, gallop=16))
    assert decisions[0].vectorized and "galloping when long >= (16 + 2 L) x short, L = min(floor(log2 short), 12) " \
        "from short >= 8, else 0" in decisions[0].reason
    assert "prefetched" in decisions[0].reason
    text = str(module)
    # the long fiber's coordinates prefetched (16 i32 per 64-byte line) by a never-inlined function, called
    # for C's or B's in the skewed branch only
    check_in_order(text, [re.compile(r"func\.func private (@_splyce_prefetch_\w+)\(%\w+: memref<\?xi32>, %\w+: index, "
                                     r"%\w+: index\) attributes \{passthrough = \[\"noinline\"\]\}"),
                          re.compile(r"scf\.for %\w+ = %\w+ to %\w+ step %c16\w* \{"),
                          re.compile(r"memref\.prefetch %\w+\[%\w+\], read, locality<3>, data : memref<\?xi32>")])
    prefetch = [re.compile(r"func\.call @_splyce_prefetch_\w+\(%\w+, %\w+, %\w+\)")]
    # the prefetch function's one, and one in each search's line scan (test_gallop_scan.py checks those)
    assert text.count("memref.prefetch") == 1 + 2 * bool(gallop_lane.VECTOR_SCAN and gallop_lane.SCAN_PREFETCH)
    assert text.count("call @_splyce_prefetch_") == 2
    check_in_order(text, [
        # once per fiber pair, before any loop: max(lenB, lenC) >= (16 + 2 L) * min, one test
        re.compile(r"(%\w+) = arith\.maxui %\w+, %\w+ : index"),
        re.compile(r"(%\w+) = arith\.minui %\w+, %\w+ : index"),
        re.compile(r"math\.ctlz %\w+ : i64"),
        re.compile(r"arith\.minui %\w+, %c12\w* : i64"),
        re.compile(r"arith\.muli %\w+, %c2\w* : i64"),
        re.compile(r"arith\.cmpi uge, %\w+, %c3\w* : i64"),    # from 8 coordinates on, else 0
        re.compile(r"arith\.select %\w+, %\w+, %c0\w* : i64"),
        re.compile(r"arith\.addi %c16\w*, %\w+ : index"),
        re.compile(r"arith\.muli %\w+, %\w+ : index"),
        re.compile(r"(%\w+) = arith\.cmpi uge, %\w+, %\w+ : index"),
        re.compile(r"scf\.if %\w+ -> \(index, index, f64\)"),
        *prefetch, "} else {", *prefetch,
        # skewed: a copy of the scalar loop, its step, then the galloping of C (C long) or of B (B long)
        "scf.while",
        re.compile(r"scf\.if %\w+ -> \(index, index\)"),
        "scf.while",            # exponential search for a bracket
        re.compile(r"arith\.shli %\w+, %c1\w*"),
        "scf.while",            # binary search in it
        re.compile(r"arith\.shrui %\w+, %c1\w*"),
        re.compile(r"arith\.index_castui %\w+ : i1 to index"),  # branchless count in the last window
        "} else {",
        re.compile(r"scf\.if %\w+ -> \(index, index\)"),
        "scf.while",
        "scf.while",
        "scf.yield",
        # comparable: the fast lane, then the scalar loop
        "} else {",
        "scf.while",
        "vector.load",
        "} attributes {splyce.fast_lane}",
        "scf.while",
    ])


def _empty_fiber_guard(module):
    """(the scf.if testing for an empty fiber, the skew-aware choice inside it, the fast lane)."""
    (fast,) = [op for op in walk(module.operation) if op.name == "scf.while" and "splyce.fast_lane" in op.attributes]
    split = fast.parent
    guard = split.parent
    assert split.name == "scf.if" and guard.name == "scf.if"
    return guard, split, fast


def _defining(value) -> ir.Operation:
    return value.owner.operation


@pytest.mark.parametrize("gallop", [2, 16])
def test_an_empty_fiber_skips_every_decision(ctx, gallop):
    """Before the skew decision, one test: is either fiber empty on entry (cursor >= bound, the negation of
    the scalar loop's own condition)? Then the pair yields the loop's initial values (what the scalar loop
    returns after zero steps) and computes no length, ratio, prefetch test or fast-lane entry."""
    module = _stage1()
    run_splyce_pass(module, Options(phases=7, gallop=gallop))
    guard, split, fast = _empty_fiber_guard(module)
    inits = list(fast.operands)
    cursors = [inits[0], inits[1]]          # the K1 loop's iter-args: (pb, pc, acc)
    either = _defining(guard.operands[0])
    assert either.name == "arith.ori"
    tests = [_defining(v) for v in either.operands]
    assert [t.name for t in tests] == ["arith.cmpi", "arith.cmpi"]
    assert [ir.IntegerAttr(t.attributes["predicate"]).value for t in tests] == [CMPI_UGE, CMPI_UGE]
    assert [t.operands[0] for t in tests] == cursors
    # the bounds tested are the scalar loop's: its condition compares each cursor with the same values
    scalar = next(op for op in list(split.regions[1].blocks[0].operations) if op.name == "scf.while"
                  and "splyce.fast_lane" not in op.attributes)
    condition = [op for op in scalar.regions[0].blocks[0].operations if op.name == "arith.cmpi"]
    assert [t.operands[1] for t in tests] == [c.operands[1] for c in condition]
    # empty: nothing but the initial values; no loop, no decision
    (only,) = list(guard.regions[0].blocks[0].operations)
    assert only.name == "scf.yield" and list(only.operands) == inits
    # not empty: the skew decision, marked unlikely, then its two paths
    not_empty = [op.operation for op in guard.regions[1].blocks[0].operations]
    assert split in not_empty and {"arith.maxui", "arith.minui"} <= {op.name for op in not_empty}
    expect = _defining(split.operands[0])
    assert expect.name == "llvm.intr.expect"
    assert _defining(expect.operands[0]).name == "arith.cmpi"
    assert ir.IntegerAttr(_defining(expect.operands[1]).attributes["value"]).value == 0
    # nothing of the decision is computed before the guard (the lengths, their ratio)
    before = []
    for op in guard.parent.regions[0].blocks[0].operations:
        if op.operation == guard:
            break
        before.append(op.operation.name)
    assert "arith.maxui" not in before and "arith.minui" not in before and "arith.muli" not in before


def test_gallop_zero_has_no_empty_fiber_guard(ctx):
    """Without the skew decision the fast lane's and scalar loop's own conditions are the only tests (as
    before galloping existed): no guard, the fast lane directly in the j loop."""
    module = _stage1()
    run_splyce_pass(module, Options(phases=7, gallop=0))
    (fast,) = [op for op in walk(module.operation) if op.name == "scf.while" and "splyce.fast_lane" in op.attributes]
    assert fast.parent.name == "scf.for"
    assert "llvm.intr.expect" not in str(module)


def _fast_and_scalar_loops(module) -> list[str]:
    """The op names, in walk order, of the fast lane and of the scalar loop that follows it."""
    fast = [op for op in walk(module.operation) if op.name == "scf.while" and "splyce.fast_lane" in op.attributes]
    assert len(fast) == 1
    siblings = [op.operation for op in fast[0].block.operations]
    scalar = next(op for op in siblings[siblings.index(fast[0]) + 1:] if op.name == "scf.while")
    return [op.name for loop in (fast[0], scalar) for op in walk(loop)]


def test_comparable_fiber_pairs_run_exactly_the_loops_without_galloping(ctx):
    """Galloping adds nothing to the fast lane or to the scalar loop that comparable fibers run."""
    loops = {}
    for gallop in (0, 16):
        module = _stage1()
        run_splyce_pass(module, Options(phases=5, gallop=gallop))
        loops[gallop] = _fast_and_scalar_loops(module)
    assert loops[16] == loops[0]
    assert "arith.shrui" not in loops[16] and "arith.minui" not in loops[16]
    assert "func.call" not in loops[16]


def test_gallop_zero_builds_no_galloping(ctx):
    module = _stage1()
    decisions = run_splyce_pass(module, Options(phases=5, gallop=0))
    assert decisions[0].vectorized and "no galloping (gallop=0)" in decisions[0].reason
    text = str(module)
    assert "arith.shli" not in text and "arith.shrui" not in text and "arith.muli" not in text


def test_profile_counts_galloped_coordinates(ctx):
    module = _stage1()
    run_splyce_pass(module, Options(phases=5, profile=True))
    text = str(module)
    assert f"@{PROFILE_COUNTERS_SYMBOL} : memref<{PROFILE_SLOTS}xi64>" in text
    # the third counter is written after the galloping jump, in the skewed pairs' copy of the scalar loop
    check_in_order(text, ["arith.shrui", re.compile(rf"memref\.load %\w+\[%c2\w*\] : memref<{PROFILE_SLOTS}xi64>"),
                          re.compile(rf"memref\.store %\w+, %\w+\[%c2\w*\] : memref<{PROFILE_SLOTS}xi64>"),
                          "} attributes {splyce.fast_lane}"])


@pytest.mark.parametrize("value", [1, -1, True, 1 << 17, 2.0])
def test_invalid_gallop_option(value):
    import splyce

    with pytest.raises(ValueError, match="gallop"):
        splyce.jit(lambda a, b: a * b, gallop=value)


# ------------------------------------------------------------------------------------- execution
CHILD = r"""
import sys
import numpy as np, scipy.sparse as sps
import splyce

def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    return a.shape == b.shape and bool(np.all((a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))))

def skewed(rng, rows, cols, dtype, width):
    # row r: a short fiber in B and a long one in C, or the other way round; some comparable, some empty;
    # a few of the short side's coordinates are also in the long side. Values include Inf, NaN and -0.0.
    specials = np.array([np.inf, -np.inf, np.nan, -0.0], dtype)
    pattern = (np.zeros((rows, cols), bool), np.zeros((rows, cols), bool))
    for r in range(rows):
        short, long = [(1, 300), (3, 400), (9, 200), (40, 60), (0, 50), (5, 5), (2, 900)][r % 7]
        if r % 2:
            short, long = long, short
        for m, nnz in zip(pattern, (short, long)):
            m[r, rng.choice(cols, nnz, replace=False)] = True
        for m, o in ((pattern[0], pattern[1]), (pattern[1], pattern[0])):
            hits = np.flatnonzero(o[r])
            if 0 < m[r].sum() < len(hits):
                m[r, rng.choice(hits, min(len(hits), 3), replace=False)] = True
    # edges: the short side's coordinates at both ends of a full long fiber, and past its end
    pattern[0][rows - 2] = False
    pattern[0][rows - 2, [0, 7, cols - 1]] = True
    pattern[1][rows - 2] = True
    pattern[0][rows - 1] = False
    pattern[0][rows - 1, cols - 1] = True
    pattern[1][rows - 1] = False
    pattern[1][rows - 1, : cols - 1] = True
    out, dense = [], []
    fmt = splyce.CSR.with_widths(width, width)
    for m in pattern:
        rr, cc = np.nonzero(m)
        values = rng.uniform(-2, 2, len(rr)).astype(dtype)
        pick = rng.random(len(rr)) < 0.1
        values[pick] = rng.choice(specials, int(pick.sum()))
        out.append(splyce.asarray(sps.csr_array((values, (rr, cc)), shape=(rows, cols)), format=fmt))
        d = np.zeros((rows, cols), dtype)
        d[rr, cc] = values
        dense.append(d)
    both = pattern[0] & pattern[1]
    return out[0], out[1], np.where(both, dense[0] * dense[1], 0).astype(dtype)

dtype, width = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(width + len(dtype))
B, C, product = skewed(rng, 16, 1000, dtype, width)
funs = {"row dot": lambda x, y: splyce.einsum("ij,ij->i", x, y),
        "elementwise": lambda x, y: splyce.multiply(x, y, out_format="dense")}
checked = 0
for name, fun in funs.items():
    want = splyce.jit(fun, vectorize=False)(B, C)
    for n in (4, 8):
        for gallop in (0, 2, 16, 32):
            f = splyce.jit(fun, vector_width=n, gallop=gallop)
            got = f(B, C)
            assert same(got, want), (name, n, gallop)
            assert [d.vectorized for d in f.lower(B, C).decisions] == [True]
            checked += 1
    assert np.isnan(np.asarray(want)).any() and np.isinf(np.asarray(want)).any()
    ref = product.sum(axis=1) if name == "row dot" else product
    np.testing.assert_allclose(np.asarray(want), ref, rtol=1e-4, atol=1e-5, equal_nan=True)
prof = splyce.profile(splyce.jit(funs["row dot"], gallop=16), B, C)
assert prof.gallop > 0 and prof.fast_lane > 0, prof
off = splyce.profile(splyce.jit(funs["row dot"], gallop=0), B, C)
assert off.gallop == 0 and off.total == off.fast_lane + off.epilogue, off
# galloping skips coordinates the scalar loop would have stepped over: fewer steps, the same matches
assert prof.epilogue + prof.fast_lane < off.epilogue + off.fast_lane, (prof, off)
print("checked", checked)
"""


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_galloping_bit_identical_to_plain_sparsifier(dtype, width):
    proc = subprocess.run([sys.executable, "-c", CHILD, dtype, str(width)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "checked 16" in proc.stdout


THRESHOLD_CHILD = r"""
import numpy as np, scipy.sparse as sps
import splyce
from splyce.native import codegen
from splyce.options import has_fast_conflict_compares
from splyce.passes.gallop_lane import LOG_CAP, LOG_FROM, skew_threshold

# the profiled build is the timed one: strict int32 pairs run the strict conflict lane where the host has it
conflict = has_fast_conflict_compares(codegen.host_target())

def pair(short, long, swap, rng):
    # one row: `long` even coordinates in one operand, `short` spread over the same range in the other (some
    # even: matches), so that every short coordinate has long ones below it (a galloping jump skips some)
    cols = 2 * long + 1
    l_idx = 2 * np.arange(long)
    s_idx = (np.arange(1, short + 1) * (cols - 1)) // short - rng.integers(0, 2, short)
    mats = []
    for idx in (s_idx, l_idx):
        mats.append(splyce.asarray(sps.csr_array((rng.uniform(-1, 1, idx.size), idx.astype(np.int32),
                                                  np.array([0, idx.size], np.int32)), shape=(1, cols))))
    return mats[::-1] if swap else mats

row_dot = lambda x, y: splyce.einsum("ij,ij->i", x, y)
rng = np.random.default_rng(0)
plain = splyce.jit(row_dot, vectorize=False)
checked = 0
for gallop in (16, 4):
    lane = splyce.jit(row_dot, gallop=gallop)
    # S = 1 and 4 (the option's ratio itself), 8, 64 and 2**(LOG_CAP + 1) (the log capped)
    for short in (1, 4, 8, 64, 1 << (LOG_CAP + 1)):
        edge = skew_threshold(gallop, short, conflict)
        assert edge >= gallop * short and ((short >= 1 << LOG_FROM) == (edge > gallop * short))
        for long, galloped in ((edge - 1, False), (edge, True)):
            for swap in (False, True):
                B, C = pair(short, long, swap, rng)
                assert sorted((B.nnz, C.nnz)) == [short, long]
                prof = splyce.profile(lane, B, C)
                assert (prof.gallop > 0) == galloped, (gallop, short, long, swap, prof)
                got, want = np.asarray(lane(B, C)), np.asarray(plain(B, C))
                assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), (gallop, short, long)
                checked += 1
print("checked", checked)
"""


def test_galloping_chosen_from_the_short_fibers_length():
    """The skewed path runs (profile's galloped coordinates > 0) exactly from long = skew_threshold(R, short):
    R x short below 8 coordinates, (R + 2 floor(log2 short)) x short from 8 on, the log capped at LOG_CAP, more for
    a conflict lane's pair (the strict lane on a host with fast conflict compares: profiled builds build it too);
    one coordinate less runs the fast lane. Both orientations, two R, results bit-identical to the plain
    sparsifier."""
    proc = subprocess.run([sys.executable, "-c", THRESHOLD_CHILD], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "checked 40" in proc.stdout
