"""``overhead``: splyce's fixed costs as a user meets them, per op, beside scipy's own call.

Per op (drop-in SpMV ``matmul(a, x)``, SpGEMM ``matmul(a, a)``, ``multiply(a, a.T)`` on a 1000 x 1000 1 %
scipy CSR; a jitted K1-style SpGEMM on 50 x 60 / 60 x 50 SparseTensors):

- ``cold_ms``: the first call minus the steady call, in a fresh Python process whose disk cache is empty
  (everything the call needs is compiled);
- ``disk_ms``: the same in a fresh process whose disk cache the cold run filled (what every process after
  the first pays; ``disk_compiles`` counts what it still compiled: 0 when everything was loaded);
- ``steady_ms`` / ``scipy_ms``: a call once warm, splyce's and scipy's (``a @ x``, ``a @ a``,
  ``a.multiply(a.T)``, ``B @ C``);
- ``call_4x4_us`` / ``scipy_4x4_us``: a cached call on a 4 x 4 operand (the drop-in on a scipy CSR; the jitted
  row: a jitted SpMV on a SparseTensor, ``f(a, x)`` with ``f = splyce.jit(lambda a, x: a @ x)``), scipy's
  operator on the same 4 x 4 CSR.

Every first-call number comes from its own fresh process (``python -c``), so imports, LLVM initialisation
and loading are counted as a user's script or a Dask worker pays them (the jitted row's first call includes
``splyce.jit(...)`` itself, which imports the dispatcher); ``import_ms`` is ``import splyce``
in the warm-disk process. Results are checked against scipy in every process.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from splyce.bench.common import Config, Result, _progress

COLUMNS = ["op", "size", "cold_ms", "disk_ms", "disk_compiles", "steady_ms", "scipy_ms", "call_4x4_us",
           "scipy_4x4_us", "import_ms"]
OPS = ("spmv", "spgemm", "multiply", "jit_k1")

# One op in a fresh process: prints a JSON line of its times (seconds).
CHILD = textwrap.dedent('''
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np, scipy.sparse as sps
    t1 = time.perf_counter()
    import splyce
    t2 = time.perf_counter()
    op, n = sys.argv[1], int(sys.argv[2])

    def best(call, repeats, loops):
        times = []
        for _ in range(repeats):
            s = time.perf_counter()
            for _ in range(loops):
                call()
            times.append((time.perf_counter() - s) / loops)
        return min(times)

    def dense(x):
        return x.toarray() if hasattr(x, "toarray") else np.asarray(x)

    def check(got, want):
        got, want = dense(got), dense(want)
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
            raise SystemExit(f"overhead bench: {op} disagrees with scipy")

    def operands(m, density, seed):
        a = sps.random_array((m, m), density=density, format="csr", random_state=seed)
        return a, np.random.default_rng(seed).random(m)

    if op == "jit_k1":
        from splyce.bench.paper_kernels import spgemm
        rng = np.random.default_rng(0)
        B = sps.random_array((50, 60), density=0.1, format="csr", random_state=1)
        C = sps.random_array((60, 50), density=0.1, format="csr", random_state=2)
        Bt, Ct = splyce.asarray(B), splyce.asarray(C, format=splyce.CSC.with_widths(32, 32))
        jitted = {}

        def call():   # the first call makes the jitted functions too: splyce.jit imports the dispatcher
            if not jitted:
                jitted["f"], jitted["g"] = splyce.jit(spgemm), splyce.jit(lambda a, x: a @ x)
            return jitted["f"](Bt, Ct)
        ref, scipy_call = B @ C, (lambda: B @ C)
        a4, x4 = operands(4, 0.5, 0)
        t4 = splyce.asarray(a4)
        tiny, tiny_ref, scipy_tiny = (lambda: jitted["g"](t4, x4)), a4 @ x4, (lambda: a4 @ x4)
    else:
        a, x = operands(n, 0.01, 0)
        a4, x4 = operands(4, 0.5, 0)
        calls = {"spmv": (lambda a, x: splyce.matmul(a, x), lambda a, x: a @ x),
                 "spgemm": (lambda a, x: splyce.matmul(a, a), lambda a, x: a @ a),
                 "multiply": (lambda a, x: splyce.multiply(a, a.T), lambda a, x: a.multiply(a.T))}
        ours, theirs = calls[op]
        call, ref, scipy_call = (lambda: ours(a, x)), theirs(a, x), (lambda: theirs(a, x))
        tiny, tiny_ref, scipy_tiny = (lambda: ours(a4, x4)), theirs(a4, x4), (lambda: theirs(a4, x4))
    s = time.perf_counter()
    first = call()
    first_s = time.perf_counter() - s
    check(first, ref)
    check(tiny(), tiny_ref)
    steady = best(call, 5, 20)
    out = {"import_s": t2 - t1, "first_s": first_s, "steady_s": steady, "scipy_s": best(scipy_call, 5, 20),
           "tiny_s": best(tiny, 5, 2000), "scipy_tiny_s": best(scipy_tiny, 5, 2000)}
    try:
        from splyce.native import codegen
        out["native_compiles"] = codegen.stats.compiles
    except (ImportError, AttributeError):   # a splyce without the native code cache
        out["native_compiles"] = -1
    if op == "jit_k1":
        out["jit_compiles"] = jitted["f"].cache_info().compiles
    print(json.dumps(out))
''')


def _child(op: str, n: int, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SPLYCE_DISABLE_DISK_CACHE", "PYTHONDONTWRITEBYTECODE")}
    env["SPLYCE_CACHE_DIR"] = cache
    run = subprocess.run([sys.executable, "-c", CHILD, op, str(n)], env=env, capture_output=True, text=True,
                         timeout=900)
    if run.returncode != 0:
        raise RuntimeError(f"overhead bench: the {op} process failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def run(cfg: Config) -> Result:
    n = 200 if cfg.tiny else 1000
    repeats = 1 if cfg.tiny else cfg.n_repeats   # two fresh processes per repeat and op
    rows = []
    bar = _progress(len(OPS) * repeats, "overhead", cfg)
    try:
        for op in OPS:
            cold, disk, compiles, steady, scipy_s, tiny, scipy_tiny, imports = ([] for _ in range(8))
            for _ in range(repeats):
                with tempfile.TemporaryDirectory(prefix="splyce-overhead-") as cache:
                    c = _child(op, n, cache)           # empty cache: compiles, and fills it
                    d = _child(op, n, cache)           # a later process: loads
                cold.append(c["first_s"] - c["steady_s"])
                disk.append(d["first_s"] - d["steady_s"])
                compiles.append(d["native_compiles"] + d.get("jit_compiles", 0))
                for into, key in ((steady, "steady_s"), (scipy_s, "scipy_s"), (tiny, "tiny_s"),
                                  (scipy_tiny, "scipy_tiny_s"), (imports, "import_s")):
                    into += [c[key], d[key]]
                bar.update(1)
            size = "50x60 @ 60x50" if op == "jit_k1" else f"{n}x{n} 1%"
            rows.append({"op": op, "size": size, "cold_ms": 1e3 * statistics.median(cold),
                         "disk_ms": 1e3 * statistics.median(disk), "disk_compiles": max(compiles),
                         "steady_ms": 1e3 * min(steady), "scipy_ms": 1e3 * min(scipy_s),
                         "call_4x4_us": 1e6 * min(tiny), "scipy_4x4_us": 1e6 * min(scipy_tiny),
                         "import_ms": 1e3 * statistics.median(imports)})
    finally:
        bar.close()
    note = ("cold_ms / disk_ms: first call minus the steady call in a fresh process, with an empty / a filled disk "
            f"cache (medians of {repeats}); disk_compiles: native modules and jitted kernels the filled-cache "
            "process still compiled (-1: this splyce has no native code cache); steady_ms, scipy_ms, call_4x4_us, "
            "scipy_4x4_us: best of 5 loops; the jit_k1 row's 4x4 columns are a jitted SpMV on a SparseTensor "
            "(the op rows: the drop-in on a scipy CSR). Results checked against scipy in every process.")
    return Result("overhead", "Fixed costs: first call cold / from the disk cache, steady, 4x4 call", COLUMNS,
                  rows, note, plot=_plot)


def _plot(rows, ax):
    import numpy as np

    x = np.arange(len(rows))
    ax.bar(x - 0.2, [max(r["cold_ms"], 1e-3) for r in rows], 0.4, label="first call, empty cache")
    ax.bar(x + 0.2, [max(r["disk_ms"], 1e-3) for r in rows], 0.4, label="first call, filled disk cache")
    ax.set_xticks(x, [r["op"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("ms above the steady call")
    ax.legend(fontsize=8)
