"""``real``: the drop-ins on a realistic corpus (:mod:`splyce.bench.corpus`) against scipy, SuiteSparse:GraphBLAS
(python-graphblas) and pydata-sparse, eight products per matrix.

Candidates per (matrix, op), timed interleaved in one :func:`~splyce.bench.common.measure`:

* ``scipy``: the product as a scipy user writes it (``A @ x``, ``A.multiply(A.T)``, ...): the reference.
* ``splyce``: the drop-in (``splyce.matmul / multiply / add / einsum``) on the same scipy operands, validation
  and conversion included, as a user calls it.
* ``jit``: the same op written as a JAX user writes it, inside ``@splyce.jit`` on ``SparseTensor`` operands made
  once (untimed) with ``splyce.asarray``: ``a @ x``, ``a * a.T``, ``((l @ l.T) * l).sum()``, ... (the planner
  chooses the kernel: an MLIR kernel, or the drop-in's native one where it serves the jit).
* ``graphblas``: SuiteSparse:GraphBLAS with ``nthreads = 1`` on its own objects (converted once, untimed).
* ``pydata``: pydata-sparse ``COO`` (converted once, untimed), where it fits in memory and time; full runs
  only (its numba kernels compile in every process, ~30 s, longer than a whole ``--quick`` run).
* ``splyce-t2`` / ``graphblas-t2``: two threads each, for the ops whose drop-in accepts ``threads=``.

Every candidate's first result is checked against scipy's before anything is timed (a mismatch aborts the run).
A candidate whose single call takes more than 10x scipy's (and over 0.5 s) is not repeated: its row reports
that one call. For the ops whose cost can grow faster than the input (SpGEMM, masked SpGEMM, triangles, SDDMM) on matrices
over 100k nonzeros, the drop-in and pydata are first run once in a child process that is stopped past
max(10x scipy, 2 s), so a formulation that would take minutes is reported as such instead of stalling the run.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from splyce.bench import ceiling, corpus
from splyce.bench.bandwidth import BANDWIDTH_BYTES, read_bandwidth
from splyce.bench.common import Config, Result, _progress, check, geomean, measure, to_dense

OPS = {
    "spmv": "SpMV A @ x",
    "spmm": "SpMM A @ X (16 columns)",
    "spmspv": "SpMSpV A @ x (x 1 % nonzeros)",
    "hadamard": "Hadamard A * A^T",
    "hadamard-bool": "Hadamard of the bool pattern B * B^T",
    "hadamard-tl": "Hadamard A^T * A (transpose on the left)",
    "add": "add A + A^T",
    "spgemm": "SpGEMM A @ A",
    "masked": "masked SpGEMM (L @ L) .* L",
    "triangles": "triangles sum((L L^T) .* L)",
    "sddmm": "SDDMM A * (X @ Y^T), 32 columns",
}
DROPIN = {"spmv": "matmul", "spmm": "matmul", "spmspv": "matmul", "hadamard": "multiply", "add": "add",
          "hadamard-bool": "multiply", "hadamard-tl": "multiply",
          "spgemm": "matmul", "masked": "einsum", "triangles": "einsum", "sddmm": "einsum"}
SPMM_COLUMNS, SDDMM_COLUMNS, SPMSPV_DENSITY = 16, 32, 0.01
TRIANGLES_EINSUM = "ij,jk,ik->"        # L L L: i > j > k, each triangle once; the same count as scipy's formula
SDDMM_EINSUM = "ij,ik,jk->ij"
MASKED_EINSUM = "ik,kj,ij->ij"          # C[i,j] = sum_k L[i,k] L[k,j] where L[i,j] is stored
SLOW_FACTOR, SLOW_MIN_S = 10.0, 0.5    # a single call slower than both is not repeated
SUPERLINEAR = ("spgemm", "masked", "triangles", "sddmm")
GUARD_NNZ = 100_000                    # above this, SUPERLINEAR ops are probed in a child process first
GUARD_MIN_S, CHILD_STARTUP_S = 2.0, 120.0
PYDATA_DENSE_BYTES = 256 << 20         # pydata's SDDMM forms X @ Y^T densely
PYDATA_QUICK_NOTE = "pydata: full runs only (numba compiles its kernels in every process: ~30 s)"

COLUMNS = ["matrix", "class", "n", "nnz", "op", "scipy_s", "splyce_s", "splyce_vs_scipy", "jit_s", "jit_vs_scipy",
           "jit_vs_splyce", "graphblas_s",
           "graphblas_vs_scipy", "splyce_vs_graphblas", "pydata_s", "pydata_vs_scipy", "splyce_t2_s",
           "graphblas_t2_s", "splyce_t2_vs_graphblas_t2", "splyce_t2_scaling", "bw_splyce", "bw_scipy",
           "bw_graphblas", "splyce_compile_s", "jit_compile_s", "notes"]


# -- operands -------------------------------------------------------------------------------------------------
class Operands:
    """Everything one matrix's ops need, derived from ``A`` and a seed taken from the matrix name (so a child
    process rebuilds exactly the same operands)."""

    def __init__(self, name: str, A):
        import scipy.sparse as sps

        rng = np.random.default_rng(zlib.crc32(name.encode()))
        n = A.shape[0]
        self.n, self.A = n, A
        self.x = rng.uniform(-1.0, 1.0, n)
        self.X = rng.uniform(-1.0, 1.0, (n, SPMM_COLUMNS))
        k = max(1, round(SPMSPV_DENSITY * n))
        idx = np.sort(rng.choice(n, k, replace=False))
        self.xs = sps.coo_array((rng.uniform(0.5, 1.0, k), (idx,)), shape=(n,))
        self.L = corpus.canonical(sps.tril(A, -1).astype(bool))      # the pattern below the diagonal
        self.B = sps.csr_array(A.astype(bool))                        # A's pattern (its values True)
        self.XL = rng.uniform(-1.0, 1.0, (n, SDDMM_COLUMNS))
        self.YL = rng.uniform(-1.0, 1.0, (n, SDDMM_COLUMNS))
        self._gb = self._pd = None

    def graphblas(self):
        if self._gb is None:
            import graphblas as gb

            self._gb = {"A": gb.io.from_scipy_sparse(self.A), "x": gb.Vector.from_dense(self.x),
                        "X": gb.Matrix.from_dense(self.X),
                        "xs": gb.Vector.from_coo(self.xs.coords[0], self.xs.data, size=self.n),
                        "L": gb.io.from_scipy_sparse(self.L), "XL": gb.Matrix.from_dense(self.XL),
                        "B": gb.io.from_scipy_sparse(self.B),
                        "YL": gb.Matrix.from_dense(self.YL)}
        return self._gb

    def pydata(self):
        if self._pd is None:
            import sparse

            self._pd = {"A": sparse.COO.from_scipy_sparse(self.A), "L": sparse.COO.from_scipy_sparse(self.L),
                        "B": sparse.COO.from_scipy_sparse(self.B),
                        "xs": sparse.COO(self.xs.coords[0][None, :], self.xs.data, shape=(self.n,))}
        return self._pd


# -- candidates -----------------------------------------------------------------------------------------------
def _scipy_sddmm(M, X, Y):
    """SDDMM as a scipy user writes it: a row-wise dot product per stored entry (X @ Y^T would be n x n dense)."""
    import scipy.sparse as sps

    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    data = M.data * np.einsum("ij,ij->i", X[rows], Y[M.indices])
    return sps.csr_array((data, M.indices, M.indptr), shape=M.shape)


def scipy_call(op: str, d: Operands):
    A, L = d.A, d.L
    return {
        "spmv": lambda: A @ d.x,
        "spmm": lambda: A @ d.X,
        "spmspv": lambda: A @ d.xs,
        "hadamard": lambda: A.multiply(A.T),
        "hadamard-bool": lambda: d.B.multiply(d.B.T),
        "hadamard-tl": lambda: A.T.multiply(A),
        "add": lambda: A + A.T,
        "spgemm": lambda: A @ A,
        "masked": lambda: (L @ L).multiply(L),
        "triangles": lambda: (L @ L.T).multiply(L).sum(),
        "sddmm": lambda: _scipy_sddmm(A, d.XL, d.YL),
    }[op]


def dropin_threads(op: str) -> bool:
    """Whether this op's drop-in accepts ``threads=`` (the two-thread columns appear only then)."""
    import splyce

    return "threads" in inspect.signature(getattr(splyce, DROPIN[op])).parameters


