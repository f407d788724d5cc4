"""Three- and four-way intersections (``a * b * c``, ``einsum("ij,ij,ij->i")``): the sparsifier's k-finger
``scf.while`` gets the fast lane (B's lanes compared all-pairs against every other operand's window, matched
when all have the coordinate; every cursor advanced past the minimum of the last coordinates).

IR checks run on the stage-1 IR of small linalg kernels; execution checks compare against the plain
sparsifier bit for bit (Inf, NaN, -0 included) and against NumPy, in a child process (MLIR/LLVM may abort).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from filecheck import check_in_order
from mlir import ir
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.options import Options
from splyce.passes.fast_lane import FAST_LANE_ATTR, MULTIWAY_SLOT
from splyce.passes.splyce_pass import PROFILE_COUNTERS_SYMBOL, PROFILE_SLOTS, run_splyce_pass


def _kernel(k: int, output: str) -> str:
    """``out = x0 * x1 * .. * x{k-1}`` over k CSR operands (i32 positions and coordinates): ``output`` is
    "store" (a dense 8x16 result) or "row" (``sum_j``, a dense 8-vector: the accumulating form)."""
    enc = "#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>"
    t = "tensor<8x16xf64, #CSR>"
    out_map, out_t, iters = (("(i,j)", "tensor<8x16xf64>", '"parallel", "parallel"') if output == "store" else
                             ("(i)", "tensor<8xf64>", '"parallel", "reduction"'))
    maps = ", ".join(["affine_map<(i,j) -> (i,j)>"] * k + [f"affine_map<(i,j) -> {out_map}>"])
    args = ", ".join(f"%x{i}: {t}" for i in range(k))
    names = ", ".join(f"%x{i}" for i in range(k))
    block = ", ".join(f"%v{i}: f64" for i in range(k))
    body = "    %p1 = arith.mulf %v0, %v1 : f64\n"
    for i in range(2, k):
        body += f"    %p{i} = arith.mulf %p{i - 1}, %v{i} : f64\n"
    last = f"%p{k - 1}"
    if output == "row":
        body += f"    %s = arith.addf %z, {last} : f64\n"
        last = "%s"
    return f"""
{enc}
#trait = {{ indexing_maps = [{maps}], iterator_types = [{iters}] }}
func.func @mul{k}({args}, %a: {out_t} {{bufferization.writable = true}}) -> {out_t} {{
  %r = linalg.generic #trait ins({names} : {", ".join([t] * k)}) outs(%a : {out_t}) {{
  ^bb0({block}, %z: f64):
{body}    linalg.yield {last} : f64
  }} -> {out_t}
  return %r : {out_t}
}}
"""


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def _transformed(k: int, output: str, **options):
    module = ir.Module.parse(_kernel(k, output))
    run_passes(module, SPARSIFY)
    decisions = run_splyce_pass(module, Options(**options))
    assert module.operation.verify()
    return decisions, str(module)


def _fast_lane(text: str) -> str:
    """The text of the fast-lane scf.while (from its head to its attribute)."""
    end = text.index(f"}} attributes {{{FAST_LANE_ATTR}}}")
    start = text.rindex("scf.while", 0, end)
    return text[start:end]


CRD_LOAD = re.compile(r"vector\.load %\w+\[%\w+\] : memref<\?xi32>, vector<4xi32>")
EQ = re.compile(r"arith\.cmpi eq, %(\w+), %\w+ : vector<4xi32>")
# the SIMD count of the lanes <= the pivot: the compare mask as an integer, its set bits counted
POPCOUNT = re.compile(r"vector\.bitcast %\w+ : vector<4xi1> to vector<1xi4>\n.*vector\.extract .*\n.*math\.ctpop %\w+ : i4")


def test_three_way_simd_lane(ctx):
    decisions, text = _transformed(3, "store", phases=8, vector_width=4)
    assert [d.vectorized for d in decisions] == [True]
    assert decisions[0].reason == ("three-way intersection: store f64 i32-crd n=4 config 8, leapfrogging at length "
                                  "ratio >= 16")
    lane = _fast_lane(text)
    assert "scf.if" not in lane   # branchless
    check_in_order(text, [
        # the fast lane runs while each of the three fibers has n coordinates left
        "scf.while", "arith.cmpi uge", "arith.cmpi uge", "arith.cmpi uge", "scf.condition",
        # phase 1: n coordinates of B, C and D; B against C rotated 0..3, or-ed; B against D, or-ed; and
        CRD_LOAD, CRD_LOAD, CRD_LOAD,
        EQ, "vector.shuffle", EQ, "vector.shuffle", EQ, "vector.shuffle", EQ, re.compile(r"arith\.ori .*\n.*\n.*arith\.ori"),
        EQ, "vector.shuffle", EQ, "vector.shuffle", EQ, "vector.shuffle", EQ, re.compile(r"arith\.ori .*\n.*\n.*arith\.ori"),
        re.compile(r"arith\.andi %\w+, %\w+ : vector<4xi1>"),
        # phase 2: the product in the scalar loop's order ((b * c) * d), one masked scatter
        re.compile(r"arith\.mulf %\w+, %\w+ : vector<4xf64>\n\s*%\w+ = arith\.mulf"),
        "vector.scatter",
        # phase 3: pivot = min of the three last coordinates (two compare-selects), three SIMD counts (the
        # compare mask's bits counted: popcnt)
        "arith.cmpi ult", "arith.select", "arith.cmpi ult", "arith.select", "vector.broadcast",
        POPCOUNT, POPCOUNT, POPCOUNT,
        "scf.yield", f"}} attributes {{{FAST_LANE_ATTR}}}",
        # the original three-way loop follows as the epilogue
        re.compile(r"scf\.while \(%\w+ = %\w+#0, %\w+ = %\w+#1, %\w+ = %\w+#2\)"), "scf.if"])
    # every B lane is compared with all n lanes of C and of D: 2 n vector compares, no more
    assert len(EQ.findall(lane)) == 2 * 4
    assert {m for m in EQ.findall(lane)} == {EQ.search(lane).group(1)}   # always B's coordinates on the left


def test_three_way_scalar_lane(ctx):
    decisions, text = _transformed(3, "row", phases=1, vector_width=4)
    assert decisions[0].reason.startswith("three-way intersection: K-accumulate f64 i32-crd n=4 config 1")
    lane = _fast_lane(text)
    assert "vector." not in lane and "scf.if" not in lane
    # n x n scalar compares of B against C and against D
    assert len(re.findall(r"arith\.cmpi eq, %\w+, %\w+ : i32", lane)) == 2 * 4 * 4
    # strict order: the accumulator takes select(matched, acc + term, acc) lane by lane
    assert len(re.findall(r"arith\.addf", lane)) == 4 and "reassoc" not in lane


def test_three_way_simd_sum_is_an_ordered_reduction(ctx):
    _, text = _transformed(3, "row", phases=7, vector_width=4)
    lane = _fast_lane(text)
    assert re.search(r"vector\.reduction <add>, %\w+, %\w+ : vector<4xf64> into f64\n", lane)
    assert "reassoc" not in lane
    _, text = _transformed(3, "row", phases=7, vector_width=4, fast_math=True)
    assert "fastmath<reassoc>" in _fast_lane(text)


def test_four_way(ctx):
    decisions, text = _transformed(4, "row", phases=7, vector_width=4)
    assert decisions[0].reason.startswith("four-way intersection: K-accumulate f64 i32-crd n=4 config 7")
    lane = _fast_lane(text)
    assert len(CRD_LOAD.findall(lane)) == 4 and len(EQ.findall(lane)) == 3 * 4


def test_five_operands_decline(ctx):
    decisions, text = _transformed(5, "row")
    assert [d.reason for d in decisions] == [
        "not an intersection of at most 4 operands: before-region has 5 conditions"]
    assert FAST_LANE_ATTR not in text


def test_skewed_fibers_leapfrog_instead_of_the_fast_lane(ctx):
    decisions, text = _transformed(3, "row", phases=7, gallop=16)
    assert decisions[0].reason.endswith(", leapfrogging at length ratio >= 16")
    check_in_order(text, [
        # once per fiber triple, before any loop: is the longest 16 times the shortest?
        "arith.cmpi ugt", "arith.select", "arith.cmpi ugt", "arith.select",      # longest of three
        "arith.cmpi ult", "arith.select", "arith.cmpi ult", "arith.select",      # shortest of three
        re.compile(r"arith\.muli %\w+, %c16\w* : index"), re.compile(r"arith\.cmpi uge, %\w+, %\w+ : index"),
        # skewed: a copy of the scalar loop, its step, then (all three inside) the largest coordinate and a
        # jump of each cursor behind it to the first coordinate >= it
        re.compile(r"scf\.if %\w+ -> \(index, index, index, f64\)"),
        "scf.while", "scf.if", re.compile(r"scf\.if %\w+ -> \(index, index, index\)"),
        "arith.cmpi ugt", "arith.select", "arith.cmpi ugt", "arith.select",
        re.compile(r"scf\.if %\w+ -> \(index\)"), "arith.shrui",
        re.compile(r"scf\.if %\w+ -> \(index\)"), "arith.shrui",
        re.compile(r"scf\.if %\w+ -> \(index\)"), "arith.shrui",
        re.compile(r"scf\.yield %\w+#0, %\w+#1, %\w+#2, %\w+ : index, index, index, f64"),
        # comparable: the fast lane (its condition the room test alone), then the scalar loop
        "} else {", "scf.while", "scf.condition", f"}} attributes {{{FAST_LANE_ATTR}}}", "scf.while"])
    end = text.index(f"}} attributes {{{FAST_LANE_ATTR}}}")
    fast_lane = text[text.rindex("scf.while", 0, end):end]
    assert "arith.xori" not in fast_lane and "arith.shrui" not in fast_lane


def test_no_leapfrogging_with_gallop_0(ctx):
    decisions, text = _transformed(3, "row", phases=7, gallop=0)
    assert decisions[0].reason.endswith(", no leapfrogging (gallop=0)")
    assert "arith.shrui" not in text and "arith.muli" not in text


def test_profile_counts_three_way_lane_in_its_slot(ctx):
    _, text = _transformed(3, "row", phases=7, profile=True)
    counter = r"memref\.store %\w+, %\w+\[%c{}(_\d+)?\] : memref<" + str(PROFILE_SLOTS) + "xi64>"
    check_in_order(text, [
        f"memref.get_global @{PROFILE_COUNTERS_SYMBOL}",
        re.compile(counter.format(MULTIWAY_SLOT)), f"}} attributes {{{FAST_LANE_ATTR}}}",   # three-way lane
        re.compile(counter.format(1)), "} attributes {\"Emitted from\""])                   # epilogue


def test_sparse_output_lane_runs_the_insertion_per_matched_lane():
    # a * b * c into its default sparse (CSR) result: the guarded body calls the sparsifier's insertion,
    # which cannot run speculatively: one branch on "any lane matched", then one per lane, in lane order
    import numpy as np
    import scipy.sparse as sps

    import splyce

    rng = np.random.default_rng(0)
    ops = [splyce.asarray(sps.random_array((8, 16), density=0.5, format="csr", rng=rng)) for _ in range(3)]
    lowered = splyce.jit(lambda a, b, c: a * b * c).lower(*ops)
    (decision,) = [d for d in lowered.decisions if d.vectorized]
    assert decision.reason == ("three-way intersection: sparse-output insert f64 i32-crd n=4 config 7, leapfrogging "
                               "at length ratio >= 16; phase 2: the body, with its call, under a branch per matched lane")
    lane = _fast_lane(lowered.as_text("splyce"))
    insert = re.compile(r"func\.call @_insert_\w+\((%[\w#]+)")
    check_in_order(lane, [CRD_LOAD, CRD_LOAD, CRD_LOAD, re.compile(r"vector\.reduction <or>, %\w+ : vector<4xi1> into i1"),
                          re.compile(r"scf\.if %\w+ -> \(memref"),
                          *[p for _ in range(4) for p in (re.compile(r"scf\.if %\w+ -> \(memref"), insert)]])
    assert len(insert.findall(lane)) == 4
    # lane i + 1 inserts into the buffers lane i's insertion returned
    firsts = insert.findall(lane)
    assert firsts[0].startswith("%arg") and all(re.fullmatch(r"%\d+#0", f) for f in firsts[1:]), firsts
    assert len(set(firsts)) == 4


# ------------------------------------------------------------------------------------- execution
CHILD = r"""
import sys
import numpy as np, scipy.sparse as sps
import splyce

