"""Indexing inside @splyce.jit: integer-array gathers of dense values (``x[perm]``, ``X[idx]``, ``X[:, q]``,
``np.take``), row / column slices and gathers of CSR / CSC values that stay sparse, and the refusals (boolean
masks, item assignment, indices computed inside the function), against NumPy and scipy.sparse."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import assume, given, settings, strategies as st

import splyce
from splyce import TraceError
from splyce.planner.gathers import Gathered, host_gather
from splyce.tracer.ir import TensorType

RNG = np.random.default_rng(53)
X1 = RNG.standard_normal(7)
X2 = RNG.standard_normal((6, 5))
X3 = RNG.standard_normal((3, 4, 5))
A = sps.random_array((9, 7), density=0.35, format="csr", random_state=3, dtype=np.float64)
W = RNG.standard_normal(7)


def dense(v):
    return np.asarray(v.todense() if hasattr(v, "todense") else v)


def same(got, want):
    got, want = dense(got), dense(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# -- dense gathers ---------------------------------------------------------------------------------------

DENSE_CASES = {
    "x[perm]": (lambda x, i: x[i], X1, RNG.permutation(7)),
    "x[idx] negative, repeated": (lambda x, i: x[i], X1, np.array([-1, 3, 3, -7, 0])),
    "x[idx2d]": (lambda x, i: x[i], X1, np.array([[0, 6], [-2, 1], [4, 4]])),
    "X[idx] rows": (lambda x, i: x[i], X2, np.array([5, 0, -1, 2])),
    "X[idx, :]": (lambda x, i: x[i, :], X2, np.array([1, 1])),
    "X[:, q]": (lambda x, i: x[:, i], X2, np.array([4, 0, -2])),
    "X[..., q]": (lambda x, i: x[..., i], X2, np.array([3, 1])),
    "X[idx, 2]": (lambda x, i: x[i, 2], X2, np.array([0, 5, 3])),
    "X[1:5:2, q]": (lambda x, i: x[1:5:2, i], X2, np.array([2, -1])),
    "X[::-1, q]": (lambda x, i: x[::-1, i], X2, np.array([0, 2])),
    "X[None, idx]": (lambda x, i: x[None, i], X2, np.array([2, 3])),
    "X3[1, :, q] (advanced split)": (lambda x, i: x[1, :, i], X3, np.array([4, 0])),
    "X3[:, q, 2]": (lambda x, i: x[:, i, 2], X3, np.array([3, 1, 0])),
    "X3[q, 1:3]": (lambda x, i: x[i, 1:3], X3, np.array([2, 0])),
    "np.take 1-D": (lambda x, i: np.take(x, i), X1, np.array([6, -3])),
    "np.take axis=1": (lambda x, i: np.take(x, i, axis=1), X2, np.array([0, 4, 4])),
    "np.take axis=-2": (lambda x, i: np.take(x, i, axis=-2), X3, np.array([1])),
    "x[perm] * x + 1": (lambda x, i: x[i] * x + 1.0, X1, RNG.permutation(7)),
    "X[idx] @ w": (lambda x, i: x[i] @ np.arange(5.0), X2, np.array([3, 1])),
    "x[p][q] (a gather of a gather, a slice of the index)": (lambda x, i: x[i][i[:3]], X1, RNG.permutation(7)),
    "X[:, 1][idx] (a gather of a slice)": (lambda x, i: x[:, 1][i] + x[i, 1], X2, np.array([5, 0, 5])),
    "X[idx].sum(axis=0)": (lambda x, i: x[i].sum(axis=0), X2, np.array([0, 0, 4])),
}


@pytest.mark.parametrize("case", list(DENSE_CASES), ids=list(DENSE_CASES))
def test_dense_gather_matches_numpy(case):
    fun, x, index = DENSE_CASES[case]
    x_before, i_before = x.copy(), index.copy()
    got, want = splyce.jit(fun)(x, index), fun(x, index)
    if "@" in case:     # a product: the sums' order may differ from BLAS's
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    else:
        same(got, want)
    np.testing.assert_array_equal(x, x_before)          # inputs are never modified
    np.testing.assert_array_equal(index, i_before)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_index_dtypes(dtype):
    index = np.array([6, 0, -2], dtype=dtype)
    same(splyce.jit(lambda x, i: x[i])(X1, index), X1[index])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])
def test_index_dtypes_the_arguments_refuse(dtype):
    with pytest.raises(TypeError, match=f"argument 1: dtype {np.dtype(dtype)} is not supported"):
        splyce.jit(lambda x, i: x[i])(X1, np.array([6, 0, 2], dtype=dtype))


def test_literal_index_of_any_integer_dtype():
    same(splyce.jit(lambda x: x[np.array([6, 0, 2], dtype=np.uint8)])(X1), X1[[6, 0, 2]])


def test_constant_index_list_and_captured_array():
    same(splyce.jit(lambda x: x[[4, -1, 0]] * 2.0)(X1), X1[[4, -1, 0]] * 2.0)
    perm = np.array([2, 2, 0])

    @splyce.jit
    def f(x):
        return x[perm] + x[:3]

    same(f(X1), X1[perm] + X1[:3])


def test_argument_index_out_of_range_raises_numpys_error_every_call():
    f = splyce.jit(lambda x, i: x[i] * 2.0)
    same(f(X1, np.array([1, 2])), X1[[1, 2]] * 2.0)
    for bad, shown in ((np.array([7, 0]), 7), (np.array([0, -8]), -8)):
        with pytest.raises(IndexError, match=f"index {shown} is out of bounds for axis 0 with size 7"):
            f(X1, bad)
    g = splyce.jit(lambda x, i: x[:, i])
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 1 with size 5"):
        g(X2, np.array([0, 5]))
    assert f.cache_info().misses == 1                    # one kernel, the index checked on every call


def test_captured_index_is_checked_on_every_call():
    holder = {"i": np.array([0, 1])}

    def fun(x):
        return x[idx] + 1.0

    idx = holder["i"]
    f = splyce.jit(fun)
    same(f(X1), X1[[0, 1]] + 1.0)
    idx = np.array([1, 9])    # noqa: F841  the function reads the new value on the next call
    with pytest.raises(IndexError, match="index 9 is out of bounds for axis 0 with size 7"):
        f(X1)


def test_constant_index_out_of_range_and_integer_out_of_range():
    with pytest.raises(IndexError, match="index 9 is out of bounds for axis 0 with size 7"):
        splyce.jit(lambda x: x[[0, 9]])(X1)
    with pytest.raises(IndexError, match="index 6 is out of bounds for axis 1 with size 5"):
        splyce.jit(lambda x, i: x[i, 6])(X2, np.array([0]))


def test_empty_index_is_refused_clearly():
    with pytest.raises(TraceError, match=r"empty results \(shape \(0,\)\) are not supported"):
        splyce.jit(lambda x, i: x[i])(X1, np.array([], dtype=np.int64))


def test_index_errors_name_the_problem():
    with pytest.raises(TraceError, match="must be of integer type, got float64"):
        splyce.jit(lambda x, i: x[i])(X1, np.array([0.0, 1.0]))
    with pytest.raises(TraceError, match="one integer array per index"):
        splyce.jit(lambda x, i: x[i, i])(X2, np.array([0, 1]))
    with pytest.raises(TraceError, match="computed inside the jitted function"):
        splyce.jit(lambda x, i: x[i + 1])(X1, np.array([0, 1]))
    with pytest.raises(TraceError, match=r"reaches a dense value computed in the kernel"):
        splyce.jit(lambda a, i: (a * np.exp(a.todense()[:, 0])[:, None])[i])(A, np.array([0, 1]))
    with pytest.raises(TypeError, match="mode"):
        splyce.jit(lambda x, i: np.take(x, i, mode="clip"))(X1, np.array([0, 1]))


# gathers of dense values the kernel computes: read by tensor.extract in the kernel, the index checked before it
KERNEL_CASES = {
    "(a @ x)[perm]": (lambda a, x, i: (a @ x)[i], RNG.permutation(9)),
    "(a @ x)[idx] negative, repeated": (lambda a, x, i: (a @ x)[i] * 2.0 + 1.0, np.array([-1, 0, 0, 8, -9])),
    "(a @ x)[idx2d]": (lambda a, x, i: (a @ x)[i], np.array([[3, -2], [0, 5]])),
    "np.exp(a @ x)[idx] + x[idx]": (lambda a, x, i: np.exp(a @ x)[i] + x[i], np.array([6, 0, 2])),
    "(a @ X)[:, q]": (lambda a, x, i: (a @ np.outer(x, np.arange(3.0)))[:, i], np.array([2, -3, 2])),
    "(a @ X)[q, 1:]": (lambda a, x, i: (a @ np.outer(x, np.arange(3.0)))[i, 1:], np.array([8, 1])),
    "np.take(a @ x, idx)": (lambda a, x, i: np.take(a @ x, i), np.array([4, 4])),
    "(a @ x)[perm][:3] (a slice of a gather in the kernel)": (lambda a, x, i: (a @ x)[i][:3] * 2.0,
                                                               RNG.permutation(9)),
    "(a @ x)[perm][perm] (a gather of a gather in the kernel)": (lambda a, x, i: (a @ x)[i][i],
                                                                  RNG.permutation(9)),
    "(a @ x)[perm[2:5]] (a slice of the index argument)": (lambda a, x, i: (a @ x)[i[2:5]], RNG.permutation(9)),
    "(a @ x)[idx].sum()": (lambda a, x, i: (a @ x)[i].sum(), np.array([1, 2, 3, 1])),
}


@pytest.mark.parametrize("case", list(KERNEL_CASES), ids=list(KERNEL_CASES))
def test_gather_of_a_computed_value_matches_numpy(case):
    fun, index = KERNEL_CASES[case]
    i_before = index.copy()
    np.testing.assert_allclose(splyce.jit(fun)(A, W, index), fun(A, W, index), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(index, i_before)


def test_gather_of_a_computed_value_checks_the_index_before_the_kernel():
    f = splyce.jit(lambda a, x, i: (a @ x)[i])
    text = f.lower(A, W, np.array([0, 1])).as_text("plan")
    assert "%arg3 = checked %arg2 (every index in [-9, 9) for axis 0, wrapped, before the kernel) : 2xint64" in text
    assert "gather[idx](%0, %arg3)" in text
    for bad in (9, -10, 1 << 40):
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 with size 9"):
            f(A, W, np.array([0, bad]))
    assert "tensor.extract" in f.lower(A, W, np.array([0, 1])).as_text("linalg")


def test_gather_plan_reads_before_the_kernel():
    text = splyce.jit(lambda x, i: x[i] * 2.0).lower(X2, np.array([0, 3])).as_text("plan")
    assert "%arg2 = gather %arg0, %arg1 [idx, 0:5] (NumPy's indexing, before the kernel" in text
    assert ": 2x5xfloat64" in text


# -- refusals JAX makes too ----------------------------------------------------------------------------

def test_mask_index_refused_with_where():
    with pytest.raises(TraceError, match=r"boolean mask indexing is not supported.*np\.where\(mask, x, 0\)"):
        splyce.jit(lambda x: x[x > 0])(X1)
    with pytest.raises(TraceError, match="boolean mask indexing"):
        splyce.jit(lambda x: x[np.array([True, False] * 3 + [True])])(X1)
    with pytest.raises(TraceError, match="boolean mask indexing"):
        splyce.jit(lambda a: a[a > 0])(A)


def test_item_assignment_refused_with_where():
    def mask_assign(y):
        y[y < 0.1] = 0.0
        return y

    with pytest.raises(TraceError, match=r"np\.where\(y < 0\.1, 0\.0, y\)"):
        splyce.jit(mask_assign)(X1)

    def int_assign(y):
        y[0] = 0.0
        return y

    with pytest.raises(TraceError, match=r"item assignment y\[\.\.\.\] = v .*np\.where\(mask, v, y\)"):
        splyce.jit(int_assign)(X1)

    def traced_assign(y, i):
        y[i[0]] = 1.0
        return y

    with pytest.raises(TraceError, match=r"item assignment y\[i\] = v with a traced index"):
        splyce.jit(traced_assign)(X1, np.array([2]))


# -- sparse slices and gathers ----------------------------------------------------------------------------

def _operands(m):
    return {"csr_array": sps.csr_array(m), "csr_matrix": sps.csr_matrix(m), "csc_array": sps.csc_array(m),
            "csc_matrix": sps.csc_matrix(m), "SparseTensor": splyce.asarray(sps.csr_array(m))}


SPARSE_KEYS = {
    "rows a:b": (lambda a: a[2:6], None),
    "rows a:b, :": (lambda a: a[3:9, :], None),
    "rows ::2": (lambda a: a[::2], None),
    "rows ::-1": (lambda a: a[::-1], None),
    "row gather": (lambda a, i: a[i], np.array([8, 0, 3, 3, -1])),
    "row gather, cols a:b": (lambda a, i: a[i, 1:5], np.array([4, 2])),
    "col gather": (lambda a, i: a[:, i], np.array([6, 1, 1, -7, 3])),
    "col gather increasing": (lambda a, i: a[:, i], np.array([0, 2, 5, 6])),
    "col slice": (lambda a: a[:, 2:5], None),
    "col slice step": (lambda a: a[:, 5:0:-2], None),
    "rows a:b, col gather": (lambda a, i: a[1:8, i], np.array([5, 0])),
}


@pytest.mark.parametrize("kind", list(_operands(A.toarray())))
@pytest.mark.parametrize("case", list(SPARSE_KEYS), ids=list(SPARSE_KEYS))
def test_sparse_index_matches_scipy_and_stays_sparse(case, kind):
    fun, index = SPARSE_KEYS[case]
    a = _operands(A.toarray())[kind]
    reference = _operands(A.toarray())["csr_array"]
    args = (a,) if index is None else (a, index)
    got = splyce.jit(fun)(*args)
    want = fun(reference) if index is None else fun(reference, index)
    assert not isinstance(got, np.ndarray) and (sps.issparse(got) or isinstance(got, splyce.SparseTensor))
    same(got, want)


@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "csc_array", "SparseTensor"])
def test_sparse_gather_in_a_program(kind):
    a = _operands(A.toarray())[kind]
    ref = (sps.csr_matrix if kind == "csr_matrix" else sps.csr_array)(A.toarray())   # a matrix's sum is 2-D
    idx = np.array([6, 2, 2, 0])
    f = splyce.jit(lambda a, i, w: a[i] @ w + a[1:5][:, i].sum(axis=0))
    np.testing.assert_allclose(f(a, idx, W), ref[idx] @ W + ref[1:5][:, idx].sum(axis=0), rtol=1e-13)
    g = splyce.jit(lambda a, i: a[i].multiply(a[i]))
    same(g(a, idx), ref[idx].multiply(ref[idx]))


@pytest.mark.parametrize("kind", ["coo_array", "coo_matrix"])
def test_sparse_index_of_a_coo_is_restored_as_csr(kind):
    a = getattr(sps, kind)(A)
    idx = np.array([3, -1, 3])
    got = splyce.jit(lambda a, i: (a[i], a[2:5], a[:, i]))(a, idx)
    ref = sps.csr_array(A)
    for g, want in zip(got, (ref[idx], ref[2:5], ref[:, idx])):
        assert type(g) is type(a)                # scipy's coo_array[idx] is a coo_array
        same(g, want)


@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "csc_array", "csc_matrix"])
def test_sparse_index_result_class_is_scipys(kind):
    a = getattr(sps, kind)(A)
    i = np.array([1, 4])
    for fun in (lambda a, i: a[i], lambda a, i: a[:, i], lambda a, i: a[1:3]):
        assert type(splyce.jit(fun)(a, i)) is type(fun(a, i))


def test_gathers_on_two_threads():
    a = sps.random_array((3000, 500), density=0.05, format="csr", random_state=3)
    idx, x = np.random.default_rng(0).integers(0, 3000, 2000), np.ones(500)
    f = splyce.jit(lambda a, i, x: np.exp(a[i] @ x) + (a @ x)[i] + a[5:2005] @ x, threads=2)
    np.testing.assert_allclose(f(a, idx, x), np.exp(a[idx] @ x) + (a @ x)[idx] + a[5:2005] @ x, rtol=1e-13)


def test_sparse_arguments_are_not_modified():
    a = sps.csr_array(A)
    before = (a.indptr.copy(), a.indices.copy(), a.data.copy())
    t = splyce.asarray(a)
    t_before = [t.pos[1].copy(), t.crd[1].copy(), t.values.copy()]
    f = splyce.jit(lambda a, i: (a[2:6] * 2.0, a[i], a[:, i] @ np.ones(2)))
    f(a, np.array([0, 3]))
    f(t, np.array([0, 3]))
    for x, y in zip(before, (a.indptr, a.indices, a.data)):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(t_before, (t.pos[1], t.crd[1], t.values)):
        np.testing.assert_array_equal(x, y)


def test_sparse_index_out_of_range():
    f = splyce.jit(lambda a, i: a[i])
    with pytest.raises(IndexError, match="index 9 is out of bounds for axis 0 with size 9"):
        f(A, np.array([0, 9]))
    g = splyce.jit(lambda a, i: a[:, i])
    with pytest.raises(IndexError, match="index -8 is out of bounds for axis 1 with size 7"):
        g(A, np.array([-8]))


def test_sparse_index_refusals():
    with pytest.raises(TraceError, match=r"write a\[1:2\]"):
        splyce.jit(lambda a: a[1])(A)
    with pytest.raises(TraceError, match=r"a\[rows\]\[:, cols\]"):
        splyce.jit(lambda a, i: a[i, i])(A, np.array([0, 1]))
    with pytest.raises(TraceError, match="index the arguments instead"):
        splyce.jit(lambda a, i: (a * 2.0)[i[None]])(A, np.array([0, 1]))
    with pytest.raises(TraceError, match="a sparse matrix is indexed by a 1-D integer array"):
        splyce.jit(lambda a, i: a[i])(A, np.array([[0, 1]]))


def test_sparse_row_slice_plan_is_costed_for_the_selected_rows():
    big = sps.random_array((2000, 300), density=0.05, format="csr", random_state=1)
    w = np.ones(300)
    text = splyce.jit(lambda a, w: a[10:30] @ w).lower(big, w).as_text("plan")
    assert "%arg2 = gather %arg0 [10:30, 0:300] (rows / columns selected" in text
    assert ": 20x300xfloat64" in text
    # the product is costed for ~20 / 2000 of the stored entries (~300), not the matrix's 30000
    cost = float(text.split("total cost ~")[1].split(" steps")[0])
    assert cost < 0.1 * big.nnz


def test_contiguous_row_slice_is_a_view_of_the_buffers():
    t = splyce.asarray(A)
    g = Gathered(0, None, (("s", 2, 1, 4), ("s", 0, 1, 7)), TensorType((4, 7), "float64", t.format))
    sliced = host_gather(g, [t])
    assert np.shares_memory(sliced.crd[1], t.crd[1]) and np.shares_memory(sliced.values, t.values)
    assert sliced.pos[1][0] == 0
    same(sliced.to_scipy(), A[2:6])


# -- the host step against scipy, on random shapes and indices (no compile) ----------------------------------

@st.composite
def sparse_and_key(draw):
    m, n = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    density = draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    seed = draw(st.integers(0, 2**16))
    order = draw(st.sampled_from(["csr", "csc"]))
    axis = draw(st.integers(0, 1))
    size = (m, n)[axis]
    how = draw(st.sampled_from(["array", "slice"]))
    if how == "array":
        index = np.array(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=8)))
        key = (index, slice(None)) if axis == 0 else (slice(None), index)
    else:
        start = draw(st.integers(-size, size))
        stop = draw(st.integers(-size, size))
        step = draw(st.sampled_from([1, 1, 2, -1, 3]))
        key = (slice(start, stop, step), slice(None)) if axis == 0 else (slice(None), slice(start, stop, step))
        index = None
    return sps.random_array((m, n), density=density, format=order, random_state=seed), key, index


@settings(max_examples=150, deadline=None)
@given(sparse_and_key())
def test_host_sparse_gather_matches_scipy(case):
    from splyce.tracer.gather import _slice_entry

    a, key, index = case
    want = a.tocsr()[key]
    t = splyce.asarray(a)
    spec = tuple(("a",) if isinstance(k, np.ndarray) else _slice_entry(k, n) for k, n in zip(key, a.shape))
    shape = want.shape
    g = Gathered(0, None if index is None else 1, spec, TensorType(shape, "float64", t.format))
    got = host_gather(g, [t] if index is None else [t, index])
    assert got.shape == shape
    same(got.to_scipy(), want)
    # canonical: coordinates increasing within each row (column), positions from 0 to nnz
    pos, crd = got.pos[1], got.crd[1]
    assert pos[0] == 0 and pos[-1] == len(crd) == len(got.values)
    for r in range(len(pos) - 1):
        assert np.all(np.diff(crd[pos[r]:pos[r + 1]]) > 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.lists(st.integers(-9, 8), min_size=1, max_size=6))
def test_host_dense_gather_matches_numpy(n, raw):
    x = np.arange(n * 3.0).reshape(n, 3)
    index = np.array(raw)
    g = Gathered(0, 1, (("a",), ("s", 0, 1, 3)), TensorType((len(raw), 3), "float64", None))
    if np.all((index >= -n) & (index < n)):
        same(host_gather(g, [x, index]), x[index])
    else:
        with pytest.raises(IndexError, match="is out of bounds for axis 0 with size"):
            host_gather(g, [x, index])


def test_bench_indexing_tiny_runs_checked(tmp_path):
    from splyce.bench import __main__ as cli
    from splyce.bench.common import read_csv
    from splyce.bench.indexing import COLUMNS

    assert cli.main(["indexing", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    comments, rows = read_csv(tmp_path / "indexing.csv")
    assert list(rows[0]) == COLUMNS and len(rows) == 6 and any("repeats" in c for c in comments)
    assert all(float(r["splyce_ms"]) > 0 and float(r["reference_ms"]) > 0 for r in rows)


B = sps.random_array((9, 7), density=0.35, format="csr", random_state=4, dtype=np.float64)
TWO_GATHERS = {
    "a[i] * b[j]": lambda a, b, i, j: a[i] * b[j],
    "a[i] + b[j]": lambda a, b, i, j: a[i] + b[j],
    "a[i] @ b[j].T": lambda a, b, i, j: a[i] @ b[j].T,
    "a[i].sum(axis=1)": lambda a, b, i, j: a[i].sum(axis=1),
    "a[2:5].T @ b[3:6]": lambda a, b, i, j: a[2:5].T @ b[3:6],
    "a[:, 0:3].multiply(b[:, 4:7])": lambda a, b, i, j: a[:, 0:3].multiply(b[:, 4:7]),
}


@pytest.mark.parametrize("case", list(TWO_GATHERS), ids=list(TWO_GATHERS))
def test_programs_of_two_gathers(case):
    """The one-op plans over gathered inputs (runtime/library.py reads them as kernel inputs, not arguments)."""
    fun = TWO_GATHERS[case]
    i, j = np.array([1, 4, 4]), np.array([0, 8, 2])
    got, want = splyce.jit(fun)(A, B, i, j), fun(A, B, i, j)
    np.testing.assert_allclose(dense(got), dense(want), rtol=1e-13, atol=1e-15)


# -- NumPy's placement of the indexed axes, on random keys: the tracer's shape and the host step's values ------

@st.composite
def dense_key(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    at = draw(st.integers(0, ndim - 1))                    # the axis the array indexes
    key = []
    for d in range(ndim):
        if draw(st.booleans()) and len(key) < 4:
            key.append(None)
        n = shape[d]
        if d == at:
            index_shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
            key.append(np.array(draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(index_shape)),
                                              max_size=int(np.prod(index_shape))))).reshape(index_shape))
        elif draw(st.booleans()):
            key.append(draw(st.integers(-n, n - 1)))
        else:
            start, stop = draw(st.integers(-n - 1, n + 1)), draw(st.integers(-n - 1, n + 1))
            key.append(slice(start, stop, draw(st.sampled_from([1, 2, -1, -2]))))
    return shape, tuple(key)


@settings(max_examples=300, deadline=None)
@given(dense_key())
def test_dense_gather_shape_and_values_match_numpy_on_random_keys(case):
    from splyce.tracer.base import Tracer
    from splyce.tracer.ir import Node

    shape, key = case
    x = np.arange(float(np.prod(shape))).reshape(shape)
    want = x[key]
    if want.size == 0:
        return                                   # empty results are refused (documented)
    array = next(k for k in key if isinstance(k, np.ndarray))
    node = Node("input", (), (0,), TensorType(shape, "float64", None))
    index = Node("input", (), (1,), TensorType(array.shape, "int64", None))
    traced_key = tuple(Tracer(index) if isinstance(k, np.ndarray) else k for k in key)
    if want.ndim > 4:
        with pytest.raises(TraceError, match="results of rank up to 4 are supported"):
            Tracer(node)[traced_key]
        return
    got = Tracer(node)[traced_key]
    assert got.shape == want.shape
    g = Gathered(0, 1, got.node.params[0], got.node.type)
    same(host_gather(g, [x, array]), want)


@settings(max_examples=6, deadline=None)
@given(dense_key())
def test_dense_gather_in_the_kernel_matches_numpy_on_random_keys(case):
    shape, key = case
    x = np.arange(float(np.prod(shape))).reshape(shape) - 3.0
    if x[key].size == 0 or x[key].ndim > 4:
        return
    array = next(k for k in key if isinstance(k, np.ndarray))
    assume(array.ndim > 0)                       # a 0-d array is not an argument (pass a Python int)
    key_of = lambda i: tuple(i if isinstance(k, np.ndarray) else k for k in key)   # noqa: E731
    got = splyce.jit(lambda x, i: (x * 2.0)[key_of(i)])(x, array)
    same(got, (x * 2.0)[key])


TRANSPOSED = {
    "a.T[i]": (lambda a, i: a.T[i], lambda a, i: a.T[i]),
    "a.T[:, i]": (lambda a, i: a.T[:, i], lambda a, i: a.T[:, i]),
    "a.T[1:5] @ v": (lambda a, i: a.T[1:5] @ np.ones(9), lambda a, i: a.T[1:5] @ np.ones(9)),
    "a.T[i, 2:8] * 2": (lambda a, i: a.T[i, 2:8] * 2.0, lambda a, i: a.T[i, 2:8] * 2.0),
}


@pytest.mark.parametrize("kind", ["csr_array", "csc_array", "csr_matrix", "SparseTensor"])
@pytest.mark.parametrize("case", list(TRANSPOSED), ids=list(TRANSPOSED))
def test_index_of_a_transposed_argument(case, kind):
    fun, ref = TRANSPOSED[case]
    i = np.array([1, 4, 4, -1])
    got = splyce.jit(fun)(_operands(A.toarray())[kind], i)
    want = ref(sps.csr_array(A), i)
    np.testing.assert_allclose(dense(got), dense(want), rtol=1e-13, atol=1e-15)
    assert sps.issparse(got) == sps.issparse(want) or isinstance(got, splyce.SparseTensor)


def test_argmax_index_is_read_in_the_kernel():
    rng = np.random.default_rng(7)
    s, labels, x = rng.standard_normal((9, 4)), rng.standard_normal(4), rng.standard_normal(9)
    f = splyce.jit(lambda s, l: l[s.argmax(axis=1)] * 2.0 + 1.0)
    same(f(s, labels), labels[s.argmax(axis=1)] * 2.0 + 1.0)
    assert "gather" in f.lower(s, labels).as_text("plan") and "checked" not in f.lower(s, labels).as_text("plan")
    g = splyce.jit(lambda a, x, s: x[np.argmin(a @ s, axis=0)])
    same(g(A, x, s[:7]), x[np.argmin(A @ s[:7], axis=0)])
    h = splyce.jit(lambda s, l: l[s.argmax(axis=1, keepdims=True)])
    same(h(s, labels), labels[s.argmax(axis=1, keepdims=True)])
    with pytest.raises(TraceError, match="an argmax / argmin along an axis of size 9 indexes an axis of size 4"):
        splyce.jit(lambda s, l: l[s.argmax(axis=0)])(s, labels)
    with pytest.raises(TraceError, match="computed inside the jitted function"):
        splyce.jit(lambda a, s: a[s.argmax(axis=1)])(A, s)


REFUSALS = {
    "sparse index array": (lambda x, a: x[a.astype(np.int64)], "a sparse index array is not supported"),
    "float in the key": (lambda x, a: x[np.array([0, 1]), 1.5], r"unsupported index 1.5 of type float"),
    "two ellipses": (lambda x, a: x[..., np.array([0]), ...], r"a single ellipsis"),
    "too many indices": (lambda x, a: x[np.array([0]), 0, 0], "too many indices for a tensor of rank 2"),
    "sparse column integer": (lambda x, a: a[:, 1], r"write a\[:, 1:2\] \(a sparse matrix of one column\)"),
    "sparse None": (lambda x, a: a[None, 1:3], r"None \(a new axis\) does not index a sparse matrix"),
    "sparse transposed None": (lambda x, a: a.T[None, 1:3], r"None \(a new axis\) does not index a sparse"),
    "sparse string": (lambda x, a: a["rows"], "unsupported index 'rows' of type str"),
    "take of a sparse value": (lambda x, a: np.take(a, np.array([0])), r"take: not supported on a sparse tensor; "
                               r"write a\[idx\] \(rows\) or a\[:, idx\] \(columns\)"),
    "take axis=None of 2-D": (lambda x, a: np.take(x, np.array([0])), "axis=None flattens"),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_every_indexing_refusal_names_the_problem(case):
    fun, message = REFUSALS[case]
    with pytest.raises(TraceError, match=message):
        splyce.jit(fun)(X2, A)


def test_take_axis_out_of_range_and_sparse_vector():
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds for array of dimension 2"):
        splyce.jit(lambda x, i: np.take(x, i, axis=2))(X2, np.array([0]))
    v = splyce.asarray(sps.coo_array(np.array([0.0, 1.0, 0.0, 2.0])))
    with pytest.raises(TraceError, match="need a matrix"):
        splyce.jit(lambda v: v[1:3])(v)


def test_sparse_literal_index_and_work_of_gathers_in_the_plan():
    same(splyce.jit(lambda a: a[[0, -1, 2]])(A), A[[0, -1, 2]])
    big = sps.random_array((2000, 300), density=0.05, format="csr", random_state=1)
    w = np.ones(300)
    for fun, args in ((lambda a, i, w: a[i] @ w, (big, np.arange(20), w)),
                      (lambda a, i, w: a[:, i].sum(), (big, np.arange(3), w))):
        text = splyce.jit(fun).lower(*args).as_text("plan")
        assert "gather %arg0, %arg1" in text
        assert float(text.split("total cost ~")[1].split(" steps")[0]) < 0.1 * big.nnz


def test_consecutive_index_array_is_a_view_and_one_kernel_serves_every_start():
    t = splyce.asarray(A)
    g = Gathered(0, 1, (("a",), ("s", 0, 1, 7)), TensorType((4, 7), "float64", t.format))
    view = host_gather(g, [t, np.arange(3, 7)])
    assert np.shares_memory(view.crd[1], t.crd[1]) and np.shares_memory(view.values, t.values)
    same(view.to_scipy(), A[3:7])
    same(host_gather(g, [t, np.array([-6, -5, -4, -3])]).to_scipy(), A[3:7])
    same(host_gather(g, [t, np.array([3, 4, 6, 5])]).to_scipy(), A[[3, 4, 6, 5]])
    f = splyce.jit(lambda a, rows, w: a[rows] @ w)
    for start in (0, 2, 5):
        rows = np.arange(start, start + 4)
        np.testing.assert_allclose(f(t, rows, W), A[rows] @ W, rtol=1e-13)
    assert f.cache_info().misses == 1


def test_glue_after_a_dense_gather_is_written_over_its_array():
    x, y, perm = RNG.standard_normal(50), RNG.standard_normal(50), RNG.permutation(50)
    f = splyce.jit(lambda x, p, y: x[p] * y + 1.0)
    assert "written over %arg3's array" in f.lower(x, perm, y).as_text("plan")
    x_before = x.copy()
    for _ in range(2):
        same(f(x, perm, y), x[perm] * y + 1.0)
    np.testing.assert_array_equal(x, x_before)
    g = splyce.jit(lambda x, p: x[p] * 2.0)          # the whole array gathered: still a fresh copy
    same(g(x, np.arange(50)), x * 2.0)
    np.testing.assert_array_equal(x, x_before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128])
@pytest.mark.parametrize("width", [32, 64])
def test_sparse_gathers_over_dtypes_and_index_widths(dtype, width):
    base = sps.csr_array(A.toarray().astype(dtype) if dtype != np.bool_ else A.toarray() != 0)
    itype = np.int32 if width == 32 else np.int64
    a = sps.csr_array((base.data, base.indices.astype(itype), base.indptr.astype(itype)), shape=base.shape)
    i = np.array([3, 0, -1])
    got = splyce.jit(lambda a, i: (a[i], a[:, i], a[2:5]))(a, i)
    for g, want in zip(got, (a[i], a[:, i], a[2:5])):
        assert g.dtype == want.dtype and g.indices.dtype == itype
        same(g, want)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_, np.complex64])
def test_dense_gathers_over_dtypes(dtype):
    x = (np.arange(12) % 5).astype(dtype).reshape(4, 3)
    i = np.array([3, -4, 1])
    same(splyce.jit(lambda x, i: x[i])(x, i), x[i])
    same(splyce.jit(lambda x, i: x[:, i[2:]])(x, i), x[:, i[2:]])


def test_accumulate_into_a_gathered_result():
    x, y, p = RNG.standard_normal(20), RNG.standard_normal(20), RNG.permutation(20)
    acc = np.ones(20)
    splyce.jit(lambda x, p, y: x[p] * y + 1.0).accumulate(acc, x, p, y)
    np.testing.assert_allclose(acc, 1.0 + (x[p] * y + 1.0), rtol=1e-15)
    a = sps.random_array((20, 7), density=0.3, format="csr", random_state=1)
    acc = np.ones(20)
    splyce.jit(lambda a, p, w: (a @ w)[p] * 2.0).accumulate(acc, a, p, W)
    np.testing.assert_allclose(acc, 1.0 + (a @ W)[p] * 2.0, rtol=1e-13)


B7 = sps.random_array((7, 6), density=0.35, format="csr", random_state=5, dtype=np.float64)
PUSHED = {
    "(a * b)[i]": (lambda a, b, c, i, q: (a * b)[i], "csr"),
    "(a + b)[2:6, q]": (lambda a, b, c, i, q: (a + b)[2:6, q], "csr"),
    "abs(a * 2)[i]": (lambda a, b, c, i, q: abs(a * 2.0)[i], "csr"),
    "(a.T * b.T)[:, i]": (lambda a, b, c, i, q: (a.T * b.T)[:, i], "csc"),
    "(a * b)[i] @ x": (lambda a, b, c, i, q: (a * b)[i] @ np.arange(7.0), None),
    "(a - b)[::-2][:, q]": (lambda a, b, c, i, q: (a - b)[::-2][:, q], "csr"),
    "a.maximum(b)[i]": (lambda a, b, c, i, q: a.maximum(b)[i], "csr"),
    "(a * a.sum(axis=1)[:, None])[i] (scipy: a COO)": (lambda a, b, c, i, q: (a * a.sum(axis=1)[:, None])[i],
                                                         None),
    "(a @ c)[i] (a product: dense here, gathered in the kernel)": (lambda a, b, c, i, q: (a @ c)[i], None),
}


@pytest.mark.parametrize("case", list(PUSHED), ids=list(PUSHED))
def test_selection_of_a_computed_sparse_value_is_pushed_to_the_arguments(case):
    fun, fmt = PUSHED[case]
    i, q = np.array([3, 0, -1, 3]), np.array([2, 5, 0])
    got, want = splyce.jit(fun)(A, B, B7, i, q), fun(A, B, B7, i, q)
    if fmt is not None:
        assert type(got) is type(want) and got.format == fmt
    np.testing.assert_allclose(dense(got), dense(want), rtol=1e-13, atol=1e-15)


def test_pushed_down_selection_plans_the_selected_work():
    big = sps.random_array((2000, 300), density=0.05, format="csr", random_state=1)
    text = splyce.jit(lambda a, b: (a * b)[10:30]).lower(big, big).as_text("plan")
    assert "gather %arg0 [10:30, 0:300]" in text and "gather %arg1 [10:30, 0:300]" in text
    assert float(text.split("total cost ~")[1].split(" steps")[0]) < 0.1 * big.nnz
