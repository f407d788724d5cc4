"""splyce.grad / value_and_grad / vjp on the gradient corpus (tests/transforms/grad_corpus.py), against jax.grad on the
dense equivalents (float64) and against central finite differences, for every operand kind and float
dtype; composition with jit; errors."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.numpy as snp
from grad_corpus import CORPUS
from unseen_grad_corpus import UNSEEN

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

KINDS = ("csr_array", "csr_matrix", "csc_array", "SparseTensor")
QUICK = {("masked_factorisation", "csr_matrix", "float64"), ("stored_values", "SparseTensor", "float32")}


def _sparse(rng, shape, density, dtype, kind, pattern=None):
    if pattern is None:
        base = sps.random_array(shape, density=density, format="csr", rng=rng, dtype=np.float64)
        base.data = rng.uniform(-1, 1, base.nnz)
    else:
        base = pattern.copy()
        base.data = rng.uniform(-1, 1, base.nnz)
    base = base.astype(dtype)
    if kind == "csr_array":
        return base
    if kind == "csr_matrix":
        return sps.csr_matrix(base)
    if kind == "csc_array":
        return base.tocsc()
    return splyce.asarray(base)


def _dense_of(x):
    if isinstance(x, splyce.SparseTensor):
        return x.to_numpy()
    if sps.issparse(x):
        return x.toarray()
    return np.asarray(x)


def _coords(x):
    if isinstance(x, splyce.SparseTensor):
        return tuple(np.asarray(c) for c in x.coords())
    coo = x.tocoo() if x.format != "csc" else None
    if x.format == "csr":
        return (np.repeat(np.arange(x.shape[0]), np.diff(x.indptr)), x.indices)
    if x.format == "csc":
        return (x.indices, np.repeat(np.arange(x.shape[1]), np.diff(x.indptr)))
    return tuple(coo.coords)


def _values(x):
    return np.asarray(x.values if isinstance(x, splyce.SparseTensor) else x.data)


def make_args(name, kind, dtype, seed=0):
    fn, specs, argnums = CORPUS[name] if name in CORPUS else UNSEEN[name]
    rng = np.random.default_rng(seed)
    args = []
    for spec in specs:
        if isinstance(spec, str):
            src = args[int(spec.split(":")[1])]
            pattern = sps.csr_array(_dense_of(src) != 0).astype(np.float64)
            args.append(_sparse(rng, None, None, dtype, kind, pattern=pattern))
        elif spec[0] == "sparse":
            args.append(_sparse(rng, spec[1], spec[2], dtype, kind))
        elif spec[0] == "sign":
            args.append(rng.choice([-1.0, 1.0], size=spec[1]).astype(dtype))
        elif spec[0] == "count":
            args.append(rng.poisson(1.5, size=spec[1]).astype(dtype))
        elif spec[0] == "onehot":
            args.append(np.eye(spec[1][1], dtype=dtype)[rng.integers(0, spec[1][1], spec[1][0])])
        elif spec[0] == "mask":
            args.append((2.0 * (rng.random(spec[1]) < 0.5)).astype(dtype))
        else:
            args.append(np.asarray(rng.uniform(-1, 1, spec[1]), dtype=dtype))
    return fn, args, argnums


def reference(fn, args, argnums):
    dense = [jnp.asarray(_dense_of(a), dtype=jnp.float64) for a in args]
    grads = jax.grad(lambda *a: fn(jnp, *a), argnums=argnums)(*dense)
    out = []
    for n, g in zip(argnums, grads):
        g = np.asarray(g)
        a = args[n]
        out.append(g[_coords(a)] if (sps.issparse(a) or isinstance(a, splyce.SparseTensor)) else g)
    return out, float(fn(jnp, *dense))


def check_kind(arg, g):
    """The gradient has its argument's kind, class, pattern and dtype."""
    if isinstance(arg, splyce.SparseTensor):
        assert isinstance(g, splyce.SparseTensor) and g.format == arg.format and g.nnz == arg.nnz
        for c, d in zip(g.coords(), arg.coords()):
            np.testing.assert_array_equal(c, d)
        return _values(g)
    if sps.issparse(arg):
        assert type(g) is type(arg) and g.format == arg.format
        np.testing.assert_array_equal(g.indices, arg.indices)
        np.testing.assert_array_equal(g.indptr, arg.indptr)
        assert g.dtype == arg.dtype
        return g.data
    assert isinstance(g, np.ndarray) and g.shape == np.shape(arg) and g.dtype == arg.dtype
    return g


