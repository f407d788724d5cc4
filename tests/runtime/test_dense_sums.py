"""fast_math=True lets LLVM vectorize the kernel's dense float sums (passes/dense_sums.py); without it they
keep their order (the plain sparsifier's bits)."""

import platform
import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.bench.programs import cg_step


def _dot(a, b):
    return np.tanh(a) @ b


def test_a_dense_dot_is_reassociable_only_with_fast_math():
    x = np.random.default_rng(0).random(10_000)
    strict = splyce.jit(_dot).lower(x, x)
    fast = splyce.jit(_dot, fast_math=True).lower(x, x)
    assert "fastmath<reassoc>" not in strict.as_text("splyce")
    assert re.search(r"arith\.addf %out, %\w+ fastmath<reassoc>", fast.as_text("splyce"))
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert "vaddsd" in strict.as_text("asm") and "vaddpd" not in strict.as_text("asm")
        assert "vaddpd" in fast.as_text("asm")          # partial sums in vector registers


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fast_math_sums_agree_and_strict_sums_keep_their_bits(dtype):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(50_001).astype(dtype), rng.standard_normal(50_001).astype(dtype)
    strict = splyce.jit(_dot)(x, y)
    plain = splyce.jit(_dot, vectorize=False)(x, y)
    assert np.asarray(strict).tobytes() == np.asarray(plain).tobytes()
    fast = splyce.jit(_dot, fast_math=True)(x, y)
    np.testing.assert_allclose(fast, np.tanh(x.astype(np.float64)) @ y.astype(np.float64),
                               rtol=1e-4 if dtype == np.float32 else 1e-12)
    with np.errstate(all="ignore"):
        x[7], y[9] = np.inf, np.nan
        assert np.isnan(splyce.jit(_dot, fast_math=True)(x, y))


def test_a_sparse_rows_sum_keeps_its_order():
    """A row sum that gathers (x[crd[k]]) is not marked: only loops reading at their index are."""
    a = sps.random_array((300, 300), density=0.05, format="csr", rng=2)
    x = np.random.default_rng(3).random(300)
    text = splyce.jit(lambda a, x: a @ x, fast_math=True, library=False).lower(a, x).as_text("splyce")
    assert "fastmath<reassoc>" not in text


def test_the_cg_step_with_fast_math():
    rng = np.random.default_rng(4)
    n = 2000
    a = sps.random_array((n, n), density=0.005, format="csr", rng=5)
    spd = sps.csr_array(a + a.T + sps.diags_array(np.full(n, 10.0)))
    x, r = np.zeros(n), rng.random(n)
    p = r.copy()
    expected = cg_step(spd, x, r, p)
    for got, want in zip(splyce.jit(cg_step, fast_math=True)(spd, x, r, p), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
