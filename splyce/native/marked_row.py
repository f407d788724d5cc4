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
        ir.store("i64", e, "%mark", load_index(ir, mcrd, mc, e))
        mark_more(e)

    after = ir.name("marked")[1:]
    loop(ir, m_start, m_stop, mark, after)
    ir.label(after)
    a_start, a_stop = load_index(ir, "%apos", ap, i), load_index(ir, "%apos", ap, i1)

    def a_entry(ka):
        k = load_index(ir, "%acrd", ac, ka)
        av, k1 = ir.load(t, "%aval", ka), ir.name("k1")
        ir(f"  {k1} = add i64 {k}, 1")
        b_start, b_stop = load_index(ir, "%bpos", bp, k), load_index(ir, "%bpos", bp, k1)

        def b_entry(kb):
            m = ir.load("i64", "%mark", load_index(ir, "%bcrd", bc, kb))
            is_hit = ir.op("icmp sge", "i64", m, m_start)
            if each is not None:
                each(m, m_start, m_stop)
                return
            yes, done = ir.name("yes")[1:], ir.name("done")[1:]
            ir(f"  br i1 {is_hit}, label %{yes}, label %{done}")
            ir.label(yes)
            bv = ir.load(t, "%bval", kb)
            hit((av, bv) if pair else ir.op(mul, t, av, bv), m)
            ir(f"  br label %{done}")
            ir.label(done)

        after_b = ir.name("bdone")[1:]
        loop(ir, b_start, b_stop, b_entry, after_b)
        ir.label(after_b)

    after_a = ir.name("adone")[1:]
    loop(ir, a_start, a_stop, a_entry, after_a)
    ir.label(after_a)
    return m_start, m_stop
