"""The union reduction lane (splyce/passes/union_reduce.py) on the corpus: a scalar reduction of ``a - b``
(``b``: ``a``'s rows rolled by one, as ``bench programs``' maxdiff) jitted on SparseTensor operands, the lane
off (``union=False``: the plain sparsifier's loop) against on at n = 2, 4 (the default), 8; thread CPU time
per call, minimum over interleaved repeats (docs/passes.md, "Scalar reductions"). Results are checked
bit-identical to the lane-off call first.

    python docs/scripts/union_reduce_cpu.py [MATRIX,...] [PROGRAM] [REPEATS] [OPTION=VALUE ...]
    (default fem3d-100k,ba-100k maxdiff 9; PROGRAM one of maxdiff, mindiff, sqsum; e.g. fast_math=True)
"""
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import splyce
from splyce.bench import corpus
from splyce.bench.common import thread_cpu_per_call as cpu_per_call
from splyce.bench.programs import _programs

PROGRAMS = {"maxdiff": lambda a, b: abs(a - b).max(), "mindiff": lambda a, b: abs(a - b).min(),
            "sqsum": lambda a, b: ((a - b) ** 2).sum()}



names = (sys.argv[1] if len(sys.argv) > 1 else "fem3d-100k,ba-100k").split(",")
program = sys.argv[2] if len(sys.argv) > 2 else "maxdiff"
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 9
extra = dict((k, eval(v)) for k, v in (a.split("=") for a in sys.argv[4:]))
configs = {"off": dict(union=False), "n=2": dict(vector_width=2), "n=4": dict(), "n=8": dict(vector_width=8)}
threadpool_limits(1)
everything = {e.name: e for e in corpus.entries()}
for name in names:
    A = corpus.build(everything[name], Path("bench-results") / "corpus-cache")
    _, _, args, _ = _programs(A)["maxdiff"]
    tensors = tuple(splyce.asarray(a) for a in args)
    jits = {c: splyce.jit(PROGRAMS[program], **{**o, **extra}) for c, o in configs.items()}
    want = np.asarray(jits["off"](*tensors))
    for c, f in jits.items():
        got = np.asarray(f(*tensors))
        same = got.tobytes() == want.tobytes() or (np.isnan(got) and np.isnan(want))
        assert same or extra.get("fast_math"), (name, c, got, want)
    t = {c: [] for c in jits}
    for r in range(repeats):
        order = list(jits)[r % 4:] + list(jits)[:r % 4]
        for c in order:
            t[c].append(cpu_per_call(lambda: jits[c](*tensors)))
    best = {c: min(v) for c, v in t.items()}
    print(f"{name:12} {program:8} " + "  ".join(f"{c} {best[c] * 1e3:7.3f} ms" for c in jits)
          + f"  (n=4: {best['off'] / best['n=4']:.2f}x)", flush=True)
