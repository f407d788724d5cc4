"""passes/strict_conflict_lane.py: the strict conflict lane (16 x 16 int32 coordinates, 8 x 8 int64 ones) every
pair that does not gallop starts in (strict sums, n = 4, f32 / f64 values, a target with AVX-512 CD): built only
there, its IR holds what it is described with, and its results are bit-identical to the plain sparsifier
(order-sensitive values, NaN, Inf, signed zeros, empty and short fibers, skewed and equal lengths, any overlap,
random int64 pairs, K1-K5)."""

import re

import numpy as np
import pytest
from filecheck import check_in_order
from hypothesis import given, settings, strategies as st
from test_broadcast_lane import _no_cd
from test_splyce_pass import ctx, kernel_text, stage1  # noqa: F401 (ctx: a fixture)

import splyce
from splyce.bench.limit import _dot, _sealed_vector, fiber_pair
from splyce.native import codegen
from splyce.options import Options, has_fast_conflict_compares
from splyce.passes.fast_lane import FAST_LANE_ATTR
from splyce.passes.splyce_pass import run_splyce_pass
from splyce.passes.strict_conflict_lane import STRICT_CONFLICT_ATTR, StrictConflictLaneBuilder

REASON = "first a strict lane of 16 x 16 conflict compares (vpconflictd)"
REASON64 = "first a strict lane of 8 x 8 conflict compares (vpconflictq)"


def _host_runs_it() -> bool:
    return has_fast_conflict_compares(codegen.host_target())


def _zen4() -> codegen.Target:
    """An AMD Zen 4 target with AVX-512 CD (any host can emit its code)."""
    return codegen.Target(codegen.host_target().triple, "znver4", codegen.resolve_target("avx512").features)


def _strict_lanes(module) -> list:
    found = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if inner.operation.name == "scf.while" and STRICT_CONFLICT_ATTR in inner.operation.attributes:
                        found.append(inner)
                    visit(inner.operation)

    visit(module.operation)
    return found


def _check_lane(module, dtype: str, block: int, conflict: str, permute: str) -> None:
    """The strict lane of ``module``'s K1: ``conflict`` 4 times, C's values permuted (``permute``) once (twice for
    f64 values on blocks of 16), the buffered phase 2 (``_check_buffered``), whole blocks advanced, and a credit
    (i32) in its condition; then the all-pairs lane, then the scalar loop, in one block."""
    (lane,) = _strict_lanes(module)
    text = str(lane)
    assert text.count(f'"llvm.x86.avx512.conflict.{conflict}.512"') == 4
    values = 1 if block == 8 or dtype == "f32" else 2
    assert text.count(permute) == values
    _check_buffered(lane, text, dtype, block)
    assert re.search(rf"arith\.select %\w+, %c{block}\w*, %c0\w* : index", text)
    siblings = [op for op in lane.operation.block.operations if op.operation.name == "scf.while"]
    assert siblings[0] == lane and FAST_LANE_ATTR in siblings[1].operation.attributes and len(siblings) == 3
    # the strict lane's results feed the all-pairs lane: the cursors directly, the sum through the buffer's last adds
    flush = [op for op in lane.operation.block.operations if op.operation.name == "scf.for"]
    assert len(flush) == 1 and str(flush[0]).count("arith.addf") == 1 and "fastmath" not in str(flush[0])


