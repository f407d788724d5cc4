"""Every refusal of the Splyce pass pinned by its text: the matcher's ``Decline`` reasons (on a hand-written
two-finger intersection loop, changed one way per case) and the thread split's ``NotSplit`` reasons (on small
hand-written stage-1 modules). The unchanged loop matches and the unchanged kernel splits, so each case
differs from an accepted one by the change it names."""

from __future__ import annotations

import re

import pytest
from mlir import ir

from splyce.lowering.to_mlir import ENTRY
from splyce.passes.coiteration_match import Coiteration, Decline, match_coiteration
from splyce.passes.ir_utils import walk
from splyce.passes.parallel import OuterLoop, NotSplit, split_outer_loop

# The sparsifier's intersection loop as in K1 (i32 coordinates widened to index), with spare arguments the
# variants read and write.
LOOP = """
func.func @f(%crdB: memref<?xi32>, %crdC: memref<?xi32>, %valB: memref<?xf64>, %valC: memref<?xf64>,
             %out: memref<16xf64>, %outi: memref<16xi64>, %mat: memref<4x4xf64>,
             %strided: memref<?xf64, strided<[2]>>, %ints: memref<?xi64>,
             %pb0: index, %hiB: index, %pc0: index, %hiC: index, %acc0: f64) -> f64 {
  %c1 = arith.constant 1 : index
  %r:3 = scf.while (%pb = %pb0, %pc = %pc0, %acc = %acc0) : (index, index, f64) -> (index, index, f64) {
    %inB = arith.cmpi ult, %pb, %hiB : index
    %inC = arith.cmpi ult, %pc, %hiC : index
    %cond = arith.andi %inB, %inC : i1
    scf.condition(%cond) %pb, %pc, %acc : index, index, f64
  } do {
  ^bb0(%pb: index, %pc: index, %acc: f64):
    %kb0 = memref.load %crdB[%pb] : memref<?xi32>
    %kb1 = arith.extui %kb0 : i32 to i64
    %kb = arith.index_cast %kb1 : i64 to index
    %kc0 = memref.load %crdC[%pc] : memref<?xi32>
    %kc1 = arith.extui %kc0 : i32 to i64
    %kc = arith.index_cast %kc1 : i64 to index
    %lt = arith.cmpi ult, %kc, %kb : index
    %k = arith.select %lt, %kc, %kb : index
    %eqB = arith.cmpi eq, %kb, %k : index
    %eqC = arith.cmpi eq, %kc, %k : index
    %both = arith.andi %eqB, %eqC : i1
    %new = scf.if %both -> (f64) {
      %vb = memref.load %valB[%pb] : memref<?xf64>
      %vc = memref.load %valC[%pc] : memref<?xf64>
      %m = arith.mulf %vb, %vc : f64
      %s = arith.addf %acc, %m : f64
      scf.yield %s : f64
    } else {
      scf.yield %acc : f64
    }
    %eqB2 = arith.cmpi eq, %kb, %k : index
    %nb = arith.addi %pb, %c1 : index
    %pbn = arith.select %eqB2, %nb, %pb : index
    %eqC2 = arith.cmpi eq, %kc, %k : index
    %nc = arith.addi %pc, %c1 : index
    %pcn = arith.select %eqC2, %nc, %pc : index
    scf.yield %pbn, %pcn, %new : index, index, f64
  }
  return %r#2 : f64
}
"""

ITERS = ("%r:3 = scf.while (%pb = %pb0, %pc = %pc0, %acc = %acc0) : (index, index, f64) -> (index, index, f64) {",
         "scf.condition(%cond) %pb, %pc, %acc : index, index, f64",
         "^bb0(%pb: index, %pc: index, %acc: f64):",
         "scf.yield %pbn, %pcn, %new : index, index, f64")
THEN = """      %vb = memref.load %valB[%pb] : memref<?xf64>
      %vc = memref.load %valC[%pc] : memref<?xf64>
      %m = arith.mulf %vb, %vc : f64
      %s = arith.addf %acc, %m : f64
      scf.yield %s : f64
"""


IF_OP = LOOP[LOOP.index("    %new = scf.if"):LOOP.index("    %eqB2 =")]
AFTER_BODY = LOOP[LOOP.index("    %kb0 ="):LOOP.index("  }\n  return")]


