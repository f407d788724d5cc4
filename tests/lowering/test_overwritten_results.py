"""A dense elementwise result over dense operands (the glue after a product) is written in place into an
output buffer that is not zeroed first (lowering/to_mlir.py, ``overwritten_results``; runtime/kernel.py):
results, accumulate, a result returned twice, 2-D results, threads."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.lowering.to_mlir import overwritten_results


def _matrix(n=300, seed=0):
    return splyce.asarray(sps.random_array((n, n), density=0.03, format="csr", rng=seed))


PROGRAMS = {
    "pagerank": lambda a, x, X: 0.85 * (a @ x) + 0.15,
    "relu of spmm": lambda a, x, X: np.maximum(a @ X, 0.0),
    "glue only": lambda a, x, X: np.tanh(x) * 2.0 - x,
    "two results": lambda a, x, X: (np.exp(-x), np.abs(a @ x) + 1.0),
    "cg updates": lambda a, x, X: (lambda ap: (x - (x @ ap) / 3.0 * ap, x + ((x @ x) / (x @ ap)) * x))(a @ x),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_results_and_accumulate(name):
    a, rng = _matrix(), np.random.default_rng(1)
    x, X = rng.standard_normal(300), rng.standard_normal((300, 8))
    body = PROGRAMS[name]
    f = splyce.jit(body)
    kernel, _ = f.kernel_for(a, x, X)
    assert overwritten_results(kernel.trace) or kernel.trace.in_place, kernel.trace.as_text()
    got, want = f(a, x, X), body(a.to_scipy(), x, X)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    for g, p in zip(got if isinstance(got, tuple) else (got,),
                    (lambda r: r if isinstance(r, tuple) else (r,))(splyce.jit(body, library=False, vectorize=False)(a, x, X))):
        np.testing.assert_array_equal(g, p)          # the plain sparsifier's bits
    if not isinstance(got, tuple):
        out = np.full(got.shape, 0.5)
        f.accumulate(out, a, x, X)
        np.testing.assert_array_equal(out, 0.5 + got)
        np.testing.assert_array_equal(splyce.jit(body, threads=2)(a, x, X), got)


def test_the_output_is_written_in_place_without_being_read():
    x = np.random.default_rng(2).standard_normal(1000)
    f = splyce.jit(lambda y: 0.85 * y + 1.0)
    scf = f.lower(x).as_text("scf")
    kernel = scf[scf.index("func.func @kernel"):]
    assert "memref.alloc" not in kernel and "memref.copy" not in kernel and "memref.dealloc" not in kernel
    assert "outs(%arg1" in kernel and "%out" not in kernel.split("^bb0")[1].split("linalg.yield")[0].replace(
        "%out: f64", "")


def test_a_sum_and_an_op_over_a_sparse_operand_keep_the_zeroed_buffer():
    a, x = _matrix(), np.ones(300)
    kernel, _ = splyce.jit(lambda a, x: a @ x, library=False).kernel_for(a, x)
    assert not overwritten_results(kernel.trace)            # a sum starts from the buffer's zero
    dense_of_sparse = splyce.jit(lambda a: np.exp(a.todense()) * 2.0, library=False)
    kernel, _ = dense_of_sparse.kernel_for(a)
    assert kernel.trace.outputs[0].type.is_sparse is False and not overwritten_results(kernel.trace)
    np.testing.assert_allclose(dense_of_sparse(a), np.exp(a.to_scipy().toarray()) * 2.0, rtol=1e-14)
