"""The cache of freed large buffers (native/memory_pool.py): NumPy's allocator inside drop-ins on large
operands. What could go wrong is heap corruption or a crash, so the stress tests run in child processes
under glibc's heap checks (MALLOC_CHECK_=3) and fail on any signal."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.native import memory_pool as mp

MB = 1 << 20


def _large(n=200_000, nnz=1_000_000, seed=0):
    rng = np.random.default_rng(seed)
    A = sps.coo_array((rng.uniform(-1, 1, nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    return A.tocsr()


def _run_child(script: str, env_extra=None, timeout: int = 240) -> str:
    env = dict(os.environ, MALLOC_CHECK_="3", **(env_extra or {}))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert run.returncode >= 0, f"child killed by signal {-run.returncode}:\n{run.stdout}\n{run.stderr[-3000:]}"
    assert run.returncode == 0, f"child failed:\n{run.stdout}\n{run.stderr[-3000:]}"
    return run.stdout


@pytest.fixture
def fresh_pool():
    limit = mp.limit()
    mp.release()
    yield
    mp.set_limit(limit)


def test_only_inside_active_and_only_large_blocks_are_kept(fresh_pool):
    with mp.active():
        small, large = np.empty(10), np.empty(2 * MB // 8)
    outside = np.empty(2 * MB // 8)
    assert mp.handler_name(small) == mp.handler_name(large) == "splyce_pool"
    assert mp.handler_name(outside) != "splyce_pool"
    before = mp.stats()
    del small, large, outside
    after = mp.stats()
    assert after["kept"] == before["kept"] + 1            # the large block only
    assert after["pooled_bytes"] == before["pooled_bytes"] + 2 * MB


def test_a_freed_block_is_reused_for_the_next_allocation_of_about_its_size(fresh_pool):
    with mp.active():
        a = np.empty(8 * MB // 8)
        address = a.ctypes.data
        del a
        hits = mp.stats()["hits"]
        b = np.empty(6 * MB // 8)                          # within [size, 2 size]: reused
        assert b.ctypes.data == address and mp.stats()["hits"] == hits + 1
        del b
        c = np.empty(2 * MB // 8)                          # the kept block is more than twice as large
        assert c.ctypes.data != address


def test_of_the_blocks_that_fit_the_most_recently_freed_is_reused(fresh_pool):
    with mp.active():
        a, b, c = (np.empty(2 * MB // 8) for _ in range(3))
        addresses = [x.ctypes.data for x in (a, b, c)]
        del b, a, c                                        # c freed last: the likeliest still in cache
        first, second = np.empty(2 * MB // 8), np.empty(2 * MB // 8)
    assert [first.ctypes.data, second.ctypes.data] == [addresses[2], addresses[0]]


def test_zeros_from_a_reused_block_are_zero(fresh_pool):
    with mp.active():
        a = np.empty(4 * MB // 8)
        a.fill(np.nan)
        address = a.ctypes.data
        del a
        z = np.zeros(4 * MB // 8)
    assert z.ctypes.data == address
    assert not z.any()


def test_resize_keeps_contents_and_a_shrink_stays_in_place(fresh_pool):
    with mp.active():
        a = np.arange(3 * MB // 8, dtype=np.float64)
    address = a.ctypes.data
    a.resize(1000, refcheck=False)
    assert a.ctypes.data == address and np.array_equal(a, np.arange(1000.0))
    a.resize(5 * MB // 8, refcheck=False)                  # grows past the capacity: moves, contents kept
    assert np.array_equal(a[:1000], np.arange(1000.0))
    a[1000:] = 7.0
    assert a[-1] == 7.0
    small = np.empty(0)
    with mp.active():
        b = np.empty(100)
    b.resize(3 * MB // 8, refcheck=False)                  # a small block grown large, then kept
    b[:] = 1.0
    kept = mp.stats()["kept"]
    del b, small
    assert mp.stats()["kept"] == kept + 1


def _resident_pages(address: int, nbytes: int) -> int:
    """How many pages of [address, address + nbytes) are in memory (mincore)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    start = address // page * page
    count = (address + nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * count)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(count * page), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def test_a_shrunk_written_block_keeps_only_pages_near_its_new_size(fresh_pool):
    with mp.active():
        a = np.ones(96 * MB // 8)                          # every page written
    address = a.ctypes.data
    a.resize(MB // 8, refcheck=False)
    assert a.ctypes.data == address and a.sum() == MB // 8
    page = os.sysconf("SC_PAGE_SIZE")
    beyond = address + 2 * MB + mp.SLACK + 2 * page
    assert _resident_pages(beyond, address + 96 * MB - beyond - page) == 0
    assert _resident_pages(address + 2 * MB, mp.SLACK - page) > 0


def test_the_limit_bounds_what_is_kept_and_zero_turns_it_off(fresh_pool):
    mp.set_limit(3 * MB)
    with mp.active():
        arrays = [np.empty(2 * MB // 8) for _ in range(3)]
    before = mp.stats()
    del arrays
    after = mp.stats()
    assert after["kept"] - before["kept"] == 1 and after["released"] - before["released"] == 2
    assert after["pooled_bytes"] <= 3 * MB
    mp.set_limit(0)
    assert mp.stats()["pooled_bytes"] == 0
    assert mp.install() is None                            # off: no handler installed at all
    with pytest.raises(ValueError, match="pool limit"):
        mp.set_limit(-1)


def test_a_miss_gives_back_kept_blocks_too_small_for_it(fresh_pool):
    with mp.active():
        blocks = [np.empty(2 * MB // 8) for _ in range(4)]
        del blocks
        assert mp.stats()["pooled_bytes"] == 8 * MB
        released = mp.stats()["released"]
        big = np.empty(5 * MB // 8)                        # no kept block fits: three of them go first
    assert mp.stats()["released"] - released == 3 and mp.stats()["pooled_bytes"] == 2 * MB
    del big


def test_dropin_results_come_from_the_pool_and_match_scipy(fresh_pool):
    A = _large()
    X = np.random.default_rng(0).uniform(-1, 1, (200_000, 4))
    from splyce.api import POOL_OPERAND
    assert A.nnz >= POOL_OPERAND
    first = splyce.matmul(A, X)
    assert mp.is_pooled(first)
    np.testing.assert_array_equal(first, A @ X)
    address = first.ctypes.data
    del first
    again = splyce.matmul(A, X)                            # the same buffer, already backed
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, A @ X)
    C = splyce.matmul(A, A.T, threads=2)
    ref = (A @ A.T).tocsr()
    assert abs(C - ref).max() == 0
    y = splyce.matmul(A, np.ones(200_000))                 # SpMV: a 1.6 MB result, pooled
    assert mp.is_pooled(y)
    short = _large(n=8192, nnz=300_000)                    # many entries, a 64 KB result: not worth the switch
    assert not mp.is_pooled(splyce.matmul(short, np.ones(8192)))
    small = sps.random_array((50, 50), density=0.1, format="csr", random_state=1)
    assert not mp.is_pooled(splyce.matmul(small, np.ones(50)))   # small operands: no handler switch


def test_environment_variable_turns_the_pool_off():
    out = _run_child('''
    import numpy as np, scipy.sparse as sps, splyce
    from splyce.native import memory_pool as mp
    rng = np.random.default_rng(0)
    A = sps.coo_array((rng.uniform(-1, 1, 10**6), (rng.integers(0, 200_000, 10**6), rng.integers(0, 200_000, 10**6))),
                      shape=(200_000, 200_000)).tocsr()
    y = splyce.matmul(A, np.ones((200_000, 4)))
    print(mp.limit(), mp.is_pooled(y))
    ''', {"SPLYCE_POOL_BYTES": "0"})
    assert out.split() == ["0", "False"]


def test_a_malformed_environment_variable_is_a_clear_error():
    run = subprocess.run([sys.executable, "-c", "import numpy as np, splyce; splyce.matmul(np.eye(2), np.ones(2))"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SPLYCE_POOL_BYTES="lots"))
    assert run.returncode == 1 and "SPLYCE_POOL_BYTES must be a number of bytes, got 'lots'" in run.stderr


def test_a_handler_that_cannot_be_built_turns_the_cache_off_with_a_warning():
    out = _run_child('''
    import warnings, numpy as np, scipy.sparse as sps, splyce
    from splyce.native import memory_pool as mp

    def broken():
        raise RuntimeError("no LLVM here")
    mp._build = broken
    rng = np.random.default_rng(0)
    A = sps.coo_array((rng.uniform(-1, 1, 10**6), (rng.integers(0, 200_000, 10**6), rng.integers(0, 200_000, 10**6))),
                      shape=(200_000, 200_000)).tocsr()
    X = np.ones((200_000, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = splyce.matmul(A, X)
    assert np.array_equal(y, A @ X) and not mp.is_pooled(y)
    assert any("cache of freed buffers is off" in str(w.message) for w in caught), caught
    assert mp.limit() == 0 and mp.install() is None
    print("ok")
    ''')
    assert out.strip() == "ok"


def test_threads_allocating_resizing_and_freeing_each_others_blocks():
    """Four threads allocate (empty / zeros, 0-24 MiB), check and shrink or grow their arrays, and hand half
    of them to another thread to free; the heap checks and the contents must hold throughout."""
    out = _run_child('''
    import queue, threading, numpy as np
    from splyce.native import memory_pool as mp
    mp.set_limit(64 << 20)
    handoff = queue.Queue()
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            with mp.active():
                for step in range(300):
                    n = int(rng.choice([0, 1, 100, 1 << 17, 1 << 18, 1 << 20, 3 << 20]))
                    zeroed = rng.random() < 0.4
                    a = np.zeros(n) if zeroed else np.empty(n)
                    assert not zeroed or not a.any(), "zeros that are not zero"
                    a[:] = seed
                    if rng.random() < 0.3:
                        m = int(rng.integers(0, 2 * n + 2))
                        a.resize(m, refcheck=False)
                        assert np.all(a[: min(n, m)] == seed), "contents lost in resize"
                        a[:] = seed
                    if rng.random() < 0.5:
                        handoff.put(a)
                    while not handoff.empty():
                        try:
                            b = handoff.get_nowait()
                        except queue.Empty:
                            break
                        assert b.size == 0 or b[0] == b[-1], "a block changed while in use"
                        del b
                    del a
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = mp.stats()
    assert s["hits"] > 0 and s["pooled_bytes"] <= 64 << 20, s
    mp.release()
    print("ok", s["hits"], s["misses"])
    ''')
    assert out.startswith("ok")


def test_pooled_arrays_alive_at_interpreter_exit_are_freed_cleanly():
    out = _run_child('''
    import numpy as np, scipy.sparse as sps, splyce
    from splyce.native import memory_pool as mp
    rng = np.random.default_rng(0)
    A = sps.coo_array((rng.uniform(-1, 1, 10**6), (rng.integers(0, 200_000, 10**6), rng.integers(0, 200_000, 10**6))),
                      shape=(200_000, 200_000)).tocsr()
    KEEP = [splyce.matmul(A, np.ones((200_000, 4))), splyce.matmul(A, A)]
    with mp.active():
        CYCLE = [np.empty(1 << 20)]
        CYCLE.append(CYCLE)
    print("exiting")
    ''')
    assert out.strip() == "exiting"


def test_jitted_dense_results_from_1_mib_come_from_the_pool(fresh_pool):
    A = _large(n=100_000, nnz=200_000)
    X = np.random.default_rng(1).uniform(-1, 1, (100_000, 4))
    f = splyce.jit(lambda a, x: a @ x)
    big = f(A, X)                                          # 3.2 MB of zeros to accumulate into
    assert mp.is_pooled(big)
    np.testing.assert_allclose(big, A @ X, rtol=1e-12, atol=1e-12)
    small = f(A[:1000], X)                                 # 32 KB: plain np.zeros
    assert not mp.is_pooled(small)
    np.testing.assert_allclose(small, A[:1000] @ X, rtol=1e-12, atol=1e-12)


def test_a_fork_while_another_thread_uses_the_pool_leaves_the_child_working():
    out = _run_child('''
    import os, threading, numpy as np
    from splyce.native import memory_pool as mp
    stop = threading.Event()
    mp.restore(mp.install())                           # built before the threads start, as in a running program

    def churn():
        with mp.active():
            while not stop.is_set():
                a = np.empty(1 << 18)
                a[:] = 1.0
                del a

    # A thread inside the allocator at the fork, made certain: the lock word set by hand in the parent.
    mp._table[mp._LOCK] = 1
    pid = os.fork()
    if pid == 0:
        with mp.active():
            c = np.ones(1 << 18)
        os._exit(0 if c.sum() == 1 << 18 else 3)
    held = os.waitpid(pid, 0)[1]
    mp._table[mp._LOCK] = 0
    assert held == 0, held
    t = threading.Thread(target=churn)
    t.start()
    codes = []
    for _ in range(100):
        pid = os.fork()
        if pid == 0:                                   # the child: allocate and free through the pool
            with mp.active():
                arrays = [np.ones(1 << 18) for _ in range(4)]
                ok = all(x.sum() == 1 << 18 for x in arrays)
                del arrays
                b = np.zeros(1 << 18)
            os._exit(0 if ok and not b.any() else 3)
        codes.append(os.waitpid(pid, 0)[1])
    stop.set()
    t.join()
    print(codes)
    assert all(c == 0 for c in codes), codes
    ''', timeout=120)
    assert out.strip().startswith("[0")


def test_a_block_grown_past_its_capacity_takes_a_kept_block_and_keeps_its_contents(fresh_pool):
    with mp.active():
        spare = np.empty(6 * MB // 8)
        spare_address = spare.ctypes.data
        a = np.arange(3 * MB // 8, dtype=np.float64)
    del spare                                               # kept: 6 MiB
    hits = mp.stats()["hits"]
    a.resize(5 * MB // 8, refcheck=False)                   # past a's 3 MiB: takes the kept 6 MiB block
    assert a.ctypes.data == spare_address and mp.stats()["hits"] == hits + 1
    assert np.array_equal(a[:3 * MB // 8], np.arange(3 * MB // 8, dtype=np.float64))
    a[3 * MB // 8:] = -1.0
    assert a[-1] == -1.0


def test_jitted_sparse_results_reuse_their_buffers_and_stay_exact(fresh_pool):
    """Kernels' own allocations (the checked allocator, backend/alloc_guard.py) come from the pool: a loop
    of calls reuses the last result's freed buffers, and the plain sparsifier's result buffers, grown by
    doubling through realloc (the growth takes kept blocks, copying), hold exactly scipy's result every time,
    whichever inputs came before."""
    from splyce.backend import alloc_guard

    rng = np.random.default_rng(3)
    mats = [sps.random_array((700, 700), density=d, format="csr", rng=rng) for d in (0.3, 0.05, 0.3, 0.12)]
    add = splyce.jit(lambda a, b: a + b, out_format="sparse", vectorize=False)
    lane = splyce.jit(lambda a, b: a + b, out_format="sparse")
    add(mats[0], mats[0])
    assert alloc_guard.install().heap is not None
    before = mp.stats()
    for f in (add, lane):
        for a, b in zip(mats, mats[1:] + mats[:1]):
            for _ in range(2):
                got = f(a, b)
                ref = (a + b).tocsr()
                assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
                assert np.array_equal(got.data.view(np.int64), ref.data.view(np.int64))
                del got
    after = mp.stats()
    assert after["hits"] > before["hits"] + 8 and after["kept"] > before["kept"]


def test_kernels_allocate_from_libc_when_the_pool_is_off():
    out = _run_child('''
    import numpy as np, scipy.sparse as sps, splyce
    from splyce.backend import alloc_guard
    a = sps.random_array((600, 600), density=0.3, format="csr", random_state=0)
    got = splyce.jit(lambda a, b: a + b, out_format="sparse")(a, a)
    print(alloc_guard.install().heap is None, abs(got - (a + a)).max() == 0)
    ''', env_extra={"SPLYCE_POOL_BYTES": "0"})
    assert out.split() == ["True", "True"], out
