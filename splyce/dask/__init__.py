"""splyce on Dask: row-partitioned sparse arrays, and the drop-ins and jitted functions as lazy Dask graphs.

The left (or masked) operand is split into blocks of rows; each task runs the single-process drop-in on one
block, with the other operands broadcast as one Dask key (sent to each worker once, never per task). Results
stay row blocks until ``.compute()``, which returns what the single-process drop-in returns. Any Dask
scheduler runs the graphs: a ``distributed.Client`` on a ``LocalCluster`` or on an existing cluster.

Needs the ``dask`` extra: ``pip install 'splyce[dask]'``.
"""

try:
    import dask.array  # noqa: F401
except ImportError as exc:   # pragma: no cover - exercised in a subprocess without dask
    raise ImportError("splyce.dask needs Dask (dask[array] and distributed): pip install 'splyce[dask]'") \
        from exc

import splyce.dask.sizes  # noqa: F401  (Dask's sizeof of scipy sparse arrays)
from splyce.dask.blocks import broadcast, from_scipy, gather
from splyce.dask.blockwise import blockwise
from splyce.dask.cluster import CLUSTER_CONFIG
from splyce.dask.ops import add, einsum, matmul, multiply, subtract

__all__ = ["CLUSTER_CONFIG", "from_scipy", "broadcast", "gather", "blockwise", "matmul", "multiply", "add",
           "subtract", "einsum"]
