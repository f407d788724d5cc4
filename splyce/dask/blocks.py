"""Row blocks: Dask arrays whose chunks are blocks of whole rows, broadcast operands, padding.

Every block of a row-partitioned operand is padded with empty rows to the largest block's row count before a
kernel sees it, so all blocks share one kernel signature (one compile per machine, not one per block), and
each block's result is trimmed back to its own rows.
"""

from __future__ import annotations

import math
import os
import sys
import uuid
import weakref

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from splyce.dask.fresh import plain
from splyce.dropin import operand_family


def is_dask(x) -> bool:
    return isinstance(x, da.Array)


def _parallelism() -> int:
    """Worker threads of the current distributed client, else this machine's cores. A client of a cluster
    object (``LocalCluster``, ...) reads them from the cluster's ``scheduler_info``, which the scheduler keeps
    up to date; asking the scheduler (``client.nthreads()``) is a round trip, 5-7 ms of each ``from_scipy``
    on a loaded 2-core machine."""
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            client = distributed.get_client()
        except (ValueError, RuntimeError):
            return os.cpu_count() or 1
        workers = getattr(getattr(client, "cluster", None), "scheduler_info", {}).get("workers")
        if workers and all("nthreads" in w for w in workers.values()):
            return max(1, sum(w["nthreads"] for w in workers.values()))
        try:
            return max(1, sum(client.nthreads().values()))
        except (ValueError, RuntimeError):
            pass
    return os.cpu_count() or 1


def _chunk_bytes() -> int:
    return int(dask.utils.parse_bytes(dask.config.get("array.chunk-size")))