def memref_iter_arg(source: str, mtype: str):
    """Replacements adding a fourth loop argument %mem = ``source`` of type ``mtype``, passed on unchanged."""
    return [(ITERS[0], f"%r:4 = scf.while (%pb = %pb0, %pc = %pc0, %acc = %acc0, %mem = {source}) : "
                       f"(index, index, f64, {mtype}) -> (index, index, f64, {mtype}) {{"),
            (ITERS[1], f"scf.condition(%cond) %pb, %pc, %acc, %mem : index, index, f64, {mtype}"),
            (ITERS[2], f"^bb0(%pb: index, %pc: index, %acc: f64, %mem: {mtype}):"),
            (ITERS[3], f"scf.yield %pbn, %pcn, %new, %mem : index, index, f64, {mtype}")]


def then_body(text: str):
    """Replace the guarded body (keeping its accumulate) with ``text`` followed by the accumulate."""
    return [(THEN, text + "      %s = arith.addf %acc, %m : f64\n      scf.yield %s : f64\n")]


LANE_LOADS = ("      %vb = memref.load %valB[%pb] : memref<?xf64>\n      %vc = memref.load %valC[%pc] : memref<?xf64>\n"
              "      %m = arith.mulf %vb, %vc : f64\n")
NO_ACCUMULATOR = [(ITERS[3], "scf.yield %pbn, %pcn, %acc : index, index, f64"),
                  ("%new = scf.if %both -> (f64) {", "scf.if %both {"),
                  ("    } else {\n      scf.yield %acc : f64\n    }\n", "    }\n")]

