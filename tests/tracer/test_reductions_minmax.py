"""``max`` / ``min`` reductions inside @splyce.jit against NumPy on the dense equivalent: implicit zeros take
part, NaN propagates, empty reductions raise NumPy's ValueError, any axes, keepdims; Splyce (strict)
bit-identical to the plain sparsifier."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import splyce
from splyce.lowering.to_mlir import LoweringError
from splyce.tensors.formats import COO, CSC, CSR, DCSC, DCSR, Format, csf
from splyce.tracer.tracer import TraceError

FORMATS_2D = [CSR, CSC, DCSR, DCSC, COO, None]          # None: a NumPy (dense) operand
DTYPES = [np.float64, np.float32, np.int64, np.int32]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random(draw, shape, dtype):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    density = draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    values = rng.uniform(-3, 3, shape) if np.dtype(dtype).kind == "f" else rng.integers(-9, 10, shape)
    dense = np.where(rng.random(shape) < density, values, 0).astype(dtype)
    if np.dtype(dtype).kind == "f" and dense.size and draw(st.booleans()):
        flat = dense.reshape(-1)
        picks = rng.integers(0, flat.size, size=min(2, flat.size))
        flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=dtype), size=len(picks))
    return dense


def _check(fun, operand, dense, reference):
    try:
        want = reference(dense)
    except ValueError as exc:   # NumPy's empty-reduction error: splyce raises the same, before compiling
        with pytest.raises(ValueError, match="zero-size array to reduction operation"):
            fun(operand)
        assert "zero-size array" in str(exc)
        return None
    got = np.asarray(fun(operand))
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)   # NaN positions must match as well
    return got


@SETTINGS
@given(data=st.data(), m=st.integers(0, 7), n=st.integers(0, 7), dtype=st.sampled_from(DTYPES),
       fmt=st.sampled_from(FORMATS_2D), kind=st.sampled_from(["max", "min"]),
       axis=st.sampled_from([None, 0, 1, -1, -2, (0, 1), (1, 0)]), keepdims=st.booleans())
def test_max_min_2d_match_numpy(data, m, n, dtype, fmt, kind, axis, keepdims):
    dense = _random(data.draw, (m, n), dtype)
    operand = dense if fmt is None else splyce.asarray(dense, format=fmt)
    fun = splyce.jit(lambda a: getattr(a, kind)(axis=axis, keepdims=keepdims))
    _check(fun, operand, dense, lambda x: getattr(x, kind)(axis=axis, keepdims=keepdims))


ORDERS_3D = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]


@SETTINGS
@given(data=st.data(), shape=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
       dtype=st.sampled_from(DTYPES), order=st.sampled_from(ORDERS_3D),
       dense_level=st.booleans(), kind=st.sampled_from(["max", "min"]),
       axis=st.sampled_from([None, 0, 1, 2, (0, 2), (2, 0), (0, 1), (1, 2), -1]), keepdims=st.booleans())
def test_max_min_3d_any_storage_order_match_numpy(data, shape, dtype, order, dense_level, kind, axis,
                                                  keepdims):
    dense = _random(data.draw, shape, dtype)
    levels = ("dense" if dense_level else "compressed", "compressed", "compressed")
    operand = splyce.asarray(dense, format=Format(levels, order))
    fun = splyce.jit(lambda a: getattr(a, kind)(axis=axis, keepdims=keepdims))
    _check(fun, operand, dense, lambda x: getattr(x, kind)(axis=axis, keepdims=keepdims))


def test_implicit_zeros_are_candidates_and_full_rows_are_not():
    a = np.array([[-1.0, -2.0, 0.0], [-1.0, -2.0, -3.0], [0.0, 0.0, 0.0], [4.0, 0.0, 5.0]])
    s = splyce.asarray(a, format=CSR)
    assert s.nnz == 7
    np.testing.assert_array_equal(splyce.jit(lambda x: x.max(axis=1))(s), [0.0, -1.0, 0.0, 5.0])
    np.testing.assert_array_equal(splyce.jit(lambda x: x.min(axis=1))(s), [-2.0, -3.0, 0.0, 0.0])
    np.testing.assert_array_equal(splyce.jit(lambda x: x.max(axis=0))(s), [4.0, 0.0, 5.0])
    assert splyce.jit(lambda x: x.max())(splyce.asarray(-np.ones((2, 2)), format=CSR)) == -1.0


def test_nan_propagates_like_numpy():
    a = np.array([[np.nan, 0.0, 1.0], [2.0, 3.0, 4.0], [0.0, -np.inf, 0.0]])
    for fmt in (CSR, CSC, COO):
        s = splyce.asarray(a, format=fmt)
        for kind in ("max", "min"):
            for axis in (None, 0, 1):
                got = splyce.jit(lambda x: getattr(x, kind)(axis=axis))(s)
                np.testing.assert_array_equal(got, getattr(a, kind)(axis=axis))


@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((3, 0), 1), ((0, 0), None), ((0, 0), 1), ((2, 0), None)])
def test_empty_reduction_raises_numpys_error(shape, axis):
    a = splyce.asarray(np.zeros(shape), format=CSR)
    with pytest.raises(ValueError) as numpy_error:
        np.zeros(shape).max(axis=axis)
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum which has no identity"):
        splyce.jit(lambda x: x.max(axis=axis))(a)
    assert "zero-size array to reduction operation maximum" in str(numpy_error.value)
    with pytest.raises(ValueError, match="zero-size array to reduction operation minimum which has no identity"):
        splyce.jit(lambda x: x.min(axis=axis))(a)


def test_reductions_over_nonempty_axes_of_empty_tensors_are_empty():
    a = splyce.asarray(np.zeros((0, 3)), format=CSR)
    out = splyce.jit(lambda x: x.max(axis=1))(a)
    assert out.shape == (0,)


def test_reductions_of_expressions_and_results_used_further():
    rng = np.random.default_rng(1)
    A = np.where(rng.random((6, 5)) < 0.4, rng.uniform(-2, 2, (6, 5)), 0)
    B = np.where(rng.random((6, 5)) < 0.6, rng.uniform(-2, 2, (6, 5)), 0)
    a, b = splyce.asarray(A, format=CSR), splyce.asarray(B, format=CSR)
    np.testing.assert_array_equal(splyce.jit(lambda x, y: (x * y).max(axis=1))(a, b), (A * B).max(axis=1))
    np.testing.assert_array_equal(splyce.jit(lambda x, y: abs(x - y).min(axis=0))(a, b), np.abs(A - B).min(axis=0))
    np.testing.assert_array_equal(splyce.jit(lambda x: (x @ x.T).max(axis=0))(a), (A @ A.T).max(axis=0))
    got = splyce.jit(lambda x: (x.max(axis=1) * 2, x.min()))(a)
    np.testing.assert_array_equal(got[0], A.max(axis=1) * 2)
    assert got[1] == A.min()


def test_strict_splyce_bit_identical_to_plain_sparsifier():
    rng = np.random.default_rng(2)
    A = np.where(rng.random((9, 8)) < 0.3, rng.uniform(-2, 2, (9, 8)), 0)
    A[3, 3] = np.nan
    B = np.where(rng.random((9, 8)) < 0.5, rng.uniform(-2, 2, (9, 8)), 0)
    a, b = splyce.asarray(A, format=CSR), splyce.asarray(B, format=CSR)
    for fun in (lambda x, y: (x * y).max(axis=1), lambda x, y: x.min(axis=0, keepdims=True),
                lambda x, y: (x * y).max()):
        fast = splyce.jit(fun, fast_math=False)(a, b)
        plain = splyce.jit(fun, vectorize=False)(a, b)
        assert np.asarray(fast).tobytes() == np.asarray(plain).tobytes()


def test_reduction_walks_stored_entries_only():
    """No loop of the compiled kernel runs over the reduced dimension's full extent (999): the extremum and
    the count walk the stored entries of each row; only the O(output) passes are dense."""
    a = splyce.asarray(np.eye(1000, 999), format=CSR)
    scf = splyce.jit(lambda x: x.max(axis=1)).lower(a).as_text("scf")
    assert "to %c999 " not in scf and "%c999 step" not in scf
    assert "sparse_tensor.reduce" not in scf


def test_storage_order_that_would_restart_the_reduction_is_restored_for_arguments():
    a = np.arange(1, 25, dtype=np.float64).reshape(2, 3, 4) * (np.arange(24).reshape(2, 3, 4) % 3 == 0)
    s = splyce.asarray(a, format=csf(3))
    f = splyce.jit(lambda x: x.max(axis=(0, 2)))
    assert "convert %arg0" in f.lower(s).as_text("plan")
    np.testing.assert_array_equal(f(s), a.max(axis=(0, 2)))
    # an intermediate cannot be re-stored: a clear error rather than a wrong answer
    with pytest.raises(LoweringError, match=r"re-store it with the kept dimensions first"):
        splyce.jit(lambda x: (x * x).max(axis=(0, 2)))(s)


@pytest.mark.parametrize("fun, error, message", [
    (lambda a: a.max(axis=2), TraceError, r"max: axis 2 is out of range for a tensor of rank 2"),
    (lambda a: a.min(axis=(0, -2)), TraceError, r"min: axis -2 is repeated"),
    (lambda a: a.max(axis=1.0), TraceError, r"max: axis 1.0 is out of range"),
    (lambda a: a.max(keepdims=1), TraceError, r"max: keepdims must be True or False"),
])
def test_bad_arguments_raise_clearly(fun, error, message):
    a = splyce.asarray(np.eye(3), format=CSR)
    with pytest.raises(error, match=message):
        splyce.jit(fun)(a)


def test_sparse_result_request_is_refused_clearly():
    a = splyce.asarray(np.eye(3), format=CSR)
    with pytest.raises(TraceError, match=r"max: max / min reductions return dense arrays"):
        splyce.jit(lambda x: x.max(axis=1), out_format="sparse")(a)


def _pair(rng, shape, density_a, density_b, low=-2.0, high=2.0):
    A = np.where(rng.random(shape) < density_a, rng.uniform(low, high, shape), 0)
    B = np.where(rng.random(shape) < density_b, rng.uniform(low, high, shape), 0)
    return A, B


FUSED = [(lambda x, y: abs(x - y).max(), lambda X, Y: np.abs(X - Y).max()),
         (lambda x, y: (x - y).min(), lambda X, Y: (X - Y).min()),
         (lambda x, y: (x + y).max(), lambda X, Y: (X + Y).max()),
         (lambda x, y: (x * y).min(), lambda X, Y: (X * Y).min()),
         (lambda x, y: np.maximum(x, 2 * y).max(), lambda X, Y: np.maximum(X, 2 * Y).max()),
         (lambda x, y: abs(x - y).max(axis=(0, 1), keepdims=True),
          lambda X, Y: np.abs(X - Y).max(axis=(0, 1), keepdims=True))]


@pytest.mark.parametrize("k", range(len(FUSED)))
def test_a_full_reduction_of_a_sparse_expression_fuses_and_matches_numpy(k):
    """``abs(a - b).max()``: the expression is evaluated in the reduction's loop (one step, no sparse
    intermediate); the value is NumPy's on the dense equivalent, implicit zeros included or not, bit for bit
    the plain sparsifier's, and the operands are left as they were."""
    fun, reference = FUSED[k]
    rng = np.random.default_rng(40 + k)
    cases = [_pair(rng, (9, 8), 0.3, 0.4), _pair(rng, (9, 8), 0.3, 0.4, -3.0, -1.0),   # implicit zeros
             _pair(rng, (9, 8), 1.0, 1.0, -3.0, -1.0), _pair(rng, (9, 8), 1.0, 0.0, -3.0, -1.0)]   # none
    # both stored at the same 60 % of the positions: they store more entries together than there are
    # positions, so the kernel counts the expression's points (the second branch) to find the implicit zeros
    half = rng.random((9, 8)) < 0.6
    cases.append((np.where(half, rng.uniform(-3, -1, (9, 8)), 0), np.where(half, rng.uniform(1, 3, (9, 8)), 0)))
    nan = _pair(rng, (9, 8), 0.5, 0.5)
    nan[0][2, 3], nan[1][2, 3] = np.nan, 1.0     # stored on both sides: a NaN every expression keeps
    cases.append(nan)
    f = splyce.jit(fun)
    plain = splyce.jit(fun, vectorize=False, library=False)
    for A, B in cases:
        a, b = splyce.asarray(A, format=CSR), splyce.asarray(B, format=CSR)
        before = [x.copy() for x in (*a._buffers(), *b._buffers())]
        got = np.asarray(f(a, b))
        want = reference(A, B)
        assert got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)
        assert got.tobytes() == np.asarray(plain(a, b)).tobytes()
        assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(before, (*a._buffers(), *b._buffers())))
    plan = f.lower(a, b).as_text("plan")
    assert len(f.kernel_for(a, b)[0].plan.steps) == 1 and _fused(plan) and "storage=(keep, keep)" in plan


