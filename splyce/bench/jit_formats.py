"""``jit_formats``: jitted programs on scipy BSR / DIA / COO arguments, held in their own format (tensors/held.py),
against the same program on the CSR of the same matrix and against scipy on the BSR / DIA / COO operand, side by
side in one process (interleaved repeats; best and median).

Matrices (2-D, float64): a BSR of 3 x 3 blocks from a 2-D Laplacian's Kronecker product with a dense 3 x 3 block
(vector-valued FEM, 9 entries a block, ~27 entries a row), a BSR of 4 x 4 blocks on a random block pattern, a
5-point stencil as DIA, and a random COO (with its entries unsorted). Programs:

- ``a @ x`` (SpMV) and ``a @ X`` (SpMM, 16 columns): one op, the native kernel on the held buffers;
- PageRank, ten steps in a Python loop of the jitted ``0.85 * (a @ x) + c`` (the SpMV a native step before the
  kernel's glue);
- power iteration, ten steps of the jitted ``y = a @ x; y / sqrt(y @ y)``;
- a GCN layer ``maximum(a @ (h @ w), 0)`` (``h`` rows x 32, ``w`` 32 x 16: BLAS on the host, then the SpMM).
"""

from __future__ import annotations

import numpy as np

from splyce.bench.common import Config, Result, measure

COLUMNS = ["matrix", "program", "held_ms", "csr_ms", "scipy_ms", "csr_over_held", "scipy_over_held",
           "held_median_ms", "csr_median_ms", "scipy_median_ms"]


def _matrices(cfg: Config):
    import scipy.sparse as sps

    side = 40 if cfg.tiny else 300 if cfg.quick else 600
    rng = np.random.default_rng(61)
    lap = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side, side))
    lap2 = sps.kronsum(lap, lap, format="csr")
    block = rng.standard_normal((3, 3))
    yield f"bsr 3x3 fem ({3 * side * side} rows)", sps.bsr_array(sps.kron(lap2, block, format="bsr"))
    nb = (side * side) // 4
    pattern = sps.random_array((nb, nb), density=min(1.0, 8 / nb), format="csr", rng=rng)
    dense_blocks = rng.standard_normal((pattern.nnz, 4, 4))
    yield f"bsr 4x4 random ({4 * nb} rows)", sps.bsr_array((dense_blocks, pattern.indices, pattern.indptr),
                                                            shape=(4 * nb, 4 * nb))
    n = side * side
    yield f"dia 5-point ({n} rows)", sps.dia_array(sps.kronsum(lap, lap, format="dia"))
    m = 4 * n
    coo = sps.random_array((m, m), density=10 / m, format="coo", rng=rng)
    perm = rng.permutation(coo.nnz)
    yield f"coo random ({m} rows)", sps.coo_array((coo.data[perm], (coo.coords[0][perm], coo.coords[1][perm])),
                                                  shape=(m, m))


def run(cfg: Config) -> Result:
    import splyce

    spmv = splyce.jit(lambda a, x: a @ x)
    pagerank = splyce.jit(lambda a, x, c: 0.85 * (a @ x) + c)
    power = splyce.jit(lambda a, x: (lambda y: y / np.sqrt(y @ y))(a @ x))
    gcn = splyce.jit(lambda a, h, w: np.maximum(a @ (h @ w), 0))
    out = []
    rng = np.random.default_rng(5)
    for label, a in _matrices(cfg):
        csr = a.tocsr()
        m, n = a.shape
        x, X = rng.random(n), rng.random((n, 16))
        c = np.full(m, 0.15 / m)
        h, w = rng.random((n, 32)), rng.random((32, 16))

        def loop(step, op, x0):
            def go():
                v = x0
                for _ in range(10):
                    v = step(op, v)
                return v
            return go

        def scipy_power(op):
            def step(_, v):
                y = op @ v
                return y / np.sqrt(y @ y)
            return step

        programs = {
            "a @ x": (lambda op: (lambda: spmv(op, x)), lambda: a @ x),
            "a @ X (16 columns)": (lambda op: (lambda: spmv(op, X)), lambda: a @ X),
            "PageRank, 10 steps": (lambda op: loop(lambda o, v: pagerank(o, v, c), op, np.full(n, 1 / n)),
                                   loop(lambda o, v: 0.85 * (a @ v) + c, a, np.full(n, 1 / n))),
            "power iteration, 10 steps": (lambda op: loop(power, op, np.ones(n)),
                                          loop(scipy_power(a), a, np.ones(n))),
            "GCN layer": (lambda op: (lambda: gcn(op, h, w)), lambda: np.maximum(a @ (h @ w), 0)),
        }
        for name, (jitted, reference) in programs.items():
            timings = measure({"held": jitted(a), "csr": jitted(csr), "scipy": reference}, reference, cfg,
                              desc=f"{label} {name}", rtol=1e-9)
            held, on_csr, ref = (timings[k] for k in ("held", "csr", "scipy"))
            out.append({"matrix": label, "program": name, "held_ms": held.min * 1e3, "csr_ms": on_csr.min * 1e3,
                        "scipy_ms": ref.min * 1e3, "csr_over_held": on_csr.min / held.min,
                        "scipy_over_held": ref.min / held.min, "held_median_ms": held.median * 1e3,
                        "csr_median_ms": on_csr.median * 1e3, "scipy_median_ms": ref.median * 1e3})
    note = ("held: the jitted program on the scipy BSR / DIA / COO operand, kept in its format (its products with "
            "dense operands on the native kernels over its own buffers); csr: the same jitted program on the CSR of "
            "the same matrix (scipy csr_array, checked every call); scipy: the same code in scipy / NumPy on the "
            "BSR / DIA / COO operand. Best (and median) of interleaved repeats, one process, results checked "
            "against scipy")
    return Result("jit_formats", "Jitted programs on BSR / DIA / COO operands vs the same on CSR and vs scipy",
                  COLUMNS, out, note)
