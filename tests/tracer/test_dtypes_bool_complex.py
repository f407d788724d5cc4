"""bool (pattern) and complex64 / complex128 values: conversions, jitted ops and drop-ins against NumPy /
scipy, NumPy's dtype rules (bool + bool is or, bool @ bool or-of-ands, sums of bools are int64, abs of complex
is real), clear TypeErrors where NumPy (or splyce) has no such op, Splyce (strict) bit-identical to the plain
sparsifier."""

import numpy as np
import pytest
import scipy.sparse as sps
import sparse
from hypothesis import HealthCheck, given, settings, strategies as st

import splyce
from splyce.tensors.formats import COO, CSC, CSR, DCSR

DTYPES = ["bool", "complex128", "complex64"]
FORMATS = [CSR, CSC, DCSR, COO, None]   # None: a NumPy (dense) operand
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random(seed: int, shape, dtype: str, density: float):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if dtype == "bool":
        return mask
    values = rng.uniform(-3, 3, shape) + 1j * rng.uniform(-3, 3, shape)
    return (values * mask).astype(dtype)


def _dense(x):
    if isinstance(x, sparse.SparseArray):
        return x.todense()
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


def _assert_matches(got, want, exact=None, tol=None):
    """Bools and integers exactly; complex results (and real ones computed from complex values: ``abs`` is
    expanded by MLIR's complex-to-standard, not libm's hypot) to a few ulps, since sums in another order
    round differently."""
    got, want = _dense(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    if exact is None:
        exact = want.dtype.kind in "biu"
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        tol = tol or (2e-5 if want.dtype in (np.complex64, np.float32) else 1e-12)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# (traced function, NumPy reference, dtypes it is defined for)
OPS = {
    "multiply": (lambda x, y: x * y, lambda X, Y: X * Y, DTYPES),
    "add": (lambda x, y: x + y, lambda X, Y: X + Y, DTYPES),
    "subtract": (lambda x, y: x - y, lambda X, Y: X - Y, DTYPES[1:]),
    "matmul": (lambda x, y: x @ y.T, lambda X, Y: X @ Y.T, DTYPES),
    "einsum": (lambda x, y: splyce.einsum("ij,kj->ik", x, y), lambda X, Y: np.einsum("ij,kj->ik", X, Y), DTYPES),
    "sum": (lambda x, y: x.sum(), lambda X, Y: X.sum(), DTYPES),
    "sum axis": (lambda x, y: (x * y).sum(axis=1), lambda X, Y: (X * Y).sum(axis=1), DTYPES),
    "abs": (lambda x, y: abs(x), np.abs, DTYPES),
    "abs of a sum": (lambda x, y: abs(x + y) * 2, lambda X, Y: np.abs(X + Y) * 2, DTYPES),
    "negative": (lambda x, y: -x + y, lambda X, Y: -X + Y, DTYPES[1:]),
    "conj": (lambda x, y: x.conj() * y, lambda X, Y: X.conj() * Y, DTYPES),
    "scale": (lambda x, y: 2 * x + y, lambda X, Y: 2 * X + Y, DTYPES),
    "divide": (lambda x, y: x / 2, lambda X, Y: X / 2, DTYPES[1:]),
    "power": (lambda x, y: x ** 3, lambda X, Y: X ** 3, DTYPES[1:]),
    "max": (lambda x, y: x.max(axis=0), lambda X, Y: X.max(axis=0), ["bool"]),
    "maximum": (lambda x, y: splyce.maximum(x, y), np.maximum, ["bool"]),
}


@SETTINGS
@given(seed=st.integers(0, 2**31), m=st.integers(1, 6), n=st.integers(1, 6), dtype=st.sampled_from(DTYPES),
       fa=st.sampled_from(FORMATS), fb=st.sampled_from(FORMATS), density=st.sampled_from([0.0, 0.3, 1.0]),
       op=st.sampled_from(list(OPS)))
def test_jitted_ops_match_numpy(seed, m, n, dtype, fa, fb, density, op):
    fun, reference, dtypes = OPS[op]
    if dtype not in dtypes:
        return
    X, Y = _random(seed, (m, n), dtype, density), _random(seed + 1, (m, n), dtype, 0.5)
    x = X if fa is None else splyce.asarray(X, format=fa)
    y = Y if fb is None else splyce.asarray(Y, format=fb)
    try:
        got = splyce.jit(fun)(x, y)
    except splyce.tracer.tracer.TraceError as exc:   # operands stored in incompatible orders: said clearly
        assert "storage order" in str(exc) or "store them" in str(exc), exc
        return
    want = reference(X) if op == "abs" else reference(X, Y)
    _assert_matches(got, want, exact=dtype == "bool")


@pytest.mark.parametrize("dtype", DTYPES)
def test_asarray_round_trips_from_every_family(dtype):
    X = _random(3, (5, 7), dtype, 0.4)
    for source in (X, sps.csr_array(X), sps.csc_matrix(X), sps.coo_array(X), sparse.COO.from_numpy(X),
                   sparse.GCXS.from_numpy(X)):
        t = splyce.asarray(source) if not isinstance(source, np.ndarray) else splyce.asarray(source, format=CSR)
        stored = np.count_nonzero(X) if isinstance(source, np.ndarray) else source.nnz   # pydata keeps -0j
        assert t.dtype == np.dtype(dtype) and t.nnz == stored
        assert np.array_equal(t.to_numpy(), X)
        assert np.array_equal(t.to_scipy().toarray(), X) and t.to_scipy().dtype == np.dtype(dtype)
        assert np.array_equal(t.to_pydata().todense(), X)
    dense = splyce.asarray(X)
    assert dense.format.is_dense and np.array_equal(dense.to_numpy(), X)


def test_bool_follows_numpy():
    X = np.array([[True, False, True], [False, False, True]])
    Y = np.array([[True, True, False], [False, True, True]])
    x, y = splyce.asarray(X, format=CSR), splyce.asarray(Y, format=CSR)
    product = splyce.jit(lambda a, b: a @ b.T)(x, y)
    assert product.dtype == np.bool_ and np.array_equal(product.toarray(), X @ Y.T)   # or of ands, sparse
    total = splyce.jit(lambda a: a.sum())(x)
    assert total == 3 and np.asarray(total).dtype == np.int64                       # a count, as NumPy
    counts = splyce.jit(lambda a: a.sum(axis=0))(x)
    assert counts.dtype == np.int64 and np.array_equal(counts, X.sum(axis=0))
    union = splyce.jit(lambda a, b: a + b)(x, y)
    assert union.dtype == np.bool_ and np.array_equal(union.toarray(), X + Y)         # or, never 2
    scaled = splyce.jit(lambda a: a * 2)(x)
    assert scaled.dtype == np.int64 and np.array_equal(scaled.toarray(), X * 2)
    halves = splyce.jit(lambda a: a * 0.5)(x)
    assert halves.dtype == np.float64 and np.array_equal(halves.toarray(), X * 0.5)
    assert np.array_equal(splyce.jit(lambda a: a.min(axis=1))(x), X.min(axis=1))


def test_mixed_dtypes_promote_like_numpy():
    rng = np.random.default_rng(5)
    R = np.where(rng.random((4, 5)) < 0.5, rng.uniform(-2, 2, (4, 5)), 0)
    C = _random(6, (4, 5), "complex64", 0.5)
    B = _random(7, (4, 5), "bool", 0.5)
    r, c, b = (splyce.asarray(v, format=CSR) for v in (R, C, B))
    for fun, ref, args in [
        (lambda x, y: x * y, lambda X, Y: X * Y, ((r, c), (R, C))),
        (lambda x, y: x + y, lambda X, Y: X + Y, ((r, c), (R, C))),
        (lambda x, y: x @ y.T, lambda X, Y: X @ Y.T, ((c, r), (C, R))),
        (lambda x, y: x * y, lambda X, Y: X * Y, ((b, r), (B, R))),
        (lambda x, y: x + y, lambda X, Y: X + Y, ((b, c), (B, C))),
        (lambda x, y: abs(x) + y, lambda X, Y: np.abs(X) + Y, ((c, r), (C, R))),
        (lambda x, y: x * 1j, lambda X, Y: X * 1j, ((r, c), (R, C))),
        (lambda x, y: y / 2.5, lambda X, Y: Y / 2.5, ((r, c), (R, C))),
    ]:
        _assert_matches(splyce.jit(fun)(*args[0]), ref(*args[1]), tol=2e-5)   # C is complex64
    c32 = splyce.asarray(R.astype(np.float32), format=CSR)
    _assert_matches(splyce.jit(lambda x, y: x + y)(c32, c), R.astype(np.float32) + C)   # complex64


@pytest.mark.parametrize("fun, dtype, message", [
    (lambda a, b: -a, "bool", "negative: not supported for bool values"),
    (lambda a, b: a - b, "bool", "subtract: not supported for bool values"),
    (lambda a, b: a / 2, "bool", "divide: not supported for bool values"),
    (lambda a, b: a ** 2, "bool", "power: not supported for bool values"),
    (lambda a, b: a.max(), "complex128", "max: not supported for complex128 values"),
    (lambda a, b: a.min(axis=1), "complex64", "min: not supported for complex64 values"),
    (lambda a, b: splyce.maximum(a, b), "complex128", "maximum: not supported for complex128 values"),
    (lambda a, b: splyce.minimum(a, b), "complex64", "minimum: not supported for complex64 values"),
])
def test_undefined_ops_raise_type_errors_naming_op_and_dtype(fun, dtype, message):
    X = _random(1, (3, 3), dtype, 0.5)
    x = splyce.asarray(X, format=CSR)
    with pytest.raises(TypeError, match=message):
        splyce.jit(fun)(x, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropins_match_scipy(dtype):
    A, B, M = _random(1, (6, 5), dtype, 0.4), _random(2, (5, 4), dtype, 0.4), _random(3, (6, 4), dtype, 0.5)
    a, b, m = sps.csr_array(A), sps.csr_array(B), sps.csr_array(M)
    cases = [
        (splyce.matmul(a, b), a @ b),
        (splyce.matmul(a, B), a @ B),
        (splyce.matmul(A.T.copy(), sps.csr_array(M)), A.T @ M),
        (splyce.matmul(a, B[:, 0].copy()), a @ B[:, 0]),
        (splyce.matmul(a, b, out_format="dense"), A @ B),
        (splyce.multiply(m, sps.csr_array(_random(4, (6, 4), dtype, 0.5))), m.multiply(_random(4, (6, 4), dtype, 0.5))),
        (splyce.add(m, sps.csr_array(_random(4, (6, 4), dtype, 0.5))), m + sps.csr_array(_random(4, (6, 4), dtype, 0.5))),
        (splyce.einsum("ik,kj,ij->ij", a, b, m), np.einsum("ik,kj,ij->ij", A, B, M)),
        (splyce.einsum("ik,kj->", a, b), np.einsum("ik,kj->", A, B)),
    ]
    for got, want in cases:
        assert sps.issparse(got) == sps.issparse(want) or not sps.issparse(want)
        _assert_matches(got, _dense(want))
    assert isinstance(splyce.matmul(a, b), sps.sparray)
    assert sps.issparse(splyce.einsum("ik,kj,ij->ij", a, b, m))   # on the mask's positions, as for floats


@pytest.mark.parametrize("dtype", DTYPES)
def test_strict_splyce_bit_identical_to_plain_sparsifier(dtype):
    A, B = _random(8, (9, 12), dtype, 0.4), _random(9, (9, 12), dtype, 0.4)
    a, b = splyce.asarray(A, format=CSR), splyce.asarray(B, format=CSC)
    for fun in (lambda x, y: splyce.einsum("ik,jk->ij", x, y, order="ijk"), lambda x, y: (x * y).sum(axis=1)):
        fast = splyce.jit(fun, fast_math=False)(a, b)
        plain = splyce.jit(fun, vectorize=False)(a, b)
        assert np.asarray(fast).tobytes() == np.asarray(plain).tobytes()


@pytest.mark.parametrize("dtype, element", [("complex128", "complex<f64>"), ("complex64", "complex<f32>"),
                                            ("bool", "i8")])
def test_splyce_pass_declines_value_types_its_fast_lane_lacks(dtype, element):
    A = _random(10, (8, 8), dtype, 0.5)
    a, b = splyce.asarray(A, format=CSR), splyce.asarray(A, format=CSC)
    f = splyce.jit(lambda x, y: splyce.einsum("ik,kj->ij", x, y, order="ijk"))
    assert f"declined (element type {element} unsupported)" in f.lower(a, b).as_text("splyce")
    _assert_matches(f(a, b), A @ A)


def test_kernel_cache_keeps_dtypes_apart():
    f = splyce.jit(lambda x, y: x * y)
    results = {}
    for dtype in ("float64", "complex128", "complex64", "bool"):
        X = _random(11, (4, 4), dtype, 0.6) if dtype != "float64" else np.eye(4) * 3
        x = splyce.asarray(X, format=CSR)
        results[dtype] = f(x, x)
        _assert_matches(results[dtype], X * X)
    assert f.cache_info().misses == 4 and f.cache_info().currsize == 4


@pytest.mark.parametrize("fun, values", [
    (lambda x: abs(x), np.array([True, True, False])),     # abs of bools is the identity
    (lambda x: x * 1, np.array([3, -4, 0])),                 # MLIR folds x * 1 on integers
    (lambda x: x.conj() * 1, np.array([3, -4, 0])),
])
def test_kernels_that_return_their_input_give_a_copy(fun, values):
    """MLIR folds such a kernel into returning the argument's own buffers: the result must be a copy (the
    caller's buffers are neither freed nor shared), for empty operands too."""
    for dense in (np.diag(values), np.zeros((3, 3), dtype=values.dtype)):
        x = splyce.asarray(dense, format=DCSR)
        before = [b.copy() for b in (x.values, *[c for c in x.crd if c is not None])]
        for _ in range(3):
            out = splyce.jit(fun)(x)
            assert np.array_equal(out.toarray(), fun(dense)) and out.dtype == fun(dense).dtype
            assert not np.shares_memory(out.data, x.values)
            del out
        after = [x.values, *[c for c in x.crd if c is not None]]
        assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_int32_sums_are_int64_as_in_numpy(axis):
    """NumPy sums int32 as int64: values near 2**31 do not wrap around."""
    import scipy.sparse as sps

    dense = np.zeros((5, 4), dtype=np.int32)
    dense[:, 1] = 2**31 - 1
    dense[2, 3] = -7
    a = sps.csr_array(dense)
    got = splyce.jit(lambda x: x.sum(axis=axis))(a)
    want = dense.sum(axis=axis)
    assert np.asarray(got).dtype == want.dtype == np.int64
    assert np.array_equal(got, want)
