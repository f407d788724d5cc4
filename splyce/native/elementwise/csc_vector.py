"""The CSR-with-CSC pass's vector match (AVX-512 masked loads) and its switch per block of rows."""

from splyce.native.ir_text import index_at, load_at, loop_head, store_at

from splyce.native.elementwise.csc_ir import csc_rows

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
""" + store_at("i{c}", "%col_raw", "%cc", "%o", "%vpcc") + """\
""" + store_at("{t}", "%vv", "%cv", "%o", "%vpcv") + """  %vnz = {nonzero} {t} %vv, {zero}
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
def _missing(x: str, k1: str, k0: str, o1: str, o0: str, vector: str, scalar: str) -> str:
    """On to ``vector`` when over 1 / {miss_share} of the A entries [k0, k1) found no partner (results [o0, o1)),
    else to ``scalar``."""
    return (f"  %{x}_len = sub i64 {k1}, {k0}\n  %{x}_hits = sub i64 {o1}, {o0}\n"
            f"  %{x}_miss = sub i64 %{x}_len, %{x}_hits\n  %{x}_miss_w = mul i64 %{x}_miss, {{miss_share}}\n"
            f"  %{x}_vec = icmp sgt i64 %{x}_miss_w, %{x}_len\n  br i1 %{x}_vec, label %{vector}, label %{scalar}\n")


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
""" + index_at("%ap", "%mode_w", "%mode_k", "c", "ext") + """\
""" + load_at("i{c}", "%cp", "%mode_w", "%mode_o_raw") + """  %mode_o_w = {ext} %mode_o_raw to i64
  %mode_o = select i1 %mode_first, i64 %o0, i64 %mode_o_w
""" + _missing("mode", "%k1", "%mode_k", "%o_e", "%mode_o", "vcall", "mode_done") + """\
""" + loop_head("vcall", "vcall_run", "mode_set", [("vc_r", "i64", "%r1", "%vc_to"), ("vc_o", "i64", "%o_e", "%vc_o1"),
                ("vc_z", "i64", "%z_e", "%vc_z1")], "vc_left = icmp slt i64 %vc_r, %hi", "vcall_out",
                latch="vcall_more") + """\
  %vc_to0 = add i64 %vc_r, {mode_rows}
  %vc_short = icmp slt i64 %vc_to0, %hi
  %vc_to = select i1 %vc_short, i64 %vc_to0, i64 %hi
{vrows_fn}  %vc_o1 = call i64 %vrows_fn(ptr %ap, ptr %ac, ptr %av, ptr %bc, ptr %bv, ptr %cursor, ptr %cc, ptr %cv,
                                  ptr %cp, i64 %vc_r, i64 %vc_to, i64 %vc_o, ptr %vc_zp, ptr %bad)
  %vc_zb = load i64, ptr %vc_zp
  %vc_z1 = add i64 %vc_z, %vc_zb
""" + index_at("%ap", "%vc_r", "%vc_k0", "c", "ext") + """\
""" + index_at("%ap", "%vc_to", "%vc_k1", "c", "ext") + """""" + _missing("vc", "%vc_k1", "%vc_k0", "%vc_o1", "%vc_o", "vcall_more", "vcall_out") + """\
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
                                  ptr %cp, i64 %lo, i64 %hi, i64 %o_in, ptr %zp, ptr %bad_out) noinline {
entry:
  %bad = alloca i32
  store i32 0, ptr %bad
  br label %row
""" + csc_rows("entry", "%o_in", ("row_end", "r1", "o", "z"), "done", "vo1",
                "  br label %vstart\n{match}next:\n  %kn = add i64 %k, 1\n  br label %entries\n") + """\
done:
  store i64 %z_r, ptr %zp
  %bad_here = load i32, ptr %bad
  %bad_before = load i32, ptr %bad_out
  %bad_now = or i32 %bad_before, %bad_here
  store i32 %bad_now, ptr %bad_out
  ret i64 %o_r
}
"""

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
