"""passes/broadcast_lane.py: the 16 x 16 broadcast-compare lane (fast_math, vector_width=16, a target with
AVX-512 F / BW / DQ but no CD): built only there, its IR and machine code use the instructions it is described
with, and its results match NumPy and the plain sparsifier (K1-K5, bench limit's fiber pairs, explicit zeros,
NaN / Inf, empty and 1-element fibers)."""

import re

import numpy as np
import pytest
from test_splyce_pass import ctx, fast_lanes, kernel_text, stage1  # noqa: F401 (ctx: a fixture)

import splyce
from splyce.bench.limit import _dot, _sealed_vector, fiber_pair, lane_loop
from splyce.native import codegen
from splyce.options import Options
from splyce.passes.broadcast_lane import BROADCAST_FEATURES, has_broadcast_lane_target
from splyce.passes.splyce_pass import run_splyce_pass

REASON = "16 x 8 broadcast compares (no AVX-512 CD), block advance"


def _no_cd(target: codegen.Target) -> codegen.Target:
    features = [f for f in target.features.split(",") if f != "+avx512cd"] + ["-avx512cd"]
    return codegen.Target(target.triple, target.cpu, ",".join(features))


def _host_runs_it() -> bool:
    return set(BROADCAST_FEATURES) <= set(codegen.host_target().features.split(","))


def _jit_no_cd(fun, monkeypatch, target="native", **options):
    """``splyce.jit(fun, target=target, **options)`` with the target's AVX-512 CD taken out (resolved while
    the spy holds)."""
    real = codegen.resolve_target
    with monkeypatch.context() as m:
        m.setattr(codegen, "resolve_target", lambda name: _no_cd(real(name)) if name == target else real(name))
        jitted = splyce.jit(fun, target=target, **options)
        assert "-avx512cd" in jitted.options.target.features
    return jitted


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_broadcast_lane_for_fast_math_width_16_without_cd(ctx, dtype):
    """8 compares of B's 16 keys against C's next 8 coordinates broadcast (scalar load + vector.broadcast), each
    a select of the constant r - 16 into the lane index, no conflict intrinsic; C's values permuted into B's
    lanes by the index; the vector accumulator; the block advance by 16 (B) and 8 (C), as selects of the
    advanced cursor or the cursor."""
    target = _no_cd(codegen.resolve_target("avx512"))
    assert has_broadcast_lane_target(target)
    module = stage1(kernel_text("k1", dtype))
    decisions = run_splyce_pass(module, Options(phases=7, vector_width=16, fast_math=True, target=target))
    assert decisions[0].reason.endswith("(vector accumulators); " + REASON)
    (fast,) = fast_lanes(module)
    lane = str(fast)
    assert "conflict.d" not in lane and "math.ctlz" not in lane
    assert len(re.findall(r"vector\.broadcast %\w+ : i32 to vector<16xi32>", lane)) == 8
    assert len(re.findall(r"arith\.cmpi eq, %\w+, %\w+ : vector<16xi32>", lane)) == 8
    assert len(re.findall(r"arith\.select %\w+, %\w+, %\w+ : vector<16xi1>, vector<16xi32>", lane)) == 8
    assert re.search(r"arith\.cmpi slt, %\w+, %\w+ : vector<16xi32>", lane)
    permute = "llvm.x86.avx512.permvar.sf.512" if dtype == "f32" else "llvm.x86.avx512.vpermi2var.pd.512"
    assert lane.count(permute) == (1 if dtype == "f32" else 2)
    moves = re.findall(r"arith\.addi %\w+, (%c\d+)\w* : index\n\s*%\w+ = arith\.select %\w+, %\w+, %\w+ : index", lane)
    assert sorted(moves) == ["%c16", "%c8"], moves
    assert [str(t) for t in fast.operation.results.types][-1] == f"vector<16x{dtype}>"


CHANGES = {"cd": {"target": "avx512"}, "avx2": {"target": "avx2"}, "strict": {"fast_math": False},
           "n8": {"vector_width": 8}, "i64": {}, "k4": {}}


