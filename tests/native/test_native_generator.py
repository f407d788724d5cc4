"""The native kernel generator over its whole variant grid: every kernel text the library can ask for (each
dtype of the one table, each index width, each variant parameter) parses and verifies as LLVM IR, and every
kernel family's ``supported`` is the one table's answer. The kernels' values are tested against scipy and
NumPy by the drop-in and native tests; this reaches the variants those tests do not construct."""

import itertools

import numpy as np
import pytest

from splyce.native import codegen, ir_text

WIDTHS = (32, 64)
NUMERIC = ir_text.NUMERIC


@pytest.fixture
def captured(monkeypatch):
    """The IR texts the kernel builders hand to the compiler (nothing is compiled)."""
    texts = []

    def fake(llvm_ir, signatures, slp_vectorize=True):
        texts.append(llvm_ir)
        return {name: None for name in signatures}
    monkeypatch.setattr(codegen, "compile_host_helpers", fake)
    return texts


def _builds():
    from splyce.native import compress, masked, masked_sum, masked_sum_checked, spgemm, spmv, spmv_scatter, transpose
    from splyce.native import validation
    from splyce.native.elementwise import csc, merge

    for v, (p, c) in itertools.product(NUMERIC, itertools.product(WIDTHS, WIDTHS)):
        yield masked._masked.__wrapped__, (v, p, c, p, c, p, c, False)
        for factors in ("abm", "mba"):
            yield masked._masked.__wrapped__, (v, p, c, p, c, p, c, True, factors)
        yield spmv_scatter._kernel.__wrapped__, (v, p, c, True)
        yield spmv_scatter._kernel.__wrapped__, (v, p, c, False)
        for check, flat in ((False, False), (True, False), (True, True)):
            yield spmv._spmv.__wrapped__, (v, p, c, check, flat)
        for sort in ("flags", "map"):
            yield spgemm._product.__wrapped__, (False, v, p, c, p, c, c, True, sort)
        for dense, keep, scipy_order in itertools.product((False, True), repeat=3):
            yield spgemm._product.__wrapped__, (dense, v, p, c, p, c, c, keep, None, scipy_order)
        yield masked_sum._masked_sum.__wrapped__, (v, p, c, p, c, p, c)
    for v in ir_text.SCALARS:
        for op in ("multiply", "add", "subtract"):
            if op == "subtract" and ir_text.SCALARS[v].sub is None:      # bool: no difference
                continue
            for (p, c), intersect, keep in itertools.product(itertools.product(WIDTHS, WIDTHS), (False, True),
                                                              (False, True)):
                yield merge._kernel.__wrapped__, (op, v, p, c, intersect, False, keep)
            for c, keep in itertools.product(WIDTHS, (False, True)):
                yield merge._same_kernel.__wrapped__, (op, v, c, keep)
    for v, bits, op in itertools.product(NUMERIC, WIDTHS, ("multiply", "add")):
        yield csc._csc_pass_kernel.__wrapped__, (op, v, bits, 4, "", 8)
    for bits in WIDTHS:
        yield masked_sum._counting.__wrapped__, (np.dtype(np.float64), bits)
        yield masked_sum_checked._sum_checked_kernel.__wrapped__, (np.dtype(np.float32), bits)
        yield validation._canonical_entry.__wrapped__, (bits,)
        yield spgemm._flops.__wrapped__, (bits, bits, bits)
        for rule in ("any", "unique", "ordered"):
            yield validation._scanners.__wrapped__, (bits, bits, rule)
        for value_bits in (8, 16, 32, 64):
            yield transpose._kernels.__wrapped__, (bits, value_bits)
    for t, ix in itertools.product(("double", "float"), ("i32", "i64")):
        yield compress._helpers.__wrapped__, (t, ix)


def test_every_generated_kernel_parses_and_verifies(captured):
    target = codegen.host_target()
    builds = list(_builds())
    for build, args in builds:
        captured.clear()
        build(*args)
        assert captured, (build.__qualname__, args)
        for text in captured:
            codegen.parse(text, target)          # raises on any malformed IR (undefined value, bad phi, ...)
    assert len(builds) > 300


