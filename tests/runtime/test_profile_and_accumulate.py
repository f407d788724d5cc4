"""splyce.profile (fast-lane share) and Jitted.accumulate (out += f(*args) without allocating)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.bench.paper_kernels import KERNELS
from splyce.runtime.profiling import instrumented


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_profile_counts_every_coordinate(name):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.2, seed=2)
    prof = splyce.profile(splyce.jit(spec.fun), *ops)
    assert prof.fast_lane > 0
    assert 0.5 < prof.simd_share <= 1.0
    assert any(d.vectorized for d in prof.loops)
    # the same call again counts the same (counters are reset per run)
    again = splyce.profile(splyce.jit(spec.fun), *ops)
    assert (again.fast_lane, again.epilogue) == (prof.fast_lane, prof.epilogue)


def _rows(cols_per_row, width):
    """A CSR array with the given column lists (values 1..nnz, no zeros)."""
    indptr = np.cumsum([0] + [len(c) for c in cols_per_row])
    indices = np.concatenate(cols_per_row)
    return sps.csr_array((np.arange(1.0, len(indices) + 1), indices, indptr), shape=(len(cols_per_row), width))


# Two fibers of an elementwise product (K4's loop: one coiteration per row). Row 0 matches 8 of 8; row 1's
# first blocks overlap in part and then run out. Counted by hand from the fast lane's rule (it runs while
# both operands have n coordinates left; each side advances past its coordinates <= the smaller of the two
# blocks' last coordinates) and the scalar merge's (the smaller cursor advances by one, both on a match):
B_ROWS = [np.arange(8), np.array([0, 1, 2, 3, 10, 11])]
C_ROWS = [np.arange(8), np.array([2, 3, 4, 5, 11, 12, 13])]
EXPECTED_COUNTS = {
    # n = 4. Row 0: two fast steps of 4 + 4. Row 1: one fast step (B 0..3 all <= 3, C 2, 3 <= 3: 4 + 2),
    # then B has 2 left: the epilogue takes C 4 (1), C 5 (1), B 10 (1), the match 11 (2) = 5.
    4: (16 + 6, 5),
    # n = 8. Row 0: one fast step of 8 + 8. Row 1: B has 6 < 8 left, all scalar: B 0, B 1 (1 + 1), the matches
    # 2, 3 (2 + 2), C 4, C 5, B 10 (1 + 1 + 1), the match 11 (2) = 11.
    8: (16, 11),
}


@pytest.mark.parametrize("width, phases", [(4, 1), (4, 8), (8, 7)])
def test_profile_counts_match_a_hand_count(width, phases):
    b, c = _rows(B_ROWS, 16), _rows(C_ROWS, 16)
    f = splyce.jit(lambda x, y: splyce.multiply(x, y, out_format="dense"), vector_width=width, phases=phases)
    prof = splyce.profile(f, b, c)
    assert (prof.fast_lane, prof.epilogue) == EXPECTED_COUNTS[width]
    assert str(prof) == (f"SIMD share {100 * prof.fast_lane / 27:.1f} % ({prof.fast_lane} fast-lane, "
                         f"{prof.epilogue} epilogue coordinates)")
    np.testing.assert_array_equal(f(b, c), b.multiply(c).toarray())


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



@pytest.mark.parametrize("start", [0, 5, 10])
def test_accumulate_with_an_input_sharing_memory_with_out(start):
    """``out += A @ out[start:start + 20]``: the kernel once read entries of x it had already overwritten (a
    wrong sum). Inputs overlapping ``out`` are copied first, as NumPy does for ``out=``; the answer is the one
    the same call gives with a copy, bit for bit."""
    a = sps.random_array((30, 20), density=0.3, format="csr", rng=np.random.default_rng(7))
    f = splyce.jit(lambda a, x: a @ x)
    out = np.arange(30.0)
    expected = out.copy()
    f.accumulate(expected, a, out[start:start + 20].copy())
    f.accumulate(out, a, out[start:start + 20])
    assert out.tobytes() == expected.tobytes()
    # a sparse operand whose values are out's memory (its first 10 values are out's last 10 elements)
    shared = np.concatenate([np.arange(20.0), a.data])
    b = sps.csr_array((shared[20:], a.indices, a.indptr), shape=a.shape)
    assert b.data.base is shared
    out = shared[:30]
    expected = out.copy()
    f.accumulate(expected, b.copy(), np.ones(20))
    f.accumulate(out, b, np.ones(20))
    assert out.tobytes() == expected.tobytes()

@pytest.mark.parametrize("library", [True, False])
def test_accumulate_with_a_captured_array_sharing_memory_with_out(library):
    """``out += A @ y`` where ``y`` is a closure array that is ``out`` (or a view of it): the captured constant
    is copied before the kernel writes ``out``, as an argument is; the answer is the one a copy gives, bit for
    bit (the kernel once read entries of y it had already overwritten)."""
    a = sps.random_array((30, 30), density=0.3, format="csr", rng=np.random.default_rng(3))
    for view in (slice(None), slice(0, 30)):
        out = np.arange(30.0) + 1
        y = out[view]
        f = splyce.jit(lambda a: a @ y, library=library)
        expected = out.copy()
        g = splyce.jit(lambda a, x: a @ x, library=library)
        g.accumulate(expected, a, out.copy())
        f.accumulate(out, a)
        assert out.tobytes() == expected.tobytes()
        assert not np.array_equal(out, np.arange(30.0) + 1)   # the kernel ran


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
