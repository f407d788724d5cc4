"""``first_call``: a new program's first call from an empty disk cache, each in a fresh process, split by stage,
beside ``jax.jit``'s first call of the same program (where JAX is installed).

Programs (a random graph of ``--n`` rows, ~10 entries a row, float64): ``spmv`` (``a @ x``), ``gcn`` (one GCN
layer, ``relu(a @ (x @ w))``, 16 features), ``pagerank10`` (10 PageRank steps written as a Python loop inside
the jitted function: traced, i.e. unrolled). Each (program, framework) runs in its own ``python`` process
with a fresh, empty ``SPLYCE_CACHE_DIR``; the process imports the framework and builds the operands first
(not timed), then times its first call and a second one. splyce's bytecode is compiled first, as an
installed package's is. ``first_s`` is the first call's wall time (trace,
plan, compile, load and one run); splyce's is split into ``trace_plan_s`` (the rest), ``mlir_s`` (lowering to
MLIR, sparsifier, Splyce pass, MLIR -> LLVM IR), ``llvm_s`` (LLVM's optimisation pipeline), ``codegen_load_s``
(instruction selection, linking, loading) summed over the kernels the call compiled, and ``run_s`` (the
second call). JAX operates on a ``BCOO`` made from the same matrix. Where splyce answers from native
stages while the fused kernel compiles on a background thread (runtime/switching.py: the PageRank steps),
the stages compiled during the first call are 0; the second call runs whichever is ready then.

``python -m splyce.bench.first_call [--n 30000] [--repeats 2] [--programs spmv,gcn,pagerank10]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PROGRAMS = ("spmv", "gcn", "pagerank10")
FEATURES = 16


def _matrix(n: int):
    import numpy as np
    import scipy.sparse as sps

    rng = np.random.default_rng(0)
    m = n * 10
    a = sps.coo_array((rng.random(m), (rng.integers(0, n, m), rng.integers(0, n, m))), shape=(n, n)).tocsr()
    a.sum_duplicates()
    return a


def _splyce_program(name: str, n: int):
    import numpy as np

    import splyce

    if name == "spmv":
        def spmv(a, x):
            return a @ x
        return splyce.jit(spmv)
    if name == "gcn":
        def gcn(a, x, w):
            return np.maximum(a @ (x @ w), 0.0)
        return splyce.jit(gcn)

    def pagerank10(p, r):
        for _ in range(10):
            r = 0.85 * (p @ r) + 0.15 / n
        return r
    return splyce.jit(pagerank10)


def _jax_program(name: str, n: int):
    import jax
    import jax.numpy as jnp

    if name == "spmv":
        return jax.jit(lambda a, x: a @ x)
    if name == "gcn":
        return jax.jit(lambda a, x, w: jnp.maximum(a @ (x @ w), 0.0))

    def pagerank10(p, r):
        for _ in range(10):
            r = 0.85 * (p @ r) + 0.15 / n
        return r
    return jax.jit(pagerank10)


def _args(name: str, a, framework: str):
    import numpy as np

    rng = np.random.default_rng(1)
    n = a.shape[0]
    x = rng.random(n) if name != "gcn" else rng.random((n, FEATURES))
    extra = (rng.random((FEATURES, FEATURES)),) if name == "gcn" else ()
    if name == "pagerank10":
        x = np.full(n, 1.0 / n)
    if framework == "jax":
        import jax
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        jax.config.update("jax_enable_x64", True)
        return (jsparse.BCOO.from_scipy_sparse(a),) + tuple(jnp.asarray(v) for v in (x,) + extra)
    import splyce

    return (splyce.asarray(a), x) + extra


def _child(name: str, framework: str, n: int) -> dict:
    """In a fresh process: build, then time the first and second call (and splyce's compile stages)."""
    import numpy as np

    if framework == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
    a = _matrix(n)
    args = _args(name, a, framework)
    stages = {"mlir": 0.0, "llvm": 0.0, "codegen_load": 0.0, "kernels": 0}
    if framework == "splyce":
        from splyce.backend import compiler

        fun = _splyce_program(name, n)
        real_lower, real_load = compiler.lower, compiler.Lowering.load

        def counted_lower(trace, options):
            low = real_lower(trace, options)
            t = low.timings
            stages["mlir"] += sum(t.get(k, 0.0) for k in ("linalg", "scf", "splyce", "to_llvm"))
            stages["llvm"] += t.get("llvm", 0.0)
            stages["kernels"] += 1
            return low

        def counted_load(self):
            start = time.perf_counter()
            out = real_load(self)
            if self.loaded is None:
                stages["codegen_load"] += time.perf_counter() - start
            return out
        compiler.lower = counted_lower
        compiler.Lowering.load = counted_load
        from splyce.runtime import building, kernel

        building.lower = kernel.lower = counted_lower
    else:
        fun = _jax_program(name, n)

    def block(out):
        return out.block_until_ready() if hasattr(out, "block_until_ready") else out

    t0 = time.perf_counter()
    first = block(fun(*args))
    t1 = time.perf_counter()
    second = block(fun(*args))
    t2 = time.perf_counter()
    return dict(program=name, framework=framework, n=n, first_s=t1 - t0, run_s=t2 - t1,
                checksum=float(np.asarray(first).sum()), same=bool(np.allclose(np.asarray(first), np.asarray(second))),
                **{f"{k}_s" if k != "kernels" else k: v for k, v in stages.items()})


def measure(n: int = 30000, repeats: int = 2, programs=PROGRAMS, out=print) -> list[dict]:
    try:
        import jax  # noqa: F401
        frameworks = ("splyce", "jax")
    except ImportError:
        frameworks = ("splyce",)
    rows = []
    # as an installed package: its bytecode compiled once (pip does it at install; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would compile splyce's ~200 modules from source in every fresh process)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import compileall, os, splyce; "
                    "compileall.compile_dir(os.path.dirname(splyce.__file__), quiet=1)"], env=base, check=True,
                   capture_output=True, timeout=600)
    for r in range(repeats):
        for name in programs:
            for fw in frameworks:
                with tempfile.TemporaryDirectory(prefix="splyce-first-call-") as cache:
                    env = dict(base, SPLYCE_CACHE_DIR=cache)
                    proc = subprocess.run([sys.executable, "-m", "splyce.bench.first_call", "--child", name, fw,
                                           "--n", str(n)], env=env, capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    raise RuntimeError(f"first_call child {name} {fw} failed:\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                if fw == "splyce":
                    row["trace_plan_s"] = max(row["first_s"] - row["mlir_s"] - row["llvm_s"] - row["codegen_load_s"]
                                              - row["run_s"], 0.0)
                rows.append(row)
                extra = (f"  mlir {row['mlir_s']:.3f}  llvm {row['llvm_s']:.3f}  codegen+load "
                         f"{row['codegen_load_s']:.3f}  trace+plan+rest {row['trace_plan_s']:.3f}  "
                         f"kernels {row['kernels']}") if fw == "splyce" else ""
                out(f"{name:11s} {fw:7s} first {row['first_s']:.3f} s  run {row['run_s'] * 1e3:8.2f} ms{extra}  "
                    f"checksum {row['checksum']:.6g}")
    for name in programs:      # the same program's results agree (JAX the reference where installed)
        sums = [x["checksum"] for x in rows if x["program"] == name]
        if max(sums) - min(sums) > 1e-9 * max(abs(v) for v in sums) + 1e-12 or not all(x["same"] for x in rows):
            raise RuntimeError(f"first_call: {name}'s results disagree across frameworks or calls: {sums}")
        for fw in frameworks:
            firsts = sorted(x["first_s"] for x in rows if x["program"] == name and x["framework"] == fw)
            out(f"{name:11s} {fw:7s} first call {' / '.join(f'{f:.3f}' for f in firsts)} s")
    out(f"load average {os.getloadavg()[0]:.1f}, n = {n}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", nargs=2, metavar=("PROGRAM", "FRAMEWORK"))
    p.add_argument("--n", type=int, default=30000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--programs", default=",".join(PROGRAMS))
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child, args.n)))
        return
    measure(args.n, args.repeats, tuple(args.programs.split(",")))


if __name__ == "__main__":
    main()
