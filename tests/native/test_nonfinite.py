"""NaN and Inf in the drop-in einsum: a scalar sum gives what NumPy's einsum on the dense arrays, scipy's
formulation and pydata-sparse's einsum give (NaN times a missing entry is NaN), not the sum over stored
entries only; a Hadamard einsum keeps scipy's NaN (splyce.planner.nonfinite, docs/semantics.md)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sps
import sparse
from hypothesis import given, settings, strategies as st

import splyce
from splyce.native import masked_sum_checked as native_masked


def _graph(n, density, seed):
    A = sps.random_array((n, n), density=density, rng=np.random.default_rng(seed), format="csr")
    return sps.csr_array(sps.tril((A + A.T) != 0, -1), dtype=np.float64)


def _dense(*xs):
    return [x.toarray() if sps.issparse(x) else np.asarray(x) for x in xs]


def _ref(subs, *xs, optimize=False):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.einsum(subs, *_dense(*xs), optimize=optimize)


def _pydata(subs, *xs):
    """pydata-sparse's einsum (fill values: NaN times a missing zero is NaN, a letter in one operand only is
    summed there first), the reference nobody here wrote."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = sparse.einsum(subs, *(sparse.COO.from_scipy_sparse(x) if sps.issparse(x) else sparse.COO(x)
                                    for x in xs))
    return out.todense()[()] if hasattr(out, "todense") else out


