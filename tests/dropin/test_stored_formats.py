"""The drop-ins on every stored format (scipy COO / DIA / BSR / LIL / DOK, pydata COO / GCXS) against scipy's and
pydata's own operators: values, result class and format, inputs never modified, malformed buffers refused.

A differential corpus over format x op x dtype x class; the quick subset (float64 and int32, arrays, the small
matrices) runs unmarked, the rest is ``slow``.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import splyce

sparse = pytest.importorskip("sparse")

DTYPES = (np.float64, np.float32, np.int64, np.int32)


def _dense(shape, density, seed, dtype):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random(shape) < density, rng.integers(-9, 10, shape), 0)
    if np.dtype(dtype).kind == "f":
        d = d * rng.random(shape)
    return d.astype(dtype)


def _coo_variants(d, cls):
    """Canonical, shuffled with duplicates, and with explicit zeros: scipy COOs as users build them."""
    out = [cls(d)]
    r, c = np.nonzero(d)
    v = d[r, c]
    rng = np.random.default_rng(7)
    if len(v):
        # each entry split into two halves stored apart (duplicates), in a shuffled order, plus explicit zeros
        half = (v / 2).astype(d.dtype) if d.dtype.kind == "f" else v // 2
        rows, cols, vals = np.r_[r, r, r[:3]], np.r_[c, c, c[:3]], np.r_[half, v - half, np.zeros(min(3, len(v)), d.dtype)]
        p = rng.permutation(len(vals))
        out.append(cls((vals[p], (rows[p], cols[p])), shape=d.shape))
    return out


def _dia(d, cls, dtype):
    m, n = d.shape
    rng = np.random.default_rng(3)
    offsets = np.array([0, 1, -2, 5, -(m + 3)], dtype=np.int32)[: 3 + (m > 4)]   # one beyond the matrix too
    data = _dense((len(offsets), n + 2), 1.0, 11, dtype)
    rng.shuffle(offsets)
    return cls((data, offsets), shape=d.shape)


def corpus(fmt, cls_kind, dtype, quick=False):
    """(label, scipy operand) pairs of ``fmt`` (``quick``: the first three shapes)."""
    suffix = "_array" if cls_kind == "array" else "_matrix"
    shapes = [(12, 9), (30, 30), (1, 6), (0, 4), (48, 36)][: 3 if quick else 5]
    items = []
    for k, shape in enumerate(shapes):
        d = _dense(shape, 0.2, k, dtype)
        if fmt == "coo":
            for j, a in enumerate(_coo_variants(d, getattr(sp, "coo" + suffix))):
                items.append((f"coo{shape}-{j}", a))
        elif fmt == "dia":
            if shape[0]:
                items.append((f"dia{shape}", _dia(d, getattr(sp, "dia" + suffix), dtype)))
        elif fmt == "bsr":
            for block in ((1, 1), (3, 3)) if quick else ((1, 1), (2, 3), (3, 3), (4, 2), (6, 9)):
                if shape[0] % block[0] == 0 and shape[1] % block[1] == 0:
                    items.append((f"bsr{shape}{block}", getattr(sp, "bsr" + suffix)(d, blocksize=block)))
        else:
            items.append((f"{fmt}{shape}", getattr(sp, fmt + suffix)(d)))
    return items


def _snapshot(a):
    return [np.array(getattr(a, name), copy=True) for name in ("data", "row", "col", "offsets", "indptr", "indices")
            if isinstance(getattr(a, name, None), np.ndarray)]


def _same(a, snap):
    now = _snapshot(a)
    return len(now) == len(snap) and all(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc") and x.dtype == y.dtype
                                         for x, y in zip(now, snap))


def _check_result(got, want, exact=True):
    if np.ndim(want) == 0 and not sp.issparse(want):
        # scipy 1.17: a one-row coo_array times a vector is 0-d; the drop-ins keep NumPy's (1,) (test_dropin_spmv)
        assert type(got) is np.ndarray and got.shape == (1,)
        got, want = got[0], want
    assert type(got) is type(want), (type(got), type(want))
    assert getattr(got, "format", None) == getattr(want, "format", None)
    g = got.toarray() if sp.issparse(got) else np.asarray(got)
    w = want.toarray() if sp.issparse(want) else np.asarray(want)
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
    if exact:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g, w, rtol=1e-5 if g.dtype == np.float32 else 1e-12, atol=1e-5)


def _products(fmt, cls_kind, dtype, quick=False):
    for label, a in corpus(fmt, cls_kind, dtype, quick):
        m, n = a.shape
        x = _dense((n,), 1.0, 1, dtype)
        every = (x, _dense((n, 1), 1.0, 2, dtype), _dense((n, 3), 1.0, 3, dtype), _dense((n, 40), 1.0, 4, dtype),
                 x.astype(np.float64))
        for rhs in every[::2] if quick else every:
            snap = _snapshot(a)
            # SpMV / SpMM sum in scipy's order (COO, DIA, BSR kernels): the same bits
            _check_result(splyce.matmul(a, rhs), a @ rhs, exact=fmt in ("coo", "dia", "bsr"))
            assert _same(a, snap), label
        _check_result(splyce.matmul(a.T, _dense((m,), 1.0, 6, dtype)), a.T @ _dense((m,), 1.0, 6, dtype), exact=False)


def _elementwise(fmt, cls_kind, dtype, quick=False):
    items = corpus(fmt, cls_kind, dtype, quick)
    for (label, a), (_, b) in zip(items, items[1:] + items[:1]):
        if a.shape != b.shape:
            b = type(a)(_dense(a.shape, 0.3, 9, dtype)) if fmt != "bsr" else type(a)(_dense(a.shape, 0.3, 9, dtype),
                                                                                   blocksize=a.blocksize)
        if fmt == "dia":
            b = _dia(_dense(a.shape, 0.3, 9, dtype), type(a), dtype)
        sa, sb = _snapshot(a), _snapshot(b)
        _check_result(splyce.multiply(a, b), a.multiply(b))
        _check_result(splyce.add(a, b), a + b)
        _check_result(splyce.subtract(a, b), a - b)
        if a.shape[1] == b.shape[0] or a.shape[0] == a.shape[1]:
            _check_result(splyce.matmul(a, b.T if a.shape[1] != b.shape[0] else b),
                          a @ (b.T if a.shape[1] != b.shape[0] else b), exact=False)
        assert _same(a, sa) and _same(b, sb), label


FORMATS = ("coo", "dia", "bsr", "lil", "dok")


@pytest.mark.parametrize("fmt", FORMATS)
def test_products_quick(fmt):
    _products(fmt, "array", np.float64, quick=True)


@pytest.mark.parametrize("fmt", ("coo", "dia", "bsr"))
def test_elementwise_quick(fmt):
    _elementwise(fmt, "array", np.float64, quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,cls_kind,dtype", list(itertools.product(FORMATS, ("array", "matrix"), DTYPES)))
def test_products_all(fmt, cls_kind, dtype):
    _products(fmt, cls_kind, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,cls_kind,dtype", list(itertools.product(FORMATS, ("array", "matrix"), DTYPES)))
def test_elementwise_all(fmt, cls_kind, dtype):
    _elementwise(fmt, cls_kind, dtype)


@pytest.mark.parametrize("dtype", (np.float64, pytest.param(np.int64, marks=pytest.mark.slow)))
def test_pydata_coo_and_gcxs(dtype):
    d = _dense((40, 30), 0.15, 4, dtype)
    coo = sparse.COO.from_numpy(d)
    for a in (coo, sparse.GCXS(coo, compressed_axes=(0,)), sparse.GCXS(coo, compressed_axes=(1,))):
        for rhs in (_dense((30,), 1.0, 1, dtype), _dense((30, 5), 1.0, 2, dtype)):
            got, want = splyce.matmul(a, rhs), a @ rhs
            assert type(got) is type(want) is np.ndarray
            np.testing.assert_allclose(got, want, rtol=1e-12)
        for got, want in ((splyce.multiply(a, a), a * a), (splyce.add(a, a), a + a), (splyce.matmul(a, a.T), a @ a.T)):
            assert type(got) is type(want), (type(got), type(want))
            np.testing.assert_allclose(got.todense(), want.todense(), rtol=1e-12)


# -- malformed buffers ----------------------------------------------------------------------------------------
def _x(n):
    return np.ones(n)


def test_malformed_coo_refused():
    a = sp.coo_array(_dense((10, 8), 0.4, 1, np.float64))
    a.row[2] = 10                       # one past the last row
    with pytest.raises(ValueError, match="outside the shape"):
        splyce.matmul(a, _x(8))
    with pytest.raises(ValueError, match="outside the shape"):
        splyce.matmul(a, np.ones((8, 3)))
    with pytest.raises(ValueError, match="COO"):
        splyce.add(a, a)
    b = sp.coo_array(_dense((10, 8), 0.4, 1, np.float64))
    b.col[0] = -1
    with pytest.raises(ValueError, match="outside the shape"):
        splyce.matmul(b, _x(8))
    c = sp.coo_array(_dense((10, 8), 0.4, 1, np.float64))
    c.data = c.data[:-1]
    with pytest.raises(ValueError, match="one of each per entry"):
        splyce.matmul(c, _x(8))


def test_malformed_bsr_refused():
    d = _dense((12, 12), 0.5, 2, np.float64)
    a = sp.bsr_array(d, blocksize=(3, 3))
    a.indices[0] = 4                    # block columns are 0..3
    with pytest.raises(ValueError, match="block column"):
        splyce.matmul(a, _x(12))
    with pytest.raises(ValueError, match="block column"):
        splyce.multiply(a, a)
    b = sp.bsr_array(d, blocksize=(3, 3))
    b.indptr[1], b.indptr[2] = b.indptr[2], b.indptr[1]      # a decreasing segment
    if b.indptr[1] != b.indptr[2]:
        with pytest.raises(ValueError, match="indptr"):
            splyce.matmul(b, _x(12))
    c = sp.bsr_array(d, blocksize=(3, 3))
    c.indptr[-1] += 1
    with pytest.raises(ValueError, match="indptr"):
        splyce.matmul(c, np.ones((12, 2)))


def test_malformed_dia_refused():
    a = sp.dia_array((np.ones((2, 6)), [0, 1]), shape=(6, 6))
    a.data = np.ones((3, 6))           # three rows of data for two offsets
    with pytest.raises(ValueError, match="DIA"):
        splyce.matmul(a, _x(6))
    with pytest.raises(ValueError, match="DIA"):
        splyce.add(a, a)


def test_dia_offsets_beyond_the_matrix_hold_nothing():
    a = sp.dia_array((np.arange(1.0, 25.0).reshape(4, 6), [-7, 6, 100, -2]), shape=(6, 6))
    x = np.arange(1.0, 7.0)
    np.testing.assert_array_equal(splyce.matmul(a, x), a @ x)


def test_scipy_switch_serves_bsr_times_dense_with_scipys_bits():
    d = _dense((24, 18), 0.4, 8, np.float64)
    a = sp.bsr_array(d, blocksize=(3, 2))
    x, X = _dense((18,), 1.0, 1, np.float64), _dense((18, 5), 1.0, 2, np.float64)
    want, want_m = a @ x, a @ X
    splyce.scipy_patch_stats(reset=True)
    with splyce.patched_scipy(route_small=True):
        got, got_m = a @ x, a @ X
        mixed = a @ x.astype(np.float32)            # another dtype: scipy's own worker
    stats = splyce.scipy_patch_stats()
    assert stats["bsr_matvec"]["served"] == 1 and stats["bsr_matmat"]["served"] == 1
    assert stats["bsr_matvec"]["fallback"] == {"dtype": 1}
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_m, want_m)
    np.testing.assert_array_equal(mixed, a @ x.astype(np.float32))


@pytest.mark.slow
def test_bench_formats_tiny(tmp_path):
    from splyce.bench import __main__ as cli

    assert cli.main(["formats", "--tiny", "--no-progress", "--ops", "spmv,multiply", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "formats.md").read_text()
    for fmt in ("coo", "bsr", "dia"):
        assert f"| {fmt} | spmv |" in text and f"| {fmt} | multiply |" in text


def _bsr_pair(m, k, n, blocks, density, dtype, seed, classes=(sp.bsr_array, sp.bsr_array)):
    R, K, C = blocks
    a = classes[0](_dense((m * R, k * K), density, seed, dtype), blocksize=(R, K))
    b = classes[1](_dense((k * K, n * C), density, seed + 1, dtype), blocksize=(K, C))
    return a, b


@pytest.mark.parametrize("dtype", (np.float64, np.int32, pytest.param(np.float32, marks=pytest.mark.slow),
                                   pytest.param(np.int64, marks=pytest.mark.slow)))
def test_bsr_matmul_bsr_is_scipys_bsr_matmat(dtype):
    """BSR @ BSR (native/bsr_spgemm.py): scipy's buffers bit for bit (block columns in first-appearance order,
    zero blocks kept), the left operand's class, for unrolled and looped block shapes, empty rows and operands."""
    cases = [((7, 5, 6), (3, 3, 3), 0.3), ((4, 6, 5), (2, 3, 4), 0.25), ((3, 4, 3), (5, 6, 7), 0.2),
             ((6, 6, 6), (2, 2, 2), 0.02), ((5, 4, 3), (3, 3, 3), 0.0), ((0, 3, 4), (2, 2, 2), 0.5),
             ((4, 4, 4), (4, 1, 4), 0.4)]
    for k, ((m, kk, n), blocks, density) in enumerate(cases):
        for classes in ((sp.bsr_array, sp.bsr_array), (sp.bsr_matrix, sp.bsr_array), (sp.bsr_matrix, sp.bsr_matrix)):
            a, b = _bsr_pair(m, kk, n, blocks, density, dtype, k, classes)
            sa, sb = _snapshot(a), _snapshot(b)
            got, want = splyce.matmul(a, b), a @ b
            assert type(got) is type(want) and got.blocksize == want.blocksize, (type(got), type(want))
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.indptr, want.indptr)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.data, want.data)
            assert _same(a, sa) and _same(b, sb)


