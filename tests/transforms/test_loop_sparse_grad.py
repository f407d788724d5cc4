"""The gradient w.r.t. a sparse matrix's stored values through fori_loop / scan stays on its pattern: the
reverse scan carries no dense accumulator of the matrix's shape (its per-step factors are stacked and
summed after the loop as one sampled product); against jax.grad on the dense equivalent and central finite
differences."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.lax as slax
import splyce.numpy as snp

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)


def normal_steps(xp, lax, A, x):
    def body(i, h):
        return xp.tanh(A.T @ (A @ h)) + 0.5 * h
    return xp.sum(lax.fori_loop(0, 4, body, x) ** 2)


def scan_two_matrices(xp, lax, A, B, c0, xs):
    def step(c, x):
        c = xp.tanh(A @ c + x) - 0.3 * (B.T @ (B @ c))
        return c, xp.sum(c * c)
    c, ys = lax.scan(step, c0, xs)
    return xp.sum(ys) + xp.sum(c)


def scaled_rows(xp, lax, A, x):
    """A sparse value built from A in the body (``A * h[:, None]``): that part of the cotangent is not a
    sampled product of dense operands, accumulated as before."""
    def body(i, h):
        S = xp.multiply(A, h[:, None])
        return xp.sin(S @ x) + 0.2 * (A @ x)
    return xp.sum(lax.fori_loop(0, 3, body, x[:A.shape[0]] * 0 + 1.0) ** 2)


PROGRAMS = {
    "normal_steps": (normal_steps, [(50, 40)], [(40,)], (0, 1)),
    "scan_two_matrices": (scan_two_matrices, [(30, 30), (20, 30)], [(30,), (5, 30)], (0, 1, 2, 3)),
    "scaled_rows": (scaled_rows, [(25, 25)], [(25,)], (0, 1)),
}


def _args(name, fmt, seed=0):
    fn, sparse_shapes, dense_shapes, argnums = PROGRAMS[name]
    rng = np.random.default_rng(seed)
    mats = []
    for shape in sparse_shapes:
        m = sps.random_array(shape, density=0.15, format="csr", rng=rng)
        m.data = rng.uniform(-1, 1, m.nnz)
        mats.append(m.asformat(fmt))
    return fn, mats + [rng.uniform(-1, 1, s) for s in dense_shapes], argnums


@pytest.mark.parametrize("name,fmt", [pytest.param(n, f, marks=() if (n, f) == ("normal_steps", "csr") else
                                                   (pytest.mark.slow,)) for n in PROGRAMS for f in ("csr", "csc")])
def test_sparse_gradient_through_loops(name, fmt):
    fn, args, argnums = _args(name, fmt)
    step = splyce.jit(splyce.grad(lambda *a: fn(snp, slax, *a), argnums=argnums))
    grads = step(*args)
    dense = [jnp.asarray(a.toarray()) if sps.issparse(a) else jnp.asarray(a) for a in args]
    ref = jax.grad(lambda *a: fn(jnp, jax.lax, *a), argnums=argnums)(*dense)
    f = splyce.jit(lambda *a: fn(snp, slax, *a))
    rng = np.random.default_rng(1)
    for n, g, r in zip(argnums, grads, ref):
        a = args[n]
        if sps.issparse(a):
            g = sps.csr_array(g)
            a_csr = sps.csr_array(a)
            rows, cols = a_csr.nonzero()
            np.testing.assert_allclose(g[rows, cols], np.asarray(r)[rows, cols], rtol=1e-9, atol=1e-11)
            assert set(zip(*g.nonzero())) <= set(zip(rows, cols))
            # finite differences along a direction of the stored values
            d = rng.standard_normal(a.nnz)
            plus, minus = a.copy(), a.copy()
            plus.data = a.data + 1e-6 * d
            minus.data = a.data - 1e-6 * d
            hi = list(args); hi[n] = plus
            lo = list(args); lo[n] = minus
            numeric = (float(f(*hi)) - float(f(*lo))) / 2e-6
            dense_g = np.zeros(a.shape)
            dense_g[rows, cols] = g[rows, cols]
            got = float(np.sum(sps.csr_array(a.multiply(0) + plus - a).toarray() * dense_g)) / 1e-6
            np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_allclose(g, np.asarray(r), rtol=1e-9, atol=1e-11)
    if name != "scaled_rows":   # no dense accumulator of a sparse argument's shape in any stage
        text = step.lower(*args).as_text("plan")
        for a in args:
            if sps.issparse(a):
                dense_type = f"{a.shape[0]}x{a.shape[1]}xfloat64"
                assert not any(dense_type in line and "#" not in line.split(dense_type, 1)[1][:3]
                               for line in text.splitlines()), dense_type
