"""native/spgemm_network.py: the map kernel's rows of up to 16 int32 columns sorted in registers (a bitonic
network of packed keys, the values permuted with them), and spgemm_sorted.kind_for's rule sending products of
short rows (road networks) to it. Bit for bit against the MLIR kernel (``library=False``) and against the
same kernel with vector ranks."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.native import spgemm, spgemm_network, spgemm_sorted

from test_one_engine_products import _product_on_both

pytestmark = pytest.mark.skipif(not spgemm_network.available(), reason="the network needs AVX-512F")


def _short_rows(rng, m, n, dtype, index=np.int32):
    """A (m x k) and B (k x n) whose product rows hold 0 to 17 entries (one-term and repeated columns, 1-entry
    rows, empty rows, exactly 16 and 17), B's rows spread over all of n (no adjacent runs), with explicit zeros,
    -0.0, NaN and +-Inf among float values."""
    k = 3 * m
    b_cols = [np.sort(rng.choice(n, size=int(rng.integers(0, 6)), replace=False)) for _ in range(k)]
    b_cols[0] = np.sort(rng.choice(n, size=16, replace=False))     # a row of exactly 16 / 17 entries
    b_cols[1] = np.sort(rng.choice(np.setdiff1d(np.arange(n), b_cols[0]), size=1, replace=False))
    a_rows = [np.sort(rng.choice(k, size=int(rng.integers(0, 4)), replace=False)) for _ in range(m)]
    a_rows[:4] = [np.array([0]), np.array([0, 1]), np.array([], int), np.array([1])]
    def csr(rows, width):
        ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
        cols = np.concatenate(rows).astype(index)
        vals = rng.standard_normal(len(cols))
        if np.issubdtype(dtype, np.integer):
            vals = np.round(vals * 4)
        else:
            at = rng.choice(len(vals), size=min(len(vals), 12), replace=False)
            vals[at] = [0.0, -0.0, np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -0.0, np.nan, 2.0, -0.0][: len(at)]
        x = sps.csr_array((vals.astype(dtype), cols, ptr.astype(index)), shape=(len(rows), width))
        x.has_sorted_indices = True
        return x
    return csr(a_rows, k), csr(b_cols, n)


def _parts(x):
    return x.data, x.indices, x.indptr


def test_kind_for_short_rows_takes_the_map_kernel():
    """The map kernel with the network ("short") when flops <= SHORT_ROW_FLOPS * rows, whatever B's columns;
    above, the adjacency rule (the map kernel there keeps its ranks)."""
    spread = np.arange(0, 3000, 3, dtype=np.int32)                     # no adjacent pair: flags by adjacency
    rows = 100
    at = spgemm_sorted.SHORT_ROW_FLOPS * rows
    assert spgemm_sorted.kind_for(spread, at, rows) == "short"
    assert spgemm_sorted.kind_for(np.arange(3000, dtype=np.int32), at, rows) == "short"
    assert spgemm_sorted.kind_for(spread, at + 1, rows) == "flags"
    assert spgemm_sorted.kind_for(spread) == "flags"
    assert spgemm_sorted.kind_for(np.arange(3000, dtype=np.int32), at + 1, rows) == "map"


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("seed", range(2))
def test_short_rows_bit_for_bit_against_the_mlir_kernel(dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = _short_rows(rng, 400, (50, 5000)[seed], dtype)
    flops = int(spgemm.row_flops_prefix(a.indptr, a.indices, b.indptr)[-1])
    assert spgemm_sorted.kind_for(b.indices, flops, a.shape[0]) == "short"
    for got in _product_on_both(splyce.asarray(a), splyce.asarray(b)):
        lengths = np.diff(got.indptr)
        assert {0, 1, 16, 17} <= set(lengths.tolist()) and np.mean(lengths <= 16) > 0.9


def _product(a, b, n, dtype, threads=1):
    return spgemm.spgemm(_parts(a), _parts(b), n, dtype, threads, keep_zeros=True, sort=True)


def _identical(x, y):
    assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
    assert x.data.dtype == y.data.dtype and np.array_equal(x.data.view(np.uint8), y.data.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_network_is_the_ranks_bit_for_bit(monkeypatch, dtype):
    """The map kernel with the network and with vector ranks only (a host without AVX-512F), and with the
    network's column limit at 64, so that the wider product takes the ranks in the same kernel: one result."""
    rng = np.random.default_rng(5)
    a, b = _short_rows(rng, 300, 900, dtype)
    small_a, small_b = _short_rows(rng, 300, 60, dtype)
    spgemm._product.cache_clear()
    with_network = _product(a, b, 900, dtype), _product(small_a, small_b, 60, dtype)
    try:
        monkeypatch.setattr(spgemm_network, "available", lambda: False)
        spgemm._product.cache_clear()
        ranks = _product(a, b, 900, dtype), _product(small_a, small_b, 60, dtype)
        monkeypatch.setattr(spgemm_network, "available", lambda: True)
        monkeypatch.setattr(spgemm_network, "COLUMN_LIMIT", 64)
        spgemm._product.cache_clear()
        limited = _product(a, b, 900, dtype), _product(small_a, small_b, 60, dtype)
    finally:
        spgemm._product.cache_clear()
    for x, y, z in zip(with_network, ranks, limited):
        _identical(x, y)
        _identical(x, z)
    ref = (a @ b).tocsr()       # scipy's positions (explicit zeros aside) and sorted columns
    assert len(with_network[0].indices) >= ref.nnz


def test_network_ir_and_its_rule():
    """The network's IR: 10 steps of min / max, the values permuted, masked stores; int32 columns only, the
    "short" kind only."""
    from splyce.native import spgemm_ir, spgemm_sorted_map

    net, out = spgemm_network.steps("%k")
    assert net.count("@llvm.umin") == 10 and net.count("@llvm.umax") == 10 and out == "%nt_s9"
    fields = dict(name="f", t="double", mul="fmul", add="fadd", **spgemm_ir.index_fields(32, 32, 32, 32, 32))
    text = spgemm_sorted_map.rows_ir(fields, network=True)
    assert "nt_sort:" in text and text.count("@llvm.x86.avx512.vpermi2var.q.512(") == 3
    assert "nt_sort:" not in spgemm_sorted_map.rows_ir(fields, network=False)
    assert "nt_sort:" in spgemm_sorted.rows_ir(fields, "short")
    assert "nt_sort:" not in spgemm_sorted.rows_ir(fields, "map")          # rows of equal lengths: the ranks
    wide = dict(fields, **spgemm_ir.index_fields(64, 64, 64, 64, 64))
    assert "nt_sort:" not in spgemm_sorted_map.rows_ir(wide, network=True)
    with pytest.raises(ValueError, match="no network"):
        spgemm_network.row_ir("i16", "a", "b")