def _same(got, want):
    got, want = complex(got), complex(want)
    if np.isnan(want.real) or np.isnan(want.imag):
        return np.isnan(got.real) or np.isnan(got.imag)
    return np.isclose(got, want, rtol=1e-4, atol=1e-6) or got == want


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("threads", [1, 2])
def test_triangle_count_with_a_non_finite_weight_is_nan(value, where, threads):
    """The reported defect: a NaN closing no triangle gave a finite count (921.0 here), one or two threads,
    first call (the general path) and later ones (the fast native path) alike."""
    L = _graph(300, 0.03, 0)
    at = {"first": 0, "middle": L.nnz // 2, "last": L.nnz - 1}[where]
    L.data[at] = value
    before = L.data.copy()
    want = _ref("ij,jk,ik->", L, L, L)
    with np.errstate(all="ignore"):
        scipy_says = (L @ L).multiply(L).sum()
    assert np.isnan(want) and np.isnan(scipy_says)
    for _ in range(3):                               # the general path first, then the fast one
        assert np.isnan(splyce.einsum("ij,jk,ik->", L, L, L, threads=threads))
    np.testing.assert_array_equal(L.data, before)    # inputs are never modified


def test_triangle_count_of_finite_weights_is_unchanged():
    """Finite weights (not a 0/1 pattern): the sum over stored entries, bit for bit the plain kernel's."""
    L = _graph(400, 0.03, 1)
    L.data = np.random.default_rng(2).uniform(0.5, 2.0, L.nnz)
    want = splyce.jit(lambda a, b, c: splyce.einsum("ij,jk,ik->", a, b, c))(
        *(splyce.asarray(L) for _ in range(3)))
    for _ in range(3):
        assert splyce.einsum("ij,jk,ik->", L, L, L) == want


def test_triangle_count_on_one_thread_scans_only_when_summing():
    """A 0/1 pattern is counted, which proves every value one: no finiteness scan. A weighted one is summed,
    then scanned: the fast kernel says 2 for a NaN (the general path applies the rule), 0 otherwise."""
    L = _graph(500, 0.05, 3)
    fn = native_masked._sum_checked_kernel(np.dtype(np.float64), 32)
    mark, out = np.empty(500, dtype=np.int64), np.empty(1)

    def call(x):
        parts = [id(a) for a in (x.indptr, x.indices, x.data)] * 3
        return fn(*parts, id(mark), id(out), 500, 500, 500, x.nnz, x.nnz, x.nnz, 0)

    assert call(L) == 0 and out[0] == (L @ L).multiply(L).sum()
    W = L.copy()
    W.data = W.data * 1.5
    assert call(W) == 0
    W.data[W.nnz // 3] = np.inf
    assert call(W) == 2


def test_full_operands_keep_infinity():
    """An Inf whose terms meet no missing entry (every partner stored) is NumPy's Inf, not NaN."""
    full = sps.csr_array(np.ones((3, 3)))
    inf = full.copy()
    inf.data[4] = np.inf
    assert splyce.einsum("ij,jk,ik->", inf, full, full) == np.inf == _ref("ij,jk,ik->", inf, full, full)
    assert splyce.einsum("ij,ij->", inf, full) == np.inf
    neg = full.copy()
    neg.data[0] = -np.inf
    assert np.isnan(splyce.einsum("ij,ij->", inf, neg))          # Inf - Inf, as NumPy
    one_missing = full.copy()
    one_missing.data[8] = 0
    one_missing.eliminate_zeros()                                  # (2, 2) missing: Inf at (1, 1) never meets it
    assert splyce.einsum("ij,ij->", inf, one_missing) == np.inf
    assert splyce.einsum("ij,jk,ik->", inf, one_missing, full) == np.inf   # B's row 1 is full
    row_one_missing = full.copy()
    row_one_missing.data[5] = 0
    row_one_missing.eliminate_zeros()                              # (1, 2) missing
    assert np.isnan(splyce.einsum("ij,jk,ik->", inf, row_one_missing, full))   # term (1, 1, 2)
    assert np.isnan(_ref("ij,jk,ik->", inf, row_one_missing, full))


def test_a_dense_operands_infinity_against_a_missing_entry_is_skipped_as_scipy_and_pydata_do():
    A = sps.random_array((20, 20), density=0.2, rng=0, format="csr")
    x = np.ones(20)
    x[3] = np.inf
    P = sparse.COO.from_scipy_sparse(A)
    got = splyce.einsum("ij,j->", A, x)
    assert got == sparse.einsum("ij,j->", P, x) == (A @ x).sum() == np.inf


def test_hadamard_einsum_keeps_nan_against_a_missing_entry():
    """``"ij,ij->ij"`` of two sparse operands is the drop-in multiply: scipy's union rule."""
    A = sps.random_array((50, 60), density=0.1, rng=0, format="csr")
    B = sps.random_array((50, 60), density=0.1, rng=1, format="csr")
    A.data[5] = np.nan
    got = splyce.einsum("ij,ij->ij", A, B)
    with np.errstate(all="ignore"):
        want = A.multiply(B)
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    assert np.isnan(got.toarray()).sum() == 1
    C = sps.random_array((60, 50), density=0.1, rng=2, format="csr")      # "ij,ji->ij": A * C.T
    with np.errstate(all="ignore"):
        want = A.multiply(C.T)
    for c in (C, sparse.COO.from_scipy_sparse(C)):
        got = splyce.einsum("ij,ji->ij", A if sps.issparse(c) else sparse.COO.from_scipy_sparse(A), c)
        dense = got.toarray() if hasattr(got, "toarray") else got.todense()
        np.testing.assert_array_equal(dense, want.toarray())
    with pytest.raises(ValueError, match="index 'j' has sizes 60 and 50"):
        splyce.einsum("ij,ji->ij", A, B)


_SUMS = ["ij,jk,ik->", "ij,ij->", "ij,ji->", "ij->", "ij,jk->", "ij,j->", "ij,jk,kl->"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_SUMS), st.integers(1, 7), st.floats(0.1, 1.0), st.integers(0, 10**6),
       st.sampled_from([np.nan, np.inf, -np.inf, None]), st.sampled_from([np.float64, np.float32]),
       st.booleans())
def test_scalar_einsum_matches_numpy_with_non_finite_values(subs, n, density, seed, value, dtype, dense_last):
    """Property: any scalar einsum over sparse operands (and a dense one), a non-finite value in a sparse one:
    the value of NumPy's einsum on the dense arrays and of pydata-sparse's einsum."""
    rng = np.random.default_rng(seed)
    ins = subs.split("->")[0].split(",")
    ops = []
    for k, s in enumerate(ins):
        shape = (n,) * len(s)
        d = rng.uniform(0.5, 2.0, shape) * (rng.random(shape) < density)
        if dense_last and k == len(ins) - 1 and len(ins) > 1:
            ops.append(d.astype(dtype))
        else:
            ops.append(sps.csr_array(d.astype(dtype)) if len(s) == 2 else d.astype(dtype))
    sparse_ops = [k for k, o in enumerate(ops) if sps.issparse(o) and o.nnz]
    if value is not None and sparse_ops:
        o = ops[sparse_ops[rng.integers(len(sparse_ops))]]
        o.data[rng.integers(o.nnz)] = value
    if not any(sps.issparse(o) for o in ops):
        return
    refs = {"pydata": _pydata(subs, *ops), "numpy": _ref(subs, *ops), "numpy optimize": _ref(subs, *ops, optimize=True)}
    got = splyce.einsum(subs, *ops)
    # the references disagree on an Inf against a zero of a letter in one operand only (NumPy's default path
    # multiplies it, pydata and NumPy's optimize=True sum it first): one of them; where they agree, theirs
    assert any(_same(got, r) for r in refs.values()), (subs, got, refs)
    if sum(_same(a, b) for a in refs.values() for b in refs.values()) == 9:
        assert _same(got, refs["numpy"]), (subs, got, refs)


def test_a_dense_operands_lone_letters_are_summed_before_the_kernel():
    """``"ij,jk->"`` with a dense B runs as ``"ij,j->"`` on B's row sums (NumPy's order: O(nnz + size of B),
    not every stored entry times a whole row), so an Inf in A against a zero in B's row is Inf, as NumPy's
    einsum and pydata-sparse give."""
    from splyce.dropin import kernels as dropin

    rng = np.random.default_rng(4)
    A = sps.random_array((40, 30), density=0.1, rng=rng, format="csr")
    B = rng.standard_normal((30, 25))
    B[:, 3] = 0.0
    got = splyce.einsum("ij,jk->", A, B)
    assert np.isclose(got, np.einsum("ij,jk->", A.toarray(), B))
    assert any(key[0] == "einsum:ij,j->" for key in dropin._kernels)
    A.data[0] = np.inf
    j = A.indices[0]
    B[j] = np.abs(B[j]) + 1.0
    B[j, 3] = 0.0
    assert splyce.einsum("ij,jk->", A, B) == np.inf == _ref("ij,jk->", A, B) == _pydata("ij,jk->", A, B)
    # the result keeps the other letters: "ij,jk->i" sums B over k too, "ij,jk->ik" does not
    np.testing.assert_allclose(splyce.einsum("ij,jk->i", A, np.ones((30, 25))),
                               np.einsum("ij,jk->i", A.toarray(), np.ones((30, 25))))


def _vector_cases(seed):
    rng = np.random.default_rng(seed)
    A = sps.random_array((300, 250), density=0.04, rng=rng, format="csr")
    A.data[::37] = np.nan
    A.data[5::41] = np.inf
    A.data[9::53] = -np.inf
    x = sps.random_array((250,), density=0.03, rng=rng, format="coo")
    return A, x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("form", ["coo 1-D", "csc column", "pydata"])
def test_matrix_times_sparse_vector_skips_missing_entries_as_scipy(form, threads):
    """``A @ x`` with a sparse x runs as an SpMV on x scattered densely, which multiplied A's NaN / Inf by
    the zeros x does not store (40 NaN rows where scipy has 1, on a 200 x 200 case); the rows a NaN reached
    are summed again over x's stored entries: scipy's result, bit for bit."""
    A, x = _vector_cases(1)
    before = A.data.copy()
    with np.errstate(all="ignore"):
        want = (A @ x).toarray().reshape(-1)
    operand = {"coo 1-D": x, "csc column": sps.csc_array(x.toarray().reshape(-1, 1)),
               "pydata": sparse.COO.from_scipy_sparse(sps.coo_array(x.toarray().reshape(-1, 1))).reshape((250,))}[form]
    for _ in range(2):
        got = splyce.matmul(A, operand, threads=threads)
        dense = got.toarray() if hasattr(got, "toarray") else got.todense() if hasattr(got, "todense") else got
        np.testing.assert_array_equal(np.asarray(dense).reshape(-1), want)
    assert 0 < np.isnan(want).sum() < 20
    np.testing.assert_array_equal(A.data, before)


def test_sparse_vector_times_matrix_skips_missing_entries_as_scipy():
    A, x = _vector_cases(2)
    B = sps.csr_array(A.T)
    with np.errstate(all="ignore"):
        want = x @ B
    got = splyce.matmul(x, B)
    assert type(got) is type(want)                     # sparse, as scipy returns it (was a dense vector)
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    y = sps.random_array((250,), density=0.3, rng=3, format="coo")
    y.data[np.flatnonzero(~np.isin(y.coords[0], x.coords[0]))[:2]] = [np.nan, np.inf]
    with np.errstate(all="ignore"):
        dot = x @ y
    assert np.isfinite(dot) and splyce.matmul(x, y) == dot            # both pairs skipped, as scipy


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 60), st.floats(0.02, 0.6), st.floats(0.02, 0.6), st.integers(0, 10**6),
       st.sampled_from([np.float64, np.float32]))
