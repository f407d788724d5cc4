"""einsum drop-ins whose result lies on a sparse mask: masked SpGEMM and SDDMM, native, vs scipy."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.native import ir_text
from splyce.dropin import Formulation, OperandInfo, choose_einsum_formulation


def _canonical(x):
    x = sps.csr_array(x).copy()
    x.sum_duplicates()
    x.eliminate_zeros()
    return x


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from([np.float64, np.float32, np.int64]), st.sampled_from([1, 2]))
def test_masked_spgemm_bit_identical_to_scipy(m, k, n, density, seed, dtype, threads):
    rng = np.random.default_rng(seed)
    a, b, mask = (sps.random_array(s, density=density, format="csr", rng=rng) for s in ((m, k), (k, n), (m, n)))
    for x in (a, b, mask):
        x.data = (x.data * 8 - 4).astype(dtype)
    ref = _canonical((a @ b).multiply(mask))
    for subscripts, ops in (("ik,kj,ij->ij", (a, b, mask)), ("ij,ik,kj->ij", (mask, a, b))):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ir_text, "MIN_CHUNK", 1)       # threads split these tiny products
            ours = splyce.einsum(subscripts, *ops, threads=threads)
        assert isinstance(ours, sps.csr_array) and ours.dtype == ref.dtype
        assert np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)
        assert np.array_equal(ours.data, ref.data)


@pytest.mark.parametrize("shape", [(0, 0, 3), (1, 1, 1), (20, 30, 32), (9, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sddmm_matches_scipy(shape, dtype, monkeypatch):
    from splyce.native import sddmm as native_sddmm

    m, n, d = shape
    rng = np.random.default_rng(m + n)
    mask = sps.random_array((m, n), density=0.3, format="csr", rng=rng, dtype=dtype)
    x, y = rng.random((m, d)).astype(dtype), rng.random((n, d)).astype(dtype)
    x[m // 2:m // 2 + 1] = 0                                # a row of zero results, dropped (as scipy does)
    ours = splyce.einsum("ij,ik,jk->ij", mask, x, y)
    ref = _canonical(mask.multiply(x @ y.T))
    assert ours.dtype == ref.dtype and np.array_equal(ours.indices, ref.indices)
    np.testing.assert_allclose(ours.data, ref.data, rtol=1e-5 if dtype == np.float32 else 1e-12)
    split = []
    real_chunks = native_sddmm.row_chunks
    monkeypatch.setattr(native_sddmm, "row_chunks", lambda *a: split.append(1) or real_chunks(*a))
    two = splyce.einsum("ij,ik,jk->ij", mask, x, y, threads=2)
    assert not split                                     # too small to split: one range on the calling thread
    assert np.array_equal(two.data, ours.data)
    monkeypatch.setattr(native_sddmm, "SDDMM_SERIAL_MAX_WORK", 0)      # now split across the threads
    two = splyce.einsum("ij,ik,jk->ij", mask, x, y, threads=2)
    assert split or m < 2
    assert np.array_equal(two.data, ours.data)           # bit-identical across threads
    assert np.array_equal(two.indices, ours.indices) and np.array_equal(two.indptr, ref.indptr)
    y[:] = 1                                             # no zero result: the index arrays copied by the threads
    full = splyce.einsum("ij,ik,jk->ij", mask, x + 1, y, threads=2)
    assert np.array_equal(full.indptr, mask.indptr) and np.array_equal(full.indices, mask.indices)
    assert full.indices is not mask.indices and not np.shares_memory(full.indptr, mask.indptr)


def test_masked_spgemm_chunks_balance_products_on_power_law_rows(monkeypatch):
    """Chunks balance mask entries plus products (hub rows hold most products, not most entries); results
    are bit-identical for any number of threads and equal to scipy's."""
    from splyce.native import masked_chunks as native_masked
    from splyce.native.ir_text import row_chunks as _row_chunks

    rng = np.random.default_rng(3)
    n, entries = 3000, 30000
    rows = np.minimum((rng.pareto(0.9, entries) * 2).astype(np.int64), n - 1)
    g = sps.csr_array((np.ones(entries), (rows, rng.integers(0, n, entries))), shape=(n, n))
    low = sps.csr_array(sps.tril(g + g.T, -1, format="csr"))
    low.data = rng.uniform(-1, 1, low.nnz)
    products = np.zeros(low.nnz + 1, dtype=np.int64)
    np.cumsum(np.diff(low.indptr)[low.indices], out=products[1:])
    work = products[low.indptr] + low.indptr                 # exact cumulative work per row
    for threads in (2, 3):
        chunks = native_masked.masked_chunks(low.indptr, low.indptr, low.indices, low.indptr, threads)
        shares = [int(work[hi] - work[lo]) for lo, hi in chunks]
        assert len(chunks) == threads and sum(shares) == work[-1]
        assert max(shares) < 1.15 * work[-1] / threads           # by entries alone: far off on these rows
        by_entries = _row_chunks(low.indptr, threads)
        assert max(int(work[hi] - work[lo]) for lo, hi in by_entries) > max(shares)
    one = splyce.einsum("ik,kj,ij->ij", low, low, low, threads=1)
    assert np.array_equal(one.toarray(), _canonical((low @ low).multiply(low)).toarray())
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)          # threads split this small product
    for threads in (2, 3):
        many = splyce.einsum("ik,kj,ij->ij", low, low, low, threads=threads)
        assert np.array_equal(one.indptr, many.indptr) and np.array_equal(one.indices, many.indices)
        assert one.data.tobytes() == many.data.tobytes()


