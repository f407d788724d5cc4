"""The NumPy / scipy surface on traced values, one method or function at a time against NumPy / scipy:
format conversions, nnz / getnnz / count_nonzero(axis), var / std, the joins (concatenate, stack, hstack,
vstack, column_stack; scipy's hstack / vstack), np.asarray and the scipy constructors inside a jitted
function (tracer/namespaces.py), and the refusals with what to write instead."""

import numpy as np
import pytest
import scipy.sparse as sp

import splyce
from splyce.errors import TraceError

from surface_helper import densify

RNG = np.random.default_rng(11)
A = sp.random_array((12, 9), density=0.3, format="csr", rng=3)
A.data[[0, 5]] = 0.0                 # two explicit zeros
M = sp.csr_matrix(A)
X = RNG.standard_normal((6, 4))
V = RNG.standard_normal(12)


def _dense(x):
    if isinstance(x, splyce.SparseTensor):
        x = x.to_scipy()
    return x.toarray() if sp.issparse(x) else np.asarray(x)


# -- format conversions ---------------------------------------------------------------------------------------

def test_conversion_to_the_same_format_is_the_value():
    def f(a):
        assert a.tocsr() is a and a.asformat("csr") is a and a.asformat(None) is a
        return a.tocsc()

    out = splyce.jit(f)(A)
    assert out.format == "csc"
    np.testing.assert_array_equal(_dense(out), A.toarray())


@pytest.mark.parametrize("name", ["tocsr", "tocsc", "tocoo"])
def test_conversions_keep_the_entries(name):
    out = splyce.jit(lambda a: getattr(a.T, name)())(A)
    want = getattr(A.T, name)()
    assert out.format == want.format
    np.testing.assert_array_equal(_dense(out), want.toarray())


def test_asformat_refusals():
    with pytest.raises(TraceError, match="asformat: format 'dia' is not supported.*'csr', 'csc' or 'coo'"):
        splyce.jit(lambda a: a.asformat("dia"))(A)
    with pytest.raises(ValueError, match="unknown format 'xyz'"):
        splyce.jit(lambda a: a.asformat("xyz"))(A)
    with pytest.raises(TraceError, match="scipy.sparse.csr_array: a 2-D value is needed"):
        splyce.jit(lambda v: sp.csr_array(v))(V)


def test_dense_value_stored_sparse_drops_its_zeros():
    d = A.toarray()
    out = splyce.jit(lambda x: sp.csr_array(x))(d)
    assert sp.issparse(out) and out.format == "csr"
    np.testing.assert_array_equal(out.toarray(), d)
    assert out.nnz == np.count_nonzero(d)


# -- stored-entry counts ---------------------------------------------------------------------------------------

def test_nnz_counts_explicit_zeros_and_count_nonzero_does_not():
    nnz, nonzero = splyce.jit(lambda a: (a.nnz, a.count_nonzero()))(A)
    assert int(nnz) == A.nnz and int(nonzero) == A.count_nonzero() and A.nnz == A.count_nonzero() + 2
    assert np.asarray(nnz).dtype == np.int64 and np.ndim(nnz) == 0


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_getnnz_and_count_nonzero_by_axis(axis):
    got = splyce.jit(lambda a: (a.getnnz(axis=axis), a.count_nonzero(axis=axis)))(A)
    np.testing.assert_array_equal(got[0], M.getnnz(axis=axis % 2))
    np.testing.assert_array_equal(got[1], A.count_nonzero(axis=axis))


@pytest.mark.parametrize("name, body", [
    ("sum", lambda a: a + a), ("product", lambda a: a.multiply(a)), ("matmul", lambda a: sp.csr_array(a @ a.T)),
    ("comparison", lambda a: a > 0.5), ("transpose", lambda a: a.T), ("scaled", lambda a: (2 * a).tocsc()),
    ("abs", lambda a: abs(a)), ("astype", lambda a: a.astype(np.float32)), ("sqrt", lambda a: a.sqrt()),
    ("maximum", lambda a: a.maximum(0))])
