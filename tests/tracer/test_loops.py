"""Compiled loops: ``splyce.fori_loop`` / ``while_loop`` / ``scan`` against scipy's CG, Python loops and
``jax.lax`` (docs/guide/loops.md)."""

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sps
import scipy.sparse.linalg as spla

import splyce
from splyce.bench import corpus

QUICK = ["fem2d-3k", "rmat-s10"]
CORPUS = [e.name for e in corpus.select(quick=True)]


def _matrix(name, tmp_path_factory):
    entry = {e.name: e for e in corpus.entries()}[name]
    return corpus.build(entry, Path(tmp_path_factory.getbasetemp()) / "corpus-cache")


def _spd(A):
    """A symmetric, strictly diagonally dominant (so SPD) matrix of ``A``'s pattern plus the diagonal."""
    return sps.csr_array(A + A.T + sps.diags_array(np.asarray(abs(A).sum(axis=1)).ravel() * 2 + 1.0))


def _stochastic(A):
    out_degree = np.asarray(abs(A).sum(axis=0)).ravel()
    return sps.csr_array(abs(A).multiply(1.0 / np.maximum(out_degree, 1.0)[None, :]))


def cg(A, b, rtol=1e-10, maxiter=10_000):
    """CG as scipy.sparse.linalg.cg runs it (x0 = 0, stop when ||r|| <= rtol ||b||), in a while_loop."""
    x = np.zeros_like(b)
    r = b.copy()
    bound = (rtol * np.linalg.norm(b)) ** 2

    def cond(state):
        _, _, _, rs, k = state
        return (rs > bound) & (k < maxiter)

    def body(state):
        x, r, p, rs, k = state
        ap = A @ p
        alpha = rs / (p @ ap)
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = r @ r
        return x, r, r + (rs_new / rs) * p, rs_new, k + 1

    return splyce.while_loop(cond, body, (x, r, r, r @ r, 0))


def _scipy_cg(A, b, rtol):
    steps = []
    x, info = spla.cg(A, b, rtol=rtol, atol=0.0, maxiter=10_000, callback=lambda xk: steps.append(1))
    assert info == 0
    return x, len(steps)


def _check_cg(name, tmp_path_factory, jitted):
    A = _spd(_matrix(name, tmp_path_factory))
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    x, r, p, rs, k = (splyce.jit(cg) if jitted else cg)(A, b)
    want, steps = _scipy_cg(A, b, 1e-10)
    assert abs(int(k) - steps) <= max(2, steps // 20)     # dot products rounded in other orders
    assert np.linalg.norm(x - want) <= 1e-8 * np.linalg.norm(want)
    assert np.linalg.norm(A @ x - b) <= 1.01e-10 * np.linalg.norm(b)


@pytest.mark.parametrize("name", QUICK)
def test_cg_while_loop_matches_scipy(name, tmp_path_factory):
    _check_cg(name, tmp_path_factory, jitted=True)


@pytest.mark.slow
@pytest.mark.parametrize("jitted", [True, False])
@pytest.mark.parametrize("name", CORPUS)
def test_cg_while_loop_matches_scipy_on_the_corpus(name, jitted, tmp_path_factory):
    _check_cg(name, tmp_path_factory, jitted)


def _pagerank_cases(name, tmp_path_factory, steps):
    P = _stochastic(_matrix(name, tmp_path_factory))
    n = P.shape[0]
    x0 = np.full(n, 1.0 / n)

    def step(p, x):
        return 0.85 * (p @ x) + 0.15 / n

    want = x0
    for _ in range(steps):
        want = step(P, want)

    @splyce.jit
    def fori(p, x):
        return splyce.fori_loop(0, steps, lambda i, x: step(p, x), x)

    @splyce.jit
    def unrolled(p, x):
        for _ in range(steps):
            x = step(p, x)
        return x

    one = splyce.jit(step)
    by_one = x0
    for _ in range(steps):
        by_one = one(P, by_one)
    return P, x0, want, fori, unrolled, by_one


@pytest.mark.parametrize("name", QUICK)
def test_fori_pagerank_equals_the_loops(name, tmp_path_factory):
    P, x0, want, fori, unrolled, by_one = _pagerank_cases(name, tmp_path_factory, 10)
    got = fori(P, x0)
    np.testing.assert_array_equal(got, by_one)          # the same one-step kernel, called 10 times
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(unrolled(P, x0), got, rtol=1e-13, atol=0)
    eager = splyce.fori_loop(0, 10, lambda i, x: 0.85 * (P @ x) + 0.15 / P.shape[0], x0)
    np.testing.assert_array_equal(eager, got)


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS)
def test_fori_pagerank_100_steps_on_the_corpus(name, tmp_path_factory):
    P, x0, want, fori, _, by_one = _pagerank_cases(name, tmp_path_factory, 100)
    got = fori(P, x0)
    np.testing.assert_array_equal(got, by_one)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_body_traced_once_whatever_the_trip_count():
    A = sps.random_array((40, 40), density=0.1, format="csr", rng=1)
    calls = []

    def body(i, x):
        calls.append(i)
        return 0.5 * (A @ x) + 1.0

    f = splyce.jit(lambda x, *, n: splyce.fori_loop(0, n, body, x), static_argnames="n")
    x0 = np.ones(40)
    want = x0
    for _ in range(100):
        want = 0.5 * (A @ want) + 1.0
    np.testing.assert_allclose(f(x0, n=100), want, rtol=1e-13)
    assert len(calls) == 1
    f(x0 + 1.0, n=100)
    assert len(calls) == 1 and f.cache_info().misses == 1
    text = f.lower(x0, n=100).as_text("plan")
    assert "fori_loop 0..100" in text and "driver loop re-entering the body's one compiled kernel" in text
    assert "100 iterations" in text
    with pytest.raises(TypeError, match="runs as stages"):
        splyce.profile(f, x0, n=3)


