"""``sweep``: ``bench limit``'s fiber-pair sparse dot across the coordinate distributions users have (issue 59).

``bench limit`` draws its fibers one way (a shared share, the rest from a universe 4x the total); a lane tuned on
those can be slow on others, since a lane's speed depends on the gaps between coordinates. This sweep draws the
pairs below (``DISTRIBUTIONS``; written before the sweep was first run) and times, on the same arrays, the strict
lane (default options), the fast_math lane (``fast_math=True``, the width left to the per-CPU rule), the plain
sparsifier (``vectorize=False``), NumKong's ``sparse_dot`` (uint32 + float32 only: int32 rows, float32 copies of
f64 values, untimed) and ``intersect`` (count only), and the read floor (NumPy ``max`` over an int32 view of every
buffer: both fibers' coordinates and values) and the coordinates-only floor. Method as ``bench limit``
(thread CPU time, interleaved repeats rotated, every candidate checked first, best and median).

Distributions (``n`` = the long fiber's length, 2^20 by default):

* ``uniform xF``: each fiber ``n`` coordinates drawn uniformly without replacement from ``[0, F n)``,
  independently (expected overlap ``1 / F``), F = 1.25, 2, 4, 10, 64;
* ``runs L``: clustered coordinates, as in banded and FEM rows: runs of ``L`` consecutive indices (L = 8, 64)
  starting at run origins drawn uniformly without replacement from a universe ``4 n``, for each fiber
  independently (runs of the two fibers overlap partly);
* ``powerlaw a``: gaps ``1 + floor(Pareto(a))`` (a = 1.2: heavy tail, most gaps 1-2 and a few huge jumps; a =
  2.0), each fiber independently: long runs of dense coordinates between long empty stretches;
* ``skew 1:S``: the long fiber uniform from ``[0, 4 n)``, the short one ``n / S`` coordinates from the same
  universe, independently, S = 4, 16, 64, 256;
* ``mixed``: equal lengths, one fiber uniform from ``[0, 2 n)`` (dense), the other from ``[0, 64 n)``: in the
  shared range ``[0, 2 n)`` one fiber's density is 32x the other's, and the sparse one runs on alone past it.

Every distribution runs with int32 coordinates and f32 values (the types NumKong's ``sparse_dot`` takes); the
uniform x2 / x10, runs 8, powerlaw 1.2 and skew 1:16 ones also with int32 / f64, int64 / f32 and int64 / f64.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from splyce.bench.common import Config, Result, _progress
from splyce.bench.limit import _jit, _sealed_vector, _time_case, clock_ghz

UNIFORM = (1.25, 2.0, 4.0, 10.0, 64.0)
RUNS = (8, 64)
POWERLAW = (1.2, 2.0)
SKEWS = (4, 16, 64, 256)
BASE = (np.int32, np.float32)
OTHER_TYPES = ((np.int32, np.float64), (np.int64, np.float32), (np.int64, np.float64))
TYPED = ("uniform x2", "uniform x10", "runs 8", "powerlaw 1.2", "skew 1:16")
COLUMNS = ["distribution", "crd", "val", "lengths", "overlap", "candidate", "ns_per_crd", "ns_per_crd_median",
           "vs_numkong", "vs_floor"]
CANDIDATES = ("lane", "lane fast_math", "plain", "numkong dot", "numkong intersect", "floor", "floor crd")


def _uniform(rng, n: int, universe: int) -> np.ndarray:
    """``n`` distinct integers uniform in ``[0, universe)``, sorted (without replacement)."""
    if universe < 4 * n:
        return np.sort(rng.permutation(universe)[:n])
    drawn = np.unique(rng.integers(0, universe, size=n + n // 4 + 64))   # ~n / 8 duplicates at universe 4 n
    while drawn.size < n:
        drawn = np.union1d(drawn, rng.integers(0, universe, size=n))
    return np.sort(rng.choice(drawn, size=n, replace=False))


def _runs(rng, n: int, run: int) -> np.ndarray:
    origins = np.sort(rng.choice(4 * n // run, size=n // run, replace=False)) * run
    return (origins[:, None] + np.arange(run)[None, :]).ravel()[:n]


def _powerlaw(rng, n: int, a: float) -> np.ndarray:
    gaps = 1 + np.floor(rng.pareto(a, size=n)).astype(np.int64)
    gaps = np.minimum(gaps, 1 << 24)
    return np.cumsum(gaps) - 1


def distribution(name: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The two sorted unique int64 coordinate arrays of distribution ``name`` (long fiber first)."""
    rng = np.random.default_rng(seed)
    kind, _, arg = name.partition(" ")
    if kind == "uniform":
        universe = int(round(float(arg[1:]) * n))
        return _uniform(rng, n, universe), _uniform(rng, n, universe)
    if kind == "runs":
        return _runs(rng, n, int(arg)), _runs(rng, n, int(arg))
    if kind == "powerlaw":
        return _powerlaw(rng, n, float(arg)), _powerlaw(rng, n, float(arg))
    if kind == "skew":
        short = n // int(arg.split(":")[1])
        return _uniform(rng, n, 4 * n), _uniform(rng, short, 4 * n)
    if kind == "mixed":
        return _uniform(rng, n, 2 * n), _uniform(rng, n, 64 * n)
    raise ValueError(f"unknown distribution {name!r}")


