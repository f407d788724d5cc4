"""K1-K5 over the plain sparsifier with default options, fast_math (n = 4) and fast_math with vector_width=16
(the conflict lane on AVX-512 CD hosts; docs/passes.md, "The conflict lane in the pass"): benchmark sizes
(``quick``: the kernels' quick sizes), 5 % density, REPEATS interleaved repeats (default 5), thread CPU time,
results checked against the plain sparsifier. Prints the ratios over the plain sparsifier of the medians, then
each variant's median and best time in seconds. "fast n4" is fast_math's code before the width was chosen,
"fast n16" what an unset width gives with fast_math on an AVX-512 CD host (docs/passes.md, "The width chosen
for fast_math").

    python docs/scripts/fast_math_kernels.py [REPEATS] [quick]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench.paper_kernels import KERNELS  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
QUICK = len(sys.argv) > 2 and sys.argv[2] == "quick"

for name in ("K1", "K2", "K3", "K4", "K5"):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size if QUICK else None)
    fns = {"plain": splyce.jit(spec.fun, vectorize=False), "default": splyce.jit(spec.fun),
           "fast n4": splyce.jit(spec.fun, fast_math=True, vector_width=4),   # explicit: unset is 16 on CD hosts
           "fast n16": splyce.jit(spec.fun, fast_math=True, vector_width=16)}
    ref = np.asarray(fns["plain"](*ops))
    for k, f in fns.items():
        np.testing.assert_allclose(np.asarray(f(*ops)), ref, rtol=1e-9, atol=1e-9)
    n16 = "conflict" in fns["fast n16"].lower(*ops).as_text("splyce")
    t = {k: [] for k in fns}; names = list(fns)
    for r in range(REPEATS):
        for k in names[r % 4:] + names[:r % 4]:
            t0 = time.thread_time(); fns[k](*ops); t[k].append(time.thread_time() - t0)
    med = {k: statistics.median(v) for k, v in t.items()}
    print(name, "conflict lane" if n16 else "no conflict lane", {k: round(med["plain"] / v, 2) for k, v in med.items()},
          {k: float(f"{v:.4g}") for k, v in med.items()}, {k: float(f"{min(v):.4g}") for k, v in t.items()}, flush=True)
