"""The union fast lane for a scalar reduction (passes/union_reduce.py): ``abs(a - b).max()``, ``min``, integer
sums and the union's count. Results bit-identical to the plain sparsifier and equal to NumPy (Inf, NaN,
-0.0 / +0.0, negative values, empty rows, one side empty, full rows; f32/f64/i32/i64 x 32/64-bit indices,
n = 2, 4, 8) in a child process (MLIR may abort); IR checks; the loops the lane declines."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from filecheck import check_in_order
from mlir import ir
from splyce.passes.pipeline import SPARSIFY, run_passes
from splyce.options import Options
from splyce.passes.splyce_pass import run_splyce_pass

# max(acc, b - c) over two CSR operands into a scalar: a union loop carrying one value (the op substituted)
REDUCE = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#trait = { indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> ()>],
  iterator_types = ["reduction", "reduction"] }
func.func @red(%b: tensor<8x16xT, #CSR>, %c: tensor<8x16xT, #CSR>, %a: tensor<T> {bufferization.writable = true}) -> tensor<T> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x16xT, #CSR>, tensor<8x16xT, #CSR>) outs(%a : tensor<T>) {
  ^bb0(%x: T, %y: T, %z: T):
    %d = arith.SUB %x, %y : T
    %id = arith.constant IDENTITY : T
    %m = sparse_tensor.reduce %z, %d, %id : T {
    ^bb0(%p: T, %q: T):
      %r = arith.COMBINE %p, %q : T
      sparse_tensor.yield %r : T
    }
    linalg.yield %m : T
  } -> tensor<T>
  return %r : tensor<T>
}
"""


@pytest.fixture
def ctx():
    with ir.Context() as context, ir.Location.unknown():
        yield context


def _identity(combine: str, t: str) -> str:
    if combine.startswith("add"):
        return "0.0" if t.startswith("f") else "0"
    if t.startswith("f"):
        inf = {"f64": "0x7FF0000000000000", "f32": "0x7F800000"}[t]
        return inf.replace("0x7", "0xF") if combine.startswith("max") else inf
    bits = int(t[1:])
    return str({"maxsi": -2 ** (bits - 1), "minsi": 2 ** (bits - 1) - 1, "maxui": 0, "minui": -1}[combine])


def _stage1(combine: str, t: str = "f64", text: str = REDUCE) -> ir.Module:
    sub = "subf" if t.startswith("f") else "subi"
    module = ir.Module.parse(text.replace("COMBINE", combine).replace("SUB", sub).replace("IDENTITY", _identity(combine, t))
                             .replace("xT", f"x{t}").replace("<T>", f"<{t}>").replace(": T", f": {t}"))
    run_passes(module, SPARSIFY)
    return module


