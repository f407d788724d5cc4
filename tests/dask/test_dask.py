"""splyce on Dask: the drop-ins and jitted functions on row-partitioned Dask arrays, on a 2-worker
``distributed.LocalCluster`` (processes, one thread each), against the single-process drop-ins bit for bit."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce import dropin

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import splyce.dask as sd  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = 120   # seconds for any one computation on the cluster


@pytest.fixture(scope="module")
def client():
    """Two worker processes sharing one temporary disk cache (the module's own, set before they start)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import tests/
    saved = os.environ.get("SPLYCE_CACHE_DIR")
    cache = tempfile.mkdtemp(prefix="splyce-dask-cache-")
    os.environ["SPLYCE_CACHE_DIR"] = cache
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=40)
    c = distributed.Client(cluster, timeout=60)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
        if saved is None:
            os.environ.pop("SPLYCE_CACHE_DIR", None)
        else:
            os.environ["SPLYCE_CACHE_DIR"] = saved


def _compute(client, x):
    return client.compute(x).result(timeout=TIMEOUT)


def _same(got, want):
    """Same type, shape, dtype and values bit for bit (NaN where NaN), same stored entries."""
    assert type(got) is type(want), (type(got), type(want))
    assert np.shape(got) == np.shape(want) and got.dtype == want.dtype
    if sps.issparse(want) or type(want).__module__.startswith("sparse"):
        assert got.nnz == want.nnz
        got, want = got.toarray() if sps.issparse(got) else got.todense(), \
            want.toarray() if sps.issparse(want) else want.todense()
    assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True)


def _random(m, n, density, seed, fmt="csr", dtype=np.float64):
    rng = np.random.default_rng(seed)
    return sps.random_array((m, n), density=density, format=fmt, rng=rng, dtype=dtype)


def _triangles(n, seed, dtype):
    a = _random(n, n, 0.08, seed)
    return sps.tril((a + a.T) != 0, -1).astype(dtype).tocsr()


# -- products ---------------------------------------------------------------------------------------------
def test_spmv_spmm_spgemm(client):
    a = _random(120, 80, 0.1, 1)
    a.data[3] = np.nan
    b = _random(80, 80, 0.1, 2)
    x = np.random.default_rng(3).random(80)
    X = np.random.default_rng(4).random((80, 5))
    ad = sd.from_scipy(a, rows_per_chunk=40)
    for right in (x, X, b, da.from_array(X, chunks=(30, 5)), sd.broadcast(b), sd.broadcast(x, client)):
        concrete = right.compute() if isinstance(right, da.Array) else right
        lazy = splyce.matmul(ad, right)
        assert isinstance(lazy, da.Array)
        _same(_compute(client, lazy), dropin.matmul(a, concrete))
        _same(sd.gather(lazy, client), dropin.matmul(a, concrete))     # blocks fetched directly, joined here
    # scipy matrices stay matrices; .compute() on the default client
    m = sps.csr_matrix(a)
    _same(splyce.matmul(sd.from_scipy(m, 40), sps.csr_matrix(b)).compute(), dropin.matmul(m, sps.csr_matrix(b)))
    _same(splyce.matmul(ad, b, out_format="dense").compute(), dropin.matmul(a, b, out_format="dense"))
    # a broadcast right operand with repeated and unsorted columns: each worker canonicalizes it once, as
    # the drop-in does at each call; one with a column out of range raises as the drop-in does
    messy = sps.csr_array((np.array([1.0, 2.0, 3.0, 4.0]), np.array([5, 2, 5, 0]), np.r_[0, 3, np.full(79, 4)]),
                          shape=(80, 80))
    _same(_compute(client, splyce.matmul(ad, messy)), dropin.matmul(a, messy))
    bad = sps.csr_array((np.ones(1), np.array([80]), np.r_[0, np.ones(80, dtype=np.int64)]), shape=(80, 80))
    with pytest.raises(ValueError, match="b: .* out of range"):
        _compute(client, splyce.matmul(ad, bad))


