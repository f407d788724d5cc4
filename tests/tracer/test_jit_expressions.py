"""Jitted expressions that compose transposes, reductions and elementwise ops, checked against NumPy.

MLIR's elementwise fusion once turned some of them into kernels the sparsifier cannot compile: ``b.T + b`` on
a CSR operand aborted the process (one sparse operand read in two orders), ``abs(d.T)`` on a dense one freed a
constant (a segfault), ``(b + a).max(axis=0)`` raised an MLIRError. They run in a child process, so an abort
fails the test instead of killing pytest; a seeded random-expression sweep in the same child covers the
combinations nobody listed."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np, scipy.sparse as sps
    import splyce as S

    class N:   # the reference namespace: NumPy's functions under splyce's names
        maximum = staticmethod(np.maximum)
        minimum = staticmethod(np.minimum)

    LISTED = [   # (source over a, b, v, d; formats of a and b)
        ("abs(d.T)", "csr", "csr"), ("d.T + d", "csr", "csr"), ("(d * 2.0).T", "csr", "csr"),
        ("abs(b.T)", "csr", "csr"), ("abs(b.T)", "csr", "csc"), ("b.T + b", "csr", "csr"),
        ("b.T + b", "csr", "csc"), ("S.maximum(b.T, b)", "csr", "csr"), ("b.T ** 2", "csr", "csr"),
        ("b.T.min()", "csr", "csr"), ("b.T.min()", "csr", "csc"), ("abs(b.T @ b)", "csr", "csr"),
        ("b.T * b", "csr", "csr"), ("abs(b).T", "csr", "csr"), ("(b + b).T", "csr", "csr"),
        ("b.T.T + b", "csr", "csr"), ("abs(S.minimum(d.T, b - b))", "csr", "csr"), ("b.T.sum(axis=1)", "csr", "csr"),
        ("b.T @ a.min(axis=1)", "csc", "csc"), ("(a @ b) @ b.min(axis=1)", "csc", "csc"),
        ("b.T.max(axis=0) * -(b @ v)", "csr", "csc"), ("(b + d).max(axis=0)", "csr", "csr"),
        ("(b + d).max()", "csr", "csr"), ("S.minimum(abs(v), v) + b.min(axis=1) * 3.0", "csr", "csc"),
        ("b.T", "csr", "csc"), ("b.T * a - a.T", "coo", "csr"), ("(b.T @ a).T + b.transpose()", "csr", "csc"),
        ("S.maximum(b.T, a.T * 2.0).T @ v", "csc", "csr"),
    ]
    LISTED_INT = [   # integer code that folds to a kernel ignoring its sparse operand (segfaulted the sparsifier)
        ("(d - d) @ a", "csr", "csr"), ("(a * 0).sum()", "csr", "csr"), ("(b - b) @ v", "csc", "csr"),
        ("(a * 0).sum(axis=1)", "csr", "csc"), ("(a * 0 + b).sum()", "csr", "csr"),
        # a dtype change keeps elementwise ops apart: their intermediates take the consumer's storage order
        ("((abs(b) * -0.5) - (S.minimum(a, b) * (a * -0.5)))", "csc", "coo"),
        ("(v - v).min() + (d - d).max()", "csr", "csr"),   # v - v folds to a constant, which was freed
        ("S.maximum(b ** 2, (b * 3.0).T)", "csr", "csc"),   # a transposed intermediate in the other order
    ]

    def operand(rng, n, fmt, density, dtype):
        A = sps.random_array((n, n), density=density, format="csr", rng=rng)
        A.data = np.round(A.data * 8 - 4) if np.dtype(dtype).kind in "iu" else A.data * 8 - 4
        A = A.astype(dtype)
        return A.toarray() if fmt == "dense" else getattr(sps, fmt + "_array")(A)

    def expression(rng, rank, depth):
        """Random source of the given rank over a, b (matrices) and v (a vector)."""
        if depth == 0 or rng.random() < 0.25:
            return {2: str(rng.choice(["a", "b"])), 1: "v", 0: "(v.sum())"}[rank]
        kind = str(rng.choice({2: ["bin", "un", "matmul", "T", "scale"], 1: ["bin", "un", "mv", "red", "scale"],
                               0: ["red0", "bin", "scale"]}[rank]))
        sub = lambda r=rank: expression(rng, r, depth - 1)
        if kind == "bin":
            op = str(rng.choice(["+", "-", "*", "max", "min"]))
            if op in ("max", "min"):
                return f"S.{op}imum({sub()}, {sub()})" if rank else f"({sub()} {'+' if op == 'max' else '-'} {sub()})"
            return f"({sub()} {op} {sub()})"
        if kind == "un":
            return str(rng.choice([f"abs({sub()})", f"(-{sub()})", f"({sub()} ** 2)"]))
        if kind == "scale":
            return f"({sub()} * {float(rng.choice([2.0, -0.5, 3.0]))})"
        if kind == "matmul":
            return f"({sub(2)} @ {sub(2)})"
        if kind == "T":
            return f"({sub(2)}.T)"
        if kind == "mv":
            return f"({sub(2)} @ {sub(1)})"
        if kind == "red":
            return f"({sub(2)}.{rng.choice(['sum', 'max', 'min'])}(axis={int(rng.integers(0, 2))}))"
        return f"({sub(int(rng.integers(1, 3)))}.{rng.choice(['sum', 'max', 'min'])}())"

    def dense(x):
        return x.toarray() if sps.issparse(x) else (x.todense() if hasattr(x, "todense") else np.asarray(x))

    def check(case, src, a, b, v, d):
        fun = eval(f"lambda a, b, v, d: {src}")
        try:
            with np.errstate(all="ignore"):
                want = eval(f"lambda a, b, v, d: {src}", {"S": N})(dense(a), dense(b), dense(v), d)
        except Exception:
            return   # NumPy refuses it too (e.g. a shape NumPy does not broadcast)
        try:
            got = dense(S.jit(fun)(a, b, v, d))
        except Exception as exc:
            print(json.dumps({"case": case, "src": src, "status": "error",
                              "message": f"{type(exc).__name__}: {str(exc)[:300]}"}), flush=True)
            return
        want = np.asarray(want)
        # integers exactly; floats to rounding (sums in another order), float32 at its own precision
        tol = {"i": 0.0, "u": 0.0}.get(want.dtype.kind, 1e-4 if want.dtype == np.float32 else 1e-9)
        ok = got.shape == want.shape and np.allclose(got, want, rtol=tol, equal_nan=True,
                                                     atol=tol * (1 + np.abs(want).max(initial=0)))
        print(json.dumps({"case": case, "src": src, "status": "ok" if ok else "wrong",
                          "got": str(got)[:200], "want": str(want)[:200]}), flush=True)

    rng = np.random.default_rng(20261202)
    for k, (src, fa, fb) in enumerate(LISTED):
        n = 6
        a, b = operand(rng, n, fa, 0.5, "float64"), operand(rng, n, fb, 0.5, "float64")
        check(f"listed {k}", src, a, b, rng.standard_normal(n), operand(rng, n, "dense", 0.5, "float64"))
    for k, (src, fa, fb) in enumerate(LISTED_INT):
        a, b = operand(rng, 6, fa, 0.5, "int64"), operand(rng, 6, fb, 0.5, "int64")
        check(f"listed int {k}", src, a, b, np.arange(6) - 2, operand(rng, 6, "dense", 0.5, "int64"))
    for k in range(int(sys.argv[1])):
        n = int(rng.integers(1, 10))
        dtype = str(rng.choice(["float64", "int64", "float32"]))
        src = expression(rng, int(rng.integers(0, 3)), int(rng.integers(1, 4)))
        fmts = [str(rng.choice(["csr", "csc", "coo", "dense"])) for _ in range(2)]
        a, b = (operand(rng, n, f, float(rng.choice([0.0, 0.1, 0.5, 1.0])), dtype) for f in fmts)
        v = operand(rng, n, "dense", 1.0, dtype)[0]
        if rng.random() < 0.3:
            v = sps.coo_array(np.where(rng.random(n) < 0.5, v, 0))
        check(f"random {k} {dtype} {fmts}", src, a, b, v, None)
''')


def test_composed_expressions_match_numpy_in_a_child_process(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        proc = subprocess.run([sys.executable, "-c", CHILD, "120"], stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=900)
    text = out.read_text()
    assert proc.returncode == 0, (f"the child died (status {proc.returncode}; negative: a signal) after:\n"
                                  f"{text[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in text.splitlines()]
    listed = [r for r in rows if r["case"].startswith("listed")]
    assert len(listed) == 28 + 8
    bad = [r for r in rows if r["status"] != "ok"]
    assert not bad, bad[:5]
    assert len(rows) >= 36 + 100   # NumPy itself refuses few of the random ones


def _fused(fun, *args):
    """The module of ``fun`` after MLIR's elementwise fusion, before sparsification."""
    from mlir import ir

    from splyce.passes import pipeline
    from splyce.passes.fusion_check import contradicting_sparse_orders
    from splyce.lowering.to_mlir import lower_trace

    trace = splyce.jit(fun).lower(*args).trace
    with ir.Context(), ir.Location.unknown():
        module = lower_trace(trace)
        pipeline.run_passes(module, pipeline.FUSE)
        return str(module), contradicting_sparse_orders(module)