def _case(name, kind, dtype):
    marks = () if (name, kind, dtype) in QUICK else (pytest.mark.slow,)
    return pytest.param(name, kind, dtype, marks=marks, id=f"{name}-{kind}-{dtype}")


CASES = [_case(n, k, d) for n in CORPUS for k in KINDS for d in ("float64", "float32")]
UNSEEN_QUICK = {("softmax_regression", "csr_array", "float64")}
CASES += [pytest.param(n, k, d, marks=() if (n, k, d) in UNSEEN_QUICK else (pytest.mark.slow,),
                       id=f"{n}-{k}-{d}") for n in UNSEEN for k in KINDS for d in ("float64", "float32")]


@pytest.mark.parametrize("name,kind,dtype", CASES)
def test_corpus_against_jax(name, kind, dtype):
    fn, args, argnums = make_args(name, kind, np.dtype(dtype))
    ref, ref_value = reference(fn, args, argnums)
    value, grads = splyce.value_and_grad(lambda *a: fn(snp, *a), argnums=argnums)(*args)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(float(value), ref_value, **tol)
    for n, g, r in zip(argnums, grads, ref):
        got = check_kind(args[n], g)
        scale = max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
        np.testing.assert_allclose(got, r, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=f"argument {n}")


def _scalars(args):
    """0-d arrays as Python floats (``jit`` takes a number for a 0-d argument)."""
    return [float(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a for a in args]


def _perturbed(arg, direction, eps):
    if isinstance(arg, splyce.SparseTensor):
        return arg.with_values(_values(arg) + eps * direction)
    if sps.issparse(arg):
        out = arg.copy()
        out.data = arg.data + eps * direction
        return out
    return arg + eps * direction


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in ("gcn_layer", "ridge_l1") else
                                               (pytest.mark.slow,)) for n in (*CORPUS, *UNSEEN)])
def test_corpus_against_finite_differences(name):
    """Directional derivatives along random directions (of the stored values of sparse arguments), float64,
    with the forward pass run by splyce.jit."""
    fn, args, argnums = make_args(name, "csr_array", np.float64, seed=1)
    f = splyce.jit(lambda *a: fn(snp, *a))
    grads = splyce.grad(lambda *a: fn(snp, *a), argnums=argnums)(*args)
    rng = np.random.default_rng(2)
    eps = 1e-6
    for n, g in zip(argnums, grads):
        g = _values(g) if sps.issparse(g) else np.asarray(g)
        direction = rng.standard_normal(g.shape)
        plus, minus = list(args), list(args)
        plus[n] = _perturbed(args[n], direction, eps)
        minus[n] = _perturbed(args[n], direction, -eps)
        plus, minus = _scalars(plus), _scalars(minus)
        numeric = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
        np.testing.assert_allclose(float(np.sum(g * direction)), numeric, rtol=1e-5, atol=1e-6,
                                   err_msg=f"argument {n}")


def test_grad_wrt_stored_values_is_an_sddmm_at_the_pattern():
    rng = np.random.default_rng(0)
    A = sps.random_array((40, 30), density=0.05, format="csr", rng=rng)
    X = rng.standard_normal((30, 6))
    gA = splyce.grad(lambda A, X: ((A @ X) ** 2).sum())(A, X)
    G = 2 * (A @ X)
    expected = (G @ X.T)[A.nonzero()]   # the SDDMM (G X^T) sampled at A's pattern
    assert type(gA) is sps.csr_array and gA.nnz == A.nnz
    np.testing.assert_allclose(gA.data, expected, rtol=1e-12)
    text = splyce.jit(splyce.grad(lambda A, X: ((A @ X) ** 2).sum())).lower(A, X).as_text("plan")
    lines = [line for line in text.splitlines() if "= " in line and not line.strip().startswith("//")]
    sddmm = [line for line in lines if "contract[ik,ij,kj->ik" in line]
    assert len(sddmm) == 1 and "40x30xfloat64 #" in sddmm[0]          # sampled, stored sparse
    assert not any(line.rstrip().endswith(": 40x30xfloat64") for line in lines)   # no dense 40 x 30 value


