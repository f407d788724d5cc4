"""The fast lane's fast-math sum in a vector accumulator (issue 36), run: results within tolerance of the exact
sum with and without galloping (the reduction between the lane and the scalar loop moves with them), strict
results still bit-identical to the plain sparsifier, and the machine code's lane loop adds under the match mask
with no scalar add."""

import re

import numpy as np
import pytest

import splyce
from splyce.bench.limit import _dot, _sealed_vector, fiber_pair, lane_loop


def _pair(n, overlap, skew, vtype, seed=0, itype=np.int32):
    dim, b, bv, c, cv = fiber_pair(n, overlap, skew, itype, vtype, seed)
    common, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(np.dot(bv[ib].astype(np.float64), cv[ic].astype(np.float64)))
    return _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv), exact, common.size


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
@pytest.mark.parametrize("skew", [1, 64])   # 64: 5000 : 78 gallops
def test_fast_math_dot_within_tolerance_and_strict_bit_exact(vtype, skew):
    plain = splyce.jit(_dot, vectorize=False)
    for n in (4, 8, 16):
        for gallop in (0, 16):
            fast = splyce.jit(_dot, fast_math=True, vector_width=n, gallop=gallop)
            strict = splyce.jit(_dot, vector_width=n, gallop=gallop)
            assert "fast-math (vector accumulators)" in fast.lower(*_pair(64, 0.5, 1, vtype)[:2]).as_text("splyce")
            for overlap in (0.0, 0.1, 0.5, 1.0):
                for size in (1, 7, 300, 5000):
                    A, B, exact, _ = _pair(size, overlap, skew, vtype, seed=size)
                    tol = 1e-4 if vtype == np.float32 else 1e-10
                    assert float(fast(A, B)) == pytest.approx(exact, rel=tol, abs=tol)
                    want = np.asarray(plain(A, B))
                    assert np.asarray(strict(A, B)).tobytes() == want.tobytes()


def _lane_loop(asm: str) -> list[str]:
    best = lane_loop(asm)
    assert best is not None, "no fast-lane loop in the machine code"
    return best


@pytest.mark.parametrize("target", ["avx512", "avx2"])
def test_lane_loop_adds_under_the_mask_without_a_scalar_chain(target):
    A, B, _, _ = _pair(256, 0.1, 1, np.float64)
    # the all-pairs lane at n = 4 (unset, the width would be 16 on the avx512 target: the conflict lane)
    fast = _lane_loop(splyce.jit(_dot, fast_math=True, vector_width=4, target=target).lower(A, B).as_text("asm"))
    strict = _lane_loop(splyce.jit(_dot, target=target).lower(A, B).as_text("asm"))
    scalar_add = re.compile(r"^vaddsd\b")
    assert sum(bool(scalar_add.match(x)) for x in strict) == 4       # the ordered sum: one add per lane
    assert not any(scalar_add.match(x) for x in fast)
    if target == "avx512":   # one add of the matched lanes under the mask register
        assert [x for x in fast if re.match(r"^vaddpd\s+%ymm\d+, %ymm\d+, %ymm\d+ \{%k\d\}$", x)]
    else:                    # AVX2: a blend (or and-mask) and a vector add
        assert [x for x in fast if re.match(r"^vaddpd\s+\S+, %ymm\d+, %ymm\d+$", x)]
    assert len(fast) < len(strict)


