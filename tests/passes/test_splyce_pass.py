"""The Splyce pass on the stage-1 IR of the kernel suite (K1-K5 of docs/kernels.md) and on loops it declines.

Fixtures are linalg files in tests/passes/kernels_mlir/ (f64, 32-bit positions and coordinates); variants are made
by text substitution: f32 values, 64-bit or index (width 0) positions and coordinates.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mlir import ir
from splyce.passes.fast_lane import FAST_LANE_ATTR
from splyce.passes.pipeline import SPARSIFY, run_passes
from filecheck import check_in_order
from splyce.options import Options
from splyce.passes.splyce_pass import (PROFILE_COUNTERS_SYMBOL, PROFILE_SLOTS, LoopDecision, decisions_as_comments,
                                       run_splyce_pass)

FIXTURES = Path(__file__).parent / "kernels_mlir"
KERNELS = {
    "k1": ("k1_spgemm.mlir", "accumulate"),
    "k2": ("k2_spmspv.mlir", "accumulate"),
    "k3": ("k3_spmttkrp.mlir", "accumulate"),
    "k4": ("k4_spmmh.mlir", "store"),
    "k5": ("k5_spttspm.mlir", "accumulate"),
}
CRD_TYPES = {32: "i32", 64: "i64", 0: "index"}

# Loops the pass must decline, with the reason it gives.
UNION = """
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
DENSE_INNERMOST = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#CD = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : compressed, d1 : dense) }>
#trait = { indexing_maps = [affine_map<(i,k,j) -> (i,k)>, affine_map<(i,k,j) -> (k,j)>, affine_map<(i,k,j) -> (i,j)>],
  iterator_types = ["parallel", "reduction", "parallel"] }
func.func @spmm(%b: tensor<8x8xf64, #CSR>, %c: tensor<8x8xf64, #CD>, %a: tensor<8x8xf64> {bufferization.writable = true}) -> tensor<8x8xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x8xf64, #CSR>, tensor<8x8xf64, #CD>) outs(%a : tensor<8x8xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %s = arith.addf %z, %m : f64
    linalg.yield %s : f64
  } -> tensor<8x8xf64>
  return %r : tensor<8x8xf64>
}
"""
THREE_WAY = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#trait = { indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>],
  iterator_types = ["parallel", "parallel"] }
func.func @mul3(%b: tensor<8x16xf64, #CSR>, %c: tensor<8x16xf64, #CSR>, %d: tensor<8x16xf64, #CSR>, %a: tensor<8x16xf64> {bufferization.writable = true}) -> tensor<8x16xf64> {
  %r = linalg.generic #trait ins(%b, %c, %d : tensor<8x16xf64, #CSR>, tensor<8x16xf64, #CSR>, tensor<8x16xf64, #CSR>) outs(%a : tensor<8x16xf64>) {
  ^bb0(%x: f64, %y: f64, %w: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %m2 = arith.mulf %m, %w : f64
    linalg.yield %m2 : f64
  } -> tensor<8x16xf64>
  return %r : tensor<8x16xf64>
}
"""


def kernel_text(kernel: str, dtype: str = "f64", width: int = 32) -> str:
    text = (FIXTURES / KERNELS[kernel][0]).read_text()
    text = text.replace("f64", dtype)
    return text.replace("posWidth = 32, crdWidth = 32", f"posWidth = {width}, crdWidth = {width}")


def integer_k1() -> str:
    text = kernel_text("k1", "i32")
    return text.replace("arith.mulf", "arith.muli").replace("arith.addf", "arith.addi")


def accumulate_term_first_k1() -> str:
    """K1 written ``m + z`` (the sum's operands the other way round)."""
    return kernel_text("k1").replace("arith.addf %z, %m", "arith.addf %m, %z")


