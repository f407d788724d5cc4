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
    return len(now) == len(snap) and all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(now, snap))


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