def test_second_order_against_jax():
    """grad of a function of a gradient (a nested elementwise expression: the chain rule through it)."""
    rng = np.random.default_rng(6)
    A = sps.random_array((8, 5), density=0.5, format="csr", rng=rng)
    x = rng.standard_normal(5)

    def g(xp, grad):
        inner = grad(lambda A, x: xp.sum(xp.tanh(A @ x) ** 2), argnums=1)
        return lambda A, x: xp.sum(inner(A, x) ** 2)

    ours = splyce.grad(g(snp, splyce.grad), argnums=1)(A, x)
    ref = jax.grad(g(jnp, jax.grad), argnums=1)(jnp.asarray(A.toarray()), x)
    np.testing.assert_allclose(ours, np.asarray(ref), rtol=1e-10)


def test_jit_of_grad_and_grad_of_jit():
    rng = np.random.default_rng(3)
    A = sps.random_array((20, 20), density=0.2, format="csr", rng=rng)
    x = rng.standard_normal(20)

    def loss(A, x):
        return snp.sum(snp.tanh(A @ x) ** 2)

    expected = splyce.grad(loss, argnums=(0, 1))(A, x)
    inner = splyce.jit(loss)
    for g in (splyce.jit(splyce.grad(loss, argnums=(0, 1))), splyce.grad(inner, argnums=(0, 1))):
        gA, gx = g(A, x)
        np.testing.assert_allclose(gx, expected[1], rtol=1e-12)
        np.testing.assert_allclose(_dense_of(gA)[A.nonzero()], expected[0].data, rtol=1e-12)


def test_has_aux_and_pytrees():
    rng = np.random.default_rng(4)
    A = sps.random_array((10, 10), density=0.3, format="csr", rng=rng)
    params = {"w": rng.standard_normal(10), "b": np.asarray(0.5)}

    def loss(params, A):
        y = A @ params["w"] + params["b"]
        return snp.sum(y * y), y

    (value, y), g = splyce.value_and_grad(loss, has_aux=True)(params, A)
    y_ref = A @ params["w"] + 0.5
    np.testing.assert_allclose(y, y_ref)
    assert np.isclose(value, (y_ref ** 2).sum())
    np.testing.assert_allclose(g["w"], 2 * A.T @ y_ref, rtol=1e-12)
    np.testing.assert_allclose(g["b"], 2 * y_ref.sum(), rtol=1e-12)


def test_vjp():
    rng = np.random.default_rng(5)
    A = sps.random_array((12, 9), density=0.3, format="csr", rng=rng)
    x = rng.standard_normal(9)
    out, vjp_fn = splyce.vjp(lambda A, x: snp.tanh(A @ x), A, x)
    np.testing.assert_allclose(out, np.tanh(A @ x))
    ct = rng.standard_normal(12)
    gA, gx = vjp_fn(ct)
    d = ct * (1 - np.tanh(A @ x) ** 2)
    np.testing.assert_allclose(gx, A.T @ d, rtol=1e-12)
    rows, cols = A.nonzero()
    np.testing.assert_allclose(gA.data, d[rows] * x[cols], rtol=1e-12)


def test_errors():
    A = sps.random_array((5, 5), density=0.5, format="csr", rng=0)
    with pytest.raises(TypeError, match="real- or complex-valued inputs"):
        splyce.grad(lambda A, x: (A @ x).sum(), argnums=1)(A, np.arange(5))
    with pytest.raises(TypeError, match="scalar"):
        splyce.grad(lambda A, x: A @ x, argnums=1)(A, np.ones(5))
    with pytest.raises(TypeError, match="argnums"):
        splyce.grad(lambda A: A.sum(), argnums="0")
    x = np.arange(3.0)   # one array passed twice: two arguments, each its own partial (JAX's answer)
    ga, gb = splyce.grad(lambda a, b: snp.sum(a * b * b), argnums=(0, 1))(x, x)
    np.testing.assert_allclose(ga, x * x)
    np.testing.assert_allclose(gb, 2 * x * x)
    with pytest.raises(ValueError, match="same traced value"):   # one traced value twice: refused
        splyce.jit(lambda x: splyce.grad(lambda a, b: snp.sum(a * b), argnums=(0, 1))(x, x))(x)