def _fused(plan: str) -> bool:
    """Whether the plan fused a reduction into its operand ("... of ..."; the lanes' lines, "loop 0 of @kernel:
    lane: ...", aside)."""
    return any(" of " in line for line in plan.splitlines() if not line.strip().startswith("loop "))


def test_a_reduction_fuses_only_a_value_nothing_else_reads_over_every_axis():
    rng = np.random.default_rng(50)
    A, B = _pair(rng, (7, 7), 0.4, 0.4)
    a, b = splyce.asarray(A, format=CSR), splyce.asarray(B, format=CSR)
    kept = [(lambda x, y: abs(x - y).max(axis=1), lambda X, Y: np.abs(X - Y).max(axis=1)),   # not every axis
            (lambda x, y: (abs(x - y).max(), abs(x - y)), None),                             # read twice
            (lambda x, y: (x - y.T).max(), lambda X, Y: (X - Y.T).max())]                    # another order
    for fun, reference in kept:
        f = splyce.jit(fun)
        assert not _fused(f.lower(a, b).as_text("plan"))
        if reference is not None:   # (a max along an axis of sparse operands is scipy's COO: compared dense)
            got = f(a, b)
            np.testing.assert_array_equal(got.toarray() if hasattr(got, "toarray") else got, reference(A, B))
    got, diff = splyce.jit(kept[1][0])(a, b)
    assert got == np.abs(A - B).max()
    np.testing.assert_array_equal(diff.toarray(), np.abs(A - B))


def test_a_fused_reduction_refuses_bad_scipy_operands_clearly():
    import scipy.sparse as sps

    a = sps.csr_array(np.eye(4))
    bad = sps.csr_array((np.ones(4), np.array([0, 1, 2, 9]), np.arange(5)), shape=(4, 4))
    indices = bad.indices.copy()
    with pytest.raises(ValueError):
        splyce.jit(lambda x, y: abs(x - y).max())(a, bad)
    assert np.array_equal(bad.indices, indices)
