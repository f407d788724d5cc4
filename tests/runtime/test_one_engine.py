"""One engine: a jitted function that is one drop-in op runs the drop-in's native kernel (runtime/library.py),
chosen by the drop-in's own formulation rules, with the MLIR kernel's results bit for bit."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.library import LibraryKernel


def _matrix(rng, n, density, special=True, dtype=np.float64):
    a = sps.random_array((n, n), density=density, format="csr", rng=rng, dtype=np.float64)
    if special and a.nnz:
        k = max(1, a.nnz // 10)
        at = rng.choice(a.nnz, size=min(a.nnz, 3 * k), replace=False)
        a.data[at[:k]] = 0.0                       # explicit zeros
        a.data[at[k:2 * k]] = np.nan
        a.data[at[2 * k:]] = rng.choice([np.inf, -np.inf, -0.0], size=len(at[2 * k:]))
    return splyce.asarray(a.astype(dtype))


def _same(x, y):
    if hasattr(x, "indptr"):
        assert type(x) is type(y) and x.indices.dtype == y.indices.dtype and x.indptr.dtype == y.indptr.dtype
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        x, y = x.data, y.data                   # and the stored values, bit for bit (-0.0 is not +0.0)
    x, y = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
    assert x.dtype == y.dtype and x.shape == y.shape
    if x.dtype.kind == "f":                     # NaN where NaN (its sign bit aside), every other value's bits
        nan = np.isnan(x)
        assert np.array_equal(nan, np.isnan(y))
        x, y = x[~nan], y[~nan]
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def _same_entries(x, y):
    """Two CSRs whose rows hold the same columns, each with the same value bit for bit, in any order within a
    row (a product whose format left the rows unordered): compared after sorting copies."""
    x, y = x.copy(), y.copy()
    x.sort_indices()
    y.sort_indices()
    _same(x, y)


def _flags_true(x):
    """scipy's sorted / canonical flags of a CSR say what its rows are (a product left unordered comes sorted or
    not, by the kernel the call took): the flags scipy finds on the same arrays when it has to look."""
    fresh = type(x)((x.data, x.indices, x.indptr), shape=x.shape)
    assert (x.has_sorted_indices, x.has_canonical_format) == (fresh.has_sorted_indices, fresh.has_canonical_format)


CASES = {
    "spmv": (lambda a, b, x, X, v: a @ x, None),
    "transposed spmv": (lambda a, b, x, X, v: a.T @ x, None),
    "spmm": (lambda a, b, x, X, v: a @ X, None),
    "spmspv": (lambda a, b, x, X, v: a @ v, None),
    "hadamard": (lambda a, b, x, X, v: a * b, None),
    "add": (lambda a, b, x, X, v: a + b, None),
    "subtract": (lambda a, b, x, X, v: a - b, None),
    "spgemm": (lambda a, b, x, X, v: a @ b, "sparse"),
    "triangles": (lambda a, b, x, X, v: ((a @ a) * a).sum(), None),
}


# the ops whose native kernel gives the MLIR kernel's results on every input (bits equal but for a NaN's sign):
# they run natively (the elementwise ops through the drop-in kernels' keep-zeros variants, any pattern)
NATIVE = {"spmv", "transposed spmv", "spmm", "spmspv", "spgemm", "triangles", "hadamard", "add", "subtract"}
GUARDED: set = set()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_library_kernel_is_the_mlir_kernel_bit_for_bit(name, dtype, seed):
    rng = np.random.default_rng(seed)
    n = (57, 57, 3, 1)[seed]        # two values per shape (the MLIR kernels compile once per shape)
    special = np.issubdtype(dtype, np.floating)
    a, b = _matrix(rng, n, 0.08, special, dtype), _matrix(rng, n, 0.1, special, dtype)
    x = rng.standard_normal(n).astype(dtype)
    X = rng.standard_normal((n, 5)).astype(dtype)
    v = splyce.asarray(sps.coo_array(np.where(rng.random(n) < 0.2, rng.standard_normal(n), 0).astype(dtype)))
    body, out_format = CASES[name]
    fast = splyce.jit(body, out_format=out_format)
    mlir = splyce.jit(body, out_format=out_format, library=False)
    args = (a, b, x, X, v)
    # a sparse product's rows are unordered (planner/unordered.py, unordered_product_results): the library's in
    # order of first appearance, the MLIR kernel's sorted
    (_same_entries if name == "spgemm" else _same)(fast(*args), mlir(*args))
    kernel = fast.kernel_for(*args)[0]
    native = isinstance(kernel, LibraryKernel)
    # a plan that scatters a short sparse x dense runs its kept twin's native call (kernel.plan: that twin)
    assert native == (name in NATIVE | GUARDED and not kernel.plan.needs_conversion)
    if native and name in NATIVE and not (kernel.distributed and special):
        assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0   # no MLIR kernel built
    # (a NaN / Inf factor of a fused sum: its unfused twin, an MLIR kernel, ran: planner/plan.py,
    # ``distributed_factors``)


def test_the_plan_says_which_kernel_runs_and_matches_the_dropin():
    a = splyce.asarray(sps.random_array((50, 50), density=0.1, format="csr", rng=1))
    x = np.ones(50)
    text = splyce.jit(lambda a, x: a @ x).lower(a, x).as_text("plan")
    assert "runs on the native kernel library: matmul as formulation 'csr-x-dense'" in text
    from splyce.dropin import OperandInfo, choose_matmul_formulation

    assert choose_matmul_formulation(OperandInfo.of(a), OperandInfo.of(x)).value == "csr-x-dense"
    off = splyce.jit(lambda a, x: a @ x, library=False).lower(a, x).as_text("plan")
    assert "native kernel library" not in off


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_a_matrix_stored_by_columns_times_a_vector_scatters_natively(dtype):
    """``a.T @ z`` of a CSR tensor and ``c @ z`` of a CSC one run the drop-in's CSC x vector kernel (each
    column's entries added into the result's rows), the MLIR kernel's bits, as the plan says; the drop-in on
    the CSC tensor takes the same kernel on its buffers (it re-stored the tensor as CSR before)."""
    rng = np.random.default_rng(7)
    a = _matrix(rng, 61, 0.1, np.issubdtype(dtype, np.floating), dtype)
    c = splyce.asarray(sps.csc_array(a.to_scipy()))
    z = rng.standard_normal(61).astype(dtype)
    for body, m, dropin in ((lambda a, z: a.T @ z, a, a.T), (lambda c, z: c @ z, c, c),
                            (lambda a, z: z @ a, a, a.T)):                 # ``z @ a``: the same form, spelled
        fast, mlir = splyce.jit(body), splyce.jit(body, library=False)     # with the vector first
        assert "as formulation 'csc-x-vector'" in fast.lower(m, z).as_text("plan")
        assert isinstance(fast.kernel_for(m, z)[0], LibraryKernel)
        _same(fast(m, z), mlir(m, z))
        _same(fast(m, z), splyce.jit(body, vectorize=False)(m, z))       # the plain sparsifier's bits
        _same(splyce.matmul(dropin, z), fast(m, z))
    _same(splyce.jit(lambda a, z: z @ a)(a.to_scipy(), z), z @ a.to_scipy())   # and scipy's
    normal = splyce.jit(lambda a, x: a.T @ (a @ x))                       # the second product too, after the
    _same(normal(a, z), splyce.jit(lambda a, x: a.T @ (a @ x), vectorize=False)(a, z))   # first's native step


def test_what_stays_on_the_mlir_kernel():
    a = splyce.asarray(sps.random_array((40, 40), density=0.1, format="csr", rng=2))
    kinds = {
        # (a one-op form of one argument, ``a * a``, runs on its arrays with or without the Splyce pass:
        # tests/runtime/test_forms.py)
        "baseline": splyce.jit(lambda a, b: a * b, vectorize=False),
        "pinned": splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, order="ikj"), out_format="sparse"),
        # ((a * a) + a, one fused map of one argument, is a one-op form: tests/runtime/test_forms.py)
        "two ops": splyce.jit(lambda a: (a * a).sum(axis=0) * 2.0),
        "complex": splyce.jit(lambda a, x: a @ x),
        "mixed dtypes": splyce.jit(lambda a, x: a @ x),
        "baseline spmv": splyce.jit(lambda a, x: a @ x, vectorize=False),
    }
    args = {"baseline": (a, a), "pinned": (a, a), "two ops": (a,),
            "complex": (splyce.asarray(sps.csr_array(a.to_scipy().astype(np.complex128))), np.ones(40, complex)),
            "mixed dtypes": (a, np.ones(40, np.float32)), "baseline spmv": (a, np.ones(40))}
    for name, f in kinds.items():
        assert not isinstance(f.kernel_for(*args[name])[0], LibraryKernel), name


def test_accumulate_builds_the_mlir_kernel_on_demand():
    a = splyce.asarray(sps.random_array((30, 30), density=0.2, format="csr", rng=3))
    x = np.arange(30.0)
    f = splyce.jit(lambda a, x: a @ x)
    out = np.ones(30)
    f.accumulate(out, a, x)
    np.testing.assert_array_equal(out, 1 + a.to_scipy() @ x)
    assert f.cache_info().compiles + f.cache_info().disk_hits == 1


@pytest.mark.parametrize("op", ["multiply", "add", "subtract"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_elementwise_runs_natively_with_every_position_kept(op, dtype):
    """Same positions (a structurally symmetric A with A.T, A with new values) or others: the drop-in's native
    kernels with every coiterated position kept (zero results too, as the sparsifier keeps them), the MLIR
    kernel's result, no MLIR kernel built."""
    rng = np.random.default_rng(5)
    a = _matrix(rng, 64, 0.1, np.issubdtype(dtype, np.floating), dtype)
    s = a.to_scipy()
    b = splyce.asarray(sps.csr_array((rng.permutation(s.data), s.indices.copy(), s.indptr.copy()), shape=s.shape))
    body = {"multiply": lambda a, b: a * b, "add": lambda a, b: a + b, "subtract": lambda a, b: a - b}[op]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    _same(fast(a, b), mlir(a, b))
    _same(fast(a, a), mlir(a, a))                   # a - a: every position kept, zeros stored
    other = _matrix(rng, 64, 0.1, False, dtype)
    _same(fast(a, other), mlir(a, other))
    _same(fast(other, a), mlir(other, a))
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0
    assert "when the values allow" not in fast.lower(a, b).as_text("plan")


