"""@splyce.jit: tracing, lowering, the stages' IR, calling, caching, and the five kernels (plain sparsifier)."""

import re
import threading

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.bench.paper_kernels import KERNELS
from splyce.tracer.tracer import TraceError

from filecheck import check_in_order


def _dense(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "toarray"):
        return x.toarray()
    return x.to_numpy()


def _random_csr(m, n, density, seed, dtype=np.float64):
    return sps.random_array((m, n), density=density, format="csr", random_state=seed, dtype=dtype)


# -- tracing ---------------------------------------------------------------------------------------------
def test_trace_text_shows_ops_shapes_and_formats():
    f = splyce.jit(lambda a, b: (a @ b).sum(axis=0), vectorize=False)
    a, b = _random_csr(5, 6, 0.5, 1), _random_csr(6, 7, 0.5, 2).tocsc()
    check_in_order(f.lower(a, b).as_text("trace"), [
        "trace(%arg0: 5x6xfloat64 #(i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32, ",
        "%arg1: 6x7xfloat64 #(i, j) -> (j : dense, i : compressed), posWidth = 32, crdWidth = 32) {",
        "%0 = contract[ik,kj->ij](%arg0, %arg1) : 5x7xfloat64",
        "%1 = contract[ab->b](%0) : 7xfloat64",
        "return %1"])


@pytest.mark.parametrize("fun, message", [
    (lambda a, b: a @ b, "not aligned"),
    (lambda a, b: a * b, "cannot be broadcast"),
    (lambda a, b: a + b, "cannot be broadcast together"),
    (lambda a, b: splyce.einsum("ij,jk->ik", a, b), "size mismatch"),
    (lambda a, b: splyce.einsum("i...,j->ij", a, b), "ellipses"),
    (lambda a, b: splyce.einsum("ii,jk->ik", a, b), "repeated index"),
    (lambda a, b: a.sum(axis=3), "out of range"),
    (lambda a, b: a.transpose(0, 0), "not a permutation"),
    (lambda a, b: a + 1.0, "scalar"),
    (lambda a, b: 3, "must return at least one traced tensor"),
])
def test_trace_errors_name_the_op_and_shapes(fun, message):
    f = splyce.jit(fun, vectorize=False)
    with pytest.raises(TraceError, match=message):
        f(_random_csr(4, 5, 0.5, 1), _random_csr(3, 5, 0.5, 2))
    assert f.cache_info().compiles == 0


def test_sparse_result_of_a_reduction_is_planned_with_the_reduction_innermost():
    """CSR @ CSR -> CSR: the planner re-stores the right operand so that the reduction runs innermost (the
    form the sparsifier writes without the expanded-access workspace MLIR 22 aborts on)."""
    a, b = _random_csr(4, 5, 0.5, 1), _random_csr(5, 3, 0.5, 2)
    f = splyce.jit(lambda a, b: splyce.matmul(a, b, out_format="sparse"), vectorize=False)
    out = f(a, b)
    assert sps.issparse(out) and out.format == "csr"
    np.testing.assert_allclose(out.toarray(), a.toarray() @ b.toarray(), rtol=1e-14)
    assert "order=ikj" in f.lower(a, b).as_text("plan")


# -- stages ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_scf_stage_has_the_innermost_two_finger_loop(name):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.05, seed=3)
    low = splyce.jit(spec.fun, vectorize=False).lower(*ops)
    scf = low.as_text("scf")
    assert scf.count("scf.while") == 1
    body = scf[scf.index("scf.while"):]
    # the before-region's two bound checks anded, then the guarded body and the cursor advances
    assert body.index("arith.cmpi ult") < body.index("arith.andi") < body.index("scf.condition")
    assert "scf.if" in body and "arith.select" in body
    # nothing nests inside the coiteration: it is the innermost loop
    inner = body[body.index("} do {"):]
    assert "scf.for" not in inner.split("scf.yield")[0]
    check_in_order(low.as_text("trace"), TRACE_PATTERNS)
    check_in_order(low.as_text("linalg"), LINALG_PATTERNS)
    plain = low.as_text("splyce")
    check_in_order(plain, ["// splyce: vectorize=False, the plain sparsifier's loops", "func.func @kernel(",
                           "scf.for", "scf.while"])
    assert "splyce.fast_lane" not in plain and "vector.load" not in plain
    llvm = low.as_text("llvm")
    check_in_order(llvm, [re.compile(r"define .* @kernel\("), re.compile(r"icmp ult i(32|64)"),
                          re.compile(r"fmul (<\d+ x )?double")])
    assert "icmp eq <4 x i32>" not in llvm      # no all-pairs compare without the Splyce pass
    check_in_order(low.as_text("asm"), [re.compile(r"\bcmp[lq]\b"), re.compile(r"vmul[sp]d|vfmadd")])