DECLINES = {
    "ori in the before-region": (
        [("%cond = arith.andi %inB, %inC : i1", "%cond = arith.ori %inB, %inC : i1")],
        "union (disjunctive) coiteration: before-region combines conditions with ori"),
    "one bound check": (
        [("%cond = arith.andi %inB, %inC : i1", "%cond = arith.andi %inB, %inB : i1"),
         ("    %inC = arith.cmpi ult, %pc, %hiC : index\n", "")],
        "not a two-finger intersection: before-region has 1 conditions"),
    "an extra op in the before-region": (
        [("%cond = arith.andi %inB, %inC : i1", "%cond = arith.andi %inB, %inC : i1\n    %x = arith.addi %pb, %pc : index")],
        "not a two-finger intersection: before-region is not `ult and ult`"),
    "cursors swapped on the way to the after-region": (
        [(ITERS[1], "scf.condition(%cond) %pc, %pb, %acc : index, index, f64")],
        "before-region does not forward its arguments unchanged"),
    "and of one check with itself": (
        [("%cond = arith.andi %inB, %inC : i1", "%cond = arith.andi %inB, %inB : i1")],
        "not a two-finger intersection: condition is not the and of the two bound checks"),
    "condition is one check": (
        [(ITERS[1], "scf.condition(%inB) %pb, %pc, %acc : index, index, f64")],
        "not a two-finger intersection: condition is not the and of the two bound checks"),
    "ule bound check": (
        [("%inB = arith.cmpi ult, %pb, %hiB : index", "%inB = arith.cmpi ule, %pb, %hiB : index")],
        "not a two-finger intersection: bound check is not `cursor ult bound`"),
    "bound is a loop argument": (
        [("%inB = arith.cmpi ult, %pb, %hiB : index", "%inB = arith.cmpi ult, %pb, %pc : index")],
        "bound of a cursor is not loop-invariant"),
    "both checks on one cursor": (
        [("%inC = arith.cmpi ult, %pc, %hiC : index", "%inC = arith.cmpi ult, %pb, %hiC : index")],
        "not a two-finger intersection: both bound checks test the same cursor"),
    "second coordinate load at one cursor": (
        [("%kb = arith.index_cast %kb1 : i64 to index",
          "%kb = arith.index_cast %kb1 : i64 to index\n    %kx = memref.load %crdC[%pb] : memref<?xi32>")],
        "after-region loads two coordinates for one cursor"),
    "float coordinates": (
        [("    %kb0 = memref.load %crdB[%pb] : memref<?xi32>\n",
          "    %kf = memref.load %valB[%pb] : memref<?xf64>\n    %kb0 = memref.load %crdB[%pb] : memref<?xi32>\n")],
        "coordinate element type f64 unsupported"),
    "strided coordinate array": (
        [("%crdB: memref<?xi32>,", "%crdB: memref<?xi32, strided<[2]>>,"),
         ("memref.load %crdB[%pb] : memref<?xi32>", "memref.load %crdB[%pb] : memref<?xi32, strided<[2]>>")],
        "coordinate array is not a unit-stride 1-D memref"),
    "coordinate array carried by the loop": (
        memref_iter_arg("%crdB", "memref<?xi32>") +
        [("memref.load %crdB[%pb] : memref<?xi32>", "memref.load %mem[%pb] : memref<?xi32>")],
        "coordinate array is not loop-invariant"),
    "two scf.if": (
        [("    %eqB2 = arith.cmpi eq, %kb, %k : index\n",
          "    scf.if %both {\n    }\n    %eqB2 = arith.cmpi eq, %kb, %k : index\n")],
        "after-region has two scf.if"),
    "if on one side's match": (
        [("%new = scf.if %both -> (f64) {", "%new = scf.if %eqB -> (f64) {")],
        "scf.if is not guarded by the coordinate match"),
    "unexpected op": (
        [("%both = arith.andi %eqB, %eqC : i1", "%both = arith.andi %eqB, %eqC : i1\n    %x = arith.muli %pb, %pc : index")],
        "after-region has unexpected op arith.muli"),
    "no compare-and-select after the loads": (
        [(AFTER_BODY, "    %kb0 = memref.load %crdB[%pb] : memref<?xi32>\n"
                      "    scf.yield %pb, %pc, %acc : index, index, f64\n")],
        "after-region does not load a coordinate at each cursor"),
    "no guarded scf.if": (
        [(IF_OP, ""), (ITERS[3], "scf.yield %pbn, %pcn, %acc : index, index, f64")],
        "no guarded scf.if on the coordinate match"),
    "a cursor advanced unconditionally": (
        [("    %pbn = arith.select %eqB2, %nb, %pb : index\n", ""),
         (ITERS[3], "scf.yield %nb, %pcn, %new : index, index, f64")],
        "cursor advance is not select(eq, cursor + 1, cursor)"),
    "advanced cursor not yielded": (
        [(ITERS[3], "scf.yield %pb, %pcn, %new : index, index, f64")],
        "cursor advance is not select(eq, cursor + 1, cursor)"),
    "coordinate types differ": (
        [("%crdC: memref<?xi32>,", "%crdC: memref<?xi64>,"),
         ("    %kc0 = memref.load %crdC[%pc] : memref<?xi32>\n    %kc1 = arith.extui %kc0 : i32 to i64\n",
          "    %kc1 = memref.load %crdC[%pc] : memref<?xi64>\n")],
        "coordinate types differ (i32 vs i64)"),
    "coordinates compared as i64": (
        [("    %kb = arith.index_cast %kb1 : i64 to index\n", ""),
         ("    %kc = arith.index_cast %kc1 : i64 to index\n", ""),
         ("%lt = arith.cmpi ult, %kc, %kb : index", "%lt = arith.cmpi ult, %kc1, %kb1 : i64"),
         ("%k = arith.select %lt, %kc, %kb : index", "%k = arith.select %lt, %kc1, %kb1 : i64"),
         ("%eqB = arith.cmpi eq, %kb, %k : index", "%eqB = arith.cmpi eq, %kb1, %k : i64"),
         ("%eqC = arith.cmpi eq, %kc, %k : index", "%eqC = arith.cmpi eq, %kc1, %k : i64"),
         ("%eqB2 = arith.cmpi eq, %kb, %k : index", "%eqB2 = arith.cmpi eq, %kb1, %k : i64"),
         ("%eqC2 = arith.cmpi eq, %kc, %k : index", "%eqC2 = arith.cmpi eq, %kc1, %k : i64")],
        "coordinates are not compared as index"),
    "accumulator taken from outside the loop": (
        [(ITERS[3], "scf.yield %pbn, %pcn, %acc0 : index, index, f64")],
        "loop-carried value is not produced by the guarded scf.if"),
    "an if-result the loop drops": (
        [("%new = scf.if %both -> (f64) {", "%new:2 = scf.if %both -> (f64, f64) {"),
         ("      scf.yield %s : f64\n", "      scf.yield %s, %s : f64, f64\n"),
         ("      scf.yield %acc : f64\n", "      scf.yield %acc, %acc : f64, f64\n"),
         (ITERS[3], "scf.yield %pbn, %pcn, %new#0 : index, index, f64")],
        "scf.if result is not carried by the loop"),
    "a loop in the guarded body": (
        [("      %m = arith.mulf %vb, %vc : f64\n",
          "      %m = arith.mulf %vb, %vc : f64\n      scf.for %i = %c1 to %hiB step %c1 {\n      }\n")],
        "not innermost: guarded body contains scf.for"),
    "else-region computes": (
        [("      scf.yield %acc : f64\n", "      %z = arith.negf %acc : f64\n      scf.yield %z : f64\n")],
        "union (disjunctive) coiteration: the else-region handles unmatched coordinates"),
    "else-region yields another value": (
        [("      scf.yield %acc : f64\n", "      scf.yield %acc0 : f64\n")],
        "else-region of the guarded scf.if does not keep the accumulator"),
    "no accumulator, no store": (
        NO_ACCUMULATOR + [(THEN, LANE_LOADS)],
        "guarded body has no effect (no accumulator, no store)"),
    "integer accumulator": (
        [(ITERS[0], "%r:3 = scf.while (%pb = %pb0, %pc = %pc0, %acc = %c1) : (index, index, index) -> (index, index, index) {"),
         (ITERS[1], "scf.condition(%cond) %pb, %pc, %acc : index, index, index"),
         (ITERS[2], "^bb0(%pb: index, %pc: index, %acc: index):"),
         (ITERS[3], "scf.yield %pbn, %pcn, %new : index, index, index"),
         ("%new = scf.if %both -> (f64) {", "%new = scf.if %both -> (index) {"),
         (THEN, "      %s = arith.addi %acc, %k : index\n      scf.yield %s : index\n"),
         ("      scf.yield %acc : f64\n", "      scf.yield %acc : index\n"),
         ("  return %r#2 : f64", "  return %acc0 : f64")],
        "element type index unsupported"),
    "cursor used in arithmetic": (
        then_body(LANE_LOADS + "      %x = arith.addi %pb, %pc : index\n"),
        "cursor used outside value loads (arith.addi)"),
    "a loop value the fast lane does not model": (
        then_body(LANE_LOADS + "      %x = arith.select %lt, %vb, %vc : f64\n"),
        "arith.select uses a loop value the fast lane does not model"),
    "a memref carried by the loop": (
        memref_iter_arg("%valB", "memref<?xf64>") +
        [("%vb = memref.load %valB[%pb] : memref<?xf64>", "%vb = memref.load %mem[%pb] : memref<?xf64>")],
        "body reads a memref defined in the loop"),
    "2-D load at a cursor": (
        then_body(LANE_LOADS + "      %x = memref.load %mat[%pb, %pb] : memref<4x4xf64>\n"),
        "body reads a multi-dimensional memref at a cursor"),
    "strided load at a cursor": (
        [("%vb = memref.load %valB[%pb] : memref<?xf64>", "%vb = memref.load %strided[%pb] : memref<?xf64, strided<[2]>>")],
        "body reads a non-unit-stride memref at a cursor"),
    "integer load at a cursor": (
        then_body(LANE_LOADS + "      %x = memref.load %ints[%pb] : memref<?xi64>\n"),
        "element type i64 unsupported"),
    "load at an index computed in the loop": (
        then_body(LANE_LOADS + "      %q = arith.addi %k, %c1 : index\n      %x = memref.load %out[%q] : memref<16xf64>\n"),
        "body reads a non-cursor-indexed memref"),
    "store to a memref carried by the loop": (
        memref_iter_arg("%out", "memref<16xf64>") +
        then_body(LANE_LOADS + "      memref.store %m, %mem[%k] : memref<16xf64>\n"),
        "body writes a memref defined in the loop"),
    "store at an index computed in the loop": (
        then_body(LANE_LOADS + "      %q = arith.addi %k, %c1 : index\n      memref.store %m, %out[%q] : memref<16xf64>\n"),
        "body writes at an index computed in the loop"),
    "store at a fixed index": (
        then_body(LANE_LOADS + "      memref.store %m, %out[%c1] : memref<16xf64>\n"),
        "body writes at a loop-invariant index"),
    "a cursor cast in the body": (
        then_body(LANE_LOADS + "      %i = arith.index_cast %pb : index to i64\n"),
        "cursor used outside value loads (arith.index_cast)"),
    "integer store": (
        then_body(LANE_LOADS + "      %i = arith.fptosi %m : f64 to i64\n      memref.store %i, %outi[%k] : memref<16xi64>\n"),
        "element type i64 unsupported"),
    "a division that may trap": (
        then_body(LANE_LOADS + "      %d = arith.divsi %k, %c1 : index\n"),
        "body op arith.divsi may trap when executed speculatively"),
    "complex values (complex64 / complex128 kernels)": (
        [("%ints: memref<?xi64>,", "%ints: memref<?xi64>, %cplx: memref<?xcomplex<f64>>,")] +
        then_body(LANE_LOADS + "      %z = memref.load %cplx[%pb] : memref<?xcomplex<f64>>\n"),
        "element type complex<f64> unsupported"),
    "bool values (stored as i8)": (
        [("%ints: memref<?xi64>,", "%ints: memref<?xi64>, %bools: memref<?xi8>,")] +
        then_body(LANE_LOADS + "      %z = memref.load %bools[%pb] : memref<?xi8>\n"),
        "element type i8 unsupported"),
    "f16 arithmetic": (
        then_body(LANE_LOADS + "      %h = arith.truncf %m : f64 to f16\n"),
        "element type f16 unsupported"),
    "a vector op": (
        then_body(LANE_LOADS + "      %v = vector.broadcast %m : f64 to vector<4xf64>\n"),
        "guarded body has unsupported op vector.broadcast"),
    "no value loaded, nothing accumulated or stored": (
        NO_ACCUMULATOR + [(THEN, "      %x = arith.addi %k, %c1 : index\n")],
        "guarded body loads no floating-point value"),
}