B = sps.csr_array(sps.random_array((6, 6), density=0.5, rng=1))


def test_fusion_check_finds_one_sparse_operand_read_in_two_orders():
    # a dense transposed copy (einsum's default) fused into the sum: one kernel reading b as (i, j) and (j, i)
    fun = lambda b: splyce.einsum("ij->ji", b) + b
    text, contradicts = _fused(fun, B)
    assert contradicts
    assert text.count("linalg.generic") == 1
    # the unfused lowering compiles the transposed copy as its own kernel, and the sum is right
    low = splyce.jit(fun).lower(B)
    assert low.as_text("scf").count("func.func private @_internal_kernel") == 1
    np.testing.assert_array_equal(splyce.jit(fun)(B), B.toarray().T + B.toarray())
    # b.T is sparse (CSC over b's buffers, as in scipy): no copy to fuse, nothing contradicts
    text, contradicts = _fused(lambda b: b.T + b, B)
    assert not contradicts
    got = splyce.jit(lambda b: b.T + b)(B)
    assert isinstance(got, sps.csc_array)
    np.testing.assert_array_equal(got.toarray(), B.toarray().T + B.toarray())


def test_fusion_check_accepts_compatible_orders():
    _, contradicts = _fused(lambda b: abs(b * 2.0) + b, B)
    assert not contradicts