def test_bsr_matmul_bsr_mixed_dtypes_and_other_block_sizes():
    a, b = _bsr_pair(5, 4, 6, (3, 2, 3), 0.4, np.float32, 5)
    b64 = sp.bsr_array(b.toarray().astype(np.float64), blocksize=(2, 3))
    want = a @ b64
    got = splyce.matmul(a, b64)
    assert got.dtype == want.dtype == np.float64 and got.blocksize == want.blocksize
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-6)
    c = sp.bsr_array(b.toarray(), blocksize=(1, 3))       # inner block sizes differ (2 vs 1): scipy converts
    _check_result(splyce.matmul(a, c), a @ c, exact=False)
    assert splyce.matmul(a, c).blocksize == (a @ c).blocksize


def test_malformed_bsr_refused_in_bsr_products():
    a, b = _bsr_pair(4, 4, 4, (3, 3, 3), 0.5, np.float64, 8)
    bad = a.copy()
    bad.indices[0] = 4                  # block columns are 0..3
    with pytest.raises(ValueError, match="a: a malformed BSR: a block column"):
        splyce.matmul(bad, b)
    with pytest.raises(ValueError, match="b: a malformed BSR: a block column"):
        splyce.matmul(b, bad)
    short = a.copy()
    short.indptr[-1] -= 1               # ends before the last block
    with pytest.raises(ValueError, match="indptr"):
        splyce.matmul(short, b)
    down = a.copy()
    if down.indptr[1] < down.indptr[2]:
        down.indptr[1] = down.indptr[2] + 1     # a decreasing segment
        with pytest.raises(ValueError, match="indptr"):
            splyce.matmul(down, b)