def test_chunks_of_pydata_and_other_scipy_formats(client):
    import sparse

    a = _random(120, 80, 0.1, 5)
    x = np.random.default_rng(6).random(80)
    p = sparse.COO.from_scipy_sparse(a)
    pd = sd.from_scipy(a, rows_per_chunk=40).map_blocks(sparse.COO.from_scipy_sparse,
                                                       meta=sparse.COO.from_numpy(np.zeros((0, 0))))
    _same(_compute(client, splyce.matmul(pd, x)), dropin.matmul(p, x))
    _same(_compute(client, splyce.multiply(pd, p)), dropin.multiply(p, p))
    c = a.tocsc()
    cd = da.from_array(c, chunks=(40, 30), asarray=False)       # column chunks too: rejoined per row block
    _same(_compute(client, splyce.matmul(cd, x)), dropin.matmul(c, x))


def test_elementwise_aligned_row_blocks(client):
    a, b = _random(120, 80, 0.1, 7), _random(120, 80, 0.1, 8)
    ad = sd.from_scipy(a, rows_per_chunk=40)
    bd = sd.from_scipy(b, rows_per_chunk=55)      # other row blocks: rechunked to a's
    for op in ("multiply", "add", "subtract"):
        _same(_compute(client, getattr(splyce, op)(ad, bd)), getattr(dropin, op)(a, b))
        _same(_compute(client, getattr(splyce, op)(a, bd)), getattr(dropin, op)(a, b))
    dense = b.toarray()
    _same(_compute(client, splyce.multiply(ad, dense)), dropin.multiply(a, dense))   # scipy: COO result
    _same(_compute(client, splyce.add(ad, dense)), dropin.add(a, dense))


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_triangle_count_and_masked_product(client, dtype):
    low = _triangles(120, 9, dtype)
    ld = sd.from_scipy(low, rows_per_chunk=40)
    want = dropin.einsum("ij,ik,kj->", low, low, low)
    for other in (low, ld, sd.broadcast(low)):      # broadcast: a scipy operand, a Dask one, one on every worker
        _same(_compute(client, splyce.einsum("ij,ik,kj->", ld, ld, other)), want)
    _same(sd.gather(splyce.einsum("ij,ik,kj->", ld, ld, low), client, direct=False), want)     # 0-d
    masked = dropin.einsum("ij,ik,kj->ij", low, low, low)
    _same(_compute(client, splyce.einsum("ij,ik,kj->ij", ld, ld, low)), masked)
    assert want > 0


def test_sum_over_rows_of_a_dense_block_with_inf(client):
    """Dense row blocks are not padded when the rows are summed over: no 0 * inf = NaN from padding."""
    y = np.random.default_rng(22).integers(1, 5, (90, 40)).astype(np.float64)
    b = _random(40, 7, 0.3, 23)
    b.data = np.ceil(b.data * 8)                    # small integers: sums exact in any order
    b.data[0] = np.inf
    yd = da.from_array(y, chunks=(40, 40))          # blocks of 40, 40 and 10 rows
    want = dropin.einsum("ij,jk->", y, b)
    _same(_compute(client, splyce.einsum("ij,jk->", yd, b)), want)
    assert want == np.inf