def _check_buffered(lane, text: str, dtype: str, block: int) -> None:
    """The buffered phase 2: the step's terms compressed by the match mask (one compress; f64 terms of a block of
    16: one per zmm half, by its half of the mask), stored whole at the buffer's fill, which moves on by the
    mask's popcount; under one scf.if (the fill past BUFFER) a loop of one add per buffered term (no fastmath);
    no add, cttz, permute per lane or reduction in the step itself; the credit in the condition; on entry (blocks
    of 16) the expected matches a step (f64 arithmetic on the lengths and the first and last coordinates) against
    PACKED_DENSE."""
    halves = dtype == "f64" and block == 16
    lanes = 8 if halves else block
    compress = re.findall(r'llvm\.call_intrinsic "llvm\.experimental\.vector\.compress"\(%\w+, %\w+, %\w+\) : '
                          rf'\(vector<(\d+)x{dtype}>, vector<(\d+)xi1>, vector<\d+x{dtype}>\)', text)
    assert compress == [(str(lanes), str(lanes))] * (2 if halves else 1)
    stores = re.findall(rf"vector\.store %\w+, %\w+\[%\w+\] : memref<{StrictConflictLaneBuilder.BUFFER + block}x{dtype}>, "
                        rf"vector<{lanes}x{dtype}>", text)
    assert len(stores) == (2 if halves else 1)
    assert "math.cttz" not in text and "vector.reduction" not in text and "math.ctpop" in text
    adds = re.findall(rf"arith\.addf %\w+, %\w+ : {dtype}\n", text)
    assert len(adds) == 1 and "fastmath" not in "".join(adds)
    check_in_order(text, ["math.ctpop", re.compile(rf"arith\.cmpi ugt, %\w+, %c{StrictConflictLaneBuilder.BUFFER}\b"),
                          "scf.if", "scf.for", re.compile(rf"memref\.load %\w+\[%\w+\] : memref<\d+x{dtype}>"),
                          "arith.addf"])
    assert re.search(r"arith\.cmpi sge, %\w+, %c0_i32", text)      # the credit
    if block == 16:
        entry = str(lane.operation.block)
        check_in_order(entry, [re.compile(r"scf\.if %\w+ -> \(i32\)"), re.compile(r"arith\.uitofp %\w+ : i32 to f64"),
                               "arith.minimumf", "arith.maximumf",
                               f"arith.constant {StrictConflictLaneBuilder.PACKED_DENSE[int(dtype[1:])]:e} : f64",
                               re.compile(r"arith\.cmpf oge, %\w+, %\w+ : f64"), "scf.yield", "} else {"])


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_strict_conflict_lane_ir(ctx, dtype):
    """Strict K1 on an AMD Zen 4 target: the lane before the all-pairs lane (``_check_lane``)."""
    module = stage1(kernel_text("k1", dtype))
    (decision,) = run_splyce_pass(module, Options(phases=7, target=_zen4()))
    assert decision.vectorized and REASON in decision.reason and "n=4" in decision.reason
    assert "matched lanes packed by vcompress, stored into a buffer, added in order" in decision.reason
    permute = "llvm.x86.avx512.permvar.sf.512" if dtype == "f32" else "llvm.x86.avx512.vpermi2var.pd.512"
    _check_lane(module, dtype, 16, "d", permute)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_strict_conflict_lane_int64_ir(ctx, dtype):
    """int64 coordinates: the lane on blocks of 8 (4 vpconflictq, one 8-lane permute of C's values, the buffered
    phase 2 on one ymm / zmm of terms), only skewed pairs entering it."""
    module = stage1(kernel_text("k1", dtype, 64))
    (decision,) = run_splyce_pass(module, Options(phases=7, target=_zen4()))
    assert decision.vectorized and REASON64 in decision.reason and "n=4" in decision.reason
    assert "packed by vcompress, stored into a buffer" in decision.reason and "ratio >= 6 enter" in decision.reason
    permute = "llvm.x86.avx2.permps" if dtype == "f32" else "llvm.x86.avx512.permvar.df.512"
    _check_lane(module, dtype, 8, "q", permute)


CHANGES = {"fast_math": {"fast_math": True, "vector_width": 16}, "avx2": {"target": "avx2"}, "no cd": {},
           "sapphire rapids": {"target": "avx512"},
           "n8": {"vector_width": 8}, "phases": {"phases": 5}, "k4": {}}


@pytest.mark.parametrize("change", list(CHANGES))
def test_strict_conflict_lane_only_where_allowed(ctx, change):
    """fast_math (the vector-accumulator conflict lane instead), AVX2, Zen 4 without CD, a CPU whose vpconflictd is
    slow (Sapphire Rapids, the named "avx512" target), another width, phase 2 scalar, a storing kernel: no strict
    conflict lane."""
    options = {"phases": 7, **CHANGES[change]}
    name = options.pop("target", None)
    target = codegen.resolve_target(name) if name else _zen4()
    if change == "no cd":
        target = _no_cd(target)
    text = kernel_text("k4") if change == "k4" else kernel_text("k1")
    module = stage1(text)
    decisions = run_splyce_pass(module, Options(target=target, **options))
    assert decisions[0].vectorized and not any("first a strict lane" in d.reason for d in decisions)
    assert not _strict_lanes(module)
    assert ("conflict.d" in str(module)) == (change == "fast_math")


