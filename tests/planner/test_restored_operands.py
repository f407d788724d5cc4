"""Sparse products whose operands admit no loop order as the trace stores them (planner/restored_operands.py,
planner/cost.py ``_cheapest(written=True)``): each compiled, against scipy on matrices it did not design."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


def _operands(seed: int, n: int = 30):
    a = sps.random(n, n, density=0.15, format="csr", random_state=seed)
    p = sps.random(n, n // 5, density=0.3, format="csr", random_state=seed + 1)
    return a, p


def galerkin(a, p):
    q = p - 0.5 * (a @ p)          # a sparse intermediate (CSR)
    return q.T @ a @ q             # (q.T @ a) is a CSC; times the CSR q: the reduction outermost for both


def transposed_difference(a, p):
    b = (a != 0).astype(float)     # an intermediate: it cannot be re-stored on the host
    return ((a.T @ b) - (b.T @ a)).toarray()


@pytest.mark.parametrize("cls", [sps.csr_array, pytest.param(sps.csr_matrix, marks=pytest.mark.slow),
                                 pytest.param(sps.csc_array, marks=pytest.mark.slow)])
@pytest.mark.parametrize("fun", [galerkin, transposed_difference])
def test_blocked_products_compile_and_match_scipy(fun, cls):
    for seed in (0, 7):
        a, p = _operands(seed)
        a, p = cls(a), cls(p)
        want = fun(a, p)
        got = splyce.jit(fun)(a, p)
        assert type(got) is type(want) or (sps.issparse(got) and isinstance(got, sps.spmatrix) == isinstance(
            want, sps.spmatrix)), (type(got), type(want))
        dense = (lambda r: r.toarray() if sps.issparse(r) else np.asarray(r))
        np.testing.assert_allclose(dense(got), dense(want), rtol=1e-12, atol=1e-14)


def test_the_plan_re_stores_the_blocked_intermediate():
    a, p = _operands(3)
    a, p = sps.csr_array(a), sps.csr_array(p)
    text = splyce.jit(galerkin).lower(a, p).as_text("plan")
    assert "contract[ab->ab" in text, text
