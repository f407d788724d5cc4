"""@splyce.jit vs the drop-in vs scipy on `bench real` ops, thread CPU time of one call, the three interleaved in one
process, median of 9: python docs/scripts/jit_vs_dropin.py OP MATRIX [MATRIX ...] (OP, MATRIX: as `bench real --ops / --matrices`)"""
import sys, time
import numpy as np
from splyce.bench import corpus, real

op, names, N = sys.argv[1], sys.argv[2:], 9
ents = {e.name: e for e in corpus.entries()}
for name in names:
    e = ents[name]
    d = real.Operands(e.name, e.build())
    fs = {"scipy": real.scipy_call(op, d), "drop": real.splyce_call(op, d), "jit": real.jit_call(op, d)}
    for f in fs.values():
        f(); f()
    t = {k: [] for k in fs}
    for _ in range(N):
        for k, f in fs.items():
            s = time.thread_time_ns(); f(); t[k].append(time.thread_time_ns() - s)
    med = {k: np.median(v) / 1e6 for k, v in t.items()}
    print(f"{op} {name}: ms " + " ".join(f"{k} {v:.3f}" for k, v in med.items()) +
          f" | jit/drop {med['drop']/med['jit']:.2f} jit/scipy {med['scipy']/med['jit']:.2f}", flush=True)
