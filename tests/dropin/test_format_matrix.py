"""The differential matrix of issue 56: every scipy format (COO, CSR, CSC, BSR, DIA, LIL, DOK) x op (SpMV, SpMM,
multiply, add, subtract, SpGEMM) x dtype (float32 / float64, int32 / int64, bool, complex64 / complex128: every
dtype scipy's operators serve) against scipy's own operator on the same operands: the result's class, format,
dtype, shape and values. pydata COO / GCXS against pydata: tests/dropin/test_stored_formats.py. Where scipy
refuses an op for a dtype (it raises), the drop-in must raise too.

Malformed buffers of the formats test_stored_formats.py leaves out (CSR, CSC, LIL, DOK, a BSR's block data, a
DIA's offsets) are refused by every op with a ValueError, as the CSR ones are.

Quick (unmarked): one shape per format in float64 and bool, complex128 on three formats; the full product
(every dtype, arrays and matrices, four shapes) is ``slow``.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import splyce

FORMATS = ("coo", "csr", "csc", "bsr", "dia", "lil", "dok")
DTYPES = (np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128, np.complex64)
OPS = ("spmv", "spmm", "multiply", "add", "subtract", "spgemm")


def _dense(shape, density, seed, dtype):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random(shape) < density, rng.integers(-9, 10, shape), 0)
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        d = d * rng.random(shape)
    if dtype.kind == "c":
        d = d + 1j * np.where(d != 0, rng.random(shape), 0)
    return d.astype(dtype)


def _as(fmt, d, cls_kind="array"):
    cls = getattr(sp, f"{fmt}_{cls_kind}")
    if fmt == "bsr":
        return cls(d, blocksize=(3, 3) if d.shape[0] % 3 == 0 and d.shape[1] % 3 == 0 else (1, 1))
    return cls(d)


def _pairs(op, a, b, dtype, n):
    """(drop-in call, scipy call) of ``op``."""
    if op == "spmv":
        x = _dense((n,), 1.0, 5, dtype)
        return (lambda: splyce.matmul(a, x)), (lambda: a @ x)
    if op == "spmm":
        X = _dense((n, 4), 1.0, 6, dtype)
        return (lambda: splyce.matmul(a, X)), (lambda: a @ X)
    if op == "multiply":
        return (lambda: splyce.multiply(a, b)), (lambda: a.multiply(b))
    if op == "add":
        return (lambda: splyce.add(a, b)), (lambda: a + b)
    if op == "subtract":
        return (lambda: splyce.subtract(a, b)), (lambda: a - b)
    return (lambda: splyce.matmul(a, b.T)), (lambda: a @ b.T)


def _values(r):
    if sp.issparse(r):
        return r.toarray()
    return np.asarray(r)


def _check(label, ours, theirs):
    try:
        want = theirs()
    except (TypeError, ValueError, NotImplementedError) as e:      # scipy refuses: so must the drop-in
        with pytest.raises((TypeError, ValueError, NotImplementedError)):
            ours()
            pytest.fail(f"{label}: scipy refuses ({e}) but the drop-in answered")
        return
    got = ours()
    if np.ndim(want) == 0 and not sp.issparse(want):
        # scipy 1.17: a one-row coo_array times a vector is 0-d; the drop-ins keep NumPy's (1,), as for every
        # other format (the documented exception: tests/dropin/test_dropin_spmv.py)
        assert type(got) is np.ndarray and got.shape == (1,), label
        got = got[0]
        assert got.dtype == want.dtype and np.allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True), label
        return
    assert type(got) is type(want), (label, type(got), type(want))
    assert getattr(got, "format", None) == getattr(want, "format", None), (label, got.format, want.format)
    g, w = _values(got), _values(want)
    assert g.shape == w.shape and g.dtype == w.dtype, (label, g.shape, w.shape, g.dtype, w.dtype)
    if w.dtype.kind in "fc":
        tol = 1e-5 if w.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=label)
    else:
        np.testing.assert_array_equal(g, w, err_msg=label)


def _run(fmt, dtype, cls_kind, shapes):
    for k, shape in enumerate(shapes):
        a = _as(fmt, _dense(shape, 0.25, k, dtype), cls_kind)
        b = _as(fmt, _dense(shape, 0.3, k + 50, dtype), cls_kind)
        for op in OPS:
            if op == "subtract" and np.dtype(dtype) == np.bool_:
                continue            # test_bool_subtract_follows_scipy
            ours, theirs = _pairs(op, a, b, dtype, shape[1])
            _check(f"{fmt} {cls_kind} {np.dtype(dtype).name} {shape} {op}", ours, theirs)


@pytest.mark.parametrize("fmt,dtype", list(itertools.product(FORMATS, (np.float64, np.bool_)))
                         + [(f, np.complex128) for f in ("coo", "csr", "bsr")])
def test_format_op_dtype_quick(fmt, dtype):
    _run(fmt, dtype, "array", [(12, 9)])


@pytest.mark.slow
@pytest.mark.parametrize("fmt,dtype,cls_kind", list(itertools.product(FORMATS, DTYPES, ("array", "matrix"))))
def test_format_op_dtype_all(fmt, dtype, cls_kind):
    _run(fmt, dtype, cls_kind, [(12, 9), (30, 30), (1, 6), (48, 36)])


# -- malformed buffers ------------------------------------------------------------------------------------------

def _malformed():
    d = _dense((12, 12), 0.4, 3, np.float64)
    good = _dense((12, 12), 0.3, 4, np.float64)
    out = []
    a = sp.csr_array(d)
    a.indices[-1] = 12
    out.append(("csr column past the end", a, sp.csr_array(good)))
    a = sp.csr_matrix(d)
    a.indptr[3] = a.indptr[4] + 2
    out.append(("csr indptr decreasing", a, sp.csr_matrix(good)))
    a = sp.csc_array(d)
    a.indices[0] = -1
    out.append(("csc negative row", a, sp.csc_array(good)))
    a = sp.lil_array(d)
    a.rows[2] = [0, 40]
    a.data[2] = [1.0, 2.0]
    out.append(("lil column past the end", a, sp.lil_array(good)))
    a = sp.lil_array(d)
    a.rows[1] = [0, 1, 2]
    a.data[1] = [1.0]
    out.append(("lil rows and data of different lengths", a, sp.lil_array(good)))
    a = sp.bsr_array(d, blocksize=(3, 3))
    a.data = a.data[:, :2, :]
    out.append(("bsr blocks of the wrong shape", a, sp.bsr_array(good, blocksize=(3, 3))))
    a = sp.dia_array((np.ones((2, 12)), [0, 1]), shape=(12, 12))
    a.offsets = np.array([[0, 1]], dtype=np.int32)
    out.append(("dia offsets not 1-D", a, sp.dia_array(good)))
    return out


# (DOK: scipy 1.17 keeps its entries in a private dict, every key checked by ``__setitem__``: no buffer of its
# own to be malformed; its values reach the kernels through scipy's ``tocoo``, checked as a COO's)
@pytest.mark.parametrize("case", range(7))
def test_malformed_buffers_of_each_format_refused(case):
    label, bad, good = _malformed()[case]
    x, X = np.ones(12), np.ones((12, 3))
    calls = {"spmv": lambda: splyce.matmul(bad, x), "spmm": lambda: splyce.matmul(bad, X),
             "multiply": lambda: splyce.multiply(bad, good), "add": lambda: splyce.add(good, bad),
             "subtract": lambda: splyce.subtract(bad, good), "spgemm": lambda: splyce.matmul(bad, good),
             "spgemm right": lambda: splyce.matmul(good, bad)}
    for op, call in calls.items():
        try:
            call()
        except ValueError:
            continue
        except Exception as e:          # a crash of another kind is no refusal
            pytest.fail(f"{label}: {op} raised {type(e).__name__}: {e} (a ValueError naming the defect expected)")
        pytest.fail(f"{label}: {op} accepted the malformed operand")


@pytest.mark.parametrize("fmt", ("csr", "coo", "lil"))
def test_bool_subtract_follows_scipy(fmt):
    """bool - bool of scipy sparse matrices: scipy answers (``a != b``, a bool result) where NumPy refuses."""
    a = _as(fmt, _dense((12, 9), 0.25, 0, np.bool_))
    b = _as(fmt, _dense((12, 9), 0.3, 50, np.bool_))
    _check(f"{fmt} bool subtract", lambda: splyce.subtract(a, b), lambda: a - b)


def test_bool_subtract_refused_where_scipy_refuses():
    a = _as("dia", _dense((12, 9), 0.25, 0, np.bool_))
    b = _as("dia", _dense((12, 9), 0.3, 50, np.bool_))
    _check("dia bool subtract", lambda: splyce.subtract(a, b), lambda: a - b)


# -- COO products: rows held in registers, thread splits (native/coo.py) ------------------------------------------

def _coo_layout(kind, m, n, nnz, seed, dtype):
    rng = np.random.default_rng(seed)
    r, c = rng.integers(0, m, nnz), rng.integers(0, n, nnz)
    if kind in ("sorted", "nearly sorted"):
        o = np.lexsort((c, r))
        r, c = r[o], c[o]
    if kind == "nearly sorted":      # a sample of the rows looks sorted; a few entries are not
        i, j = rng.integers(0, nnz, 4), rng.integers(0, nnz, 4)
        r[i], r[j] = r[j].copy(), r[i].copy()
    v = _dense((nnz,), 1.0, seed + 1, dtype)
    return sp.coo_array((v, (r.astype(np.int32), c.astype(np.int32))), shape=(m, n))


@pytest.mark.parametrize("kind", ("sorted", "nearly sorted", "shuffled"))
@pytest.mark.parametrize("dtype", (np.float64, np.int32))
def test_coo_products_bit_identical_for_any_layout_and_thread_count(kind, dtype):
    """COO SpMV / SpMM with rows held in registers over runs of one row and split over threads where the entries
    are grouped by row (more than 2 x 32,768 entries): scipy's bits for every thread count, entries sorted, almost
    sorted (the split finds out as it reads and starts again on one thread) or shuffled, 10 to 60 per row."""
    for m, per_row in ((7000, 10), (1200, 60)):
        a = _coo_layout(kind, m, 900, m * per_row, per_row, dtype)
        for rhs in (_dense((900,), 1.0, 1, dtype), _dense((900, 5), 1.0, 2, dtype), _dense((900, 40), 1.0, 3, dtype)):
            want = a @ rhs
            for threads in (1, 2, 3):
                got = splyce.matmul(a, rhs, threads=threads)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want, err_msg=f"{kind} m={m} k={rhs.shape[1:]} threads={threads}")


@pytest.mark.parametrize("sorted_rows", (True, False))
def test_coo_bad_coordinates_refused_on_every_thread_count(sorted_rows):
    rows = np.arange(100_000) % 50
    a = sp.coo_array((np.ones(100_000), (np.sort(rows) if sorted_rows else rows, np.zeros(100_000, int))),
                     shape=(50, 3))
    a.coords[0][77_777] = 60
    for threads in (1, 2):
        with pytest.raises(ValueError, match=r"entry 77777 has coordinates \(60, 0\) outside"):
            splyce.matmul(a, np.ones(3), threads=threads)
    a.coords[0][77_777] = 3
    a.coords[1][70_000] = -1
    for threads in (1, 2):
        with pytest.raises(ValueError, match="entry 70000 has coordinates"):
            splyce.matmul(a, np.ones((3, 4)), threads=threads)


def test_bool_subtract_of_a_bsr_keeps_its_class():
    """A BSR left operand: computed on its CSR (scipy's ``a != b`` there) and put back in the left operand's
    format, as the drop-ins do for every format scipy keeps: scipy's class, blocks and values."""
    a = sp.bsr_array(_dense((12, 9), 0.25, 0, np.bool_), blocksize=(3, 3))
    b = sp.csr_array(_dense((12, 9), 0.3, 50, np.bool_))
    got, want = splyce.subtract(a, b), a - b
    assert type(got) is type(want) and got.blocksize == want.blocksize and got.dtype == want.dtype
    assert np.array_equal(got.toarray(), want.toarray())


def test_bool_subtract_every_format_pair_as_scipy():
    """bool - bool over every pair of scipy formats and both classes: scipy's result class and values, or a
    TypeError where scipy raises one (two DIAs: NumPy's bool difference)."""
    import itertools

    rng = np.random.default_rng(1)
    a, b = rng.random((6, 6)) < 0.4, rng.random((6, 6)) < 0.4
    formats = ("csr", "csc", "coo", "bsr", "dia", "lil", "dok")
    for fa, fb in itertools.product(formats, formats):
        for kind in ("array", "matrix"):
            A, B = getattr(sp, f"{fa}_{kind}")(a), getattr(sp, f"{fb}_{kind}")(b)
            try:
                want = A - B
            except TypeError:
                with pytest.raises(TypeError):
                    splyce.subtract(A, B)
                continue
            got = splyce.subtract(A, B)
            assert type(got) is type(want), (fa, fb, kind)
            assert np.array_equal(got.toarray(), want.toarray()), (fa, fb, kind)
