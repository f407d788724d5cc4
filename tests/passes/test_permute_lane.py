"""passes/permute_lane.py: the n = 4 fast_math lane whose other operand's f64 values are permuted by an index
(``vpermd``), on AVX2 targets without AVX-512: built only there, its IR and machine code use the instructions
it is described with (no branch on a match), strict code is unchanged by it, and its results match NumPy and
the plain sparsifier (K1-K5, bench limit's fiber pairs, explicit zeros, NaN / Inf, empty and 1-element
fibers)."""

import re

import numpy as np
import pytest
from test_broadcast_lane import special_values
from test_splyce_pass import ctx, fast_lanes, kernel_text, stage1  # noqa: F401 (ctx: a fixture)

import splyce
from splyce.bench.limit import _dot, _sealed_vector, fiber_pair, lane_loop
from splyce.native import codegen
from splyce.options import Options
from splyce.passes.permute_lane import PERMD, has_permute_lane_target
from splyce.passes.splyce_pass import run_splyce_pass

REASON = "f64 values by an index and vpermd (AVX2)"
AVX2 = "avx2"   # a named target (Haswell): any host can build and emit its code


def _host_runs_it() -> bool:
    return has_permute_lane_target(codegen.host_target())


def test_permute_lane_ir(ctx):
    """Phase 1's 4 compares of B against C rotated, the lane index built from them (sign-extended masks
    AND-ed with the constants (i + r) % 4 - 4, OR-ed), spread to dword pairs, one vpermd of C's values (as
    8 x i32) and the vector accumulator's masked add; phase 3 is the all-pairs lane's (no block advance)."""
    target = codegen.resolve_target(AVX2)
    assert has_permute_lane_target(target)
    module = stage1(kernel_text("k1", "f64"))
    decisions = run_splyce_pass(module, Options(phases=7, vector_width=4, fast_math=True, target=target))
    assert decisions[0].reason.endswith("(vector accumulators); " + REASON)
    (fast,) = fast_lanes(module)
    lane = str(fast)
    assert lane.count(PERMD) == 1
    assert len(re.findall(r"arith\.cmpi eq, %\w+, %\w+ : vector<4xi32>", lane)) == 4
    assert len(re.findall(r"arith\.extsi %\w+ : vector<4xi1> to vector<4xi32>", lane)) == 4
    assert len(re.findall(r"arith\.andi %\w+, %\w+ : vector<4xi32>", lane)) == 4
    assert re.search(r"vector\.bitcast %\w+ : vector<4xf64> to vector<8xi32>", lane)
    assert re.search(r"vector\.bitcast %\w+ : vector<8xi32> to vector<4xf64>", lane)
    for r in range(4):   # the index constants: C's lane (i + r) % 4, less 4 (negative: matched)
        consts = ", ".join(str((i + r) % 4 - 4) for i in range(4))
        assert f"dense<[{consts}]> : vector<4xi32>" in lane, r
    assert "dense<[0, 1, 0, 1, 0, 1, 0, 1]> : vector<8xi32>" in lane
    assert not re.search(r"arith\.select %\w+, %\w+, %\w+ : index", lane)   # the pivot advance, not a block one
    assert [str(t) for t in fast.operation.results.types][-1] == "vector<4xf64>"


CHANGES = {"avx512": {"target": "avx512"}, "strict": {"fast_math": False}, "n8": {"vector_width": 8},
           "i64": {}, "f32": {}, "k4": {}, "phases": {"phases": 3}}


@pytest.mark.parametrize("change", list(CHANGES))
def test_permute_lane_only_where_allowed(ctx, change):
    """An AVX-512 target, strict, another width, int64 coordinates, float32 values, a storing kernel or phase 1
    scalar: the all-pairs lane."""
    options = {"phases": 7, "vector_width": 4, "fast_math": True, "target": AVX2, **CHANGES[change]}
    target = codegen.resolve_target(options.pop("target"))
    dtype = "f32" if change == "f32" else "f64"
    module = stage1(kernel_text("k4" if change == "k4" else "k1", dtype, 64 if change == "i64" else 32))
    (decision,) = run_splyce_pass(module, Options(target=target, **options))
    assert decision.vectorized and REASON not in decision.reason
    assert PERMD not in str(module)