def test_nnz_of_computed_values_as_scipy(name, body):
    """scipy keeps an argument's explicit zeros through transposes, scalings and unary maps, and drops the
    zeros its binary operations, products and comparisons compute."""
    got = splyce.jit(lambda a: body(a).nnz)(splyce.asarray(A))
    assert int(got) == body(A).nnz


def test_count_refusals():
    with pytest.raises(TraceError, match="getnnz: axis 2 is out of range"):
        splyce.jit(lambda a: a.getnnz(axis=2))(A)
    with pytest.raises(TraceError, match="getnnz: axis must be None, 0 or 1"):
        splyce.jit(lambda a: a.getnnz(axis=(0, 1)))(A)
    with pytest.raises(AttributeError, match="a dense traced value \\(a NumPy array\\) has no attribute 'nnz'.*"
                                             "np.count_nonzero\\(x\\)"):
        splyce.jit(lambda x: x.nnz)(X)
    with pytest.raises(AttributeError, match="has no attribute 'getnnz'.*np.count_nonzero\\(x, axis\\)"):
        splyce.jit(lambda x: x.getnnz(axis=0))(X)


def test_sparse_only_attributes_tell_dense_from_sparse_as_outside_the_trace():
    def f(a, x):
        assert all(hasattr(a, n) for n in ("tocsr", "tocsc", "tocoo", "asformat", "getnnz", "nnz"))
        assert not any(hasattr(x, n) for n in ("tocsr", "tocsc", "tocoo", "asformat", "getnnz", "nnz"))
        return x.sum() + a.nnz

    assert int(splyce.jit(f)(A, np.ones(3))) == 3 + A.nnz
    with pytest.raises(AttributeError, match="no attribute 'tocsr'; write scipy.sparse.csr_array\\(x\\)"):
        splyce.jit(lambda x: x.tocsr())(X)
    with pytest.raises(TraceError, match="count_nonzero: axis 3 is out of range"):
        splyce.jit(lambda a: a.count_nonzero(axis=3))(A)


# -- var / std ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis, ddof, keepdims", [(None, 0, False), (0, 1, False), (1, 0, True), ((0, 1), 2, True),
                                                   (-1, 1, False)])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_as_numpy(name, axis, ddof, keepdims):
    method = splyce.jit(lambda x: getattr(x, name)(axis=axis, ddof=ddof, keepdims=keepdims))(X)
    function = splyce.jit(lambda x: getattr(np, name)(x, axis, ddof=ddof, keepdims=keepdims))(X)
    want = getattr(np, name)(X, axis=axis, ddof=ddof, keepdims=keepdims)
    for got in (method, function):
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("x", [np.arange(12).reshape(3, 4), X.astype(np.float32),
                               X + 1j * RNG.standard_normal(X.shape)], ids=["int64", "float32", "complex128"])
def test_var_dtypes_as_numpy(x):
    got = splyce.jit(lambda x: (x.var(axis=0), np.std(x, correction=1)))(x)
    want = (x.var(axis=0), np.std(x, correction=1))
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-6 if x.dtype == np.float32 else 1e-12)


def test_var_refusals():
    with pytest.raises(TraceError, match="var: not supported on a sparse value.*a.toarray\\(\\).var\\(axis\\)"):
        splyce.jit(lambda a: a.var())(A)
    with pytest.raises(TraceError, match="std: 6 values with ddof=6 leave no degrees of freedom"):
        splyce.jit(lambda x: x.std(axis=0, ddof=6))(X)
    with pytest.raises(TraceError, match="var: axis 2 is out of range"):
        splyce.jit(lambda x: x.var(axis=2))(X)
    with pytest.raises(TypeError, match="numpy.var: argument out not supported"):
        splyce.jit(lambda x: np.var(x, out=np.empty(4)))(X)
    with pytest.raises(TypeError, match="var: not supported for bool values"):
        splyce.jit(lambda x: (x > 0).var())(X)


