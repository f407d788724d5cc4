"""A scipy CSR operand's check left to the native steps that read it (runtime/deferred_checks.py): repeated
calls give scipy's / NumPy's results, arrays modified in place between calls (out of range, unsorted,
replaced) give the ordinary result or a clear ValueError, never a crash, and the operand is never modified."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime import deferred_checks


def _csr(n=300, density=0.03, seed=0, cls=sps.csr_array, dtype=np.float64, index=np.int32):
    rng = np.random.default_rng(seed)
    a = sps.random_array((n, n), density=density, format="csr", rng=rng).astype(dtype)
    a.sum_duplicates()
    a = cls((a.data, a.indices.astype(index), a.indptr.astype(index)), shape=(n, n))
    return a


def _bits(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def pagerank(p, x):
    return 0.85 * (p @ x) + 0.15 / p.shape[0]


def axbx(a, b, x):
    return a @ x + b @ x


def normal(a, x):                 # a.T read by the MLIR kernel: checked on every call
    return a.T @ (a @ x)


def twice(a, x):                  # one read native, the scaled one by the MLIR kernel (a dense-result contraction)
    return a @ x + a @ (2.0 * x)


def logreg(a, w, y):              # a @ w native (bounds checked first), a.T @ r the MLIR kernel's scatter
    return a.T @ (1 / (1 + np.exp(-(a @ w))) - y)


def merged(a, x):                 # a + a.T by the MLIR kernel or a merge: checked on every call
    return (a @ x) + (a + a.T) @ x


CASES = [
    (pagerank, 1, True),
    (axbx, 2, True),
    (normal, 1, False),
    (twice, 1, True),
    (merged, 1, False),
]


def _kernel(f, args):
    from splyce.runtime.glue import GlueKernel
    from splyce.runtime.kernel import Kernel

    kernel, _ = f.kernel_for(*args)
    return kernel if type(kernel) in (Kernel, GlueKernel) else None


# ``merged``'s ``(a + a.T) @ x`` of a csr_matrix is an np.matrix product, another case: csr_array only
@pytest.mark.parametrize("body,n_sparse,native,cls",
                         [c + (cls,) for c in CASES for cls in (sps.csr_array, sps.csr_matrix)
                          if not (c[0] is merged and cls is sps.csr_matrix)],
                         ids=[f"{c[0].__name__}-{cls.__name__}" for c in CASES
                              for cls in (sps.csr_array, sps.csr_matrix) if not (c[0] is merged and cls is sps.csr_matrix)])
def test_repeated_calls_equal_scipy(body, n_sparse, native, cls):
    mats = [_csr(seed=s, cls=cls) for s in range(n_sparse)]
    x = np.random.default_rng(5).random(mats[0].shape[1])
    before = [(m.data.copy(), m.indices.copy(), m.indptr.copy()) for m in mats]
    f = splyce.jit(body, threads=1)
    want = body(*mats, x)
    for _ in range(3):
        got = f(*mats, x)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if native:   # the native steps' results are scipy's bits (each row summed in stored order)
        _bits(f(*mats, x), f(*[splyce.asarray(m) for m in mats], x))
    assert bool(deferred_checks.self_checked(_kernel(f, (*mats, x)))) == native
    for m, (d, i, p) in zip(mats, before):
        _bits(m.data, d), _bits(m.indices, i), _bits(m.indptr, p)


@pytest.mark.parametrize("body", [pagerank, normal, twice, merged], ids=lambda b: b.__name__)
@pytest.mark.parametrize("defect", ["column high", "column negative", "indptr end", "indptr decreasing",
                                    "indptr negative"])
def test_modified_in_place_after_first_call(body, defect):
    a = _csr(seed=3)
    x = np.ones(a.shape[1])
    f = splyce.jit(body, threads=1)
    f(a, x)
    f(a, x)
    row = int(np.argmax(np.diff(a.indptr)))
    k = int(a.indptr[row])
    if defect == "column high":
        a.indices[k] = a.shape[1] + 7
    elif defect == "column negative":
        a.indices[k] = -3
    elif defect == "indptr end":
        a.indptr[-1] = a.nnz + 40
    elif defect == "indptr decreasing":
        a.indptr[row + 1] = a.indptr[row] - 1
    else:
        a.indptr[row + 1] = -5
    with pytest.raises(ValueError):
        f(a, x)


@pytest.mark.parametrize("body", [pagerank, normal, twice, merged], ids=lambda b: b.__name__)
def test_unsorted_in_place_after_first_call(body):
    a = _csr(seed=4)
    x = np.random.default_rng(1).random(a.shape[1])
    f = splyce.jit(body, threads=1)
    f(a, x)
    row = int(np.argmax(np.diff(a.indptr)))
    k = int(a.indptr[row])
    a.indices[k], a.indices[k + 1] = a.indices[k + 1], a.indices[k]
    a.data[k], a.data[k + 1] = a.data[k + 1], a.data[k]
    np.testing.assert_allclose(f(a, x), body(a, x), rtol=1e-12, atol=1e-14)


def test_arrays_replaced_are_checked_again():
    a = _csr(seed=6)
    x = np.ones(a.shape[1])
    f = splyce.jit(pagerank, threads=1)
    f(a, x)
    assert deferred_checks.unchecked(a) is not None
    bad = a.indices.copy()
    bad[0] = a.shape[1] + 1
    a.indices = bad
    assert deferred_checks.unchecked(a) is None
    with pytest.raises(ValueError, match="coordinate|column|indices|range"):
        f(a, x)


def test_non_canonical_operand_is_not_deferred():
    a = _csr(seed=7)
    row = int(np.argmax(np.diff(a.indptr)))
    k = int(a.indptr[row])
    a.indices[k], a.indices[k + 1] = a.indices[k + 1], a.indices[k]
    x = np.random.default_rng(2).random(a.shape[1])
    f = splyce.jit(pagerank, threads=1)
    for _ in range(2):
        np.testing.assert_allclose(f(a, x), pagerank(a, x), rtol=1e-12, atol=1e-14)
    assert deferred_checks.unchecked(a) is None


@pytest.mark.parametrize("dtype,index", [(np.float32, np.int32), (np.float64, np.int64), (np.complex128, np.int32)])
def test_dtypes_and_index_widths(dtype, index):
    a = _csr(seed=8, dtype=dtype, index=index)
    x = np.random.default_rng(3).random(a.shape[1]).astype(dtype)
    f = splyce.jit(pagerank, threads=1)
    for _ in range(3):
        got = f(a, x)
        np.testing.assert_allclose(got, pagerank(a, x), rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.slow
def test_split_over_threads_checks_too():
    # beyond the drop-in's one-thread work (SERIAL_MAX_WORK): the row split, which checks as it reads as well
    a = _csr(n=40000, density=0.0015, seed=9)
    x = np.ones(a.shape[1])
    f = splyce.jit(pagerank, threads=2)
    np.testing.assert_allclose(f(a, x), pagerank(a, x), rtol=1e-12)
    np.testing.assert_allclose(f(a, x), pagerank(a, x), rtol=1e-12)
    a.indices[a.nnz // 2] = a.shape[1] + 3
    with pytest.raises(ValueError):
        f(a, x)


def test_logreg_gradient_deferred_and_refused_when_modified():
    a = _csr(seed=11)
    rng = np.random.default_rng(4)
    w, y = rng.random(a.shape[1]) - 0.5, (rng.random(a.shape[0]) < 0.5).astype(np.float64)
    f = splyce.jit(logreg, threads=1)
    for _ in range(3):
        np.testing.assert_allclose(f(a, w, y), logreg(a, w, y), rtol=1e-12, atol=1e-14)
    assert deferred_checks.self_checked(_kernel(f, (a, w, y)))
    a.indices[a.nnz // 3] = a.shape[1] + 100
    with pytest.raises(ValueError):
        f(a, w, y)


def test_spmm_step_deferred_and_refused_when_modified():
    a = _csr(seed=12)
    X = np.random.default_rng(6).random((a.shape[1], 8))
    body = lambda a, X: np.maximum(a @ X, 0.5)      # noqa: E731  (a GCN-like layer: the native SpMM, then glue)
    f = splyce.jit(body, threads=1)
    for _ in range(3):
        np.testing.assert_allclose(f(a, X), body(a, X), rtol=1e-12)
    a.indptr[5] = a.indptr[6] + 1
    with pytest.raises(ValueError):
        f(a, X)


def test_accumulate_and_other_functions_on_the_same_operand():
    a = _csr(seed=13)
    x = np.random.default_rng(7).random(a.shape[1])
    f, g = splyce.jit(pagerank, threads=1), splyce.jit(merged, threads=1)
    out = np.zeros(a.shape[0])
    for _ in range(2):
        f.accumulate(out, a, x)
        np.testing.assert_allclose(g(a, x), merged(a, x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out, 2 * pagerank(a, x), rtol=1e-12)
    a.indices[a.nnz - 1] = -1
    for h in (f, g):
        with pytest.raises(ValueError):
            h(a, x)
    with pytest.raises(ValueError):
        f.accumulate(out, a, x)


def test_loops_and_staged_programs_check_every_call():
    a = _csr(seed=14)
    x = np.random.default_rng(8).random(a.shape[1])

    def jacobi(a, x):
        for _ in range(3):
            x = 0.5 * (a @ x) + 0.25
        return x

    def looped(a, x):
        return splyce.fori_loop(0, 3, lambda i, v: 0.5 * (a @ v) + 0.25, x)

    for body in (jacobi, looped):
        f = splyce.jit(body, threads=1)
        for _ in range(3):
            np.testing.assert_allclose(f(a, x), jacobi(a, x), rtol=1e-12)
    b = a.copy()
    f = splyce.jit(looped, threads=1)
    f(b, x)
    b.indices[3] = b.shape[1] + 2
    with pytest.raises(ValueError):
        f(b, x)
