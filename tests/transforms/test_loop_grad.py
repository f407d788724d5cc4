"""splyce.grad through compiled loops (fori_loop with static bounds, scan, nested), gathers (scatter-add) and
sparse maximum / minimum, on tests/transforms/loop_grad_corpus.py: against jax.grad on the dense equivalents (float64 /
float32, every operand kind) and central finite differences; vmap through loops against jax.vmap; the
refusals JAX makes (reverse mode through while_loop / traced bounds)."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.lax
import splyce.numpy as snp
from loop_grad_corpus import CORPUS
from test_grad import _coords, _dense_of, _perturbed, _scalars, _sparse, _values, check_kind

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

KINDS = ("csr_array", "csr_matrix", "csc_array", "SparseTensor")
QUICK = {("fori_propagation", "csr_array", "float64"), ("scan_rnn", "SparseTensor", "float32"),
         ("embedding_lookup", "csr_array", "float64"), ("sparse_maximum", "csc_array", "float64")}


def make_args(name, kind, dtype, seed=0):
    fn, specs, argnums = CORPUS[name]
    rng = np.random.default_rng(seed)
    args = []
    for spec in specs:
        if isinstance(spec, str):
            src = args[int(spec.split(":")[1])]
            pattern = sps.csr_array(_dense_of(src) != 0).astype(np.float64)
            args.append(_sparse(rng, None, None, dtype, kind, pattern=pattern))
        elif spec[0] == "sparse":
            args.append(_sparse(rng, spec[1], spec[2], dtype, kind))
        elif spec[0] == "index":
            args.append(rng.integers(0, spec[2], size=spec[1]).astype(np.int64))
        else:
            args.append(np.asarray(rng.uniform(-1, 1, spec[1]), dtype=dtype))
    return fn, args, argnums


def reference(fn, args, argnums):
    dense = [a if isinstance(a, np.ndarray) and a.dtype.kind == "i" else jnp.asarray(_dense_of(a), jnp.float64)
             for a in args]
    value, grads = jax.value_and_grad(lambda *a: fn(jnp, jax.lax, *a), argnums=argnums)(*dense)
    out = []
    for n, g in zip(argnums, grads):
        g = np.asarray(g)
        a = args[n]
        out.append(g[_coords(a)] if (sps.issparse(a) or isinstance(a, splyce.SparseTensor)) else g)
    return out, float(value)


def _case(name, kind, dtype):
    marks = () if (name, kind, dtype) in QUICK else (pytest.mark.slow,)
    return pytest.param(name, kind, dtype, marks=marks, id=f"{name}-{kind}-{dtype}")


CASES = [_case(n, k, d) for n in CORPUS for k in KINDS for d in ("float64", "float32")]


@pytest.mark.parametrize("name,kind,dtype", CASES)
def test_corpus_against_jax(name, kind, dtype):
    fn, args, argnums = make_args(name, kind, np.dtype(dtype))
    ref, ref_value = reference(fn, args, argnums)
    value, grads = splyce.value_and_grad(lambda *a: fn(snp, splyce.lax, *a), argnums=argnums)(*args)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(float(value), ref_value, **tol)
    for n, g, r in zip(argnums, grads, ref):
        got = check_kind(args[n], g)
        scale = max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
        np.testing.assert_allclose(got, r, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=f"argument {n}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "scan_reverse_mixed_carry" else
                                               (pytest.mark.slow,)) for n in CORPUS])
def test_corpus_against_finite_differences(name):
    fn, args, argnums = make_args(name, "csr_array", np.float64, seed=1)
    f = splyce.jit(lambda *a: fn(snp, splyce.lax, *a))
    grads = splyce.grad(lambda *a: fn(snp, splyce.lax, *a), argnums=argnums)(*args)
    rng = np.random.default_rng(2)
    eps = 1e-6
    for n, g in zip(argnums, grads):
        g = _values(g) if sps.issparse(g) else np.asarray(g)
        direction = rng.standard_normal(g.shape)
        plus, minus = list(args), list(args)
        plus[n] = _perturbed(args[n], direction, eps)
        minus[n] = _perturbed(args[n], direction, -eps)
        numeric = (float(f(*_scalars(plus))) - float(f(*_scalars(minus)))) / (2 * eps)
        np.testing.assert_allclose(float(np.sum(g * direction)), numeric, rtol=1e-5, atol=1e-6,
                                   err_msg=f"argument {n}")


def test_jit_of_grad_through_a_loop_is_one_program():
    fn, args, argnums = make_args("fori_propagation", "csr_array", np.float64)
    g = splyce.jit(splyce.grad(lambda *a: fn(snp, splyce.lax, *a), argnums=argnums))
    ref, _ = reference(fn, args, argnums)
    for n, got, r in zip(argnums, g(*args), ref):
        np.testing.assert_allclose(check_kind(args[n], got), r, rtol=1e-9, atol=1e-9)


def test_reverse_mode_through_while_and_traced_bounds_is_refused_as_jax_does():
    def w(x):
        return splyce.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2.0, x).sum()

    def wj(x):
        return jax.lax.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2.0, x).sum()

    with pytest.raises(ValueError) as ours:
        splyce.grad(w)(np.ones(3))
    with pytest.raises(ValueError) as theirs:
        jax.grad(wj)(jnp.ones(3))
    assert str(ours.value) == str(theirs.value)

    def traced_bounds(x, n):
        return splyce.fori_loop(0, n[0], lambda i, c: c * 2.0, x).sum()

    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        splyce.grad(traced_bounds)(np.ones(3), np.array([3]))
    # forward (a while loop's value) still runs
    assert float(splyce.jit(w)(np.ones(3))) == float(wj(jnp.ones(3)))


def test_zero_trip_count_passes_the_cotangent_through():
    g = splyce.grad(lambda x: (splyce.fori_loop(3, 3, lambda i, c: c * 5.0, x) ** 2).sum())(np.arange(3.0))
    np.testing.assert_array_equal(g, 2 * np.arange(3.0))


def test_scan_reverse_equals_jax():
    f = lambda c, x: (c * 0.5 + x, c * x)
    c, ys = splyce.lax.scan(f, 1.0, np.arange(5.0), reverse=True)
    cj, ysj = jax.lax.scan(f, 1.0, jnp.arange(5.0), reverse=True)
    np.testing.assert_allclose(c, cj)
    np.testing.assert_allclose(ys, ysj)


A = sps.random_array((12, 12), density=0.3, format="csr", rng=5)
AD = A.toarray()


@pytest.mark.parametrize("which", ["fori", "scan", "while", "while-batched-cond",
                                   pytest.param("grad-of-fori", marks=pytest.mark.slow)])
def test_vmap_through_loops_against_jax(which):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, 12))
    XS = rng.standard_normal((4, 5, 12))
    if which == "fori":
        ours = splyce.vmap(lambda x: splyce.fori_loop(0, 3, lambda i, c: np.tanh(A @ c) + i * 0.1, x))(X)
        ref = jax.vmap(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(AD @ c) + i * 0.1, x))(X)
    elif which == "scan":
        ours = splyce.vmap(lambda c, xs: splyce.lax.scan(lambda c, x: (np.sin(A @ c) + x, (c * x).sum()), c, xs),
                           in_axes=(None, 0))(X[0], XS)
        ref = jax.vmap(lambda c, xs: jax.lax.scan(lambda c, x: (jnp.sin(AD @ c) + x, (c * x).sum()), c, xs),
                       in_axes=(None, 0))(X[0], XS)
    elif which == "while":
        ours = splyce.vmap(lambda x: splyce.while_loop(lambda c: c[1] < 4.0, lambda c: (A @ c[0] - c[0], c[1] + 1.0),
                                                       (x, 0.0)))(X)
        ref = jax.vmap(lambda x: jax.lax.while_loop(lambda c: c[1] < 4.0, lambda c: (AD @ c[0] - c[0], c[1] + 1.0),
                                                    (x, 0.0)))(X)
    elif which == "while-batched-cond":   # each example stops at its own step, as in JAX
        ours = splyce.vmap(lambda x: splyce.while_loop(lambda c: (c ** 2).sum() < 50.0, lambda c: c * 1.7 + 0.1,
                                                       x))(X)
        ref = jax.vmap(lambda x: jax.lax.while_loop(lambda c: (c ** 2).sum() < 50.0, lambda c: c * 1.7 + 0.1, x))(X)
    else:
        loss = lambda x: (splyce.fori_loop(0, 3, lambda i, c: np.tanh(A @ c), x) ** 2).sum()  # noqa: E731
        ours = splyce.vmap(splyce.grad(loss))(X)
        ref = jax.vmap(jax.grad(lambda x: (jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(AD @ c), x) ** 2).sum()))(X)
    for o, r in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("which", ["while", pytest.param("scan", marks=pytest.mark.slow),
                                   pytest.param("fori-sparse-tangent", marks=pytest.mark.slow)])
def test_jvp_through_loops_against_jax(which):
    """Forward mode goes through every loop, while_loop and traced bounds included, as jax.jvp."""
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal(12), rng.standard_normal(12)
    if which == "while":
        ours = splyce.jvp(lambda x: splyce.while_loop(
            lambda c: c[1] < 4.0, lambda c: (np.tanh(A @ c[0]) + c[0] * 0.3, c[1] + 1.0), (x, 0.0))[0], (x,), (t,))
        ref = jax.jvp(lambda x: jax.lax.while_loop(
            lambda c: c[1] < 4.0, lambda c: (jnp.tanh(AD @ c[0]) + c[0] * 0.3, c[1] + 1.0), (x, 0.0))[0], (x,), (t,))
    elif which == "scan":
        xs, txs = rng.standard_normal((4, 12)), rng.standard_normal((4, 12))
        ours = splyce.jvp(lambda c, xs: splyce.lax.scan(lambda c, x: (np.sin(A @ c) * x, (c * x).sum()), c, xs),
                          (x, xs), (t, txs))
        ref = jax.jvp(lambda c, xs: jax.lax.scan(lambda c, x: (jnp.sin(AD @ c) * x, (c * x).sum()), c, xs),
                      (x, xs), (t, txs))
    else:
        TA = A.copy()
        TA.data = rng.standard_normal(A.nnz)
        ours = splyce.jvp(lambda a, x: splyce.fori_loop(0, 3, lambda i, c: np.tanh(a @ c) * (i + 1.0), x),
                          (A, x), (TA, t))
        ref = jax.jvp(lambda a, x: jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(a @ c) * (i + 1.0), x),
                      (AD, x), (TA.toarray(), t))
    for o, r in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-10, atol=1e-12)
