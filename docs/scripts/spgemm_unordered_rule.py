"""SpGEMM ``a @ a`` returned with ``out_format="sparse"`` (rows in any order) with the per-call kernel rule
(native/spgemm.py ``unordered_kernel``: "new") and without it ("old": always the unsorted kernel, the rule
replaced by one answering False, run twice as an A/A control), the jit with an explicit ``splyce.CSR``
("sorted"), the drop-in and scipy, per corpus matrix. One process, one thread, thread CPU time of each call,
the calls in a shuffled order each repeat; min and median of REPEATS. Also the rule's own cost (the look at
the operands alone, min of 5 x 2000 calls) and what it chose.
``python docs/scripts/spgemm_unordered_rule.py [--cache DIR] [names...]``."""

import sys
import time

import numpy as np

import splyce
from splyce.bench import corpus
from splyce.native import spgemm

REPEATS = 7
NAMES = ["rmat-s13", "fem3d-100k", "blockdiag-1500", "fem2d-250k", "ba-4k", "ba-100k", "road-100", "road-700",
         "banded-150k"]


def cpu(f):
    t = time.thread_time_ns()
    f()
    return time.thread_time_ns() - t


def rule_cost(A) -> float:
    """The rule alone on ``A @ A`` (us, min of 5 x 2000 calls; fewer for large products)."""
    prefix = spgemm.row_flops_prefix(A.indptr, A.indices, A.indptr)
    calls = 2000 if prefix[-1] < 10**7 else 50
    best = float("inf")
    for _ in range(5):
        t = time.thread_time_ns()
        for _ in range(calls):
            spgemm.unordered_kernel(A.indptr, A.indices, A.indptr, A.indices, A.shape[1], prefix)
        best = min(best, (time.thread_time_ns() - t) / calls / 1e3)
    return best


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
        width = splyce.CSR.with_widths(T.format.pos_width, T.format.crd_width)
        f = splyce.jit(lambda a: a @ a, out_format="sparse")
        g = splyce.jit(lambda a: a @ a, out_format=width)

        def with_rule(on):
            def call():
                spgemm.unordered_kernel = rule if on else off
                return f(T)
            return call

        calls = {"new": with_rule(True), "old": with_rule(False), "old2": with_rule(False), "sorted": lambda: g(T),
                 "dropin": lambda: splyce.matmul(A, A), "scipy": lambda: A @ A}
        for call in calls.values():
            call()
            call()
        ref = A @ A
        got = calls["new"]()
        came_sorted = got.has_sorted_indices
        got = got.copy()
        got.sort_indices()
        assert abs(got - ref).max() <= 1e-9 * max(1.0, abs(ref).max())
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
        print(f"{name} [{'sorted' if came_sorted else 'unsorted'} rows, rule {rule_cost(A):.1f} us]: ms min/median "
              + " ".join(f"{k} {low[k]:.4g}/{med[k]:.4g}" for k in calls)
              + f" | new vs old {med['old'] / med['new']:.2f}x (A/A {med['old2'] / med['old']:.2f}x), new vs drop-in "
              f"{med['dropin'] / med['new']:.2f}x, vs scipy {med['scipy'] / med['new']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
