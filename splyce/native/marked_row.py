"""The inner loop nest every masked product shares, as LLVM IR: one row of a Gustavson product whose columns
are looked up in a marked row of the mask (``mark[j]`` = the mask entry's position), so each product costs one
lookup and no search. Masked SpGEMM (masked.py) and the masked sum (masked_sum.py) build their
kernels around it."""

from __future__ import annotations

from splyce.native.ir_text import load_index, loop


def marked_row(ir, i, t, mul, marked, ap, ac, bp, bc, mark_more, hit, each=None, pair=False):
    """Row ``i`` of a marked Gustavson product: ``mark[j] = e`` for the marked row's entries ``e`` (``marked``:
    its positions / coordinates array names and bit widths; ``mark_more(e)`` adds per-entry IR), then for
    each ``A[i, k]`` and each ``B[k, j]`` whose ``j`` is marked in this row (``mark[j]`` at or after the row's
    first entry: earlier rows' marks read as unset), ``hit(a * b, mark[j])``; with ``each``, instead
    ``each(mark[j], first, end)`` (the marked row's range) for every ``B[k, j]``, without a branch (no value
    is read); with ``pair``, ``hit((a, b), mark[j])``: the factors unmultiplied. Returns the marked row's range."""
    (mpos, mp), (mcrd, mc) = marked
    i1 = ir.name("i1")
    ir(f"  {i1} = add i64 {i}, 1")
    m_start, m_stop = load_index(ir, mpos, mp, i), load_index(ir, mpos, mp, i1)

    def mark(e):
        j, pm = load_index(ir, mcrd, mc, e), ir.name("pm")
        ir(f"  {pm} = getelementptr i64, ptr %mark, i64 {j}")
        ir(f"  store i64 {e}, ptr {pm}")
        mark_more(e)

    after = ir.name("marked")[1:]
    loop(ir, m_start, m_stop, mark, after)
    ir.label(after)
    a_start, a_stop = load_index(ir, "%apos", ap, i), load_index(ir, "%apos", ap, i1)

    def a_entry(ka):
        k = load_index(ir, "%acrd", ac, ka)
        pa, av, k1 = ir.name("pa"), ir.name("av"), ir.name("k1")
        ir(f"  {pa} = getelementptr {t}, ptr %aval, i64 {ka}")
        ir(f"  {av} = load {t}, ptr {pa}")
        ir(f"  {k1} = add i64 {k}, 1")
        b_start, b_stop = load_index(ir, "%bpos", bp, k), load_index(ir, "%bpos", bp, k1)

        def b_entry(kb):
            j = load_index(ir, "%bcrd", bc, kb)
            pm, m, is_hit = ir.name("pm"), ir.name("m"), ir.name("hit")
            ir(f"  {pm} = getelementptr i64, ptr %mark, i64 {j}")
            ir(f"  {m} = load i64, ptr {pm}")
            ir(f"  {is_hit} = icmp sge i64 {m}, {m_start}")
            if each is not None:
                each(m, m_start, m_stop)
                return
            yes, done = ir.name("yes")[1:], ir.name("done")[1:]
            ir(f"  br i1 {is_hit}, label %{yes}, label %{done}")
            ir.label(yes)
            pb, bv, prod = ir.name("pb"), ir.name("bv"), ir.name("prod")
            ir(f"  {pb} = getelementptr {t}, ptr %bval, i64 {kb}")
            ir(f"  {bv} = load {t}, ptr {pb}")
            if pair:
                hit((av, bv), m)
            else:
                ir(f"  {prod} = {mul} {t} {av}, {bv}")
                hit(prod, m)
            ir(f"  br label %{done}")
            ir.label(done)

        after_b = ir.name("bdone")[1:]
        loop(ir, b_start, b_stop, b_entry, after_b)
        ir.label(after_b)

    after_a = ir.name("adone")[1:]
    loop(ir, a_start, a_stop, a_entry, after_a)
    ir.label(after_a)
    return m_start, m_stop
