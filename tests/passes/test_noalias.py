"""passes/noalias.py: buffer arguments marked ``noalias`` where the kernel writes no input, aligned temporaries
derived from their malloc; kernels with a Splyce fast lane left exactly as they were."""

import numpy as np
import pytest
import scipy.sparse as sps
from mlir import ir

import splyce
from splyce.backend import compiler
from splyce.bench.paper_kernels import KERNELS
from splyce.passes import flatten_elementwise, noalias


def _definition(llvm_text: str, name: str) -> str:
    return next(line for line in llvm_text.splitlines() if line.startswith("define") and f"@{name}(" in line)


def _matrix(n=300, density=0.03, seed=0):
    return sps.random_array((n, n), density=density, format="csr", rng=np.random.default_rng(seed))


def test_spmm_buffers_are_noalias_and_results_unchanged():
    """``a @ X`` with 16 columns on the MLIR kernel: the loops' function takes every buffer ``noalias`` (the
    row of the result then stays in registers), and the result is scipy's."""
    a, x = _matrix(), np.random.default_rng(1).random((300, 16))
    f = splyce.jit(lambda a, x: a @ x, library=False, threads=1)   # noalias: kernels not split (compiler._noalias_plan)
    llvm = f.lower(a, x).as_text("llvm")
    header = _definition(llvm, "_internal_kernel")
    # the three CSR buffers, X and the result: each aligned pointer noalias
    assert header.count("ptr noalias") == 5
    np.testing.assert_allclose(f(a, x), a @ x, rtol=1e-13)
    out = np.ones((300, 16))
    np.testing.assert_allclose(f.accumulate(out, a, x), 1 + a @ x, rtol=1e-13)


def test_aligned_temporaries_are_offsets_from_their_malloc():
    """``a.T @ (a @ x)``: the intermediate vector's aligned pointer is computed from its malloc, with no
    ``inttoptr`` left (alias analysis then knows it is a fresh buffer)."""
    a, x = _matrix(), np.random.default_rng(2).random(300)
    f = splyce.jit(lambda a, x: a.T @ (a @ x), library=False)
    llvm = f.lower(a, x).as_text("llvm")
    assert "malloc" in llvm and "inttoptr" not in llvm
    assert "ptr noalias" in _definition(llvm, "kernel")
    np.testing.assert_allclose(f(a, x), a.T @ (a @ x), rtol=1e-12)


def test_two_operands_sharing_buffers_are_still_correct():
    """``a * a`` and ``a @ a``: one tensor passed twice, read only; noalias allows it and results hold."""
    a = _matrix(seed=3)
    t = splyce.asarray(a)
    for fun, want in ((lambda p, q: p * q, a.multiply(a)), (lambda p, q: p @ q, a @ a)):
        f = splyce.jit(fun, library=False, vectorize=False)
        got = f(t, t)
        assert abs(sps.csr_array(got) - want).max() <= 1e-12 * abs(want).max()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_fast_lane_kernels_keep_their_machine_code(name, monkeypatch):
    """K1-K5 run a Splyce fast lane: the noalias pass leaves them as they were (it made K1 4 % slower), and
    they hold no dense elementwise loop to flatten, so their assembly is byte for byte the one compiled with
    both switched off (as before either existed)."""
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.2, seed=2)
    low = splyce.jit(spec.fun).lower(*ops)
    assert any(d.vectorized for d in low.decisions)
    asm, llvm = low.as_text("asm"), low.as_text("llvm")
    assert "noalias %" not in llvm.replace("noalias noundef ptr @", "")
    monkeypatch.setattr(compiler, "_noalias_plan", lambda low, module: None)
    monkeypatch.setattr(flatten_elementwise, "flatten_elementwise", lambda module: 0)
    off = splyce.jit(spec.fun).lower(*ops)
    assert off.as_text("asm") == asm


_ENTRY_WRITES_INPUT = """
func.func @kernel(%in: memref<?xf64>, %out: memref<4xf64>) -> memref<4xf64> {
  %c0 = arith.constant 0 : index
  %v = memref.load %out[%c0] : memref<4xf64>
  %s = memref.subview %in[1] [2] [1] : memref<?xf64> to memref<2xf64, strided<[1], offset: 1>>
  memref.store %v, %s[%c0] : memref<2xf64, strided<[1], offset: 1>>
  return %out : memref<4xf64>
}
"""

_ENTRY_WRITES_OUTPUT_IN_A_LOOP = """
func.func @kernel(%in: memref<?xf64>, %out: memref<4xf64>) -> memref<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%b = %out) -> (memref<4xf64>) {
    %v = memref.load %in[%i] : memref<?xf64>
    memref.store %v, %b[%i] : memref<4xf64>
    scf.yield %b : memref<4xf64>
  }
  return %r : memref<4xf64>
}
"""

_CALLEE_GIVEN_ONE_BUFFER_TWICE = """
func.func private @copy(%src: memref<4xf64>, %dst: memref<4xf64>) {
  memref.copy %src, %dst : memref<4xf64> to memref<4xf64>
  return
}
func.func @kernel(%in: memref<4xf64>, %out: memref<4xf64>) -> memref<4xf64> {
  %t = memref.alloc() : memref<4xf64>
  func.call @copy(%t, %t) : (memref<4xf64>, memref<4xf64>) -> ()
  func.call @copy(%in, %out) : (memref<4xf64>, memref<4xf64>) -> ()
  return %out : memref<4xf64>
}
"""