def test_a_python_scalar_in_a_fused_expression_promotes_like_numpy():
    """NEP 50: int64 * -0.5 is float64; the fused ``abs`` once evaluated its operand in int64 (-0.5 -> 0)."""
    v = sps.coo_array(np.array([0, 3, 0, -2, 1, 0], dtype=np.int64))
    got = splyce.jit(lambda v: abs(v * -0.5))(v)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.todense(), np.abs(v.toarray() * -0.5))
    x = np.arange(-3, 3, dtype=np.float32)
    got = splyce.jit(lambda x: abs(x * -0.5) + x)(x)
    assert got.dtype == np.float32   # a Python float never widens float32
    np.testing.assert_array_equal(got, np.abs(x * -0.5) + x)


A = sps.random_array((5, 6), density=0.4, format="csr", rng=2, dtype=np.float32)


@pytest.mark.parametrize("operand", [A, sps.csc_array(A), A.toarray(), splyce.asarray(A)],
                         ids=["csr", "csc", "dense", "SparseTensor"])
def test_returning_an_argument_gives_a_view_or_a_copy_in_its_format(operand):
    """The same values and format; a sparse argument returned as is is a view over its buffers, as scipy's
    ``A.T`` (docs/tracing.md, "Results and aliasing"); a dense one a new array, as JAX returns; ``x.copy()``
    never shares."""
    got = splyce.jit(lambda x: x)(operand)
    want = operand.toarray() if hasattr(operand, "toarray") else (
        operand.todense() if hasattr(operand, "todense") else operand)
    values = got.toarray() if hasattr(got, "toarray") else got
    np.testing.assert_array_equal(values, want)
    assert values.dtype == np.float32
    if isinstance(operand, np.ndarray):
        assert isinstance(got, np.ndarray) and not np.shares_memory(got, operand)
    else:
        assert got.format == ("csc" if getattr(operand, "format", None) == "csc" else "csr")
        stored = operand.values if isinstance(operand, splyce.SparseTensor) else operand.data
        assert np.shares_memory(got.data, stored)
        copied = splyce.jit(lambda x: x.copy())(operand)
        np.testing.assert_array_equal(copied.toarray(), want)
        assert not np.shares_memory(copied.data, stored)


