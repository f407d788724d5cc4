"""The strict lanes across bench sweep's coordinate distributions (issue 59), every coordinate / value type pair:
bit for bit the plain sparsifier (special values included: NaN, Inf, signed zeros, order-sensitive magnitudes), the
fast_math lane within tolerance; the buffered strict lane's flushes (more matches than its buffer holds); the lane
each pair took counted by ``splyce.profile`` and listed in the plan text."""

import numpy as np
import pytest

import splyce
from splyce.bench import sweep
from splyce.bench.limit import _dot, _sealed_vector
from splyce.native import codegen
from splyce.options import has_fast_conflict_compares
from splyce.passes.strict_conflict_lane import StrictConflictLaneBuilder

TYPES = [(np.int32, np.float32), (np.int32, np.float64), (np.int64, np.float32), (np.int64, np.float64)]
DIM = 1 << 30
QUICK = ("uniform x2", "powerlaw 1.2", "skew 1:16")


def _host_runs_it() -> bool:
    return has_fast_conflict_compares(codegen.host_target())


def _values(rng, crd, vtype, case):
    v = rng.uniform(-1, 1, crd.size) * 10.0 ** rng.uniform(-6, 6, crd.size)   # any other order: other bits
    if case == "special" and crd.size:
        at = rng.choice(crd.size, size=min(crd.size, 6), replace=False)
        v[at] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.inf][:at.size]
    return v.astype(vtype)


_KERNELS = (splyce.jit(_dot), splyce.jit(_dot, vectorize=False), splyce.jit(_dot, fast_math=True))


def _kernels(vtype):
    """The strict, plain and fast_math kernels (one jitted function each: compiled once per type pair)."""
    return _KERNELS


def _check(name, n, itype, vtype, seed=0):
    strict, plain, fast = _kernels(vtype)
    b, c = sweep.distribution(name, n, seed)
    dim = DIM   # one shape for every case: one compiled kernel per type pair
    rng = np.random.default_rng(seed + 7)
    for case in ("order", "special"):
        bv, cv = _values(rng, b, vtype, case), _values(rng, c, vtype, case)
        A, B = _sealed_vector(dim, b.astype(itype), bv), _sealed_vector(dim, c.astype(itype), cv)
        for x, y in ((A, B), (B, A)):
            want = np.asarray(plain(x, y))
            got = np.asarray(strict(x, y))
            assert got.tobytes() == want.tobytes(), (name, case, itype, vtype, got, want)
            quick = float(fast(x, y))
            if np.isnan(want):
                assert np.isnan(quick), (name, case)
            else:
                scale = float(np.dot(np.abs(bv[np.isin(b, c)]).astype(np.float64),
                                     np.abs(cv[np.isin(c, b)]).astype(np.float64)))
                tol = (1e-5 if vtype == np.float32 else 1e-12) * max(scale, 1e-30) * 4
                assert abs(quick - float(want)) <= tol, (name, case, quick, float(want))


@pytest.mark.parametrize("itype, vtype", TYPES)
@pytest.mark.parametrize("name", QUICK)
def test_strict_lane_bit_identical_across_distributions(name, itype, vtype):
    """Three distributions (uniform 50 %, power-law gaps, skew 1:16; the rest slow) at 4096
    coordinates, four type pairs, both orders, order-sensitive and special values."""
    _check(name, 4096, itype, vtype)


@pytest.mark.slow
@pytest.mark.parametrize("itype, vtype", TYPES)
@pytest.mark.parametrize("name", sweep.distributions())
@pytest.mark.parametrize("n", [300, 20000])
def test_strict_lane_bit_identical_every_distribution(name, itype, vtype, n):
    """Every distribution of bench sweep, two sizes, three seeds."""
    for seed in range(3):
        _check(name, n, itype, vtype, seed)


@pytest.mark.parametrize("itype, vtype", TYPES)
def test_buffered_lane_flushes_in_order(itype, vtype):
    """Pairs with many times more matches than the buffer holds (every coordinate shared, clustered): the buffer
    added up many times within the lane, then its rest after it; bit-identical."""
    strict, plain, _ = _kernels(vtype)
    n = 40 * StrictConflictLaneBuilder.BUFFER
    rng = np.random.default_rng(3)
    b = np.arange(n, dtype=itype) * 2
    c = np.concatenate([b[: n // 2], b[n // 2:] + 1]).astype(itype)   # half shared, then none
    for short in (c, np.ascontiguousarray(c[::7])):
        bv, cv = _values(rng, b, vtype, "order"), _values(rng, short, vtype, "order")
        A, B = _sealed_vector(DIM, b, bv), _sealed_vector(DIM, short, cv)
        assert np.asarray(strict(A, B)).tobytes() == np.asarray(plain(A, B)).tobytes()
        assert np.asarray(strict(B, A)).tobytes() == np.asarray(plain(B, A)).tobytes()


def test_profile_counts_the_lane_each_pair_took():
    """splyce.profile: a pair expecting many matches a step (80 % overlap) starts in the all-pairs lane, a sparse one
    (10 %) in the strict conflict lane; the conflict lane's coordinates are part of the fast lane's; the plan text
    lists the loop's lanes and the per-pair rule."""
    f = splyce.jit(_dot)
    counts = {}
    for name in ("uniform x1.25", "uniform x10"):
        dim, b, bv, c, cv = sweep.fiber_pair(name, 1 << 13, np.int32, np.float32)
        A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
        counts[name] = p = splyce.profile(f, A, B)
        assert 0 <= p.conflict_lane <= p.fast_lane
    if _host_runs_it():
        dense, sparse = counts["uniform x1.25"], counts["uniform x10"]
        assert (dense.pairs_conflict_lane, dense.pairs_all_pairs_lane) == (0, 1) and dense.conflict_lane == 0
        assert (sparse.pairs_conflict_lane, sparse.pairs_all_pairs_lane) == (1, 0)
        assert sparse.conflict_lane > 0.9 * sparse.total
        assert "1 started in the conflict lane" in str(sparse)
        plan = f.lower(A, B).as_text("plan")
        assert "Splyce lanes" in plan and "first a strict lane of 16 x 16 conflict compares" in plan
        assert "stored into a buffer" in plan