def test_sparse_vector_products_match_scipy_with_non_finite_values(m, n, da, dx, seed, dtype):
    rng = np.random.default_rng(seed)
    A = sps.random_array((m, n), density=da, rng=rng, format="csr", dtype=dtype)
    x = sps.random_array((n,), density=dx, rng=rng, format="coo", dtype=dtype)
    if A.nnz:
        A.data[rng.integers(A.nnz, size=3)] = rng.choice([np.nan, np.inf, -np.inf], 3)
    with np.errstate(all="ignore"):
        want = (A @ x).toarray()
    got = splyce.matmul(A, x)
    np.testing.assert_array_equal(got.toarray(), want)


# -- jitted functions whose plan scatters a sparse operand ---------------------------------------------------
# The planner may store a sparse input scattered into a dense array; its missing entries are then stored zeros,
# and NaN * 0 would reach rows that the sparsifier on the kept operands (and scipy) never multiply. A result
# holding a NaN is recomputed by the plan that keeps every operand sparse (Kernel.run_exact).

def _with_non_finite(A, seed, nan=40, inf=10):
    A = A.copy()
    rng = np.random.default_rng(seed)
    A.data[rng.choice(A.nnz, nan, replace=False)] = np.nan
    A.data[rng.choice(A.nnz, inf, replace=False)] = -np.inf
    return A