def k4_accumulating() -> str:
    """K4 reading its output: ``A[i,j] += B[i,j] * C[i,j]`` (the body loads out at the coordinate)."""
    text = kernel_text("k4")
    text = text.replace("%m = arith.mulf %x, %y : f64\n    linalg.yield %m",
                        "%m = arith.mulf %x, %y : f64\n    %s = arith.addf %z, %m : f64\n    linalg.yield %s")
    return text


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def stage1(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    run_passes(module, SPARSIFY)
    return module


def fast_lanes(module: ir.Module) -> list:
    found = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if inner.operation.name == "scf.while" and FAST_LANE_ATTR in inner.operation.attributes:
                        found.append(inner)
                    visit(inner.operation)

    visit(module.operation)
    return found


def loop_around(fast):
    """The scf.for holding ``fast`` (past the scf.ifs of the empty-fiber test and the skew-aware path
    choice, gallop_lane)."""
    split = fast.operation.parent
    guard = split.parent
    assert split.name == "scf.if" and guard.name == "scf.if"
    return guard.parent


def original_loop_after(fast) -> str:
    """The text of the scf.while that follows ``fast`` (the kept original loop)."""
    block_ops = [op for region in fast.operation.parent.regions for block in region.blocks
                 for op in block.operations]
    index = [op.operation for op in block_ops].index(fast.operation)
    following = block_ops[index + 1]
    assert following.operation.name == "scf.while"
    return str(following)


# --------------------------------------------------------------------------------- vectorized shape
@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("width", [32, 64, 0])
def test_kernel_gets_fast_lane_before_original_loop(ctx, kernel, dtype, width):
    module = stage1(kernel_text(kernel, dtype, width))
    decisions = run_splyce_pass(module, Options(vector_width=4, phases=5))
    assert [d.vectorized for d in decisions] == [True]
    crd = CRD_TYPES[width]
    assert decisions[0].reason.startswith(
        ("K-accumulate" if KERNELS[kernel][1] == "accumulate" else "store") + f" {dtype} {crd}-crd n=4 config 5")
    assert module.operation.verify()
    (fast,) = fast_lanes(module)
    assert "scf.if" not in str(fast)   # branchless
    text = str(fast.operation.parent)
    name = re.escape(fast.operation.results[0].get_name().split("#")[0])
    crd_load = re.compile(rf"vector\.load %\w+\[%\w+\] : memref<\?x{crd}>, vector<4x{crd}>")
    check_in_order(text, [
        re.compile(rf"{name}:\d+ = scf\.while"), "arith.cmpi uge", "scf.condition",   # n coordinates left
        crd_load, crd_load, "vector.shuffle",                                          # phase 1: B, C
        "scf.yield", f"}} attributes {{{FAST_LANE_ATTR}}}",
        # the original loop follows and starts where the fast lane stopped
        re.compile(rf"scf\.while \(%\w+ = {name}#0, %\w+ = {name}#1"), "scf.condition", "scf.if",
        '} attributes {"Emitted from" = "linalg.generic"}'])
    assert FAST_LANE_ATTR not in original_loop_after(fast)


def test_k3_innermost_loop_is_the_l_coiteration(ctx):
    """K3's D[l, j] factor is loaded at a cursor, C[k, j] is loop-invariant (loaded outside the loop)."""
    module = stage1(kernel_text("k3"))
    run_splyce_pass(module, Options(phases=1))
    (fast,) = fast_lanes(module)
    text = str(fast)
    assert text.count("arith.mulf") == 2 * 4
    # the C[k, j] value is defined outside the loop and used in every lane
    assert not re.search(r"memref\.load %\w+\[%\w+, %\w+\] : memref<5x4xf64>", text)


def _direct_loads(op) -> list[str]:
    """Types of the memref.load ops directly in ``op``'s body (not in nested regions)."""
    return [str(inner.operation.operands[0].type) for region in op.regions for block in region.blocks
            for inner in block.operations if inner.operation.name == "memref.load"]


@pytest.mark.parametrize("kernel", ["k1", "k2"])
def test_fiber_bounds_hoisted_out_of_the_j_loop(ctx, kernel):
    """K1: B's fiber bounds pos[i], pos[i+1] are loaded once per i, not per (i, j): the stores in the
    loop write a floating-point array, which cannot be the index array read."""
    module = stage1(kernel_text(kernel))
    run_splyce_pass(module, Options(phases=5))
    (fast,) = fast_lanes(module)
    inner = loop_around(fast)
    outer = inner.parent
    if kernel == "k1":
        assert inner.name == "scf.for" and outer.name == "scf.for"
        assert sum("i32" in t for t in _direct_loads(inner)) == 2  # C's bounds (depend on j)
        assert sum("i32" in t for t in _direct_loads(outer)) == 2  # B's bounds, hoisted
    else:  # K2: c's bounds pos[0], pos[1] leave the i loop; B's (pos[i], pos[i+1]) stay
        assert inner.name == "scf.for"
        assert sum("i32" in t for t in _direct_loads(inner)) == 2


def test_fiber_bounds_not_hoisted_past_a_store_to_them(ctx):
    from splyce.passes.splyce_pass import _loop_may_write

    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(phases=5))
    (fast,) = fast_lanes(module)
    inner = loop_around(fast)
    load = next(op for op in inner.regions[0].blocks[0].operations if op.operation.name == "memref.load"
                and "i32" in str(op.operation.operands[0].type))
    assert not _loop_may_write(inner.opview, load)
    # a store of i32 to an argument in the loop: may alias the index array
    with ir.InsertionPoint(load):
        from mlir.dialects import arith, memref
        mem, idx = load.operation.operands[0], load.operation.operands[1]
        memref.store(arith.constant(ir.IntegerType.get_signless(32), 0), mem, [idx])
    assert _loop_may_write(inner.opview, load)


