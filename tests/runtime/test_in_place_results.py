"""The glue after a product the plan computes before its kernel is written over that product's array
(planner/in_place.py, runtime/kernel.py): which results qualify, the bits, accumulate, threads, and the
caller's arrays left untouched."""

import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.kernel import _writable_copy


def _operands(n=400, seed=0):
    rng = np.random.default_rng(seed)
    a = sps.random_array((n, n), density=0.02, format="csr", rng=rng)
    a.data = a.data * 4 - 2
    return splyce.asarray(a), a, rng.standard_normal(n), rng.standard_normal((n, 8)), rng.standard_normal((8, 8))


OVER = {   # programs whose glue is written over the native step's array (an SpMM's on any machine)
    "pagerank-like": lambda a, x, X, W: 0.85 * (a @ X) + 0.15,
    "relu of spmm": lambda a, x, X, W: np.maximum(a @ X, 0.0),
    "gcn": lambda a, x, X, W: np.maximum(a @ (X @ W), 0.0),
    "glue with an argument": lambda a, x, X, W: np.abs(a @ X) * X - X,
    # the product is also read by a full reduction the glue needs (CG's p @ ap before r - alpha * ap)
    "after a reduction of it": lambda a, x, X, W: X - ((X * (a @ X)).sum() / 7.0) * (a @ X),
}
APART = {  # programs where the product's array must stay as it is, or is not the result's shape / dtype
    "product returned too": lambda a, x, X, W: (a @ X, np.exp(a @ X)),
    "dtype changes": lambda a, x, X, W: (a @ X).astype(np.float32) * 2,
    "broadcast read": lambda a, x, X, W: (a @ X)[:, :1] * X,
    "read by a reduction after it": lambda a, x, X, W: (np.exp(a @ X), (a @ X).sum(axis=0)),
    "read by a row reduction the glue needs": lambda a, x, X, W: (a @ X) - (a @ X).sum(axis=1)[:, None],
    "no product before the kernel": lambda a, x, X, W: np.exp(x) + 1.0,
}


@pytest.mark.parametrize("name", sorted(OVER))
def test_glue_written_over_the_product(name):
    t, s, x, X, W = _operands()
    body = OVER[name]
    f = splyce.jit(body)
    kernel, _ = f.kernel_for(t, x, X, W)
    assert kernel.trace.in_place, kernel.plan.as_text()
    assert "written over %arg" in f.lower(t, x, X, W).as_text("plan")
    given = [arr.copy() for arr in (t.values, t.crd[1], t.pos[1], x, X, W)]
    got = f(t, x, X, W)
    for before, arr in zip(given, (t.values, t.crd[1], t.pos[1], x, X, W)):
        np.testing.assert_array_equal(before, arr)                 # the caller's arrays as they were
    assert not any(np.may_share_memory(got, arr) for arr in (t.values, x, X, W))
    np.testing.assert_allclose(got, body(s, x, X, W), rtol=1e-12, atol=1e-12)   # NumPy's sums are pairwise
    np.testing.assert_array_equal(got, f(t, x, X, W))               # again: a fresh array each call
    plain = splyce.jit(body, library=False, vectorize=False)       # the plain sparsifier, no step before
    np.testing.assert_array_equal(got, plain(t, x, X, W))          # its bits
    np.testing.assert_array_equal(splyce.jit(body, threads=2)(t, x, X, W), got)
    out = np.full(got.shape, 0.25)
    f.accumulate(out, t, x, X, W)
    np.testing.assert_array_equal(out, 0.25 + got)


@pytest.mark.parametrize("name", sorted(APART))
def test_products_read_elsewhere_keep_their_array(name):
    t, s, x, X, W = _operands(seed=1)
    body = APART[name]
    f = splyce.jit(body)
    kernel, _ = f.kernel_for(t, x, X, W)
    assert not kernel.trace.in_place, kernel.plan.as_text()
    got, want = f(t, x, X, W), body(s, x, X, W)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-6 if np.asarray(g).dtype == np.float32 else 1e-13, atol=1e-6)


def test_a_product_sharing_an_arguments_memory_is_copied_first():
    x = np.arange(12.0).reshape(3, 4)
    view = x.T                              # what a product returned as its operand's view would be
    safe = _writable_copy(view, [x])
    assert safe is not view and not np.may_share_memory(safe, x)
    fresh = x * 2.0
    assert _writable_copy(fresh, [x]) is fresh
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    assert _writable_copy(frozen, []) is not frozen


def test_arguments_and_captured_arrays_are_never_written_over():
    """Glue over a transposed argument or captured array (a view NumPy would return for ``einsum("ij->ji",
    x)``): the argument, and the array the function captured, stay as they were, call after call
    (``_writable_copy`` above copies any planned array that shares their memory)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 20))
    captured = rng.standard_normal((30, 20))
    given, kept = x.copy(), captured.copy()
    f = splyce.jit(lambda x: np.maximum(splyce.einsum("ij->ji", x), 0.0))
    g = splyce.jit(lambda x: np.maximum(splyce.einsum("ij->ji", captured), 0.0) + x.T)
    for _ in range(2):
        np.testing.assert_array_equal(f(x), np.maximum(given.T, 0.0))
        np.testing.assert_array_equal(g(x), np.maximum(kept.T, 0.0) + given.T)
    np.testing.assert_array_equal(x, given)
    np.testing.assert_array_equal(captured, kept)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_relu_written_in_place_stores_plainly(target):
    """``maximum(y, 0)`` over ``y``'s own array is ``store(select(y <= 0, 0, y), p)`` after LLVM's
    canonicalization, which the x86 back end would fold into a masked store of the zeros (``vmaskmovpd``: 2x
    the loop's time on AVX2, Zen 3). The value read is frozen (lowering/to_mlir.py ``_frozen``): plain
    stores. (A host product, so the plan is the same for a target other than the host's.)"""
    X, W = np.random.default_rng(2).standard_normal((400, 8)), np.eye(8)
    low = splyce.jit(lambda X, W: np.maximum(X @ W, 0.0), target=target).lower(X, W)
    assert "written over %arg" in low.as_text("plan")
    assert "freeze" in low.as_text("llvm")
    masked_stores = [line for line in low.as_text("asm").splitlines()
                     if "maskmov" in line or re.search(r"\)\s*\{%k", line)]
    assert not masked_stores


def test_relu_in_place_keeps_nan_and_signed_zero():
    """In place or not, ``maximum`` is IEEE's (arith.maximumf): NaN stays NaN, -0.0 becomes +0.0."""
    s = sps.csr_array(np.eye(6))
    X = np.array([[np.nan, -0.0, 0.0, -1.0], [np.inf, -np.inf, 2.0, -2.0]] * 3)
    body = lambda a, X: np.maximum(a @ X, 0.0)   # noqa: E731
    f = splyce.jit(body)
    t = splyce.asarray(s)
    kernel, _ = f.kernel_for(t, X)
    assert kernel.trace.in_place, kernel.plan.as_text()
    got = f(t, X)
    plain = splyce.jit(body, library=False, vectorize=False)(t, X)
    np.testing.assert_array_equal(got.view(np.int64), plain.view(np.int64))
    assert np.isnan(got[0, 0]) and np.signbit(got[0, 1]) == False and got[1, 1] == 0.0   # noqa: E712