def splyce_call(op: str, d: Operands, threads: int | None = None):
    import splyce

    A, L = d.A, d.L
    kw = {} if threads is None else {"threads": threads}
    return {
        "spmv": lambda: splyce.matmul(A, d.x, **kw),
        "spmm": lambda: splyce.matmul(A, d.X, **kw),
        "spmspv": lambda: splyce.matmul(A, d.xs, **kw),
        "hadamard": lambda: splyce.multiply(A, A.T, **kw),
        "hadamard-bool": lambda: splyce.multiply(d.B, d.B.T, **kw),
        "hadamard-tl": lambda: splyce.multiply(A.T, A, **kw),
        "add": lambda: splyce.add(A, A.T, **kw),
        "spgemm": lambda: splyce.matmul(A, A, **kw),
        "masked": lambda: splyce.einsum(MASKED_EINSUM, L, L, L, **kw),
        "triangles": lambda: splyce.einsum(TRIANGLES_EINSUM, L, L, L, **kw),
        "sddmm": lambda: splyce.einsum(SDDMM_EINSUM, A, d.XL, d.YL, out_format="sparse", **kw),
    }[op]


_JITTED: dict = {}


def _jitted(op: str):
    """One ``splyce.jit`` function per op for the whole run (its kernels cached per signature)."""
    import splyce

    if op not in _JITTED:
        body, out_format = {
            "spmv": (lambda a, x: a @ x, None),
            "spmm": (lambda a, x: a @ x, None),
            "spmspv": (lambda a, x: a @ x, None),
            "hadamard": (lambda a: a * a.T, None),
            "hadamard-bool": (lambda a: a * a.T, None),
            "hadamard-tl": (lambda a: a.T * a, None),
            "add": (lambda a: a + a.T, None),
            "spgemm": (lambda a: a @ a, "sparse"),
            "masked": (lambda l: (l @ l) * l, None),
            "triangles": (lambda l: ((l @ l.T) * l).sum(), None),
            "sddmm": (lambda m, x, y: m * (x @ y.T), None),
        }[op]
        _JITTED[op] = splyce.jit(body, out_format=out_format)
    return _JITTED[op]


