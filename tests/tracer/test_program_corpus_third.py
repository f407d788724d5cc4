"""The algorithm bodies of tests/tracer/program_corpus_third.py (written the natural scipy / NumPy way before they were
run under jit) on every operand kind, scipy's matrix and array classes, pydata's COO and GCXS and SparseTensor,
jitted against the same function without jit: the same values and class families, an error under jit only
where the eager function raises too (pydata has no ``multiply`` / ``toarray`` / ``tocsr``: those bodies raise
eagerly on pydata operands and must raise under jit as well, or give scipy's answer where the jit serves a
wider surface), and the refusals below naming the construct and what to write instead."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sps
import sparse as pydata

import splyce

from program_corpus_third import PROGRAMS
from test_program_corpus import _matrix

KINDS = ["csr_matrix", "csr_array", "csc_matrix", "csc_array", "coo_array", "SparseTensor", "pydata.COO",
         "pydata.GCXS"]
# refused inside jit, each message naming the construct and the alternative (first run, 2026-12-07): in-place
# writes and the stored structure of a traced value (traced values are immutable, as in JAX); Python's min() of
# traced values and a NumPy constant indexed by a traced array (JAX refuses both too). sor_sweeps (scipy.sparse
# tril / triu / spsolve_triangular) was refused until 2026-12-08: now host steps (tracer/scipy_host.py)
REFUSED = {"tfidf_cosine_knn": "np.where(mask, v, y)", "item_cf_predict": "np.where(np.eye(n, dtype=bool), v, a)",
           "adjusted_cosine_items": ".indptr array", "conductance": "np.minimum(a, b)",
           "modularity": "np.take(c, idx, axis=0)"}
QUICK = {"kaplan_meier": "csr_array", "slope_one_deviations": "csr_matrix", "markov_stationary": "pydata.COO",
         "sor_sweeps": "csr_matrix", "modularity": "pydata.GCXS"}


def as_kind(a: sps.csr_matrix, kind: str):
    if kind == "SparseTensor":
        return splyce.asarray(sps.csr_array(a))
    if kind.startswith("pydata."):
        coo = pydata.COO.from_scipy_sparse(a)
        return coo if kind == "pydata.COO" else pydata.GCXS(coo)
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
    if isinstance(r, pydata.SparseArray):
        return "pydata " + type(r).__name__
    if isinstance(r, np.matrix):
        return "np.matrix"
    if isinstance(r, np.ndarray) and r.ndim:
        return "ndarray"
    if isinstance(r, (tuple, list)):
        return type(r).__name__
    return "scalar"


def _dense(r):
    if sps.issparse(r):
        return r.toarray()
    if isinstance(r, splyce.SparseTensor):
        return r.to_numpy()
    if isinstance(r, pydata.SparseArray):
        return r.todense()
    return np.asarray(r)


def assert_same(got, want, where: str):
    assert _family(got) == _family(want), f"{where}: jit gives {type(got).__name__}, eager {type(want).__name__}"
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), where
        for g, w in zip(got, want):
            assert_same(g, w, where)
        return
    assert np.shape(got) == np.shape(want), f"{where}: shape {np.shape(got)} vs {np.shape(want)}"
    np.testing.assert_allclose(_dense(got), _dense(want), rtol=1e-9, atol=1e-12, err_msg=where)


def _as_scipy(x):
    return sps.csr_array(x.to_scipy_sparse()) if isinstance(x, pydata.SparseArray) else x


def run(name: str, kind: str):
    fun, make = PROGRAMS[name]
    args = make(as_kind(_matrix(), kind), np.random.default_rng(1))
    if name in REFUSED:
        with pytest.raises((splyce.TraceError, TypeError), match=re.escape(REFUSED[name])):
            splyce.jit(fun)(*args)
        return
    try:
        want = fun(*(_eager_operand(a) for a in args))
    except (AttributeError, RuntimeError) as e:
        if kind.startswith("pydata"):
            # pydata lacks scipy's methods (toarray, multiply) and refuses np.asarray of its reductions
            # ("Cannot convert a sparse array to dense automatically"): under jit a scipy idiom is served on any
            # sparse value, a wider surface, never another answer: the values of the same code on the
            # csr_array of the same entries
            want = fun(*(_as_scipy(a) for a in args))
            got = splyce.jit(fun)(*args)
            for g, w in zip(got if isinstance(want, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                np.testing.assert_allclose(_dense(g), _dense(w), rtol=1e-9, atol=1e-12, err_msg=f"{name} on {kind}")
            return
        if isinstance(e, AttributeError):   # a method the class lacks (an sparray's getnnz): the jit may serve
            return                          # it, its result defined by the matrix's entries
        raise
    except Exception:   # noqa: BLE001 - whatever the eager code raises, the jit raises too
        with pytest.raises(Exception):
            splyce.jit(fun)(*args)
        return
    got = splyce.jit(fun)(*args)
    assert_same(got, want, f"{name} on {kind}")


@pytest.mark.parametrize("name, kind", sorted(QUICK.items()))
def test_third_corpus_quick(name, kind):
    run(name, kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_third_corpus_every_kind(name, kind):
    run(name, kind)
