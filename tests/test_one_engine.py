"""One engine: a jitted function that is one drop-in op runs the drop-in's native kernel (runtime/library.py),
chosen by the drop-in's own formulation rules, with the MLIR kernel's results bit for bit."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel


def _matrix(rng, n, density, special=True, dtype=np.float64):
    a = sps.random_array((n, n), density=density, format="csr", rng=rng, dtype=np.float64)
    if special and a.nnz:
        k = max(1, a.nnz // 10)
        at = rng.choice(a.nnz, size=min(a.nnz, 3 * k), replace=False)
        a.data[at[:k]] = 0.0                       # explicit zeros
        a.data[at[k:2 * k]] = np.nan
        a.data[at[2 * k:]] = rng.choice([np.inf, -np.inf, -0.0], size=len(at[2 * k:]))
    return splyce.asarray(a.astype(dtype))


def _same(x, y):
    if hasattr(x, "indptr"):
        assert type(x) is type(y) and x.indices.dtype == y.indices.dtype and x.indptr.dtype == y.indptr.dtype
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        x, y = x.data, y.data                   # and the stored values, bit for bit (-0.0 is not +0.0)
    x, y = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":                     # NaN where NaN (its sign bit aside), every other value's bits
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


CASES = {
    "spmv": (lambda a, b, x, X, v: a @ x, None),
    "spmm": (lambda a, b, x, X, v: a @ X, None),
    "spmspv": (lambda a, b, x, X, v: a @ v, None),
    "hadamard": (lambda a, b, x, X, v: a * b, None),
    "add": (lambda a, b, x, X, v: a + b, None),
    "subtract": (lambda a, b, x, X, v: a - b, None),
    "spgemm": (lambda a, b, x, X, v: a @ b, "sparse"),
    "triangles": (lambda a, b, x, X, v: ((a @ a) * a).sum(), None),
}


# the ops whose native kernel gives the MLIR kernel's results on every input (bits equal but for a NaN's sign):
# they run natively; the others keep the sparsifier's semantics (stored zeros, NaN times a missing entry) that
# the drop-ins' scipy-rule kernels do not have
NATIVE = {"spmv", "spmm", "spmspv", "spgemm", "triangles"}
# elementwise ops of two CSRs: native when both hold the same positions (checked per call), else the MLIR kernel
GUARDED = {"hadamard", "add", "subtract"}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_library_kernel_is_the_mlir_kernel_bit_for_bit(name, dtype, seed):
    rng = np.random.default_rng(seed)
    n = (57, 57, 3, 1)[seed]        # two values per shape (the MLIR kernels compile once per shape)
    special = np.issubdtype(dtype, np.floating)
    a, b = _matrix(rng, n, 0.08, special, dtype), _matrix(rng, n, 0.1, special, dtype)
    x = rng.standard_normal(n).astype(dtype)
    X = rng.standard_normal((n, 5)).astype(dtype)
    v = splyce.asarray(sps.coo_array(np.where(rng.random(n) < 0.2, rng.standard_normal(n), 0).astype(dtype)))
    body, out_format = CASES[name]
    fast = splyce.jit(body, out_format=out_format)
    mlir = splyce.jit(body, out_format=out_format, library=False)
    args = (a, b, x, X, v)
    _same(fast(*args), mlir(*args))
    kernel = fast.kernel_for(*args)[0]
    native = isinstance(kernel, LibraryKernel)
    # a plan that converts an operand first (a short sparse vector scattered dense) stays on the MLIR kernel
    assert native == (name in NATIVE | GUARDED and not kernel.plan.needs_conversion)
    if native and name in NATIVE:
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0   # no MLIR kernel built


def test_the_plan_says_which_kernel_runs_and_matches_the_dropin():
    a = splyce.asarray(sps.random_array((50, 50), density=0.1, format="csr", rng=1))
    x = np.ones(50)
    text = splyce.jit(lambda a, x: a @ x).lower(a, x).as_text("plan")
    assert "runs on the native kernel library: matmul as formulation 'csr-x-dense'" in text
    from splyce.dropin import OperandInfo, choose_matmul_formulation

    assert choose_matmul_formulation(OperandInfo.of(a), OperandInfo.of(x)).value == "csr-x-dense"
    off = splyce.jit(lambda a, x: a @ x, library=False).lower(a, x).as_text("plan")
    assert "native kernel library" not in off


def test_what_stays_on_the_mlir_kernel():
    a = splyce.asarray(sps.random_array((40, 40), density=0.1, format="csr", rng=2))
    kinds = {
        "baseline": splyce.jit(lambda a: a * a, vectorize=False),
        "pinned": splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, order="ikj"), out_format="sparse"),
        "two ops": splyce.jit(lambda a: (a * a) + a),
        "complex": splyce.jit(lambda a, x: a @ x),
        "mixed dtypes": splyce.jit(lambda a, x: a @ x),
        "baseline spmv": splyce.jit(lambda a, x: a @ x, vectorize=False),
    }
    args = {"baseline": (a,), "pinned": (a, a), "two ops": (a,),
            "complex": (splyce.asarray(sps.csr_array(a.to_scipy().astype(np.complex128))), np.ones(40, complex)),
            "mixed dtypes": (a, np.ones(40, np.float32)), "baseline spmv": (a, np.ones(40))}
    for name, f in kinds.items():
        assert not isinstance(f.kernel_for(*args[name])[0], LibraryKernel), name


def test_accumulate_builds_the_mlir_kernel_on_demand():
    a = splyce.asarray(sps.random_array((30, 30), density=0.2, format="csr", rng=3))
    x = np.arange(30.0)
    f = splyce.jit(lambda a, x: a @ x)
    out = np.ones(30)
    f.accumulate(out, a, x)
    np.testing.assert_array_equal(out, 1 + a.to_scipy() @ x)
    assert f.cache_info().compiles + f.cache_info().disk_hits == 1


@pytest.mark.parametrize("op", ["multiply", "add", "subtract"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_same_positions_run_natively_with_every_position_kept(op, dtype):
    """A structurally symmetric A with A.T, or A with new values: one native pass, every position kept (zero
    results too, as the sparsifier keeps them), the MLIR kernel's result; other pairs run the MLIR kernel."""
    rng = np.random.default_rng(5)
    a = _matrix(rng, 64, 0.1, np.issubdtype(dtype, np.floating), dtype)
    s = a.to_scipy()
    b = splyce.asarray(sps.csr_array((rng.permutation(s.data), s.indices.copy(), s.indptr.copy()), shape=s.shape))
    body = {"multiply": lambda a, b: a * b, "add": lambda a, b: a + b, "subtract": lambda a, b: a - b}[op]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    _same(fast(a, b), mlir(a, b))
    _same(fast(a, a), mlir(a, a))                   # a - a: every position kept, zeros stored
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0
    other = _matrix(rng, 64, 0.1, False, dtype)      # other positions: the MLIR kernel, built on demand
    _same(fast(a, other), mlir(a, other))
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 1
    assert "when the values allow" in fast.lower(a, b).as_text("plan")
