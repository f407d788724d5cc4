"""The flat SpMV kernel for very short rows, and its driver (LLVM IR, compiled by spmv.py).

One loop over all the entries of rows [lo, hi), no branch on a row's end: a row of 2-3 entries otherwise ends
in a mispredicted loop exit, which costs more than its entries. Each
entry adds its product to the running sum and stores the sum to y[r] (the row's last store wins); at a row's
end the sum restarts from +0.0 (a mask and, all bits clear: bit for bit scipy's order) and r, the row's end
and the next row's end (loaded one row ahead, off the critical path) move on, by selects. What stays a
branch is predicted: a column outside [0, n) (to the error return), and leaving the loop when the next row
is empty or its end is beyond min(pos[hi - 2], nnz) (then ``resync`` checks that row, writes 0 for an empty
one, and re-enters; the last two rows of the range go one at a time: the look-ahead reads pos[r + 3] <=
pos[hi]). The loop is bound by its instruction count (27 per entry on x86-64): one compare serves both ways
out, and one row-end flag (kept opaque, or LLVM recomputes it) both r += last and the mask.
The sums of all rows form one chain of additions, so this pays only for rows of a few entries: measured
(docs/corpus.md) 1.5-1.6x the per-row kernel on road graphs (2.5 entries per row), 0.5-0.9x on 6-25.
"""

from __future__ import annotations

import functools

import numpy as np

from splyce.native.ir_text import FLOAT_TYPES, VALUE, ext, fill, index_at, load_at
from splyce.native.spmv_rows import ROW_PARAMS

# One loop over the entries of the segments (rows, or a CSC's columns: spmv_scatter.py) [lo, hi) but the last
# two, with hooks for what a kernel does per segment and per entry (``flat_ir`` fills them).
SEGMENTS = """
define i64 @{name}({params}){attributes} {
entry:
{entry}  %hf = sub i64 {hi}, 2
  %hf_low = icmp slt i64 %hf, {lo}
  %hfc = select i1 %hf_low, i64 {lo}, i64 %hf
""" + load_at("i{p}", "%pos", "%hfc", "%kstop_raw") + """  %kstop_pos = {p_ext} %kstop_raw to i64
  %kstop_over = icmp ugt i64 %kstop_pos, %nnz
  %kstop = select i1 %kstop_over, i64 %nnz, i64 %kstop_pos
  br label %resync
resync:
  %r0 = phi i64 [{lo}, %{first}], [%r0n, %empty], [%rx, %leave], [%r0n, %single_done]
  %rmore = icmp slt i64 %r0, {hi}
  br i1 %rmore, label %segment, label %done
segment:
""" + index_at("%pos", "%r0", "%s0") + """  %r0n = add i64 %r0, 1
""" + index_at("%pos", "%r0n", "%t0") + """  %down = icmp ugt i64 %s0, %t0
  %over = icmp ugt i64 %t0, %nnz
  %badseg = or i1 %down, %over
  br i1 %badseg, label %bad, label %segment_ok
segment_ok:
  %is_empty = icmp eq i64 %s0, %t0
  br i1 %is_empty, label %empty, label %nonempty
empty:
{empty}  br label %resync
nonempty:
{nonempty}  %below = icmp slt i64 %r0, %hf
  %inside_kstop = icmp ule i64 %t0, %kstop
  %in_flat = and i1 %below, %inside_kstop
  br i1 %in_flat, label %prime, label %single
single:
  %sk = phi i64 [%s0, %nonempty], [%sk1, %single_ok]
{single_entry}
  %sk1 = add i64 %sk, 1
  %smore = icmp ult i64 %sk1, %t0
  br i1 %smore, label %single, label %single_done
single_done:
{single_done}  br label %resync
prime:
  %pn = add i64 %r0, 2
""" + load_at("i{p}", "%pos", "%pn", "%pn_raw") + """  %next0 = {p_ext} %pn_raw to i64
  br label %flat
flat:
  %k = phi i64 [%s0, %prime], [%k1, %flat_ok]
  %r = phi i64 [%r0, %prime], [%r1, %flat_ok]
  %end = phi i64 [%t0, %prime], [%end1, %flat_ok]
  %next = phi i64 [%next0, %prime], [%next1, %flat_ok]
{flat_entry}
{advance}
{restart}  br i1 %leaving, label %leave, label %flat_ok
flat_ok:
  br label %flat
leave:
  %rx = add i64 %r, 1
  br label %resync
done:
  ret i64 0
bad:
  ret i64 1
}
"""


