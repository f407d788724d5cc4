"""One engine, the remaining gaps: bool products and sums on the native merge kernels for both entry points (the
drop-in with scipy's rule, the jit with the sparsifier's); elementwise ops whose operands the plan reads in
column order (``a.T * b``, CSC arguments) on the same kernels in the transposed frame; SDDMM inside jit as fast
as the drop-in with the sparsifier's bits. Every native result is compared with ``jit(library=False)``, bit for
bit (NaN but for its sign), and every plan is pinned for both entries."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import OperandInfo, choose_elementwise_formulation
from splyce.runtime.library import LibraryKernel
from splyce.tensors.formats import CSC


def _same(x, y):
    """Equal results: class, index arrays and dtypes, stored values bit for bit (NaN's sign aside)."""
    assert type(x) is type(y)
    if hasattr(x, "indptr"):
        assert x.shape == y.shape and x.indices.dtype == y.indices.dtype and x.indptr.dtype == y.indptr.dtype
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        x, y = x.data, y.data
    x, y = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert x.tobytes() == y.tobytes()


def _values(rng, a, dtype):
    """``a`` (a scipy CSR) with values of ``dtype``: explicit zeros of both signs, NaN, +-Inf among floats,
    zeros among integers, False among bools; a few empty rows."""
    a = sps.csr_array(a)
    if a.shape[0] > 4:
        keep = np.repeat(np.arange(a.shape[0]) % 5 != 2, np.diff(a.indptr))     # every fifth row empty
        a = sps.csr_array((a.data[keep], a.indices[keep], np.concatenate([[0], np.cumsum(
            np.where(np.arange(a.shape[0]) % 5 != 2, np.diff(a.indptr), 0))]).astype(a.indptr.dtype)),
            shape=a.shape)
    if np.dtype(dtype) == np.bool_:
        data = rng.random(a.nnz) < 0.6
    else:
        data = rng.uniform(-4, 4, a.nnz)
        if np.issubdtype(dtype, np.floating) and a.nnz:
            k = max(1, a.nnz // 8)
            at = rng.choice(a.nnz, size=min(a.nnz, 5 * k), replace=False)
            data[at[:k]], data[at[k:2 * k]], data[at[2 * k:3 * k]] = 0.0, -0.0, np.nan
            data[at[3 * k:]] = rng.choice([np.inf, -np.inf], size=len(at[3 * k:]))
        else:
            data[::5] = 0
    return sps.csr_array((data.astype(dtype), a.indices.copy(), a.indptr.copy()), shape=a.shape)


# -- bool * and + : the merge's AND / OR for both entries --------------------------------------------------------
@pytest.mark.parametrize("op", ["multiply", "add"])
def test_bool_dropin_runs_the_native_merge_with_scipys_rule(op, monkeypatch):
    """``splyce.multiply`` / ``add`` of two bool matrices (CSR with CSR, CSR with a CSC ``A.T``, SparseTensors):
    scipy's result exactly (a False result not stored, indices sorted, scipy's class), computed by the native
    merge: no jitted (MLIR) kernel is asked for."""
    from splyce.dropin import elementwise as dropin_elementwise

    def no_mlir(*args, **kwargs):
        raise AssertionError("the drop-in asked for an MLIR kernel")

    monkeypatch.setattr(dropin_elementwise, "_kernel", no_mlir)
    rng = np.random.default_rng(3)
    for n, density in ((1, 1.0), (7, 0.4), (90, 0.08), (300, 0.05)):
        a = _values(rng, sps.random_array((n, n), density=density, rng=rng), np.bool_)
        b = _values(rng, sps.random_array((n, n), density=density, rng=rng), np.bool_)
        for right in (b, b.T, b.tocsc(), a.T):
            want = a.multiply(right) if op == "multiply" else a + right
            want = sps.csr_array(want)
            want.sort_indices()
            got = getattr(splyce, op)(a, right)
            assert got.dtype == np.bool_ and not np.any(got.data == 0)     # scipy's rule: no False stored
            _same(got, want)
            for threads in (1, 2):
                _same(getattr(splyce, op)(a, right, threads=threads), want)
        got = getattr(splyce, op)(splyce.asarray(a), splyce.asarray(b))
        want = sps.csr_array(a.multiply(b) if op == "multiply" else a + b)
        assert np.array_equal(got.toarray(), want.toarray()) and got.nnz == want.nnz


def test_bool_difference_follows_the_operands():
    """Two scipy sparse bool matrices: scipy's difference, ``a != b`` (its sparse kernels' bool rule); with a
    SparseTensor operand, NumPy's rule (no bool difference), as inside ``@splyce.jit``."""
    a = sps.csr_array(np.eye(3, dtype=bool))
    for b in (a, a.T):
        got, want = splyce.subtract(a, b), a - b
        assert type(got) is type(want) and got.dtype == want.dtype
        assert np.array_equal(got.toarray(), want.toarray())
    with pytest.raises(TypeError, match="not supported for bool values"):
        splyce.subtract(a, splyce.asarray(a))


@pytest.mark.parametrize("op", ["multiply", "add"])
def test_bool_plan_is_the_same_for_both_entries(op):
    """The drop-in's formulation for two bool matrices is the merge, and the jitted ``a * b`` / ``a + b`` runs
    that formulation (every position kept there), with ``jit(library=False)``'s result bit for bit."""
    rng = np.random.default_rng(4)
    a = splyce.asarray(_values(rng, sps.random_array((60, 60), density=0.1, rng=rng), np.bool_))
    b = splyce.asarray(_values(rng, sps.random_array((60, 60), density=0.1, rng=rng), np.bool_))
    want = choose_elementwise_formulation(OperandInfo.of(a), OperandInfo.of(b), None, op).value
    assert want == "merge-rows"
    assert choose_elementwise_formulation(OperandInfo.of(a), OperandInfo.of(b), None, "subtract").value != want
    body = {"multiply": lambda a, b: a * b, "add": lambda a, b: a + b}[op]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    assert f"as formulation '{want}'" in fast.lower(a, b).as_text("plan")
    for x, y in ((a, b), (a, a), (b, a)):
        _same(fast(x, y), mlir(x, y))
    assert isinstance(fast.kernel_for(a, b)[0], LibraryKernel)


# -- column order: a.T * b and the like on the kernels in the transposed frame ----------------------------------
COLUMN_FORMS = {
    "a.T * b": lambda a, b: a.T * b, "a.T + b": lambda a, b: a.T + b, "a.T - b": lambda a, b: a.T - b,
    "b - a.T": lambda a, b: b - a.T, "a.T * b.T": lambda a, b: a.T * b.T, "a.T + b.T": lambda a, b: a.T + b.T,
    "a.T * a": lambda a, b: a.T * a, "a.T + a": lambda a, b: a.T + a,
    "a * b": lambda a, b: a * b, "a + b.T": lambda a, b: a + b.T,
}


def _column_operands(rng, name, fmt, n, m, density, dtype):
    """Operands of the form's shapes (``a.T`` and ``b`` of one shape; ``a`` square when it meets its own
    transpose), stored CSR or CSC (``fmt``: one letter per operand) at equal index widths."""
    if "a.T" in name and "b" not in name or "+ b.T" in name:
        n = m
    shape_a = (n, m)
    shape_b = (m, n) if name.count(".T") == 1 and "b.T" not in name else (n, m)
    parts = []
    for shape, f in zip((shape_a, shape_b), fmt):
        x = _values(rng, sps.random_array(shape, density=density, rng=rng), dtype)
        parts.append(splyce.asarray(x if f == "r" else x.tocsc()))
    return parts


# every form in float64 and every storage combination; the other dtypes on three forms and two combinations
# (each case compiles its MLIR reference per shape)
COLUMN_CASES = [(name, np.float64, ("rr", "cc", "rc", "cr")) for name in sorted(COLUMN_FORMS)] + [
    (name, dtype, ("rr", "cr")) for dtype in (np.float32, np.int64, np.int32, np.bool_)
    for name in ("a.T * b", "a.T + b", "a.T - b")]


@pytest.mark.parametrize("name, dtype, formats", COLUMN_CASES)
def test_column_order_forms_run_natively_bit_for_bit(name, dtype, formats):
    """A form the plan computes in column order (``a.T * b`` of CSR arguments: the result a CSC, as scipy's)
    or with a CSC argument: the native merge or one pass on the transposes, the arguments read as they are;
    results equal to ``jit(library=False)``'s bit for bit (explicit zeros, NaN, Inf, -0.0, empty rows, square
    and rectangular, a 1 x 1), and no MLIR kernel built."""
    if dtype is np.bool_ and "-" in name:
        return                                  # NumPy has no bool difference (refused: test_dtypes_bool_complex)
    body = COLUMN_FORMS[name]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    rng = np.random.default_rng(13)
    for fmt in formats:
        for n, m, density in ((1, 1, 1.0), (120, 90, 0.06)) if fmt == "rr" else ((6, 4, 0.5),):
            a, b = _column_operands(rng, name, fmt, n, m, density, dtype)
            _same(fast(a, b), mlir(a, b))
            kernel = fast.kernel_for(a, b)[0]
            assert isinstance(kernel, LibraryKernel), (fmt, n, m)
            assert kernel.call.op.reads is not None or not kernel.plan.needs_conversion
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


def test_column_order_plan_is_the_dropins():
    """``a.T * b`` of CSR arguments: the plan names the merge, in column order, each argument read as it is
    (no re-stored operand); the drop-in on scipy's ``A.T`` (a CSC) and ``B`` takes the same formulation, and
    both results are CSCs holding the same positions."""
    rng = np.random.default_rng(14)
    a = splyce.asarray(_values(rng, sps.random_array((40, 30), density=0.2, rng=rng), np.float64))
    b = splyce.asarray(_values(rng, sps.random_array((30, 40), density=0.2, rng=rng), np.float64))
    f = splyce.jit(lambda a, b: a.T * b)
    text = f.lower(a, b).as_text("plan")
    want = choose_elementwise_formulation(OperandInfo.of(a.to_scipy().T), OperandInfo.of(b.to_scipy()), None,
                                          "multiply").value
    assert f"as formulation '{want}'" in text and "in column order" in text and "not re-stored" in text
    call = f.kernel_for(a, b)[0].call
    assert call.op.columns and call.op.reads == (0, 1) and call.op.transposed == (False, True)
    got, dropin = f(a, b), splyce.multiply(a.to_scipy().T, b.to_scipy())
    assert got.format == dropin.format == "csc"
    both = ~np.isnan(dropin.toarray())
    assert np.array_equal(got.toarray()[both], dropin.toarray()[both])
    assert "native kernel library" not in splyce.jit(lambda a, b: a.T * b, library=False).lower(a, b).as_text("plan")


def test_column_order_on_two_threads_is_one_threads_result():
    rng = np.random.default_rng(15)
    a = splyce.asarray(_values(rng, sps.random_array((600, 600), density=0.3, rng=rng), np.float64))
    b = splyce.asarray(_values(rng, sps.random_array((600, 600), density=0.3, rng=rng), np.float64))
    assert a.nnz >= 1 << 16
    for body in (lambda a, b: a.T * b, lambda a, b: a.T + b, lambda a, b: a.T * b.T):
        _same(splyce.jit(body, threads=2)(a, b), splyce.jit(body, library=False)(a, b))


# -- SDDMM: entries as the lanes of one vector, the same bits as the scalar chains ------------------------------
SDDMM_FORMS = {
    "m * (x @ y.T)": lambda m, x, y: m * (x @ y.T),
    "(x @ y.T) * m": lambda m, x, y: (x @ y.T) * m,
    "einsum ik,ij,jk": lambda m, x, y: splyce.einsum("ik,ij,jk->ij", x, m, y),
}


def _sddmm_operands(rng, dtype, d, n=70):
    """A mask with rows of 0 to ~30 entries (every lane group and the one-by-one tail), explicit zeros, -0.0,
    NaN, +-Inf (floats); x and y with an Inf, a NaN and a row of -0.0."""
    lengths = rng.integers(0, 31, size=n)
    lengths[::6] = 0
    rows = np.repeat(np.arange(n), lengths)
    cols = np.concatenate([np.sort(rng.choice(n + 5, size=k, replace=False)) for k in lengths])
    mask = sps.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, n + 5))
    mask = _values(rng, mask, dtype)
    x = rng.uniform(-3, 3, (n, d))
    y = rng.uniform(-3, 3, (n + 5, d))
    if np.issubdtype(dtype, np.floating):
        x[3, 0], y[5, d - 1], x[7, :] = np.inf, np.nan, -0.0
    else:
        x, y = np.round(x), np.round(y)
    return mask, x.astype(dtype), y.astype(dtype)


