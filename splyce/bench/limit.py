"""``limit``: the fast lane against the machine and the best SIMD peer, on one long fiber pair.

The sparse dot of two sorted fibers, ``einsum("i,i->", a, b)`` on SPARSE_VECTOR operands (one two-finger
loop: the fast lane and its scalar epilogue, or galloping for skewed lengths), for int32 / int64 coordinates,
f32 / f64 values, 1 / 10 / 50 % overlap (the share of the shorter fiber's coordinates that the other fiber
has too) and equal or 1:16 lengths. Candidates, on the same arrays:

* ``lane``: ``splyce.jit`` with the default options (IR checked: the loop is vectorized);
* ``lane fast_math``: the same with ``fast_math=True, vector_width=4`` (the all-pairs lane) (the sum
  reassociated, as NumKong's is: a vector accumulator in the lane, reduced once after it); ``lane`` is the
  strict, bit-exact sum; on AVX2 hosts without AVX-512, int32 / f64 rows: the permute lane
  (``passes/permute_lane.py``: C's values by an index and one ``vpermd``);
* ``lane fast_math n8``: ``fast_math=True, vector_width=8`` (the all-pairs lane of 8 x 8 coordinates);
* ``lane fast_math n16`` (int32 coordinates): ``fast_math=True, vector_width=16``, on AVX-512 CD hosts the
  conflict lane (``passes/conflict_lane.py``: 16 x 16 blocks, ``vpconflictd``, block advance);
* ``lane fast_math auto``: ``fast_math=True`` with the width left unset: the one measured on this CPU at first
  use (``runtime/lane_tuning.py``; ``SPLYCE_NO_TUNE=1``: the static rule, 16 on AVX-512 CD), which should
  be the best of the three above;
* ``lane gallop=0`` (skewed rows only): the all-pairs fast lane without galloping;
* ``plain``: the plain sparsifier (``vectorize=False``);
* ``numkong dot``: NumKong's ``sparse_dot`` (uint32 indices + float32 values only: int32 rows, the values
  as float32 copies made untimed in f64 rows);
* ``numkong intersect``: NumKong's ``intersect`` (the count of common coordinates; uint32 / uint64);
* ``step count`` / ``step dot`` (int32 coordinates, AVX-512 CD hosts): the best intersection step written
  for this CPU outside the pass (``bench/intersect_step.py``: 16 x 16 coordinates per step, ``vpconflictd``
  compares, branch-free block advance), count-only and sum-only (fast math, vector accumulators): what the
  hardware allows a lane, measured on the same arrays; ``step count broadcast`` / ``step dot broadcast``: 16
  compares against B's coordinates broadcast from memory instead (no ``vpconflictd``: the fastest steps on
  Intel Sapphire Rapids, where ``vpconflictd`` is slow), ``step dot broadcast8``: 16 of A x 8 of B per step;
* ``step dot rotate pivot`` / ``permute pivot`` / ``rotate block`` / ``permute block`` (int32 coordinates,
  AVX2 hosts without AVX-512 CD): ``bench/intersect_avx2.py``'s 4 x 4 xmm steps (B rotated by ``vpshufd``;
  the matched values selected per rotation or permuted by an index; the fast lane's advance or a block one);
* ``floor``: NumPy reading the same bytes (both fibers' coordinates and values: ``max`` over an int32 view
  of each buffer), the least time any candidate needs to read its inputs;
* ``floor crd``: the same over the coordinates only: what a lane that reads the values of matches alone
  (the plain sparsifier, NumKong's ``intersect``) cannot go below.

Times are per input coordinate (``len(a) + len(b)``); cycles use the clock measured at the start of the run
by a chain of dependent 3-cycle imuls; ``bw_share`` = floor time / candidate time. Splyce's times are whole
calls on sealed operands (no per-call validation), NumKong's whole Python calls. Times are the thread's CPU
time (``time.thread_time``: the machines here are shared, and a descheduled thread's wait is not the
kernel's cost); interleaved repeats with rotation, each candidate checked before it is timed.
"""

