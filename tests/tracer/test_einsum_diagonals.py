"""einsum with an index repeated within one operand (diagonals, traces) on sparse operands: NumPy's einsum
on the dense equivalents is the reference, for every family, dtype and spec; the result's class follows the
operands' family; inputs are never modified."""
import numpy as np
import pytest
import scipy.sparse as sps
import sparse

import splyce

SPECS_2D = ["ii->i", "ii->", "ii", "ii,i->i", "ii,ij->j", "ij,jj->ij", "ii,jj->ij", "ji,ii->j"]


def _dense(x):
    if isinstance(x, (np.ndarray, np.generic, int, float, complex, bool)):
        return np.asarray(x)
    return np.asarray(x.todense() if hasattr(x, "todense") else x.to_numpy())


def _operands(spec, a, x):
    lhs = spec.split("->")[0].split(",")
    return [x if len(s) == 1 else a for s in lhs]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("family", ["scipy-array", "scipy-matrix", "pydata", "splyce"])
def test_diagonal_specs_match_numpy(family, dtype):
    rng = np.random.default_rng(3)
    base = sps.random_array((9, 9), density=0.4, format="csr", rng=rng)
    base.setdiag(np.where(rng.random(9) < 0.7, rng.uniform(-2, 2, 9), 0))   # some diagonal entries stored as 0
    a = base.astype(dtype)
    a = {"scipy-array": a, "scipy-matrix": sps.csr_matrix(a), "pydata": sparse.COO.from_scipy_sparse(a),
         "splyce": splyce.asarray(a)}[family]
    x = rng.uniform(-1, 1, 9).astype(dtype)
    for spec in SPECS_2D:
        ops = _operands(spec, a, x)
        ref = np.einsum(spec, *[_dense(o) for o in ops])
        got = splyce.einsum(spec, *ops)
        if family == "pydata" and np.ndim(ref) == 1 and spec == "ii->i":
            assert isinstance(got, sparse.COO)                    # as sparse.einsum gives
        if family.startswith("scipy") and spec in ("ii->i", "ii,i->i"):
            assert type(got) is np.ndarray                        # scipy's A.diagonal() is dense
        out = _dense(got)
        assert out.dtype == ref.dtype, spec
        np.testing.assert_allclose(out, ref, rtol=1e-6 if dtype in (np.float32,) else 1e-12, err_msg=spec)


def test_scipy_diagonal_is_scipys_own_and_duplicates_are_summed_on_a_copy():
    row = np.array([0, 0, 1, 2, 2, 2])
    col = np.array([0, 0, 1, 2, 1, 2])
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    a = sps.coo_array((data, (row, col)), shape=(3, 3))        # duplicates at (0, 0) and (2, 2)
    before = (a.row.copy(), a.col.copy(), a.data.copy())
    assert splyce.einsum("ii->i", a).tolist() == [3.0, 3.0, 10.0]
    assert splyce.einsum("ii->", a) == 16.0
    sparse_out = splyce.einsum("ii->i", a, out_format="sparse")
    assert isinstance(sparse_out, splyce.SparseTensor) and sparse_out.to_numpy().tolist() == [3.0, 3.0, 10.0]
    for arr, old in zip((a.row, a.col, a.data), before):
        assert np.array_equal(arr, old)
    assert a.nnz == 6                                          # not summed in place


def test_higher_rank_diagonals_pydata_and_splyce():
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((5, 5, 4)) < 0.5, rng.uniform(-1, 1, (5, 5, 4)), 0)
    cube = np.where(rng.random((4, 4, 4)) < 0.6, rng.uniform(-1, 1, (4, 4, 4)), 0)
    for spec, d in (("iij->ij", dense), ("iji->ij", np.transpose(dense, (0, 2, 1)).copy()), ("iii->i", cube),
                    ("iii->", cube), ("iij->j", dense)):
        ref = np.einsum(spec, d)
        for x in (sparse.COO.from_numpy(d), splyce.asarray(sparse.COO.from_numpy(d))):
            got = splyce.einsum(spec, x)
            np.testing.assert_allclose(_dense(got), ref, rtol=1e-12, err_msg=spec)


def test_diagonal_of_an_nd_scipy_coo():
    rng = np.random.default_rng(6)
    d = np.where(rng.random((4, 4, 3)) < 0.5, rng.uniform(-1, 1, (4, 4, 3)), 0)
    a = sps.coo_array(d)
    np.testing.assert_allclose(splyce.einsum("iij->ij", a), np.einsum("iij->ij", d), rtol=1e-12)


def test_empty_and_all_zero_diagonals():
    a = sps.csr_array((4, 4))
    assert splyce.einsum("ii->i", a).tolist() == [0.0] * 4
    assert splyce.einsum("ii->", a) == 0.0
    e = sps.csr_array((0, 0))
    assert splyce.einsum("ii->i", e).shape == (0,)
    p = sparse.COO.from_numpy(np.zeros((3, 3)))
    assert _dense(splyce.einsum("ii->i", p)).tolist() == [0.0] * 3


def test_repeated_index_on_axes_of_different_lengths_is_a_clear_error():
    a = sps.random_array((4, 5), density=0.5, format="csr", rng=0)
    with pytest.raises(ValueError, match=r"index 'i' repeated in operand 0 \('ii'\).*4 != 5"):
        splyce.einsum("ii->i", a)
    with pytest.raises(ValueError, match=r"operand 1"):
        splyce.einsum("ij,jj->i", sps.random_array((3, 4), density=0.5, format="csr", rng=0), a)


def test_traced_repeated_index_still_says_unsupported():
    @splyce.jit
    def trace(a):
        return splyce.einsum("ii->i", a)

    with pytest.raises(Exception, match="repeated index"):
        trace(splyce.asarray(sps.random_array((4, 4), density=0.5, format="csr", rng=0)))
