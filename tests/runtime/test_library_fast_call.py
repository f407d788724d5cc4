"""A cached jitted call on the library route (runtime/library.py, dropin/jit_library.py): SpMV and SpMSpV on
validated SparseTensors run the drop-in's fast-path SpMV kernel on the tensors' buffers; a second call builds
no cache key, prepares and validates nothing, and never enters the drop-in's general matmul path. Results
checked against scipy and against the MLIR kernel (``library=False``), bit for bit."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.dropin import jit_library, products
from splyce.runtime import arguments, dispatcher, signature


def _csr(m, n, density, seed):
    a = sps.random_array((m, n), density=density, format="csr", random_state=seed)
    a.data[:] = np.arange(1, a.nnz + 1) % 7 - 3.0
    return a


def _vector(n, k, seed):
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, k, replace=False))
    return sps.coo_array((rng.uniform(-1, 1, k), (idx,)), shape=(n,))


def _count(monkeypatch, module, name, seen):
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: (seen.append(name), real(*a, **k))[1])


@pytest.mark.parametrize("op", ["spmv", "spmspv"])
def test_a_cached_call_does_only_the_kernel_call(monkeypatch, op):
    a = _csr(600, 500, 0.01, 1)
    x = np.linspace(-1.0, 1.0, 500) if op == "spmv" else _vector(500, 5, 2)
    A = splyce.asarray(a)
    X = x if op == "spmv" else splyce.asarray(x)
    f = splyce.jit(lambda a, x: a @ x)
    first = f(A, X)
    assert "native kernel library" in f.lower(A, X).as_text("plan")
    seen = []
    for name in ("prepare", "validate"):
        _count(monkeypatch, arguments, name, seen)
    _count(monkeypatch, products, "_matmul", seen)
    _count(monkeypatch, signature, "_passes_through", seen)    # a tensor's signature part: made once
    _count(monkeypatch, type(f._filed((A, X))), "run_exact", seen)   # the one-closure call instead
    # SpMV: the cached call goes straight to the drop-in's fast path on the buffers (products.spmv_direct)
    kernel = "_spmv_buffers" if op == "spmv" else "spmspv_tensor"
    _count(monkeypatch, products if op == "spmv" else jit_library, kernel, seen)
    monkeypatch.setattr(dispatcher.Jitted, "_key",
                        lambda *args: seen.append("_key"))
    hits = f.cache_info().hits
    for _ in range(3):
        out = f(A, X)
        np.testing.assert_array_equal(out, first)
    assert f.cache_info().hits == hits + 3
    assert seen == [kernel] * 3          # no key, preparation, validation, general path
    ref = a @ (x if op == "spmv" else x.toarray())
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("special", [np.nan, np.inf])
def test_spmspv_skips_a_nonfinite_entry_times_a_missing_one_as_the_mlir_kernel(special):
    a = _csr(300, 300, 0.05, 3)
    a.data[::4] = special
    x = _vector(300, 3, 4)
    A, X = splyce.asarray(a), splyce.asarray(x)
    assert "native kernel library" in splyce.jit(lambda a, x: a @ x).lower(A, X).as_text("plan")
    native = splyce.jit(lambda a, x: a @ x)(A, X)
    mlir = splyce.jit(lambda a, x: a @ x, library=False)(A, X)
    assert native.tobytes() == mlir.tobytes()
    ref = a @ x                     # scipy skips the pairs as well
    ref = ref.toarray() if hasattr(ref, "toarray") else ref
    assert not np.isfinite(native).all() and np.array_equal(native, ref, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.complex128])
@pytest.mark.parametrize("op", ["spmv", "spmspv"])
def test_library_route_matches_the_mlir_kernel_bit_for_bit(dtype, op):
    a = _csr(800, 700, 0.01, 5).astype(dtype)
    x = (np.arange(700) % 5 - 2).astype(dtype) if op == "spmv" else _vector(700, 6, 6).astype(dtype)
    A = splyce.asarray(a)
    X = x if op == "spmv" else splyce.asarray(x)
    if dtype is np.float64:
        assert "native kernel library" in splyce.jit(lambda a, x: a @ x).lower(A, X).as_text("plan")
    for _ in range(2):      # the compiling call and a cached one
        native = splyce.jit(lambda a, x: a @ x)(A, X)
        mlir = splyce.jit(lambda a, x: a @ x, library=False)(A, X)
        assert native.dtype == mlir.dtype and native.tobytes() == mlir.tobytes()


def test_a_tensor_whose_buffers_were_broken_after_it_was_made_raises_not_crashes():
    a = _csr(20, 20, 0.3, 7)
    A = splyce.asarray(a)
    f = splyce.jit(lambda a, x: a @ x)
    x = np.ones(20)
    f(A, x)
    A.crd[1][0] = 10_000           # past the columns: the kernel's own reads catch it
    with pytest.raises(ValueError, match="malformed"):
        f(A, x)


def _lower_triangle(n, density, seed):
    a = sps.random_array((n, n), density=density, format="csr", random_state=seed)
    low = sps.tril(a + a.T, -1, format="csr")
    low.data[:] = 1.0
    return low


_TRIANGLES = {"einsum": lambda l: splyce.einsum("ij,jk,ik->", l, l, l),
              "methods": lambda l: ((l @ l.T) * l).sum()}     # ``.T``, ``.sum``: attributes, not captured names


@pytest.mark.parametrize("form", sorted(_TRIANGLES))
def test_a_cached_scalar_call_does_only_the_kernel_call(monkeypatch, form):
    from splyce.native import masked_sum, masked_sum_checked

    low = _lower_triangle(400, 0.03, 8)
    L = splyce.asarray(low)
    seen = []
    for module, name in ((masked_sum, "masked_sum"), (masked_sum_checked, "masked_sum_trusted")):
        _count(monkeypatch, module, name, seen)    # before the kernel is built: its closure binds them
    f = splyce.jit(_TRIANGLES[form])
    first = f(L)
    assert "native kernel library" in f.lower(L).as_text("plan")
    mlir = splyce.jit(_TRIANGLES[form], library=False)(L)
    assert type(first) is type(mlir) and first.tobytes() == mlir.tobytes()
    assert seen == ["masked_sum_trusted"]       # the one native call, no check (the drop-in's checks them)
    seen.clear()
    for name in ("prepare", "validate"):
        _count(monkeypatch, arguments, name, seen)
    _count(monkeypatch, signature, "_passes_through", seen)
    _count(monkeypatch, dispatcher.Jitted, "kernel_for", seen)
    _count(monkeypatch, type(f._filed((L,))), "run_exact", seen)
    monkeypatch.setattr(dispatcher.Jitted, "_key", lambda *args: seen.append("_key"))
    hits = f.cache_info().hits
    for _ in range(3):
        out = f(L)
        assert type(out) is type(first) and out.tobytes() == first.tobytes()
    assert f.cache_info().hits == hits + 3
    assert seen == ["masked_sum_trusted"] * 3   # no key, preparation, validation, general path
    assert out == (low @ low.T).multiply(low).sum()


@pytest.mark.parametrize("dtype, values", [(d, v) for d in (np.float64, np.float32, np.int64, np.int32)
                                           for v in ("ones", "weighted", "rare") + (("nan",) if d(0.5) else ())])
@pytest.mark.parametrize("form", sorted(_TRIANGLES))
def test_the_one_call_triangle_sum_is_the_mlir_kernels_bit_for_bit(monkeypatch, form, dtype, values):
    """Counted (a 0/1 pattern), summed in the einsum's multiplication order (values of wide magnitudes, where
    another order would show), with a NaN (summed as the sparsifier does, not NumPy's rule), or summed after a
    sample of rare hits: the MLIR kernel's bits each time, on the first and on a cached call. Three distinct
    tensors of one pattern too (each scanned for ones on its own)."""
    from splyce.native import masked_sum_checked

    calls = []
    _count(monkeypatch, masked_sum_checked, "masked_sum_trusted", calls)
    rng = np.random.default_rng(21)
    low = _lower_triangle(300, 0.002 if values == "rare" else 0.04, 13).astype(dtype)
    if values in ("weighted", "nan"):
        if np.dtype(dtype).kind == "f":
            low.data = (rng.standard_normal(low.nnz) * 10.0 ** rng.integers(-6, 6, low.nnz)).astype(dtype)
        else:
            low.data = rng.integers(-9, 9, low.nnz).astype(dtype)
    if values == "nan":
        low.data[low.nnz // 2] = np.nan
    L = splyce.asarray(low)
    for form_args in ((L,), ) if form == "methods" else ((L,), (L.copy(),)):
        f, plain = splyce.jit(_TRIANGLES[form]), splyce.jit(_TRIANGLES[form], library=False)
        want = plain(*form_args)
        for _ in range(2):
            got = f(*form_args)
            assert type(got) is type(want) and got.tobytes() == want.tobytes()
    if values == "nan" and form == "methods":     # a NaN of ``l``, a factor of the fused sum ``(l @ l.T) * l``:
        assert not calls                           # its unfused twin runs, scipy's value (planner/plan.py,
        assert np.isnan(got) == np.isnan((low @ low.T).multiply(low).sum())     # ``distributed_factors``)
    distinct = splyce.jit(lambda a, b, c: splyce.einsum("ij,jk,ik->", a, b, c))
    three = (L, L.copy(), L.copy())
    want = splyce.jit(distinct.fun, library=False)(*three)
    for _ in range(2):
        got = distinct(*three)
        assert type(got) is type(want) and got.tobytes() == want.tobytes()
    assert calls                                   # the one-call path ran


def test_the_triangle_sum_of_mixed_index_widths_takes_the_general_native_sum(monkeypatch):
    from splyce.native import masked_sum, masked_sum_checked

    seen = []
    _count(monkeypatch, masked_sum, "masked_sum", seen)
    _count(monkeypatch, masked_sum_checked, "masked_sum_trusted", seen)
    low = _lower_triangle(200, 0.05, 14)
    wide = sps.csr_array((low.data, low.indices.astype(np.int64), low.indptr.astype(np.int64)), shape=low.shape)
    args = (splyce.asarray(low), splyce.asarray(wide), splyce.asarray(low))
    f = splyce.jit(lambda a, b, c: splyce.einsum("ij,jk,ik->", a, b, c))
    want = splyce.jit(f.fun, library=False)(*args)
    assert "native kernel library" in f.lower(*args).as_text("plan")
    for _ in range(2):
        assert f(*args).tobytes() == want.tobytes()
    assert seen == ["masked_sum"] * 2


def test_a_global_tensor_is_still_read_on_every_call():
    low = _lower_triangle(50, 0.2, 9)
    global _READ_AS_A_GLOBAL
    _READ_AS_A_GLOBAL = splyce.asarray(low)
    f = splyce.jit(lambda x: (_READ_AS_A_GLOBAL @ x).sum())
    x = np.ones(50)
    assert f(x) == low.sum()
    _READ_AS_A_GLOBAL = splyce.asarray(low * 2.0)
    assert f(x) == (low * 2.0).sum()


def _same_csr(x, y):
    assert type(x) is type(y) and x.shape == y.shape
    for part in ("data", "indices", "indptr"):
        u, v = getattr(x, part), getattr(y, part)
        assert u.dtype == v.dtype and u.tobytes() == v.tobytes(), part


def _spgemm_jit(fun):
    return lambda **kw: splyce.jit(fun, out_format="sparse", **kw)


# op -> (jitted function's maker, arguments from a square CSR ``a`` and its lower triangle ``low``, the native
# function its provider runs (module, name))
_SPARSE_RESULTS = {
    "hadamard": (lambda **kw: splyce.jit(lambda a: a * a.T, **kw), lambda a, low: (a,), ("elementwise.kept", "with_csc")),
    "add": (lambda **kw: splyce.jit(lambda a: a + a.T, **kw), lambda a, low: (a,), ("elementwise.kept", "with_csc")),
    "multiply": (lambda **kw: splyce.jit(lambda a, b: a * b, **kw), lambda a, low: (a, low), ("elementwise.kept", "rows")),
    "subtract": (lambda **kw: splyce.jit(lambda a, b: a - b, **kw), lambda a, low: (a, low), ("elementwise.kept", "rows")),
    "spgemm": (_spgemm_jit(lambda a: a @ a), lambda a, low: (a,), ("spgemm", "spgemm")),
    "spgemm2": (_spgemm_jit(lambda a, b: a @ b), lambda a, low: (a, low), ("spgemm", "spgemm")),
    "masked": (lambda **kw: splyce.jit(lambda l: (l @ l) * l, **kw), lambda a, low: (low,),
               ("masked", "masked_kept")),
    "sddmm": (lambda **kw: splyce.jit(lambda m, x, y: m * (x @ y.T), **kw),
              lambda a, low: (a, np.linspace(-1, 1, 300 * 8).reshape(300, 8), np.cos(np.arange(300 * 8.0)).reshape(300, 8)),
              ("sddmm", "sddmm")),
}


@pytest.mark.parametrize("op", sorted(_SPARSE_RESULTS))
def test_a_cached_call_with_a_sparse_result_does_only_the_kernel_call(monkeypatch, op):
    import importlib

    make, arguments_of, (module, name) = _SPARSE_RESULTS[op]
    a = _csr(300, 300, 0.03, 11)
    low = _lower_triangle(300, 0.03, 12)
    args = tuple(splyce.asarray(x) if sps.issparse(x) else x for x in arguments_of(a, low))
    before = [x.copy() if isinstance(x, np.ndarray) else [b.copy() for b in x._buffers()] for x in args]
    seen = []
    native = importlib.import_module(f"splyce.native.{module}")
    _count(monkeypatch, native, name, seen)     # before the kernel is built: its closure binds the function
    f = make()
    first = f(*args)
    assert "native kernel library" in f.lower(*args).as_text("plan")
    mlir = make(library=False)(*args)
    unordered = op.startswith("spgemm")        # a product's rows: any order (planner's unordered_product_results)
    if unordered:
        first_sorted = first.copy()
        first_sorted.sort_indices()
        _same_csr(first_sorted, mlir)          # the sparsifier's result, bit for bit, once sorted
    else:
        _same_csr(first, mlir)                 # the sparsifier's result, bit for bit
    assert seen == [name]
    seen.clear()
    for counted in ("prepare", "validate"):
        _count(monkeypatch, arguments, counted, seen)
    _count(monkeypatch, signature, "_passes_through", seen)
    _count(monkeypatch, dispatcher.Jitted, "kernel_for", seen)
    kernel_type = type(f._filed(args))
    for counted in ("run_exact", "_finish"):
        _count(monkeypatch, kernel_type, counted, seen)
    _count(monkeypatch, sps.csr_array, "check_format", seen)    # the result is not re-validated
    monkeypatch.setattr(dispatcher.Jitted, "_key", lambda *args: seen.append("_key"))
    hits = f.cache_info().hits
    for _ in range(3):
        out = f(*args)
        _same_csr(out, first)
        assert out.data is not first.data       # a new result per call
    assert f.cache_info().hits == hits + 3
    assert seen == [name] * 3                  # no key, preparation, validation, result rules, scipy checks
    assert out.has_canonical_format != unordered and out.has_sorted_indices != unordered
    out.check_format(full_check=True)          # well formed, as the constructor would have found it
    for x, b in zip(args, before):             # inputs never modified
        if isinstance(x, np.ndarray):
            assert x.tobytes() == b.tobytes()
        else:
            assert all(u.tobytes() == v.tobytes() for u, v in zip(x._buffers(), b))
