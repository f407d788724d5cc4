"""Where splyce.dask's SpGEMM time goes on 1 and 2 workers: docs/dask.md's accounting table.

``python docs/scripts/dask_spgemm_accounting.py [matrix] [repeats]`` (default ba-100k, 9). Two measurements of
the same 4 row blocks of about equal nonzeros (the bench's), each with 1 and 2 workers interleaved:

- *no Dask*: two plain processes (forked, each with its own copy of the blocks and of the right operand, as
  two workers have), each running its blocks' task bodies (``ops._call_block``) on a pool thread as a Dask
  worker does; "2" starts both halves at the same instant. This is the machine's ceiling for the tasks.
- *Dask*: ``python -m splyce.bench dask``'s two LocalClusters, with ``_call_block`` wrapped on the workers to
  read each task's thread CPU time, system time and page faults; the client/scheduler process's CPU time
  and each worker process's CPU time outside the task bodies per run.

Printed per mode, medians over the repeats (ms): wall, the busiest worker's task CPU, all tasks' CPU, their
system time and page faults, and (Dask) the wall time outside the busiest worker's tasks and Dask's own CPU.
Wall-clock ratios need a quiet machine; CPU times are the load-proof part.
"""

import itertools
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time

import numpy as np

# built matrices are kept where `python -m splyce.bench real` keeps them by default (its --out folder)
CACHE = os.environ.get("SPLYCE_CORPUS_CACHE", "bench-results/corpus-cache")


def _blocks(name: str, blocks: int = 4):
    """The matrix, its row blocks (the bench's: about equal nonzeros) and the block padding."""
    from splyce.bench import corpus
    from splyce.dask.blocks import nnz_bounds

    a = corpus.build({e.name: e for e in corpus.entries()}[name], cache_dir=CACHE)
    bounds = nnz_bounds(a.indptr, blocks=blocks)
    return a, [a[lo:hi] for lo, hi in itertools.pairwise(bounds)]


def _task_body(block, b, padded):
    """One task body as a worker runs it (the right operand converted once per process, as there)."""
    import functools

    from splyce.dask import ops
    from splyce import dropin
    from splyce.tensors.formats import CSR

    fn = functools.partial(dropin.matmul, out_format=None, threads=1)
    return ops._call_block(fn, block.shape[0], padded, ("pad", (CSR, "b")), True, block, b)


def _timed_blocks(blocks, b, padded, start, held):
    """Run ``blocks`` from wall time ``start`` on; (wall, thread CPU, system time, page faults)."""
    held.clear()                         # the previous run's results freed now, as Dask releases them
    while time.time() < start:
        pass
    r0, t0, w0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
    for block in blocks:
        held.append(_task_body(block, b, padded))
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    return (time.perf_counter() - w0, time.thread_time() - t0, r1.ru_stime - r0.ru_stime,
            r1.ru_minflt - r0.ru_minflt)


def _plain_worker(conn, name):
    from concurrent.futures import ThreadPoolExecutor

    a, blocks = _blocks(name)
    padded = max(x.shape[0] for x in blocks)
    pool, held = ThreadPoolExecutor(1), []
    pool.submit(lambda: [_task_body(x, a, padded) for x in blocks]).result()      # compile / load kernels
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        ks, start = msg
        conn.send(pool.submit(_timed_blocks, [blocks[k] for k in ks], a, padded, start, held).result())


def no_dask(name: str, repeats: int) -> dict:
    ctx = mp.get_context("fork")
    pipes = []
    for _ in range(2):
        mine, theirs = ctx.Pipe()
        ctx.Process(target=_plain_worker, args=(theirs, name), daemon=True).start()
        pipes.append(mine)
    for p in pipes:
        assert p.recv() == "ready"
    runs = {"1": [], "2": []}
    for _ in range(repeats):
        for mode, shares in (("1", [[0, 1, 2, 3]]), ("2", [[0, 1], [2, 3]])):
            start = time.time() + 0.05
            for p, ks in zip(pipes, shares):
                p.send((ks, start))
            runs[mode].append([p.recv() for p in pipes[:len(shares)]])
    for p in pipes:
        p.send(None)
    return {mode: {"wall": [max(w[0] for w in r) for r in rr], "busiest_cpu": [max(w[1] for w in r) for r in rr],
                   "cpu": [sum(w[1] for w in r) for r in rr], "sys": [sum(w[2] for w in r) for r in rr],
                   "faults": [sum(w[3] for w in r) for r in rr]} for mode, rr in runs.items()}


