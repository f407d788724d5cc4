"""``dask --ops gathered``: issue 35's Dask row. A user's SpGEMM ``splyce.matmul(from_scipy(A), A).compute()``
on a 1-worker ``LocalCluster`` (one process, one thread, ``splyce.dask.CLUSTER_CONFIG``, a client made inside
it: results fetched straight from the worker), the result gathered in the client, against the single-process
drop-in ``splyce.matmul(A, A)`` on the same machine.

Matrix: a 3-D 7-point mesh (the 3-D Laplacian on an n x n x n grid: 60^3 = 216k rows, 1.49M nonzeros; its
product 5.25M nonzeros, 63 MB); ``--quick`` 30^3, the tests' mode 12^3; ``--matrices`` takes corpus entries.

Beside the user's call (``compute_1w_s``, and ``splyce.dask.gather``'s ``gather_1w_s``), the same transport
with no product, so what Dask itself costs for these byte sizes can be read off (all on the same cluster,
interleaved with the real runs):

- ``floor_1w_s``: ``A`` put in the graph as the real call puts it (the same bytes sent), and a task that
  returns, instead of computing it, the product already held by the worker (the same bytes back, as a
  ``FreshRows`` block: no finalize copy, as the real call). Wall time of the call minus this is the product
  and what is ours around it.
- ``floor_send_a_s``: ``A`` in the graph, an empty product back (sending ``A`` plus the round trip).
- ``floor_fetch_c_s``: nothing sent, the held product back (the round trip plus fetching the result).

``task_1w_s``: the worker's task (Dask's task stream: the product, and Dask's finalize fused into it);
``*_cpu_s``: CPU time of the call in all its processes (this one, where a ``LocalCluster``'s scheduler runs
too, plus the worker's), which the other jobs of a shared machine inflate much less than wall time.
"""

from __future__ import annotations

import logging
import time
import uuid

import numpy as np

from splyce.bench.common import BenchMismatch, Config, Result, Timing, _progress

COLUMNS = ["matrix", "rows", "nnz", "a_mb", "c_mb", "single_s", "compute_1w_s", "compute_vs_single",
           "gather_1w_s", "task_1w_s", "floor_1w_s", "floor_vs_single", "single_cpu_s", "compute_cpu_s",
           "compute_cpu_vs_single", "floor_cpu_s", "floor_cpu_vs_single", "floor_send_a_s",
           "floor_fetch_c_s"]

FULL, QUICK, TINY = 60, 30, 12      # grid points per side of the 7-point mesh
_SETTLE_S = 0.02                    # as bench dask's: the client's 10 ms message batching


def mesh3d(n: int):
    """The 7-point 3-D Laplacian on an n x n x n grid, a canonical float64 CSR array."""
    import scipy.sparse as sps

    t = sps.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1])
    eye = sps.eye_array(n)
    a = sps.kron(sps.kron(t, eye), eye) + sps.kron(sps.kron(eye, t), eye) + sps.kron(sps.kron(eye, eye), t)
    a = sps.csr_array(a)
    a.sort_indices()
    return a


def _matrices(cfg: Config, corpus_matrices):
    """The mesh for ``cfg``'s mode, or the corpus entries ``--matrices`` names (``corpus_matrices``: bench
    dask's ``matrices``, passed in: bench dask imports this module)."""
    if cfg.matrices:
        return corpus_matrices(cfg)
    n = TINY if cfg.tiny else QUICK if cfg.quick else FULL
    return [(f"mesh3d-{n} (3-D 7-point, {n}^3 rows)", mesh3d(n))]


def _mb(x) -> float:
    return (x.data.nbytes + x.indices.nbytes + x.indptr.nbytes) / 1e6


# -- the floors: Dask's transport, no product -------------------------------------------------------------
def _held_result(a, held):
    """A floor's task body: the product the worker already holds (``held``), as a result block, or (``held``
    None) an empty one of ``a``'s row count (``a`` None when nothing was sent)."""
    from splyce.dask.fresh import fresh_rows

    if held is None:
        return fresh_rows(type(a)((a.shape[0], a.shape[0]), dtype=a.dtype))
    return fresh_rows(held)


def _floor_graph(A, held, send_a: bool):
    """A one-chunk Dask array like the real call's: ``A`` in the graph (``send_a``) as ``from_scipy`` puts it,
    one task returning the held product (``held``: the future of it on the worker) or (None) an empty one."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    tag = uuid.uuid4().hex
    a_key = (f"bench-floor-a-{tag}", 0, 0)
    out = f"bench-floor-{tag}"
    layer = {a_key: A} if send_a else {}
    if held is not None:
        layer[held.key] = held
    layer[(out, 0, 0)] = (_held_result, a_key if send_a else None, None if held is None else held.key)
    return da.Array(HighLevelGraph.from_collections(out, layer), out, ((A.shape[0],), (A.shape[0],)),
                    meta=type(A)((0, 0), dtype=A.dtype))


def _cluster():
    import dask
    import distributed

    from splyce.dask import CLUSTER_CONFIG

    with dask.config.set(CLUSTER_CONFIG):
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=logging.ERROR)
        client = distributed.Client(cluster, set_as_default=False)
    client.get_task_stream(start=time.time())     # the scheduler records task spans from its first request on
    return cluster, client


def _task_seconds(client, since: float) -> float:
    """The summed compute spans of the run's product tasks: those that began since ``since``, give or take
    half the pause before each run (the scheduler shifts a worker's times by its estimate of the clocks'
    offset, a few ms either way, which dropped a task started at once in the tests' tiny runs; the previous
    run ended a whole pause before ``since``)."""
    total = 0.0
    for task in client.get_task_stream(start=since - _SETTLE_S / 2):
        if "splyce-matmul" not in str(task.get("key", "")):
            continue
        for span in task.get("startstops", ()):
            if span["action"] == "compute" and span["start"] >= since - _SETTLE_S / 2:
                total += span["stop"] - span["start"]
    return total


def _worker_cpu(client) -> float:
    """The worker processes' CPU time so far (user + system)."""
    return sum(client.run(time.process_time).values())


