"""Elementwise drop-ins on two sparse matrices (native row merge, and the same-positions pass) vs scipy."""

import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.dropin import Formulation, OperandInfo, choose_elementwise_formulation

OPS = {"multiply": lambda a, b: a.multiply(b), "add": lambda a, b: a + b, "subtract": lambda a, b: a - b}


def _same_as_scipy(ours, ref):
    want = sps.csc_array if getattr(ref, "format", None) == "csc" else sps.csr_array   # scipy's class
    assert isinstance(ours, want) and ours.has_canonical_format
    if want is sps.csc_array:
        ours = ours.tocsr()
    ref = sps.csr_array(ref).copy()
    ref.sum_duplicates()
    ref.eliminate_zeros()
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)
    assert np.array_equal(ours.data, ref.data, equal_nan=True)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (6, 9), (40, 30)])
def test_elementwise_matches_scipy(op, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    a = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    b = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    a.data, b.data = (a.data * 8 - 4).astype(dtype), (b.data * 8 - 4).astype(dtype)
    _same_as_scipy(getattr(splyce, op)(a, b), OPS[op](a, b))
    same = a.copy()
    same.data = (same.data * 3 - 1).astype(dtype)      # the same positions: the flat pass
    _same_as_scipy(getattr(splyce, op)(a, same), OPS[op](a, same))


@pytest.mark.parametrize("op", OPS)
def test_zero_results_dropped_and_nan_kept(op):
    a = sps.csr_array(np.array([[1.0, 2.0, 0.0], [np.nan, 0.0, 3.0]]))
    b = a.copy()
    b.data = np.array([1.0, -2.0, 1.0, -3.0])           # same positions; add / multiply cancel some
    _same_as_scipy(getattr(splyce, op)(a, b), OPS[op](a, b))
    c = sps.csr_array(np.array([[-1.0, 0.0, 5.0], [0.0, 0.0, -3.0]]))
    _same_as_scipy(getattr(splyce, op)(a, c), OPS[op](a, c))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10), st.integers(0, 10), st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(list(OPS)), st.sampled_from(["csr", "csc", "coo"]), st.sampled_from([1, 2]))
def test_elementwise_property(m, n, da, db, seed, op, fmt, threads):
    rng = np.random.default_rng(seed)
    a = sps.random_array((m, n), density=da, format=fmt, rng=rng)
    b = sps.random_array((m, n), density=db, format="csr", rng=rng)
    _same_as_scipy(getattr(splyce, op)(a, b, threads=threads), OPS[op](a, b))


def test_symmetric_pattern_times_transpose_and_matrix_types():
    a = sps.random_array((50, 50), density=0.1, format="csr", random_state=3)
    s = (a + a.T).tocsr()
    s.data = np.arange(1, s.nnz + 1, dtype=np.float64)
    _same_as_scipy(splyce.multiply(s, s.T.tocsr()), s.multiply(s.T))
    _same_as_scipy(splyce.add(s, s.T), s + s.T)                     # csc operand: converted
    m = sps.csr_matrix(s)
    assert isinstance(splyce.multiply(m, m), sps.csr_matrix)


def test_bad_second_operand_with_the_same_positions_array_is_still_caught():
    a = sps.csr_array(np.array([[1.0, 2.0], [0.0, 3.0]]))
    bad = sps.csr_array((np.ones(3), np.array([0, 1, 7], dtype=np.int32), a.indptr.copy()), shape=(2, 2))
    with pytest.raises(ValueError, match="out of range"):
        splyce.multiply(a, bad)
    unsorted = sps.csr_array((np.array([5.0, 7.0, 1.0]), np.array([1, 0, 1], dtype=np.int32), a.indptr.copy()),
                             shape=(2, 2))
    unsorted.has_sorted_indices = False
    ref = a.multiply(unsorted.toarray())
    _same_as_scipy(splyce.multiply(a, unsorted), ref)                 # canonicalized on a copy
    assert np.array_equal(unsorted.indices, [1, 0, 1])               # input not modified
    with pytest.raises(ValueError, match="out of range"):
        splyce.add(bad, a)


def test_elementwise_formulation_choice():
    s, d = OperandInfo("scipy-array", (4, 5)), OperandInfo("numpy", (4, 5))
    assert choose_elementwise_formulation(s, s) is Formulation.MERGE_ROWS
    assert choose_elementwise_formulation(s, d) is Formulation.COITERATE
    assert choose_elementwise_formulation(s, s, "dense") is Formulation.COITERATE
    assert choose_elementwise_formulation(d, d) is Formulation.NUMPY
    for name in ("add", "subtract"):     # a dense result, as scipy computes it (a dense copy, then A's entries)
        assert choose_elementwise_formulation(s, d, None, name) is Formulation.DENSE_SUM
        assert choose_elementwise_formulation(d, s, "dense", name) is Formulation.DENSE_SUM
        assert choose_elementwise_formulation(s, d, "sparse", name) is Formulation.COITERATE