def _variant(replacements) -> str:
    text = LOOP
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _match(text: str):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        (loop,) = [op for op in walk(module) if op.name == "scf.while"]
        return match_coiteration(loop.opview)


def test_the_unchanged_loop_matches():
    assert isinstance(_match(LOOP), Coiteration)


@pytest.mark.parametrize("case", list(DECLINES))
def test_decline_reason(case):
    replacements, reason = DECLINES[case]
    assert _match(_variant(replacements)) == Decline(reason)


def test_before_region_with_a_non_index_cursor():
    text = """
    func.func @f(%a: i64, %hi: i64) {
      %r:2 = scf.while (%x = %a, %y = %a) : (i64, i64) -> (i64, i64) {
        %p = arith.cmpi ult, %x, %hi : i64
        %q = arith.cmpi ult, %y, %hi : i64
        %c = arith.andi %p, %q : i1
        scf.condition(%c) %x, %y : i64, i64
      } do {
      ^bb0(%x: i64, %y: i64):
        scf.yield %x, %y : i64, i64
      }
      return
    }"""
    assert _match(text) == Decline("cursor is not of index type")


# ------------------------------------------------------------------------------------------ thread split
KERNEL = """
func.func @kernel(%out: memref<8x4xf64>, %x: memref<?xf64>) -> memref<8x4xf64> {
  %r = call @_internal_kernel(%out, %x) : (memref<8x4xf64>, memref<?xf64>) -> memref<8x4xf64>
  return %r : memref<8x4xf64>
}
func.func private @g()
func.func private @_internal_kernel(%out: memref<8x4xf64>, %x: memref<?xf64>) -> memref<8x4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f64
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %x[%i] : memref<?xf64>
    memref.store %v, %out[%i, %c0] : memref<8x4xf64>
  }
  return %out : memref<8x4xf64>
}
""".replace("@kernel", "@" + ENTRY).replace("@_internal_kernel", "@_internal_" + ENTRY)
FOR_LOOP = KERNEL[KERNEL.index("  scf.for"):KERNEL.index("  return %out")]
STORE = "    memref.store %v, %out[%i, %c0] : memref<8x4xf64>\n"

