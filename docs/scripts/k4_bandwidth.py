"""K4 (SpMMH, B * C into a dense 4000 x 20000 output) against the memory bandwidth: where its time goes.

Usage: python docs/scripts/k4_bandwidth.py [rounds]   (default 9)

Thread CPU time (time.thread_time_ns: page faults of the thread included, a descheduled wait not), interleaved
rounds with the order rotated, median and min per candidate; every result checked bit-identical to the plain
sparsifier's. Candidates:
  plain / splyce into touched  - Jitted.accumulate(out, B, C), out allocated and zeroed untimed (bench kernels)
  plain / splyce as called     - f(B, C): the output allocated (memory pool) and zeroed inside the call
  zeros as the call allocates  - np.zeros through the memory pool, as runtime/kernel.py's _zeros
  write out[...] = 0 / memset / fill(1.0) - a touched 640 MB array written in full three ways
  read operands                - NumPy max over an int32 view of each buffer of B and C (the read floor)
  scatter floor                - the product's entries added into a touched output with no merge at all
  merge only plain / splyce    - einsum("ij,ij->", B, C): the same intersection, summed, no output
  splyce sparse + scatter      - the products first into a CSR (out_format="sparse"), then added into a touched
                                 output by the scatter floor's kernel: the stores taken out of the merge loop
"""
import ctypes
import statistics
import sys
import time

import numpy as np

import splyce
from splyce.bench import bandwidth
from splyce.bench.ablation import _scatter_dense
from splyce.bench.common import touched_zeros
from splyce.bench.kernels import traffic
from splyce.bench.paper_kernels import KERNELS
from splyce.native import memory_pool

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
spec = KERNELS["K4"]
B, C = ops = spec.operands()
shape = B.shape
base, fast = splyce.jit(spec.fun, vectorize=False), splyce.jit(spec.fun)
product = B.copy().to_scipy().multiply(C.copy().to_scipy()).tocsr()   # copies: to_scipy unseals its tensor
P = splyce.asarray(product)
scatter = splyce.jit(_scatter_dense, vectorize=False)


def merge_only(b, c):
    return splyce.einsum("ij,ij->", b, c, order="ij")


def k4_sparse(b, c):
    return splyce.einsum("ij,ij->ij", b, c, out_format="sparse", order="ij")


merge_base, merge_fast = splyce.jit(merge_only, vectorize=False), splyce.jit(merge_only)
sparse_fast = splyce.jit(k4_sparse)
W = touched_zeros(shape)
buffers = [b.view(np.int32) for t in ops for b in (*t.pos, *t.crd, t.values) if b is not None]


def zeros_pooled(_):
    with memory_pool.active():
        return np.zeros(shape)


def fill_zero(_):
    W[...] = 0


def memset(_):
    ctypes.memset(W.ctypes.data, 0, W.nbytes)


def fill_one(_):
    W.fill(1.0)


none = (lambda: None)
cands = {
    "plain into touched": (lambda: touched_zeros(shape), lambda out: base.accumulate(out, *ops)),
    "splyce into touched": (lambda: touched_zeros(shape), lambda out: fast.accumulate(out, *ops)),
    "plain as called": (none, lambda _: base(*ops)),
    "splyce as called": (none, lambda _: fast(*ops)),
    "zeros as the call allocates": (none, zeros_pooled),
    "write out[...] = 0": (none, fill_zero),
    "write memset": (none, memset),
    "write fill(1.0)": (none, fill_one),
    "read operands": (none, lambda _: max(int(x.max()) for x in buffers)),
    "scatter floor": (lambda: touched_zeros(shape), lambda out: scatter.accumulate(out, P)),
    "merge only plain": (none, lambda _: merge_base(*ops)),
    "merge only splyce": (none, lambda _: merge_fast(*ops)),
    "splyce sparse + scatter": (lambda: touched_zeros(shape), lambda out: scatter.accumulate(out, sparse_fast(*ops))),
}

# warm-up (compiles) and checks
expected = base.accumulate(touched_zeros(shape), *ops)
for name in ("splyce into touched", "plain as called", "splyce as called", "scatter floor",
             "splyce sparse + scatter"):
    setup, run = cands[name]
    got = run(setup())
    assert np.array_equal(got, expected) and np.array_equal(np.signbit(got), np.signbit(expected)), name
    del got
s_plain, s_fast = cands["merge only plain"][1](None), cands["merge only splyce"][1](None)
assert float(s_plain) == float(s_fast) and np.isclose(float(s_plain), product.sum()), (s_plain, s_fast)

times = {k: [] for k in cands}
names = list(cands)
for r in range(rounds):
    for name in names[r % len(names):] + names[:r % len(names)]:
        setup, run = cands[name]
        state = setup()
        t0 = time.thread_time_ns()
        result = run(state)
        times[name].append((time.thread_time_ns() - t0) / 1e6)
        del result, state

into = traffic(ops, expected, accumulate=True)
called = traffic(ops, expected, accumulate=False)
floor_into, floor_called = bandwidth.floor_seconds(into) * 1e3, bandwidth.floor_seconds(called) * 1e3
print(f"# {rounds} rounds, thread CPU ms; {bandwidth.rates_line()}")
print(f"# model into touched: read {into.read / 1e6:.1f} MB + updated {into.updated / 1e6:.1f} MB "
      f"({into.updated // bandwidth.LINE} lines, {product.nnz} products) -> floor {floor_into:.2f} ms")
print(f"# model as called: read {called.read / 1e6:.1f} MB + written {called.written / 1e6:.1f} MB "
      f"-> floor {floor_called:.2f} ms")
for name in names:
    med, lo = statistics.median(times[name]), min(times[name])
    floor = floor_called if "as called" in name else floor_into if "touched" in name or "+" in name else None
    share = f"  floor / median {floor / med:.2f}" if floor else ""
    print(f"{name:30s} median {med:8.2f}  min {lo:8.2f}{share}")
