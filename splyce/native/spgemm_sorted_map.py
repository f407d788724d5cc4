"""The sorted row kernel of :mod:`splyce.native.spgemm_sorted` for operands whose rows run over adjacent columns
(banded matrices, dense element blocks): a map of output positions and a sort of each row, bit for bit the
same result (the sparsifier's: every position reached, columns ascending, sums from +0.0 in A's row order).

Why a second kernel: where B's rows are runs of adjacent columns, the terms of one run land where the run
before them did, so the map's insert-or-add branch is predicted and its multiply-add costs fewer instructions
than the branch-free flags' (spgemm_sorted.py: ~14 instructions a term against ~10). Measured on the 2-core
Zen 4 VM (thread CPU time, min of 5, the kernel alone, 2026-12-05): banded-150k 25 ms here against 32 ms,
banded-4k 0.19 / 0.24, propack-complex-real 0.31 / 0.43, pyamg-bar 0.99 / 1.23, pyamg-ldg-diffusion 1.24 /
1.95 ms; spgemm_sorted.py's choice (``kind_for``) takes this one when at least half of B's neighbouring stored
columns are adjacent.

The row is accumulated as in the drop-in's sparse accumulator (``slots[j]``: the column's position, before the
row's start when not met yet), but into a per-thread scratch row, each new entry stored as ``0.0 + a * b`` (a
product of -0.0 then sums to +0.0, as the sparsifier's zero-filled workspace gives), then written to the
result sorted, by length:

- up to one vector of columns (16 int32 / 8 int64): the row loaded once, lanes past its end set to all-ones,
  and each entry stored at ``start + rank``, its rank (how many columns are smaller: columns are unique in a
  row) the popcount of one vector compare. No branch depends on the values (road networks' ~8-entry rows:
  an insertion sort's mispredicted loop exits cost ~20 ns a row, twice this);
- up to ``RANK_MAX`` (int64 columns: rows of 9-16 entries): the same ranks counted over the row a vector at a
  time, the row padded with all-ones;
- longer rows: a bitmap over the columns touched (a bit per column), walked in order with
  count-trailing-zeros, each column's value found through ``slots``. When the row's columns span at most two
  64-bit words per entry (meshes: fem3d-100k's 86-entry rows), its words are walked one by one; else a second
  level (a bit per word) finds the words set. Walked words are cleared, so the bitmap stays zero between rows.
  On fem3d-100k and rmat-s13 this took 3-5 % less time than vector ranks up to 96 entries (the sort is
  25-35 % of the product there, a copy through the scratch row 7 %).

The scratch (``scratch(n)``) is one int64 buffer per thread: ``[n | slots (n) | row columns (n + 16) | row
values (n) | bitmap words (n / 64 + 2) | summary words (n / 4096 + 2)]``; the kernel finds the parts from
``n``, so its signature stays the unsorted kernel's and the driver (threads, backward blocks) is shared.
"""

from __future__ import annotations

import numpy as np

RANK_MAX = 16      # rows of at most this many: vector ranks (about len * len / 16 compares)
PAD = 16           # all-ones lanes after a row's columns: a vector load never counts them


def scratch(n: int) -> np.ndarray:
    """A thread's slots, scratch row and bitmap (see the module docstring): slots -1, bitmap zero."""
    words, summary = n // 64 + 2, n // 4096 + 2
    buf = np.zeros(1 + n + (n + PAD) + n + words + summary, dtype=np.int64)
    buf[0] = n
    buf[1: 1 + n] = -1
    return buf


