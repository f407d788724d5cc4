"""A cost model of ``splyce.dask`` calls: a call's wall time on P workers predicted from what was measured on
this cluster, apart in the three parts ``bench dask`` reports.

- **task**: the task bodies. Measured: the summed compute of all of a call's blocks on one worker (Dask's task
  stream); on P workers with one block each (row blocks of about equal nonzeros), each worker's share is
  ``1 / P`` of it (``blocks`` blocks over P workers: ``ceil(blocks / P) / blocks`` of it).
- **transfer**: bytes moved between workers over a bandwidth, plus a latency per message. What moves: for a
  chain of steps (``y = A @ y``, the vector left in row blocks by the step before), every worker receives the
  blocks it lacks, ``(1 - 1/P)`` of the vector in ``blocks - blocks / P`` messages, per step (the workers
  receive at once); a NumPy operand put in the call's graph goes client -> scheduler -> a worker, then spreads
  among the workers, each fetching from one that holds it (``ceil(log2 P)`` rounds).
- **scheduler**: a fixed round trip per call (graph sent, results reported) plus a time per task, the
  scheduler's own (it handles every task in turn, on one thread), plus, for a chain of steps, a worker ->
  scheduler -> worker round trip per step (a step's tasks start only once the scheduler has heard that the
  step before finished; Dask batches those messages, every 2 ms from a worker and 5 ms from the scheduler).

``calibrate(client)`` measures the overheads on a cluster: graphs of no-op tasks of several sizes, independent
(the fixed and per-task times, a least-squares line) and chained (the time per step), and, with two workers or more, a block made on one worker read by a
task on another (a few bytes, then 8 MB: latency and bandwidth). ``predict`` adds the parts. What it leaves
out, by design: the scheduler's work overlapping the tasks' (it is added), memory bandwidth shared by the
workers of one machine (a task's compute is taken as measured alone), a worker's join of the vector's blocks
(a copy of the vector per step, counted in the task bodies measured on one worker, not scaled), stragglers.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class Overheads:
    """What a cluster costs beyond the task bodies (seconds, bytes / second)."""

    fixed_s: float
    per_task_s: float
    latency_s: float = float("nan")
    bandwidth: float = float("nan")
    per_step_s: float = 0.0


@dataclass(frozen=True)
class Call:
    """A ``splyce.dask`` call as the model sees it.

    compute_s: every task body of the call, summed, on one worker. steps: tasks in sequence, one per block
    each step (1: one product). exchanged_bytes: per step, the operand each task reads whole that the step
    before left in row blocks (an SpMV chain's vector). sent_bytes: a NumPy operand put in the call's graph.
    """

    compute_s: float
    steps: int = 1
    exchanged_bytes: int = 0
    sent_bytes: int = 0


def predict(call: Call, ov: Overheads, workers: int, blocks: int | None = None) -> dict[str, float]:
    """Wall seconds of ``call`` on ``workers`` workers holding ``blocks`` row blocks, apart.

    Parameters
    ----------
    call : Call
        What the call computes and moves (its task bodies measured on one worker).
    ov : Overheads
        The cluster's overheads (``calibrate``).
    workers : int
        Worker processes of one thread each.
    blocks : int, optional
        Row blocks; None: one per worker.

    Returns
    -------
    dict
        ``task``, ``transfer``, ``scheduler`` and their sum ``total``, in seconds.

    Raises
    ------
    ValueError
        ``workers`` or ``blocks`` below 1.

    Examples
    --------
    >>> from splyce.dask.cost import Call, Overheads, predict
    >>> ov = Overheads(fixed_s=0.01, per_task_s=0.001, latency_s=0.001, bandwidth=1e9)
    >>> round(predict(Call(compute_s=0.8), ov, 8)["total"], 3)     # 0.1 of work each, 8 tasks
    0.118
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    blocks = workers if blocks is None else blocks
    if blocks < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks}")
    share = math.ceil(blocks / workers) / blocks
    task = call.compute_s * share
    bw = ov.bandwidth if ov.bandwidth > 0 else math.inf
    lat = ov.latency_s if ov.latency_s == ov.latency_s else 0.0
    transfer = 0.0
    if workers > 1:
        lacking = blocks - blocks // workers
        per_step = call.exchanged_bytes * (1 - 1 / workers) / bw + lacking * lat
        transfer = (call.steps - (1 if call.sent_bytes else 0)) * per_step if call.exchanged_bytes else 0.0
        if call.sent_bytes:
            transfer += math.ceil(math.log2(workers)) * (call.sent_bytes / bw + lat)
    scheduler = ov.fixed_s + ov.per_task_s * blocks * call.steps + ov.per_step_s * (call.steps - 1)
    if call.sent_bytes:          # client -> scheduler -> the first worker
        scheduler += 2 * call.sent_bytes / bw if bw < math.inf else 0.0
    return {"task": task, "transfer": transfer, "scheduler": scheduler, "total": task + transfer + scheduler}