def flat_ir(name: str, p: int, params: str, **hooks) -> str:
    """``SEGMENTS`` for ``p``-bit positions: ``params`` (with ``%pos`` and ``%nnz``), and the hooks (IR lines,
    each empty or ending in a newline but ``single_entry`` and ``flat_entry``): ``entry`` (its last block
    named by ``first``), the range ``lo`` / ``hi``, ``empty``, ``nonempty``, ``single_entry`` (entry ``%sk``
    of a segment on its own, ending in its block ``single_ok``), ``single_done``, ``flat_entry`` (entry
    ``%k`` of segment ``%r``), ``restart`` (after the step to the next entry)."""
    hooks = dict(dict(attributes="", entry="", first="entry", lo="%lo", hi="%hi", empty="", nonempty="",
                      single_done="", restart=""), **hooks)
    return fill(SEGMENTS, name=name, params=params, p=p, p_ext=ext(p), advance=advance_ir("r", p), **hooks)


# The flat loop's step to entry k + 1 of segment %{i} (a row, or a CSC's column: native/spmv_scatter.py), from
# (%k, %{i}, its end %end, the next one's end %next): %{i}1 = %{i} + %at_end (an opaque flag %at_endw, or LLVM
# turns the add into a branch), %end1 and %next1 by selects, pos[%{i} + 3] loaded one segment ahead (off the
# carried chain), and %leaving: the next segment is empty or ends beyond %kstop (min(pos[the first of the last
# two], nnz)), so also at the flat segments' end. Inside a segment end1 = end, k1 < end <= kstop; after it
# end1 = next: one unsigned compare. (So the last two segments are never entered, whatever the positions hold:
# at their start k1 = pos[...] >= kstop, and staying needs k1 < end1 <= kstop; every pos and crd read is in
# bounds.)
ADVANCE = """  %k1 = add i64 %k, 1
  %at_end = icmp eq i64 %k1, %end
  %at_endw_i = zext i1 %at_end to i64
  %at_endw = call i64 asm "", "=r,0"(i64 %at_endw_i)
  %{i}1 = add i64 %{i}, %at_endw
  %end1 = select i1 %at_end, i64 %next, i64 %end
  %pa = add i64 %{i}, 3
""" + index_at("%pos", "%pa", "%ahead") + """  %next1 = select i1 %at_end, i64 %ahead, i64 %next
  %gap = sub i64 %end1, %k1
  %gap1 = sub i64 %gap, 1
  %room = sub i64 %kstop, %k1
  %leaving = icmp uge i64 %gap1, %room"""


def advance_ir(index: str, p: int) -> str:
    """``ADVANCE`` for the segment index named ``index`` and ``p``-bit positions."""
    return fill(ADVANCE, i=index, p=p, p_ext=ext(p))


# One entry k of a segment, its coordinate checked first (``< bound``, unsigned: else to the error return),
# then its product with ``x``: added to a running sum (rows: %{q}s = %{q}acc + vals[%{q}k] * x[col]) or to
# y[row] (a CSC's columns, spmv_scatter.py: y[row] += vals[%{q}k] * {x}). ``q`` prefixes the value names,
# ``ok`` is the block after the check.
_CHECKED_ENTRY = """  %{q}pc = getelementptr i{c}, ptr %crd, i64 %{q}k
  %{q}at_raw = load i{c}, ptr %{q}pc
  %{q}at = {c_ext} %{q}at_raw to i64
  %{q}inside = icmp ult i64 %{q}at, {bound}
  br i1 %{q}inside, label %{ok}, label %bad
{ok}:
  %{q}pv = getelementptr {t}, ptr %vals, i64 %{q}k
  %{q}v = load {t}, ptr %{q}pv
{use}"""
_SUMMED = """  %{q}px = getelementptr {t}, ptr %x, i64 %{q}at
  %{q}xv = load {t}, ptr %{q}px
  %{q}prod = {mul} {t} %{q}v, %{q}xv
  %{q}s = {add} {t} %{q}acc, %{q}prod"""
