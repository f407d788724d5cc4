"""Dense elementwise glue by NumPy (runtime/glue.py): the MLIR kernel's bits, no MLIR compiled."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

# (name, function of (a, x, w), whether the glue path takes it)
PROGRAMS = [
    ("relu", lambda a, x, w: np.maximum(a @ (x @ w), 0.0), True),
    ("min_neg0", lambda a, x, w: np.minimum(a @ (x @ w), -0.0), True),
    ("max_neg0", lambda a, x, w: np.maximum(a @ (x @ w), -0.0), False),    # kept on the MLIR kernel
    ("min_pos0", lambda a, x, w: np.minimum(a @ (x @ w), 0.0), False),
    ("clip", lambda a, x, w: np.minimum(np.maximum(a @ (x @ w), -0.25), 0.5), True),
    ("affine", lambda a, x, w: 0.85 * (a @ (x @ w)) + 0.15 / 300, True),
    ("poly", lambda a, x, w: abs((a @ (x @ w)) ** 3 / 7.0 - 2.0), True),
    ("times_xw", lambda a, x, w: np.maximum(a @ (x @ w), 1.5) * (x @ w), True),
    ("sub_left", lambda a, x, w: 1.0 - 3.0 * (a @ (x @ w)), True),
    ("exp", lambda a, x, w: np.exp(a @ (x @ w)), False),                    # libm: the MLIR kernel
]


def _operands(dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = sps.random_array((90, 90), density=0.07, format="csr", rng=seed, dtype=np.float64)
    a.data -= 0.5
    a = a.astype(dtype)
    x = rng.standard_normal((90, 8)).astype(dtype)
    x[4] = -0.0                       # rows of a meeting only these give -0.0 / +0.0 products
    x[7, 3], x[9, 1], x[11, 2] = np.nan, np.inf, -np.inf
    w = rng.standard_normal((8, 8)).astype(dtype)
    return a, x, w


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,f,glued", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_glue_bits_and_no_compile(name, f, glued, dtype):
    a, x, w = _operands(dtype)
    copies = [v.copy() for v in (a.data, x, w)]
    fast = splyce.jit(f)
    mlir = splyce.jit(f, library=False)
    S = splyce.asarray(a)
    got, want = fast(S, x, w), mlir(S, x, w)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), name           # the MLIR kernel's bits, NaN and signed zeros included
    with np.errstate(all="ignore"):
        ref = f(a, x, w)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6, equal_nan=True)
    assert fast.cache_info().compiles == (0 if glued else 1)
    again = fast(S, x, w)
    assert again.tobytes() == got.tobytes() and again is not got
    for before, after in zip(copies, (a.data, x, w)):      # inputs never modified
        assert before.tobytes() == after.tobytes()


def test_dense_only_program_signed_zeros_nan():
    y = np.array([-0.0, 0.0, -1.0, 2.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -5e-324])
    kept = y.copy()
    for f in (lambda v: np.maximum(v, 0.0), lambda v: np.minimum(v, -0.0), lambda v: (v * 2.0 + 1.0) / 3.0):
        fast, mlir = splyce.jit(f), splyce.jit(f, library=False)
        got, want = fast(y), mlir(y)
        assert got.tobytes() == want.tobytes()
        assert fast.cache_info().compiles == 0
        assert got is not y and y.tobytes() == kept.tobytes()
    assert np.signbit(splyce.jit(lambda v: np.maximum(v, 0.0))(y)[:2]).tolist() == [False, False]


def test_sparse_glue_keeps_the_kernel():
    a, x, w = _operands(np.float64)
    f = splyce.jit(lambda a, b: np.maximum(a, 0.0) * b)      # sparse operands: not glue
    S = splyce.asarray(a)
    out = f(S, S)
    np.testing.assert_allclose(np.asarray(out.to_numpy() if hasattr(out, "to_numpy") else out.todense()),
                               (a.maximum(0) * a).toarray())