NOT_SPLIT = {
    "no internal function": ([(f"_internal_{ENTRY}", "_other")], "no internal kernel function"),
    "two top-level loops": ([(FOR_LOOP, FOR_LOOP + FOR_LOOP)], "2 top-level loops in the kernel"),
    "a while loop": (
        [(FOR_LOOP, "  %w = scf.while (%i = %c0) : (index) -> index {\n"
                    "    %p = arith.cmpi ult, %i, %c8 : index\n    scf.condition(%p) %i : index\n"
                    "  } do {\n  ^bb0(%i: index):\n    %n = arith.addi %i, %c1 : index\n    scf.yield %n : index\n  }\n")],
        "the outer loop is a scf.while (a compressed outer level)"),
    "a loop carrying a sum": (
        [("  scf.for %i = %c0 to %c8 step %c1 {", "  %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%s = %zero) -> (f64) {"),
         (STORE, STORE + "    %t = arith.addf %s, %v : f64\n    scf.yield %t : f64\n")],
        "the outer loop carries values (a reduction) not loaded from a rank-0 output"),
    "a store before the loop": (
        [(FOR_LOOP, "  memref.store %zero, %out[%c0, %c0] : memref<8x4xf64>\n" + FOR_LOOP)],
        "top-level memref.store outside the outer loop"),
    "a loop from 1": (
        [("scf.for %i = %c0 to %c8", "scf.for %i = %c1 to %c8")],
        "the outer loop's bounds are not constant 0..N step 1"),
    "a dynamic output": (
        [("memref<8x4xf64>", "memref<?x4xf64>")],
        "no dense output"),
    "a store to an input": (
        [(STORE, "    memref.store %v, %x[%i] : memref<?xf64>\n")],
        "the loop writes to a memref other than the dense output"),
    "a call in the loop": (
        [(STORE, STORE + "    func.call @g() : () -> ()\n")],
        "the loop contains func.call"),
    "nothing written": ([(STORE, "")], "the loop writes no dense output"),
    "a store to a fixed row": (
        [(STORE, "    memref.store %v, %out[%c0, %c0] : memref<8x4xf64>\n")],
        "the output is accessed at a row other than the outer loop's (a reduction over it)"),
}