from __future__ import annotations

import ctypes
import gc
import math
import re
import statistics
import time
from pathlib import Path

import numpy as np

from splyce.bench.common import BenchMismatch, Config, Result, _calls_per_sample, _progress

OVERLAPS = (0.01, 0.10, 0.50)
SKEWS = (1, 16)
DTYPES = ((np.int32, np.float64), (np.int32, np.float32), (np.int64, np.float64), (np.int64, np.float32))
COLUMNS = ["crd", "val", "overlap", "lengths", "candidate", "ns_per_crd", "ns_per_crd_median", "cycles_per_crd",
           "bw_share", "vs_lane"]
STEP_DOTS = ("broadcast", "broadcast8")   # bench/intersect_step.py's dot steps beside the conflict one
# bench/intersect_avx2.py's steps (hosts without AVX-512 CD)
AVX2_STEPS = ("rotate pivot", "permute pivot", "rotate block", "permute block")
SPIN_OPS = 200      # dependent imuls per iteration of the clock calibration loop
IMUL_LATENCY = 3    # cycles of a 64-bit register imul on every x86 core since the Pentium Pro (Agner Fog's tables)


def fiber_pair(n: int, overlap: float, skew: int, itype, vtype, seed: int = 0):
    """(dim, b crd, b values, c crd, c values): sorted unique coordinates, ``len(b) = n``, ``len(c) = n //
    skew``, ``overlap`` of the shorter fiber's coordinates in both; the rest drawn from a universe 4x the
    total so that the two fibers interleave uniformly."""
    rng = np.random.default_rng(seed)
    nb, nc = n, max(1, n // skew)
    shared = int(round(overlap * min(nb, nc)))
    dim = 4 * (nb + nc)
    pool = rng.choice(dim, size=nb + nc - shared, replace=False)
    b = np.sort(np.concatenate([pool[:shared], pool[shared:nb]])).astype(itype)
    c = np.sort(np.concatenate([pool[:shared], pool[nb:]])).astype(itype)
    bv = rng.uniform(-1, 1, nb).astype(vtype)
    cv = rng.uniform(-1, 1, nc).astype(vtype)
    return dim, b, bv, c, cv


def clock_ghz() -> tuple[float, str]:
    """The core clock in GHz from a JIT-compiled chain of dependent 3-cycle ``imul``s (best of 5), and how it
    was obtained; /proc/cpuinfo's "cpu MHz" (a VM reports the nominal clock there) if that fails. Not ``add
    reg, imm``: Golden Cove (Sapphire Rapids) folds chains of those at rename, 22 GHz measured that way; no
    core eliminates a multiply."""
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()     # inline asm needs the parser (LLVM aborts without one)
        text = ('define void @spin(i64 %n) {\nentry:\n  br label %loop\nloop:\n'
                '  %i = phi i64 [0, %entry], [%j, %loop]\n'
                f'  call void asm sideeffect "{"imulq %rax, %rax; " * SPIN_OPS}", "~{{rax}}"()\n'
                '  %j = add i64 %i, 1\n  %c = icmp ult i64 %j, %n\n  br i1 %c, label %loop, label %done\n'
                'done:\n  ret void\n}\n')
        mod = llvm.parse_assembly(text)
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine())
        engine.finalize_object()
        spin = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address("spin"))
        spin(10_000)
        iters, best = 200_000, math.inf
        for _ in range(5):
            t0 = time.thread_time()
            spin(iters)
            best = min(best, time.thread_time() - t0)
        return SPIN_OPS * IMUL_LATENCY * iters / best / 1e9, \
            "calibrated: dependent 3-cycle imuls, thread CPU time, best of 5"
    except Exception:   # noqa: BLE001 - any failure: fall back to the reported clock
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1e3, "/proc/cpuinfo cpu MHz"
    return math.nan, "unknown"


