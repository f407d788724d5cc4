"""The union fast lane (passes/union_match.py, passes/union_lane.py): sparse add / subtract into a dense
output. IR checks on the stage-1 IR of a CSR + CSR kernel; execution bit-identical to the plain sparsifier
(Inf, NaN, -0.0; f32/f64 x 32/64-bit indices) and equal to NumPy, in a child process (MLIR may abort)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from filecheck import check_in_order
from mlir import ir
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.options import Options
from splyce.passes.splyce_pass import run_splyce_pass

ADD = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#trait = { indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>],
  iterator_types = ["parallel", "parallel"] }
func.func @add(%b: tensor<8x16xf64, #CSR>, %c: tensor<8x16xf64, #CSR>, %a: tensor<8x16xf64> {bufferization.writable = true}) -> tensor<8x16xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x16xf64, #CSR>, tensor<8x16xf64, #CSR>) outs(%a : tensor<8x16xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.addf %x, %y : f64
    linalg.yield %m : f64
  } -> tensor<8x16xf64>
  return %r : tensor<8x16xf64>
}
"""


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def _stage1(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    run_passes(module, SPARSIFY)
    return module


def test_union_fast_lane_before_the_scalar_loop_and_tails(ctx):
    module = _stage1(ADD)
    (decision,) = run_splyce_pass(module, Options(phases=5, union=True))
    assert decision.vectorized and decision.reason == "union fast lane: dense-output merge f64 index-crd n=4", decision
    text = str(module)
    spans = check_in_order(text, [
        "scf.while",
        re.compile(r"arith\.cmpi uge, %\w+, %c4\w* : index"),        # n coordinates left on both sides
        "scf.condition",
        re.compile(r"(%\w+) = vector\.load %\w+\[%\w+\] : memref<\?x\w+>, vector<4x\w+>"),   # B's coordinates
        re.compile(r"(%\w+) = vector\.load %\w+\[%\w+\] : memref<\?x\w+>, vector<4x\w+>"),   # C's coordinates
        "vector.shuffle",                                              # all-pairs compare by rotation
        re.compile(r"arith\.cmpi ule, %\w+, %\w+ : vector<4x"),        # B lanes up to the pivot
        re.compile(r"arith\.cmpi ule, %\w+, %\w+ : vector<4x"),        # C lanes up to the pivot
        "arith.addf",                                                   # both: b + (C's matching value)
        *["memref.load"] * 8,                                           # the old values, lane by lane per side
        *["memref.store"] * 8,                                          # every lane stored, C's side first
        "memref.prefetch",                                              # the output elements a few steps ahead
        "vector.reduction <add>", "vector.reduction <add>",            # advance past the pivot
        "} attributes {splyce.fast_lane}",
        "scf.while",                                                    # the sparsifier's loop, the epilogue
        "scf.if", "} else {", "scf.if", "} else {", "scf.if",
        "scf.for", "scf.for",                                          # its tails
    ])
    crd_b, crd_c = (re.match(r"(%\w+)", text[start:end].strip()).group(1) for start, end in spans[3:5])
    true = re.search(r"(%\w+) = arith\.constant dense<true> : vector<4xi1>", text).group(1)
    lane = text[spans[3][0]:spans[26][1]]
    # every lane reads and writes (no mask: AVX2 has no scatter, a masked one is a branch per lane), by scalar
    # accesses at the lane's coordinate (gathers and scatters are microcoded on AMD Zen 4), C's side written
    # first so the new values of B's lanes land last
    names = {side: set(re.findall(r"%(\w+) = vector\.extract " + re.escape(crd) + r"\[[0-3]\] : index from vector<4xindex>",
                                  lane)) for side, crd in (("b", crd_b), ("c", crd_c))}
    assert len(names["b"]) >= 4 and len(names["c"]) >= 4, names
    side_of = {name: side for side, group in names.items() for name in group}
    loads = re.findall(r"memref\.load %\w+\[%\w+, %(\w+)\] : memref<8x16xf64>", lane)
    stores = re.findall(r"memref\.store %\w+, %\w+\[%\w+, %(\w+)\] : memref<8x16xf64>", lane)
    assert [side_of.get(x) for x in loads] == ["b"] * 4 + ["c"] * 4, loads
    assert [side_of.get(x) for x in stores] == ["c"] * 4 + ["b"] * 4, stores
    assert lane.rindex("memref.load %") < lane.index("memref.store %")
    assert "vector.gather" not in lane and "vector.scatter" not in lane and true
    assert lane.count("memref.prefetch") == 8


def test_union_off_declines_with_reason(ctx):
    module = _stage1(ADD)
    before = str(module)
    (decision,) = run_splyce_pass(module, Options(phases=5, union=False))
    assert not decision.vectorized
    assert decision.reason == ("union (disjunctive) coiteration: the else-region handles unmatched coordinates; "
                               "union fast lane off (union=False)")
    assert str(module) == before


def test_union_default_leaves_dense_outputs_scalar(ctx):
    module = _stage1(ADD)
    before = str(module)
    (decision,) = run_splyce_pass(module, Options(phases=5))     # union=None: CSR outputs only
    assert not decision.vectorized
    assert decision.reason == ("union (disjunctive) coiteration: the else-region handles unmatched coordinates; "
                               "union fast lane: a dense output (on with union=True: slower on short rows)")
    assert str(module) == before


def test_union_row_sum_takes_the_reduction_lane():
    """A row sum of a union is a union loop carrying one scalar: the reduction lane (passes/union_reduce.py),
    strict, its additions in the scalar loop's order."""
    import splyce
    from splyce.tracer.tracer import add

    a = splyce.asarray(np.eye(6) * 2.0, format=splyce.CSR)
    f = splyce.jit(lambda x, y: add(x, y).sum(axis=1), union=True)
    decisions = f.lower(a, a).decisions
    assert [d.vectorized for d in decisions] == [True], decisions
    assert decisions[0].reason.endswith("strict: each step's terms ranked by coordinate and added in that order")
    assert np.array_equal(f(a, a), np.full(6, 4.0))


@pytest.mark.parametrize("value", [1, 0, "yes"])
def test_invalid_union_option(value):
    import splyce

    with pytest.raises(TypeError, match="union must be a bool or None"):
        splyce.jit(lambda a, b: a + b, union=value)


CHILD = r"""
import sys
import numpy as np, scipy.sparse as sps
import splyce
from splyce.tracer.tracer import add, maximum, subtract

def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    return a.shape == b.shape and bool(np.all((a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))))

dtype, width = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(width + len(dtype))
rows, cols = 12, 200
specials = np.array([np.inf, -np.inf, np.nan, -0.0], dtype)
ops, dense = [], []
for density in (0.3, 0.1):
    mask = rng.random((rows, cols)) < density
    mask[0] = False                       # an empty fiber on both sides
    mask[1, :] = density > 0.2            # a full fiber against a sparse one
    rr, cc = np.nonzero(mask)
    values = rng.uniform(-2, 2, len(rr)).astype(dtype)
    pick = rng.random(len(rr)) < 0.1
    values[pick] = rng.choice(specials, int(pick.sum()))
    fmt = splyce.CSR.with_widths(width, width)
    ops.append(splyce.asarray(sps.csr_array((values, (rr, cc)), shape=(rows, cols)), format=fmt))
    d = np.zeros((rows, cols), dtype)
    d[rr, cc] = values
    dense.append(d)
checked = 0
for name, fun, ref in (("add", lambda x, y: add(x, y, out_format="dense"), dense[0] + dense[1]),
                       ("subtract", lambda x, y: subtract(x, y, out_format="dense"), dense[0] - dense[1]),
                       ("maximum", lambda x, y: maximum(x, y, out_format="dense"), np.maximum(dense[0], dense[1]))):
    for args, want_ref in ((ops, ref), (ops[::-1], dense[1] - dense[0] if name == "subtract" else ref)):
        want = splyce.jit(fun, vectorize=False)(*args)
        assert np.isnan(want).any() and np.isinf(want).any()
        np.testing.assert_array_equal(np.isnan(want), np.isnan(want_ref))
        np.testing.assert_allclose(np.nan_to_num(want), np.nan_to_num(want_ref), rtol=1e-6)
        for n in (2, 4, 8):
            f = splyce.jit(fun, union=True, vector_width=n)
            assert [d.vectorized for d in f.lower(*args).decisions] == [True]
            assert same(f(*args), want), (name, n)
            checked += 1
prof = splyce.profile(splyce.jit(lambda x, y: add(x, y, out_format="dense"), union=True), *ops)
assert prof.fast_lane > 0 and prof.epilogue > 0, prof
assert prof.total == sum(op.nnz for op in ops), (prof, [op.nnz for op in ops])  # tails counted too
print("checked", checked)
"""


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_union_lane_bit_identical_to_plain_sparsifier(dtype, width):
    proc = subprocess.run([sys.executable, "-c", CHILD, dtype, str(width)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "checked 18" in proc.stdout


_SPECIALS = [np.inf, -np.inf, np.nan, -0.0, 0.0, 5e-324]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), rows=st.integers(1, 5), cols=st.integers(1, 90),
       densities=st.tuples(st.sampled_from([0.05, 0.3, 0.8, 1.0]), st.sampled_from([0.05, 0.3, 0.8, 1.0])),
       dtype=st.sampled_from(["float32", "float64"]), width=st.sampled_from([32, 64]),
       n=st.sampled_from([2, 4, 8]), op=st.sampled_from(["add", "subtract", "maximum"]))
def test_union_lane_bit_identical_property(seed, rows, cols, densities, dtype, width, n, op):
    """Random shapes, densities, Inf / NaN / -0.0 / denormals: the union lane's dense result has the plain
    sparsifier's bits (NaN positions compared, as LLVM leaves NaN payloads unspecified on both sides)."""
    import scipy.sparse as sps

    import splyce
    from splyce.tracer import tracer

    rng = np.random.default_rng(seed)
    ops = []
    for density in densities:
        mask = rng.random((rows, cols)) < density
        values = rng.uniform(-2, 2, int(mask.sum())).astype(dtype)
        pick = rng.random(values.size) < 0.2
        values[pick] = rng.choice(np.array(_SPECIALS, dtype), int(pick.sum()))
        rr, cc = np.nonzero(mask)
        ops.append(splyce.asarray(sps.csr_array((values, (rr, cc)), shape=(rows, cols)),
                                  format=splyce.CSR.with_widths(width, width)))
    fun = getattr(tracer, op)
    f = lambda x, y: fun(x, y, out_format="dense")  # noqa: E731
    plain = splyce.jit(f, vectorize=False)(*ops)
    jitted = splyce.jit(f, union=True, vector_width=n)
    assert [d.vectorized for d in jitted.lower(*ops).decisions] == [True]
    lane = jitted(*ops)
    assert np.array_equal(np.isnan(plain), np.isnan(lane))
    ok = ~np.isnan(plain)
    bits = np.uint64 if dtype == "float64" else np.uint32
    assert np.array_equal(plain[ok].view(bits), lane[ok].view(bits))


def test_dense_output_lane_asm_avx2():
    """AVX2 code of the dense-output lane (union=True): SIMD all-pairs compares, the output prefetched for
    writing, and no conditional branch per lane around the stores (every lane stores)."""
    import scipy.sparse as sps

    import splyce
    from splyce.tracer.tracer import add

    rng = np.random.default_rng(3)
    a, b = (splyce.asarray(sps.random_array((16, 64), density=0.3, format="csr", rng=rng)) for _ in range(2))
    fun = lambda x, y: add(x, y, out_format="dense")  # noqa: E731
    asm = splyce.jit(fun, target="avx2", union=True).lower(a, b).as_text("asm")
    assert len(re.findall(r"vpcmpeq[dq]\s+%[xy]mm", asm)) >= 2 * 4
    assert re.search(r"\bprefetch(w|t0)\b", asm)
    assert not re.search(r"vpcmpeq[dq]\s+%[xy]mm",
                         splyce.jit(fun, target="avx2", union=False).lower(a, b).as_text("asm"))
