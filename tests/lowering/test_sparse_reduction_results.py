"""Sparse results of contractions with a reduction (SpGEMM CSR x CSR -> CSR, masked products): the
sparsifier's expanded-access workspace has i1 flags, which MLIR 22's MemRefToLLVM aborts on; splyce widens
them to i8 (passes/widen_i1.py). Kernels run in a child process, so an abort fails the test instead of
killing pytest; results are compared with scipy.sparse in this process."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sps
from mlir import ir

from filecheck import check_in_order
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.lowering.to_mlir import LoweringError
from splyce.passes.widen_i1 import widen_i1_memrefs

# The child computes each case with the Splyce pass (strict math) and with the plain sparsifier, and writes
# both results' (indptr, indices, data) to an .npz file.
CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import scipy.sparse as sps
    import splyce

    cases = np.load(sys.argv[1])
    out = {}
    # Gustavson order (i, k, j): the reduction over k runs outside the output's j loop, so the sparsifier
    # accumulates each row in its expanded-access workspace (the i1 "filled" flags widened to i8)
    spgemm = {v: splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, out_format="sparse", order="ikj"),
                            out_format="sparse", vectorize=v) for v in (True, False)}
    masked = {v: splyce.jit(lambda a: (a @ a) * a, out_format="sparse", vectorize=v) for v in (True, False)}
    rowsum = {v: splyce.jit(lambda a: a.sum(axis=1), out_format="sparse", vectorize=v) for v in (True, False)}
    # the product kept sparse, then intersected with a (where the Splyce pass builds a fast lane)
    masked_sparse = {v: splyce.jit(lambda a: splyce.einsum("ik,kj->ij", a, a, out_format="sparse", order="ikj") * a,
                                   out_format="sparse", vectorize=v) for v in (True, False)}
    for name in sorted({k.split(":")[0] for k in cases.files}):
        a = sps.csr_array((cases[name + ":data"], cases[name + ":indices"], cases[name + ":indptr"]),
                          shape=tuple(cases[name + ":shape"]))
        b = sps.csr_array((cases[name + ":bdata"], cases[name + ":bindices"], cases[name + ":bindptr"]),
                          shape=tuple(cases[name + ":bshape"]))
        low = spgemm[True].lower(a, b)
        out[name + ":workspace"] = np.array([low.as_text("scf").count("xi1>"), low.as_text("splyce").count("xi1>")])
        for v in (True, False):
            results = {"spgemm": spgemm[v](a, b)}
            if a.shape[0] == a.shape[1]:
                results["masked"] = masked[v](a)
                results["masked_sparse"] = masked_sparse[v](a)
            vec = rowsum[v](a)
            key = f"{name}:rowsum:{int(v)}"
            out[key + ":type"] = np.array(type(vec).__name__)
            out[key + ":indices"] = vec.coords()[0]
            out[key + ":data"] = vec.to_numpy()[vec.coords()[0]]
            for kind, r in results.items():
                key = f"{name}:{kind}:{int(v)}"
                out[key + ":type"] = np.array(type(r).__name__)
                out[key + ":indptr"], out[key + ":indices"], out[key + ":data"] = r.indptr, r.indices, r.data
    np.savez(sys.argv[2], **out)
""")


def _random(shape, density, dtype, seed, empty_rows=()):
    a = sps.random_array(shape, density=density, format="csr", dtype=dtype, random_state=seed)
    a = a.tolil()
    for r in empty_rows:
        a[r, :] = 0
    a = a.tocsr()
    a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
    return a


CASES = {   # few shapes and dtypes: each is compiled once per kernel in the child
    "f64": lambda: (_random((20, 20), 0.15, np.float64, 1), _random((20, 20), 0.15, np.float64, 2)),
    "f32": lambda: (_random((20, 20), 0.2, np.float32, 3), _random((20, 20), 0.2, np.float32, 4)),
    "empty rows": lambda: (_random((20, 20), 0.2, np.float64, 7, empty_rows=(0, 5, 6, 19)),
                           _random((20, 20), 0.2, np.float64, 8, empty_rows=(3, 4))),
    "empty matrices": lambda: (sps.csr_array((20, 20), dtype=np.float64), sps.csr_array((20, 20), dtype=np.float64)),
    "rectangular, long rows": lambda: (_random((8, 64), 0.5, np.float64, 5), _random((64, 8), 0.5, np.float64, 6)),
}


