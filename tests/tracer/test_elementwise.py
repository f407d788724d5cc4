"""Elementwise chains fused into one kernel (planner/elementwise.py) and the elementwise ops a JAX user
expects on sparse operands, against NumPy on the dense equivalents."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.tracer.tracer import TraceError


def _operands(dtype, seed=0):
    rng = np.random.default_rng(seed)

    def sample(size):
        return rng.uniform(-2, 2, size).astype(dtype)

    a = sps.random_array((9, 11), density=0.35, format="csr", rng=seed + 1, data_sampler=sample, dtype=dtype)
    b = sps.random_array((9, 11), density=0.35, format="csr", rng=seed + 2, data_sampler=sample, dtype=dtype)
    d = rng.uniform(-1, 1, (9, 11)).astype(dtype)
    return a, b, d


CASES = {
    "2a+b": (lambda a, b, d: 2 * a + b, lambda A, B, D: 2 * A + B, True),
    "0.5a+0.5b": (lambda a, b, d: 0.5 * a + 0.5 * b, lambda A, B, D: 0.5 * A + 0.5 * B, True),
    "abs(a-b)**2": (lambda a, b, d: abs(a - b) ** 2, lambda A, B, D: np.abs(A - B) ** 2, True),
    "-a/4": (lambda a, b, d: -a / 4, lambda A, B, D: -A / 4, True),
    "maximum": (lambda a, b, d: splyce.maximum(a, b), lambda A, B, D: np.maximum(A, B), True),
    "minimum*3": (lambda a, b, d: splyce.minimum(a, b) * 3, lambda A, B, D: np.minimum(A, B) * 3, True),
    "maximum dense": (lambda a, b, d: splyce.maximum(a, d), lambda A, B, D: np.maximum(A, D), False),
    "a**3*b": (lambda a, b, d: a ** 3 * b, lambda A, B, D: A ** 3 * B, True),
    "a*b+d": (lambda a, b, d: a * b + d, lambda A, B, D: A * B + D, False),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_elementwise_chain_is_one_kernel_and_matches_numpy(case, dtype):
    fun, reference, sparse_result = CASES[case]
    a, b, d = _operands(dtype)
    f = splyce.jit(fun)
    out = f(a, b, d)
    assert sps.issparse(out) == sparse_result
    dense = out.toarray() if sps.issparse(out) else out
    expected = reference(a.toarray(), b.toarray(), d)
    assert dense.dtype == expected.dtype
    np.testing.assert_allclose(dense, expected, rtol=1e-6 if dtype == "float32" else 1e-14)
    kernel, _ = f.kernel_for(a, b, d)
    assert [s.node.op for s in kernel.plan.steps] == ["ewise"]


def test_integer_elementwise_ops():
    a = sps.csr_array(np.array([[0, -3, 2], [4, 0, -1]], dtype=np.int64))
    b = sps.csr_array(np.array([[1, 0, -5], [0, 0, 2]], dtype=np.int64))
    out = splyce.jit(lambda a, b: splyce.maximum(abs(a), b) - a ** 2)(a, b)
    A, B = a.toarray(), b.toarray()
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.toarray(), np.maximum(np.abs(A), B) - A ** 2)
    half = splyce.jit(lambda a: a / 2)(a)
    assert half.dtype == np.float64 and np.array_equal(half.toarray(), A / 2)


def test_maximum_propagates_nan_like_numpy():
    a = sps.csr_array(np.array([[np.nan, 0.0, 1.0]]))
    b = sps.csr_array(np.array([[2.0, np.nan, 0.0]]))
    out = splyce.jit(lambda a, b: splyce.maximum(a, b))(a, b).toarray()
    np.testing.assert_array_equal(out, np.maximum(a.toarray(), b.toarray()))


@pytest.mark.parametrize("fun, message", [
    (lambda a: a ** 0, r"power: the exponent must be > 0 for a sparse tensor \(a \*\* 0 is not zero at its implicit "
                       r"zeros\); write a.todense\(\) \*\* k"),
    (lambda a: a ** -1, r"power: the exponent must be > 0 for a sparse tensor \(a \*\* -1"),
    (lambda a: a ** -0.5, r"power: the exponent must be > 0 for a sparse tensor \(a \*\* -0.5"),
    (lambda a: a / a, r"divide: dividing by a sparse tensor divides by its implicit zeros \(0 / 0 is NaN\)"),
    (lambda a: a / 0, r"divide: division by zero"),
    (lambda a: splyce.maximum(a, 1), r"maximum: not supported on a sparse tensor here: maximum\(a, c\) is not zero where "
                                     r"a stores nothing, so the result is dense; write maximum\(a.todense\(\), c\)"),
])
def test_undefined_or_unsupported_elementwise_ops_raise_clearly(fun, message):
    a = sps.random_array((4, 4), density=0.5, format="csr", rng=3)
    with pytest.raises(TraceError, match=message):
        splyce.jit(fun)(a)


def test_zero_preserving_scalar_ops_keep_a_sparse_tensor_sparse():
    # maximum(a, c <= 0) and a ** k for k > 0 are 0 where a stores nothing: sparse results, as scipy's
    a = sps.random_array((4, 4), density=0.5, format="csr", rng=3)
    a.data -= 0.5
    relu = splyce.jit(lambda a: splyce.maximum(a, 0))(a)
    root = splyce.jit(lambda a: abs(a) ** 0.5)(a)
    assert sps.issparse(relu) and sps.issparse(root)
    np.testing.assert_array_equal(relu.toarray(), np.maximum(a.toarray(), 0))
    np.testing.assert_allclose(root.toarray(), np.abs(a.toarray()) ** 0.5)


def test_maximum_on_concrete_operands_points_to_scipy():
    a = sps.random_array((4, 4), density=0.5, format="csr", rng=4)
    with pytest.raises(TypeError, match=r"splyce.maximum works inside @splyce.jit; on concrete operands use "
                                        r"scipy's a.maximum\(b\) or np.maximum"):
        splyce.maximum(a, a)
