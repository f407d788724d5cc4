"""``forms``: every one-op form users write, jitted (``@splyce.jit`` on operands wrapped once with
``splyce.asarray``) vs scipy's eager operator, and vs the drop-in where one exists, on the realistic corpus
(:mod:`splyce.bench.corpus`).

A form is one operation on a corpus matrix ``a`` (CSR float64), with ``b`` (``a``'s rows rotated by one:
another pattern of the same statistics), ``x`` / ``y`` (dense vectors of ``a``'s column / row count), ``d``
(a dense vector for row or column scaling) and ``X`` (16 dense columns): unary maps, binary elementwise ops,
reductions with and without ``axis``, scaling, comparisons, products, transposes and conversions (``FORMS``).
Each candidate's first result is checked against scipy's before any timing; the candidates are then timed in
interleaved repeats in one process (:func:`~splyce.bench.common.measure`), so the ratios are measured side by
side on a loaded machine. ``jit_vs_scipy`` is scipy's time over the jitted call's (best of the repeats; > 1:
the jitted form is faster), ``jit_vs_scipy_median`` the same for the medians.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from splyce.bench import corpus
from splyce.bench.common import Config, Result, _progress, geomean, measure

COLUMNS = ["matrix", "form", "kind", "n", "nnz", "scipy_s", "jit_s", "dropin_s", "jit_vs_scipy",
           "jit_vs_scipy_median", "dropin_vs_scipy", "path"]
COLUMNS_X = 16


def _forms():
    """name -> (kind, the jitted body, scipy's body (None: the same), operand names, the drop-in's body)."""
    import splyce

    same = None
    return {
        # unary maps: values over the same positions
        "neg": ("unary", lambda a: -a, same, "a", None),
        "scale": ("unary", lambda a: 2.0 * a, same, "a", None),
        "div_scalar": ("unary", lambda a: a / 3.0, same, "a", None),
        "abs": ("unary", lambda a: abs(a), same, "a", None),
        "pow2": ("unary", lambda a: a ** 2, same, "a", None),
        "square": ("unary", lambda a: a * a, lambda a: a.multiply(a), "a", None),
        "pow3": ("unary", lambda a: a ** 3, same, "a", None),
        "sqrt_abs": ("unary", lambda a: np.sqrt(abs(a)), lambda a: abs(a).sqrt(), "a", None),
        "sign": ("unary", lambda a: np.sign(a), lambda a: a.sign(), "a", None),
        "floor": ("unary", lambda a: np.floor(a), lambda a: a.floor(), "a", None),
        "expm1": ("unary", lambda a: np.expm1(a), lambda a: a.expm1(), "a", None),
        "sin": ("unary", lambda a: np.sin(a), lambda a: a.sin(), "a", None),
        "astype_f32": ("conversion", lambda a: a.astype(np.float32), same, "a", None),
        "copy": ("conversion", lambda a: a.copy(), same, "a", None),
        # reductions
        "sum": ("reduction", lambda a: a.sum(), same, "a", None),
        "sum_axis0": ("reduction", lambda a: a.sum(axis=0), same, "a", None),
        "sum_axis1": ("reduction", lambda a: a.sum(axis=1), same, "a", None),
        "mean": ("reduction", lambda a: a.mean(), same, "a", None),
        "mean_axis1": ("reduction", lambda a: a.mean(axis=1), same, "a", None),
        "max": ("reduction", lambda a: a.max(), same, "a", None),
        "min": ("reduction", lambda a: a.min(), same, "a", None),
        "max_axis0": ("reduction", lambda a: a.max(axis=0), lambda a: a.max(axis=0).toarray(), "a", None),
        "max_axis1": ("reduction", lambda a: a.max(axis=1), lambda a: a.max(axis=1).toarray(), "a", None),
        "abs_sum": ("reduction", lambda a: abs(a).sum(), same, "a", None),
        "sq_sum": ("reduction", lambda a: (a * a).sum(), lambda a: a.multiply(a).sum(), "a", None),
        "diagonal": ("reduction", lambda a: a.diagonal(), same, "a", None),
        "trace": ("reduction", lambda a: a.trace(), same, "a", None),
        # scaling by a dense vector
        "row_scale": ("scaling", lambda a, d: a * d[:, None], lambda a, d: a.multiply(d[:, None]), "ad", None),
        "col_scale": ("scaling", lambda a, d: a * d[None, :], lambda a, d: a.multiply(d[None, :]), "ad", None),
        "row_divide": ("scaling", lambda a, d: a / d[:, None], lambda a, d: a.multiply(1.0 / d[:, None]), "ad",
                       None),
        # comparisons with a scalar
        "ne0": ("comparison", lambda a: a != 0, same, "a", None),
        "gt0": ("comparison", lambda a: a > 0, same, "a", None),
        "lt0": ("comparison", lambda a: a < 0, same, "a", None),
        "ge_half": ("comparison", lambda a: a >= 0.5, same, "a", None),
        # binary elementwise
        "add": ("binary", lambda a, b: a + b, same, "ab", lambda a, b: splyce.add(a, b)),
        "sub": ("binary", lambda a, b: a - b, same, "ab", lambda a, b: splyce.subtract(a, b)),
        "mul": ("binary", lambda a, b: a * b, lambda a, b: a.multiply(b), "ab", lambda a, b: splyce.multiply(a, b)),
        "maximum": ("binary", lambda a, b: np.maximum(a, b), lambda a, b: a.maximum(b), "ab", None),
        "add_self": ("binary", lambda a: a + a, same, "a", lambda a: splyce.add(a, a)),
        # products
        "spmv": ("product", lambda a, x: a @ x, same, "ax", lambda a, x: splyce.matmul(a, x)),
        "vecmat": ("product", lambda a, y: y @ a, same, "ay", None),
        "spmv_T": ("product", lambda a, y: a.T @ y, same, "ay", lambda a, y: splyce.matmul(a.T, y)),
        "spmm16": ("product", lambda a, X: a @ X, same, "aX", lambda a, X: splyce.matmul(a, X)),
        "spgemm": ("product", lambda a: a @ a, same, "a", lambda a: splyce.matmul(a, a)),
        "dot_row": ("product", lambda a, x: (a @ x).sum(), same, "ax", None),
        # transposes and conversions
        "transpose": ("conversion", lambda a: a.T, same, "a", None),
        "tocsc": ("conversion", lambda a: a.tocsc(), same, "a", None),
        "transpose_add": ("binary", lambda a: a + a.T, same, "a", lambda a: splyce.add(a, a.T)),
    }


FORMS = tuple(_forms())


def _operands(A):
    import scipy.sparse as sps

    n, m = A.shape
    rng = np.random.default_rng(0)
    return {"a": A, "b": sps.csr_array(A[np.roll(np.arange(n), 1)]), "x": rng.random(m), "y": rng.random(n),
            "d": rng.random(n) + 0.5, "X": rng.random((m, COLUMNS_X))}


def _reference(r):
    """scipy's result as the check's reference: a sparse one stays sparse (a CSR, bool values as 0 / 1 floats:
    the check subtracts), so results far too large to densify are checked entry by entry; else an array."""
    import scipy.sparse as sps

    if sps.issparse(r):
        r = sps.csr_array(r)
        return r.astype(np.float64) if r.dtype == np.bool_ else r
    return np.asarray(r)


def _path(jitted, args) -> str:
    """How the jitted form runs: the one-op form, the native library, or the MLIR kernel (the plan's text)."""
    text = jitted.lower(*args).as_text("plan")
    if "one-op form" in text:
        return "form"
    if "native kernel library" in text:
        return "library"
    return "mlir"


def run(cfg: Config) -> Result:
    import scipy.sparse as sps

    import splyce

    names = {"fem2d-3k"} if cfg.tiny else None
    entries = corpus.chosen(cfg.quick, names, cfg.matrices)
    forms = _forms()
    unknown = [f for f in cfg.ops if f not in forms]
    if unknown:
        raise SystemExit(f"unknown form {', '.join(unknown)}; choose from {', '.join(forms)}")
    chosen = [f for f in forms if not cfg.ops or f in cfg.ops]
    rows = []
    bar = _progress(0, "forms", cfg)
    from threadpoolctl import threadpool_limits

    blas = threadpool_limits(1)
    try:
        for entry in entries:
            A = corpus.build(entry, Path(cfg.out) / "corpus-cache")
            operands = _operands(A)
            for name in chosen:
                kind, body, reference, uses, dropin = forms[name]
                reference = reference or body
                args = tuple(operands[u] for u in uses)
                wrapped = tuple(splyce.asarray(v) if sps.issparse(v) else v for v in args)
                jitted = splyce.jit(body)
                bar.set_description(f"forms {entry.name} {name}")
                with np.errstate(all="ignore"):
                    want = _reference(reference(*args))
                    try:
                        jitted(*wrapped)
                    except (splyce.TraceError, AttributeError, TypeError, NotImplementedError) as e:
                        # a form the jit does not take yet: a row saying so (no time), never a silent gap
                        rows.append({"matrix": entry.name, "form": name, "kind": kind, "n": A.shape[0],
                                     "nnz": A.nnz, "scipy_s": float("nan"), "jit_s": float("nan"),
                                     "dropin_s": float("nan"), "jit_vs_scipy": float("nan"),
                                     "jit_vs_scipy_median": float("nan"), "dropin_vs_scipy": float("nan"),
                                     "path": f"untraced ({type(e).__name__})"})
                        continue
                    candidates = {"scipy": lambda r=reference, a=args: r(*a),
                                  "jit": lambda f=jitted, a=wrapped: f(*a)}
                    if dropin is not None:
                        candidates["dropin"] = lambda f=dropin, a=args: f(*a)
                    timings = measure(candidates, want, cfg, desc=f"{entry.name} {name}", rtol=1e-7, bar=bar)
                t_scipy, t_jit = timings["scipy"].min, timings["jit"].min
                t_drop = timings["dropin"].min if dropin is not None else float("nan")
                rows.append({"matrix": entry.name, "form": name, "kind": kind, "n": A.shape[0], "nnz": A.nnz,
                             "scipy_s": t_scipy, "jit_s": t_jit, "dropin_s": t_drop,
                             "jit_vs_scipy": t_scipy / t_jit,
                             "jit_vs_scipy_median": timings["scipy"].median / timings["jit"].median,
                             "dropin_vs_scipy": t_scipy / t_drop, "path": _path(jitted, wrapped)})
    finally:
        blas.restore_original_limits()
        bar.close()
    untraced = sorted({r["form"] for r in rows if r["path"].startswith("untraced")})
    rows_timed = [r for r in rows if not r["path"].startswith("untraced")]
    ratios = [r["jit_vs_scipy"] for r in rows_timed]
    below = sorted({r["form"] for r in rows if r["jit_vs_scipy"] < 0.95})
    by_kind = {k: geomean(r["jit_vs_scipy"] for r in rows if r["kind"] == k)
               for k in dict.fromkeys(r["kind"] for r in rows)}
    note = (f"Best of {cfg.n_repeats} interleaved repeats per candidate, one thread (NumPy's BLAS too); "
            "jit_vs_scipy = scipy time / jitted time on the operands wrapped once (splyce.asarray), > 1: the "
            "jitted form is faster; path: how the jitted form runs (form: runtime/forms.py on the argument's "
            "arrays, library: the native kernel library, mlir: the MLIR kernel). "
            f"Geomean jit vs scipy {geomean(ratios):.2f}x over {len(rows_timed)} timed rows; by kind: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in by_kind.items())
            + f". Forms below 0.95x on some matrix: {', '.join(below) if below else 'none'}. Forms the jit does "
            f"not take yet (untraced): {', '.join(untraced) if untraced else 'none'}.")
    return Result("forms", "One-op forms jitted vs scipy", COLUMNS, rows, note, plot=plot)


def plot(rows, ax) -> None:
    """jit_vs_scipy per form, one marker per matrix (log scale; 1 = as fast as scipy)."""
    forms = list(dict.fromkeys(r["form"] for r in rows))
    matrices = list(dict.fromkeys(r["matrix"] for r in rows))
    for matrix in matrices:
        ratios = {r["form"]: float(r["jit_vs_scipy"]) for r in rows if r["matrix"] == matrix}
        ax.plot(range(len(forms)), [ratios.get(f, float("nan")) for f in forms], "o", markersize=3, label=matrix)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.95, color="grey", linewidth=0.6, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(forms)), forms, rotation=90, fontsize=6)
    ax.set_ylabel("scipy time / jitted time")
    ax.legend(fontsize=6, ncol=2)
