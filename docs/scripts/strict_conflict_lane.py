"""The strict conflict lane for skewed pairs (passes/strict_conflict_lane.py) against the pass without it, interleaved
in one process (docs/passes.md, "A strict conflict lane for skewed pairs"). Strict (default) options throughout.

``pairs``: ``bench limit``'s fiber pairs (int32 coordinates, f32 / f64 values, 2^20 : 2^20 / SKEW, 1 / 10 / 50 %
overlap, and 100 %) for SKEW in 1, 2, 4, 6, 8, 16: ``main`` (the strict conflict lane off: the all-pairs n = 4 lane, as before),
``main2`` (main compiled again, the control), ``new`` (every pair starts in the lane, leaving it for the all-pairs
lane when its matches come densely, pairs of ratio >= SKEW_RATIO never) and ``always`` (SKEW_RATIO = 1: no pair
leaves the lane);
``moderate``: pairs at the length ratio's threshold with short fibers (32-200 coordinates), many pairs in one call:
K2's SpMSpV (``einsum("ik,k->i")``) on a CSR matrix whose rows hold SHORT coordinates each against a compressed
vector of LONG (LONG : SHORT = 200 : 32, 256 : 32, 384 : 64, 512 : 64, 1200 : 200, 1600 : 200), uniform in a
dimension of 2 x and 16 x LONG, ~2 M coordinates a call; ``main`` vs ``new``, ns per row-and-vector coordinate;
``kernels``: K1-K5 at benchmark sizes (``quick``: quick sizes; ``STRICT_KERNELS=K1,K3``: some), ``main`` vs
``new``, with ``main2`` (main compiled again) as the old-vs-old control. Thread CPU time, best /
median of REPEATS interleaved samples (default 9), rotating order; every result first checked bit-identical to
the plain sparsifier (``vectorize=False``). Disk cache off, so each variant compiles its own code.

    python docs/scripts/strict_conflict_lane.py pairs|moderate|kernels [REPEATS] [quick]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
os.environ["SPLYCE_NO_TUNE"] = "1"
import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
import splyce.passes.splyce_pass as sp  # noqa: E402
import splyce.passes.strict_conflict_lane as scl  # noqa: E402
from splyce.bench import limit  # noqa: E402
from splyce.bench.paper_kernels import KERNELS, spmspv  # noqa: E402
from splyce.tensors.formats import CSR, SPARSE_VECTOR  # noqa: E402
from splyce.tensors.tensor import asarray  # noqa: E402

WHAT = sys.argv[1] if len(sys.argv) > 1 else "pairs"
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 9
QUICK = len(sys.argv) > 3 and sys.argv[3] == "quick"
RATIO = scl.SKEW_RATIO


def compiled(fun, ops, variant):
    """``splyce.jit(fun)`` lowered (and so compiled) with the strict conflict lane as ``variant`` says."""
    real = sp.strict_conflict_blocker
    try:
        if variant.startswith("main"):
            sp.strict_conflict_blocker = lambda *a: "off (main)"
        scl.SKEW_RATIO = 1 if variant == "always" else RATIO
        j = splyce.jit(fun)
        text = j.lower(*ops).as_text("splyce")
    finally:
        sp.strict_conflict_blocker, scl.SKEW_RATIO = real, RATIO
    assert ("first a strict lane" in text) == (not variant.startswith("main")), (variant, text.splitlines()[:3])
    return j


def same_bits(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def timed(cands, calls, per):
    names, t = list(cands), {k: [] for k in cands}
    for r in range(REPEATS):
        for k in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            t0 = time.thread_time_ns()
            for _ in range(calls):
                cands[k]()
            t[k].append((time.thread_time_ns() - t0) / calls / per)
    return t


if WHAT == "pairs":
    n = 1 << (18 if QUICK else 20)
    for vt in (np.float32, np.float64):
        for skew in (1, 2, 4, 6, 8, 16):
            for ov in (0.01, 0.10, 0.50, 1.0):
                dim, b, bv, c, cv = limit.fiber_pair(n, ov, skew, np.int32, vt)
                A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
                ref = splyce.jit(limit._dot, vectorize=False)(A, B)
                cands = {}
                for variant in ("main", "main2", "new", "always"):
                    j = compiled(limit._dot, (A, B), variant)
                    assert same_bits(j(A, B), ref), (variant, j(A, B), ref)
                    cands[variant] = lambda j=j: j(A, B)
                t = timed(cands, 3, b.size + c.size)
                print(f"int32 / {np.dtype(vt).name} {ov * 100:g} % 1:{skew}: " + "  ".join(
                    f"{k} {min(v):.3f} / {statistics.median(v):.3f}" for k, v in t.items())
                    + "  new/main, main2/main best {:.3f}, {:.3f} median {:.3f}, {:.3f}".format(
                        *(min(t[k]) / min(t["main"]) for k in ("new", "main2")),
                        *(statistics.median(t[k]) / statistics.median(t["main"]) for k in ("new", "main2")))
                    + " ns per coordinate", flush=True)
elif WHAT == "moderate":
    rng = np.random.default_rng(0)
    for vt in (np.float32, np.float64):
        for long, short in ((200, 32), (256, 32), (384, 64), (512, 64), (1200, 200), (1600, 200)):
            for spread in (2, 16):
                dim, rows = spread * long, (1 << (19 if QUICK else 21)) // (long + short)
                crd = np.sort(np.argsort(rng.random((rows, dim)), axis=1)[:, :short], axis=1) if dim * rows < 5e7 \
                    else np.sort(np.stack([rng.choice(dim, short, replace=False) for _ in range(rows)]), axis=1)
                dense = np.zeros((rows, dim), vt)
                np.put_along_axis(dense, crd, rng.uniform(0.5, 1, (rows, short)).astype(vt), axis=1)
                vec = np.zeros(dim, vt)
                vec[rng.choice(dim, long, replace=False)] = rng.uniform(0.5, 1, long).astype(vt)
                B, c = (asarray(x, format=f.with_widths(32, 32)) for x, f in ((dense, CSR), (vec, SPARSE_VECTOR)))
                ref = splyce.jit(spmspv, vectorize=False)(B, c)
                cands = {}
                for variant in ("main", "new"):
                    j = compiled(spmspv, (B, c), variant)
                    assert same_bits(j(B, c), ref), variant
                    cands[variant] = lambda j=j: j(B, c)
                t = timed(cands, 3, rows * (long + short))
                print(f"{np.dtype(vt).name} {long}:{short} dim {spread}x ({rows} rows): " + "  ".join(
                    f"{k} {min(v):.3f} / {statistics.median(v):.3f}" for k, v in t.items())
                    + f"  new/main best {min(t['new']) / min(t['main']):.3f} median "
                    + f"{statistics.median(t['new']) / statistics.median(t['main']):.3f} ns per coordinate", flush=True)
else:
    for name in os.environ.get("STRICT_KERNELS", "K1,K2,K3,K4,K5").split(","):
        spec = KERNELS[name]
        ops = spec.operands(spec.quick_size if QUICK else None)
        ref = splyce.jit(spec.fun, vectorize=False)(*ops)
        variants = ("main", "main2", "new") if name != "K4" else ()
        cands = {}
        for variant in variants:
            j = compiled(spec.fun, ops, variant)
            assert same_bits(j(*ops), ref), (name, variant)
            cands[variant] = lambda j=j: j(*ops)
        if not cands:   # K4 stores: no strict conflict lane, the same code
            print(name, "no strict conflict lane (stores)", flush=True)
            continue
        t = timed(cands, 1, 1e6)
        med = {k: statistics.median(v) for k, v in t.items()}
        print(name, "  ".join(f"{k} {min(v):.4g} / {med[k]:.4g} ms" for k, v in t.items()),
              f" new/main {med['new'] / med['main']:.3f} (best / median)", flush=True)