@pytest.mark.parametrize("config", [7, 8])
def test_two_finger_advance_compares_with_the_other_lists_last_coordinate(ctx, config):
    """Phase 3 of two fingers: B's lanes are counted against C's last coordinate and C's against B's, with no
    pivot min(last B, last C) (a compare and select on the loop-carried path). Scalar (7): n ``cmpi ule`` per
    operand; SIMD (8): a vector ``cmpi ule`` against the other's broadcast last, its bits counted by
    ``math.ctpop``."""
    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(vector_width=4, phases=config))
    (fast,) = fast_lanes(module)
    text = str(fast).split("} do {")[1]
    assert "arith.cmpi ult" not in text
    assert not re.search(r"arith\.select %\w+, %\w+, %\w+ : i32", text)
    source = dict(re.findall(r"(%\w+) = vector\.extract (%\w+)\[\d\] : i32 from vector<4xi32>", text))
    if config == 7:   # each lane of one list against the last lane of the other list
        ule = re.findall(r"arith\.cmpi ule, (%\w+), (%\w+) : i32", text)
        assert len(ule) == 8 and len({source[lhs] for lhs, _ in ule}) == 2
        for lhs, rhs in ule:
            assert re.search(rf"{re.escape(rhs)} = vector\.extract %\w+\[3\]", text)
            assert source[rhs] != source[lhs]
    else:
        assert text.count("math.ctpop") == 2
        assert not re.search(r"vector\.reduction <add>, %\w+ : vector<4xi32>", text)
        assert len(re.findall(r"vector\.bitcast %\w+ : vector<4xi1> to vector<1xi4>", text)) == 2


def _dot_asm(target: str, **options) -> str:
    import splyce

    rng = np.random.default_rng(0)
    crd = [np.sort(rng.choice(400, 120, replace=False)).astype(np.int32) for _ in range(2)]
    fmt = splyce.SPARSE_VECTOR.with_widths(32, 32)
    x, y = (splyce.SparseTensor.from_buffers((400,), fmt, pos=(np.array([0, 120], np.int32),), crd=(c,),
                                             values=rng.uniform(-1, 1, 120)) for c in crd)
    return splyce.jit(lambda a, b: splyce.einsum("i,i->", a, b), target=target, **options).lower(x, y).as_text("asm")


def test_simd_advance_asm_is_a_mask_popcount():
    """The SIMD pointer advance (phase 3 in SIMD) in machine code: AVX-512 compares the coordinates with
    the other list's last one broadcast from memory (``{1to4}``) into a mask register and counts its bits
    (``popcnt``); AVX2 compares (``vpminud`` + ``vpcmpeqd``) and counts ``vmovmskps``'s bits. Without the
    vector reduction it replaced: no horizontal adds or shuffles of the i32 counts."""
    avx512 = _dot_asm("avx512", phases=8, gallop=0)
    counts = re.findall(r"vpcmpleud\s+\d+\(%\w+,%\w+,4\)\{1to4\}", avx512)   # two per copy of the lane
    assert len(counts) >= 2 and len(counts) % 2 == 0
    assert len(re.findall(r"\bpopcntl\b", avx512)) >= 2
    avx2 = _dot_asm("avx2", phases=8, gallop=0)
    assert len(re.findall(r"\bvmovmskps\b", avx2)) >= 2 and len(re.findall(r"\bpopcntl\b", avx2)) >= 2
    assert not re.search(r"\bvphaddd\b|\bvpsadbw\b", avx2 + avx512)


