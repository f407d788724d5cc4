import numpy as np
import pytest
import scipy.sparse as sps
import sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from splyce.tensors.formats import COO, CSC, CSR, DCSC, DCSR, SPARSE_VECTOR, Format, coo, csf, dense
from splyce.tensors.tensor import SparseTensor, asarray

DTYPES = [np.float64, np.float32, np.int64, np.int32]
PERMUTED_3D = Format(("dense", "compressed", "compressed"), order=(2, 0, 1))
FORMATS = [CSR, CSC, DCSR, DCSC, COO, csf(3), coo(3), dense(2), SPARSE_VECTOR, PERMUTED_3D,
           Format(("compressed", "dense")), csf(4)]


def random_array(rng, shape, density, dtype):
    values = rng.integers(1, 100, size=shape).astype(dtype)
    if density == 0:
        return np.zeros(shape, dtype)
    keep = rng.random(shape) < density
    return np.where(keep, values, 0).astype(dtype)


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def buffers(tensor):
    return [a for a in (*tensor.pos, *tensor.crd, tensor.values) if a is not None]


@settings(max_examples=150, deadline=None)
@given(fmt=st.sampled_from(FORMATS), dtype=st.sampled_from(DTYPES), width=st.sampled_from([32, 64]),
       dims=st.lists(st.integers(0, 6), min_size=4, max_size=4), density=st.sampled_from([0, 0.2, 1.0]),
       seed=st.integers(0, 2**16))
def test_roundtrip_numpy(fmt, dtype, width, dims, density, seed):
    fmt = fmt.with_widths(width, width)
    x = random_array(np.random.default_rng(seed), tuple(dims[: fmt.ndim]), density, dtype)
    t = asarray(x, fmt)
    assert t.format == fmt and t.shape == x.shape and t.dtype == dtype
    for p in t.pos:
        assert p is None or p.dtype == np.dtype(f"int{width}")
    for c in t.crd:
        assert c is None or c.dtype == np.dtype(f"int{width}")
    if fmt.levels[-1].kind != "dense":   # trailing dense levels store their zeros
        assert t.nnz == np.count_nonzero(x)
    same(t.to_numpy(), x)
    same(t.todense(), x)
    same(np.asarray(t), x)
    same(t.to_pydata().todense(), x)
    for other in (CSR, COO, csf(x.ndim), dense(x.ndim)):
        if other.ndim == x.ndim:
            same(asarray(t, other).to_numpy(), x)
    if x.ndim == 2:
        s = t.to_scipy()
        assert isinstance(s, sps.sparray)
        same(s.toarray(), x)
        same(asarray(s, fmt).to_numpy(), x)


@settings(max_examples=100, deadline=None)
@given(kind=st.sampled_from(["csr", "csc", "coo", "bsr", "dia", "lil", "dok"]), matrix=st.booleans(),
       dtype=st.sampled_from(DTYPES), index=st.sampled_from([np.int32, np.int64]),
       rows=st.integers(0, 7), cols=st.integers(0, 7), density=st.sampled_from([0, 0.3, 1.0]),
       seed=st.integers(0, 2**16))
def test_roundtrip_scipy(kind, matrix, dtype, index, rows, cols, density, seed):
    x = random_array(np.random.default_rng(seed), (rows, cols), density, dtype)
    s = (sps.csr_matrix(x) if matrix else sps.csr_array(x)).asformat(kind)
    if kind in ("csr", "csc", "coo"):
        s = s.copy()
        if kind == "coo":
            s.coords = tuple(c.astype(index) for c in s.coords)
        else:
            s.indptr, s.indices = s.indptr.astype(index), s.indices.astype(index)
    t = asarray(s)
    expected_fmt = {"csc": CSC, "coo": COO}.get(kind, CSR)
    assert t.format.with_widths(64, 64) == expected_fmt
    same(t.to_numpy(), x)
    back = t.to_scipy()
    assert back.format == {"csc": "csc", "coo": "coo"}.get(kind, "csr")
    same(back.toarray(), x)
    if kind in ("csr", "csc", "coo"):
        assert t.format.pos_width == np.dtype(index).itemsize * 8
        back_index = back.indices if kind != "coo" else back.coords[0]
        assert back_index.dtype == index


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls", [sps.csr_array, sps.csr_matrix, sps.csc_array, sps.csc_matrix])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_canonical_scipy_is_wrapped_without_copy(cls, dtype, index):
    s = cls(sps.random(30, 20, density=0.2, format="csr", random_state=1, dtype=dtype))
    s.indptr, s.indices = s.indptr.astype(index), s.indices.astype(index)
    t = asarray(s)
    assert np.shares_memory(t.pos[1], s.indptr)
    assert np.shares_memory(t.crd[1], s.indices)
    assert np.shares_memory(t.values, s.data)
    assert asarray(s, t.format, copy=False).values is s.data
    copied = asarray(s, copy=True)
    assert not any(np.shares_memory(a, b) for a in buffers(copied) for b in (s.indptr, s.indices, s.data))
    back = t.to_scipy()
    assert np.shares_memory(back.data, s.data) and np.shares_memory(back.indices, s.indices)
    assert back.indices.dtype == index


