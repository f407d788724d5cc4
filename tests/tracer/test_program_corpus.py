"""The algorithm bodies of tests/tracer/program_corpus.py (written the natural scipy / NumPy way before they were run
under jit) on every operand kind, jitted against the same function without jit: the same values, the same
class families, and an error under jit only where the eager function raises too."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

from program_corpus import PROGRAMS

KINDS = ["csr_matrix", "csr_array", "csc_array", "coo_array", "SparseTensor"]
QUICK = ["tfidf", "gcn_normalize", "pagerank", "conjugate_gradient", "logistic_gradient", "covariance",
         "triangle_count", "item_item_similarity", "label_propagation", "chi2_scores"]


def _matrix(seed: int = 0, n: int = 40):
    rng = np.random.default_rng(seed)
    a = sps.random(n, n, density=0.12, format="csr", random_state=seed, data_rvs=lambda k: rng.random(k) + 0.1)
    a = a.tolil()
    a[3, :] = 0          # an empty row and column, as real data has
    a[:, 5] = 0
    return sps.csr_matrix(a)


def as_kind(a: sps.csr_matrix, kind: str):
    if kind == "SparseTensor":
        return splyce.asarray(sps.csr_array(a))
    fmt, _, cls = kind.partition("_")
    return getattr(sps, f"{fmt}_{cls}")(a)


def _eager_operand(x):
    """SparseTensor follows scipy's sparray rules: the eager reference runs on its csr_array."""
    return x.to_scipy() if isinstance(x, splyce.SparseTensor) else x


def _family(r) -> str:
    if isinstance(r, sps.spmatrix):
        return "sparse matrix"
    if isinstance(r, (sps.sparray, splyce.SparseTensor)):
        return "sparse array"
    if isinstance(r, np.matrix):
        return "np.matrix"
    if isinstance(r, np.ndarray) and r.ndim:
        return "ndarray"
    if isinstance(r, (tuple, list)):
        return type(r).__name__
    return "scalar"


def _dense(r):
    return r.toarray() if sps.issparse(r) else r.to_numpy() if isinstance(r, splyce.SparseTensor) else np.asarray(r)


def assert_same(got, want, where: str):
    assert _family(got) == _family(want), f"{where}: jit gives {type(got).__name__}, eager {type(want).__name__}"
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), where
        for g, w in zip(got, want):
            assert_same(g, w, where)
        return
    assert np.shape(got) == np.shape(want), f"{where}: shape {np.shape(got)} vs {np.shape(want)}"
    np.testing.assert_allclose(_dense(got), _dense(want), rtol=1e-9, atol=1e-12, err_msg=where)


# bodies that write into an array in place (``d[d == 0] = 1``, ``a.data = ...``): refused inside jit, as JAX refuses
# them (traced values are immutable), with the rewrite named in the message
REFUSED = {"cosine_similarity": "np.where(mask, v, y)", "row_l1_normalize": "np.where(mask, v, y)",
           "item_item_similarity": "np.where(mask, v, y)", "gcn_normalize": "np.where(mask, v, y)",
           "sgc_features": "np.where(mask, v, y)", "pagerank": "np.where(mask, v, y)",
           "personalized_pagerank": "np.where(mask, v, y)", "observed_entries_loss": ".data array",
           # the structure of a traced value and a Python float of one: refused, each naming what to write
           "sparsity_profile": ".indptr array", "user_mean_centering": ".indptr array",
           "heat_explicit": "no value at trace time"}


def _eager_refuses(kind: str, fun, args) -> Exception | None:
    try:
        fun(*(_eager_operand(a) for a in args))
    except Exception as e:   # noqa: BLE001 - scipy's own refusal (a csr_array has no getnnz)
        return e
    return None


def run(name: str, kind: str, programs: dict = PROGRAMS, refused: dict = REFUSED):
    fun, make = programs[name]
    args = make(as_kind(_matrix(), kind), np.random.default_rng(1))
    eager_error = _eager_refuses(kind, fun, args)
    if isinstance(eager_error, AttributeError):   # a method the class lacks (an sparray's getnnz): the jit may
        return                                    # serve it, since its result is defined by the matrix's
    if eager_error is not None:         # what scipy refuses, the jit refuses too
        with pytest.raises(Exception):
            splyce.jit(fun)(*args)
        return
    if name in refused:
        with pytest.raises((splyce.TraceError, TypeError), match=re.escape(refused[name])):
            splyce.jit(fun)(*args)
        return
    want = fun(*(_eager_operand(a) for a in args))
    got = splyce.jit(fun)(*args)
    assert_same(got, want, f"{name} on {kind}")


@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array", "SparseTensor"])
@pytest.mark.parametrize("name", QUICK)
def test_corpus_quick(name, kind):
    run(name, kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_every_kind(name, kind):
    run(name, kind)
