"""BSR op BSR (``+``, ``-``, ``multiply``) on the blocks, native code: scipy's canonical ``bsr_binop``, its buffers
bit for bit.

Both operands have blocks of R x C (scipy's layout: ``data[b]`` a row-major block, ``indptr`` / ``indices`` a
CSR over block rows and block columns). Every block row is one merge of the two operands' block columns: each
block column either holds, in increasing order, gives a block ``op(a, b)`` entry by entry, an operand that lacks
it reading a block of zeros (so ``0 - b``, and a NaN times a missing block is a NaN, as scipy); a block whose
entries all come out zero (NaN is not zero) is dropped. The index arrays are checked as read: segments
``start <= stop <= nnzb``, block columns below the block count and strictly increasing in each block row (the
canonical form scipy's merge needs); -1 is returned at the first defect, and the caller takes the general road,
which refuses malformed buffers by name. Operands not in canonical form (-2 from the merge) run scipy's
general algorithm instead (``binop_ir(general=True)``: dense rows of blocks linked as first seen, repeated blocks summed),
again its buffers.

Blocks of up to ``FIXED`` entries are unrolled at compile time; larger ones loop at run time.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.ir_text import IR, SCALARS, VALUE, check_segment, instruction, load_index, loop, narrow
from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (ap, aj, ax, bp, bj, bx, zeros, cp, cj, cx, mb, nb, nnzb_a, nnzb_b, RC) -> result blocks, or -1
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I)
# the general kernel: the same, then (next, arow, brow)
_GENERAL_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _P, _P, _P)
FIXED = 64
OPS = ("add", "subtract", "multiply")
_lock = threading.Lock()


def _segment(ir, ptr: str, bits: int, i: str, limit: str) -> tuple[str, str]:
    """Row ``i``'s block range [start, stop) of the positions at ``ptr``, checked (``ir_text.check_segment``:
    to %bad unless start <= stop <= limit)."""
    start = load_index(ir, ptr, bits, i)
    stop = load_index(ir, ptr, bits, ir.op("add", "i64", i, "1", "i1"))
    check_segment(ir, start, stop, limit)
    return start, stop


def _entries(ir, rc: int | None, body) -> None:
    """``body(e)`` for a block's entries: unrolled when ``rc`` (the entries) is known, else a loop to ``%RC``."""
    if rc is not None:
        for e in range(rc):
            body(str(e))
    else:
        after = ir.name("entries")[1:]
        loop(ir, "0", "%RC", body, after)
        ir.label(after)


def _block(ir, s, instr: str, src_a: str, src_b: str, j: str, rc: int | None, RC: str, cbits: int, after: str,
           clear: bool = False) -> None:
    """The result block ``op(src_a, src_b)`` entry by entry at the next result place (``%nnz``), kept (its block
    column ``j`` stored, the count advanced) when any entry is not zero (scipy's bsr_binop drops an all-zero
    block); ``clear``: the sources zeroed as read (the general kernel's dense rows). Continues at a new label
    named after ``after``."""
    t = s.t
    n0 = ir.name("n")
    ir(f"  {n0} = load i64, ptr %nnz")
    dst = ir.gep(t, "%cx", ir.op("mul", "i64", n0, RC, "cbase"))
    ir("  store i64 0, ptr %nz")

    def entry(e: str) -> None:
        x, y = ir.load(t, src_a, e), ir.load(t, src_b, e)
        v = ir.op(instr, t, x, y, "v")
        ir.store(t, v, dst, e)
        if clear:
            ir.store(t, s.zero, src_a, e)
            ir.store(t, s.zero, src_b, e)
        nzb = ir.op(s.nonzero, t, v, s.zero, "nzb")
        nzi, acc0 = ir.name("nzi"), ir.name("acc")
        ir(f"  {nzi} = zext i1 {nzb} to i64")
        ir(f"  {acc0} = load i64, ptr %nz")
        ir(f"  store i64 {ir.op('or', 'i64', acc0, nzi, 'acc')}, ptr %nz")

    _entries(ir, rc, entry)
    nz = ir.name("nzv")
    ir(f"  {nz} = load i64, ptr %nz")
    keep = ir.op("icmp ne", "i64", nz, "0", "keep")
    kept, next_ = ir.name("kept")[1:], ir.name(after)[1:]
    ir(f"  br i1 {keep}, label %{kept}, label %{next_}")
    ir.label(kept)
    jn = ir.name("jn")
    ir(f"  {jn} = {narrow(cbits)} {j} to i{cbits}")
    ir.store(f"i{cbits}", jn, "%cj", n0)
    ir(f"  store i64 {ir.op('add', 'i64', n0, '1', 'n')}, ptr %nnz")
    ir(f"  br label %{next_}")
    ir.label(next_)