def test_explicit_zeros_are_kept():
    s = sps.csr_array((np.array([0.0, 2.0, 0.0]), np.array([0, 1, 2]), np.array([0, 2, 3])), shape=(2, 3))
    for fmt in (None, CSC, COO, DCSR):
        t = asarray(s, fmt)
        assert t.nnz == 3
        assert t.to_scipy().nnz == 3
    assert asarray(np.array([[0.0, 2.0]]), CSR).nnz == 1   # zeros of a dense input are not stored


def test_non_canonical_scipy_is_canonicalized_on_a_copy():
    indptr, indices = np.array([0, 3, 4], np.int32), np.array([2, 0, 2, 1], np.int32)
    data = np.array([1.0, 2.0, 3.0, 4.0])
    s = sps.csr_array((data, indices, indptr), shape=(2, 3))
    s.has_canonical_format = True     # lie: splyce must check, not trust the flag
    t = asarray(s)
    assert not np.shares_memory(t.values, data)
    assert t.format == CSR.with_widths(32, 32)
    np.testing.assert_array_equal(t.crd[1], [0, 2, 1])
    np.testing.assert_array_equal(t.values, [2.0, 4.0, 4.0])   # duplicates summed like scipy
    np.testing.assert_array_equal(s.indices, [2, 0, 2, 1])      # the caller's object is untouched
    with pytest.raises(ValueError, match="not canonical"):
        asarray(s, copy=False)


def test_copy_false_errors():
    x = np.eye(3)
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        asarray(x, CSR, copy=False)
    assert np.shares_memory(asarray(x, copy=False).values, x)   # dense by default: wrapped as it is
    with pytest.raises(ValueError, match="storing this array in .* needs a copy, but copy=False"):
        asarray(np.asfortranarray(np.ones((2, 3))), copy=False)
    s = sps.csr_array(x)
    with pytest.raises(ValueError, match="index widths to 64/64 needs a copy"):
        asarray(s, CSR, copy=False)
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        asarray(s, CSC, copy=False)
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        asarray([[1.0]], copy=False)


def test_dense_format_shares_numpy_memory():
    x = np.arange(12.0).reshape(3, 4)
    t = asarray(x, dense(2))
    assert np.shares_memory(t.values, x) and t.nnz == 12
    assert not np.shares_memory(asarray(x, dense(2), copy=True).values, x)
    same(asarray(x, Format(("dense", "dense"), order=(1, 0))).to_numpy(), x)
    with pytest.raises(ValueError, match="needs a copy"):
        asarray(x.T, dense(2), copy=False)


def test_width_change_of_canonical_scipy_casts():
    s = sps.random(10, 10, density=0.3, format="csr", random_state=0)
    t = asarray(s, CSR)
    assert t.pos[1].dtype == np.int64 and np.shares_memory(t.values, s.data)
    t32 = asarray(t, CSR.with_widths(32, 32))
    assert t32.crd[1].dtype == np.int32
    same(t32.to_numpy(), s.toarray())


