"""The LLVM IR of :mod:`splyce.native.spgemm`'s kernels (scipy's rule: rows in order of first appearance, zero
sums dropped, or kept with ``keep_zeros``): the row kernel with its sparse or dense accumulator, the backward
driver of the first of two threads and the flops prefix; and what the sorted row kernels
(:mod:`splyce.native.spgemm_sorted`, :mod:`splyce.native.spgemm_sorted_map`) share with them: the backward
driver, the loops over A's rows, A's entries and B's rows (:func:`loops`), the ranking of short sorted rows
(:func:`small_rows`), the compaction of scipy's rule (:data:`COMPACT`). Text only: spgemm.py compiles it
and runs it on threads."""

from __future__ import annotations

from splyce.native.ir_text import (BY_TYPE, FLOAT_TYPES, IR, bind, counted, ext, fill, index_at, load_at, load_index,
                                   loop_head, narrow, segment, segment_at, store_at)

# The loop pieces every SpGEMM kernel shares (these rows, the sorted ones, the flops prefix), put in a
# template's text by loops() at {row_loop}, {row_done}, {a_row}, {a_entry}, {a_column}, {b_row}, {b_column},
# {b_value}, each alone on a line: the row kernels' loop over rows [lo, hi) (block row, then row_body) and its
# end (block row_done: ends[i - lo] = the row's end, the kernel's value {row_end}; block done), block row_body
# alone (row i's entries of A: [ka, kb); %i1 = i + 1), block k_body (A's entry k: column acol, with {a_entry}
# also its value aval; B's row acol: [ja, jb)), block j_body (B's entry jj: column col, then with {b_value}
# the product prod of its value bval).
_ROW_LOOP = """\
row:
  %i = phi i64 [%lo, %entry], [%i1, %row_done]
  %start = phi i64 [%base, %entry], [{row_end}, %row_done]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %row_body, label %done
"""
_ROW_DONE = """\
row_done:
  %rel = sub i64 %i, %lo
""" + store_at("i64", "{row_end}", "%ends", "%rel", "%pend") + """  br label %row
done:
  ret i64 %start
}"""
_A_ROW = "row_body:\n" + segment_at("%ap", "%i", "%ka", "%kb", "pa") + "  br label %k_head"
_A_COLUMN = "k_body:\n" + index_at("%ac", "%k", "%acol", "ca").removesuffix("\n")
_B_ROW = segment_at("%bp", "%acol", "%ja", "%jb", "pb").removesuffix("\n")
# The loop over A's row i (k in [ka, kb): block k_head, then k_body; block k_end's {k_next} loops) and over B's
# row acol (jj in [ja, jb): block j_head, then j_body, k_end after), with the kernel's carried values (nest()).
_K_HEAD = """k_head:
  %k = phi i64 [%ka, %row_body], [%k1, %k_end]
{k_carried}  %kin = icmp slt i64 %k, %kb
  br i1 %kin, label %k_body, label %{k_exit}"""
_J_HEAD = """j_head:
  %jj = phi i64 [%ja, %{j_enter}], [%jj1, %{j_latch}]
{j_carried}  %jin = icmp slt i64 %jj, %jb
  br i1 %jin, label %j_body, label %k_end"""


def _phis(enter: str, latch: str, values) -> str:
    return "".join(f"  {v} = phi {t} [{init}, %{enter}], [{nxt}, %{latch}]\n" for v, t, init, nxt in values)


def nest(k_exit: str, j_enter: str, j_latch: str, k=(), j=()) -> dict:
    """The fields of a kernel's loops over A's row and B's rows (``{k_head}``, ``{j_head}``): where the k loop
    exits to, the block that enters the j loop and its latch, and the values each carries, ``(name, type,
    initial value, next value)``."""
    return dict(k_exit=k_exit, j_enter=j_enter, j_latch=j_latch, k_carried=_phis("row_body", "k_end", k),
                j_carried=_phis(j_enter, j_latch, j))


