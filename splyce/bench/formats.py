"""``formats``: the drop-ins on operands stored as scipy COO / DIA / BSR / LIL and pydata COO / GCXS, against
scipy's (pydata's) own operators on the same objects (issue 56).

Matrices: corpus matrices (:mod:`splyce.bench.corpus`) stored as COO (entries shuffled; for four of them
also sorted by row, ``coo-sorted``, as a CSR's ``tocoo()`` gives them) and LIL; block-structured FEM operators as
BSR (a corpus mesh ``kron`` a dense 3 x 3 block: vector-valued FEM, as PyAMG's elasticity problems store
them); DIA stencils (the 5-point 2-D Laplacian, an 11-diagonal band); pydata COO / GCXS of a corpus mesh.
Ops: SpMV ``A @ x``, SpMM ``A @ X`` (16 columns), elementwise ``A * A`` (``multiply``) and ``A + A``, SpGEMM
``A @ A``. Each pair (reference, drop-in) runs interleaved, best of ``SAMPLES`` short samples per repeat (each
sample as many calls as fill 2 ms: on a shared machine a long sample nearly always holds another process's
time slice, and the best of many short ones is the quiet machine's time); the first result of the drop-in is checked against the reference (values, class and format)
before anything is timed.
"""

from __future__ import annotations

import time

import numpy as np

from splyce.bench import corpus
from splyce.bench.common import BenchMismatch, Config, Result, geomean

OPS = ("spmv", "spmm", "multiply", "add", "spgemm")
SPMM_COLUMNS = 16
MIN_SAMPLE_S = 0.002
SAMPLES = 5         # samples per repeat (2026-12-08: 20 ms samples on the loaded 2-core VM swung rows by 2-10x);
                    # calls of 20 ms or more: one sample per repeat


def _matrices(cfg: Config):
    """(label, format, operand) of every case, scipy and pydata."""
    import scipy.sparse as sps

    quick = cfg.quick
    names = ("fem2d-3k", "rmat-s10") if quick else ("fem2d-250k", "fem3d-100k", "rmat-s13", "road-700")
    entries = {e.name: e for e in corpus.entries()}
    out = []
    for name in names:
        a = corpus.build(entries[name])
        coo = a.tocoo()
        rng = np.random.default_rng(0)
        p = rng.permutation(coo.nnz)         # COO as built from element or edge lists: entries in any order
        out.append((name, "coo", sps.coo_array((coo.data[p], (coo.row[p], coo.col[p])), shape=coo.shape)))
        if name in ("fem2d-3k", "rmat-s10", "road-700", "rmat-s13"):
            out.append((name, "coo-sorted", sps.coo_array(coo)))     # as a CSR's tocoo(): entries by row
        if not quick and name in ("fem2d-250k", "rmat-s13"):
            out.append((name, "lil", a.tolil()))
    rng = np.random.default_rng(1)
    for name in (("fem2d-3k",) if quick else ("fem2d-3k", "fem2d-250k", "fem3d-100k")):
        mesh = corpus.build(entries[name])
        block = rng.random((3, 3)) + np.eye(3)
        out.append((f"{name} x 3x3", "bsr", sps.bsr_array(sps.kron(mesh, block, format="csr"), blocksize=(3, 3))))
    side = 60 if quick else 700
    lap = sps.diags_array([-1.0, -1.0, 4.0, -1.0, -1.0], offsets=[-side, -1, 0, 1, side],
                          shape=(side * side, side * side), format="dia")
    out.append((f"laplace5-{side}^2", "dia", lap))
    n = 4_000 if quick else 150_000
    band = sps.dia_array((rng.random((11, n)), np.arange(-5, 6)), shape=(n, n))
    out.append((f"band11-{n}", "dia", band))
    try:
        import sparse
    except ImportError:
        return out
    mesh = corpus.build(entries["fem2d-3k" if quick else "fem2d-250k"])
    pc = sparse.COO.from_scipy_sparse(mesh)
    out.append((f"{'fem2d-3k' if quick else 'fem2d-250k'}", "pydata-coo", pc))
    out.append((f"{'fem2d-3k' if quick else 'fem2d-250k'}", "pydata-gcxs", sparse.GCXS(pc, compressed_axes=(0,))))
    return out


def _reference(op: str, a, x, X):
    pydata = type(a).__module__.split(".")[0] == "sparse"
    return {"spmv": lambda: a @ x, "spmm": lambda: a @ X,
            "multiply": (lambda: a * a) if pydata else (lambda: a.multiply(a)),
            "add": lambda: a + a, "spgemm": lambda: a @ a}[op]


def _dropin(op: str, a, x, X):
    import splyce

    return {"spmv": lambda: splyce.matmul(a, x), "spmm": lambda: splyce.matmul(a, X),
            "multiply": lambda: splyce.multiply(a, a), "add": lambda: splyce.add(a, a),
            "spgemm": lambda: splyce.matmul(a, a)}[op]