def test_defaults_and_reformat():
    x = np.zeros((2, 3, 4))
    x[1, 2, 3] = 5
    assert asarray(x).format == dense(3)      # a NumPy array stays dense unless asked otherwise
    assert asarray(x[0, 0]).format == dense(1)
    assert asarray(x).nnz == x.size and np.array_equal(asarray(x).to_numpy(), x)
    assert asarray(sps.csr_array(x[0])).format.levels == CSR.levels
    assert asarray(sparse.COO.from_numpy(x[0, 0])).format == SPARSE_VECTOR
    t = asarray(x, csf(3))
    assert asarray(t) is t
    assert asarray(t, copy=True) is not t
    assert asarray(t, coo(3)).to_pydata().nnz == 1
    assert asarray(sparse.COO.from_numpy(x)).format == coo(3)
    assert asarray(sparse.COO.from_numpy(x[1])).format == COO
    g = sparse.GCXS.from_numpy(x[1], compressed_axes=(0,))
    assert asarray(g).format == CSR
    assert asarray(sparse.GCXS.from_numpy(x[1], compressed_axes=(1,))).format == CSC
    same(asarray(sparse.GCXS.from_numpy(x)).to_numpy(), x)
    assert asarray(sps.coo_array(x)).format == coo(3)
    same(asarray(sps.coo_array(x)).to_scipy().toarray(), x)


def test_repr_and_properties():
    t = asarray(sps.random(5, 4, density=0.5, format="csc", random_state=0))
    assert t.nnz == 10
    assert repr(t) == ("SparseTensor(shape=(5, 4), dtype=float64, nnz=10, format=(i, j) -> (j : dense, "
                       "i : compressed), posWidth = 32, crdWidth = 32)")
    assert t.ndim == 2 and t.lvl_shape == (4, 5)


@pytest.mark.parametrize("bad, exc, message", [
    (np.ones((2, 2), dtype=np.float16), TypeError, "unsupported dtype float16"),
    (sps.csr_array(np.eye(2, dtype=np.uint8)), TypeError, "unsupported dtype uint8"),
    (np.float64(3.0), ValueError, "at least one dimension"),
    (sparse.COO.from_numpy(np.eye(2), fill_value=1.0), ValueError, "fill_value 0"),
    (sparse.DOK.from_numpy(np.eye(2)), TypeError, "unsupported pydata-sparse type DOK"),
])
def test_bad_inputs(bad, exc, message):
    with pytest.raises(exc, match=message):
        asarray(bad, name="A")


def test_bad_format_arguments():
    with pytest.raises(TypeError, match="format must be a splyce Format"):
        asarray(np.eye(2), "csr")
    with pytest.raises(ValueError, match="has 3 levels but the input has 2 dimensions"):
        asarray(np.eye(2), csf(3))
    with pytest.raises(ValueError, match="has 3 levels but the input has 2 dimensions"):
        asarray(sps.csr_array(np.eye(2)), csf(3))


def test_malformed_scipy_raises():
    s = sps.csr_array((np.ones(2), np.array([0, 5]), np.array([0, 1, 2])), shape=(2, 3), copy=False)
    with pytest.raises(ValueError, match=r"A: level 1 \(compressed\): coordinate 5 out of range"):
        asarray(s, name="A")
    with pytest.raises(ValueError, match="coordinate 5 out of range"):
        asarray(s, DCSC, name="A")
    c = sps.coo_array((np.ones(1), (np.array([0]), np.array([0]))), shape=(2, 3))
    c.coords = (np.array([0]), np.array([7]))
    with pytest.raises(ValueError, match=r"coordinate 7 of dimension 1 out of range \[0, 3\) at entry 0"):
        asarray(c, name="A")


def snapshot(x):
    if isinstance(x, np.ndarray):
        return [x.copy()]
    if isinstance(x, sparse.SparseArray):
        return [a.copy() for a in (getattr(x, "coords", None), getattr(x, "indptr", None),
                                   getattr(x, "indices", None), x.data) if a is not None]
    if x.format == "dok":
        return [np.array(sorted(x.items()), dtype=object)]
    if x.format == "lil":
        return [np.array([list(r) for r in x.rows], dtype=object), np.array([list(d) for d in x.data], dtype=object)]
    parts = [x.data.copy()]
    for attr in ("indptr", "indices", "offsets"):
        if hasattr(x, attr):
            parts.append(np.array(getattr(x, attr)).copy())
    if x.format == "coo":
        parts += [c.copy() for c in x.coords]
    return parts


