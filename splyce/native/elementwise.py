"""Elementwise products and sums of two CSR matrices (canonical: sorted, unique columns) -> CSR, native code.

Operands with the same positions (a structurally symmetric matrix and its transpose, a matrix and a copy with
new values: common) take one flat, vectorized pass over all entries (``same_pattern``). Otherwise each row is
one pass: rows holding the same columns are combined entry by entry after a vectorized compare; other rows
merge their two sorted column lists with branch-free steps (both cursors advance by comparison results, every
candidate is stored and the output cursor advances only when it is kept), so the loop does not mispredict on
irregular patterns. The output is sized by an upper bound (``min(nnz)`` for an integer product, an
intersection; ``nnz(A) + nnz(B)`` for a union) and shrunk in place afterwards; pages never written are never
touched. Values follow scipy's ``csr_binop_csr``: a missing entry counts as zero, ``op(a, b)`` is stored only
when it is not zero (NaN is kept, so NaN times a missing entry is NaN, as in scipy), columns come out sorted.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import DATA_OFFSET, address as _address
from splyce.native import ir_text

# Both kernels: the loop over rows [lo, hi) and a fast path for two rows that hold the same columns (compared
# first, then combined column by column in one pass); the part after it merges the two rows.
_ROW_HEAD = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi,
                   ptr %ends, ptr %cc, ptr %cv) {{
entry:
{entry_store}
  br label %row
row:
  %r = phi i64 [%lo, %entry], [%r1, %row_end]
  %out = phi i64 [0, %entry], [%o_end, %row_end]
  %more = icmp slt i64 %r, %hi
  br i1 %more, label %row_body, label %done
row_body:
  %r1 = add i64 %r, 1
{bounds}
  %la = sub i64 %ib, %ia
  %lb = sub i64 %jb, %ja
{narrow}
general:
  %same_len = icmp eq i64 %la, %lb
  br i1 %same_len, label %cmp_head, label %head
cmp_head:
  %q = phi i64 [0, %general], [%q1, %cmp_body]
  %d = phi i32 [0, %general], [%d1, %cmp_body]
  %qin = icmp slt i64 %q, %la
  br i1 %qin, label %cmp_body, label %cmp_done
cmp_body:
  %qa = add i64 %ia, %q
  %qb = add i64 %ja, %q
  %pqa = getelementptr i{c}, ptr %ac, i64 %qa
  %cqa = load i{c}, ptr %pqa
  %pqb = getelementptr i{c}, ptr %bc, i64 %qb
  %cqb = load i{c}, ptr %pqb
  %ne = icmp ne i{c} %cqa, %cqb
  %nei = zext i1 %ne to i32
  %d1 = or i32 %d, %nei
  %q1 = add i64 %q, 1
  br label %cmp_head
cmp_done:
  %same = icmp eq i32 %d, 0
  br i1 %same, label %same_head, label %head
same_head:
  %u = phi i64 [0, %cmp_done], [%u1, %same_body]
  %os = phi i64 [%out, %cmp_done], [%os1, %same_body]
  %uin = icmp slt i64 %u, %la
  br i1 %uin, label %same_body, label %row_end
same_body:
  %ua = add i64 %ia, %u
  %ub = add i64 %ja, %u
  %pua = getelementptr i{c}, ptr %ac, i64 %ua
  %cu = load i{c}, ptr %pua
  %pva = getelementptr {t}, ptr %av, i64 %ua
  %vua = load {t}, ptr %pva
  %pvb = getelementptr {t}, ptr %bv, i64 %ub
  %vub = load {t}, ptr %pvb
  %vu = {op} {t} %vua, %vub
  %pcu = getelementptr i{c}, ptr %cc, i64 %os
  store i{c} %cu, ptr %pcu
  %pcvu = getelementptr {t}, ptr %cv, i64 %os
  store {t} %vu, ptr %pcvu
  %nzu = {nonzero} {t} %vu, {zero}
  %nzi = zext i1 %nzu to i64
  %os1 = add i64 %os, %nzi
  %u1 = add i64 %u, 1
  br label %same_head
head:
  %i = phi i64 [%ia, %general], [%ia, %cmp_done], [%i1, %body]
  %j = phi i64 [%ja, %general], [%ja, %cmp_done], [%j1, %body]
  %o = phi i64 [%out, %general], [%out, %cmp_done], [%o1, %body]
  %ina = icmp slt i64 %i, %ib
  %inb = icmp slt i64 %j, %jb
  %both = and i1 %ina, %inb
"""

# Intersection: keep op(a, b) where both rows hold the column.
_INTERSECT = _ROW_HEAD + """  br i1 %both, label %body, label %row_end
body:
  %pac = getelementptr i{c}, ptr %ac, i64 %i
  %ca = load i{c}, ptr %pac
  %pbc = getelementptr i{c}, ptr %bc, i64 %j
  %cb = load i{c}, ptr %pbc
  %pav = getelementptr {t}, ptr %av, i64 %i
  %va = load {t}, ptr %pav
  %pbv = getelementptr {t}, ptr %bv, i64 %j
  %vb = load {t}, ptr %pbv
  %v = {op} {t} %va, %vb
  %pcc = getelementptr i{c}, ptr %cc, i64 %o
  store i{c} %ca, ptr %pcc
  %pcv = getelementptr {t}, ptr %cv, i64 %o
  store {t} %v, ptr %pcv
  %eq = icmp eq i{c} %ca, %cb
  %nz = {nonzero} {t} %v, {zero}
  %keep = and i1 %eq, %nz
  %kinc = zext i1 %keep to i64
  %o1 = add i64 %o, %kinc
  %adv_a = icmp sle i{c} %ca, %cb
  %adv_b = icmp sle i{c} %cb, %ca
  %ai = zext i1 %adv_a to i64
  %bi = zext i1 %adv_b to i64
  %i1 = add i64 %i, %ai
  %j1 = add i64 %j, %bi
  br label %head
row_end:
  %o_end = phi i64 [%o, %head], [%os, %same_head], [%out, %nw_ends], [%nw_o, %nw_head]
{end_store}
  br label %row
done:
  ret i64 %out
}}

declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.ctpop.i64(i64)
"""

# Rows whose common columns lie in a window of 64 (blocks, bands, meshes in a good order): each row's columns in
# the window become a 64-bit mask, and only the bits of the masks' AND are visited (count-trailing-zeros); an
# entry's place in its row is the entries before the window plus a popcount below its bit. A row pair with no
# column in common (disjoint windows) costs four loads. Values, order and zero dropping as in the merge.
_NARROW = """  %nw_a = icmp sgt i64 %la, 0
  %nw_b = icmp sgt i64 %lb, 0
  %nw_ab = and i1 %nw_a, %nw_b
  br i1 %nw_ab, label %nw_ends, label %general
nw_ends:
  %nw_pfa = getelementptr i{c}, ptr %ac, i64 %ia
  %nw_fa = load i{c}, ptr %nw_pfa
  %nw_ib1 = sub i64 %ib, 1
  %nw_pla = getelementptr i{c}, ptr %ac, i64 %nw_ib1
  %nw_lastA = load i{c}, ptr %nw_pla
  %nw_pfb = getelementptr i{c}, ptr %bc, i64 %ja
  %nw_fb = load i{c}, ptr %nw_pfb
  %nw_jb1 = sub i64 %jb, 1
  %nw_plb = getelementptr i{c}, ptr %bc, i64 %nw_jb1
  %nw_lastB = load i{c}, ptr %nw_plb
  %nw_lo_a = icmp sgt i{c} %nw_fa, %nw_fb
  %nw_lo = select i1 %nw_lo_a, i{c} %nw_fa, i{c} %nw_fb
  %nw_hi_a = icmp slt i{c} %nw_lastA, %nw_lastB
  %nw_hi = select i1 %nw_hi_a, i{c} %nw_lastA, i{c} %nw_lastB
  %nw_none = icmp slt i{c} %nw_hi, %nw_lo
  br i1 %nw_none, label %row_end, label %nw_width
nw_width:
  %nw_w = sub i{c} %nw_hi, %nw_lo
  %nw_fits = icmp ult i{c} %nw_w, 64
  br i1 %nw_fits, label %nw_ma_head, label %general
{mask_a}{mask_b}nw_start:
  %nw_u0 = and i64 %nw_ma, %nw_mb
  %nw_abase = add i64 %ia, %nw_na
  %nw_bbase = add i64 %ja, %nw_nb
  %nw_lo64 = {c_sext} %nw_lo to i64
  br label %nw_head
nw_head:
  %nw_u = phi i64 [%nw_u0, %nw_start], [%nw_u1, %nw_body]
  %nw_o = phi i64 [%out, %nw_start], [%nw_o1, %nw_body]
  %nw_any = icmp ne i64 %nw_u, 0
  br i1 %nw_any, label %nw_body, label %row_end
nw_body:
  %nw_bit = call i64 @llvm.cttz.i64(i64 %nw_u, i1 true)
  %nw_one = shl i64 1, %nw_bit
  %nw_below = sub i64 %nw_one, 1
  %nw_mab = and i64 %nw_ma, %nw_below
  %nw_pa = call i64 @llvm.ctpop.i64(i64 %nw_mab)
  %nw_mbb = and i64 %nw_mb, %nw_below
  %nw_pb = call i64 @llvm.ctpop.i64(i64 %nw_mbb)
  %nw_xa = add i64 %nw_abase, %nw_pa
  %nw_xb = add i64 %nw_bbase, %nw_pb
  %nw_pva = getelementptr {t}, ptr %av, i64 %nw_xa
  %nw_va = load {t}, ptr %nw_pva
  %nw_pvb = getelementptr {t}, ptr %bv, i64 %nw_xb
  %nw_vb = load {t}, ptr %nw_pvb
  %nw_v = {op} {t} %nw_va, %nw_vb
  %nw_col64 = add i64 %nw_lo64, %nw_bit
  %nw_col = {c_narrow} %nw_col64 to i{c}
  %nw_pcc = getelementptr i{c}, ptr %cc, i64 %nw_o
  store i{c} %nw_col, ptr %nw_pcc
  %nw_pcv = getelementptr {t}, ptr %cv, i64 %nw_o
  store {t} %nw_v, ptr %nw_pcv
  %nw_nz = {nonzero} {t} %nw_v, {zero}
  %nw_nzi = zext i1 %nw_nz to i64
  %nw_o1 = add i64 %nw_o, %nw_nzi
  %nw_u1 = xor i64 %nw_u, %nw_one
  br label %nw_head"""


