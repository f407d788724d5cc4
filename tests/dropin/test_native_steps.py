"""One engine inside a program of several ops: an intermediate SpMM (or an SpMV on rows of a few entries) over kernel inputs runs the drop-in's native
kernel before the kernel (runtime/library.py, ``native_steps``; planner/plan.py, ``NativeStep``), with the
results of the plan that keeps it in the MLIR kernel bit for bit, and the plan's text says so."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import OperandInfo, choose_matmul_formulation


def _matrix(rng, n, density, dtype=np.float64, special=True):
    a = sps.random_array((n, n), density=density, format="csr", rng=rng, dtype=np.float64)
    a.indptr[n // 2:] = a.indptr[n // 2]          # empty rows from the middle on: entries dropped below
    a = sps.csr_array((a.data[:a.indptr[-1]], a.indices[:a.indptr[-1]], a.indptr), shape=(n, n))
    if special and a.nnz and np.issubdtype(dtype, np.floating):
        k = max(1, a.nnz // 8)
        at = rng.choice(a.nnz, size=min(a.nnz, 3 * k), replace=False)
        a.data[at[:k]] = 0.0
        a.data[at[k:2 * k]] = np.nan
        a.data[at[2 * k:]] = rng.choice([np.inf, -np.inf, -0.0], size=len(at[2 * k:]))
    return splyce.asarray(a.astype(dtype))


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":                   # NaN where NaN (its sign aside), every other value's bits
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


W = np.linspace(-1.0, 1.0, 6 * 16).reshape(6, 16)

PROGRAMS = {
    "gcn": (lambda a, x, X: np.maximum(a @ X, 0), True),
    "spmm glue": (lambda a, x, X: (a @ X) * 2.0 + x[:, None], True),
    "two spmms": (lambda a, x, X: a @ X - a.T.T @ (X * 0.5), True),
    "spmm then dense": (lambda a, x, X: np.tanh(a @ X) @ np.ones(16, X.dtype), True),
    # an SpMV read by elementwise glue and full reductions only is a step on any rows (the glue written over
    # its array); read by another contraction it stays in the MLIR kernel on rows of 6-13 entries (rows of a
    # few: below)
    "spmv glue": (lambda a, x, X: 0.85 * (a @ x) + 0.15, True),
    "spmv twice": (lambda a, x, X: a @ x + a @ x * 2.0, True),
    "spmv then transposed spmv": (lambda a, x, X: a.T @ (a @ x), False),
    "spmv read by glue and a dot": (lambda a, x, X: (a @ x) * 2.0 + (x @ (a @ x)), True),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_native_step_gives_the_mlir_kernels_results(name, dtype, seed):
    rng = np.random.default_rng(seed)
    n = (41, 90)[seed]
    a = _matrix(rng, n, 0.15, dtype)
    x = rng.standard_normal(n).astype(dtype)
    X = rng.standard_normal((n, 16)).astype(dtype)
    body, native = PROGRAMS[name]
    fast = splyce.jit(body)
    text = fast.lower(a, x, X).as_text("plan")
    assert ("= native matmul(" in text) == native, text
    for f in (splyce.jit(body, library=False), splyce.jit(body, vectorize=False)):
        assert "= native matmul(" not in f.lower(a, x, X).as_text("plan")
        with np.errstate(all="ignore"):
            _same(fast(a, x, X), f(a, x, X))


def _short_rows(rng, n, dtype=np.float64):
    """A road-network-like CSR: 0-5 entries a row (2.5 on average), NaN / Inf / -0.0 among the values."""
    lengths = rng.integers(0, 6, size=n)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]).astype(np.int32)
    data = rng.standard_normal(indptr[-1])
    at = rng.choice(len(data), size=30, replace=False)
    data[at] = [np.nan, np.inf, -np.inf, -0.0, 0.0] * 6
    return splyce.asarray(sps.csr_array((data.astype(dtype), indices, indptr), shape=(n, n)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_spmv_on_rows_of_a_few_entries_runs_the_flat_kernel(dtype):
    """Rows of 2-3 entries: the MLIR loop nest pays a row's exit per row, the drop-in's flat kernel does not
    (``spmv.goes_flat``, sized past any L2: 200k rows, 6 MB of entries), so the plan takes SpMV out of the
    kernel, with the fused plan's bits."""
    from splyce.native import spmv

    rng = np.random.default_rng(11)
    n = 200_000
    a = _short_rows(rng, n, dtype)
    x = rng.standard_normal(n).astype(dtype)
    # 4-6 MB of entries: past the size from which any CPU's tuning goes flat (at most its L2)
    assert spmv.goes_flat(a.nnz, n, 32, np.dtype(dtype).itemsize)
    body = PROGRAMS["spmv glue"][0]
    fast = splyce.jit(body)
    text = fast.lower(a, x, x[:, None]).as_text("plan")
    assert "%arg3 = native matmul(%arg0, %arg1)" in text and "contract[" not in text.split("return")[0], text
    two = splyce.jit(lambda a, b, x: a @ x + b @ x)
    b = _short_rows(np.random.default_rng(12), n, dtype)
    assert two.lower(a, b, x).as_text("plan").count("native matmul") == 2
    with np.errstate(all="ignore"):
        _same(fast(a, x, x[:, None]), splyce.jit(body, library=False)(a, x, x[:, None]))
        _same(two(a, b, x), splyce.jit(lambda a, b, x: a @ x + b @ x, library=False)(a, b, x))
    # an SpMV over rows of a few entries is not fused into its reader, with or without the library (a rule of
    # the operands, planner/plan.py ``_short_row_spmv``); over vectors this long the dot is a host dot of its
    # own (planner/cuts.py ``host_dots``, a rule of the trace): v @ (a @ v) is the SpMV (native), then NumPy's
    # dot, and the MLIR kernel's and the plain sparsifier's plans are the same SpMV then dot, so the same bits
    quad = splyce.jit(lambda a, v: v @ (a @ v))
    text = quad.lower(a, x).as_text("plan")
    assert "host dot numpy.matmul" in text and "contract[ik,k->i]" in text, text
    finite = splyce.asarray(sps.csr_array((np.nan_to_num(a.values, nan=1.0, posinf=2.0, neginf=-2.0),
                                           a.crd[1], a.pos[1]), shape=a.shape))
    reference = x.astype(np.float64) @ (finite.to_scipy().astype(np.float64) @ x.astype(np.float64))
    np.testing.assert_allclose(quad(finite, x), reference, rtol=1e-3 if dtype == np.float32 else 1e-10)
    for options in ({"library": False}, {"vectorize": False}):
        apart = splyce.jit(lambda a, v: v @ (a @ v), **options)
        text = apart.lower(a, x).as_text("plan")
        assert "host dot numpy.matmul" in text and "contract[ik,k->i" in text, text
        with np.errstate(all="ignore"):
            _same(quad(a, x), apart(a, x))
            _same(quad(finite, x), apart(finite, x))
    # on rows of 6-13 entries an SpMV a contraction reads stays in the kernel while its entries stay in cache
    # (the loop nest is as fast there, a step costs a call), beyond cache it is a step (as fast, and a scipy
    # operand is then checked by the native kernel as it reads it: runtime/deferred_checks.py); one that only
    # glue reads is a step (the glue written over it); a fresh jit: a plan is made for the first call's stored
    # entries and kept for the shape and formats
    wide = splyce.asarray(sps.random_array((n, n), density=8 / n, format="csr", rng=13))
    x64 = x.astype(np.float64)
    normal = splyce.jit(lambda a, v: a.T @ (a @ v))
    assert "%arg2 = native matmul(%arg0, %arg1)" in normal.lower(wide, x64).as_text("plan")
    _same(normal(wide, x64), splyce.jit(lambda a, v: a.T @ (a @ v), library=False)(wide, x64))
    small = splyce.asarray(sps.random_array((3000, 3000), density=8 / 3000, format="csr", rng=13))
    assert "native" not in splyce.jit(lambda a, v: a.T @ (a @ v)).lower(small, x64[:3000]).as_text("plan")
    assert "written over %arg3" in splyce.jit(body).lower(wide, x64, x64[:, None]).as_text("plan")