def test_triangle_sum_native_split_across_threads(monkeypatch):
    """``"ij,jk,ik->"`` with threads runs the native masked sum on work-balanced chunks (4 per thread); the
    partial sums of integer values are exact."""
    from splyce.native import masked_sum as native_masked

    sizes = []
    real = native_masked.run_taken
    monkeypatch.setattr(native_masked, "run_taken",
                        lambda fn, chunks, threads, state: sizes.append(len(chunks)) or real(fn, chunks, threads, state))
    rng = np.random.default_rng(6)
    rows = np.minimum((rng.pareto(0.9, 8000) * 2).astype(np.int64), 999)
    g = sps.csr_array((np.ones(8000), (rows, rng.integers(0, 1000, 8000))), shape=(1000, 1000))
    low = sps.csr_array(sps.tril(((g + g.T) > 0).astype(np.int64), -1))
    low.data = rng.integers(1, 5, low.nnz)
    want = int((low @ low).multiply(low).sum())
    assert splyce.einsum("ij,jk,ik->", low, low, low, threads=2) == want      # small: one chunk, one thread
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)          # threads split it as they split large graphs
    for threads in (1, 2, 3):
        assert splyce.einsum("ij,jk,ik->", low, low, low, threads=threads) == want
    assert sizes == [1, 1, 8, 12]


def test_masked_forms_never_build_a_dense_result():
    n = 10**6                                # a dense n x n result would need 8 TB
    band = sps.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1], format="csr")
    out = splyce.einsum("ik,kj,ij->ij", band, band, band)
    ref = _canonical((band @ band).multiply(band))
    assert np.array_equal(out.data, ref.data) and np.array_equal(out.indices, ref.indices)
    x = np.ones((n, 2))
    assert splyce.einsum("ij,ik,jk->ij", band, x, x).nnz == band.nnz


def test_einsum_formulation_choice():
    s, d = OperandInfo("scipy-array", (4, 4)), OperandInfo("numpy", (4, 3))
    assert choose_einsum_formulation(["ik", "kj", "ij"], "ij", [s, s, s]) == (Formulation.MASKED_GUSTAVSON, (2, 0, 1))
    assert choose_einsum_formulation(["ij", "ik", "jk"], "ij", [s, d, d]) == (Formulation.SDDMM, (0, 1, 2))
    assert choose_einsum_formulation(["ij", "jk", "ik"], "", [s, s, s])[0] is Formulation.COITERATE
    assert choose_einsum_formulation(["ik", "kj", "ij"], "ij", [s, s, s], "dense")[0] is Formulation.COITERATE
    assert choose_einsum_formulation(["ik", "jk", "ij"], "ij", [s, s, s])[0] is Formulation.COITERATE
    # value types the native kernels lack: the sparsifier's kernel, still on the mask's positions
    c = OperandInfo("scipy-array", (4, 4), np.dtype(np.complex128))
    assert choose_einsum_formulation(["ik", "kj", "ij"], "ij", [s, c, s]) == (Formulation.SPARSIFIER, (2, 0, 1))


