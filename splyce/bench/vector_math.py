"""Accuracy and speed of transcendental elementwise math in compiled kernels (backend/vector_math.py):
``python -m splyce.bench vector_math``.

Accuracy: max ulp error of a jitted ``np.<f>(x)`` over ``corpus(f, dtype)`` against a higher-precision
reference (float64 inputs: the long double function, 64-bit significand; float32: the float64 function),
beside NumPy's own error, and whether NaN / ±Inf / ±0 results equal NumPy's. Speed: jitted ``np.exp(x)``,
``np.log1p`` over a sparse matrix's values and a logistic-regression gradient step against NumPy / scipy,
with libmvec and with the scalar libm calls (``SPLYCE_VECTOR_MATH=0`` at compile time), interleaved.
"""

from __future__ import annotations

import os
import time

import numpy as np

FUNCTIONS = ("exp", "log", "log1p", "expm1", "tanh", "sin", "cos")


def corpus(function: str, dtype) -> np.ndarray:
    """Inputs for ``function`` in ``dtype``: uniform draws over the useful range, log-uniform magnitudes of
    both signs from the smallest subnormal to the largest finite value, ±0, ±Inf, NaN, subnormals, and values
    around the function's thresholds (exp's overflow / underflow, log's 0 and 1, log1p's -1)."""
    dtype = np.dtype(dtype)
    info = np.finfo(dtype)
    rng = np.random.default_rng(20261208)
    parts = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0])]
    emin, emax = np.log2(float(info.smallest_subnormal)), np.log2(float(info.max))
    mags = 2.0 ** rng.uniform(emin, emax, 20000)
    parts += [mags, -mags]
    parts.append(rng.uniform(-1, 1, 2000) * float(info.smallest_normal))       # subnormals
    parts.append(np.array([float(info.smallest_subnormal), float(info.smallest_normal), float(info.max),
                           -float(info.max), float(info.eps), -float(info.epsneg)]))
    log_max = np.log(float(info.max))
    log_min = np.log(float(info.smallest_subnormal))
    if function in ("exp", "expm1"):
        parts.append(rng.uniform(log_min - 5, log_max + 5, 20000))
        for t in (log_max, np.log(float(info.smallest_normal)), log_min):
            parts.append(t + rng.uniform(-1, 1, 2000) * 1e-3)
            parts.append(t + np.arange(-32, 32) * float(np.spacing(dtype.type(t))))
        parts.append(rng.uniform(-1e-3, 1e-3, 4000))
    elif function in ("log", "log1p"):
        parts.append(rng.uniform(0, 10, 20000))
        parts.append(rng.uniform(-10, 0, 1000))
        parts.append(1.0 + rng.uniform(-1e-3, 1e-3, 4000))
        parts.append(-1.0 + 2.0 ** -rng.uniform(0, 50, 4000))
        parts.append(rng.uniform(-1e-6, 1e-6, 4000))
    elif function == "tanh":
        parts.append(rng.uniform(-25, 25, 20000))
        parts.append(rng.uniform(-1e-3, 1e-3, 4000))
    else:
        parts.append(rng.uniform(-10, 10, 20000))
        parts.append(rng.uniform(-1e6, 1e6, 4000))
        parts.append(np.pi * np.arange(-1000, 1000) / 2 + rng.uniform(-1e-6, 1e-6, 2000))
    x = np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def reference(function: str, x: np.ndarray) -> np.ndarray:
    """The function at higher precision: long double for float64 inputs, float64 for float32."""
    wide = np.longdouble if x.dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):
        return getattr(np, function)(x.astype(wide))


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the last place of ``ref`` rounded to ``got``'s dtype (finite results only)."""
    dtype = got.dtype
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        finite = np.isfinite(rounded) & np.isfinite(got)
        spacing = np.spacing(np.abs(rounded)).astype(ref.dtype)
        err = np.abs(got.astype(ref.dtype) - ref) / spacing
    return np.where(finite, err, 0.0).astype(np.float64)


def specials_match(got: np.ndarray, expected: np.ndarray) -> bool:
    """NaN where ``expected`` is NaN and only there; the same infinities and signed zeros."""
    if not np.array_equal(np.isnan(got), np.isnan(expected)):
        return False
    special = np.isinf(expected) | (expected == 0) | np.isinf(got)
    return bool(np.array_equal(got[special], expected[special]) and
                np.array_equal(np.signbit(got[special]), np.signbit(expected[special])))


def _compile(f, *args, vector_math: bool):
    """Call ``f`` (a fresh ``splyce.jit``) once with libmvec on or off (``SPLYCE_VECTOR_MATH``, read when a
    kernel is lowered and in the disk cache key): its kernel is compiled that way from then on."""
    old = os.environ.get("SPLYCE_VECTOR_MATH")
    os.environ["SPLYCE_VECTOR_MATH"] = "1" if vector_math else "0"
    try:
        f(*args)
    finally:
        if old is None:
            del os.environ["SPLYCE_VECTOR_MATH"]
        else:
            os.environ["SPLYCE_VECTOR_MATH"] = old
    return f