def test_strict_code_unchanged_by_the_lane(ctx):
    """Strict kernels: the same IR for an AVX2 and an AVX-512 target (the lane is fast_math only), and no
    permute; fast_math on the AVX2 target differs only by the lane."""
    texts = []
    for name in (AVX2, "avx512"):
        module = stage1(kernel_text("k1", "f64"))
        decisions = run_splyce_pass(module, Options(phases=7, vector_width=4, target=codegen.resolve_target(name)))
        assert REASON not in decisions[0].reason
        texts.append(str(module))
    assert texts[0] == texts[1] and PERMD not in texts[0]


def test_permute_lane_machine_code():
    """AVX2 code (Haswell, any host can emit it): one lane step holds the 4 xmm dword compares, the permute of
    C's values (vpermd from memory), no vpermpd rotations, one blend (the accumulator's), and every
    conditional jump tests the cursors (cmp / sub of 64-bit registers): no branch on a match."""
    dim, b, bv, c, cv = fiber_pair(256, 0.1, 1, np.int32, np.float64)
    jitted = splyce.jit(_dot, target=AVX2, fast_math=True, vector_width=4)
    A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
    assert REASON in jitted.lower(A, B).as_text("splyce")
    step = lane_loop(jitted.lower(A, B).as_text("asm"))
    assert sum(re.match(r"^vpcmpeqd\s.*%xmm\d+$", x) is not None for x in step) == 4
    assert any(re.match(r"^vpermd\s+\(", x) for x in step)
    assert not any(x.startswith(("vpermpd", "vperm2", "vgather")) for x in step)
    assert sum(x.startswith("vblendv") for x in step) == 1
    assert not any(x.startswith(("vptest", "vtestp", "vmovmsk", "vpmovmskb")) for x in step)
    sets_flags = re.compile(r"^(cmp|sub|test|add|and|or|xor|sbb|adc|inc|dec|bt|neg)[bwlq]?\s")
    for k, x in enumerate(step):
        if re.match(r"^j(?!mp)\w+\s", x):
            setter = next(y for y in reversed(step[:k]) if sets_flags.match(y))
            assert re.match(r"^(cmpq|subq)\s+(\$\d+|%r\w+), %r\w+$", setter), (x, setter)


def _vector(dim, crd, values):
    return _sealed_vector(dim, np.asarray(crd, np.int32), np.asarray(values))


def _exact(b, bv, c, cv):
    _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    return float(np.sum(bv[ib].astype(np.float64) * cv[ic].astype(np.float64)))


@pytest.mark.parametrize("target", ["native", AVX2])
def test_permute_lane_dot_matches_numpy(target):
    """bench limit's fiber pairs (lengths around the block, any overlap, both orders, with and without
    galloping), empty and 1-element fibers: within tolerance of NumPy's exact sum; on the host (where it is
    an AVX2 CPU without AVX-512: the lane) and as Haswell code (run where the host has AVX2)."""
    if target == AVX2 and "+avx2" not in codegen.host_target().features.split(","):
        target = "native"   # the lane's code cannot run here: the host's own code still must be right
    for gallop in (0, 16):
        fast = splyce.jit(_dot, target=target, fast_math=True, vector_width=4, gallop=gallop)
        A, B = _vector(100, [1, 5], np.ones(2)), _vector(100, [5], np.ones(1))
        built = REASON in fast.lower(A, B).as_text("splyce")
        assert built == (target == AVX2 or _host_runs_it())
        for skew in (1, 64):
            for overlap in (0.0, 0.1, 0.5, 1.0):
                for size in (1, 3, 4, 5, 7, 8, 9, 300, 5000):
                    dim, b, bv, c, cv = fiber_pair(size, overlap, skew, np.int32, np.float64, seed=size)
                    exact = _exact(b, bv, c, cv)
                    A, B = _vector(dim, b, bv), _vector(dim, c, cv)
                    assert float(fast(A, B)) == pytest.approx(exact, rel=1e-10, abs=1e-10), (skew, overlap, size)
                    assert float(fast(B, A)) == pytest.approx(exact, rel=1e-10, abs=1e-10), (skew, overlap, size)
        empty = _vector(100, np.zeros(0, np.int32), np.zeros(0))
        many = _vector(100, np.arange(0, 100, 3), np.arange(34, dtype=np.float64))
        assert float(fast(empty, many)) == 0.0 and float(fast(many, empty)) == 0.0
        one = _vector(100, [7], np.array([3.0]))
        assert float(fast(one, many)) == 0.0 and float(fast(many, one)) == 0.0       # 7 is not a multiple of 3
        one = _vector(100, [6], np.array([3.0]))
        assert float(fast(one, many)) == 6.0 and float(fast(many, one)) == 6.0


