"""The glue after a product the plan computes before its kernel, written over that product's array
(planner/in_place.py) against the same function planned with a result buffer of its own: thread CPU time per
call, best of REPEATS interleaved, one thread; results checked equal.

    python docs/scripts/in_place_cpu.py MATRIX REPEATS      (e.g. fem3d-100k 15)
"""
import numpy as np, sys, splyce
from pathlib import Path
from threadpoolctl import threadpool_limits
from splyce.bench import corpus
from splyce.bench.common import thread_cpu_per_call as cpu
import splyce.planner.plan as plan_mod
threadpool_limits(1)
everything = {e.name: e for e in corpus.entries()}
A = corpus.build(everything[sys.argv[1]], Path("bench-results") / "corpus-cache")
X = np.random.default_rng(0).random((A.shape[1], 16)) - 0.5
x = np.random.default_rng(0).random(A.shape[1])
n = A.shape[0]
At = splyce.asarray(A)
progs = {"relu": (lambda a, x, X: np.maximum(a @ X, 0)), "scale": (lambda a, x, X: 0.85 * (a @ X) + 0.15),
         "pr": (lambda a, x, X: 0.85 * (a @ x) + 0.15 / n)}
calls = {}
for name, body in progs.items():
    on = splyce.jit(body); on(At, x, X)
    real = plan_mod.in_place_results
    plan_mod.in_place_results = lambda t, f: ()
    off = splyce.jit(body); off(At, x, X)
    plan_mod.in_place_results = real
    assert np.array_equal(on(At, x, X), off(At, x, X))
    calls[name + " in place"] = (lambda f=on: f(At, x, X))
    calls[name + " own buffer"] = (lambda f=off: f(At, x, X))
t = {k: [] for k in calls}
for r in range(int(sys.argv[2])):
    for k, c in calls.items(): t[k].append(cpu(c))
print(sys.argv[1], "  ".join(f"{k} {min(v)*1e3:.3f}" for k, v in t.items()))