def test_while_cond_reads_a_traced_norm():
    rng = np.random.default_rng(0)
    M = sps.random_array((60, 60), density=0.1, format="csr", rng=2)
    M = sps.csr_array(M + M.T + sps.eye_array(60) * 3)
    v0 = rng.random(60)

    @splyce.jit
    def power(m, v):
        def body(s):
            v, _, k = s
            w = m @ v
            w = w / np.linalg.norm(w)
            return w, np.linalg.norm(w - v), k + 1
        return splyce.while_loop(lambda s: s[1] > 1e-9, body, (v / np.linalg.norm(v), 1.0, 0))

    v, change, k = power(M, v0)
    want, delta, count = v0 / np.linalg.norm(v0), 1.0, 0
    while delta > 1e-9:
        w = M @ want
        w = w / np.linalg.norm(w)
        delta, want, count = np.linalg.norm(w - want), w, count + 1
    assert int(k) == count and isinstance(k, np.int64) and isinstance(change, np.float64)
    np.testing.assert_allclose(v, want, rtol=1e-12)


def test_scan_stacks_like_a_python_loop():
    xs = np.arange(12.0).reshape(4, 3)
    carry, ys = splyce.scan(lambda c, x: (c * 0.5 + x, (c @ x, c)), np.ones(3), xs)
    c, dots, cs = np.ones(3), [], []
    for x in xs:
        dots.append(c @ x)
        cs.append(c)
        c = c * 0.5 + x
    np.testing.assert_array_equal(carry, c)
    np.testing.assert_array_equal(ys[0], dots)
    np.testing.assert_array_equal(ys[1], np.stack(cs))


@pytest.mark.slow
def test_scan_stacks_like_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    xs = {"a": np.arange(12.0).reshape(4, 3), "b": np.linspace(0, 1, 4)}

    def f(carry, x):
        s, k = carry
        s = s * 0.5 + x["a"] * x["b"]
        return (s, k + 1), {"s": s, "norm": s @ s, "pair": (x["b"] * 2.0, s - 1.0)}

    init = (np.zeros(3), 0)
    got_carry, got_ys = splyce.scan(f, init, xs)
    want_carry, want_ys = jax.lax.scan(f, init, xs)
    np.testing.assert_allclose(got_carry[0], want_carry[0], rtol=1e-14)
    assert int(got_carry[1]) == int(want_carry[1]) == 4
    assert got_ys["s"].shape == (4, 3) and got_ys["norm"].shape == (4,) and got_ys["pair"][0].shape == (4,)
    for g, w in zip(jax.tree_util.tree_leaves(got_ys), jax.tree_util.tree_leaves(want_ys)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-14)
    # no xs: length steps; y None
    carry, ys = splyce.scan(lambda c, _: (c * 2.0, None), np.ones(2), length=5)
    np.testing.assert_array_equal(carry, [32.0, 32.0])
    assert ys is None
    # inside jit, on a sparse operand
    A = sps.random_array((20, 20), density=0.2, format="csr", rng=4)
    run = splyce.jit(lambda a, x0, xs: splyce.scan(lambda c, x: (a @ c + x, c.sum()), x0, xs))
    c, ys = run(A, np.ones(20), np.ones((3, 20)))
    want, sums = np.ones(20), []
    for _ in range(3):
        sums.append(want.sum())
        want = A @ want + 1.0
    np.testing.assert_allclose(c, want, rtol=1e-13)
    np.testing.assert_allclose(ys, sums, rtol=1e-13)