def _bsr_variants(shape, block, dtype, seed, cls):
    """BSRs of one block shape with different block patterns: random, one with its blocks cancelling to zero,
    one with explicit zero blocks and a NaN, one non-canonical (a block row's columns reversed)."""
    d = _dense(shape, 0.15, seed, dtype)
    out = [cls(d, blocksize=block), cls(_dense(shape, 0.3, seed + 1, dtype), blocksize=block), cls(-d, blocksize=block)]
    z = cls(d, blocksize=block)
    if z.nnz:
        z.data[0] = 0                                      # an explicit all-zero block
        if np.dtype(dtype).kind == "f":
            z.data[-1, 0, 0] = np.nan
    out.append(z)
    r = cls(_dense(shape, 0.4, seed + 2, dtype), blocksize=block)
    lo, hi = int(r.indptr[0]), int(r.indptr[1])
    if hi - lo > 1:                                        # block columns of the first row reversed
        r.indices[lo:hi] = r.indices[lo:hi][::-1].copy()
        r.data[lo:hi] = r.data[lo:hi][::-1].copy()
    out.append(r)
    return out


@pytest.mark.parametrize("dtype", (np.float64, pytest.param(np.int32, marks=pytest.mark.slow),
                                   pytest.param(np.float32, marks=pytest.mark.slow),
                                   pytest.param(np.int64, marks=pytest.mark.slow)))
