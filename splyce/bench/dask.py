"""``dask``: SpMV, SpMM, SpGEMM and triangle counting on a 2-worker Dask ``LocalCluster`` (processes, one
thread each): splyce.dask on 1 and 2 workers against dask.array + pydata-sparse chunks on the same cluster.

Matrices: a 3-D 27-point mesh (a stencil, regular rows) and a power-law graph (Chung-Lu, skewed rows),
generated here. Both sides get the same row blocks, persisted on the workers before timing, and the same
layout: the right operand is one chunk (broadcast). "1 worker" and "2 workers" are two LocalClusters, both
alive, so their runs interleave. A timed run is ``persist`` + ``wait``: the result stays on the workers, as for
data bigger than one machine. Every result is checked before timing: splyce's against the single-process
drop-in, bit for bit; pydata's against it within 1e-9 relative.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from splyce.bench.common import BenchMismatch, Config, Result, Timing, _progress

COLUMNS = ["matrix", "rows", "nnz", "op", "splyce_1w_s", "splyce_2w_s", "speedup_2w_vs_1w", "pydata_2w_s",
           "splyce_vs_pydata"]


# -- matrices ---------------------------------------------------------------------------------------------
def mesh3d(n: int):
    """The 27-point stencil on an n x n x n grid (values 26 on the diagonal, -1 off it), CSR."""
    import scipy.sparse as sps

    line = sps.csr_array(sps.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1]))
    line.eliminate_zeros()     # DIA storage pads its diagonals with zeros, which kron would keep
    cube = sps.kron(sps.kron(line, line, format="csr"), line, format="csr")   # (BSR would store zeros)
    cube.data[:] = -1.0
    cube.setdiag(26.0)
    cube = sps.csr_array(cube)
    cube.sort_indices()
    return cube


def powerlaw_graph(n: int, mean_degree: float, exponent: float = 2.3, seed: int = 0):
    """A symmetric Chung-Lu graph with power-law expected degrees (no self loops), 0/1 values, CSR."""
    import scipy.sparse as sps

    rng = np.random.default_rng(seed)
    weights = (np.arange(1, n + 1) ** (-1.0 / (exponent - 1.0)))
    weights *= mean_degree * n / weights.sum()
    edges = int(mean_degree * n / 2)
    p = weights / weights.sum()
    i, j = rng.choice(n, size=edges, p=p), rng.choice(n, size=edges, p=p)
    keep = i != j
    a = sps.coo_array((np.ones(keep.sum()), (i[keep], j[keep])), shape=(n, n)).tocsr()
    a = ((a + a.T) != 0).astype(np.float64)
    perm = rng.permutation(n)                    # hubs spread over the row blocks
    a = sps.csr_array(a[perm][:, perm])
    a.sort_indices()
    return a


def matrices(cfg: Config):
    if cfg.tiny:
        return [("mesh3d 10^3, 27-point", mesh3d(10)), ("power-law graph", powerlaw_graph(3000, 8))]
    if cfg.quick:
        return [("mesh3d 16^3, 27-point", mesh3d(16)), ("power-law graph", powerlaw_graph(10_000, 10))]
    return [("mesh3d 56^3, 27-point", mesh3d(56)), ("power-law graph", powerlaw_graph(300_000, 16))]


# -- checking ---------------------------------------------------------------------------------------------
def _check_exact(name, got, want):
    import scipy.sparse as sps

    if type(got) is not type(want) or np.shape(got) != np.shape(want) or got.dtype != want.dtype:
        raise BenchMismatch(f"{name}: {type(got).__name__} {np.shape(got)} {got.dtype} != single-process "
                            f"{type(want).__name__} {np.shape(want)} {want.dtype}")
    if sps.issparse(want):
        same = got.nnz == want.nnz and (got != want).nnz == 0
    else:
        same = np.array_equal(got, want)
    if not same:
        raise BenchMismatch(f"{name}: not bit-identical to the single-process drop-in")


def _check_close(name, got, want, rtol=1e-9):
    import scipy.sparse as sps

    if sps.issparse(want):
        got = sps.csr_array(got.tocsr() if hasattr(got, "tocsr") else got.to_scipy_sparse())
        err, scale = (abs(got - want).max() if got.nnz or want.nnz else 0.0), abs(want).max() if want.nnz else 0.0
    else:
        got = np.asarray(got.todense() if hasattr(got, "todense") else got)
        err, scale = float(np.max(np.abs(got - want), initial=0.0)), float(np.max(np.abs(want), initial=0.0))
    if np.shape(got) != np.shape(want) or not err <= rtol * max(scale, 1.0):
        raise BenchMismatch(f"{name}: differs from the single-process drop-in (max error {err})")


# -- the run ----------------------------------------------------------------------------------------------
def _ops(A, rng):
    """(op name, single-process drop-in, splyce.dask graph, dask + pydata graph) for matrix ``A``."""
    import scipy.sparse as sps

    import splyce
    from splyce.planner import dropin

    x = rng.random(A.shape[1])
    X = rng.random((A.shape[1], 16))
    L = sps.csr_array(sps.tril(A != 0, -1).astype(np.float64))   # 0/1: triangle sums are exact
    L.sort_indices()
    return [
        ("SpMV", lambda: dropin.matmul(A, x), lambda d: splyce.matmul(d["A"], x), lambda d: d["PA"] @ x),
        ("SpMM (16 columns)", lambda: dropin.matmul(A, X), lambda d: splyce.matmul(d["A"], X),
         lambda d: d["PA"] @ X),
        ("SpGEMM A @ A", lambda: dropin.matmul(A, A), lambda d: splyce.matmul(d["A"], d["Aw"]),
         lambda d: d["PA"] @ d["PAw"]),
        ("triangles sum(L * (L @ L))", lambda: dropin.einsum("ij,ik,kj->", L, L, L),
         lambda d: splyce.einsum("ij,ik,kj->", d["L"], d["L"], d["Lw"]),
         lambda d: _block_sums((d["PL"] @ d["PLw"]) * d["PL"]).sum()),
    ], L


def _block_sum(block):
    return np.asarray(block.sum().todense()).reshape(1, 1)


def _block_sums(x):
    """Each block's sum as NumPy: distributed's serializer drops the value of a 0-d pydata COO (its
    fill_value), so ``x.sum()`` on pydata chunks returns 0 on a distributed cluster."""
    return x.map_blocks(_block_sum, chunks=((1,) * x.numblocks[0], (1,) * x.numblocks[1]), dtype=x.dtype,
                        meta=np.empty((0, 0), dtype=x.dtype))


def _inputs(client, A, L, blocks: int):
    """The operands persisted on the client's workers: row blocks, one-chunk broadcast copies, pydata twins."""
    import distributed
    import sparse

    from splyce.dask import from_scipy
    from splyce.dask.blocks import whole

    rows = max(1, -(-A.shape[0] // blocks))
    meta = sparse.COO.from_numpy(np.zeros((0, 0)))
    to_pydata = sparse.COO.from_scipy_sparse
    arrays = {"A": from_scipy(A, rows), "Aw": whole(A), "L": from_scipy(L, rows), "Lw": whole(L)}
    arrays.update({"P" + k: v.map_blocks(to_pydata, meta=meta) for k, v in arrays.items()})
    persisted = client.persist(list(arrays.values()))
    with client.as_current():
        distributed.wait(persisted)
    return dict(zip(arrays, persisted))


def _gathered(client, graph):
    """The result joined here from its row blocks: ``client.compute`` joins sparse blocks on one worker,
    which needs twice the result's memory there (dask#7437) and killed workers on a power-law SpGEMM."""
    from dask.array.dispatch import concatenate_lookup

    blocks = client.gather(client.compute(graph.to_delayed().ravel().tolist()))
    if graph.ndim == 0:
        return blocks[0]
    return concatenate_lookup.dispatch(type(blocks[0]))(blocks, axis=0)


def _timed(client, graph):
    import distributed

    t0 = time.perf_counter()
    result = client.persist(graph)
    with client.as_current():
        distributed.wait(result)
    elapsed = time.perf_counter() - t0
    del result
    return elapsed


def _cluster(workers: int):
    import distributed

    cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
    return cluster, distributed.Client(cluster, set_as_default=False)


def run(cfg: Config) -> Result:
    clusters = {"1w": _cluster(1), "2w": _cluster(2)}     # both alive: runs interleave across them
    clients = {name: c for name, (_, c) in clusters.items()}
    rows = []
    try:
        rng = np.random.default_rng(0)
        for mname, A in matrices(cfg):
            ops, L = _ops(A, rng)
            data = {name: _inputs(c, A, L, 4) for name, c in clients.items()}
            bar = _progress(len(ops) * (2 if cfg.tiny else 3) * (cfg.n_repeats + 1), f"dask {mname}", cfg)
            for op, single, ours, theirs in ops:
                want = single()
                cands = {"splyce_1w": (ours, "1w"), "splyce_2w": (ours, "2w"), "pydata_2w": (theirs, "2w")}
                if cfg.tiny:    # the tests' mode: pydata's Numba JIT takes minutes in fresh worker processes
                    del cands["pydata_2w"]
                times = {name: Timing(name) for name in cands}
                for name, (build, c) in cands.items():     # warm-up (compiles) and check, never timed
                    got = _gathered(clients[c], build(data[c]))
                    check = _check_exact if name.startswith("splyce") else _check_close
                    check(f"dask {mname} {op} {name}", got, want)
                    del got
                    bar.update(1)
                for _ in range(cfg.n_repeats):              # interleaved repeats
                    for name, (build, c) in cands.items():
                        times[name].times.append(_timed(clients[c], build(data[c])))
                        bar.update(1)
                one, two, pd = (times[k].median if k in times else float("nan")
                                for k in ("splyce_1w", "splyce_2w", "pydata_2w"))
                rows.append({"matrix": mname, "rows": A.shape[0], "nnz": A.nnz, "op": op, "splyce_1w_s": one,
                             "splyce_2w_s": two, "speedup_2w_vs_1w": one / two, "pydata_2w_s": pd,
                             "splyce_vs_pydata": pd / two})
            bar.close()
            del data
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    note = ("Median of interleaved repeats; 4 row blocks; inputs persisted on the workers; a run is persist + "
            "wait (results stay distributed). 1w / 2w: LocalClusters of 1 and 2 worker processes (one thread "
            "each), both alive, runs interleaved. splyce results bit-identical to the single-process drop-in.")
    return Result("dask", "splyce.dask vs dask + pydata-sparse on a 2-worker LocalCluster", COLUMNS, rows, note,
                  plot=_plot)


def _plot(rows, ax):
    labels = [f"{r['op'].split()[0]}\n{r['matrix'].split()[0]}" for r in rows]
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["speedup_2w_vs_1w"] for r in rows], 0.4, label="splyce: 2 workers vs 1")
    ax.bar(xs + 0.2, [r["splyce_vs_pydata"] for r in rows], 0.4, label="splyce vs dask + pydata (2 workers)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(xs, labels, fontsize=7)
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8)
