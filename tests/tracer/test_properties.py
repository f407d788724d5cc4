"""Property tests: random shapes, densities, formats, dtypes and index widths through @splyce.jit, checked
against NumPy dense results, and Splyce (strict) bit-identical to the plain sparsifier."""

import pytest
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import splyce
from splyce.tensors.formats import CSC, CSR, DCSC, DCSR

pytestmark = pytest.mark.slow

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
    out = splyce.jit(lambda x, y: x @ y)(A, B)     # the default (sparse) product over every format pair
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(_as_dense(out), a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


# five kernels per example, each a new signature (format x index width x dtype x axis): ~1 s of compiling
# apiece, so fewer examples than the others (the CI budget); test_no_abort.py runs every format pair of them
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    np.testing.assert_array_equal(_as_dense(splyce.jit(lambda x: 2.5 * x.T)(A)), (2.5 * a).T.astype(dtype))


@SETTINGS
@given(data=st.data(), m=st.integers(1, 6), k=st.integers(0, 80), n=st.integers(1, 6),
       dtype=st.sampled_from(DTYPES), width=st.sampled_from([2, 4, 8]), phases=st.integers(1, 8))
def test_splyce_is_bit_identical_to_the_plain_sparsifier(data, m, k, n, dtype, width, phases):
    a = _random(data.draw, (m, k), dtype, special=True)
    b = _random(data.draw, (k, n), dtype, special=True)
    A, B = splyce.asarray(a, format=CSR), splyce.asarray(b, format=CSC)
    plain = _as_dense(splyce.jit(lambda x, y: x @ y, vectorize=False)(A, B))     # K1 (the default sparse result)
    fast = _as_dense(splyce.jit(lambda x, y: x @ y, vector_width=width, phases=phases)(A, B))
    # NaN payload and sign are unspecified by LLVM on both sides: compare NaN positions, bits elsewhere
    assert np.array_equal(np.isnan(plain), np.isnan(fast))
    ok = ~np.isnan(plain)
    assert np.array_equal(plain[ok], fast[ok])
    assert np.array_equal(np.signbit(plain[ok]), np.signbit(fast[ok]))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), m=st.integers(1, 5), n=st.integers(0, 70), dtype=st.sampled_from(DTYPES),
       width=st.sampled_from([2, 4, 8]), phases=st.integers(1, 8), index_width=st.sampled_from([32, 64]))
def test_three_way_product_matches_numpy_and_the_plain_sparsifier(data, m, n, dtype, width, phases, index_width):
    # a * b * c of three CSR operands: one three-way intersection loop (the multi-way fast lane)
    fmt = CSR.with_widths(index_width, index_width)
    plain_ops = [_random(data.draw, (m, n), dtype) for _ in range(3)]
    special_ops = [_random(data.draw, (m, n), dtype, special=True) for _ in range(3)]

    def mul3(x, y, z):
        return x * y * z

    fast = splyce.jit(mul3, out_format="dense", vector_width=width, phases=phases)
    plain = splyce.jit(mul3, out_format="dense", vectorize=False)
    a, b, c = plain_ops
    np.testing.assert_array_equal(fast(*[splyce.asarray(x, format=fmt) for x in plain_ops]), a * b * c)
    ops = [splyce.asarray(x, format=fmt) for x in special_ops]
    want, got = plain(*ops), fast(*ops)
    assert np.array_equal(np.isnan(want), np.isnan(got))
    ok = ~np.isnan(want)
    assert np.array_equal(want[ok], got[ok]) and np.array_equal(np.signbit(want[ok]), np.signbit(got[ok]))
    # the row sums (einsum "ij,ij,ij->i") accumulate in the same order: bit for bit
    rows = splyce.jit(lambda x, y, z: splyce.einsum("ij,ij,ij->i", x, y, z), vector_width=width, phases=phases)
    rows_plain = splyce.jit(lambda x, y, z: splyce.einsum("ij,ij,ij->i", x, y, z), vectorize=False)
    want, got = rows_plain(*ops), rows(*ops)
    assert np.array_equal(np.isnan(want), np.isnan(got))
    ok = ~np.isnan(want)
    assert np.array_equal(want[ok], got[ok]) and np.array_equal(np.signbit(want[ok]), np.signbit(got[ok]))
