"""One-op forms on one CSR / CSC argument (runtime/forms.py, chosen by runtime/library.py): sums equal NumPy's
and scipy's bit for bit, max / min follow NumPy's NaN rules with the implicit zeros counted, and maps keep the
operand's structure with the MLIR kernel's values, never sharing a buffer with the argument."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

# stored-entry counts around NumPy's pairwise blocks: below 8 (sequential), 8..128 (8 accumulators), past 128
# (recursive halving rounded to multiples of 8), odd splits
LENGTHS = (0, 1, 3, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 255, 256, 257, 1000, 1023, 4097, 20001)
DTYPES = (np.float64, np.float32, np.complex128, np.complex64, np.int64, np.int32, np.bool_)


def _bits(x):
    x = np.asarray(x)
    if x.dtype.kind in "fc":           # NaN where NaN (its sign and payload aside), every other value's bits
        flat = x.reshape(-1).view(np.float64 if x.dtype.itemsize in (8, 16) and x.dtype.kind == "c"
                                  else x.dtype if x.dtype.kind == "f" else np.float32)
        nan = np.isnan(flat)
        return x.dtype, x.shape, nan.tobytes(), flat[~nan].tobytes()
    return x.dtype, x.shape, x.tobytes()


def _values(rng, n, dtype, special):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(n) < 0.7
    if dtype.kind == "i":
        return rng.integers(-1000, 1000, n).astype(dtype)
    v = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    v = v.astype(dtype)
    if special and n >= 4:
        v[rng.integers(0, n)] = np.inf
        v[rng.integers(0, n)] = -np.inf if rng.random() < 0.5 else np.nan
    return v


def _matrix(rng, nnz, dtype, fmt="csr", special=False, shape=None):
    """A canonical CSR / CSC with ``nnz`` stored entries in rows of random lengths (some empty)."""
    m, n = shape or (max(1, nnz // 5 + 3), max(8, nnz // 3 + 7))
    flat = np.sort(rng.choice(m * n, size=nnz, replace=False))
    rows, cols = np.divmod(flat, n)
    a = sps.coo_array((_values(rng, nnz, dtype, special), (rows, cols)), shape=(m, n)).asformat(fmt)
    a.sum_duplicates()
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_full_sum_is_scipys_bit_for_bit(dtype, fmt):
    rng = np.random.default_rng(1)
    f = splyce.jit(lambda a: a.sum())
    plain = splyce.jit(lambda a: a.sum(), vectorize=False)
    for nnz in LENGTHS:
        for special in (False, True):
            a = _matrix(rng, nnz, dtype, fmt, special)
            t = splyce.asarray(a)
            before = a.data.copy()
            got = f(t)
            want = a.sum()                            # np.sum(a.data): NumPy's pairwise sum
            assert _bits(got) == _bits(want), (nnz, special)
            assert _bits(plain(t)) == _bits(got)      # the Splyce pass never changes a result
            assert _bits(f(a)) == _bits(got)          # a scipy argument as the tensor
            assert np.array_equal(a.data, before, equal_nan=dtype not in (np.bool_, np.int32, np.int64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_stored_line_sums_are_scipys_bit_for_bit(dtype, fmt):
    """A CSR's row sums (a CSC's column sums) are scipy's ``_minor_reduce``: np.add.reduceat over the non-empty
    rows; a bool / int32 matrix sums in int64, as NumPy's dense sum (scipy reduces a bool matrix's rows with
    np.add in bool, a logical or, then casts)."""
    rng = np.random.default_rng(2)
    axis = 1 if fmt == "csr" else 0
    f = splyce.jit(lambda a: a.sum(axis=axis))
    plain = splyce.jit(lambda a: a.sum(axis=axis), vectorize=False)
    for nnz in LENGTHS:
        for shape in (None, (3, 40000) if axis == 1 else (40000, 3)):
            a = _matrix(rng, min(nnz, 60000), dtype, fmt, special=True, shape=shape)
            t = splyce.asarray(a)
            got = f(t)
            if np.dtype(dtype) in (np.bool_, np.int32):
                want = a.toarray().sum(axis=axis)
            else:
                want = np.asarray(a.sum(axis=axis)).reshape(-1)
            assert _bits(got) == _bits(want), nnz
            assert _bits(plain(t)) == _bits(got)
            assert "one-op form" in f.lower(t).as_text("plan")


def test_sums_take_the_form_and_library_false_keeps_the_mlir_kernel():
    a = splyce.asarray(_matrix(np.random.default_rng(3), 500, np.float64))
    for g in (lambda a: a.sum(), lambda a: a.sum(axis=1), lambda a: a.max(), lambda a: -a, lambda a: a * a):
        assert "one-op form" in splyce.jit(g).lower(a).as_text("plan")
        assert "one-op form" not in splyce.jit(g, library=False).lower(a).as_text("plan")
    # the sum across the stored order (a CSR's column sums) keeps the MLIR kernel's scatter, scipy's order
    assert "one-op form" not in splyce.jit(lambda a: a.sum(axis=0)).lower(a).as_text("plan")


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64])
def test_extremum_counts_the_implicit_zeros_and_propagates_nan(kind, dtype):
    rng = np.random.default_rng(4)
    f = splyce.jit(lambda a: getattr(a, kind)())
    cases = []
    for nnz in (0, 1, 7, 9, 300):
        for special in (False, True):
            cases.append(_matrix(rng, nnz, dtype, special=special))
    full = sps.csr_array(np.full((3, 4), 5, dtype=dtype))           # no implicit zero
    negative = sps.csr_array(-np.abs(np.arange(1, 13, dtype=dtype)).reshape(3, 4))
    cases += [full, negative, sps.csr_array((-full).toarray())]
    for a in cases:
        got = f(splyce.asarray(a))
        want = getattr(a.toarray(), kind)()                           # NumPy on the dense array
        assert _bits(got) == _bits(want)
        assert _bits(got) == _bits(getattr(a, kind)())                # scipy's


MAPS = {
    "neg": lambda a: -a, "scale": lambda a: 2.5 * a, "div": lambda a: a / 3.0, "abs": lambda a: abs(a),
    "square": lambda a: a * a, "pow2": lambda a: a ** 2, "pow3": lambda a: a ** 3, "sqrt": lambda a: np.sqrt(a),
    "sign": lambda a: np.sign(a), "floor": lambda a: np.floor(a), "ne0": lambda a: a != 0,
    "gt": lambda a: a > 1.0, "affine": lambda a: -(2.0 * a) / 7.0, "fused": lambda a: (a * a) + a,
}


# the maps taken as forms, per dtype kind: the others change the dtype (an integer divided) or round
# differently in MLIR's and NumPy's complex arithmetic (products of two complex values, quotients, magnitudes)
FORMS = {"f": set(MAPS), "c": {"neg", "scale", "ne0"}, "i": {"neg", "abs", "square", "pow2", "pow3", "sign", "ne0",
                                                                        "fused"}}


@pytest.mark.parametrize("name", sorted(MAPS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
def test_maps_share_structure_and_give_the_mlir_kernels_values(name, dtype):
    rng = np.random.default_rng(5)
    g = MAPS[name]
    f, mlir = splyce.jit(g), splyce.jit(g, library=False)
    for nnz in (0, 5, 200, 3001):
        a = _matrix(rng, nnz, dtype, special=True)
        t = splyce.asarray(a)
        try:
            want = mlir(t)
        except (splyce.TraceError, TypeError):
            pytest.skip(f"{name} does not trace on {np.dtype(dtype)}")
        got = f(t)
        if nnz == 200:
            text = f.lower(t).as_text("plan")
            kind = np.dtype(dtype).kind
            expected = name in FORMS[kind]
            assert ("one-op form" in text) == expected, text
        assert type(got) is type(want)
        assert np.array_equal(got.indptr, a.indptr) and np.array_equal(got.indices, a.indices)
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert _bits(got.data) == _bits(want.data)
        # never aliasing the argument: the caller may write to either
        for mine in (got.data, got.indices, got.indptr):
            for theirs in (t.values, t.crd[1], t.pos[1]):
                assert not np.may_share_memory(mine, theirs)
        if got.nnz:
            got.indices[0] = 99 if got.indices[0] != 99 else 98
            assert np.array_equal(t.crd[1], a.indices)


LIBM_MAPS = ("expm1", "log1p", "sin", "tan", "tanh", "sinh", "arctan", "arcsinh")


@pytest.mark.parametrize("name", LIBM_MAPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
def test_transcendental_maps_are_scipys_values(name, dtype):
    """The maps a C library rounds (f(0) == 0) are forms of float32 / float64 matrices with NumPy's values,
    which are scipy's (``np.expm1(A)`` maps ``A.data``); other dtypes keep the MLIR kernel."""
    rng = np.random.default_rng(8)
    u = getattr(np, name)
    f = splyce.jit(lambda a: u(a))
    for nnz in (0, 5, 300, 4001):
        a = _matrix(rng, nnz, dtype, special=True)
        if np.dtype(dtype).kind == "f":
            a.data[::7] = np.abs(a.data[::7]) * 1e-9            # small arguments, where expm1 / log1p matter
        t = splyce.asarray(a)
        with np.errstate(all="ignore"):
            want = u(a)
            try:
                got = f(t)
            except (splyce.TraceError, TypeError):
                assert np.dtype(dtype).kind != "f"
                continue
        if nnz == 300:
            assert ("one-op form" in f.lower(t).as_text("plan")) == (np.dtype(dtype).kind == "f")
        if np.dtype(dtype).kind != "f":
            assert np.allclose(got.toarray(), want.toarray(), equal_nan=True)
            continue
        assert type(got) is type(want) and got.dtype == want.dtype
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert _bits(got.data) == _bits(want.data)
        assert not np.may_share_memory(got.indices, t.crd[1]) and not np.may_share_memory(got.data, t.values)


