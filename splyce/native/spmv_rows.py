"""The SpMV family's LLVM IR but the flat loop (spmv_flat.py): one segment loop for rows [lo, hi) of SpMV
(``rows`` advanced together), SpMM (``k`` columns) and the CSC scatter (a column's entries added into y), the
block driver that picks a kernel per block of rows, and the whole product's entry. spmv.py and
spmv_scatter.py compile them.

Every row sums its products in stored order from +0.0, as scipy's ``csr_matvec`` and the plain sparsifier do,
so results are bit for bit the same; ``rows`` > 1 advances a group of rows together for as many entries as its
shortest row holds (independent addition chains, one loop exit per group), then each row finishes alone.

Index checks (``check``): positions and coordinates are checked as they are read: before a row's entries,
``start <= stop <= nnz``; before each ``x[col]``, ``col < n`` (unsigned compares, so negative indices fail too),
each a branch to an error return that the CPU predicts as never taken, so the loads never wait for the checks.
Unsorted or repeated columns are fine for a product and need no check.

SpMM keeps each output row (``k`` columns) in registers while it accumulates the row's entries, then stores it
once: the output is never zeroed or re-read.
"""

from __future__ import annotations

import numpy as np

from splyce.native.ir_text import (IR, VALUE, add_to, counted, define, each, groups, load_index, loop, returns,
                                   segment)
from splyce.native.validation import position_check_ir, position_ends_ir, range_check_ir

# (pos, crd, values, x, n, lo, hi, y, nnz): a kernel on rows [lo, hi); SpMM's has ``i64 %k`` before ``%nnz``
ROW_PARAMS = "ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz"
SPMM_PARAMS = ROW_PARAMS.replace("i64 %nnz", "i64 %k, i64 %nnz")
# (pos, crd, values, x, y, m, n, nnz): the CSC scatter, and the whole product's entry
SCATTER_PARAMS = "ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr %y, i64 %m, i64 %n, i64 %nnz"
WHOLE_PARAMS = "ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr %y, i64 %n, i64 %m, i64 %nnz"


def column(ir: IR, c: int, e: str, check: bool, bound: str = "%n") -> str:
    """crd[e] widened to i64; with ``check`` (zero-extended: a negative int32 becomes >= 2**31) branching to %bad
    unless < ``bound``, else the caller checked every coordinate is in range before the call."""
    col = load_index(ir, "%crd", c, e)
    if check:
        ok = ir.name("col_ok")[1:]
        ir(f"  br i1 {ir.op('icmp ult', 'i64', col, bound, 'inside')}, label %{ok}, label %bad")
        ir.label(ok)
    return col