def test_fori_reads_the_index_and_traced_bounds():
    got = splyce.fori_loop(2, 7, lambda i, x: x * 2.0 + i, np.zeros(3))
    want = np.zeros(3)
    for i in range(2, 7):
        want = want * 2.0 + i
    np.testing.assert_array_equal(got, want)

    @splyce.jit
    def count(x):
        n = (x > 0).sum()          # a traced int64 scalar
        return splyce.fori_loop(0, n, lambda i, acc: acc + x, np.zeros_like(x))

    x = np.array([1.0, -2.0, 3.0, 4.0])
    np.testing.assert_array_equal(count(x), 3 * x)


def test_nested_loops():
    A = sps.random_array((30, 30), density=0.1, format="csr", rng=5)

    @splyce.jit
    def nested(a, x):
        def outer(i, x):
            return splyce.fori_loop(0, 3, lambda j, y: 0.5 * (a @ y) + x, x) / 2.0
        return splyce.fori_loop(0, 4, outer, x)

    x0 = np.ones(30)
    want = x0
    for _ in range(4):
        y = want
        for _ in range(3):
            y = 0.5 * (A @ y) + want
        want = y / 2.0
    np.testing.assert_allclose(nested(A, x0), want, rtol=1e-13)


def test_trip_count_zero():
    x0 = np.arange(3.0)
    out = splyce.fori_loop(5, 5, lambda i, x: x + 1.0, x0)
    np.testing.assert_array_equal(out, x0)
    assert out is not x0 and not np.shares_memory(out, x0)
    out = splyce.fori_loop(5, 2, lambda i, x: x + 1.0, x0)
    np.testing.assert_array_equal(out, x0)
    f = splyce.jit(lambda x: splyce.while_loop(lambda s: s[0].sum() > 100.0, lambda s: (s[0] * 2.0, s[1] + 1), (x, 0)))
    x, k = f(x0)
    np.testing.assert_array_equal(x, x0)
    assert not np.shares_memory(x, x0) and int(k) == 0
    carry, ys = splyce.scan(lambda c, x: (c + x, c * x), np.zeros(2), np.zeros((0, 2)))
    np.testing.assert_array_equal(carry, [0.0, 0.0])
    assert ys.shape == (0, 2)


def test_eager_loops_read_the_current_constants():
    global _G
    _G = np.ones(4)
    body = _global_body
    np.testing.assert_array_equal(splyce.fori_loop(0, 2, body, np.zeros(4)), 2 * np.ones(4))
    _G = np.full(4, 3.0)
    np.testing.assert_array_equal(splyce.fori_loop(0, 2, body, np.zeros(4)), np.full(4, 6.0))


_G = None


def _global_body(i, x):
    return x + _G


@pytest.mark.parametrize("body, message", [
    (lambda i, x: (x[0].astype(np.int64), x[1]), r"identical types: the carry's leaf init_val\[0\] is float64\[3\] in the "
                                      r"input and int64\[3\] in the output"),
    (lambda i, x: (x[0][:2], x[1]), r"init_val\[0\] is float64\[3\] in the input and float64\[2\]"),
    (lambda i, x: x[0], r"the carry's structure changed"),
    (lambda i, x: (x[0], x[1] + 0.5), r"init_val\[1\] is int64\[\] in the input and float64\[\]"),
])
def test_invalid_carries_are_refused(body, message):
    with pytest.raises(TypeError, match=message):
        splyce.fori_loop(0, 3, body, (np.ones(3), 0))
    with pytest.raises(TypeError, match=message):
        splyce.jit(lambda x: splyce.fori_loop(0, 3, body, (x, 0)))(np.ones(3))