def test_a_host_product_feeds_the_native_step():
    rng = np.random.default_rng(4)
    a = _matrix(rng, 80, 0.1)
    X = rng.standard_normal((80, 6))

    def gcn(a, X):
        return np.maximum(a @ (X @ W), 0)

    text = splyce.jit(gcn).lower(a, X).as_text("plan")
    assert "host einsum('ik,kj->ij', %arg1, %arg2)" in text and "native matmul(%arg0, %arg3)" in text, text
    with np.errstate(all="ignore"):
        _same(splyce.jit(gcn)(a, X), splyce.jit(gcn, library=False)(a, X))


def test_the_native_step_is_the_dropins_kernel_and_the_one_op_jits():
    rng = np.random.default_rng(5)
    a = _matrix(rng, 60, 0.1, special=False)
    X = rng.standard_normal((60, 16))
    text = splyce.jit(lambda a, X: np.maximum(a @ X, 0)).lower(a, X).as_text("plan")
    formulation = choose_matmul_formulation(OperandInfo.of(a), OperandInfo.of(X)).value
    assert f"%arg2 = native matmul(%arg0, %arg1) as '{formulation}'" in text
    alone = splyce.jit(lambda a, X: a @ X).lower(a, X).as_text("plan")
    assert f"matmul as formulation '{formulation}'" in alone
    assert "contract[" not in text.split("return")[0]           # the product is not a loop nest of the kernel