# -- joins -------------------------------------------------------------------------------------------------------

Y = RNG.standard_normal((6, 2))
U = RNG.standard_normal(6)


@pytest.mark.parametrize("name, call", [
    ("concatenate0", lambda np_, x, y, u: np_.concatenate([x, x * 2], axis=0)),
    ("concatenate1", lambda np_, x, y, u: np_.concatenate((x, y), axis=-1)),
    ("concatenateNone", lambda np_, x, y, u: np_.concatenate([u, u[:3]], axis=None)),
    ("stack0", lambda np_, x, y, u: np_.stack([u, u + 1, -u])),
    ("stack1", lambda np_, x, y, u: np_.stack([x, x], axis=1)),
    ("stack-1", lambda np_, x, y, u: np_.stack([u, 2 * u], axis=-1)),
    ("hstack1d", lambda np_, x, y, u: np_.hstack([u, u[:2]])),
    ("hstack2d", lambda np_, x, y, u: np_.hstack([x, y, u[:, None]])),
    ("vstack", lambda np_, x, y, u: np_.vstack([x[:, 0], x.T, x[:, 1]])),
    ("column_stack", lambda np_, x, y, u: np_.column_stack([u, y, u * 3])),
    ("constant piece", lambda np_, x, y, u: np_.hstack([x, np.ones((6, 1))])),
    ("mixed dtypes", lambda np_, x, y, u: np_.column_stack([u, np.arange(6)])),
    ("bools", lambda np_, x, y, u: np_.vstack([u > 0, u < 0])),
    ("ints", lambda np_, x, y, u: np_.stack([(u > 0).astype(np.int64), (u < 0).astype(np.int64)])),
])
def test_joins_as_numpy(name, call):
    got = splyce.jit(lambda x, y, u: call(np, x, y, u))(X, Y, U)
    want = call(np, X, Y, U)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_joins_keep_inf_and_nan_in_place():
    u = np.array([1.0, np.inf, np.nan, -np.inf, 0.0, 2.0])
    got = splyce.jit(lambda u, w: (np.concatenate([u, w]), np.column_stack([u, w])))(u, U)
    np.testing.assert_array_equal(got[0], np.concatenate([u, U]))
    np.testing.assert_array_equal(got[1], np.column_stack([u, U]))


def test_join_refusals():
    with pytest.raises(ValueError, match="dimensions except for the concatenation axis must match"):
        splyce.jit(lambda x, y: np.concatenate([x, y]))(X, Y)
    with pytest.raises(ValueError, match="same number of dimensions"):
        splyce.jit(lambda x, u: np.concatenate([x, u]))(X, U)
    with pytest.raises(ValueError, match="must have the same shape"):
        splyce.jit(lambda x, y: np.stack([x, y]))(X, Y)
    with pytest.raises(TraceError, match="numpy.hstack: a sparse value cannot be joined by NumPy; write sp.hstack"):
        splyce.jit(lambda a: np.hstack([a, a]))(A)
    with pytest.raises(TraceError, match="iterating over a traced tensor is not supported"):
        splyce.jit(lambda x: np.concatenate(x))(X)      # NumPy's dispatcher iterates over it first
    with pytest.raises(TraceError, match="pass a list or tuple of arrays"):
        splyce.jit(lambda x: sp.hstack(x))(A)
    with pytest.raises(TraceError, match="axis=None flattens the pieces.*rank > 1"):
        splyce.jit(lambda x: np.concatenate([x, x], axis=None))(X)
    with pytest.raises(TraceError, match="concatenate: axis 2 is out of bounds"):
        splyce.jit(lambda x: np.concatenate([x, x], axis=2))(X)
    with pytest.raises(TypeError, match="numpy.concatenate: argument out not supported"):
        splyce.jit(lambda x: np.concatenate([x, x], out=np.empty((12, 4))))(X)


