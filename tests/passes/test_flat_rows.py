"""Row sums and scatters (``a.T @ x``) on rows of a few entries as one flat loop over the entries
(passes/flat_rows.py): the MLIR kernel's SpMV / row reduction / transposed product on road-network-like
matrices, chosen per call, bit for bit the loop nest's results (the plain sparsifier's), NaN / Inf, empty rows,
accumulate and threads included."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.native import spmv

N = 150_000     # 375k entries of 2.5 a row: 3-4.5 MB, past the size any CPU's tuning goes flat from


def _short_rows(seed, n=N, dtype=np.float64, special=True, empty=()):
    """0-5 entries a row (2.5 on average); ``empty``: row ranges left empty."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, size=n)
    for lo, hi in empty:
        lengths[lo:hi] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]).astype(np.int32)
    if np.issubdtype(dtype, np.integer):
        data = rng.integers(-50, 50, size=indptr[-1]).astype(dtype)
    else:
        data = rng.standard_normal(indptr[-1]).astype(dtype)
        if special:
            at = rng.choice(len(data), size=40, replace=False)
            data[at] = np.array([np.nan, np.inf, -np.inf, -0.0] * 10, dtype=dtype)
    return splyce.asarray(sps.csr_array((data, indices, indptr), shape=(n, n)))


def _bits_equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def _vector(seed, dtype, n=N):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-9, 9, size=n).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


SPMV = lambda a, x: a @ x   # noqa: E731


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_spmv_runs_the_flat_loop_with_the_loop_nests_bits(dtype):
    a = _short_rows(1, dtype=dtype, empty=[(0, 5), (1000, 1400), (N - 7, N - 3)])
    x = _vector(2, dtype)
    flat = splyce.jit(SPMV, library=False)
    plain = splyce.jit(SPMV, library=False, vectorize=False)
    assert "flat twin" in flat.lower(a, x).as_text("splyce")
    assert "flat" not in plain.lower(a, x).as_text("splyce")
    with np.errstate(all="ignore"):
        _bits_equal(flat(a, x), plain(a, x))
        reference = a.to_scipy() @ x
    if dtype in (np.int64, np.int32):
        np.testing.assert_array_equal(flat(a, x), reference)
    # the work counter: every entry but the last two rows' went through the flat loop
    counted = splyce.profile(flat, a, x).flat_rows
    assert counted == a.pos[1][N - 2] - a.pos[1][0], counted


def test_rows_of_many_entries_and_small_matrices_keep_the_loop_nest():
    flat = splyce.jit(SPMV, library=False)
    long_rows = splyce.asarray(sps.random_array((N, N), density=8 / N, format="csr", rng=3))
    x = _vector(4, np.float64)
    assert splyce.profile(flat, long_rows, x).flat_rows == 0     # the same kernel (shape, format), per call
    plain = splyce.jit(SPMV, library=False, vectorize=False)
    _bits_equal(flat(long_rows, x), plain(long_rows, x))
    small = _short_rows(5, n=3000)
    assert splyce.profile(flat, small, _vector(6, np.float64, 3000)).flat_rows == (
        small.pos[1][2998] if spmv.FLAT_MIN_BYTES == 0 else 0)


