"""The row merge's LLVM IR templates (``merge.py`` fills them with ``ir_text.fill`` and compiles them)."""

from splyce.native.ir_text import index_at, load_at, loop_head, store_at


def _both_rows(u: str, block: str, enter: str, carried: tuple, exit: str) -> str:
    """Blocks {block}_head / {block}_body: ``%{u}`` over the entries of two rows of the same length ``%la``
    (``carried``: one more phi), their places ``%{u}a`` in A and ``%{u}b`` in B."""
    return (loop_head(f"{block}_head", f"{block}_body", enter, [(u, "i64", "0", f"%{u}1"), carried],
                      f"{u}in = icmp slt i64 %{u}, %la", exit)
            + f"  %{u}a = add i64 %ia, %{u}\n  %{u}b = add i64 %ja, %{u}\n")


# Both kernels: the loop over rows [lo, hi) and a fast path for two rows that hold the same columns (compared
# first, then combined column by column in one pass); the part after it merges the two rows.
_ROW_HEAD = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi,
                   ptr %ends, ptr %cc, ptr %cv) {
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
""" + _both_rows("q", "cmp", "general", ("d", "i32", "0", "%d1"), "cmp_done") + """\
""" + load_at("i{c}", "%ac", "%qa", "%cqa") + load_at("i{c}", "%bc", "%qb", "%cqb") + """  %ne = icmp ne i{c} %cqa, %cqb
  %nei = zext i1 %ne to i32
  %d1 = or i32 %d, %nei
  %q1 = add i64 %q, 1
  br label %cmp_head
cmp_done:
  %same = icmp eq i32 %d, 0
  br i1 %same, label %same_head, label %head
""" + _both_rows("u", "same", "cmp_done", ("os", "i64", "%out", "%os1"), "row_end") + """\
""" + load_at("i{c}", "%ac", "%ua", "%cu") + """\
""" + load_at("{t}", "%av", "%ua", "%vua") + """\
""" + load_at("{t}", "%bv", "%ub", "%vub") + """  %vu = {op} {t} %vua, %vub
""" + store_at("i{c}", "%cu", "%cc", "%os", "%pcu") + """\
""" + store_at("{t}", "%vu", "%cv", "%os", "%pcvu") + """  %nzu = {nonzero} {t} %vu, {zero}
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

# One step of the branch-free merge: both rows' next entries loaded, op(a, b) and a column stored, the output
# cursor advanced when the result is kept, each row's cursor when its column is the smaller (or equal).
# ``_MERGE_STEP_PARTS[union]`` fills it: the intersection keeps op(a, b) where the columns are equal; the union
# stores the smaller column with op(a, 0), op(0, b) or op(a, b) (the missing value masked by ``_keep``)
_MERGE_STEP = """  br i1 %both, label %body, label %{rest}
body:
""" + load_at("i{c}", "%ac", "%i", "%ca") + """\
""" + load_at("i{c}", "%bc", "%j", "%cb") + """  %pav = getelementptr {t}, ptr %av, i64 %i
  %va{raw} = load {t}, ptr %pav
  %pbv = getelementptr {t}, ptr %bv, i64 %j
  %vb{raw} = load {t}, ptr %pbv
{advance_union}{keep_a}{keep_b}  %v = {op} {t} %va, %vb
{column}  %pcc = getelementptr i{c}, ptr %cc, i64 %o
  store i{c} %{col}, ptr %pcc
""" + store_at("{t}", "%v", "%cv", "%o", "%pcv") + """{kept}  %kinc = zext i1 %{keep} to i64
  %o1 = add i64 %o, %kinc
{advance_intersect}  %ai = zext i1 %adv_a to i64
  %bi = zext i1 %adv_b to i64
  %i1 = add i64 %i, %ai
  %j1 = add i64 %j, %bi
  br label %head
"""
_ADVANCE = """  %adv_a = icmp sle i{c} %ca, %cb
  %adv_b = icmp sle i{c} %cb, %ca
"""
_MERGE_STEP_PARTS = {
    False: dict(rest="row_end", raw="", advance_union="", column="", col="ca", keep="keep",
                kept="  %eq = icmp eq i{c} %ca, %cb\n  %nz = {nonzero} {t} %v, {zero}\n  %keep = and i1 %eq, %nz\n",
                advance_intersect=_ADVANCE),
    True: dict(rest="tail_a", raw="_raw", advance_union=_ADVANCE, advance_intersect="", col="col", keep="nz",
               column="  %col = select i1 %adv_a, i{c} %ca, i{c} %cb\n", kept="  %nz = {nonzero} {t} %v, {zero}\n"),
}

# The window fast path, one template for both merges (``_NARROW_PARTS[union]`` fills it):
# - intersection: rows whose common columns lie in a window of 64 (blocks, bands, meshes in a good order):
#   each row's columns in the window become a 64-bit mask, and only the bits of the masks' AND are visited
#   (count-trailing-zeros); an entry's place in its row is the entries before the window plus a popcount
#   below its bit. A row pair with no column in common (disjoint windows) costs four loads.
# - union: a sum of rows whose columns together span at most 64 (blocks, bands): both rows' columns become
#   64-bit masks over the window from their first column, and the bits of the masks' OR are visited in order;
#   op(a, 0), op(0, b) or op(a, b) as in the merge, without the merge's chain of loads (each step of a
#   branch-free merge waits for the compare of the entries it loaded). With ``_keep`` (no branch per result)
#   blockdiag-1500's A + A^T merge took 33-36 -> 17 ms CPU (scipy's csr_plus_csr 28 ms; 4096 of its rows in
#   cache: 11 -> 5.3 ns per result).
# Values, order and zero dropping as in the merge.
_NARROW = """  %nw_a = icmp sgt i64 %la, 0
  %nw_b = icmp sgt i64 %lb, 0
  %nw_ab = and i1 %nw_a, %nw_b
  br i1 %nw_ab, label %nw_ends, label %general
nw_ends:
""" + load_at("i{c}", "%ac", "%ia", "%nw_fa") + """  %nw_ib1 = sub i64 %ib, 1
""" + load_at("i{c}", "%ac", "%nw_ib1", "%nw_lastA") + """\
""" + load_at("i{c}", "%bc", "%ja", "%nw_fb") + """  %nw_jb1 = sub i64 %jb, 1
""" + load_at("i{c}", "%bc", "%nw_jb1", "%nw_lastB") + """  %nw_lo_a = icmp {lo_cmp} i{c} %nw_fa, %nw_fb
  %nw_lo = select i1 %nw_lo_a, i{c} %nw_fa, i{c} %nw_fb
  %nw_hi_a = icmp {hi_cmp} i{c} %nw_lastA, %nw_lastB
  %nw_hi = select i1 %nw_hi_a, i{c} %nw_lastA, i{c} %nw_lastB
{window_check}
nw_width:
  %nw_w = sub i{c} %nw_hi, %nw_lo
  %nw_fits = icmp ult i{c} %nw_w, 64
  br i1 %nw_fits, label %nw_ma_head, label %general
{mask_a}{mask_b}nw_start:
  %nw_u0 = {visit} i64 %nw_ma, %nw_mb
{bases}  %nw_lo64 = {c_sext} %nw_lo to i64
  br label %nw_head
""" + loop_head("nw_head", "nw_body", "nw_start", [("nw_u", "i64", "%nw_u0", "%nw_u1"),
                                                      ("nw_o", "i64", "%out", "%nw_o1")],
                 "nw_any = icmp ne i64 %nw_u, 0", "row_end") + """\
  %nw_bit = call i64 @llvm.cttz.i64(i64 %nw_u, i1 true)
  %nw_one = shl i64 1, %nw_bit
  %nw_below = sub i64 %nw_one, 1
  %nw_mab = and i64 %nw_ma, %nw_below
  %nw_pa = call i64 @llvm.ctpop.i64(i64 %nw_mab)
  %nw_mbb = and i64 %nw_mb, %nw_below
  %nw_pb = call i64 @llvm.ctpop.i64(i64 %nw_mbb)
{places}  %nw_pva = getelementptr {t}, ptr %av, i64 %nw_xa
  %nw_va{raw} = load {t}, ptr %nw_pva
  %nw_pvb = getelementptr {t}, ptr %bv, i64 %nw_xb
  %nw_vb{raw} = load {t}, ptr %nw_pvb
{keep_nw_a}{keep_nw_b}  %nw_v = {op} {t} %nw_va, %nw_vb
  %nw_col64 = add i64 %nw_lo64, %nw_bit
  %nw_col = {c_narrow} %nw_col64 to i{c}
""" + store_at("i{c}", "%nw_col", "%cc", "%nw_o", "%nw_pcc") + """\
""" + store_at("{t}", "%nw_v", "%cv", "%nw_o", "%nw_pcv") + """  %nw_nz = {nonzero} {t} %nw_v, {zero}
  %nw_nzi = zext i1 %nw_nz to i64
  %nw_o1 = add i64 %nw_o, %nw_nzi
{next_bit}
  br label %nw_head"""

# What the two window paths differ in (the rest of ``_NARROW`` is shared)
_NARROW_PARTS = {
    False: dict(lo_cmp="sgt", hi_cmp="slt", visit="and", raw="",       # intersection: common window, AND
                window_check="  %nw_none = icmp slt i{c} %nw_hi, %nw_lo\n"
                             "  br i1 %nw_none, label %row_end, label %nw_width",
                bases="  %nw_abase = add i64 %ia, %nw_na\n  %nw_bbase = add i64 %ja, %nw_nb\n",
                places="  %nw_xa = add i64 %nw_abase, %nw_pa\n  %nw_xb = add i64 %nw_bbase, %nw_pb\n",
                next_bit="  %nw_u1 = xor i64 %nw_u, %nw_one"),
    True: dict(lo_cmp="slt", hi_cmp="sgt", visit="or", raw="_raw",     # union: joint window, OR
               window_check="  br label %nw_width", bases="",
               places="""  %nw_hasa_m = and i64 %nw_ma, %nw_one
  %nw_hasa = icmp ne i64 %nw_hasa_m, 0
  %nw_hasb_m = and i64 %nw_mb, %nw_one
  %nw_hasb = icmp ne i64 %nw_hasb_m, 0
  %nw_xa0 = add i64 %ia, %nw_pa
  %nw_xa = select i1 %nw_hasa, i64 %nw_xa0, i64 %ia
  %nw_xb0 = add i64 %ja, %nw_pb
  %nw_xb = select i1 %nw_hasb, i64 %nw_xb0, i64 %ja
""", next_bit="  %nw_um = sub i64 %nw_u, 1\n  %nw_u1 = and i64 %nw_u, %nw_um"),
}


# One row's columns in the window [%nw_lo, %nw_lo + 64) as a 64-bit mask, and its entries before the window.
_NARROW_MASK = loop_head("nw_m{x}_head", "nw_m{x}_body", "{enter}", [
    ("nw_k{x}", "i64", "%{start}", "%nw_k{x}1"), ("nw_m{x}", "i64", "0", "%nw_m{x}1"),
    ("nw_n{x}", "i64", "0", "%nw_n{x}1")], "nw_k{x}in = icmp slt i64 %nw_k{x}, %{stop}", "{exit}") + """\
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

# One row's entries left after the merge (``x``: a or b), each op(a, 0) or op(0, b), kept when not zero
_TAIL = loop_head("tail_{x}", "t{x}_body", "{enter}", [("t{x}", "i64", "%{cursor}", "%t{x}1"),
                                                        ("to{x}", "i64", "%{out}", "%to{x}1")],
                  "in{x}2 = icmp slt i64 %t{x}, %{stop}", "{exit}") + load_at("i{c}", "%{x}c", "%t{x}", "%tc{x}") + """\
""" + load_at("{t}", "%{x}v", "%t{x}", "%tv{x}") + """  %tr{x} = {op} {t} {operands}
""" + store_at("i{c}", "%tc{x}", "%cc", "%to{x}", "%tpcc{x}") + """\
""" + store_at("{t}", "%tr{x}", "%cv", "%to{x}", "%tpcv{x}") + """\
  %tnz{x} = {nonzero} {t} %tr{x}, {zero}
  %tinc{x} = zext i1 %tnz{x} to i64
  %to{x}1 = add i64 %to{x}, %tinc{x}
  %t{x}1 = add i64 %t{x}, 1
  br label %tail_{x}
"""


# ``_TAIL``'s own fields for each row (the union's {tail_a} and {tail_b})
_TAILS = dict(a=dict(cursor="i", enter="head", out="o", stop="ib", exit="tail_b", operands="%tva, {zero_b}"),
              b=dict(cursor="j", enter="tail_a", out="toa", stop="jb", exit="row_end", operands="{zero_a}, %tvb"))

# The merge of rows, one template for both (``_ROWS_PARTS[union]`` fills it): the intersection keeps op(a, b)
# where both rows hold the column; the union op(a, 0), op(0, b) or op(a, b) for every column either row holds,
# the rows' tails after the merge step; either kept when not zero.
_ROWS = _ROW_HEAD + """{merge_step}{tails}row_end:
  %o_end = phi i64 {o_end}, [%os, %same_head], {o_window}
{end_store}
  br label %row
done:
  ret i64 %out
}

declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.ctpop.i64(i64)
"""
_ROWS_PARTS = {False: dict(tails="", o_end="[%o, %head]", o_window="[%out, %nw_ends], [%nw_o, %nw_head]"),
               True: dict(tails="{tail_a}{tail_b}", o_end="[%tob, %tail_b]", o_window="[%nw_o, %nw_head]")}

_BOUNDS = (index_at("%ap", "%r", "%ia") + index_at("%ap", "%r1", "%ib") + index_at("%bp", "%r", "%ja")
           + index_at("%bp", "%r1", "%jb")).rstrip("\n")
