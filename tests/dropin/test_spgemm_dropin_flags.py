"""The drop-in's SpGEMM (``splyce.matmul`` on scipy CSR operands, scipy's rule: zero sums dropped, rows in any
order) takes the jit's per-call rule (native/spgemm.py, ``unordered_kernel``): the sorted flags kernel, zero
sums dropped (spgemm_sorted's ``_DROP``), where a sample of the rows says each entry gets many terms. On
matrices built to fall on the flags side: the kernel taken, scipy's values bit for bit (cancelling terms,
-0.0 terms, NaN / Inf) and the unsorted kernel's, sorted rows that scipy's flags tell."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import products
from splyce.native import spgemm

from test_spgemm_unordered_rule import CASES, _choice, _random


def _rows_sorted(x):
    """``x`` as a CSR with each row's columns ascending (a copy: the result's own flags untouched)."""
    y = sps.csr_array((x.data.copy(), x.indices.copy(), x.indptr.copy()), shape=x.shape)
    y.has_sorted_indices = False
    y.sort_indices()
    return y


def _bits_equal(x, y):
    x, y = _rows_sorted(x), _rows_sorted(y)
    assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
    assert np.array_equal(x.data.view(np.uint64), y.data.view(np.uint64))


def _cancelling(seed, special):
    """The "many-terms" structure with values in {1, -1, 2, -2, 0, -0.0}: many sums cancel to exactly zero (of
    either sign), some entries' terms all -0.0 or 0; ``special``: a few NaN / Inf values as well."""
    x = _random(400, 400, 40, seed)
    rng = np.random.default_rng(seed)
    x.data[:] = rng.choice([1.0, -1.0, 2.0, -2.0, 0.0, -0.0], size=x.nnz)
    if special:
        x.data[rng.choice(x.nnz, 6, replace=False)] = [np.inf, -np.inf, np.nan, np.inf, -np.inf, np.nan]
    return x


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_flags_side_is_scipys_product_bit_for_bit(special, threads):
    x, y = _cancelling(1, special), _cancelling(2, special)
    assert _choice(x, y)[0] == "flags"
    want = x @ y
    got = splyce.matmul(x, y, threads=threads)
    assert products.last_spgemm_kernel == "flags"
    assert isinstance(got, sps.csr_array) and got.has_sorted_indices
    assert np.array_equal(got.indices, _rows_sorted(got).indices)
    _bits_equal(got, want)                    # zero sums (+0.0 and -0.0) dropped as scipy drops them; NaN kept
    assert np.count_nonzero(got.data == 0) == 0 and (np.isnan(got.data).any() == special)
    zeros = (abs(x) @ abs(y)).nnz - want.nnz  # reached positions whose sums cancelled: the case is real
    assert zeros > 100
    # the unsorted kernel's arrays (the drop-in's until now), entry for entry
    parts = [(t.data, t.indices, t.indptr) for t in (x, y)]
    old = spgemm.spgemm(parts[0], parts[1], 400, np.float64, threads)
    assert old.kernel != "flags" and not old.sorted
    _bits_equal(got, sps.csr_array((old.data, old.indices, old.indptr), shape=want.shape))


def test_a_single_minus_zero_term_and_exact_cancellation_are_dropped():
    """Row 0: every term -0.0 (scipy: 0 + -0.0 = +0.0, not stored); row 1: a row of A minus itself (x's row 1
    repeated with the opposite sign through two copies of B's rows): every sum cancels exactly."""
    x, y = _random(400, 400, 40, 3), _random(400, 400, 40, 4)
    y.data[:] = np.floor(np.abs(y.data) * 4) + 1.0         # small integers: the sums below are exact
    x.data[:40] = -0.0
    x.data[40:80] = np.round(x.data[40:80] * 4) + 0.5
    got = splyce.matmul(x, y)
    assert products.last_spgemm_kernel == "flags"
    assert got.indptr[1] == 0 and got.indptr[2] > got.indptr[1]
    _bits_equal(got, x @ y)
    stacked = sps.csr_array(sps.vstack([y, y]))            # [x_1, -x_1] @ [y; y] = 0 in row 1 of the product
    w = sps.csr_array(sps.hstack([x, x]))
    w.data[w.indptr[1]: w.indptr[2]][40:] *= -1
    got = splyce.matmul(w, stacked)
    assert products.last_spgemm_kernel == "flags"
    assert got.indptr[2] == got.indptr[1]
    _bits_equal(got, w @ stacked)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_other_dtypes(dtype):
    x, y = _cancelling(5, False), _cancelling(6, False)
    x, y = x.astype(dtype), y.astype(dtype)
    got = splyce.matmul(x, y)
    assert products.last_spgemm_kernel == "flags" and got.dtype == dtype
    want = _rows_sorted(x @ y)
    want.eliminate_zeros()
    got = _rows_sorted(got)
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)


@pytest.mark.parametrize("case", ["one-term", "runs", "short-rows"])
def test_other_side_keeps_the_unsorted_kernel(case):
    x, y = CASES[case][0]()
    got = splyce.matmul(x, y)
    assert products.last_spgemm_kernel in ("sparse", "dense")
    assert not got.has_sorted_indices         # as scipy's own product says
    _bits_equal(got, x @ y)