# A sum of rows whose columns together span at most 64 (blocks, bands): both rows' columns become 64-bit masks
# over the window from their first column, and the bits of the masks' OR are visited in order; an entry's
# place in its row is a popcount below its bit. op(a, 0), op(0, b) or op(a, b) as in the merge, the same
# values in the same order, without the merge's chain of loads (each step of a branch-free merge waits for the
# compare of the entries it loaded). With ``_keep`` (no branch per result) blockdiag-1500's A + A^T merge took
# 33-36 -> 17 ms CPU (scipy's csr_plus_csr 28 ms; 4096 of its rows in cache: 11 -> 5.3 ns per result).
_NARROW_UNION = """  %nw_a = icmp sgt i64 %la, 0
  %nw_b = icmp sgt i64 %lb, 0
  %nw_ab = and i1 %nw_a, %nw_b
  br i1 %nw_ab, label %nw_ends, label %general
nw_ends:
  %nw_pfa = getelementptr i{c}, ptr %ac, i64 %ia
  %nw_fa = load i{c}, ptr %nw_pfa
  %nw_ib1 = sub i64 %ib, 1
  %nw_pla = getelementptr i{c}, ptr %ac, i64 %nw_ib1
  %nw_lastA = load i{c}, ptr %nw_pla
  %nw_pfb = getelementptr i{c}, ptr %bc, i64 %ja
  %nw_fb = load i{c}, ptr %nw_pfb
  %nw_jb1 = sub i64 %jb, 1
  %nw_plb = getelementptr i{c}, ptr %bc, i64 %nw_jb1
  %nw_lastB = load i{c}, ptr %nw_plb
  %nw_lo_a = icmp slt i{c} %nw_fa, %nw_fb
  %nw_lo = select i1 %nw_lo_a, i{c} %nw_fa, i{c} %nw_fb
  %nw_hi_a = icmp sgt i{c} %nw_lastA, %nw_lastB
  %nw_hi = select i1 %nw_hi_a, i{c} %nw_lastA, i{c} %nw_lastB
  br label %nw_width
nw_width:
  %nw_w = sub i{c} %nw_hi, %nw_lo
  %nw_fits = icmp ult i{c} %nw_w, 64
  br i1 %nw_fits, label %nw_ma_head, label %general
{mask_a}{mask_b}nw_start:
  %nw_u0 = or i64 %nw_ma, %nw_mb
  %nw_lo64 = {c_sext} %nw_lo to i64
  br label %nw_head
nw_head:
  %nw_u = phi i64 [%nw_u0, %nw_start], [%nw_u1, %nw_body]
  %nw_o = phi i64 [%out, %nw_start], [%nw_o1, %nw_body]
  %nw_any = icmp ne i64 %nw_u, 0
  br i1 %nw_any, label %nw_body, label %row_end
nw_body:
  %nw_bit = call i64 @llvm.cttz.i64(i64 %nw_u, i1 true)
  %nw_one = shl i64 1, %nw_bit
  %nw_below = sub i64 %nw_one, 1
  %nw_mab = and i64 %nw_ma, %nw_below
  %nw_pa = call i64 @llvm.ctpop.i64(i64 %nw_mab)
  %nw_mbb = and i64 %nw_mb, %nw_below
  %nw_pb = call i64 @llvm.ctpop.i64(i64 %nw_mbb)
  %nw_hasa_m = and i64 %nw_ma, %nw_one
  %nw_hasa = icmp ne i64 %nw_hasa_m, 0
  %nw_hasb_m = and i64 %nw_mb, %nw_one
  %nw_hasb = icmp ne i64 %nw_hasb_m, 0
  %nw_xa0 = add i64 %ia, %nw_pa
  %nw_xa = select i1 %nw_hasa, i64 %nw_xa0, i64 %ia
  %nw_xb0 = add i64 %ja, %nw_pb
  %nw_xb = select i1 %nw_hasb, i64 %nw_xb0, i64 %ja
  %nw_pva = getelementptr {t}, ptr %av, i64 %nw_xa
  %nw_va_raw = load {t}, ptr %nw_pva
  %nw_pvb = getelementptr {t}, ptr %bv, i64 %nw_xb
  %nw_vb_raw = load {t}, ptr %nw_pvb
{keep_nw_a}{keep_nw_b}  %nw_v = {op} {t} %nw_va, %nw_vb
  %nw_col64 = add i64 %nw_lo64, %nw_bit
  %nw_col = {c_narrow} %nw_col64 to i{c}
  %nw_pcc = getelementptr i{c}, ptr %cc, i64 %nw_o
  store i{c} %nw_col, ptr %nw_pcc
  %nw_pcv = getelementptr {t}, ptr %cv, i64 %nw_o
  store {t} %nw_v, ptr %nw_pcv
  %nw_nz = {nonzero} {t} %nw_v, {zero}
  %nw_nzi = zext i1 %nw_nz to i64
  %nw_o1 = add i64 %nw_o, %nw_nzi
  %nw_um = sub i64 %nw_u, 1
  %nw_u1 = and i64 %nw_u, %nw_um
  br label %nw_head"""


# One row's columns in the window [%nw_lo, %nw_lo + 64) as a 64-bit mask, and its entries before the window.
_NARROW_MASK = """nw_m{x}_head:
  %nw_k{x} = phi i64 [%{start}, %{enter}], [%nw_k{x}1, %nw_m{x}_body]
  %nw_m{x} = phi i64 [0, %{enter}], [%nw_m{x}1, %nw_m{x}_body]
  %nw_n{x} = phi i64 [0, %{enter}], [%nw_n{x}1, %nw_m{x}_body]
  %nw_k{x}in = icmp slt i64 %nw_k{x}, %{stop}
  br i1 %nw_k{x}in, label %nw_m{x}_body, label %{exit}
nw_m{x}_body:
  %nw_pk{x} = getelementptr i{c}, ptr %{crd}, i64 %nw_k{x}
  %nw_ck{x} = load i{c}, ptr %nw_pk{x}
  %nw_r{x} = sub i{c} %nw_ck{x}, %nw_lo
  %nw_r{x}64 = {c_zext} %nw_r{x} to i64
  %nw_in{x} = icmp ult i64 %nw_r{x}64, 64
  %nw_sh{x} = and i64 %nw_r{x}64, 63
  %nw_bit{x} = shl i64 1, %nw_sh{x}
  %nw_bit{x}_k = select i1 %nw_in{x}, i64 %nw_bit{x}, i64 0
  %nw_m{x}1 = or i64 %nw_m{x}, %nw_bit{x}_k
  %nw_lt{x} = icmp slt i{c} %nw_ck{x}, %nw_lo
  %nw_lt{x}i = zext i1 %nw_lt{x} to i64
  %nw_n{x}1 = add i64 %nw_n{x}, %nw_lt{x}i
  %nw_k{x}1 = add i64 %nw_k{x}, 1
  br label %nw_m{x}_head
"""

# Union: op(a, 0), op(0, b) or op(a, b) for every column either row holds, kept when not zero.
_UNION = _ROW_HEAD + """  br i1 %both, label %body, label %tail_a
body:
  %pac = getelementptr i{c}, ptr %ac, i64 %i
  %ca = load i{c}, ptr %pac
  %pbc = getelementptr i{c}, ptr %bc, i64 %j
  %cb = load i{c}, ptr %pbc
  %pav = getelementptr {t}, ptr %av, i64 %i
  %va_raw = load {t}, ptr %pav
  %pbv = getelementptr {t}, ptr %bv, i64 %j
  %vb_raw = load {t}, ptr %pbv
  %adv_a = icmp sle i{c} %ca, %cb
  %adv_b = icmp sle i{c} %cb, %ca
{keep_a}{keep_b}  %v = {op} {t} %va, %vb
  %col = select i1 %adv_a, i{c} %ca, i{c} %cb
  %pcc = getelementptr i{c}, ptr %cc, i64 %o
  store i{c} %col, ptr %pcc
  %pcv = getelementptr {t}, ptr %cv, i64 %o
  store {t} %v, ptr %pcv
  %nz = {nonzero} {t} %v, {zero}
  %kinc = zext i1 %nz to i64
  %o1 = add i64 %o, %kinc
  %ai = zext i1 %adv_a to i64
  %bi = zext i1 %adv_b to i64
  %i1 = add i64 %i, %ai
  %j1 = add i64 %j, %bi
  br label %head
tail_a:
  %ta = phi i64 [%i, %head], [%ta1, %ta_body]
  %toa = phi i64 [%o, %head], [%toa1, %ta_body]
  %ina2 = icmp slt i64 %ta, %ib
  br i1 %ina2, label %ta_body, label %tail_b
ta_body:
  %tpac = getelementptr i{c}, ptr %ac, i64 %ta
  %tca = load i{c}, ptr %tpac
  %tpav = getelementptr {t}, ptr %av, i64 %ta
  %tva = load {t}, ptr %tpav
  %tv = {op} {t} %tva, {zero}
  %tpcc = getelementptr i{c}, ptr %cc, i64 %toa
  store i{c} %tca, ptr %tpcc
  %tpcv = getelementptr {t}, ptr %cv, i64 %toa
  store {t} %tv, ptr %tpcv
  %tnz = {nonzero} {t} %tv, {zero}
  %tinc = zext i1 %tnz to i64
  %toa1 = add i64 %toa, %tinc
  %ta1 = add i64 %ta, 1
  br label %tail_a
tail_b:
  %tb = phi i64 [%j, %tail_a], [%tb1, %tb_body]
  %tob = phi i64 [%toa, %tail_a], [%tob1, %tb_body]
  %inb2 = icmp slt i64 %tb, %jb
  br i1 %inb2, label %tb_body, label %row_end
tb_body:
  %tpbc = getelementptr i{c}, ptr %bc, i64 %tb
  %tcb = load i{c}, ptr %tpbc
  %tpbv = getelementptr {t}, ptr %bv, i64 %tb
  %tvb = load {t}, ptr %tpbv
  %tw = {op} {t} {zero}, %tvb
  %tpcc2 = getelementptr i{c}, ptr %cc, i64 %tob
  store i{c} %tcb, ptr %tpcc2
  %tpcv2 = getelementptr {t}, ptr %cv, i64 %tob
  store {t} %tw, ptr %tpcv2
  %tnz2 = {nonzero} {t} %tw, {zero}
  %tinc2 = zext i1 %tnz2 to i64
  %tob1 = add i64 %tob, %tinc2
  %tb1 = add i64 %tb, 1
  br label %tail_b
row_end:
  %o_end = phi i64 [%tob, %tail_b], [%os, %same_head], [%nw_o, %nw_head]
{end_store}
  br label %row
done:
  ret i64 %out
}}

declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.ctpop.i64(i64)
"""

