"""``diagonal(k)`` and ``trace(offset)`` under jit, of sparse and dense matrices of every shape, against scipy's
and NumPy's own (every offset, past the corners included)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

SHAPES = [(5, 5), (4, 7), (7, 4), (1, 6), (6, 1)]


def _matrix(shape, cls, seed=0):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.5, rng.standard_normal(shape), 0.0)
    return dense if cls is np.ndarray else cls(dense)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cls", [sps.csr_array, sps.csc_matrix, np.ndarray])
def test_every_diagonal_and_trace_matches(shape, cls):
    _check(shape, cls, range(-shape[0] - 1, shape[1] + 2))


@pytest.mark.parametrize("cls", [sps.csr_array, sps.csc_matrix, np.ndarray])
def test_some_diagonals_and_traces_match(cls):
    _check((4, 7), cls, (-4, -2, 0, 3, 7))


def _check(shape, cls, offsets):
    a = _matrix(shape, cls)
    m, n = shape
    diag = splyce.jit(lambda a, k: a.diagonal(k), static_argnums=1)
    tr = splyce.jit(lambda a, k: a.trace(k), static_argnums=1)
    np_tr = splyce.jit(lambda a, k: np.trace(a, offset=k), static_argnums=1)
    for k in offsets:
        if k <= -m or k >= n:            # an empty diagonal: empty results are refused inside jit
            with pytest.raises(splyce.TraceError, match="past the corner"):
                diag(a, k)
            continue
        want = a.diagonal(k)
        got = diag(a, k)
        assert got.shape == want.shape, (k, got.shape, want.shape)
        assert np.allclose(got, want)
        assert np.isclose(tr(a, k), a.trace(k))
        assert np.isclose(np_tr(a, k), np.trace(np.asarray(a.toarray() if cls is not np.ndarray else a), k))


def test_an_offset_must_be_known_at_trace_time():
    a = _matrix((4, 4), sps.csr_array)
    with pytest.raises(splyce.TraceError, match="offset"):
        splyce.jit(lambda a, k: a.diagonal(k))(a, np.int64(1) + np.zeros(()))