def unary(function: str):
    """A fresh jitted ``np.<function>(a)``."""
    import splyce

    return splyce.jit(lambda a: getattr(np, function)(a))


def accuracy() -> list[dict]:
    rows = []
    for function in FUNCTIONS:
        for dtype in (np.float64, np.float32):
            x = corpus(function, dtype)
            ref = reference(function, x)
            with np.errstate(all="ignore"):
                expected = getattr(np, function)(x)
            f = _compile(unary(function), x, vector_math=True)
            got = f(x)
            rows.append({"function": function, "dtype": np.dtype(dtype).name, "n": x.size,
                         "splyce_ulp": float(ulp_error(got, ref).max()),
                         "numpy_ulp": float(ulp_error(expected, ref).max()),
                         "specials_equal": specials_match(got, expected)})
    return rows


def speed(repeats: int = 30, tiny: bool = False) -> list[dict]:
    """Thread CPU time, best of ``repeats`` interleaved calls, of each case with libmvec, with libm and in
    NumPy / scipy."""
    import scipy.sparse as sps

    import splyce
    import splyce.numpy as snp

    rng = np.random.default_rng(0)
    n = 2_000 if tiny else 100_000
    x = rng.standard_normal(n)
    A = sps.random_array((n, n // 5), density=5 / (n // 5), format="csr", rng=1) * 10
    X = sps.random_array((n, n), density=5 / n, format="csr", rng=2)
    w = rng.standard_normal(n) * 0.1
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)

    def logreg(A, w, y):
        return snp.mean(snp.log1p(snp.exp(-y * (A @ w))))

    def scipy_gradient():
        s = -y / (1 + np.exp(y * (X @ w))) / n
        return X.T @ s

    cases = [
        (f"exp(x) float64, n {n}", lambda: unary("exp"), (x,), lambda: np.exp(x)),
        (f"exp(x) float32, n {n}", lambda: unary("exp"), (x.astype(np.float32),),
         lambda: np.exp(x.astype(np.float32))),
        (f"tanh(x) float64, n {n}", lambda: unary("tanh"), (x,), lambda: np.tanh(x)),
        (f"log1p(A) of a CSR matrix, nnz {A.nnz}", lambda: unary("log1p"), (A,), lambda: A.log1p()),
        (f"logistic gradient step, X {n} x {n} nnz {X.nnz}", lambda: splyce.jit(splyce.grad(logreg, argnums=1)),
         (X, w, y), scipy_gradient),
    ]
    rows = []
    for name, make, args, reference_fn in cases:
        fast = _compile(make(), *args, vector_math=True)
        slow = _compile(make(), *args, vector_math=False)
        want = reference_fn()
        want = _values(want)
        for f in (fast, slow):
            got = _values(f(*args))
            tol = 1e-5 if got.dtype == np.float32 else 1e-11
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-3)
        steps = {"libmvec": lambda: fast(*args), "libm": lambda: slow(*args), "reference": reference_fn}
        times = {k: [] for k in steps}
        for _ in range(repeats):   # interleaved
            for k, step in steps.items():
                t0 = time.thread_time()
                step()
                times[k].append(time.thread_time() - t0)
        best = {k: min(v) for k, v in times.items()}
        rows.append({"case": name, **{k + "_ms": best[k] * 1e3 for k in best},
                     "libm_over_libmvec": best["libm"] / best["libmvec"],
                     "reference_over_libmvec": best["reference"] / best["libmvec"]})
    return rows


def _values(result) -> np.ndarray:
    """A dense result, or a sparse one's values in canonical (sorted CSR) order."""
    import scipy.sparse as sps

    if sps.issparse(result):
        c = sps.csr_array(result)
        c.sort_indices()
        return c.data
    return np.asarray(result)


def run(cfg):
    from splyce.bench.common import Result

    load = os.getloadavg()
    rows = [{"case": f"accuracy {r['function']} {r['dtype']}", **r} for r in accuracy()]
    rows += speed(repeats=3 if cfg.tiny else (cfg.repeats or 30), tiny=cfg.tiny)
    columns = ["case", "n", "splyce_ulp", "numpy_ulp", "specials_equal", "libmvec_ms", "libm_ms",
               "reference_ms", "libm_over_libmvec", "reference_over_libmvec"]
    return Result("vector_math", "Transcendental math in compiled kernels: libmvec vs libm vs NumPy / scipy",
                  columns, rows, note=f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; thread CPU time, "
                  "best of the interleaved repeats; ulp: max over the corpus vs long double (float64) / float64 "
                  "(float32)")