def test_permute_lane_every_lane_pairing():
    """Every (B lane, C lane) pairing of one 4 x 4 step, alone and all four at once: each matched value is
    read from the right C lane (a wrong index or dword pair would read a neighbour's value)."""
    fast = splyce.jit(_dot, fast_math=True, vector_width=4, gallop=0)
    cv = np.array([10.0, 200.0, 3000.0, 40000.0, 1.0, 1.0, 1.0, 1.0])
    for i in range(4):
        for j in range(4):
            b = np.array([100 + 4 * k + (k == i) * (4 * (j - i)) + (k != i) for k in range(4)] + [900, 901, 902, 903])
            b = np.sort(np.unique(b))
            c = np.array([100 + 4 * k for k in range(4)] + [950, 951, 952, 953])
            bv = np.arange(1, b.size + 1, dtype=np.float64)
            A, B = _vector(1000, b, bv), _vector(1000, c, cv)
            assert float(fast(A, B)) == _exact(b, bv, c, cv) and float(fast(B, A)) == _exact(b, bv, c, cv)
    b = np.array([100, 104, 108, 112, 900, 901, 902, 903])
    c = np.array([100, 104, 108, 112, 950, 951, 952, 953])
    bv = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert float(fast(_vector(1000, b, bv), _vector(1000, c, cv))) == 10.0 + 400.0 + 9000.0 + 160000.0


def test_permute_lane_explicit_zeros_nan_inf():
    """Stored zeros are matched like any value (0 x Inf = NaN), NaN / Inf at matched coordinates reach the sum,
    at unmatched ones never (the lane sums under the match mask; an unmatched lane's permuted value is any of
    C's): as the plain sparsifier."""
    fast = splyce.jit(_dot, fast_math=True, vector_width=4, gallop=0)
    plain = splyce.jit(_dot, vectorize=False)
    b = np.arange(0, 400, 2, dtype=np.int32)
    c = np.arange(0, 600, 3, dtype=np.int32)
    for bv, cv in special_values(b, c, np.float64):
        A, B = _vector(600, b, bv), _vector(600, c, cv)
        want = float(plain(A, B))
        for got in (float(fast(A, B)), float(fast(B, A))):
            if np.isfinite(want):
                assert got == pytest.approx(want, rel=1e-10) and got == pytest.approx(_exact(b, bv, c, cv), rel=1e-10)
            else:
                assert np.isnan(got) == np.isnan(want) and (np.isnan(got) or got == want), case


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_permute_lane_paper_kernels_match_the_plain_sparsifier(dtype):
    """K1-K5 fast_math on the host within tolerance of the plain sparsifier (f64: the lane where the host is
    an AVX2 CPU without AVX-512; f32: the all-pairs lane)."""
    from splyce.bench.paper_kernels import KERNELS

    for name in ("K1", "K2", "K3", "K4", "K5"):
        spec = KERNELS[name]
        ops = spec.operands(size=spec.quick_size, density=0.2, dtype=dtype)
        fast = splyce.jit(spec.fun, fast_math=True, vector_width=4)
        if name != "K4":    # K4 stores: no summing lane
            built = REASON in fast.lower(*ops).as_text("splyce")
            assert built == (_host_runs_it() and dtype == np.float64), name
        want = np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops))
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(fast(*ops)), want, **tol, err_msg=name)
