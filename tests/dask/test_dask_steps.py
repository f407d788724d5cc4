"""splyce.dask the way its users run it, quick: several steps of an iterative method as one graph (the vector's
row blocks going from task to task, not through the client), a jitted step mapped over blocks, and the cost
model (``splyce.dask.cost``), on a 2-worker ``LocalCluster`` (processes) and small matrices. References: the
single-process drop-in / jitted function applied step by step, bit for bit."""

from __future__ import annotations

import math
import os
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
from splyce.dask import cost  # noqa: E402

TIMEOUT = 120


@pytest.fixture(scope="module")
def client():
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import tests/
    saved = os.environ.get("SPLYCE_CACHE_DIR")
    os.environ["SPLYCE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splyce-dask-steps-")
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


def _matrix(n, density, seed):
    rng = np.random.default_rng(seed)
    a = sps.random_array((n, n), density=density, format="csr", rng=rng)
    a.data = rng.standard_normal(a.nnz) / 4      # signs and magnitudes not designed
    return sps.csr_array(a)


def _dependencies(y):
    """key name -> the key names its layer depends on (the graph's layers)."""
    graph = y.__dask_graph__()
    return {name: set(deps) for name, deps in graph.dependencies.items()}


@pytest.mark.parametrize("seed,blocks", [(1, 3), pytest.param(2, 2, marks=pytest.mark.slow),
                                         pytest.param(3, 5, marks=pytest.mark.slow)])
def test_spmv_steps_one_graph_bit_identical(client, seed, blocks):
    a = _matrix(311, 0.03, seed)
    x = np.random.default_rng(seed + 10).standard_normal(311)
    ad = sd.from_scipy(a, blocks=blocks)
    y, want = x, x
    for _ in range(10):
        y = splyce.matmul(ad, y)
        want = dropin.matmul(a, want, threads=1)
    assert isinstance(y, da.Array) and y.numblocks == (blocks,)
    # one graph: each step's layer reads the step before's row blocks (no gathered or rechunked vector)
    deps = _dependencies(y)
    steps = [name for name in deps if name.startswith("splyce-matmul-spmv")]
    assert len(steps) == 10
    assert all(len([d for d in deps[s] if d.startswith("splyce-matmul-spmv")]) <= 1 for s in steps)
    assert not any(name.startswith(("rechunk", "concatenate")) for name in deps)
    got = client.compute(y).result(timeout=TIMEOUT)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@splyce.jit(threads=1)
def _damped(a, x):
    return 0.85 * (a @ x)


def test_jitted_steps_mapped_over_blocks(client):
    """A jitted step per row block, its vector argument (a Dask array the outer loop does not index) read
    whole by every block: five steps in one graph, bit for bit the jitted function on the whole matrix."""
    a = _matrix(257, 0.04, 7)
    x = np.random.default_rng(8).random(257)
    ad = sd.from_scipy(a, blocks=3)
    step = sd.blockwise(_damped)
    y, want = step(ad, x), _damped(a, x)
    for _ in range(4):
        y, want = step(ad, y), _damped(a, want)
    got = client.compute(y).result(timeout=TIMEOUT)
    assert got.tobytes() == np.asarray(want).tobytes()
    ref = x
    for _ in range(5):
        ref = 0.85 * (a @ ref)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_cost_model_parts():
    ov = cost.Overheads(fixed_s=0.004, per_task_s=0.0005, latency_s=0.001, bandwidth=1e9)
    spgemm = cost.Call(compute_s=0.8)
    one, two, many = (cost.predict(spgemm, ov, w) for w in (1, 2, 256))
    assert one["transfer"] == 0 and one["task"] == pytest.approx(0.8)
    assert two["task"] == pytest.approx(0.4) and many["task"] == pytest.approx(0.8 / 256)
    assert many["scheduler"] == pytest.approx(0.004 + 0.0005 * 256)
    assert all(math.isclose(p["total"], p["task"] + p["transfer"] + p["scheduler"]) for p in (one, two, many))
    steps = cost.Call(compute_s=0.02, steps=10, exchanged_bytes=8_000_000, sent_bytes=8_000_000)
    t2, t64 = cost.predict(steps, ov, 2), cost.predict(steps, ov, 64)
    assert t64["transfer"] > t2["transfer"] > 0
    chained = cost.Overheads(0.004, 0.0005, 0.001, 1e9, per_step_s=0.003)
    assert cost.predict(steps, chained, 1)["scheduler"] == pytest.approx(0.004 + 0.0005 * 10 + 0.003 * 9 + 2 * 8e6 / 1e9)
    # 4 blocks on 2 workers: half the compute each, 2 blocks lacked per step
    four = cost.predict(steps, ov, 2, blocks=4)
    assert four["task"] == pytest.approx(0.01)
    assert four["transfer"] == pytest.approx(9 * (4e6 / 1e9 + 2 * 0.001) + (8e6 / 1e9 + 0.001))
    with pytest.raises(ValueError, match="workers"):
        cost.predict(spgemm, ov, 0)


def test_calibrate_on_the_cluster(client):
    ov = cost.calibrate(client, repeats=3, sizes=(1, 8))
    assert 0 <= ov.fixed_s < 5 and 0 <= ov.per_task_s < 1 and 0 <= ov.per_step_s < 1
    assert 0 <= ov.latency_s < 5 and 1e5 < ov.bandwidth < math.inf