@pytest.mark.parametrize("body", [
    lambda a, x: a.sum(axis=1),
    lambda a, x: (a * 2.0).sum(axis=1) + x,
    lambda a, x: np.maximum(a @ np.tanh(x), 0.0),      # the SpMV reads a value the kernel computes
    lambda a, x: a @ x * 0.5 - x,
], ids=["row sums", "scaled row sums", "spmv of tanh", "spmv glue"])
def test_row_reductions_in_programs(body):
    a = _short_rows(7, empty=[(N // 2, N // 2 + 10)])
    x = _vector(8, np.float64)
    flat = splyce.jit(body, library=False)
    assert "flat twin" in flat.lower(a, x).as_text("splyce")
    with np.errstate(all="ignore"):
        _bits_equal(flat(a, x), splyce.jit(body, library=False, vectorize=False)(a, x))
        np.testing.assert_allclose(flat(a, x), body(a.to_scipy(), x), rtol=1e-12, atol=1e-12, equal_nan=True)
    assert splyce.profile(flat, a, x).flat_rows > 0


def test_accumulate_threads_and_inputs_unchanged():
    a = _short_rows(9, empty=[(10, 20)])
    x = _vector(10, np.float64)
    before = (a.values.copy(), a.pos[1].copy(), a.crd[1].copy(), x.copy())
    plain = splyce.jit(SPMV, library=False, vectorize=False)
    one = plain(a, x)
    with np.errstate(all="ignore"):
        _bits_equal(splyce.jit(SPMV, library=False, threads=2)(a, x), one)
        out = np.linspace(-1.0, 1.0, N)
        expected = out.copy()
        plain.accumulate(expected, a, x)
        splyce.jit(SPMV, library=False).accumulate(out, a, x)    # each row's sum starts from out[i]
    _bits_equal(out, expected)
    for kept, now in zip(before, (a.values, a.pos[1], a.crd[1], x)):
        assert np.array_equal(kept, now, equal_nan=True)


def test_the_flat_twin_in_the_ir():
    """The loop nest stays as the else branch; the flat loop is an scf.while whose row change goes through
    an empty inline asm (no select of the carried sum: x86 would branch on it)."""
    a = _short_rows(11)
    text = splyce.jit(SPMV, library=False).lower(a, _vector(12, np.float64)).as_text("splyce")
    body = text[text.index("func.func private"):]
    assert body.count("scf.while") >= 2 and "llvm.inline_asm" in body and "} else {" in body
    assert body.index("scf.while") < body.index("} else {") < body.rindex("scf.for")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_flat_twin_bounds_are_the_python_rules(monkeypatch, dtype):
    """The scf.if's constants come from native/spmv.py's rule at compile time, not a copy of it: the entries'
    lower bound is ``spmv.flat_min_entries`` of the coordinates' and values' bits (rounded up, as ``goes_flat``
    rounds), here for a size bound that no CPU's tuning uses (so the constant cannot be there by chance)."""
    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", 1_000_003)
    a = _short_rows(13, n=3000)
    bits = 32 + np.dtype(dtype).itemsize * 8
    least = spmv.flat_min_entries(bits)
    assert least == -(-1_000_003 * 8 // bits) and spmv.goes_flat(least, 10**9, 32, np.dtype(dtype).itemsize) \
        and not spmv.goes_flat(least - 1, 10**9, 32, np.dtype(dtype).itemsize)
    a = splyce.asarray(sps.csr_array(a.to_scipy().astype(dtype)))
    text = splyce.jit(lambda m, v: m @ v, library=False).lower(a, _vector(14, dtype, 3000)).as_text("splyce")
    assert f"arith.constant {least} : index" in text
    assert f"arith.constant {spmv.FLAT_MAX_ROW} : index" in text


@pytest.mark.parametrize("library", [True, False])
def test_a_bad_coordinate_is_refused_before_either_short_row_path(library):
    """Rows of a few entries with a column out of range: a clear ValueError before the native step or the
    flat loop (neither checks bounds), the scipy operand unchanged."""
    good = _short_rows(13, special=False).to_scipy()
    indices = good.indices.copy()
    indices[5] = N + 7
    bad = sps.csr_array((good.data, indices, good.indptr), shape=good.shape)
    kept = bad.indices.copy()
    f = splyce.jit(lambda a, x: 0.85 * (a @ x) + 0.15, library=library)
    with pytest.raises(ValueError, match="out of range"):
        f(bad, _vector(14, np.float64))
    assert np.array_equal(bad.indices, kept)


TRANSPOSED = lambda a, x: a.T @ x   # noqa: E731


SCATTERS = {"a.T @ x": TRANSPOSED,
            "gradient": lambda a, x: a.T @ (1.0 / (1.0 + np.exp(-(a @ x))) - 0.5),   # a.T @ glue
            "normal": lambda a, x: a.T @ (a @ x)}


@pytest.mark.parametrize("name, dtype", [("a.T @ x", d) for d in (np.float64, np.float32, np.int64, np.int32)]
                         + [(n, d) for n in ("gradient", "normal") for d in (np.float64, np.float32)])
def test_scatter_nests_run_flat_with_the_loop_nests_bits(name, dtype):
    """``a.T @ x`` of a CSR ``a`` is a scatter nest (each row's entries added into the result at their
    columns): on rows of a few entries it gets a flat twin too (``_match_scatter``), running the same entries
    in the same order: the plain sparsifier's bits, NaN / Inf and empty rows included; the entries counted."""
    body = SCATTERS[name]
    a = _short_rows(15, dtype=dtype, empty=[(0, 4), (700, 900), (N - 6, N - 2)])
    x = _vector(16, dtype)
    flat = splyce.jit(body, library=False)
    # the row sums of a @ x and the scatter each get a flat twin; the gradient's scatter reads its row value
    # (the logistic of a @ x, fused by MLIR into the nest) from a buffer filled once per row
    twins = {"a.T @ x": 1, "gradient": 2, "normal": 2}[name]
    assert f"// splyce: {twins} row loop nest(s) with a flat twin" in flat.lower(a, x).as_text("splyce")
    with np.errstate(all="ignore"):
        got = flat(a, x)
        _bits_equal(got, splyce.jit(body, library=False, vectorize=False)(a, x))
        _bits_equal(got, splyce.jit(body, vectorize=False)(a, x))
        np.testing.assert_allclose(got, body(a.to_scipy(), x), rtol=1e-4 if dtype == np.float32 else 1e-12,
                                   atol=1e-3 if dtype == np.float32 else 1e-9, equal_nan=True)
    assert splyce.profile(flat, a, x).flat_rows > 0


def test_a_scatter_nest_on_long_rows_keeps_the_loop_nest():
    long_rows = splyce.asarray(sps.random_array((N, N), density=8 / N, format="csr", rng=17))
    x = _vector(18, np.float64)
    flat = splyce.jit(TRANSPOSED, library=False)
    assert splyce.profile(flat, long_rows, x).flat_rows == 0
    _bits_equal(flat(long_rows, x), splyce.jit(TRANSPOSED, library=False, vectorize=False)(long_rows, x))


def test_nests_whose_rows_are_not_consecutive_keep_the_loop_nest():
    """A loop over a product's inner level runs from ``pos[crd[p]]`` to ``pos[crd[p] + 1]``: one row's end is
    not the next one's start, so no flat twin (it would step over the wrong entries): the kept plan of a CSR
    times a CSC into a dense result, which once crashed this way."""
    n = 300
    A = sps.random_array((n, n), density=0.3, format="csr", rng=np.random.default_rng(1))
    B = sps.random_array((n, n), density=0.7, format="csc", rng=np.random.default_rng(3))
    a, b = splyce.asarray(A), splyce.asarray(B, format=splyce.CSC)
    f = splyce.jit(lambda a, b: a @ b, out_format="dense")
    kept = f.kernel_for(a, b)[0].kept()
    assert "contract[ik,kj->ij, order=jki]" in kept.plan.as_text()
    assert "flat twin" not in kept.lowering.texts["splyce"]
    np.testing.assert_allclose(kept.run([a, b])[0], (A @ B).toarray(), rtol=1e-12)