def _sealed_vector(dim: int, crd: np.ndarray, values: np.ndarray):
    import splyce

    fmt = splyce.SPARSE_VECTOR.with_widths(crd.itemsize * 8, crd.itemsize * 8)
    pos = np.array([0, crd.size], dtype=crd.dtype)
    # copy(): splyce owns the buffers, so calls do not validate them again (the peers do not validate either)
    return splyce.SparseTensor.from_buffers((dim,), fmt, pos=(pos,), crd=(crd,), values=values).copy()


def _dot(x, y):
    import splyce

    return splyce.einsum("i,i->", x, y)


_JITS: dict = {}


def _jit(**options):
    import splyce

    key = tuple(sorted(options.items()))
    if key not in _JITS:
        _JITS[key] = splyce.jit(_dot, **options)
    return _JITS[key]


def lane_loop(asm: str) -> list[str] | None:
    """The fast lane's loop in ``lower(...).as_text("asm")``: the smallest region from a label to a jump back to
    it holding a vector compare (``vpcmp*``), directives and labels left out; None when there is none."""
    lines = [ln.strip() for ln in asm.splitlines()]
    best = None
    for i, ln in enumerate(lines):
        m = re.match(r"^(\.LBB\w+):", ln)
        if not m:
            continue
        for j in range(i + 1, len(lines)):
            if re.match(rf"^j\w+\s+{re.escape(m.group(1))}$", lines[j]):
                body = [x for x in lines[i + 1:j + 1] if x and not x.startswith((".", "#")) and not x.endswith(":")]
                if any(x.startswith("vpcmp") for x in body) and (best is None or len(body) < len(best)):
                    best = body
                break
    return best


def _candidates(dim, b, bv, c, cv, skew):
    """name -> (zero-argument callable, expected result, relative tolerance)."""
    A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
    common, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(np.dot(bv[ib].astype(np.float64), cv[ic].astype(np.float64)))
    tol = 1e-4 if bv.dtype == np.float32 else 1e-9
    lane = _jit()
    text = lane.lower(A, B).as_text("splyce")
    if "vectorized (K-accumulate" not in text:
        raise BenchMismatch(f"limit: the dot's loop has no fast lane: {text.splitlines()[0]}")
    out = {"lane": (lambda: lane(A, B), exact, tol)}
    fast = _jit(fast_math=True, vector_width=4)
    out["lane fast_math"] = (lambda: fast(A, B), exact, tol)
    fast8 = _jit(fast_math=True, vector_width=8)
    out["lane fast_math n8"] = (lambda: fast8(A, B), exact, tol)
    if b.dtype == np.int32:
        fast16 = _jit(fast_math=True, vector_width=16)
        out["lane fast_math n16"] = (lambda: fast16(A, B), exact, tol)
    auto = _jit(fast_math=True)
    out["lane fast_math auto"] = (lambda: auto(A, B), exact, tol)
    if skew > 1:
        nogallop = _jit(gallop=0)
        out["lane gallop=0"] = (lambda: nogallop(A, B), exact, tol)
    plain = _jit(vectorize=False)
    out["plain"] = (lambda: plain(A, B), exact, tol)
    try:
        import numkong as nk
    except ImportError:
        nk = None
    if nk is not None:
        if b.dtype == np.int32:
            ub, uc = b.view(np.uint32), c.view(np.uint32)
            fb, fc = bv.astype(np.float32), cv.astype(np.float32)
            out["numkong dot"] = (lambda: nk.sparse_dot(ub, fb, uc, fc), exact, 1e-3)
        ub, uc = (b.view(np.uint32), c.view(np.uint32)) if b.dtype == np.int32 else \
            (b.view(np.uint64), c.view(np.uint64))
        out["numkong intersect"] = (lambda: nk.intersect(ub, uc), float(common.size), 0.0)
    from splyce.bench import intersect_step

    if b.dtype == np.int32 and intersect_step.available():
        out["step count"] = (lambda: intersect_step.count(b, c), float(common.size), 0.0)
        out["step dot"] = (lambda: intersect_step.dot(b, bv, c, cv), exact, tol)
        out["step count broadcast"] = (lambda: intersect_step.count(b, c, "broadcast"), float(common.size), 0.0)
        for how in STEP_DOTS:
            out[f"step dot {how}"] = (lambda how=how: intersect_step.dot(b, bv, c, cv, how), exact, tol)
    from splyce.bench import intersect_avx2

    if b.dtype == np.int32 and not intersect_step.available() and intersect_avx2.available():
        for step in AVX2_STEPS:
            out[f"step dot {step}"] = (lambda step=step: intersect_avx2.dot(b, bv, c, cv, step), exact, tol)
    buffers = [x.view(np.int32) for x in (b, bv, c, cv)]
    floor_value = float(max(int(x.max()) for x in buffers))
    out["floor"] = (lambda: max(int(x.max()) for x in buffers), floor_value, 0.0)
    crds = buffers[0::2]
    out["floor crd"] = (lambda: max(int(x.max()) for x in crds), float(max(int(x.max()) for x in crds)), 0.0)
    return out