@pytest.mark.parametrize("change", list(CHANGES))
def test_broadcast_lane_only_where_allowed(ctx, change):
    """With AVX-512 CD the conflict lane; without AVX-512, strict, another width, int64 coordinates or a
    storing kernel: neither."""
    options = {"phases": 7, "vector_width": 16, "fast_math": True, **CHANGES[change]}
    name = options.pop("target", None)
    target = codegen.resolve_target(name) if name else _no_cd(codegen.resolve_target("avx512"))
    module = stage1(kernel_text("k4" if change == "k4" else "k1", "f64", 64 if change == "i64" else 32))
    (decision,) = run_splyce_pass(module, Options(target=target, **options))
    assert decision.vectorized and "broadcast" not in decision.reason
    assert ("conflict compares" in decision.reason) == (change == "cd")


def test_strict_code_unchanged_by_the_target(ctx):
    """Strict kernels: the same IR with and without CD in the target's features (the lane is fast_math only)."""
    texts = []
    for target in (codegen.resolve_target("avx512"), _no_cd(codegen.resolve_target("avx512"))):
        module = stage1(kernel_text("k1", "f64"))
        decisions = run_splyce_pass(module, Options(phases=7, vector_width=16, target=target))
        assert "broadcast" not in decisions[0].reason
        texts.append(str(module))
    assert texts[0] == texts[1]


def _vector(dim, crd, values):
    return _sealed_vector(dim, np.asarray(crd, np.int32), np.asarray(values))


def _exact(b, bv, c, cv):
    _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    return float(np.sum(bv[ib].astype(np.float64) * cv[ic].astype(np.float64)))


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_broadcast_lane_dot_matches_numpy(vtype, monkeypatch):
    """bench limit's fiber pairs (lengths around the block, any overlap, both orders, with and without
    galloping), empty and 1-element fibers: within tolerance of NumPy's exact sum; the lane is built where the
    host can run it."""
    for gallop in (0, 16):
        fast = _jit_no_cd(_dot, monkeypatch, fast_math=True, vector_width=16, gallop=gallop)
        A, B = _vector(100, [1, 5], np.ones(2, vtype)), _vector(100, [5], np.ones(1, vtype))
        assert (REASON in fast.lower(A, B).as_text("splyce")) == _host_runs_it()
        for skew in (1, 64):
            for overlap in (0.0, 0.1, 0.5, 1.0):
                for size in (1, 15, 16, 17, 31, 32, 33, 300, 5000):
                    dim, b, bv, c, cv = fiber_pair(size, overlap, skew, np.int32, vtype, seed=size)
                    exact = _exact(b, bv, c, cv)
                    tol = 1e-4 if vtype == np.float32 else 1e-10
                    A, B = _vector(dim, b, bv), _vector(dim, c, cv)
                    assert float(fast(A, B)) == pytest.approx(exact, rel=tol, abs=tol), (skew, overlap, size)
                    assert float(fast(B, A)) == pytest.approx(exact, rel=tol, abs=tol), (skew, overlap, size)
        empty = _vector(100, np.zeros(0, np.int32), np.zeros(0, vtype))
        one = _vector(100, [7], np.array([3.0], vtype))
        many = _vector(100, np.arange(0, 100, 3), np.arange(34, dtype=vtype))
        assert float(fast(empty, many)) == 0.0 and float(fast(many, empty)) == 0.0
        assert float(fast(one, many)) == 0.0 and float(fast(many, one)) == 0.0       # 7 is not a multiple of 3
        one = _vector(100, [6], np.array([3.0], vtype))
        assert float(fast(one, many)) == 6.0 and float(fast(many, one)) == 6.0