# the fields of the loop pieces (ir_text.fill), with the kernel's ``row_end`` (default "%row_end") and its format
# fields (t, mul, index widths)
LOOPS = dict(k_head=_K_HEAD, j_head=_J_HEAD, k_next="  %k1 = add i64 %k, 1\n  br label %k_head",
             # rows, A's entries, B's entries up to B's column: the nest of the row kernel and the map kernel
             to_b_column="{row_loop}\n{k_head}\n{a_entry}\n  br label %j_head\n{j_head}\n{b_column}",row_loop=_ROW_LOOP + _A_ROW, row_done=_ROW_DONE, a_row=_A_ROW,
             a_entry=_A_COLUMN + "\n" + load_at("{t}", "%av", "%k", "%aval") + _B_ROW, a_column=_A_COLUMN,
             b_row=_B_ROW, b_column="j_body:\n" + index_at("%bc", "%jj", "%col", "cb").removesuffix("\n"),
             b_value=load_at("{t}", "%bv", "%jj", "%bval") + "  %prod = {mul} {t} %aval, %bval", row_end="%row_end")

# Rows [lo, hi) of A @ B into cc / cv from position base on; ends[i - lo] = row i's end; returns the end.
# {accumulate}: one multiply-add (col, prod at position c2; defines block j_next, which sets c2n and loops);
# {finish}: the row's end (gather / compaction) from block finish (ends in block finished, which sets row_end).
_ROWS = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi, i64 %base,
                   ptr %ends, ptr %cc, ptr %cv, ptr %slots) {
entry:
  br label %row
{to_b_column}
  %col_out = {co_narrow} %col to i{co}
{b_value}
{accumulate}
k_end:
{k_next}
{finish}
{row_done}
"""

# Rows [lo, hi) of A @ B ending at position end0 of cc / cv, in blocks of rows (bounds[0] = lo < bounds[1] <
# ... < bounds[blocks] = hi) taken last block first, each placed just before the blocks already placed;
# ends[i - lo] = row i's end; returns where row lo starts. Two threads meet at end0 with no gap: one writes
# backwards to it, the other forwards from it. A block (at most its flops, prefix[b1] - prefix[b0], entries)
# is computed by @{name} at end - flops on, seen through pointers shifted so that its positions count on from
# the previous block's (a stream that only grows, as forwards: slots never need clearing), then moved up to
# end when it has fewer entries than flops: a move of what was just written, still in cache.
_BACKWARD = """
define i64 @{name}_backward(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, ptr %bounds,
                            i64 %blocks, i64 %end0, ptr %ends, ptr %cc, ptr %cv, ptr %slots, ptr %prefix) {
entry:
  br label %block
""" + loop_head("block", "body", "entry", [("b", "i64", "%blocks", "%bm"), ("vs", "i64", "0", "%vend"),
                ("end", "i64", "%end0", "%end_new")], "more = icmp sgt i64 %b, 0", "done", latch="block_done") + """\
  %bm = sub i64 %b, 1
""" + load_at("i64", "%bounds", "%bm", "%r0") + """\
""" + load_at("i64", "%bounds", "%b", "%r1") + """\
""" + load_at("i64", "%prefix", "%r0", "%f0") + """\
""" + load_at("i64", "%prefix", "%r1", "%f1") + """  %flops = sub i64 %f1, %f0
  %at = sub i64 %end, %flops
  %shift = sub i64 %at, %vs
  %ccr = getelementptr i{co}, ptr %cc, i64 %shift
  %cvr = getelementptr {t}, ptr %cv, i64 %shift
  %rel = sub i64 %r0, %lo
  %pend = getelementptr i64, ptr %ends, i64 %rel
  %vend = call i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %r0, i64 %r1, i64 %vs,
                           ptr %pend, ptr %ccr, ptr %cvr, ptr %slots)
  %cnt = sub i64 %vend, %vs
  %end_new = sub i64 %end, %cnt
  %delta = sub i64 %end_new, %vs
  %rows = sub i64 %r1, %r0
  br label %fix
""" + loop_head("fix", "fix_body", "body", [("y", "i64", "0", "%y1")], "yin = icmp slt i64 %y, %rows", "fixed") + """\
  %pe = getelementptr i64, ptr %pend, i64 %y
  %e = load i64, ptr %pe
  %e1 = add i64 %e, %delta
  store i64 %e1, ptr %pe
  %y1 = add i64 %y, 1
  br label %fix
fixed:
  %gap = icmp slt i64 %cnt, %flops
  br i1 %gap, label %move, label %block_done
""" + loop_head("move", "move_body", "fixed", [("x", "i64", "%cnt", "%xm")], "xin = icmp sgt i64 %x, 0",
                "block_done") + """\
  %xm = sub i64 %x, 1
  %from = add i64 %at, %xm
""" + load_at("i{co}", "%cc", "%from", "%col") + """\
""" + load_at("{t}", "%cv", "%from", "%val") + """  %to = add i64 %end_new, %xm
""" + store_at("i{co}", "%col", "%cc", "%to", "%pdc") + """\
""" + store_at("{t}", "%val", "%cv", "%to", "%pdv") + """  br label %move
block_done:
  br label %block
done:
  ret i64 %end
}
"""

# Moves the row's nonzero sums (columns cc[start, {stop}), value %{p}v of entry %{p}x given by {value}) to cc / cv
# from start on (at %{p}q), blocks {blk}_head / {blk}_body from block {before}, then block {exit}: the compaction of
# scipy's rule, the unsorted kernels' (here: blk compact, no prefix) and the flags kernel's (spgemm_sorted._DROP).
COMPACT = "\n" + loop_head("{blk}_head", "{blk}_body", "{before}", [("{p}x", "i64", "%start", "%{p}x1"),
                ("{p}q", "i64", "%start", "%{p}qn")], "{p}xin = icmp slt i64 %{p}x, {stop}", "{exit}") + """\