def test_supported_is_the_one_table():
    from splyce.native import compress, masked, sddmm, spgemm, spmv, spmv_scatter
    from splyce.native.elementwise import common

    dtypes = [np.dtype(t) for t in ("float64", "float32", "int64", "int32", "int16", "bool", "complex128")]
    for d in dtypes:
        arithmetic = d in ir_text.VALUE
        assert ir_text.supported(d) == arithmetic == (d in NUMERIC)
        for module in (masked, sddmm, spgemm, spmv, spmv_scatter):
            assert module.supported(d) == arithmetic, (module.__name__, d)
        assert compress.supported(d) == (arithmetic and d.kind == "f")
        assert common.supported(d) == (d in ir_text.SCALARS)
    assert {s.t for s in ir_text.SCALARS.values()} == set(ir_text.BY_TYPE)


def test_fill_is_one_strict_substitution():
    """ir_text.fill: markers filled from fields (pieces' own markers too, from the same fields), LLVM's braces
    left alone, a missing field an error rather than a marker left in the IR."""
    body = "define i64 @{name}(ptr %p) {\n{step}\n  %s = insertvalue {i64, {t}} undef, {t} %v, 1\n}\n"
    text = ir_text.fill(body, name="k", step="  %v = load {t}, ptr %p", t="double")
    assert text == ("define i64 @k(ptr %p) {\n  %v = load double, ptr %p\n"
                    "  %s = insertvalue {i64, double} undef, double %v, 1\n}\n")
    with pytest.raises(KeyError):
        ir_text.fill("  %v = load {t}, ptr %p", name="k")


def test_loop_head_runs_its_loops():
    """ir_text.loop_head: a loop whose phis enter from two blocks and latch from a later block (the sum of
    x[i] for i < n), and one that runs until its test holds (the count of a word's set bits, clearing the lowest
    each step), compiled and run against NumPy / Python on arrays the test did not choose by hand."""
    import ctypes

    text = ("define i64 @sum(ptr %x, i64 %n) {\nentry:\n  %big = icmp sgt i64 %n, 100\n"
            "  br i1 %big, label %a, label %b\na:\n  br label %head\nb:\n  br label %head\n"
            + ir_text.loop_head("head", "body", ("a", "b"), [("i", "i64", "0", "%i1"), ("s", "i64", "0", "%s1")],
                                "more = icmp slt i64 %i, %n", "done", latch="step")
            + ir_text.load_at("i64", "%x", "%i", "%v") + "  br label %step\nstep:\n  %s1 = add i64 %s, %v\n"
            "  %i1 = add i64 %i, 1\n  br label %head\ndone:\n  ret i64 %s\n}\n"
            "define i64 @bits(i64 %w0) {\nentry:\n  br label %head\n"
            + ir_text.loop_head("head", "body", "entry", [("w", "i64", "%w0", "%w1"), ("c", "i64", "0", "%c1")],
                                "zero = icmp eq i64 %w, 0", "done", exit_on=True)
            + "  %wm = sub i64 %w, 1\n  %w1 = and i64 %w, %wm\n  %c1 = add i64 %c, 1\n  br label %head\n"
            "done:\n  ret i64 %c\n}\n")
    fns = codegen.compile_host_helpers(text, {"sum": ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64),
                                              "bits": ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)})
    rng = np.random.default_rng(55)
    for n in (0, 1, 7, 100, 101, 1000):
        x = rng.integers(-2**40, 2**40, size=n)
        assert fns["sum"](x.ctypes.data, n) == int(x.sum())
    for w in [0, 1, -1, 2**63 - 1, *rng.integers(-2**63, 2**63 - 1, size=50).tolist()]:
        assert fns["bits"](w) == bin(w & (2**64 - 1)).count("1")


def test_spmv_masked_sddmm_ir_written_one_way():
    """The SpMV / SpMM / CSC scatter, masked and SDDMM kernels are written through ir_text (the IR writer, and
    ``fill`` for the flat loop's and the masked sum driver's marked text): no ``str.format`` template, no
    ``.replace`` of a marker; the masked SpGEMM, kept, sum and count kernels are one definition's modes."""
    import inspect
    import re

    from splyce.native import masked, masked_sum, masked_sum_checked, sddmm, spmv, spmv_flat, spmv_rows, spmv_scatter

    for module in (masked, masked_sum, masked_sum_checked, sddmm, spmv, spmv_flat, spmv_rows, spmv_scatter):
        source = inspect.getsource(module)
        assert ".format(" not in source and not re.search(r"\.replace\(\s*\"\{", source), module.__name__
    value = np.dtype(np.float64)
    for mode in ("scipy", "kept", "sum", "count"):
        text = masked.masked_ir("k", value, (32,) * 6, mode)
        assert text.startswith("define i64 @k(") and text.count("define") == 1
