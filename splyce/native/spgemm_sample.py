"""The LLVM IR of :func:`splyce.native.spgemm.unordered_kernel`'s look at ``A @ B`` (text only; spgemm.py
compiles and calls it): B's share of adjacent columns, then the distinct columns of a sample of the product's
rows, in one native call."""

from __future__ import annotations

from splyce.native.ir_text import IR, counted, load_index, segment


def sample_ir(name: str, pa: int, ca: int, pb: int, cb: int) -> str:
    """``@{name}``: spgemm.unordered_kernel's look at A @ B, one call. First B's share of adjacent columns as
    spgemm_sorted.kind_for counts it (pairs (bc[p], bc[p + 1]) for p = 0, astep, 2 astep, ... < npairs): when
    at least %share, nothing more (the map kernel's columns: its rows stay unsorted). Else a sample of rows at
    evenly spaced multiply-adds (target (2s + 1) step for s in [0, samples): the row r with prefix[r] <= target
    < prefix[r + 1], by binary search over prefix[0..m]), a row of more than cap multiply-adds skipped; for each
    row taken, its distinct columns c (each of B's columns marks its byte of %mark, zero on entry, with the tag
    s + 1 and counts when the byte held another: up to 255 samples need no clearing) and its flops f.
    out: [sum of c / f (double), rows taken, adjacent pairs, pairs counted]."""
    ir = IR()
    ir(f"define void @{name}(ptr %ap, ptr %ac, ptr %bp, ptr %bc, ptr %prefix, i64 %m, i64 %samples, i64 %step, "
       "i64 %cap, i64 %npairs, i64 %astep, double %share, ptr %mark, ptr %out) {")
    ir.label("entry")

    def widen(op: str, value: str, to: str, base: str) -> str:
        v = ir.name(base)
        ir(f"  {v} = {op} {value} to {to}")
        return v

    def pair(p, adjacent, pairs):
        x0 = load_index(ir, "%bc", cb, p)
        x1 = load_index(ir, "%bc", cb, ir.op("add", "i64", p, "1"))
        next_to = ir.op("icmp eq", "i64", x1, ir.op("add", "i64", x0, "1"))
        return (ir.op("add", "i64", adjacent, widen("zext i1", next_to, "i64", "inc")),
                ir.op("add", "i64", pairs, "1"))

    adjacent, pairs = counted(ir, "0", "%npairs", pair, carried=(("i64", "0"), ("i64", "0")), base="p",
                              step="%astep")
    ir.store("i64", adjacent, "%out", "2")
    ir.store("i64", pairs, "%out", "3")
    bar = ir.op("fmul", "double", "%share", widen("uitofp i64", pairs, "double", "f"))
    is_map = ir.op("fcmp oge", "double", widen("uitofp i64", adjacent, "double", "f"), bar)
    skip = ir.op("and", "i1", is_map, ir.op("icmp sgt", "i64", pairs, "0"))
    ir(f"  br i1 {skip}, label %skipped, label %sample")
    ir.label("sample")

    def one(s, ratio, taken):
        s1 = ir.op("add", "i64", s, "1")
        target = ir.op("mul", "i64", ir.op("add", "i64", s, s1), "%step")
        enter = ir.block
        ir("  br label %b_head")            # the row of the target: the last r with prefix[r] <= target
        ir.label("b_head")
        ir(f"  %blo = phi i64 [0, %{enter}], [%blo2, %b_body]")
        ir(f"  %bhi = phi i64 [%m, %{enter}], [%bhi2, %b_body]")
        ir("  %bspan = sub i64 %bhi, %blo")
        ir("  %bmore = icmp sgt i64 %bspan, 1")
        ir("  br i1 %bmore, label %b_body, label %b_done")
        ir.label("b_body")
        mid = ir.op("add", "i64", "%blo", ir.op("lshr", "i64", "%bspan", "1"))
        below = ir.op("icmp sle", "i64", ir.load("i64", "%prefix", mid), target)
        ir(f"  %blo2 = select i1 {below}, i64 {mid}, i64 %blo")
        ir(f"  %bhi2 = select i1 {below}, i64 %bhi, i64 {mid}")
        ir("  br label %b_head")
        ir.label("b_done")
        i1 = ir.op("add", "i64", "%blo", "1")
        f = ir.op("sub", "i64", ir.load("i64", "%prefix", i1), ir.load("i64", "%prefix", "%blo"))
        tag = widen("trunc i64", s1, "i8", "tag")
        ir(f"  br i1 {ir.op('icmp sle', 'i64', f, '%cap')}, label %row, label %s_next")
        ir.label("row")

        def entry(k, c):
            ja, jb = segment(ir, "%bp", pb, load_index(ir, "%ac", ca, k))

            def term(jj, c):
                pm = ir.gep("i8", "%mark", load_index(ir, "%bc", cb, jj))
                old = ir.name("old")
                ir(f"  {old} = load i8, ptr {pm}")
                ir(f"  store i8 {tag}, ptr {pm}")
                return (ir.op("add", "i64", c, widen("zext i1", ir.op("icmp ne", "i8", old, tag), "i64", "inc")),)
            return counted(ir, ja, jb, term, carried=(("i64", c),), base="j")

        (c,) = counted(ir, load_index(ir, "%ap", pa, "%blo"), load_index(ir, "%ap", pa, i1), entry,
                       carried=(("i64", "0"),), base="k")
        q = ir.op("fdiv", "double", widen("uitofp i64", c, "double", "f"), widen("uitofp i64", f, "double", "f"))
        ratio1, taken1, row_end = ir.op("fadd", "double", ratio, q), ir.op("add", "i64", taken, "1"), ir.block
        ir("  br label %s_next")
        ir.label("s_next")
        ir(f"  %ratio2 = phi double [{ratio}, %b_done], [{ratio1}, %{row_end}]")
        ir(f"  %taken2 = phi i64 [{taken}, %b_done], [{taken1}, %{row_end}]")
        return "%ratio2", "%taken2"

    ratio, taken = counted(ir, "0", "%samples", one, carried=(("double", "0.0"), ("i64", "0")), base="s")
    sampled = ir.block
    ir("  br label %done")
    ir.label("skipped")
    ir("  br label %done")
    ir.label("done")
    ir(f"  %ratio_end = phi double [0.0, %skipped], [{ratio}, %{sampled}]")
    ir(f"  %taken_end = phi i64 [0, %skipped], [{taken}, %{sampled}]")
    ir("  store double %ratio_end, ptr %out")
    ir.store("i64", "%taken_end", "%out", "1")
    ir("  ret void")
    ir("}")
    return ir.text()
