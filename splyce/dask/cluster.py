"""Dask settings for clusters that run splyce: ``with dask.config.set(splyce.dask.CLUSTER_CONFIG):`` around
``LocalCluster(...)`` (or the same keys in a cluster's Dask configuration file).

Each undoes a Dask default that costs splyce's tasks CPU time or memory speed and gives them nothing:

- ``MALLOC_TRIM_THRESHOLD_`` unset in the workers' environment: Dask's nanny sets it to 65536, which turns
  off glibc's adaptive mmap threshold, so every array above 128 KB (kernel outputs, accumulators) is mapped
  and page-faulted afresh at each allocation: SpGEMM task bodies took 1.3-1.5x the CPU time (fem2d-250k,
  road-700). The price: freed memory goes back to the system later.
- the workers' statistical profiler off: it samples every worker thread's Python stack 100 times a second
  (for the dashboard's profile page), which sees only the call into a native kernel; an idle 2-worker
  LocalCluster's workers used 109 ms of CPU per second with it, 61 without.
- the event-loop health check every second instead of every 20 ms (it only warns of a blocked loop): with
  the profiler off, an idle 2-worker LocalCluster used 82 -> 40 ms of CPU per second in the client and
  scheduler process and 61 -> 32 in the workers.
- results fetched straight from the workers (``distributed.client.direct-to-workers``) by a client made
  inside the same ``with``: by default a ``.compute()`` result goes worker -> scheduler -> client, and the
  scheduler (in the client's process on a LocalCluster) receives, holds and re-sends all of it. A 216k-row
  3-D mesh SpGEMM (63 MB result) on a 1-worker LocalCluster, ``.compute()``: 1387 -> 422 ms (median of 7,
  loaded 2-core VM; docs/caches.md). A client that cannot reach the workers' addresses must leave it off.

With one single-threaded worker per core, all of that runs on the cores the tasks need.
"""

CLUSTER_CONFIG = {
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.client.direct-to-workers": True,
}
"""Dask settings for clusters that run splyce: ``with dask.config.set(splyce.dask.CLUSTER_CONFIG):`` around
``LocalCluster(...)``. It leaves ``MALLOC_TRIM_THRESHOLD_`` unset in the workers (Dask's 65536 makes every
array above 128 KB page-faulted afresh at each allocation), turns the workers' statistical profiler off and
checks the event loop's health every second instead of every 20 ms."""