def _comparable(r):
    """A result as a scipy CSR (sparse results, never densified: the corpus's large matrices) or an ndarray."""
    import scipy.sparse as sps

    if sps.issparse(r):
        return sps.csr_array(r)
    if hasattr(r, "to_scipy_sparse"):                   # pydata COO / GCXS
        return sps.csr_array(r.to_scipy_sparse())
    return np.asarray(r)


def _check(desc: str, got, want) -> None:
    if type(got) is not type(want) or getattr(got, "format", None) != getattr(want, "format", None):
        raise BenchMismatch(f"{desc}: {type(got).__name__} ({getattr(got, 'format', '')}) where the reference "
                            f"returns {type(want).__name__} ({getattr(want, 'format', '')})")
    g, w = _comparable(got), _comparable(want)
    if g.shape != w.shape:
        raise BenchMismatch(f"{desc}: shape {g.shape} where the reference has {w.shape}")
    if isinstance(g, np.ndarray) != isinstance(w, np.ndarray):
        raise BenchMismatch(f"{desc}: a dense result where the reference is sparse, or the reverse")
    if isinstance(g, np.ndarray):
        ok = np.allclose(g, w, rtol=1e-9, atol=1e-9)
    else:
        scale = max(float(abs(w).max()) if w.nnz else 0.0, 1.0)
        ok = (g.nnz == 0 and w.nnz == 0) or float(abs(g - w).max()) <= 1e-9 * scale
    if not ok:
        raise BenchMismatch(f"{desc}: values differ from the reference")


def _per_call(fn) -> int:
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-7)
    return max(1, int(MIN_SAMPLE_S / one))


def _one_call(fns: dict) -> float:
    """The shortest time of one call among ``fns`` (each called once)."""
    out = float("inf")
    for fn in fns.values():
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def _interleaved(fns: dict, repeats: int) -> dict:
    calls = {name: _per_call(fn) for name, fn in fns.items()}
    # a call of 20 ms or more is its own long sample: one per repeat (SAMPLES of them cost minutes per row)
    rounds = repeats * SAMPLES if _one_call(fns) < MIN_SAMPLE_S * 10 else repeats
    best = dict.fromkeys(fns, float("inf"))
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, k = fns[name], calls[name]
            t = time.perf_counter()
            for _ in range(k):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / k)
    return best


def run(cfg: Config) -> Result:
    rows = []
    ops = [o for o in OPS if not cfg.ops or o in cfg.ops]
    repeats = cfg.n_repeats
    rng = np.random.default_rng(2)
    for label, fmt, a in _matrices(cfg):
        m, n = a.shape
        x, X = rng.random(n), rng.random((n, SPMM_COLUMNS))
        for op in ops:
            if op == "spgemm" and (a.nnz > 2_000_000 or (fmt.startswith("pydata") and a.nnz > 300_000)):
                continue
            ref, ours = _reference(op, a, x, X), _dropin(op, a, x, X)
            desc = f"{label} {fmt} {op}"
            if cfg.progress:
                print(f"  {desc} ...", flush=True)
            _check(desc, ours(), ref())
            t = _interleaved({"reference": ref, "splyce": ours}, repeats)
            rows.append({"matrix": label, "format": fmt, "op": op, "rows": m, "nnz": int(a.nnz),
                         "reference_ms": t["reference"] * 1e3, "splyce_ms": t["splyce"] * 1e3,
                         "speedup": t["reference"] / t["splyce"]})
    summary = []
    for fmt in dict.fromkeys(r["format"] for r in rows):
        for op in ops:
            sel = [r["speedup"] for r in rows if r["format"] == fmt and r["op"] == op]
            if sel:
                summary.append(f"| {fmt} | {op} | {geomean(sel):.2f}x | {min(sel):.2f}x | {len(sel)} |")
    preface = ("Geometric mean and lowest speedup of the drop-in over the reference (scipy; pydata's own operators "
               "for pydata operands), per format and op:\n\n| format | op | geomean | lowest | cases |\n"
               "| --- | --- | --- | --- | --- |\n" + "\n".join(summary) + "\n")
    return Result(name="formats", title="Drop-ins on stored formats (COO, DIA, BSR, LIL, pydata COO / GCXS) vs "
                  "scipy / pydata", columns=["matrix", "format", "op", "rows", "nnz", "reference_ms", "splyce_ms",
                                             "speedup"],
                  rows=rows, preface=preface,
                  note="reference: scipy's operator on the same object (pydata's for pydata operands); best of "
                       f"{repeats} x {SAMPLES} interleaved samples of >= {MIN_SAMPLE_S * 1e3:g} ms (calls of "
                       f"{MIN_SAMPLE_S * 1e4:g} ms or more: {repeats} samples of one call); speedup = reference / "
                       "splyce")