# What every kernel's stages show, in order (float64 values, scipy's int32 indices, a CSR-like operand).
TRACE_PATTERNS = ["trace(%arg0: ", re.compile(r"%0 = contract\[[a-z,]+->[a-z]*, order=[a-z]+\]\(%arg0, %arg1"), "return %0"]
LINALG_PATTERNS = [
    re.compile(r"#sparse\d* = #sparse_tensor.encoding<\{ map = \(d0[^)]*\) -> \(d0 : dense, d1 : compressed"
               r".*posWidth = 32, crdWidth = 32 \}>"),
    "func.func @kernel(", "linalg.generic", "arith.mulf", "arith.addf", "linalg.yield", "return"]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_vectorized_stages_show_the_fast_lane_then_the_epilogue(name):
    spec = KERNELS[name]
    low = splyce.jit(spec.fun).lower(*spec.operands(spec.quick_size, 0.05, seed=3))
    check_in_order(low.as_text("trace"), TRACE_PATTERNS)
    check_in_order(low.as_text("linalg"), LINALG_PATTERNS)
    # the decision comment, then in the kernel: the outer loop, the fast lane (vector loads of both
    # coordinate blocks, marked with the fast-lane attribute), then the original loop as the epilogue
    check_in_order(low.as_text("splyce"), [
        re.compile(r"// splyce: @_internal_kernel loop 0: vectorized \([^)]*f64 i32-crd n=4 config 7\b"),
        "func.func @kernel(", "func.func private @_internal_kernel(", "scf.for", "scf.while",
        re.compile(r"vector.load %\w+\[%\w+\] : memref<\?xi32>, vector<4xi32>"),
        re.compile(r"vector.load %\w+\[%\w+\] : memref<\?xi32>, vector<4xi32>"),
        "} attributes {splyce.fast_lane}", "scf.while"])
    # LLVM IR: the all-pairs compare of 4 coordinates and the 4-wide multiply (config 7: SIMD multiply)
    check_in_order(low.as_text("llvm"), [re.compile(r"define .* @kernel\("), "icmp eq <4 x i32>",
                                         "fmul <4 x double>"])
    # native code (AVX2 or AVX-512 host): a vector compare of coordinates, then a 4 x f64 multiply
    check_in_order(low.as_text("asm"), [re.compile(r"vpcmpeqd\s+%[xy]mm"), re.compile(r"vmulpd\s+\S+, %ymm")])


def test_unknown_stage_is_an_error():
    f = splyce.jit(lambda a, b: a @ b, vectorize=False)
    with pytest.raises(ValueError, match="unknown stage"):
        f.lower(_random_csr(3, 3, 0.5, 1), _random_csr(3, 3, 0.5, 2)).as_text("ptx")


def test_dump_dir_receives_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLYCE_DUMP_DIR", str(tmp_path))
    f = splyce.jit(lambda a, b: a @ b, vectorize=False)
    f(_random_csr(3, 4, 0.5, 1), _random_csr(4, 2, 0.5, 2))
    names = sorted(p.name.split("-", 1)[1] for p in tmp_path.iterdir())
    assert names == ["linalg.mlir", "llvm.ll", "scf.mlir", "splyce.mlir", "trace.txt"]