def test_max_lane_ir(ctx):
    module = _stage1("maximumf")
    (decision,) = run_splyce_pass(module, Options(phases=5))     # on by default (union=None)
    assert decision.vectorized, decision
    assert decision.reason == ("union fast lane: maximumf reduction f64 index-crd n=4, B's and C's vector "
                               "accumulators and their last replacements' coordinates, reduced after the lane")
    text = str(module)
    check_in_order(text, [
        # the fast lane carries the cursors, the scalar, B's and C's vector accumulators and the coordinates
        # (+ 1) of each lane's last replacement
        re.compile(r"scf\.while \(.*\) : \(index, index, f64, vector<4xf64>, vector<4xf64>, vector<4xindex>, "
                   r"vector<4xindex>\)"),
        re.compile(r"arith\.cmpi uge, %\w+, %c4\w* : index"),        # n coordinates left on both sides
        "scf.condition",
        re.compile(r"vector\.load %\w+\[%\w+\] : memref<\?xindex>, vector<4xindex>"),   # B's coordinates
        re.compile(r"vector\.load %\w+\[%\w+\] : memref<\?xindex>, vector<4xindex>"),   # C's coordinates
        "vector.shuffle",                                              # all-pairs compare by rotation
        re.compile(r"arith\.cmpi ule, %\w+, %\w+ : vector<4xindex>"),  # lanes up to the pivot
        re.compile(r"arith\.subf %\w+, %\w+ : vector<4xf64>"),         # the "both" term on every lane
        re.compile(r"arith\.negf %\w+ : vector<4xf64>"),               # the "only C" term
        # B's accumulator, its active lanes only; where the term replaced the value, the coordinate + 1
        re.compile(r"arith\.maximumf %\w+, %\w+ : vector<4xf64>"),
        re.compile(r"arith\.select %\w+, %\w+, %\w+ : vector<4xi1>, vector<4xf64>"),
        re.compile(r"arith\.cmpf oge, %\w+, %\w+ : vector<4xf64>"),
        re.compile(r"arith\.select %\w+, %\w+, %\w+ : vector<4xi1>, vector<4xindex>"),
        re.compile(r"arith\.maximumf %\w+, %\w+ : vector<4xf64>"),     # C's
        re.compile(r"arith\.select %\w+, %\w+, %\w+ : vector<4xi1>, vector<4xf64>"),
        "} attributes {splyce.fast_lane}",
        re.compile(r"arith\.maximumf %\w+#3, %\w+#4 : vector<4xf64>"),   # after the lane: the maximum ..
        re.compile(r"vector\.reduction <maximumf>, %\w+ : vector<4xf64> into f64"),
        re.compile(r"vector\.reduction <maxui>, %\w+ : vector<4xindex> into index"),   # .. its last lane ..
        re.compile(r"vector\.reduction <or>, %\w+ : vector<4xi64> into i64"),     # .. and that lane's bits
        re.compile(r"arith\.cmpf uno"),                                # (a NaN: the NaN)
        "scf.while",                                                   # the sparsifier's loop, from the cursors
        "arith.maximumf", "} else {",
    ])
    lane = text[:text.index("} attributes {splyce.fast_lane}")]
    assert "vector.reduction <maximumf>" not in lane and "scf.if" not in lane[lane.index("scf.condition"):]


@pytest.mark.parametrize("combine, t, kind", [("minimumf", "f32", "minimumf"), ("maxsi", "i64", "maxsi"),
                                              ("minui", "i32", "minui"), ("addi", "i64", "add")])
def test_exact_combines_take_the_lane(ctx, combine, t, kind):
    module = _stage1(combine, t)
    (decision,) = run_splyce_pass(module, Options(phases=5, vector_width=8))
    assert decision.vectorized and decision.reason.startswith(f"union fast lane: {combine} reduction {t} "), decision
    assert re.search(rf"vector\.reduction <{kind}>, %\w+ : vector<8x{t}>", str(module))


@pytest.mark.parametrize("combine", ["maxnumf", "minnumf"])
def test_order_dependent_combines_need_fast_math(ctx, combine):
    module = _stage1(combine)
    before = str(module)
    (decision,) = run_splyce_pass(module, Options(phases=5, union=True))
    assert not decision.vectorized and decision.reason.startswith(f"union fast lane: arith.{combine} needs fast_math")
    assert str(module) == before
    module = _stage1(combine)
    (decision,) = run_splyce_pass(module, Options(phases=5, fast_math=True))
    assert decision.vectorized, decision
    assert re.search(rf"vector\.reduction <{combine}>, %[\w#]+ : vector<4xf64> into f64", str(module))


def test_term_first_maximum_declines(ctx):
    """``maximumf(term, acc)``: a tie keeps the older value, an order the lane does not model (strict)."""
    text = REDUCE.replace("%r = arith.COMBINE %p, %q", "%r = arith.COMBINE %q, %p")
    module = _stage1("maximumf", text=text)
    (decision,) = run_splyce_pass(module, Options(phases=5))
    assert not decision.vectorized
    assert decision.reason == "union fast lane: arith.maximumf(term, acc): a tie keeps the older value (not modelled)"
    module = _stage1("maximumf", text=text)
    (decision,) = run_splyce_pass(module, Options(phases=5, fast_math=True))
    assert decision.vectorized, decision