def test_returning_an_argument_among_results_and_with_out_format():
    x = A.toarray()
    prod, same = splyce.jit(lambda x, y: (x * y, y))(x, A)
    assert sps.issparse(prod)   # dense * sparse is sparse, as in scipy
    np.testing.assert_array_equal(prod.toarray(), x * A.toarray())
    assert sps.issparse(same) and not np.shares_memory(same.data, A.data)
    np.testing.assert_array_equal(same.toarray(), A.toarray())
    as_csr = splyce.jit(lambda x: x, out_format=splyce.CSR)(x)
    assert sps.issparse(as_csr) and as_csr.nnz == A.nnz


@pytest.mark.parametrize("threads", [1, 2])
def test_a_value_returned_twice_is_one_object_as_in_python(threads):
    def f(x):
        y = x * 2
        return y, y, x, x.T.T, x.sum(), x.T.T.sum()

    x = A.toarray()
    y, y2, same, same2, total, total2 = splyce.jit(f, threads=threads)(x)
    assert y is y2
    np.testing.assert_array_equal(y, x * 2)
    # x and x.T.T are distinct traced values that the planner makes one node: one buffer, both results right
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(same2, x)
    assert total == total2
    np.testing.assert_allclose(total, x.sum(), rtol=1e-6)
    for operand in (A, splyce.asarray(A)):
        y, y2, *_ = splyce.jit(f, threads=threads)(operand)
        assert y is y2
        np.testing.assert_array_equal(y.toarray(), A.toarray() * 2)


def test_a_generic_that_folds_to_nothing_is_dropped_before_the_sparsifier():
    from mlir import ir

    from splyce.passes import pipeline
    from splyce.passes.noop_generics import drop_noop_generics
    from splyce.lowering.to_mlir import lower_trace

    a = sps.csr_array(sps.random_array((6, 5), density=0.4, rng=1) * 8).astype(np.int64)
    trace = splyce.jit(lambda a: (a * 0).sum()).lower(a).trace
    with ir.Context(), ir.Location.unknown():
        module = lower_trace(trace)
        pipeline.run_passes(module, pipeline.FUSE)
        assert "linalg.yield %out" in str(module)   # folding left a body that ignores the sparse operand
        assert drop_noop_generics(module) == 1
        text = str(module)
    assert "linalg.generic" not in text
    # a float body does not fold that way (x * 0 is NaN for an infinite x): nothing is dropped
    trace = splyce.jit(lambda a: (a * 0.0).sum()).lower(a.astype(np.float64)).trace
    with ir.Context(), ir.Location.unknown():
        module_float = lower_trace(trace)
        pipeline.run_passes(module_float, pipeline.FUSE)
        assert drop_noop_generics(module_float) == 0
    assert splyce.jit(lambda a: (a * 0).sum())(a) == 0


