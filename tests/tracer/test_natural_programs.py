"""Algorithm bodies written the way their users write them (NumPy / scipy style, on a SparseTensor or a scipy
array and dense NumPy arrays), run under ``@splyce.jit`` and checked against NumPy / scipy on the same
operands: PageRank, power iteration, Jacobi and CG steps, label propagation, a GCN layer with captured
weights, a logistic-regression gradient, row normalisation, cosine and Jaccard similarity, k-hop counts,
triangle counting. docs/tracing.md lists what traces and what raises."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.numpy as snp
from splyce.tracer.tracer import TraceError

N = 60


def _graph(n=N, density=0.08, seed=1, symmetric=False):
    a = sps.random_array((n, n), density=density, format="csr", rng=seed)
    a.data[:] = 1.0
    if symmetric:
        a = ((a + a.T) > 0).astype(np.float64).tocsr()
        a.setdiag(0)
        a.eliminate_zeros()
    return sps.csr_array(a)


def _dense(x):
    return x.toarray() if sps.issparse(x) else np.asarray(x)


RNG = np.random.default_rng(7)
A = _graph()
X0 = RNG.random(N)


def test_pagerank_step_and_iteration():
    out_degree = np.asarray(A.sum(axis=0)).ravel()
    P = sps.csr_array(A.multiply(1.0 / np.maximum(out_degree, 1)[None, :]))   # column-stochastic

    @splyce.jit
    def step(p, x):
        return 0.85 * (p @ x) + 0.15 / N

    x = np.full(N, 1.0 / N)
    want = x.copy()
    for _ in range(20):
        x = step(P, x)
        want = 0.85 * (P @ want) + 0.15 / N
    np.testing.assert_allclose(x, want, rtol=1e-12)
    # one kernel for the 20 calls: the native SpMV and its glue in NumPy's bits (runtime/glue.py), nothing compiled
    assert step.cache_info().misses == 1 and step.cache_info().compiles == 0
    # the dense glue is one elementwise op after the product (the drop-in's SpMV before the kernel, the glue
    # written over its array)
    plan = step.lower(P, x).as_text("plan")
    assert plan.count(" = native matmul(") == 1 and plan.count(" = ewise[") == 1, plan
    assert " = contract[" not in plan and "written over" in plan, plan


def test_sum_of_products_starts_from_zero():
    f = splyce.jit(lambda a, x: sum(a @ x for _ in range(3)))
    np.testing.assert_allclose(f(A, X0), 3 * (A @ X0))


def test_power_iteration_step():
    @splyce.jit
    def step(a, x):
        y = a @ x
        return y / np.linalg.norm(y), x @ y

    y, rayleigh = step(A, X0)
    ref = A @ X0
    np.testing.assert_allclose(y, ref / np.linalg.norm(ref))
    np.testing.assert_allclose(rayleigh, X0 @ ref)


def _diagonally_dominant(n=N, seed=3):
    a = sps.random_array((n, n), density=0.1, format="csr", rng=seed)
    return sps.csr_array(a + sps.diags_array(np.asarray(abs(a).sum(axis=1)).ravel() + 1.0))


def test_jacobi_step():
    a = _diagonally_dominant()
    b = RNG.random(N)

    @splyce.jit
    def jacobi(a, b, x):
        d = a.diagonal()
        return x + (b - a @ x) / d

    x, want = np.zeros(N), np.zeros(N)
    for _ in range(60):
        x = jacobi(a, b, x)
        want = want + (b - a @ want) / a.diagonal()
    np.testing.assert_allclose(x, want, rtol=1e-12)
    assert np.linalg.norm(a @ x - b) < 1e-3 * np.linalg.norm(b)


def test_conjugate_gradient_step():
    m = _diagonally_dominant()
    spd = sps.csr_array(m + m.T)
    b = RNG.random(N)

    @splyce.jit
    def cg_step(a, x, r, p):
        ap = a @ p
        rr = r @ r
        alpha = rr / (p @ ap)
        x = x + alpha * p
        r_new = r - alpha * ap
        beta = (r_new @ r_new) / rr
        return x, r_new, r_new + beta * p

    x, r = np.zeros(N), b.copy()
    p = r.copy()
    wx, wr, wp = x.copy(), r.copy(), p.copy()
    for _ in range(8):
        x, r, p = cg_step(spd, x, r, p)
        ap = spd @ wp
        alpha = (wr @ wr) / (wp @ ap)
        wx, wr_new = wx + alpha * wp, wr - alpha * ap
        wp = wr_new + (wr_new @ wr_new) / (wr @ wr) * wp
        wr = wr_new
    np.testing.assert_allclose(x, wx, rtol=1e-9)
    np.testing.assert_allclose(r, wr, rtol=1e-9, atol=1e-12)
    assert cg_step.cache_info().compiles == 1


def test_label_propagation():
    a = _graph(symmetric=True)
    classes = 3
    labeled = RNG.random(N) < 0.2
    Y = np.zeros((N, classes))
    Y[labeled, RNG.integers(0, classes, labeled.sum())] = 1.0

    @splyce.jit
    def propagate(a, F, Y, labeled):
        degree = a.sum(axis=1)
        spread = (a * (1.0 / np.maximum(degree, 1.0))[:, None]) @ F    # row-normalised, kept sparse
        return np.where(labeled[:, None], Y, spread)

    F, want = Y.copy(), Y.copy()
    d = np.maximum(a.toarray().sum(axis=1), 1.0)
    for _ in range(5):
        F = propagate(a, F, Y, labeled)
        want = np.where(labeled[:, None], Y, (a.toarray() / d[:, None]) @ want)
    np.testing.assert_allclose(F, want, rtol=1e-12)
    # the labels: the class of largest score per vertex (the first one on ties, as NumPy's)
    labels = splyce.jit(lambda a, F: (a @ F).argmax(axis=1))
    np.testing.assert_array_equal(labels(a, F), (a.toarray() @ F).argmax(axis=1))


WEIGHTS = RNG.random((8, 4)) - 0.5          # module globals read by the jitted function: captured constants
FEATURES = RNG.random((N, 8))


def test_gcn_layer_with_captured_features_and_weights():
    global WEIGHTS

    @splyce.jit
    def layer(a):
        return np.maximum(a @ (FEATURES @ WEIGHTS), 0)

    np.testing.assert_allclose(layer(A), np.maximum(A @ (FEATURES @ WEIGHTS), 0))
    # new values of the same type, shape and format: the same kernel, the new values
    saved = WEIGHTS
    try:
        WEIGHTS = RNG.random((8, 4)) - 0.5
        np.testing.assert_allclose(layer(A), np.maximum(A @ (FEATURES @ WEIGHTS), 0))
        assert layer.cache_info().misses == 1
        WEIGHTS = RNG.random((8, 6))           # another shape: a new kernel
        np.testing.assert_allclose(layer(A), np.maximum(A @ (FEATURES @ WEIGHTS), 0))
        assert layer.cache_info().misses == 2
    finally:
        WEIGHTS = saved
    trace = layer.lower(A).as_text("trace")
    plan = layer.lower(A).as_text("plan")
    assert "host einsum('ik,kj->ij'" in plan        # X @ W by NumPy's BLAS before the kernel, on every call
    header = trace.splitlines()[0]
    assert ": 60x8xfloat64" in header and ": 8x4xfloat64" in header   # hidden arguments, not baked in
    assert "contract[ik,kj->ij](%arg" in trace    # FEATURES @ WEIGHTS is traced, not computed once by NumPy


def test_closure_constants_sparse_and_scipy():
    b_scipy = _graph(seed=5)
    b_tensor = splyce.asarray(b_scipy)

    def make(b):
        return splyce.jit(lambda a: a @ b + b @ a)

    want = (A @ b_scipy + b_scipy @ A).toarray()
    np.testing.assert_allclose(_dense(make(b_tensor)(A)), want)
    np.testing.assert_allclose(_dense(make(b_scipy)(A)), want)

    holder = [RNG.random(N)]
    scale = holder[0]
    f = splyce.jit(lambda a: a @ scale)
    np.testing.assert_allclose(f(A), A @ scale)
    scale[:] = RNG.random(N)                    # changed in place: read again on the next call
    np.testing.assert_allclose(f(A), A @ scale)
    assert f.cache_info().misses == 1           # one kernel (here the native SpMV: runtime/library.py)


def test_constants_built_inside_the_function_are_frozen():
    f = splyce.jit(lambda a: a @ np.ones(a.shape[1]) + np.arange(a.shape[0]))
    np.testing.assert_allclose(f(A), A @ np.ones(N) + np.arange(N))
    np.testing.assert_allclose(f(A), A @ np.ones(N) + np.arange(N))
    assert f.cache_info().compiles == 1
    # one product of an argument and a frozen constant: the native SpMV (runtime/library.py) reads it too
    g = splyce.jit(lambda a: a @ np.full(a.shape[1], 2.0))
    np.testing.assert_allclose(g(A), A @ np.full(N, 2.0))
    np.testing.assert_allclose(g(A), A @ np.full(N, 2.0))


def test_logistic_regression_gradient():
    Xs = sps.random_array((80, 20), density=0.15, format="csr", rng=11)
    w = RNG.random(20) - 0.5
    labels = (RNG.random(80) < 0.5).astype(np.float64)

    @splyce.jit
    def gradient(X, w, y):
        return X.T @ (snp.sigmoid(X @ w) - y)

    want = Xs.T @ (1 / (1 + np.exp(-(Xs @ w))) - labels)
    np.testing.assert_allclose(gradient(Xs, w, labels), want, rtol=1e-12)
    # the NumPy way, written with np.exp
    g2 = splyce.jit(lambda X, w, y: X.T @ (1 / (1 + np.exp(-(X @ w))) - y))
    np.testing.assert_allclose(g2(Xs, w, labels), want, rtol=1e-12)


def test_row_normalisation_keeps_the_pattern():
    @splyce.jit
    def normalise(a):
        return a.multiply(1.0 / np.maximum(a.sum(axis=1), 1.0)[:, None])

    got = normalise(A)
    assert sps.issparse(got) and got.nnz == A.nnz
    want = A.multiply(1.0 / np.maximum(A.sum(axis=1), 1.0)[:, None])
    np.testing.assert_allclose(got.toarray(), want.toarray())


def test_cosine_similarity():
    a = sps.random_array((40, 30), density=0.2, format="csr", rng=13)

    @splyce.jit
    def cosine(a):
        norms = np.sqrt(a.multiply(a).sum(axis=1))
        return (a @ a.T) / np.maximum(norms[:, None] * norms[None, :], 1e-12)

    d = a.toarray()
    norms = np.sqrt((d * d).sum(axis=1))
    want = (d @ d.T) / np.maximum(norms[:, None] * norms[None, :], 1e-12)
    got = cosine(a)            # sparse / dense is sparse, in the product's pattern, as scipy's
    assert isinstance(got, sps.sparray)
    np.testing.assert_allclose(got.toarray(), want, rtol=1e-12, atol=1e-15)


def test_jaccard_similarity():
    a = _graph(symmetric=True)

    @splyce.jit
    def jaccard(a):
        b = (a != 0).astype(np.float64)
        common = (b @ b.T).toarray()
        degree = b.sum(axis=1)
        union = degree[:, None] + degree[None, :] - common
        return np.where(union > 0, common / np.maximum(union, 1.0), 0.0)

    b = (a.toarray() != 0).astype(float)
    common = b @ b.T
    union = b.sum(axis=1)[:, None] + b.sum(axis=1)[None, :] - common
    want = np.where(union > 0, common / np.maximum(union, 1.0), 0.0)
    np.testing.assert_allclose(jaccard(a), want)


def test_k_hop_counts():
    ones = np.ones(N)
    two = splyce.jit(lambda a, x: a @ (a @ x))
    three = splyce.jit(lambda a: ((a @ a) @ a).sum(axis=1))
    reach = splyce.jit(lambda a: (a @ a + a) != 0)
    d = A.toarray()
    np.testing.assert_allclose(two(A, ones), d @ (d @ ones))
    np.testing.assert_allclose(three(A), (d @ d @ d).sum(axis=1))
    np.testing.assert_array_equal(_dense(reach(A)), (d @ d + d) != 0)


def test_triangle_counting():
    a = _graph(n=80, density=0.1, symmetric=True)
    lower = sps.csr_array(sps.tril(a, k=-1))
    count = splyce.jit(lambda l: ((l @ l) * l).sum())
    sym = splyce.jit(lambda a: (a @ a * a).sum() / 6)
    d = a.toarray()
    want = np.trace(d @ d @ d) / 6
    assert count(lower) == want
    assert sym(a) == want


# -- what dense values do and what sparse ones refuse ----------------------------------------------------------

DENSE_CASES = {
    "broadcast column": lambda a, x: (a @ x)[:, None] - x[None, :],
    "compare and count": lambda a, x: ((a @ x) > 0.5).sum(),
    "where scalar": lambda a, x: np.where(x > 0.5, a @ x, -1.0),
    "clip": lambda a, x: np.clip(a @ x, 0.1, 0.5),
    "unary": lambda a, x: np.log1p(np.abs(np.tanh(a @ x))) + np.sign(x - 0.5),
    "power": lambda a, x: (a @ x) ** 0.5 + x ** -1 + 2.0 ** x + x ** 2.5,
    "reverse slice": lambda a, x: x[::-1] * x[::2].sum() + x[-1],
    "ellipsis": lambda a, x: x[..., None][:, 0] + (a @ x)[...],
    "mean": lambda a, x: (a @ x).mean() + np.mean(x),
    "max axis": lambda a, x: (a @ np.ones((N, 3))).max(axis=1),
    "rsub rdiv": lambda a, x: 1 - (2 / (x + 1)),
    "logic": lambda a, x: ((x > 0.2) & (x < 0.8)) | ~(x > 0.1),
    "isfinite": lambda a, x: np.isfinite(np.log(x - 0.5)),
    "astype int": lambda a, x: (x * 10).astype(np.int64) + 1,
    "np.dot": lambda a, x: np.dot(a @ x, x),
    "outer": lambda a, x: np.outer(x, x) * 2,
    "diagonal dense": lambda a, x: np.diagonal(np.outer(x, x)) - x * x,
    "0-d scaled": lambda a, x: x.sum() * 3.0 + (a @ x).sum() * -0.5,
    "numpy functions": lambda a, x: (np.sum(np.outer(x, x), axis=0, keepdims=True) + np.linalg.norm(x)
                                     + np.max(np.outer(x, x), axis=1)[None, :] + np.transpose(np.outer(x, x))[0]
                                     + np.einsum("i,i->", x, x) + np.trace(np.outer(x, x))),
    "prefix slice": lambda a, x: x[:3] + (a @ x)[-3:],
    "argmax / argmin": lambda a, x: (np.outer(x, np.round(x * 3)).argmax(axis=1) + np.argmin(np.log(x - 0.3))
                                     + np.round(np.outer(x, x) * 2).argmin(axis=0, keepdims=True)),
    "any all count": lambda a, x: (np.any(x > 0.9) & (x > 0).all() & ~np.all(np.outer(x, x) > 0.5, axis=0)
                                   ) * (np.count_nonzero(a @ x) + (np.outer(x, x) > 0.25).sum(axis=1)),
}


@pytest.mark.parametrize("case", list(DENSE_CASES), ids=list(DENSE_CASES))
def test_dense_values_take_numpy_semantics(case):
    fun = DENSE_CASES[case]
    with np.errstate(all="ignore"):
        want = fun(A.toarray(), X0)
        got = splyce.jit(fun)(A, X0)
    got = _dense(got)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)


SPARSE_KEEPS = {   # results that stay sparse, as scipy's
    "a != 0": (lambda a: a != 0, lambda d: d != 0),
    "a > 0.5": (lambda a: a > 0.5, lambda d: d > 0.5),
    "maximum(a, 0)": (lambda a: np.maximum(a - a.T, 0), lambda d: np.maximum(d - d.T, 0)),
    "sqrt": (lambda a: np.sqrt(a), np.sqrt),
    "row scaling": (lambda a: a * np.arange(1.0, N + 1)[:, None], lambda d: d * np.arange(1.0, N + 1)[:, None]),
    "column scaling": (lambda a: a * np.arange(1.0, N + 1)[None, :], lambda d: d * np.arange(1.0, N + 1)[None, :]),
    "a + 0": (lambda a: a + 0, lambda d: d + 0),
    "a / a.sum()": (lambda a: a / a.sum(), lambda d: d / d.sum()),
    "a ** 1.5": (lambda a: a ** 1.5, lambda d: d ** 1.5),
}


def test_counts_of_a_sparse_tensor():
    f = splyce.jit(lambda a: (np.count_nonzero(a), a.any(axis=1), (a > 0.5).sum(axis=0)))
    count, rows, columns = f(A)
    d = A.toarray()
    assert count == np.count_nonzero(d)
    np.testing.assert_array_equal(rows, d.any(axis=1))
    np.testing.assert_array_equal(columns, (d > 0.5).sum(axis=0))


@pytest.mark.parametrize("case", list(SPARSE_KEEPS), ids=list(SPARSE_KEEPS))
def test_sparse_results_keep_the_pattern(case):
    fun, ref = SPARSE_KEEPS[case]
    got = splyce.jit(fun)(A)
    assert sps.issparse(got)
    np.testing.assert_allclose(got.toarray(), ref(A.toarray()))


def test_sparse_over_dense_is_scipys_pattern_product():
    """``a / d`` of a dense ``d`` is scipy's ``a.multiply(1 / d)``: sparse, in ``a``'s pattern, bit for bit (an
    implicit zero stays zero where ``d`` is 0)."""
    d = X0[: A.shape[1]].copy()
    d[1] = 0.0
    with np.errstate(divide="ignore"):
        want = sps.csr_array(A) / d
    got = splyce.jit(lambda a, d: a / d)(A, d)
    assert sps.issparse(got) and got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())


REFUSED = {   # (function of a sparse a and a dense x, the exception, words of its message)
    "a + 1": (lambda a, x: a + 1, TraceError, "a.todense() + c"),
    "a - 2.0": (lambda a, x: a - 2.0, TraceError, "a.todense() - c"),
    "x / a": (lambda a, x: x / a, TraceError, "b.todense()"),
    "exp(a)": (lambda a, x: np.exp(a), TraceError, "exp(a.todense())"),
    "a >= 0": (lambda a, x: a >= 0, TraceError, "a.todense()"),
    "mask index": (lambda a, x: x[x > 0.5], TraceError, "where(mask, x, 0)"),
    "sparse index": (lambda a, x: a[0], TraceError, "write a[0:1] (a sparse matrix of one row)"),
    "np.unique": (lambda a, x: np.unique(x * 2), TypeError, "numpy.unique is not supported"),   # np.sort runs between kernels
    "np.cumsum ufunc method": (lambda a, x: np.add.accumulate(x * 2), TypeError, "numpy.add.accumulate"),
    "float()": (lambda a, x: float((a @ x).sum()), TraceError, "no value at trace time"),
    "where sparse": (lambda a, x: np.where(a != 0, a, 1.0), TraceError, "c.todense()"),
    "broadcast sparse": (lambda a, x: a + x, TraceError, "a sparse operand cannot be broadcast"),
    "reshape": (lambda a, x: np.outer(x, x).reshape(-1), TraceError, "only reshapes that add or remove axes"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_refusals_say_what_to_write(case):
    fun, error, words = REFUSED[case]
    f = splyce.jit(fun)
    with pytest.raises(error) as info:
        f(A, X0)
    assert words in str(info.value)
    assert f.cache_info().compiles == 0


def test_todense_then_dense_rules():
    f = splyce.jit(lambda a: a.todense() + 1)
    np.testing.assert_allclose(f(A), A.toarray() + 1)


def test_snp_is_numpy_on_concrete_values():
    np.testing.assert_array_equal(snp.maximum(np.arange(3) - 1, 0), [0, 0, 1])
    np.testing.assert_allclose(snp.sigmoid(np.zeros(2)), [0.5, 0.5])
    f = splyce.jit(lambda a, x: snp.relu(snp.tanh(a @ x) - 0.3) + snp.linalg.norm(x))
    np.testing.assert_allclose(f(A, X0), np.maximum(np.tanh(A @ X0) - 0.3, 0) + np.linalg.norm(X0))


def test_dense_glue_fuses_into_one_kernel():
    f = splyce.jit(lambda a, x: np.maximum(0.85 * (a @ x) + 0.15 / N, 0) * x - np.exp(-x))
    plan = f.lower(A, X0).as_text("plan")
    assert plan.count(" = native matmul(") + plan.count(" = contract[") == 1 and plan.count(" = ewise[") == 1, plan
    np.testing.assert_allclose(f(A, X0), np.maximum(0.85 * (A @ X0) + 0.15 / N, 0) * X0 - np.exp(-X0))


DTYPE_CASES = {   # NumPy's dtypes, weak Python scalars included (NEP 50)
    "float32 times a float": (lambda x32, i, m: x32 * 2.5, ),
    "exp of float32": (lambda x32, i, m: np.exp(x32), ),
    "int over int": (lambda x32, i, m: i / 2, ),
    "int compared with a float": (lambda x32, i, m: i > 1.5, ),
    "where of int and float": (lambda x32, i, m: np.where(m, i, 0.5), ),
    "bool logic": (lambda x32, i, m: m & (i > 0) | ~m, ),
    "int power": (lambda x32, i, m: i ** 3 + i ** 0, ),
    "float32 sum": (lambda x32, i, m: x32.sum() + x32[:, None].mean(axis=0), ),
    "astype": (lambda x32, i, m: x32.astype(np.int32) + m.astype(np.int64), ),
    "int sign and abs": (lambda x32, i, m: np.sign(i) * abs(i), ),
}


@pytest.mark.parametrize("case", list(DTYPE_CASES), ids=list(DTYPE_CASES))
def test_dense_dtypes_follow_numpy(case):
    (fun,) = DTYPE_CASES[case]
    x32 = (RNG.random(N) * 4 - 2).astype(np.float32)
    ints = RNG.integers(-3, 4, N)
    mask = RNG.random(N) < 0.5
    want = fun(x32, ints, mask)
    got = splyce.jit(fun)(x32, ints, mask)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_nan_hiding_ops_are_planned_without_scattering():
    # a sparse vector against long rows is scattered (docs/planner.md); a comparison could hide the NaN that
    # a scattered zero makes, so that trace keeps every operand sparse
    a = sps.random_array((300, 300), density=0.5, format="csr", rng=1)
    v = splyce.asarray(sps.random_array((300, 1), density=0.8, format="csr", rng=2).toarray().ravel(),
                       format=splyce.SPARSE_VECTOR)
    product = splyce.jit(lambda a, v: a @ v).lower(a, v).as_text("plan")
    compared = splyce.jit(lambda a, v: (a @ v) > 0).lower(a, v).as_text("plan")
    assert "scattered into a dense array" in product
    assert "scattered into a dense array" not in compared


@pytest.mark.parametrize("options", [dict(threads=2), dict(vectorize=False)], ids=["threads=2", "vectorize=False"])
def test_programs_under_options(options):
    P = sps.csr_array(A.multiply(1.0 / np.maximum(np.asarray(A.sum(axis=0)).ravel(), 1.0)[None, :]))
    step = splyce.jit(lambda p, x: np.maximum(0.85 * (p @ x) + 0.15 / N, 1e-3), **options)
    gcn = splyce.jit(lambda a: np.maximum(a @ (FEATURES @ WEIGHTS), 0), **options)
    norm = splyce.jit(lambda a: a * (1.0 / np.maximum(a.sum(axis=1), 1.0))[:, None], **options)
    np.testing.assert_allclose(step(P, X0), np.maximum(0.85 * (P @ X0) + 0.15 / N, 1e-3))
    np.testing.assert_allclose(gcn(A), np.maximum(A @ (FEATURES @ WEIGHTS), 0))
    np.testing.assert_allclose(norm(A).toarray(), (A.toarray() / np.maximum(A.toarray().sum(axis=1), 1.0)[:, None]))


UNARY = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh",
         "arctan", "arcsinh", "floor", "ceil", "trunc", "rint", "sign", "reciprocal", "isnan", "isinf", "isfinite",
         "square", "negative", "positive", "absolute", "conj"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "equal", "not_equal", "less",
          "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("name", UNARY)
def test_every_unary_function_against_numpy(name):
    # each lowering rule of lowering/dense.py, the NumPy way and the splyce.numpy way, with NaN, Inf and -0.0
    x = np.array([0.5, 1.5, 2.5, -0.0, 3.25, 7.0, np.nan, np.inf, -np.inf, 1e-3])
    x = np.abs(x) if name in ("log", "log2", "log10", "sqrt") else x
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
        got = splyce.jit(lambda x: getattr(np, name)(x * 1.0))(x)
        via_snp = splyce.jit(lambda x: getattr(snp, name)(x * 1.0))(x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-14, equal_nan=True)
    np.testing.assert_allclose(via_snp, want, rtol=1e-14, equal_nan=True)
    # a dense result's zeros are +0.0 (it accumulates into a zeroed buffer: docs/tracing.md); within the
    # kernel -0.0 keeps its sign, as 1 / f(x) shows
    with np.errstate(all="ignore"):
        inverse = splyce.jit(lambda x: 1.0 / getattr(np, name)(x * 1.0))(x)
        np.testing.assert_allclose(inverse, 1.0 / want, rtol=1e-14, equal_nan=True)


@pytest.mark.parametrize("name", BINARY)
def test_every_binary_function_against_numpy(name):
    x = np.array([0.5, 1.5, -2.5, 0.0, 3.0, np.nan, np.inf, 2.0])
    y = np.array([1.0, -1.5, 2.5, 0.0, 3.0, 1.0, 2.0, np.nan])
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, y[:, None])               # broadcast to 8 x 8
        got = splyce.jit(lambda x, y: getattr(np, name)(x, y[:, None]))(x, y)
        scalar_want = getattr(np, name)(x, 2.0)
        scalar_got = splyce.jit(lambda x: getattr(snp, name)(x, 2.0))(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-14, equal_nan=True)
    np.testing.assert_allclose(scalar_got, scalar_want, rtol=1e-14, equal_nan=True)