def test_masked_bad_operands():
    good = sps.random_array((5, 5), density=0.5, format="csr", random_state=1)
    bad = sps.csr_array((np.ones(2), np.array([0, 9]), np.array([0, 2, 2, 2, 2, 2])), shape=(5, 5))
    with pytest.raises(ValueError, match="out of range"):
        splyce.einsum("ik,kj,ij->ij", good, good, bad)
    with pytest.raises(ValueError, match="sizes"):
        splyce.einsum("ij,ik,jk->ij", good, np.ones((5, 3)), np.ones((5, 4)))
    # a narrower integer mask is computed in the result dtype (narrow_dtypes), as NumPy's einsum gives
    mask = (good * 3).astype(np.uint8)
    out = splyce.einsum("ij,ik,jk->ij", mask, np.ones((5, 3)), np.ones((5, 3)))
    assert np.array_equal(out.toarray(), np.einsum("ij,ik,jk->ij", mask.toarray(), np.ones((5, 3)), np.ones((5, 3))))


def test_an_operand_passed_several_times_is_converted_and_checked_once(monkeypatch):
    from splyce.native import masked_sum_checked as native_masked
    from splyce.dropin import operands as dropin

    a = sps.random_array((40, 40), density=0.1, format="csr", rng=8)
    L = sps.csr_array(sps.tril(a, -1))
    calls, fast = [], []
    real = dropin.as_format
    monkeypatch.setattr(dropin, "as_format", lambda x, fmt, name, threads=1: calls.append(name) or real(x, fmt, name, threads))
    real_fast = native_masked.masked_sum_checked
    monkeypatch.setattr(native_masked, "masked_sum_checked",
                        lambda *args: fast.append((args[-2:], real_fast(*args))) or fast[-1][1])
    dense = L.toarray()
    want = np.einsum("ij,jk,ik->", dense, dense, dense)
    assert np.isclose(splyce.einsum("ij,jk,ik->", L, L, L), want)
    assert len(calls) + len(fast) == 1
    calls.clear()
    # from the second call of a signature on: the fast path, one native call checking L once
    assert splyce.einsum("ij,jk,ik->", L, L, L) == splyce.einsum("ij,jk,ik->", L, L, L)
    assert not calls and [f[0] for f in fast[-2:]] == [(False, False)] * 2
    for ops in ((L.copy(), L, L), (L, L.copy(), L), (L, L, L.copy())):    # each distinct operand checked
        ops[[x is not L for x in ops].index(True)].indices[-1] = 40
        with pytest.raises(ValueError, match="out of range"):
            splyce.einsum("ij,jk,ik->", *ops)
        assert fast[-1][1] is None                                        # the fast path declined, then the error
    calls.clear()
    masked = splyce.einsum("ik,kj,ij->ij", L, L, L)
    np.testing.assert_allclose(masked.toarray(), (dense @ dense) * dense)
    assert len(calls) == 1
    bad = L.copy()
    bad.indices[0] = 40
    with pytest.raises(ValueError, match="out of range"):
        splyce.einsum("ij,jk,ik->", bad, bad, bad)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)         # the checks split across threads too
    for threads in (1, 2):
        for defect in ((lambda x: x.indices.__setitem__(-1, 40)), (lambda x: x.indptr.__setitem__(20, 10**6))):
            bad = L.copy()
            defect(bad)
            for subscripts in ("ij,jk,ik->", "ik,kj,ij->ij"):
                with pytest.raises(ValueError, match="out of range|positions"):
                    splyce.einsum(subscripts, bad, bad, bad, threads=threads)


