"""Property tests: random shapes, densities, formats, dtypes and index widths through @splyce.jit, checked
against NumPy dense results, and Splyce (strict) bit-identical to the plain sparsifier."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import splyce
from splyce.tensors.formats import CSC, CSR, DCSC, DCSR

FORMATS_2D = [CSR, CSC, DCSR, DCSC]
DTYPES = [np.float64, np.float32]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random(draw, shape, dtype, special=False):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    density = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    dense = np.where(rng.random(shape) < density, rng.uniform(-2, 2, shape), 0).astype(dtype)
    if special and dense.size:
        flat = dense.reshape(-1)
        picks = rng.integers(0, flat.size, size=min(3, flat.size))
        flat[picks] = rng.choice(np.array([np.inf, -np.inf, np.nan, -0.0, 5e-324], dtype=np.float64)
                                 .astype(dtype), size=len(picks))
    return dense


def _operand(draw, shape, dtype, special=False):
    dense = _random(draw, shape, dtype, special)
    fmt = draw(st.sampled_from(FORMATS_2D))
    width = draw(st.sampled_from([32, 64]))
    return dense, splyce.asarray(dense, format=fmt.with_widths(width, width))


def _as_dense(x):
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


@SETTINGS
@given(data=st.data(), m=st.integers(0, 9), k=st.integers(0, 40), n=st.integers(0, 9),
       dtype=st.sampled_from(DTYPES))
def test_matmul_matches_numpy(data, m, k, n, dtype):
    a, A = _operand(data.draw, (m, k), dtype)
    b, B = _operand(data.draw, (k, n), dtype)
    out = splyce.jit(lambda x, y: x @ y)(A, B)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


@SETTINGS
@given(data=st.data(), m=st.integers(0, 7), n=st.integers(0, 30), dtype=st.sampled_from(DTYPES))
def test_elementwise_and_reductions_match_numpy(data, m, n, dtype):
    a, A = _operand(data.draw, (m, n), dtype)
    b, _ = _operand(data.draw, (m, n), dtype)
    B = splyce.asarray(b, format=A.format)            # union / intersection need matching formats
    np.testing.assert_array_equal(_as_dense(splyce.jit(lambda x, y: x * y)(A, B)), a * b)
    np.testing.assert_allclose(_as_dense(splyce.jit(lambda x, y: x + y)(A, B)), a + b)
    np.testing.assert_allclose(_as_dense(splyce.jit(lambda x, y: x - y)(A, B)), a - b)
    axis = data.draw(st.sampled_from([0, 1, None]))
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(splyce.jit(lambda x: x.sum(axis=axis))(A), a.sum(axis=axis), rtol=tol, atol=tol)
    np.testing.assert_array_equal(splyce.jit(lambda x: 2.5 * x.T, out_format="dense")(A), (2.5 * a).T.astype(dtype))


@SETTINGS
@given(data=st.data(), m=st.integers(1, 6), k=st.integers(0, 80), n=st.integers(1, 6),
       dtype=st.sampled_from(DTYPES), width=st.sampled_from([2, 4, 8]), phases=st.integers(1, 8))
def test_splyce_is_bit_identical_to_the_plain_sparsifier(data, m, k, n, dtype, width, phases):
    a = _random(data.draw, (m, k), dtype, special=True)
    b = _random(data.draw, (k, n), dtype, special=True)
    A, B = splyce.asarray(a, format=CSR), splyce.asarray(b, format=CSC)
    plain = splyce.jit(lambda x, y: x @ y, vectorize=False)(A, B)
    fast = splyce.jit(lambda x, y: x @ y, vector_width=width, phases=phases)(A, B)
    # NaN payload and sign are unspecified by LLVM on both sides: compare NaN positions, bits elsewhere
    assert np.array_equal(np.isnan(plain), np.isnan(fast))
    ok = ~np.isnan(plain)
    assert np.array_equal(plain[ok], fast[ok])
    assert np.array_equal(np.signbit(plain[ok]), np.signbit(fast[ok]))
