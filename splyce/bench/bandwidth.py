"""This machine's single-core memory bandwidth, measured once per run, and the floor a kernel's memory traffic
puts under its time (``bench kernels``' bw_* columns, ``bench real``'s SpMV columns).

Three access patterns, each NumPy on one thread over a buffer of ``BANDWIDTH_BYTES`` (larger than any L3 here,
so the rates are the memory's), touched before it is timed, fastest of ``ROUNDS``:

* read: a sum (every line read once);
* write: zeros stored over the whole buffer, the faster of NumPy's ``a[...] = 0`` and libc's ``memset``
  (every line written once: how a dense output is zeroed; ``np.zeros`` from splyce's memory pool is a
  ``memset``, which on the Zen 4 VM stores zeros at 38-78 GB/s, ``a[...] = 0`` or a nonzero byte at 13-30);
* update: ``np.add(a, 1.0, out=a)`` (every line read and written back: ``out += x``).

Each rate is bytes of the buffer per second, not bus traffic: an update moves its bytes twice and is
counted once. A kernel's floor (:func:`floor_seconds`) is the time its model's read, written and updated
bytes take at these rates, one after the other; ``floor / time`` is the share of the bandwidth it reaches.
Buffers that fit in a cache move faster than these rates, so small sizes can exceed 1.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import numpy as np

BANDWIDTH_BYTES = 200 << 20
TINY_BYTES = 8 << 20     # the test-suite's seconds-long runs: in cache, only the plumbing is checked
ROUNDS = 5
LINE = 64                # bytes of a cache line on every x86 and Arm core the project runs on

_RATES: dict[tuple[str, int], float] = {}


def _best(f, rounds: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _ways(kind: str, a: np.ndarray) -> list:
    """The NumPy / libc calls that make ``kind``'s access pattern over ``a``; the fastest one counts."""
    if kind == "read":
        return [a.sum]
    if kind == "write":
        def assign():
            a[...] = 0
        return [assign, lambda: ctypes.memset(a.ctypes.data, 0, a.nbytes)]
    if kind == "update":
        return [lambda: np.add(a, 1.0, out=a)]
    raise ValueError(f"bandwidth kind must be 'read', 'write' or 'update', got {kind!r}")


def rate(kind: str, nbytes: int = BANDWIDTH_BYTES) -> float:
    """Bytes per second of ``kind`` ('read', 'write' or 'update') over a touched buffer of ``nbytes``,
    measured on the first call and remembered for the process."""
    key = (kind, nbytes)
    if key not in _RATES:
        a = np.ones(nbytes // 8)
        _RATES[key] = a.nbytes / min(_best(f) for f in _ways(kind, a))
    return _RATES[key]


def read_bandwidth() -> float:
    """Single-core read bandwidth (bytes/s): the fastest of 5 NumPy sums of 200 MB."""
    return rate("read")


@dataclass(frozen=True)
class Traffic:
    """The bytes a kernel must move at minimum: read once, written once (no read needed), read and written
    back (updated in place)."""
    read: int = 0
    written: int = 0
    updated: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written + self.updated


def floor_seconds(traffic: Traffic, nbytes: int = BANDWIDTH_BYTES) -> float:
    """The time ``traffic`` takes at this machine's rates (measured over buffers of ``nbytes``)."""
    seconds = 0.0
    for kind, moved in (("read", traffic.read), ("write", traffic.written), ("update", traffic.updated)):
        if moved:
            seconds += moved / rate(kind, nbytes)
    return seconds


def lines_holding(flat_indices: np.ndarray, itemsize: int, offset: int = 0) -> int:
    """How many cache lines the elements at ``flat_indices`` (sorted or not) of an array whose data starts
    ``offset`` bytes into a line occupy."""
    if not len(flat_indices):
        return 0
    first = (offset + np.asarray(flat_indices, dtype=np.int64) * itemsize) // LINE
    last = (offset + np.asarray(flat_indices, dtype=np.int64) * itemsize + itemsize - 1) // LINE
    lines = np.unique(np.concatenate([first, last]))
    return int(lines.size)


def rates_line(nbytes: int = BANDWIDTH_BYTES) -> str:
    """The three rates, for a result's note."""
    return (f"read {rate('read', nbytes) / 1e9:.1f}, write {rate('write', nbytes) / 1e9:.1f}, update "
            f"{rate('update', nbytes) / 1e9:.1f} GB/s (one thread, {nbytes >> 20} MB, fastest of {ROUNDS})")


if __name__ == "__main__":
    print(rates_line())