def jit_call(op: str, d: Operands):
    """The op inside ``@splyce.jit`` on SparseTensor operands (converted once, here, untimed)."""
    import splyce

    f = _jitted(op)
    T = splyce.asarray
    args = {"spmv": lambda: (T(d.A), d.x), "spmm": lambda: (T(d.A), d.X), "spmspv": lambda: (T(d.A), T(d.xs)),
            "hadamard": lambda: (T(d.A),), "add": lambda: (T(d.A),), "spgemm": lambda: (T(d.A),),
            "hadamard-bool": lambda: (T(d.B),), "hadamard-tl": lambda: (T(d.A),),
            "masked": lambda: (T(d.L),), "triangles": lambda: (T(d.L),),
            "sddmm": lambda: (T(d.A), d.XL, d.YL)}[op]()
    return lambda: f(*args)


def graphblas_call(op: str, d: Operands, nthreads: int = 1):
    import graphblas as gb

    g = d.graphblas()
    A, L = g["A"], g["L"]

    def triangles():
        C = gb.Matrix(float, d.n, d.n)
        C(L.S) << gb.semiring.plus_pair(L @ L.T)      # masked dot products: SuiteSparse's Sandia-dot count
        return C.reduce_scalar().new()

    def masked():
        C = gb.Matrix(float, d.n, d.n)
        C(L.S) << gb.semiring.plus_times(L @ L)
        return C

    def sddmm():
        C = gb.Matrix(float, d.n, d.n)
        C(A.S) << gb.semiring.plus_times(g["XL"] @ g["YL"].T)
        return C.ewise_mult(A).new()

    f = {
        "spmv": lambda: (A @ g["x"]).new(),
        "spmm": lambda: (A @ g["X"]).new(),
        "spmspv": lambda: (A @ g["xs"]).new(),
        "hadamard": lambda: A.ewise_mult(A.T).new(),
        "hadamard-bool": lambda: g["B"].ewise_mult(g["B"].T).new(),
        "hadamard-tl": lambda: A.T.ewise_mult(A).new(),
        "add": lambda: A.ewise_add(A.T).new(),
        "spgemm": lambda: (A @ A).new(),
        "masked": masked,
        "triangles": triangles,
        "sddmm": sddmm,
    }[op]

    def call():
        gb.ss.config["nthreads"] = nthreads   # a process-wide setting: set before every call
        return f()
    return call


