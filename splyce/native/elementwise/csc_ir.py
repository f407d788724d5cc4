"""The CSR-with-CSC pass's LLVM IR templates (``csc.py`` fills them with ``ir_text.fill`` and compiles them; the
vector match is in ``csc_vector.py``)."""

from splyce.native.ir_text import index_at, load_at, loop_head, store_at


def csc_rows(enter, o_in: str, latch: tuple, row_exit: str, o_next: str, step: str, end_phis: str = "",
             after: str = "") -> str:
    """The CSC passes' loop over A's rows [lo, hi) (the one pass and its vector rows): phis entered from
    ``enter`` (the output cursor at ``o_in``) and latched from ``latch`` = (block, row, output, zeros); each
    row's entries' range and its index narrowed to B's row type; the loop over its entries, each with its
    column's cursor (B's next entry) and end, ``step`` after them (the output cursor's next value
    ``o_next``, the zeros' ``z_next``); then the row's end stored (``end_phis``: that block's phis; ``after``:
    what follows the store)."""
    block, r, o, z = latch
    return (loop_head("row", "row_body", enter, [("r", "i64", "%lo", f"%{r}"), ("o_r", "i64", o_in, f"%{o}"),
                                                ("z_r", "i64", "0", f"%{z}")], "rin = icmp slt i64 %r, %hi",
                      row_exit, latch=block) + """  %r1 = add i64 %r, 1
""" + index_at("%ap", "%r", "%k0", "c", "ext") + index_at("%ap", "%r1", "%k1", "c", "ext") + """\
  %r_c = {narrow} %r to i{c}
  br label %entries
""" + loop_head("entries", "entry_body", "row_body", [("k", "i64", "%k0", "%kn"), ("o", "i64", "%o_r", f"%{o_next}"),
                                                       ("z", "i64", "%z_r", f"%{o_next.replace('o', 'z', 1)}")],
                "kin = icmp slt i64 %k, %k1", "row_end", latch="next")
            + index_at("%ac", "%k", "%col", "c", "ext") + """  %pcur = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %col, i32 0
  %at0_raw = load i{c}, ptr %pcur
  %at0 = {ext} %at0_raw to i64
  %pbe = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %col, i32 1
  %end_raw = load i{c}, ptr %pbe
  %end = {ext} %end_raw to i64
""" + step + "row_end:\n" + end_phis + """  %pce = getelementptr i{c}, ptr %cp, i64 %r1
  %o_c = {narrow} %o to i{c}
  store i{c} %o_c, ptr %pce
""" + after + "  br label %row\n")


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
                   ptr %cp, i64 %m, i64 %n, i64 %nnz_a, i64 %nnz_b, i64 %lo, i64 %hi, ptr %seen) {
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
""" + loop_head("touch_head", "touch_body", "touch", [("w", "i64", "0", "%w1"), ("wacc", "i64", "0", "%wacc1")],
                "win = icmp slt i64 %w, %bv_words", "touched") + """\
""" + load_at("i64", "%bv", "%w", "%wv") + """  %wacc1 = or i64 %wacc, %wv
  %w1 = add i64 %w, 1
  br label %touch_head
touched:
  store volatile i64 %wacc, ptr %sink
  br label %init_head
""" + loop_head("init_head", "init_body", "touched", [("j", "i64", "{init_lo}", "%j1"), ("isum", "i64", "0", "%isum1")],
                "jin = icmp slt i64 %j, {init_hi}", "rows", latch="{init_latch}") + """\
{init_value}
  %pcj = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %j, i32 0
  store i{c} %bj, ptr %pcj
  %ej1 = add i64 %j, 1
""" + load_at("i{c}", "%bp", "%ej1", "%ej") + """  %pcje = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %j, i32 1
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
""" + csc_rows(("rows", "rows_0"), "%o0", ("{row_latch}", "{latch_r}", "{latch_o}", "{latch_z}"), "{row_exit}",
               "o1", "{prefetch}{match}  %kn = add i64 %k, 1\n  br label %entries{entries_loop}\n",
               "  %o_e = phi i64 [%o, %entries]\n  %z_e = phi i64 [%z, %entries]\n", "{mode_next}") + """\
done:
{tail}
finish:
  %anyzero = icmp ne i64 %z_r, 0
  br i1 %anyzero, label %compact, label %all_kept
all_kept:
  ret i64 %o_r
{bad_check}compact:
  br label %c_row
""" + loop_head("c_row", "c_row_body", "compact", [("cr", "i64", "%lo", "%cr1"), ("cs", "i64", "%o0", "%ce"),
                ("cw", "i64", "%o0", "%cw_e")], "crin = icmp slt i64 %cr, %hi", "c_done", latch="c_row_end") + """\
  %cr1 = add i64 %cr, 1
  %pce1 = getelementptr i{c}, ptr %cp, i64 %cr1
  %ce_raw = load i{c}, ptr %pce1
  %ce = {ext} %ce_raw to i64
  br label %c_ent
""" + loop_head("c_ent", "c_ent_body", "c_row_body", [("ck", "i64", "%cs", "%ck1"), ("cw2", "i64", "%cw", "%cw3")],
                "ckin = icmp slt i64 %ck, %ce", "c_row_end") + """\
""" + load_at("{t}", "%cv", "%ck", "%cvk") + """\
""" + load_at("i{c}", "%cc", "%ck", "%cck") + """\
""" + store_at("{t}", "%cvk", "%cv", "%cw2", "%pcvw") + """\
""" + store_at("i{c}", "%cck", "%cc", "%cw2", "%pccw") + """  %cnz = {nonzero} {t} %cvk, {zero}
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
}

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
""" + load_at("i{c}", "%bc", "%at", "%brow") + """  %same = icmp eq i{c} %brow, %r_c
  br i1 %same, label %hit, label %{not_same}
{skip}
hit:
  %at1 = add i64 %at, 1
  %at1_c = {narrow} %at1 to i{c}
  store i{c} %at1_c, ptr %pcur