""" + load_at("i{co}", "%cc", "%{p}x", "%{p}xcol_raw") + """{value}
  %{p}keep = {nonzero} {t} %{p}v, {zero}
""" + store_at("i{co}", "%{p}xcol_raw", "%cc", "%{p}q", "%p{p}qc") + """\
""" + store_at("{t}", "%{p}v", "%cv", "%{p}q", "%p{p}qv") + """  %{p}kinc = zext i1 %{p}keep to i64
  %{p}qn = add i64 %{p}q, %{p}kinc
  %{p}x1 = add i64 %{p}x, 1
  br label %{blk}_head
"""
_COMPACT = bind(COMPACT, blk="compact", p="", stop="%c1", exit="finished")

# Dense: slots[col] = (row tag, running sum), updated by a select; the sums gathered at the row's end.
_DENSE_ACCUMULATE = """
  %pm = getelementptr {i64, {t}}, ptr %slots, i64 %col, i32 0
  %tag = load i64, ptr %pm
  %seen = icmp eq i64 %tag, %i
  store i64 %i, ptr %pm
""" + store_at("i{co}", "%col_out", "%cc", "%c2", "%pcc") + """\
  %pacc = getelementptr {i64, {t}}, ptr %slots, i64 %col, i32 1
  %old = load {t}, ptr %pacc
  %sum = {add} {t} %old, %prod
  %first = {add} {t} {first_zero}, %prod
  %new = select i1 %seen, {t} %sum, {t} %first
  store {t} %new, ptr %pacc
  %fresh = xor i1 %seen, true
  %inc = zext i1 %fresh to i64
  br label %j_next
j_next:
  %c2n = add i64 %c2, %inc
  %z2n = or i1 %z2, false
  %jj1 = add i64 %jj, 1
  br label %j_head
"""
_DENSE_FINISH = """
finish:
  br label %compact_head
""" + _COMPACT + """
finished:
  %row_end = phi i64 [%q, %compact_head]
  br label %{row_next}
{reverse}"""
_DENSE = dict(accumulate=_DENSE_ACCUMULATE, finish=_DENSE_FINISH, before="finish", value="""\
  %xcol = {co_ext} %xcol_raw to i64
  %pxv = getelementptr {i64, {t}}, ptr %slots, i64 %xcol, i32 1
  %v = load {t}, ptr %pxv""")

# Sparse: slots[col] = the column's output position (before start: not in this row yet); sums in place.
_SPARSE_ACCUMULATE = """
  %pm = getelementptr i64, ptr %slots, i64 %col
  %m = load i64, ptr %pm
  %seen = icmp sge i64 %m, %start
  br i1 %seen, label %accum, label %insert
accum:
  %pcv = getelementptr {t}, ptr %cv, i64 %m
  %old = load {t}, ptr %pcv
  %sum = {add} {t} %old, %prod
  store {t} %sum, ptr %pcv
  %sum_zero = {zero_test} {t} %sum, {zero}
  %za = or i1 %z2, %sum_zero
  br label %j_next
insert:
  store i64 %c2, ptr %pm
""" + store_at("i{co}", "%col_out", "%cc", "%c2", "%pcc") + """  %pcv2 = getelementptr {t}, ptr %cv, i64 %c2
  %first = {add} {t} {first_zero}, %prod
  store {t} %first, ptr %pcv2
  %c2i = add i64 %c2, 1
  %prod_zero = {zero_test} {t} %prod, {zero}
  %zi = or i1 %z2, %prod_zero
  br label %j_next