def nnz_bounds(indptr: np.ndarray, rows_per_chunk: int | None = None, blocks: int | None = None) -> list[int]:
    """Row boundaries [0, ..., m]: ``rows_per_chunk`` rows each, or (None) about equal nonzeros per block:
    ``blocks`` blocks, or (None) one per worker thread or as many as Dask's ``array.chunk-size`` needs,
    whichever is more. One block per thread, not more: every block costs its task a fixed share (scheduling,
    its result's own buffers and page faults, a join at the end), and a 1-thread worker given 2 blocks of a
    216k-row 3-D mesh SpGEMM paid a second task plus a 63 MB join of the two results on ``.compute()``."""
    m = len(indptr) - 1
    if m == 0:
        return [0, 0]
    if rows_per_chunk is not None:
        if blocks is not None:
            raise ValueError("give rows_per_chunk or blocks, not both")
        if not isinstance(rows_per_chunk, (int, np.integer)) or rows_per_chunk < 1:
            raise ValueError(f"rows_per_chunk must be a positive int, got {rows_per_chunk!r}")
        return [*range(0, m, int(rows_per_chunk)), m]
    nnz = int(indptr[-1])
    if blocks is not None:
        if not isinstance(blocks, (int, np.integer)) or blocks < 1:
            raise ValueError(f"blocks must be a positive int, got {blocks!r}")
    else:
        blocks = max(_parallelism(), math.ceil(nnz * 16 / _chunk_bytes()))
    blocks = min(int(blocks), m)
    if nnz == 0:
        inner = [m * k // blocks for k in range(1, blocks)]
    else:
        inner = np.searchsorted(indptr, nnz * np.arange(1, blocks) / blocks, side="left").tolist()
    return sorted({0, m, *(min(max(int(b), 1), m - 1) for b in inner if m > 1)})


def _as_array(name: str, layer: dict, dependencies, chunks, meta) -> da.Array:
    graph = HighLevelGraph.from_collections(name, layer, dependencies=dependencies)
    return da.Array(graph, name, chunks, meta=meta)


def sparse_meta(x, dtype=None):
    """An empty object of ``x``'s type (a Dask ``meta``)."""
    dtype = np.dtype(dtype if dtype is not None else x.dtype)
    family = operand_family(x)
    if family.startswith("scipy"):
        return type(x)((0,) * x.ndim, dtype=dtype)
    if family == "pydata":
        import sparse

        return sparse.COO.from_numpy(np.empty((0,) * x.ndim, dtype=dtype))
    return np.empty((0,) * np.ndim(x), dtype=dtype)


def from_scipy(a, rows_per_chunk: int | None = None, *, blocks: int | None = None) -> da.Array:
    """A Dask array of row blocks of the 2-D scipy.sparse ``a``, each chunk a scipy CSR.

    ``a`` is checked first, as the single-process drop-in checks it (scipy's own row slicing would drop an
    out-of-range column silently). A CSR ``a`` is not copied: its blocks are views of ``a``'s own arrays
    (``data``, ``indices``, ``indptr``), put in the graph under a fresh name (no hash of the data), and the
    same ``a`` passed again to an operation on that Dask array (``splyce.matmul(from_scipy(a), a)``,
    ``splyce.multiply(from_scipy(a), a)``) is read from these blocks, not sent a second time (the latest
    ``from_scipy`` of ``a`` whose array is still in use). So ``a`` must not be modified while the returned
    array, or anything computed from it, is in use (a Dask array built by Dask's own ``from_array`` holds its
    input the same way); another format is converted to a CSR copy first.

    Parameters
    ----------
    a : scipy.sparse array or matrix or dask.array.Array
        The matrix (any scipy format; chunks are CSR arrays, or CSR matrices for a scipy matrix). A Dask
        array is returned as it is (chunks of scipy.sparse or pydata-sparse are accepted by every
        ``splyce.dask`` operation).
    rows_per_chunk : int, optional
        Rows per block. None: blocks of about equal nonzeros (about equal work for a product's rows,
        power-law rows included).
    blocks : int, optional
        With ``rows_per_chunk=None``, the number of blocks; None: one per thread of the current distributed
        client's workers (or per core of this machine), more when Dask's ``array.chunk-size`` asks for it.

    Returns
    -------
    dask.array.Array
        The row blocks.

    Raises
    ------
    TypeError
        ``a`` is not a 2-D scipy.sparse array or matrix.
    ValueError
        A malformed ``a`` (naming the defect), or both ``rows_per_chunk`` and ``blocks``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce, splyce.dask
    >>> A = sps.random_array((1000, 1000), density=0.01, format="csr", rng=0)
    >>> Ad = splyce.dask.from_scipy(A, blocks=4)
    >>> Ad.numblocks
    (4, 1)
    >>> y = splyce.matmul(Ad, np.ones(1000)).compute()
    >>> np.array_equal(y, splyce.matmul(A, np.ones(1000)))
    True
    """
    if is_dask(a):
        return a
    import scipy.sparse as sps

    if not sps.issparse(a) or a.ndim != 2:
        raise TypeError(f"from_scipy needs a 2-D scipy.sparse array or matrix, got {type(a).__name__}")
    csr = checked_csr(a)
    blocks = _row_sliced(csr, nnz_bounds(csr.indptr, rows_per_chunk, blocks), "splyce-from-scipy-")
    if csr is a:
        _remember_cut(a, blocks)
    return blocks


def checked_csr(a, name: str = "a"):
    """The 2-D scipy.sparse ``a`` as a scipy CSR of its own kind (array or matrix), refused with the drop-ins'
    ValueError (naming the defect) when its index arrays are malformed. Needed before any cut: scipy's row
    slicing silently drops columns out of range (a wrong answer where the single-process drop-in refuses),
    and its conversions trust the index arrays (an out-of-range one is written out of bounds). A CSR with
    int32 / int64 indices is checked where it is (one native scan when canonical; unsorted or duplicate
    columns are fine: each block's drop-in handles them as the single-process call does); anything else goes
    the drop-ins' road (``asarray`` checks it and canonicalizes a copy)."""
    import scipy.sparse as sps

    from splyce.tensors.formats import CSR
    from splyce.tensors.tensor import asarray
    from splyce.tensors.validation import NotCanonicalError, check_buffers, check_dtype

    ints = (np.dtype(np.int32), np.dtype(np.int64))
    if (a.format == "csr" and a.indptr.dtype in ints and a.indices.dtype in ints and a.data.dtype.isnative
            and all(x.ndim == 1 and x.flags.c_contiguous for x in (a.indptr, a.indices, a.data))):
        check_dtype(a.dtype, name)
        fmt = CSR.with_widths(a.indptr.dtype.itemsize * 8, a.indices.dtype.itemsize * 8)
        try:
            check_buffers(a.shape, fmt, (None, a.indptr), (None, a.indices), a.data, name)
        except NotCanonicalError:
            pass
        return a
    csr = asarray(a, name=name).to_scipy().tocsr()
    return csr if isinstance(a, sps.sparray) else sps.csr_matrix(csr)


def _row_sliced(x, bounds: list[int], prefix: str) -> da.Array:
    """``x`` (NumPy, scipy CSR or pydata) cut into the row blocks [bounds[k], bounds[k+1]), on the client,
    under a fresh name (``_fresh_name``); NumPy and scipy blocks are views of ``x``'s arrays."""
    name = _fresh_name(prefix)
    rest = tuple((s,) for s in x.shape[1:])
    family = operand_family(x)
    cut = _pydata_rows if family == "pydata" else _csr_rows if family.startswith("scipy") else \
        (lambda x, lo, hi: x[lo:hi])
    layer = {(name, k) + (0,) * len(rest): cut(x, lo, hi) for k, (lo, hi) in enumerate(zip(bounds, bounds[1:]))}
    chunks = (tuple(hi - lo for lo, hi in zip(bounds, bounds[1:])),) + rest
    return _as_array(name, layer, [], chunks, sparse_meta(x))


def _csr_rows(x, lo: int, hi: int):
    """Rows [lo, hi) of the scipy CSR ``x`` over views of its ``data`` and ``indices`` (and of its ``indptr``
    for a first block; later blocks' row pointers are shifted, a copy of (hi - lo + 1) integers). scipy's
    row slicing copies the entries, and its constructor copies a view of less than half its base array
    (``_prune_array``), so the views are assigned to an empty CSR of the block's shape."""
    if lo == 0 and hi == x.shape[0]:
        return x
    start, stop = int(x.indptr[lo]), int(x.indptr[hi])
    indptr = x.indptr[lo:hi + 1]
    out = type(x)((hi - lo, x.shape[1]), dtype=x.dtype)
    out.data, out.indices = x.data[start:stop], x.indices[start:stop]
    out.indptr = indptr - indptr.dtype.type(start) if start else indptr
    return out


# the concrete operands that ``from_scipy`` cut into views: id -> (a weak reference to the operand, its
# arrays when cut, a weak reference to the Dask array), so that ``whole`` reads them from those blocks
_CUT: dict[int, tuple] = {}


def _remember_cut(a, blocks: da.Array) -> None:
    key = id(a)
    _CUT[key] = (weakref.ref(a, lambda _: _CUT.pop(key, None)), (a.data, a.indices, a.indptr),
                 weakref.ref(blocks))


def _cut_of(x) -> da.Array | None:
    """The live Dask array ``from_scipy`` made of the very object ``x``, if its blocks still view ``x``'s
    current arrays (an ``x`` whose arrays were replaced since, as ``sort_indices`` may not, is sent anew)."""
    entry = _CUT.get(id(x))
    if entry is None or entry[0]() is not x:
        return None
    arrays = (getattr(x, "data", None), getattr(x, "indices", None), getattr(x, "indptr", None))
    if any(now is not then for now, then in zip(arrays, entry[1])):
        return None
    return entry[2]()


# pydata's COO constructor sorts and sums duplicates unless told not to, so every COO is canonical; row cuts,
# padding and trimming keep it so (and skip its Numba sort, which compiles for seconds in a fresh process)
_CANONICAL = {"has_duplicates": False, "sorted": True}


def _pydata_rows(x, lo: int, hi: int):
    """Rows [lo, hi) of a pydata array with NumPy (its own slicing compiles Numba code for seconds)."""
    import sparse

    x = x if isinstance(x, sparse.COO) else x.tocoo()
    keep = (x.coords[0] >= lo) & (x.coords[0] < hi)
    coords = x.coords[:, keep]
    coords[0] -= lo
    return sparse.COO(coords, x.data[keep], shape=(hi - lo,) + tuple(x.shape[1:]), **_CANONICAL)


def row_blocks(x, rows: tuple[int, ...] | None = None, name: str = "a") -> da.Array:
    """``x`` as a Dask array of whole-row blocks (one chunk along every other axis), with the row chunks
    ``rows`` when given (a Dask operand is rechunked, a concrete one sliced; a scipy one checked first,
    errors naming it ``name``). A concrete operand that ``from_scipy`` cut into such blocks is those blocks
    (``multiply(from_scipy(a), a)`` puts ``a``'s arrays in the graph once)."""
    cut = None if is_dask(x) else _cut_of(x)
    if cut is not None and (rows is None or cut.chunks[0] == tuple(rows)):
        return cut
    if is_dask(x):
        if x.ndim == 0:
            raise ValueError("a 0-d operand has no rows to partition")
        if any(n > 1 for n in x.numblocks[1:]):
            x = x.rechunk({d: -1 for d in range(1, x.ndim)})
        if rows is not None and x.chunks[0] != tuple(rows):
            x = x.rechunk({0: tuple(rows)})
        return x
    if np.ndim(x) == 0:
        raise ValueError("a 0-d operand has no rows to partition")
    family = operand_family(x)
    if family.startswith("scipy"):
        x = checked_csr(x, name)
    if rows is None:
        if family.startswith("scipy"):
            bounds = nnz_bounds(x.indptr)
        else:
            m = x.shape[0]
            blocks = max(1, min(m, _parallelism()))
            bounds = sorted({m * k // blocks for k in range(blocks + 1)})
    else:
        bounds = [0, *np.cumsum(rows).tolist()]
    if family == "numpy":
        x = np.asarray(x)
    return _row_sliced(x, bounds, "splyce-rows-")


def _fresh_name(prefix: str) -> str:
    """A new key name for a concrete operand put into one operation's graph. Hashing the operand's data
    (Dask's ``tokenize``) cost the client 20-70 ms per product with the corpus's dense SpMM operands (13-63
    MB), more than the product; a fresh name costs nothing, and an operand modified in place between two
    products can never be mistaken for the old one still held under the same key (``from_array(...,
    name=False)`` does the same)."""
    return prefix + uuid.uuid4().hex


def whole(x) -> da.Array:
    """``x`` as a Dask array that every task reads whole: a concrete operand as one key (a worker receives it
    once); a Dask one in its row blocks (one chunk along the other axes), which each worker joins once
    (``ops._joined_once``) from the blocks it holds and those it fetches: each worker receives only the rows
    it lacks, where joining them first in one task (``rechunk``) moved every block to one worker, then the
    whole operand to every other worker. A concrete operand that ``from_scipy`` cut into blocks still alive
    is read from those blocks: ``splyce.matmul(from_scipy(a), a)`` sends ``a`` once, not twice (its graph
    went from 35.8 to 17.9 MiB for a 216k-row 3-D mesh)."""
    cut = None if is_dask(x) else _cut_of(x)
    if cut is not None:
        x = cut
    if is_dask(x):
        if any(n > 1 for n in x.numblocks[1:]):
            x = x.rechunk({d: -1 for d in range(1, x.ndim)})
        return x
    if operand_family(x) == "numpy":
        x = np.asarray(x)
    name = _fresh_name("splyce-broadcast-")
    key = (name,) + (0,) * np.ndim(x)
    return _as_array(name, {key: x}, [], tuple((s,) for s in np.shape(x)), sparse_meta(x))


def broadcast(x, client=None) -> da.Array:
    """``x`` sent now to every worker, as a one-chunk Dask array to pass as a broadcast operand.

    Each worker holds it already, so repeated products do not send it again. Without it, a concrete operand
    is put in every graph (sent to the scheduler at each ``.compute()``, run on one worker, then copied to
    the others). Scattered data has no recipe to recompute: Dask's Active Memory Manager keeps one copy once
    no task waits for it (``client.amm.stop()`` keeps them all), and if the last worker holding it dies, the
    computations that need it fail.

    Parameters
    ----------
    x : ndarray or scipy.sparse array or matrix or pydata-sparse array
        The operand.
    client : distributed.Client, optional
        The client whose workers receive it; None: the current client.

    Returns
    -------
    dask.array.Array
        One chunk, held by every worker.

    Raises
    ------
    TypeError
        ``x`` is a Dask array (persist it instead).
    ValueError
        No client is given and none is current.

    Examples
    --------
    >>> import scipy.sparse as sps, splyce, splyce.dask
    >>> from distributed import Client, LocalCluster
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1, processes=False))
    >>> A = sps.random_array((1000, 1000), density=0.01, format="csr", rng=0)
    >>> Aw = splyce.dask.broadcast(A)            # sent once, reused by every product below
    >>> C = splyce.matmul(splyce.dask.from_scipy(A), Aw)
    >>> (splyce.dask.gather(C) != splyce.matmul(A, A)).nnz
    0
    >>> client.close()
    """
    if is_dask(x):
        raise TypeError("broadcast takes a concrete operand (NumPy, scipy.sparse or pydata); persist a Dask "
                        "array instead")
    import distributed

    if client is None:
        try:
            client = distributed.get_client()
        except ValueError as exc:
            raise ValueError("broadcast needs a distributed.Client: pass client= or create one first") from exc
    if operand_family(x) == "numpy":
        x = np.asarray(x)
    name = "splyce-broadcast-" + tokenize(x)
    key = (name,) + (0,) * np.ndim(x)
    layer = client.scatter({key: x}, broadcast=True, hash=False)
    return _as_array(name, layer, [], tuple((s,) for s in np.shape(x)), sparse_meta(x))


def gather(x: da.Array, client=None, *, direct: bool = True):
    """``x``'s value in this process, as ``x.compute()`` returns it, its blocks fetched from the workers.

    The row blocks are computed on the workers, fetched straight from the workers that hold them and joined
    here (Dask's own ``finalize``: same type, same values as ``x.compute()``). ``x.compute()`` instead joins
    them in one task on one worker (about four times the result's memory there) and sends the joined result
    through the scheduler: bringing a persisted SpGEMM result of 63 MB (fem2d-250k) to the client takes
    656 ms that way and 173 ms this way, 328 MB (ba-100k) 4.6 s and 0.79 s (2 workers, AMD EPYC Zen 5 VM,
    2 cores, loaded, median of 5).

    Parameters
    ----------
    x : dask.array.Array
        The result to bring here.
    client : distributed.Client, optional
        None: the current client.
    direct : bool, optional
        False fetches through the scheduler, for a client that cannot reach the workers.

    Returns
    -------
    ndarray or scipy.sparse array or matrix or scalar
        What ``x.compute()`` returns.

    Raises
    ------
    TypeError
        ``x`` is not a Dask array.
    ValueError
        No client is given and none is current.

    Examples
    --------
    See ``broadcast``.
    """
    if not is_dask(x):
        raise TypeError(f"gather takes a Dask array, got {type(x).__name__}")
    import distributed
    from dask.array.core import finalize

    if client is None:
        try:
            client = distributed.get_client()
        except ValueError as exc:
            raise ValueError("gather needs a distributed.Client: pass client= or create one first") from exc
    keys = x.__dask_keys__()
    flat = list(_flat(keys if isinstance(keys, list) else [keys]))
    futures = {f.key: f for f in distributed.futures_of(client.persist(x))}
    fetched = client.gather([futures[k] for k in flat], direct=direct)
    if len(flat) == 1 and not str(client.scheduler.address).startswith("inproc://"):
        # one block received over the wire is this process's own: Dask's finalize would copy it (63 MB for
        # a 216k-row 3-D mesh's SpGEMM); an in-process cluster's block is the worker's, copied as Dask does
        return plain(fetched[0])
    values = iter(fetched)

    def nest(k):
        return [nest(i) for i in k] if isinstance(k, list) else next(values)

    return finalize(nest(keys)) if isinstance(keys, list) else next(values)


def single_key(x: da.Array):
    (key,) = x.__dask_keys__() if x.ndim == 0 else list(_flat(x.__dask_keys__()))
    return key


def whole_keys(x: da.Array):
    """The key of a one-chunk array, or the list of its row blocks' keys (``whole``), and whether joined."""
    if x.ndim == 0 or x.npartitions == 1:
        return single_key(x), False
    return block_keys(x), True


def _flat(keys):
    for k in keys:
        if isinstance(k, list):
            yield from _flat(k)
        else:
            yield k


def block_keys(x: da.Array) -> list:
    """The keys of a row-partitioned array's blocks, in row order (one chunk along the other axes)."""
    return list(_flat(x.__dask_keys__()))


# -- padding ----------------------------------------------------------------------------------------------
def pad_rows(x, rows: int):
    """``x`` with empty (zero) rows appended up to ``rows`` rows; no copy of its entries when sparse."""
    extra = rows - x.shape[0]
    if extra <= 0:
        return x
    family = operand_family(x)
    shape = (rows,) + tuple(x.shape[1:])
    if family.startswith("scipy"):
        x = x if x.format == "csr" else x.tocsr()
        indptr = np.concatenate([x.indptr, np.full(extra, x.indptr[-1], dtype=x.indptr.dtype)])
        out = type(x)((x.data, x.indices, indptr), shape=shape)
        out.has_canonical_format = x.has_canonical_format
        return out
    if family == "pydata":
        import sparse

        x = x if isinstance(x, sparse.COO) else x.tocoo()
        return sparse.COO(x.coords, x.data, shape=shape, **_CANONICAL)
    out = np.zeros(shape, dtype=x.dtype)
    out[: x.shape[0]] = x
    return out


def trim_rows(x, rows: int):
    """The first ``rows`` rows of a block result whose other rows are empty padding."""
    if np.ndim(x) == 0 or x.shape[0] == rows:
        return x
    family = operand_family(x)
    shape = (rows,) + tuple(x.shape[1:])
    if family.startswith("scipy"):
        if x.format == "csr":
            out = type(x)((x.data, x.indices, x.indptr[: rows + 1]), shape=shape)
            out.has_canonical_format = x.has_canonical_format
            return out
        if x.format == "coo":
            return type(x)((x.data, x.coords), shape=shape)
        return x[:rows]
    if family == "pydata":
        import sparse

        x = x if isinstance(x, sparse.COO) else x.tocoo()
        return sparse.COO(x.coords, x.data, shape=shape, **_CANONICAL)
    return x[:rows]
