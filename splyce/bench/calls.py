"""``calls``: a cached jitted call per calling convention (docs/tracing.md, "Calling a jitted function").

One SpMV, ``a @ x`` on an n x n CSR of 5 % density (n = 100; 8 with ``--tiny``), jitted and called warm in
each convention: positional arguments on a ``SparseTensor`` (the dispatcher's fast path) and on the scipy
``csr_array`` (checked on every call), keywords, a dict argument, a NamedTuple result, a ``static_argnames``
string. Every convention's calls are timed one by one, interleaved round by round with the others in one
process; ``best_us`` is the fastest call, ``median_us`` the median, ``vs_positional`` the best over the
positional SparseTensor call's best. Every result is checked against scipy's ``a @ x``.
"""

from __future__ import annotations

import statistics
import time
import typing

import numpy as np

from splyce.bench.common import BenchMismatch, Config, Result

COLUMNS = ["convention", "call", "n", "best_us", "median_us", "vs_positional"]


class _Out(typing.NamedTuple):
    y: object
    rows: int


def conventions(a, t, x):
    """``(name, call text, zero-argument call)`` per convention; ``a`` a scipy CSR, ``t`` it as a SparseTensor."""
    import splyce

    spmv = splyce.jit(lambda a, x: a @ x)
    tree = splyce.jit(lambda p: p["a"] @ p["x"])
    named = splyce.jit(lambda a, x: _Out(a @ x, a.shape[0]))
    static = splyce.jit(lambda a, x, mode="plain": a @ x if mode == "plain" else -(a @ x), static_argnames="mode")
    return [
        ("positional, SparseTensor", "f(t, x)", lambda: spmv(t, x)),
        ("positional, scipy csr_array", "f(a, x)", lambda: spmv(a, x)),
        ("keywords, SparseTensor", "f(a=t, x=x)", lambda: spmv(a=t, x=x)),
        ("dict argument, SparseTensor", 'f({"a": t, "x": x})', lambda: tree({"a": t, "x": x})),
        ("NamedTuple result, SparseTensor", "f(t, x).y", lambda: named(t, x).y),
        ("static_argnames, SparseTensor", 'f(t, x, mode="plain")', lambda: static(t, x, mode="plain")),
    ]


def run(cfg: Config) -> Result:
    import scipy.sparse as sps

    import splyce

    n = 8 if cfg.tiny else 100
    a = sps.random_array((n, n), density=0.05 if n > 8 else 0.3, format="csr", rng=0)
    t = splyce.asarray(a)
    x = np.random.default_rng(1).standard_normal(n)
    want = a @ x
    cases = conventions(a, t, x)
    for name, _, call in cases:
        got = call()
        if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
            raise BenchMismatch(f"calls: {name} differs from scipy's a @ x")
    rounds, per_round = (3, 20) if cfg.tiny else (20, 100)     # 2000 calls of each convention
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for name, _, call in cases:
            into = times[name]
            for _ in range(per_round):
                start = clock()
                call()
                into.append(clock() - start)
    base = min(times[cases[0][0]])
    rows = [{"convention": name, "call": text, "n": n, "best_us": min(times[name]) / 1e3,
             "median_us": statistics.median(times[name]) / 1e3, "vs_positional": min(times[name]) / base}
            for name, text, _ in cases]
    note = (f"one SpMV a @ x, a an {n} x {n} CSR; {rounds} rounds x {per_round} calls per convention, interleaved "
            "round by round in one process; best_us / median_us over the calls, vs_positional = best_us over the "
            "positional SparseTensor call's best")
    return Result("calls", "A cached jitted call per calling convention", COLUMNS, rows, note, _plot,
                  repeats=rounds * per_round)


def _plot(rows, ax):
    names = [r["convention"] for r in rows]
    ax.barh(names, [r["best_us"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("best call (us)")