_BOUNDS = """  %pa0 = getelementptr i{p}, ptr %ap, i64 %r
  %ia_raw = load i{p}, ptr %pa0
  %ia = {p_ext} %ia_raw to i64
  %pa1 = getelementptr i{p}, ptr %ap, i64 %r1
  %ib_raw = load i{p}, ptr %pa1
  %ib = {p_ext} %ib_raw to i64
  %pb0 = getelementptr i{p}, ptr %bp, i64 %r
  %ja_raw = load i{p}, ptr %pb0
  %ja = {p_ext} %ja_raw to i64
  %pb1 = getelementptr i{p}, ptr %bp, i64 %r1
  %jb_raw = load i{p}, ptr %pb1
  %jb = {p_ext} %jb_raw to i64"""

# ``%out = cond ? %raw : +0`` as bit operations (an AND with the condition's all-ones or all-zeros mask): LLVM
# turns a select between a loaded value and a constant into a branch around the load, and which operand holds
# the next column is a coin flip in a merge (a misprediction per output entry: blockdiag-1500's sum took 11 ns
# per result, in cache)
def _keep(out: str, cond: str, raw: str, t: str) -> str:
    bits = {"double": 64, "float": 32, "i64": 64, "i32": 32}[t]
    lines = [f"  %{out}_mask = sext i1 %{cond} to i{bits}"]
    if t in ("double", "float"):
        lines += [f"  %{out}_raw_bits = bitcast {t} %{raw} to i{bits}",
                  f"  %{out}_bits = and i{bits} %{out}_raw_bits, %{out}_mask",
                  f"  %{out} = bitcast i{bits} %{out}_bits to {t}"]
    else:
        lines += [f"  %{out} = and i{bits} %{raw}, %{out}_mask"]
    return "\n".join(lines) + "\n"


# value dtype -> (LLVM type, zero, "is not zero" compare, {op name: instruction})
_VALUE = {
    np.dtype(np.float64): ("double", "0.0", "fcmp une", {"multiply": "fmul", "add": "fadd", "subtract": "fsub"}),
    np.dtype(np.float32): ("float", "0.0", "fcmp une", {"multiply": "fmul", "add": "fadd", "subtract": "fsub"}),
    np.dtype(np.int64): ("i64", "0", "icmp ne", {"multiply": "mul", "add": "add", "subtract": "sub"}),
    np.dtype(np.int32): ("i32", "0", "icmp ne", {"multiply": "mul", "add": "add", "subtract": "sub"}),
}
OPS = ("multiply", "add", "subtract")
_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P, _P)
_lock = threading.Lock()
_POS_MAX = {32: 2**31 - 1, 64: 2**63 - 1}   # result entries a positions dtype can count


# Where a kernel's row ends go: ``ends[r - lo]`` as i64 (row ranges of threads, moved and offset afterwards), or
# ``direct``: the whole matrix on one range, straight into the result's positions (``indptr[r + 1]`` in the
# positions' width, ``indptr[0] = 0``), so the call needs no conversion afterwards
_END_STORES = {
    False: ("", """  %rel = sub i64 %r, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  store i64 %o_end, ptr %pend"""),
    True: ("  store i{p} 0, ptr %ends", """  %pend = getelementptr i{p}, ptr %ends, i64 %r1
  %o_end_p = {p_narrow} %o_end to i{p}
  store i{p} %o_end_p, ptr %pend"""),
}


@functools.cache
def _kernel(op: str, value: np.dtype, pos_bits: int, crd_bits: int, intersect: bool, direct: bool = False):
    """The merge of rows [lo, hi) (``direct``: all rows, reached through an object entry taking array objects)."""
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, ops = _VALUE[value]
    name = f"splyce_elementwise_{op}_{t}_p{pos_bits}_c{crd_bits}_{'i' if intersect else 'u'}{'_d' if direct else ''}"
    bounds = _BOUNDS.format(p=pos_bits, p_ext="zext i32" if pos_bits == 32 else "bitcast i64")
    template = _INTERSECT if intersect else _UNION
    zext = "zext i32" if crd_bits == 32 else "bitcast i64"
    masks = {f"mask_{x}": _NARROW_MASK.format(x=x, start=start, stop=stop, crd=crd, enter=enter, exit=exit_,
                                              c=crd_bits, c_zext=zext)
             for x, start, stop, crd, enter, exit_ in (("a", "ia", "ib", "ac", "nw_width", "nw_mb_head"),
                                                       ("b", "ja", "jb", "bc", "nw_ma_head", "nw_start"))}
    narrow = (_NARROW if intersect else _NARROW_UNION).format(
        **masks, t=t, zero=zero, nonzero=nonzero, op=ops[op], c=crd_bits,
        keep_nw_a=_keep("nw_va", "nw_hasa", "nw_va_raw", t), keep_nw_b=_keep("nw_vb", "nw_hasb", "nw_vb_raw", t),
        c_sext="sext i32" if crd_bits == 32 else "bitcast i64",
        c_narrow="trunc i64" if crd_bits == 32 else "bitcast i64")
    entry_store, end_store = (x.format(p=pos_bits, p_narrow="trunc i64" if pos_bits == 32 else "bitcast i64")
                              for x in _END_STORES[direct])
    text = template.format(name=name, t=t, zero=zero, nonzero=nonzero, op=ops[op], c=crd_bits, bounds=bounds,
                           narrow=narrow, keep_a=_keep("va", "adv_a", "va_raw", t),
                           keep_b=_keep("vb", "adv_b", "vb_raw", t), entry_store=entry_store, end_store=end_store)
    if not direct:
        return compile_host_helpers(text, {name: _SIG})[name]
    text += array_objects.object_entry_ir(name + "_objects", name, "aaaaaaiiaaa")
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(11)})[name + "_objects"]


def _intersects(op: str, av: np.ndarray, bv: np.ndarray, threads: int = 1) -> bool:
    """Whether only columns both rows hold can give nonzero results: a product, except of floats where NaN or
    Inf meets an absent entry (as in scipy and IEEE, NaN or Inf times zero is NaN, kept: then the product
    merges as a union). A finite sum proves every value finite (NaN and Inf propagate into it; an overflow
    to Inf only costs the union). The sums of large operands are split across threads (NumPy's reductions
    release the GIL)."""
    if op != "multiply":
        return False
    if av.dtype.kind != "f":
        return True
    parts = [av, bv]
    if threads > 1 and len(av) + len(bv) >= 2 * ir_text.MIN_CHUNK:
        half_a, half_b = len(av) // 2, len(bv) // 2
        parts = [(av[:half_a], bv[:half_b]), (av[half_a:], bv[half_b:])]
        sums = ir_text.run_chunks(lambda t, lo, hi: float(parts[t][0].sum()) + float(parts[t][1].sum()),
                                  [(0, 1), (1, 2)], threads)
        return all(np.isfinite(sums))
    return bool(np.isfinite(av.sum()) and np.isfinite(bv.sum()))


def supported(dtype) -> bool:
    return np.dtype(dtype) in _VALUE


@functools.cache
def _memcmp():
    fn = ctypes.CDLL(None).memcmp
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    fn.restype = ctypes.c_int
    return fn


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal C-contiguous arrays of one dtype (libc's memcmp: SIMD, stops at the first difference)."""
    return len(x) == len(y) and (x.nbytes == 0 or _memcmp()(_address(x), _address(y), x.nbytes) == 0)


# Same positions in both operands: one flat, vectorizable pass over all entries writes every column and
# op(a, b), counts the nonzero results, and records whether any column differs (then the caller merges).
_SAME = """
define void @{name}(ptr %ac, ptr %bc, ptr %av, ptr %bv, i64 %n, ptr %cc, ptr %cv, ptr %out) {{
entry:
  br label %head
head:
  %k = phi i64 [0, %entry], [%k1, %body]
  %diff = phi i32 [0, %entry], [%diff1, %body]
  %kept = phi i64 [0, %entry], [%kept1, %body]
  %more = icmp slt i64 %k, %n
  br i1 %more, label %body, label %done
body:
  %pac = getelementptr i{c}, ptr %ac, i64 %k
  %ca = load i{c}, ptr %pac
  %pbc = getelementptr i{c}, ptr %bc, i64 %k
  %cb = load i{c}, ptr %pbc
  %pav = getelementptr {t}, ptr %av, i64 %k
  %va = load {t}, ptr %pav
  %pbv = getelementptr {t}, ptr %bv, i64 %k
  %vb = load {t}, ptr %pbv
  %v = {op} {t} %va, %vb
  %pcc = getelementptr i{c}, ptr %cc, i64 %k
  store i{c} %ca, ptr %pcc
  %pcv = getelementptr {t}, ptr %cv, i64 %k
  store {t} %v, ptr %pcv
  %ne = icmp ne i{c} %ca, %cb
  %nei = zext i1 %ne to i32
  %diff1 = or i32 %diff, %nei
  %nz = {nonzero} {t} %v, {zero}
  %nzi = zext i1 %nz to i64
  %kept1 = add i64 %kept, %nzi
  %k1 = add i64 %k, 1
  br label %head
done:
  %d64 = zext i32 %diff to i64
  store i64 %d64, ptr %out
  %o1 = getelementptr i64, ptr %out, i64 1
  store i64 %kept, ptr %o1
  ret void
}}
"""
_SAME_SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 4), ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


@functools.cache
def _same_kernel(op: str, value: np.dtype, crd_bits: int):
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, ops = _VALUE[value]
    name = f"splyce_elementwise_same_{op}_{t}_c{crd_bits}"
    text = _SAME.format(name=name, t=t, zero=zero, nonzero=nonzero, op=ops[op], c=crd_bits)
    return compile_host_helpers(text, {name: _SAME_SIG})[name]


def same_pattern(op: str, a, b, dtype, drop_zeros: bool = True):
    """``op(A, B)`` as ``(data, indices, indptr)`` when B holds exactly A's positions (equal ``indptr`` and
    ``indices``), else None. Only A needs to be validated: B's index arrays are compared, never followed.
    ``drop_zeros``: scipy's rule (a zero result is not stored); False keeps every position, as the sparsifier's
    coiteration does (the jit's semantics)."""
    av, ac, ap = a
    bv, bc, bp = b
    if ac.dtype != bc.dtype or ap.dtype != bp.dtype or not _same_bytes(ap, bp) or len(ac) != len(bc):
        return None
    dtype = np.dtype(dtype)
    n = len(ac)
    with _lock:
        kernel = _same_kernel(op, dtype, ac.dtype.itemsize * 8)
    cols = np.empty(n, dtype=ac.dtype)
    vals = np.empty(n, dtype=dtype)
    out = np.zeros(2, dtype=np.int64)
    kernel(_address(ac), _address(bc), _address(av), _address(bv), n, _address(cols),
           _address(vals), _address(out))
    if out[0]:
        return None
    if not drop_zeros:
        return vals, cols, ap.copy()
    return _drop_zeros(vals, cols, ap.copy(), int(out[1]))