def _check(name, got, want):
    if type(got) is not type(want) or got.shape != want.shape or got.dtype != want.dtype \
            or got.nnz != want.nnz or (got != want).nnz:
        raise BenchMismatch(f"dask gathered {name}: not bit-identical to the single-process drop-in")


def run(cfg: Config, corpus_matrices) -> Result:
    import splyce
    import splyce.dask as sd
    cluster, client = _cluster()
    rows = []
    try:
        for label, A in _matrices(cfg, corpus_matrices):
            want = splyce.matmul(A, A)
            held = client.scatter(want, hash=False)        # the product, on the worker, for the floors

            def single():                  # the user's call (splyce.matmul: the drop-in, buffers reused)
                return splyce.matmul(A, A)

            def compute():
                with client.as_current():
                    return splyce.matmul(sd.from_scipy(A), A).compute()

            def gather():
                with client.as_current():
                    return sd.gather(splyce.matmul(sd.from_scipy(A), A), client)

            def floor(send_a, fetch_c):
                def call():
                    with client.as_current():
                        return _floor_graph(A, held if fetch_c else None, send_a).compute()
                return call

            cands = {"single": single, "compute_1w": compute, "gather_1w": gather,
                     "floor_1w": floor(True, True), "floor_send_a": floor(True, False),
                     "floor_fetch_c": floor(False, True)}
            for name in ("single", "compute_1w", "gather_1w"):    # warm-up (the worker compiles) and check
                _check(name, cands[name](), want)
            for name in ("floor_1w", "floor_send_a", "floor_fetch_c"):
                cands[name]()
            times = {name: Timing(name) for name in cands}
            tasks = Timing("task")
            cpu = {name: Timing(name) for name in ("single", "compute_1w", "floor_1w")}
            bar = _progress(cfg.n_repeats * len(cands), f"dask gathered {label}", cfg)
            names = list(cands)
            for r in range(cfg.n_repeats):                    # interleaved, the order rotated per repeat
                for name in names[r % len(names):] + names[:r % len(names)]:
                    # untimed: the worker's CPU so far (the single-process call has none to count)
                    worker0 = _worker_cpu(client) if name in cpu and name != "single" else 0.0
                    time.sleep(_SETTLE_S)
                    since, c0 = time.time(), time.process_time()
                    t0 = time.perf_counter()
                    result = cands[name]()
                    times[name].times.append(time.perf_counter() - t0)
                    c1 = time.process_time()
                    del result
                    if name == "single":
                        cpu[name].times.append(c1 - c0)
                    elif name in cpu:      # the worker's CPU read after the result was released there too
                        time.sleep(_SETTLE_S)
                        cpu[name].times.append(c1 - c0 + _worker_cpu(client) - worker0)
                    if name == "compute_1w":
                        tasks.times.append(_task_seconds(client, since))
                    bar.update(1)
            bar.close()
            med = {name: t.median for name, t in times.items()}
            rows.append({"matrix": label, "rows": A.shape[0], "nnz": A.nnz, "a_mb": _mb(A), "c_mb": _mb(want),
                         "single_s": med["single"], "compute_1w_s": med["compute_1w"],
                         "compute_vs_single": med["compute_1w"] / med["single"], "gather_1w_s": med["gather_1w"],
                         "task_1w_s": tasks.median, "floor_1w_s": med["floor_1w"],
                         "floor_vs_single": med["floor_1w"] / med["single"],
                         "single_cpu_s": cpu["single"].median, "compute_cpu_s": cpu["compute_1w"].median,
                         "compute_cpu_vs_single": cpu["compute_1w"].median / cpu["single"].median,
                         "floor_cpu_s": cpu["floor_1w"].median,
                         "floor_cpu_vs_single": cpu["floor_1w"].median / cpu["single"].median,
                         "floor_send_a_s": med["floor_send_a"], "floor_fetch_c_s": med["floor_fetch_c"]})
            del held
    finally:
        client.close()
        cluster.close()
    note = ("Median of interleaved repeats (order rotated per repeat, each run 20 ms after the previous). "
            "single: splyce.matmul(A, A) in this process (the drop-in's default threads). compute_1w: "
            "splyce.matmul(splyce.dask.from_scipy(A), A).compute() on a 1-worker LocalCluster (one process, "
            "one thread, splyce.dask.CLUSTER_CONFIG: results fetched straight from the worker); gather_1w: "
            "splyce.dask.gather of the same graph. floor_1w: the same bytes moved with no product (A in the "
            "graph, the product already held by the worker returned); floor_send_a: A sent, an empty result "
            "back; floor_fetch_c: nothing sent, the held product back. task_1w: the worker's task (product and "
            "Dask's finalize). *_cpu: CPU time of the call in this process (client and scheduler) and, but for "
            "single, the worker's, read before and after it (the worker's after the result's release). "
            "Results bit-identical to the single-process drop-in.")
    return Result("dask_gathered", "splyce.dask SpGEMM gathered to the client vs the single-process drop-in",
                  COLUMNS, rows, note)
