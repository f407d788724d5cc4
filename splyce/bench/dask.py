"""``dask``: SpMV, SpMM, SpGEMM and triangle counting on a 2-worker Dask ``LocalCluster`` (processes, one
thread each): splyce.dask on 1 and 2 workers against dask.array + pydata-sparse chunks on the same cluster.

Matrices: the largest of the realistic corpus (``bench real``'s, docs/corpus.md): a 3-D and a 2-D finite-element
mesh (regular rows), the largest power-law graph (skewed rows, hubs) and the road-like graph (very short rows).
Both sides get the same inputs, already on the workers before timing: 4 row blocks of about equal nonzeros (for
1 and 2 workers alike), each worker holding an equal share, and the right operand as one chunk on every worker
(``splyce.dask.broadcast``, with Dask's Active Memory Manager stopped so the copies stay across repeats), except
the dense x / X of SpMV / SpMM: a NumPy operand, put in each run's graph and so sent again every run, as a user
passing one pays. "1 worker" and "2 workers" are two LocalClusters, both alive, so their runs interleave,
started with ``splyce.dask.CLUSTER_CONFIG``. A timed run is a user's call: the op's graph built, ``persist`` +
``wait``: the result stays on the workers in row blocks, as for data bigger than one machine (``.compute()``
would also join it on one worker and send it to the client: SpMM's 16 columns on fem2d-250k are 32 MB). Every
result is checked before timing: splyce's against the single-process drop-in, bit for bit; pydata's against it
within 1e-9 relative. The checking (warm-up) run of each candidate also records the peak resident memory of the
busiest worker process during that run (``*_peak_mb``: the persisted inputs plus what the op needs; Linux only).
``*_tasks_s``: the busiest worker's summed task bodies per timed run (Dask's task stream); the rest of the wall
time is Dask's own. ``dask_floor_2w_s``: Dask's floor for the op, the splyce 2-worker graph built the same way
(same inputs, x / X passed the same way, as many tasks and keys) with each block's product replaced by a no-op
returning an empty result of the same kind (``_floor``); ``max_vs_pydata`` = pydata_2w_s / dask_floor_2w_s,
the most any kernel could reach against pydata on this cluster. ``--ops`` / ``--matrices`` run a subset;
``--ops gathered`` runs issue 35's Dask row instead (``bench/dask_gathered.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import time

import numpy as np

from splyce.bench.common import BenchMismatch, Config, Result, Timing, _progress
from splyce.bench.real import _chosen

COLUMNS = ["matrix", "rows", "nnz", "op", "single_s", "splyce_1w_s", "splyce_2w_s", "splyce_1w_vs_single",
           "speedup_2w_vs_1w", "splyce_1w_tasks_s", "splyce_2w_tasks_s", "splyce_1w_transfer_s",
           "splyce_2w_transfer_s", "splyce_1w_sched_s", "splyce_2w_sched_s", "model_1w_s", "model_2w_s",
           "model_8w_s", "model_64w_s", "model_256w_s", "pydata_2w_s", "splyce_vs_pydata", "dask_floor_2w_s",
           "max_vs_pydata", "splyce_2w_peak_mb", "pydata_2w_peak_mb"]
# the cost model's predictions (splyce/dask/cost.py): workers -> column; 1 and 2 are checked against the runs
MODEL_WORKERS = {1: "model_1w_s", 2: "model_2w_s", 8: "model_8w_s", 64: "model_64w_s", 256: "model_256w_s"}
STEPS = 10      # the SpMV chain's steps

# --ops names -> the op labels of _ops
OPS = {"spmv": "SpMV", "spmm": "SpMM (16 columns)", "spgemm": "SpGEMM A @ A",
       "triangles": "triangles sum(L * (L @ L))", "steps": f"{STEPS} SpMV steps y = A @ y (one graph)",
       "jit": "jitted SpMM (16 columns), blockwise"}
# --ops gathered: its own run and table (bench/dask_gathered.py: issue 35's 1-worker SpGEMM gathered to the
# client against the single-process drop-in, with Dask's transport alone beside it)
GATHERED = "gathered"


# -- matrices ---------------------------------------------------------------------------------------------
# The corpus's largest matrix of each class that the issue asks for (docs/corpus.md): a 3-D mesh, a 2-D mesh,
# the largest power-law graph and the road-like graph; --quick: small entries of the same classes.
FULL = ("fem3d-100k", "fem2d-250k", "ba-100k", "road-700")
QUICK = ("fem2d-3k", "ba-4k", "road-100")
TINY = ("fem3d-1500", "rmat-s10")     # the tests' mode


def matrices(cfg: Config):
    """(label, canonical CSR) of the corpus entries for ``cfg``'s mode; built once, then read from
    ``<out>/corpus-cache`` (shared with ``bench real``)."""
    from pathlib import Path

    from splyce.bench import corpus

    by_name = {e.name: e for e in corpus.entries()}
    names = _chosen(cfg.matrices, list(by_name), "matrix") if cfg.matrices else \
        TINY if cfg.tiny else QUICK if cfg.quick else FULL
    cache = Path(cfg.out) / "corpus-cache"
    return [(f"{name} ({by_name[name].kind})", corpus.build(by_name[name], cache)) for name in names]


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
def _steps_single(A, x):
    from splyce import dropin

    y = x
    for _ in range(STEPS):
        y = dropin.matmul(A, y, threads=1)
    return y


def _steps_dask(A, x):
    """``STEPS`` SpMV steps as one graph: the first reads the NumPy ``x`` (one key), each later one the row
    blocks the step before left on the workers (each worker joins the blocks once, fetching those it lacks
    from the others: nothing goes through the client)."""
    import splyce

    y = x
    for _ in range(STEPS):
        y = splyce.matmul(A, y, threads=1)
    return y


@functools.cache
def _jitted_spmm():
    import splyce

    return splyce.jit(lambda a, x: a @ x, threads=1)


def _ops(A, rng):
    """(op name, single-process drop-in, splyce.dask graph, dask + pydata graph or None, the cost model's
    ``Call`` but its compute) for matrix ``A``."""
    import scipy.sparse as sps

    import splyce
    from splyce import dropin
    from splyce.dask import blockwise
    from splyce.dask.cost import Call

    x = rng.random(A.shape[1])
    X = rng.random((A.shape[1], 16))
    L = sps.csr_array(sps.tril(A != 0, -1).astype(np.float64))   # 0/1: triangle sums are exact
    L.sort_indices()
    spmm = _jitted_spmm()
    return [
        ("SpMV", lambda: dropin.matmul(A, x), lambda d: splyce.matmul(d["A"], x), lambda d: d["PA"] @ x),
        ("SpMM (16 columns)", lambda: dropin.matmul(A, X), lambda d: splyce.matmul(d["A"], X),
         lambda d: d["PA"] @ X),
        ("SpGEMM A @ A", lambda: dropin.matmul(A, A), lambda d: splyce.matmul(d["A"], d["Aw"]),
         lambda d: d["PA"] @ d["PAw"]),
        ("triangles sum(L * (L @ L))", lambda: dropin.einsum("ij,ik,kj->", L, L, L),
         lambda d: splyce.einsum("ij,ik,kj->", d["L"], d["L"], d["Lw"]),
         lambda d: _block_sums((d["PL"] @ d["PLw"]) * d["PL"]).sum()),
        (OPS["steps"], lambda: _steps_single(A, x), lambda d: _steps_dask(d["A"], x), None),
        (OPS["jit"], lambda: spmm(A, X), lambda d: blockwise(spmm)(d["A"], X), None),
    ], L, {"SpMV": Call(0.0, sent_bytes=x.nbytes), "SpMM (16 columns)": Call(0.0, sent_bytes=X.nbytes),
          "SpGEMM A @ A": Call(0.0), "triangles sum(L * (L @ L))": Call(0.0),
          OPS["steps"]: Call(0.0, steps=STEPS, exchanged_bytes=x.nbytes, sent_bytes=x.nbytes),
          OPS["jit"]: Call(0.0, sent_bytes=X.nbytes)}


# -- Dask's floor -----------------------------------------------------------------------------------------
def _no_product(kind, dtype, tail, first, *rest):
    """The floor's task body, in place of a block's drop-in (same operands, already padded / joined /
    converted by ``ops._call_block``): no product, an empty result of the drop-in's kind for the block's
    (padded) rows, which ``_call_block`` trims as it trims the real one: zeros or an empty scipy array; for a
    sum over the rows (``tail`` None) a zero scalar."""
    if tail is None:
        return dtype.type(0)
    shape = (first.shape[0],) + tail
    return np.zeros(shape, dtype=dtype) if kind is np.ndarray else kind(shape, dtype=dtype)


@contextlib.contextmanager
def _no_products():
    """While active (in this process, where graphs are built), splyce.dask's ops build their graphs as usual
    (``ops._partitioned_graph``: same operands, broadcast keys, padding, once-per-worker joins and
    conversions, as many tasks and keys) but with ``_no_product`` as each block's function, and under their own key
    prefix (``splyce-floor-...``: distributed estimates a task's duration by its key's prefix, so the no-op
    tasks leave the real ones' estimates alone)."""
    from splyce.dask import ops

    real = ops._partitioned_graph

    def floor(fn, parts, broadcast, order, out_chunks, meta, reduce, name, converted=None):
        tail = None if reduce else tuple(c[0] for c in out_chunks[1:])
        if reduce and out_chunks:
            raise NotImplementedError("the floor of a sum over the rows with a non-scalar result")
        noop = functools.partial(_no_product, type(meta), np.dtype(meta.dtype), tail)
        return real(noop, parts, broadcast, order, out_chunks, meta, reduce, "floor-" + name, converted)

    ops._partitioned_graph = floor
    try:
        yield
    finally:
        ops._partitioned_graph = real


def _floor(build):
    """``build`` (a splyce.dask op's graph from the inputs) with no products (``_no_products``)."""
    def floor_build(d):
        with _no_products():
            return build(d)
    return floor_build


def _check_kind(name, got, want):
    """The floor's result: the drop-in's type and shape (its values are zeros)."""
    if type(got) is not type(want) or np.shape(got) != np.shape(want):
        raise BenchMismatch(f"{name}: {type(got).__name__} {np.shape(got)} != single-process "
                            f"{type(want).__name__} {np.shape(want)}")


def _block_sum(block):
    return np.asarray(block.sum().todense()).reshape(1, 1)


def _block_sums(x):
    """Each block's sum as NumPy: distributed's serializer drops the value of a 0-d pydata COO (its
    fill_value), so ``x.sum()`` on pydata chunks returns 0 on a distributed cluster."""
    return x.map_blocks(_block_sum, chunks=((1,) * x.numblocks[0], (1,) * x.numblocks[1]), dtype=x.dtype,
                        meta=np.empty((0, 0), dtype=x.dtype))


def _inputs(client, A, L, blocks: int):
    """The operands already on the client's workers, as data bigger than one machine would be: row blocks of
    about equal nonzeros (``from_scipy``'s default; equal rows left a power-law SpGEMM's blocks 1.9x apart in
    work), the same ``blocks`` for any number of workers, each worker holding an equal share
    (consecutive blocks); the broadcast right operands on every worker (``splyce.dask.broadcast``; the AMM is
    stopped in ``_cluster``, so those copies stay across repeats); pydata twins placed alike."""
    import sparse

    from splyce.dask import broadcast
    from splyce.dask.blocks import nnz_bounds, sparse_meta

    workers = sorted(client.scheduler_info()["workers"])
    to_pydata = sparse.COO.from_scipy_sparse
    arrays = {}
    for name, X in (("A", A), ("L", L)):
        bounds = nnz_bounds(X.indptr, blocks=blocks)     # L's own: its rows are not A's (tril of a power law)
        cuts = [X[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
        chunks = (tuple(hi - lo for lo, hi in zip(bounds, bounds[1:])), (X.shape[1],))
        arrays[name] = _scattered(client, f"bench-{name}", cuts, chunks, sparse_meta(X), workers)
        arrays["P" + name] = _scattered(client, f"bench-P{name}", [to_pydata(c) for c in cuts], chunks,
                                        sparse_meta(to_pydata(X[:0])), workers)
        arrays[name + "w"] = broadcast(X, client)
        arrays["P" + name + "w"] = broadcast(to_pydata(X), client)
    return arrays


def _scattered(client, name: str, blocks: list, chunks, meta, workers):
    """A Dask array of row blocks already in the workers' memory: block k on worker ``k * len(workers) //
    len(blocks)`` (consecutive blocks share a worker)."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    name = f"{name}-{tokenize(blocks)}"      # a new matrix's blocks never reuse a released key
    layer = {}
    for k, block in enumerate(blocks):
        key = (name, k, 0)
        worker = workers[k * len(workers) // len(blocks)]
        layer.update(client.scatter({key: block}, workers=[worker], hash=False))
    return da.Array(HighLevelGraph.from_collections(name, layer), name, chunks, meta=meta)


def _gathered(client, graph):
    """The result joined here from its row blocks fetched straight from the workers (``splyce.dask.gather``):
    ``.compute()`` joins sparse blocks on one worker, which needs twice the result's memory there (dask#7437)
    and killed workers on a power-law SpGEMM, and sends it through the scheduler."""
    from splyce.dask import gather

    return gather(graph, client)


def _reset_peak_rss() -> None:
    """Restart this process's peak resident set (VmHWM) from its current size (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    """This process's peak resident set since the last reset, in MB (NaN where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return float("nan")


def _checked_with_peak(client, graph):
    """The result joined here (``_gathered``) and the busiest worker's peak memory while it was computed."""
    client.run(_reset_peak_rss)
    got = _gathered(client, graph)
    return got, max(client.run(_peak_rss_mb).values())


def _on_every_worker(client, build, data) -> None:
    """One untimed run of the graph on each worker alone: every worker process has compiled (or loaded from
    the disk cache) the op's kernels and native helpers before timing, whichever worker the checking run's
    tasks went to, for 1 and 2 workers alike."""
    import distributed

    for worker in client.scheduler_info()["workers"]:
        result = client.persist(build(data), workers=[worker], allow_other_workers=False)
        with client.as_current():
            distributed.wait(result)
        del result


# The client batches its messages to the scheduler (distributed's BatchedSend, every 10 ms): a message sent
# within 10 ms of the previous one waits for the next batch. The previous run's release (``del result``) is such
# a message, so a run started right after another one on the same client waited for its graph to leave: +9-12
# ms measured (tiny mode, 15 repeats; none with a pause of 8 ms or more). Each timed run starts after this pause.
_SETTLE_S = 0.02


def _timed(client, build, data) -> tuple[float, float, float, float]:
    """(wall seconds of a user's call: building the op's graph (``build(data)``), persist + wait; the busiest
    worker's summed task-body seconds in that run, from Dask's task stream; that worker's summed transfer
    seconds (blocks fetched from other workers for its tasks); every worker's task bodies summed). The wall
    time minus the busiest worker's task bodies and transfers is what Dask's scheduling took: sending the graph
    and the operands in it, scheduling, results reported back."""
    import distributed

    for attempt in range(_ATTEMPTS):
        time.sleep(_SETTLE_S * (1 + 5 * attempt))   # untimed: the client's stream is free again (_SETTLE_S)
        since = time.time()
        t0 = time.perf_counter()
        with client.as_current():
            graph = build(data)
            result = client.persist(graph)
            distributed.wait(result)
        elapsed = time.perf_counter() - t0
        del result, graph
        busy: dict = {}
        moving: dict = {}
        # get_task_stream's start= bisects the stream by stop times, which are not in order across workers,
        # so it can hand back a previous run's tasks: only the spans that began in this run count
        for task in client.get_task_stream(start=since):
            for span in task.get("startstops", ()):
                if span["start"] < since:
                    continue
                into = busy if span["action"] == "compute" else moving if span["action"] == "transfer" else None
                if into is not None:
                    into[task["worker"]] = into.get(task["worker"], 0.0) + span["stop"] - span["start"]
        if busy:
            worker = max(busy, key=lambda w: busy[w] + moving.get(w, 0.0))
            return elapsed, busy[worker], moving.get(worker, 0.0), sum(busy.values())
    raise RuntimeError(f"dask bench: no task ran in {_ATTEMPTS} runs of the op (its keys stayed in memory)")


# A run in which no task computed found the op's keys (the same graph, the same names) still in the workers'
# memory: the previous run's release had not reached the scheduler yet (seen once on a loaded 2-core VM, in
# tiny mode: the run took no time and recorded no task). Such a run is not a measurement: it is run again,
# after a longer pause.
_ATTEMPTS = 3


def _single_timed(call) -> float:
    """Wall seconds of the single-process call on one thread (as a task runs), started after the same pause
    as a cluster run."""
    import splyce

    time.sleep(_SETTLE_S)
    with splyce.use_threads(1):
        t0 = time.perf_counter()
        call()
        return time.perf_counter() - t0


def _sched(times, tasks, moves, name) -> float:
    """Dask's scheduling share of a run: the wall time beyond the busiest worker's task bodies and transfers
    (per run, then the median)."""
    return float(np.median([w - t - m for w, t, m in zip(times[name].times, tasks[name].times,
                                                          moves[name].times)]))


def _cluster(workers: int):
    import dask
    import distributed

    from splyce.dask import CLUSTER_CONFIG

    # README's settings for splyce clusters (splyce/dask/cluster.py: no MALLOC_TRIM_THRESHOLD_, no profiler,
    # a slower event-loop check), for the scheduler, the workers and the client alike
    with dask.config.set(CLUSTER_CONFIG):
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=logging.ERROR)
        client = distributed.Client(cluster, set_as_default=False)
    # Dask's Active Memory Manager drops a key's extra copies within 2 s when no task waits for them: the
    # broadcast operand would be sent again to every worker but one at each repeat; a user repeating
    # products with one broadcast operand keeps its copies the same way
    client.amm.stop()
    client.get_task_stream(start=time.time())     # the scheduler records task spans from its first request on
    return cluster, client


def run(cfg: Config) -> Result:
    if GATHERED in cfg.ops:
        if len(cfg.ops) > 1:
            raise SystemExit(f"--ops {GATHERED} runs alone (its own table)")
        from splyce.bench import dask_gathered

        return dask_gathered.run(cfg, matrices)
    from splyce.dask.cost import calibrate, predict

    clusters = {"1w": _cluster(1), "2w": _cluster(2)}     # both alive: runs interleave across them
    clients = {name: c for name, (_, c) in clusters.items()}
    rows = []
    overheads = {}
    try:
        rng = np.random.default_rng(0)
        chosen = {OPS[n] for n in _chosen(cfg.ops, list(OPS), "op")}
        overheads = {name: calibrate(c, repeats=max(3, min(cfg.n_repeats, 7))) for name, c in clients.items()}
        for mname, A in matrices(cfg):
            ops, L, calls = _ops(A, rng)
            ops = [o for o in ops if o[0] in chosen]
            data = {name: _inputs(c, A, L, 4) for name, c in clients.items()}
            bar = _progress(len(ops) * 5 * (cfg.n_repeats + 1), f"dask {mname}", cfg)
            for op, single, ours, theirs in ops:
                want = single()
                cands = {"single": (single, None), "splyce_1w": (ours, "1w"), "splyce_2w": (ours, "2w"),
                         "floor_2w": (_floor(ours), "2w"), "pydata_2w": (theirs, "2w")}
                if cfg.tiny or theirs is None:    # tiny (the tests' mode): pydata's Numba JIT takes minutes in
                    del cands["pydata_2w"]        # fresh worker processes
                times = {name: Timing(name) for name in cands}
                tasks = {name: Timing(name) for name in cands}
                moves = {name: Timing(name) for name in cands}
                totals = {name: Timing(name) for name in cands}
                peaks = {}
                for name, (build, c) in cands.items():     # warm-up (compiles) and check, never timed
                    if c is None:
                        continue
                    got, peaks[name] = _checked_with_peak(clients[c], build(data[c]))
                    check = _check_exact if name.startswith("splyce") else \
                        _check_kind if name.startswith("floor") else _check_close
                    check(f"dask {mname} {op} {name}", got, want)
                    del got
                    if not name.startswith("pydata"):
                        _on_every_worker(clients[c], build, data[c])
                    bar.update(1)
                for _ in range(cfg.n_repeats):              # interleaved repeats
                    for name, (build, c) in cands.items():
                        if c is None:                       # the single process, one thread as a task
                            wall = _single_timed(build)
                            busiest = moved = total = wall
                        else:
                            wall, busiest, moved, total = _timed(clients[c], build, data[c])
                        times[name].times.append(wall)
                        tasks[name].times.append(busiest)
                        moves[name].times.append(moved)
                        totals[name].times.append(total)
                        bar.update(1)
                single_s, one, two, floor, pd = (times[k].median if k in times else float("nan")
                                                 for k in ("single", "splyce_1w", "splyce_2w", "floor_2w",
                                                           "pydata_2w"))
                call = dataclasses.replace(calls[op], compute_s=totals["splyce_1w"].median)
                model = {col: predict(call, overheads["1w" if w == 1 else "2w"], w, 4 if w <= 2 else None)["total"]
                         for w, col in MODEL_WORKERS.items()}
                rows.append({"matrix": mname, "rows": A.shape[0], "nnz": A.nnz, "op": op, "single_s": single_s,
                             "splyce_1w_s": one, "splyce_2w_s": two, "splyce_1w_vs_single": one / single_s,
                             "speedup_2w_vs_1w": one / two,
                             "splyce_1w_tasks_s": tasks["splyce_1w"].median,
                             "splyce_2w_tasks_s": tasks["splyce_2w"].median,
                             "splyce_1w_transfer_s": moves["splyce_1w"].median,
                             "splyce_2w_transfer_s": moves["splyce_2w"].median,
                             "splyce_1w_sched_s": _sched(times, tasks, moves, "splyce_1w"),
                             "splyce_2w_sched_s": _sched(times, tasks, moves, "splyce_2w"),
                             **model, "pydata_2w_s": pd,
                             "splyce_vs_pydata": pd / two, "dask_floor_2w_s": floor,
                             "max_vs_pydata": pd / floor, "splyce_2w_peak_mb": peaks["splyce_2w"],
                             "pydata_2w_peak_mb": peaks.get("pydata_2w", float("nan"))})
            bar.close()
            del data
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    note = ("Median of interleaved repeats; 4 row blocks of about equal nonzeros, an equal share on each "
            "worker; broadcast operands on every worker (AMM stopped); a run is the op's graph built, persist + wait "
            "(results stay distributed, in row blocks, not sent to the client). 1w / 2w: LocalClusters of 1 and 2 worker processes (one thread each), both alive, "
            "runs interleaved, each started 20 ms after the previous one (the client sends its messages in "
            "batches every 10 ms); clusters started with splyce.dask.CLUSTER_CONFIG (no MALLOC_TRIM_THRESHOLD_, no "
            "worker profiler, event-loop check every 1 s); the untimed checking run "
            "loads every worker's kernels. *_tasks_s: the busiest worker's summed task bodies per run (task "
            "stream; the rest of the wall time is Dask's own). The dense x / X of SpMV / SpMM is put in each "
            "run's graph (sent again every run, as a user passing a NumPy operand pays). splyce results "
            "bit-identical to the single-process drop-in. *_peak_mb: peak resident memory of the busiest worker "
            "during the checking run (inputs included). dask_floor_2w_s: the splyce 2w graph with every "
            "block's product replaced by a no-op returning an empty result of the same kind (same inputs, x / X "
            "sent the same way, as many tasks and keys; the blocks' padding and trimming kept), i.e. Dask's own "
            "cost of the call, below which no kernel can go, so max_vs_pydata = pydata_2w_s / dask_floor_2w_s "
            "is the largest splyce_vs_pydata attainable on this cluster. "
            "Matrices: the corpus's (docs/corpus.md).")
    note += (" single_s: the single-process drop-in (or jitted function) on one thread, as a task runs it, "
             "interleaved with the cluster runs. *_transfer_s: the busiest worker's blocks fetched from other "
             "workers; *_sched_s: the rest of the wall time beyond its task bodies and transfers (graph sent, "
             "scheduling, results reported). model_*: the cost model (splyce/dask/cost.py): the summed task "
             "bodies of the 1-worker runs, split over P workers (4 blocks for 1 and 2 workers as run, one per "
             "worker beyond), plus transfers and scheduling with the overheads calibrated on these clusters: "
             + "; ".join(f"{name}: fixed {ov.fixed_s * 1e3:.1f} ms, {ov.per_task_s * 1e3:.2f} ms per task, "
                         f"{ov.per_step_s * 1e3:.2f} ms per chained step"
                         + ("" if ov.bandwidth != ov.bandwidth else
                            f", transfer latency {ov.latency_s * 1e3:.2f} ms, {ov.bandwidth / 1e6:.0f} MB/s")
                         for name, ov in overheads.items()) + f"; load average {os.getloadavg()[0]:.1f} at the end.")
    return Result("dask", "splyce.dask vs dask + pydata-sparse on a 2-worker LocalCluster", COLUMNS, rows, note,
                  plot=_plot)


def _plot(rows, ax):
    labels = [f"{r['op'].split()[0]}\n{r['matrix'].split()[0]}" for r in rows]
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["speedup_2w_vs_1w"] for r in rows], 0.4, label="splyce: 2 workers vs 1")
    ax.bar(xs + 0.2, [r["splyce_vs_pydata"] for r in rows], 0.4, label="splyce vs dask + pydata (2 workers)")
    ax.scatter(xs + 0.2, [r["max_vs_pydata"] for r in rows], marker="_", s=200, color="black", zorder=3,
               label="at most (pydata / Dask's floor)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(xs, labels, fontsize=7)
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8)