def _scattering_kernel(f, *args):
    """The MLIR kernel of a scattering plan (``f`` made with ``library=False``: with the library, SpMSpV runs the
    kept twin's native call, tests/runtime/test_library_scattered.py)."""
    kernel, _ = f.kernel_for(*args)
    assert kernel.plan.scatters, kernel.plan.as_text()
    return kernel


@pytest.mark.parametrize("threads", [1, 2])
def test_jitted_product_with_a_scattered_sparse_vector_skips_missing_entries_as_scipy(threads):
    n = 1000
    A = _with_non_finite(sps.random_array((n, n), density=0.5, format="csr", rng=np.random.default_rng(1)), 0,
                         nan=200, inf=50)
    v = sps.random_array((n,), density=0.8, rng=np.random.default_rng(2)).toarray()
    a, x = splyce.asarray(A), splyce.asarray(v, format=splyce.SPARSE_VECTOR)
    f = splyce.jit(lambda a, x: a @ x, threads=threads, library=False)
    kernel = _scattering_kernel(f, a, x)
    scattered = kernel.run([a, x])[0]
    expected = (sps.csr_matrix(A) @ sps.csr_matrix(v).T).toarray().ravel()
    assert np.isnan(scattered).sum() > np.isnan(expected).sum()    # the gap this closes is real here
    y = f(a, x)
    assert np.array_equal(y, expected, equal_nan=True)
    assert not kernel.kept().plan.scatters
    out = np.zeros(n)
    f.accumulate(out, a, x)
    assert np.array_equal(out, expected, equal_nan=True)


