"""Transcendental math in compiled kernels served by glibc's libmvec (backend/vector_math.py): accuracy per
function and dtype (max ulp over a corpus of inputs, against a higher-precision reference), NaN / Inf / zero
results equal to NumPy's, the vector call present in the generated IR and assembly, the Splyce pass still bit
for bit the plain sparsifier's loops, and the scalar fallback (libmvec off, missing, or a target without
AVX2)."""

import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
import splyce.numpy as snp
from splyce.backend import vector_math
from splyce.bench.vector_math import FUNCTIONS, corpus, reference, specials_match, ulp_error

# glibc documents its vector math functions to at most 4 ulp; measured here (2026-12-08, glibc 2.36): 3.73
# (logf), 3.09 (cos), 2.92 (sin), the others <= 2.5 (docs/toolchain.md)
ULP_BOUND = 4.0
# libm's scalar functions (the fallback): glibc's exp / log / sin / cos are correctly rounded but for a few
# cases (< 1 ulp), its float32 / tanh / expm1 / log1p ones within 2-3 ulp (glibc's libm-test-ulps)
LIBM_BOUND = 4.0

QUICK = {("exp", "float64"), ("log1p", "float32"), ("tanh", "float64")}
CASES = [pytest.param(f, d, marks=() if (f, d) in QUICK else pytest.mark.slow)
         for f in FUNCTIONS for d in ("float64", "float32")]

SERVED = bool(vector_math.available())


def _jit(function):
    return splyce.jit(lambda a: getattr(np, function)(a))


@pytest.mark.parametrize("function, dtype", CASES)
def test_accuracy_and_special_values(function, dtype):
    x = corpus(function, dtype)
    f = _jit(function)
    got = f(x)
    with np.errstate(all="ignore"):
        expected = getattr(np, function)(x)
    assert got.dtype == expected.dtype
    worst = ulp_error(got, reference(function, x)).max()
    assert worst <= ULP_BOUND, f"{function} {dtype}: {worst} ulp"
    assert specials_match(got, expected), f"{function} {dtype}: NaN / Inf / zero results differ from NumPy's"
    assert not np.isnan(got[~np.isnan(expected)]).any()
    ll = f.lower(x).as_text("llvm")
    lanes = 4 if dtype == "float64" else 8
    if SERVED:   # this machine has libmvec: the kernel calls its AVX2 variant, and no libm
        name = f"_ZGVdN{lanes}v_{function}{'f' if dtype == 'float32' else ''}"
        assert re.search(rf"call <{lanes} x (double|float)> @{name}\(", ll), ll[-3000:]


def test_the_vector_call_is_in_the_vector_loop_and_the_assembly():
    x = np.linspace(-5, 5, 1001)
    low = _jit("exp").lower(x)
    ll = low.as_text("llvm")
    asm = low.as_text("asm")
    if not SERVED:
        assert "_ZGV" not in ll
        return
    body = ll[ll.index("vector.body:"):]
    body = body[:body.index("\n\n")]
    assert "call <4 x double> @_ZGVdN4v_exp(<4 x double>" in body
    assert not re.search(r"@exp\(|llvm\.exp\.", ll)          # no libm exp, no intrinsic left to scalarize
    # a direct call, or (LLVM's large JIT code model) the address in a register and an indirect call
    assert re.search(r"call\w*\s+_ZGVdN4v_exp|movabsq\s+\$_ZGVdN4v_exp", asm)
    assert "ymm" in asm


def _logistic_gradient(X, w, y):
    return X.T @ (1.0 / (1.0 + np.exp(-(X @ w))) - y)


def _logreg(A, w, y):
    return snp.mean(snp.log1p(snp.exp(-y * (A @ w))))


