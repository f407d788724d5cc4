"""The native single-pass validation agrees with the NumPy checks: same verdict on good and bad buffers."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import splyce
from splyce.tensors.formats import CSR, Format
from splyce.native import validation as native_validation
from splyce.tensors.validation import check_buffers


def _numpy_ok(shape, fmt, pos, crd, values) -> bool:
    from unittest import mock

    from splyce.tensors import validation

    with mock.patch.object(validation, "_native_ok", return_value=False):
        try:
            check_buffers(shape, fmt, pos, crd, values)
            return True
        except (ValueError, TypeError):
            return False


@settings(max_examples=300, deadline=None)
@given(data=st.data(), width=st.sampled_from([32, 64]), unique=st.booleans(), ordered=st.booleans())
def test_native_scan_and_numpy_checks_agree(data, width, unique, ordered):
    rows = data.draw(st.integers(0, 5))
    cols = data.draw(st.integers(0, 6))
    counts = data.draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows))
    pos = np.zeros(rows + 1, dtype=f"int{width}")
    pos[1:] = np.cumsum(counts)
    crd = np.array(data.draw(st.lists(st.integers(-1, cols), min_size=int(pos[-1]), max_size=int(pos[-1]))),
                   dtype=f"int{width}")
    if data.draw(st.booleans()) and rows:   # sometimes corrupt the positions
        pos[data.draw(st.integers(0, rows))] += data.draw(st.sampled_from([-1, 1]))
    fmt = Format(("dense", splyce.Level("compressed", unique=unique, ordered=ordered)), None, width, width)
    values = np.ones(len(crd))
    args = ((rows, cols), fmt, (None, pos), (None, crd), values)
    native, reference = native_validation.buffers_ok(*args), _numpy_ok(*args)
    assert reference or not native          # never accepts what the NumPy checks reject
    if not (unique and not ordered):        # the formats the scan covers: the same verdict
        assert native == reference


def test_messages_still_name_the_defect_with_the_fast_path_on():
    t = splyce.asarray(np.eye(4), format=CSR, copy=True)
    crd = t.crd[1].copy()
    crd[2] = 7
    with pytest.raises(ValueError, match=r"level 1 \(compressed\): coordinate 7 out of range \[0, 4\) at position 2"):
        check_buffers(t.shape, t.format, t.pos, (None, crd), t.values, "tensor")


def test_large_canonical_csr_is_checked_by_the_native_scan():
    import scipy.sparse as sps

    big = sps.random_array((2000, 2000), density=0.05, format="csr", random_state=0)
    t = splyce.asarray(big)
    assert native_validation.buffers_ok(t.shape, t.format, t.pos, t.crd, t.values)


def _canonical_reference(indptr, indices, n_cols) -> bool:
    if indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0):
        return False
    if len(indices) and (indices.min() < 0 or indices.max() >= n_cols):
        return False
    row_start = np.zeros(len(indices), bool)
    row_start[indptr[:-1][indptr[:-1] < len(indices)]] = True
    steps = np.flatnonzero(np.diff(indices) <= 0) + 1
    return not np.any(~row_start[steps])


@pytest.mark.parametrize("bits", [32, 64])
def test_canonical_csr_across_its_row_blocks(bits):
    """``canonical_csr`` scans rows in blocks (2048 rows): a defect on either side of a block boundary, in
    the first or last row of a block, in an empty-row run across a boundary, is found; the matrix without it
    passes. Checked against a NumPy reference."""
    rng = np.random.default_rng(bits)
    m, n = 5000, 300
    counts = rng.integers(0, 6, m)
    counts[2040:2060] = 0                      # empty rows across the first boundary
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(f"int{bits}")
    indices = np.concatenate([np.sort(rng.choice(n, c, replace=False)) for c in counts]).astype(f"int{bits}")
    assert native_validation.canonical_csr(indptr, indices, n) and _canonical_reference(indptr, indices, n)
    for row in (0, 1, 2047, 2048, 2049, 2061, 4095, 4096, m - 1):
        lo, hi = int(indptr[row]), int(indptr[row + 1])
        if hi - lo < 2:
            continue
        for k, value in ((lo + 1, indices[lo]), (hi - 1, indices[hi - 2]), (lo, n), (hi - 1, -1)):
            bad = indices.copy()
            bad[k] = value                     # a repeat, a step down, or out of range
            assert native_validation.canonical_csr(indptr, bad, n) == _canonical_reference(indptr, bad, n) \
                == False, (row, k, value)
    # a row start below the row before it is allowed: the first row of each block starts at column 0
    starts = indices.copy()
    for row in (2048, 4096):
        starts[indptr[row]:indptr[row + 1]] = np.arange(indptr[row + 1] - indptr[row])
    assert native_validation.canonical_csr(indptr, starts, n) and _canonical_reference(indptr, starts, n)


@pytest.mark.parametrize("bits", [32, 64])
def test_canonical_csr_on_many_short_and_empty_rows(bits):
    """Short and empty rows, row starts below, equal to and above the entry before them, and a repeat or step
    down anywhere give the NumPy reference's verdict, also split over threads; the buffers are left as they
    were."""
    rng = np.random.default_rng(60 + bits)
    for trial in range(300):
        m, n = int(rng.integers(1, 90)), int(rng.integers(1, 12))
        counts = np.minimum(rng.integers(0, 4, m), n)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(f"int{bits}")
        indices = np.concatenate([np.sort(rng.choice(n, c, replace=False)) for c in counts] + [[]])
        indices = indices.astype(f"int{bits}")
        if trial % 2 and len(indices) > 1:
            k = int(rng.integers(1, len(indices)))
            indices[k] = indices[k - 1] - int(rng.integers(0, 2))    # a repeat or a step down: a defect unless
        before = (indptr.copy(), indices.copy())                     # it falls on a row start
        want = _canonical_reference(indptr, indices, n)
        assert native_validation.canonical_csr(indptr, indices, n) == want, trial
        assert native_validation.canonical_csr_threaded(indptr, indices, n, 2) == want, trial
        assert np.array_equal(before[0], indptr) and np.array_equal(before[1], indices)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_native_dense_to_csr_matches_numpy(dtype, index_dtype):
    from splyce.native.compress import dense_to_csr

    rng = np.random.default_rng(1)
    block = rng.random((37, 53)).astype(dtype)
    block[block < 0.6] = 0
    block[0, :5] = [np.nan, -0.0, 0.0, np.inf, -np.inf]
    block[3] = 0                                     # an empty row
    data, indices, indptr = dense_to_csr(block, index_dtype)
    mask = block != 0
    assert indices.dtype == indptr.dtype == np.dtype(index_dtype) and data.dtype == dtype
    np.testing.assert_array_equal(indptr, np.concatenate([[0], np.cumsum(mask.sum(axis=1))]))
    np.testing.assert_array_equal(indices, np.nonzero(mask)[1])
    np.testing.assert_array_equal(data, block[mask])
    empty = dense_to_csr(np.zeros((0, 4), dtype=dtype))
    assert [len(x) for x in empty] == [0, 0, 1]