@pytest.mark.parametrize("width", [2, 4, 8, 16])
def test_vector_width(ctx, width):
    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(vector_width=width, phases=8))
    text = str(fast_lanes(module)[0])
    check_in_order(text, [f"vector<{width}xi32>", f"vector<{width}xf64>"])   # coordinates, then values
    assert text.count("vector.shuffle %") == 2 * (width - 1)  # coordinates and values of C


def _phase_markers(text: str, crd: str = "i32", dtype: str = "f64"):
    phase1 = "vector.shuffle" in text and "vector.load" in text
    phase2 = bool(re.search(rf"vector\.reduction <add>, %\w+, %\w+ : vector<\d+x{dtype}> into {dtype}", text))
    phase3 = bool(re.search(r"vector\.bitcast %\w+ : vector<\d+xi1> to vector<1xi\d+>\n.*\n.*math\.ctpop", text))
    return phase1, phase2, phase3


@pytest.mark.parametrize("config", range(1, 9))
def test_phase_configs_put_vector_ops_only_in_simd_phases(ctx, config):
    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(vector_width=4, phases=config))
    text = str(fast_lanes(module)[0])
    bits = config - 1
    expected = (bool(bits & 4), bool(bits & 2), bool(bits & 1))
    assert _phase_markers(text) == expected
    if config == 1:
        assert "vector." not in text
    if not expected[2]:  # scalar pointer advance: n scalar ule compares per cursor, summed in index
        assert len(re.findall(r"arith\.cmpi ule, %\w+, %\w+ : i32", text)) == 2 * 4
    if not expected[1]:  # scalar MAC: one select per lane keeps the accumulator
        assert len(re.findall(r"arith\.select %\w+, %\w+, %\w+ : f64", text)) >= 4
    assert "fastmath" not in text


@pytest.mark.parametrize("config", [3, 4, 7, 8])
def test_simd_phase2_store_kernel(ctx, config):
    module = stage1(kernel_text("k4"))
    decisions = run_splyce_pass(module, Options(vector_width=4, phases=config))
    assert decisions[0].vectorized and "phase 2 scalar" not in decisions[0].reason
    text = str(fast_lanes(module)[0])
    # branchless: one masked scatter of the products at B's coordinates (the fixture does not read A)
    check_in_order(text, [re.compile(r"arith\.mulf %\w+, %\w+ : vector<4xf64>"), "vector.scatter"])
    assert len(re.findall(r"vector\.scatter", text)) == 1
    assert "memref.store" not in text


def test_store_kernel_reading_its_output(ctx):
    module = stage1(k4_accumulating())
    decisions = run_splyce_pass(module, Options(vector_width=4, phases=7))
    assert decisions[0].vectorized, decisions
    assert module.operation.verify()
    text = str(fast_lanes(module)[0])  # read and written back under the match mask
    assert len(re.findall(r"vector\.gather", text)) == 1 and len(re.findall(r"vector\.scatter", text)) == 1
    check_in_order(text, ["vector.gather", re.compile(r"arith\.addf %\w+, %\w+ : vector<4xf64>"), "vector.scatter"])


def test_strict_sum_written_term_first_keeps_phase2_scalar(ctx):
    module = stage1(accumulate_term_first_k1())
    decisions = run_splyce_pass(module, Options(phases=7))
    assert decisions[0].vectorized
    assert "phase 2 scalar: sum written term + acc" in decisions[0].reason
    assert not _phase_markers(str(fast_lanes(module)[0]))[1]