@pytest.fixture(scope="module")
def child_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spgemm")
    arrays, operands = {}, {}
    for name, make in CASES.items():
        a, b = make()
        operands[name] = (a, b)
        for prefix, m in (("", a), ("b", b)):
            arrays[f"{name}:{prefix}data"], arrays[f"{name}:{prefix}indices"] = m.data, m.indices
            arrays[f"{name}:{prefix}indptr"], arrays[f"{name}:{prefix}shape"] = m.indptr, np.array(m.shape)
    np.savez(folder / "in.npz", **arrays)
    run = subprocess.run([sys.executable, "-c", CHILD, str(folder / "in.npz"), str(folder / "out.npz")],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"child exited with {run.returncode} (negative: killed by a signal)\n{run.stderr}"
    with np.load(folder / "out.npz") as out:
        return operands, {k: out[k] for k in out.files}


def _check(out, key, ref, dtype):
    ref = ref.tocsr()
    ref.sort_indices()
    assert str(out[key + ":type"]) == "csr_array"
    assert out[key + ":indices"].dtype == np.int32 and out[key + ":indptr"].dtype == np.int32
    np.testing.assert_array_equal(out[key + ":indptr"], ref.indptr)      # same pattern: scipy drops no
    np.testing.assert_array_equal(out[key + ":indices"], ref.indices)    # computed zeros from products
    assert out[key + ":data"].dtype == dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[key + ":data"], ref.data, rtol=rtol)


@pytest.mark.parametrize("name", list(CASES))
def test_spgemm_sparse_result_matches_scipy(child_results, name):
    operands, out = child_results
    before, after = out[name + ":workspace"]
    assert before > 0 and after == 0    # the kernel used the i1 workspace, and none is left after widening
    a, b = operands[name]
    for vectorize in (1, 0):
        _check(out, f"{name}:spgemm:{vectorize}", a @ b, a.dtype)


@pytest.mark.parametrize("name", [n for n in CASES if n != "rectangular, long rows"])
def test_masked_product_sparse_result_matches_scipy(child_results, name):
    """(a @ a) * a, the product dense or kept sparse (a reduction into a sparse intermediate)."""
    operands, out = child_results
    a, _ = operands[name]
    # scipy's multiply keeps the pattern of (a @ a) where a is nonzero; the kernel writes the same entries
    ref = (a @ a).multiply(a).tocsr()
    for kind in ("masked", "masked_sparse"):
        for vectorize in (1, 0):
            _check(out, f"{name}:{kind}:{vectorize}", ref, a.dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_row_sums_into_a_sparse_vector_match_scipy(child_results, name):
    """A reduction into a compressed vector: one entry per row that stores a value."""
    operands, out = child_results
    a, _ = operands[name]
    rows = np.flatnonzero(np.diff(a.indptr))
    for vectorize in (1, 0):
        key = f"{name}:rowsum:{vectorize}"
        assert str(out[key + ":type"]) == "SparseTensor"
        np.testing.assert_array_equal(out[key + ":indices"], rows)
        np.testing.assert_allclose(out[key + ":data"], a.sum(axis=1)[rows], rtol=1e-5 if a.dtype == np.float32
                                   else 1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_splyce_pass_is_bit_identical_to_the_plain_sparsifier(child_results, name):
    _, out = child_results
    for kind in ("spgemm", "masked", "masked_sparse", "rowsum"):
        if f"{name}:{kind}:1:data" in out:
            for part in ("indptr", "indices", "data"):
                if f"{name}:{kind}:1:{part}" in out:
                    np.testing.assert_array_equal(out[f"{name}:{kind}:1:{part}"], out[f"{name}:{kind}:0:{part}"])


# ----------------------------------------------------------------------------------- the rewrite itself
SPGEMM = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,k,j) -> (i,k)>, affine_map<(i,k,j) -> (k,j)>, affine_map<(i,k,j) -> (i,j)>],
  iterator_types = ["parallel", "reduction", "parallel"] }
