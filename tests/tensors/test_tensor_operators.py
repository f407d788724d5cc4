"""SparseTensor's NumPy-style operators: each is the drop-in of the same name (never a dense conversion
through ``__array__``), ``.T`` is the same buffers in the transposed order, and NumPy's ufuncs defer to
them instead of densifying."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


@pytest.fixture
def pair():
    A = sps.random_array((50, 40), density=0.1, format="csr", rng=np.random.default_rng(0))
    return A, splyce.asarray(A, copy=True)


def _dense(x):
    return x.toarray() if sps.issparse(x) else (x.to_numpy() if isinstance(x, splyce.SparseTensor) else x)


def test_transpose_shares_buffers_and_swaps_the_order(pair):
    A, T = pair
    t = T.T
    assert isinstance(t, splyce.SparseTensor) and t.shape == (40, 50) and t.format.order == (1, 0)
    assert t.values is T.values and t.crd[1] is T.crd[1] and t.sealed == T.sealed
    assert np.array_equal(t.to_numpy(), A.T.toarray())
    assert isinstance(t.to_scipy(), sps.csc_array) and t.transpose().format == T.format
    X = splyce.asarray(np.arange(24.0).reshape(2, 3, 4) % 5, format=splyce.csf(3))
    assert np.array_equal(X.T.to_numpy(), X.to_numpy().T)


def test_operators_are_the_dropins(pair):
    A, T = pair
    x, y = np.random.default_rng(1).random(40), np.random.default_rng(2).random(50)
    assert np.array_equal(T @ x, A @ x) and np.array_equal(y @ T, splyce.matmul(y, A))
    assert np.array_equal(_dense(T @ T.T), (A @ A.T).toarray())
    assert np.array_equal(_dense(T * T), A.multiply(A).toarray())
    assert np.array_equal(_dense(T + T), (A + A).toarray()) and _dense(T - T).sum() == 0
    assert np.array_equal(_dense(2 * T), 2 * A.toarray()) and isinstance(2 * T, splyce.SparseTensor)
    assert np.array_equal(_dense(T * x), A.multiply(x).toarray())
    assert np.array_equal(_dense(x * T), A.multiply(x).toarray())
    assert np.array_equal(_dense(-T), -A.toarray()) and np.array_equal(_dense(T / 4), A.toarray() / 4)
    with pytest.raises(NotImplementedError):
        T + 1.0                          # scipy's rule: a nonzero scalar would make it dense


def test_no_silent_densify(pair):
    A, T = pair
    with pytest.raises(TypeError):
        np.multiply(T, 2.0)              # NumPy defers to the operators instead of calling __array__
    big = splyce.asarray(sps.csr_array((np.ones(3), np.array([0, 5, 9]), np.r_[0, 3, np.full(10**6 - 1, 3)]),
                                       shape=(10**6, 10**6)))
    x = np.ones(10**6)
    assert (big @ x)[0] == 3.0 and (x @ big)[9] == 1.0    # dense would be 8 TB


def test_sum(pair):
    A, T = pair
    assert T.sum() == A.sum() and T.sum().dtype == A.sum().dtype
    np.testing.assert_allclose(T.sum(axis=0), A.sum(axis=0))
    np.testing.assert_allclose(T.sum(axis=-1), A.sum(axis=1))
    np.testing.assert_allclose(T.sum(axis=(0, 1)), A.sum())
    with pytest.raises(np.exceptions.AxisError):
        T.sum(axis=2)
    with pytest.raises(TypeError, match="axis must be"):
        T.sum(axis="x")
    with pytest.raises(TypeError, match="only division by a scalar"):
        T / np.ones(40)


def test_operators_inside_jit_trace(pair):
    A, T = pair
    f = splyce.jit(lambda a: (a.T @ a) * 2)
    assert np.allclose(_dense(f(T)), 2 * (A.T @ A).toarray())


def test_notebook_repr(pair):
    A, T = pair
    html = T._repr_html_()
    assert "50 x 40" in html and f"{A.nnz:,}" in html and "compressed" in html and "&gt;" in html
    assert splyce.asarray(np.zeros((0, 3)))._repr_html_().count("<tr>") == 7