def _drop_zeros(vals, cols, indptr, kept: int):
    """The entries of (vals, cols, indptr) whose value is not zero (``kept`` of them), as scipy's products drop
    them; NaN != 0 is kept."""
    n = len(vals)
    if kept != n:
        keep = vals != 0
        kept_before = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        vals, cols, indptr = vals[keep], cols[keep], kept_before[indptr].astype(indptr.dtype)
    return vals, cols, indptr


def elementwise(op: str, a, b, dtype, threads: int = 1):
    """``(data, indices, indptr)`` of ``op(A, B)`` for canonical CSR parts ``a = (data, indices, indptr)`` and
    ``b`` of one shape, with equal index dtypes (pos: int32 or int64; crd: int32 or int64) and values of
    ``dtype``. Index dtypes of the result are the operands'. ``threads``: row ranges balanced by the entries
    of both operands, each writing straight into the result at its upper-bound offset; the ranges after the
    first then move down to close the gaps (bit-identical to one thread)."""
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    m = len(ap) - 1
    same = same_pattern(op, a, b, dtype)
    if same is not None:
        return same
    pos_bits, crd_bits = ap.dtype.itemsize * 8, ac.dtype.itemsize * 8
    intersect = _intersects(op, av, bv, threads)
    one = threads <= 1 or len(ac) + len(bc) < 2 * ir_text.MIN_CHUNK
    bound = min(len(ac), len(bc)) if intersect else len(ac) + len(bc)
    if one and m > 0 and bound <= _POS_MAX[pos_bits] and DATA_OFFSET is not None:
        key = (op, dtype, pos_bits, crd_bits, intersect)
        kernel = _direct_kernels.get(key)
        if kernel is None:
            with _lock:
                kernel = _direct_kernels[key] = _kernel(*key, direct=True)
        cols = np.empty(bound + 1, dtype=ac.dtype)    # + 1: the store before the last test
        vals = np.empty(bound + 1, dtype=dtype)
        indptr = np.empty(m + 1, dtype=ap.dtype)
        nnz = kernel(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), 0, m, id(indptr), id(cols), id(vals))
        cols.resize(nnz, refcheck=False)     # shrink in place: no copy of the entries
        vals.resize(nnz, refcheck=False)
        return vals, cols, indptr
    with _lock:
        kernel = _kernel(op, dtype, pos_bits, crd_bits, intersect)
    chunks = [(0, m)]
    if threads > 1 and len(ac) + len(bc) >= 2 * ir_text.MIN_CHUNK:
        chunks = ir_text.work_chunks(ap.astype(np.int64) + bp, threads)
    # each range's room: its bound (min(na, nb) for an intersection, na + nb for a union) + 1 for the store
    # before the last test
    bound = [(min if intersect else int.__add__)(int(ap[hi] - ap[lo]), int(bp[hi] - bp[lo])) + 1
             for lo, hi in chunks]
    starts = np.concatenate([[0], np.cumsum(bound)]).tolist()
    cols = np.empty(starts[-1], dtype=ac.dtype)
    vals = np.empty(starts[-1], dtype=dtype)
    ends = np.empty(m, dtype=np.int64)
    cbase, vbase, ebase = _address(cols), _address(vals), _address(ends)

    def run(t, lo, hi):
        return int(kernel(_address(ap), _address(ac), _address(av), _address(bp), _address(bc), _address(bv),
                          lo, hi, ebase + lo * 8, cbase + starts[t] * cols.itemsize,
                          vbase + starts[t] * vals.itemsize))

    counts = ir_text.run_chunks(run, chunks, threads)
    nnz = sum(counts)
    offset = 0
    for t, ((lo, hi), count) in enumerate(zip(chunks, counts)):
        if t:     # close the gap (a move to a lower offset: numpy copies overlapping ranges correctly)
            cols[offset:offset + count] = cols[starts[t]:starts[t] + count]
            vals[offset:offset + count] = vals[starts[t]:starts[t] + count]
            ends[lo:hi] += offset
        offset += count
    cols.resize(nnz, refcheck=False)     # shrink in place: no copy of the entries
    vals.resize(nnz, refcheck=False)
    pos_dtype = ap.dtype if nnz <= np.iinfo(ap.dtype).max else np.dtype(np.int64)
    indptr = np.empty(m + 1, dtype=pos_dtype)
    indptr[0] = 0
    indptr[1:] = ends
    return vals, cols, indptr


# A row of A in the CSC passes (the one pass and its vector rows): its entries' range and its index narrowed
# to B's row type; the templates are formatted after joining, so the fields are theirs
_CSC_ROW_BODY = """row_body:
  %r1 = add i64 %r, 1
  %pr0 = getelementptr i{c}, ptr %ap, i64 %r
  %k0_raw = load i{c}, ptr %pr0
  %k0 = {ext} %k0_raw to i64
  %pr1 = getelementptr i{c}, ptr %ap, i64 %r1
  %k1_raw = load i{c}, ptr %pr1
  %k1 = {ext} %k1_raw to i64
  %r_c = {narrow} %r to i{c}
  br label %entries
"""

# An entry of that row: its column and the column's cursor (B's next entry) and end
_CSC_ENTRY_CURSOR = """entry_body:
  %pac = getelementptr i{c}, ptr %ac, i64 %k
  %col_raw = load i{c}, ptr %pac
  %col = {ext} %col_raw to i64
  %pcur = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %col, i32 0
  %at0_raw = load i{c}, ptr %pcur
  %at0 = {ext} %at0_raw to i64
  %pbe = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %col, i32 1
  %end_raw = load i{c}, ptr %pbe
  %end = {ext} %end_raw to i64
"""

# The whole product or sum of a CSR A and a CSC B (``A.T`` as scipy hands it over) on one thread, in one native
# call (the cursor array holds each column's next entry and its end side by side: one scattered line per entry
# instead of two, A * A.T on fem3d-100k 18.6 -> 13.0 ms, ba-100k 28 -> 25 ms, thread CPU, loaded): A checked canonical, B's positions (or, for a product, all of B) checked unless B's index arrays are
# A's memory (``A.T`` of a square A: scipy hands over new views of A's arrays), then one pass over A's entries
# in order. The B entry at (i, j) lies in B's column j, whose rows are sorted, so a cursor per column walks it
# as A's rows go by, with no transpose of B. A sum ("match"): every A entry must find B's entry at its (row,
# column) under the cursor (B then holds exactly A's positions: as many entries, each matched once), else -1
# is returned and the caller merges. A product ("intersect"): the cursor first skips B's entries of rows
# before i (no partner in A), so any canonical B works; an entry of either operand without a partner only
# drops out when it is finite (x * 0 == 0; NaN or Inf times a missing entry is NaN, kept by scipy), else -4
# is returned and the caller merges as a union. Results come out in A's order (canonical CSR); zero results
# op(a, b) are counted and, if any, dropped by a second pass (the output cursor advancing on nonzero results
# in the main loop made every store's address wait for the last value's scattered load: ba-100k's pass took
# 1.7x as long). On a small matrix the call's fixed costs (a separate check per operand, the result's
# structure copied by NumPy, one ctypes call each) cost as much as the pass, and more with cold caches (each
# distinct NumPy or Python step then costs 5-20 us). B's values are read once in order before the pass (an
# OR of their words): the pass reads them in scattered order, each cold line a wait, while a stream is
# prefetched. Returns the number of result entries, or -2 (A not canonical), -3 (B's positions / entries not
# well formed), -1 (a sum: the positions differ), -4 (a product: a NaN or Inf without a partner).
_CSC_PASS = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cursor, ptr %cc, ptr %cv,
                   ptr %cp, i64 %m, i64 %n, i64 %nnz_a, i64 %nnz_b, i64 %lo, i64 %hi, ptr %seen) {{
entry:
  %sink = alloca i64
  %bad = alloca i32
  store i32 0, ptr %bad
  %vc_zp = alloca i64
  %vbytes = mul i64 %nnz_b, {vsize}
{prologue}
  %a_bad = call i64 @{check}_canonical(ptr %ap, ptr %ac, i64 %m, i64 %n, i64 %nnz_a)
  %a_fail = icmp ne i64 %a_bad, 0
  br i1 %a_fail, label %ret2, label %b_q
b_q:
  %same_c = icmp eq ptr %bc, %ac
  %same_p = icmp eq ptr %bp, %ap
  %same_mn = icmp eq i64 %m, %n
  %same_nnz = icmp eq i64 %nnz_b, %nnz_a
  %same_cp = and i1 %same_c, %same_p
  %same_sizes = and i1 %same_mn, %same_nnz
  %own = and i1 %same_cp, %same_sizes
  br i1 %own, label %touch, label %b_check
b_check:
{b_check}
touch:
  %bv_small = icmp ule i64 %vbytes, {touch_max}
  %bv_all = lshr i64 %vbytes, 3
  %bv_words = select i1 %bv_small, i64 %bv_all, i64 0
  br label %touch_head
touch_head:
  %w = phi i64 [0, %touch], [%w1, %touch_body]
  %wacc = phi i64 [0, %touch], [%wacc1, %touch_body]
  %win = icmp slt i64 %w, %bv_words
  br i1 %win, label %touch_body, label %touched
touch_body:
  %pw = getelementptr i64, ptr %bv, i64 %w
  %wv = load i64, ptr %pw
  %wacc1 = or i64 %wacc, %wv
  %w1 = add i64 %w, 1
  br label %touch_head
touched:
  store volatile i64 %wacc, ptr %sink
  br label %init_head
init_head:
  %j = phi i64 [{init_lo}, %touched], [%j1, %{init_latch}]
  %isum = phi i64 [0, %touched], [%isum1, %{init_latch}]
  %jin = icmp slt i64 %j, {init_hi}
  br i1 %jin, label %init_body, label %rows
init_body:
{init_value}
  %pcj = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %j, i32 0
  store i{c} %bj, ptr %pcj
  %ej1 = add i64 %j, 1
  %pej = getelementptr i{c}, ptr %bp, i64 %ej1
  %ej = load i{c}, ptr %pej
  %pcje = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %j, i32 1
  store i{c} %ej, ptr %pcje
  %bj64 = {ext} %bj to i64
  %isum1 = add i64 %isum, %bj64
  %j1 = add i64 %j, 1
  br label %init_head
rows:
{stash}  %pap_lo = getelementptr i{c}, ptr %ap, i64 %lo
  %o0_raw = load i{c}, ptr %pap_lo
  %o0 = {ext} %o0_raw to i64
  %from_0 = icmp eq i64 %lo, 0
  br i1 %from_0, label %rows_0, label %row
rows_0:
  store i{c} 0, ptr %cp
  br label %row
row:
  %r = phi i64 [%lo, %rows], [%lo, %rows_0], [%{latch_r}, %{row_latch}]
  %o_r = phi i64 [%o0, %rows], [%o0, %rows_0], [%{latch_o}, %{row_latch}]
  %z_r = phi i64 [0, %rows], [0, %rows_0], [%{latch_z}, %{row_latch}]
  %rin = icmp slt i64 %r, %hi
  br i1 %rin, label %row_body, label %{row_exit}
""" + _CSC_ROW_BODY + """entries:
  %k = phi i64 [%k0, %row_body], [%kn, %next]
  %o = phi i64 [%o_r, %row_body], [%o1, %next]
  %z = phi i64 [%z_r, %row_body], [%z1, %next]
  %kin = icmp slt i64 %k, %k1
  br i1 %kin, label %entry_body, label %row_end
""" + _CSC_ENTRY_CURSOR + """{prefetch}{match}  %kn = add i64 %k, 1
  br label %entries
row_end:
  %o_e = phi i64 [%o, %entries]
  %z_e = phi i64 [%z, %entries]
  %pce = getelementptr i{c}, ptr %cp, i64 %r1
  %o_c = {narrow} %o to i{c}
  store i{c} %o_c, ptr %pce
{mode_next}  br label %row
done:
{tail}
finish:
  %anyzero = icmp ne i64 %z_r, 0
  br i1 %anyzero, label %compact, label %all_kept
all_kept:
  ret i64 %o_r
{bad_check}compact:
  br label %c_row
c_row:
  %cr = phi i64 [%lo, %compact], [%cr1, %c_row_end]
  %cs = phi i64 [%o0, %compact], [%ce, %c_row_end]
  %cw = phi i64 [%o0, %compact], [%cw_e, %c_row_end]
  %crin = icmp slt i64 %cr, %hi
  br i1 %crin, label %c_row_body, label %c_done
c_row_body:
  %cr1 = add i64 %cr, 1
  %pce1 = getelementptr i{c}, ptr %cp, i64 %cr1
  %ce_raw = load i{c}, ptr %pce1
  %ce = {ext} %ce_raw to i64
  br label %c_ent
c_ent:
  %ck = phi i64 [%cs, %c_row_body], [%ck1, %c_ent_body]
  %cw2 = phi i64 [%cw, %c_row_body], [%cw3, %c_ent_body]
  %ckin = icmp slt i64 %ck, %ce
  br i1 %ckin, label %c_ent_body, label %c_row_end
c_ent_body:
  %pcvk = getelementptr {t}, ptr %cv, i64 %ck
  %cvk = load {t}, ptr %pcvk
  %pcck = getelementptr i{c}, ptr %cc, i64 %ck
  %cck = load i{c}, ptr %pcck
  %pcvw = getelementptr {t}, ptr %cv, i64 %cw2
  store {t} %cvk, ptr %pcvw
  %pccw = getelementptr i{c}, ptr %cc, i64 %cw2
  store i{c} %cck, ptr %pccw
  %cnz = {nonzero} {t} %cvk, {zero}
  %cnzi = zext i1 %cnz to i64
  %cw3 = add i64 %cw2, %cnzi
  %ck1 = add i64 %ck, 1
  br label %c_ent
c_row_end:
  %cw_e = phi i64 [%cw2, %c_ent]
  %cw_c = {narrow} %cw_e to i{c}
  store i{c} %cw_c, ptr %pce1
  br label %c_row
c_done:
  ret i64 %cw
ret2:
  ret i64 -2
ret3:
  ret i64 -3
}}

declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
"""

# The match of one A entry with the cursor of its column in B: one loop iteration per B entry of an earlier
# row (``skip``, a product), then hit or miss, each a branch (predicted when the pattern is symmetric)
_SCALAR_MATCH = """  br label %seek
seek:
  %at = phi i64 [%at0, %entry_body]{seek_phi}
  %inside = icmp slt i64 %at, %end
  br i1 %inside, label %look, label %miss
look:
  %pbc = getelementptr i{c}, ptr %bc, i64 %at
  %brow = load i{c}, ptr %pbc
  %same = icmp eq i{c} %brow, %r_c
  br i1 %same, label %hit, label %{not_same}
{skip}
hit:
  %at1 = add i64 %at, 1
  %at1_c = {narrow} %at1 to i{c}
  store i{c} %at1_c, ptr %pcur
  %pav = getelementptr {t}, ptr %av, i64 %k
  %va = load {t}, ptr %pav
  %pbv = getelementptr {t}, ptr %bv, i64 %at
  %vb = load {t}, ptr %pbv
  %v = {op} {t} %va, %vb
  %pcc = getelementptr i{c}, ptr %cc, i64 %o
  store i{c} %col_raw, ptr %pcc
  %pcv = getelementptr {t}, ptr %cv, i64 %o
  store {t} %v, ptr %pcv
  %nz = {nonzero} {t} %v, {zero}
  %zi = select i1 %nz, i64 0, i64 1
  %z_hit = add i64 %z, %zi
  %o_hit = add i64 %o, 1
  br label %next
{miss}
next:
  %o1 = phi i64 [%o_hit, %hit]{next_phi}
  %z1 = phi i64 [%z_hit, %hit]{next_phi_z}
"""

# A product's match without a branch on the pattern: the rows of ``lanes`` B entries from the cursor on are compared
# with A's row at once (a masked load: lanes past the column's end are neither read nor counted, so nothing past
# B's arrays is), the cursor advances past those below it (a loop only when all are) and by one more on a
# match; the result is written unconditionally and the output cursor advances by the match. A miss reads its
# partner's value from A's own entry (no read past B's end), a result no one keeps. Float products: the values
# of the skipped B entries and of an A entry without a partner are tested finite without a branch, their OR
# kept in ``%bad`` (returns -4 after the pass, as the scalar match does at once).
_VECTOR_MATCH = """vstart:
  %vr = insertelement <{w} x i{c}> poison, i{c} %r_c, i64 0
  %vrs = shufflevector <{w} x i{c}> %vr, <{w} x i{c}> poison, <{w} x i32> zeroinitializer
  br label %vseek
vseek:
  %vat = phi i64 [%at0, %vstart], [%vat_w, %vfull]
  %vrem = sub i64 %end, %vat
  %vrem_big = icmp ugt i64 %vrem, {w}
  %vrem_w = select i1 %vrem_big, i64 {w}, i64 %vrem
  %vone = shl i64 1, %vrem_w
  %vlanes64 = sub i64 %vone, 1
  %vlanes_i = trunc i64 %vlanes64 to i{w}
  %vlanes = bitcast i{w} %vlanes_i to <{w} x i1>
  %vpc = getelementptr i{c}, ptr %bc, i64 %vat
  %vrows = call <{w} x i{c}> @llvm.masked.load.v{w}i{c}.p0(ptr %vpc, i32 {cb}, <{w} x i1> %vlanes, <{w} x i{c}> zeroinitializer)
  %vlt = icmp slt <{w} x i{c}> %vrows, %vrs
  %vbelow = and <{w} x i1> %vlt, %vlanes
  %vbelow_i = bitcast <{w} x i1> %vbelow to i{w}
{finite_skipped}  %vall = icmp eq i{w} %vbelow_i, -1
  br i1 %vall, label %vfull, label %vmatch
vfull:
  %vat_w = add i64 %vat, {w}
  br label %vseek
vmatch:
  %vcnt_i = call i{w} @llvm.ctpop.i{w}(i{w} %vbelow_i)
  %vcnt = zext i{w} %vcnt_i to i64
  %vat2 = add i64 %vat, %vcnt
  %veq = icmp eq <{w} x i{c}> %vrows, %vrs
  %veql = and <{w} x i1> %veq, %vlanes
  %veq_i = bitcast <{w} x i1> %veql to i{w}
  %vhit = icmp ne i{w} %veq_i, 0
  %vhit64 = zext i1 %vhit to i64
  %vat3 = add i64 %vat2, %vhit64
  %vat3_c = {narrow} %vat3 to i{c}
  store i{c} %vat3_c, ptr %pcur
  %vpav = getelementptr {t}, ptr %av, i64 %k
  %vva = load {t}, ptr %vpav
  %vpbv_at = getelementptr {t}, ptr %bv, i64 %vat2
  %vpbv = select i1 %vhit, ptr %vpbv_at, ptr %vpav
  %vvb = load {t}, ptr %vpbv
  %vv = {op} {t} %vva, %vvb
  %vpcc = getelementptr i{c}, ptr %cc, i64 %o
  store i{c} %col_raw, ptr %vpcc
  %vpcv = getelementptr {t}, ptr %cv, i64 %o
  store {t} %vv, ptr %vpcv
  %vnz = {nonzero} {t} %vv, {zero}
  %vzero = xor i1 %vnz, true
  %vzero_hit = and i1 %vzero, %vhit
  %vzi = zext i1 %vzero_hit to i64
  %vz1 = add i64 %z, %vzi
  %vo1 = add i64 %o, %vhit64
{finite_unmatched}  br label %next
"""

_VECTOR_FINITE_SKIPPED = """  %vpv = getelementptr {t}, ptr %bv, i64 %vat
  %vvals = call <{w} x {t}> @llvm.masked.load.v{w}{tv}.p0(ptr %vpv, i32 {vsize}, <{w} x i1> %vbelow, <{w} x {t}> zeroinitializer)
  %vvals0 = fmul <{w} x {t}> %vvals, zeroinitializer
  %vinf = fcmp une <{w} x {t}> %vvals0, zeroinitializer
  %vinf_i = bitcast <{w} x i1> %vinf to i{w}
  %vinf32 = zext i{w} %vinf_i to i32
  %vbad0 = load i32, ptr %bad
  %vbad1 = or i32 %vbad0, %vinf32
  store i32 %vbad1, ptr %bad
"""
_VECTOR_FINITE_UNMATCHED = """  %vva0 = fmul {t} %vva, 0.0
  %vainf = fcmp une {t} %vva0, 0.0
  %vmiss = xor i1 %vhit, true
  %vabad = and i1 %vainf, %vmiss
  %vabad32 = zext i1 %vabad to i32
  %vbad2 = load i32, ptr %bad
  %vbad3 = or i32 %vbad2, %vabad32
  store i32 %vbad3, ptr %bad
"""
# Every MODE_ROWS rows: when over 1 / MISS_SHARE of the A entries of the last rows found no partner, the next
# MODE_ROWS rows go to the vector match (``_VECTOR_ROWS``, a function of its own, called again while its rows keep
# missing as much). The scalar match's branches are predicted on a symmetric pattern, where it takes half the
# vector one's time; both matches in one loop cost road-700 (2.5 entries per row, all hits) 4-7 % in spilled
# registers, a call per MODE_ROWS rows nothing measurable.
_MODE_NEXT = """  %mode_at = and i64 %r1, {mode_rows_1}
  %mode_due = icmp eq i64 %mode_at, 0
  br i1 %mode_due, label %mode_set, label %mode_done