j_next:
  %c2n = phi i64 [%c2, %accum], [%c2i, %insert]
  %z2n = phi i1 [%za, %accum], [%zi, %insert]
  %jj1 = add i64 %jj, 1
  br label %j_head
"""
# Sums that cancel to zero are rare: the row's flag z1 says one may have (a sum or product once zero); only
# then are the row's positions in slots forgotten (a compacted row would leave stale ones at or after the next
# row's start) and the row compacted.
_SPARSE_FINISH = """
finish:
  br i1 %z1, label %reset_head, label %finished
""" + loop_head("reset_head", "reset_body", "finish", [("r", "i64", "%start", "%r1")], "rin = icmp slt i64 %r, %c1",
                "compact_head") + """\
""" + index_at("%cc", "%r", "%rcol", "co") + store_at("i64", "-1", "%slots", "%rcol", "%prm") + """  %r1 = add i64 %r, 1
  br label %reset_head
""" + _COMPACT + """
finished:
  %row_end = phi i64 [%c1, %finish], [%q, %compact_head]
  br label %{row_next}
{reverse}"""
_SPARSE = dict(accumulate=_SPARSE_ACCUMULATE, finish=_SPARSE_FINISH, before="reset_head", value="""\
  %pxv = getelementptr {t}, ptr %cv, i64 %x
  %v = load {t}, ptr %pxv""")

# prefix[i + 1] = prefix[i] + flops of row i, for rows [0, m)
def index_fields(pa: int, ca: int, pb: int, cb: int, co: int) -> dict:
    """The index widths of A's positions / columns, B's, the result's columns and their conversions."""
    return dict(pa=pa, ca=ca, pb=pb, cb=cb, co=co, pa_ext=ext(pa), ca_ext=ext(ca), pb_ext=ext(pb), cb_ext=ext(cb),
                co_ext=ext(co), co_narrow=narrow(co))


# scipy's order (``scipy_order``): scipy's csr_matmat links each row's columns into a list as it first meets them
# and writes the list from its head, the last column met first: the row, in order of first appearance with its
# zero sums dropped, is reversed in place at its end (a pass over what was just written, still in cache).
_SWAP = """\
  %rev_p{x}l = getelementptr {type}, ptr {ptr}, i64 %rev_lo
  %rev_p{x}h = getelementptr {type}, ptr {ptr}, i64 %rev_last
  %rev_{x}l = load {type}, ptr %rev_p{x}l
  %rev_{x}h = load {type}, ptr %rev_p{x}h
  store {type} %rev_{x}h, ptr %rev_p{x}l
  store {type} %rev_{x}l, ptr %rev_p{x}h
"""
_REVERSE = """
reverse:
  br label %rev_head
rev_head:
  %rev_lo = phi i64 [%start, %reverse], [%rev_lo1, %rev_body]
  %rev_hi = phi i64 [%row_end, %reverse], [%rev_last, %rev_body]
  %rev_last = sub i64 %rev_hi, 1
  %rev_more = icmp slt i64 %rev_lo, %rev_last
  br i1 %rev_more, label %rev_body, label %row_done
rev_body:
""" + bind(_SWAP, x="c", type="i{co}", ptr="%cc") + bind(_SWAP, x="v", type="{t}", ptr="%cv") + """  %rev_lo1 = add i64 %rev_lo, 1
  br label %rev_head
"""


def product_ir(name: str, dense: bool, t: str, mul: str, add: str, keep_zeros: bool, indices: dict,
               scipy_order: bool = False) -> str:
    """``@{name}`` (rows of A @ B, the sparse or the dense accumulator) and ``@{name}_backward``. scipy_order:
    each row's columns in scipy's order (the reverse of first appearance, :data:`_REVERSE`). keep_zeros:
    every position the product reaches is stored, zero sums too (the sparsifier's result): the zero tests become
    constant false / the keep test constant true, and LLVM folds the compaction away; and each entry's first
    term is added to +0.0, as the sparsifier sums into a zero-filled workspace (a -0.0 product stored as +0.0;
    scipy's rule adds -0.0, which LLVM folds away: a zero there is dropped anyway)."""
    floating = t in FLOAT_TYPES
    order = dict(row_next="reverse", reverse=_REVERSE) if scipy_order else dict(row_next="row_done", reverse="")
    loops = nest("finish", "k_body", "j_next", k=[("%c1", "i64", "%start", "%c2"), ("%z1", "i1", "false", "%z2")],
                 j=[("%c2", "i64", "%c1", "%c2n"), ("%z2", "i1", "%z1", "%z2n")])
    return fill(_ROWS + _BACKWARD, **LOOPS, **loops, **(_DENSE if dense else _SPARSE), **order, name=name, t=t, mul=mul,
                add=add, **value_tests(t, keep_zeros), first_zero=("0.0" if keep_zeros else "-0.0") if floating else "0",
                **indices)