func.func @kernel(%b: tensor<8x8xf64, #CSR>, %c: tensor<8x8xf64, #CSR>) -> tensor<8x8xf64, #CSR> {
  %a = tensor.empty() : tensor<8x8xf64, #CSR>
  %r = linalg.generic #trait ins(%b, %c : tensor<8x8xf64, #CSR>, tensor<8x8xf64, #CSR>) outs(%a : tensor<8x8xf64, #CSR>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %s = arith.addf %z, %m : f64
    linalg.yield %s : f64
  } -> tensor<8x8xf64, #CSR>
  return %r : tensor<8x8xf64, #CSR>
}
"""


def test_workspace_flags_widened_to_i8():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(SPGEMM)
        run_passes(module, SPARSIFY)
        before = str(module)
        check_in_order(before, [re.compile(r"(%\w+) = memref.alloc\(\) : memref<8xi1>"),
                                "linalg.fill ins(%false : i1)", "memref<8xi1>"])
        assert widen_i1_memrefs(module) == 1
        text = str(module)
        assert "xi1>" not in text
        check_in_order(text, [
            re.compile(r"(%\w+) = memref\.alloc\(\) : memref<8xi8>"),
            re.compile(r"arith\.extui %false : i1 to i8"), re.compile(r"linalg\.fill ins\(%\w+ : i8\)"),
            re.compile(r"memref\.load %alloc\w*\[%\w+\] : memref<8xi8>"), "arith.trunci",
            re.compile(r"arith\.extui %true : i1 to i8"), re.compile(r"memref\.store %\w+, %alloc\w*\[%\w+\] : memref<8xi8>"),
            re.compile(r"arith\.extui %false : i1 to i8"), re.compile(r"memref\.store %\w+, %alloc\w*\[%\w+\] : memref<8xi8>"),
            re.compile(r"memref\.dealloc %alloc\w* : memref<8xi8>"),
        ])


def test_views_of_an_i1_buffer_are_widened():
    text = """
    func.func @f(%n: index, %i: index, %v: i1) -> i1 {
      %buf = memref.alloca(%n) : memref<?xi1>
      %view = memref.subview %buf[1] [4] [1] : memref<?xi1> to memref<4xi1, strided<[1], offset: 1>>
      %cast = memref.cast %view : memref<4xi1, strided<[1], offset: 1>> to memref<?xi1, strided<[1], offset: ?>>
      memref.store %v, %cast[%i] : memref<?xi1, strided<[1], offset: ?>>
      %r = memref.load %view[%i] : memref<4xi1, strided<[1], offset: 1>>
      return %r : i1
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert widen_i1_memrefs(module) == 3
        check_in_order(str(module), [
            "memref.alloca(%arg0) : memref<?xi8>",
            "memref.subview", "memref<?xi8> to memref<4xi8, strided<[1], offset: 1>>",
            "memref.cast", "to memref<?xi8, strided<[1], offset: ?>>",
            "arith.extui %arg2 : i1 to i8", "memref.store",
            "memref.load", "arith.trunci", "return"])


def test_an_i1_memref_the_rewrite_does_not_handle_is_refused_by_name():
    text = """
    func.func @f(%m: memref<?xi1>, %i: index) -> i1 {
      %r = memref.load %m[%i] : memref<?xi1>
      return %r : i1
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        with pytest.raises(LoweringError, match=r"^internal error: func\.func uses a memref of i1, which MLIR 22's "
                                                 r"MemRefToLLVM cannot lower \(it aborts\); splyce widens i1 "
                                                 r"buffers to i8 but does not handle this op:"):
            widen_i1_memrefs(module)


def test_a_user_of_a_widened_buffer_the_rewrite_does_not_know_is_refused():
    text = """
    func.func @f(%i: index) -> vector<4xi1> {
      %buf = memref.alloc() : memref<8xi1>
      %v = vector.load %buf[%i] : memref<8xi1>, vector<4xi1>
      return %v : vector<4xi1>
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        with pytest.raises(LoweringError, match="^internal error: widening i1 memrefs to i8 left an invalid module"):
            widen_i1_memrefs(module)