""" + load_at("{t}", "%av", "%k", "%va") + load_at("{t}", "%bv", "%at", "%vb") + """  %v = {op} {t} %va, %vb
""" + store_at("i{c}", "%col_raw", "%cc", "%o", "%pcc") + """\
""" + store_at("{t}", "%v", "%cv", "%o", "%pcv") + """  %nz = {nonzero} {t} %v, {zero}
  %zi = select i1 %nz, i64 0, i64 1
  %z_hit = add i64 %z, %zi
  %o_hit = add i64 %o, 1
  br label %next
{miss}
next:
  %o1 = phi i64 [%o_hit, %hit]{next_phi}
  %z1 = phi i64 [%z_hit, %hit]{next_phi_z}
"""


# Prefetches for the entry ``distance`` ahead (its column's cursor is read now; a stale one only costs a useless
# prefetch): B's row and value there, which the pass reads in scattered order beyond cache
_CSC_PREFETCH = """  %pf_k0 = add i64 %k, {distance}
  %pf_last = sub i64 %nnz_a, 1
  %pf_in = icmp slt i64 %pf_k0, %nnz_a
  %pf_k = select i1 %pf_in, i64 %pf_k0, i64 %pf_last
""" + index_at("%ac", "%pf_k", "%pf_col", "c", "ext") + """\
  %pf_pcur = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %pf_col, i32 0
  %pf_at_raw = load i{c}, ptr %pf_pcur
  %pf_at = {ext} %pf_at_raw to i64
  %pf_pbc = getelementptr i{c}, ptr %bc, i64 %pf_at
  call void @llvm.prefetch.p0(ptr %pf_pbc, i32 0, i32 3, i32 1)
  %pf_pbv = getelementptr {t}, ptr %bv, i64 %pf_at
  call void @llvm.prefetch.p0(ptr %pf_pbv, i32 0, i32 3, i32 1)