def _split(text: str):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        before = str(module)
        result = split_outer_loop(module)
        if isinstance(result, NotSplit):
            assert str(module) == before   # a refusal leaves the module as it was
        return result


def test_the_unchanged_kernel_is_split():
    assert _split(KERNEL) == OuterLoop(8)


@pytest.mark.parametrize("case", list(NOT_SPLIT))
def test_thread_split_refusal_reason(case):
    replacements, reason = NOT_SPLIT[case]
    text = KERNEL
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    assert _split(text) == NotSplit(reason)


# A reduction over the outer loop into a rank-0 output, as the sparsifier emits ``sum(a * b)``: load the
# output before the loop, carry the sum, store it after.
REDUCE = """
func.func @kernel(%x: memref<?xT>, %out: memref<T>) -> memref<T> {
  %r = call @_internal_kernel(%x, %out) : (memref<?xT>, memref<T>) -> memref<T>
  return %r : memref<T>
}
func.func private @g()
func.func private @_internal_kernel(%x: memref<?xT>, %out: memref<T>) -> memref<T> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %init = memref.load %out[] : memref<T>
  %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%s = %init) -> (T) {
    %v = memref.load %x[%i] : memref<?xT>
    %t = COMBINE %s, %v : T
    scf.yield %t : T
  }
  memref.store %sum, %out[] : memref<T>
  return %out : memref<T>
}
""".replace("@kernel", "@" + ENTRY).replace("@_internal_kernel", "@_internal_" + ENTRY)


def _reduce(element="f64", combine="arith.addf", *replacements):
    text = REDUCE.replace("COMBINE", combine).replace("T", element)
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _split_with(text: str, reassociate: bool):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        before = str(module)
        result = split_outer_loop(module, reassociate=reassociate)
        if isinstance(result, NotSplit):
            assert str(module) == before
        else:
            # the loop runs over [lo, hi): the internal function's two new last arguments
            assert re.search(r"scf\.for %\w+ = %arg2 to %arg3 step %c1 iter_args", str(module)), str(module)
        return result


@pytest.mark.parametrize("element, combine, kind", [
    ("i64", "arith.addi", "add"), ("f64", "arith.maximumf", "maximum"), ("f32", "arith.minnumf", "fmin"),
    ("i32", "arith.minsi", "minimum")])
def test_an_exact_reduction_into_a_rank0_output_is_split(element, combine, kind):
    assert _split_with(_reduce(element, combine), reassociate=False) == OuterLoop(8, ((1, kind),))


def test_a_float_sum_is_split_only_when_reassociation_is_allowed():
    assert _split_with(_reduce(), reassociate=True) == OuterLoop(8, ((1, "add"),))
    assert _split_with(_reduce(), reassociate=False) == NotSplit(
        "a float sum over the outer loop (splitting it reorders the additions; allowed with fast_math=True)")