def test_graph_has_row_block_tasks_and_one_broadcast_key():
    """No full-matrix concatenation: one task per row block, the right side one key read by every task."""
    a, b = _random(100, 50, 0.1, 10), _random(50, 40, 0.1, 11)
    ad = sd.from_scipy(a, rows_per_chunk=30)
    lazy = splyce.matmul(ad, b)
    graph = dict(lazy.__dask_graph__())
    layers = {k[0].rsplit("-", 1)[0] for k in graph}
    assert layers == {"splyce-from-scipy", "splyce-broadcast", "splyce-matmul-spgemm"}   # one prefix per op kind
    assert sum(k[0].startswith("splyce-broadcast") for k in graph) == 1
    assert sum(k[0].startswith("splyce-matmul") for k in graph) == ad.numblocks[0] == 4
    low = _triangles(80, 12, np.int64)
    other = low.copy()       # not cut by from_scipy: broadcast as one key
    count = splyce.einsum("ij,ik,kj->", sd.from_scipy(low, rows_per_chunk=20), sd.from_scipy(low, 20), other)
    graph = dict(count.__dask_graph__())
    keys = [k for k in graph if k[0].startswith("splyce-einsum")]
    assert len(keys) == 5        # four per-block partial counts and their sum
    chain = splyce.einsum("ij,jk,kl->il", sd.from_scipy(other, rows_per_chunk=20), low, low)
    assert sum(k[0].startswith("splyce-broadcast") for k in dict(chain.__dask_graph__())) == 1   # sent once
    # "kj" is stored by columns: each process converts (transposes) and checks the broadcast L once, not
    # once per block, and the drop-in takes that SparseTensor as it is
    from splyce.dask.ops import _converted_once
    from splyce.tensors.formats import CSR

    (prep,) = {graph[k][4] for k in keys if len(k) == 2}
    assert prep[:2] == ("pad", "pad") and prep[2][0].order == (1, 0)
    by_columns = _converted_once(other, *prep[2])
    assert _converted_once(other, *prep[2]) is by_columns and by_columns.format.order == (1, 0)
    assert (by_columns.to_scipy() != other).nnz == 0
    # a broadcast sparse right operand of a product: converted and checked once per process too
    assert graph_prep(lazy) == ("pad", (CSR, "b"))
    rows = _converted_once(b, CSR)
    assert _converted_once(b, CSR) is rows and rows.format.order == (0, 1)
    assert (rows.to_scipy() != b).nnz == 0


def test_from_scipy_blocks_are_views_and_its_operand_is_sent_once(client):
    """from_scipy cuts a CSR into views of its arrays (no copy), and the same object passed again to an op on
    those blocks is read from them: its arrays are in the graph once. An operand whose arrays were replaced
    since is sent anew."""
    from splyce.tensors.formats import CSR

    a = _random(120, 120, 0.1, 31)
    ad = sd.from_scipy(a, blocks=3)
    blocks = list(dict(ad.__dask_graph__()).values())
    assert len(blocks) == 3 and all(np.shares_memory(b.data, a.data) and np.shares_memory(b.indices, a.indices)
                                    for b in blocks)
    lazy = splyce.matmul(ad, a)
    graph = dict(lazy.__dask_graph__())
    assert not any(k[0].startswith("splyce-broadcast") for k in graph)
    assert sum(k[0].startswith("splyce-from-scipy") for k in graph) == 3
    assert graph_prep(lazy) == ("pad", ("join", (CSR, "b")))      # joined once per worker, then converted
    _same(_compute(client, lazy), dropin.matmul(a, a))
    # an elementwise op with the same object: its row blocks are the same keys
    twice = splyce.multiply(ad, a)
    assert sum(k[0].startswith("splyce-from-scipy") for k in dict(twice.__dask_graph__())) == 3
    assert not any(k[0].startswith("splyce-rows") for k in dict(twice.__dask_graph__()))
    _same(_compute(client, twice), dropin.multiply(a, a))
    # by default one block per worker thread, the count read from the cluster object (no scheduler round trip)
    assert sd.from_scipy(a).numblocks[0] == sum(client.nthreads().values()) == 2
    one = sd.from_scipy(a, blocks=1)
    assert dict(one.__dask_graph__())[(one.name, 0, 0)] is a      # one block: a itself, no copy
    _same(_compute(client, splyce.matmul(one, a)), dropin.matmul(a, a))
    before = a.copy()
    a.data = a.data * 2                                           # arrays replaced: not the blocks' any more
    assert sum(k[0].startswith("splyce-broadcast") for k in dict(splyce.matmul(ad, a).__dask_graph__())) == 1
    _same(_compute(client, splyce.matmul(ad, a)), dropin.matmul(before, a))


def _finalized_block():
    """(plain class, shares the block's arrays) of Dask's finalize of one FreshRows block, and whether the
    block's own copy() shares them."""
    from dask.array.core import finalize

    from splyce.dask.fresh import fresh_rows

    block = fresh_rows(_random(30, 20, 0.2, 32))
    out = finalize([[block]])
    return type(out) is sps.csr_array, np.shares_memory(out.data, block.data), \
        np.shares_memory(block.copy().data, block.data)