def distributions() -> list[str]:
    return ([f"uniform x{f:g}" for f in UNIFORM] + [f"runs {r}" for r in RUNS] + [f"powerlaw {a:g}" for a in POWERLAW]
            + [f"skew 1:{s}" for s in SKEWS] + ["mixed"])


def cases(n: int) -> list[tuple[str, type, type]]:
    out = [(d, *BASE) for d in distributions()]
    out += [(d, it, vt) for d in TYPED for it, vt in OTHER_TYPES]
    return out


def fiber_pair(name: str, n: int, itype, vtype, seed: int = 0):
    """(dim, b crd, b values, c crd, c values) of distribution ``name`` with the given types."""
    b, c = distribution(name, n, seed)
    if b.size != np.unique(b).size or c.size != np.unique(c).size:
        raise AssertionError(f"{name}: coordinates not unique")
    dim = int(max(b[-1], c[-1])) + 1
    if dim > np.iinfo(np.uint32).max:
        raise ValueError(f"{name}: universe {dim} beyond 32-bit coordinates")
    rng = np.random.default_rng(seed + 1)
    return (dim, b.astype(itype), rng.uniform(-1, 1, b.size).astype(vtype), c.astype(itype),
            rng.uniform(-1, 1, c.size).astype(vtype))


def _candidates(dim, b, bv, c, cv):
    import numkong as nk

    A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
    common, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(np.dot(bv[ib].astype(np.float64), cv[ic].astype(np.float64)))
    tol = 1e-4 if bv.dtype == np.float32 else 1e-9
    strict, fast, plain = _jit(), _jit(fast_math=True), _jit(vectorize=False)
    out = {"lane": (lambda: strict(A, B), exact, tol), "lane fast_math": (lambda: fast(A, B), exact, tol),
           "plain": (lambda: plain(A, B), exact, tol)}
    if b.dtype == np.int32:
        ub, uc = b.view(np.uint32), c.view(np.uint32)
        fb, fc = bv.astype(np.float32), cv.astype(np.float32)
        out["numkong dot"] = (lambda: nk.sparse_dot(ub, fb, uc, fc), exact, 1e-3)
    ub, uc = (b.view(np.uint32), c.view(np.uint32)) if b.dtype == np.int32 else (b.view(np.uint64), c.view(np.uint64))
    out["numkong intersect"] = (lambda: nk.intersect(ub, uc), float(common.size), 0.0)
    buffers = [x.view(np.int32) for x in (b, bv, c, cv)]
    out["floor"] = (lambda: max(int(x.max()) for x in buffers), float(max(int(x.max()) for x in buffers)), 0.0)
    crds = buffers[0::2]
    out["floor crd"] = (lambda: max(int(x.max()) for x in crds), float(max(int(x.max()) for x in crds)), 0.0)
    return out, common.size