CARRIED = "    %t = arith.addf %s, %v : f64\n"
REDUCTION_NOT_SPLIT = {
    "a product": ([("arith.addf %s", "arith.mulf %s")], "the carried value is used by arith.mulf"),
    "two combining kinds": (
        [(CARRIED, "    %u = arith.addf %s, %v : f64\n    %t = arith.maximumf %u, %v : f64\n")],
        "the carried value is combined by add and maximum"),
    "a comparison": ([(CARRIED, CARRIED + "    %p = arith.cmpf olt, %s, %v : f64\n")],
                     "the carried value is used by arith.cmpf"),
    "a store of the running sum": (
        [(CARRIED, CARRIED + "    memref.store %t, %x[%i] : memref<?xf64>\n")],
        "the loop writes to a memref other than the dense output"),
    "a read of the output in the loop": (
        [(CARRIED, CARRIED + "    %w = memref.load %out[] : memref<f64>\n")],
        "a reduced output is accessed outside the reduction"),
    "a result used elsewhere": (
        [("  memref.store %sum, %out[] : memref<f64>\n",
          "  memref.store %sum, %out[] : memref<f64>\n  memref.store %sum, %x[%c0] : memref<?xf64>\n")],
        "the outer loop's result is used other than stored to its rank-0 output"),
    "an init not loaded from the output": (
        [("iter_args(%s = %init)", "iter_args(%s = %v0)"),
         ("  %init = memref.load %out[] : memref<f64>\n",
          "  %init = memref.load %out[] : memref<f64>\n  %v0 = memref.load %x[%c0] : memref<?xf64>\n")],
        "the outer loop carries values (a reduction) not loaded from a rank-0 output"),
}


@pytest.mark.parametrize("case", list(REDUCTION_NOT_SPLIT))
def test_reduction_split_refusal_reason(case):
    replacements, reason = REDUCTION_NOT_SPLIT[case]
    assert _split_with(_reduce("f64", "arith.addf", *replacements), reassociate=True) == NotSplit(reason)


# The sparsifier's three-way intersection loop (``a * b * c`` accumulated): three bound checks and'ed, the
# minimum as two compare-selects, the match as the and of three ``eq`` tests, three advances.
THREE_LOOP = """
func.func @f(%crdB: memref<?xi32>, %crdC: memref<?xi32>, %crdD: memref<?xi32>, %crdL: memref<?xi64>,
             %valB: memref<?xf64>, %valC: memref<?xf64>, %valD: memref<?xf64>,
             %pb0: index, %hiB: index, %pc0: index, %hiC: index, %pd0: index, %hiD: index, %acc0: f64) -> f64 {
  %c1 = arith.constant 1 : index
  %r:4 = scf.while (%pb = %pb0, %pc = %pc0, %pd = %pd0, %acc = %acc0) : (index, index, index, f64) -> (index, index, index, f64) {
    %inB = arith.cmpi ult, %pb, %hiB : index
    %inC = arith.cmpi ult, %pc, %hiC : index
    %bc = arith.andi %inB, %inC : i1
    %inD = arith.cmpi ult, %pd, %hiD : index
    %cond = arith.andi %bc, %inD : i1
    scf.condition(%cond) %pb, %pc, %pd, %acc : index, index, index, f64
  } do {
  ^bb0(%pb: index, %pc: index, %pd: index, %acc: f64):
    %kb0 = memref.load %crdB[%pb] : memref<?xi32>
    %kb = arith.index_castui %kb0 : i32 to index
    %kc0 = memref.load %crdC[%pc] : memref<?xi32>
    %kc = arith.index_castui %kc0 : i32 to index
    %kd0 = memref.load %crdD[%pd] : memref<?xi32>
    %kd = arith.index_castui %kd0 : i32 to index
    %lt = arith.cmpi ult, %kc, %kb : index
    %k1 = arith.select %lt, %kc, %kb : index
    %lt2 = arith.cmpi ult, %kd, %k1 : index
    %k = arith.select %lt2, %kd, %k1 : index
    %eqB = arith.cmpi eq, %kb, %k : index
    %eqC = arith.cmpi eq, %kc, %k : index
    %eqBC = arith.andi %eqB, %eqC : i1
    %eqD = arith.cmpi eq, %kd, %k : index
    %all = arith.andi %eqBC, %eqD : i1
    %new = scf.if %all -> (f64) {
      %vb = memref.load %valB[%pb] : memref<?xf64>
      %vc = memref.load %valC[%pc] : memref<?xf64>
      %m = arith.mulf %vb, %vc : f64
      %vd = memref.load %valD[%pd] : memref<?xf64>
      %m2 = arith.mulf %m, %vd : f64
      %s = arith.addf %acc, %m2 : f64
      scf.yield %s : f64
    } else {
      scf.yield %acc : f64
    }
    %nb = arith.addi %pb, %c1 : index
    %pbn = arith.select %eqB, %nb, %pb : index
    %nc = arith.addi %pc, %c1 : index
    %pcn = arith.select %eqC, %nc, %pc : index
    %nd = arith.addi %pd, %c1 : index
    %pdn = arith.select %eqD, %nd, %pd : index
    scf.yield %pbn, %pcn, %pdn, %new : index, index, index, f64
  }
  return %r#3 : f64
}
"""

