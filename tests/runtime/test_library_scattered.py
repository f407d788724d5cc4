"""runtime/library.py: a plan that scatters a sparse x dense (SpMSpV, a short x) runs the drop-in's SpMSpV, the
result of the plan's kept twin, which is what the scattering MLIR kernel gives on every input (its NaN fallback
recomputes with x kept sparse). Bit for bit against ``library=False``, NaN / Inf of A against missing entries
of x included; ``accumulate`` keeps the MLIR kernel's fallback."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel

from test_one_engine import _same


def _operands(rng, n: int, dtype, special: bool):
    a = sps.random_array((n, n), density=0.003, format="csr", rng=rng, dtype=np.float64)
    a.data = rng.standard_normal(a.nnz)
    if special:          # NaN / Inf where x is missing and where it is stored; -0.0 products; a stored zero
        a.data[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan]
    a = sps.csr_array(a.astype(dtype))
    # x stored at the NaN's column (NaN * x reaches the result), missing at the Inf's (the pair skipped)
    idx = np.union1d(rng.choice(n, size=n // 100, replace=False), a.indices[:1])
    idx = idx[idx != a.indices[1]] if a.indices[1] != a.indices[0] else idx
    vals = rng.standard_normal(len(idx))
    vals[:2] = [-0.0, 0.0]
    x = sps.coo_array((vals.astype(dtype), (idx,)), shape=(n,))
    return splyce.asarray(a), splyce.asarray(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("special", [False, True])
def test_scattered_spmspv_runs_the_dropins_kernel_bit_for_bit(dtype, special):
    rng = np.random.default_rng(21)
    a, x = _operands(rng, 2000, dtype, special and np.issubdtype(dtype, np.floating))
    fast = splyce.jit(lambda a, x: a @ x)
    mlir = splyce.jit(lambda a, x: a @ x, library=False)
    got = fast(a, x)
    _same(got, mlir(a, x))
    kernel = fast.kernel_for(a, x)[0]
    assert isinstance(kernel, LibraryKernel) and kernel.scatters and not kernel.plan.scatters
    text = fast.lower(a, x).as_text("plan")
    assert "scattered into a dense array" in text       # the plan scatters; the library keeps x sparse
    assert "formulation 'scatter-vector'" in text and "scattered x kept sparse" in text
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0     # no MLIR kernel built
    if special and np.issubdtype(dtype, np.floating):
        assert np.isnan(got[0]) and np.isnan(got).sum() == 1     # the NaN that meets a stored entry only


@pytest.mark.parametrize("special", [False, True])
def test_scattered_spmspv_whose_kept_twin_restores_a_reads_the_arguments_as_given(special):
    """A long matrix of short rows and an x of a few entries: the kept twin the cost model picks re-stores A as
    CSC (x's entries driving); the native call reads A and x as given instead (the same sums, k ascending),
    bit for bit with the MLIR kernel, NaN / Inf included, and builds no MLIR kernel."""
    rng = np.random.default_rng(25)
    n = 50_000
    a = sps.random_array((n, n), density=2.5 / n, format="csr", rng=rng)
    a.data = rng.standard_normal(a.nnz)
    if special:
        a.data[:4] = [np.nan, np.inf, -np.inf, -0.0]
    idx = np.union1d(rng.choice(n, size=50, replace=False), a.indices[:1])   # x stored at the NaN's column
    x = sps.coo_array((rng.standard_normal(len(idx)), (idx,)), shape=(n,))
    a, x = splyce.asarray(a), splyce.asarray(x)
    fast = splyce.jit(lambda a, x: a @ x)
    mlir = splyce.jit(lambda a, x: a @ x, library=False)
    got = fast(a, x)
    _same(got, mlir(a, x))
    kernel = fast.kernel_for(a, x)[0]
    assert isinstance(kernel, LibraryKernel) and kernel.scatters
    scattering = mlir.kernel_for(a, x)[0].plan
    assert scattering.scatters and scattering.kept().needs_conversion      # the twin re-stores A
    assert kernel.plan.trace is kernel.plan.source and not kernel.plan.needs_conversion
    _same(fast(a, x), got)                                                 # the cached call
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


def test_scattered_spmspv_accumulate_keeps_the_kept_fallback():
    """``accumulate`` runs the scattering MLIR kernel (built on demand), which for non-finite values takes its
    kept twin: a NaN of A against a missing entry of x is skipped, as the native call skips it."""
    rng = np.random.default_rng(22)
    a, x = _operands(rng, 2000, np.float64, True)
    f = splyce.jit(lambda a, x: a @ x)
    out = np.zeros(2000)
    f.accumulate(out, a, x)
    _same(out, f(a, x))


def test_scattering_plans_of_other_ops_stay_on_the_mlir_kernel():
    """Only SpMSpV's kept twin is taken: a dense x (no scatter), and sparse-dense products that scatter, keep
    their rules."""
    rng = np.random.default_rng(23)
    a, x = _operands(rng, 2000, np.float64, False)
    f = splyce.jit(lambda a, x: a @ x)
    assert isinstance(f.kernel_for(a, x.to_numpy())[0], LibraryKernel)
    g = splyce.jit(lambda a, x: (a @ x) + (a @ x))            # two steps: the MLIR kernel
    assert not isinstance(g.kernel_for(a, x)[0], LibraryKernel)


@pytest.mark.parametrize("columns", [None, 1, 5, 40])
def test_spmv_cached_call_shortcut_and_its_fallback(columns):
    """The jit's cached SpMV / SpMM call goes straight to the drop-in's kernel (``LibraryCall.direct``, one
    thread); SpMM of more columns than the fast path's kernels (40) runs the MLIR kernel, measured faster there
    (dropin/jit_library.py): both the MLIR kernel's bits, on the first and on the cached call."""
    from splyce.dropin.products import _SPMM_FIXED

    rng = np.random.default_rng(24)
    a = splyce.asarray(sps.random_array((300, 200), density=0.05, format="csr", rng=rng))
    x = rng.standard_normal(200 if columns is None else (200, columns))
    fast, mlir = splyce.jit(lambda a, x: a @ x), splyce.jit(lambda a, x: a @ x, library=False)
    want = mlir(a, x)
    for _ in range(2):
        _same(fast(a, x), want)
    kernel = fast.kernel_for(a, x)[0]
    if columns == 40:
        assert columns > _SPMM_FIXED and not isinstance(kernel, LibraryKernel)
    else:
        assert kernel.call.direct is not None
    two = splyce.jit(lambda a, x: a @ x, threads=2)
    _same(two(a, x), want)
    _same(two(a, x), want)


def test_spmv_cached_call_shortcut_checks_the_buffers():
    """A SparseTensor whose index buffers were changed in place after it was made: the shortcut's kernel still
    checks what it reads, and raises."""
    a = splyce.asarray(sps.random_array((50, 50), density=0.1, format="csr", rng=25))
    x = np.ones(50)
    f = splyce.jit(lambda a, x: a @ x)
    f(a, x)
    a.crd[1][3] = 1000
    with pytest.raises(ValueError, match="malformed"):
        f(a, x)
