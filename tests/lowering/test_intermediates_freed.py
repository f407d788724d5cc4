"""Intermediate results of a jitted function are freed before it returns (a loop of calls must not grow the
heap), and a free that MLIR's folding moved onto an argument, a result or a freed buffer is dropped."""

import gc

import numpy as np
import pytest
import scipy.sparse as sps
from mlir import ir

import splyce
from leak_corpus import KINDS, PROGRAMS, VARIANTS, dense, heap_growth, heap_in_use, matches, reference
from leak_corpus import operands as leak_operands
from splyce.passes.dealloc_guard import drop_foreign_deallocs


def _operands():
    a = sps.random_array((300, 300), density=0.02, random_state=0, format="csr")
    b = sps.random_array((300, 300), density=0.02, random_state=1, format="csr")
    return a, b, np.random.default_rng(2).random((300, 8))


CASES = {
    "dense intermediate": (lambda m, v, _: m @ (m @ v), "a x"),
    "sparse intermediates": (lambda p, _, q: (p @ q) * p + q, "a b"),
    "two dense intermediates": (lambda p, _, q: splyce.matmul(p, q, out_format="dense")
                                + splyce.matmul(q, p, out_format="dense"), "a b"),
}


def test_sparse_product_intermediates_are_freed():
    """``abs(p @ q)``'s product is a sparse intermediate of the kernel: its buffers (grown by ``realloc`` while
    the sparsifier inserts) are freed before the kernel returns (they leaked ~199 KB a call)."""
    a, b, _ = _operands()
    f = splyce.jit(lambda p, q: abs(p @ q))
    got = f(a, b)
    scf = f.lower(a, b).as_text("scf")
    # the intermediate's positions, coordinates and values, and the product's row workspace (3 + 3)
    assert scf.count("memref.dealloc") == 6 and "__splyce_free" not in scf
    before = heap_in_use()
    if before is None:
        pytest.skip("the C library has no mallinfo2 (not glibc)")
    for _ in range(50):
        del got
        got = f(a, b)
    del got
    assert heap_in_use() - before < 50_000


# tests/lowering/leak_corpus.py: a quick subset on CSR operands and default options (two products merged, a product read
# twice and returned transposed; abs(p @ q) is above), every other program x options variant x operand kind slow
_QUICK = ("(p @ q).multiply(q @ p)", "(s := p @ q) + p, s.T")
_LEAKED = 1_000   # bytes a call: the smallest leak the corpus had is 5.4 KB a call ((p @ q) * p + q)


def _corpus_cases():
    for name in PROGRAMS:
        for variant in VARIANTS:
            quick = name in _QUICK and variant == "default"
            yield pytest.param(name, variant, "csr", marks=() if quick else pytest.mark.slow,
                               id=f"{name}-{variant}")
        for kind in KINDS:
            if kind != "csr":
                yield pytest.param(name, "default", kind, marks=pytest.mark.slow, id=f"{name}-{kind}")


@pytest.mark.parametrize("name, variant, kind", list(_corpus_cases()))
def test_corpus_calls_do_not_grow_the_heap(name, variant, kind):
    fun = PROGRAMS[name]
    args = leak_operands(kind)
    f = splyce.jit(fun, **VARIANTS[variant])
    assert matches(dense(f(*args)), reference(fun, kind))
    growth = heap_growth(f, args, 30)
    if growth is None:
        pytest.skip("the C library has no mallinfo2 (not glibc)")
    assert growth < _LEAKED


def test_results_survive_the_frees_of_intermediates():
    """Results that share a freed intermediate's values (returned beside it, transposed, summed) stay valid
    after everything else is collected and after later calls reuse the freed memory."""
    p, q, x = leak_operands("csr")
    funs = [PROGRAMS[n] for n in ("(p @ q, abs(p @ q))", "(s := p @ q) + p, s.T")]
    kept = []
    for fun in funs:
        f = splyce.jit(fun)
        kept.append((f(p, q, x), reference(fun)))
        del f
    gc.collect()
    for fun in funs:                       # more calls: freed buffers are handed out again and overwritten
        f = splyce.jit(fun)
        for _ in range(5):
            f(p, q, x)
    gc.collect()
    for got, want in kept:
        assert matches(dense(got), want)
        for leaf in got:
            if hasattr(leaf, "indices"):
                leaf.check_format(full_check=True)


@pytest.mark.parametrize("library", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_calls_do_not_grow_the_heap(case, library):
    """The MLIR kernel's intermediates (``library=False``: ``m @ (m @ v)``'s inner SpMM stays a loop nest of
    the kernel) and, by default, those of a native step computed before the kernel (planner/plan.py)."""
    fun, _ = CASES[case]
    a, b, x = _operands()
    f = splyce.jit(fun, library=library)
    want = fun(a.toarray(), x, b.toarray())
    got = f(a, x, b)
    assert np.allclose(got.toarray() if hasattr(got, "toarray") else got, want)
    if not library:
        assert "memref.dealloc" in f.lower(a, x, b).as_text("splyce")
    before = heap_in_use()
    if before is None:
        pytest.skip("the C library has no mallinfo2 (not glibc)")
    for _ in range(50):
        del got
        got = f(a, x, b)
    del got
    # a leaked intermediate is >= 19 KB per call (300 x 8 doubles); 50 calls would add >= 0.9 MB
    assert heap_in_use() - before < 400_000


@pytest.mark.parametrize("fun", [lambda p, q: (p * 1) @ q, lambda p, q: (p @ q) * 1, lambda p, q: abs(p) * q])
def test_folded_identity_kernels_free_nothing_of_the_caller(fun):
    a, b, _ = _operands()
    ai, bi = a.astype(np.int64), b.astype(np.int64)
    ai.data[:], bi.data[:] = 3, 2
    keep = (ai.data.copy(), ai.indices.copy(), ai.indptr.copy())
    f = splyce.jit(fun)
    for _ in range(3):
        got = f(ai, bi)
        want = fun(ai.toarray(), bi.toarray())
        assert np.array_equal(got.toarray() if hasattr(got, "toarray") else got, want)
    assert all(np.array_equal(k, v) for k, v in zip(keep, (ai.data, ai.indices, ai.indptr)))


GUARD = """
func.func @f(%arg: memref<?xf64>, %n: index) -> memref<?xf64> {
  %own = memref.alloc(%n) : memref<?xf64>
  %out = memref.alloc(%n) : memref<?xf64>
  %view = memref.cast %arg : memref<?xf64> to memref<4xf64>
  memref.dealloc %view : memref<4xf64>
  memref.dealloc %out : memref<?xf64>
  memref.dealloc %own : memref<?xf64>
  memref.dealloc %own : memref<?xf64>
  return %out : memref<?xf64>
}
"""


def test_guard_keeps_only_frees_of_owned_buffers():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(GUARD)
        assert drop_foreign_deallocs(module) == 3      # the argument's view, the result, the second free
        module.operation.verify()
        kept = [line.strip() for line in str(module).splitlines() if "memref.dealloc" in line]
        assert kept == ["memref.dealloc %alloc : memref<?xf64>"]


def test_freeing_does_not_stop_fusion():
    """``(x + y).sum(axis=1)`` stays one kernel (the add fused into the row sums): no intermediate to free."""
    a = splyce.asarray(np.eye(6) * 2.0, format=splyce.CSR)
    f = splyce.jit(lambda x, y: (x + y).sum(axis=1))
    assert np.array_equal(f(a, a), np.full(6, 4.0))
    scf = f.lower(a, a).as_text("scf")
    assert scf.count("scf.while") == 1 and "memref.dealloc" not in scf
