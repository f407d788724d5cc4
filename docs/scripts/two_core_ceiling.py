"""What a second thread can gain on this machine: docs/threads.md's ceiling table.

Run on a quiet machine: ``python docs/scripts/two_core_ceiling.py``. Each line: one thread's median time and
the ratio one thread / two threads (each thread half of the work; numpy and hashlib release the GIL, the
second half runs on a pool thread), median of 11 interleaved rounds.
"""

import hashlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

POOL = ThreadPoolExecutor(1)
BIG = np.random.default_rng(0).standard_normal(25_000_000)          # 200 MB
DST = np.empty_like(BIG)
DST.fill(0.0)
BLOCK = np.random.default_rng(1).bytes(64 * 1024)
IDX = np.random.default_rng(2).integers(0, BIG.size, 10_000_000)


def compute(lo, hi):                     # in L2: scales with cores
    for _ in range(lo, hi):
        hashlib.sha256(BLOCK).digest()


def read(lo, hi):
    BIG[lo:hi].sum()


def copy(lo, hi):
    np.copyto(DST[lo:hi], BIG[lo:hi])


def first_touch(lo, hi):                 # fresh pages: page faults
    np.empty(hi - lo).fill(1.0)


def gather(lo, hi):
    BIG[IDX[lo:hi]].sum()


CASES = {"compute: sha256 of 64 KB, 1200 times": (compute, 1200),
         "read: sum of 200 MB float64": (read, BIG.size),
         "copy 200 MB into touched memory": (copy, BIG.size),
         "first touch: np.empty + fill of 100 MB": (first_touch, 12_500_000),
         "random gather: 10 M float64 of 200 MB": (gather, IDX.size)}


def one(fn, n):
    t0 = time.perf_counter()
    fn(0, n)
    return time.perf_counter() - t0


def two(fn, n):
    t0 = time.perf_counter()
    other = POOL.submit(fn, n // 2, n)
    fn(0, n // 2)
    other.result()
    return time.perf_counter() - t0


if __name__ == "__main__":
    for name, (fn, n) in CASES.items():
        t1, t2 = [], []
        for _ in range(11):
            t1.append(one(fn, n))
            t2.append(two(fn, n))
        m1, m2 = statistics.median(t1), statistics.median(t2)
        print(f"{name:45s} one thread {m1 * 1e3:7.1f} ms   two / one {m1 / m2:.2f}")