# -- in the Dask workers ------------------------------------------------------------------------------------
def _install():
    """Wrap ``ops._call_block`` (the graph names it by module and name) to log each task's costs."""
    from splyce.dask import ops

    orig = getattr(ops, "_unwrapped_call_block", ops._call_block)
    ops._unwrapped_call_block, ops._task_log = orig, []

    def logged(*args):
        r0, t0, w0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
        out = orig(*args)
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        ops._task_log.append((time.perf_counter() - w0, time.thread_time() - t0, r1.ru_stime - r0.ru_stime,
                              r1.ru_minflt - r0.ru_minflt))
        return out

    ops._call_block = logged


def _take_log():
    from splyce.dask import ops

    log, ops._task_log = ops._task_log, []
    return log


def with_dask(name: str, repeats: int) -> dict:
    import scipy.sparse as sps

    import splyce
    from splyce.bench import dask as bench

    a, _ = _blocks(name)
    lower = sps.csr_array(sps.tril(a != 0, -1).astype(np.float64))
    clusters = {mode: bench._cluster(int(mode)) for mode in ("1", "2")}
    runs = {mode: [] for mode in clusters}
    try:
        data = {m: bench._inputs(c, a, lower, 4) for m, (_, c) in clusters.items()}

        def build(d):
            return splyce.matmul(d["A"], d["Aw"])

        for m, (_, c) in clusters.items():
            bench._gathered(c, build(data[m]))
            bench._on_every_worker(c, build, data[m])
            c.run(_install)
        for _ in range(repeats):
            for m, (_, c) in clusters.items():
                c.run(_take_log)
                p0, m0 = c.run(time.process_time), time.process_time()
                wall, _ = bench._timed(c, build, data[m])
                m1, p1 = time.process_time(), c.run(time.process_time)
                logs = c.run(_take_log)
                tasks = [t for log in logs.values() for t in log]
                outside = sum(p1[w] - p0[w] for w in p1) - sum(t[1] for t in tasks)
                runs[m].append({"wall": wall, "busiest_wall": max(sum(t[0] for t in log) for log in logs.values()),
                                "busiest_cpu": max(sum(t[1] for t in log) for log in logs.values()),
                                "cpu": sum(t[1] for t in tasks), "sys": sum(t[2] for t in tasks),
                                "faults": sum(t[3] for t in tasks), "dask_cpu": (m1 - m0) + outside})
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    out = {}
    for m, rr in runs.items():
        out[m] = {k: [r[k] for r in rr] for k in rr[0]}
        out[m]["outside"] = [r["wall"] - r["busiest_wall"] for r in rr]
    return out


def _report(title: str, modes: dict) -> None:
    def ms(xs):
        return statistics.median(xs) * 1e3

    print(title)
    for m, r in modes.items():
        extra = (f"  outside the busiest tasks {ms(r['outside']):5.1f}  Dask's CPU {ms(r['dask_cpu']):5.1f}"
                 if "outside" in r else "")
        print(f"  {m} worker(s): wall {ms(r['wall']):6.1f}  busiest task CPU {ms(r['busiest_cpu']):6.1f}  "
              f"all tasks' CPU {ms(r['cpu']):6.1f} (system {ms(r['sys']):5.1f}, "
              f"{statistics.median(r['faults']):6.0f} faults){extra}")
    one, two = modes["1"], modes["2"]
    print(f"  1 / 2: wall {statistics.median(one['wall']) / statistics.median(two['wall']):.2f}, busiest task CPU "
          f"{statistics.median(one['busiest_cpu']) / statistics.median(two['busiest_cpu']):.2f}")


if __name__ == "__main__":
    matrix = sys.argv[1] if len(sys.argv) > 1 else "ba-100k"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    print(f"{matrix}, SpGEMM A @ A, 4 row blocks, median of {reps}; load average {os.getloadavg()[0]:.2f}")
    _report("no Dask (two plain processes):", no_dask(matrix, reps))
    _report("Dask (the bench's LocalClusters):", with_dask(matrix, reps))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