@pytest.mark.parametrize("text, applies, reason", [
    (_ENTRY_WRITES_INPUT, False, "writes its input"),
    (_ENTRY_WRITES_OUTPUT_IN_A_LOOP, True, ""),
    (_CALLEE_GIVEN_ONE_BUFFER_TWICE, False, "also given as another argument"),
])
def test_the_write_check(text, applies, reason):
    """A kernel writing an input (through a view), or handing a function one buffer twice where it writes
    it, is left alone; writes to the output through loop-carried values are followed to the output."""
    with ir.Context(), ir.Location.unknown():
        plan = noalias.analyze(ir.Module.parse(text), "kernel", 1)
    assert plan.applies == applies
    assert reason in plan.reason


def test_the_marks_land_on_aligned_pointers_only():
    """After MemRefToLLVM a memref is (allocated, aligned, offset, sizes, strides): only the aligned pointer
    is marked, on the entry and on the function it calls."""
    from splyce.passes import pipeline

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_ENTRY_WRITES_OUTPUT_IN_A_LOOP)
        plan = noalias.analyze(module, "kernel", 1)
        pipeline.run_passes(module, ("convert-scf-to-cf", "convert-to-llvm", "reconcile-unrealized-casts"))
        assert noalias.mark_noalias(module, plan) == 2
        text = str(module)
    header = next(line for line in text.splitlines() if "llvm.func @kernel(" in line)
    args = header[header.index("(") + 1:].split("%arg")[1:]
    marked = [k for k, a in enumerate(args) if "llvm.noalias" in a]
    assert marked == [1, 6]   # memref<?xf64>: args 0-4, its aligned pointer 1; memref<4xf64>: 5-9, aligned 6


def test_dense_elementwise_runs_as_one_flat_loop():
    """``max(y, 0)`` over a 1000 x 16 array: one flat loop over the 16000 elements (vector loads, no gathers;
    LLVM vectorized the row loop through gathers before), the same bits as NumPy; an output read back
    (``a @ x`` then the elementwise op in one kernel) too."""
    y = np.random.default_rng(4).random((1000, 16)) - 0.5
    f = splyce.jit(lambda y: np.maximum(y, 0))
    low = f.lower(y)
    assert "gather" not in low.as_text("llvm") and "scatter" not in low.as_text("llvm")
    assert np.maximum(y, 0).tobytes() == f(y).tobytes()
    a, x = _matrix(1000, 0.01), np.random.default_rng(5).random((1000, 16))
    g = splyce.jit(lambda a, x: np.maximum(a @ x, 0.5))
    np.testing.assert_allclose(g(a, x), np.maximum(a @ x, 0.5), rtol=1e-13)


_GENERIC = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
func.func @kernel(%a: memref<40x16xf64>, %b: memref<16xf64>, %c: memref<16x40xf64>,
                  %s: memref<40x16xf64, strided<[32, 1]>>, %out: memref<40x16xf64>) {
  linalg.generic {indexing_maps = [%s, #id], iterator_types = ["parallel", "parallel"]}
      ins(%A : %TA) outs(%out : memref<40x16xf64>) {
  ^bb0(%x: f64, %y: f64):
    %z = arith.addf %x, %y : f64
    linalg.yield %z : f64
  }
  return
}
"""


@pytest.mark.parametrize("map_, operand, flat", [
    ("#id", "%a : memref<40x16xf64>", 1),                                   # elementwise, contiguous
    ("#row", "%b : memref<16xf64>", 0),                                     # a broadcast operand
    ("#t", "%c : memref<16x40xf64>", 0),                                    # a transposed read
    ("#id", "%s : memref<40x16xf64, strided<[32, 1]>>", 0),                 # not contiguous
])
def test_which_generics_are_flattened(map_, operand, flat):
    """Only an elementwise generic over contiguous buffers of one shape becomes one flat loop; the rewritten
    module verifies."""
    name, type_ = operand.split(" : ")
    text = _GENERIC.replace("[%s, #id]", f"[{map_}, #id]").replace("%A : %TA", f"{name} : {type_}")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert flatten_elementwise.flatten_elementwise(module) == flat
        module.operation.verify()
        if flat:
            assert "memref.collapse_shape" in str(module) and "memref<640xf64>" in str(module)


@pytest.mark.parametrize("fun, shapes", [
    (lambda y, b: y + b[None, :], ((40, 16), (16,))),
    (lambda y: y.T * 2.0, ((16, 40),)),
    (lambda y, z: np.maximum(y, z) - y, ((40, 16), (40, 16))),
])
def test_elementwise_results_hold(fun, shapes):
    rng = np.random.default_rng(6)
    arrays = [rng.random(shape) - 0.5 for shape in shapes]
    np.testing.assert_array_equal(splyce.jit(fun)(*arrays), fun(*arrays))
