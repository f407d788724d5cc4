"""scipy BSR / DIA / COO arguments of a jitted function held in their own format (tensors/held.py): the products
with a dense operand run on their own buffers (the native BSR / DIA / COO kernels, scipy's sums), everything else
reads the CSR they equal, converted once a call, and ``as_text("plan")`` says which. Differential: against scipy
on the same operand, and against the same program on the CSR operand; malformed buffers refused; inputs never
modified."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel

DTYPES = (np.float64, np.float32, np.int64, np.complex128)
# float64 runs in the quick subset; the other dtypes (each a set of compiles of its own) are marked slow
QUICK_FIRST = [pytest.param(d, marks=() if k == 0 else pytest.mark.slow, id=np.dtype(d).name)
               for k, d in enumerate(DTYPES)]


def _random(rng, m, n, density, dtype):
    a = sps.random_array((m, n), density=density, format="csr", rng=rng, dtype=np.float64)
    a.data = np.round(a.data * 8 - 4) if np.dtype(dtype).kind in "iu" else a.data - 0.5
    if np.dtype(dtype).kind == "c":
        a = a + 1j * a
    return a.astype(dtype)


def _bsr(rng, m, n, block, density, dtype, matrix=False):
    R, C = block
    pattern = _random(rng, m // R, n // C, density, dtype)
    dense = np.kron(pattern.toarray() != 0, np.ones(block)) * _random(rng, m, n, 1.0, dtype).toarray()
    out = sps.bsr_array(dense.astype(dtype), blocksize=block)
    return sps.bsr_matrix(out) if matrix else out


def _dia(rng, m, n, offsets, dtype, width=None):
    data = _random(rng, len(offsets), width or n, 1.0, dtype).toarray()
    return sps.dia_array((data, np.array(offsets)), shape=(m, n))


def _coo(rng, m, n, density, dtype, duplicates=True):
    a = _random(rng, m, n, density, dtype).tocoo()
    row, col, data = a.coords[0], a.coords[1], a.data
    if duplicates and a.nnz:
        k = max(1, a.nnz // 3)
        row, col = np.concatenate([row, row[:k]]), np.concatenate([col, col[:k]])
        data = np.concatenate([data, data[:k] * 3])
        perm = rng.permutation(len(row))           # unsorted, duplicates apart
        row, col, data = row[perm], col[perm], data[perm]
    return sps.coo_array((data, (row, col)), shape=(m, n))


def _operands(rng, dtype):
    """(label, operand) over formats and shapes: blocks that tile non-square shapes, 1 x 1 blocks, empty matrices,
    DIA offsets beyond the shape and data wider than it, COO with duplicates and unsorted entries."""
    yield "bsr 4x4", _bsr(rng, 40, 48, (4, 4), 0.2, dtype)
    yield "bsr 3x2 rect", _bsr(rng, 27, 14, (3, 2), 0.3, dtype)
    yield "bsr 2x5 matrix", _bsr(rng, 10, 35, (2, 5), 0.4, dtype, matrix=True)
    yield "bsr 1x1", _bsr(rng, 17, 13, (1, 1), 0.2, dtype)
    yield "bsr empty", sps.bsr_array((12, 8), blocksize=(4, 4), dtype=dtype)
    yield "dia", _dia(rng, 40, 36, [0, 1, -2], dtype)
    yield "dia beyond", _dia(rng, 30, 45, [-50, -29, 0, 7, 44, 60], dtype, width=50)
    yield "dia empty", sps.dia_array((np.zeros((0, 9), dtype), np.zeros(0, np.int32)), shape=(7, 9))
    yield "coo dup", _coo(rng, 33, 29, 0.15, dtype)
    yield "coo no entries", sps.coo_array((np.zeros(0, dtype), (np.zeros(0, np.int32), np.zeros(0, np.int32))),
                                          shape=(5, 6))
    yield "coo matrix", sps.coo_matrix(_coo(rng, 20, 21, 0.2, dtype))


def _dense_of(rng, shape, dtype):
    return _random(rng, *shape, 1.0, dtype).toarray().reshape(shape) if len(shape) == 2 else \
        _random(rng, 1, shape[0], 1.0, dtype).toarray().reshape(shape)


def _snapshot(a):
    parts = {"bsr": ("data", "indices", "indptr"), "dia": ("data", "offsets"), "coo": ("data", "coords")}[a.format]
    out = []
    for p in parts:
        v = getattr(a, p)
        out.extend(np.array(x, copy=True) for x in (v if isinstance(v, tuple) else (v,)))
    return out


def _unchanged(a, snap):
    now = _snapshot(a)
    assert len(now) == len(snap) and all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(now, snap))


def _same_bits(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    assert np.array_equal(x, y), np.max(np.abs(x - y)) if x.size else None


def _close(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype
    tol = 1e-5 if x.dtype in (np.float32, np.complex64) else 1e-12
    scale = max(1.0, float(np.max(np.abs(y)))) if y.size else 1.0
    assert np.allclose(x, y, rtol=tol, atol=tol * scale)


def spmv(a, x):
    return a @ x


def pagerank_step(a, x):
    return 0.85 * (a @ x) + 0.15


def gcn(a, h, w):
    return np.maximum(a @ (h @ w), 0)


def scaled(a):
    return a * 2


def row_sums(a, x):
    return a @ x, a.sum(axis=1)


def transposed(a, y):
    return a.T @ y


@pytest.mark.parametrize("dtype", QUICK_FIRST)
def test_products_kept_match_scipy_and_csr(dtype):
    rng = np.random.default_rng(7)
    f = splyce.jit(spmv)
    g = splyce.jit(pagerank_step)
    for label, a in _operands(rng, dtype):
        snap = _snapshot(a)
        m, n = a.shape
        for xshape in ((n,), (n, 3), (n, 16)):
            x = _dense_of(rng, xshape, dtype)
            got = f(a, x)
            _same_bits(got, splyce.matmul(a, x))         # the drop-in's kernel on the same buffers, bit for bit
            if np.dtype(dtype).kind == "c" and a.format != "bsr":
                _close(got, a @ x)   # (the native DIA / COO kernels' complex products round otherwise than scipy's)
            else:
                _same_bits(got, a @ x)                   # scipy's sums, bit for bit
            if a.format == "bsr":                        # CSR's row order is BSR's: the same bits
                _same_bits(got, f(a.tocsr(), x))
            else:                                        # DIA sums by diagonal, COO in entry order
                _close(got, f(a.tocsr(), x))
        x = _dense_of(rng, (n,), dtype)
        if np.dtype(dtype).kind == "f":
            _same_bits(g(a, x), 0.85 * (a @ x) + 0.15)
        elif np.dtype(dtype).kind == "c":
            _close(g(a, x), 0.85 * (a @ x) + 0.15)
        _unchanged(a, snap)


@pytest.mark.parametrize("fmt", ["bsr", "dia", "coo"])
def test_plan_says_kept_or_converted(fmt):
    rng = np.random.default_rng(3)
    a = {"bsr": _bsr(rng, 40, 40, (4, 4), 0.2, np.float64), "dia": _dia(rng, 40, 40, [0, 1, -1], np.float64),
         "coo": _coo(rng, 40, 40, 0.1, np.float64)}[fmt]
    x = rng.random(40)
    g = splyce.jit(pagerank_step)
    text = g.lower(a, x).as_text("plan")
    assert f"%arg0: {fmt}" in text and "kept" in text and "convert %arg0" not in text
    f = splyce.jit(spmv)
    f(a, x)
    kernel, _ = f.kernel_for(a, x)
    assert isinstance(kernel, LibraryKernel) and kernel.call.formulation == f"{fmt} x dense"
    assert "kept, read on its own buffers" in f.lower(a, x).as_text("plan")
    h = splyce.jit(scaled)
    text = h.lower(a).as_text("plan")
    assert "converted to csr: ewise has no native kernel on " + fmt in text


def test_cached_per_format():
    rng = np.random.default_rng(5)
    a = _bsr(rng, 24, 24, (4, 4), 0.3, np.float64)
    x = rng.random(24)
    f = splyce.jit(spmv)
    for op in (a, a.tobsr(blocksize=(2, 2)), a.tocsr(), a.todia(), a.tocoo(), a):
        _same_bits(f(op, x), op @ x) if op.format in ("bsr", "dia", "coo") else _close(f(op, x), a @ x)
    assert f.cache_info().misses == 5


@pytest.mark.parametrize("dtype", [pytest.param(np.float64, marks=pytest.mark.slow, id="float64"),
                                   pytest.param(np.int64, id="int64"),
                                   pytest.param(np.complex128, marks=pytest.mark.slow, id="complex128")])
def test_converted_programs_match_scipy(dtype):
    """Ops without a native kernel on the held format: the CSR the operand equals (a COO's duplicates summed)."""
    rng = np.random.default_rng(11)
    h, r, t = splyce.jit(scaled), splyce.jit(row_sums), splyce.jit(transposed)
    for label, a in _operands(rng, dtype):
        snap = _snapshot(a)
        m, n = a.shape
        got = h(a)
        want = (a.tocsr() * 2)
        assert abs(sps.csr_array(got) - want).max() == 0 if want.nnz or got.nnz else True
        x = _dense_of(rng, (n,), dtype)
        y, s = r(a, x)
        _close(y, a @ x)          # (a result of a program of two: the MLIR kernel on the CSR, summed by rows)
        _close(np.asarray(s).reshape(-1), np.asarray(a.sum(axis=1)).reshape(-1))
        z = _dense_of(rng, (m,), dtype)
        # (dense reference: scipy's own DIA ``.T`` is wrong when ``data`` is wider than the matrix, "dia beyond")
        _close(t(a, z), a.toarray().T @ z)
        _unchanged(a, snap)


@pytest.mark.slow
def test_gcn_and_power_iteration_loops():
    rng = np.random.default_rng(2)
    a = _bsr(rng, 60, 60, (3, 3), 0.2, np.float64)
    h, w = rng.random((60, 8)), rng.random((8, 4))
    g = splyce.jit(gcn)
    for op in (a, a.todia(), a.tocoo()):
        _close(g(op, h, w), np.maximum(op @ (h @ w), 0))
    assert "kept" in g.lower(a, h, w).as_text("plan")
    step = splyce.jit(lambda a, x: (lambda y: y / np.sqrt((y * y).sum()))(a @ x))
    for op in (a, a.todia(), a.tocoo()):
        x = x_csr = np.ones(60)
        for _ in range(10):
            x, x_csr = step(op, x), step(op.tocsr(), x_csr)
        _close(x, x_csr)


def test_mixed_dtypes_converted():
    rng = np.random.default_rng(4)
    a = _bsr(rng, 16, 16, (4, 4), 0.4, np.float32)
    x = rng.random(16)                          # float64: the product is float64, as scipy's
    f = splyce.jit(spmv)
    _close(f(a, x), a @ x)
    assert "converted to csr" in f.lower(a, x).as_text("plan")


def _malformed():
    rng = np.random.default_rng(9)
    b = _bsr(rng, 16, 16, (4, 4), 0.5, np.float64)
    out = []
    c = b.copy(); c.indices[0] = 7;  out.append(("bsr block column", c))
    c = b.copy(); c.indptr = c.indptr[:-1]; out.append(("bsr indptr length", c))
    c = b.copy(); c.indptr[-1] += 1; out.append(("bsr indptr end", c))
    c = b.copy(); c.indptr[1], c.indptr[2] = c.indptr[2] + 1, c.indptr[1]; out.append(("bsr indptr order", c))
    d = _dia(rng, 16, 16, [0, 1], np.float64)
    c = d.copy(); c.offsets = np.array([0, 1, 2]); out.append(("dia offsets", c))
    c = d.copy(); c.offsets = np.array([0, 2**62]); out.append(("dia huge offset", c))
    o = _coo(rng, 16, 16, 0.3, np.float64)
    c = o.copy(); c.coords = (c.coords[0].copy(), c.coords[1].copy()); c.coords[1][0] = 16
    out.append(("coo column", c))
    c = o.copy(); c.coords = (c.coords[0].copy(), c.coords[1].copy()); c.coords[0][-1] = -1
    out.append(("coo negative row", c))
    c = o.copy(); c.coords = (c.coords[0][:-1], c.coords[1]); out.append(("coo lengths", c))
    return out


@pytest.mark.parametrize("label,a", _malformed(), ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_refused(label, a):
    x = np.ones(16)
    snap = _snapshot(a)
    for fun in (spmv, pagerank_step, lambda a, x: (a * 2) @ x):
        with pytest.raises(ValueError, match="malformed"):
            splyce.jit(fun)(a, x)
    _unchanged(a, snap)


@pytest.mark.parametrize("fmt", ["bsr", pytest.param("dia", marks=pytest.mark.slow),
                                 pytest.param("coo", marks=pytest.mark.slow)])
def test_other_entry_points(fmt):
    """accumulate, the plain sparsifier (every held argument converted), threads, grad and compiled loops."""
    rng = np.random.default_rng(8)
    a = {"bsr": _bsr(rng, 24, 24, (4, 4), 0.3, np.float64), "dia": _dia(rng, 24, 24, [0, 2, -3], np.float64),
         "coo": _coo(rng, 24, 24, 0.2, np.float64)}[fmt]
    x = rng.random(24)
    out = np.ones(24)
    _close(splyce.jit(spmv).accumulate(out, a, x), 1 + a @ x)
    plain = splyce.jit(spmv, library=False)
    _close(plain(a, x), a @ x)
    assert "converted to csr: the native kernel library is off" in splyce.jit(pagerank_step, library=False) \
        .lower(a, x).as_text("plan")
    _same_bits(splyce.jit(spmv, threads=2)(a, x), splyce.matmul(a, x))
    _close(splyce.grad(lambda v, m: ((m @ v) ** 2).sum())(x, a), 2 * (a.T @ (a @ x)))
    loop = splyce.jit(lambda m, v: splyce.fori_loop(0, 3, lambda i, w: m @ w, v))
    _close(loop(a, x), a @ (a @ (a @ x)))


def _same_bits_nan(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype
    assert np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))


@pytest.mark.parametrize("fmt", ["bsr", "bsr small", "dia", "coo"])
def test_many_columns_via_csr_same_bits(fmt):
    """From ``HELD_VIA_CSR_COLUMNS`` columns on, the chooser converts the held argument in the call to a CSR in its
    own summation order (a COO's entries stably sorted by row, duplicates and explicit zeros kept; a DIA's
    diagonal by diagonal) and runs the CSR kernel: scipy's sums on the held format, bit for bit, Inf and NaN
    included, on any thread count; the plan says so. Fewer columns: the held kernel."""
    from splyce.planner.kernel_choice import VIA_CSR, held_via_csr
    from splyce.tensors.held import Held

    rng = np.random.default_rng(17)
    a = {"bsr": _bsr(rng, 40, 36, (4, 4), 0.3, np.float64), "bsr small": _bsr(rng, 40, 36, (2, 3), 0.3, np.float64),
         "dia": _dia(rng, 40, 36, [2, -45, 0, -3, 1], np.float64, width=44),
         "coo": _coo(rng, 40, 36, 0.2, np.float64)}[fmt]
    a.data[..., :3] = 0.0                                # explicit zeros: times an Inf they give NaN in scipy
    snap = _snapshot(a)
    stored = {"bsr": "bsr 4x4", "bsr small": "bsr 2x3"}.get(fmt, fmt)
    assert held_via_csr(stored, 40) == (fmt in ("bsr", "coo"))   # the chooser's rule (kernel_choice.py)
    assert not held_via_csr("bsr 3x3", 40) and not held_via_csr("coo", 1) and not held_via_csr("bsr 4x4", 16)
    first = {"bsr": 17, "coo": 12}.get(fmt, 41)
    f, f2 = splyce.jit(spmv), splyce.jit(spmv, threads=2)
    g = splyce.jit(gcn)
    for k in sorted({min(first, 40) - 1, min(first, 40), 32, 40}):
        x = rng.standard_normal((36, k))
        x[[0, 5], 0], x[7, 1] = np.inf, np.nan
        want = a @ x
        assert np.isnan(want).any()
        _same_bits_nan(f(a, x), want)
        _same_bits_nan(f2(a, x), want)
        _same_bits_nan(Held(a, "a").times_dense(x, threads=2, via_csr=True), Held(a, "a").times_dense(x))
        kernel, _ = f.kernel_for(a, x)
        assert isinstance(kernel, LibraryKernel)
        assert kernel.call.formulation == f"{fmt.split()[0]} x dense" + (VIA_CSR if k >= first else "")
        text = f.lower(a, x).as_text("plan")
        assert ("then the CSR kernel" in text) == (k >= first), text
        h, w = rng.standard_normal((36, 5)), rng.standard_normal((5, k))
        _same_bits_nan(g(a, h, w), np.maximum(a @ (h @ w), 0))
        text = g.lower(a, h, w).as_text("plan")
        assert (f"converted to csr: its product with {k} dense columns" in text) == (k >= first), text
        assert "convert %arg0" not in text
    _unchanged(a, snap)


def test_via_csr_refuses_malformed():
    rng = np.random.default_rng(19)
    x = rng.random((30, 16))
    for row, col in (([0, 30], [1, 2]), ([0, -1], [1, 2]), ([0, 1], [1, 30])):
        a = sps.coo_array((np.ones(2), (np.array([0, 1]), np.array([1, 2]))), shape=(30, 30))
        a.coords = (np.array(row), np.array(col))        # (scipy checks at construction only)
        with pytest.raises(ValueError, match="malformed COO"):
            splyce.jit(spmv)(a, x)
