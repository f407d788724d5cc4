"""jit(grad(f)) with Python numbers: a Python float argument differentiated (JAX's weak-typed scalar: its
gradient is a 0-d float), a Python float output (a constant: zero gradients), an int refused; against
jax.grad and central finite differences."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.numpy as snp

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)


def _loss(xp):
    def f(A, x, s, t):
        y = A @ x
        return xp.sum(xp.tanh(y * s) ** 2) + s * t * t - xp.sum(xp.exp(-t * x * x))
    return f


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    A = sps.random_array((9, 7), density=0.35, format="csr", rng=rng)
    A.data = rng.uniform(-1, 1, A.nnz)
    return A, rng.standard_normal(7)


@pytest.mark.parametrize("argnums", [2, (1, 2, 3)])
def test_float_arguments_against_jax_and_finite_differences(data, argnums):
    A, x = data
    s, t = 0.7, -1.3
    ours_jit = splyce.jit(splyce.value_and_grad(_loss(snp), argnums=argnums))(A, x, s, t)
    ours = splyce.value_and_grad(_loss(snp), argnums=argnums)(A, x, s, t)
    ref = jax.value_and_grad(_loss(jnp), argnums=argnums)(jnp.asarray(A.toarray()), x, s, t)
    for value, grads in (ours_jit, ours):
        np.testing.assert_allclose(float(value), float(ref[0]), rtol=1e-12)
        grads = grads if isinstance(argnums, tuple) else (grads,)
        refs = ref[1] if isinstance(argnums, tuple) else (ref[1],)
        for g, r in zip(grads, refs):
            assert np.shape(g) == np.shape(r)
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-11, atol=1e-12)
    f = splyce.jit(_loss(snp))
    eps = 1e-6
    g_s = (ours_jit[1] if argnums == 2 else ours_jit[1][1])
    numeric = (float(f(A, x, s + eps, t)) - float(f(A, x, s - eps, t))) / (2 * eps)
    np.testing.assert_allclose(float(g_s), numeric, rtol=1e-6)
    assert float(g_s) == float(np.asarray(g_s))    # a 0-d float


def test_float_output_and_int_argument():
    x = np.arange(4.0)
    for g in (splyce.grad(lambda x: 2.0), splyce.jit(splyce.grad(lambda x: 2.0))):
        np.testing.assert_array_equal(g(x), np.asarray(jax.grad(lambda x: 2.0)(x)))
    value, gx = splyce.jit(splyce.value_and_grad(lambda x, s: s * 2.0, argnums=(0, 1)))(x, 1.5)
    ref_value, ref_g = jax.value_and_grad(lambda x, s: s * 2.0, argnums=(0, 1))(x, 1.5)
    assert float(value) == float(ref_value)
    np.testing.assert_array_equal(gx[0], np.asarray(ref_g[0]))
    assert float(gx[1]) == float(ref_g[1])
    with pytest.raises(TypeError, match="real- or complex-valued inputs"):
        splyce.jit(splyce.grad(lambda x, k: snp.sum(x) * k, argnums=1))(x, 3)
    with pytest.raises(TypeError, match="real- or complex-valued inputs"):
        splyce.jit(splyce.grad(lambda x: 2))(x)