def test_bad_loops_are_refused():
    A = sps.random_array((5, 5), density=0.5, format="csr", rng=0)
    with pytest.raises(TypeError, match="init_val is sparse"):
        splyce.fori_loop(0, 2, lambda i, a: a, A)
    with pytest.raises(TypeError, match=r"\(sparse\) in the output"):
        splyce.jit(lambda a: splyce.fori_loop(0, 2, lambda i, x: a * x, np.ones((5, 5))))(A)
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
        splyce.while_loop(lambda x: x.sum(), lambda x: x, np.ones(2))
    with pytest.raises(TypeError, match="Python bool"):
        splyce.while_loop(lambda x: True, lambda x: x, np.ones(2))
    with pytest.raises(TypeError, match="must return a pair"):
        splyce.scan(lambda c, x: c, np.ones(2), np.ones((3, 2)))
    with pytest.raises(ValueError, match="disagrees with leading axis sizes"):
        splyce.scan(lambda c, x: (c, x), np.ones(2), np.ones((3, 2)), length=4)
    with pytest.raises(ValueError, match="`length` not provided"):
        splyce.scan(lambda c, x: (c, x), np.ones(2))
    with pytest.raises(TypeError, match="lower must be an integer"):
        splyce.fori_loop(0.5, 2, lambda i, x: x, np.ones(2))


# -- native steps anywhere: a program cut into stages (planner/cuts.py) ------------------------------------------