@pytest.mark.parametrize("rows, per_row", [(3000, 5), (40_000, 3)])
def test_splyce_pass_bit_identical_to_plain_loops(rows, per_row):
    """fast_math=False with the Splyce pass (flat rows, the row values' loop of its own) and without it
    (vectorize=False): the same bits, and each element's exp the same libmvec function's whichever loop
    computes it. 3000 rows of 5: the loop nest; 40k rows of 3: the flat twin (goes_flat)."""
    rng = np.random.default_rng(7)
    X = sps.random_array((rows, 500), density=per_row / 500, format="csr", rng=8)
    w = rng.standard_normal(500)
    y = (rng.random(rows) < 0.5).astype(np.float64)
    x = rng.standard_normal(4099) * 30
    for program, args in [(_logistic_gradient, (X, w, y)), (lambda a: np.tanh(a) * np.exp(-a), (x,)),
                          (lambda a: np.log1p(a), (sps.csr_array(abs(X)),))]:
        fast = splyce.jit(program, fast_math=False)
        plain = splyce.jit(program, vectorize=False)
        a, b = fast(*args), plain(*args)
        if sps.issparse(a):
            a, b = sps.csr_array(a), sps.csr_array(b)
            assert np.array_equal(a.indices, b.indices) and np.array_equal(a.indptr, b.indptr)
            a, b = a.data, b.data
        assert np.array_equal(np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64))
    g = splyce.jit(splyce.grad(_logreg, argnums=1), fast_math=False)
    h = splyce.jit(splyce.grad(_logreg, argnums=1), vectorize=False)
    y2 = 2 * y - 1
    assert np.array_equal(g(X, w, y2).view(np.uint64), h(X, w, y2).view(np.uint64))
    want = X.T @ (-y2 / (1 + np.exp(y2 * (X @ w))) / rows)
    np.testing.assert_allclose(g(X, w, y2), want, rtol=1e-12, atol=1e-15)
    if SERVED and rows == 3000:   # the nest's exp a row: a loop of its own, vectorized with libmvec
        ll = splyce.jit(_logistic_gradient).lower(X, w, y).as_text("llvm")
        assert re.search(r"call <4 x double> @_ZGVdN4v_exp\(", ll)


def _assert_scalar_fallback(f, x):
    ll = f.lower(x).as_text("llvm")
    assert "_ZGV" not in ll and "splyce.vm." not in ll
    assert re.search(r"@exp\(|@llvm\.exp\.", ll)
    got = f(x)
    assert ulp_error(got, reference("exp", x)).max() <= LIBM_BOUND
    with np.errstate(all="ignore"):
        assert specials_match(got, np.exp(x))


def test_fallback_switched_off(monkeypatch):
    monkeypatch.setenv("SPLYCE_VECTOR_MATH", "0")
    assert vector_math.available() == {} and vector_math.key() == "off"
    _assert_scalar_fallback(_jit("exp"), corpus("exp", "float64"))


def test_fallback_without_libmvec(monkeypatch):
    """A machine whose libmvec does not load (or lacks a function): scalar libm calls, same answers."""
    monkeypatch.setattr(vector_math, "_library", False)
    assert vector_math.available() == {} and vector_math.key() == "off"
    _assert_scalar_fallback(_jit("exp"), corpus("exp", "float32"))


def test_rewrite_declines_targets_without_avx2_and_functions_libmvec_lacks(monkeypatch):
    from splyce.native import codegen

    host = codegen.host_target()
    text = ("define double @k(double %x) {\n  %y = call double @llvm.exp.f64(double %x)\n"
            "  %z = call double @log1p(double %y)\n  ret double %z\n}\n"
            "declare double @llvm.exp.f64(double)\ndeclare double @log1p(double)\n")
    no_avx2 = codegen.Target(triple=host.triple, cpu="x86-64", features="+sse2,-avx2")
    assert vector_math.rewrite(text, no_avx2) == (text, [])
    if not SERVED:
        assert vector_math.rewrite(text, host) == (text, [])
        return
    out, called = vector_math.rewrite(text, host)
    assert called == ["_ZGVdN4v_exp", "_ZGVdN4v_log1p"]
    codegen.parse(out, host)        # valid IR
    monkeypatch.setattr(vector_math, "available", lambda isa="d": {"exp": "_ZGVdN4v_exp"})
    out, called = vector_math.rewrite(text, host)    # a glibc older than 2.35: exp served, log1p stays libm
    assert called == ["_ZGVdN4v_exp"] and "call double @log1p(" in out
    codegen.parse(out, host)


def test_disk_cache_key_follows_the_setting(monkeypatch):
    on = vector_math.key()
    monkeypatch.setenv("SPLYCE_VECTOR_MATH", "0")
    assert vector_math.key() == "off"
    assert on == "off" or on != vector_math.key()


@pytest.mark.slow
def test_bench_subcommand_tiny(tmp_path, capsys):
    from splyce.bench import __main__ as cli

    assert cli.main(["vector_math", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "vector_math.md").read_text()
    assert text.count("accuracy ") == 2 * len(FUNCTIONS) and "logistic gradient step" in text
    import csv

    with open(tmp_path / "vector_math.csv") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    accuracy = [r for r in rows if r["case"].startswith("accuracy")]
    assert all(float(r["splyce_ulp"]) <= ULP_BOUND and r["specials_equal"] in ("True", "1") for r in accuracy)
    assert all(float(r["libmvec_ms"]) > 0 for r in rows if not r["case"].startswith("accuracy"))