def non_canonical_inputs():
    rng = np.random.default_rng(3)
    x = random_array(rng, (6, 5), 0.4, np.float64)
    dup_csr = sps.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([3, 1, 3]), np.array([0, 3, 3])), shape=(2, 4))
    dup_coo = sps.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([1, 0, 1]), np.array([2, 2, 2]))), shape=(2, 4))
    unsorted_csc = sps.csc_array((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2, 2])), shape=(2, 2))
    unsorted_csc.has_sorted_indices = True
    return [x, x.T, sps.csr_array(x), sps.csc_matrix(x), sps.bsr_array(x), sps.dia_array(x), sps.lil_array(x),
            sps.dok_array(x), dup_csr, dup_coo, unsorted_csc, sparse.COO.from_numpy(x),
            sparse.GCXS.from_numpy(x), sparse.GCXS.from_numpy(x, compressed_axes=(1,))]


@pytest.mark.parametrize("x", non_canonical_inputs(), ids=lambda x: type(x).__name__)
@pytest.mark.parametrize("fmt", [None, CSR, CSC, COO, dense(2)], ids=str)
def test_inputs_are_not_modified(x, fmt):
    before = snapshot(x)
    flags = (x.has_canonical_format, x.has_sorted_indices) if hasattr(x, "has_sorted_indices") else None
    t = asarray(x, fmt)
    after = snapshot(x)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    if flags is not None:
        assert flags == (x.has_canonical_format, x.has_sorted_indices)
    dense_x = x if isinstance(x, np.ndarray) else x.todense()
    np.testing.assert_array_equal(t.to_numpy(), np.asarray(dense_x))


def test_from_buffers_and_copy():
    pos = (None, np.array([0, 1, 3]))
    crd = (None, np.array([2, 0, 1]))
    values = np.array([1.0, 2.0, 3.0])
    t = SparseTensor.from_buffers((2, 3), CSR, pos=pos, crd=crd, values=values)
    assert t.values is values and t.crd[1] is crd[1]
    same(t.to_numpy(), np.array([[0, 0, 1.0], [2, 3, 0]]))
    c = t.copy()
    assert not np.shares_memory(c.values, values)
    d = SparseTensor.from_buffers((2, 2), dense(2), values=np.arange(4.0))
    same(d.to_numpy(), np.arange(4.0).reshape(2, 2))
    assert d.to_scipy().nnz == 3


def test_nonunique_duplicates_sum_on_conversion():
    fmt = Format(("dense", "compressed(nonunique)"))
    t = SparseTensor.from_buffers((1, 3), fmt, pos=(None, np.array([0, 2])), crd=(None, np.array([1, 1])),
                                  values=np.array([1.0, 2.0]))
    same(t.to_numpy(), np.array([[0, 3.0, 0]]))
    assert asarray(t, CSR).nnz == 1
    assert t.to_pydata().sum() == 3.0


def test_scipy_one_dimensional_and_nd():
    v = sps.coo_array(np.array([0.0, 3.0, 0.0, 4.0]))
    t = asarray(v)
    assert t.format.with_widths(64, 64) == SPARSE_VECTOR
    same(t.to_numpy(), np.array([0.0, 3.0, 0.0, 4.0]))
    same(asarray(sps.csr_array(np.array([0.0, 3.0]))).to_numpy(), np.array([0.0, 3.0]))
    assert t.to_scipy().shape == (4,)


def test_dense_tensor_reformat_drops_zeros():
    d = asarray(np.array([[0.0, 1.0], [0.0, 0.0]]), dense(2))
    assert asarray(d, CSR).nnz == 1
    g = sparse.GCXS.from_numpy(np.ones((2, 2, 2)))
    assert asarray(g).format == csf(3)


def test_last_level_buffers_are_the_tensors_own():
    """The hot-path accessor hands out the stored buffers themselves (no copy), last level's crd and pos."""
    from splyce.tensors.tensor import last_level_buffers

    m = sps.random_array((7, 5), density=0.4, format="csr", random_state=3)
    t = asarray(m)
    values, crd, pos = last_level_buffers(t)
    assert values is t.values and crd is t.crd[1] and pos is t.pos[1]
    np.testing.assert_array_equal(crd, m.indices)
    np.testing.assert_array_equal(pos, m.indptr)
    v = asarray(np.array([0.0, 2.0, 0.0, 3.0]), SPARSE_VECTOR)
    values, crd, pos = last_level_buffers(v)
    assert values.tolist() == [2.0, 3.0] and crd.tolist() == [1, 3] and pos.tolist() == [0, 2]
    for bad in (m, np.ones(3), asarray(np.ones((2, 2)), dense(2))):
        with pytest.raises(TypeError, match="last_level_buffers"):
            last_level_buffers(bad)