@pytest.mark.parametrize("how", ["hstack", "vstack"])
@pytest.mark.parametrize("fmt", [None, "csc"])
def test_scipy_joins_of_sparse_values(how, fmt):
    B = sp.random_array((12, 9), density=0.2, format="csr", rng=8)
    got = splyce.jit(lambda a, b: getattr(sp, how)([a, b, a], format=fmt))(A, B)
    want = getattr(sp, how)([A, B, A], format=fmt)
    assert sp.issparse(got) and got.format == want.format and got.shape == want.shape
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def test_scipy_join_refuses_a_dense_block():
    with pytest.raises(TraceError, match="scipy.sparse.hstack: the blocks must be 2-D sparse values.*sp.csr_array"):
        splyce.jit(lambda a, x: sp.hstack([a, x]))(A, np.ones((12, 2)))


# -- np.asarray and friends inside the jitted function ------------------------------------------------------

def test_asarray_family_is_the_identity_or_a_conversion():
    def f(a, v):
        s = a.sum(axis=1)
        assert np.asarray(s).node is s.node and np.asanyarray(s) is s
        return (np.asarray(s).ravel(), np.array(v, dtype=np.float32), np.ascontiguousarray(v),
                np.array([v, 2 * v]), np.asarray([[1.0] * 12, v]))

    got = splyce.jit(f)(A, V)
    want = (np.asarray(A.sum(axis=1)).ravel(), V.astype(np.float32), V, np.array([V, 2 * V]),
            np.asarray([[1.0] * 12, V]))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_asarray_of_concrete_values_is_numpy():
    got = splyce.jit(lambda v: v * np.asarray([1.0, 2.0] * 6) + np.array(3))(V)
    np.testing.assert_array_equal(got, V * np.asarray([1.0, 2.0] * 6) + 3)


def test_asarray_of_a_sparse_value_is_refused():
    with pytest.raises(TraceError, match="numpy.asarray of a sparse value.*a.toarray\\(\\)"):
        splyce.jit(lambda a: np.asarray(a))(A)


def test_asarray_in_code_the_jit_does_not_rebind_raises_at_its_line():
    with pytest.raises(TraceError, match="numpy.asarray / numpy.array in code @splyce.jit does not rebind.*'surface_helper'"):
        splyce.jit(lambda a, v: densify(a @ v))(A, np.ones(9))


def test_asarray_imported_inside_the_body_raises():
    def f(v):
        import numpy

        return numpy.asarray(v)

    with pytest.raises(TraceError, match="drop the conversion"):
        splyce.jit(f)(V)


def test_captured_scipy_matrix_still_defers_to_the_tracer():
    got = splyce.jit(lambda x: A @ x)(np.ones(9))
    np.testing.assert_allclose(got, A @ np.ones(9))


# -- scipy constructors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("offsets", [0, 2, -3, [0, 1], [-1, 0, 1]])
@pytest.mark.parametrize("name", ["diags", "diags_array"])
def test_diags_of_traced_vectors(name, offsets):
    n = 7
    ds = ([RNG.standard_normal(n - abs(offsets))] if np.ndim(offsets) == 0
          else [RNG.standard_normal(n - abs(o)) for o in offsets])

    def f(*ds):
        return getattr(sp, name)(ds[0] if np.ndim(offsets) == 0 else list(ds), offsets=offsets)

    got = splyce.jit(f)(*ds)
    want = f(*ds)
    assert sp.issparse(got)
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def test_diags_shape_and_format():
    d = RNG.standard_normal(5)
    got = splyce.jit(lambda d: sp.diags(d, 1, shape=(5, 6), format="csc"))(d)
    want = sp.diags(d, 1, shape=(5, 6), format="csc")
    assert got.format == "csc" and got.shape == (5, 6)
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def test_diags_refusals():
    with pytest.raises(TraceError, match="a diagonal must be a dense 1-D value.*stored sparse"):
        splyce.jit(lambda a: sp.diags([a], [0], shape=(12, 12)))(A)
    with pytest.raises(TraceError, match="a traced diagonal must be 1-D, got shape \\(6, 4\\)"):
        splyce.jit(lambda x: sp.diags(x))(X)
    with pytest.raises(ValueError, match="Different number of diagonals"):
        splyce.jit(lambda v: sp.diags([v, v], [0]))(V)
    with pytest.raises(ValueError, match="Diagonal length \\(index 1: 5 at offset 1\\) does not agree with array "
                       "size \\(12, 12\\)"):
        splyce.jit(lambda v: sp.diags([v, v[:5]], [0, 1]))(V)
    with pytest.raises(ValueError, match="Diagonal length \\(index 0: 12 at offset 0\\)"):
        splyce.jit(lambda v: sp.diags(v, 0, shape=(5, 5)))(V)