def same(a, b):
    if sps.issparse(a):   # the same stored structure, in the same order, and the same values
        return sps.issparse(b) and a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and \
            np.array_equal(a.indices, b.indices) and same(a.data, b.data)
    a, b = np.asarray(a), np.asarray(b)
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    return a.shape == b.shape and bool(np.all((a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))))

def dense_of(x):
    return x.toarray() if sps.issparse(x) else np.asarray(x)

dtype, width = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(width + len(dtype))
rows, cols = 12, 300
fmt = splyce.CSR.with_widths(width, width)
specials = np.array([np.inf, -np.inf, np.nan, -0.0], dtype)
ops, dense, stored = [], [], []
for k in range(4):
    # rows of different densities (empty, a few, most) so fibers end at different times and
    # the epilogue finishes each; one row where all operands are full (every lane matched)
    # rows 9..11 skewed: one operand's fiber 30-100 times shorter than the others' (leapfrogging)
    density = [0, 0.05, 0.3, 0.5, 0.7, 0.9, 0.6, 0.4, 1.0] + [[0.01, 0.9, 0.6, 0.8][k], [0.7, 0.7, 0.01, 0.5][k],
                                                        [0.5, 0.02, 1.0, 0.9][k]]
    m = rng.random((rows, cols)) < np.array(density)[:, None]
    rr, cc = np.nonzero(m)
    values = rng.uniform(-2, 2, len(rr)).astype(dtype)
    pick = rng.random(len(rr)) < 0.1
    values[pick] = rng.choice(specials, int(pick.sum()))
    ops.append(splyce.asarray(sps.csr_array((values, (rr, cc)), shape=(rows, cols)), format=fmt))
    d = np.zeros((rows, cols), dtype)
    d[rr, cc] = values
    dense.append(d)
    stored.append(m)