def test_malformed_csc_operand_is_caught_before_scipy_converts_it():
    """Run in a child process: scipy's conversion would write out of bounds if the check were missing."""
    code = """
import numpy as np, scipy.sparse as sps, splyce
a = sps.csr_array(np.eye(3))
bad = sps.csc_array((np.ones(2), np.array([0, 10**6], dtype=np.int32), np.array([0, 1, 2, 2], dtype=np.int32)),
                    shape=(3, 3))
for call in (lambda: splyce.multiply(a, bad), lambda: splyce.add(a, bad), lambda: splyce.matmul(bad, np.ones(3))):
    try:
        call()
    except ValueError as e:
        assert "out of range" in str(e), e
    else:
        raise AssertionError("no error")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])


# -- the per-call fast path (scipy CSR with a CSR or CSC of the same family): native checks, then the merge ----
def _index_width(x, dtype):
    x = x.copy()
    x.indices, x.indptr = x.indices.astype(dtype), x.indptr.astype(dtype)   # scipy narrows at construction
    return x


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", [sps.csr_array, sps.csr_matrix])
def test_fast_merge_is_taken_and_matches_scipy(monkeypatch, op, index_dtype, kind):
    from splyce.dropin import elementwise as dropin

    def refuse(*_args, **_kw):
        raise AssertionError("the general elementwise path ran")
    monkeypatch.setattr(dropin, "_merge_rows", refuse)
    rng = np.random.default_rng(11)
    a = sps.random_array((70, 70), density=0.08, format="csr", rng=rng)
    sym = (a + a.T).tocsr()
    sym.data = rng.uniform(-2, 2, sym.nnz)                  # symmetric positions, unsymmetric values
    other = sps.random_array((70, 70), density=0.05, format="csr", rng=rng)
    for x, y in ((sym, sym.T), (a, a.T), (a, other), (sym, sym.T.tocsr()), (a, other.tocsc())):
        x, y = kind(_index_width(x, index_dtype)), _index_width(y, index_dtype)
        y = kind(y) if isinstance(y, sps.csr_array) else (sps.csc_matrix(y) if kind is sps.csr_matrix else y)
        ref = OPS[op](x, y)
        ours = getattr(splyce, op)(x, y)
        assert type(ours) is kind
        _same_as_scipy(sps.csr_array(ours), ref)
        assert ours.has_canonical_format


def test_fast_merge_checks_every_operand():
    """Malformed operands on the fast path (a scipy CSR with a CSR or with a CSC, the form of ``A.T``): errors
    that name the defect, or a canonicalized result; never a crash (a child process), never a modified input.
    Positions of the CSC operand that differ from A's in one place go through the transpose and merge instead."""
    code = r"""
import numpy as np, scipy.sparse as sps, splyce
from splyce.native import ir_text
ir_text.MIN_CHUNK = 64                                        # threads=2 splits these small matrices
rng = np.random.default_rng(4)
base = sps.random_array((600, 600), density=0.01, format="csr", rng=rng)
base = (base + base.T).tocsr()
base.data = rng.uniform(-2, 2, base.nnz)
ops = {"multiply": lambda a, b: a.multiply(b), "add": lambda a, b: a + b, "subtract": lambda a, b: a - b}

def same(ours, ref):
    ref = sps.csr_array(ref).copy(); ref.sum_duplicates(); ref.eliminate_zeros()
    assert np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)
    assert np.array_equal(ours.data, ref.data)

def broken(edit, fmt):
    x = base.copy() if fmt == "csr" else base.T.copy()       # csc: the arrays of A.T
    edit(x)
    x.has_canonical_format = True                            # a stale flag: nothing may trust it
    return x

k = int(base.indptr[300])
defects = {
    "out of range": [lambda x: x.indices.__setitem__(k, 600), lambda x: x.indices.__setitem__(k, -1),
                     lambda x: x.indices.__setitem__(k, 2**31 - 1)],
    "positions decrease": [lambda x: x.indptr.__setitem__(300, x.indptr[301] + 1)],
    "positions must start at 0": [lambda x: x.indptr.__setitem__(0, 1)],
    "positions end at": [lambda x: x.indptr.__setitem__(600, x.indptr[600] - 1)],
}
for pattern, edits in defects.items():
    for edit in edits:
        for fmt in ("csr", "csc"):
            for op in ops:
                for bad_first, threads in ((True, 1), (False, 1), (True, 2), (False, 2)):
                    bad = broken(edit, fmt)
                    if bad_first and fmt == "csc":
                        continue                              # a CSC first operand is not the fast path
                    before = [arr.copy() for arr in (bad.indptr, bad.indices, bad.data)]
                    args = (bad, base) if bad_first else (base, bad)
                    try:
                        getattr(splyce, op)(*args, threads=threads)
                    except ValueError as e:
                        assert pattern in str(e) or "out of range" in str(e) or "positions" in str(e), (pattern, e)
                    else:
                        raise AssertionError(f"no error: {pattern} {fmt} {op}")
                    assert all(np.array_equal(b, arr) for b, arr in zip(before, (bad.indptr, bad.indices, bad.data)))

# unsorted or duplicate entries (flags claiming canonical): canonicalized on a copy, as scipy sums them
def swap(x):
    r = next(r for r in range(600) if x.indptr[r + 1] - x.indptr[r] >= 2)
    i = x.indptr[r]
    x.indices[i], x.indices[i + 1] = x.indices[i + 1], x.indices[i]
def duplicate(x):
    r = next(r for r in range(600) if x.indptr[r + 1] - x.indptr[r] >= 2)
    i = x.indptr[r]
    x.indices[i + 1] = x.indices[i]
for edit in (swap, duplicate):
    for fmt in ("csr", "csc"):
        for op in ops:
            bad = broken(edit, fmt)
            canonical = sps.csr_array(bad.toarray() if edit is swap else bad.tocoo().tocsr())
            for threads in (1, 2):
                same(getattr(splyce, op)(base, bad, threads=threads), ops[op](base, canonical))
            if fmt == "csr":
                same(getattr(splyce, op)(bad, base), ops[op](canonical, base))

# a CSC operand whose positions are A's but for one entry moved, one added, one removed: merged exactly
moved = base.T.copy(); col = next(c for c in range(600) if moved.indptr[c + 1] > moved.indptr[c])
i = moved.indptr[col]; free = sorted(set(range(600)) - set(moved.indices[moved.indptr[col]:moved.indptr[col + 1]]))
moved.indices[i] = free[0]; moved.sort_indices()
extra = sps.csc_array(base.T.toarray() + np.diag(np.where(base.diagonal() == 0, 1.0, 0.0)))
fewer = base.T.tocoo(); fewer = sps.csc_array((fewer.data[1:], (fewer.row[1:], fewer.col[1:])), shape=(600, 600))
for other in (moved, extra, fewer):
    for op in ops:
        for threads in (1, 2):
            same(getattr(splyce, op)(base, other, threads=threads), ops[op](base, other))
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-3000:])


def _power_law(n, entries, rng):
    """A square CSR whose row lengths follow a power law (a few hub rows hold most entries), with a NaN."""
    rows = np.minimum((rng.pareto(1.1, entries) * 3).astype(np.int64), n - 1)
    a = sps.csr_array((rng.uniform(-2, 2, entries), (rows, rng.integers(0, n, entries))), shape=(n, n))
    a.sum_duplicates()
    a.data[len(a.data) // 2] = np.nan
    return a


def test_threads_split_checks_and_merges_balanced_and_bit_identical(monkeypatch):
    """With ``threads`` > 1 the operand checks, the pass with a cursor per column of a CSC operand and the merge
    run on row ranges of about equal entries (skewed rows too); every result is bit-identical to one thread's
    and equal to scipy's."""
    from splyce.native import ir_text

    monkeypatch.setattr(ir_text, "MIN_CHUNK", 64)            # split these small matrices as large ones are
    calls = []
    run_chunks = ir_text.run_chunks

    def recording(fn, chunks, threads):
        calls.append(chunks)
        return run_chunks(fn, chunks, threads)
    monkeypatch.setattr(ir_text, "run_chunks", recording)
    rng = np.random.default_rng(8)
    a = _power_law(500, 6000, rng)
    sym = (a + a.T).tocsr()
    sym.data = rng.uniform(-2, 2, sym.nnz)                   # symmetric positions, unsymmetric values
    other = _power_law(500, 3000, rng)
    finite = other.copy()
    finite.data = np.nan_to_num(finite.data)                 # a product of finite values stays on the ranged pass
    longest = int(np.diff(sym.indptr).max())
    assert longest > 20 * sym.nnz / 500                      # skewed: the hub rows are far above the mean
    for threads in (2, 3):
        chunks = ir_text.work_chunks(sym.indptr, threads)
        per_chunk = [int(sym.indptr[hi] - sym.indptr[lo]) for lo, hi in chunks]
        assert len(chunks) == threads and sum(per_chunk) == sym.nnz
        assert max(per_chunk) - min(per_chunk) <= 2 * longest   # balanced up to a row at each end
        weighted = ir_text.work_chunks(sym.indptr, threads, per_row=4)   # a row's fixed cost counted too
        work = [int(sym.indptr[hi] - sym.indptr[lo]) + 4 * (hi - lo) for lo, hi in weighted]
        assert weighted[0][0] == 0 and weighted[-1][1] == 500 and max(work) - min(work) <= 2 * (longest + 4)
    for op in OPS:
        for x, y in ((sym, sym.T), (a, a.T), (a, other), (sym, other.tocsc()), (sym, finite.tocsc())):
            one = getattr(splyce, op)(x, y, threads=1)
            _same_as_scipy(one, OPS[op](x, y))
            for threads in (2, 3):
                calls.clear()
                many = getattr(splyce, op)(x, y, threads=threads)
                assert any(len(c) == threads for c in calls)    # the work was split
                assert np.array_equal(one.indptr, many.indptr) and np.array_equal(one.indices, many.indices)
                assert one.data.tobytes() == many.data.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_native_transpose_matches_scipy_for_any_threads(monkeypatch, dtype):
    from splyce.native import ir_text, transpose as native_transpose

    monkeypatch.setattr(ir_text, "MIN_CHUNK", 64)
    a = _power_law(300, 4000, np.random.default_rng(2))[:, :250]
    a = sps.csr_array((a.data.astype(dtype) if dtype != np.int64 else np.arange(a.nnz, dtype=dtype), a.indices,
                       a.indptr), shape=a.shape)
    ref = a.T.tocsr()
    for threads in (1, 2, 3):
        data, indices, indptr = native_transpose.transpose(a.data, a.indices, a.indptr, *a.shape, threads)
        assert np.array_equal(indptr, ref.indptr) and np.array_equal(indices, ref.indices)
        assert data.tobytes() == ref.data.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_products_of_narrow_and_wide_rows_match_scipy(dtype):
    """A product merges as an intersection (finite floats too): rows whose common columns fit a 64-wide window
    go through bit masks, wider ones through the merge; a sum likewise when both rows' columns span at most 64;
    block rows, rows with columns on both sides of the window, disjoint rows and wide random rows all give
    scipy's result."""
    rng = np.random.default_rng(12)
    blocks = sps.block_diag([sps.random_array((40, 40), density=0.3, rng=rng) for _ in range(4)], format="csr")
    wide = sps.random_array((160, 160), density=0.08, format="csr", rng=rng)
    band = sps.diags_array([np.ones(160 - abs(k)) for k in (-70, -3, 0, 5, 90)], offsets=[-70, -3, 0, 5, 90])
    for a, b in ((blocks, blocks.T), (blocks, wide), (wide, wide.T), (band, blocks), (band + wide, band.T)):
        a, b = sps.csr_array(a), sps.csr_array(b)
        for x in (a, b):
            x.data = np.round(x.data * 16 - 8).astype(dtype) if dtype != np.float64 else x.data * 4 - 2
        x, y = a.astype(dtype), b.astype(dtype)
        _same_as_scipy(splyce.multiply(x, y), x.multiply(y))
        _same_as_scipy(splyce.multiply(x, sps.csc_array(y)), x.multiply(y))
        _same_as_scipy(splyce.add(x, y), x + y)                   # sums: rows spanning <= 64 columns by masks
        _same_as_scipy(splyce.subtract(y, x), y - x)