_SCATTERED = """  %{q}prod = {mul} {t} %{q}v, {x}
  %{q}py = getelementptr {t}, ptr %y, i64 %{q}at
  %{q}old = load {t}, ptr %{q}py
  %{q}new = {add} {t} %{q}old, %{q}prod
  store {t} %{q}new, ptr %{q}py"""


def checked_entry(scatter: bool, **fields) -> str:
    """``_CHECKED_ENTRY`` summed into a row's running sum, or (``scatter``) into y at the entry's row."""
    use, bound = (_SCATTERED, "%m") if scatter else (_SUMMED, "%n")
    return fill(_CHECKED_ENTRY, use=use, bound=bound, **fields)


# the sum restarts from +0.0 after a row's end: for floating point an and with an all-clear mask, made opaque
# (an empty asm) so LLVM keeps it an and instead of a select, which x86 compiles to a branch
_RESTART_FLOAT = """  %keep_int = sub i{bits} {last_w}, 1
  %keep_f = bitcast i{bits} %keep_int to {t}
  %keep_o = call {t} asm "", "=x,0"({t} %keep_f)
  %keep = bitcast {t} %keep_o to i{bits}
  %s_bits = bitcast {t} %s to i{bits}
  %acc_bits = and i{bits} %s_bits, %keep
  %acc1 = bitcast i{bits} %acc_bits to {t}"""
_RESTART_SELECT = "  %acc1 = select i1 %at_end, {t} {zero}, {t} %s"     # integers, and floats off x86


def spmv_flat_ir(name: str, value: np.dtype, p: int, c: int) -> str:
    """Rows [lo, hi) of y = A @ x by one loop over their entries (``SEGMENTS``), checking as ``spmv_rows.spmv_ir`` does:
    each segment ``start <= stop <= nnz`` before its entries are read, each column ``< n`` (unsigned) before
    ``x`` is read there; 1 (``y`` incomplete) at the first defect."""
    from splyce.native.codegen import host_target

    t, mul, add, zero = VALUE[value]
    if t in FLOAT_TYPES and host_target().triple.startswith("x86_64"):
        bits = 64 if t == "double" else 32
        last_w = "%at_endw" if bits == 64 else "%at_endw32"
        restart = ("  %at_endw32 = trunc i64 %at_endw to i32\n" if bits == 32 else "") + fill(_RESTART_FLOAT, 
            bits=bits, t=t, last_w=last_w)
    else:
        restart = fill(_RESTART_SELECT, t=t, zero=zero)
    product = functools.partial(checked_entry, False, t=t, mul=mul, add=add, c=c, c_ext=ext(c))
    return flat_ir(name, p, ROW_PARAMS, attributes=" noinline",
                   empty=f"  %pye = getelementptr {t}, ptr %y, i64 %r0\n  store {t} {zero}, ptr %pye\n",
                   single_entry=f"  %sacc = phi {t} [{zero}, %nonempty], [%ss, %single_ok]\n"
                                + product(q="s", ok="single_ok"),
                   single_done=f"  %spy = getelementptr {t}, ptr %y, i64 %r0\n  store {t} %ss, ptr %spy\n",
                   flat_entry=f"  %acc = phi {t} [{zero}, %prime], [%acc1, %flat_ok]\n" + product(q="", ok="col_ok")
                              + f"\n  %py = getelementptr {t}, ptr %y, i64 %r\n  store {t} %s, ptr %py",
                   restart=restart + "\n")