def _host_has_conflict() -> bool:
    from splyce.native.codegen import host_target

    return {"+avx512f", "+avx512cd"} <= set(host_target().features.split(","))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_conflict_lane_dot_within_tolerance(vtype, itype):
    """fast_math, n = 16 on this host: the conflict lane where the CPU has AVX-512 CD (else the all-pairs
    lane), results within tolerance for lengths around the 16- (int32) and 8-coordinate (int64) blocks, any
    overlap, equal, skewed and galloping lengths, both orders, with and without galloping."""
    for gallop in (0, 16):
        fast = splyce.jit(_dot, fast_math=True, vector_width=16, gallop=gallop, threads=1)   # note on line 1
        reason = fast.lower(*_pair(64, 0.5, 1, vtype, itype=itype)[:2]).as_text("splyce").splitlines()[0]
        assert ("conflict compares" in reason) == _host_has_conflict()
        for skew in (1, 16, 64):
            for overlap in (0.0, 0.1, 0.5, 1.0):
                for size in (1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 300, 5000):
                    A, B, exact, _ = _pair(size, overlap, skew, vtype, seed=size, itype=itype)
                    tol = 1e-4 if vtype == np.float32 else 1e-10
                    assert float(fast(A, B)) == pytest.approx(exact, rel=tol, abs=tol)
                    assert float(fast(B, A)) == pytest.approx(exact, rel=tol, abs=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conflict_lane_paper_kernels_match_the_plain_sparsifier(dtype):
    from splyce.bench.paper_kernels import KERNELS

    for name in ("K1", "K2", "K3", "K5"):
        spec = KERNELS[name]
        ops = spec.operands(size=spec.quick_size, density=0.2, dtype=dtype)
        fast = splyce.jit(spec.fun, fast_math=True, vector_width=16)
        assert ("conflict compares" in fast.lower(*ops).as_text("splyce")) == _host_has_conflict(), name
        want = np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops))
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(fast(*ops)), want, **tol, err_msg=name)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_conflict_lane_machine_code(vtype, itype):
    """AVX-512 code (any host can emit it): one lane step holds the 4 conflicts (vpconflictd; int64: vpconflictq),
    the lzcnt, the permute(s) of C's values and the accumulator's masked moves."""
    A, B, _, _ = _pair(256, 0.1, 1, vtype, itype=itype)
    q = "q" if itype == np.int64 else "d"
    asm = splyce.jit(_dot, fast_math=True, vector_width=16, target="avx512").lower(A, B).as_text("asm")
    lines = [ln.strip() for ln in asm.splitlines()]
    loops = []
    for i, ln in enumerate(lines):
        m = re.match(r"^(\.LBB\w+):", ln)
        if m:
            for j in range(i + 1, len(lines)):
                if re.match(rf"^j\w+\s+{re.escape(m.group(1))}$", lines[j]):
                    loops.append(lines[i + 1:j + 1])
                    break
    step = min((body for body in loops if any(x.startswith(f"vpconflict{q}") for x in body)), key=len)
    assert sum(x.startswith(f"vpconflict{q}\t%zmm") for x in step) == 4
    assert any(x.startswith(f"vplzcnt{q}\t%zmm") for x in step)
    permutes = [x for x in step if re.match(r"^vperm(d|q|ps|pd|[it]2pd)\b", x)]
    assert len(permutes) == (1 if vtype == np.float32 or itype == np.int64 else 2)
    assert [x for x in step if re.search(r"%[yz]mm\d+ \{%k\d\}$", x)]   # the accumulators under the match mask (f32 x 8: a ymm)
    assert not any(x.startswith(("popcnt", "vpcmpeqd")) for x in step)


def test_conflict_lane_profile_and_threads():
    """splyce.profile counts every coordinate once (block advance: 16 per fiber per step; int64: 8), and a
    2-thread build of a conflict-lane kernel gives the same sum within tolerance."""
    fast = splyce.jit(_dot, fast_math=True, vector_width=16)
    for itype, block in ((np.int32, 16), (np.int64, 8)):
        A, B, exact, _ = _pair(5000, 0.1, 1, np.float64, itype=itype)
        prof = splyce.profile(fast, A, B)
        assert prof.fast_lane + prof.epilogue + prof.gallop == 10_000
        assert prof.fast_lane >= 9_000
        if _host_has_conflict():   # block advance: whole blocks
            assert prof.fast_lane % block == 0
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS["K2"]
    ops = spec.operands(size=spec.quick_size, density=0.2)
    want = np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops))
    got = np.asarray(splyce.jit(spec.fun, fast_math=True, vector_width=16, threads=2)(*ops))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("fast_math", [True, False])
def test_int64_lanes_compare_all_64_bits(fast_math):
    """int64 coordinates beyond 2**32 (the 8 x 8 conflict lanes: vpconflictq; the strict one on skewed pairs):
    coordinates equal in their low 32 bits but not above do not match, and every match is found; the strict
    result is the plain sparsifier's bit for bit, the fast_math one within tolerance of the exact sum."""
    rng = np.random.default_rng(3)
    dim = 1 << 40
    low = np.sort(rng.choice(1 << 20, 3000, replace=False)).astype(np.int64)
    for skew in (1, 8):
        b = low + (1 << 33)                                   # B: high bit 33 set
        c_low = low[::skew]
        c = np.concatenate([c_low[: len(c_low) // 2] + (1 << 32),   # same low bits, another high word: no match
                            c_low[len(c_low) // 2:] + (1 << 33)])   # the same coordinates as B's: matches
        bv = rng.uniform(-1, 1, b.size)
        cv = rng.uniform(-1, 1, c.size)
        common, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
        assert common.size == len(c_low) - len(c_low) // 2
        exact = float(np.dot(bv[ib], cv[ic]))
        A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
        f = splyce.jit(_dot, fast_math=fast_math, gallop=0)
        if fast_math:
            assert float(f(A, B)) == pytest.approx(exact, rel=1e-10)
            assert float(f(B, A)) == pytest.approx(exact, rel=1e-10)
        else:
            plain = splyce.jit(_dot, vectorize=False)
            assert np.asarray(f(A, B)).tobytes() == np.asarray(plain(A, B)).tobytes()
            assert np.asarray(f(B, A)).tobytes() == np.asarray(plain(B, A)).tobytes()
            assert float(f(A, B)) == pytest.approx(exact, rel=1e-10)