def test_result_block_finalized_without_copy_only_where_it_leaves_by_the_wire(client):
    """A task's CSR result block skips Dask's finalize copy on a worker whose results go out serialized; in
    this process (a local scheduler's or an in-process worker's result is the block itself) and for any other
    caller of copy() it is a real copy; the class is scipy's own either way."""
    assert client.submit(_finalized_block, pure=False).result(timeout=TIMEOUT) == (True, True, False)
    assert _finalized_block() == (True, False, False)
    a = _random(60, 60, 0.1, 33)
    got = splyce.matmul(sd.from_scipy(a, blocks=1), a).compute(scheduler="synchronous")
    _same(got, dropin.matmul(a, a))
    # gather of one block received over the wire: the plain class over the received arrays (no copy)
    _same(sd.gather(splyce.matmul(sd.from_scipy(a, blocks=1), a), client), dropin.matmul(a, a))
    y = sd.gather(splyce.matmul(sd.from_scipy(a, blocks=1), np.ones(60)), client)
    _same(y, dropin.matmul(a, np.ones(60)))


def _pool_stats():
    from splyce.native import memory_pool

    return memory_pool.stats()


def test_tasks_allocate_from_the_cache_of_freed_buffers(client):
    """A task's drop-in allocates from splyce's cache of freed large buffers, as splyce.matmul does in one
    process: a worker's second product of a 1.6 MB result reuses the first one's freed blocks."""
    from splyce.bench.dask_gathered import mesh3d

    a = mesh3d(20)                       # 8000 rows: A @ A has 200k entries, 1.6 MB of values
    before = {w: s["hits"] for w, s in client.run(_pool_stats).items()}
    for _ in range(3):
        _same(_compute(client, splyce.matmul(sd.from_scipy(a, blocks=1), a)), dropin.matmul(a, a))
    after = client.run(_pool_stats)
    assert sum(s["hits"] - before[w] for w, s in after.items()) > 0
    assert sum(s["kept"] for s in after.values()) > 0


def test_dask_broadcast_operand_joined_once_per_worker_not_in_one_task():
    """A Dask right operand in row blocks reaches each task as its blocks, joined once per process: no task
    joins it on one worker first (which then sent the whole operand to every other worker)."""
    from splyce.dask.ops import _joined_once

    a = _random(90, 80, 0.1, 24)
    X = np.random.default_rng(25).random((80, 6))
    xd = da.from_array(X, chunks=(30, 3))            # row and column chunks: the columns are joined by Dask
    lazy = splyce.matmul(sd.from_scipy(a, rows_per_chunk=30), xd)
    assert graph_prep(lazy) == ("pad", ("join", ""))
    graph = dict(lazy.__dask_graph__())
    (blocks,) = {tuple(task[-1]) for k, task in graph.items() if k[0].startswith("splyce-matmul")}
    assert len(blocks) == 3                          # every task reads the 3 row blocks, none reads a join
    parts = [X[:30], X[30:60], X[60:]]
    joined = _joined_once(parts)
    assert _joined_once(parts) is joined and np.array_equal(joined, X)
    _same(lazy.compute(scheduler="sync"), dropin.matmul(a, X))


def graph_prep(lazy):
    """The ``prep`` argument of the row-block tasks of ``lazy`` (one value for all of them)."""
    graph = dict(lazy.__dask_graph__())
    (prep,) = {task[4] for k, task in graph.items() if k[0].startswith("splyce-matmul")}
    return prep