mode_set:
  %mode_w0 = sub i64 %r1, {mode_rows}
  %mode_first = icmp sle i64 %mode_w0, %lo
  %mode_w = select i1 %mode_first, i64 %lo, i64 %mode_w0
  %mode_pk = getelementptr i{c}, ptr %ap, i64 %mode_w
  %mode_k_raw = load i{c}, ptr %mode_pk
  %mode_k = {ext} %mode_k_raw to i64
  %mode_po = getelementptr i{c}, ptr %cp, i64 %mode_w
  %mode_o_raw = load i{c}, ptr %mode_po
  %mode_o_w = {ext} %mode_o_raw to i64
  %mode_o = select i1 %mode_first, i64 %o0, i64 %mode_o_w
  %mode_len = sub i64 %k1, %mode_k
  %mode_hits = sub i64 %o_e, %mode_o
  %mode_miss = sub i64 %mode_len, %mode_hits
  %mode_miss_w = mul i64 %mode_miss, {miss_share}
  %mode_vec = icmp sgt i64 %mode_miss_w, %mode_len
  br i1 %mode_vec, label %vcall, label %mode_done
vcall:
  %vc_r = phi i64 [%r1, %mode_set], [%vc_to, %vcall_more]
  %vc_o = phi i64 [%o_e, %mode_set], [%vc_o1, %vcall_more]
  %vc_z = phi i64 [%z_e, %mode_set], [%vc_z1, %vcall_more]
  %vc_left = icmp slt i64 %vc_r, %hi
  br i1 %vc_left, label %vcall_run, label %vcall_out
vcall_run:
  %vc_to0 = add i64 %vc_r, {mode_rows}
  %vc_short = icmp slt i64 %vc_to0, %hi
  %vc_to = select i1 %vc_short, i64 %vc_to0, i64 %hi
{vrows_fn}  %vc_o1 = call i64 %vrows_fn(ptr %ap, ptr %ac, ptr %av, ptr %bc, ptr %bv, ptr %cursor, ptr %cc, ptr %cv,
                                  ptr %cp, i64 %vc_r, i64 %vc_to, i64 %vc_o, ptr %vc_zp, ptr %bad)
  %vc_zb = load i64, ptr %vc_zp
  %vc_z1 = add i64 %vc_z, %vc_zb
  %vc_pk0 = getelementptr i{c}, ptr %ap, i64 %vc_r
  %vc_k0_raw = load i{c}, ptr %vc_pk0
  %vc_k0 = {ext} %vc_k0_raw to i64
  %vc_pk1 = getelementptr i{c}, ptr %ap, i64 %vc_to
  %vc_k1_raw = load i{c}, ptr %vc_pk1
  %vc_k1 = {ext} %vc_k1_raw to i64
  %vc_len = sub i64 %vc_k1, %vc_k0
  %vc_hits = sub i64 %vc_o1, %vc_o
  %vc_miss = sub i64 %vc_len, %vc_hits
  %vc_miss_w = mul i64 %vc_miss, {miss_share}
  %vc_vec = icmp sgt i64 %vc_miss_w, %vc_len
  br i1 %vc_vec, label %vcall_more, label %vcall_out
vcall_more:
  br label %vcall
vcall_out:
  %vo_r = phi i64 [%vc_r, %vcall], [%vc_to, %vcall_run]
  %vo_o = phi i64 [%vc_o, %vcall], [%vc_o1, %vcall_run]
  %vo_z = phi i64 [%vc_z, %vcall], [%vc_z1, %vcall_run]
  br label %mode_done
mode_done:
  %r_next = phi i64 [%r1, %row_end], [%r1, %mode_set], [%vo_r, %vcall_out]
  %o_next = phi i64 [%o_e, %row_end], [%o_e, %mode_set], [%vo_o, %vcall_out]
  %z_next = phi i64 [%z_e, %row_end], [%z_e, %mode_set], [%vo_z, %vcall_out]
"""

# B's arrays all A's memory (``A.T`` as scipy hands it over, of a square A): B's entry at a position is A's
# entry there, transposed, so a B entry without a partner is an A entry without one, whose value the pass
# checks; its vector rows then skip the check of B's skipped entries (blockdiag-1500: 13.6 -> 11.9 ms, the
# same as an integer product's)
_OWN_VALUES = """  %ov_c = icmp eq ptr %bc, %ac
  %ov_p = icmp eq ptr %bp, %ap
  %ov_v = icmp eq ptr %bv, %av
  %ov_mn = icmp eq i64 %m, %n
  %ov_nnz = icmp eq i64 %nnz_b, %nnz_a
  %ov_cp = and i1 %ov_c, %ov_p
  %ov_vmn = and i1 %ov_v, %ov_mn
  %ov_a = and i1 %ov_cp, %ov_vmn
  %ov = and i1 %ov_a, %ov_nnz
  %vrows_fn = select i1 %ov, ptr @{name}_vrows_own, ptr @{name}_vrows
"""

# Rows [lo, hi) with the vector match only (the scalar pass's rows, entries and row ends as there); returns the
# output cursor after them, their zero results in %zp
_VECTOR_ROWS = """
define internal i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bc, ptr %bv, ptr %cursor, ptr %cc, ptr %cv,
                                  ptr %cp, i64 %lo, i64 %hi, i64 %o_in, ptr %zp, ptr %bad_out) noinline {{
entry:
  %bad = alloca i32
  store i32 0, ptr %bad
  br label %row
row:
  %r = phi i64 [%lo, %entry], [%r1, %row_end]
  %o_r = phi i64 [%o_in, %entry], [%o, %row_end]
  %z_r = phi i64 [0, %entry], [%z, %row_end]
  %rin = icmp slt i64 %r, %hi
  br i1 %rin, label %row_body, label %done
""" + _CSC_ROW_BODY + """entries:
  %k = phi i64 [%k0, %row_body], [%kn, %next]
  %o = phi i64 [%o_r, %row_body], [%vo1, %next]
  %z = phi i64 [%z_r, %row_body], [%vz1, %next]
  %kin = icmp slt i64 %k, %k1
  br i1 %kin, label %entry_body, label %row_end
""" + _CSC_ENTRY_CURSOR + """  br label %vstart
{match}next:
  %kn = add i64 %k, 1
  br label %entries
row_end:
  %pce = getelementptr i{c}, ptr %cp, i64 %r1
  %o_c = {narrow} %o to i{c}
  store i{c} %o_c, ptr %pce
  br label %row
done:
  store i64 %z_r, ptr %zp
  %bad_here = load i32, ptr %bad
  %bad_before = load i32, ptr %bad_out
  %bad_now = or i32 %bad_before, %bad_here
  store i32 %bad_now, ptr %bad_out
  ret i64 %o_r
}}
"""
MODE_ROWS = 64      # a power of two
MISS_SHARE = 3

# after the pass: any NaN / Inf without a partner seen by the vector match
_VECTOR_BAD_CHECK = """bad_check:
  %bad_all = load i32, ptr %bad
  %bad_any = icmp ne i32 %bad_all, 0
  br i1 %bad_any, label %ret4, label %done
"""
_VECTOR_DECLARES = """
declare <{w} x i{c}> @llvm.masked.load.v{w}i{c}.p0(ptr, i32, <{w} x i1>, <{w} x i{c}>)
declare i{w} @llvm.ctpop.i{w}(i{w})
"""
_VECTOR_DECLARES_FLOAT = """declare <{w} x {t}> @llvm.masked.load.v{w}{tv}.p0(ptr, i32, <{w} x i1>, <{w} x {t}>)
"""


# Prefetches for the entry ``distance`` ahead (its column's cursor is read now; a stale one only costs a useless
# prefetch): B's row and value there, which the pass reads in scattered order beyond cache
_CSC_PREFETCH = """  %pf_k0 = add i64 %k, {distance}
  %pf_last = sub i64 %nnz_a, 1
  %pf_in = icmp slt i64 %pf_k0, %nnz_a
  %pf_k = select i1 %pf_in, i64 %pf_k0, i64 %pf_last
  %pf_pc = getelementptr i{c}, ptr %ac, i64 %pf_k
  %pf_col_raw = load i{c}, ptr %pf_pc
  %pf_col = {ext} %pf_col_raw to i64
  %pf_pcur = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %pf_col, i32 0
  %pf_at_raw = load i{c}, ptr %pf_pcur
  %pf_at = {ext} %pf_at_raw to i64
  %pf_pbc = getelementptr i{c}, ptr %bc, i64 %pf_at
  call void @llvm.prefetch.p0(ptr %pf_pbc, i32 0, i32 3, i32 1)
  %pf_pbv = getelementptr {t}, ptr %bv, i64 %pf_at
  call void @llvm.prefetch.p0(ptr %pf_pbv, i32 0, i32 3, i32 1)
"""

# B's positions only (a sum: every entry of B is then matched against A's, so its rows need no scan)
_CSC_POSITIONS = """  %bfirst = load i{c}, ptr %bp
  %pbn = getelementptr i{c}, ptr %bp, i64 %n
  %blast_raw = load i{c}, ptr %pbn
  %blast = {ext} %blast_raw to i64
  %b0 = icmp eq i{c} %bfirst, 0
  %bn = icmp eq i64 %blast, %nnz_b
  %bends = and i1 %b0, %bn
  %bdown = call i64 @{check}_pos_scan(ptr %bp, i64 %n)
  %bmono = icmp eq i64 %bdown, 0
  %bok = and i1 %bends, %bmono
  br i1 %bok, label %b_checked, label %ret3
b_checked:
  br label %touch"""

# all of B, as a CSC: n columns of rows in [0, m), sorted and unique within each column
_CSC_CANONICAL = """  %b_bad = call i64 @{check}_canonical(ptr %bp, ptr %bc, i64 %n, i64 %m, i64 %nnz_b)
  %bok = icmp eq i64 %b_bad, 0
  br i1 %bok, label %b_checked, label %ret3
b_checked:
  br label %touch"""

# A sum: a B entry other than A's, or none, under the cursor: the positions differ
_MATCH_MISS = """miss:
  ret i64 -1"""

# A product: skip B's entries of earlier rows (their results drop out, if finite); an A entry without a
# partner drops out (if finite) and leaves the cursor where the skipping stopped
_INTERSECT_SKIP = """below:
  %earlier = icmp slt i{c} %brow, %r_c
  br i1 %earlier, label %skip, label %miss