def test_bsr_elementwise_on_different_block_patterns(dtype):
    """BSR op BSR with different block patterns: scipy's bsr_binop's buffers bit for bit (canonical operands: the
    union in order, zero blocks dropped; others, a BSR made from a dense array among them, scipy's general
    algorithm's order), the left operand's class."""
    for shape, block in (((12, 12), (3, 3)), ((8, 18), (2, 3)), ((30, 20), (5, 4)), ((6, 6), (1, 1))):
        for cls_a, cls_b in ((sp.bsr_array, sp.bsr_array), (sp.bsr_matrix, sp.bsr_array)):
            va, vb = _bsr_variants(shape, block, dtype, 1, cls_a), _bsr_variants(shape, block, dtype, 1, cls_b)
            for a, b in itertools.product(va, vb):
                snaps = _snapshot(a), _snapshot(b)
                for got, want in ((splyce.multiply(a, b), a.multiply(b)), (splyce.add(a, b), a + b),
                                  (splyce.subtract(a, b), a - b)):
                    assert type(got) is type(want) and got.format == want.format == "bsr"
                    assert got.blocksize == want.blocksize and got.dtype == want.dtype
                    # scipy's blocks exactly: canonical operands merged, others by scipy's general algorithm
                    np.testing.assert_array_equal(got.indptr, want.indptr)
                    np.testing.assert_array_equal(got.indices, want.indices)
                    np.testing.assert_array_equal(got.data, want.data)
                assert _same(a, snaps[0]) and _same(b, snaps[1])


