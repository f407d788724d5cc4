"""Rows of a masked product split into chunks of about equal work, for the threads: mask entries plus the
products (``len(B[k])`` for each ``A[i, k]``), which differ by orders of magnitude between rows of power-law
matrices. Any split gives the same result; this is balance only."""

from __future__ import annotations

import numpy as np

from splyce.native import ir_text

SAMPLE_ROWS = 2048      # rows whose products are counted to balance masked SpGEMM's chunks
# chunks per thread, each thread taking the next one left: rows of equal counted work still differ in cost
# (cache misses on far rows: ba-100k's two halves took 2.7 and 5.0 ms CPU)
CHUNKS_PER_THREAD = 4


def serial_max_work() -> int:
    """Masked work (mask entries plus products) below which ``threads`` > 1 still runs one chunk on the
    calling thread, where handing chunks to a thread and the chunking itself cost more than they save:
    2^20 items, 0.4-0.7 ms of one thread on Zen 4/5 (0.4-0.6 ns per item; on Zen 1 ba-4k and fem2d-3k were
    2.5-3x slower on two threads). At 8 * MIN_CHUNK (2^18, set on Zen 1) pyamg-ldg-diffusion's 0.31M items
    (0.18 ms on one thread) went to 8 chunks on two threads: 0.53 ms."""
    return 32 * ir_text.MIN_CHUNK


def small_masked_work(mask_entries: int, ac, bp, min_work: int) -> bool:
    """Whether masked work (``mask_entries`` plus the products: ``len(B[k])`` for each column ``k`` in
    ``ac``) is surely below ``min_work``, for a small A only: bounded by B's longest row (a max over B's row
    starts, no gather), else counted exactly. ``ac``'s values must lie in ``[0, len(bp) - 1)``; ``bp`` need
    not be checked (a bad one only misjudges the size)."""
    if len(ac) * 8 > min_work:
        return False
    lengths = np.diff(bp)
    if len(ac) * max(int(lengths.max(initial=0)), 8) + mask_entries < min_work:
        return True
    return int(np.bincount(ac, minlength=len(lengths)) @ lengths) + mask_entries < min_work


def masked_chunks(mp, ap, ac, bp, threads: int, min_work: int = 0) -> list[tuple[int, int]]:
    """Row chunks of masked SpGEMM with about equal work: mask entries plus products (``len(B[k])`` for each
    ``A[i, k]``). Rows of power-law matrices differ by orders of magnitude in products, so balancing the mask's
    entries alone leaves one thread with most of the work. Products are counted exactly on up to
    ``SAMPLE_ROWS`` evenly spaced rows (all rows of smaller matrices), each standing for the rows up to the
    next: a pass over a small part of A, not all of it. Balance only: any split gives the same result. One
    chunk when that estimate of the work is below ``min_work``."""
    m = len(mp) - 1
    if threads <= 1 or m < 2:
        return [(0, max(m, 0))]
    if small_masked_work(int(mp[-1]), ac, bp, min_work):
        return [(0, m)]             # cheaper than sampling rows
    stride = max(1, m // SAMPLE_ROWS)
    rows = np.arange(0, m, stride)
    starts, lengths = ap[rows].astype(np.int64), (ap[rows + 1] - ap[rows]).astype(np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    entries = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    ks = ac[entries]
    cumulative = np.zeros(len(entries) + 1, dtype=np.int64)
    np.cumsum(bp[ks + 1] - bp[ks], out=cumulative[1:])
    block_products = (cumulative[offsets[1:]] - cumulative[offsets[:-1]]) * np.diff(np.append(rows, m))
    at = np.append(rows, m)                                  # block k: rows [at[k], at[k + 1])
    work = np.zeros(len(at), dtype=np.int64)
    np.cumsum(block_products, out=work[1:])
    work += mp[at]
    if work[-1] < min_work:
        return [(0, m)]
    inner = at[np.searchsorted(work, work[-1] * np.arange(1, threads) / threads, side="left")].tolist()
    bounds = sorted(set([0, *inner, m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
