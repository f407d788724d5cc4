"""Galloping's crossover length ratio against the short fiber's length (docs/passes.md, "Threshold").

Row dot ``einsum("ij,ij->i", B, C)`` (CSR, int32 indices, f64): every row of B has S coordinates, the same row
of C S x r, 10 % of B's also in C, rows enough for ~2M coordinates per call (one row at the largest sizes).
Per (S, r), in one process, interleaved: ``forced`` galloping (``gallop=2`` compiled with
``gallop_lane.LOG_SLOPE = 0``: every pair of ratio >= 2 gallops), ``lane`` (``gallop=0``: the all-pairs fast
lane) and ``default`` (the default rule, ``gallop_lane.skew_threshold``).
Whole calls, thread CPU time, median of REPEATS; printed: forced / lane and default / lane time ratios (< 1:
faster than the lane) and the rule's choice. The disk cache is off (the forced kernels differ from what the
sources build).

    python docs/scripts/gallop_crossover.py [S,S,...] [r,r,...]
"""
import os
import statistics
import sys
import time

os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import numpy as np  # noqa: E402
import scipy.sparse as sps  # noqa: E402

import splyce  # noqa: E402
from splyce.options import DEFAULT_GALLOP_RATIO  # noqa: E402
from splyce.passes import gallop_lane  # noqa: E402

SHORTS = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 2, 4, 8, 64, 512, 4096, 65536]
RATIOS = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [8, 12, 16, 20, 24, 32, 48, 64, 96, 128]
TOTAL, REPEATS, OVERLAP = 1 << 21, 9, 0.10


def pair(short: int, ratio: int, rng):
    rows = max(1, round(TOTAL / (short * (ratio + 1))))
    cols = 4 * short * (ratio + 1)
    shared = int(round(OVERLAP * short))
    b_idx, c_idx = [], []
    for _ in range(rows):
        pool = rng.choice(cols, short * (ratio + 1) - shared, replace=False)
        b_idx.append(np.sort(pool[:short]))
        c_idx.append(np.sort(np.concatenate([pool[:shared], pool[short:]])))
    out = []
    for idx, k in ((b_idx, short), (c_idx, short * ratio)):
        ptr = np.arange(rows + 1, dtype=np.int64) * k
        flat = np.concatenate(idx).astype(np.int32)
        m = sps.csr_array((rng.uniform(-1, 1, flat.size), flat, ptr.astype(np.int32)), shape=(rows, cols))
        out.append(splyce.asarray(m))
    return out


def row_dot(b, c):
    return splyce.einsum("ij,ij->i", b, c)


def compiled(ops, gallop: int, slope: int):
    saved, gallop_lane.LOG_SLOPE = gallop_lane.LOG_SLOPE, slope
    try:
        f = splyce.jit(row_dot, gallop=gallop)
        f(*ops)    # compiles now, with this slope
        assert any("galloping" in d.reason or "no galloping" in d.reason for d in f.lower(*ops).decisions)
    finally:
        gallop_lane.LOG_SLOPE = saved
    return f


def main():
    rng = np.random.default_rng(0)
    print(f"| S \\ r | " + " | ".join(str(r) for r in RATIOS) + " |")
    print("|---:|" + "---:|" * len(RATIOS))
    for short in SHORTS:
        cells = []
        for ratio in RATIOS:
            ops = pair(short, ratio, rng)
            cands = {"forced": compiled(ops, 2, 0), "lane": compiled(ops, 0, gallop_lane.LOG_SLOPE),
                     "default": compiled(ops, DEFAULT_GALLOP_RATIO, gallop_lane.LOG_SLOPE)}
            want = cands["lane"](*ops)
            for name, f in cands.items():
                got = f(*ops)
                assert np.array_equal(np.asarray(got).view(np.uint64), np.asarray(want).view(np.uint64)), name
            times = {k: [] for k in cands}
            names = list(cands)
            for rep in range(REPEATS):
                for name in names[rep % 3:] + names[:rep % 3]:
                    t0 = time.thread_time()
                    cands[name](*ops)
                    times[name].append(time.thread_time() - t0)
            med = {k: statistics.median(v) for k, v in times.items()}
            rule = "G" if short * ratio >= gallop_lane.skew_threshold(DEFAULT_GALLOP_RATIO, short) else "L"
            cells.append(f"{med['forced'] / med['lane']:.2f} / {med['default'] / med['lane']:.2f} {rule}")
            print(f"  S={short} r={ratio}: lane {med['lane'] * 1e3:.2f} ms, forced {med['forced'] * 1e3:.2f} ms, "
                  f"default {med['default'] * 1e3:.2f} ms ({rule})", file=sys.stderr, flush=True)
        print(f"| {short} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
