"""native/spgemm_sorted.py: a block's columns taken from its 64-bit mask by one vector compress (hosts with
AVX-512 VBMI2's byte compress) or by the table of 8-bit masks (every other host: LLVM expands the compress
lane by lane there). Both kernels are compiled and run here on any x86 host and must give the same rows, bit
for bit, the scipy product's positions and the sums the MLIR kernel gives."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.native import spgemm, spgemm_sorted
from splyce.native.array_objects import address

from test_one_engine import _same
from test_one_engine_products import _both, _designed_rows


@pytest.fixture
def kernels_for(monkeypatch):
    """``set(compress)``: the sorted kernels compiled from now on with (True) or without (False) the compress."""
    def choose(compress: bool):
        monkeypatch.setattr(spgemm_sorted, "byte_compress", lambda: compress)
        spgemm._product.cache_clear()
    yield choose
    spgemm._product.cache_clear()


def test_byte_compress_follows_the_vbmi2_feature(monkeypatch):
    """The compress only where the host has VBMI2 (Zen 4, Sapphire Rapids: their code as before); the table on
    AVX2 hosts (Zen 1) and on AVX-512 hosts without VBMI2 (Skylake-X); the IR says which."""
    from splyce.native import codegen

    fields = dict(name="k", t="double", mul="fmul", add="fadd", **spgemm.spgemm_ir.index_fields(32, 32, 32, 32, 32))
    for features, want in (("+avx2,+avx512f,+avx512vbmi2", True), ("+avx2,+fma,+bmi2", False),
                           ("+avx2,+avx512f,+avx512bw,-avx512vbmi2", False)):
        monkeypatch.setattr(codegen, "host_target", lambda f=features: codegen.Target("x86_64", "cpu", f))
        assert spgemm_sorted.byte_compress() is want
        text = spgemm_sorted.rows_ir(fields, "flags")
        assert ("call <64 x i8> @llvm.experimental.vector.compress" in text) is want
        assert ("@k_bits" in text) is not want


def _run(a, b, n: int, co: int):
    kernel, _ = spgemm._product(False, np.dtype(np.float64), 64, 64, 64, 64, co, True, "flags")
    flops = int(spgemm.row_flops_prefix(a.indptr, a.indices, b.indptr)[-1])
    cols, vals = np.empty(flops, dtype=f"int{co}"), np.empty(flops)
    ends, buf = np.empty(a.shape[0], dtype=np.int64), spgemm_sorted.scratch(n, "flags")
    count = kernel(*(address(x) for x in (a.indptr, a.indices, a.data, b.indptr, b.indices, b.data)), 0,
                   a.shape[0], 0, address(ends), address(cols), address(vals), address(buf))
    dense, _, flags, _, end = spgemm_sorted.layout(n)
    assert not buf[dense: dense + n].any() and not buf[flags: end].any()    # left zero for the next row
    return cols[:count].astype(np.int64), vals[:count], ends


@pytest.mark.parametrize("co", [32, 64])
def test_table_and_compress_give_the_same_rows(kernels_for, co):
    """Blocks of 1, 2, 3 (the two columns stored without the table, the third by it), 8, 9, w, w + 1 and 64
    columns, the last partial block, the designed rows summed in pairs: both kernels, 32- and 64-bit result
    columns, the same positions and value bits, the scipy product's pattern."""
    n = 64 * 5 + 37
    rows = _designed_rows(n, 16 if co == 32 else 8)
    rows += [np.array([64]), np.array([64, 127]), np.array([0, 1, 63]), np.arange(64, 72), np.arange(128, 137),
             np.array([7, 70, 71, 300, 301, 302, n - 1])]
    rng = np.random.default_rng(11)
    b = sps.csr_array((rng.standard_normal(sum(len(r) for r in rows)), np.concatenate(rows).astype(np.int64),
                       np.cumsum([0] + [len(r) for r in rows])), shape=(len(rows), n))
    k = len(rows)
    pairs = [(i,) for i in range(k)] + [(0, 1), (2, 3), (5, 6), (9, 10), (10, 11), (11, 12), (12, 13), (13, 14)]
    a = sps.csr_array((rng.standard_normal(sum(len(p) for p in pairs)), np.concatenate(pairs),
                       np.cumsum([0] + [len(p) for p in pairs])), shape=(len(pairs), k))
    out = {}
    for compress in (True, False):
        kernels_for(compress)
        out[compress] = _run(a, b, n, co)
    ref = (a @ b).tocsr()
    ref.sort_indices()
    for cols, vals, ends in out.values():
        assert np.array_equal(ends, ref.indptr[1:]) and np.array_equal(cols, ref.indices)
        assert np.array_equal(vals.view(np.uint8), out[True][1].view(np.uint8))
    assert np.allclose(out[False][1], ref.data)


@pytest.mark.parametrize("compress", [True, False])
def test_both_block_paths_are_the_mlir_kernels_product(kernels_for, compress):
    """A power-law product (rows of tens to hundreds of columns spread over all blocks, the BA graphs' shape)
    through the jit's library route with each block path, bit for bit the MLIR kernel's."""
    kernels_for(compress)
    rng = np.random.default_rng(12)
    n = 3000
    degree = np.minimum(1 + (rng.pareto(1.2, n) * 3).astype(int), 400)
    rows = [np.sort(rng.choice(n, size=d, replace=False)) for d in degree]
    a = sps.csr_array((rng.standard_normal(int(degree.sum())), np.concatenate(rows).astype(np.int32),
                       np.cumsum([0, *degree]).astype(np.int32)), shape=(n, n))
    a.data[:5] = [np.nan, -0.0, np.inf, 0.0, -np.inf]
    A = splyce.asarray(a)
    assert spgemm_sorted.kind_for(a.indices, int(spgemm.row_flops_prefix(a.indptr, a.indices, a.indptr)[-1]),
                                  n) == "flags"
    fast, mlir = _both(lambda a, b: a @ b, None, splyce.CSR.with_widths(32, 32))    # sorted rows
    _same(fast(A, A), mlir(A, A))