def test_scipy_out_builds_what_the_constructor_builds(monkeypatch):
    from splyce.dropin import scipy_out

    parts = (np.array([1.0, 2.0, 3.0]), np.array([0, 2, 1], dtype=np.int32), np.array([0, 2, 3], dtype=np.int32))
    for cls in (sps.csr_array, sps.csr_matrix):
        ref = cls(parts, shape=(2, 3))
        for flag in (True, False, None):
            ours = scipy_out.csr(cls, *parts, (2, 3), flag)
            assert type(ours) is cls and ours.shape == (2, 3) and ours.indices is parts[1]
            assert np.array_equal(ours.toarray(), ref.toarray()) and repr(ours) == repr(ref)
            if flag is not None:
                assert ours.has_sorted_indices == flag and ours.has_canonical_format == flag
    wide = tuple(p.astype(np.int64) if p.dtype.kind == "i" else p for p in parts)
    wide_ref = sps.csr_array(wide, shape=(2, 3))
    assert scipy_out.csr(sps.csr_array, *wide, (2, 3), True).indices.dtype == wide_ref.indices.dtype
    monkeypatch.setattr(scipy_out, "_direct", {sps.csr_array: (False, None)})              # layout not confirmed
    out = scipy_out.csr(sps.csr_array, *parts, (2, 3), True)
    assert out.has_canonical_format and np.array_equal(out.toarray(), sps.csr_array(parts, shape=(2, 3)).toarray())
    vector = np.array([0.0, -0.0, np.nan, 2.0, 0.0, -1.5])
    for direct in (True, False):         # built directly, then the constructor when that is not confirmed
        if not direct:
            monkeypatch.setattr(scipy_out, "_direct_coo", {sps.coo_array: (False, None)})
        ours, ref = scipy_out.coo_vector(sps.coo_array, vector), sps.coo_array(vector)
        assert type(ours) is sps.coo_array and vars(ours).keys() == vars(ref).keys() and repr(ours) == repr(ref)
        assert ours.coords[0].dtype == ref.coords[0].dtype and np.array_equal(ours.coords[0], ref.coords[0])
        assert ours.data.tobytes() == ref.data.tobytes() and ours.has_canonical_format