def pydata_call(op: str, d: Operands):
    """pydata-sparse COO, or a string saying why it is left out."""
    if op == "sddmm" and d.n * d.n * 8 > PYDATA_DENSE_BYTES:
        return f"pydata: skipped, its SDDMM forms a dense {d.n}x{d.n} X @ Y^T ({d.n * d.n * 8 / 2**30:.1f} GiB)"
    p = d.pydata()
    A, L = p["A"], p["L"]
    return {
        "spmv": lambda: A @ d.x,
        "spmm": lambda: A @ d.X,
        "spmspv": lambda: A @ p["xs"],
        "hadamard": lambda: A * A.T,
        "hadamard-bool": lambda: p["B"] * p["B"].T,
        "hadamard-tl": lambda: A.T * A,
        "add": lambda: A + A.T,
        "spgemm": lambda: A @ A,
        "masked": lambda: (L @ L) * L,
        "triangles": lambda: ((L @ L.T) * L).sum(),
        "sddmm": lambda: A * (d.XL @ d.YL.T),
    }[op]


def _unsupported_errors():
    """Exceptions with which the drop-in says it cannot express an op (reported, not fatal)."""
    from splyce.lowering.to_mlir import LoweringError
    from splyce.tracer.tracer import TraceError

    return (LoweringError, TraceError, NotImplementedError)


# -- guards ---------------------------------------------------------------------------------------------------
def _timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def probe_in_child(cache_dir: Path, entry: corpus.Entry, op: str, who: str, limit: float) -> float | None:
    """Seconds of one call of ``who`` ('splyce', 'jit' or 'pydata') in a child process, or None when the child was
    stopped (killed) ``limit`` seconds after it said it was ready (imports and operands are not counted)."""
    import select

    cmd = [sys.executable, "-m", "splyce.bench.real", "probe", str(cache_dir), entry.name, op, who]
    root = str(Path(__file__).resolve().parents[2])   # this checkout's splyce, whatever the caller's path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        for wait in (CHILD_STARTUP_S, limit + 1.0):          # 'ready', then the result
            if not select.select([proc.stdout], [], [], wait)[0]:
                return None                                  # stopped: killed below
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        proc.wait(timeout=CHILD_STARTUP_S)
        if proc.returncode != 0 or len(lines) != 2:
            raise RuntimeError(f"real: probe of {who} {op} on {entry.name} failed (exit {proc.returncode}):\n"
                               + proc.stderr.read()[-2000:])
        return float(json.loads(lines[1])["seconds"])
    finally:
        if proc.poll() is None:
            proc.kill()                                      # our own child, by its handle
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _probe_main(cache_dir: str, name: str, op: str, who: str) -> None:
    """Child side of :func:`probe_in_child`: build the operands, say 'ready', time one call."""
    entry = next(e for e in corpus.entries() if e.name == name)
    d = Operands(name, corpus.build(entry, Path(cache_dir)))
    f = {"splyce": splyce_call, "jit": jit_call, "pydata": pydata_call}[who](op, d)
    print("ready", flush=True)
    _, seconds = _timed(f)
    print(json.dumps({"seconds": seconds}), flush=True)


# -- one (matrix, op) -----------------------------------------------------------------------------------------
def _reference(op, d):
    """scipy's result (the reference: dense for vectors and scalars, scipy sparse for matrices) and its time."""
    import scipy.sparse as sps

    ref, seconds = _timed(scipy_call(op, d))
    if not (sps.issparse(ref) and ref.ndim == 2):
        ref = to_dense(ref)
    return ref, seconds