def test_fast_math_reassociates(ctx):
    for config in (5, 7):
        module = stage1(kernel_text("k1"))
        decisions = run_splyce_pass(module, Options(phases=config, fast_math=True))
        assert decisions[0].reason.endswith("fast-math" if config == 5 else "fast-math (vector accumulators)")
        assert "fastmath<reassoc>" in str(fast_lanes(module)[0])


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_conflict_lane_for_fast_math_width_16(ctx, dtype):
    """fast_math, n = 16, int32 coordinates, an AVX-512 CD target: the lane compares by 4 vpconflictd (an LLVM
    intrinsic call), permutes C's values into B's lanes by 31 - ctlz of the one-hot, sums into the vector
    accumulator and advances whole blocks (selects of 16 or 0, no popcount)."""
    from splyce.native.codegen import resolve_target

    module = stage1(kernel_text("k1", dtype))
    decisions = run_splyce_pass(module, Options(phases=7, vector_width=16, fast_math=True,
                                                target=resolve_target("avx512")))
    assert decisions[0].reason.endswith("(vector accumulators); 16 x 16 conflict compares (vpconflictd), block advance")
    (fast,) = fast_lanes(module)
    lane = str(fast)
    assert lane.count('"llvm.x86.avx512.conflict.d.512"') == 4
    permute = "llvm.x86.avx512.permvar.sf.512" if dtype == "f32" else "llvm.x86.avx512.vpermi2var.pd.512"
    assert lane.count(permute) == (1 if dtype == "f32" else 2)
    assert "math.ctlz" in lane and "math.ctpop" not in lane and "vector.reduction" not in lane
    assert re.search(r"arith\.select %\w+, %c16\w*, %c0\w* : index", lane)
    assert [str(t) for t in fast.operation.results.types][-1] == f"vector<16x{dtype}>"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_conflict_lane_for_int64_coordinates(ctx, dtype):
    """int64 coordinates: the same lane on blocks of 8 (one zmm of coordinates): 4 vpconflictq, C's values by one
    8-lane permute (vpermpd; f32: vpermps on a ymm), 63 - ctlz, whole blocks of 8, a vector<8 x T> accumulator."""
    from splyce.native.codegen import resolve_target

    module = stage1(kernel_text("k1", dtype, 64))
    decisions = run_splyce_pass(module, Options(phases=7, vector_width=16, fast_math=True,
                                                target=resolve_target("avx512")))
    assert decisions[0].reason.endswith("(vector accumulators); 8 x 8 conflict compares (vpconflictq), block advance")
    (fast,) = fast_lanes(module)
    lane = str(fast)
    assert lane.count('"llvm.x86.avx512.conflict.q.512"') == 4 and "conflict.d" not in lane
    permute = "llvm.x86.avx2.permps" if dtype == "f32" else "llvm.x86.avx512.permvar.df.512"
    assert lane.count(permute) == 1
    assert re.search(r"arith\.constant dense<63> : vector<8xi64>", lane) and "math.ctlz" in lane
    assert re.search(r"arith\.select %\w+, %c8\w*, %c0\w* : index", lane)
    assert [str(t) for t in fast.operation.results.types][-1] == f"vector<8x{dtype}>"


@pytest.mark.parametrize("crd_bits", [32, 64])
@pytest.mark.parametrize("change", ["avx2", "strict", "n8", "k4"])
def test_conflict_lane_only_where_allowed(ctx, change, crd_bits):
    from splyce.native.codegen import resolve_target

    options = dict(phases=7, vector_width=16, fast_math=True, target=resolve_target("avx512"))
    text = kernel_text("k4" if change == "k4" else "k1", "f64", crd_bits)
    if change == "avx2":
        options["target"] = resolve_target("avx2")
    elif change == "strict":
        options["fast_math"] = False
    elif change == "n8":
        options["vector_width"] = 8
    module = stage1(text)
    decisions = run_splyce_pass(module, Options(**options))
    assert decisions[0].vectorized and "conflict" not in decisions[0].reason
    assert "conflict.d" not in str(module) and "conflict.q" not in str(module)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("n", [4, 8])
def test_fast_math_sum_in_a_vector_accumulator(ctx, dtype, n):
    """fast_math with phase 2 in SIMD: the sum is a loop-carried vector<n x T> of the fast lane, added to under the
    match mask (no reduction inside the lane), reduced into the scalar sum once between the lane and the
    scalar loop; strict: no vector iter-arg, the ordered reduction in every step."""
    for fast_math in (True, False):
        module = stage1(kernel_text("k1", dtype))
        run_splyce_pass(module, Options(phases=7, vector_width=n, fast_math=fast_math))
        (fast,) = fast_lanes(module)
        vec = f"vector<{n}x{dtype}>"
        types = [str(t) for t in fast.operation.results.types]
        lane = str(fast)
        if not fast_math:
            assert vec not in types
            assert re.search(rf"vector\.reduction <add>, %\w+, %\w+ : {vec} into {dtype}\n", lane)
            continue
        assert types[-1] == vec and types.count(vec) == 1 and types[:-1].count(dtype) == 1
        assert "vector.reduction" not in lane
        check_in_order(lane, [re.compile(rf"(%\w+) = arith\.addf %arg\d+, %\w+ fastmath<reassoc> : {vec}"),
                              re.compile(rf"arith\.select %\w+, %\w+, %arg\d+ : vector<{n}xi1>, {vec}")])
        # between the lane and the scalar loop: the scalar sum plus the vector's lanes, fed to the scalar loop
        after = fast.operation.block.operations
        ops = [op for op in after]
        at = [i for i, op in enumerate(ops) if op.operation == fast.operation][0]
        nxt = ops[at + 1]
        assert nxt.operation.name == "vector.reduction"
        assert str(nxt).count(fast.operation.results[len(types) - 1].get_name()) == 1
        assert "fastmath<reassoc>" in str(nxt)
        assert ops[at + 2].operation.name == "scf.while"
        assert nxt.operation.results[0] in list(ops[at + 2].operation.operands)