def binop_ir(name: str, op: str, value: np.dtype, abits: int, bbits: int, cbits: int, rc: int | None,
             general: bool = False) -> str:
    """``C = A op B`` as described above; ``cp`` (i64, ``mb + 1``) written from ``cp[1]`` (``cp[0]`` 0 by the
    caller), ``cj`` / ``cx`` sized for ``nnzb_a + nnzb_b`` blocks; ``zeros`` a block of zeros. ``rc`` the block's
    entries fixed at compile time, or None (``%RC``). Two algorithms, one per row of the same kernel frame:

    - canonical (not ``general``): the merge of the two rows' block columns; returns -2 at an unsorted row;
    - ``general``, scipy's ``bsr_binop_bsr_general`` (operands not canonical): each block row of ``A`` summed
      block by block into a dense row of blocks ``arow`` (``0 + a``, repeated block columns summed in stored
      order), ``B``'s into ``brow``, the block columns linked in ``next`` as first seen (``A``'s, then ``B``'s
      new ones); then, newest first, ``op(arow[j], brow[j])`` written where not all zero, and the rows cleared.
      ``next`` (``nb`` i64, all -1), ``arow`` / ``brow`` (``nb * RC`` values, zeros) are the caller's (three
      more arguments); returned as they came.
    Both return -1 at a malformed index."""
    s = SCALARS[value]
    t = s.t
    instr = instruction(value, op)
    ir = IR()
    extra = ", ptr noalias %next, ptr noalias %arow, ptr noalias %brow" if general else ""
    ir(f"define i64 @{name}(ptr %ap, ptr %aj, ptr %ax, ptr %bp, ptr %bj, ptr %bx, ptr %zeros, ptr noalias %cp, "
       f"ptr noalias %cj, ptr noalias %cx, i64 %mb, i64 %nb, i64 %nnzb_a, i64 %nnzb_b, i64 %RC{extra}) {{")
    ir.label("entry")
    RC = str(rc) if rc is not None else "%RC"
    for slot in ("%nnz", "%head", "%length", "%nz") if general else ("%nnz", "%pa", "%pb", "%lasta", "%lastb", "%nz"):
        ir(f"  {slot} = alloca i64")
    ir("  store i64 0, ptr %nnz")

    def merged(i: str) -> None:
        sa, ea = _segment(ir, "%ap", abits, i, "%nnzb_a")
        sb, eb = _segment(ir, "%bp", bbits, i, "%nnzb_b")
        ir(f"  store i64 {sa}, ptr %pa")
        ir(f"  store i64 {sb}, ptr %pb")
        ir("  store i64 -1, ptr %lasta")
        ir("  store i64 -1, ptr %lastb")
        head, end = ir.name("merge")[1:], ir.name("row_end")[1:]
        ir(f"  br label %{head}")
        ir.label(head)

        def column(slot: str, stop: str, ptr: str, bits: int, tag: str) -> tuple[str, str]:
            """(position, block column or i64 max when the segment is done)."""
            pos = ir.name(f"p{tag}")
            ir(f"  {pos} = load i64, ptr {slot}")
            more = ir.op("icmp slt", "i64", pos, stop, f"more{tag}")
            have, none, join = (ir.name(f"{tag}{b}")[1:] for b in ("have", "none", "join"))
            ir(f"  br i1 {more}, label %{have}, label %{none}")
            ir.label(have)
            j = load_index(ir, ptr, bits, pos)
            ir(f"  br label %{join}")
            ir.label(none)
            ir(f"  br label %{join}")
            ir.label(join)
            col = ir.name(f"j{tag}")
            ir(f"  {col} = phi i64 [{j}, %{have}], [9223372036854775807, %{none}]")
            return pos, col

        pa, ja = column("%pa", ea, "%aj", abits, "a")
        pb, jb = column("%pb", eb, "%bj", bbits, "b")
        j = ir.name("j")
        ir(f"  {j} = call i64 @llvm.umin.i64(i64 {ja}, i64 {jb})")
        done = ir.op("icmp eq", "i64", j, "9223372036854775807", "done")
        go = ir.name("step")[1:]
        ir(f"  br i1 {done}, label %{end}, label %{go}")
        ir.label(go)
        take_a = ir.op("icmp eq", "i64", ja, j, "takea")
        take_b = ir.op("icmp eq", "i64", jb, j, "takeb")
        # checks: the column in range, and above the last one each operand gave in this row (canonical)
        inside = ir.op("icmp ult", "i64", j, "%nb", "inside")
        la, lb = ir.name("la"), ir.name("lb")
        ir(f"  {la} = load i64, ptr %lasta")
        ir(f"  {lb} = load i64, ptr %lastb")
        up_a = ir.op("icmp sgt", "i64", ja, la, "upa")      # ja is i64 max when a is done: above any
        up_b = ir.op("icmp sgt", "i64", jb, lb, "upb")
        in_order = ir.op("and", "i1", up_a, up_b, "ordered")
        fine, ranged = ir.name("fine")[1:], ir.name("ranged")[1:]
        ir(f"  br i1 {inside}, label %{ranged}, label %bad")
        ir.label(ranged)
        ir(f"  br i1 {in_order}, label %{fine}, label %unsorted")
        ir.label(fine)
        abase, bbase = ir.op("mul", "i64", pa, RC, "abase"), ir.op("mul", "i64", pb, RC, "bbase")
        pa_blk, pb_blk = ir.gep(t, "%ax", abase), ir.gep(t, "%bx", bbase)
        src_a, src_b = ir.name("srca"), ir.name("srcb")
        ir(f"  {src_a} = select i1 {take_a}, ptr {pa_blk}, ptr %zeros")
        ir(f"  {src_b} = select i1 {take_b}, ptr {pb_blk}, ptr %zeros")
        _block(ir, s, instr, src_a, src_b, j, rc, RC, cbits, "advance")
        for take, pos, col, slot, last in ((take_a, pa, ja, "%pa", "%lasta"), (take_b, pb, jb, "%pb", "%lastb")):
            step = ir.name("stepv")
            ir(f"  {step} = zext i1 {take} to i64")
            ir(f"  store i64 {ir.op('add', 'i64', pos, step, 'pos')}, ptr {slot}")
            prev = ir.name("prev")
            ir(f"  {prev} = load i64, ptr {last}")
            new = ir.name("newlast")
            ir(f"  {new} = select i1 {take}, i64 {col}, i64 {prev}")
            ir(f"  store i64 {new}, ptr {last}")
        ir(f"  br label %{head}")
        ir.label(end)

    def gather(ptr_p: str, ptr_j: str, ptr_x: str, bits: int, i: str, limit: str, row: str) -> None:
        start, stop = _segment(ir, ptr_p, bits, i, limit)

        def block(p: str) -> None:
            j = load_index(ir, ptr_j, bits, p)
            inside = ir.op("icmp ult", "i64", j, "%nb", "inside")
            ranged = ir.name("ranged")[1:]
            ir(f"  br i1 {inside}, label %{ranged}, label %bad")
            ir.label(ranged)
            src = ir.gep(t, ptr_x, ir.op("mul", "i64", p, RC, "xb"), "src")
            dst = ir.gep(t, row, ir.op("mul", "i64", j, RC, "rb"), "dst")
            _entries(ir, rc, lambda e: ir.store(t, ir.op(s.add, t, ir.load(t, dst, e), ir.load(t, src, e), "sum"),
                                                dst, e))
            pn = ir.gep("i64", "%next", j, "pn")
            linked = ir.name("linked")
            ir(f"  {linked} = load i64, ptr {pn}")
            fresh = ir.op("icmp eq", "i64", linked, "-1", "fresh")
            link, after = ir.name("link")[1:], ir.name("linked_done")[1:]
            ir(f"  br i1 {fresh}, label %{link}, label %{after}")
            ir.label(link)
            h, n0 = ir.name("h"), ir.name("len")
            ir(f"  {h} = load i64, ptr %head")
            ir(f"  store i64 {h}, ptr {pn}")
            ir(f"  store i64 {j}, ptr %head")
            ir(f"  {n0} = load i64, ptr %length")
            ir(f"  store i64 {ir.op('add', 'i64', n0, '1', 'len')}, ptr %length")
            ir(f"  br label %{after}")
            ir.label(after)

        done = ir.name("gathered")[1:]
        loop(ir, start, stop, block, done)
        ir.label(done)

    def dense(i: str) -> None:
        ir("  store i64 -2, ptr %head")
        ir("  store i64 0, ptr %length")
        gather("%ap", "%aj", "%ax", abits, i, "%nnzb_a", "%arow")
        gather("%bp", "%bj", "%bx", bbits, i, "%nnzb_b", "%brow")
        count = ir.name("count")
        ir(f"  {count} = load i64, ptr %length")

        def emit(_k: str) -> None:
            j = ir.name("j")
            ir(f"  {j} = load i64, ptr %head")
            base = ir.op("mul", "i64", j, RC, "jb")
            _block(ir, s, instr, ir.gep(t, "%arow", base, "ablk"), ir.gep(t, "%brow", base, "bblk"), j, rc, RC,
                   cbits, "unlink", clear=True)
            pn = ir.gep("i64", "%next", j, "pn")
            nxt = ir.name("nxt")
            ir(f"  {nxt} = load i64, ptr {pn}")
            ir(f"  store i64 {nxt}, ptr %head")
            ir(f"  store i64 -1, ptr {pn}")

        emitted = ir.name("emitted")[1:]
        loop(ir, "0", count, emit, emitted)
        ir.label(emitted)

    def row(i: str) -> None:
        (dense if general else merged)(i)
        i1 = ir.op("add", "i64", i, "1", "i1")
        total = ir.name("total")
        ir(f"  {total} = load i64, ptr %nnz")
        ir.store("i64", total, "%cp", i1)

    loop(ir, "0", "%mb", row, "done")
    ir.label("done")
    r = ir.name("r")
    ir(f"  {r} = load i64, ptr %nnz")
    ir(f"  ret i64 {r}")
    ir.label("bad")
    ir("  ret i64 -1")
    if not general:
        ir.label("unsorted")
        ir("  ret i64 -2")
    ir("}")
    if not general:
        ir("declare i64 @llvm.umin.i64(i64, i64)")
    return ir.text()