@pytest.mark.parametrize("name", ["gcn_layer"] + [pytest.param(n, marks=pytest.mark.slow) for n in
                                                  ("sparse_elementwise", "mixed_elementwise", "reductions")])
def test_jvp_against_jax(name):
    """jvp on the corpus: the dense JAX jvp along the same direction (a sparse argument's direction on its
    pattern); for a scalar loss, <grad, direction> too."""
    fn, args, argnums = make_args(name, "csr_array", np.float64, seed=3)
    rng = np.random.default_rng(4)
    tangents = []
    for a in args:
        if sps.issparse(a):
            t = a.copy()
            t.data = rng.standard_normal(a.nnz)
        else:
            t = rng.standard_normal(np.shape(a))
        tangents.append(t)
    out, t_out = splyce.jvp(lambda *a: fn(snp, *a), tuple(args), tuple(tangents))
    dense = [jnp.asarray(_dense_of(a)) for a in args]
    ref_out, ref_t = jax.jvp(lambda *a: fn(jnp, *a), tuple(dense), tuple(jnp.asarray(_dense_of(t)) for t in tangents))
    np.testing.assert_allclose(float(out), float(ref_out), rtol=1e-10)
    np.testing.assert_allclose(float(t_out), float(ref_t), rtol=1e-9, atol=1e-10)
    grads = splyce.grad(lambda *a: fn(snp, *a), argnums=tuple(range(len(args))))(*args)
    dot = sum(float(np.sum((_values(g) if sps.issparse(g) else g) * (_values(t) if sps.issparse(t) else t)))
              for g, t in zip(grads, tangents))
    np.testing.assert_allclose(float(t_out), dot, rtol=1e-9, atol=1e-10)


def test_jit_grad_of_a_union_keeps_each_pattern():
    """Inside jit the cotangent of ``A + B`` reaches ``A`` at the union's pattern: it is sampled at ``A``'s."""
    rng = np.random.default_rng(7)
    A = sps.random_array((6, 5), density=0.3, format="csr", rng=rng)
    B = sps.random_array((6, 5), density=0.3, format="csr", rng=rng)
    x = rng.standard_normal(5)

    def f(A, B, x):
        return snp.sum(snp.tanh((A + B) @ x) ** 2)

    gA, gB = splyce.jit(splyce.grad(f, argnums=(0, 1)))(A, B, x)
    d = 2 * np.tanh((A + B) @ x) * (1 - np.tanh((A + B) @ x) ** 2)
    for M, g in ((A, gA), (B, gB)):
        g = sps.csr_array(g)
        assert g.nnz == M.nnz and np.array_equal(g.indices, M.indices) and np.array_equal(g.indptr, M.indptr)
        rows, cols = M.nonzero()
        np.testing.assert_allclose(g.data, d[rows] * x[cols], rtol=1e-12)


def test_pattern_ones_are_one_pass():
    """The ones at a sparse argument's pattern that its gradient is sampled at: the stored-entry predicate
    fused into its cast (one elementwise pass, no boolean copy of the matrix); a dense predicate's cast
    fused likewise, bit-identical to NumPy."""
    rng = np.random.default_rng(8)
    A = sps.random_array((30, 20), density=0.2, format="csr", rng=rng)
    X = rng.standard_normal((20, 4))
    text = splyce.jit(splyce.grad(lambda A, X: snp.sum(snp.tanh(A @ X) ** 2))).lower(A, X).as_text("plan")
    lines = [line for line in text.splitlines() if "= " in line and not line.strip().startswith("//")]
    assert any("ewise[cast(stored($0), 'float64')]" in line for line in lines)
    assert not any("xbool #" in line for line in lines)
    x = rng.standard_normal((7, 5))
    got = splyce.jit(lambda x: (x > 0.3).astype(np.float64) * 2.5 - x)(x)
    np.testing.assert_array_equal(got, (x > 0.3).astype(np.float64) * 2.5 - x)
