"""SpGEMM ``a @ a`` with a sparse result: the jit with rows unordered (``out_format="sparse"``, today's default
for a product's result), the jit with sorted rows (an explicit ``splyce.CSR``: the kernels the jit ran before),
the drop-in and scipy, per corpus matrix. One process, one thread, thread CPU time of each call, the four
interleaved per repeat; min and median of REPEATS. ``python docs/scripts/spgemm_unordered.py [names...]``."""

import sys
import time

import numpy as np

import splyce
from splyce.bench import corpus

REPEATS = 7
NAMES = sys.argv[1:] or ["ba-4k", "ba-100k", "road-100", "road-700", "fem2d-250k", "rmat-s13"]


def cpu(f):
    t = time.thread_time_ns()
    f()
    return (time.thread_time_ns() - t) / 1e9


def main():
    entries = {e.name: e for e in corpus.entries()}
    print("matrix,jit_unordered_ms(min/med),jit_sorted_ms(min/med),dropin_ms(min/med),scipy_ms(min/med),"
          "dropin/jit_unordered,dropin/jit_sorted")
    for name in NAMES:
        A = entries[name].build()
        T = splyce.asarray(A)
        width = splyce.CSR.with_widths(T.format.pos_width, T.format.crd_width)
        unordered = splyce.jit(lambda a: a @ a, out_format="sparse")
        ordered = splyce.jit(lambda a: a @ a, out_format=width)
        calls = {"jit_unordered": lambda: unordered(T), "jit_sorted": lambda: ordered(T),
                 "dropin": lambda: splyce.matmul(A, A), "scipy": lambda: A @ A}
        ref = (A @ A)
        for label, f in calls.items():          # warm up (compile, caches) and check the entries
            got = f()
            if label.startswith("jit"):
                got = got.copy()
                got.sort_indices()
                assert abs(got - ref).max() <= 1e-9 * max(1.0, abs(ref).max()) if ref.nnz else True, label
        times = {k: [] for k in calls}
        for _ in range(REPEATS):
            for label, f in calls.items():
                times[label].append(cpu(f))
        stat = {k: (min(v) * 1e3, float(np.median(v)) * 1e3) for k, v in times.items()}
        cells = [f"{stat[k][0]:.3g}/{stat[k][1]:.3g}" for k in calls]
        print(f"{name}," + ",".join(cells) + f",{stat['dropin'][1] / stat['jit_unordered'][1]:.2f}x"
              f",{stat['dropin'][1] / stat['jit_sorted'][1]:.2f}x", flush=True)


if __name__ == "__main__":
    main()
