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
  an insertion sort's mispredicted loop exits cost ~20 ns a row, twice this). For products of short rows
  (spgemm_sorted's kind "short": ``rows_ir(network=True)``) on AVX-512 hosts, int32 columns: sorted in
  registers instead, no loop at all (spgemm_network.py);
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

from splyce.native import spgemm_ir, spgemm_network
from splyce.native.ir_text import bind, fill, index_at, load_at, loop_head, store_at

PAD = 16           # all-ones lanes after a row's columns: a vector load never counts them


def scratch(n: int) -> np.ndarray:
    """A thread's slots, scratch row and bitmap (see the module docstring): slots -1, bitmap zero; 16 words
    after them (spgemm_network reads a short row's 16 values from the scratch row whatever its length)."""
    words, summary = n // 64 + 2, n // 4096 + 2
    buf = np.zeros(1 + n + (n + PAD) + n + words + summary + spgemm_network.LANES, dtype=np.int64)
    buf[0] = n
    buf[1: 1 + n] = -1
    return buf


# A short row's values (spgemm_ir.small_rows): in the scratch row, at the entry's place.
_ONE_VALUE = """\
""" + load_at("{t}", "%sv", "%e", "%v")
_RANK_VALUE = """\
""" + load_at("{t}", "%sv", "%re", "%rv")


# Sets the bit of the row's column at entry ``%{entry}`` (``%{tag}x``, its word ``%{tag}w``) in the bitmap words.
_SET_BIT = index_at("%sc", "%{entry}", "%{tag}x", "co") + """\
  %{tag}w = lshr i64 %{tag}x, 6
  %{tag}b = and i64 %{tag}x, 63
  %{tag}bit = shl i64 1, %{tag}b
  %p{tag}w = getelementptr i64, ptr %wd, i64 %{tag}w
  %{tag}wv = load i64, ptr %p{tag}w
  %{tag}wv1 = or i64 %{tag}wv, %{tag}bit
  store i64 %{tag}wv1, ptr %p{tag}w"""

# Blocks {tag}v_head / {tag}v_body: the columns of bitmap word ``%{word}`` (of column ``%{base}`` on; block
# ``{before}``) in order, each with its sum (found through slots) written at ``%{out}`` on; then block ``{done}``
# with ``%{tag}out_b`` the position after them.
_WORD = loop_head("{tag}v_head", "{tag}v_body", "{before}", [("{tag}ww", "i64", "%{word}", "%{tag}ww1"),
                  ("{tag}out_b", "i64", "%{out}", "%{tag}out_b1")], "{tag}wwz = icmp eq i64 %{tag}ww, 0", "{done}",
                  exit_on=True) + """\
  %{tag}btz = call i64 @llvm.cttz.i64(i64 %{tag}ww, i1 true)
  %{tag}col = add i64 %{base}, %{tag}btz
""" + load_at("i64", "%slots", "%{tag}col", "%{tag}msl") + """\
  %{tag}mrel = sub i64 %{tag}msl, %start
""" + load_at("{t}", "%sv", "%{tag}mrel", "%{tag}val") + """\
  %{tag}colo = {co_narrow} %{tag}col to i{co}
""" + store_at("i{co}", "%{tag}colo", "%cc", "%{tag}out_b", "%p{tag}co") + """\
""" + store_at("{t}", "%{tag}val", "%cv", "%{tag}out_b", "%p{tag}vo") + """\
  %{tag}out_b1 = add i64 %{tag}out_b, 1
  %{tag}wwm = sub i64 %{tag}ww, 1
  %{tag}ww1 = and i64 %{tag}ww, %{tag}wwm
  br label %{tag}v_head"""


_ROWS = "\n" + spgemm_ir.sorted_head("", "slots") + """\
  %sv = getelementptr i64, ptr %buf, i64 %o2b
  %o3 = add i64 %o2b, %n
  %wd = getelementptr i64, ptr %buf, i64 %o3
  %nw = lshr i64 %n, 6
  %o4 = add i64 %o3, %nw
  %o4b = add i64 %o4, 2
  %sm = getelementptr i64, ptr %buf, i64 %o4b
  br label %row
{to_b_column}
{b_value}
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
""" + store_at("i{co}", "%col_out", "%sc", "%crel", "%pcc") + """  %first = {add} {t} {zero}, %prod
""" + store_at("{t}", "%first", "%sv", "%crel", "%pcv2") + """  %c2i = add i64 %c2, 1
  br label %j_next
j_next:
  %c2n = phi i64 [%c2, %accum], [%c2i, %insert]
  %jj1 = add i64 %jj, 1
  br label %j_head
k_end:
{k_next}
finish:
  %len = sub i64 %c1, %start
{small_rows}
""" + loop_head("rg_head", "rg_body", "not_small", [("ge", "i64", "0", "%ge1"),
                ("lo_c", "i64", "9223372036854775807", "%lo_c1"), ("hi_c", "i64", "0", "%hi_c1")],
                "gin = icmp ult i64 %ge, %len", "rg_done") + """\
""" + index_at("%sc", "%ge", "%gx", "co") + """  %glt = icmp slt i64 %gx, %lo_c
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
""" + loop_head("dm_head", "dm_body", "rg_done", [("de", "i64", "0", "%de1")], "din = icmp ult i64 %de, %len",
                "dw_head") + """\
{set_bit_d}
  %de1 = add i64 %de, 1
  br label %dm_head
""" + loop_head("dw_head", "dw_body", "dm_head", [("dwi", "i64", "%wlo", "%dwi1"),
                ("dout", "i64", "%start", "%dout_b")], "dwin = icmp ule i64 %dwi, %whi", "row_done",
                latch="dv_done") + """\
  %pdwi = getelementptr i64, ptr %wd, i64 %dwi
  %dww0 = load i64, ptr %pdwi
  store i64 0, ptr %pdwi
  %dcbase = shl i64 %dwi, 6
  br label %dv_head
{word_d}
dv_done:
  %dwi1 = add i64 %dwi, 1
  br label %dw_head

""" + loop_head("bm_head", "bm_body", "rg_done", [("be", "i64", "0", "%be1"),
                ("lo_s", "i64", "9223372036854775807", "%lo_s1"), ("hi_s", "i64", "0", "%hi_s1")],
                "bin = icmp ult i64 %be, %len", "s_head") + """\
{set_bit_t}
  %s = lshr i64 %tx, 12
  %sb = and i64 %tw, 63
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
""" + loop_head("s_head", "s_body", "bm_head", [("si", "i64", "%lo_s", "%si1"), ("out", "i64", "%start", "%out_w")],
                "sin = icmp sle i64 %si, %hi_s", "row_done", latch="s_next") + """\
  %psi = getelementptr i64, ptr %sm, i64 %si
  %sw0 = load i64, ptr %psi
  store i64 0, ptr %psi
  %wbase = shl i64 %si, 6
  br label %sw_head
""" + loop_head("sw_head", "sw_body", "s_body", [("sw", "i64", "%sw0", "%sw1"), ("out_w", "i64", "%out", "%tout_b")],
                "swz = icmp eq i64 %sw, 0", "s_next", latch="w_done", exit_on=True) + """\
  %tz = call i64 @llvm.cttz.i64(i64 %sw, i1 true)
  %wi = add i64 %wbase, %tz
  %pwi = getelementptr i64, ptr %wd, i64 %wi
  %ww0 = load i64, ptr %pwi
  store i64 0, ptr %pwi
  %cbase = shl i64 %wi, 6
  %swm = sub i64 %sw, 1
  %sw1 = and i64 %sw, %swm
  br label %tv_head
{word_t}
w_done:
  br label %sw_head
s_next:
  %si1 = add i64 %si, 1
  br label %s_head

{row_done}
"""
_PIECES = dict(set_bit_d=bind(_SET_BIT, tag="d", entry="de"), set_bit_t=bind(_SET_BIT, tag="t", entry="be"),
               word_d=bind(_WORD, tag="d", word="dww0", base="dcbase", out="dout", before="dw_body", done="dv_done"),
               word_t=bind(_WORD, tag="t", word="ww0", base="cbase", out="out_w", before="sw_body", done="w_done"), row_end="%c1",
               **spgemm_ir.nest("finish", "k_body", "j_next", k=[("%c1", "i64", "%start", "%c2")],
                                j=[("%c2", "i64", "%c1", "%c2n")]))


def rows_ir(fields: dict, network: bool = False) -> str:
    """The sorted row kernel ``@{name}`` (the unsorted one's signature, ``%slots`` being :func:`scratch`);
    ``fields``: the format fields of spgemm's templates (name, t, mul, add, index widths and extensions);
    ``network``: rows of up to 16 int32 columns sorted by spgemm_network (AVX-512F hosts), else ranked."""
    if network and fields["co"] == 32:   # the end of a short row's block one_load: the sort, else on to the ranks
        head, one_next = spgemm_network.DECLARATIONS, spgemm_network.row_ir(fields["t"], "one_head", "row_done")
    else:
        head, one_next = "", "  br label %one_head\n"
    return head + fill(_ROWS, **dict(spgemm_ir.sorted_fields(fields), **_PIECES), pad=PAD,
                       **spgemm_ir.small_rows(_ONE_VALUE, _RANK_VALUE, "rg_head", one_next))
