"""bench/intersect_avx2.py: the bench-only AVX2 intersection steps (issue 36) sum exactly what NumPy does,
through the 4 x 4 block loop and the scalar tails, and use the instructions they are described with."""

import re

import numpy as np
import pytest
from test_intersect_step import _cases, _reference

from splyce.bench import intersect_avx2 as ia
from splyce.bench.limit import lane_loop


@pytest.mark.parametrize("vtype", [np.float64, np.float32])
@pytest.mark.parametrize("step", ia.STEPS)
def test_dot_matches_numpy(vtype, step):
    if not ia.available():   # no AVX2: a clear error, never a crash
        with pytest.raises(RuntimeError, match="AVX2"):
            ia.dot(np.arange(4, dtype=np.int32), np.ones(4, vtype), np.arange(4, dtype=np.int32), np.ones(4, vtype))
        return
    rng = np.random.default_rng(1)
    cases = list(_cases()) + [(np.array([1, 2, 3, 4], np.int32), np.array([4, 5, 6, 7], np.int32)),  # equal lasts
                              (np.array([0, 1, 2, 3, 8], np.int32), np.array([3, 8, 9, 10], np.int32))]
    for a, b in cases:
        av = rng.uniform(-1, 1, a.size).astype(vtype)
        bv = rng.uniform(-1, 1, b.size).astype(vtype)
        _, want = _reference(a, av, b, bv)
        tol = 1e-4 if vtype == np.float32 else 1e-10
        assert ia.dot(a, av, b, bv, step) == pytest.approx(want, rel=tol, abs=tol), (step, a.size, b.size)
        assert ia.dot(b, bv, a, av, step) == pytest.approx(want, rel=tol, abs=tol), (step, a.size, b.size)


def test_wrong_arguments():
    with pytest.raises(ValueError, match="unknown AVX2 step"):
        ia.dot_ir(np.float64, "rotate sideways")
    if ia.available():
        with pytest.raises(TypeError, match="int32"):
            ia.dot(np.arange(4, dtype=np.int64), np.ones(4), np.arange(4, dtype=np.int64), np.ones(4))


@pytest.mark.parametrize("step", ia.STEPS)
def test_step_machine_code(step):
    """AVX2 code (Haswell, any host can emit it): 4 xmm dword compares per step, 3 vpshufd rotations; the
    permute steps one vpermd of B's values (f64) and no vpermpd, the rotate steps 3 vpermpd; the block advance
    a cmov per cursor and no popcnt, the pivot advance 2 more compares and 2 popcnt."""
    body = lane_loop(ia.step_asm(step, np.float64))
    how, advance = step.split()
    # the pivot advance: 2 more (x <= last as pminud + pcmpeqd), each counted by vmovmskps + popcnt
    assert sum(x.startswith("vpcmpeqd") for x in body) == (4 if advance == "block" else 6)
    assert sum(x.startswith("vpshufd\t$") and "%xmm" in x for x in body) >= 3
    vpermpd = sum(x.startswith("vpermpd") for x in body)
    if how == "permute":
        assert vpermpd == 0 and any(re.match(r"^vpermd\s+\(", x) for x in body)
    else:
        assert vpermpd == 3
    if advance == "block":
        assert sum(x.startswith("cmov") for x in body) == 2 and not any(x.startswith("popcnt") for x in body)
    else:
        assert sum(x.startswith("popcnt") for x in body) == 2
    body32 = lane_loop(ia.step_asm(step, np.float32))
    if how == "permute":
        assert any(x.startswith("vpermilps") and x.count("%xmm") == 3 for x in body32)