def spmv_ir(name: str, value: np.dtype, p: int, c: int, rows: int, check: bool = False) -> str:
    """Rows [lo, hi) of y = A @ x, ``rows`` rows at a time while they fit, then one by one. With ``check`` the
    kernel checks what it reads, as it reads it (returning 1, ``y`` incomplete, at the first defect): each
    row's segment ``start <= stop <= nnz`` (unsigned, so no position is negative) before its entries are read,
    and each column ``< n`` (unsigned) before ``x`` is read there. Both are branches the CPU predicts as not
    taken: unlike a clamped (selected) index, the load of ``x`` does not wait for the compare."""
    t, mul, add, zero = VALUE[value]
    ir = define(name, ROW_PARAMS, " noinline")
    ir("  %r = alloca i64")
    ir("  store i64 %lo, ptr %r")
    accs = [f"%acc{k}" for k in range(rows)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")

    def accumulate(acc, e):         # acc += values[e] * x[crd[e]]
        col = column(ir, c, e, check)
        add_to(ir, t, add, acc, ir.op(mul, t, ir.load(t, "%vals", e), ir.load(t, "%x", col)))

    def group(first, size):
        if size is None:        # a row left after the groups
            start, stop = segment(ir, "%pos", p, first, check)
            ir(f"  store {t} {zero}, ptr {accs[0]}")
            each(ir, start, stop, lambda e: accumulate(accs[0], e))
            ir.store(t, ir.load(t, accs[0], "0"), "%y", first)
            return
        segs = []
        for k in range(size):
            segs.append(segment(ir, "%pos", p, ir.op("add", "i64", first, str(k), "row"), check))
            ir(f"  store {t} {zero}, ptr {accs[k]}")
        # the entries all rows of the group hold, together (a row alone: counted from 0, measured 1.37x faster
        # on fem2d-3k than a loop from the row's start); then each row's rest
        lengths = [ir.op("sub", "i64", stop, start, "len") for start, stop in segs]
        common = lengths[0]
        for length in lengths[1:]:
            less, new = ir.op("icmp slt", "i64", length, common, "less"), ir.name("common")
            ir(f"  {new} = select i1 {less}, i64 {length}, i64 {common}")
            common = new
        each(ir, "0", common, lambda i: [accumulate(accs[k], ir.op("add", "i64", segs[k][0], i, "at"))
                                         for k in range(size)])
        for k, (start, stop) in enumerate(segs):
            each(ir, ir.op("add", "i64", start, common, "begin"), stop, lambda e, k=k: accumulate(accs[k], e))
        for k in range(size):
            ir.store(t, ir.load(t, accs[k], "0"), "%y", ir.op("add", "i64", first, str(k), "row"))

    groups(ir, "%r", "%hi", (rows,), group)
    ir("  br label %done")
    return returns(ir)


def spmm_ir(name: str, value: np.dtype, p: int, c: int, k: int | None, check: bool = False) -> str:
    """Y[i, :] = sum over row i's entries of values * X[col, :]. With ``k`` fixed at compile time the row's
    ``k`` sums are separate scalars (registers, packed into SIMD by LLVM), stored once per row; with None, any
    count, accumulated in Y's row itself. ``check``: as ``spmv_ir`` (each segment and column checked before
    it is read, 1 returned at the first defect)."""
    t, mul, add, zero = VALUE[value]
    width = str(k) if k is not None else "%k"
    ir = define(name, SPMM_PARAMS, " noinline")
    accs = [f"%acc{j}" for j in range(k or 0)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")

    def columns(body):
        """body(j, acc_ptr) for every column j of the row: unrolled when k is fixed, else a loop."""
        if k is not None:
            for j, acc in enumerate(accs):
                body(str(j), acc)
        else:
            each(ir, "0", "%k", lambda j: body(j, None))

    def row(i):
        base = ir.op("mul", "i64", i, width, "base")

        def y_at(j):
            return ir.gep(t, "%y", ir.op("add", "i64", base, j, "at"))

        columns(lambda j, acc: ir(f"  store {t} {zero}, ptr {acc or y_at(j)}"))
        start, stop = segment(ir, "%pos", p, i, check)

        def entry(e):
            col = column(ir, c, e, check)
            v, xbase = ir.load(t, "%vals", e), ir.op("mul", "i64", col, width, "xb")
            columns(lambda j, acc: add_to(ir, t, add, acc or y_at(j),
                                          ir.op(mul, t, v, ir.load(t, "%x", ir.op("add", "i64", xbase, j, "at")))))

        each(ir, start, stop, entry)
        if k is not None:
            columns(lambda j, acc: ir(f"  store {t} {ir.load(t, acc, '0')}, ptr {y_at(j)}"))

    loop(ir, "%lo", "%hi", row, "done")
    return returns(ir)


def scatter_ir(name: str, value: np.dtype, p: int, c: int) -> str:
    """y = A @ x for A stored by columns (scipy's ``csc_matvec`` order): the two ends of the positions first,
    then column by column each segment checked, every entry's row checked ``< m`` (unsigned) and
    ``value * x[column]`` added to y[row]; 1 at the first defect."""
    t, mul, add, _ = VALUE[value]
    ir = define(name, SCATTER_PARAMS)
    ir(position_ends_ir(p, segments="%n"))
    ir("  br i1 %ends_ok, label %columns, label %bad")
    ir.label("columns")

    def col(j):
        start, stop = segment(ir, "%pos", p, j, True)
        xj = ir.load(t, "%x", j)

        def entry(e):
            at = column(ir, c, e, True, "%m")
            add_to(ir, t, add, ir.gep(t, "%y", at), ir.op(mul, t, ir.load(t, "%vals", e), xj))
        each(ir, start, stop, entry)

    loop(ir, "0", "%n", col, "done")
    return returns(ir)


def uniform_ir(name: str, p: int) -> str:
    """``i64 name(ptr pos, i64 nseg)``: 1 when the ``nseg`` segments from ``pos`` all have the first one's
    length (a flat, vectorizable scan)."""
    ip = f"i{p}"
    ir = define(name, "ptr %pos, i64 %nseg")
    len0 = ir.op("sub", ip, ir.load(ip, "%pos", "1"), ir.load(ip, "%pos", "0"), "len")

    def body(s, acc):
        length = ir.op("sub", ip, ir.load(ip, "%pos", ir.op("add", "i64", s, "1")), ir.load(ip, "%pos", s), "len")
        return (ir.op("or", ip, acc, ir.op("xor", ip, length, len0)),)

    (acc,) = counted(ir, "0", "%nseg", body, carried=((ip, "0"),), base="s")
    same = ir.op("icmp eq", ip, acc, "0", "same")
    ir(f"  %r = zext i1 {same} to i64")
    ir("  ret i64 %r")
    ir("}")
    return ir.text()


def block_driver_ir(name: str, p: int, c: int, block: int, other: str, scan: bool) -> str:
    """``name``: rows [lo, hi) (``ROW_PARAMS``) in blocks of ``block`` rows: a block whose rows all have one
    length (a tridiagonal matrix, a diagonal) by ``@{name}_rows`` (every loop exit predicted), the others by
    ``@{name}_{other}``; 1 when a kernel returns 1. ``scan``: each block's positions (monotone, inside the
    entries) and the range of its columns are first checked by SIMD scans (``@{name}_pos``, ``@{name}_check``),
    for kernels that check nothing. Defines the helpers but the two kernels."""
    ir = define(name, ROW_PARAMS)
    ir("  %flags = alloca [2 x i64]")

    def blk(b):
        b1 = ir.op("add", "i64", b, str(block), "b")
        bend, ps = ir.name("bend"), ir.gep(f"i{p}", "%pos", b, "ps")
        ir(f"  {bend} = select i1 {ir.op('icmp sgt', 'i64', b1, '%hi', 'over')}, i64 %hi, i64 {b1}")
        nseg = ir.op("sub", "i64", bend, b, "nseg")

        def unless(flag, what):     # on to %bad when ``flag``
            ok = ir.name(what)[1:]
            ir(f"  br i1 {flag}, label %bad, label %{ok}")
            ir.label(ok)
        if scan:
            down = ir.name("down")
            ir(f"  {down} = call i64 @{name}_pos(ptr {ps}, i64 {nseg})")
            unless(ir.op("icmp ne", "i64", down, "0"), "positions_ok")
            s, e = load_index(ir, "%pos", p, b), load_index(ir, "%pos", p, bend)
            outside = ir.op("or", "i1", ir.op("icmp ugt", "i64", s, "%nnz"), ir.op("icmp ugt", "i64", e, "%nnz"))
            unless(outside, "inside")
            pc = ir.gep(f"i{c}", "%crd", s)
            ir(f"  call void @{name}_check(ptr {pc}, i64 {ir.op('sub', 'i64', e, s, 'len')}, i64 %n, ptr %flags)")
            unless(ir.op("icmp ne", "i64", ir.load("i64", "%flags", "0"), "0"), "columns_ok")
        uniform, one, many, join = ir.name("uniform"), *(ir.name(x)[1:] for x in ("one", "many", "join"))
        ir(f"  {uniform} = call i64 @{name}_uniform(ptr {ps}, i64 {nseg})")
        ir(f"  br i1 {ir.op('icmp ne', 'i64', uniform, '0')}, label %{one}, label %{many}")
        codes = []
        for block_name, kernel in ((one, "rows"), (many, other)):
            ir.label(block_name)
            codes.append(ir.name("code"))
            ir(f"  {codes[-1]} = call i64 @{name}_{kernel}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 {b}, "
               f"i64 {bend}, ptr %y, i64 %nnz)")
            ir(f"  br label %{join}")
        ir.label(join)
        code = ir.name("code")
        ir(f"  {code} = phi i64 [{codes[0]}, %{one}], [{codes[1]}, %{many}]")
        unless(ir.op("icmp ne", "i64", code, "0"), "block_ok")

    counted(ir, "%lo", "%hi", blk, base="b", step=str(block))
    ir("  br label %done")
    return (returns(ir) + uniform_ir(name + "_uniform", p)
            + (range_check_ir(name + "_check", c) + position_check_ir(name + "_pos", p) if scan else ""))


def whole_ir(name: str, checked: str, p: int, k: int | None = None) -> str:
    """``name`` (``WHOLE_PARAMS``): the product in one call, as the drop-in's fast path makes it: the two ends of
    the positions checked (``pos[0] == 0``, ``pos[m] == nnz``: scipy's own format rule; the kernel checks every
    segment itself), then ``@checked`` on rows [0, m) (``k``: SpMM's column count)."""
    ir = define(name, WHOLE_PARAMS)
    ir(position_ends_ir(p))
    ir("  br i1 %ends_ok, label %run, label %bad")
    ir.label("run")
    width = f"i64 {k}, " if k else ""
    ir(f"  %r = call i64 @{checked}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 0, i64 %m, ptr %y, "
       f"{width}i64 %nnz)")
    ir("  ret i64 %r")
    ir.label("bad")
    ir("  ret i64 1")
    ir("}")
    return ir.text()