@pytest.mark.parametrize("pair", [(np.float64, np.float32), (np.float32, np.float64), (np.int64, np.float64),
                                  (np.int32, np.float32)])
def test_conversions_to_floats_are_forms_with_the_mlir_kernels_values(pair):
    source, target = pair
    rng = np.random.default_rng(10)
    f, mlir = splyce.jit(lambda a: a.astype(target)), splyce.jit(lambda a: a.astype(target), library=False)
    for nnz in (0, 7, 2000):
        a = _matrix(rng, nnz, source, special=True)
        if np.dtype(source).kind == "i":
            a.data[:3] = np.iinfo(source).max      # not exact in the float: rounded to nearest by both
        t = splyce.asarray(a)
        got, want = f(t), mlir(t)
        assert "one-op form" in f.lower(t).as_text("plan")
        assert got.dtype == want.dtype == np.dtype(target) and _bits(got.data) == _bits(want.data)
        assert _bits(got.data) == _bits(a.astype(target).data)
        assert np.array_equal(got.indices, a.indices) and not np.may_share_memory(got.indices, t.crd[1])


def test_map_of_a_csc_argument_stays_a_csc_and_scipy_agrees():
    a = _matrix(np.random.default_rng(6), 400, np.float64, "csc")
    got = splyce.jit(lambda a: a * 4.0)(splyce.asarray(a))
    want = a * 4.0
    assert got.format == "csc" and np.array_equal(got.indptr, want.indptr)
    assert _bits(got.data) == _bits(want.data)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_row_and_column_scaling_keep_the_structure_and_the_mlir_kernels_values(fmt, dtype):
    rng = np.random.default_rng(7)
    bodies = {"rows": lambda a, d: a * d[:, None], "columns": lambda a, e: a * e[None, :]}
    for nnz in (0, 9, 700):
        a = _matrix(rng, nnz, dtype, fmt, special=True)
        t = splyce.asarray(a)
        d, e = _values(rng, a.shape[0], dtype, True), _values(rng, a.shape[1], dtype, True)
        for name, body in bodies.items():
            v = d if name == "rows" else e
            v_before = v.copy()
            f, mlir = splyce.jit(body), splyce.jit(body, library=False)
            got, want = f(t, v), mlir(t, v)
            assert "one-op form" in f.lower(t, v).as_text("plan")
            assert type(got) is type(want) and got.format == fmt
            assert np.array_equal(got.indptr, a.indptr) and np.array_equal(got.indices, a.indices)
            assert np.array_equal(got.indices, want.indices) and _bits(got.data) == _bits(want.data)
            with np.errstate(all="ignore"):
                ref = a.multiply(v[:, None] if name == "rows" else v[None, :])
            assert np.array_equal(got.toarray(), ref.toarray(), equal_nan=np.dtype(dtype).kind == "f")
            assert not np.may_share_memory(got.indices, t.crd[1]) and not np.may_share_memory(got.data, v)
            assert _bits(v) == _bits(v_before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_mean_is_scipys_bit_for_bit(dtype, fmt):
    """scipy 1.17's mean scales first, ``(a * (1.0 / count)).sum()``, in float64 for integers and bools."""
    rng = np.random.default_rng(8)
    f = splyce.jit(lambda a: a.mean())
    for nnz in (0, 1, 9, 130, 3001):
        a = _matrix(rng, nnz, dtype, fmt, special=True)
        t = splyce.asarray(a)
        assert _bits(f(t)) == _bits(a.mean())
        assert "one-op form" in f.lower(t).as_text("plan")
        assert _bits(splyce.jit(lambda a: a.mean(), vectorize=False)(t)) == _bits(f(t))


def test_maps_and_sums_of_a_transpose_read_the_arguments_arrays():
    """``a.T`` of a CSR argument is its arrays read as a CSC (the plan's derived input): the copy, maps of it
    and its sums are forms over those arrays, scipy's result (a CSC) and bits."""
    rng = np.random.default_rng(11)
    a = _matrix(rng, 3000, np.float64, special=True)
    t = splyce.asarray(a)
    cases = {"copy": (lambda a: a.T.copy(), lambda a: a.T.copy()),   # (a.T alone: a view, test_views.py) "neg": (lambda a: -a.T, lambda a: -a.T),
             "scale": (lambda a: 3.0 * a.T, lambda a: 3.0 * a.T),
             "sums": (lambda a: a.T.sum(axis=0), lambda a: a.T.tocsc().sum(axis=0)),
             "sum": (lambda a: a.T.sum(), lambda a: a.T.sum())}
    for name, (body, reference) in cases.items():
        f = splyce.jit(body)
        got, want = f(t), reference(a)
        assert "one-op form" in f.lower(t).as_text("plan"), name
        if hasattr(want, "indptr"):
            assert got.format == want.format == "csc"
            assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
            assert not np.may_share_memory(got.indices, t.crd[1])
            got, want = got.data, want.data
        assert _bits(got) == _bits(np.asarray(want).reshape(np.shape(got))), name


@pytest.mark.parametrize("cls", [sps.csr_array, sps.csc_array, sps.csr_matrix])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.complex128])
def test_conversions_to_the_other_order_are_scipys_counting_transpose(cls, dtype):
    """``a.tocsc()`` / ``a.tocsr()`` / ``a.T.tocsr()``: a form (native/transpose.py) where the values are 4 or 8
    bytes, scipy's arrays and class exactly, on one thread and two, never aliasing the argument."""
    rng = np.random.default_rng(12)
    own = cls((2, 2)).format
    other = "tocsc" if own == "csr" else "tocsr"
    bodies = {"other": lambda a: getattr(a, other)(), "transposed": lambda a: getattr(a.T, "to" + own)()}
    for name, body in bodies.items():
        f, two = splyce.jit(body), splyce.jit(body, threads=2)
        for nnz in (0, 1, 300, 20001):
            a = cls(_matrix(rng, nnz, dtype, special=np.dtype(dtype).kind in "fc"))
            want = body(a)
            for g in (f, two):
                got = g(a)
                assert type(got) is type(want) and got.format == want.format and got.shape == want.shape
                assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
                assert _bits(got.data) == _bits(want.data)
                assert not np.may_share_memory(got.data, a.data) and not np.may_share_memory(got.indices, a.indices)
            if nnz == 300:
                text = f.lower(a).as_text("plan")
                assert ("counting transpose" in text) == (np.dtype(dtype).itemsize in (4, 8)), text


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("shape", [(40, 40), (30, 50), (50, 30)])
@pytest.mark.parametrize("dtype", [np.float64] + [pytest.param(d, marks=pytest.mark.slow)
                                                   for d in (np.float32, np.int64, np.complex128)])
def test_diagonal_and_trace_are_scipys(fmt, shape, dtype):
    """``a.diagonal()`` / ``a.trace()``: scipy's ``csr_diagonal`` over the argument's arrays (and NumPy's sum of
    it), scipy's values bit for bit, wide, square and tall."""
    rng = np.random.default_rng(13)
    m, n = shape
    for nnz in (0, 9, 700):
        flat = np.sort(rng.choice(m * n, size=nnz, replace=False))
        rows, cols = np.divmod(flat, n)
        a = sps.coo_array((_values(rng, nnz, dtype, special=True), (rows, cols)), shape=shape).asformat(fmt)
        a = (a + sps.eye_array(m, n, format=fmt, dtype=dtype) * 2).asformat(fmt)
        for name in ("diagonal", "trace"):
            f = splyce.jit(lambda a: getattr(a, name)())
            with np.errstate(all="ignore"):
                got, want = f(a), getattr(a, name)()
            assert _bits(got) == _bits(want), (name, nnz)
            assert "csr_diagonal" in f.lower(a).as_text("plan")