def _vector(dim, crd, values, itype=np.int32):
    return _sealed_vector(dim, np.asarray(crd, itype), np.asarray(values))


def _same(x, y) -> bool:
    return np.asarray(x).tobytes() == np.asarray(y).tobytes()


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_strict_conflict_lane_bit_identical_on_fiber_pairs(vtype, itype):
    """bench limit's fiber pairs, lengths around the blocks (1-5000 coordinates), any overlap, equal and skewed
    lengths (1:2, 1:4, 1:6 at the ratio from which a pair stays in the lane, 1:16 and 1:64, which gallops at some lengths), both
    orders, with and without galloping, empty and 1-element fibers: bit-identical to the plain sparsifier; the lane
    is built where the host can run it."""
    plain = splyce.jit(_dot, vectorize=False)
    for gallop in (0, 16):
        lane = splyce.jit(_dot, gallop=gallop)
        A, B = _vector(100, [1, 5], np.ones(2, vtype), itype), _vector(100, [5], np.ones(1, vtype), itype)
        reason = REASON if itype == np.int32 else REASON64
        assert (reason in lane.lower(A, B).as_text("splyce")) == _host_runs_it()
        for skew in (1, 2, 4, 6, 16, 64):
            for overlap in (0.0, 0.1, 0.5, 1.0):
                for size in (1, 7, 8, 9, 15, 16, 17, 33, 64, 65, 300, 5000):
                    dim, b, bv, c, cv = fiber_pair(size, overlap, skew, itype, vtype, seed=size + skew)
                    A, B = _vector(dim, b, bv, itype), _vector(dim, c, cv, itype)
                    assert _same(lane(A, B), plain(A, B)), (gallop, skew, overlap, size)
                    assert _same(lane(B, A), plain(B, A)), (gallop, skew, overlap, size)
        empty = _vector(100, np.zeros(0, itype), np.zeros(0, vtype), itype)
        many = _vector(100, np.arange(0, 100, 3), np.arange(34, dtype=vtype), itype)
        for x, y in ((empty, many), (many, empty), (_vector(100, [7], np.array([3.0], vtype), itype), many),
                     (_vector(100, [6], np.array([3.0], vtype), itype), many)):
            assert _same(lane(x, y), plain(x, y)) and _same(lane(y, x), plain(y, x))