_ROWS = """
declare i64 @llvm.cttz.i64(i64, i1)
declare i{w} @llvm.ctpop.i{w}(i{w})

define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi, i64 %base,
                   ptr %ends, ptr %cc, ptr %cv, ptr %buf) {{
entry:
  %n = load i64, ptr %buf
  %slots = getelementptr i64, ptr %buf, i64 1
  %o1 = add i64 %n, 1
  %sc = getelementptr i64, ptr %buf, i64 %o1
  %o2 = add i64 %o1, %n
  %o2b = add i64 %o2, {pad}
  %sv = getelementptr i64, ptr %buf, i64 %o2b
  %o3 = add i64 %o2b, %n
  %wd = getelementptr i64, ptr %buf, i64 %o3
  %nw = lshr i64 %n, 6
  %o4 = add i64 %o3, %nw
  %o4b = add i64 %o4, 2
  %sm = getelementptr i64, ptr %buf, i64 %o4b
  br label %row
row:
  %i = phi i64 [%lo, %entry], [%i1, %row_done]
  %start = phi i64 [%base, %entry], [%c1, %row_done]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %row_body, label %done
row_body:
  %pa0 = getelementptr i{pa}, ptr %ap, i64 %i
  %ka_raw = load i{pa}, ptr %pa0
  %ka = {pa_ext} %ka_raw to i64
  %i1 = add i64 %i, 1
  %pa1 = getelementptr i{pa}, ptr %ap, i64 %i1
  %kb_raw = load i{pa}, ptr %pa1
  %kb = {pa_ext} %kb_raw to i64
  br label %k_head
k_head:
  %k = phi i64 [%ka, %row_body], [%k1, %k_end]
  %c1 = phi i64 [%start, %row_body], [%c2, %k_end]
  %kin = icmp slt i64 %k, %kb
  br i1 %kin, label %k_body, label %finish
k_body:
  %pac = getelementptr i{ca}, ptr %ac, i64 %k
  %acol_raw = load i{ca}, ptr %pac
  %acol = {ca_ext} %acol_raw to i64
  %pav = getelementptr {t}, ptr %av, i64 %k
  %aval = load {t}, ptr %pav
  %pb0 = getelementptr i{pb}, ptr %bp, i64 %acol
  %ja_raw = load i{pb}, ptr %pb0
  %ja = {pb_ext} %ja_raw to i64
  %acol1 = add i64 %acol, 1
  %pb1 = getelementptr i{pb}, ptr %bp, i64 %acol1
  %jb_raw = load i{pb}, ptr %pb1
  %jb = {pb_ext} %jb_raw to i64
  br label %j_head
j_head:
  %jj = phi i64 [%ja, %k_body], [%jj1, %j_next]
  %c2 = phi i64 [%c1, %k_body], [%c2n, %j_next]
  %jin = icmp slt i64 %jj, %jb
  br i1 %jin, label %j_body, label %k_end
j_body:
  %pbc = getelementptr i{cb}, ptr %bc, i64 %jj
  %col_raw = load i{cb}, ptr %pbc
  %col = {cb_ext} %col_raw to i64
  %pbv = getelementptr {t}, ptr %bv, i64 %jj
  %bval = load {t}, ptr %pbv
  %prod = {mul} {t} %aval, %bval
  %pm = getelementptr i64, ptr %slots, i64 %col
  %m = load i64, ptr %pm
  %seen = icmp sge i64 %m, %start
  br i1 %seen, label %accum, label %insert
accum:
  %mrel = sub i64 %m, %start
  %pcv = getelementptr {t}, ptr %sv, i64 %mrel
  %old = load {t}, ptr %pcv
  %sum = {add} {t} %old, %prod
  store {t} %sum, ptr %pcv
  br label %j_next
insert:
  store i64 %c2, ptr %pm
  %crel = sub i64 %c2, %start
  %col_out = {co_narrow} %col to i{co}
  %pcc = getelementptr i{co}, ptr %sc, i64 %crel
  store i{co} %col_out, ptr %pcc
  %first = {add} {t} {zero}, %prod
  %pcv2 = getelementptr {t}, ptr %sv, i64 %crel
  store {t} %first, ptr %pcv2
  %c2i = add i64 %c2, 1
  br label %j_next
j_next:
  %c2n = phi i64 [%c2, %accum], [%c2i, %insert]
  %jj1 = add i64 %jj, 1
  br label %j_head
k_end:
  %k1 = add i64 %k, 1
  br label %k_head
finish:
  %len = sub i64 %c1, %start
  %small = icmp ule i64 %len, {w}
  br i1 %small, label %one_load, label %not_small

one_load:
  %ylane = load <{w} x i{co}>, ptr %sc, align 1
  %lenv = {co_narrow} %len to i{co}
  %leni = insertelement <{w} x i{co}> poison, i{co} %lenv, i64 0
  %lens = shufflevector <{w} x i{co}> %leni, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  %inrow = icmp ult <{w} x i{co}> {lanes}, %lens
  %yrow = select <{w} x i1> %inrow, <{w} x i{co}> %ylane, <{w} x i{co}> {ones}
  br label %one_head
one_head:
  %e = phi i64 [0, %one_load], [%e1, %one_body]
  %ein = icmp ult i64 %e, %len
  br i1 %ein, label %one_body, label %row_done
one_body:
  %pxe = getelementptr i{co}, ptr %sc, i64 %e
  %x = load i{co}, ptr %pxe
  %xi = insertelement <{w} x i{co}> poison, i{co} %x, i64 0
  %xs = shufflevector <{w} x i{co}> %xi, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  %below = icmp ult <{w} x i{co}> %yrow, %xs
  %obits = bitcast <{w} x i1> %below to i{w}
  %ocnt = call i{w} @llvm.ctpop.i{w}(i{w} %obits)
  %orank = zext i{w} %ocnt to i64
  %pve = getelementptr {t}, ptr %sv, i64 %e
  %v = load {t}, ptr %pve
  %odst = add i64 %start, %orank
  %pc = getelementptr i{co}, ptr %cc, i64 %odst
  store i{co} %x, ptr %pc
  %pcvp = getelementptr {t}, ptr %cv, i64 %odst
  store {t} %v, ptr %pcvp
  %e1 = add i64 %e, 1
  br label %one_head

not_small:
  %mid = icmp ule i64 %len, {rank_max}
  br i1 %mid, label %rank_pad, label %rg_head
rank_pad:
  %ppad = getelementptr i{co}, ptr %sc, i64 %len
  store <{w} x i{co}> {ones}, ptr %ppad, align 1
  br label %rank_head
rank_head:
  %re = phi i64 [0, %rank_pad], [%re1, %rank_put]
  %rin = icmp ult i64 %re, %len
  br i1 %rin, label %rank_body, label %row_done
rank_body:
  %prx = getelementptr i{co}, ptr %sc, i64 %re
  %rx = load i{co}, ptr %prx
  %rxi = insertelement <{w} x i{co}> poison, i{co} %rx, i64 0
  %rxs = shufflevector <{w} x i{co}> %rxi, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  br label %cnt_head
cnt_head:
  %q = phi i64 [0, %rank_body], [%q1, %cnt_body]
  %r = phi i64 [0, %rank_body], [%r1, %cnt_body]
  %qin = icmp ult i64 %q, %len
  br i1 %qin, label %cnt_body, label %rank_put
cnt_body:
  %pq = getelementptr i{co}, ptr %sc, i64 %q
  %y = load <{w} x i{co}>, ptr %pq, align 1
  %lt = icmp ult <{w} x i{co}> %y, %rxs
  %bits = bitcast <{w} x i1> %lt to i{w}
  %cnt = call i{w} @llvm.ctpop.i{w}(i{w} %bits)
  %cnt64 = zext i{w} %cnt to i64
  %r1 = add i64 %r, %cnt64
  %q1 = add i64 %q, {w}
  br label %cnt_head
rank_put:
  %prv = getelementptr {t}, ptr %sv, i64 %re
  %rv = load {t}, ptr %prv
  %dst = add i64 %start, %r
  %pdst = getelementptr i{co}, ptr %cc, i64 %dst
  store i{co} %rx, ptr %pdst
  %pdstv = getelementptr {t}, ptr %cv, i64 %dst
  store {t} %rv, ptr %pdstv
  %re1 = add i64 %re, 1
  br label %rank_head

rg_head:
  %ge = phi i64 [0, %not_small], [%ge1, %rg_body]
  %lo_c = phi i64 [9223372036854775807, %not_small], [%lo_c1, %rg_body]
  %hi_c = phi i64 [0, %not_small], [%hi_c1, %rg_body]
  %gin = icmp ult i64 %ge, %len
  br i1 %gin, label %rg_body, label %rg_done
rg_body:
  %pgx = getelementptr i{co}, ptr %sc, i64 %ge
  %gx_raw = load i{co}, ptr %pgx
  %gx = {co_ext} %gx_raw to i64
  %glt = icmp slt i64 %gx, %lo_c
  %lo_c1 = select i1 %glt, i64 %gx, i64 %lo_c
  %ggt = icmp sgt i64 %gx, %hi_c
  %hi_c1 = select i1 %ggt, i64 %gx, i64 %hi_c
  %ge1 = add i64 %ge, 1
  br label %rg_head
rg_done:
  %wlo = lshr i64 %lo_c, 6
  %whi = lshr i64 %hi_c, 6
  %wspan = sub i64 %whi, %wlo
  %wcap = shl i64 %len, 1
  %narrow = icmp ule i64 %wspan, %wcap
  br i1 %narrow, label %dm_head, label %bm_head
dm_head:
  %de = phi i64 [0, %rg_done], [%de1, %dm_body]
  %din = icmp ult i64 %de, %len
  br i1 %din, label %dm_body, label %dw_head
dm_body:
  %pdx = getelementptr i{co}, ptr %sc, i64 %de
  %dx_raw = load i{co}, ptr %pdx
  %dx = {co_ext} %dx_raw to i64
  %dw = lshr i64 %dx, 6
  %db = and i64 %dx, 63
  %dbit = shl i64 1, %db
  %pdw = getelementptr i64, ptr %wd, i64 %dw
  %dwv = load i64, ptr %pdw
  %dwv1 = or i64 %dwv, %dbit
  store i64 %dwv1, ptr %pdw
  %de1 = add i64 %de, 1
  br label %dm_head
dw_head:
  %dwi = phi i64 [%wlo, %dm_head], [%dwi1, %dv_done]
  %dout = phi i64 [%start, %dm_head], [%dout_b, %dv_done]
  %dwin = icmp ule i64 %dwi, %whi
  br i1 %dwin, label %dw_body, label %row_done
dw_body:
  %pdwi = getelementptr i64, ptr %wd, i64 %dwi
  %dww0 = load i64, ptr %pdwi
  store i64 0, ptr %pdwi
  %dcbase = shl i64 %dwi, 6
  br label %dv_head
dv_head:
  %dww = phi i64 [%dww0, %dw_body], [%dww1, %dv_body]
  %dout_b = phi i64 [%dout, %dw_body], [%dout_b1, %dv_body]
  %dwwz = icmp eq i64 %dww, 0
  br i1 %dwwz, label %dv_done, label %dv_body
dv_body:
  %dbtz = call i64 @llvm.cttz.i64(i64 %dww, i1 true)
  %dcol = add i64 %dcbase, %dbtz
  %pdms = getelementptr i64, ptr %slots, i64 %dcol
  %dmsl = load i64, ptr %pdms
  %dmrel = sub i64 %dmsl, %start
  %pdsv = getelementptr {t}, ptr %sv, i64 %dmrel
  %dval = load {t}, ptr %pdsv
  %dcolo = {co_narrow} %dcol to i{co}
  %pdco = getelementptr i{co}, ptr %cc, i64 %dout_b
  store i{co} %dcolo, ptr %pdco
  %pdvo = getelementptr {t}, ptr %cv, i64 %dout_b
  store {t} %dval, ptr %pdvo
  %dout_b1 = add i64 %dout_b, 1
  %dwwm = sub i64 %dww, 1
  %dww1 = and i64 %dww, %dwwm
  br label %dv_head
dv_done:
  %dwi1 = add i64 %dwi, 1
  br label %dw_head

bm_head:
  %be = phi i64 [0, %rg_done], [%be1, %bm_body]
  %lo_s = phi i64 [9223372036854775807, %rg_done], [%lo_s1, %bm_body]
  %hi_s = phi i64 [0, %rg_done], [%hi_s1, %bm_body]
  %bin = icmp ult i64 %be, %len
  br i1 %bin, label %bm_body, label %s_head
bm_body:
  %pbx = getelementptr i{co}, ptr %sc, i64 %be
  %bx_raw = load i{co}, ptr %pbx
  %bx = {co_ext} %bx_raw to i64
  %w = lshr i64 %bx, 6
  %bb = and i64 %bx, 63
  %bit = shl i64 1, %bb
  %pw = getelementptr i64, ptr %wd, i64 %w
  %wv = load i64, ptr %pw
  %wv1 = or i64 %wv, %bit
  store i64 %wv1, ptr %pw
  %s = lshr i64 %bx, 12
  %sb = and i64 %w, 63
  %sbit = shl i64 1, %sb
  %ps = getelementptr i64, ptr %sm, i64 %s
  %sv0 = load i64, ptr %ps
  %sv1 = or i64 %sv0, %sbit
  store i64 %sv1, ptr %ps
  %lt_s = icmp slt i64 %s, %lo_s
  %lo_s1 = select i1 %lt_s, i64 %s, i64 %lo_s
  %gt_s = icmp sgt i64 %s, %hi_s
  %hi_s1 = select i1 %gt_s, i64 %s, i64 %hi_s
  %be1 = add i64 %be, 1
  br label %bm_head
s_head:
  %si = phi i64 [%lo_s, %bm_head], [%si1, %s_next]
  %out = phi i64 [%start, %bm_head], [%out_w, %s_next]
  %sin = icmp sle i64 %si, %hi_s
  br i1 %sin, label %s_body, label %row_done
s_body:
  %psi = getelementptr i64, ptr %sm, i64 %si
  %sw0 = load i64, ptr %psi
  store i64 0, ptr %psi
  %wbase = shl i64 %si, 6
  br label %sw_head
sw_head:
  %sw = phi i64 [%sw0, %s_body], [%sw1, %w_done]
  %out_w = phi i64 [%out, %s_body], [%out_b, %w_done]
  %swz = icmp eq i64 %sw, 0
  br i1 %swz, label %s_next, label %sw_body
sw_body:
  %tz = call i64 @llvm.cttz.i64(i64 %sw, i1 true)
  %wi = add i64 %wbase, %tz
  %pwi = getelementptr i64, ptr %wd, i64 %wi
  %ww0 = load i64, ptr %pwi
  store i64 0, ptr %pwi
  %cbase = shl i64 %wi, 6
  %swm = sub i64 %sw, 1
  %sw1 = and i64 %sw, %swm
  br label %ww_head
ww_head:
  %ww = phi i64 [%ww0, %sw_body], [%ww1, %ww_body]
  %out_b = phi i64 [%out_w, %sw_body], [%out_b1, %ww_body]
  %wwz = icmp eq i64 %ww, 0
  br i1 %wwz, label %w_done, label %ww_body
ww_body:
  %btz = call i64 @llvm.cttz.i64(i64 %ww, i1 true)
  %col2 = add i64 %cbase, %btz
  %pms = getelementptr i64, ptr %slots, i64 %col2
  %msl = load i64, ptr %pms
  %mrel2 = sub i64 %msl, %start
  %psv2 = getelementptr {t}, ptr %sv, i64 %mrel2
  %val2 = load {t}, ptr %psv2
  %col2o = {co_narrow} %col2 to i{co}
  %pco = getelementptr i{co}, ptr %cc, i64 %out_b
  store i{co} %col2o, ptr %pco
  %pvo = getelementptr {t}, ptr %cv, i64 %out_b
  store {t} %val2, ptr %pvo
  %out_b1 = add i64 %out_b, 1
  %wwm = sub i64 %ww, 1
  %ww1 = and i64 %ww, %wwm
  br label %ww_head
w_done:
  br label %sw_head
s_next:
  %si1 = add i64 %si, 1
  br label %s_head

row_done:
  %rel = sub i64 %i, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  store i64 %c1, ptr %pend
  br label %row
done:
  ret i64 %start
}}
"""


def rows_ir(fields: dict) -> str:
    """The sorted row kernel ``@{name}`` (the unsorted one's signature, ``%slots`` being :func:`scratch`);
    ``fields``: the format fields of spgemm's templates (name, t, mul, add, index widths and extensions)."""
    floating = fields["t"] in ("double", "float")
    w = 16 if fields["co"] == 32 else 8
    ones = "<" + ", ".join([f"i{fields['co']} -1"] * w) + ">"
    lanes = "<" + ", ".join(f"i{fields['co']} {x}" for x in range(w)) + ">"
    return _ROWS.format(**fields, w=w, ones=ones, lanes=lanes, pad=PAD, rank_max=RANK_MAX,
                        zero="0.0" if floating else "0")