def special_values(b, c, vtype):
    """Values for the fibers ``b`` (coordinates 0, 2, 4, ...) and ``c`` (0, 3, 6, ...): explicit zeros, a
    matched NaN, infinities without a partner, infinity times zero, infinity minus infinity."""
    rng = np.random.default_rng(3)
    for case in ("zeros", "nan matched", "inf unmatched", "inf times zero", "inf minus inf"):
        bv = rng.uniform(1, 2, b.size).astype(vtype)
        cv = rng.uniform(1, 2, c.size).astype(vtype)
        if case == "zeros":
            bv[::5] = 0.0
        elif case == "nan matched":
            bv[b == 66] = np.nan
        elif case == "inf unmatched":
            bv[b % 3 != 0] = np.inf
            cv[c % 2 != 0] = -np.inf
        elif case == "inf times zero":
            bv[b == 120] = np.inf
            cv[c == 120] = 0.0
        else:
            bv[b == 30] = np.inf
            cv[c == 300] = -np.inf
        yield bv, cv


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_broadcast_lane_explicit_zeros_nan_inf(vtype, monkeypatch):
    """Stored zeros are matched like any value (0 x Inf = NaN), NaN / Inf at matched coordinates reach the sum,
    at unmatched ones never (the lane sums under the match mask): as the plain sparsifier, block by block."""
    fast = _jit_no_cd(_dot, monkeypatch, fast_math=True, vector_width=16, gallop=0)
    plain = splyce.jit(_dot, vectorize=False)
    b = np.arange(0, 400, 2, dtype=np.int32)
    c = np.arange(0, 600, 3, dtype=np.int32)
    for bv, cv in special_values(b, c, vtype):
        A, B = _vector(600, b, bv), _vector(600, c, cv)
        want = float(plain(A, B))
        tol = 1e-4 if vtype == np.float32 else 1e-10
        for got in (float(fast(A, B)), float(fast(B, A))):
            if np.isfinite(want):
                assert got == pytest.approx(want, rel=tol) and got == pytest.approx(_exact(b, bv, c, cv), rel=tol)
            else:
                assert np.isnan(got) == np.isnan(want) and (np.isnan(got) or got == want), case


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_broadcast_lane_paper_kernels_match_the_plain_sparsifier(dtype, monkeypatch):
    from splyce.bench.paper_kernels import KERNELS

    for name in ("K1", "K2", "K3", "K4", "K5"):
        spec = KERNELS[name]
        ops = spec.operands(size=spec.quick_size, density=0.2, dtype=dtype)
        fast = _jit_no_cd(spec.fun, monkeypatch, fast_math=True, vector_width=16)
        if name != "K4":    # K4 stores: no summing lane
            assert (REASON in fast.lower(*ops).as_text("splyce")) == _host_runs_it(), name
        want = np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops))
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(fast(*ops)), want, **tol, err_msg=name)


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_broadcast_lane_machine_code(vtype, monkeypatch):
    """AVX-512 code without CD (any host can emit it): one lane step holds the 8 dword compares against
    broadcast coordinates, no vpconflictd, the permute(s) of C's values, the accumulators' masked moves and a
    cmov advance (no setcc)."""
    dim, b, bv, c, cv = fiber_pair(256, 0.1, 1, np.int32, vtype)
    jitted = _jit_no_cd(_dot, monkeypatch, target="avx512", fast_math=True, vector_width=16)
    step = lane_loop(jitted.lower(_vector(dim, b, bv), _vector(dim, c, cv)).as_text("asm"))
    assert sum(x.startswith("vpcmpeqd") for x in step) == 8 and not any("vpconflictd" in x for x in step)
    assert sum("{1to16}" in x for x in step if x.startswith("vpcmpeqd")) >= 6   # C's keys broadcast from memory
    assert any(x.startswith("cmov") for x in step) and not any(x.startswith("set") for x in step)
    permutes = [x for x in step if re.match(r"^vperm(d|ps|[it]2pd)\b", x)]
    assert len(permutes) == (1 if vtype == np.float32 else 2)
    assert [x for x in step if re.search(r"%zmm\d+ \{%k\d\}$", x)]     # the accumulators under the match mask
