"""The drop-in's SpGEMM ``splyce.matmul(A, A)`` on a scipy CSR operand with the per-call kernel rule
(native/spgemm.py ``unordered_kernel``, zero sums dropped by the flags kernel: "new") and without it ("old":
the rule replaced by one answering False, the unsorted kernel always, as before; run twice as an A/A
control), the jit's ``out_format="sparse"`` product (the rule, every position kept) and scipy, per corpus
matrix. One process, one thread, thread CPU time of each call, the calls in a shuffled order each repeat; min
and median of REPEATS. ``python docs/scripts/spgemm_dropin_flags.py [--cache DIR] [names...]``."""

import sys
import time

import numpy as np

import splyce
from splyce.bench import corpus
from splyce.dropin import products
from splyce.native import spgemm

REPEATS = 7
NAMES = ["rmat-s13", "fem3d-100k", "blockdiag-1500", "fem2d-250k", "ba-100k", "road-700"]


def cpu(f):
    t = time.thread_time_ns()
    f()
    return time.thread_time_ns() - t


def main():
    args = sys.argv[1:]
    cache = None
    if args[:1] == ["--cache"]:
        cache, args = args[1], args[2:]
    entries = {e.name: e for e in corpus.entries()}
    rule, off = spgemm.unordered_kernel, (lambda *a: False)
    for name in args or NAMES:
        A = entries[name].build(cache)
        T = splyce.asarray(A)
        f = splyce.jit(lambda a: a @ a, out_format="sparse")

        def dropin(on):
            def call():
                spgemm.unordered_kernel = rule if on else off
                return splyce.matmul(A, A, threads=1)
            return call

        def jit():
            spgemm.unordered_kernel = rule
            return f(T)

        calls = {"new": dropin(True), "old": dropin(False), "old2": dropin(False), "jit": jit, "scipy": lambda: A @ A}
        for call in calls.values():
            call()
            call()
        ref = A @ A
        got = calls["new"]()
        kernel = products.last_spgemm_kernel
        old = calls["old"]().copy()
        old.sort_indices()
        same = got.copy()
        same.sort_indices()
        assert np.array_equal(same.indptr, old.indptr) and np.array_equal(same.indices, old.indices)
        assert np.array_equal(same.data.view(np.uint64), old.data.view(np.uint64))      # bit for bit
        assert abs(same - ref).max() <= 1e-9 * max(1.0, abs(ref).max())
        times = {k: [] for k in calls}
        rng = np.random.default_rng(0)
        for _ in range(REPEATS):
            order = list(calls.items())
            rng.shuffle(order)
            for label, call in order:
                times[label].append(cpu(call))
        spgemm.unordered_kernel = rule
        med = {k: float(np.median(v)) / 1e6 for k, v in times.items()}
        low = {k: min(v) / 1e6 for k, v in times.items()}
        print(f"{name} [{kernel}, sorted {got.has_sorted_indices}]: ms min/median "
              + " ".join(f"{k} {low[k]:.4g}/{med[k]:.4g}" for k in calls)
              + f" | new vs old {med['old'] / med['new']:.2f}x (A/A {med['old2'] / med['old']:.2f}x), "
              f"vs scipy {med['scipy'] / med['new']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