def _fast_lane_asm(target, a, b):
    """Assembly of an 8-wide fast lane (8 x i32 coordinates, 8 x f64 values) for ``target``."""
    f = splyce.jit(lambda x, y: splyce.multiply(x, y, out_format="dense"), vector_width=8, target=target)
    return f.lower(a, b).as_text("asm")


def test_each_target_gets_its_own_vector_instructions():
    a, b = _random_csr(8, 64, 0.5, 1), _random_csr(8, 64, 0.5, 2)
    # AVX-512: coordinates compared into mask registers, values multiplied in zmm registers
    avx512 = _fast_lane_asm("avx512", a, b)
    check_in_order(avx512, [re.compile(r"vmovdqu\s+\(%\w+,%\w+,4\), %ymm"),
                            re.compile(r"vpcmpeqd\s+%ymm\d+, %ymm\d+, %k\d"),
                            re.compile(r"vmulpd\s+\S+, %zmm\d+, %zmm")])
    # AVX2: the same in ymm registers, the compare's result a vector; no zmm and no mask registers exist
    avx2 = _fast_lane_asm("avx2", a, b)
    check_in_order(avx2, [re.compile(r"vmovdqu\s+\(%\w+,%\w+,4\), %ymm"),
                          re.compile(r"vpcmpeqd\s+%ymm\d+, %ymm\d+, %ymm"),
                          re.compile(r"vmulpd\s+\S+, %ymm")])
    assert "zmm" not in avx2 and not re.search(r"%k\d", avx2)


def test_foreign_target_lowers_to_asm_but_refuses_to_run():
    a, b = _random_csr(8, 8, 0.5, 1), _random_csr(8, 8, 0.5, 2)
    from splyce.native.codegen import host_target

    other = "skylake" if host_target().cpu != "skylake" else "icelake-server"
    g = splyce.jit(lambda a, b: a @ b, vectorize=False, target=other)
    # the entry point and its C-interface wrapper are both emitted for the foreign CPU
    asm = g.lower(a, b).as_text("asm")
    assert re.search(r"^kernel:", asm, re.M) and re.search(r"^_mlir_ciface_kernel:", asm, re.M)
    with pytest.raises(RuntimeError, match="cannot run code compiled for"):
        g(a, b)
    for bad in ("pentium4-not-a-cpu", "pentium4"):   # LLVM would abort the process on these
        with pytest.raises(ValueError, match="unknown or unusable target CPU"):
            splyce.jit(lambda a, b: a @ b, vectorize=False, target=bad)(a, b)


# -- calling and results ---------------------------------------------------------------------------------
def test_results_types_follow_numpy_and_scipy():
    a, b = _random_csr(6, 5, 0.5, 1), _random_csr(6, 5, 0.5, 2)
    prod = splyce.jit(lambda x, y: x * y, vectorize=False)(a, b)
    assert isinstance(prod, sps.csr_array) and abs(prod - a.multiply(b)).max() == 0
    total = splyce.jit(lambda x, y: x + y, vectorize=False)(a, b)
    assert isinstance(total, sps.csr_array) and abs(total - (a + b)).max() == 0
    diff = splyce.jit(lambda x, y: x - y, vectorize=False)(a, b)
    assert abs(diff - (a - b)).max() == 0
    dense = splyce.jit(lambda x, y: x * y, vectorize=False, out_format="dense")(a, b)
    assert isinstance(dense, np.ndarray) and np.array_equal(dense, a.multiply(b).toarray())
    scalar = splyce.jit(lambda x, y: (x * y).sum(), vectorize=False, out_format="dense")(a, b)
    assert np.isclose(scalar, a.multiply(b).sum())
    both = splyce.jit(lambda x, y: (x @ y.T, 2.0 * x), vectorize=False)(a, b)
    assert isinstance(both, tuple) and isinstance(both[0], sps.csr_array)       # sparse @ sparse, as scipy
    assert np.allclose(both[0].toarray(), a.toarray() @ b.toarray().T)
    assert np.array_equal(_dense(both[1]), 2.0 * a.toarray())


