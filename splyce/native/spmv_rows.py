"""The per-row SpMV and SpMM kernels' LLVM IR (rows [lo, hi), one thread's share), which spmv.py compiles.

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

from splyce.native.ir_text import (IR as _IR, VALUE as _VALUE, check_segment as _check_segment, load_index as _load_index,
                                   loop as _loop, returns as _returns)


def _accumulate(ir: _IR, t: str, mul: str, add: str, c: int, acc: str, k: str, check: bool = False) -> None:
    """acc (an alloca) += values[k] * x[crd[k]]; with ``check``, a column outside [0, n) returns 1 first."""
    safe = _column(ir, c, k, check)
    pv, v, px, xv, prod, s0, s1 = (ir.name(n) for n in ("pv", "v", "px", "xv", "prod", "s", "s"))
    ir(f"  {pv} = getelementptr {t}, ptr %vals, i64 {k}")
    ir(f"  {v} = load {t}, ptr {pv}")
    ir(f"  {px} = getelementptr {t}, ptr %x, i64 {safe}")
    ir(f"  {xv} = load {t}, ptr {px}")
    ir(f"  {prod} = {mul} {t} {v}, {xv}")
    ir(f"  {s0} = load {t}, ptr {acc}")
    ir(f"  {s1} = {add} {t} {s0}, {prod}")
    ir(f"  store {t} {s1}, ptr {acc}")


def spmv_ir(name: str, value: np.dtype, p: int, c: int, rows: int, check: bool = False) -> str:
    """Rows [lo, hi) of y = A @ x. With ``check`` the kernel checks what it reads, as it reads it (returning 1,
    ``y`` incomplete, at the first defect): each row's segment ``start <= stop <= nnz`` (unsigned, so no
    position is negative) before its entries are read, and each column ``< n`` (unsigned) before ``x`` is read
    there. Both are branches the CPU predicts as not taken: unlike a clamped (selected) index, the load of
    ``x`` does not wait for the compare."""
    t, mul, add, zero = _VALUE[value]
    ir = _IR()
    ir(f"define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %nnz) noinline {{")
    ir.label("entry")
    ir("  %r = alloca i64")
    ir("  store i64 %lo, ptr %r")
    accs = [f"%acc{k}" for k in range(rows)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")
    ir("  br label %group_head")
    # groups of `rows` rows
    ir.label("group_head")
    ir("  %gr = load i64, ptr %r")
    ir(f"  %gend = add i64 %gr, {rows}")
    ir("  %gfits = icmp sle i64 %gend, %hi")
    ir("  br i1 %gfits, label %group_body, label %single_head")
    ir.label("group_body")
    starts, stops = [], []
    for k in range(rows):
        row = ir.name("row")
        ir(f"  {row} = add i64 %gr, {k}")
        starts.append(_load_index(ir, "%pos", p, row))
        nxt = ir.name("rowp")
        ir(f"  {nxt} = add i64 {row}, 1")
        stops.append(_load_index(ir, "%pos", p, nxt))
        if check:
            _check_segment(ir, starts[-1], stops[-1])
        ir(f"  store {t} {zero}, ptr {accs[k]}")
    common = None
    for k in range(rows):
        length = ir.name("len")
        ir(f"  {length} = sub i64 {stops[k]}, {starts[k]}")
        if common is None:
            common = length
        else:
            less, new = ir.name("less"), ir.name("common")
            ir(f"  {less} = icmp slt i64 {length}, {common}")
            ir(f"  {new} = select i1 {less}, i64 {length}, i64 {common}")
            common = new

    def together(i):
        for k in range(rows):
            at = ir.name("at")
            ir(f"  {at} = add i64 {starts[k]}, {i}")
            _accumulate(ir, t, mul, add, c, accs[k], at, check)

    _loop(ir, "0", common, together, "tail0")
    for k in range(rows):
        ir.label(f"tail{k}")
        begin = ir.name("begin")
        ir(f"  {begin} = add i64 {starts[k]}, {common}")
        _loop(ir, begin, stops[k], lambda i, k=k: _accumulate(ir, t, mul, add, c, accs[k], i, check),
              f"tail{k + 1}" if k + 1 < rows else "group_store")
    ir.label("group_store")
    for k in range(rows):
        row, py, s = ir.name("row"), ir.name("py"), ir.name("s")
        ir(f"  {row} = add i64 %gr, {k}")
        ir(f"  {py} = getelementptr {t}, ptr %y, i64 {row}")
        ir(f"  {s} = load {t}, ptr {accs[k]}")
        ir(f"  store {t} {s}, ptr {py}")
    ir("  store i64 %gend, ptr %r")
    ir("  br label %group_head")
    # the last rows one at a time
    ir.label("single_head")
    ir("  %sr = load i64, ptr %r")
    ir("  %smore = icmp slt i64 %sr, %hi")
    ir("  br i1 %smore, label %single_body, label %done")
    ir.label("single_body")
    s_start = _load_index(ir, "%pos", p, "%sr")
    ir("  %sr1 = add i64 %sr, 1")
    s_stop = _load_index(ir, "%pos", p, "%sr1")
    if check:
        _check_segment(ir, s_start, s_stop)
    ir(f"  store {t} {zero}, ptr %acc0")
    _loop(ir, s_start, s_stop, lambda i: _accumulate(ir, t, mul, add, c, "%acc0", i, check), "single_store")
    ir.label("single_store")
    ir("  %spy = getelementptr " + t + ", ptr %y, i64 %sr")
    ir(f"  %ss = load {t}, ptr %acc0")
    ir(f"  store {t} %ss, ptr %spy")
    ir("  store i64 %sr1, ptr %r")
    ir("  br label %single_head")
    return _returns(ir)


def spmm_ir(name: str, value: np.dtype, p: int, c: int, k: int | None, check: bool = False) -> str:
    """Y[i, :] = sum over row i's entries of values * X[col, :]. With ``k`` fixed at compile time the row's
    ``k`` sums are separate scalars (registers, packed into SIMD by LLVM), stored once per row; with None, any
    count, accumulated in Y's row itself. ``check``: as ``spmv_ir`` (each segment and column checked before
    it is read, 1 returned at the first defect)."""
    t, mul, add, zero = _VALUE[value]
    width = str(k) if k is not None else "%k"
    ir = _IR()
    ir(f"define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, i64 %n, i64 %lo, i64 %hi, ptr %y, i64 %k, "
       "i64 %nnz) noinline {")
    ir.label("entry")
    accs = [f"%acc{j}" for j in range(k or 0)]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")

    def columns(body):
        """body(j, acc_ptr) for every column j of the row: unrolled when k is fixed, else a loop."""
        if k is not None:
            for j, acc in enumerate(accs):
                body(str(j), acc)
            return
        after = ir.name("cols")[1:]
        _loop(ir, "0", "%k", lambda j: body(j, None), after)
        ir.label(after)

    def row(i):
        base = ir.name("base")
        ir(f"  {base} = mul i64 {i}, {width}")

        def y_at(j):
            at, py = ir.name("at"), ir.name("py")
            ir(f"  {at} = add i64 {base}, {j}")
            ir(f"  {py} = getelementptr {t}, ptr %y, i64 {at}")
            return py

        columns(lambda j, acc: ir(f"  store {t} {zero}, ptr {acc or y_at(j)}"))
        start = _load_index(ir, "%pos", p, i)
        i1 = ir.name("i1")
        ir(f"  {i1} = add i64 {i}, 1")
        stop = _load_index(ir, "%pos", p, i1)
        if check:
            _check_segment(ir, start, stop)

        def entry(e):
            safe = _column(ir, c, e, check)
            pv, v, xbase = ir.name("pv"), ir.name("v"), ir.name("xb")
            ir(f"  {pv} = getelementptr {t}, ptr %vals, i64 {e}")
            ir(f"  {v} = load {t}, ptr {pv}")
            ir(f"  {xbase} = mul i64 {safe}, {width}")

            def axpy(j, acc):
                at, px, xv, prod, s0, s1 = (ir.name(n) for n in ("at", "px", "xv", "prod", "s", "s"))
                ir(f"  {at} = add i64 {xbase}, {j}")
                ir(f"  {px} = getelementptr {t}, ptr %x, i64 {at}")
                ir(f"  {xv} = load {t}, ptr {px}")
                ir(f"  {prod} = {mul} {t} {v}, {xv}")
                target = acc or y_at(j)
                ir(f"  {s0} = load {t}, ptr {target}")
                ir(f"  {s1} = {add} {t} {s0}, {prod}")
                ir(f"  store {t} {s1}, ptr {target}")

            columns(axpy)

        after = ir.name("entries")[1:]
        _loop(ir, start, stop, entry, after)
        ir.label(after)
        if k is not None:
            def store(j, acc):
                s = ir.name("s")
                ir(f"  {s} = load {t}, ptr {acc}")
                ir(f"  store {t} {s}, ptr {y_at(j)}")
            columns(store)

    _loop(ir, "%lo", "%hi", row, "done")
    return _returns(ir)


def _column(ir: _IR, c: int, e: str, check: bool) -> str:
    """crd[e] widened to i64; with ``check`` (zero-extended: a negative int32 becomes >= 2**31) branching to %bad
    unless < n, else the caller checked every coordinate is in range before the call."""
    col = _load_index(ir, "%crd", c, e)
    if not check:
        return col
    inside, ok = ir.name("inside"), ir.name("col_ok")
    ir(f"  {inside} = icmp ult i64 {col}, %n")
    ir(f"  br i1 {inside}, label %{ok[1:]}, label %bad")
    ir.label(ok[1:])
    return col



# A block driver's loop over rows [lo, hi) in blocks of {block} rows (spmv.py's grouped driver, spmv_flat.py's):
# from the loop head (``%b``, the block's first row) to ``%ok`` after the last block, else into ``body``,
# which sets the block's end ``%bend``, its positions ``%ps`` and its row count ``%nseg``
BLOCKS = """  %more = icmp slt i64 %b, %hi
  br i1 %more, label %body, label %ok
