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


def jitted(function: str, vector_math: bool):
    """A jitted ``np.<function>(a)`` compiled now with or without libmvec."""
    import splyce

    f = splyce.jit(eval(f"lambda a: __import__('numpy').{function}(a)"))
    return f


def _compile(f, *args, vector_math: bool):
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


def accuracy() -> list[dict]:
    rows = []
    for function in FUNCTIONS:
        for dtype in (np.float64, np.float32):
            x = corpus(function, dtype)
            ref = reference(function, x)
            with np.errstate(all="ignore"):
                expected = getattr(np, function)(x)
            f = _compile(jitted(function, True), x, vector_math=True)
            got = f(x)
            rows.append({"function": function, "dtype": np.dtype(dtype).name, "n": x.size,
                         "splyce_ulp": float(ulp_error(got, ref).max()),
                         "numpy_ulp": float(ulp_error(expected, ref).max()),
                         "specials_equal": specials_match(got, expected)})
    return rows


def _best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def speed(repeats: int = 30) -> list[dict]:
    import scipy.sparse as sps

    import splyce

    rng = np.random.default_rng(0)
    rows = []
    x = rng.standard_normal(100_000)
    cases = [("exp(x), 100k float64", lambda: splyce.jit(lambda a: np.exp(a)), (x,), lambda: np.exp(x))]
    A = sps.random_array((20_000, 5_000), density=0.001, format="csr", rng=1) * 10
    cases.append((f"log1p(A) sparse, nnz {A.nnz}", lambda: splyce.jit(lambda a: np.log1p(a)), (A,),
                  lambda: A.log1p()))
    X = sps.random_array((100_000, 1_000), density=0.005, format="csr", rng=2)
    w = rng.standard_normal(1_000) * 0.1
    y = (rng.random(100_000) < 0.5).astype(np.float64)

    def step(X, w, y):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        return X.T @ (p - y)

    def scipy_step():
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        return X.T @ (p - y)

    cases.append((f"logreg gradient step, X 100k x 1k nnz {X.nnz}", lambda: splyce.jit(step), (X, w, y),
                  scipy_step))
    for name, make, args, reference_fn in cases:
        fast = _compile(make(), *args, vector_math=True)
        slow = _compile(make(), *args, vector_math=False)
        np.testing.assert_allclose(fast(*args).toarray() if sps.issparse(fast(*args)) else fast(*args),
                                   reference_fn().toarray() if sps.issparse(reference_fn()) else reference_fn(),
                                   rtol=1e-12, atol=1e-12)
        t = {"libmvec": [], "libm": [], "reference": []}
        for _ in range(repeats):   # interleaved
            t["libmvec"].append(_best(lambda: fast(*args), 1))
            t["libm"].append(_best(lambda: slow(*args), 1))
            t["reference"].append(_best(reference_fn, 1))
        best = {k: min(v) for k, v in t.items()}
        rows.append({"case": name, **{k + "_ms": round(v * 1e3, 3) for k, v in best.items()},
                     "reference_over_libmvec": round(best["reference"] / best["libmvec"], 2),
                     "libm_over_libmvec": round(best["libm"] / best["libmvec"], 2)})
    return rows


def main(argv=()) -> None:
    print(f"load average {os.getloadavg()}")
    print("function dtype n splyce_max_ulp numpy_max_ulp specials_equal")
    for r in accuracy():
        print(f"{r['function']:6} {r['dtype']:8} {r['n']:6} {r['splyce_ulp']:8.3f} {r['numpy_ulp']:8.3f} "
              f"{r['specials_equal']}")
    for r in speed():
        print(r)


if __name__ == "__main__":
    main()
