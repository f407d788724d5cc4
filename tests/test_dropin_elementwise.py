"""Elementwise drop-ins on two sparse matrices (native row merge, and the same-positions pass) vs scipy."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.planner.dropin import Formulation, OperandInfo, choose_elementwise_formulation

OPS = {"multiply": lambda a, b: a.multiply(b), "add": lambda a, b: a + b, "subtract": lambda a, b: a - b}


def _same_as_scipy(ours, ref):
    ref = sps.csr_array(ref).copy()
    ref.sum_duplicates()
    ref.eliminate_zeros()
    assert isinstance(ours, sps.csr_array) and ours.has_canonical_format
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)
    assert np.array_equal(ours.data, ref.data, equal_nan=True)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (6, 9), (40, 30)])
def test_elementwise_matches_scipy(op, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    a = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    b = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    a.data, b.data = (a.data * 8 - 4).astype(dtype), (b.data * 8 - 4).astype(dtype)
    _same_as_scipy(getattr(splyce, op)(a, b), OPS[op](a, b))
    same = a.copy()
    same.data = (same.data * 3 - 1).astype(dtype)      # the same positions: the flat pass
    _same_as_scipy(getattr(splyce, op)(a, same), OPS[op](a, same))


@pytest.mark.parametrize("op", OPS)
def test_zero_results_dropped_and_nan_kept(op):
    a = sps.csr_array(np.array([[1.0, 2.0, 0.0], [np.nan, 0.0, 3.0]]))
    b = a.copy()
    b.data = np.array([1.0, -2.0, 1.0, -3.0])           # same positions; add / multiply cancel some
    _same_as_scipy(getattr(splyce, op)(a, b), OPS[op](a, b))
    c = sps.csr_array(np.array([[-1.0, 0.0, 5.0], [0.0, 0.0, -3.0]]))
    _same_as_scipy(getattr(splyce, op)(a, c), OPS[op](a, c))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10), st.integers(0, 10), st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(list(OPS)), st.sampled_from(["csr", "csc", "coo"]), st.sampled_from([1, 2]))
def test_elementwise_property(m, n, da, db, seed, op, fmt, threads):
    rng = np.random.default_rng(seed)
    a = sps.random_array((m, n), density=da, format=fmt, rng=rng)
    b = sps.random_array((m, n), density=db, format="csr", rng=rng)
    _same_as_scipy(getattr(splyce, op)(a, b, threads=threads), OPS[op](a, b))


def test_symmetric_pattern_times_transpose_and_matrix_types():
    a = sps.random_array((50, 50), density=0.1, format="csr", random_state=3)
    s = (a + a.T).tocsr()
    s.data = np.arange(1, s.nnz + 1, dtype=np.float64)
    _same_as_scipy(splyce.multiply(s, s.T.tocsr()), s.multiply(s.T))
    _same_as_scipy(splyce.add(s, s.T), s + s.T)                     # csc operand: converted
    m = sps.csr_matrix(s)
    assert isinstance(splyce.multiply(m, m), sps.csr_matrix)


def test_bad_second_operand_with_the_same_positions_array_is_still_caught():
    a = sps.csr_array(np.array([[1.0, 2.0], [0.0, 3.0]]))
    bad = sps.csr_array((np.ones(3), np.array([0, 1, 7], dtype=np.int32), a.indptr.copy()), shape=(2, 2))
    with pytest.raises(ValueError, match="out of range"):
        splyce.multiply(a, bad)
    unsorted = sps.csr_array((np.array([5.0, 7.0, 1.0]), np.array([1, 0, 1], dtype=np.int32), a.indptr.copy()),
                             shape=(2, 2))
    unsorted.has_sorted_indices = False
    ref = a.multiply(unsorted.toarray())
    _same_as_scipy(splyce.multiply(a, unsorted), ref)                 # canonicalized on a copy
    assert np.array_equal(unsorted.indices, [1, 0, 1])               # input not modified
    with pytest.raises(ValueError, match="out of range"):
        splyce.add(bad, a)


def test_elementwise_formulation_choice():
    s, d = OperandInfo("scipy-array", (4, 5)), OperandInfo("numpy", (4, 5))
    assert choose_elementwise_formulation(s, s) is Formulation.MERGE_ROWS
    assert choose_elementwise_formulation(s, d) is Formulation.COITERATE
    assert choose_elementwise_formulation(s, s, "dense") is Formulation.COITERATE
    assert choose_elementwise_formulation(d, d) is Formulation.NUMPY


def test_malformed_csc_operand_is_caught_before_scipy_converts_it():
    """Run in a child process: scipy's conversion would write out of bounds if the check were missing."""
    code = """
import numpy as np, scipy.sparse as sps, splyce
a = sps.csr_array(np.eye(3))
bad = sps.csc_array((np.ones(2), np.array([0, 10**6], dtype=np.int32), np.array([0, 1, 2, 2], dtype=np.int32)),
                    shape=(3, 3))
for call in (lambda: splyce.multiply(a, bad), lambda: splyce.add(a, bad), lambda: splyce.matmul(bad, np.ones(3))):
    try:
        call()
    except ValueError as e:
        assert "out of range" in str(e), e
    else:
        raise AssertionError("no error")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])