def test_eye_and_identity_take_sizes_not_traced_values():
    got = splyce.jit(lambda a, v: (sp.eye(12, 9, k=1) + a) @ np.ones(9) + sp.identity(12) @ v)(A, V)
    np.testing.assert_allclose(got, (sp.eye(12, 9, k=1) + A) @ np.ones(9) + V)
    with pytest.raises(TraceError, match="no value at trace time"):
        splyce.jit(lambda a: sp.eye(a.nnz))(A)


@pytest.mark.parametrize("name", ["csr_array", "csr_matrix", "csc_array", "coo_array"])
def test_sparse_constructors_of_traced_values(name):
    got = splyce.jit(lambda a: getattr(sp, name)(a.T, dtype=np.float32))(A)
    assert sp.issparse(got) and got.format == name[:3] and got.dtype == np.float32
    np.testing.assert_array_equal(got.toarray(), A.T.toarray().astype(np.float32))


def test_sparse_constructor_refusals():
    with pytest.raises(ValueError, match="shape \\(3, 3\\) does not match"):
        splyce.jit(lambda a: sp.csr_array(a, shape=(3, 3)))(A)
    with pytest.raises(TraceError, match="a tuple \\(data, indices, ...\\) of traced values is not supported"):
        splyce.jit(lambda v: sp.csr_array((v, (np.arange(12), np.arange(12)))))(V)


def test_issparse_of_traced_values():
    got = splyce.jit(lambda a, v: (a @ np.ones(9)) * sp.issparse(a) + v * sp.issparse(v))(A, V)
    np.testing.assert_allclose(got, A @ np.ones(9))


def test_scipy_names_of_another_function_are_the_real_ones():
    import scipy.sparse

    splyce.jit(lambda v: np.asarray(v))(V)
    assert sp.diags is scipy.sparse.diags and np.asarray([1]).__class__ is np.ndarray


def test_scipy_names_of_a_closure_function_are_served():
    def inner(a):
        return sp.csr_array(a).tocsc()

    got = splyce.jit(lambda a: inner(a.T))(A)
    np.testing.assert_array_equal(got.toarray(), A.T.toarray())


def test_scipy_constructor_in_code_the_jit_does_not_rebind_raises():
    """scipy re-raises the TraceError as a ValueError 'unrecognized csr_array constructor input', from it."""
    import surface_helper

    with pytest.raises(ValueError, match="unrecognized csr_array constructor input") as info:
        splyce.jit(lambda a: surface_helper.to_csr(a.toarray()))(A)
    assert isinstance(info.value.__cause__, TraceError)
    assert "a scipy.sparse constructor (csr_array(t), coo_matrix(t)...) of a traced value in code @splyce.jit does " \
           "not rebind" in str(info.value.__cause__) and "t.tocsr()" in str(info.value.__cause__)