def value_tests(t: str, keep_zeros: bool) -> dict:
    """A sum's zero constant and its tests: ``nonzero`` (the entry is stored) and ``zero_test`` (it is not), as
    scipy's rule has them (a sum is stored where != 0, NaN kept), or constant true / false with keep_zeros."""
    row = BY_TYPE[t]
    if keep_zeros:
        tests = ("fcmp true", "fcmp false") if t in FLOAT_TYPES else ("icmp uge", "icmp ult")
    else:
        tests = (row.nonzero, row.is_zero)
    return dict(nonzero=tests[0], zero_test=tests[1], zero=row.zero)


def backward_ir(name: str, t: str, indices: dict) -> str:
    """``@{name}_backward`` alone, around a row kernel ``@{name}`` of the same signature defined elsewhere."""
    return fill(_BACKWARD, name=name, t=t, **indices)


def flops_ir(name: str, pa: int, ca: int, pb: int) -> str:
    """``void name(ap, ac, bp, m, prefix)``: ``prefix[i]``, the multiply-adds of rows ``[0, i)`` of ``A @ B``
    (the sum over A's entries (r, k), r < i, of B's row length)."""
    ir = IR()
    ir(f"define void @{name}(ptr %ap, ptr %ac, ptr %bp, i64 %m, ptr %prefix) {{")
    ir.label("entry")
    ir("  store i64 0, ptr %prefix")

    def row(i, total):
        i1 = ir.op("add", "i64", i, "1")

        def entry(k, t):
            ja, jb = segment(ir, "%bp", pb, load_index(ir, "%ac", ca, k))
            return (ir.op("add", "i64", t, ir.op("sub", "i64", jb, ja)),)

        (t,) = counted(ir, load_index(ir, "%ap", pa, i), load_index(ir, "%ap", pa, i1), entry,
                       carried=(("i64", total),), base="k")
        ir.store("i64", t, "%prefix", i1)
        return (t,)

    counted(ir, "0", "%m", row, carried=(("i64", "0"),), base="i")
    ir("  ret void")
    ir("}")
    return ir.text()