@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_a_sparse_transpose_is_sparse_as_in_scipy(kind):
    b = getattr(sps, kind + "_array")(sps.random_array((5, 7), density=0.4, rng=2))
    for fun in (lambda b: b.T, lambda b: b.transpose(), lambda b: b.T * 2.0, lambda b: abs(b.T),
                lambda b: b.T * b.T):
        got, want = splyce.jit(fun)(b), fun(b)
        assert type(got) is type(want)   # csr.T is csc and csc.T csr, in scipy and here
        np.testing.assert_array_equal(got.toarray(), want.toarray())
    got = splyce.jit(lambda b: b.T)(b)
    assert np.shares_memory(got.data, b.data)       # a view, as scipy's b.T (docs/tracing.md)
    assert not np.shares_memory(splyce.jit(lambda b: b.T.copy())(b).data, b.data)
    # out_format="dense" still asks for a dense result
    np.testing.assert_array_equal(splyce.jit(lambda b: b.T, out_format="dense")(b), b.toarray().T)


def test_a_transposed_sparse_tensor_keeps_its_levels_in_every_rank():
    rng = np.random.default_rng(0)
    dense = np.where(rng.random((3, 4, 5)) < 0.3, rng.standard_normal((3, 4, 5)), 0)
    t = splyce.asarray(dense, format=splyce.csf(3))
    for axes in [(2, 0, 1), (1, 0, 2), (0, 2, 1)]:
        got = splyce.jit(lambda t: t.transpose(axes))(t)
        assert got.format.levels == t.format.levels
        np.testing.assert_array_equal(got.to_numpy(), dense.transpose(axes))
        got = splyce.jit(lambda t: t.transpose(axes) * 3.0 + t.transpose(axes))(t)
        np.testing.assert_allclose(got.to_numpy(), 4 * dense.transpose(axes))


def test_transposes_of_sparse_inputs_are_read_in_place_in_linear_memory():
    n, nnz = 20000, 60000
    rng = np.random.default_rng(3)
    b = sps.csr_array(sps.coo_array((rng.standard_normal(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))),
                                    shape=(n, n)))
    for fun in (lambda b: b.T + b, lambda b: b.T * b, lambda b: (b.T * 2.0).sum(axis=0)):
        kernel, _ = splyce.jit(fun).kernel_for(b)
        plan = kernel.plan
        text = plan.as_text()
        assert "transpose %arg0 (axes (1, 0): its buffers relabelled)" in text
        assert "scattered" not in text
        assert sum(step.nbytes for step in plan.steps) < 50 * b.nnz * 16   # O(nnz), a dense n x n is 3.2 GB
    got = splyce.jit(lambda b: b.T + b)(b)
    want = b.T + b
    assert isinstance(got, sps.csc_array) and abs(got - want).max() < 1e-12


def test_traced_multiply_broadcasts_a_sum_or_a_row():
    import scipy.sparse as sps

    A = sps.random_array((30, 20), density=0.2, format="csr", rng=np.random.default_rng(3))
    D = A.toarray()
    cases = [(lambda a: a * a.sum(), D * D.sum()), (lambda a: a.sum() * a, D * D.sum()),
             (lambda a: a * a.sum(axis=0), D * D.sum(axis=0)), (lambda a: a.sum(axis=0) * a, D * D.sum(axis=0))]
    for fn, ref in cases:
        out = splyce.jit(fn)(A)
        np.testing.assert_allclose(out.toarray() if hasattr(out, "toarray") else out, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        splyce.jit(lambda a: a * a.sum(axis=1))(A)        # (30,) against (30, 20): NumPy refuses it too