def test_the_elementwise_plan_is_the_dropins_kernel():
    """``a * b`` of two CSRs: the plan names the drop-in's formulation for the same operands; ``a * a.T`` reads
    the transpose as its argument's CSC (the drop-in's one pass for a scipy ``A.T``), with no re-store."""
    from splyce.dropin import OperandInfo, choose_elementwise_formulation

    a = splyce.asarray(sps.random_array((50, 50), density=0.1, format="csr", rng=1))
    b = splyce.asarray(sps.random_array((50, 50), density=0.1, format="csr", rng=2))
    want = choose_elementwise_formulation(OperandInfo.of(a), OperandInfo.of(b), None, "multiply").value
    assert want == "merge-rows"
    for body, args in ((lambda a, b: a * b, (a, b)), (lambda a, b: a + b, (a, b)), (lambda a, b: a - b, (a, b))):
        text = splyce.jit(body).lower(*args).as_text("plan")
        assert f"as formulation '{want}'" in text and "every coiterated position kept" in text
    text = splyce.jit(lambda a: a * a.T).lower(a).as_text("plan")
    assert f"as formulation '{want}'" in text and "not re-stored" in text
    assert "native kernel library" not in splyce.jit(lambda a: a * a.T, library=False).lower(a).as_text("plan")


def _signed(rng, n, density, dtype):
    """A CSR with explicit zeros of both signs, NaN, +-Inf among its values (floats), or 0 / False (others)."""
    a = sps.random_array((n, n), density=density, format="csr", rng=rng)
    a.data = a.data * 8 - 4
    if np.dtype(dtype) == np.bool_:
        a.data = rng.random(a.nnz) < 0.5
    elif np.issubdtype(dtype, np.floating) and a.nnz:
        k = max(1, a.nnz // 8)
        at = rng.choice(a.nnz, size=min(a.nnz, 5 * k), replace=False)
        a.data[at[:k]], a.data[at[k:2 * k]], a.data[at[2 * k:3 * k]] = 0.0, -0.0, np.nan
        a.data[at[3 * k:]] = rng.choice([np.inf, -np.inf], size=len(at[3 * k:]))
    else:
        a.data[: a.nnz // 5] = 0
    return splyce.asarray(sps.csr_array(a.astype(dtype)))


TRANSPOSED = {
    "a * a.T": lambda a, b: a * a.T, "a + a.T": lambda a, b: a + a.T, "a - a.T": lambda a, b: a - a.T,
    "a * b.T": lambda a, b: a * b.T, "a + b.T": lambda a, b: a + b.T, "b - a.T": lambda a, b: b - a.T,
}


@pytest.mark.parametrize("name, dtype", [(name, dtype) for name in sorted(TRANSPOSED)
                                         for dtype in (np.float64, np.float32, np.int64, np.int32, np.bool_)
                                         if not (dtype is np.bool_ and "-" in name)])   # NumPy: no bool minus
def test_a_transposed_argument_runs_the_one_pass_bit_for_bit(name, dtype):
    """``a * a.T`` and the like: the CSR-with-CSC pass on the arguments' own buffers, results equal to the MLIR
    kernel's bit for bit (NaN but for its sign, -0.0, explicit zeros kept); a sum whose patterns differ falls
    back to a transpose and the row merge; bool products and sums too. Sizes from a single entry to one
    large enough for the vector match (AVX-512 hosts) and prefetching."""
    body = TRANSPOSED[name]
    fast, mlir = splyce.jit(body), splyce.jit(body, library=False)
    rng = np.random.default_rng(7)
    for n, density in ((1, 1.0), (3, 0.5), (60, 0.1), (400, 0.15)):
        a, b = _signed(rng, n, density, dtype), _signed(rng, n, density, dtype)
        s = a.to_scipy()
        sym = splyce.asarray(sps.csr_array(s + s.T)) if dtype != np.bool_ else a
        for x, y in ((a, b), (sym, sym), (a, a)):
            _same(fast(x, y), mlir(x, y))
        kernel = fast.kernel_for(a, b)[0]
        assert isinstance(kernel, LibraryKernel) and kernel.call.op.transposed
    assert fast.cache_info().compiles + fast.cache_info().disk_hits == 0


@pytest.mark.parametrize("name", ["a * b", "a + b", "a - b", "a * a.T", "a + a.T"])
def test_elementwise_on_two_threads_is_one_threads_result(name):
    """Row ranges on two threads (the merge and the one pass), bit for bit the MLIR kernel's."""
    body = {"a * b": lambda a, b: a * b, "a + b": lambda a, b: a + b, "a - b": lambda a, b: a - b,
            "a * a.T": lambda a, b: a * a.T, "a + a.T": lambda a, b: a + a.T}[name]
    rng = np.random.default_rng(11)
    a, b = _signed(rng, 600, 0.3, np.float64), _signed(rng, 600, 0.3, np.float64)
    assert a.nnz >= 1 << 16                  # two ranges (ir_text.MIN_CHUNK)
    _same(splyce.jit(body, threads=2)(a, b), splyce.jit(body, library=False)(a, b))


def test_sums_keep_a_lone_value_as_it_is():
    """An entry one operand holds: ``a + missing`` and ``a - missing`` are a, ``missing + b`` b and
    ``missing - b`` -b, -0.0 included (adding +0.0 would make it +0.0)."""
    def csr(rows, cols, vals):
        return splyce.asarray(sps.csr_array((np.array(vals), (rows, cols)), shape=(4, 4)))

    a, b = csr([0, 1], [0, 1], [-0.0, 0.0]), csr([2, 3], [0, 1], [-0.0, 0.0])
    got = splyce.jit(lambda a, b: a + b)(a, b)
    assert np.signbit(got.data).tolist() == [True, False, True, False]
    got = splyce.jit(lambda a, b: a - b)(a, b)
    assert np.signbit(got.data).tolist() == [True, False, False, True]
    got = splyce.jit(lambda a: a - a.T)(csr([0, 1], [1, 2], [-0.0, 0.0]))
    assert got.indices.tolist() == [1, 0, 2, 1] and np.signbit(got.data).tolist() == [True, False, False, True]


def test_an_explicit_sparsifier_lane_keeps_the_mlir_kernel():
    """``union=`` or ``gallop=`` choose among the MLIR kernel's loops, which the native kernels do not have:
    asked for explicitly, the MLIR kernel runs."""
    a = splyce.asarray(sps.random_array((40, 40), density=0.1, format="csr", rng=4))
    b = splyce.asarray(sps.random_array((40, 40), density=0.1, format="csr", rng=5))
    assert isinstance(splyce.jit(lambda a, b: a + b).kernel_for(a, b)[0], LibraryKernel)
    for f in (splyce.jit(lambda a, b: a + b, union=True), splyce.jit(lambda a, b: a + b, union=False),
              splyce.jit(lambda a, b: a * b, gallop=0)):
        assert not isinstance(f.kernel_for(a, b)[0], LibraryKernel)