def _time_case(cands: dict, repeats: int) -> dict[str, list[float]]:
    calls, times = {}, {name: [] for name in cands}
    for name, (run, expected, tol) in cands.items():     # warm up (compiles) and check before any timing
        got = float(run())
        if not math.isclose(got, expected, rel_tol=tol, abs_tol=1e-9 * max(1.0, abs(expected))):
            raise BenchMismatch(f"limit {name}: got {got!r}, expected {expected!r}")
        calls[name] = _calls_per_sample(run)
    names = list(cands)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            run, n = cands[name][0], calls[name]
            gc.collect()
            t0 = time.thread_time()
            for _ in range(n):
                run()
            times[name].append((time.thread_time() - t0) / n)
    return times


def run(cfg: Config) -> Result:
    if cfg.tiny:
        n, cases = 4096, [(np.int32, np.float64, 0.10, 1), (np.int64, np.float32, 0.50, 16)]
    else:
        n = 1 << 18 if cfg.quick else 1 << 20
        cases = [(it, vt, ov, sk) for it, vt in DTYPES for sk in SKEWS for ov in OVERLAPS]
    repeats = cfg.repeats if cfg.repeats is not None else (2 if cfg.tiny else 5 if cfg.quick else 9)
    ghz, clock_how = clock_ghz()
    rows, summary = [], []
    bar = _progress(len(cases), "limit", cfg)
    try:
        for it, vt, ov, sk in cases:
            dim, b, bv, c, cv = fiber_pair(n, ov, sk, it, vt)
            cands = _candidates(dim, b, bv, c, cv, sk)
            times = _time_case(cands, repeats)
            coords = b.size + c.size
            best = {k: min(v) for k, v in times.items()}
            med = {k: statistics.median(v) for k, v in times.items()}
            head = {"crd": np.dtype(it).name, "val": np.dtype(vt).name, "overlap": f"{ov * 100:g} %",
                    "lengths": f"{b.size}:{c.size}"}
            for name in cands:
                rows.append({**head, "candidate": name, "ns_per_crd": best[name] / coords * 1e9,
                             "ns_per_crd_median": med[name] / coords * 1e9,
                             "cycles_per_crd": best[name] / coords * ghz * 1e9,
                             "bw_share": med["floor"] / med[name], "vs_lane": med[name] / med["lane"]})
            summary.append((head, {k: v / coords * 1e9 for k, v in best.items()},
                            {k: v / med["lane"] for k, v in med.items()}))
            bar.update(1)
    finally:
        bar.close()
    floor_bytes = sum(x.nbytes for x in (b, bv, c, cv))
    auto = _jit(fast_math=True).options
    auto_reason = f"n={auto.vector_width}: {auto.width_reason}"
    note = (f"ns_per_crd: best of {repeats} interleaved repeats per input coordinate (len(a) + len(b)), "
            f"_median the median; cycles_per_crd at {ghz:.2f} GHz ({clock_how}); bw_share = floor / candidate "
            f"(medians), floor = NumPy reading the same bytes (max over an int32 view of both fibers' "
            f"coordinates and values; the last case: {floor_bytes / 1e6:.1f} MB); vs_lane = candidate / lane "
            f"(medians, same run). NumKong's sparse_dot takes uint32 + float32 only: int32 rows, float32 copies "
            f"of f64 values; intersect returns the count; floor crd: the coordinates only. Splyce: whole calls, sealed "
            f"operands, default options (n = 4, phases 7; galloping from long >= (16 + 2 min(floor(log2 short), "
            f"12)) x short for short >= 8: the 1:16 rows run the fast lane, as gallop=0); lane fast_math: "
            f"fast_math=True (reassociated sum, as NumKong's), vector_width=4; n8 / n16: vector_width=8 / 16 (16: the "
            f"conflict lane on AVX-512 CD); auto: the width left unset ({auto_reason}). step count / step dot: "
            f"bench/intersect_step.py, bench-only (16 x 16 blocks, vpconflictd; int32 coordinates, AVX-512 CD); "
            f"step ... broadcast: 16 compares of A against B's coordinates broadcast, broadcast8: 16 x 8 blocks; "
            f"step dot rotate / permute (AVX2 hosts): bench/intersect_avx2.py's 4 x 4 steps.")
    return Result("limit", "Fiber-pair sparse dot: the fast lane vs the plain sparsifier, NumKong and the "
                  "bandwidth floor", COLUMNS, rows, note, plot=_plot, preface=_preface(summary),
                  comments=[f"clock: {ghz:.3f} GHz ({clock_how})"], repeats=repeats)