@pytest.mark.parametrize("dtype", (np.float64, np.int64, pytest.param(np.float32, marks=pytest.mark.slow),
                                   pytest.param(np.int32, marks=pytest.mark.slow)))
def test_dia_matmul_dia_against_scipy(dtype):
    """DIA @ DIA (native/dia_matmat.py): scipy's values and class (the left operand's) on square and rectangular
    shapes, offsets in any order and beyond the matrix, data narrower and wider than the columns."""
    cases = [((9, 9), (9, 9), [0, 1, -1], [2, -3, 0]), ((7, 11), (11, 5), [3, -2, 20], [-1, 0, 4, -30]),
             ((12, 6), (6, 12), [0, 5, 2], [1, -4]), ((1, 1), (1, 1), [0], [0]), ((6, 6), (6, 6), [], [0, 1]),
             ((40, 40), (40, 40), list(range(-5, 6)), list(range(-5, 6))[::-1])]
    for (sa, sb, oa, ob) in cases:
        for width_a, width_b in ((sa[1], sb[1]), (sa[1] + 3, max(sb[1] - 2, 1))):
            for cls_a, cls_b in ((sp.dia_array, sp.dia_array), (sp.dia_matrix, sp.dia_array)):
                da = _dense((len(oa), width_a), 1.0, len(oa), dtype)
                db = _dense((len(ob), width_b), 1.0, len(ob) + 7, dtype)
                a = cls_a((da, np.array(oa, dtype=np.int32)), shape=sa)
                b = cls_b((db, np.array(ob, dtype=np.int32)), shape=sb)
                snaps = _snapshot(a), _snapshot(b)
                got = splyce.matmul(a, b)
                try:
                    want = a @ b
                except RuntimeError:        # scipy 1.17's dia_matmat fails on an operand without diagonals
                    assert not (len(oa) and len(ob)), (sa, sb, oa, ob)
                    want = cls_a(a.toarray() @ b.toarray())
                assert type(got) is type(want) and got.format == want.format == "dia"
                _check_result(got, want, exact=np.dtype(dtype).kind in "iu")
                assert _same(a, snaps[0]) and _same(b, snaps[1])


@pytest.mark.parametrize("dtype", (np.float64, pytest.param(np.int64, marks=pytest.mark.slow),
                                   pytest.param(np.float32, marks=pytest.mark.slow)))
def test_pydata_result_classes_are_pydatas(dtype):
    """pydata COO / GCXS (either compressed axis) in any pairing, different patterns: the result class and the
    GCXS's compressed axes are pydata's own (elementwise: GCXS only when every operand is one; products: a GCXS
    compressed as the left operand), the values pydata's."""
    def kinds(d):
        c = sparse.COO.from_numpy(d)
        return [c, sparse.GCXS(c, compressed_axes=(0,)), sparse.GCXS(c, compressed_axes=(1,))]

    for a, b in itertools.product(kinds(_dense((20, 20), 0.2, 4, dtype)), kinds(_dense((20, 20), 0.3, 5, dtype))):
        for ours, theirs in ((splyce.multiply, lambda x, y: x * y), (splyce.add, lambda x, y: x + y),
                             (splyce.subtract, lambda x, y: x - y), (splyce.matmul, lambda x, y: x @ y)):
            got, want = ours(a, b), theirs(a, b)
            assert type(got) is type(want), (type(a).__name__, type(b).__name__, type(got), type(want))
            assert getattr(got, "compressed_axes", None) == getattr(want, "compressed_axes", None)
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got.todense(), want.todense(), rtol=1e-6 if dtype == np.float32 else 1e-12)


