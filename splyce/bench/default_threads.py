"""``default_threads``: the default thread count (``threads=None``: every core, small calls on one) against
``threads=1`` (and ``threads=2`` given), op by op, small and large, results checked bit for bit.

Each op runs as ``threads=1`` and as the default in one process, interleaved (the order alternating each
round), the fastest call of ``--repeats`` rounds of a few calls each (each call timed alone): on a machine shared
with other jobs the fastest call is the least disturbed one. ``ratio`` = one thread's time / the default's (> 1: the default is
faster). The large sizes are the ones the goal names (SpGEMM, SpMM, triangle counts, jitted SpMM); the small
ones check that the per-op thresholds keep a small call on one thread (ratio >= 0.97).

``python -m splyce.bench.default_threads [--repeats N] [--only OP,...] [--sizes small,large]``
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import time

import numpy as np
import scipy.sparse as sps


def mesh(n_side: int, dims: int = 2):
    """A 2-D / 3-D grid Laplacian-like pattern (a FEM mesh's rows: 5 / 7 entries), random values."""
    one = sps.diags([np.ones(n_side - 1), np.full(n_side, 2.0), np.ones(n_side - 1)], [-1, 0, 1])
    eye = sps.identity(n_side)
    if dims == 2:
        a = sps.kron(one, eye) + sps.kron(eye, one)
    else:
        a = sps.kron(sps.kron(one, eye), eye) + sps.kron(sps.kron(eye, one), eye) + sps.kron(sps.kron(eye, eye), one)
    a = sps.csr_array(a)
    a.data = np.random.default_rng(1).random(a.nnz) + 0.5
    return a


def power_law(n: int, per_row: int, seed: int = 2):
    """A graph with power-law degrees (Chung-Lu-like), symmetric, 1.0 values."""
    rng = np.random.default_rng(seed)
    w = (np.arange(1, n + 1) ** -0.6)
    w = w / w.sum()
    m = n * per_row // 2
    r, c = rng.choice(n, m, p=w), rng.choice(n, m, p=w)
    keep = r != c
    g = sps.coo_array((np.ones(int(keep.sum())), (r[keep], c[keep])), shape=(n, n)).tocsr()
    g = ((g + g.T) > 0).astype(np.float64)
    return sps.csr_array(g)


def _sizes():
    """name -> (matrix maker, small?)."""
    return {
        "mesh2d-1k": (lambda: mesh(32), True),
        "mesh2d-10k": (lambda: mesh(100), True),
        "pl-5k": (lambda: power_law(5000, 8), True),
        "mesh3d-216k": (lambda: mesh(60, 3), False),
        "mesh2d-1m": (lambda: mesh(1000), False),
        "pl-100k": (lambda: power_law(100_000, 10), False),
    }


def _ops(a, small: bool):
    """op name -> (call(threads), what the goal counts it as)."""
    import splyce

    n = a.shape[0]
    rng = np.random.default_rng(3)
    x = rng.random(n)
    x16 = rng.random((n, 16))
    y16 = rng.random((n, 16))
    at = a.T
    lower = sps.csr_array(sps.tril(a, -1))
    lower.data[:] = 1.0
    ops = {
        "spmv": lambda t: splyce.matmul(a, x, threads=t),
        "spmm16": lambda t: splyce.matmul(a, x16, threads=t),
        "spgemm": lambda t: splyce.matmul(a, a, threads=t),
        "sddmm": lambda t: splyce.einsum("ij,ik,jk->ij", a, x16, y16, threads=t),
        "masked": lambda t: splyce.einsum("ik,kj,ij->ij", a, a, a, threads=t),
        "triangles": lambda t: splyce.einsum("ij,jk,ik->", lower, lower, lower, threads=t),
        "add": lambda t: splyce.add(a, at, threads=t),
        "multiply": lambda t: splyce.multiply(a, at, threads=t),
    }
    tensor = splyce.asarray(a)
    jits = {t: splyce.jit(lambda m, v: m @ v, threads=t) for t in (1, None, 2)}
    ops["jit-spmm16"] = lambda t: jits[t](tensor, x16)
    fused = {t: splyce.jit(lambda m, v, w: np.maximum(m @ (v @ w), 0.0), threads=t, library=False)
             for t in (1, None, 2)}
    w = rng.random((16, 16))
    ops["jit-gcn"] = lambda t: fused[t](tensor, x16, w)
    return ops


def _same(u, v) -> bool:
    if sps.issparse(u):
        u.sort_indices() if hasattr(u, "sort_indices") else None
        v.sort_indices() if hasattr(v, "sort_indices") else None
        return (u.shape == v.shape and np.array_equal(u.indptr, v.indptr) and np.array_equal(u.indices, v.indices)
                and np.array_equal(u.data.view(np.uint8), v.data.view(np.uint8)))
    u, v = np.asarray(u), np.asarray(v)
    return u.shape == v.shape and u.dtype == v.dtype and u.tobytes() == v.tobytes()


def _time(call, calls: int) -> float:
    """The fastest of ``calls`` calls (each timed alone: on a machine shared with other jobs a batch's mean
    holds every preemption, the fastest call the undisturbed time)."""
    best = math.inf
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(repeats: int = 9, only=None, sizes=("small", "large"), out=print) -> list[dict]:
    import splyce

    rows = []
    for name, (make, small) in _sizes().items():
        if ("small" if small else "large") not in sizes:
            continue
        a = make()
        for op, call in _ops(a, small).items():
            if only and op not in only:
                continue
            one = call(1)
            same = _same(one, call(None)) and _same(one, call(2))
            t = _time(lambda: call(1), 1)
            calls = max(1, min(200, int(0.02 / max(t, 1e-6))))
            best = {1: math.inf, None: math.inf, 2: math.inf}
            for r in range(repeats):
                order = (1, None, 2) if r % 2 == 0 else (2, None, 1)
                for th in order:
                    gc.collect()
                    best[th] = min(best[th], _time(lambda: call(th), calls))
            row = dict(matrix=name, nnz=a.nnz, op=op, small=small, t1_ms=best[1] * 1e3,
                       default_ms=best[None] * 1e3, t2_ms=best[2] * 1e3, ratio=best[1] / best[None],
                       ratio_t2=best[1] / best[2], bit_identical=same, load=os.getloadavg()[0])
            rows.append(row)
            out(f"{name:12s} nnz={a.nnz:>9d} {op:11s} t1 {row['t1_ms']:9.3f} ms  default {row['default_ms']:9.3f} ms"
                f"  ratio {row['ratio']:5.2f}  threads=2 {row['t2_ms']:9.3f} ms ratio {row['ratio_t2']:5.2f}"
                f"  identical={same}  load {row['load']:.1f}")
        del a
    large = [r["ratio"] for r in rows if not r["small"] and r["op"] in ("spgemm", "spmm16", "triangles", "jit-spmm16")]
    large2 = [r["ratio_t2"] for r in rows if not r["small"] and r["op"] in ("spgemm", "spmm16", "triangles",
                                                                           "jit-spmm16")]
    if large:
        out(f"geomean t1/default, large SpGEMM / SpMM / triangles / jitted SpMM: "
            f"{math.exp(sum(map(math.log, large)) / len(large)):.2f} over {len(large)}; "
            f"t1/threads=2: {math.exp(sum(map(math.log, large2)) / len(large2)):.2f}")
    small_rows = [r for r in rows if r["small"]]
    if small_rows:
        worst = min(small_rows, key=lambda r: r["ratio"])
        out(f"smallest small-call ratio: {worst['ratio']:.2f} ({worst['matrix']} {worst['op']})")
    out(f"threads by default: {splyce.get_threads()}, machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--only", default="")
    p.add_argument("--sizes", default="small,large")
    args = p.parse_args(argv)
    measure(max(args.repeats, 1), set(filter(None, args.only.split(","))), tuple(args.sizes.split(",")))


if __name__ == "__main__":
    main()