def _reference(mask, x, y, factors):
    """The sum per entry in column order from +0.0, NumPy's IEEE operations entry by entry: ``factors``
    None, the drop-in's ``(sum of x * y) * m``; else the sparsifier's terms ``(f0 * f1) * f2``."""
    rows = np.repeat(np.arange(mask.shape[0]), np.diff(mask.indptr))
    acc = np.zeros(mask.nnz, dtype=mask.dtype)
    with np.errstate(all="ignore"):
        for k in range(x.shape[1]):
            value = {"m": mask.data, "x": x[rows, k], "y": y[mask.indices, k]}
            if factors is None:
                acc = acc + value["x"] * value["y"]
            else:
                acc = acc + (value[factors[0]] * value[factors[1]]) * value[factors[2]]
        return acc * mask.data if factors is None else acc


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("d", [1, 2, 3, 8, 13, 32])
def test_sddmm_kernel_lanes_are_the_scalar_chains(dtype, d):
    """The native kernel (both variants, every operand order of the sparsifier's terms) against the sums taken
    entry by entry in column order: the same bits (NaN's sign aside), rows of every length, d not a multiple
    of the lanes; the drop-in's variant leaves zero results out, the jit's keeps every position."""
    from splyce.native import sddmm

    rng = np.random.default_rng(d * 7 + np.dtype(dtype).itemsize)
    mask, x, y = _sddmm_operands(rng, dtype, d)
    parts = (mask.data, mask.indices, mask.indptr)
    for factors in (None, "mxy", "xym", "xmy", "ymx"):
        want = _reference(mask, x, y, factors)
        with np.errstate(all="ignore"):
            vals, cols, indptr = sddmm.sddmm(parts, x, y, dtype, 1, factors)
        if factors is None:
            keep = want != 0
            rows = np.repeat(np.arange(mask.shape[0]), np.diff(mask.indptr))
            counts = np.bincount(rows[keep], minlength=mask.shape[0])
            want_cols, want_ptr = mask.indices[keep], np.concatenate([[0], np.cumsum(counts)])
            want = want[keep]
            assert np.array_equal(cols, want_cols) and np.array_equal(indptr, want_ptr), factors
        else:
            assert np.array_equal(cols, mask.indices) and np.array_equal(indptr, mask.indptr)
        _same(sps.csr_array((vals, cols, indptr), shape=mask.shape), sps.csr_array((want, cols, indptr),
                                                                                     shape=mask.shape))


