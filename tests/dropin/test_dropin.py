"""Drop-in products on concrete operands: same values, type family, shape and dtype as scipy / NumPy."""

import numpy as np
import pytest
import scipy.sparse as sps
import sparse

import splyce


def _arr(m, n, d, seed, fmt="csr", dtype=np.float64):
    return sps.random_array((m, n), density=d, format=fmt, random_state=seed, dtype=dtype)


def _dense(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "toarray"):
        return x.toarray()
    return x.todense()


@pytest.mark.parametrize("fa, fb", [("csr", "csc"), ("csr", "csr"), ("csc", "csc"), ("coo", "csr")])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matmul_sparse_sparse_matches_scipy(fa, fb, dtype):
    a, b = _arr(40, 30, 0.1, 1, fa, dtype), _arr(30, 25, 0.1, 2, fb, dtype)
    ref, out = a @ b, splyce.matmul(a, b)
    assert type(out) is type(ref) and out.shape == ref.shape and out.dtype == ref.dtype   # CSC for a CSC A
    np.testing.assert_allclose(_dense(out), _dense(ref), rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert out.indices.dtype == np.int32 and not np.any(out.data == 0)


def test_matmul_type_families():
    m = sps.random(20, 15, density=0.2, format="csr", random_state=1)
    n = sps.random(15, 10, density=0.2, format="csc", random_state=2)
    assert isinstance(splyce.matmul(m, n), sps.csr_matrix)
    p, q = sparse.random((20, 15), density=0.2, random_state=1), sparse.random((15, 10), density=0.2, random_state=2)
    out = splyce.matmul(p, q)
    assert isinstance(out, sparse.COO) and np.allclose(out.todense(), (p @ q).todense())
    d = np.random.default_rng(0).random((15, 4))
    res = splyce.matmul(m, d)
    assert isinstance(res, np.ndarray) and np.allclose(res, m @ d)
    res = splyce.matmul(np.random.default_rng(1).random((3, 20)), m)
    assert isinstance(res, np.ndarray) and np.allclose(res, np.random.default_rng(1).random((3, 20)) @ m.toarray())
    assert isinstance(splyce.matmul(d.T, d), np.ndarray)


def test_matmul_sparse_vector():
    a = _arr(50, 40, 0.2, 1)
    v = sps.random_array((40,), density=0.3, format="coo", random_state=2)
    ref, out = a @ v, splyce.matmul(a, v)
    assert isinstance(out, sps.coo_array) and out.shape == (50,)
    np.testing.assert_allclose(_dense(out), _dense(ref))
    x = np.random.default_rng(3).random(40)
    assert np.allclose(splyce.matmul(a, x), a @ x)
    # the scipy fast path (dense scatter + SpMV, result built directly): what coo_array(a @ x.toarray()) holds,
    # bit for bit, duplicates summed; bad coordinates raise instead of being written out of bounds
    dup = sps.coo_array((np.array([0.5, -0.0, 2.0, 1.0]), (np.array([3, 7, 3, 39]),)), shape=(40,))
    for vec in (v, dup, sps.coo_array((40,))):
        ours, ref = splyce.matmul(a, vec), sps.coo_array(a @ vec.toarray())
        assert type(ours) is sps.coo_array and vars(ours).keys() == vars(ref).keys()
        assert ours.coords[0].dtype == ref.coords[0].dtype and np.array_equal(ours.coords[0], ref.coords[0])
        assert ours.data.tobytes() == ref.data.tobytes()
    for bad in (np.array([3, 40]), np.array([-1, 3])):
        vec = sps.coo_array((np.ones(2), (np.array([0, 1]),)), shape=(40,))
        vec.coords = (bad,)
        with pytest.raises(ValueError, match="out of range"):
            splyce.matmul(a, vec)


def test_multiply_add_subtract_match_scipy():
    a, b = _arr(30, 40, 0.2, 1), _arr(30, 40, 0.2, 2)
    for ours, ref in ((splyce.multiply(a, b), a.multiply(b)), (splyce.add(a, b), a + b),
                      (splyce.subtract(a, b), a - b)):
        assert isinstance(ours, sps.csr_array) and abs(ours - ref).max() == 0
    dense = np.random.default_rng(0).random((30, 40))
    ours, ref = splyce.multiply(a, dense), a.multiply(dense)
    assert ours.format == ref.format == "coo" and np.allclose(_dense(ours), _dense(ref))
    assert isinstance(splyce.multiply(a.tocsc(), b), sps.csc_array)      # scipy's class for a CSC left operand
    assert np.array_equal(splyce.multiply(dense, dense), dense * dense)


def test_einsum_drop_in():
    t = sparse.random((5, 6, 40), density=0.2, random_state=1)
    c = _arr(40, 7, 0.3, 2, "csc")
    out = splyce.einsum("ijk,kl->ijl", t, c)
    assert isinstance(out, np.ndarray) and np.allclose(out, np.einsum("ijk,kl->ijl", t.todense(), c.toarray()))
    x = np.random.default_rng(0).random((6, 7))
    assert np.allclose(splyce.einsum("ij,jk", x, x.T), np.einsum("ij,jk", x, x.T))


def test_dropin_errors():
    a = _arr(5, 6, 0.5, 1)
    with pytest.raises(ValueError, match="not aligned"):
        splyce.matmul(a, a)
    with pytest.raises(ValueError, match=r"\(5, 6\) and \(6, 5\) cannot be broadcast"):
        splyce.multiply(a, _arr(6, 5, 0.5, 2))
    with pytest.raises(TypeError, match="dtype float16"):
        splyce.matmul(a, np.ones((6, 2), dtype=np.float16))
    bad = sps.csr_array((np.ones(2), np.array([0, 9]), np.array([0, 2, 2, 2, 2, 2])), shape=(5, 6))
    with pytest.raises(ValueError, match=r"^a: level 1 \(compressed\): coordinate 9 out of range \[0, 6\) at "
                                         r"position 1$"):
        splyce.matmul(bad, a.T)
    with pytest.raises(ValueError, match=r"^b: level 1 \(compressed\): coordinate 9 out of range \[0, 6\) at "
                                         r"position 1$"):
        splyce.multiply(a, bad)


def test_malformed_operand_that_needs_reordering_is_refused_before_scipy_converts_it():
    """The einsum drop-in re-stores a CSR operand as CSC with scipy's transpose, which writes out of bounds
    on an out-of-range column: it must be refused first (in a child process: a crash fails the test)."""
    import subprocess
    import sys

    script = (
        "import numpy as np, scipy.sparse as sps, splyce\n"
        "a = sps.random_array((5, 6), density=0.5, format='csr', rng=0)\n"
        "for cols in ([0, 9], [0, -1]):\n"
        "    bad = sps.csr_array((np.ones(2), cols, [0, 2, 2, 2, 2, 2]), shape=(5, 6))\n"
        "    try:\n"
        "        splyce.einsum('ij,kj->ik', a, bad)\n"
        "    except ValueError as exc:\n"
        "        print('refused:', exc)\n"
        "    else:\n"
        "        print('accepted')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines == ["refused: operand 1: level 1 (compressed): coordinate 9 out of range [0, 6) at position 1",
                     "refused: operand 1: level 1 (compressed): coordinate -1 out of range [0, 6) at position 1"]


def test_scipy_csr_wrapped_as_it_is_matches_asarray():
    """The drop-ins' short road for a canonical scipy CSR makes what ``asarray`` makes (same format, the same
    buffers, no copy); anything it does not take, or that fails its scan, goes to ``asarray``."""
    import scipy.sparse as sps

    from splyce.dropin import operands as dropin

    a = sps.random_array((30, 20), density=0.2, format="csr", rng=9)
    for x in (a, sps.csr_matrix(a)):
        for dtype in (np.int32, np.int64):
            y = x.copy()
            y.indices, y.indptr = y.indices.astype(dtype), y.indptr.astype(dtype)
            ours, ref = dropin._csr_as_it_is(y, splyce.CSR), splyce.asarray(y)
            assert ours.tensor.format == ref.format and ours.tensor.shape == ref.shape
            assert ours.tensor.crd[1] is y.indices and ours.tensor.pos[1] is y.indptr and ours.tensor.values is y.data
    unsorted = a.copy()
    r = next(r for r in range(30) if unsorted.indptr[r + 1] - unsorted.indptr[r] >= 2)
    i = unsorted.indptr[r]
    unsorted.indices[i], unsorted.indices[i + 1] = unsorted.indices[i + 1], unsorted.indices[i]
    unsorted.has_canonical_format = True                       # stale: the scan does not trust it
    assert dropin._csr_as_it_is(unsorted, splyce.CSR) is None
    assert dropin._csr_as_it_is(a.tocsc(), splyce.CSR) is None and dropin._csr_as_it_is(a, splyce.CSC) is None
    dense = a.toarray()
    np.testing.assert_allclose(splyce.einsum("ij,ij->i", unsorted, a), np.einsum("ij,ij->i", unsorted.toarray(), dense))
    bad = a.copy()
    bad.indices[0] = 20
    with pytest.raises(ValueError, match="out of range"):
        splyce.einsum("ij,ij->i", bad, a)