PREFACE_COLUMNS = ("lane", "lane fast_math", "lane fast_math n8", "lane fast_math n16", "lane fast_math auto", "plain",
                   "numkong dot", "numkong intersect", "step count", "step dot", "step count broadcast",
                   "step dot broadcast", "step dot broadcast8", *(f"step dot {s}" for s in AVX2_STEPS), "floor",
                   "floor crd")
RATIO_COLUMNS = ("lane", "lane fast_math", "lane fast_math n16", "step dot broadcast", "step dot broadcast8",
                 *(f"step dot {s}" for s in AVX2_STEPS))


def _preface(summary) -> str:
    """One line per case: best ns per coordinate of the main candidates and the ratios to the lane."""
    lines = ["| case | " + " | ".join(f"{c} ns" for c in PREFACE_COLUMNS) + " | plain / lane | " +
             " | ".join(f"{c} / numkong dot" for c in RATIO_COLUMNS) + " |",
             "|" + " --- |" * (len(PREFACE_COLUMNS) + len(RATIO_COLUMNS) + 2)]
    for head, ns, ratio in summary:
        case = f"{head['crd']} {head['val']} {head['overlap']} {head['lengths']}"
        cells = [f"{ns[c]:.3g}" if c in ns else "n/a" for c in PREFACE_COLUMNS]
        nk = ratio.get("numkong dot")
        vs = [f"{ratio[c] / nk:.2f}" if nk and c in ratio else "n/a"
              for c in RATIO_COLUMNS]
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {ratio['plain']:.2f} | " + " | ".join(vs) + " |")
    return "\n".join(lines) + "\n"


def _plot(rows, ax):
    cases = list(dict.fromkeys((r["crd"], r["val"], r["overlap"], r["lengths"]) for r in rows))
    x = np.arange(len(cases))
    w = 0.8 / len(PREFACE_COLUMNS)
    for i, name in enumerate(PREFACE_COLUMNS):
        ys = []
        for case in cases:
            hit = [r["ns_per_crd"] for r in rows if (r["crd"], r["val"], r["overlap"], r["lengths"]) == case
                   and r["candidate"] == name]
            ys.append(hit[0] if hit else 0.0)
        ax.bar(x + (i - len(PREFACE_COLUMNS) / 2) * w, ys, w, label=name)
    ax.set_xticks(x, [f"{c[0][3:]}/{c[1][5:]} {c[2]} {c[3].split(':')[1]}" for c in cases], rotation=90, fontsize=6)
    ax.set_ylabel("ns per coordinate (best)")
    ax.legend(fontsize=7)