def run_case(entry, d: Operands, op: str, cfg: Config, bar=None, cache_dir: Path | None = None) -> dict:
    ref, t_ref = _reference(op, d)
    limit = max(SLOW_FACTOR * t_ref, SLOW_MIN_S)
    cands = {"scipy": scipy_call(op, d), "splyce": splyce_call(op, d), "jit": jit_call(op, d),
             "graphblas": graphblas_call(op, d, 1)}
    pyd = pydata_call(op, d) if not cfg.quick else PYDATA_QUICK_NOTE
    notes, single, first = [], {}, {}
    if isinstance(pyd, str):
        notes.append(pyd)
    else:
        cands["pydata"] = pyd
    if dropin_threads(op) and not cfg.tiny:   # the tests' tiny runs cover one thread; test_bench covers two
        cands["splyce-t2"] = splyce_call(op, d, threads=2)
        cands["graphblas-t2"] = graphblas_call(op, d, 2)
    unsupported = _unsupported_errors()
    guarded = op in SUPERLINEAR and d.A.nnz > GUARD_NNZ and cache_dir is not None
    for name in [c for c in cands if c.startswith(("splyce", "pydata", "jit"))]:
        who = name if name in ("pydata", "jit") else "splyce"
        if name == "splyce-t2" and "splyce" in single:
            notes.append("splyce-t2: not run (one thread is already > 10x scipy)")
            del cands[name]
            continue
        if guarded and name in ("splyce", "pydata", "jit"):
            child_limit = max(SLOW_FACTOR * t_ref, GUARD_MIN_S)
            seconds = probe_in_child(cache_dir, entry, op, who, child_limit)
            if seconds is None or seconds > child_limit:
                single[name] = (seconds, child_limit)
                notes.append(f"{name}: one call in a child process {_stopped(seconds, child_limit)}, "
                             f"> {SLOW_FACTOR:g}x scipy: not repeated")
                del cands[name]
                continue
        try:
            out, seconds = _timed(cands[name])
        except unsupported as e:
            notes.append(f"{name}: unsupported ({type(e).__name__}: {str(e).splitlines()[0]})")
            del cands[name]
            continue
        check(f"{entry.name} {op} {name}", out, ref)
        del out
        first[name] = seconds
        if seconds > limit:                      # maybe the first call compiled: try once more
            out, seconds = _timed(cands[name])
            check(f"{entry.name} {op} {name}", out, ref)
            del out
        if seconds > limit:
            single[name] = (seconds, limit)
            notes.append(f"{name}: one call {seconds:.3g} s > {SLOW_FACTOR:g}x scipy: not repeated")
            del cands[name]
    if bar is not None:
        bar.total += len(cands) * (cfg.n_repeats + 1)
        bar.refresh()
    t = measure(cands, ref, cfg, desc=f"{entry.name} {op}", bar=bar)
    row = _row(entry, d, op, t, single, notes)
    if "splyce" in t:                            # the first call (compile included) was the check above
        row["splyce_compile_s"] = max(0.0, first["splyce"] - t["splyce"].min)
    if "jit" in t:
        row["jit_compile_s"] = max(0.0, first["jit"] - t["jit"].min)
    return row


def _stopped(seconds, limit) -> str:
    return f"stopped after {limit:.3g} s" if seconds is None else f"took {seconds:.3g} s"


def _seconds(name, t, single):
    """(median seconds or a single call's, text marker) for a candidate; (None, reason) when absent."""
    if name in t:
        return t[name].median, ""
    if name in single:
        seconds, limit = single[name]
        return (limit, ">") if seconds is None else (seconds, "1 call")
    return None, ""


def _ratio(num, den, marker=""):
    if num is None or den is None or den <= 0:
        return math.nan
    return f"<{num / den:.3g}" if marker == ">" else num / den