def test_jitted_product_with_a_scattered_sparse_matrix_skips_missing_entries_as_scipy():
    n = 300
    A = _with_non_finite(sps.random_array((n, n), density=0.3, format="csr", rng=np.random.default_rng(1)), 3)
    B = sps.random_array((n, n), density=0.7, format="csc", rng=np.random.default_rng(3))
    a, b = splyce.asarray(A), splyce.asarray(B, format=splyce.CSC)
    f = splyce.jit(lambda a, b: a @ b, out_format="dense")
    kernel = _scattering_kernel(f, a, b)
    expected = (A @ B).toarray()
    assert not np.array_equal(kernel.run([a, b])[0], expected, equal_nan=True)
    assert np.array_equal(f(a, b), expected, equal_nan=True)


def test_a_scattering_plan_of_finite_values_runs_alone_and_equals_the_kept_plan():
    n = 400
    A = sps.random_array((n, n), density=0.4, format="csr", rng=np.random.default_rng(5))
    v = sps.random_array((n,), density=0.9, rng=np.random.default_rng(6)).toarray()
    v[np.flatnonzero(v)[:3]] = np.inf   # met by A's positive stored values only: Inf rows, no NaN
    a, x = splyce.asarray(A), splyce.asarray(v, format=splyce.SPARSE_VECTOR)
    f = splyce.jit(lambda a, x: a @ x, library=False)
    kernel = _scattering_kernel(f, a, x)
    y = f(a, x)
    assert kernel._kept is None                     # no NaN in the result: the twin was never compiled
    assert np.array_equal(y, kernel.kept().run([a, x])[0], equal_nan=True)
    assert np.isinf(y).any()
    assert np.array_equal(y, (sps.csr_matrix(A) @ sps.csr_matrix(v).T).toarray().ravel())


def test_the_kept_plan_is_costed_without_scatters():
    n = 1000
    a = splyce.asarray(sps.random_array((n, n), density=0.5, format="csr", rng=np.random.default_rng(1)))
    x = splyce.asarray(np.ones(n), format=splyce.SPARSE_VECTOR)
    f = splyce.jit(lambda a, x: a @ x, library=False)
    kernel = _scattering_kernel(f, a, x)
    kept = kernel.plan.kept()
    assert "scatter" not in " ".join(" ".join(s.storage) for s in kept.steps)
    assert "scattered" not in kept.as_text()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 120), da=st.floats(0.05, 0.9), dx=st.floats(0.3, 1.0), seed=st.integers(0, 2**16),
       value=st.sampled_from([np.nan, np.inf, -np.inf]), dtype=st.sampled_from([np.float64, np.float32,
                                                                                np.complex128]))
def test_jitted_sparse_vector_products_match_scipy_whatever_the_plan(n, da, dx, seed, value, dtype):
    rng = np.random.default_rng(seed)
    A = sps.random_array((n, n), density=da, format="csr", rng=rng, dtype=dtype)
    if A.nnz:
        A.data[rng.integers(0, A.nnz, size=max(1, A.nnz // 20))] = value
    v = sps.random_array((n,), density=dx, rng=rng, dtype=dtype).toarray()
    a, x = splyce.asarray(A), splyce.asarray(v, format=splyce.SPARSE_VECTOR)
    expected = (sps.csr_matrix(A) @ sps.csr_matrix(v).T).toarray().ravel()
    y = _JITTED_MATVEC(a, x)
    assert np.array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_allclose(y, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=0, equal_nan=True)


_JITTED_MATVEC = splyce.jit(lambda a, x: a @ x)
