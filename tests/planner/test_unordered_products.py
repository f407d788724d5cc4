"""A sparse x sparse product returned with its sparse format left to splyce is typed CSR with an unordered,
unique column level (planner/unordered.py, ``unordered_product_results``): results against scipy, the plan's
text, what stays sorted, and such a tensor taken everywhere a user takes one."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.errors import NotCanonicalError
from splyce.runtime.library import LibraryKernel
from splyce.tensors.formats import Format, Level

from test_one_engine import _flags_true, _same
from test_one_engine_products import _csr

UNORDERED = Format((Level("dense"), Level("compressed", ordered=False)), (0, 1), 32, 32)


def _sorted(x):
    x = x.copy()
    x.sort_indices()
    return x


@pytest.mark.parametrize("library", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_result_is_scipys_product_with_every_reached_position(library, seed):
    """Random CSR pairs with empty rows, explicit zeros, -0.0, NaN and +-Inf: the dense result is scipy's
    (NaN where NaN), the stored positions every one the product reaches, rows in any order, unique."""
    rng = np.random.default_rng(seed)
    a = _csr(rng, 60, 40, 0.08, empty_rows=0.2, long_rows=2)
    b = _csr(rng, 40, 50, 0.1, empty_rows=0.1)
    f = splyce.jit(lambda a, b: a @ b, out_format="sparse", library=library)
    got = f(splyce.asarray(a), splyce.asarray(b))
    assert isinstance(f.kernel_for(splyce.asarray(a), splyce.asarray(b))[0], LibraryKernel) == library
    assert isinstance(got, sps.csr_array)
    _flags_true(got)           # the MLIR kernel's rows (library=False) are sorted, the native ones here not
    assert got.has_sorted_indices != library
    with np.errstate(all="ignore"):
        want = (a @ b).toarray()
    np.testing.assert_array_equal(got.toarray(), want)       # NaN where NaN
    pattern = (sps.csr_array((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
               @ sps.csr_array((np.ones(b.nnz), b.indices, b.indptr), shape=b.shape))
    s = _sorted(got)
    assert np.array_equal(s.indptr, pattern.indptr) and np.array_equal(s.indices, _sorted(pattern).indices)
    for r in range(got.shape[0]):                       # unique per row
        row = got.indices[got.indptr[r]: got.indptr[r + 1]]
        assert len(np.unique(row)) == len(row)
    # sorted, the rows are the explicit CSR's bit for bit
    ordered = splyce.jit(lambda a, b: a @ b, out_format=splyce.CSR.with_widths(32, 32), library=library)
    sorted_result = ordered(splyce.asarray(a), splyce.asarray(b))
    assert sorted_result.has_sorted_indices
    _same(s, sorted_result)


def test_zero_sums_are_kept():
    a = sps.csr_array(np.array([[1.0, 1.0], [0.0, 2.0]]))
    b = sps.csr_array(np.array([[3.0, 1.0], [-3.0, 0.0]]))
    got = splyce.jit(lambda a, b: a @ b, out_format="sparse")(a, b)
    s = _sorted(got)
    assert s.nnz == 3 and s.indices.tolist() == [0, 1, 0] and s.data.tolist() == [0.0, 1.0, -6.0]
    assert not np.signbit(s.data[0])


def test_rows_come_in_order_of_first_appearance():
    """The library route writes each row as Gustavson's product meets its columns (what the drop-in and scipy
    return), not sorted."""
    a = sps.csr_array(np.array([[1.0, 1.0]]))
    b = sps.csr_array(np.array([[0.0, 0.0, 5.0], [1.0, 0.0, 2.0]]))
    got = splyce.jit(lambda a, b: a @ b, out_format="sparse")(a, b)
    assert got.indices.tolist() == [2, 0] and got.data.tolist() == [7.0, 1.0]
    assert got.indices.tolist() == splyce.matmul(a, b).indices.tolist()


def test_what_stays_ordered():
    """An explicit Format, an intermediate another op reads, a result also read by another result, a dense
    default and non-product results keep sorted (or dense) formats."""
    a = splyce.asarray(sps.random_array((30, 30), density=0.1, format="csr", rng=3))

    def result_format(f, *args):
        return f.lower(*args).as_text("plan")

    assert "nonordered" not in result_format(splyce.jit(lambda a: a @ a, out_format=splyce.CSR), a)
    assert "nonordered" not in result_format(splyce.jit(lambda a: a @ a, out_format="dense"), a)
    assert "nonordered" not in result_format(splyce.jit(lambda a: a * a, out_format="sparse"), a)
    assert "nonordered" not in result_format(splyce.jit(lambda a: a + a @ a, out_format="sparse"), a)
    chained = splyce.jit(lambda a: splyce.matmul(splyce.matmul(a, a, out_format="sparse"), a, out_format="sparse"))
    text = result_format(chained, a)              # fused into one contraction of three operands: not the rule's
    assert "fused" in text and "nonordered" not in text

    def both(a):
        c = splyce.matmul(a, a, out_format="sparse")
        return c, splyce.matmul(c, a, out_format="sparse")
    text = result_format(splyce.jit(both), a)
    assert text.count("compressed(nonordered)") == 1
    c, d = splyce.jit(both)(a)
    assert c.has_sorted_indices
    _flags_true(d)              # unordered, and the MLIR kernel's rows come sorted: scipy finds them so
    np.testing.assert_allclose(d.toarray(), (a.to_scipy() @ a.to_scipy() @ a.to_scipy()).toarray())


def _unordered_tensor():
    indptr = np.array([0, 3, 3, 5], np.int32)
    idx = np.array([2, 0, 1, 3, 1], np.int32)
    vals = np.array([1.0, 2.0, np.nan, 4.0, -0.0])
    return splyce.SparseTensor.from_buffers((3, 4), UNORDERED, [None, indptr], [None, idx], vals)


def test_unordered_tensor_round_trips():
    t = _unordered_tensor()
    dense = np.array([[2.0, np.nan, 1.0, 0.0], [0.0] * 4, [0.0, -0.0, 0.0, 4.0]])
    np.testing.assert_array_equal(t.to_numpy(), dense)
    assert "compressed(nonordered)" in repr(t)
    s = t.to_scipy()
    assert isinstance(s, sps.csr_array) and not s.has_sorted_indices and not s.has_canonical_format
    assert np.shares_memory(s.indices, t.crd[1]) and np.shares_memory(s.data, t.values)
    np.testing.assert_array_equal(s.toarray(), dense)
    back = pickle.loads(pickle.dumps(t))
    assert back.format == t.format and np.array_equal(back.crd[1], t.crd[1])
    c = splyce.asarray(t, splyce.CSR.with_widths(32, 32))
    assert c.crd[1].tolist() == [0, 1, 2, 1, 3] and c.format.levels[1].ordered
    np.testing.assert_array_equal(c.to_numpy(), dense)
    assert t.crd[1].tolist() == [2, 0, 1, 3, 1]            # the input is not modified


def test_unordered_tensor_into_the_jit_and_the_dropins():
    t = _unordered_tensor()
    ref = np.nan_to_num(t.to_numpy(), nan=7.0)
    t = t.with_values(np.nan_to_num(t.values, nan=7.0))
    x = np.arange(4.0)
    np.testing.assert_array_equal(splyce.jit(lambda a, x: a @ x)(t, x), ref @ x)
    np.testing.assert_array_equal(splyce.jit(lambda a, b: a @ b.T, out_format="sparse")(t, t).toarray(),
                                  ref @ ref.T)
    np.testing.assert_array_equal(splyce.matmul(t, t.T).toarray(), ref @ ref.T)
    np.testing.assert_array_equal((t @ x), ref @ x)
    np.testing.assert_array_equal((t * t).toarray(), ref * ref)
    np.testing.assert_array_equal((t + t).toarray(), ref + ref)
    assert t.sum() == ref.sum()
    # a jitted product's unordered result back into the jit and the drop-ins
    a = sps.random_array((20, 20), density=0.2, format="csr", rng=5)
    c = splyce.jit(lambda a, b: a @ b, out_format="sparse")(a, a)
    want = (a @ a).toarray()
    np.testing.assert_allclose(splyce.jit(lambda c, x: c @ x)(c, np.ones(20)), want @ np.ones(20))
    np.testing.assert_allclose(splyce.matmul(c, a).toarray(), want @ a.toarray())
    np.testing.assert_allclose((splyce.asarray(c) + splyce.asarray(c)).toarray(), 2 * want)


def test_validation_of_unordered_columns():
    """Unique columns in any order are well formed; a repeated column in a row is a clear error."""
    indptr = np.array([0, 3, 3, 5], np.int32)
    vals = np.ones(5)
    splyce.SparseTensor.from_buffers((3, 4), UNORDERED, [None, indptr], [None, np.array([3, 0, 1, 1, 0], np.int32)],
                                     vals)
    with pytest.raises(NotCanonicalError, match=r"level 1 \(compressed\(nonordered\)\): duplicate coordinate 2 "
                                                r"within segment 0 at position 2"):
        splyce.SparseTensor.from_buffers((3, 4), UNORDERED, [None, indptr],
                                         [None, np.array([2, 0, 2, 3, 1], np.int32)], vals)
    with pytest.raises(NotCanonicalError, match="duplicate coordinate 1 within segment 2"):
        splyce.SparseTensor.from_buffers((3, 4), UNORDERED, [None, indptr],
                                         [None, np.array([2, 0, 3, 1, 1], np.int32)], vals)
    # large enough for the native scan, which leaves this case to the NumPy check
    n = 1 << 10
    rows = np.repeat(np.arange(n), 300)
    cols = np.concatenate([np.random.default_rng(r).permutation(n)[:300] for r in range(n)]).astype(np.int32)
    indptr = np.arange(0, len(rows) + 1, 300, dtype=np.int32)
    U = Format((Level("dense"), Level("compressed", ordered=False)), (0, 1), 32, 32)
    splyce.SparseTensor.from_buffers((n, n), U, [None, indptr], [None, cols], np.ones(len(cols)))
    cols[700] = cols[701]
    with pytest.raises(NotCanonicalError, match="duplicate coordinate"):
        splyce.SparseTensor.from_buffers((n, n), U, [None, indptr], [None, cols], np.ones(len(cols)))
