"""Dask's ``sizeof`` for scipy.sparse *arrays* (``csr_array``, ``coo_array``, ...): Dask registers one for
scipy's sparse *matrices* only (``spmatrix``), so it counted every sparse-array block (the chunks of
``from_scipy`` on an array and of every ``splyce.dask`` result from one) as 56 bytes, an empty Python object:
its workers saw a 330 MB SpGEMM result (ba-100k) as unmanaged memory they could not spill, and the scheduler
weighed moving a block as free. Registered when ``splyce.dask`` is imported: in the client, and in a worker
when it first unpickles a splyce task (blocks it received before that keep the size Dask gave them)."""

from dask.sizeof import sizeof
from scipy import sparse

# (not sizeof.register_lazy("scipy"): one lazy registration per module name, it would replace Dask's own)
if hasattr(sparse, "sparray"):     # scipy >= 1.11

    @sizeof.register(sparse.sparray)
    def _sizeof_sparray(x):
        # the attributes' sizes, as Dask's spmatrix sizeof sums them: the index and value arrays (a COO's
        # coordinates are a tuple of arrays) plus the small ones
        return sum(sizeof(v) for v in vars(x).values())

    # Dask's dispatch caches the function it found for each class: a sparse array sized before this import
    # (a block a worker received) left its class cached to the default
    _cached = getattr(sizeof, "_lookup", {})
    for _cls in [c for c in _cached if isinstance(c, type) and issubclass(c, sparse.sparray)
                 and c is not sparse.sparray]:
        del _cached[_cls]