def test_fast_merge_takes_only_ndarrays():
    """The native merge reads buffers by object address: anything that is not an ndarray goes the general way."""
    from splyce.dropin import elementwise as dropin

    a = sps.random_array((20, 20), density=0.2, format="csr", rng=4)
    odd = a.copy()
    odd.indices = odd.indices.tolist()
    assert dropin._fast_merge("add", a, odd, 1) is None and dropin._fast_merge("add", odd, a, 1) is None
    assert dropin._fast_merge("add", a, a.T, 1) is not None


@pytest.mark.parametrize("dtype, prefetch", [(np.float64, False), (np.float64, True), (np.float32, False),
                                             (np.int32, False)])
def test_one_pass_with_a_csc_operand_keeps_nan_and_inf_without_partner(monkeypatch, dtype, prefetch):
    """``A * A.T`` and ``A * B`` (B a CSC with its own arrays) in the one-pass cursor kernel: an entry of either
    operand without a partner drops out unless it is NaN or Inf (scipy keeps NaN * 0), in A, in a skipped
    entry of B or after the last entry of A's that reached B's column; sums with differing positions merge.
    ``prefetch``: the kernel variant large scattered matrices get (forced here on a small one)."""
    from splyce.native.elementwise import csc as native_elementwise

    rng = np.random.default_rng(5)
    a = sps.random_array((30, 30), density=0.2, format="csr", rng=rng)
    if prefetch:
        monkeypatch.setattr(native_elementwise, "PREFETCH_MIN_NNZ", 0)
        monkeypatch.setattr(native_elementwise, "PREFETCH_WINDOW", 0)
        assert native_elementwise.prefetch_distance(a.indptr, a.indices, 12) > 0
    a.data = (a.data * 8 - 4).astype(dtype)
    b = sps.random_array((30, 30), density=0.2, format="csc", rng=rng).astype(dtype)
    _same_as_scipy(splyce.multiply(a, a.T), a.multiply(a.T))
    _same_as_scipy(splyce.multiply(a, b), a.multiply(b))
    s = sps.csr_array(a + a.T)
    s.data[::3] = 0                                           # explicit zeros: dropped from products
    for op in OPS:                                            # s - s.T: every result cancels
        _same_as_scipy(getattr(splyce, op)(s, s.T), OPS[op](s, s.T))
    if dtype != np.int32:
        for x, k in ((a, 0), (a, a.nnz - 1), (b, 3), (b, b.nnz - 1)):
            y = x.copy()
            y.data[k] = np.nan if k else np.inf
            for p, q in ((a, y), (y, y.T), (y, b)) if x is a else ((a, y),):
                if isinstance(p, sps.csr_array):
                    _same_as_scipy(splyce.multiply(p, q), p.multiply(q))
                    _same_as_scipy(splyce.add(p, q), p + q)


