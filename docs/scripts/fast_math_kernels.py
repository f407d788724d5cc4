"""K1-K5 over the plain sparsifier with default options, fast_math (n = 4) and fast_math with vector_width=16
(the conflict lane on AVX-512 CD hosts; docs/passes.md, "The conflict lane in the pass"): benchmark sizes,
5 % density, median of 5 interleaved repeats, thread CPU time, results checked against the plain sparsifier.

    python docs/scripts/fast_math_kernels.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench.paper_kernels import KERNELS  # noqa: E402

for name in ("K1", "K2", "K3", "K4", "K5"):
    spec = KERNELS[name]
    ops = spec.operands()
    fns = {"plain": splyce.jit(spec.fun, vectorize=False), "default": splyce.jit(spec.fun),
           "fast n4": splyce.jit(spec.fun, fast_math=True), "fast n16": splyce.jit(spec.fun, fast_math=True, vector_width=16)}
    ref = np.asarray(fns["plain"](*ops))
    for k, f in fns.items():
        np.testing.assert_allclose(np.asarray(f(*ops)), ref, rtol=1e-9, atol=1e-9)
    n16 = "conflict" in fns["fast n16"].lower(*ops).as_text("splyce")
    t = {k: [] for k in fns}; names = list(fns)
    for r in range(5):
        for k in names[r % 4:] + names[:r % 4]:
            t0 = time.thread_time(); fns[k](*ops); t[k].append(time.thread_time() - t0)
    med = {k: statistics.median(v) for k, v in t.items()}
    print(name, "conflict lane" if n16 else "no conflict lane", {k: round(med["plain"] / v, 2) for k, v in med.items()},
          {k: round(v, 4) for k, v in med.items()}, flush=True)
