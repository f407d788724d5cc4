"""``bench programs``' jitted bodies against scipy / NumPy in the calling thread's CPU time per call
(``time.thread_time``, minimum over interleaved repeats), for a machine shared with other jobs, where the
bench's wall-clock medians mostly measure the load (docs/passes.md, "The noalias pass"). ``jit`` takes the
scipy operands as the bench does (checked at every call); ``jit on tensors`` the same operands wrapped once
with ``splyce.asarray`` (checked when wrapped); ``chain`` the drop-ins called one after another on the scipy
operands (bench programs' chains).

    python docs/scripts/programs_cpu.py [MATRIX,...] [PROGRAM,...] [REPEATS]
    (default fem3d-100k,ba-100k  pagerank,cg,gcn,logreg,axbx,hsum,quad,normal,maxdiff  9)
"""
import sys
from pathlib import Path
import scipy.sparse as sps
import splyce
from threadpoolctl import threadpool_limits
from splyce.bench import corpus
from splyce.bench.common import thread_cpu_per_call as cpu_per_call
from splyce.bench.common import check
from splyce.bench.programs import _first, _programs

names = (sys.argv[1] if len(sys.argv) > 1 else "fem3d-100k,ba-100k").split(",")
programs = (sys.argv[2] if len(sys.argv) > 2 else "pagerank,cg,gcn,logreg,axbx,hsum,quad,normal,maxdiff").split(",")
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 9
everything = {e.name: e for e in corpus.entries()}



threadpool_limits(1)
print(f"{'matrix':12} {'program':9} {'scipy ms':>9} {'chain ms':>9} {'jit ms':>9} {'jit vs scipy':>13} "
      f"{'jit vs chain':>13} {'on tensors ms':>14} {'vs scipy':>9}")
for name in names:
    A = corpus.build(everything[name], Path("bench-results") / "corpus-cache")
    for program, (jitted, reference, args, chain) in _programs(A).items():
        if program not in programs:
            continue
        check(f"{name} {program}", _first(jitted(*args)), _first(reference(*args)), rtol=1e-8)   # as the bench
        wrapped = tuple(splyce.asarray(a) if sps.issparse(a) else a for a in args)
        check(f"{name} {program} chain", _first(chain(*args)), _first(reference(*args)), rtol=1e-8)
        calls = {"scipy": lambda: reference(*args), "chain": lambda: chain(*args), "jit": lambda: jitted(*args),
                 "tensors": lambda: jitted(*wrapped)}
        t = {who: [] for who in calls}
        for r in range(repeats):
            for who in list(calls)[r % 4:] + list(calls)[:r % 4]:
                t[who].append(cpu_per_call(calls[who]))
        ts, tc, tj, tt = (min(t[who]) for who in calls)
        print(f"{name:12} {program:9} {ts * 1e3:9.3f} {tc * 1e3:9.3f} {tj * 1e3:9.3f} {ts / tj:13.2f} {tc / tj:13.2f} "
              f"{tt * 1e3:14.3f} {ts / tt:9.2f}", flush=True)