def test_union_false_leaves_the_reduction(ctx):
    module = _stage1("maximumf")
    before = str(module)
    (decision,) = run_splyce_pass(module, Options(phases=5, union=False))
    assert not decision.vectorized and decision.reason.endswith("union fast lane off (union=False)")
    assert str(module) == before


DENSE_FACTOR = """
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#trait = { indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>,
  affine_map<(i,j) -> ()>], iterator_types = ["reduction", "reduction"] }
func.func @red(%b: tensor<8x16xf64, #CSR>, %c: tensor<8x16xf64, #CSR>, %f: tensor<8x16xf64>,
               %a: tensor<f64> {bufferization.writable = true}) -> tensor<f64> {
  %r = linalg.generic #trait ins(%b, %c, %f : tensor<8x16xf64, #CSR>, tensor<8x16xf64, #CSR>, tensor<8x16xf64>)
      outs(%a : tensor<f64>) {
  ^bb0(%x: f64, %y: f64, %v: f64, %z: f64):
    %d = arith.subf %x, %y : f64
    %e = arith.mulf %d, %v : f64
    %id = arith.constant 0xFFF0000000000000 : f64
    %m = sparse_tensor.reduce %z, %e, %id : f64 {
    ^bb0(%p: f64, %q: f64):
      %s = arith.maximumf %p, %q : f64
      sparse_tensor.yield %s : f64
    }
    linalg.yield %m : f64
  } -> tensor<f64>
  return %r : tensor<f64>
}
"""


def test_dense_factor_declines(ctx):
    """``max((b - c) * f)`` with a dense ``f``: the branches read ``f`` at the coordinate (not modelled)."""
    module = ir.Module.parse(DENSE_FACTOR)
    run_passes(module, SPARSIFY)
    before = str(module)
    decisions = run_splyce_pass(module, Options(phases=5, union=True))
    assert decisions and not any(d.vectorized for d in decisions)
    assert any(d.reason == "union fast lane: both branch: a branch reads a memref at the coordinate"
               for d in decisions), decisions
    assert str(module) == before


def test_strict_sum_ir(ctx):
    """A strict float sum: the fast lane carries the scalar sum, each step's terms go to their places in the
    step's merge order (a 2n-element stack buffer) and are added one at a time, not reassociated."""
    module = _stage1("addf")
    (decision,) = run_splyce_pass(module, Options(phases=5))
    assert decision.vectorized and decision.reason == (
        "union fast lane: addf reduction f64 index-crd n=4, strict: each step's terms ranked by coordinate and "
        "added in that order")
    text = str(module)
    check_in_order(text, [
        re.compile(r"memref\.alloca\(\) : memref<8xf64>"),           # at function entry
        re.compile(r"scf\.while \(.*\) : \(index, index, f64\) -> \(index, index, f64\)"),
        "vector.shuffle",
        re.compile(r"arith\.cmpi ult, %\w+, %\w+ : vector<4xindex>"),   # B lane i's place: i + C lanes below it
        re.compile(r"arith\.cmpi ule, %\w+, %\w+ : vector<4xindex>"),   # C lane j's: j + B lanes at or below it
        *[re.compile(r"memref\.store %\w+, %\w+\[%\w+\] : memref<8xf64>") for _ in range(8)],
        *[re.compile(r"arith\.addf %\w+, %\w+ : f64") for _ in range(8)],   # in order, from the carried sum
        "} attributes {splyce.fast_lane}",
        "scf.while",
    ])
    lane = text[:text.index("} attributes {splyce.fast_lane}")]
    assert "reassoc" not in lane
    assert not re.search(r"vector\.reduction <add>.* into f64", lane)