def _malformed():
    """(label, malformed operand, a well-formed operand of its shape and class): one defect per case, in each
    stored format's index arrays or shapes."""
    d = _dense((12, 12), 0.4, 3, np.float64)
    good = _dense((12, 12), 0.3, 4, np.float64)
    out = []
    a = sp.coo_array(d)
    a.coords = (a.coords[0].copy(), a.coords[1].copy())
    a.coords[0][1] = 12
    out.append(("coo row past the end", a, sp.coo_array(good)))
    a = sp.coo_matrix(d)
    a.col[-1] = -1
    out.append(("coo negative column", a, sp.coo_matrix(good)))
    a = sp.bsr_array(d, blocksize=(3, 3))
    a.indices[-1] = 7
    out.append(("bsr block column", a, sp.bsr_array(good, blocksize=(3, 3))))
    a = sp.bsr_array(d, blocksize=(2, 3))
    a.indptr[-1] = len(a.indices) + 2
    out.append(("bsr indptr end", a, sp.bsr_array(good, blocksize=(2, 3))))
    a = sp.bsr_matrix(d, blocksize=(3, 3))
    a.indptr[2] = a.indptr[3] + 1
    out.append(("bsr indptr decreasing", a, sp.bsr_matrix(good, blocksize=(3, 3))))
    a = sp.dia_array((np.ones((2, 12)), [0, 1]), shape=(12, 12))
    a.data = np.ones((3, 12))
    out.append(("dia rows for offsets", a, sp.dia_array(good)))
    c = sparse.COO.from_numpy(d)
    bad = sparse.COO(c.coords.copy(), c.data.copy(), shape=c.shape)
    bad.coords[1, 0] = 40
    out.append(("pydata coo column", bad, sparse.COO.from_numpy(good)))
    g = sparse.GCXS(c, compressed_axes=(0,))
    g.indices[0] = 99
    out.append(("pydata gcxs column", g, sparse.GCXS(sparse.COO.from_numpy(good), compressed_axes=(0,))))
    return out


@pytest.mark.parametrize("case", range(8))
def test_malformed_buffers_refused_by_every_op(case):
    """A malformed operand of each stored format is refused with a ValueError naming it by every op (SpMV, SpMM,
    elementwise, SpGEMM, either side), as a malformed CSR is: never a crash or a wrong answer."""
    label, bad, good = _malformed()[case]
    snap = _snapshot(bad)
    x, X = np.ones(12), np.ones((12, 3))
    calls = {"spmv": lambda: splyce.matmul(bad, x), "spmm": lambda: splyce.matmul(bad, X),
             "multiply": lambda: splyce.multiply(bad, good), "add": lambda: splyce.add(good, bad),
             "subtract": lambda: splyce.subtract(bad, good), "spgemm": lambda: splyce.matmul(bad, good),
             "spgemm right": lambda: splyce.matmul(good, bad)}
    for op, call in calls.items():
        with pytest.raises(ValueError, match="malformed|outside|out of bounds|out of range|indptr"):
            call()
            pytest.fail(f"{label}: {op} accepted the malformed operand")
    assert _same(bad, snap), label


def test_bsr_products_and_merges_on_int64_index_arrays():
    """The 64-bit index instantiations of the BSR product and merges (canonical and general): scipy's buffers."""
    a, b = _bsr_pair(10, 8, 6, (2, 4, 3), 0.2, np.float64, 12)
    wide = sp.bsr_array((a.data, a.indices, a.indptr), shape=a.shape, blocksize=a.blocksize)
    wide.indices, wide.indptr = a.indices.astype(np.int64), a.indptr.astype(np.int64)
    got, want = splyce.matmul(wide, b), a @ b
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)
    other = sp.bsr_array(_dense(a.shape, 0.2, 13, np.float64), blocksize=a.blocksize)     # not canonical
    for x, y in ((wide, other), (other, wide), (wide, wide)):
        for got, want in ((splyce.add(x, y), x + y), (splyce.multiply(x, y), x.multiply(y))):
            np.testing.assert_array_equal(got.indptr, want.indptr)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.data, want.data)


