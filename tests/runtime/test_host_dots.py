"""Dot products of dense vectors computed by a jitted program on the host as NumPy computes them
(planner/cuts.py ``host_dots``, runtime/staged.py ``HostDot``): results equal the unjitted NumPy / scipy
function bit for bit (float32 / float64, Inf / NaN), the SpMV feeding a dot is the native step, and a scipy
operand read only by checking native steps is not scanned on every call but still refused when modified."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.bench.programs import cg_step
from splyce.planner import cuts
from splyce.runtime import deferred_checks


def quad(a, v):
    return v @ (a @ v)


def dots(a, x, y):
    z = a @ x
    return np.dot(z, y), z @ z, np.vdot(y, z), (x + y) @ (x - y), np.inner(z, x)


def _matrix(n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = sps.random_array((n, n), density=min(1.0, 5.0 / n), format="csr", rng=rng) + sps.eye_array(n, format="csr")
    return sps.csr_array(a.astype(dtype))


def _bits(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.atleast_1d(np.asarray(g)), np.atleast_1d(np.asarray(w))
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (g[:4], w[:4])


@pytest.fixture
def every_dot(monkeypatch):
    monkeypatch.setattr(cuts, "DOT_MIN_LENGTH", 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, 1000, 4099])
@pytest.mark.parametrize("special", [None, np.inf, np.nan])
def test_equal_numpy_bit_for_bit(every_dot, n, dtype, special):
    rng = np.random.default_rng(n)
    a = _matrix(n, dtype, n)
    v, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    if special is not None:
        v[n // 2] = special
        y[0] = -special if special == np.inf else special
    with np.errstate(all="ignore"):
        for f, args in ((quad, (a, v)), (dots, (a, v, y)), (cg_step, (a, v * 0, y, y.copy()))):
            before = [x.copy() for x in args if isinstance(x, np.ndarray)]
            jitted = splyce.jit(f)
            want = f(*args)
            for _ in range(2):
                _bits(jitted(*args), want)
            _bits(jitted(splyce.asarray(a), *args[1:]), want)
            for x, b in zip([x for x in args if isinstance(x, np.ndarray)], before):
                _bits(x, b)


def test_plan_names_the_host_dots(every_dot):
    a = _matrix(300, np.float64, 1)
    v = np.ones(300)
    text = splyce.jit(cg_step).lower(a, v, v, v).as_text("plan")
    assert text.count("host dot numpy.matmul") == 3
    text = splyce.jit(quad).lower(a, v).as_text("plan")
    assert text.count("host dot numpy.matmul") == 1 and "contract[ik,k->i]" in text


def test_short_dots_stay_in_the_kernel():
    a = _matrix(300, np.float64, 2)
    v = np.ones(300)
    assert 300 < cuts.DOT_MIN_LENGTH
    text = splyce.jit(quad).lower(a, v).as_text("plan")
    assert "host dot" not in text and "staged" not in text
    np.testing.assert_allclose(splyce.jit(quad)(a, v), quad(a, v), rtol=1e-12)


def test_integer_and_complex_dots_are_not_host_dots(every_dot):
    a = _matrix(50, np.float64, 3)
    for v in (np.arange(50), np.arange(50) * (1 + 1j)):
        f = splyce.jit(lambda a, v: (a @ v) @ v)
        assert "host dot" not in f.lower(a, v).as_text("plan")
        np.testing.assert_allclose(f(a, v), (a @ v) @ v, rtol=1e-12)


@pytest.mark.parametrize("body", [quad, cg_step], ids=lambda b: b.__name__)
@pytest.mark.parametrize("defect", ["column high", "column negative", "indptr end"])
def test_scipy_operand_deferred_and_refused_when_modified(every_dot, body, defect):
    a = _matrix(400, np.float64, 4)
    x = np.random.default_rng(2).random(400)
    args = (a, x) if body is quad else (a, x * 0, x, x.copy())
    f = splyce.jit(body, threads=1)
    for _ in range(3):
        _bits(f(*args), body(*args))
    kernel, _ = f.kernel_for(*args)
    assert deferred_checks.self_checked(kernel) == frozenset({0})
    row = int(np.argmax(np.diff(a.indptr)))
    if defect == "column high":
        a.indices[a.indptr[row]] = a.shape[1] + 7
    elif defect == "column negative":
        a.indices[a.indptr[row]] = -3
    else:
        a.indptr[-1] = a.nnz + 40
    with pytest.raises(ValueError):
        f(*args)


def test_default_length_on_a_long_vector():
    n = cuts.DOT_MIN_LENGTH
    a = _matrix(n, np.float64, 5)
    v = np.random.default_rng(3).standard_normal(n)
    f = splyce.jit(quad)
    assert "host dot" in f.lower(a, v).as_text("plan")
    _bits(f(a, v), quad(a, v))


def transposed_quad(a, v):
    return v @ (a.T @ v)


def merged_quad(a, v):
    return v @ ((a + a.T) @ v)


@pytest.mark.parametrize("body", [transposed_quad, merged_quad], ids=lambda b: b.__name__)
def test_stages_reading_otherwise_check_every_call(every_dot, body):
    a = _matrix(300, np.float64, 6)
    v = np.random.default_rng(4).random(300)
    f = splyce.jit(body, threads=1)
    for _ in range(3):
        np.testing.assert_allclose(f(a, v), body(a, v), rtol=1e-12)
    assert "host dot" in f.lower(a, v).as_text("plan")
    a.indices[a.indptr[5]] = a.shape[1] + 3
    with pytest.raises(ValueError):
        f(a, v)