def _row(entry, d, op, t, single, notes) -> dict:
    A = d.A
    row = {"matrix": entry.name, "class": entry.kind, "n": A.shape[0], "nnz": A.nnz, "op": op,
           "notes": "; ".join(notes)}
    scipy_s = t["scipy"].median
    row["scipy_s"] = scipy_s
    for name, col in (("splyce", "splyce"), ("jit", "jit"), ("graphblas", "graphblas"), ("pydata", "pydata"),
                      ("splyce-t2", "splyce_t2"), ("graphblas-t2", "graphblas_t2")):
        s, marker = _seconds(name, t, single)
        row[f"{col}_s"] = math.nan if s is None else (f">{s:.3g}" if marker == ">" else s)
        if col in ("splyce", "jit", "graphblas", "pydata"):
            row[f"{col}_vs_scipy"] = _ratio(scipy_s, s, marker)
    sp, sp_marker = _seconds("splyce", t, single)
    jit_s, jit_marker = _seconds("jit", t, single)
    row["jit_vs_splyce"] = _ratio(sp, jit_s, jit_marker)
    gb_s, _ = _seconds("graphblas", t, single)
    row["splyce_vs_graphblas"] = _ratio(gb_s, sp, sp_marker)
    if "splyce-t2" in t and "graphblas-t2" in t:
        row["splyce_t2_vs_graphblas_t2"] = t["graphblas-t2"].median / t["splyce-t2"].median
        if "splyce" in t:
            row["splyce_t2_scaling"] = t["splyce"].median / t["splyce-t2"].median
    if op == "spmv":
        moved = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes + 2 * d.x.nbytes   # A, x and y
        for name in ("splyce", "scipy", "graphblas"):
            if name in t:
                row[f"bw_{name}"] = moved / t[name].median / read_bandwidth()
    return row


# -- the run --------------------------------------------------------------------------------------------------
def tiny_entries() -> list[corpus.Entry]:
    """The test-suite's seconds-long run: two small matrices (skewed rows; short regular ones)."""
    keep = {"rmat-s10", "blockdiag-32"}
    return [e for e in corpus.select(quick=True) if e.name in keep]


def _chosen(names: tuple[str, ...], known: list[str], what: str) -> list[str]:
    """The --ops / --matrices selection, in the order given; all of ``known`` when nothing was given."""
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return list(names) or known


def run(cfg: Config) -> Result:
    entries = tiny_entries() if cfg.tiny else corpus.select(cfg.quick)
    ops = _chosen(cfg.ops, list(OPS), "op")
    if cfg.matrices:
        everything = {e.name: e for e in corpus.entries()}
        entries = [everything[n] for n in _chosen(cfg.matrices, list(everything), "matrix")]
    cache_dir = Path(cfg.out) / "corpus-cache"
    bandwidth = read_bandwidth()
    machine = ceiling.measure(tiny=cfg.tiny)   # what a second core and fresh memory give, before the corpus
    rows = []
    bar = _progress(0, "real", cfg)
    try:
        for entry in entries:
            A = corpus.build(entry, cache_dir)
            d = Operands(entry.name, A)
            for op in ops:
                bar.set_description(f"real {entry.name} {op}")
                rows.append(run_case(entry, d, op, cfg, bar=bar, cache_dir=cache_dir))
    finally:
        bar.close()
    note = (f"Median seconds of {cfg.n_repeats} interleaved repeats, one thread. *_vs_scipy = scipy time / that "
            "time (> 1: faster than scipy); splyce_vs_graphblas = GraphBLAS time / drop-in time. splyce = the "
            "drop-in on scipy operands, validation and conversion included; graphblas and pydata run on their own "
            "objects, converted once outside the timer. bw_* (SpMV) = (bytes of A, x and y) / time, as a fraction "
            f"of the single-core read bandwidth measured in this run ({bandwidth / 1e9:.1f} GB/s, NumPy sum of "
            f"{BANDWIDTH_BYTES >> 20} MB). '<r' = at most r (the call was stopped); '1 call' entries were not "
            "repeated (slower than 10x scipy). Triangles: L = tril(A, -1) as a 0/1 pattern; scipy "
            f"(L @ L.T).multiply(L).sum(), the drop-in einsum('{TRIANGLES_EINSUM}', L, L, L), GraphBLAS masked "
            f"plus_pair; masked SpGEMM: scipy (L @ L).multiply(L), the drop-in einsum('{MASKED_EINSUM}', L, L, L), "
            f"GraphBLAS C(L.S) << L @ L; SDDMM: drop-in einsum('{SDDMM_EINSUM}', A, X, Y, out_format='sparse'), scipy a row-wise "
            "dot product per stored entry. Matrix classes: docs/corpus.md.")
    return Result("real", "Realistic corpus: drop-ins vs scipy, SuiteSparse:GraphBLAS and pydata-sparse", COLUMNS,
                  rows, note, plot=_plot_summary,
                  preface=summary_tables(rows) + "\n**This machine during the run** (what the `splyce_t2` columns "
                  "can gain: `splyce.bench.ceiling`)\n\n" + ceiling.markdown(machine),
                  extra_plots={op: _op_plot(op) for op in ops}, comments=ceiling.lines(machine))