def test_from_scipy_chunks_by_nonzeros():
    rng = np.random.default_rng(13)
    dense = np.zeros((400, 50))
    dense[:40] = rng.random((40, 50))             # the first tenth of the rows holds every nonzero
    dense[40:, 0] = 1.0
    ad = sd.from_scipy(sps.csr_array(dense))
    first = ad.chunks[0][0]
    assert first < 400 // ad.numblocks[0]         # blocks of about equal nonzeros, not of equal rows
    assert sum(ad.chunks[0]) == 400
    assert np.array_equal(ad.compute(scheduler="sync").toarray(), dense)
    three = sd.from_scipy(sps.csr_array(dense), blocks=3)     # a given number of blocks, still by nonzeros
    assert three.numblocks[0] == 3 and three.chunks[0][0] < 400 // 3
    with pytest.raises(ValueError, match="rows_per_chunk"):
        sd.from_scipy(sps.csr_array(dense), rows_per_chunk=0)
    with pytest.raises(ValueError, match="not both"):
        sd.from_scipy(sps.csr_array(dense), rows_per_chunk=10, blocks=2)
    with pytest.raises(TypeError, match="scipy.sparse"):
        sd.from_scipy(dense)


def test_unsupported_partitions_raise_saying_why():
    a = sd.from_scipy(_random(20, 20, 0.2, 14), rows_per_chunk=10)
    with pytest.raises(NotImplementedError, match="another position"):
        splyce.einsum("ij,ji->i", a, a)
    with pytest.raises(ValueError, match="not aligned"):
        splyce.matmul(a, np.ones(3))
    with pytest.raises(ValueError, match="differ"):
        splyce.add(a, np.ones((3, 3)))
    with pytest.raises(NotImplementedError, match="NumPy array"):
        splyce.matmul(a, sps.coo_array(np.ones(20)))
    with pytest.raises(TypeError, match="concrete operand"):
        sd.broadcast(a)
    with pytest.raises(TypeError, match="takes a Dask array"):
        sd.gather(np.ones(3))


_MALFORMED_CHILD = r"""
import sys
import numpy as np, pytest, scipy.sparse as sps, splyce, splyce.dask as sd

kind = sys.argv[1]
rng = np.random.default_rng(21)
bad = sps.random_array((30, 20), density=0.3, format="csr", rng=rng)
good = sps.random_array((30, 20), density=0.3, format="csr", rng=rng)
if kind == "column out of range":
    bad.indices[3] = 20
elif kind == "negative column":
    bad.indices[3] = -1
elif kind == "positions decrease":
    bad.indptr[5] = bad.indptr[7]
elif kind == "coo row out of range":
    bad = bad.tocoo()
    bad.coords[0][3] = 40
elif kind == "csc row out of range":
    bad = bad.tocsc()
    bad.indices[3] = 30
x = np.ones(20)
defect = r"out of range|positions decrease"
saved = (bad.coords[0].copy(),) if bad.format == "coo" else (bad.indptr.copy(), bad.indices.copy())
with pytest.raises(ValueError, match=defect):
    splyce.matmul(bad, x)                                    # the single-process reference
with pytest.raises(ValueError, match=defect):
    sd.from_scipy(bad, blocks=2)
with pytest.raises(ValueError, match=r"^a: .*(" + defect + ")"):
    sd.matmul(bad, x).compute(scheduler="synchronous")
with pytest.raises(ValueError, match=r"^b: .*(" + defect + ")"):
    sd.multiply(sd.from_scipy(good, blocks=2), bad).compute(scheduler="synchronous")
with pytest.raises(ValueError, match=r"^operand 1: .*(" + defect + ")"):
    sd.einsum("ij,ij->ij", sd.from_scipy(good, blocks=2), bad).compute(scheduler="synchronous")
after = (bad.coords[0],) if bad.format == "coo" else (bad.indptr, bad.indices)
assert all(np.array_equal(s, a) for s, a in zip(saved, after))     # inputs never modified
print("ok")
"""


@pytest.mark.parametrize("kind", ["column out of range", "negative column", "positions decrease",
                                  "coo row out of range", "csc row out of range"])