def test_static_scalar_arguments_are_part_of_the_key():
    f = splyce.jit(lambda x, s: s * x, vectorize=False)
    a = _random_csr(5, 5, 0.4, 1)
    assert np.array_equal(_dense(f(a, 2.0)), 2 * a.toarray())
    assert np.array_equal(_dense(f(a, 3.0)), 3 * a.toarray())
    assert f.cache_info().misses == 2      # two keys (a scaling of one argument may run as a one-op form)


def test_inputs_are_not_modified_and_not_copied():
    a, b = _random_csr(30, 20, 0.3, 1), _random_csr(20, 10, 0.3, 2).tocsc()
    before = [x.copy() for x in (a.data, a.indices, a.indptr, b.data, b.indices, b.indptr)]
    splyce.jit(lambda x, y: x @ y, vectorize=False)(a, b)
    after = (a.data, a.indices, a.indptr, b.data, b.indices, b.indptr)
    assert all(np.array_equal(x, y) for x, y in zip(before, after))


def test_mixed_dtypes_promote_like_numpy():
    a = _random_csr(6, 6, 0.5, 1, np.float32)
    b = _random_csr(6, 6, 0.5, 2, np.float64)
    out = splyce.jit(lambda x, y: x @ y, vectorize=False)(a, b)
    assert out.dtype == np.float64
    assert np.allclose(out.toarray(), a.toarray().astype(np.float64) @ b.toarray())
    ai = splyce.asarray(np.arange(12, dtype=np.int32).reshape(3, 4) % 3, splyce.CSR)
    bi = splyce.asarray(np.arange(12, dtype=np.int64).reshape(4, 3) % 2, splyce.CSR)
    outi = splyce.jit(lambda x, y: x @ y, vectorize=False)(ai, bi)
    assert outi.dtype == np.int64 and np.array_equal(outi.toarray(), ai.to_numpy() @ bi.to_numpy())


def test_bad_arguments_raise_before_running():
    f = splyce.jit(lambda x, y: x @ y, vectorize=False)
    a = _random_csr(4, 4, 0.5, 1)
    with pytest.raises(TypeError, match="dtype float16 is not supported"):
        f(a, np.ones((4, 4), dtype=np.float16))
    with pytest.raises(TypeError, match=r"^argument 1: unsupported argument of type set$"):
        f(a, {1.0})
    with pytest.raises(TypeError, match=r"^argument 1\['x'\]\[0\]: unsupported argument of type set$"):
        f(a, {"x": [{1.0}]})     # a pytree's leaf, named by its path
    broken = a.copy()
    broken.indices[1] = 99   # out of range coordinate
    with pytest.raises(ValueError, match="argument 0"):
        f(broken, a)
    with pytest.raises(TypeError, match=r"<lambda>\(\) got an unexpected keyword argument 'z'$"):
        f(a, z=a)        # Python's own message for the function (tests/runtime/test_jit_calls.py: keywords)
    with pytest.raises(ValueError, match="vector_width"):
        splyce.jit(lambda x: x, vector_width=3)
    with pytest.raises(ValueError, match="phases"):
        splyce.jit(lambda x: x, phases=9)


def test_coo_inputs_are_converted_not_misread():
    a = sps.random_array((7, 9), density=0.4, format="coo", random_state=4)
    b = _random_csr(9, 5, 0.4, 5)
    out = splyce.jit(lambda x, y: x @ y, vectorize=False)(a, b)
    assert np.allclose(out.toarray(), a.toarray() @ b.toarray())


_KEEPS_COO = ["x.T", "x * 2.0", "-x", "abs(x)", "x", "(x * 2.0).T", "x / 4.0"]


@pytest.mark.parametrize("cls, source", [(sps.coo_array, s) for s in _KEEPS_COO + ["x ** 2", "x + y", "x * y"]]
                         + [(sps.coo_matrix, s) for s in _KEEPS_COO])   # (a matrix's ** is the matrix power)