body:
  %b1 = add i64 %b, {block}
  %over = icmp sgt i64 %b1, %hi
  %bend = select i1 %over, i64 %hi, i64 %b1
  %ps = getelementptr i{p}, ptr %pos, i64 %b
  %nseg = sub i64 %bend, %b"""

# 1 when the nseg segments starting at pos all have the length of the first one (a flat, vectorizable scan)
UNIFORM = """
define i64 @{name}(ptr %pos, i64 %nseg) {{
entry:
  %p0 = load i{p}, ptr %pos
  %p1a = getelementptr i{p}, ptr %pos, i64 1
  %p1 = load i{p}, ptr %p1a
  %len0 = sub i{p} %p1, %p0
  br label %head
head:
  %s = phi i64 [0, %entry], [%s1, %body]
  %acc = phi i{p} [0, %entry], [%acc1, %body]
  %more = icmp slt i64 %s, %nseg
  br i1 %more, label %body, label %done
body:
  %pa = getelementptr i{p}, ptr %pos, i64 %s
  %a = load i{p}, ptr %pa
  %s1 = add i64 %s, 1
  %pb = getelementptr i{p}, ptr %pos, i64 %s1
  %b = load i{p}, ptr %pb
  %len = sub i{p} %b, %a
  %differs = xor i{p} %len, %len0
  %acc1 = or i{p} %acc, %differs
  br label %head
done:
  %same = icmp eq i{p} %acc, 0
  %r = zext i1 %same to i64
  ret i64 %r
}}
"""