def test_spmm_beyond_the_register_rows_stays_in_the_mlir_kernel():
    rng = np.random.default_rng(6)
    a = _matrix(rng, 50, 0.1, special=False)
    X = rng.standard_normal((50, 33))
    for body in (lambda a, X: a @ X, lambda a, X: np.maximum(a @ X, 0)):
        f = splyce.jit(body)
        assert "native" not in f.lower(a, X).as_text("plan")
        np.testing.assert_allclose(f(a, X), body(a.to_scipy(), X), rtol=1e-12, atol=1e-12)
    X = rng.standard_normal((50, 32))
    assert "native kernel library" in splyce.jit(lambda a, X: a @ X).lower(a, X).as_text("plan")


def test_native_steps_on_two_threads_accumulate_and_inputs_unchanged():
    rng = np.random.default_rng(7)
    a = _matrix(rng, 300, 0.05, special=False)
    x = rng.standard_normal(300)
    X = rng.standard_normal((300, 16))
    body = PROGRAMS["spmm glue"][0]
    copies = (a.to_scipy().copy(), x.copy(), X.copy())
    one = splyce.jit(body)(a, x, X)
    _same(splyce.jit(body, threads=2)(a, x, X), one)
    np.testing.assert_allclose(one, body(a.to_scipy(), x, X), rtol=1e-12)
    out = np.full((300, 16), 1.5)
    splyce.jit(body).accumulate(out, a, x, X)
    np.testing.assert_allclose(out, 1.5 + one, rtol=1e-12)
    b = a.to_scipy()
    assert (b != copies[0]).nnz == 0 and np.array_equal(x, copies[1]) and np.array_equal(X, copies[2])


def test_scipy_operands_and_narrow_dtypes():
    rng = np.random.default_rng(8)
    a = _matrix(rng, 40, 0.2, special=False).to_scipy()
    X = rng.standard_normal((40, 4))
    f = splyce.jit(lambda a, X: np.tanh(a @ X))
    np.testing.assert_allclose(f(a, X), np.tanh(a @ X), rtol=1e-12)
    ai = sps.csr_array(a.astype(np.int64))
    Xi = np.arange(160, dtype=np.int64).reshape(40, 4)
    g = splyce.jit(lambda a, X: (a @ X) * 3 + 1)
    np.testing.assert_array_equal(g(ai, Xi), (ai @ Xi) * 3 + 1)
    with pytest.raises(ValueError):
        f(sps.csr_array((np.ones(1), np.array([40]), np.array([0, 1] + [1] * 39)), shape=(40, 40)), X)