def test_results_of_a_coo_argument_have_scipys_class(cls, source):
    """scipy keeps a COO a COO through transposes, scalar multiples, abs / neg / power (and returns a copy
    as is); a sum or product of two operands is CSR. A jitted function returns the same class."""
    a = cls(sps.random_array((7, 9), density=0.4, format="coo", random_state=4))
    b = cls(sps.random_array((7, 9), density=0.4, format="coo", random_state=5))
    fun = eval(f"lambda x, y: {source}")
    expected, got = fun(a, b), splyce.jit(fun)(a, b)
    assert type(got) is type(expected), (source, type(got), type(expected))
    np.testing.assert_array_equal(got.toarray(), expected.toarray())


def test_a_static_argument_before_a_coo_one_does_not_shift_which_input_is_coo():
    a = sps.random_array((7, 9), density=0.4, format="coo", random_state=4)
    c = sps.random_array((7, 9), density=0.4, format="csr", random_state=6)
    f = splyce.jit(lambda s, x, y: (x * s, y.T * s, x + y))
    got = f(3.0, a, c)
    assert [type(g) for g in got] == [sps.coo_array, sps.csc_array, sps.csr_array]
    for g, e in zip(got, (a * 3.0, c.T * 3.0, a + c)):
        np.testing.assert_array_equal(g.toarray(), e.toarray())


def test_a_chosen_out_format_wins_over_a_coo_argument():
    a = sps.random_array((7, 9), density=0.4, format="coo", random_state=4)
    assert type(splyce.jit(lambda x: x * 2.0, out_format="sparse")(a)) is sps.csr_array


# -- cache -----------------------------------------------------------------------------------------------
def test_second_call_hits_the_cache_without_tracing_or_compiling():
    traced = []

    def fun(x, y):
        traced.append(1)
        return x @ y

    f = splyce.jit(fun, vectorize=False)
    a, b = _random_csr(10, 10, 0.3, 1), _random_csr(10, 10, 0.3, 2).tocsc()
    f(a, b)
    f(a, b)
    f(_random_csr(10, 10, 0.5, 3), _random_csr(10, 10, 0.5, 4).tocsc())   # same signature, new data
    assert len(traced) == 1
    info = f.cache_info()
    assert (info.hits, info.misses, info.compiles) == (2, 1, 1)
    f(_random_csr(10, 11, 0.3, 1), _random_csr(11, 10, 0.3, 2).tocsc())   # new shape: recompiles
    f(a, b.tocsr())                                                      # new format: recompiles
    assert f.cache_info().compiles == 3


def test_cache_key_names_what_changed():
    f = splyce.jit(lambda x, y: x @ y, vectorize=False)
    a, b = _random_csr(6, 6, 0.5, 1), _random_csr(6, 6, 0.5, 2)
    k1 = f._key((a, b))[0]
    k2 = f._key((a, b.astype(np.float32)))[0]
    assert k1.explain(k2) == ["inputs"]


def test_one_jitted_function_from_eight_threads():
    f = splyce.jit(lambda x, y: x @ y, vectorize=False)
    a, b = _random_csr(40, 30, 0.2, 1), _random_csr(30, 20, 0.2, 2).tocsc()
    expected = a.toarray() @ b.toarray()
    results, errors = [], []

    def worker():
        try:
            for _ in range(5):
                results.append(f(a, b))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 40 and all(np.allclose(r.toarray(), expected) for r in results)
    info = f.cache_info()
    assert info.compiles == 1 and info.hits + info.misses == 40


