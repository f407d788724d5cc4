"""``real``: real sparse matrices that ship with installed packages, through K1- (A A^T), K2- (A x, x sparse)
and K4- (A * A) shaped kernels.

A SUBSTITUTE for the paper's SuiteSparse matrices (Table 4), which cannot be downloaded here: scipy's own test
data (the PROPACK matrices in scipy.sparse.linalg's tests), scipy's grid Laplacians (LaplacianNd), and the
pyamg gallery / pygsp graphs when those packages are installed (skipped with a message otherwise).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from splyce.bench.common import Config, Result, _progress, measure, random_sparse, simd_share

K1_MAX_ROWS = 4000  # K1's dense m x m output


def _scipy_dir():
    import scipy

    return os.path.dirname(scipy.__file__)


def matrices(cfg: Config) -> list[tuple[str, object]]:
    """(name, scipy CSR float64 matrix) pairs; missing sources are reported and skipped."""
    import scipy.sparse as sps

    found = []
    path = os.path.join(_scipy_dir(), "sparse", "linalg", "tests", "propack_test_data.npz")
    try:
        data = np.load(path, allow_pickle=True)
        found.append(("propack A_real (scipy tests)", sps.csr_array(data["A_real"].item(), dtype=np.float64)))
        Ac = sps.csr_array(data["A_complex"].item())
        found.append(("propack A_complex, real part (scipy tests)", sps.csr_array(Ac.real, dtype=np.float64)))
    except Exception as e:  # noqa: BLE001 - a missing test-data file is not an error
        print(f"real: scipy's PROPACK test data not available ({e}); skipped", file=sys.stderr)
    try:
        from scipy.sparse.linalg import LaplacianNd

        g2, g3 = (12, 6) if cfg.tiny else ((30, 10) if cfg.quick else (60, 15))
        found.append((f"LaplacianNd {g2}x{g2} (scipy)", sps.csr_array(LaplacianNd((g2, g2)).tosparse(),
                                                                     dtype=np.float64)))
        found.append((f"LaplacianNd {g3}x{g3}x{g3} (scipy)", sps.csr_array(LaplacianNd((g3, g3, g3)).tosparse(),
                                                                           dtype=np.float64)))
    except Exception as e:  # noqa: BLE001
        print(f"real: scipy.sparse.linalg.LaplacianNd not available ({e}); skipped", file=sys.stderr)
    try:
        import pyamg

        n = 20 if cfg.tiny else 60
        found.append((f"pyamg gallery poisson {n}x{n} (pyamg)", sps.csr_array(pyamg.gallery.poisson((n, n)))))
        found.append(("pyamg gallery load_example airfoil (pyamg)",
                      sps.csr_array(pyamg.gallery.load_example("airfoil")["A"], dtype=np.float64)))
    except ImportError:
        print("real: pyamg not installed; its gallery is skipped", file=sys.stderr)
    except Exception as e:  # noqa: BLE001
        print(f"real: pyamg gallery failed ({e}); skipped", file=sys.stderr)
    try:
        import pygsp

        found.append(("pygsp Minnesota graph (pygsp)", sps.csr_array(pygsp.graphs.Minnesota().W, dtype=np.float64)))
    except ImportError:
        print("real: pygsp not installed; its graphs are skipped", file=sys.stderr)
    except Exception as e:  # noqa: BLE001
        print(f"real: pygsp graph failed ({e}); skipped", file=sys.stderr)
    out = []
    for name, A in found:
        A = A.tocsr()
        A.eliminate_zeros()
        A.sum_duplicates()
        A.sort_indices()
        if cfg.tiny and A.shape[0] > 400:
            A = A[:400].tocsr()
            name += ", first 400 rows"
        if A.nnz:
            out.append((name, A))
    return out


COLUMNS = ["matrix", "shape", "nnz", "density", "kernel", "baseline_s", "splyce_s", "scipy_s",
           "speedup_vs_baseline", "simd_share"]


def _cases(A, rng):
    """(kernel label, jitted fun, splyce operands, scipy call, reference)."""
    import splyce
    from splyce.kernels import KERNELS

    cases = []
    m, n = A.shape
    B = A if m <= K1_MAX_ROWS else A[:K1_MAX_ROWS].tocsr()
    Bt = B.T.tocsc()   # C[k, j] = A[j, k], stored column-compressed: the same buffers as B's rows
    Bt.sort_indices()
    ops = [splyce.asarray(B, format=splyce.CSR), splyce.asarray(Bt, format=splyce.CSC)]
    label = "K1 A A^T" + ("" if B is A else f" (first {K1_MAX_ROWS} rows)")
    cases.append((label, KERNELS["K1"].fun, ops, (lambda B=B, Bt=Bt: B @ Bt), lambda B=B: (B @ B.T).toarray()))
    x = random_sparse((1, n), 0.1, rng, "csr").toarray().ravel()
    ops = [splyce.asarray(A, format=splyce.CSR), splyce.asarray(x, format=splyce.SPARSE_VECTOR)]
    xs = __import__("scipy.sparse", fromlist=["coo_array"]).coo_array(x)
    cases.append(("K2 A x (x 10 % sparse)", KERNELS["K2"].fun, ops, (lambda: A @ xs), lambda: A @ x))
    ops = [splyce.asarray(A, format=splyce.CSR), splyce.asarray(A.copy(), format=splyce.CSR)]
    cases.append(("K4 A * A", KERNELS["K4"].fun, ops, (lambda: A.multiply(A)), lambda: A.multiply(A).toarray()))
    return cases


def run(cfg: Config) -> Result:
    import splyce

    rng = np.random.default_rng(0)
    mats = matrices(cfg)
    rows = []
    bar = _progress(len(mats) * 3 * 3 * (cfg.n_repeats + 1), "real", cfg)
    try:
        for name, A in mats:
            for label, fun, ops, sp_call, ref in _cases(A, rng):
                base, fast = splyce.jit(fun, vectorize=False), splyce.jit(fun)
                t = measure({"baseline": lambda: base(*ops), "splyce": lambda: fast(*ops), "scipy": sp_call},
                            ref, cfg, desc=f"{name} {label}", bar=bar)
                rows.append({"matrix": name, "shape": f"{A.shape[0]}x{A.shape[1]}", "nnz": A.nnz,
                             "density": A.nnz / (A.shape[0] * A.shape[1]), "kernel": label,
                             "baseline_s": t["baseline"].median, "splyce_s": t["splyce"].median,
                             "scipy_s": t["scipy"].median,
                             "speedup_vs_baseline": t["baseline"].median / t["splyce"].median,
                             "simd_share": simd_share(fun, tuple(ops))})
    finally:
        bar.close()
    note = ("Substitute for the paper's SuiteSparse matrices (Table 4), which cannot be downloaded here: matrices "
            "that ship with installed packages (scipy test data, scipy's LaplacianNd; pyamg / pygsp when installed). "
            "K1 computes sum_k A[i,k] A[j,k] (CSR x CSC); K2 multiplies by a 10 % sparse vector; K4 is A * A with "
            "a dense output. simd_share = share of coordinates consumed by the fast lane.")
    return Result("real", "Real matrices (substitute for SuiteSparse, paper Table 4)", COLUMNS, rows, note,
                  plot=_plot)


def _plot(rows, ax):
    kernels = sorted({r["kernel"].split()[0] for r in rows})
    mats = list(dict.fromkeys(r["matrix"] for r in rows))
    x = np.arange(len(mats))
    w = 0.8 / max(1, len(kernels))
    for i, k in enumerate(kernels):
        ys = [next((r["speedup_vs_baseline"] for r in rows if r["matrix"] == m and r["kernel"].startswith(k)), 0)
              for m in mats]
        ax.bar(x + (i - (len(kernels) - 1) / 2) * w, ys, w, label=k)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [m.split(" (")[0][:22] for m in mats], rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("speedup vs plain sparsifier")
    ax.legend(fontsize=8)