with np.errstate(all="ignore"):
    prod3 = np.where(stored[0] & stored[1] & stored[2], dense[0] * dense[1] * dense[2], 0).astype(dtype)
    prod4 = np.where(stored[0] & stored[1] & stored[2] & stored[3],
                     dense[0] * dense[1] * dense[2] * dense[3], 0).astype(dtype)
prod2 = np.where(stored[0] & stored[1], dense[0] * dense[1], 0).astype(dtype)
funs = {
    "a*b*c": (lambda a, b, c: a * b * c, 3, dict(out_format="dense"), prod3),
    "a*b*c sparse": (lambda a, b, c: a * b * c, 3, {}, prod3),
    "a*b sparse": (lambda a, b: a * b, 2, {}, prod2),
    "row sums": (lambda a, b, c: splyce.einsum("ij,ij,ij->i", a, b, c), 3, {}, prod3.sum(axis=1)),
    "total": (lambda a, b, c: splyce.einsum("ij,ij,ij->", a, b, c), 3, {}, prod3.sum()),
    "four-way row sums": (lambda a, b, c, d: splyce.einsum("ij,ij,ij,ij->i", a, b, c, d), 4, {}, prod4.sum(axis=1)),
}
checked = 0
for name, (fun, k, kw, ref) in funs.items():
    args = ops[:k]
    want = splyce.jit(fun, vectorize=False, **kw)(*args)
    assert np.isnan(dense_of(want)).any() or name == "total", name
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(dense_of(want), ref, rtol=1e-4, atol=1e-5, equal_nan=True)
    # the default at n = 2 and 4; all scalar (n = 8); all SIMD, leapfrogging from a ratio of 2; none
    for n, phases, gallop in ((2, 7, 16), (4, 7, 16), (8, 1, 16), (4, 8, 2), (4, 7, 0)):
        f = splyce.jit(fun, vector_width=n, phases=phases, gallop=gallop, **kw)
        got = f(*args)
        assert same(got, want), (name, n, phases, gallop)
        (decision,) = [d for d in f.lower(*args).decisions if d.vectorized]
        assert decision.reason.startswith(("three", "four") if k > 2 else "sparse-output"), decision
        checked += 1
prof = splyce.profile(splyce.jit(funs["row sums"][0]), *ops[:3])
assert prof.multiway > 0 and prof.fast_lane == 0 and prof.gallop > 0, prof
assert "multi-way fast-lane" in str(prof)
off = splyce.profile(splyce.jit(funs["row sums"][0], gallop=0), *ops[:3])
assert off.gallop == 0 and off.multiway > prof.multiway, (prof, off)
# leapfrogging skips coordinates the scalar loop would have stepped over: fewer steps, the same matches
assert prof.epilogue + prof.multiway < off.epilogue + off.multiway, (prof, off)
print("checked", checked)
"""


@pytest.mark.parametrize("dtype, width", [("float32", 32), ("float64", 64)])
def test_three_way_bit_identical_to_plain_sparsifier(dtype, width):
    proc = subprocess.run([sys.executable, "-c", CHILD, dtype, str(width)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "checked 30" in proc.stdout