def _dia_cases(dtype):
    """DIAs on both sides of the SpMV threshold (stored_formats.SCIPY_DIA_MAX: scipy's loop below, the native
    tiles above): empty, 1 x N and N x 1, short and long data rows, far offsets, int32 extremes,
    int64 offsets, data not C-contiguous, explicit zeros."""
    from splyce.dropin.stored_formats import SCIPY_DIA_MAX

    rng = np.random.default_rng(5)
    out = []
    for (m, n), offsets, L in [((0, 5), [0, 1], 5), ((1, 7), [0, 3, -1], 7), ((7, 1), [0, -3, 1], 1),
                               ((9, 9), [2, -2, -1], 4), ((9, 6), [0, -8, 5, 40, -40], 12),
                               ((6, 6), [2**31 - 1, -2**31, 0], 6),
                               ((SCIPY_DIA_MAX // 5, SCIPY_DIA_MAX // 5), [-3, -1, 0, 1, 3], SCIPY_DIA_MAX // 5),
                               ((SCIPY_DIA_MAX // 5 + 7, SCIPY_DIA_MAX // 5 + 9), [-3, -1, 0, 1, 3, 4],
                                SCIPY_DIA_MAX // 5 + 9),
                               ((3000, 2500), [-2999, -5, 0, 7, 2499, 600], 2600)]:
        data = _dense((len(offsets), L), 0.9, m + L, dtype)         # ~10 % explicit zeros
        out.append(((m, n), np.array(offsets, dtype=np.int32), data))
    m = 4000
    out.append(((m, m), np.array([-1, 0, 1], dtype=np.int64), _dense((3, m), 1.0, 1, dtype)))
    out.append(((m, m), np.array([-1, 0, 2], dtype=np.int32), np.asfortranarray(_dense((3, m), 1.0, 2, dtype))))
    out.append(((50, 50), np.array([-1, 0, 2], dtype=np.int32), np.asfortranarray(_dense((3, 50), 1.0, 3, dtype))))
    del rng
    return out


@pytest.mark.parametrize("dtype", (np.float64, np.int32, pytest.param(np.float32, marks=pytest.mark.slow),
                                   pytest.param(np.int64, marks=pytest.mark.slow)))
def test_dia_spmv_on_both_sides_of_the_scipy_threshold(dtype):
    for shape, offsets, data in _dia_cases(dtype):
        for cls in (sp.dia_array, sp.dia_matrix):
            a = cls((data, offsets), shape=shape)
            snap = _snapshot(a)
            # the reference: scipy on the diagonals that meet the matrix (the same sums in the same order; scipy's
            # own loop crashes on an offset near +-2**31, which the drop-in must take)
            keep = (offsets < shape[1]) & (offsets > -shape[0])
            ref = cls((data[keep], offsets[keep]), shape=shape)
            for rhs in (_dense((shape[1],), 1.0, 4, dtype), _dense((shape[1], 3), 1.0, 5, dtype)):
                want = ref @ rhs
                got = splyce.matmul(a, rhs)
                if np.ndim(want) == 0:
                    want = np.asarray(want).reshape(1)
                assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape, (shape, cls)
                np.testing.assert_array_equal(got, want)     # scipy's order either way: the same bits
                assert _same(a, snap), shape


def test_bsr_spmv_fast_path_against_scipy():
    """The inline BSR SpMV path (int32 arrays, data of x's dtype) and the general one (int64 arrays, other
    dtypes) against scipy, bit for bit: empty block rows, 1 x N blocks, explicit zero blocks, unsorted block
    columns and duplicate blocks (scipy's bsr_matvec sums them in stored order; so does the kernel)."""
    for dtype in (np.float64, np.int32):
        for shape, block in (((12, 9), (3, 3)), ((1, 8), (1, 2)), ((6, 6), (6, 6)), ((0, 6), (2, 3)), ((8, 4), (2, 1))):
            d = _dense(shape, 0.3, 1, dtype)
            a = sp.bsr_array(d, blocksize=block)
            if a.nnz and len(a.indices) > 1:
                # block columns of the first non-empty block row reversed; its first block stored twice
                r = int(np.argmax(np.diff(a.indptr) > 1)) if (np.diff(a.indptr) > 1).any() else None
                if r is not None:
                    lo, hi = a.indptr[r], a.indptr[r + 1]
                    a.indices[lo:hi] = a.indices[lo:hi][::-1].copy()
                    a.data[lo:hi] = a.data[lo:hi][::-1].copy()
                    a.data[lo] = 0
            dup = sp.bsr_array((np.concatenate([a.data, a.data[:1]]), np.concatenate([a.indices, a.indices[:1]]),
                                np.r_[a.indptr[:1], a.indptr[1:] + 1]), shape=shape, blocksize=block) \
                if len(a.indices) else a
            for b in (a, dup, sp.bsr_matrix(dup),
                      sp.bsr_array((dup.data, dup.indices.astype(np.int64), dup.indptr.astype(np.int64)),
                                   shape=shape, blocksize=block)):
                for rhs in (_dense((shape[1],), 1.0, 2, dtype), _dense((shape[1], 5), 1.0, 3, dtype),
                            _dense((shape[1],), 1.0, 2, dtype).astype(np.float64)):
                    np.testing.assert_array_equal(splyce.matmul(b, rhs), b @ rhs)


def test_malformed_int32_bsr_and_dia_refused_on_the_fast_paths():
    d = _dense((12, 12), 0.5, 2, np.float64)
    for mutate, words in ((lambda a: a.indices.__setitem__(0, -1), "block column"),
                          (lambda a: a.indptr.__setitem__(0, 1), "indptr"),
                          (lambda a: a.indptr.__setitem__(-1, a.indptr[-1] - 1), "indptr"),
                          (lambda a: setattr(a, "indices", a.indices[:-1]), "block column indices")):
        a = sp.bsr_array(d, blocksize=(3, 3))
        assert a.indptr.dtype == np.int32
        mutate(a)
        with pytest.raises(ValueError, match=words):
            splyce.matmul(a, np.ones(12))
    a = sp.dia_array((np.ones((2, 6)), np.array([0, 1], dtype=np.int32)), shape=(6, 6))
    a.data = np.ones((1, 6))
    with pytest.raises(ValueError, match="DIA"):
        splyce.matmul(a, np.ones(6))
    a.data = np.ones((2, 3, 2))
    with pytest.raises(ValueError, match="DIA"):
        splyce.matmul(a, np.ones(6))


@pytest.mark.parametrize("dtype", (np.float64, np.int64, pytest.param(np.float32, marks=pytest.mark.slow)))
def test_dia_matmul_dia_tiled_columns(dtype, monkeypatch):
    """DIA @ DIA longer than a column tile (native/dia_matmat.TILE): bit for bit the untiled pass (each entry
    sums its pairs in the table's order either way) and scipy's values; a second product of the same
    structure (the cached pair table) the same again; rectangular shapes, offsets beyond the matrix, data rows
    shorter and longer than the columns, pairs whose columns start and end inside a tile."""
    from splyce.native import dia_matmat

    tile = 64
    cases = [((300, 300), (300, 300), [0, 1, -1, 70, -130], [2, -3, 0, 65]),
             ((200, 330), (330, 150), [3, -2, 400, 129], [-1, 0, 4, -300, 64]),
             ((1, 257), (257, 1), [0, 5, 200], [0, -5, -200])]
    for sa, sb, oa, ob in cases:
        for width_a, width_b in ((sa[1], sb[1]), (sa[1] + 3, max(sb[1] - 70, 1))):
            a = sp.dia_array((_dense((len(oa), width_a), 0.9, 1, dtype), np.array(oa, dtype=np.int32)), shape=sa)
            b = sp.dia_matrix((_dense((len(ob), width_b), 0.9, 2, dtype), np.array(ob, dtype=np.int32)), shape=sb)
            monkeypatch.setattr(dia_matmat, "TILE", 0)
            untiled = splyce.matmul(a, b)
            monkeypatch.setattr(dia_matmat, "TILE", tile)
            for _ in range(2):
                got = splyce.matmul(a, b)
                assert type(got) is type(untiled) is sp.dia_array
                np.testing.assert_array_equal(got.offsets, untiled.offsets)
                np.testing.assert_array_equal(got.data, untiled.data)
            _check_result(got, a @ b, exact=np.dtype(dtype).kind in "iu")


def test_gcxs_results_hold_pydatas_own_arrays():
    """A row-compressed GCXS result built from the kernel's row-major COO without pydata's sort: the same data,
    indices, indptr (and dtypes), shape, axes and fill value as ``sparse.GCXS(coo, compressed_axes=(0,))``;
    empty shapes, one row, no entries, bool / int / float values; a COO out of row-major order goes through
    pydata's conversion; and the GCXS products and sums against pydata's."""
    from splyce.dropin.stored_formats import gcxs_like_pydata

    rng = np.random.default_rng(0)
    for shape, dens in [((5, 4), 0.5), ((0, 3), 0.1), ((3, 0), 0.1), ((1, 9), 0.5), ((40, 30), 0.05), ((30, 30), 0.0)]:
        for dt in (np.float64, np.int32, np.bool_):
            c = sparse.COO.from_scipy_sparse(sp.random_array(shape, density=dens, format="csr", rng=rng).astype(dt))
            want, got = sparse.GCXS(c, compressed_axes=(0,)), gcxs_like_pydata(sparse, c, (0,))
            for f in ("data", "indices", "indptr"):
                w, g = np.asarray(getattr(want, f)), np.asarray(getattr(got, f))
                assert w.dtype == g.dtype and np.array_equal(w, g), (shape, dt, f)
            assert got.shape == want.shape and got.compressed_axes == want.compressed_axes
            assert got.fill_value == want.fill_value
    c = sparse.COO(np.array([[1, 0], [0, 1]]), np.array([1.0, 2.0]), shape=(2, 2), sorted=True, has_duplicates=False)
    np.testing.assert_array_equal(gcxs_like_pydata(sparse, c, (0,)).todense(), c.todense())
    g = sparse.GCXS(sparse.COO.from_scipy_sparse(sp.random_array((30, 30), density=0.2, format="csr", rng=1)),
                    compressed_axes=(0,))
    for got, want in ((splyce.matmul(g, g), g @ g), (splyce.add(g, g), g + g), (splyce.multiply(g, g), g * g)):
        assert type(got) is type(want) and got.compressed_axes == want.compressed_axes
        np.testing.assert_allclose(got.todense(), want.todense(), rtol=1e-12)
        np.testing.assert_array_equal(np.diff(got.indptr) >= 0, True)