# --------------------------------------------------------------------------------- profile counters
def test_profile_counters(ctx):
    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(phases=5, profile=True))
    text = str(module)
    assert text.count(f"memref.get_global @{PROFILE_COUNTERS_SYMBOL}") == 1
    counter = r"memref\.store %\w+, %\w+\[%c{}(_\d+)?\] : memref<" + str(PROFILE_SLOTS) + "xi64>"
    check_in_order(text, [
        f'memref.global "public" @{PROFILE_COUNTERS_SYMBOL} : memref<{PROFILE_SLOTS}xi64> = dense<0>',
        f"memref.get_global @{PROFILE_COUNTERS_SYMBOL}",
        re.compile(counter.format(0)), f"}} attributes {{{FAST_LANE_ATTR}}}",   # fast lane: slot 0
        re.compile(counter.format(1)), "} attributes {\"Emitted from\""])     # epilogue: slot 1


def test_no_profile_no_global(ctx):
    module = stage1(kernel_text("k1"))
    run_splyce_pass(module, Options(phases=5))
    assert PROFILE_COUNTERS_SYMBOL not in str(module)


# ---------------------------------------------------------------------------------------- declines
@pytest.mark.parametrize("text, reason", [
    (UNION, "union (disjunctive) coiteration"),
    (DENSE_INNERMOST, "not innermost: guarded body contains scf.for"),
])
def test_declines_with_reason(ctx, text, reason):
    module = stage1(text)
    before = str(module)
    decisions = run_splyce_pass(module, Options(phases=5))
    assert len(decisions) == 1 and not decisions[0].vectorized
    assert decisions[0].reason.startswith(reason), decisions[0].reason
    assert str(module) == before


def test_declines_integer_values(ctx):
    module = stage1(integer_k1())
    (decision,) = run_splyce_pass(module, Options(phases=5))
    assert not decision.vectorized and decision.reason == "element type i32 unsupported"


def test_decisions_as_comments():
    decisions = [LoopDecision("f", 0, True, "K-accumulate f64 i32-crd n=4 config 5"),
                 LoopDecision("f", 1, False, "union (disjunctive) coiteration")]
    assert decisions_as_comments(decisions) == (
        "// splyce: @f loop 0: vectorized (K-accumulate f64 i32-crd n=4 config 5)\n"
        "// splyce: @f loop 1: declined (union (disjunctive) coiteration)\n")
    assert decisions_as_comments([]) == ""


@pytest.mark.parametrize("kwargs, error, message", [
    ({"vector_width": 3}, ValueError, "vector_width must be 2, 4, 8, 16 or None, got 3"),
    ({"vector_width": True}, ValueError, "vector_width must be 2, 4, 8, 16 or None, got True"),
    ({"phases": 0}, ValueError, "phases must be an int from 1 to 8"),
    ({"phases": 9}, ValueError, "phases must be an int from 1 to 8"),
    ({"phases": True}, ValueError, "phases must be an int from 1 to 8"),
    ({"vectorize": 1}, TypeError, "vectorize must be a bool, got 1"),
    ({"fast_math": None}, TypeError, "fast_math must be a bool, got None"),
    ({"slp": "yes"}, TypeError, "slp must be a bool or None, got 'yes'"),
    ({"profile": 0}, TypeError, "profile must be a bool, got 0"),
    ({"threads": 0}, ValueError, "threads must be a positive int or None"),
    ({"gallop": 1}, ValueError, "gallop must be 0 (off) or a fiber length ratio from 2 to 65536, got 1"),
    ({"union": 1}, TypeError, "union must be a bool or None, got 1"),
])
def test_invalid_options(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        Options(**kwargs)


@pytest.mark.parametrize("config, simd", [
    (1, (False, False, False)), (2, (False, False, True)), (3, (False, True, False)), (4, (False, True, True)),
    (5, (True, False, False)), (6, (True, False, True)), (7, (True, True, False)), (8, (True, True, True)),
])
def test_phase_configurations(config, simd):
    """The paper's numbering: 5 = SIMD load/compare only, 7 = also the multiply-accumulate, 8 = all."""
    o = Options(phases=config)
    assert (o.simd_compare, o.simd_mac, o.simd_advance) == simd


def test_options_are_frozen_and_hashable():
    a, b = Options(phases=5), Options(phases=5)
    assert a == b and hash(a) == hash(b) and a != Options(phases=6)
    with pytest.raises(AttributeError):
        a.phases = 6


# ------------------------------------------------------------------------- execution through splyce.jit
# Small operands with long fibers (48 along the shared index, density 0.4) so that the fast lane runs at
# n = 2, 4, 8 and the epilogue finishes the tails. Results must be bit-identical to vectorize=False (NaN
# compared as NaN: LLVM leaves the sign and payload of a NaN result unspecified, so the plain sparsifier's
# own NaN bits depend on register allocation); fast_math results within a stated tolerance.
EXEC_CONFIGS = range(1, 9)
EXEC_WIDTHS = (2, 4, 8)
FAST_MATH_TOL = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=1e-5, atol=1e-5)}


