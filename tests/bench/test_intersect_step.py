"""bench/intersect_step.py: the bench-only intersection steps (issue 36) count and sum exactly what NumPy does,
through the block loop and the scalar tails, and use the instructions they are described with."""

import numpy as np
import pytest

from splyce.bench import intersect_step as st
from splyce.bench.limit import fiber_pair


def _reference(a, av, b, bv):
    common, ia, ib = np.intersect1d(a, b, assume_unique=True, return_indices=True)
    return common.size, float(np.dot(av[ia].astype(np.float64), bv[ib].astype(np.float64)))


def _cases():
    rng = np.random.default_rng(7)
    yield np.arange(0, 64, dtype=np.int32), np.arange(0, 64, dtype=np.int32)          # all equal, equal lasts
    yield np.arange(0, 64, 2, dtype=np.int32), np.arange(1, 64, 2, dtype=np.int32)    # disjoint, interleaved
    yield np.arange(100, 140, dtype=np.int32), np.arange(0, 20, dtype=np.int32)       # disjoint ranges
    yield np.array([], np.int32), np.arange(40, dtype=np.int32)                       # an empty fiber
    yield np.arange(5, dtype=np.int32), np.arange(3, 60, dtype=np.int32)              # shorter than a block
    for n_a, n_b, universe in ((17, 300, 400), (1000, 1000, 2500), (333, 4000, 9000), (4096, 64, 5000)):
        a = np.sort(rng.choice(universe, n_a, replace=False)).astype(np.int32)
        b = np.sort(rng.choice(universe, n_b, replace=False)).astype(np.int32)
        yield a, b
    yield np.array([0, 2**31 - 1], np.int32), np.array([2**31 - 1], np.int32)         # the largest coordinate
    for overlap in (0.01, 0.5):                                                        # bench limit's pairs
        _dim, b, _bv, c, _cv = fiber_pair(20_000, overlap, 1, np.int32, np.float64)
        yield b, c


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_count_and_dot_match_numpy(vtype):
    if not st.available():   # no AVX-512 CD: a clear error, never a crash
        with pytest.raises(RuntimeError, match="AVX-512"):
            st.count(np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32))
        return
    rng = np.random.default_rng(1)
    for a, b in _cases():
        av, bv = rng.uniform(-1, 1, a.size).astype(vtype), rng.uniform(-1, 1, b.size).astype(vtype)
        copies = [x.copy() for x in (a, av, b, bv)]
        n, dot = _reference(a, av, b, bv)
        for how in st.COMPARES:
            assert st.count(a, b, how) == n, (how, a.size, b.size)
            assert st.count(b, a, how) == n
        tol = 1e-5 if vtype == np.float32 else 1e-12
        for how in st.DOTS:
            assert st.dot(a, av, b, bv, how) == pytest.approx(dot, rel=tol, abs=tol * max(1, a.size)), how
            assert st.dot(b, bv, a, av, how) == pytest.approx(dot, rel=tol, abs=tol * max(1, a.size)), how
        for x, y in zip((a, av, b, bv), copies):
            np.testing.assert_array_equal(x, y)     # inputs never modified


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
def test_dot_masks_unmatched_lanes(vtype):
    """Inf / NaN at unmatched coordinates never reach the sum (each step multiplies under the match masks), and
    a matched pair in every position of a block is found (one common coordinate per 16, moving)."""
    if not st.available():
        return
    a = np.arange(0, 2000, 2, dtype=np.int32)
    b = np.arange(0, 3000, 3, dtype=np.int32)
    av = np.where(a % 3 == 0, 0.5, np.inf).astype(vtype)
    bv = np.where(b % 2 == 0, 2.0, np.nan).astype(vtype)
    n, dot = _reference(a, av, b, bv)
    assert np.isfinite(dot) and n > 300
    for how in st.DOTS:
        assert st.dot(a, av, b, bv, how) == dot and st.dot(b, bv, a, av, how) == dot, how


def test_bad_input_is_a_python_error():
    with pytest.raises((TypeError, RuntimeError)):
        st.count(np.arange(4, dtype=np.int64), np.arange(4, dtype=np.int32))
    with pytest.raises((TypeError, RuntimeError)):
        st.dot(np.arange(4, dtype=np.int32), np.ones(3), np.arange(4, dtype=np.int32), np.ones(4))
    with pytest.raises((ValueError, RuntimeError)):
        st.count(np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32), how="bogus")
    with pytest.raises((ValueError, RuntimeError)):
        st.dot(np.arange(4, dtype=np.int32), np.ones(4), np.arange(4, dtype=np.int32), np.ones(4), how="bogus")


def test_step_uses_the_conflict_instruction():
    asm = st.step_asm("conflict")
    assert asm.count("vpconflictd") == 4 and "popcnt" in asm     # 4 quarters of 8 x 8 coordinates per step
    assert "{1to16}" in st.step_asm("broadcast")                  # B's coordinates broadcast from memory
    rotate = st.step_asm("rotate")
    assert rotate.count("vpcmpeqd") + rotate.count("vpcmpneqd") >= 15   # 16 rotations compared


def _loop(asm: str) -> str:
    """The block loop's body: from the loop label to the backward branch (the loop is the first one)."""
    lines = asm.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(".LBB0_3:"))
    end = next(i for i in range(start, len(lines)) if "jle\t.LBB0_3" in lines[i])
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize("how, compares", [("broadcast", 16), ("broadcast8", 8)])
def test_broadcast_steps_compare_against_broadcast_coordinates(how, compares):
    """The broadcast steps: ``compares`` zmm compares per step (all but the last folding B's coordinate as a
    ``{1to16}`` broadcast, the last reusing the advance's load), no ``vpconflictd``, a cmov (dot) advance; the dot's
    index: its sign bits as the mask
    (``vpmovd2m``), a permute of B's values, masked FMAs."""
    count = _loop(st.step_asm(how))
    assert count.count("vpcmpeqd") == compares and count.count("{1to16}") == compares - 1
    assert "vpconflictd" not in count and "setbe" not in count     # a cmov or a branch, not setcc + add
    for vtype in (np.float32, np.float64):
        body = _loop(st.step_asm(how, vtype=vtype))
        assert body.count("vpcmpeqd") == compares and "vpconflictd" not in body and "cmov" in body
        assert "vpmovd2m" in body
        assert "vperm" in body and "vfmadd231p" in body