# -- calibration ------------------------------------------------------------------------------------------
def _noop(*_):
    return None


def _nbytes(x):
    return x.nbytes


def _zeros(n):
    import numpy as np

    return np.ones(n, dtype=np.uint8)


def _run_graph(client, tasks: int, chain: bool = False) -> float:
    """Wall seconds of one graph of ``tasks`` no-op tasks, independent or (``chain``) each one waiting for
    the one before, persisted and waited for."""
    import distributed
    from dask.highlevelgraph import HighLevelGraph
    import dask.array as da
    import numpy as np

    name = "splyce-calibrate-" + uuid.uuid4().hex
    layer = {(name, k): (_noop, (name, k - 1) if chain and k else k) for k in range(tasks)}
    x = da.Array(HighLevelGraph.from_collections(name, layer), name, ((1,) * tasks,),
                 meta=np.empty(0, dtype=object))
    t0 = time.perf_counter()
    with client.as_current():
        result = client.persist(x)
        distributed.wait(result)
    elapsed = time.perf_counter() - t0
    del result
    time.sleep(0.02)        # the client's batched stream (every 10 ms) free again before the next graph
    return elapsed


def _fit(xs, ys) -> tuple[float, float]:
    """Least-squares (intercept, slope), both at least 0."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var, 0.0) if var else 0.0
    return max(my - slope * mx, 0.0), slope


def _transfer(client, workers: list, size: int, repeats: int) -> float:
    """Median seconds a task on worker 1 takes to get ``size`` bytes made on worker 0, beyond the same task
    on worker 0."""
    import distributed

    times = {0: [], 1: []}
    for _ in range(repeats):
        for side in (1, 0):
            block = client.submit(_zeros, size, workers=[workers[0]], pure=False)
            with client.as_current():
                distributed.wait(block)
            time.sleep(0.02)
            t0 = time.perf_counter()
            got = client.submit(_nbytes, block, workers=[workers[side]], allow_other_workers=False, pure=False)
            got.result()
            times[side].append(time.perf_counter() - t0)
            del got, block
            time.sleep(0.02)
    return max(statistics.median(times[1]) - statistics.median(times[0]), 0.0)


def calibrate(client, repeats: int = 5, sizes=(1, 8, 32)) -> Overheads:
    """The cluster's ``Overheads``, measured.

    No-op graphs of ``sizes`` tasks, independent and chained (median of ``repeats`` each, interleaved), fitted
    to fixed + per_task * tasks and the time per chained step; with two workers or more, the latency (8 bytes)
    and bandwidth (8 MB) of a transfer between two workers.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    repeats : int, optional
        Runs of each graph.
    sizes : tuple of int, optional
        Task counts of the no-op graphs.

    Returns
    -------
    Overheads
        latency_s and bandwidth NaN on a 1-worker cluster.
    """
    walls = {n: [] for n in sizes}
    chains = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            walls[n].append(_run_graph(client, n))
            chains[n].append(_run_graph(client, n, chain=True))
    fixed, per_task = _fit(list(sizes), [statistics.median(walls[n]) for n in sizes])
    # a chain's task waits for the one before: a worker -> scheduler -> worker round trip per step (Dask's
    # batched streams: every 2 ms from a worker, 5 ms from the scheduler), beyond the per-task time
    per_step = max(_fit(list(sizes), [statistics.median(chains[n]) for n in sizes])[1] - per_task, 0.0)
    workers = sorted(client.scheduler_info()["workers"])
    if len(workers) < 2:
        return Overheads(fixed, per_task, per_step_s=per_step)
    small, big = 8, 8 << 20
    latency = _transfer(client, workers, small, repeats)
    moving = _transfer(client, workers, big, repeats)
    bandwidth = (big - small) / max(moving - latency, 1e-6)
    return Overheads(fixed, per_task, latency, bandwidth, per_step)