def _exec_kernels():
    import splyce
    from splyce.tracer.tracer import einsum

    return {
        # name: (function, [(shape, format or None for dense)]); the paper's formulations, pinned as written
        "K1": (lambda B, C: einsum("ik,kj->ij", B, C, order="ijk"), [((6, 48), splyce.CSR), ((48, 5), splyce.CSC)]),
        "K2": (lambda B, c: einsum("ik,k->i", B, c, order="ik"),
               [((6, 48), splyce.CSR), ((48,), splyce.SPARSE_VECTOR)]),
        "K3": (lambda B, C, D: einsum("ikl,kj,lj->ij", B, C, D, order="ijkl"),
               [((3, 3, 48), splyce.csf(3)), ((3, 4), None), ((48, 4), splyce.CSC)]),
        "K4": (lambda B, C: einsum("ij,ij->ij", B, C, out_format="dense", order="ij"),
               [((6, 48), splyce.CSR), ((6, 48), splyce.CSR)]),
        "K5": (lambda B, C: einsum("ijk,kl->ijl", B, C, order="ijlk"),
               [((2, 3, 48), splyce.csf(3)), ((48, 4), splyce.CSC)]),
    }


def _specials(dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    return np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, tiny, -tiny * 3, np.finfo(dtype).max], dtype)


def _operands(spec, dtype, index_width, seed, specials):
    """Random operands; stored values include Inf, NaN, +-0.0, subnormals and huge values if ``specials``."""
    import sparse as pydata

    import splyce

    rng = np.random.default_rng(seed)
    out = []
    for shape, fmt in spec:
        values = rng.uniform(-2, 2, shape).astype(dtype)
        if specials:
            pick = rng.random(shape) < 0.15
            values[pick] = rng.choice(_specials(dtype), size=int(pick.sum()))
        if fmt is None:
            out.append(values)
            continue
        mask = rng.random(shape) < 0.4
        coords = np.argwhere(mask).T
        coo = pydata.COO(coords, values[mask], shape=shape)
        out.append(splyce.asarray(coo, format=fmt.with_widths(index_width, index_width)))
    return out


# Which (config, width) cells a (kernel, dtype, index width) test compiles: each of the 24 cells in one of the
# four type combinations, rotated per kernel. Every kernel still runs every config, every width, both dtypes
# and both index widths, and every pair of them; each (config, width, dtype, index width) combination runs on
# at least one kernel (four consecutive kernels take the four rotations). A quarter of the 96 compiles each.
EXEC_TYPES = (("float32", 32), ("float32", 64), ("float64", 32), ("float64", 64))


