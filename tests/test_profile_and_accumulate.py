"""splyce.profile (fast-lane share) and Jitted.accumulate (out += f(*args) without allocating)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.kernels import KERNELS
from splyce.runtime.profiling import instrumented


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_profile_counts_every_coordinate(name):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.2, seed=2)
    prof = splyce.profile(splyce.jit(spec.fun), *ops)
    assert prof.fast_lane > 0 and prof.epilogue >= 0
    assert 0.5 < prof.simd_share <= 1.0
    assert any(d.vectorized for d in prof.loops)
    # the same call again counts the same (counters are reset per run)
    again = splyce.profile(splyce.jit(spec.fun), *ops)
    assert (again.fast_lane, again.epilogue) == (prof.fast_lane, prof.epilogue)


def test_profile_share_grows_with_density():
    spec = KERNELS["K1"]
    low = splyce.profile(spec.fun, *spec.operands(128, 0.005, seed=1))
    high = splyce.profile(spec.fun, *spec.operands(128, 0.3, seed=1))
    assert low.simd_share < high.simd_share


def test_profile_of_an_unvectorized_kernel_is_empty():
    prof = splyce.profile(splyce.jit(lambda a, b: a @ b, vectorize=False),
                          sps.random_array((5, 5), density=0.5, format="csr", random_state=1),
                          sps.random_array((5, 5), density=0.5, format="csc", random_state=2))
    assert prof.total == 0 and "n/a" in str(prof)


def test_accumulate_adds_into_out_without_allocating():
    spec = KERNELS["K4"]
    ops = spec.operands((8, 300), 0.3, seed=3)
    f = splyce.jit(spec.fun)
    expected = f(*ops)
    out = np.ones(expected.shape)
    assert f.accumulate(out, *ops) is out
    np.testing.assert_array_equal(out, expected + 1)
    with pytest.raises(ValueError, match="shape"):
        f.accumulate(np.zeros((3, 3)), *ops)
    with pytest.raises(ValueError, match="C-contiguous"):
        f.accumulate(np.zeros(expected.shape[::-1]).T, *ops)
    g = splyce.jit(lambda a, b: a * b)   # a sparse result
    with pytest.raises(ValueError, match="one dense result"):
        g.accumulate(np.zeros(expected.shape), *ops)


def test_profile_of_a_kernel_loaded_from_the_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPLYCE_DISABLE_DISK_CACHE", raising=False)
    spec = KERNELS["K1"]
    ops = spec.operands(48, 0.3, seed=5)
    first = splyce.profile(splyce.jit(spec.fun), *ops)
    splyce.clear_cache(disk=False)
    again_jit = splyce.jit(spec.fun)
    again = splyce.profile(again_jit, *ops)
    assert instrumented(again_jit).cache_info().disk_hits == 1
    assert (again.fast_lane, again.epilogue) == (first.fast_lane, first.epilogue) and first.fast_lane > 0