THREE_DECLINES = {
    "an extra op in the before-region": (
        [("%cond = arith.andi %bc, %inD : i1", "%cond = arith.andi %bc, %inD : i1\n    %x = arith.addi %pb, %pc : index")],
        "not a three-way intersection: before-region is not `ult and ult and ult`"),
    "a check and'ed twice": (
        [("%cond = arith.andi %bc, %inD : i1", "%cond = arith.andi %bc, %inB : i1")],
        "not a three-way intersection: condition is not the and of the three bound checks"),
    "ule bound check": (
        [("%inD = arith.cmpi ult, %pd, %hiD : index", "%inD = arith.cmpi ule, %pd, %hiD : index")],
        "not a three-way intersection: bound check is not `cursor ult bound`"),
    "two checks on one cursor": (
        [("%inD = arith.cmpi ult, %pd, %hiD : index", "%inD = arith.cmpi ult, %pc, %hiD : index")],
        "not a three-way intersection: two bound checks test the same cursor"),
    "a side twice in the minimum": (
        [("%lt2 = arith.cmpi ult, %kd, %k1 : index", "%lt2 = arith.cmpi ult, %kb, %k1 : index")],
        "after-region has unexpected op arith.cmpi"),
    "the match misses one operand": (
        [("%new = scf.if %all -> (f64) {", "%new = scf.if %eqBC -> (f64) {")],
        "scf.if is not guarded by the coordinate match"),
    "one cursor advanced unconditionally": (
        [("scf.yield %pbn, %pcn, %pdn, %new", "scf.yield %pbn, %pcn, %nd, %new")],
        "cursor advance is not select(eq, cursor + 1, cursor)"),
    "D's coordinates of another type": (
        [("    %kd0 = memref.load %crdD[%pd] : memref<?xi32>\n    %kd = arith.index_castui %kd0 : i32 to index\n",
          "    %kd0 = memref.load %crdL[%pd] : memref<?xi64>\n    %kd = arith.index_castui %kd0 : i64 to index\n")],
        "coordinate types differ (i32 vs i64)"),
}


def _three_variant(replacements) -> str:
    text = THREE_LOOP
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def test_the_unchanged_three_way_loop_matches():
    match = _match(THREE_LOOP)
    assert isinstance(match, Coiteration) and match.fingers == 3 and match.kind == "K-accumulate"
    assert sorted(ll.side for ll in match.lane_loads.values()) == [0, 1, 2]
    assert list(match.reductions) == [3]


@pytest.mark.parametrize("case", list(THREE_DECLINES))
def test_three_way_decline_reason(case):
    replacements, reason = THREE_DECLINES[case]
    assert _match(_three_variant(replacements)) == Decline(reason)


# A guarded body calling a function (the sparsifier's insertion into a sparse output) runs under a branch
# per matched lane: accepted when it reads only the cursors, the coordinate, carried and invariant values.
WITH_CALL = [("func.func @f(", "func.func private @ins(f64, index, f64) -> f64\nfunc.func @f("),
             (THEN, LANE_LOADS + "      %s = func.call @ins(%acc, %k, %m) : (f64, index, f64) -> f64\n"
                                 "      scf.yield %s : f64\n")]


def test_a_body_with_a_call_matches_as_an_insertion():
    match = _match(_variant(WITH_CALL))
    assert isinstance(match, Coiteration) and match.kind == "sparse-output insert" and match.acc_of_result == {0: 2}


def test_a_call_reading_an_unmodelled_loop_value_declines():
    replacements = WITH_CALL[:1] + [(THEN, LANE_LOADS + "      %x = arith.select %lt, %vb, %vc : f64\n"
                                           "      %s = func.call @ins(%acc, %k, %x) : (f64, index, f64) -> f64\n"
                                           "      scf.yield %s : f64\n")]
    assert _match(_variant(replacements)) == Decline(
        "arith.select in the guarded body uses a loop value the fast lane does not model")


def test_a_call_with_nothing_carried_declines():
    replacements = [("func.func @f(", "func.func private @g(f64)\nfunc.func @f(")] + NO_ACCUMULATOR + \
        [(THEN, LANE_LOADS + "      func.call @g(%m) : (f64) -> ()\n")]
    assert _match(_variant(replacements)) == Decline(
        "guarded body calls a function but carries nothing (not a sparse-output insertion)")