skip:
{finite_b}  %at_next = add i64 %at, 1
  br label %seek"""
_INTERSECT_MISS = """miss:
  %at_c = {narrow} %at to i{c}
  store i{c} %at_c, ptr %pcur
{finite_a}  br label %next"""

# float products: whether x * 0 == 0 (x finite), else 4 (the caller merges as a union)
_FINITE = """  %p{x}f = getelementptr {t}, ptr %{x}v, i64 %{i}
  %{x}f = load {t}, ptr %p{x}f
  %{x}f0 = fmul {t} %{x}f, 0.0
  %{x}fin = fcmp oeq {t} %{x}f0, 0.0
  br i1 %{x}fin, label %{x}_finite, label %ret4
{x}_finite:
"""

# the B entries no A entry reached (after each column's cursor) must be finite too
_TAIL_FINITE = """  br label %tail_head
tail_head:
  %tj = phi i64 [0, %done], [%tj1, %tail_col_end]
  %tjin = icmp slt i64 %tj, %n
  br i1 %tjin, label %tail_col, label %finished
tail_col:
  %ptc = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %tj, i32 0
  %tc_raw = load i{c}, ptr %ptc
  %tc0 = {ext} %tc_raw to i64
  %tj1 = add i64 %tj, 1
  %pte = getelementptr i{c}, ptr %bp, i64 %tj1
  %te_raw = load i{c}, ptr %pte
  %te = {ext} %te_raw to i64
  br label %tail_entries
tail_entries:
  %tc = phi i64 [%tc0, %tail_col], [%tc1, %t_finite]
  %tcin = icmp slt i64 %tc, %te
  br i1 %tcin, label %tail_entry, label %tail_col_end
tail_entry:
  %ptf = getelementptr {t}, ptr %bv, i64 %tc
  %tf = load {t}, ptr %ptf
  %tf0 = fmul {t} %tf, 0.0
  %tfin = fcmp oeq {t} %tf0, 0.0
  br i1 %tfin, label %t_finite, label %ret4
t_finite:
  %tc1 = add i64 %tc, 1
  br label %tail_entries
tail_col_end:
  br label %tail_head
finished:
  br label %finish
ret4:
  ret i64 -4"""


_TOUCH_MAX = 1 << 20   # B's values read in order first up to this size (beyond, the caches do not hold them)

# A float product on a range of rows: instead of the tail check (B entries of the range's rows that no cursor
# reached are in other ranges' columns' spans too), the number of B entries its cursors passed (matched or
# skipped, each checked finite there) goes to ``seen``; the caller checks the rest only when not all were
# passed
_RANGE_STASH = """  %stash_isum = getelementptr i64, ptr %seen, i64 1
  store i64 %isum, ptr %stash_isum
  %stash_smin = getelementptr i64, ptr %seen, i64 2
  store i64 %smin, ptr %stash_smin
  %stash_smax = getelementptr i64, ptr %seen, i64 3
  store i64 %smax, ptr %stash_smax
"""

_RANGE_SEEN = """  %pisum = getelementptr i64, ptr %seen, i64 1
  %isum_s = load i64, ptr %pisum
  %psmin = getelementptr i64, ptr %seen, i64 2
  %smin_s = load i64, ptr %psmin
  %psmax = getelementptr i64, ptr %seen, i64 3
  %smax_s = load i64, ptr %psmax
  br label %seen_head
seen_head:
  %sj = phi i64 [%smin_s, %done], [%sj1, %seen_body]
  %ssum = phi i64 [0, %done], [%ssum1, %seen_body]
  %sjin = icmp slt i64 %sj, %smax_s
  br i1 %sjin, label %seen_body, label %seen_done
seen_body:
  %psj = getelementptr {{i{c}, i{c}}}, ptr %cursor, i64 %sj, i32 0
  %sc_raw = load i{c}, ptr %psj
  %sc = {ext} %sc_raw to i64
  %ssum1 = add i64 %ssum, %sc
  %sj1 = add i64 %sj, 1
  br label %seen_head
seen_done:
  %passed = sub i64 %ssum, %isum_s
  store i64 %passed, ptr %seen
  br label %finish
ret4:
  ret i64 -4"""

# A range of rows [lo, hi) on one of several threads (``ranged``): the operands were checked before, so the pass
# starts with the columns its rows reach (A canonical: a row's first and last entries bound them), whose cursors
# it sets up (not all n: road-700 has 2 entries per column)
_RANGE_SPAN = """  br label %span_head
span_head:
  %sr = phi i64 [%lo, %entry], [%sr1, %span_next]
  %smin = phi i64 [%n, %entry], [%smin1, %span_next]
  %smax = phi i64 [0, %entry], [%smax1, %span_next]
  %srin = icmp slt i64 %sr, %hi
  br i1 %srin, label %span_body, label %touch
span_body:
  %sr1 = add i64 %sr, 1
  %ps0 = getelementptr i{c}, ptr %ap, i64 %sr
  %s0_raw = load i{c}, ptr %ps0
  %s0 = {ext} %s0_raw to i64
  %ps1 = getelementptr i{c}, ptr %ap, i64 %sr1
  %s1_raw = load i{c}, ptr %ps1
  %s1 = {ext} %s1_raw to i64
  %sne = icmp slt i64 %s0, %s1
  br i1 %sne, label %span_row, label %span_next
span_row:
  %psf = getelementptr i{c}, ptr %ac, i64 %s0
  %sf_raw = load i{c}, ptr %psf
  %sf = {ext} %sf_raw to i64
  %sl0 = sub i64 %s1, 1
  %psl = getelementptr i{c}, ptr %ac, i64 %sl0
  %sl_raw = load i{c}, ptr %psl
  %sl = {ext} %sl_raw to i64
  %sl1 = add i64 %sl, 1
  %sf_lt = icmp slt i64 %sf, %smin
  %smin_r = select i1 %sf_lt, i64 %sf, i64 %smin
  %sl_gt = icmp sgt i64 %sl1, %smax
  %smax_r = select i1 %sl_gt, i64 %sl1, i64 %smax
  br label %span_next
span_next:
  %smin1 = phi i64 [%smin, %span_body], [%smin_r, %span_row]
  %smax1 = phi i64 [%smax, %span_body], [%smax_r, %span_row]
  br label %span_head
unchecked:"""

# A range not starting at row 0 starts each column's cursor at the column's first row >= lo, found by a scan of
# the column from its start (in column order, over the columns the range reaches), not by a search per column on
# first use (ba-100k's second range spent more in those scattered searches, 25 ms, than in its entries, 10). In
# a sum B's rows are not trusted sorted: the scan only proposes a position, the pass's row compare checks it.
# Every A entry is still matched with a B entry of its (row, column) at most once (a range only matches B
# entries of its own rows, and within a range a cursor only moves forward), so a sum's count still proves B's
# positions equal to A's.
_COUNTED_CURSOR = """  %pbj = getelementptr i{c}, ptr %bp, i64 %j
  %cb0_raw = load i{c}, ptr %pbj
  %cb0 = {ext} %cb0_raw to i64
  %cj1 = add i64 %j, 1
  %pbj1 = getelementptr i{c}, ptr %bp, i64 %cj1
  %cb1_raw = load i{c}, ptr %pbj1
  %cb1 = {ext} %cb1_raw to i64
  %lo_c = {narrow} %lo to i{c}
  br label %cnt_head
cnt_head:
  %q = phi i64 [%cb0, %init_body], [%q1, %cnt_body]
  %qin = icmp slt i64 %q, %cb1
  br i1 %qin, label %cnt_body, label %cnt_done
cnt_body:
  %pq = getelementptr i{c}, ptr %bc, i64 %q
  %rq = load i{c}, ptr %pq
  %rq_below = icmp slt i{c} %rq, %lo_c
  %q1 = add i64 %q, 1
  br i1 %rq_below, label %cnt_head, label %cnt_done
