"""``indexing``: indexing inside ``@splyce.jit`` (tracer/gather.py, planner/gathers.py) against the same code in
scipy / NumPy, side by side in one process (interleaved repeats, median).

On a random CSR ``X`` (rows x cols, ~``nnz`` stored entries; scipy's ``csr_array``, passed as is to both):

- ``X[a:b] @ W``: a minibatch of ``batch`` contiguous rows times a dense ``cols x 16`` (the row slice is a
  view of ``X``'s buffers, then the drop-in's SpMM);
- ``X[idx] @ w``: ``batch`` random rows (a gather, O(rows + their entries)) times a vector;
- ``X[:, q].sum(axis=1)``: 8 query columns (BM25's), one pass over the stored entries as scipy's;
- ``X[idx]``: the row gather returned (a scipy CSR);
- ``(X @ w)[perm]``: a gather of a value the kernel computes (``tensor.extract`` in the kernel);
- ``x[perm] * y``: a dense permutation of an argument (NumPy's indexing before the kernel).
"""

from __future__ import annotations

import numpy as np

from splyce.bench.common import Config, Result, measure

COLUMNS = ["case", "size", "splyce_ms", "wrapped_ms", "reference_ms", "reference_over_splyce",
           "reference_over_wrapped"]


def _sizes(cfg: Config) -> tuple[int, int, int, int]:
    if cfg.tiny:
        return 2_000, 500, 20_000, 64
    if cfg.quick:
        return 50_000, 5_000, 500_000, 512
    return 200_000, 20_000, 2_000_000, 1_024


def run(cfg: Config) -> Result:
    import scipy.sparse as sps

    import splyce

    rows, cols, nnz, batch = _sizes(cfg)
    rng = np.random.default_rng(53)
    X = sps.random_array((rows, cols), density=nnz / (rows * cols), format="csr", random_state=rng)
    X.sort_indices()
    W = rng.standard_normal((cols, 16))
    w = rng.standard_normal(cols)
    a = rows // 3
    idx = rng.integers(0, rows, batch)
    q = rng.choice(cols, 8, replace=False)
    perm = rng.permutation(rows)
    x, y = rng.standard_normal(rows), rng.standard_normal(rows)
    size = f"{rows}x{cols}, {X.nnz} stored"
    cases = {
        f"X[a:a+{batch}] @ W": (splyce.jit(lambda X, W: X[a:a + batch] @ W), (X, W),
                                lambda: X[a:a + batch] @ W),
        f"X[idx] @ w ({batch} rows)": (splyce.jit(lambda X, i, w: X[i] @ w), (X, idx, w), lambda: X[idx] @ w),
        "X[:, q].sum(axis=1) (8 columns)": (splyce.jit(lambda X, q: X[:, q].sum(axis=1)), (X, q),
                                            lambda: X[:, q].sum(axis=1)),
        f"X[idx] ({batch} rows, returned)": (splyce.jit(lambda X, i: X[i]), (X, idx), lambda: X[idx]),
        "(X @ w)[perm]": (splyce.jit(lambda X, w, p: (X @ w)[p]), (X, w, perm), lambda: (X @ w)[perm]),
        "x[perm] * y": (splyce.jit(lambda x, p, y: x[p] * y), (x, perm, y), lambda: x[perm] * y),
    }
    wrapped = splyce.asarray(X)
    out = []
    for name, (f, args, reference) in cases.items():
        candidates = {"splyce": lambda f=f, args=args: f(*args), "reference": reference}
        if any(arg is X for arg in args):
            wrapped_args = tuple(wrapped if arg is X else arg for arg in args)
            candidates["wrapped"] = lambda f=f, args=wrapped_args: f(*args)
        timings = measure(candidates, reference, cfg, desc=name)
        s, r = timings["splyce"].median, timings["reference"].median
        row = {"case": name, "size": size, "splyce_ms": s * 1e3, "reference_ms": r * 1e3,
               "reference_over_splyce": r / s}
        if "wrapped" in timings:
            row["wrapped_ms"] = timings["wrapped"].median * 1e3
            row["reference_over_wrapped"] = r / timings["wrapped"].median
        out.append(row)
    note = ("reference: the same expression in scipy.sparse / NumPy on the same operands; splyce: the jitted "
            "function on the scipy operand (checked on every call); wrapped: on the operand wrapped once "
            "(splyce.asarray, checked when wrapped); one thread; median of interleaved repeats; results checked "
            "against the reference")
    return Result("indexing", "Indexing inside @splyce.jit vs scipy / NumPy", COLUMNS, out, note)