"""

# B's positions only (a sum: every entry of B is then matched against A's, so its rows need no scan)
_CSC_POSITIONS = """  %bfirst = load i{c}, ptr %bp
""" + index_at("%bp", "%n", "%blast", "c", "ext") + """  %b0 = icmp eq i{c} %bfirst, 0
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
""" + loop_head("tail_head", "tail_col", "done", [("tj", "i64", "0", "%tj1")], "tjin = icmp slt i64 %tj, %n",
                "finished", latch="tail_col_end") + """\
  %ptc = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %tj, i32 0
  %tc_raw = load i{c}, ptr %ptc
  %tc0 = {ext} %tc_raw to i64
  %tj1 = add i64 %tj, 1
""" + index_at("%bp", "%tj1", "%te", "c", "ext") + """  br label %tail_entries
""" + loop_head("tail_entries", "tail_entry", "tail_col", [("tc", "i64", "%tc0", "%tc1")],
                "tcin = icmp slt i64 %tc, %te", "tail_col_end", latch="t_finite") + """\
""" + load_at("{t}", "%bv", "%tc", "%tf") + """  %tf0 = fmul {t} %tf, 0.0
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
_RANGE_STASH = (store_at("i64", "%isum", "%seen", "1", "%stash_isum") + store_at("i64", "%smin", "%seen", "2", "%stash_smin")
                + store_at("i64", "%smax", "%seen", "3", "%stash_smax"))

_RANGE_SEEN = load_at("i64", "%seen", "1", "%isum_s") + load_at("i64", "%seen", "2", "%smin_s") + """\
""" + load_at("i64", "%seen", "3", "%smax_s") + """  br label %seen_head
""" + loop_head("seen_head", "seen_body", "done", [("sj", "i64", "%smin_s", "%sj1"), ("ssum", "i64", "0", "%ssum1")],
                "sjin = icmp slt i64 %sj, %smax_s", "seen_done") + """\
  %psj = getelementptr {i{c}, i{c}}, ptr %cursor, i64 %sj, i32 0
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
""" + loop_head("span_head", "span_body", "entry", [("sr", "i64", "%lo", "%sr1"), ("smin", "i64", "%n", "%smin1"),
                ("smax", "i64", "0", "%smax1")], "srin = icmp slt i64 %sr, %hi", "touch", latch="span_next") + """\
  %sr1 = add i64 %sr, 1
""" + index_at("%ap", "%sr", "%s0", "c", "ext") + """\
""" + index_at("%ap", "%sr1", "%s1", "c", "ext") + """  %sne = icmp slt i64 %s0, %s1
  br i1 %sne, label %span_row, label %span_next
span_row:
""" + index_at("%ac", "%s0", "%sf", "c", "ext") + """  %sl0 = sub i64 %s1, 1
""" + index_at("%ac", "%sl0", "%sl", "c", "ext") + """  %sl1 = add i64 %sl, 1
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
_COUNTED_CURSOR = index_at("%bp", "%j", "%cb0", "c", "ext") + """  %cj1 = add i64 %j, 1
""" + index_at("%bp", "%cj1", "%cb1", "c", "ext") + """  %lo_c = {narrow} %lo to i{c}
  br label %cnt_head
""" + loop_head("cnt_head", "cnt_body", "init_body", [("q", "i64", "%cb0", "%q1")], "qin = icmp slt i64 %q, %cb1",
                "cnt_done") + """\
""" + load_at("i{c}", "%bc", "%q", "%rq") + """  %rq_below = icmp slt i{c} %rq, %lo_c
  %q1 = add i64 %q, 1
  br i1 %rq_below, label %cnt_head, label %cnt_done
cnt_done:
  %bj = {narrow} %q to i{c}"""