cnt_done:
  %bj = {narrow} %q to i{c}"""


@functools.cache
def _csc_pass_kernel(op: str, value: np.dtype, bits: int, prefetch: int = 0, ranged: str = "", lanes: int = 0,
                     mode_rows: int = 64, miss_share: int = 3):
    """The pass; ``ranged``: "" (one thread: all rows, operands checked in the call), "first" (the range from row
    0 on several threads, operands checked before, all values finite) or "later" (a later range: likewise, its
    cursors counted from its first row); ``lanes``: a product's rows that miss often (``_MODE_NEXT``: over 1 /
    ``miss_share`` of the last ``mode_rows`` rows' entries) go to ``_VECTOR_MATCH`` on that many B entries at
    once (0: all rows ``_SCALAR_MATCH``)."""
    from splyce.native import array_objects, validation as native_validation
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, ops = _VALUE[value]
    intersect = op == "multiply"
    floats = intersect and value.kind == "f"
    name = (f"splyce_elementwise_csc_{op}_{t}_i{bits}" + (f"_pf{prefetch}" if prefetch else "")
            + (f"_{ranged}" if ranged else "") + (f"_v{lanes}" if lanes else ""))
    check = name + "_check"
    ext, narrow = ("zext i32", "trunc i64") if bits == 32 else ("bitcast i64", "bitcast i64")
    fields = dict(c=bits, ext=ext, narrow=narrow, t=t, check=check, vsize=value.itemsize)
    if intersect:
        finite_b = _FINITE.format(x="b", i="at", t=t) if floats else ""
        finite_a = _FINITE.format(x="a", i="k", t=t) if floats else ""
        skip = _INTERSECT_SKIP.format(finite_b=finite_b, **fields)
        miss = _INTERSECT_MISS.format(finite_a=finite_a, **fields)
        seek_phi, not_same = ", [%at_next, %skip]" if not floats else ", [%at_next, %b_finite]", "below"
        next_phi = ", [%o, %miss]" if not floats else ", [%o, %a_finite]"
        next_phi_z = next_phi.replace("%o", "%z")
        b_check = _CSC_CANONICAL
        tail = ((_RANGE_SEEN if ranged else _TAIL_FINITE).format(**fields) if floats else "  br label %finish")
    else:
        skip, miss, seek_phi, not_same, next_phi, next_phi_z = "", _MATCH_MISS, "", "miss", "", ""
        b_check, tail = _CSC_POSITIONS, "  br label %finish"
    values = dict(op=ops[op], zero=zero, nonzero=nonzero)
    declares, row_exit, bad_check, mode_next, row_latch, vrows, vrows_fn = "", "done", "", "", "row_end", "", ""
    latch = dict(latch_r="r1", latch_o="o_e", latch_z="z_e")
    scalar = _SCALAR_MATCH.format(skip=skip, miss=miss, seek_phi=seek_phi, not_same=not_same, next_phi=next_phi,
                                  next_phi_z=next_phi_z, **values, **fields)
    if lanes and intersect:
        vector = dict(w=lanes, cb=bits // 8, tv={"double": "f64", "float": "f32"}.get(t, t), **fields)
        match = _VECTOR_MATCH.format(
            finite_skipped=_VECTOR_FINITE_SKIPPED.format(**vector) if floats else "",
            finite_unmatched=_VECTOR_FINITE_UNMATCHED.format(**vector) if floats else "", **values, **vector)
        vrows = _VECTOR_ROWS.format(name=name + "_vrows", match=match, **fields)
        vrows_fn = f"  %vrows_fn = bitcast ptr @{name}_vrows to ptr\n"
        if floats:      # B's entries of A's own memory (A * A.T): no check of the skipped ones (see _OWN_VALUES)
            vrows += _VECTOR_ROWS.format(name=name + "_vrows_own", **fields, match=_VECTOR_MATCH.format(
                finite_skipped="", finite_unmatched=_VECTOR_FINITE_UNMATCHED.format(**vector), **values, **vector))
            vrows_fn = _OWN_VALUES.format(name=name)
        declares = _VECTOR_DECLARES.format(**vector) + (_VECTOR_DECLARES_FLOAT.format(**vector) if floats else "")
        if floats:
            row_exit, bad_check = "bad_check", _VECTOR_BAD_CHECK
        mode_next = _MODE_NEXT.format(miss_share=miss_share, mode_rows=mode_rows, mode_rows_1=mode_rows - 1,
                                      vrows_fn=vrows_fn, **fields)
        row_latch, latch = "mode_done", dict(latch_r="r_next", latch_o="o_next", latch_z="z_next")
    match = scalar
    text = (native_validation.canonical_check_ir(check, bits) + declares + vrows
            + _CSC_PASS.format(name=name, match=match, row_exit=row_exit, bad_check=bad_check, mode_next=mode_next,
                               row_latch=row_latch, **latch, **values,
                               touch_max=_TOUCH_MAX, prologue=_RANGE_SPAN.format(**fields) if ranged else "",
                               stash=_RANGE_STASH if ranged and floats else "",
                               init_lo="%smin" if ranged else "0", init_hi="%smax" if ranged else "%n",
                               init_value=_COUNTED_CURSOR.format(**fields) if ranged == "later" else
                               f"  %pbj = getelementptr i{bits}, ptr %bp, i64 %j\n  %bj = load i{bits}, ptr %pbj",
                               init_latch="cnt_done" if ranged == "later" else "init_body",
                               prefetch=_CSC_PREFETCH.format(distance=prefetch, **fields) if prefetch else "",
                               b_check=b_check.format(**fields), tail=tail, **fields)
            + array_objects.object_entry_ir(name + "_objects", name, "a" * 10 + "iiiiiia"))
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(17)})[name + "_objects"]


def csr_with_csc(op: str, a, b_csc, dtype, m: int, n: int, prefetch: int = 0, lanes: int | None = None):
    """``op(A, B)`` on one thread for a CSR ``a = (data, indices, indptr)`` (m x n) and a CSC ``b_csc`` of the
    same shape (n columns of rows): index arrays of one dtype (int32 / int64), values of ``dtype`` (a dtype
    object), all C-contiguous, lengths consistent (``len(indptr)`` m + 1 and n + 1, data and indices of each
    operand alike); ``array_objects.DATA_OFFSET`` confirmed. Returns ``(data, indices, indptr)`` (canonical), or
    a code: 2 A is not canonical, 3 B's structure is not well formed (the caller's general path words either),
    1 (a sum) B's positions are not A's, 4 (a product of floats) an entry without a partner is NaN or Inf;
    after 1 or 4 A is known canonical (the caller merges)."""
    av, ac, ap = a
    bv, bc, bp = b_csc
    size = len(ac)
    if op != "multiply" and len(bc) != size:
        # B's positions are not A's, but code 1 promises A canonical to the caller's merge: checked here
        from splyce.native import validation as native_validation

        return 1 if native_validation.canonical_csr(ap, ac, n) else 2
    lanes = _lanes(ac.dtype, lanes, size)
    key = (op, dtype, ac.dtype, prefetch, lanes)
    kernel = _csc_kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _csc_kernels[key] = _csc_pass_kernel(op, dtype, ac.dtype.itemsize * 8, prefetch, "", lanes,
                                                          MODE_ROWS, MISS_SHARE)
    vals = np.empty(size, dtype=dtype)
    cols = np.empty(size, dtype=ac.dtype)
    indptr = np.empty(m + 1, dtype=ap.dtype)
    cursor = np.empty(2 * n, dtype=ap.dtype)    # (next entry, end) per column of B
    nnz = kernel(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cursor), id(cols), id(vals), id(indptr),
                 m, n, size, len(bc), 0, m, id(cursor))
    if nnz < 0:
        return -nnz
    if nnz != size:
        vals.resize(nnz, refcheck=False)       # shrink in place: no copy of the entries
        cols.resize(nnz, refcheck=False)
    return vals, cols, indptr


@functools.cache
def _host_avx512() -> bool:
    from splyce.native.codegen import host_target

    return "+avx512f" in host_target().features.split(",")


# Below this many entries of A the pass keeps the scalar match: called again on the same matrix (as a benchmark
# does), the branch predictor learns a small pattern's hits and skips (32 blocks of 32 at 30 %, 10.5k entries:
# 19 us scalar, 45 us vector, 1.8 ns per entry; 64 such blocks, 21k entries: 176 us scalar, 99 us vector)
VECTOR_MIN_NNZ = 1 << 14


def _lanes(index: np.dtype, lanes: int | None, nnz: int) -> int:
    """The vector match's width (``lanes`` if given): one 512-bit register of B's rows on a host with AVX-512
    (16 int32, 8 int64) from VECTOR_MIN_NNZ entries of A on; else 0, the scalar match (a masked load without
    AVX-512 is a branch per lane)."""
    if lanes is not None:
        return lanes
    return 64 // index.itemsize if nnz >= VECTOR_MIN_NNZ and _host_avx512() else 0


# Prefetching in the one pass (``_CSC_PREFETCH``): from this many entries of A, when over 1/32 of the sampled
# row ends (a row's first and last column) lie farther from the row than PREFETCH_WINDOW bytes of B (distance
# in rows times B's bytes per row): then the pass's scattered reads of B leave the cache. Measured (one thread,
# whole drop-in call, thread CPU, median of 11, loaded machine): ba-100k 44 -> 29 ms, fem3d-100k 24 -> 20,
# fem2d-250k 22 -> 18, rmat-s13 2.9 -> 2.1 with it; road-700 (every row within 701 rows: 21 KB) 15 -> 19 and
# banded-150k 12 -> 14 slower (instructions for nothing), so they go without (none of their rows reach 64 KB).
PREFETCH_MIN_NNZ = 1 << 16
PREFETCH_WINDOW = 1 << 16
PREFETCH_DISTANCE = 32
_SAMPLED_ROWS = 256


def prefetch_distance(ap: np.ndarray, ac: np.ndarray, entry_bytes: int) -> int:
    """The prefetch distance for the one pass over a CSR A (entries ahead, 0 for none): prefetch when over a
    quarter of the sampled rows reach farther than PREFETCH_WINDOW bytes of B. Reads A's arrays before they
    are checked: positions clipped, the result only a choice of kernel."""
    nnz, m = len(ac), len(ap) - 1
    if nnz < PREFETCH_MIN_NNZ or m < 1:
        return 0
    step = -(-m // _SAMPLED_ROWS)
    rows = np.arange(0, m, step)
    first = ac.take(ap[:-1:step], mode="clip")
    last = ac.take(ap[1::step] - 1, mode="clip")
    reach = int(PREFETCH_WINDOW * m / (nnz * entry_bytes))     # in rows
    far = np.count_nonzero(np.abs(first - rows) > reach) + np.count_nonzero(np.abs(last - rows) > reach)
    return PREFETCH_DISTANCE if far > len(rows) // 16 else 0


# A row's fixed cost in the pass on row ranges, in entries (measured on ba-100k for the same-positions pass it
# replaced: ranges of equal entries but 3x the rows took 1.5x the CPU time; a range's first use of a column
# searches it)
CURSOR_ROW_COST = 4


def csr_with_csc_ranges(op: str, a, b_csc, dtype, m: int, n: int, threads: int, prefetch: int = 0,
                        lanes: int | None = None):
    """``csr_with_csc`` on row ranges balanced by entries, one per thread, for operands checked by the caller (A
    canonical; B's positions, and for a product all of B, unless B's index arrays are A's memory). Each range
    writes its results from its rows' first entry of A on (an upper bound) and its row ends there; the ranges
    after the first then move down to close the gaps (bit-identical to one thread). Returns ``(data, indices,
    indptr)``, or 1 (a sum: B's positions are not A's) or 4 (a product of floats with a NaN or Inf, which
    needs the caller's union merge)."""
    av, ac, ap = a
    bv, bc, bp = b_csc
    size = len(ac)
    if op != "multiply" and len(bc) != size:
        return 1
    chunks = ir_text.work_chunks(ap, threads, CURSOR_ROW_COST)
    with _lock:
        kernels = [_csc_pass_kernel(op, dtype, ac.dtype.itemsize * 8, prefetch, ranged, _lanes(ac.dtype, lanes, size),
                                    MODE_ROWS, MISS_SHARE)
                   for ranged in ("first", "later")[:len(chunks)]]
    vals = np.empty(size, dtype=dtype)
    cols = np.empty(size, dtype=ac.dtype)
    indptr = np.empty(m + 1, dtype=ap.dtype)
    # a float product, per range: B entries its cursors passed; then the cursors' first sum and the columns
    # reached, which the pass keeps here rather than in registers across its loops (spills: 12-17 % slower)
    seen = np.zeros((len(chunks), 4), dtype=np.int64)

    def run(t, lo, hi):
        cursor = np.empty(2 * n, dtype=ap.dtype)     # (next entry, end) per column; only those the range reaches
        passed = seen[t]                         # held: the kernel reads the view object by address
        return kernels[lo > 0](id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cursor), id(cols), id(vals),
                               id(indptr), m, n, size, len(bc), lo, hi, id(passed))

    ends = ir_text.run_chunks(run, chunks, threads)
    if min(ends) < 0:
        return -min(ends)
    if op == "multiply" and dtype.kind == "f" and int(seen[:, 0].sum()) != len(bc) and not np.isfinite(bv.sum()):
        return 4     # B entries no cursor passed, not all finite (a finite sum proves them finite)
    offset = 0
    for (lo, hi), end in zip(chunks, ends):
        start = int(ap[lo])
        if start != offset:     # a move to a lower offset: numpy copies overlapping ranges correctly
            cols[offset:offset + end - start] = cols[start:end]
            vals[offset:offset + end - start] = vals[start:end]
            indptr[lo + 1:hi + 1] -= start - offset
        offset += end - start
    if offset != size:
        vals.resize(offset, refcheck=False)       # shrink in place: no copy of the entries
        cols.resize(offset, refcheck=False)
    return vals, cols, indptr


_direct_kernels: dict = {}   # the one-range merges, looked up per call without a lock
_csc_kernels: dict = {}    # (op, value dtype, index dtype) -> the compiled pass (looked up per call: no lock)