def test_strict_and_fast_math_sums():
    import scipy.sparse as sps

    import splyce

    a = sps.csr_array(sps.random(12, 90, density=0.3, format="csr", random_state=0))   # elementwise ** (an array)
    b = sps.csr_array(sps.random(12, 90, density=0.2, format="csr", random_state=1))
    a.data *= 10.0 ** np.random.default_rng(0).integers(-8, 8, a.nnz)   # the order of additions matters
    f = lambda x, y: ((x - y) ** 2).sum()  # noqa: E731
    strict = splyce.jit(f)
    (decision,) = strict.lower(a, b).decisions
    assert decision.vectorized and decision.reason.endswith("strict: each step's terms ranked by coordinate and "
                                                            "added in that order")
    plain = splyce.jit(f, vectorize=False)(a, b)
    assert np.asarray(strict(a, b)).tobytes() == np.asarray(plain).tobytes()
    fast = splyce.jit(f, fast_math=True)
    (decision,) = fast.lower(a, b).decisions
    assert decision.vectorized and decision.reason.endswith("B's and C's vector accumulators, reduced after the lane")
    assert np.isclose(fast(a, b), (((a - b).toarray()) ** 2).sum(), rtol=1e-12)


CHILD = r"""
import sys
import numpy as np, scipy.sparse as sps
import splyce

dtype, width = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(width + len(dtype))
is_float = dtype.startswith("float")
rows, cols = 16, 120

def operand(k):
    mask = rng.random((rows, cols)) < (0.3, 0.1)[k]
    mask[0] = False                        # an empty row on both sides
    mask[1, :] = k == 0                    # a full row against an empty one
    mask[2, :] = True                      # full against full: every lane matched
    mask[3] = False; mask[3, 5 * k::7] = True    # interleaved, no coordinate in common
    mask[4] = False; mask[4, :3 + 40 * k] = True # different lengths
    rr, cc = np.nonzero(mask)
    if is_float:   # magnitudes 1e-6 .. 1e6: a sum in another order rounds differently
        values = (rng.uniform(-4, 4, len(rr)) * 10.0 ** rng.integers(-6, 7, len(rr))).astype(dtype)
    else:
        values = rng.integers(-50, 50, len(rr)).astype(dtype)
    return rr, cc, values

def build(rr, cc, values, shape=(rows, cols)):
    fmt = splyce.CSR.with_widths(width, width)
    return splyce.asarray(sps.csr_array((values, (rr, cc)), shape=shape), format=fmt)

def dense(rr, cc, values, shape=(rows, cols)):
    d = np.zeros(shape, values.dtype)
    d[rr, cc] = values
    return d

programs = {"absmax": (lambda x, y: abs(x - y).max(), lambda x, y: np.abs(x - y).max()),
            "absmin": (lambda x, y: abs(x - y).min(), lambda x, y: np.abs(x - y).min()),
            "max": (lambda x, y: (x - y).max(), lambda x, y: (x - y).max()),
            "min": (lambda x, y: (x - y).min(), lambda x, y: (x - y).min())}
programs["sum"] = (lambda x, y: (x - y).sum(), lambda x, y: (x - y).sum())
if is_float:   # NumPy sums pairwise: equal up to rounding only
    programs["sqsum"] = (lambda x, y: ((x - y) ** 2).sum(), lambda x, y: ((x - y) ** 2).sum())
rounded = {"sum", "sqsum"} if is_float else set()

def same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    if is_float and np.isnan(want):
        return bool(np.isnan(got))       # NaN payloads are unspecified
    return got.dtype == want.dtype and got.tobytes() == want.tobytes()

jits = {name: (splyce.jit(f, vectorize=False), {n: splyce.jit(f, vector_width=n) for n in (2, 4, 8)})
        for name, (f, _) in programs.items()}

def check(pairs, label):
    global checked
    for name, (f, ref) in programs.items():
        plain_jit, lanes = jits[name]
        for (x, dx), (y, dy) in pairs:
            plain = plain_jit(x, y)
            want_np = ref(dx, dy)
            if is_float and np.isnan(want_np):
                assert np.isnan(plain), (label, name)
            elif name in rounded:
                assert np.isclose(plain, want_np, rtol=1e-3 if dtype == "float32" else 1e-9), (label, name)
            else:
                assert plain == want_np, (label, name, plain, want_np)
            for n, jit in lanes.items():
                got = jit(x, y)
                assert same(got, plain), (label, name, n, got, plain)
                checked += 1

checked = 0
ops = [operand(k) for k in range(2)]
pair = [(build(*o), dense(*o)) for o in ops]
for name, (_, lanes) in jits.items():   # the reduction loop (loop 0) takes the lane at every width
    for n, jit in lanes.items():
        assert [d.vectorized for d in jit.lower(*[p[0] for p in pair]).decisions][:1] == [True], (name, n)
check([pair, pair[::-1]], "random")
empty = (np.array([], int), np.array([], int), np.array([], dtype))
check([(pair[0], (build(*empty), dense(*empty)))], "one side empty")
# every coordinate stored on one side or both (no implicit zero: the union's count loop runs too)
full = np.ones((rows, cols), bool)
rr, cc = np.nonzero(full)
half = (rr + cc) % 3 != 0
vals = [rng.uniform(1, 9, len(rr)).astype(dtype) if is_float else rng.integers(1, 90, len(rr)).astype(dtype)
        for _ in range(2)]
b_full = (rr, cc, vals[0])
c_part = (rr[half], cc[half], vals[1][half])
b_rest = (rr[~half], cc[~half], vals[0][~half])
cover = [(build(*b_full), dense(*b_full)), (build(*c_part), dense(*c_part))]
check([cover, cover[::-1]], "full cover")
cover2 = [(build(*c_part), dense(*c_part)), (build(*b_rest), dense(*b_rest))]   # disjoint, covering
check([cover2, cover2[::-1]], "disjoint cover")
if is_float:
    # signed zeros: every term -0.0 (max must be -0.0), or -0.0 and +0.0 mixed (max +0.0, min -0.0)
    z = np.full(len(rr), -0.0, dtype)
    neg = [(build(rr, cc, z), dense(rr, cc, z)), (build(*empty), dense(*empty))]
    got = splyce.jit(lambda x, y: (x - y).max())(*[p[0] for p in neg])
    assert np.signbit(got) and got == 0, got
    check([neg, neg[::-1]], "all -0.0")
    mixed = np.where(rng.random(len(rr)) < 0.5, -0.0, 0.0).astype(dtype)
    signed = [(build(rr, cc, mixed), dense(rr, cc, mixed)), (build(*c_part), dense(*c_part))]
    check([signed, signed[::-1]], "signed zeros")
    # Inf and NaN among the values
    for special in (np.inf, -np.inf, np.nan):
        rr0, cc0, v0 = ops[0]
        v = v0.copy()
        v[rng.random(len(v)) < 0.05] = special
        sp = [(build(rr0, cc0, v), dense(rr0, cc0, v)), pair[1]]
        check([sp, sp[::-1]], f"with {special}")
    one_nan = vals[0].copy(); one_nan[len(one_nan) // 2] = np.nan
    nan_pair = [(build(rr, cc, one_nan), dense(rr, cc, one_nan)), cover[1]]
    check([nan_pair, nan_pair[::-1]], "one NaN")
prof = splyce.profile(splyce.jit(lambda x, y: abs(x - y).max()), pair[0][0], pair[1][0])
assert prof.fast_lane > 0 and prof.epilogue > 0, prof
assert prof.total == pair[0][0].nnz + pair[1][0].nnz, prof
print("checked", checked)
"""


@pytest.mark.parametrize("dtype, width", [("float64", 32), ("float32", 64), ("int64", 32), ("int32", 64)])
def test_reduce_lane_bit_identical_to_plain_sparsifier(dtype, width):
    proc = subprocess.run([sys.executable, "-c", CHILD, dtype, str(width)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    count = int(proc.stdout.split("checked")[-1])
    assert count == (6 * 19 * 3 if dtype.startswith("float") else 5 * 7 * 3), proc.stdout