# -- the five kernels --------------------------------------------------------------------------------------
def _check_kernel(name, ops, dtype):
    spec = KERNELS[name]
    out = splyce.jit(spec.fun, vectorize=False)(*ops)
    dense_ops = [_dense(o).astype(np.float64) for o in ops]
    ref = spec.reference(*dense_ops)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    assert out.dtype == dtype
    np.testing.assert_allclose(_dense(out), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("density", [0.0, 0.02, 0.3, 1.0])
def test_kernels_match_numpy(name, dtype, density):
    spec = KERNELS[name]
    small = {"K1": 24, "K2": 64, "K3": (3, 4, 40, 5), "K4": (6, 50), "K5": (3, 4, 40, 5)}[name]
    _check_kernel(name, spec.operands(small, density, dtype, seed=7), dtype)


def test_kernel_edge_cases_empty_rows_single_nonzero_dense_rows():
    B = np.zeros((6, 30))
    B[1, 4] = 2.0                 # a single nonzero
    B[3, :] = np.arange(1, 31)    # a fully dense row; rows 0, 2, 4, 5 empty
    C = np.zeros((30, 5))
    C[:, 2] = 1.5                 # a fully dense column
    C[4, 0] = -1.0
    ops = [splyce.asarray(B, format=splyce.CSR), splyce.asarray(C, format=splyce.CSC)]
    _check_kernel("K1", ops, np.float64)
    _check_kernel("K4", [splyce.asarray(B), splyce.asarray(B * 2)], np.float64)


def test_kernel_allocated_buffers_are_freed_exactly_once(monkeypatch):
    import gc

    from splyce.runtime import calls as runtime

    freed = []
    real = runtime.free_address

    def counting_free(address):
        freed.append(address)
        real(address)

    monkeypatch.setattr(runtime, "free_address", counting_free)
    f = splyce.jit(lambda x, y: x * y, vectorize=False)
    a, b = _random_csr(30, 40, 0.3, 1), _random_csr(30, 40, 0.3, 2)
    result = f(a, b)                       # a CSR result: pos, crd and values allocated by the kernel
    data_copy = result.data.copy()
    assert freed == []                     # still in use: the scipy array views the kernel's buffers
    del result
    gc.collect()
    assert len(freed) == 3 and len(set(freed)) == 3
    again = f(a, b)
    np.testing.assert_array_equal(again.data, data_copy)


def test_strided_and_big_endian_dense_operands_are_read_correctly():
    a = _random_csr(6, 8, 0.5, 1)
    dense = np.random.default_rng(0).random((16, 10))
    f = splyce.jit(lambda x, y: x @ y, vectorize=False)
    strided = dense[::2, ::2]                       # a view with non-unit strides
    np.testing.assert_allclose(f(a, strided), a.toarray() @ strided)
    big = dense[:8, :5].astype(">f8")               # non-native byte order
    np.testing.assert_allclose(f(a, big), a.toarray() @ dense[:8, :5])


def test_several_coiteration_loops_in_one_function_are_all_vectorized():
    spec = KERNELS["K1"]
    B, C = spec.operands(48, 0.2, seed=1)
    fun = lambda b, c: (splyce.einsum("ik,kj->ij", b, c, order="ijk"),   # noqa: E731  two intersections
                        splyce.einsum("ik,jk->ij", b, b, order="ijk"))
    low = splyce.jit(fun).lower(B, C)
    assert [d.vectorized for d in low.decisions] == [True, True]
    text = low.as_text("splyce")
    assert text.count("splyce.fast_lane") == 2
    check_in_order(text, [re.compile(r"// splyce: @_internal_kernel loop 0: vectorized"),
                          re.compile(r"// splyce: @_internal_kernel loop 1: vectorized"),
                          "} attributes {splyce.fast_lane}", "scf.while", "} attributes {splyce.fast_lane}",
                          "scf.while"])
    fast, plain = splyce.jit(fun)(B, C), splyce.jit(fun, vectorize=False)(B, C)
    assert all(np.array_equal(x, y) for x, y in zip(fast, plain))


def test_signature_cache_reuses_kernels_only_for_identical_signatures():
    """Drop-in operands (checked tensors, contiguous arrays) find their kernel by a cheap signature; a change of
    dtype, shape, format or layout never reuses a kernel compiled for something else, and clear_cache empties it."""
    import scipy.sparse as sps

    from splyce.dropin import kernels as dropin
    from splyce.runtime import signature

    a = sps.random_array((30, 30), density=0.2, format="csr", rng=6)
    v = np.random.default_rng(6).random(30)
    ref = np.einsum("ij,j,ij->", a.toarray(), v, a.toarray())
    assert np.isclose(splyce.einsum("ij,j,ij->", a, v, a), ref)
    jitted = dropin._kernels[("einsum:ij,j,ij->", None, 1, False)]
    before = jitted.cache_info()
    assert np.isclose(splyce.einsum("ij,j,ij->", a, v, a), ref)
    after = jitted.cache_info()
    assert after.hits == before.hits + 1 and after.compiles == before.compiles and jitted._by_signature
    a32 = a.astype(np.float32)
    out32 = splyce.einsum("ij,j,ij->", a32, v.astype(np.float32), a32)
    assert np.asarray(out32).dtype == np.float32 and np.isclose(out32, ref, rtol=1e-4)
    strided = np.repeat(v, 2)[::2]                       # not contiguous: the full key, a prepared copy
    assert signature.fast_signature((strided,)) is None
    assert np.isclose(splyce.einsum("ij,j,ij->", a, strided, a), ref)
    b = sps.random_array((30, 40), density=0.2, format="csr", rng=7)
    w = np.ones(40)
    assert np.isclose(splyce.einsum("ij,j,ij->", b, w, b), (b.toarray() ** 2).sum())
    splyce.clear_cache()
    assert not jitted._by_signature


def test_jitted_results_of_spmatrix_arguments_are_spmatrix_as_scipy():
    """``csr_matrix`` arguments give ``csr_matrix`` / ``csc_matrix`` / ``coo_matrix`` results, as scipy's own
    operators on them do; with an ``sparray`` operand, the left operand's class and rules (scipy's)."""
    import scipy.sparse as sps

    a = sps.csr_matrix(sps.random_array((6, 6), density=0.4, format="csr", rng=3))
    x = np.linspace(-1, 1, 6)
    several = splyce.jit(lambda m, v: (m * m, m + m, m.T * 2.0, m @ v, m.multiply(m)))
    got = several(a, x)
    want = (a * a, a + a, a.T * 2.0, a @ x, a.multiply(a))     # a matrix's * is the matrix product
    for g, w in zip(got, want):
        assert type(g) is type(w)
        np.testing.assert_allclose(g.toarray() if hasattr(g, "toarray") else g,
                                   w.toarray() if hasattr(w, "toarray") else w)
    assert type(several(a.tocoo(), x)[2]) is sps.coo_matrix        # a COO's transpose stays a COO
    product = splyce.jit(lambda m, n: m * n)
    assert type(product(sps.csr_array(a), sps.csr_array(a))) is sps.csr_array
    assert type(product(a, sps.csr_array(a))) is type(a * sps.csr_array(a)) is sps.csr_matrix     # the left's rules
    assert type(product(sps.csr_array(a), a)) is type(sps.csr_array(a) * a) is sps.csr_array


def test_signature_parts_stand_for_shape_dtype_and_format_one_to_one():
    """A validated tensor's part of the cheap signature is one number per (shape, value dtype, format): equal
    for equal triples, different when any of them differs; the dispatcher's ``filed_kernel`` finds a kernel by
    the triples, as a drop-in asks for it."""
    import scipy.sparse as sps

    from splyce.runtime import signature

    a = sps.random_array((6, 7), density=0.5, format="csr", rng=1)
    parts = [signature.fast_signature((splyce.asarray(m),))[0]
             for m in (a, a.copy(), a.astype(np.float32), sps.random_array((7, 6), density=0.5, format="csr", rng=1),
                       a.tocsc())]
    assert parts[0] == parts[1] and len(set(parts[1:])) == 4
    t = splyce.asarray(a)
    assert signature.signature_of([(t.shape, t.values.dtype, t.format)]) == signature.fast_signature((t,))
    f = splyce.jit(lambda m, x: m @ x)
    x = np.ones(7)
    assert np.allclose(f(t, x), a @ x)
    kernel = f.filed_kernel(((t.shape, t.values.dtype, t.format), (x.shape, x.dtype)))
    assert kernel is not None and kernel is f.kernel_for(t, x)[0]
    assert f.filed_kernel(((t.shape, np.dtype(np.float32), t.format), (x.shape, x.dtype))) is None