def _short_rows(n=20_000, seed=7):
    """A matrix of ~2.5 entries a row (the native flat SpMV's kind: cut points once over the threshold)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), 2)
    cols = rng.integers(0, n, size=rows.size)
    A = sps.csr_array((rng.random(rows.size), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    return A


def _unrolled_cg(a, x, r, p):
    from splyce.bench.programs import cg_step

    for _ in range(4):
        x, r, p = cg_step(a, x, r, p)
    return x, r, p


def test_cut_program_stages_and_results(monkeypatch):
    from splyce.native import spmv
    from splyce.planner import cuts

    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)
    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", 0)     # the flat kernel on this small matrix too
    A = _short_rows()
    n = A.shape[0]
    x0 = np.full(n, 1.0 / n)

    def pagerank(p, x):
        for _ in range(6):
            x = 0.85 * (p @ x) + 0.15 / n
        return x

    want = pagerank(A, x0)
    cut = splyce.jit(pagerank)
    got = cut(A, x0)
    text = cut.lower(A, x0).as_text("plan")
    assert "cut at its products" in text and text.count("native matmul") == 6
    assert len(re.findall(r"^  stage \d+: kernel", text, re.M)) == 6    # each value computed once: a stage a step
    np.testing.assert_array_equal(got, want)         # the native SpMV and the glue: scipy's bits
    np.testing.assert_array_equal(splyce.jit(pagerank, vectorize=False)(A, x0), got)
    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 10**12)
    np.testing.assert_array_equal(splyce.jit(pagerank)(A, x0), got)


@pytest.mark.slow
def test_cut_cg_steps(monkeypatch):
    from splyce.native import spmv
    from splyce.planner import cuts

    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)
    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", 0)
    A = _short_rows()
    n = A.shape[0]
    spd = _spd(A)
    b = np.random.default_rng(1).random(n)
    args = (spd, np.zeros(n), b, b.copy())
    got = splyce.jit(_unrolled_cg)(*args)
    plain = splyce.jit(_unrolled_cg, vectorize=False)(*args)
    for g, p, w in zip(got, plain, _unrolled_cg(*args)):
        np.testing.assert_array_equal(g, p)          # the Splyce pass changes no result, cut or not
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10 * np.abs(w).max())   # dots in other orders


def test_small_programs_are_not_cut():
    A = _short_rows(2_000)
    f = splyce.jit(lambda p, x: 0.5 * (p @ (0.5 * (p @ x) + 1.0)) + 1.0)
    x = np.ones(2_000)
    np.testing.assert_allclose(f(A, x), 0.5 * (A @ (0.5 * (A @ x) + 1.0)) + 1.0, rtol=1e-14)
    assert "staged" not in f.lower(A, x).as_text("plan")


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_sparse_values_around_a_loop(kind):
    A = sps.random_array((50, 50), density=0.1, format="csr", rng=0)
    M = A if kind == "array" else sps.csr_matrix(A)

    @splyce.jit
    def f(a, x):
        b = a + a.T                               # a sparse value computed before the loop, read by its body
        y = splyce.fori_loop(0, 5, lambda i, y: 0.1 * (b @ y) + x, x)
        return a * y.sum(), y                     # a sparse result after it

    s, y = f(M, np.ones(50))
    B, want = A + A.T, np.ones(50)
    for _ in range(5):
        want = 0.1 * (B @ want) + 1.0
    np.testing.assert_allclose(y, want, rtol=1e-14)
    assert type(s) is type(M)
    np.testing.assert_allclose((s - A * want.sum()).toarray(), 0, atol=1e-12)


@pytest.mark.slow
def test_jacobi_glue_stays_apart_and_is_cut(monkeypatch):
    from splyce.planner import cuts

    A = _spd(sps.random_array((3000, 3000), density=0.003, format="csr", rng=3))
    d = A.diagonal()
    R = sps.csr_array(A - sps.diags_array(d))
    b = np.random.default_rng(2).random(3000)

    def jacobi(r, x):
        for _ in range(3):
            x = (b - r @ x) * (1.0 / d)
        return x

    want = jacobi(R, np.zeros(3000))
    f = splyce.jit(jacobi)
    np.testing.assert_allclose(f(R, np.zeros(3000)), want, rtol=1e-13)
    text = f.lower(R, np.zeros(3000)).as_text("plan")
    assert "staged" not in text and "fused contract[a,a->a]" not in text    # dinv applied once per entry of x
    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)     # x = (b - y) * dinv reads three vectors: a cut point
    g = splyce.jit(jacobi)
    np.testing.assert_array_equal(g(R, np.zeros(3000)), f(R, np.zeros(3000)))
    text = g.lower(R, np.zeros(3000)).as_text("plan")
    assert "cut at its products" in text and text.count("native matmul") == 3


@pytest.mark.slow
def test_label_spreading_spmm_is_cut(monkeypatch):
    from splyce.planner import cuts

    S = abs(sps.random_array((2000, 2000), density=0.005, format="csr", rng=5))
    Y = np.zeros((2000, 4))
    Y[np.arange(0, 2000, 50), np.arange(0, 2000, 50) % 4] = 1.0

    def spread(s, f):
        for _ in range(3):
            f = 0.9 * (s @ f) + 0.1 * Y
        return f

    want = spread(S, Y)
    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)
    f = splyce.jit(spread)
    np.testing.assert_array_equal(f(S, Y), want)
    text = f.lower(S, Y).as_text("plan")
    assert "cut at its products" in text and text.count("native matmul") == 3


def _power_norm(a, x):
    for _ in range(3):
        y = a @ x
        x = y / np.linalg.norm(y)
    return x


def _power_max(a, x):
    for _ in range(3):
        y = a @ x
        x = y / np.abs(y).max()
    return x


def _power_rayleigh(a, x):
    for _ in range(3):
        y = a @ x
        x = y / np.sqrt(y @ y)
    return x, x @ (a @ x)


@pytest.mark.parametrize("program", [_power_norm, _power_max, _power_rayleigh])
def test_power_iteration_is_cut_at_its_products(monkeypatch, program):
    """Power iteration's SpMV over a computed ``y / norm(y)`` (a division the fused kernel would recompute at
    every stored entry) is a cut point whichever way the step normalises: its result read by ``y * y``
    (``np.linalg.norm``, a dot) as well as by the glue; the norm of a dense real vector is NumPy's
    ``sqrt(y.dot(y))``, so with the native SpMV (scipy's order) the iterates equal scipy's bit for bit."""
    from splyce.planner import cuts

    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)
    monkeypatch.setattr(cuts, "DOT_MIN_LENGTH", 1)
    A = _spd(sps.random_array((3000, 3000), density=0.003, format="csr", rng=4))
    x0 = np.random.default_rng(3).random(3000)
    want = program(A, x0)
    f = splyce.jit(program)
    got = f(A, x0)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        if program is _power_rayleigh:
            np.testing.assert_allclose(g, w, rtol=1e-13)
        else:
            np.testing.assert_array_equal(g, w)
    text = f.lower(A, x0).as_text("plan")
    native = text.count("native matmul") + text.count("runs on the native kernel library: matmul")
    assert "cut at its products" in text and native == text.count("contract[ik,k->i") + text.count(
        "native matmul") >= 3   # every SpMV native: none left a loop nest of a fused kernel
    plain = splyce.jit(program, vectorize=False)(A, x0)
    for g, p in zip(got if isinstance(got, tuple) else (got,), plain if isinstance(plain, tuple) else (plain,)):
        np.testing.assert_array_equal(g, p)          # the Splyce pass changes no result


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 5, 1000, 70_000])
def test_norm_of_a_vector_is_numpys(dtype, n):
    """``np.linalg.norm`` of a dense real vector is NumPy's ``sqrt(x.dot(x))``: bit for bit once it is long
    enough to be a host dot, the same value either way."""
    y = (np.random.default_rng(n).standard_normal(n) * 1e3).astype(dtype)
    f = splyce.jit(lambda y: (np.linalg.norm(y), y / np.linalg.norm(y), np.linalg.norm(y, keepdims=True)))
    got = f(y)
    want = (np.linalg.norm(y), y / np.linalg.norm(y), np.linalg.norm(y, keepdims=True))
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == w.dtype and np.shape(g) == np.shape(w)
        if n >= 50_000:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=4 * np.finfo(dtype).eps)


def test_cg_steps_spmv_is_cut_when_scaled_glue_reads_it(monkeypatch):
    """CG's ``ap = a @ p`` is read by the dot ``p @ ap`` and by ``r - alpha * ap``, whose ``alpha * ap`` is a
    scaling traced as a contraction (``contract[,a->a]``): glue, so every SpMV is a native step of its own stage
    (with ``p = r + beta * p``, over two vectors, which the fused kernel would recompute at every stored entry)."""
    from splyce.native import spmv
    from splyce.planner import cuts

    monkeypatch.setattr(cuts, "CUT_MIN_ENTRIES", 0)
    monkeypatch.setattr(cuts, "DOT_MIN_LENGTH", 1)
    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", 0)
    A = _spd(_short_rows(3000))
    b = np.random.default_rng(1).random(3000)
    args = (A, np.zeros(3000), b, b.copy())
    f = splyce.jit(_unrolled_cg)
    got = f(*args)
    text = f.lower(*args).as_text("plan")
    native = text.count("native matmul") + text.count("runs on the native kernel library: matmul")
    assert native == 4 and text.count("contract[ik,k->i") == text.count("runs on the native kernel library: matmul")
    for g, w in zip(got, _unrolled_cg(*args)):       # native SpMV and NumPy's dots: scipy's order throughout
        np.testing.assert_array_equal(g, w)


def test_threads_cut_the_products_native_would_split():
    """With several threads a fused kernel of several SpMVs runs on one (passes/parallel.py declines its
    top-level loops), where the native SpMV splits its rows past the drop-ins' serial limit: such an SpMV
    is a cut point on more than one thread, not on one (rows of ~8 entries: not the flat kernel's)."""
    from splyce.dropin.kernels import SERIAL_MAX_WORK
    from splyce.planner import cuts

    assert cuts.SPLIT_MIN_WORK == SERIAL_MAX_WORK
    n = 70_000
    A = sps.random_array((n, n), density=8.0 / n, format="csr", rng=11)
    assert A.nnz * 4 > cuts.SPLIT_MIN_WORK and A.nnz >= cuts.CUT_MIN_ENTRIES
    P = _stochastic(A)
    x0 = np.full(n, 1.0 / n)

    def pagerank(p, x):
        for _ in range(3):
            x = 0.85 * (p @ x) + 0.15 / n
        return x

    two, one = splyce.jit(pagerank, threads=2), splyce.jit(pagerank, threads=1)
    assert "cut at its products" in two.lower(P, x0).as_text("plan")
    assert "staged" not in one.lower(P, x0).as_text("plan")
    want = pagerank(P, x0)
    np.testing.assert_array_equal(two(P, x0), want)      # native SpMVs in scipy's order, glue as NumPy's
    np.testing.assert_array_equal(one(P, x0), want)
