"""The drop-ins against scipy.sparse where shapes or formats differ: a scalar, a row or a column vector
(dense or sparse) against a sparse matrix, and a CSC left operand, whose result scipy returns as a CSC.
Each result is compared with scipy's for the same call: class, shape, dtype, stored count, values bit for
bit (NaN, Inf and -0.0 included)."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # NaN * 0, as scipy

FORMATS = ["csr", "csc", "coo", "bsr", "dia", "lil", "dok"]


def _bits(x):
    d = x.toarray() if hasattr(x, "toarray") else (x.todense() if hasattr(x, "todense") else np.asarray(x))
    d = np.ascontiguousarray(d)
    if d.dtype.kind in "fc":
        return d.view(np.uint8)        # bit patterns: -0.0 and NaN payloads count
    return d


def assert_as_scipy(got, ref):
    assert type(got) is type(ref), (type(got), type(ref))
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if sps.issparse(ref):
        assert got.nnz == ref.nnz
    assert np.array_equal(_bits(got), _bits(ref))


def _matrix(m, n, density, dtype=np.float64, seed=0, nonfinite=False):
    rng = np.random.default_rng(seed)
    A = sps.random_array((m, n), density=density, format="csr", rng=rng, dtype=np.float64)
    A.data = (A.data * 10 - 5)
    if nonfinite and A.nnz >= 3:
        A.data[0], A.data[1], A.data[2] = np.nan, np.inf, -0.0
    if np.dtype(dtype).kind == "b":
        return A.astype(bool)
    if np.dtype(dtype).kind == "i":
        return A.astype(dtype)
    return A.astype(dtype)


def _vector(k, seed=1, nonfinite=True):
    v = np.random.default_rng(seed).standard_normal(k)
    if nonfinite and k >= 4:
        v[0], v[1], v[2], v[3] = np.nan, np.inf, 0.0, -0.0
    return v


# -- CSC operands: scipy's result is a CSC ---------------------------------------------------------------------
@pytest.mark.parametrize("cls", ["array", "matrix"])
@pytest.mark.parametrize("fa,fb", [("csc", "csc"), ("csc", "csr"), ("csr", "csc"), ("csc", "coo")])
@pytest.mark.parametrize("op", ["multiply", "add", "subtract"])
def test_elementwise_csc_result_class(cls, fa, fb, op):
    A = _matrix(60, 50, 0.1, seed=2, nonfinite=True)
    B = _matrix(60, 50, 0.1, seed=3)
    B = B + A.multiply(A > 1)          # shared positions, and cancelling ones for subtract
    wrap = (lambda x: x) if cls == "array" else sps.csr_matrix
    a, b = wrap(A).asformat(fa), wrap(B).asformat(fb)
    ref = {"multiply": lambda: a.multiply(b), "add": lambda: a + b, "subtract": lambda: a - b}[op]()
    got = getattr(splyce, op)(a, b)
    assert_as_scipy(got, ref)
    assert_as_scipy(getattr(splyce, op)(a, a), {"multiply": lambda: a.multiply(a), "add": lambda: a + a,
                                                "subtract": lambda: a - a}[op]())


@pytest.mark.parametrize("cls", ["array", "matrix"])
@pytest.mark.parametrize("fa,fb", [("csc", "csc"), ("csc", "csr"), ("csr", "csc")])
def test_matmul_csc_result_class(cls, fa, fb):
    A = _matrix(70, 50, 0.08, seed=4)
    B = _matrix(50, 40, 0.08, seed=5)
    wrap = (lambda x: x) if cls == "array" else sps.csr_matrix
    a, b = wrap(A).asformat(fa), wrap(B).asformat(fb)
    got, ref = splyce.matmul(a, b), a @ b
    assert_as_scipy(got, ref)


def test_matmul_csc_misaligned_names_the_shapes():
    a, b = _matrix(20, 30, 0.1).tocsc(), _matrix(20, 30, 0.1).tocsc()
    with pytest.raises(ValueError, match=r"\(20, 30\) and \(20, 30\)"):
        splyce.matmul(a, b)


# -- scalars ---------------------------------------------------------------------------------------------
SCALARS = [2.5, 3, -1, 0, np.nan, np.float32(1.5), np.int32(7), np.array(2.0), np.array([[0.5]]), np.array([4])]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.complex128, np.bool_])
def test_multiply_by_scalar_as_scipy(fmt, dtype):
    A = _matrix(30, 20, 0.2, dtype=dtype, seed=6, nonfinite=np.dtype(dtype).kind in "fc").asformat(fmt)
    before = A.toarray().copy()
    for s in SCALARS:
        assert_as_scipy(splyce.multiply(A, s), A.multiply(s))
        assert_as_scipy(splyce.multiply(s, A), A.multiply(s))
    assert np.array_equal(_bits(A), before.view(np.uint8) if before.dtype.kind in "fc" else before)


def test_multiply_by_scalar_keeps_explicit_zeros_and_copies_indices():
    A = _matrix(30, 20, 0.2)
    got = splyce.multiply(A, 0.0)
    assert got.nnz == A.nnz == A.multiply(0.0).nnz
    got.indices[:] = 0
    assert A.indices.max() > 0          # the input's index arrays are not shared


def test_multiply_splyce_tensor_by_scalar():
    A = _matrix(30, 20, 0.2, nonfinite=True)
    T = splyce.asarray(A)
    got = splyce.multiply(T, -2.0)
    assert isinstance(got, splyce.SparseTensor) and got.format == T.format
    assert np.array_equal(_bits(got.to_scipy()), _bits(A.multiply(-2.0)))
    X = splyce.asarray(np.arange(24.0).reshape(2, 3, 4) % 5, format=splyce.csf(3))
    assert np.array_equal(splyce.multiply(X, 3).to_numpy(), X.to_numpy() * 3)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_add_subtract_scalar_as_scipy(fmt):
    A = _matrix(30, 20, 0.2, nonfinite=True).asformat(fmt)
    for got, ref in [(splyce.add(A, 0), A + 0), (splyce.add(0, A), 0 + A), (splyce.subtract(A, 0), A - 0),
                     (splyce.subtract(0, A), 0 - A), (splyce.add(A, np.array(0.0)), A + np.array(0.0))]:
        assert_as_scipy(got, ref)
        assert got is not A
    for op, args, ref_fn in [("add", (A, 1.0), lambda: A + 1.0), ("add", (2, A), lambda: 2 + A),
                             ("subtract", (A, 1), lambda: A - 1), ("subtract", (1, A), lambda: 1 - A)]:
        with pytest.raises(NotImplementedError) as ours:
            getattr(splyce, op)(*args)
        with pytest.raises(NotImplementedError) as theirs:
            ref_fn()
        assert str(ours.value) == str(theirs.value)
    B = A.astype(bool)
    with pytest.raises(NotImplementedError, match="boolean"):
        splyce.subtract(0, B)


# -- vectors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ["array", "matrix"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("kind", ["row", "row1d", "column"])
def test_multiply_by_dense_vector_as_scipy(cls, fmt, kind):
    A = _matrix(80, 60, 0.1, seed=7, nonfinite=True)
    A = (A if cls == "array" else sps.csr_matrix(A)).asformat(fmt)
    v = {"row": _vector(60)[None, :], "row1d": _vector(60), "column": _vector(80)[:, None]}[kind]
    assert_as_scipy(splyce.multiply(A, v), A.multiply(v))
    assert_as_scipy(splyce.multiply(v, A), A.multiply(v))       # the product commutes bit for bit


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.int32, np.float64), (np.int64, np.int32),
                                    (np.float32, np.float32), (np.complex128, np.float64)])
def test_multiply_by_dense_vector_promotes_as_scipy(dtypes):
    A = _matrix(40, 30, 0.2, dtype=dtypes[0], seed=8)
    v = (np.arange(30) % 7 - 3).astype(dtypes[1])
    assert_as_scipy(splyce.multiply(A, v[None, :]), A.multiply(v[None, :]))


def test_multiply_by_dense_vector_is_linear_in_nnz():
    # a formulation that expands the vector to the matrix's shape would need 8 * 10^12 bytes here
    n = 1_000_000
    A = sps.csr_array((np.ones(5), np.arange(5) * 1000, np.r_[0, 5, np.full(n - 1, 5)]), shape=(n, n))
    v = np.arange(n, dtype=np.float64)
    for w in (v, v[None, :], v[:, None]):
        got, ref = splyce.multiply(A, w), A.multiply(w)
        assert type(got) is type(ref) and got.shape == ref.shape and got.nnz == ref.nnz == 5
        assert np.array_equal(got.row, ref.row) and np.array_equal(got.col, ref.col)
        assert np.array_equal(got.data, ref.data)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("kind", ["row", "column"])
def test_multiply_by_sparse_vector_as_scipy(fmt, kind):
    A = _matrix(80, 60, 0.1, seed=9, nonfinite=True).asformat(fmt)
    v = _vector(60 if kind == "row" else 80, seed=10)
    v[np.arange(len(v)) % 3 == 0] = 0            # missing entries: A's NaN times them is NaN (scipy's diagonal)
    V = sps.csr_array(v[None, :] if kind == "row" else v[:, None])
    assert_as_scipy(splyce.multiply(A, V), A.multiply(V))
    assert_as_scipy(splyce.multiply(V, A), V.multiply(A))


@pytest.mark.parametrize("op", ["add", "subtract"])
@pytest.mark.parametrize("kind", ["row", "row1d", "column", "one"])
def test_add_subtract_dense_broadcast_as_scipy(op, kind):
    A = _matrix(30, 20, 0.2, seed=11, nonfinite=True)
    v = {"row": _vector(20)[None, :], "row1d": _vector(20), "column": _vector(30)[:, None],
         "one": np.array([[-0.0]])}[kind]
    ref = {"add": lambda: (A + v, v + A), "subtract": lambda: (A - v, v - A)}[op]()
    got = (getattr(splyce, op)(A, v), getattr(splyce, op)(v, A))
    for g, r in zip(got, ref):
        assert_as_scipy(g, r)


def test_broadcast_errors_name_both_shapes():
    A = _matrix(30, 20, 0.2)
    for op, other in [("multiply", np.ones(21)), ("multiply", np.ones((30, 2))), ("add", np.ones((2, 20))),
                      ("add", sps.csr_array(np.ones((1, 20)))), ("multiply", sps.csr_array(np.ones((2, 20))))]:
        with pytest.raises(ValueError, match=r"\(30, 20\) and \(\d+,( \d+)?\)"):
            getattr(splyce, op)(A, other)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 25), n=st.integers(1, 25), density=st.floats(0.0, 0.6),
       fmt=st.sampled_from(["csr", "csc", "coo"]), dtype=st.sampled_from([np.float64, np.float32, np.int64]),
       kind=st.sampled_from(["scalar", "row", "column", "sparse-row", "sparse-column"]),
       seed=st.integers(0, 2**16))
def test_multiply_broadcasts_match_scipy(m, n, density, fmt, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    A = _matrix(m, n, density, dtype=dtype, seed=seed, nonfinite=np.dtype(dtype).kind == "f").asformat(fmt)
    vals = rng.integers(-3, 4, size=max(m, n)).astype(np.float64)
    other = {"scalar": vals[0], "row": vals[:n][None, :], "column": vals[:m][:, None],
             "sparse-row": sps.csr_array(vals[:n][None, :]), "sparse-column": sps.csr_array(vals[:m][:, None])}[kind]
    assert_as_scipy(splyce.multiply(A, other), A.multiply(other))


def test_numpy_matrix_operands_as_scipy():
    A = _matrix(20, 15, 0.2, seed=12)
    Am = sps.csr_matrix(A)
    M, Y = np.asmatrix(np.arange(30.0).reshape(15, 2)), np.asmatrix(np.arange(40.0).reshape(2, 20))
    for got, ref in [(splyce.matmul(Am, M), Am @ M), (splyce.matmul(Y, Am), Y @ Am), (splyce.matmul(A, M), A @ M),
                     (splyce.matmul(Am, np.asarray(M)), Am @ np.asarray(M)), (splyce.add(Am, A.toarray()), Am + A.toarray())]:
        assert type(got) is type(ref) and got.shape == ref.shape and np.array_equal(got, ref)


# -- integer dtypes the kernels lack: computed in int64 (or the float result dtype), cast back ---------------
NARROW = [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]


def _narrow(m, n, density, dtype, seed):
    rng = np.random.default_rng(seed)
    A = sps.random_array((m, n), density=density, format="csr", rng=rng)
    info = np.iinfo(dtype)
    A.data = rng.integers(max(info.min, -200), min(info.max, 200), size=A.nnz, endpoint=True).astype(dtype)
    return A.astype(dtype)


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_integers_as_scipy(dtype):
    A, B = _narrow(60, 50, 0.3, dtype, 1), _narrow(60, 50, 0.3, dtype, 2)
    C = _narrow(50, 40, 0.3, dtype, 3)
    x = np.arange(50).astype(dtype)
    X = (np.arange(100).reshape(50, 2) % 9).astype(dtype)
    cases = [(splyce.matmul(A, C), A @ C), (splyce.matmul(A, x), A @ x), (splyce.matmul(A, X), A @ X),
             (splyce.multiply(A, B), A.multiply(B)), (splyce.add(A, B), A + B), (splyce.subtract(A, B), A - B),
             (splyce.matmul(A, x.astype(np.float64)), A @ x.astype(np.float64)),
             (splyce.multiply(A, x[None, :]), A.multiply(x[None, :])), (splyce.multiply(A, 3), A.multiply(3)),
             (splyce.add(A, A.toarray()), A + A.toarray()), (splyce.matmul(A.tocsc(), C), A.tocsc() @ C)]
    for got, ref in cases:
        assert_as_scipy(got, ref)


def test_narrow_integer_wraparound_drops_zeros_as_scipy():
    # 16 * 16 = 256 wraps to 0 in uint8: scipy's product stores no zero, so neither does ours
    A = sps.csr_array(np.array([[16, 1], [0, 2]], dtype=np.uint8))
    got, ref = splyce.matmul(A, A), A @ A
    assert_as_scipy(got, ref)
    assert_as_scipy(splyce.add(A, A * np.uint8(15)), A + A * np.uint8(15))
    assert splyce.einsum("ij,jk->ik", A, A).dtype == np.uint8


def test_float16_stays_unsupported():
    A = sps.random_array((5, 4), density=0.5, format="csr", rng=0)
    with pytest.raises((TypeError, ValueError), match="float16"):
        splyce.matmul(A, np.ones(4, dtype=np.float16))


@pytest.mark.parametrize("cls", [sps.csr_array, sps.csr_matrix])
def test_bsr_and_dok_left_operands_keep_scipys_result_format(cls):
    """scipy converts the right operand to a BSR left one's format (blocks of the left's size; a product's
    blocks: the left's rows by the right's block columns, 1 for a non-BSR right), and a DOK sum is a DOK (its
    difference and product are CSR)."""
    rng = np.random.default_rng(21)
    for block in ((2, 3), (1, 1), (3, 2), (6, 6)):
        a = cls(sps.random_array((6, 6), density=0.4, format="csr", rng=rng)).tobsr(blocksize=block)
        b = cls(sps.random_array((6, 6), density=0.4, format="csr", rng=rng))
        for right in (b, b.tocsc(), b.tobsr(blocksize=(block[1], 2))):
            for name, ref in (("add", a + right), ("subtract", a - right), ("multiply", a.multiply(right)),
                              ("matmul", a @ right)):
                got = getattr(splyce, name)(a, right)
                assert type(got) is type(ref) and got.blocksize == ref.blocksize, (name, block, right.format)
                np.testing.assert_array_equal(got.toarray(), ref.toarray())
        d = cls(sps.random_array((6, 6), density=0.4, format="csr", rng=rng)).todok()
        for name, ref in (("add", d + b), ("subtract", d - b), ("multiply", d.multiply(b)), ("matmul", d @ b)):
            got = getattr(splyce, name)(d, b)
            assert type(got) is type(ref), name
            np.testing.assert_array_equal(got.toarray(), ref.toarray())