@pytest.mark.parametrize("form", sorted(SDDMM_FORMS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_sddmm_jit_is_the_mlir_kernel_bit_for_bit(form, dtype):
    """``m * (x @ y.T)`` and other operand orders inside jit: the native kernel, ``jit(library=False)``'s
    result bit for bit, one thread and two; the plan names the formulation the drop-in takes."""
    rng = np.random.default_rng(21)
    mask, x, y = _sddmm_operands(rng, dtype, 13)
    m = splyce.asarray(mask)
    body = SDDMM_FORMS[form]
    out = "sparse" if form.startswith("einsum") else None        # (an einsum's result is dense unless asked)
    fast, mlir = splyce.jit(body, out_format=out), splyce.jit(body, out_format=out, library=False)
    with np.errstate(all="ignore"):
        want = mlir(m, x, y)
        _same(fast(m, x, y), want)
        _same(splyce.jit(body, out_format=out, threads=2)(m, x, y), want)
    assert isinstance(fast.kernel_for(m, x, y)[0], LibraryKernel)
    assert "as formulation 'sddmm" in fast.lower(m, x, y).as_text("plan")
    from splyce.planner.kernel_choice import choose_einsum_formulation

    infos = [OperandInfo.of(v) for v in (mask, x, y)]
    assert choose_einsum_formulation(["ij", "ik", "jk"], "ij", infos)[0].value == "sddmm"


def test_sddmm_row_ranges_on_two_threads_are_one_threads_result():
    """Past the serial limit the rows split in ranges, each running the same lanes: one thread's bits, for
    both variants (the drop-in's zero results left out there too)."""
    from splyce.native import sddmm

    rng = np.random.default_rng(31)
    mask = _values(rng, sps.random_array((500, 500), density=0.2, rng=rng), np.float64)
    x, y = rng.uniform(-2, 2, (500, 32)), rng.uniform(-2, 2, (500, 32))
    assert mask.nnz * 32 >= sddmm.SDDMM_SERIAL_MAX_WORK
    parts = (mask.data, mask.indices, mask.indptr)
    for factors in (None, "mxy"):
        with np.errstate(all="ignore"):
            one, two = (sddmm.sddmm(parts, x, y, np.float64, t, factors) for t in (1, 2))
        shape = mask.shape
        _same(sps.csr_array(two, shape=shape), sps.csr_array(one, shape=shape))
        want = _reference(mask, x, y, factors)
        if factors is not None:
            _same(sps.csr_array((want, mask.indices, mask.indptr), shape=shape), sps.csr_array(two, shape=shape))
