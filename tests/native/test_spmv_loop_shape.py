"""The shape of the checked one-row SpMV kernel after LLVM's O3, which its speed relies on (measured at
parity with scipy's ``csr_matvec``, docs/kernels.md "SpMV one row at a time vs scipy"): the same loop as
scipy's, a plain chain of additions per row from +0.0 in stored order, plus one compare and one branch per
entry for the column check. Nothing clamps an index (no ``select``: a clamped column makes the gather wait
for the compare), every column is zero-extended from its i32 load straight into the address of ``x``, and
the sums never go through memory (no load of ``y``, one store per row). Deterministic: optimized IR, no
timing. Bit-identity with scipy is tested by tests/dropin/test_dropin_spmv.py."""

import re

import numpy as np
import pytest

from splyce.native import spmv
from splyce.native.codegen import CodegenOptions, host_target, optimize


def _function(text: str, name: str) -> str:
    start = text.index(f"@{name}(")
    return text[start:text.index("\n}\n", start)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_checked_rows_kernel_is_scipys_loop_plus_one_branch_per_entry(dtype):
    dtype = np.dtype(dtype)
    text, _ = spmv.spmv_objects_ir(dtype, 32, 32, "rows")
    t = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[dtype]
    module, _tm = optimize(text, host_target(), CodegenOptions(opt_level=3))
    name = f"splyce_spmv_{t}_p32_c32_r{spmv.ROWS}_checked"
    body = _function(str(module), name)
    assert " select " not in body
    # every x[col]: col a zero-extended i32 read from crd, checked against n by a branch
    x_loads = re.findall(rf"getelementptr(?: inbounds)? {t}, ptr %x, i64 (%[\w.]+)", body)
    assert x_loads
    for col in x_loads:
        (widen,) = re.findall(rf"{re.escape(col)} = (zext i32 %[\w.]+) to i64", body)
        raw = widen.split()[-1]
        assert re.search(rf"{re.escape(raw)} = load i32, ptr %[\w.]+", body)
        assert re.search(rf"icmp ugt i64 %n, {re.escape(col)}\n\s+br i1", body)
    # the sums stay in registers: a phi from +0.0 per row loop, nothing of y read
    assert re.search(rf"phi {t} \[ 0\.000000e\+00", body) or re.search(rf"phi {t} \[ %[\w.]+, %[\w.]+ \], \[ 0\.0", body)
    assert not re.search(rf"load {t}, ptr %p\d+.*; y", body)
    assert not re.search(r"= load \w+, ptr %y\b", body)
    # one multiply and one add per entry of each row loop, in that order (scipy's sum += Ax[jj] * x[Aj[jj]])
    adds = re.findall(rf"(%[\w.]+) = fadd {t} (%[\w.]+), (%[\w.]+)", body)
    assert adds and len(adds) == len(re.findall(rf"= fmul {t} ", body)) == len(x_loads)
    for new, acc, product in adds:
        assert re.search(rf"{re.escape(product)} = fmul {t} ", body)
        assert re.search(rf"{re.escape(acc)} = phi {t} ", body)
