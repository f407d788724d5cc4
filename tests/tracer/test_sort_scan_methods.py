"""NumPy's ``argsort`` / ``cumsum`` / ``cumprod`` methods and ``take_along_axis`` on traced dense values (run
by NumPy between kernels, tracer/surface.py, tracer/linalg.py), and argsort results as index arrays read in
the kernel (a permutation: in range by construction, tracer/gather.py), against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


def _same(got, want):
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
        np.testing.assert_array_equal(g, w)


def survival(x, time, event):
    order = time.argsort()
    at_risk = len(time) - np.arange(len(time))
    risk = x @ np.ones(x.shape[1])
    return (1.0 - event[order] / at_risk).cumprod(), np.cumsum(event[np.argsort(-time)]), risk[order], \
        event.cumsum(dtype=np.float32)


def ranks(x):
    d = x.toarray()
    top = np.argsort(-d, axis=1)[:, :3]
    return d.argsort(axis=0).argsort(axis=0), d.cumsum(axis=1), d.cumprod(axis=0), np.take_along_axis(d, top, axis=1)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_methods_and_permutation_indices_match_numpy(seed):
    rng = np.random.default_rng(seed)
    x = sps.random_array((12, 5), density=0.4, format="csr", random_state=seed)
    time, event = rng.random(12), (rng.random(12) < 0.6).astype(float)
    _same(splyce.jit(survival)(x, time, event), survival(x, time, event))
    _same(splyce.jit(ranks)(x), ranks(x))


def test_refusals_name_what_to_write():
    with pytest.raises(splyce.TraceError, match=r"np.sort\(x, axis\)"):
        splyce.jit(lambda v: v.sort())(np.ones(4))
    with pytest.raises(splyce.TraceError, match="out="):
        splyce.jit(lambda v: v.cumsum(out=v))(np.ones(4))
    with pytest.raises(AttributeError, match="x.toarray"):
        splyce.jit(lambda a: a.argsort())(sps.random_array((4, 4), density=0.5, format="csr", random_state=0))
    with pytest.raises(splyce.TraceError, match="an argsort / argpartition along an axis of size 6"):
        splyce.jit(lambda t, e: e[np.argsort(t)])(np.ones(6), np.ones(4))