def summary_tables(rows) -> str:
    """Two pivots (matrix x op): drop-in vs scipy, and drop-in vs GraphBLAS (one thread)."""
    mats = list(dict.fromkeys(r["matrix"] for r in rows))
    ops = list(dict.fromkeys(r["op"] for r in rows))
    out = []
    for col, title in (("jit_vs_splyce", "@splyce.jit vs the drop-in on the same op (> 1: jit faster)"),
                       ("jit_vs_scipy", "@splyce.jit speedup vs scipy (> 1: faster)"),
                       ("splyce_vs_scipy", "drop-in speedup vs scipy (> 1: faster)"),
                       ("splyce_vs_graphblas", "drop-in speedup vs GraphBLAS, nthreads = 1"),
                       ("graphblas_vs_scipy", "GraphBLAS speedup vs scipy, nthreads = 1")):
        lines = [f"**{title}**", "", "| matrix | class | " + " | ".join(ops) + " |",
                 "| --- | --- |" + " --- |" * len(ops)]
        for m in mats:
            cells = {r["op"]: r for r in rows if r["matrix"] == m}
            kind = next(iter(cells.values()))["class"]
            lines.append(f"| {m} | {kind} | " + " | ".join(_cell(cells.get(o, {}).get(col)) for o in ops) + " |")
        gm = [geomean(r.get(col) for r in rows if r["op"] == o) for o in ops]
        lines.append("| geomean | | " + " | ".join(_cell(g) for g in gm) + " |")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def _cell(x) -> str:
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.2f}x" if x < 100 else f"{x:.0f}x"


def _number(x) -> float:
    """A ratio cell as a number ('<0.05' plots as 0.05); NaN when absent."""
    if isinstance(x, str):
        try:
            return float(x.lstrip("<>"))
        except ValueError:
            return math.nan
    return math.nan if x is None else float(x)


def _op_plot(op):
    def plot(rows, ax):
        rs = [r for r in rows if r["op"] == op]
        rs.sort(key=lambda r: list(corpus.CLASSES).index(r["class"]))
        x = np.arange(len(rs))
        series = [("splyce_vs_scipy", "splyce drop-in"), ("graphblas_vs_scipy", "GraphBLAS (1 thread)"),
                  ("pydata_vs_scipy", "pydata-sparse")]
        w = 0.8 / len(series)
        for i, (col, label) in enumerate(series):
            ys = [_number(r.get(col)) for r in rs]
            ax.bar(x + (i - 1) * w, [y if y == y else 0 for y in ys], w, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{r['matrix']}\n{r['class']}" for r in rs], rotation=60, ha="right", fontsize=6)
        ax.set_ylabel("speedup vs scipy (log)")
        ax.legend(fontsize=7)
    return plot


def _plot_summary(rows, ax):
    """Geomean drop-in speedup vs scipy per op, one bar per matrix class."""
    classes = [c for c in corpus.CLASSES if any(r["class"] == c for r in rows)]
    ops = list(OPS)
    x = np.arange(len(ops))
    w = 0.8 / max(1, len(classes))
    for i, c in enumerate(classes):
        ys = [geomean(_number(r.get("splyce_vs_scipy")) for r in rows if r["class"] == c and r["op"] == o)
              for o in ops]
        ax.bar(x + (i - (len(classes) - 1) / 2) * w, [y if y == y else 0 for y in ys], w, label=c)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, ops, rotation=20, fontsize=8)
    ax.set_ylabel("drop-in speedup vs scipy (geomean, log)")
    ax.legend(fontsize=7)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "probe":
        _probe_main(*sys.argv[2:])
    else:
        sys.exit("usage: python -m splyce.bench.real probe CACHE_DIR MATRIX OP splyce|pydata")
