"""BSR times BSR (SpGEMM on dense blocks), native code: scipy's ``bsr_matmat``, its buffers bit for bit.

``A`` has blocks of R x K, ``B`` of K x C (scipy's layout: ``data[b]`` a row-major block, ``indptr`` /
``indices`` a CSR over block rows and block columns). Two passes, as scipy's ``csr_matmat_maxnnz`` then
``bsr_matmat``:

- ``count``: for every block row of ``A``, the distinct block columns its blocks reach in ``B`` (a marker per
  block column), written as the result's ``indptr``; the index arrays of both operands checked as read
  (segments ``start <= stop <= nnzb``, block columns below the block count, unsigned compares whose branches
  are predicted never taken), 1 returned at the first defect;
- ``numeric``: the same walk, each result block placed at its first appearance (scipy's order of block
  columns) and every pair of blocks multiplied into it as scipy's ``gemm``: each entry ``(r, c)`` of the result
  block summed over ``d`` in order onto what it holds, so the sums run in scipy's order. Zero blocks are kept,
  as scipy keeps them.

Blocks with ``R * K * C`` up to ``FIXED`` products are unrolled at compile time (the result block's entries
in registers across ``d``); larger ones loop at run time.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.ir_text import IR, VALUE, counted, load_index, loop, narrow, returns, segment as ir_segment
from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled

_P, _I = ctypes.c_void_p, ctypes.c_int64
# count: (ap, aj, bp, bj, mark, cp, mb, kb, nb, nnzb_a, nnzb_b) -> 0, or 1 at a malformed index
_COUNT_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I)
# numeric: (ap, aj, ax, bp, bj, bx, pos, cj, cx, mb, R, K, C) -> 0
_NUMERIC_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I)
FIXED = 128         # blocks whose product has up to this many multiply-adds are unrolled at compile time
_lock = threading.Lock()


def _walk(ir: IR, abits: int, bbits: int, checked: bool, pair, row_start=None, row_end=None) -> None:
    """For each block row ``%i`` of ``A`` (``ir`` at the top of a function with ``%ap``, ``%aj``, ``%bp``,
    ``%bj``, ``%mb``): ``pair(i, p, q, j)`` for each block ``p`` of the row and each block ``q`` of ``B``'s
    block row ``aj[p]`` (``j = bj[q]``), in stored order; ``row_start(i)`` / ``row_end(i)`` around each row.
    ``checked``: the segments and block columns checked as read (to ``%bad``)."""
    def segment(ptr: str, bits: int, at: str, limit: str) -> tuple[str, str]:
        return ir_segment(ir, ptr, bits, at, checked, limit)

    def column(ptr: str, bits: int, at: str, limit: str) -> str:
        j = load_index(ir, ptr, bits, at)
        if checked:
            inside, ok = ir.name("inside"), ir.name("col_ok")
            ir(f"  {inside} = icmp ult i64 {j}, {limit}")
            ir(f"  br i1 {inside}, label %{ok[1:]}, label %bad")
            ir.label(ok[1:])
        return j

    def row(i: str) -> None:
        if row_start:
            row_start(i)
        start, stop = segment("%ap", abits, i, "%nnzb_a" if checked else "0")

        def a_block(p: str) -> None:
            k = column("%aj", abits, p, "%kb")
            bstart, bstop = segment("%bp", bbits, k, "%nnzb_b" if checked else "0")

            def b_block(q: str) -> None:
                j = column("%bj", bbits, q, "%nb")
                pair(i, p, q, j)

            counted(ir, bstart, bstop, b_block, base="b")

        counted(ir, start, stop, a_block, base="a")
        if row_end:
            row_end(i)

    loop(ir, "0", "%mb", row, "done")


def count_ir(name: str, abits: int, bbits: int) -> str:
    """The first pass: ``cp[i + 1]`` = the blocks of the result's block rows up to ``i`` (``cp[0]`` = 0 written
    by the caller); ``mark`` (``nb`` i64, all -1) left holding row numbers."""
    ir = IR()
    ir(f"define i64 @{name}(ptr %ap, ptr %aj, ptr %bp, ptr %bj, ptr noalias %mark, ptr noalias %cp, i64 %mb, "
       "i64 %kb, i64 %nb, i64 %nnzb_a, i64 %nnzb_b) {")
    ir.label("entry")
    ir("  %total = alloca i64")
    ir("  store i64 0, ptr %total")

    def pair(i: str, p: str, q: str, j: str) -> None:
        pm, seen, new, old = ir.name("pm"), ir.name("seen"), ir.name("new"), ir.name("old")
        ir(f"  {pm} = getelementptr i64, ptr %mark, i64 {j}")
        ir(f"  {seen} = load i64, ptr {pm}")
        ir(f"  {old} = icmp eq i64 {seen}, {i}")
        ir(f"  br i1 {old}, label %{new[1:]}_skip, label %{new[1:]}")
        ir.label(new[1:])
        ir(f"  store i64 {i}, ptr {pm}")
        t0, t1 = ir.name("t"), ir.name("t")
        ir(f"  {t0} = load i64, ptr %total")
        ir(f"  {t1} = add i64 {t0}, 1")
        ir(f"  store i64 {t1}, ptr %total")
        ir(f"  br label %{new[1:]}_skip")
        ir.label(f"{new[1:]}_skip")

    def row_end(i: str) -> None:
        i1, t = ir.name("i1"), ir.name("t")
        ir(f"  {i1} = add i64 {i}, 1")
        ir(f"  {t} = load i64, ptr %total")
        ir.store("i64", t, "%cp", i1)

    _walk(ir, abits, bbits, True, pair, row_end=row_end)
    return returns(ir)


def numeric_ir(name: str, value: np.dtype, abits: int, bbits: int, cbits: int,
               block: tuple[int, int, int] | None) -> str:
    """The second pass: ``cj`` (i{cbits}) and ``cx`` (zeroed by the caller, ``(nnzb_c, R, C)``) written, each
    result block at its first appearance in its row; ``pos`` (``nb`` i64, all -1) the result block of each
    block column. ``block`` (R, K, C) fixed at compile time, or None (read from ``%R``, ``%K``, ``%C``)."""
    t, mul, add, _zero = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %ap, ptr %aj, ptr %ax, ptr %bp, ptr %bj, ptr %bx, ptr noalias %pos, "
       "ptr noalias %cj, ptr noalias %cx, i64 %mb, i64 %R, i64 %K, i64 %C) {")
    ir.label("entry")
    R, K, C = block if block is not None else ("%R", "%K", "%C")
    ir(f"  %RK = mul i64 {R}, {K}")
    ir(f"  %KC = mul i64 {K}, {C}")
    ir(f"  %RC = mul i64 {R}, {C}")
    ir("  %next = alloca i64")
    ir("  store i64 0, ptr %next")
    ir("  %first = alloca i64")

    def row_start(i: str) -> None:
        n0 = ir.name("n")
        ir(f"  {n0} = load i64, ptr %next")
        ir(f"  store i64 {n0}, ptr %first")

    def pair(i: str, p: str, q: str, j: str) -> None:
        before = ir.block       # the block that reaches "_have" when the result block exists
        pp, held, first, old = ir.name("pp"), ir.name("held"), ir.name("first"), ir.name("old")
        here = ir.name("place")[1:]
        ir(f"  {pp} = getelementptr i64, ptr %pos, i64 {j}")
        ir(f"  {held} = load i64, ptr {pp}")
        ir(f"  {first} = load i64, ptr %first")
        ir(f"  {old} = icmp sge i64 {held}, {first}")
        ir(f"  br i1 {old}, label %{here}_have, label %{here}_new")
        ir.label(f"{here}_new")
        n0, n1 = ir.name("n"), ir.name("n")
        ir(f"  {n0} = load i64, ptr %next")
        ir(f"  store i64 {n0}, ptr {pp}")
        cut = ir.name("jn")
        ir(f"  {cut} = {narrow(cbits)} {j} to i{cbits}")
        ir.store(f"i{cbits}", cut, "%cj", n0)
        ir(f"  {n1} = add i64 {n0}, 1")
        ir(f"  store i64 {n1}, ptr %next")
        ir(f"  br label %{here}_have")
        ir.label(f"{here}_have")
        slot = ir.name("slot")
        ir(f"  {slot} = phi i64 [{held}, %{before}], [{n0}, %{here}_new]")
        abase, bbase, cbase = ir.name("abase"), ir.name("bbase"), ir.name("cbase")
        ir(f"  {abase} = mul i64 {p}, %RK")
        ir(f"  {bbase} = mul i64 {q}, %KC")
        ir(f"  {cbase} = mul i64 {slot}, %RC")

        def at(base: str, *terms: str) -> str:
            out = base
            for term in terms:
                nxt = ir.name("o")
                ir(f"  {nxt} = add i64 {out}, {term}")
                out = nxt
            return out

        if block is not None:        # unrolled: C[r, c] += sum over d of A[r, d] * B[d, c], d in order
            bv = [[ir.load(t, "%bx", at(bbase, str(d * C + c))) for c in range(C)] for d in range(K)]
            for r in range(R):
                av = [ir.load(t, "%ax", at(abase, str(r * K + d))) for d in range(K)]
                for c in range(C):
                    where = at(cbase, str(r * C + c))
                    dot = ir.load(t, "%cx", where)
                    for d in range(K):
                        prod = ir.op(mul, t, av[d], bv[d][c], "prod")
                        dot = ir.op(add, t, dot, prod, "dot")
                    ir.store(t, dot, "%cx", where)
            return

        def per_r(r: str) -> None:
            rk, rc = ir.op("mul", "i64", r, K, "rk"), ir.op("mul", "i64", r, C, "rc")

            def per_c(c: str) -> None:
                where = at(cbase, rc, c)

                def per_d(d: str, dot: str) -> tuple[str]:
                    a = ir.load(t, "%ax", at(abase, rk, d))
                    b = ir.load(t, "%bx", at(bbase, ir.op("mul", "i64", d, C, "dc"), c))
                    return (ir.op(add, t, dot, ir.op(mul, t, a, b, "prod"), "s"),)

                (dot,) = counted(ir, "0", K, per_d, carried=((t, ir.load(t, "%cx", where)),), base="d")
                ir.store(t, dot, "%cx", where)

            counted(ir, "0", C, per_c, base="c")

        counted(ir, "0", R, per_r, base="r")

    _walk(ir, abits, bbits, False, pair, row_start=row_start)
    return returns(ir)


@functools.cache
def _count_kernel(abits: int, bbits: int):
    name = f"splyce_bsr_count_a{abits}_b{bbits}"
    return _compiled(count_ir(name, abits, bbits), _COUNT_SIG, name, "aaaaaaiiiii")


@functools.cache
def _numeric_kernel(value: np.dtype, abits: int, bbits: int, cbits: int, block):
    shape = "any" if block is None else "x".join(map(str, block))
    name = f"splyce_bsr_matmat_{VALUE[value][0]}_a{abits}_b{bbits}_c{cbits}_{shape}"
    return _compiled(numeric_ir(name, value, abits, bbits, cbits, block), _NUMERIC_SIG, name, "aaaaaaaaaiiii")


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


def bsr_matmat(a_parts, b_parts, nb: int):
    """The blocks of ``A @ B``: ``a_parts`` = (indptr, indices, data) of ``A`` (1-D contiguous native int32 /
    int64 index arrays of one dtype, ``indptr`` of block rows + 1 entries starting at 0 and ending at the
    blocks, ``data`` C-contiguous ``(nnzb, R, K)``), ``b_parts`` likewise for ``B`` (``(nnzb, K, C)``, the same
    value dtype), ``nb`` = ``B``'s block columns. Returns (indptr, indices, data) of the result, ``data``
    ``(nnzb, R, C)``, the index arrays int32 when every count fits, else int64; None when a segment of an
    ``indptr`` or a block column is out of range (checked as read)."""
    ap, aj, ax = a_parts
    bp, bj, bx = b_parts
    R, K = ax.shape[1:]
    C = bx.shape[2]
    mb, kb = len(ap) - 1, len(bp) - 1
    mark = np.full(max(nb, 1), -1, dtype=np.int64)
    cp = np.zeros(mb + 1, dtype=np.int64)
    with _lock:
        count = _count_kernel(ap.dtype.itemsize * 8, bp.dtype.itemsize * 8)
    if count(*_arrays(ap, aj, bp, bj, mark, cp), mb, kb, nb, len(aj), len(bj)):
        return None
    nnzb = int(cp[-1])
    small = nnzb < 2**31 and nb < 2**31 and nnzb * R * C < 2**31
    index = np.int32 if small else np.int64
    cj = np.empty(nnzb, dtype=index)
    cx = np.zeros((nnzb, R, C), dtype=ax.dtype)
    if nnzb:
        block = (R, K, C) if R * K * C <= FIXED else None
        with _lock:
            numeric = _numeric_kernel(ax.dtype, ap.dtype.itemsize * 8, bp.dtype.itemsize * 8,
                                      cj.dtype.itemsize * 8, block)
        mark.fill(-1)
        numeric(*_arrays(ap, aj, ax, bp, bj, bx, mark, cj, cx), mb, R, K, C)
    return cp.astype(index, copy=False), cj, cx