def _special_values(b, c, vtype):
    """Values for the long fiber ``b`` and the short ``c``: order-sensitive magnitudes (any other order of the
    additions gives other bits), explicit and negative zeros, matched NaN, unmatched infinities, Inf x 0,
    Inf - Inf."""
    rng = np.random.default_rng(5)
    common = np.intersect1d(b, c)
    for case in ("order", "zeros", "negative zeros", "nan matched", "inf unmatched", "inf times zero",
                 "inf minus inf"):
        bv = rng.uniform(1, 2, b.size).astype(vtype)
        cv = rng.uniform(1, 2, c.size).astype(vtype)
        if case == "order":
            bv = (rng.choice([-1, 1], b.size) * 10.0 ** rng.uniform(-12, 12, b.size)).astype(vtype)
        elif case == "zeros":
            bv[::5] = 0.0
            cv[::3] = -0.0
        elif case == "negative zeros":   # every product -0.0: the sum's sign is the plain sparsifier's
            bv[:] = -0.0
        elif case == "nan matched":
            bv[b == common[len(common) // 2]] = np.nan
        elif case == "inf unmatched":
            bv[~np.isin(b, c)] = np.inf
            cv[~np.isin(c, b)] = -np.inf
        elif case == "inf times zero":
            bv[b == common[1]] = np.inf
            cv[c == common[1]] = 0.0
        else:
            bv[b == common[2]] = np.inf
            cv[c == common[-3]] = -np.inf
        yield case, bv, cv


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_strict_conflict_lane_special_values(vtype, itype):
    """Skewed (1:5, 1:17: the lane runs) and equal-length pairs (it does not), both orders, with the special
    values above at matched and unmatched coordinates: bit-identical to the plain sparsifier."""
    lane, plain = splyce.jit(_dot, gallop=0), splyce.jit(_dot, vectorize=False)
    b = np.arange(0, 3000, 1, dtype=itype)
    for c in (np.arange(0, 3000, 5, dtype=itype), np.arange(1, 3000, 17, dtype=itype),
              np.arange(0, 6000, 2, dtype=itype)[:3000]):
        for case, bv, cv in _special_values(b, c, vtype):
            A, B = _vector(6000, b, bv, itype), _vector(6000, c, cv, itype)
            assert _same(lane(A, B), plain(A, B)), (case, c.size)
            assert _same(lane(B, A), plain(B, A)), (case, c.size)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_strict_conflict_lane_paper_kernels_bit_identical(dtype):
    from splyce.bench.paper_kernels import KERNELS

    for name in ("K1", "K2", "K3", "K4", "K5"):
        spec = KERNELS[name]
        ops = spec.operands(size=spec.quick_size, density=0.2, dtype=dtype)
        lane = splyce.jit(spec.fun)
        assert (REASON in lane.lower(*ops).as_text("splyce")) == (_host_runs_it() and name != "K4"), name
        assert _same(lane(*ops), splyce.jit(spec.fun, vectorize=False)(*ops)), name


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_strict_conflict_lane_machine_code(itype, vtype):
    """The host's code: on AMD Zen 4 the kernel holds the lane's 4 vpconflictd (int64: vpconflictq), the matched
    terms' register vcompressps / vcompresspd (two for f64 terms of a 16-block: one per zmm half; never the
    memory form, microcoded on Zen 4), the mask's popcnt, and the buffer's ordered scalar adds; elsewhere no
    conflict instruction (the strict kernel has no conflict lane)."""
    dim, b, bv, c, cv = fiber_pair(256, 0.1, 8, itype, vtype)
    asm = splyce.jit(_dot).lower(_vector(dim, b, bv, itype), _vector(dim, c, cv, itype)).as_text("asm")
    q = "q" if itype == np.int64 else "d"
    assert len(re.findall(rf"\bvpconflict{q}\b", asm)) == (4 if _host_runs_it() else 0)
    if not _host_runs_it():
        return
    s = "d" if vtype == np.float64 else "s"
    compresses = re.findall(rf"\bvcompressp{s}\s+(\S+), (\S+)", asm)
    assert len(compresses) == (2 if (itype, vtype) == (np.int32, np.float64) else 1)
    assert all(dst.startswith("%") for _, dst in compresses)      # register form
    assert re.search(r"\bpopcnt[lqw]?\b", asm) and re.search(rf"\bvadds{s}\b", asm)


@st.composite
def _fiber_pairs(draw):
    """Two sorted fibers of distinct int64 coordinates anywhere below 2**62 (the long one up to 400, the short one a
    ratio of 1-40 shorter, a share of it taken from the long one), values with NaN / Inf / signed zeros sometimes."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_long = draw(st.integers(0, 400))
    n_short = n_long // draw(st.integers(1, 40))
    span = draw(st.sampled_from([4 * (n_long + n_short) + 1, 2**33, 2**62]))
    long_ = np.unique(rng.integers(0, span, n_long, dtype=np.int64))
    shared = rng.choice(long_, min(len(long_), int(n_short * draw(st.floats(0, 1)))), replace=False)
    short = np.unique(np.concatenate([shared, rng.integers(0, span, n_short - len(shared), dtype=np.int64)]))
    values = []
    for crd in (long_, short):
        v = rng.uniform(-2, 2, len(crd)) * 10.0 ** rng.uniform(-8, 8, len(crd))
        if len(v) and draw(st.booleans()):
            v[rng.integers(0, len(v))] = draw(st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0]))
        values.append(v)
    return span, long_, values[0], short, values[1]


@settings(max_examples=60, deadline=None)
@given(_fiber_pairs())
def test_int64_lanes_match_the_plain_sparsifier(pair):
    """int64 fiber pairs of any lengths, skews and spans: the strict lanes bit for bit the plain sparsifier, the
    fast_math lane within tolerance of it (NaN where it has NaN), both orders."""
    span, b, bv, c, cv = pair
    A, B = _vector(span, b, bv, np.int64), _vector(span, c, cv, np.int64)
    plain, strict = splyce.jit(_dot, vectorize=False), splyce.jit(_dot)
    fast = splyce.jit(_dot, fast_math=True)
    for x, y in ((A, B), (B, A)):
        want = np.asarray(plain(x, y))
        assert _same(strict(x, y), want)
        got = float(fast(x, y))
        if np.isnan(want):
            assert np.isnan(got)
        else:
            assert got == pytest.approx(float(want), rel=1e-9, abs=1e-9 * max(1.0, float(np.abs(bv).sum())))