def run(cfg: Config) -> Result:
    n = 4096 if cfg.tiny else (1 << 18 if cfg.quick else 1 << 20)
    todo = cases(n)[:3] if cfg.tiny else cases(n)
    repeats = cfg.repeats if cfg.repeats is not None else (2 if cfg.tiny else 5 if cfg.quick else 9)
    ghz, clock_how = clock_ghz()
    rows, lines = [], []
    bar = _progress(len(todo), "sweep", cfg)
    try:
        for name, it, vt in todo:
            dim, b, bv, c, cv = fiber_pair(name, n, it, vt)
            cands, shared = _candidates(dim, b, bv, c, cv)
            times = _time_case(cands, repeats)
            coords = b.size + c.size
            best = {k: min(v) / coords * 1e9 for k, v in times.items()}
            med = {k: statistics.median(v) / coords * 1e9 for k, v in times.items()}
            head = {"distribution": name, "crd": np.dtype(it).name, "val": np.dtype(vt).name,
                    "lengths": f"{b.size}:{c.size}", "overlap": f"{shared / min(b.size, c.size) * 100:.3g} %"}
            nk = med.get("numkong dot")
            for cand in cands:
                rows.append({**head, "candidate": cand, "ns_per_crd": best[cand], "ns_per_crd_median": med[cand],
                             "vs_numkong": med[cand] / nk if nk else math.nan,
                             "vs_floor": med[cand] / med["floor"]})
            lines.append((head, best, med))
            bar.update(1)
    finally:
        bar.close()
    fast = _jit(fast_math=True).options
    note = (f"n = {n} coordinates in the long fiber; ns_per_crd: best of {repeats} interleaved repeats per input "
            f"coordinate (len(a) + len(b)), _median the median; vs_numkong / vs_floor: medians over NumKong's "
            f"sparse_dot (uint32 + float32: float32 copies of f64 values; int32 rows only) and over the read floor "
            f"(NumPy max over an int32 view of both fibers' coordinates and values), same run. lane: default "
            f"options (strict, bit-exact); lane fast_math: fast_math=True, width n={fast.vector_width} "
            f"({fast.width_reason}); plain: vectorize=False. Clock {ghz:.2f} GHz ({clock_how}).")
    return Result("sweep", "Fiber-pair sparse dot across coordinate distributions: the lanes vs NumKong and the "
                  "read floor", COLUMNS, rows, note, plot=_plot, preface=_preface(lines),
                  comments=[f"clock: {ghz:.3f} GHz ({clock_how})"], repeats=repeats)


def _preface(lines) -> str:
    out = ["| distribution | crd / val | lengths | overlap | " + " | ".join(f"{c} ns" for c in CANDIDATES) +
           " | strict / nk dot | fast / nk dot | fast / floor |", "|" + " --- |" * (len(CANDIDATES) + 7)]
    for head, best, med in lines:
        nk = med.get("numkong dot")
        cells = [f"{best[c]:.3g}" if c in best else "n/a" for c in CANDIDATES]
        ratios = [f"{med['lane'] / nk:.2f}" if nk else "n/a", f"{med['lane fast_math'] / nk:.2f}" if nk else "n/a",
                  f"{med['lane fast_math'] / med['floor']:.2f}"]
        out.append(f"| {head['distribution']} | {head['crd']} / {head['val']} | {head['lengths']} | {head['overlap']} | "
                   + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(out) + "\n"


def _plot(rows, ax):
    keys = list(dict.fromkeys((r["distribution"], r["crd"], r["val"]) for r in rows))
    x = np.arange(len(keys))
    names = ("lane", "lane fast_math", "numkong dot", "floor")
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        ys = [next((r["ns_per_crd"] for r in rows if (r["distribution"], r["crd"], r["val"]) == k
                    and r["candidate"] == name), 0.0) for k in keys]
        ax.bar(x + (i - len(names) / 2) * w, ys, w, label=name)
    ax.set_xticks(x, [f"{k[0]} {k[1][3:]}/{k[2][5:]}" for k in keys], rotation=90, fontsize=6)
    ax.set_ylabel("ns per coordinate (best)")
    ax.legend(fontsize=7)