def test_malformed_operand_refused_as_the_drop_in_does(kind):
    """scipy's row slicing drops an out-of-range column silently, and its conversions write an out-of-range
    index out of bounds: the Dask path checks a scipy operand before cutting it, as the single-process
    drop-in does, and names the operand. Before, the cut gave a wrong SpMV where the drop-in raised, and a
    CSC or COO operand crashed the process: so this runs in a child process and fails on a signal."""
    run = subprocess.run([sys.executable, "-c", _MALFORMED_CHILD, kind], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode >= 0, f"child killed by signal {-run.returncode}:\n{run.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["ok"]


def test_unsorted_columns_are_fine_on_the_dask_path():
    a = _random(30, 20, 0.3, 23)
    row = slice(a.indptr[4], a.indptr[5])
    a.indices[row] = a.indices[row][::-1].copy()
    a.data[row] = a.data[row][::-1].copy()
    x = np.arange(20.0)
    _same(sd.matmul(sd.from_scipy(a, blocks=3), x).compute(scheduler="synchronous"), splyce.matmul(a, x))
    _same(sd.add(sd.from_scipy(a, blocks=3), a).compute(scheduler="synchronous"), splyce.add(a, a))


def test_einsum_sizes_checked_on_whole_shapes():
    """Each task sees only its rows: a longer operand cut into the first one's row blocks lost its last rows
    and gave a wrong sum; the shapes are now checked on the client, as the single-process einsum does."""
    from splyce.tracer.tracer import TraceError

    with pytest.raises(ValueError):
        splyce.einsum("i,i->", np.ones(5), np.ones(6))
    with pytest.raises(TraceError, match=r"size mismatch for index 'i' \(5 vs 6\)"):
        sd.einsum("i,i->", np.ones(5), np.ones(6))
    a = sd.from_scipy(_random(30, 20, 0.3, 24), blocks=3)
    with pytest.raises(TraceError, match=r"index 'j' \(20 vs 30\) with operand shapes \(30, 20\), \(30, 20\)"):
        sd.einsum("ij,jk->ik", a, _random(30, 20, 0.3, 25))
    with pytest.raises(TraceError, match="must be distinct indices of the inputs"):
        sd.einsum("ij,jk->q", a, _random(20, 5, 0.3, 26))
    with pytest.raises(TraceError, match="must be distinct indices of the inputs"):
        splyce.einsum("ij,jk->q", _random(30, 20, 0.3, 24), _random(20, 5, 0.3, 26))


# -- blockwise --------------------------------------------------------------------------------------------
@splyce.jit
def _spmm(a, x):
    return a @ x


@splyce.jit
def _rowdot(a, y):
    return splyce.einsum("ij,ij->i", a, y)


@splyce.jit
def _gram(a):
    return a.T @ a


@splyce.jit
def _abt(a, b):
    return a @ b.T


@splyce.jit
def _total(a):
    return a.sum()


def test_blockwise(client):
    a = _random(120, 80, 0.1, 15)
    x = np.random.default_rng(16).random((80, 5))
    y = np.random.default_rng(17).random((120, 80))
    ad = sd.from_scipy(a, rows_per_chunk=40)
    yd = da.from_array(y, chunks=(60, 80))
    _same(_compute(client, sd.blockwise(_spmm)(ad, x)), _spmm(a, x))
    _same(_compute(client, sd.blockwise(_rowdot)(ad, yd)), _rowdot(a, y))
    with pytest.raises(ValueError, match="not independent: the output is accessed at a row other"):
        sd.blockwise(_gram)(ad)
    with pytest.raises(ValueError, match="reduces over the rows into one element"):
        sd.blockwise(_total)(sd.from_scipy(a.astype(np.int64), rows_per_chunk=40))   # split (exact), not blockwise
    with pytest.raises(ValueError, match="Dask argument 1"):
        sd.blockwise(_abt)(ad, ad)
    with pytest.raises(ValueError, match="must be a Dask array"):
        sd.blockwise(_rowdot)(ad, y)
    with pytest.raises(TypeError, match="@splyce.jit"):
        sd.blockwise(lambda a: a)


# -- the disk cache, pickling -----------------------------------------------------------------------------
@splyce.jit
def _probe(a, x):
    return 2 * (a @ x)      # two ops: an MLIR kernel (one op would run the drop-in's native SpMV)


def _compile_counts():
    """On a worker: run a jitted signature no other test uses; this worker's compiles and disk hits."""
    a = sps.random_array((37, 41), density=0.2, format="csr", rng=np.random.default_rng(0), dtype=np.float32)
    _probe(a, np.ones(41, dtype=np.float32))
    info = _probe.cache_info()
    return info.compiles, info.disk_hits


def test_workers_compile_each_kernel_once(client):
    counts = client.run(_compile_counts)           # both workers at once, same kernel, empty cache entry
    assert sorted(counts.values()) == [(0, 1), (1, 0)]


def test_sparse_tensor_pickles_out_of_band():
    t = splyce.asarray(_random(30, 20, 0.2, 18))
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 3 and len(data) < 1000          # indptr, indices, values: not in the stream
    back = pickle.loads(data, buffers=buffers)
    assert back.format == t.format and np.array_equal(back.to_numpy(), t.to_numpy())
    assert np.shares_memory(back.values, t.values)          # out of band: no copy at all in one process


def test_jitted_pickles_without_machine_code():
    a = splyce.asarray(_random(10, 10, 0.3, 19))
    _gram(a)
    import cloudpickle    # what Dask pickles functions with

    data = cloudpickle.dumps(_gram)
    assert len(data) < 3000 and pickle.loads(data) is _gram


def test_import_without_dask_says_what_to_install():
    code = ("import sys; sys.modules['dask'] = None\n"
            "import numpy as np, splyce\n"
            "assert splyce.add(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]\n"
            "try:\n    import splyce.dask\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'splyce[dask]'" in out.stdout


# -- a worker dies mid-graph ------------------------------------------------------------------------------
def _die_once(block, marker, block_id=None):
    """The second block's task kills its worker process the first time it runs."""
    if block_id[0] == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return block


def test_worker_killed_mid_graph(client, tmp_path):
    a = _random(120, 80, 0.1, 20)
    x = np.random.default_rng(21).random(80)
    ad = sd.from_scipy(a, rows_per_chunk=40)
    marker = str(tmp_path / "killed")
    fragile = ad.map_blocks(_die_once, marker, meta=ad._meta, dtype=ad.dtype)
    _same(_compute(client, splyce.matmul(fragile, x)), dropin.matmul(a, x))
    assert os.path.exists(marker)                   # a worker did die, and Dask recomputed its tasks


def test_cluster_config_names_real_dask_settings():
    """Every key of splyce.dask.CLUSTER_CONFIG is one of Dask's own (a misspelt key would change nothing)."""
    import dask

    for key in sd.CLUSTER_CONFIG:
        dask.config.get(key)                      # KeyError for a setting Dask does not have
    with dask.config.set(sd.CLUSTER_CONFIG):
        assert dask.config.get("distributed.worker.profile.enabled") is False
        assert "MALLOC_TRIM_THRESHOLD_" in dask.config.get("distributed.nanny.pre-spawn-environ")
        assert dask.config.get("distributed.client.direct-to-workers") is True


def test_sparse_array_blocks_have_their_size_in_dask(client):
    """Dask counts a scipy sparse array by its arrays (it registers sizes for sparse matrices only): on the
    client, and as the workers report a persisted result's blocks to the scheduler."""
    from dask.sizeof import sizeof

    a = _random(120, 80, 0.1, 1)
    for x in (a, sps.csr_matrix(a), a.tocoo(), a.tocsc()):
        arrays = sum(v.nbytes for v in (x.data, *(x.coords if x.format == "coo" else (x.indices, x.indptr))))
        assert arrays <= sizeof(x) <= arrays + 1000, type(x)
    product = client.persist(splyce.matmul(sd.from_scipy(a, rows_per_chunk=40), _random(80, 80, 0.1, 2)))
    distributed.wait(product, timeout=TIMEOUT)
    keys = {str(f.key) for f in distributed.futures_of(product)}
    reported = client.run_on_scheduler(lambda dask_scheduler, keys=keys: sum(
        ts.nbytes for k, ts in dask_scheduler.tasks.items() if str(k) in keys))
    joined = product.compute()
    assert reported >= joined.data.nbytes + joined.indices.nbytes