# The end of a sorted row of at most RANK_MAX entries (spgemm_sorted.py, spgemm_sorted_map.py), from block
# finish on (%len entries, their columns at %sc, the row written from %start on; then block row_done): up to one
# vector of w columns, each column's rank the popcount of one vector compare against the row loaded once (lanes
# past its end all-ones); up to RANK_MAX, the ranks counted a vector at a time over the row padded with
# all-ones. {one_value} / {rank_value}: the kernel's load of the value %v / %rv of column %x / %rx (entry %e /
# %re of the row); {longer}: the block of longer rows.
RANK_MAX = 16      # rows of at most this many: vector ranks (about len * len / 16 compares)
_SMALL_ROWS = """\
  %small = icmp ule i64 %len, {w}
  br i1 %small, label %one_load, label %not_small

one_load:
  %ylane = load <{w} x i{co}>, ptr %sc, align 1
  %lenv = {co_narrow} %len to i{co}
  %leni = insertelement <{w} x i{co}> poison, i{co} %lenv, i64 0
  %lens = shufflevector <{w} x i{co}> %leni, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  %inrow = icmp ult <{w} x i{co}> {lanes}, %lens
  %yrow = select <{w} x i1> %inrow, <{w} x i{co}> %ylane, <{w} x i{co}> {ones}
""" + loop_head("{one_next}one_head", "one_body", "one_load", [("e", "i64", "0", "%e1")], "ein = icmp ult i64 %e, %len",
                "{row_exit}") + """\
""" + load_at("i{co}", "%sc", "%e", "%x") + """  %xi = insertelement <{w} x i{co}> poison, i{co} %x, i64 0
  %xs = shufflevector <{w} x i{co}> %xi, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  %below = icmp ult <{w} x i{co}> %yrow, %xs
  %obits = bitcast <{w} x i1> %below to i{w}
  %ocnt = call i{w} @llvm.ctpop.i{w}(i{w} %obits)
  %orank = zext i{w} %ocnt to i64
{one_value}
  %odst = add i64 %start, %orank
""" + store_at("i{co}", "%x", "%cc", "%odst", "%pc") + """\
""" + store_at("{t}", "%v", "%cv", "%odst", "%pcvp") + """  %e1 = add i64 %e, 1
  br label %one_head

not_small:
  %mid = icmp ule i64 %len, {rank_max}
  br i1 %mid, label %rank_pad, label %{longer}
rank_pad:
  %ppad = getelementptr i{co}, ptr %sc, i64 %len
  store <{w} x i{co}> {ones}, ptr %ppad, align 1
  br label %rank_head
""" + loop_head("rank_head", "rank_body", "rank_pad", [("re", "i64", "0", "%re1")], "rin = icmp ult i64 %re, %len",
                "{row_exit}", latch="rank_put") + """\
""" + load_at("i{co}", "%sc", "%re", "%rx") + """  %rxi = insertelement <{w} x i{co}> poison, i{co} %rx, i64 0
  %rxs = shufflevector <{w} x i{co}> %rxi, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
  br label %cnt_head
""" + loop_head("cnt_head", "cnt_body", "rank_body", [("q", "i64", "0", "%q1"), ("r", "i64", "0", "%r1")],
                "qin = icmp ult i64 %q, %len", "rank_put") + """\
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
{rank_value}
  %dst = add i64 %start, %r
""" + store_at("i{co}", "%rx", "%cc", "%dst", "%pdst") + """\
""" + store_at("{t}", "%rv", "%cv", "%dst", "%pdstv") + """  %re1 = add i64 %re, 1
  br label %rank_head

"""


def small_rows(one_value: str, rank_value: str, longer: str, one_next: str = "  br label %one_head\n") -> dict:
    """The fields of the short sorted rows (above, at ``{small_rows}``) around the kernel's value loads;
    ``one_next``: the end of block one_load (spgemm_network.row_ir, or on to the ranks)."""
    return dict(small_rows=_SMALL_ROWS.removesuffix("\n"), one_value=one_value.removesuffix("\n"),
                rank_value=rank_value.removesuffix("\n"), longer=longer, one_next=one_next)


_SORTED_HEAD = """declare i64 @llvm.cttz.i64(i64, i1)
declare i{w} @llvm.ctpop.i{w}(i{w})
{declares}
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, i64 %lo, i64 %hi, i64 %base,
                   ptr %ends, ptr %cc, ptr %cv, ptr %buf) {
entry:
  %n = load i64, ptr %buf
  %{first} = getelementptr i64, ptr %buf, i64 1
  %o1 = add i64 %n, 1
  %sc = getelementptr i64, ptr %buf, i64 %o1
  %o2 = add i64 %o1, %n
  %o2b = add i64 %o2, {pad}
"""


def sorted_head(declares: str, first: str) -> str:
    """Template text: a sorted row kernel's declarations (``declares`` after the bit counts) and head, the row
    kernel's signature with the scratch ``%buf`` (spgemm_sorted.scratch: its size ``%n``, its first part
    ``%{first}`` at 1, the row's columns ``%sc`` after it, and the next part's offset ``%o2b``, ``{pad}`` on)."""
    return bind(_SORTED_HEAD, declares=declares, first=first)


def sorted_fields(fields: dict) -> dict:
    """The format fields of a sorted row kernel: spgemm's (``fields``: name, t, mul, add, index widths and
    extensions), w (lanes of a vector of result columns: 16 int32 / 8 int64), its all-ones / lane-number
    constants, rank_max, zero, scipy's store test ``nonzero`` (:func:`value_tests`), the loop pieces and
    ``row_exit``, the block after a row's short-row writes (row_done)."""
    co = fields["co"]
    w = 16 if co == 32 else 8
    scipy = value_tests(fields["t"], keep_zeros=False)
    return dict(fields, w=w, ones="<" + ", ".join([f"i{co} -1"] * w) + ">",
                lanes="<" + ", ".join(f"i{co} {x}" for x in range(w)) + ">", rank_max=RANK_MAX,
                nonzero=scipy["nonzero"], zero=scipy["zero"], row_exit="row_done", **LOOPS)