@functools.cache
def _kernel(op: str, value: np.dtype, abits: int, bbits: int, cbits: int, rc: int | None, general: bool = False):
    name = (f"splyce_bsr_{op}{'_general' if general else ''}_{VALUE[value][0]}_a{abits}_b{bbits}_c{cbits}_"
            f"{'any' if rc is None else rc}")
    return _compiled(binop_ir(name, op, value, abits, bbits, cbits, rc, general), _GENERAL_SIG if general else _SIG,
                     name, "aaaaaaaaaaiiiii" + "aaa" * general)


def bsr_binop(op: str, a_parts, b_parts, nb: int):
    """The blocks of ``A op B`` (``op`` in ``OPS``): ``a_parts`` / ``b_parts`` = (indptr, indices, data), 1-D
    contiguous native int32 / int64 index arrays (one dtype per operand), ``indptr`` of the same block rows + 1
    entries, ``data`` C-contiguous ``(nnzb, R, C)`` of one value dtype of ``VALUE``; ``nb`` the block columns.
    Returns (indptr, indices, data), int32 index arrays when every count fits, else int64; None when an index
    array is malformed or not canonical (checked as read)."""
    ap, aj, ax = a_parts
    bp, bj, bx = b_parts
    R, C = ax.shape[1:]
    mb = len(ap) - 1
    bound = len(aj) + len(bj)
    index = np.int32 if bound < 2**31 and nb < 2**31 and bound * R * C < 2**31 else np.int64
    cp = np.zeros(mb + 1, dtype=np.int64)
    cj = np.empty(bound, dtype=index)
    cx = np.empty((bound, R, C), dtype=ax.dtype)
    zeros = np.zeros(R * C, dtype=ax.dtype)
    rc = R * C if R * C <= FIXED else None
    with _lock:
        fn = _kernel(op, ax.dtype, ap.dtype.itemsize * 8, bp.dtype.itemsize * 8, cj.dtype.itemsize * 8, rc)
    nnz = fn(*_arrays(ap, aj, ax, bp, bj, bx, zeros, cp, cj, cx), mb, nb, len(aj), len(bj), R * C)
    if nnz == -2:       # not canonical: scipy's general algorithm
        nxt = np.full(max(nb, 1), -1, dtype=np.int64)
        arow, brow = np.zeros((max(nb, 1), R, C), dtype=ax.dtype), np.zeros((max(nb, 1), R, C), dtype=ax.dtype)
        with _lock:
            fn = _kernel(op, ax.dtype, ap.dtype.itemsize * 8, bp.dtype.itemsize * 8, cj.dtype.itemsize * 8, rc, True)
        nnz = fn(*_arrays(ap, aj, ax, bp, bj, bx, zeros, cp, cj, cx), mb, nb, len(aj), len(bj), R * C,
                 *_arrays(nxt, arow, brow))
    if nnz < 0:
        return None
    cj, cx = cj[:nnz], cx[:nnz]
    if nnz < bound // 2:        # as scipy: a result far below the bound is copied out of it
        cj, cx = cj.copy(), cx.copy()
    return cp.astype(index, copy=False), cj, cx