def _vector_kernels(monkeypatch):
    """The one pass with its vector match on every row that missed (a decision per row, any miss), instead of
    per 64 rows over a third missed: small matrices exercise it."""
    from splyce.native.elementwise import csc as native_elementwise

    monkeypatch.setattr(native_elementwise, "MODE_ROWS", 1)
    monkeypatch.setattr(native_elementwise, "MISS_SHARE", 1 << 20)
    monkeypatch.setattr(native_elementwise, "_csc_kernels", {})
    return native_elementwise


def _bitwise_as_scipy(out, a, b):
    ref = sps.csr_array(a.multiply(b))
    ref.sum_duplicates()
    ref.eliminate_zeros()
    assert type(out) is tuple, out
    data, indices, indptr = out
    assert np.array_equal(indptr, ref.indptr) and np.array_equal(indices, ref.indices)
    assert data.dtype == ref.dtype and data.tobytes() == ref.data.tobytes()


def _asymmetric_matrices(rng, dtype, index):
    """Patterns whose products skip more B entries than a vector holds: a dense lower triangle (its transpose
    has only the diagonal in common, column j's cursor skips j entries), random blocks (25 % of entries hit),
    a random matrix with explicit zeros and entries in B's last column and row; values of both signs, some
    products zero."""
    tril = sps.csr_array(np.tril(rng.uniform(-2, 2, (90, 90))))
    blocks = sps.csr_array(sps.block_diag([sps.random_array((40, 40), density=0.3, rng=rng) for _ in range(5)]))
    loose = sps.random_array((150, 150), density=0.15, format="csr", rng=rng)
    loose = sps.csr_array(loose + sps.csr_array(([1.0, 2.0, 3.0], ([149, 149, 0], [0, 149, 149])), shape=(150, 150)))
    loose.data[::7] = 0
    out = []
    for x in (tril, blocks, loose):
        x = x.astype(dtype)
        if np.dtype(dtype).kind == "i":
            x.data = (x.data * 1 + np.arange(x.nnz) % 5 - 2).astype(dtype)
        x.indices, x.indptr = x.indices.astype(index), x.indptr.astype(index)
        out.append(x)
    return out


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("lanes", [8, 16])
def test_vector_match_of_the_one_pass_matches_scipy_bit_for_bit(monkeypatch, index, dtype, lanes):
    """``A * A.T`` (B of A's own memory) and ``A * B`` (B a CSC of its own) in the pass's vector match (a masked
    load of B's rows at the cursor, skips counted, the match a select), on one thread and on row ranges:
    entries, values and order exactly scipy's, zero products dropped."""
    ne = _vector_kernels(monkeypatch)
    rng = np.random.default_rng(17)
    for a in _asymmetric_matrices(rng, dtype, index):
        m, n = a.shape
        other = sps.csc_array(sps.random_array((m, n), density=0.3, rng=rng).astype(dtype))
        other.indices, other.indptr = other.indices.astype(index), other.indptr.astype(index)
        for b in (a.T, other):
            parts = (a.data, a.indices, a.indptr), (b.data, b.indices, b.indptr)
            _bitwise_as_scipy(ne.csr_with_csc("multiply", *parts, np.dtype(dtype), m, n, 0, lanes), a, b)
            _bitwise_as_scipy(ne.csr_with_csc("multiply", *parts, np.dtype(dtype), m, n, 4, lanes), a, b)
            _bitwise_as_scipy(ne.csr_with_csc_ranges("multiply", *parts, np.dtype(dtype), m, n, 2, 0, lanes), a, b)
            _bitwise_as_scipy(ne.csr_with_csc("multiply", *parts, np.dtype(dtype), m, n, 0, 0), a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_match_keeps_nan_and_inf_without_partner(monkeypatch, dtype):
    """A NaN / Inf in a skipped B entry (B of its own arrays), in an A entry without a partner (also of A * A.T,
    whose skipped B entries are A's unmatched ones and go unchecked) or in B's last column: the pass returns
    4 (the caller merges as a union); the drop-in then matches scipy. Finite values: the result."""
    ne = _vector_kernels(monkeypatch)
    a = _asymmetric_matrices(np.random.default_rng(3), dtype, np.int32)[0]      # dense lower triangle
    m, n = a.shape
    b = sps.csc_array(a.T.toarray())            # A.T's pattern in arrays of its own
    parts = lambda x, y: ((x.data, x.indices, x.indptr), (y.data, y.indices, y.indptr))
    assert type(ne.csr_with_csc("multiply", *parts(a, b), np.dtype(dtype), m, n, 0, 16)) is tuple
    skipped = b.copy()
    skipped[5, 60] = np.nan          # B(5, 60): A has no (5, 60) (upper triangle), the cursor skips it
    low = a.copy()
    low.data[a.indptr[70] + 3] = np.inf         # A(70, 3): no partner (B(70, 3) = A(3, 70) absent)
    late = b.copy()
    late[80, 89] = -np.inf           # B's last column (its last entries), skipped at A's last row
    for x, y in ((a, skipped), (low, low.T), (low, b), (a, late)):
        assert ne.csr_with_csc("multiply", *parts(x, y), np.dtype(dtype), m, n, 0, 16) == 4
        assert ne.csr_with_csc_ranges("multiply", *parts(x, y), np.dtype(dtype), m, n, 2, 0, 16) == 4
        _same_as_scipy(splyce.multiply(x, y), x.multiply(y))
    assert ne.csr_with_csc("multiply", *parts(a, a.T), np.dtype(dtype), m, n, 0, 16) != 4


def test_vector_match_reads_nothing_past_b_arrays():
    """B's row indices and values end exactly at a page that cannot be read (a child process: a read past them
    would crash it); the vector match's last loads, at B's last column, stay inside them."""
    code = r"""
import ctypes, mmap, numpy as np, scipy.sparse as sps
from splyce.native.elementwise import csc as ne
ne.MODE_ROWS, ne.MISS_SHARE = 1, 1 << 20        # the vector match on every row after one that missed
page = mmap.PAGESIZE
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
keep = []
def at_page_end(x):
    buf = mmap.mmap(-1, 2 * page + x.nbytes)
    keep.append(buf)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    start = -(-(base + x.nbytes) // page) * page - x.nbytes
    assert libc.mprotect(start + x.nbytes, page, 0) == 0
    out = np.frombuffer(buf, dtype=x.dtype, count=len(x), offset=start - base)
    out[:] = x
    return out
rng = np.random.default_rng(0)
for dtype, index in ((np.float64, np.int32), (np.float32, np.int64), (np.int32, np.int32)):
    for n in (41, 43, 57):
        a = sps.csr_array(np.tril(np.ones((n, n))) + np.diag(np.ones(n - 1), 1)).astype(dtype)
        b = sps.csc_array(np.triu(np.ones((n, n)), -1)).astype(dtype)
        bc, bv = at_page_end(b.indices.astype(index)), at_page_end(b.data)
        ac, ap, bp = a.indices.astype(index), a.indptr.astype(index), b.indptr.astype(index)
        for lanes in (8, 16):
            out = ne.csr_with_csc("multiply", (a.data, ac, ap), (bv, bc, bp), np.dtype(dtype), n, n, 0, lanes)
            ref = sps.csr_array(a.multiply(b))
            assert np.array_equal(out[1], ref.indices) and out[0].tobytes() == ref.data.tobytes()
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode >= 0, f"child killed by signal {-run.returncode}:\n{run.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["ok"]


# Instructions that leave the flags alone: the scheduler may put them between a compare and its jump.
_FLAGS_KEPT = re.compile(r"(v?mov|lea|cmov|kmov|push|pop|vpbroadcast|nop)")


@pytest.mark.parametrize("cpu", ["skylake-avx512", "icelake-server", "rocketlake", "sapphirerapids", "znver4"])
def test_vector_match_has_no_branch_on_the_pattern(cpu):
    """The vector rows' loop (``_VECTOR_ROWS``, of A * A.T's float64 pass with int32 indices) branches only on its
    loops (rows, entries, and a cursor whose whole vector was below the row): no branch on a hit or miss, on a
    compare of B's row with A's, or on a float compare (NaN / Inf tested by an OR kept for the end); the
    partner's value is read through a conditional move; the rows are loaded masked. Compiled for each AVX-512
    CPU LLVM schedules differently (not only the host's): each jump is judged by the instruction that set its
    flags, not the line before it."""
    from splyce.native.elementwise import csc as native_elementwise
    from splyce.native.codegen import CodegenOptions, Target, emit_assembly, host_target, optimize

    if not host_target().triple.startswith("x86_64"):
        pytest.skip("the vector match is x86 code")
    texts = []
    monkey = pytest.MonkeyPatch()
    monkey.setattr("splyce.native.codegen.compile_host_helpers", lambda text, sig: texts.append(text) or dict.fromkeys(sig))
    try:
        native_elementwise._csc_pass_kernel.__wrapped__("multiply", np.dtype(np.float64), 32, 0, "", 16)
    finally:
        monkey.undo()
    module, tm = optimize(texts[0], Target(host_target().triple, cpu, ""), CodegenOptions(opt_level=3))
    asm = emit_assembly(module, tm)
    for variant in ("_vrows:", "_vrows_own:"):
        body = asm.split("splyce_elementwise_csc_multiply_double_i32_v16" + variant, 1)[1].split(".Lfunc_end", 1)[0]
        lines = [x.strip() for x in body.splitlines() if x.startswith("\t") and not x.startswith("\t.")]
        jumps = []
        for i, x in enumerate(lines):
            if re.match(r"j(?!mp)[a-z]+\t", x):
                k = i - 1
                while k > 0 and _FLAGS_KEPT.match(lines[k]):
                    k -= 1
                jumps.append((lines[k], x))
        assert not [x for _, x in jumps if x.startswith(("jp", "jnp"))], jumps
        assert not [p for p, _ in jumps if p.startswith(("vucomis", "vcomis", "ucomis"))], jumps
        assert not [p for p, _ in jumps if re.match(r"cmp[lq]\t%\w+, \(", p)], jumps   # a row read from B
        assert len(jumps) <= 10, jumps
        assert [p for p, _ in jumps if p.startswith("kortest")], jumps       # the all-below loop
        assert re.search(r"vmovdqu32\t.*\{%k\d\} \{z\}", body) and "cmov" in body


@pytest.mark.parametrize("threads", [1, 2])
def test_non_canonical_left_operand_against_another_pattern(monkeypatch, threads):
    """A CSR left operand with unsorted (or duplicate) columns against a CSC or CSR of another pattern and entry
    count: the one-thread pass's early 'B's positions differ' answer used to let the row merge take A as
    canonical (a BSR's ``tocsr()`` has unsorted blocks: ``A + B.tocsc()`` was wrong by up to 0.96 on 6 x 6)."""
    from splyce.native import ir_text

    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)
    rng = np.random.default_rng(11)
    for trial in range(12):
        n = int(rng.integers(4, 40))
        a = sps.random_array((n, n), density=float(rng.uniform(0.1, 0.6)), format="csr", rng=rng)
        b = sps.random_array((n, n), density=float(rng.uniform(0.1, 0.6)), format="csr", rng=rng)
        if trial % 3 == 0:
            left = a.tobsr(blocksize=(2, 2) if n % 2 == 0 else (1, 1)).tocsr()    # blocks: unsorted, zeros kept
        else:
            perm = [np.concatenate([rng.permutation(np.arange(s, e)) for s, e in zip(a.indptr, a.indptr[1:])])
                    if a.nnz else np.zeros(0, dtype=np.int64)][0]
            left = sps.csr_array((a.data[perm], a.indices[perm], a.indptr), shape=a.shape)   # same rows, shuffled
            if trial % 3 == 2 and left.nnz:      # and a duplicate: an entry split in two halves
                row = int(np.searchsorted(left.indptr, 0, side="right")) - 1
                data = np.concatenate([left.data, [0.25]])
                indices = np.concatenate([left.indices, [left.indices[0]]])
                indptr = left.indptr.copy()
                indptr[row + 1:] += 1
                order = np.concatenate([np.arange(indptr[row + 1] - 1), [len(data) - 1],
                                        np.arange(indptr[row + 1] - 1, len(data) - 1)])
                left = sps.csr_array((data[order], indices[order], indptr), shape=left.shape)
        dense_left = left.toarray()
        before = (left.data.copy(), left.indices.copy(), left.indptr.copy())
        for right in (b, b.tocsc()):
            for op in OPS:
                ref = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[op](dense_left,
                                                                                           right.toarray())
                got = getattr(splyce, op)(left, right, threads=threads)
                np.testing.assert_array_equal(got.toarray(), ref, err_msg=f"{op} trial {trial} {right.format}")
        for arr, old in zip((left.data, left.indices, left.indptr), before):
            assert np.array_equal(arr, old)                  # inputs never modified


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_keep_zeros_kernels_are_the_sparsifiers_coiteration(monkeypatch, dtype):
    """The drop-in kernels' keep-zeros variants (native/elementwise/kept.py, what the jit runs): every variant
    of the merge (narrow-window masks, wide rows, same-column rows) and of the one pass with a CSC operand
    (prefetch, the vector match on every row that missed) gives the MLIR kernel's result bit for bit: zero
    and NaN products kept, NaN times a missing entry not stored, a sum's lone entry as it is (-0.0 too)."""
    from splyce.native.elementwise import csc as native_csc, kept

    _vector_kernels(monkeypatch)
    monkeypatch.setattr(native_csc, "PREFETCH_MIN_NNZ", 0)
    monkeypatch.setattr(native_csc, "PREFETCH_WINDOW", 0)
    rng = np.random.default_rng(21)
    blocks = sps.block_diag([sps.random_array((40, 40), density=0.3, rng=rng) for _ in range(4)], format="csr")
    wide = sps.random_array((160, 160), density=0.08, format="csr", rng=rng)
    band = sps.diags_array([np.ones(160 - abs(k)) for k in (-70, -3, 0, 5, 90)], offsets=[-70, -3, 0, 5, 90])
    ops = ("multiply", "add") + (("subtract",) if dtype != np.bool_ else ())
    jits = {(op, t): splyce.jit({"multiply": (lambda a, b: a * b, lambda a, b: a * b.T),
                                 "add": (lambda a, b: a + b, lambda a, b: a + b.T),
                                 "subtract": (lambda a, b: a - b, lambda a, b: a - b.T)}[op][t], library=False)
            for op in ops for t in (0, 1)}
    for a, b in ((blocks, blocks.T), (blocks, wide), (wide, wide.T), (band, blocks), (band + wide, band.T)):
        x, y = [sps.csr_array(z).astype(np.float64) for z in (a, b)]
        for z in (x, y):
            z.data = z.data * 8 - 4
            z.data[::5] = 0.0
            z.data[1::7] = -0.0
            if dtype in (np.float64, np.float32):
                z.data[2::11] = np.nan
                z.data[3::13] = -np.inf
        x, y = splyce.asarray(x.astype(dtype)), splyce.asarray(y.astype(dtype))
        px, py = [(z.values, z.crd[1], z.pos[1]) for z in (x, y)]
        for op in ops:
            ref = jits[(op, 0)](x, y)
            got = kept.rows(op, px, py, dtype)
            assert np.array_equal(got[2], ref.indptr) and np.array_equal(got[1], ref.indices)
            _same_values(got[0], ref.data)
            ref = jits[(op, 1)](x, y)                      # y.T: y's buffers as a CSC, no transpose
            runs = [kept.with_csc(op, px, py, dtype, *x.shape)]
            yt = sps.csr_array(y.to_scipy().T)
            same = np.array_equal(yt.indptr, x.pos[1]) and np.array_equal(yt.indices, x.crd[1])
            if op != "multiply" and not same:     # a sum's pass needs B to hold A's positions: else code 1
                assert native_csc.csr_with_csc(op, px, py, np.dtype(dtype), *x.shape, keep_zeros=True) == 1
            else:
                runs += [native_csc.csr_with_csc(op, px, py, np.dtype(dtype), *x.shape, 4, lanes, keep_zeros=True)
                         for lanes in (0, 8, 16)]
                runs.append(native_csc.csr_with_csc_ranges(op, px, py, np.dtype(dtype), *x.shape, 2, 4, 16,
                                                           keep_zeros=True))
            for got in runs:
                assert np.array_equal(got[2], ref.indptr) and np.array_equal(got[1], ref.indices)
                _same_values(got[0], ref.data)


def _same_values(x, y):
    """Equal bits, but NaN's sign (it depends on the operand order in the hardware)."""
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("op", sorted(OPS))
def test_two_sparse_tensors_take_the_fast_merge_with_the_general_paths_result(monkeypatch, op):
    """Two CSR / CSC ``SparseTensor``s of int32 indices (checked when made) go to the fast merge on their
    buffers, with the general path's result (class, indices, bits); int64 indices, or a tensor and a scipy
    operand, keep the general path."""
    from splyce.dropin import elementwise

    rng = np.random.default_rng(3)
    a = sps.random_array((70, 70), density=0.1, format="csr", rng=rng)
    b = sps.random_array((70, 70), density=0.1, format="csr", rng=rng)
    a.data[::7], b.data[::5] = np.nan, np.inf
    ta, tb = splyce.asarray(a), splyce.asarray(b)
    fun = getattr(splyce, op)
    pairs = [(ta, tb), (ta, tb.T), (ta.T, tb.T)]
    viewed = []
    view = elementwise._scipy_view
    monkeypatch.setattr(elementwise, "_scipy_view", lambda t: viewed.append(t) or view(t))
    fast = [fun(x, y) for x, y in pairs]
    assert len(viewed) >= 2 * len(pairs)                   # both operands of each call went to the fast merge
    monkeypatch.undo()
    real = elementwise._fast_merge

    def general_only(name, x, y, threads):
        return None if isinstance(x, splyce.SparseTensor) else real(name, x, y, threads)

    monkeypatch.setattr(elementwise, "_fast_merge", general_only)
    for (x, y), got in zip(pairs, fast):
        want = fun(x, y)
        assert type(got) is type(want) and got.format == want.format and got.shape == want.shape
        assert got.indices.dtype == want.indices.dtype
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert np.array_equal(got.data.view(np.int64), want.data.view(np.int64))
    monkeypatch.undo()
    wide = splyce.asarray(a.astype(np.float64), format=splyce.CSR)       # int64 indices
    assert wide.crd[1].dtype == np.int64
    assert elementwise._scipy_view(wide) is None
    assert elementwise._scipy_view(ta) is not None and elementwise._scipy_view(ta.T).format == "csc"


def test_tensor_structure_broken_after_it_was_made_raises_instead_of_crashing():
    """A tensor wrapping scipy arrays whose structure the caller broke afterwards: the merge refuses it with a
    ValueError (a child process: a regression would crash, not fail)."""
    code = """
import numpy as np, scipy.sparse as sps, splyce
a = sps.random_array((50, 50), density=0.1, format="csr", rng=1)
b = sps.random_array((50, 50), density=0.1, format="csr", rng=2)
ta, tb = splyce.asarray(a), splyce.asarray(b)
wa = splyce.asarray(a, format=splyce.CSR)           # int64 indices
wb = splyce.asarray(b, format=splyce.CSR)
assert wa.crd[1].dtype == np.int64
ta.crd[1][3] = 10**6
wa.crd[1][3] = 10**6
for f in (lambda: splyce.multiply(ta, tb), lambda: splyce.add(tb, ta), lambda: splyce.multiply(tb, ta.T),
          lambda: ta * tb, lambda: splyce.subtract(ta.T, tb.T), lambda: splyce.multiply(wb, wa.T),
          lambda: splyce.add(wa, wb)):
    try:
        f()
        print("no error")
    except ValueError as e:
        print("ValueError", "modified after it was made" in str(e))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:7] == ["ValueError True"] * 7, run.stdout


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float64])
@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "csc_array", "coo_array"])
def test_multiply_nonfinite_without_partner_is_scipys(dtype, kind):
    """scipy's ``A.multiply(B)`` evaluates over the union: an Inf or NaN stored on one side only gives a stored
    NaN. Complex values go through the coiteration kernel, which visits the intersection; the drop-in adds those
    positions (found by the merge corpus of native/elementwise: it returned 0 where scipy has NaN)."""
    import scipy.sparse as sps

    rng = np.random.default_rng(7)
    cls = getattr(sps, kind)
    for trial in range(6):
        m, n = rng.integers(1, 30, size=2)
        a = sps.random(m, n, density=0.3, random_state=rng, format="coo").toarray().astype(dtype)
        b = sps.random(m, n, density=0.3, random_state=rng, format="coo").toarray().astype(dtype)
        for x in (a, b):
            idx = np.flatnonzero(x)
            for v in (np.inf, -np.inf, np.nan) + ((complex(1, np.inf), complex(np.nan, 0)) if x.dtype.kind == "c" else ()):
                if len(idx):
                    x.flat[rng.choice(idx)] = v
        A, B = cls(a), cls(b)
        with np.errstate(invalid="ignore"):
            want = A.multiply(B)
        got = splyce.multiply(A, B)
        assert type(got) is type(want) or (sps.issparse(got) and sps.issparse(want))
        w = want.toarray() if sps.issparse(want) else np.asarray(want)
        g = got.toarray() if sps.issparse(got) else np.asarray(got)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.nan_to_num(g), np.nan_to_num(w))
