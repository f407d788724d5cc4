"""The iterative programs of ``python -m splyce.bench programs``: n steps of an iterative method jitted whole,
as a Python loop unrolled in the trace (``*-x10``) and as ``splyce.fori_loop`` (``*-fori``, 100 steps), each
against the same n steps in scipy / NumPy and the jitted one-step function called n times ("one by one": the
``chain`` column of these rows).

* ``pagerank``: ``x = 0.85 * (P @ x) + 0.15 / n`` (``P`` column-stochastic);
* ``jacobi``: ``x = (b - R @ x) * dinv``, ``R`` the off-diagonal part of a diagonally dominant SPD matrix;
* ``power``: ``x = A @ x; x = x / norm(x)`` on the SPD matrix;
* ``cg``: conjugate-gradient steps (bench/programs.py's ``cg_step``; carry ``(x, r, p)``; ``cg-fori`` runs
  ``CG_FORI`` steps); checked to ``TOL``: its dot products round in other orders in each candidate, and CG
  amplifies that;
* ``labelprop``: label spreading ``F = 0.9 * (S @ F) + 0.1 * Y`` (``S = D^-1/2 A D^-1/2``, 4 classes: an SpMM).
"""

from __future__ import annotations

import numpy as np

UNROLLED = 10
FORI = 100
CG_FORI = 10
# CG's iterates agree to rounding amplified by the iteration (~10x a step on ba-100k: 3e-7 of the largest
# magnitude after 10 steps, one step 6e-15), checked relative to the largest magnitude
TOL = {f"cg-x{UNROLLED}": (1e-6, 1e-5), "cg-fori": (1e-6, 1e-5)}
KINDS = ("pagerank", "jacobi", "power", "cg", "labelprop")
PROGRAMS = {**{f"{k}-x{UNROLLED}": f"{k}: {UNROLLED} steps as a Python loop in one jitted function" for k in KINDS},
            **{f"{k}-fori": f"{k}: {CG_FORI if k == 'cg' else FORI} steps as splyce.fori_loop in one jitted function"
               for k in KINDS}}


def _cg_step(a, x, r, p):
    ap = a @ p
    rr = r @ r
    alpha = rr / (p @ ap)
    r_new = r - alpha * ap
    return x + alpha * p, r_new, r_new + (r_new @ r_new) / rr * p


def programs(A) -> dict:
    """Per program: ``(jitted whole, scipy / NumPy function, one-by-one function, arguments)``."""
    import scipy.sparse as sps

    import splyce

    n = A.shape[0]
    rng = np.random.default_rng(0)
    absA = abs(A)
    out_degree = np.asarray(absA.sum(axis=0)).ravel()
    P = sps.csr_array(absA.multiply(1.0 / np.maximum(out_degree, 1.0)[None, :]))
    spd = sps.csr_array(A + A.T + sps.diags_array(np.asarray(absA.sum(axis=1)).ravel() * 2 + 1.0))
    diag = spd.diagonal()
    R = sps.csr_array(spd - sps.diags_array(diag))
    R.eliminate_zeros()
    dinv = 1.0 / diag
    sym = sps.csr_array(absA + absA.T)
    d = np.asarray(sym.sum(axis=1)).ravel()
    s = 1.0 / np.sqrt(np.maximum(d, 1e-300))
    S = sps.csr_array(sym.multiply(s[:, None]).multiply(s[None, :]))
    Y = np.zeros((n, 4))
    Y[rng.choice(n, size=max(4, n // 100), replace=False), rng.integers(0, 4, size=max(4, n // 100))] = 1.0
    x0 = np.full(n, 1.0 / n)
    b = rng.random(n)
    v0 = rng.random(n)

    steps = {
        "pagerank": (lambda p, x: 0.85 * (p @ x) + 0.15 / n, (P,), x0),
        "jacobi": (lambda r, x: (b - r @ x) * dinv, (R,), np.zeros(n)),
        "power": (lambda a, x: (lambda y: y / np.linalg.norm(y))(a @ x), (spd,), v0 / np.linalg.norm(v0)),
        "cg": (lambda a, c: _cg_step(a, *c), (spd,), (np.zeros(n), b.copy(), b.copy())),
        "labelprop": (lambda s_, f: 0.9 * (s_ @ f) + 0.1 * Y, (S,), Y.copy()),
    }
    out = {}
    for kind, (step, mats, init) in steps.items():
        one = splyce.jit(step)
        for name, count in ((f"{kind}-x{UNROLLED}", UNROLLED), (f"{kind}-fori", CG_FORI if kind == "cg" else FORI)):
            def scipy_loop(m, c, step=step, count=count):
                for _ in range(count):
                    c = step(m, c)
                return c

            def one_by_one(m, c, one=one, count=count):
                m = splyce.asarray(m)          # wrapped (checked) once, as the whole-loop call checks it once
                for _ in range(count):
                    c = one(m, c)
                return c

            if name.endswith("fori"):
                whole = splyce.jit(lambda m, c, step=step, count=count:
                                   splyce.fori_loop(0, count, lambda i, c: step(m, c), c))
            else:
                whole = splyce.jit(scipy_loop)
            out[name] = (whole, scipy_loop, one_by_one, (mats[0], init))
    return out
