"""One engine, the remaining gaps: bool products and sums on the native merge kernels for both entry points (the
drop-in with scipy's rule, the jit with the sparsifier's); elementwise ops whose operands the plan reads in
column order (``a.T * b``, CSC arguments) on the same kernels in the transposed frame; SDDMM inside jit as fast
as the drop-in with the sparsifier's bits. Every native result is compared with ``jit(library=False)``, bit for
bit (NaN but for its sign), and every plan is pinned for both entries."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import OperandInfo, choose_elementwise_formulation
from splyce.runtime.library import LibraryKernel
from splyce.tensors.formats import CSC


def _same(x, y):
    """Equal results: class, index arrays and dtypes, stored values bit for bit (NaN's sign aside)."""
    assert type(x) is type(y)
    if hasattr(x, "indptr"):
        assert x.shape == y.shape and x.indices.dtype == y.indices.dtype and x.indptr.dtype == y.indptr.dtype
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        x, y = x.data, y.data
    x, y = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert x.tobytes() == y.tobytes()


def _values(rng, a, dtype):
    """``a`` (a scipy CSR) with values of ``dtype``: explicit zeros of both signs, NaN, +-Inf among floats,
    zeros among integers, False among bools; a few empty rows."""
    a = sps.csr_array(a)
    if a.shape[0] > 4:
        keep = np.repeat(np.arange(a.shape[0]) % 5 != 2, np.diff(a.indptr))     # every fifth row empty
        a = sps.csr_array((a.data[keep], a.indices[keep], np.concatenate([[0], np.cumsum(
            np.where(np.arange(a.shape[0]) % 5 != 2, np.diff(a.indptr), 0))])), shape=a.shape)
    if np.dtype(dtype) == np.bool_:
        data = rng.random(a.nnz) < 0.6
    else:
        data = rng.uniform(-4, 4, a.nnz)
        if np.issubdtype(dtype, np.floating) and a.nnz:
            k = max(1, a.nnz // 8)
            at = rng.choice(a.nnz, size=min(a.nnz, 5 * k), replace=False)
            data[at[:k]], data[at[k:2 * k]], data[at[2 * k:3 * k]] = 0.0, -0.0, np.nan
            data[at[3 * k:]] = rng.choice([np.inf, -np.inf], size=len(at[3 * k:]))
        else:
            data[::5] = 0
    return sps.csr_array((data.astype(dtype), a.indices.copy(), a.indptr.copy()), shape=a.shape)


# -- bool * and + : the merge's AND / OR for both entries --------------------------------------------------------
@pytest.mark.parametrize("op", ["multiply", "add"])
def test_bool_dropin_runs_the_native_merge_with_scipys_rule(op, monkeypatch):
    """``splyce.multiply`` / ``add`` of two bool matrices (CSR with CSR, CSR with a CSC ``A.T``, SparseTensors):
    scipy's result exactly (a False result not stored, indices sorted, scipy's class), computed by the native
    merge: no jitted (MLIR) kernel is asked for."""
    from splyce.dropin import elementwise as dropin_elementwise

    def no_mlir(*args, **kwargs):
        raise AssertionError("the drop-in asked for an MLIR kernel")

    monkeypatch.setattr(dropin_elementwise, "_kernel", no_mlir)
    rng = np.random.default_rng(3)
    for n, density in ((1, 1.0), (7, 0.4), (90, 0.08), (300, 0.05)):
        a = _values(rng, sps.random_array((n, n), density=density, rng=rng), np.bool_)
        b = _values(rng, sps.random_array((n, n), density=density, rng=rng), np.bool_)
        for right in (b, b.T, b.tocsc(), a.T):
            want = a.multiply(right) if op == "multiply" else a + right
            want = sps.csr_array(want)
            want.sort_indices()
            got = getattr(splyce, op)(a, right)
            assert got.dtype == np.bool_ and not np.any(got.data == 0)     # scipy's rule: no False stored
            _same(got, want)
            for threads in (1, 2):
                _same(getattr(splyce, op)(a, right, threads=threads), want)
        got = getattr(splyce, op)(splyce.asarray(a), splyce.asarray(b))
        want = sps.csr_array(a.multiply(b) if op == "multiply" else a + b)
        assert np.array_equal(got.toarray(), want.toarray()) and got.nnz == want.nnz


def test_bool_difference_is_still_refused():
    a = sps.csr_array(np.eye(3, dtype=bool))
    for b in (a, a.T, splyce.asarray(a)):
        with pytest.raises(TypeError, match="not supported for bool values"):
            splyce.subtract(a, b)


@pytest.mark.parametrize("op", ["multiply", "add"])
def test_bool_plan_is_the_same_for_both_entries(op):
    """The drop-in's formulation for two bool matrices is the merge, and the jitted ``a * b`` / ``a + b`` runs
    that formulation (every position kept there), with ``jit(library=False)``'s result bit for bit."""
    rng = np.random.default_rng(4)
    a = splyce.asarray(_values(rng, sps.random_array((60, 60), density=0.1, rng=rng), np.bool_))
    b = splyce.asarray(_values(rng, sps.random_array((60, 60), density=0.1, rng=rng), np.bool_))
    want = choose_elementwise_formulation(OperandInfo.of(a), OperandInfo.of(b), None, op).value
    assert want == "merge-rows"
    assert choose_elementwise_formulation(OperandInfo.of(a), OperandInfo.of(b), None, "subtract").value != want
    body = {"multiply": lambda a, b: a * b, "add": lambda a, b: a + b}[op]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    assert f"as formulation '{want}'" in fast.lower(a, b).as_text("plan")
    for x, y in ((a, b), (a, a), (b, a)):
        _same(fast(x, y), mlir(x, y))
    assert isinstance(fast.kernel_for(a, b)[0], LibraryKernel)
