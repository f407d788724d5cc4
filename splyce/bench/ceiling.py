"""What this machine gives a second core, and what fresh memory costs, measured within a benchmark run.

The two-thread goals (docs/threads.md) and the Dask worker goals compare one core with two; on the shared
2-vCPU VMs these run on, what a second core adds to memory traffic changes from machine to machine and from
hour to hour (read 1.07x on one VM, 1.8x on another; copy 0.99-1.96x), and memory freed for a few seconds is
handed back to the host, which then backs it again on the next touch at a fraction of the usual speed. A
two-thread ratio means little without the ceiling measured in the same run, so ``bench real`` records these
probes with its table. ``python -m splyce.bench.ceiling`` prints them alone.

Each probe: one thread's median time and the ratio one thread / two threads (each thread half of the work;
NumPy and hashlib release the GIL, the second half runs on a pool thread), median of interleaved rounds.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Seconds of idle after a free before the re-fault probe touches memory again: the VMs here report freed
# 2 MB blocks to their host within ~1-2 s (virtio-balloon free page reporting), 3 s was always enough.
PAUSE_S = 3.0


def _cases(mb: int) -> dict:
    """name -> (fn(lo, hi), n): the probes, on buffers of ``mb`` MB (200 in a real run)."""
    big = np.random.default_rng(0).standard_normal((mb << 20) // 8)
    dst = np.empty_like(big)
    dst.fill(0.0)
    block = np.random.default_rng(1).bytes(64 * 1024)
    idx = np.random.default_rng(2).integers(0, big.size, big.size * 2 // 5)

    def compute(lo, hi):            # in L2: scales with cores
        for _ in range(lo, hi):
            hashlib.sha256(block).digest()

    def read(lo, hi):
        big[lo:hi].sum()

    def copy(lo, hi):
        np.copyto(dst[lo:hi], big[lo:hi])

    def first_touch(lo, hi):        # fresh pages: page faults
        np.empty(hi - lo).fill(1.0)

    def gather(lo, hi):
        big[idx[lo:hi]].sum()

    return {f"compute: sha256 of 64 KB, {6 * mb} times": (compute, 6 * mb),
            f"read: sum of {mb} MB float64": (read, big.size),
            f"copy {mb} MB into touched memory": (copy, big.size),
            f"first touch: np.empty + fill of {mb // 2} MB": (first_touch, big.size // 2),
            f"random gather: {idx.size / 1e6:.1f} M float64 of {mb} MB": (gather, idx.size)}


def two_core_ceiling(mb: int = 200, rounds: int = 11) -> list[dict]:
    """Per probe: ``what``, ``one_s`` (one thread's median) and ``two_over_one`` (one thread's median time /
    two threads')."""
    pool = ThreadPoolExecutor(1)
    try:
        out = []
        for name, (fn, n) in _cases(mb).items():
            t1, t2 = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                fn(0, n)
                t1.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                other = pool.submit(fn, n // 2, n)
                fn(0, n // 2)
                other.result()
                t2.append(time.perf_counter() - t0)
            m1, m2 = statistics.median(t1), statistics.median(t2)
            out.append({"what": name, "one_s": m1, "two_over_one": m1 / m2})
        return out
    finally:
        pool.shutdown()


def refault(mb: int = 256, rounds: int = 3, pause_s: float = PAUSE_S) -> dict:
    """First-touch speed (GB/s, median) of ``mb`` MB allocated right after the same amount was freed, and
    after ``pause_s`` seconds of idle following the free (what an op's fresh result meets when other work
    ran in between)."""
    def touch() -> float:
        t0 = time.perf_counter()
        a = np.empty((mb << 20) // 8)
        a.fill(1.0)
        seconds = time.perf_counter() - t0
        del a
        return (mb << 20) / seconds / 1e9

    touch()
    at_once, paused = [], []
    for _ in range(rounds):
        at_once.append(touch())
        time.sleep(pause_s)
        paused.append(touch())
    return {"mb": mb, "pause_s": pause_s, "at_once_gbs": statistics.median(at_once),
            "after_pause_gbs": statistics.median(paused)}


def measure(tiny: bool = False) -> dict:
    """Both, at a real run's sizes, or in a fraction of a second for the tests (``tiny``)."""
    if tiny:
        return {"ceiling": two_core_ceiling(mb=8, rounds=3), "refault": refault(mb=16, rounds=1, pause_s=0.05)}
    return {"ceiling": two_core_ceiling(), "refault": refault()}


def lines(measured: dict) -> list[str]:
    """One line per probe, for a CSV's comment header and for printing."""
    out = [f"two cores: {c['what']}: one thread {c['one_s'] * 1e3:.1f} ms, two / one {c['two_over_one']:.2f}"
           for c in measured["ceiling"]]
    r = measured["refault"]
    out.append(f"fresh memory: first touch of {r['mb']} MB right after a free {r['at_once_gbs']:.1f} GB/s, "
               f"after {r['pause_s']:g} s idle {r['after_pause_gbs']:.1f} GB/s")
    return out


def markdown(measured: dict) -> str:
    """The probes as a small table, for a result's Markdown."""
    rows = ["| what | one thread | two threads / one |", "| --- | --- | --- |"]
    rows += [f"| {c['what']} | {c['one_s'] * 1e3:.1f} ms | {c['two_over_one']:.2f} |" for c in measured["ceiling"]]
    r = measured["refault"]
    return ("\n".join(rows) + f"\n\nFresh memory: {r['mb']} MB first touched right after a free "
            f"{r['at_once_gbs']:.1f} GB/s, after {r['pause_s']:g} s idle {r['after_pause_gbs']:.1f} GB/s "
            "(a VM that hands freed memory back to its host backs it again on the next touch).\n")


if __name__ == "__main__":
    print("\n".join(lines(measure())))