def _exec_cells(kernel: str, dtype: str, index_width: int) -> list[tuple[int, int]]:
    rotation = EXEC_TYPES.index((dtype, index_width)) - "K1 K2 K3 K4 K5".split().index(kernel)
    return [(config, width) for config in EXEC_CONFIGS for j, width in enumerate(EXEC_WIDTHS)
            if (config + j - rotation) % len(EXEC_TYPES) == 0]


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    return a.shape == b.shape and bool(np.all((a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", ["K1", "K2", "K3", "K4", "K5"])
def test_jit_all_configs_bit_identical(kernel, dtype, index_width):
    import splyce

    fun, spec = _exec_kernels()[kernel]
    data = [_operands(spec, dtype, index_width, seed, specials) for seed, specials in ((0, False), (1, True))]
    reference = splyce.jit(fun, vectorize=False)
    expected = [reference(*ops) for ops in data]
    assert np.any(np.isnan(np.asarray(expected[1]))) or np.any(np.isinf(np.asarray(expected[1])))
    for config, width in _exec_cells(kernel, dtype, index_width):
        f = splyce.jit(fun, phases=config, vector_width=width)
        for ops, want in zip(data, expected):
            got = f(*ops)
            assert _same(got, want), (config, width)
        decisions = f.lower(*data[0]).decisions
        assert [d.vectorized for d in decisions] == [True], decisions


def test_exec_cells_cover_every_combination():
    cells = {(kernel, dtype, width, config, n) for kernel in "K1 K2 K3 K4 K5".split() for dtype, width in EXEC_TYPES
             for config, n in _exec_cells(kernel, dtype, width)}
    for kernel in "K1 K2 K3 K4 K5".split():   # every config x width once per kernel, in some type combination
        assert sorted((c, n) for k, _, _, c, n in cells if k == kernel) == \
            sorted((c, n) for c in EXEC_CONFIGS for n in EXEC_WIDTHS)
        for config in EXEC_CONFIGS:
            assert {d for k, d, _, c, _ in cells if k == kernel and c == config} == {"float32", "float64"}
            assert {w for k, _, w, c, _ in cells if k == kernel and c == config} == {32, 64}
    assert {(d, w, c, n) for _, d, w, c, n in cells} == \
        {(d, w, c, n) for d, w in EXEC_TYPES for c in EXEC_CONFIGS for n in EXEC_WIDTHS}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", ["K1", "K2", "K3", "K4", "K5"])
def test_jit_fast_math_within_tolerance(kernel, dtype):
    import splyce

    fun, spec = _exec_kernels()[kernel]
    ops = _operands(spec, dtype, 32, 2, False)
    want = np.asarray(splyce.jit(fun, vectorize=False)(*ops))
    for config in (1, 5, 7, 8):
        got = np.asarray(splyce.jit(fun, phases=config, vector_width=4, fast_math=True)(*ops))
        np.testing.assert_allclose(got, want, **FAST_MATH_TOL[dtype])


@pytest.mark.parametrize("gallop", [0, 16])
def test_three_way_empty_fiber_guard_before_the_leapfrog_decision(ctx, gallop):
    """A three-way product: with leapfrogging, an empty fiber (any cursor >= its bound on entry) yields the
    loop's initial values before the lengths are folded for the skew test; without it, no guard."""
    module = stage1(THREE_WAY)
    run_splyce_pass(module, Options(phases=7, gallop=gallop))
    (fast,) = fast_lanes(module)
    text = str(module)
    if not gallop:
        assert fast.operation.parent.name == "scf.for" and "llvm.intr.expect" not in text
        return
    split = fast.operation.parent
    guard = split.parent
    assert guard.name == "scf.if"
    (only,) = list(guard.regions[0].blocks[0].operations)
    assert only.name == "scf.yield" and list(only.operands) == list(fast.operation.operands)
    cond = guard.operands[0].owner.operation
    tests = []
    while cond.name == "arith.ori":
        cond, right = (v.owner.operation for v in cond.operands)
        tests.append(right)
    tests.append(cond)
    assert sorted(ir.IntegerAttr(t.attributes["predicate"]).value for t in tests) == [9, 9, 9]  # uge x 3
    assert {t.operands[0] for t in tests} == set(fast.operation.operands)   # the three cursors
    check_in_order(text, [re.compile(r"arith\.ori %\w+, %\w+ : i1"),
                          re.compile(r"scf\.if %\w+ -> \(index, index, index\) \{"),
                          re.compile(r"scf\.yield %\w+, %\w+, %\w+ : index, index, index"),
                          "} else {", "arith.cmpi ugt", "arith.select",      # the longest fiber ...
                          re.compile(r"llvm\.intr\.expect %\w+, %false"),   # ... skewed is unlikely
                          re.compile(r"scf\.if %\w+ -> \(index, index, index\) \{"),
                          f"}} attributes {{{FAST_LANE_ATTR}}}"])
