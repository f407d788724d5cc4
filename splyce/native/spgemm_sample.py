"""The LLVM IR of :func:`splyce.native.spgemm.unordered_kernel`'s look at ``A @ B`` (text only; spgemm.py
compiles and calls it): B's share of adjacent columns, then the distinct columns of a sample of the product's
rows, in one native call."""

from __future__ import annotations

from splyce.native.spgemm_ir import LOOPS, index_fields, nest
from splyce.native.ir_text import fill, index_at, load_at, store_at

# spgemm.unordered_kernel's look at A @ B, one call. First B's share of adjacent columns as
# spgemm_sorted.kind_for counts it (pairs (bc[p], bc[p + 1]) for p = 0, astep, 2 astep, ... < npairs): when
# at least %share, nothing more (the map kernel's columns: its rows stay unsorted). Else a sample of rows at
# evenly spaced multiply-adds (target (2s + 1) step for s in [0, samples): the row r with prefix[r] <= target
# < prefix[r + 1], by binary search over prefix[0..m]), a row of more than cap multiply-adds skipped; for each
# row taken, its distinct columns c (each of B's columns marks its byte of %mark, zero on entry, with the tag
# s + 1 and counts when the byte held another: up to 255 samples need no clearing) and its flops f.
# out: [sum of c / f (double), rows taken, adjacent pairs, pairs counted].
_SAMPLE = """
define void @{name}(ptr %ap, ptr %ac, ptr %bp, ptr %bc, ptr %prefix, i64 %m, i64 %samples, i64 %step, i64 %cap,
                    i64 %npairs, i64 %astep, double %share, ptr %mark, ptr %out) {
entry:
  br label %a_head
a_head:
  %p = phi i64 [0, %entry], [%p1, %a_body]
  %acnt = phi i64 [0, %entry], [%acnt1, %a_body]
  %atot = phi i64 [0, %entry], [%atot1, %a_body]
  %amore = icmp slt i64 %p, %npairs
  br i1 %amore, label %a_body, label %a_done
a_body:
""" + index_at("%bc", "%p", "%x0", "cb") + """  %pq = add i64 %p, 1
""" + index_at("%bc", "%pq", "%x1", "cb") + """  %x0n = add i64 %x0, 1
  %aeq = icmp eq i64 %x1, %x0n
  %ainc = zext i1 %aeq to i64
  %acnt1 = add i64 %acnt, %ainc
  %atot1 = add i64 %atot, 1
  %p1 = add i64 %p, %astep
  br label %a_head
a_done:
""" + store_at("i64", "%acnt", "%out", "2", "%o2") + """\
""" + store_at("i64", "%atot", "%out", "3", "%o3") + """  %acf = uitofp i64 %acnt to double
  %atf = uitofp i64 %atot to double
  %abar = fmul double %share, %atf
  %amap = fcmp oge double %acf, %abar
  %asome = icmp sgt i64 %atot, 0
  %askip = and i1 %amap, %asome
  br i1 %askip, label %done, label %s_head
s_head:
  %s = phi i64 [0, %a_done], [%s1, %s_next]
  %ratio = phi double [0.0, %a_done], [%ratio2, %s_next]
  %taken = phi i64 [0, %a_done], [%taken2, %s_next]
  %smore = icmp slt i64 %s, %samples
  br i1 %smore, label %s_body, label %done
s_body:
  %s1 = add i64 %s, 1
  %odd = add i64 %s, %s1
  %target = mul i64 %odd, %step
  br label %b_head
b_head:
  %blo = phi i64 [0, %s_body], [%blo2, %b_body]
  %bhi = phi i64 [%m, %s_body], [%bhi2, %b_body]
  %bspan = sub i64 %bhi, %blo
  %bmore = icmp sgt i64 %bspan, 1
  br i1 %bmore, label %b_body, label %b_done
b_body:
  %bhalf = lshr i64 %bspan, 1
  %bmid = add i64 %blo, %bhalf
""" + load_at("i64", "%prefix", "%bmid", "%vbm") + """  %ble = icmp sle i64 %vbm, %target
  %blo2 = select i1 %ble, i64 %bmid, i64 %blo
  %bhi2 = select i1 %ble, i64 %bhi, i64 %bmid
  br label %b_head
b_done:
  %i = phi i64 [%blo, %b_head]
""" + load_at("i64", "%prefix", "%i", "%f0") + """  %ip1 = add i64 %i, 1
""" + load_at("i64", "%prefix", "%ip1", "%f1") + """  %f = sub i64 %f1, %f0
  %fit = icmp sle i64 %f, %cap
  %tag = trunc i64 %s1 to i8
  br i1 %fit, label %row_body, label %s_next
{a_row}
{k_head}
{a_column}
{b_row}
  br label %j_head
{j_head}
{b_column}
  %pm = getelementptr i8, ptr %mark, i64 %col
  %old = load i8, ptr %pm
  store i8 %tag, ptr %pm
  %new = icmp ne i8 %old, %tag
  %inc = zext i1 %new to i64
  %c3 = add i64 %c2, %inc
  %jj1 = add i64 %jj, 1
  br label %j_head
k_end:
{k_next}
row_end:
  %cf = uitofp i64 %c to double
  %ff = uitofp i64 %f to double
  %q = fdiv double %cf, %ff
  %ratio1 = fadd double %ratio, %q
  %taken1 = add i64 %taken, 1
  br label %s_next
s_next:
  %ratio2 = phi double [%ratio, %b_done], [%ratio1, %row_end]
  %taken2 = phi i64 [%taken, %b_done], [%taken1, %row_end]
  br label %s_head
done:
  %ratio_end = phi double [0.0, %a_done], [%ratio, %s_head]
  %taken_end = phi i64 [0, %a_done], [%taken, %s_head]
  store double %ratio_end, ptr %out
""" + store_at("i64", "%taken_end", "%out", "1", "%o1") + """  ret void
}
"""


def sample_ir(name: str, pa: int, ca: int, pb: int, cb: int) -> str:
    """``@{name}``: spgemm.unordered_kernel's look at A @ B (B's adjacent columns, then a sample of rows: their
    distinct columns and flops)."""
    return fill(_SAMPLE, **LOOPS, **nest("row_end", "k_body", "j_body", k=[("%c", "i64", "0", "%c2")],
                                          j=[("%c2", "i64", "%c", "%c3")]), name=name, **index_fields(pa, ca, pb, cb, 32))
