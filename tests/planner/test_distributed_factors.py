"""A contraction fused into another multiplies the outer factors into the inner sum's terms (``v @ (A @ v)``
as ``sum v_k A_ka v_a``): exact for finite values, not for a factor's Inf or NaN (``inf * (x - y)`` is +-inf,
``inf * x - inf * y`` NaN; ``inf`` times an empty row's sum is NaN, the fused sum has no term). The kernel
checks those factors on each call and runs the unfused twin where one is not finite (planner/plan.py,
``distributed_factors``; runtime/kernel.py, ``run_exact``): the results are NumPy's / scipy's."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


def _csr(n, seed, empty_row=None, empty_column=None, cls=sps.csr_array):
    """Random values of both signs (+inf and -inf terms meet in a sum); optionally one row or column with no
    entries (nothing else reads that position of a vector, or a row whose sum is empty)."""
    rng = np.random.default_rng(seed)
    a = sps.random_array((n, n), density=0.02, format="coo", rng=rng)
    keep = np.ones(a.nnz, bool)
    if empty_row is not None:
        keep &= a.row != empty_row
    if empty_column is not None:
        keep &= a.col != empty_column
    a = sps.coo_array((rng.standard_normal(int(keep.sum())), (a.row[keep], a.col[keep])), shape=(n, n))
    return cls(a.tocsr())


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
    np.testing.assert_array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-10, atol=1e-12)


QUAD = lambda a, v: v @ (a @ v)                           # noqa: E731
CHAIN = lambda a, b, x: a @ (b @ x)                       # noqa: E731
GCN = lambda a, x, w: a @ (x @ w)                         # noqa: E731


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("empty", [False, True])
def test_quadratic_form_with_a_non_finite_factor(special, empty):
    n = 300
    a = _csr(n, 1, empty_row=7 if empty else None, empty_column=7)   # v[7] read only as the outer factor
    assert empty or a[[7], :].nnz >= 3
    v = np.random.default_rng(2).standard_normal(n)
    f = splyce.jit(QUAD)
    finite = f(a, v)                                   # the fused plan on finite values: unchanged
    assert "fused" in f.lower(a, v).as_text("plan")
    np.testing.assert_allclose(finite, QUAD(a, v), rtol=1e-10)
    v[7] = special
    with np.errstate(all="ignore"):
        want = QUAD(a, v)
    _same(f(a, v), want)


@pytest.mark.parametrize("special", [np.inf, np.nan])
def test_stored_non_finite_value_of_the_outer_sparse_factor(special):
    n = 200
    a, b = _csr(n, 3), _csr(n, 4)
    x = np.random.default_rng(5).standard_normal((n, 4))
    a.data[a.nnz // 2] = special
    with np.errstate(all="ignore"):
        want = CHAIN(a, b, x)
    _same(splyce.jit(CHAIN)(a, b, x), want)


def test_dense_factor_of_a_gcn_layer():
    n = 200
    a = _csr(n, 6)
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((n, 8)), rng.standard_normal((8, 3))
    w[2, 1] = np.inf
    with np.errstate(all="ignore"):
        want = GCN(a, x, w)
    _same(splyce.jit(GCN)(a, x, w), want)


def test_the_factors_are_the_outer_operands():
    from splyce.planner.fusion import distributed_factors
    from splyce.tracer.ir import ContractParams, Node, TensorType

    v = Node("input", (), (1,), TensorType((5,), "float64", None))
    a = Node("input", (), (0,), TensorType((5, 5), "float64", None))
    inner = Node("contract", (a, v), (ContractParams(("ka", "a"), "k"),), TensorType((5,), "float64", None))
    outer = Node("contract", (v, inner), (ContractParams(("k", "k"), ""),), TensorType((), "float64", None))
    assert distributed_factors(outer, 1) == (v,)
    no_sum = Node("contract", (a, v), (ContractParams(("ka", "a"), "ka"),), TensorType((5, 5), "float64", None))
    assert distributed_factors(Node("contract", (no_sum,), (ContractParams(("ka",), "ka"), ), no_sum.type), 0) == ()


@pytest.mark.parametrize("special", [np.inf, np.nan])
def test_masked_product_with_a_non_finite_mask_value(special):
    """``(a @ b) * c`` fuses into one contraction with ``c`` a factor of the product's sum (and a triangle-style
    ``.sum()`` after it): a stored Inf / NaN of ``c`` multiplies the sum, as scipy's ``(a @ b).multiply(c)``."""
    rng = np.random.default_rng(8)
    a, b, c = (sps.random_array((60, 60), density=0.25, format="csr", rng=rng, data_sampler=rng.standard_normal)
               for _ in range(3))
    A, B = a.toarray(), b.toarray()
    rows = np.repeat(np.arange(60), np.diff(c.indptr))
    mixed = [k for k in range(c.nnz)     # a stored entry of c over a sum with terms of both signs
             if (A[rows[k]] * B[:, c.indices[k]] > 0).any() and (A[rows[k]] * B[:, c.indices[k]] < 0).any()]
    c.data[mixed[0]] = special
    masked = splyce.jit(lambda a, b, c: (a @ b) * c)
    assert "fused" in masked.lower(a, b, c).as_text("plan")
    with np.errstate(all="ignore"):
        want = (a @ b).multiply(c)
        _same(masked(a, b, c).toarray(), want.toarray())
        _same(splyce.jit(lambda a, b, c: ((a @ b) * c).sum())(a, b, c), want.sum())
