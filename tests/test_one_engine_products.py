"""One engine for the sparse products: SpGEMM ``a @ b`` into a sparse result, masked SpGEMM ``(l @ l) * l``,
the triangle sum ``((l @ l.T) * l).sum()`` and SDDMM ``m * (x @ y.T)`` inside ``@splyce.jit`` run the native
kernel library (runtime/library.py), with the compiled MLIR kernel's results bit for bit: the same stored
positions (explicit zeros included), columns ascending, the same values (+0.0 where the sparsifier has +0.0)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel

from test_one_engine import _same


def _csr(rng, m, n, density, dtype=np.float64, special=True, index=np.int32, empty_rows=0.0, long_rows=0):
    """A random CSR with explicit zeros, -0.0, NaN and +-Inf among its values (floats), some empty rows and
    ``long_rows`` rows of up to ``n`` entries."""
    a = sps.random_array((m, n), density=density, format="lil", rng=rng, dtype=np.float64)
    for r in rng.choice(m, size=min(m, long_rows), replace=False):
        cols = rng.choice(n, size=int(rng.integers(n // 2, n + 1)), replace=False)
        a[r, cols] = rng.standard_normal(len(cols))
    a = sps.csr_array(a)
    if empty_rows:
        keep = np.repeat(rng.random(m) >= empty_rows, np.diff(a.indptr))
        a = sps.csr_array((a.data[keep], a.indices[keep], np.concatenate(([0], np.cumsum(
            np.add.reduceat(keep, a.indptr[:-1]) * (np.diff(a.indptr) > 0)))) if a.nnz else a.indptr), shape=a.shape)
    if np.issubdtype(dtype, np.integer):
        a.data = np.round(a.data * 4)
    elif special and a.nnz:
        k = max(1, a.nnz // 12)
        at = rng.choice(a.nnz, size=min(a.nnz, 4 * k), replace=False)
        a.data[at[:k]] = 0.0
        a.data[at[k:2 * k]] = -0.0
        a.data[at[2 * k:3 * k]] = np.nan
        a.data[at[3 * k:]] = rng.choice([np.inf, -np.inf], size=len(at[3 * k:]))
    a = sps.csr_array((a.data.astype(dtype), a.indices.astype(index), a.indptr.astype(index)), shape=a.shape)
    a.has_sorted_indices = True
    return a


def _both(body, args, out_format=None, threads=1):
    """The jitted ``body`` on the library route and on the MLIR kernel (``library=False``)."""
    fast = splyce.jit(body, out_format=out_format, threads=threads)
    mlir = splyce.jit(body, out_format=out_format, library=False, threads=threads)
    return fast, mlir


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("seed", range(3))
def test_spgemm_rows_of_every_length_bit_for_bit(dtype, seed):
    """Rows of 0, <= 8 (insertion sort), <= 96 (vector ranks) and longer (bitmap) entries, special values,
    one and two threads."""
    rng = np.random.default_rng(seed)
    n = (40, 150, 700)[seed]
    a = splyce.asarray(_csr(rng, n, n, 6 / n, dtype, empty_rows=0.1, long_rows=3))
    b = splyce.asarray(_csr(rng, n, n, 10 / n, dtype, long_rows=2))
    for threads in (1, 2):
        fast, mlir = _both(lambda a, b: a @ b, (a, b), "sparse", threads)
        got = fast(a, b)
        _same(got, mlir(a, b))
        assert got.has_sorted_indices and isinstance(fast.kernel_for(a, b)[0], LibraryKernel)
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


def test_spgemm_negative_zero_products_sum_from_positive_zero():
    """A product of -0.0 is stored as +0.0: the sparsifier sums each entry into a zero-filled workspace."""
    a = sps.csr_array((np.array([-1.0, 2.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    b = sps.csr_array((np.array([0.0, -0.0]), np.array([0, 1]), np.array([0, 2, 2])), shape=(2, 2))
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse")
    A, B = splyce.asarray(a), splyce.asarray(b)
    got = fast(A, B)
    _same(got, mlir(A, B))
    assert not np.signbit(got.data).any() and got.nnz == 2


def test_spgemm_64_bit_indices_and_rectangles():
    rng = np.random.default_rng(7)
    a = splyce.asarray(_csr(rng, 90, 60, 0.08, index=np.int64, long_rows=1))
    b = splyce.asarray(_csr(rng, 60, 130, 0.1, index=np.int64))
    fast, mlir = _both(lambda a, b: a @ b, None, "sparse")
    got = fast(a, b)
    _same(got, mlir(a, b))
    assert got.indices.dtype == np.int64 and isinstance(fast.kernel_for(a, b)[0], LibraryKernel)


def test_spgemm_plan_is_the_dropins_native_product():
    from splyce.dropin import OperandInfo, choose_matmul_formulation

    a = splyce.asarray(_csr(np.random.default_rng(1), 50, 50, 0.1))
    text = splyce.jit(lambda a, b: a @ b, out_format="sparse").lower(a, a).as_text("plan")
    assert "runs on the native kernel library: matmul as formulation 'gustavson-spa, every position kept, rows " \
           "sorted'" in text
    assert choose_matmul_formulation(OperandInfo.of(a), OperandInfo.of(a)).value == "gustavson-spa"