@pytest.mark.parametrize("name", ["solve", "inv", "cholesky"])
def test_dense_linear_algebra_runs_numpy_between_kernels(name):
    # refused before; now NumPy's own results (tests/runtime/test_host_steps.py: the cut program)
    k = np.eye(3) * 2.0 + 0.5
    args = (k, np.ones(3)) if name == "solve" else (k,)
    fun = lambda *a: getattr(np.linalg, name)(*(x * 1.0 for x in a))
    np.testing.assert_array_equal(splyce.jit(fun)(*args), fun(*args))


def test_products_with_diags_are_scalings_never_dense_n_by_n():
    n = 3000
    G = sp.random_array((n, n), density=4 / n, format="csr", rng=5) + sp.eye_array(n, format="csr")

    def normalised(a):
        d = sp.diags(np.asarray(a.sum(axis=1)).ravel() ** -0.5)
        return d @ a @ d

    f = splyce.jit(normalised)
    plan = f.lower(G).as_text("plan")
    dense_square = f"{n}x{n}xfloat64"
    assert all(line.split(dense_square, 1)[1].startswith(" #") for line in plan.splitlines() if dense_square in line)
    got, want = f(G), normalised(G)
    assert sp.issparse(got) and got.nnz == G.nnz
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12)


def test_diags_times_dense_values():
    d = RNG.standard_normal(6)
    got = splyce.jit(lambda d, x, u: (sp.diags(d) @ x, x.T @ sp.diags(d), sp.diags(d) @ u, u @ sp.diags(d)))(d, X, U)
    want = (np.diag(d) @ X, X.T @ np.diag(d), d * U, U * d)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_more_refusals_name_the_construct():
    with pytest.raises(TraceError, match="asformat: the format must be a string such as 'csr', got 3"):
        splyce.jit(lambda a: a.asformat(3))(A)
    with pytest.raises(TraceError, match="var: ddof must be a number, got 'x'"):
        splyce.jit(lambda x: x.var(ddof="x"))(X)
    with pytest.raises(TraceError, match="std: keepdims must be True or False, got 1"):
        splyce.jit(lambda x: x.std(keepdims=1))(X)
    with pytest.raises(ValueError, match="ddof and correction can't be provided simultaneously"):
        splyce.jit(lambda x: np.var(x, ddof=1, correction=1))(X)
    with pytest.raises(TraceError, match="hstack: 0-d pieces are not supported.*1-D or 2-D"):
        splyce.jit(lambda x: np.hstack([x.sum(), x.sum()]))(X)
    with pytest.raises(ValueError, match="zero-dimensional arrays cannot be concatenated"):
        splyce.jit(lambda x: np.concatenate([x, 1.0]))(X)
    with pytest.raises(ValueError, match="zero-dimensional arrays cannot be concatenated"):
        splyce.jit(lambda x: np.concatenate([x.sum(), x.sum()]))(X)
    # a list of 0-d traced values is the vector of them, as NumPy's (it was refused before)
    np.testing.assert_allclose(splyce.jit(lambda x: np.asarray([x.sum(), x.max()]))(X), [X.sum(), X.max()])
    with pytest.raises(TraceError, match="scipy.sparse.vstack: format 'dia' is not supported.*'csr', 'csc' or 'coo'"):
        splyce.jit(lambda a: sp.vstack([a, a], format="dia"))(A)
    with pytest.raises(ValueError, match="Repeated diagonal offsets"):
        splyce.jit(lambda v: sp.diags([v, v], [0, 0]))(V)
    with pytest.raises(TraceError, match="stack: axis 3 is out of bounds for arrays of dimension 3"):
        splyce.jit(lambda x: np.stack([x, x], axis=3))(X)


def test_copies_are_the_values():
    got = splyce.jit(lambda x, a: (np.copy(x) + x.copy(), x.astype(np.float64, copy=False),
                                   a.copy().multiply(2), np.copy(a.sum(axis=0))))(X, A)
    want = (2 * X, X, A.multiply(2), A.sum(axis=0))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.toarray() if sp.issparse(g) else g, w.toarray() if sp.issparse(w) else w)