def test_small_triangle_count_on_several_threads_takes_the_one_call_path(monkeypatch):
    """threads=2 / None on a triangle count too small to split (the general path would run it on one thread
    after its own steps) takes the one native call, with the one-thread result; a count whose product bound
    reaches the split threshold keeps the general path; a bad threads value still raises."""
    from splyce.native import masked_chunks, masked_sum_checked as native_masked

    fast = []
    real_fast = native_masked.masked_sum_checked
    monkeypatch.setattr(native_masked, "masked_sum_checked", lambda *a: fast.append(1) or real_fast(*a))
    rng = np.random.default_rng(3)
    L = sps.tril(sps.random_array((300, 300), density=0.05, format="csr", rng=rng), -1).tocsr()
    L.data[:] = 1.0
    want = splyce.einsum("ij,jk,ik->", L, L, L)                    # files the plan (general path)
    for threads in (2, None, 2):
        fast.clear()
        got = splyce.einsum("ij,jk,ik->", L, L, L, threads=threads)
        assert fast == [1] and got == want
    with pytest.raises(ValueError, match="threads"):
        splyce.einsum("ij,jk,ik->", L, L, L, threads=0)
    hub = sps.lil_array((3000, 3000))                    # one long row: nnz x longest row passes the limit,
    hub[2999, :2999] = 1.0                               # the exact product count does not
    hub[np.arange(1, 2999), np.arange(0, 2998)] = 1.0
    hub = hub.tocsr()
    assert hub.nnz * 2999 >= masked_chunks.serial_max_work()
    want_hub = splyce.einsum("ij,jk,ik->", hub, hub, hub)
    fast.clear()
    assert splyce.einsum("ij,jk,ik->", hub, hub, hub, threads=2) == want_hub and fast == [1]
    monkeypatch.setattr(masked_chunks, "serial_max_work", lambda: 64)   # now "large": the general path
    fast.clear()
    assert splyce.einsum("ij,jk,ik->", L, L, L, threads=2) == want and not fast


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_triangle_count_on_several_threads_counts_hits(dtype, monkeypatch):
    """A 0/1 pattern split across threads is counted by the branch-free hit count, as on one thread: the same
    value as one thread and scipy, of the same type. Not counted (summed instead): a value other than one, a
    sample of rare hits, a count beyond what the value type holds exactly."""
    from splyce.native import masked_sum as native_masked

    counted = []
    real = native_masked._counted_sum
    monkeypatch.setattr(native_masked, "_counted_sum", lambda *a: counted.append(r := real(*a)) or r)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)          # threads split these as they split large graphs
    rng = np.random.default_rng(11)
    rows = np.minimum((rng.pareto(0.9, 20000) * 2).astype(np.int64), 2999)
    g = sps.csr_array((np.ones(20000), (rows, rng.integers(0, 3000, 20000))), shape=(3000, 3000))
    low = sps.csr_array(sps.tril(((g + g.T) > 0).astype(dtype), -1))
    want = int((low @ low).multiply(low).sum())
    one = splyce.einsum("ij,jk,ik->", low, low, low)
    for threads in (2, 3):
        counted.clear()
        got = splyce.einsum("ij,jk,ik->", low, low, low, threads=threads)
        assert type(got) is type(one) and got.tobytes() == one.tobytes() and got == want > 0
        assert counted and counted[-1] is not None and counted[-1] == want
    heavy = low.copy()
    heavy.data[-1] = 2                                    # one value other than one: summed
    counted.clear()
    want_heavy = (heavy @ heavy).multiply(heavy).sum()
    assert splyce.einsum("ij,jk,ik->", heavy, heavy, heavy, threads=2) == want_heavy
    assert counted == [None]
    sparse = sps.csr_array(sps.random_array((3000, 3000), density=0.002, rng=5).astype(dtype))
    sparse.data[:] = 1                                    # under 1 hit in 32 products in the sample: summed
    want_sparse = (sparse @ sparse).multiply(sparse).sum()
    counted.clear()
    assert splyce.einsum("ij,jk,ik->", sparse, sparse, sparse, threads=2) == want_sparse
    assert counted == [want_sparse]                       # the sample counted, the chunks not yet taken summed
    # with the items taken in order (one thread runs them), no chunk after the sample is counted
    ranges = []
    counting = native_masked._counting

    def recording(*key):
        count, products, ones = counting(*key)
        return (lambda *args: ranges.append(args[9:11]) or count(*args)), products, ones
    monkeypatch.setattr(native_masked, "_counting", recording)
    monkeypatch.setattr(native_masked, "run_taken", lambda fn, chunks, threads, state: ir_text.run_taken(fn, chunks, 1, state))
    counted.clear()
    assert splyce.einsum("ij,jk,ik->", sparse, sparse, sparse, threads=2) == want_sparse
    assert counted == [want_sparse] and ranges == [(0, max(64, 3000 // 16))]
    monkeypatch.setattr(native_masked, "_counting", counting)
    t = native_masked.VALUE[np.dtype(dtype)][0]
    limits = dict(native_masked._COUNTED)
    limits[t] = (*limits[t][:-1], 2)                      # a count above 2 is not exact: summed, same value
    monkeypatch.setattr(native_masked, "_COUNTED", limits)
    counted.clear()
    assert splyce.einsum("ij,jk,ik->", low, low, low, threads=2).tobytes() == one.tobytes()
    assert counted == [None]

@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_triangle_sum_native_bit_identical_to_the_kernel(dtype, monkeypatch):
    """einsum("ij,jk,ik->") whose plan is the plain loop nest runs natively (masked_sum), with exactly the
    kernel's sum; another plan runs the kernel. Values of wide magnitudes, so any other order would show."""
    from splyce.native import masked_sum, masked_sum_checked
    from splyce.dropin import as_format, einsums as dropin

    calls = []
    for module, name in ((masked_sum, "masked_sum"), (masked_sum_checked, "masked_sum_checked")):
        real = getattr(module, name)      # the general path's, and the fast path's (checks too)
        monkeypatch.setattr(module, name, lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(7)
    n = 120
    a = sps.tril(sps.random_array((n, n), density=0.1, format="csr", rng=rng), -1).tocsr()
    def values(k):
        if np.dtype(dtype).kind == "i":
            return rng.integers(-50, 50, k).astype(dtype)
        return (rng.standard_normal(k) * 10.0 ** rng.integers(-4, 4, k)).astype(dtype)

    a.data = values(a.nnz)
    ours = splyce.einsum("ab,bc,ac->", a, a, a)
    kernel = dropin._kernel("einsum:ab,bc,ac->", dropin._Einsum("ab,bc,ac->"))
    ref = kernel(*(as_format(a, dropin.CSR, "x") for _ in range(3)))
    assert calls and type(ours) is type(ref) and ours.tobytes() == ref.tobytes()
    again = splyce.einsum("ab,bc,ac->", a, a, a)       # the fast path from the second call on, checks included
    assert type(again) is type(ref) and again.tobytes() == ref.tobytes()
    ones = a.copy()
    ones.data[:] = 1                                    # a 0/1 pattern: the hits counted, the same bits
    ref_ones = kernel(*(as_format(ones, dropin.CSR, "x") for _ in range(3)))
    for _ in range(2):
        counted = splyce.einsum("ab,bc,ac->", ones, ones, ones)
        assert type(counted) is type(ref_ones) and counted.tobytes() == ref_ones.tobytes()
    dense = a.toarray().astype(np.float64)
    assert np.isclose(float(ours), np.einsum("ij,jk,ik->", dense, dense, dense), rtol=1e-4)
    b = sps.random_array((n, n), density=0.5, format="csr", rng=rng)   # a plan that scatters
    b.data = values(b.nnz)
    calls.clear()
    ours = splyce.einsum("ij,jk,ik->", a, b, a)
    plan = dropin._kernel("einsum:ij,jk,ik->", dropin._Einsum("ij,jk,ik->")).kernel_for(
        *(as_format(x, dropin.CSR, "x") for x in (a, b, a)))[0].plan
    assert bool(calls) == dropin._plain_masked_sum_plan(plan, ["ij", "jk", "ik"])
    assert np.isclose(float(ours), np.einsum("ij,jk,ik->", dense, b.toarray(), dense), rtol=1e-4)


def test_triangle_sum_of_rare_hits_after_the_sample():
    """A 0/1 pattern whose sample has under 1 hit in 32 products is summed, not counted: after the sample's
    count its marks are set back (stale ones would add products that are not there: not triangular here)."""
    from splyce.native import masked_sum_checked as native_masked

    L = sps.random_array((2000, 2000), density=0.002, format="csr", rng=5)
    L.data[:] = 1
    fn = native_masked._sum_checked_kernel(np.dtype(np.float64), 32)
    mark, out = np.empty(2000, dtype=np.int64), np.empty(1)
    parts = [id(x) for x in (L.indptr, L.indices, L.data)] * 3
    assert fn(*parts, id(mark), id(out), 2000, 2000, 2000, L.nnz, L.nnz, L.nnz, 0) == 0
    assert out[0] == (L @ L).multiply(L).sum() > 0


def test_triangle_count_beyond_exact_falls_back_to_the_sum():
    """A count the value type would not hold exactly goes to the summing loop, whose marks are set again (a
    limit of 2 here instead of 2**53; stale marks from the count would add products that are not there)."""
    from splyce.native import masked_sum_checked as native_masked

    L = sps.random_array((60, 60), density=0.3, format="csr", rng=3)   # not triangular: stale marks would show
    L.data[:] = 1
    fn = native_masked._sum_checked_kernel(np.dtype(np.float64), 32, exact=2)
    mark, out = np.empty(60, dtype=np.int64), np.empty(1)
    parts = [id(x) for x in (L.indptr, L.indices, L.data)] * 3
    assert fn(*parts, id(mark), id(out), 60, 60, 60, L.nnz, L.nnz, L.nnz, 0) == 0
    assert out[0] == (L @ L).multiply(L).sum() > 2


@pytest.mark.parametrize("factors", [None, "mxy", "xym"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sddmm_prefetching_kernel_gives_the_same_bits(factors, dtype, monkeypatch):
    """The kernel variant that prefetches the rows of Y ahead (chosen where Y is beyond L2) writes the same
    bits as the one without, on every thread's range (the look-ahead stops at a range's last entry), with
    short and long rows, all three group sizes and the one-by-one tail."""
    from splyce.native import sddmm as native_sddmm
    from splyce.native.ir_text import index_bits

    rng = np.random.default_rng(11)
    m, n, d = 300, 200, 19
    rows = rng.integers(0, 30, m)
    rows[::7] = 0
    indptr = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, k, replace=False)) for k in rows]).astype(np.int32)
    mask = (rng.standard_normal(len(indices)).astype(dtype), indices, indptr)
    x, y = rng.standard_normal((m, d)).astype(dtype), rng.standard_normal((n, d)).astype(dtype)
    plain = native_sddmm.sddmm(mask, x, y, dtype, 1, factors)
    monkeypatch.setattr(native_sddmm, "PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(native_sddmm, "NEAR_WINDOW_BYTES", -1)     # every mask reads far: the prefetching kernel
    monkeypatch.setattr(native_sddmm, "SDDMM_SERIAL_MAX_WORK", 0)
    for threads in (1, 2):
        ahead = native_sddmm.sddmm(mask, x, y, dtype, threads, factors)
        for a, b in zip(plain, ahead):
            assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    text = native_sddmm._sddmm_ir("k", np.dtype(dtype), index_bits(indptr), index_bits(indices),
                                  native_sddmm.GROUPS, factors, native_sddmm.PREFETCH_AHEAD)
    assert "@llvm.prefetch" in text
    assert "@llvm.prefetch" not in native_sddmm._sddmm_ir("k", np.dtype(dtype), 32, 32, native_sddmm.GROUPS)


def test_sddmm_prefetches_only_where_the_rows_of_y_are_read_far_apart(monkeypatch):
    """The prefetching kernel is chosen for a large Y whose rows the mask reads far from each entry's own row (a
    power-law graph's), not for a banded mask (the rows of Y just read are still in cache), nor for a small Y."""
    import scipy.sparse as sps
    from splyce.native import sddmm as native_sddmm

    n, d = 20000, 32
    rng = np.random.default_rng(5)
    banded = sps.diags([np.ones(n - abs(k)) for k in range(-3, 4)], list(range(-3, 4)), format="csr")
    scattered = sps.random(n, n, density=5e-4, format="csr", random_state=rng)
    scattered.sort_indices()
    chosen = []
    compile_kernel = native_sddmm._sddmm
    monkeypatch.setattr(native_sddmm, "_sddmm", lambda *a: chosen.append(a[-1]) or compile_kernel(*a))
    x = rng.standard_normal((n, d))
    for mask, y_rows, want in ((scattered, n, native_sddmm.PREFETCH_AHEAD), (banded, n, 0), (scattered, 100, 0)):
        y = rng.standard_normal((y_rows, d))
        m = mask[:, :y_rows].tocsr()
        if y_rows == n:
            assert native_sddmm.reads_near(m.indptr, m.indices, y) == (mask is banded)
        out = native_sddmm.sddmm((m.data, m.indices, m.indptr), x, y, np.float64)
        assert chosen[-1] == want
        coo = m.tocoo()                     # the reference entry by entry (X @ Y.T dense would be 3.2 GB)
        ref = sps.csr_matrix((coo.data * np.einsum("ed,ed->e", x[coo.row], y[coo.col]), (coo.row, coo.col)),
                             shape=m.shape)
        got = sps.csr_matrix(out, shape=m.shape)
        assert abs(got - ref).max() <= 1e-12 * abs(ref).max()
