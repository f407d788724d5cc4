"""Row sums over rows of a few entries as one flat loop over the entries, on the stage-1 module (after the
Splyce pass).

The sparsifier writes a CSR row reduction (SpMV's ``y[i] = sum_k a[i, k] * x[k]``, any row sum into a dense
result) as a loop over rows around a loop over the row's entries. On rows of 2-3 entries (road networks) the
inner loop's exit is mispredicted about once a row and costs more than the row's work: road-700 (490k rows,
2.5 entries a row) took 3.6 ms in that loop nest and 1.8-2.0 ms in the drop-in's flat kernel
(native/spmv_flat.py), one loop over all the entries with no branch on a row's end. This pass gives the MLIR
kernel the same loop (2.4 ms there), chosen per call: ``scf.if`` (entries <= ``FLAT_MAX_ROW`` x rows, and on
CPUs where it pays only beyond a size, ``FLAT_MIN_BYTES`` of entries) runs the flat loop, else the loop nest
as it was (docs/passes.md, "Row sums on rows of a few entries").

The flat loop covers the rows before the last two (each step loads the end of the row after next, which must
exist); a copy of the loop nest sums those two. It carries (k, row r, the row's end, the next row's end, the
row's running sum). Each entry adds its term to the sum (the inner loop's body, cloned) and stores the sum to
``y[r]`` (the row's last store wins). At a row's end the ends move by selects on the compare, and r and the
sum by a flag made opaque to LLVM (an empty inline asm): r += flag, and the sum becomes the next row's
starting value ``y[r + 1]`` (loaded every step, before the step's store) by a bit blend on a vector register,
so that no select of the carried float becomes a branch. One unsigned compare, predicted, leaves the plain
step when the next row is empty (a loop finds the next row with entries) or the flat rows are done. Each
row's additions are the loop nest's, in the same order, from the same starting value: the results are bit
for bit the same, so this holds with ``fast_math=False`` too; an empty row is left as it was (the loop nest
stores back the value it loaded).

Matched: ``scf.for %i`` (step 1, no results) whose body is the init load ``y[%i]``, the row bounds (loads of
``pos[%i]`` and ``pos[%i + 1]`` and their casts), ``scf.for %k = lo to hi iter_args(%acc = init)`` with one
result and a body of loads and arithmetic only, ``memref.store`` of that result to ``y[%i]``, for values of
32 or 64 bits. Anything else in the outer body (a value of row i the inner body reads, a second result)
declines.

Scatter nests too (``_match_scatter``): ``a.T @ x`` of a CSR ``a`` (``ki,k->i``) is a loop over rows whose
inner loop, with no result, adds each entry's term into ``y`` at its column; the outer body may compute values
of row i the inner body reads (``x[i]``). Its flat twin carries only the row (and the two ends), recomputes
those values per entry, and runs the inner body for the same entries in the same order: the same results for
any body of loads, arithmetic and stores. Row values costlier than a load and a few additions or
multiplications (the logistic gradient ``a.T @ (1 / (1 + exp(-(a @ w))) - y)``, whose glue MLIR fuses into the
nest's outer body) are computed once per row into a buffer first, which the flat loop reads. road-700's ``a.T @ z`` (490k rows of 2.5): 4.07-4.19 ms in the loop
nest, 2.04 ms flat, the native flat scatter 2.00 (2-core Zen 3 VM, 2026-12-07, thread CPU, best of 9).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, memref, scf, vector

from splyce.native import spmv
from splyce.passes.splyce_pass import PROFILE_COUNTERS_SYMBOL, PROFILE_SLOTS, profile_counters_global
from splyce.passes.ir_utils import CMPI_EQ, CMPI_UGE, CMPI_ULE, CMPI_ULT, const_int, defining_op, walk
# ops the inner body may hold: they read memory or compute, nothing else (cloned once per entry)
_PURE = ("memref.load", "arith.", "math.", "complex.")


FLAT_ROWS_SLOT = 4   # the profile counter of the entries flat loops sum (splyce_pass.PROFILE_SLOTS)


def flatten_row_loops(module: ir.Module, profile: bool = False) -> int:
    """Give every matched row loop nest in ``module`` its flat twin; returns how many. ``profile``: each flat
    loop adds the entries it sums to the profile counter ``FLAT_ROWS_SLOT`` (``splyce.profile``)."""
    count = 0
    for op in [op for op in walk(module.operation) if op.name == "scf.for"]:
        match = _match(op)
        scatter = None if match is not None else _match_scatter(op)
        if match is not None or scatter is not None:
            if profile:
                profile_counters_global(module)
            if match is not None:
                _build(*match, profile)
            else:
                _build_scatter(*scatter, profile)
            count += 1
    return count


def _match(outer: ir.Operation):
    """(outer for, inner for, store) when ``outer`` is a row loop nest, else None."""
    if len(outer.results) or len(outer.operands) != 3 or const_int(outer.operands[2]) != 1:
        return None
    body = outer.regions[0].blocks[0]
    iv = body.arguments[0]
    ops = [o.operation for o in body.operations]
    inners = [o for o in ops if o.name == "scf.for"]
    if len(inners) != 1 or len(ops) < 4 or ops[-1].name != "scf.yield":
        return None
    inner, store = inners[0], ops[-2]
    if store.name != "memref.store" or len(inner.results) != 1 or len(inner.operands) != 4 \
            or const_int(inner.operands[2]) != 1 or store.operands[0] != inner.results[0] \
            or len(store.operands) != 3 or store.operands[2] != iv:
        return None
    t = ir.MemRefType(store.operands[1].type).element_type
    if not (isinstance(t, (ir.F32Type, ir.F64Type)) or (isinstance(t, ir.IntegerType) and t.width in (32, 64))):
        return None            # the row change blends a value's bits: 32- and 64-bit values
    if not _row_bounds(inner, iv):
        return None
    init = defining_op(inner.operands[3])
    if init is None or init.name != "memref.load" or len(init.operands) != 2 \
            or init.operands[0] != store.operands[1] or init.operands[1] != iv \
            or ir.MemRefType(store.operands[1].type).rank != 1:
        return None
    # the bounds: ops of the outer body the inner loop's bounds depend on (loads of pos[i], pos[i + 1])
    bounds = _chain(inner.operands[0], ops) + _chain(inner.operands[1], ops)
    if any(o.name not in ("memref.load", "arith.extui", "arith.extsi", "arith.index_cast", "arith.addi")
           for o in bounds):
        return None
    known = [init, inner, store, ops[-1]] + bounds
    if any(not any(o == k for k in known) for o in ops):
        return None
    inner_body = inner.regions[0].blocks[0]
    for o in inner_body.operations:
        o = o.operation
        if o.name != "scf.yield" and (not o.name.startswith(_PURE) or len(o.regions)):
            return None
        for v in o.operands:   # a value of the outer body other than iv: a row's own value, not cloned
            owner = defining_op(v)
            if owner is not None and any(owner == x for x in ops):
                return None
    return outer, inner, store


def _match_scatter(outer: ir.Operation):
    """(outer for, inner for, the outer body's ops the inner body reads) when ``outer`` is a scatter loop nest:
    ``scf.for %i`` (step 1, no results) whose body is the row bounds (as above), values of row i the inner
    body reads (loads and arithmetic: ``x[i]`` of ``A.T @ x`` stored by rows), and ``scf.for %k = lo to hi``
    (step 1, no results) of loads, arithmetic and stores (``y[crd[k]] += vals[k] * x[i]``); else None. The
    flat loop runs the inner body for the same entries in the same order, so any such body keeps its
    results."""
    if len(outer.results) or len(outer.operands) != 3 or const_int(outer.operands[2]) != 1:
        return None
    body = outer.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    inners = [o for o in ops if o.name == "scf.for"]
    if len(inners) != 1 or ops[-1].name != "scf.yield" or ops[-2] != inners[0]:
        return None
    inner = inners[0]
    if len(inner.results) or len(inner.operands) != 3 or const_int(inner.operands[2]) != 1 \
            or not _row_bounds(inner, body.arguments[0]):
        return None
    bounds = _chain(inner.operands[0], ops) + _chain(inner.operands[1], ops)
    if not bounds or any(o.name not in ("memref.load", "arith.extui", "arith.extsi", "arith.index_cast",
                                        "arith.addi") for o in bounds):
        return None
    inner_body = inner.regions[0].blocks[0]
    stores = 0
    read: list = []
    roots: list = []           # the outer body's values the inner body reads
    for o in inner_body.operations:
        o = o.operation
        if o.name == "memref.store":
            stores += 1
        elif o.name != "scf.yield" and (not o.name.startswith(_PURE) or len(o.regions)):
            return None
        for v in o.operands:
            owner = defining_op(v)
            if owner is not None and any(owner == x for x in ops) and not any(v == r for r in roots):
                roots.append(v)
            read += _chain(v, ops)
    row_values = [o for o in ops if any(o == r for r in read)]
    if not stores or any(not (o.name.startswith(_PURE) and not len(o.regions)) for o in ops[:-2]):
        return None        # nothing scattered, or an outer op with an effect (it would run per entry)
    return outer, inner, row_values, roots


# what row values may be computed by to be recomputed at every entry of the flat scatter (loads that hit and a
# few cycles of arithmetic); costlier ones (the logistic gradient's exp, which MLIR fuses into the nest's outer
# body) are computed once per row into a buffer first, which the flat loop reads (recomputed per entry: 2.5x
# the exps, road-700's gradient 7.9 -> 11.8 ms)
_CHEAP = ("memref.load", "arith.extui", "arith.extsi", "arith.index_cast", "arith.addi", "arith.subi",
          "arith.muli", "arith.addf", "arith.subf", "arith.mulf", "arith.negf", "arith.constant")


def _build_scatter(outer, inner, row_values, roots, profile: bool = False) -> None:
    """The flat twin of a scatter loop nest: as ``_build``, but nothing carried across entries but the row,
    whose values (``row_values``, giving the ``roots`` the inner body reads) are recomputed per entry where
    cheap, else read from a buffer a loop over the rows filled first."""
    iv = outer.regions[0].blocks[0].arguments[0]
    stored = next(o.operation for o in inner.regions[0].blocks[0].operations if o.operation.name == "memref.store")
    t = ir.MemRefType(stored.operands[1].type).element_type

    def flat(lb, kstart, kstop, tail, end_of):
        buffers = {}
        if any(o.name not in _CHEAP for o in row_values):
            buffers = _row_values_stored(iv, row_values, roots, lb, tail)
        _flat_scatter(inner, iv, row_values, lb, kstart, kstop, end_of, buffers)
        for buffer in buffers.values():
            memref.dealloc(buffer)

    _with_flat_twin(outer, inner, t.width if hasattr(t, "width") else 64, profile, flat)
    if any(o.name in _TRANSCENDENTAL for o in row_values):
        _hoist_row_values(outer, inner, row_values, roots)


# row values worth a loop of their own in the loop nest too (backend/vector_math.py: a loop over the rows
# calls libmvec's vector functions; inline in the nest, one scalar call a row)
_TRANSCENDENTAL = frozenset("math." + f for f in (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sin", "cos", "tan", "sinh", "cosh",
    "atan", "asinh", "powf"))


def _hoist_row_values(outer, inner, row_values, roots) -> None:
    """The loop nest (rows of many entries) reads its row values from buffers a loop over its rows filled
    first (``_row_values_stored``), which LLVM vectorizes with libmvec's exp / log / tanh: the logistic
    gradient's ``exp`` a row, 100k rows of 5 entries, was one scalar libm call a row. Each row's values are
    computed by the same ops in the same order (and every ``exp`` by the same libmvec function, whichever
    loop calls it): the same bits."""
    iv = outer.regions[0].blocks[0].arguments[0]
    lb, ub = outer.operands[0], outer.operands[1]
    with ir.InsertionPoint(outer), outer.location:
        buffers = _row_values_stored(iv, row_values, roots, lb, ub)
    with ir.InsertionPoint(inner), inner.location:
        at = arith.subi(iv, lb)
        loaded = [(root, memref.load(buffer, [at])) for root, buffer in buffers.items()]
    for op in walk(inner):
        for i, v in enumerate(op.operands):
            for root, value in loaded:
                if v == root:
                    op.operands[i] = value
    with ir.InsertionPoint(outer.block.operations[_index_in_block(outer) + 1]), outer.location:
        for buffer in buffers.values():
            memref.dealloc(buffer)


def _index_in_block(op) -> int:
    for i, o in enumerate(op.block.operations):
        if o.operation == op:
            return i
    raise RuntimeError("internal error: an op outside its block")


def _row_values_stored(iv, row_values, roots, lb, stop) -> dict:
    """Each root's value for rows [lb, stop) in a buffer of its own (``memref.alloc``: guarded, a failure
    raises MemoryError), computed by a loop over those rows as the nest's outer body computes it."""
    idx = ir.IndexType.get()
    count = arith.subi(stop, lb)
    buffers = {root: memref.alloc(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], root.type), [count], [])
               for root in roots}
    loop = scf.ForOp(lb, stop, arith.constant(idx, 1))
    with ir.InsertionPoint(loop.body):
        row = loop.induction_variable
        cloner = _Cloner({iv: row})
        for op in row_values:
            cloner.op(op)
        at = arith.subi(row, lb)
        for root, buffer in buffers.items():
            memref.store(cloner.value(root), buffer, [at])
        scf.yield_([])
    return buffers


def _flat_scatter(inner, iv, row_values, lb, kstart, kstop, end_of, stored_rows: dict) -> None:
    """One loop over entries [kstart, kstop), carrying (k, row, its end, the next row's end); the row moves on
    as in ``_flat_loop``. The row's values recomputed, or read from ``stored_rows`` (root -> buffer)."""
    idx = ir.IndexType.get()
    one, two = arith.constant(idx, 1), arith.constant(idx, 2)
    first = _skip_empty(lb, kstart, end_of)
    types = [idx, idx, idx, idx]
    state = scf.WhileOp(types, [kstart, first, end_of(first), end_of(arith.addi(first, one))])
    before = state.before.blocks.append(*types)
    with ir.InsertionPoint(before):
        k = before.arguments[0]
        scf.condition(arith.cmpi(CMPI_ULT, k, kstop), list(before.arguments))
    after = state.after.blocks.append(*types)
    with ir.InsertionPoint(after):
        k, r, end, nxt = after.arguments
        cloner = _Cloner({iv: r, inner.regions[0].blocks[0].arguments[0]: k})
        if stored_rows:
            at = arith.subi(r, lb)
            for root, buffer in stored_rows.items():
                cloner.map[root] = memref.load(buffer, [at])
        else:
            for op in row_values:
                cloner.op(op)
        for op in list(inner.regions[0].blocks[0].operations)[:-1]:
            cloner.op(op.operation)
        k1 = arith.addi(k, one)
        last = arith.cmpi(CMPI_EQ, k1, end)
        i64 = ir.IntegerType.get_signless(64)
        flag = llvm.inline_asm(i64, [arith.extui(i64, last)], "", "=r,0")     # as in _flat_loop
        r1 = arith.addi(r, arith.index_cast(idx, flag))
        end1 = arith.select(last, nxt, end)
        nxt1 = arith.select(last, end_of(arith.addi(r, two)), nxt)
        leaving = arith.cmpi(CMPI_UGE, arith.subi(arith.subi(end1, k1), one), arith.subi(kstop, k1))
        fix = scf.IfOp(leaving, [idx, idx, idx], has_else=True)
        with ir.InsertionPoint(fix.then_block):
            more = scf.IfOp(arith.cmpi(CMPI_ULT, k1, kstop), [idx, idx, idx], has_else=True)
            with ir.InsertionPoint(more.then_block):     # rows from r1 on are empty up to the found one
                found = _skip_empty(r1, k1, end_of)
                scf.yield_([found, end_of(found), end_of(arith.addi(found, one))])
            with ir.InsertionPoint(more.else_block):
                scf.yield_([r1, end1, nxt1])
            scf.yield_(list(more.results))
        with ir.InsertionPoint(fix.else_block):
            scf.yield_([r1, end1, nxt1])
        scf.yield_([k1] + list(fix.results))


def _row_bounds(inner: ir.Operation, iv: ir.Value) -> bool:
    """Whether the inner loop runs from ``pos[iv]`` to ``pos[iv + 1]`` of one memref (each through casts only),
    so that a row's end is the next row's start: what the flat loop steps over. A bound loaded at another
    index (``pos[crd[p]]`` of a product's inner level, whose rows are not consecutive) declines."""
    loads = []
    for bound in inner.operands[:2]:
        op = defining_op(bound)
        while op is not None and op.name in ("arith.extui", "arith.extsi", "arith.index_cast"):
            op = defining_op(op.operands[0])
        if op is None or op.name != "memref.load" or len(op.operands) != 2:
            return False
        loads.append(op)
    (lo, hi), at = loads, defining_op(loads[1].operands[1])
    if lo.operands[0] != hi.operands[0] or lo.operands[1] != iv or at is None or at.name != "arith.addi":
        return False
    x, y = at.operands
    return (x == iv and const_int(y) == 1) or (y == iv and const_int(x) == 1)


def _chain(value: ir.Value, ops: list) -> list:
    """The ops among ``ops`` (the outer body's) that ``value`` is computed by, in body order."""
    found = []
    stack = [value]
    while stack:
        op = defining_op(stack.pop())
        if op is None or not any(op == o for o in ops) or any(op == f for f in found):
            continue      # a block argument (the induction variable), a value from outside, or seen
        found.append(op)
        stack.extend(op.operands)
    return [o for o in ops if any(o == f for f in found)]


class _Cloner:
    """Clones region-free ops of the loop nest with their operands remapped."""

    def __init__(self, mapping: dict):
        self.map = dict(mapping)

    def value(self, v: ir.Value) -> ir.Value:
        return self.map.get(v, v)

    def op(self, op: ir.Operation) -> None:
        new = op.clone()                  # at the insertion point
        for i, v in enumerate(op.operands):
            new.operands[i] = self.value(v)
        for old, fresh in zip(op.results, new.results):
            self.map[old] = fresh


def _bound(value: ir.Value, iv: ir.Value, row: ir.Value, chain: list) -> ir.Value:
    """``value`` (a row bound) recomputed for ``row`` at the insertion point."""
    cloner = _Cloner({iv: row})
    for op in chain:
        cloner.op(op)
    return cloner.value(value)


def _build(outer, inner, store, profile: bool = False) -> None:
    y = store.operands[1]
    t = ir.MemRefType(y.type).element_type
    iv = outer.regions[0].blocks[0].arguments[0]
    _with_flat_twin(outer, inner, t.width, profile, lambda lb, kstart, kstop, tail, end_of: _flat_loop(
        inner, y, t, iv, lb, kstart, kstop, end_of))


def _with_flat_twin(outer, inner, value_bits: int, profile: bool, flat) -> None:
    """Put ``outer`` (a loop nest over rows [lb, ub)) under an ``scf.if`` on ``spmv.goes_flat``'s rule for this
    call's entries; the then-branch runs ``flat(lb, kstart, kstop, tail, end_of)`` (which builds the flat loop
    over the entries of rows [lb, tail) at the insertion point) and the nest for the last two rows."""
    body = outer.regions[0].blocks[0]
    iv = body.arguments[0]
    lb, ub = outer.operands[0], outer.operands[1]
    ops = [o.operation for o in body.operations]
    lo_chain, hi_chain = _chain(inner.operands[0], ops), _chain(inner.operands[1], ops)
    idx = ir.IndexType.get()

    def start_of(row):
        return _bound(inner.operands[0], iv, row, lo_chain)

    def end_of(row):
        return _bound(inner.operands[1], iv, row, hi_chain)

    with ir.InsertionPoint(outer), outer.location:
        two = arith.constant(idx, 2)
        kstart, kend = start_of(lb), start_of(ub)
        rows = arith.subi(ub, lb)
        entries = arith.subi(kend, kstart)
        # spmv.goes_flat's rule on this call's entries, its constants from the rule itself (read at compile
        # time, as the drop-in reads them at call time): rows of a few entries, at least flat_min_entries of
        # the coordinates' and values' widths
        few = arith.cmpi(CMPI_ULE, entries, arith.muli(rows, arith.constant(idx, spmv.FLAT_MAX_ROW)))
        entry_bits = _coordinate_bits(inner) + value_bits
        sized = arith.cmpi(CMPI_ULE, arith.constant(idx, spmv.flat_min_entries(entry_bits)), entries)
        # the flat loop takes the rows below the last two (each step loads the end of the row after next,
        # which must exist); it runs when they hold entries
        tail = arith.subi(ub, two)
        enough = arith.cmpi(CMPI_ULT, arith.addi(lb, two), ub)
        choice = scf.IfOp(arith.andi(arith.andi(few, sized), enough), [], has_else=True)
    with ir.InsertionPoint(choice.else_block):
        moved = scf.YieldOp([])
    outer.move_before(moved)
    with ir.InsertionPoint(choice.then_block), outer.location:
        kstop = start_of(tail)
        some = scf.IfOp(arith.cmpi(CMPI_ULT, kstart, kstop), [], has_else=False)
        with ir.InsertionPoint(some.then_block):
            if profile:
                _count(arith.subi(kstop, kstart))
            flat(lb, kstart, kstop, tail, end_of)
            scf.yield_([])
        # the last two rows as they were (every row before them is done, or empty and left as it was)
        rest_start = arith.maxui(lb, tail)
        rest = outer.clone()
        rest.operands[0] = rest_start
        scf.yield_([])


def _coordinate_bits(inner) -> int:
    """The width of the coordinates the inner loop reads at its induction variable (32 if none is found)."""
    body = inner.regions[0].blocks[0]
    k = body.arguments[0]
    for op in body.operations:
        op = op.operation
        if op.name == "memref.load" and len(op.operands) == 2 and op.operands[1] == k:
            element = ir.MemRefType(op.operands[0].type).element_type
            if isinstance(element, ir.IntegerType):
                return element.width
    return 32


def _count(entries: ir.Value) -> None:
    """Add ``entries`` to the profile counter ``FLAT_ROWS_SLOT``."""
    i64 = ir.IntegerType.get_signless(64)
    counters = memref.get_global(ir.MemRefType.get([PROFILE_SLOTS], i64), PROFILE_COUNTERS_SYMBOL)
    slot = arith.constant(ir.IndexType.get(), FLAT_ROWS_SLOT)
    total = arith.addi(memref.load(counters, [slot]), arith.index_cast(i64, entries))
    memref.store(total, counters, [slot])


def _flat_loop(inner, y, t, iv, lb, kstart, kstop, end_of) -> None:
    """One loop over entries [kstart, kstop) of rows lb .. (the tail's first row - 1)."""
    idx = ir.IndexType.get()
    one, two = arith.constant(idx, 1), arith.constant(idx, 2)
    first = _skip_empty(lb, kstart, end_of)
    types = [idx, idx, idx, idx, t]
    state = scf.WhileOp(types, [kstart, first, end_of(first), end_of(arith.addi(first, one)),
                                memref.load(y, [first])])
    before = state.before.blocks.append(*types)
    with ir.InsertionPoint(before):
        k, r, end, nxt, acc = before.arguments
        scf.condition(arith.cmpi(CMPI_ULT, k, kstop), list(before.arguments))
    after = state.after.blocks.append(*types)
    with ir.InsertionPoint(after):
        k, r, end, nxt, acc = after.arguments
        k1 = arith.addi(k, one)
        last = arith.cmpi(CMPI_EQ, k1, end)
        # the row change: the ends move by selects on the compare (cmovs), the row and the sum by a flag
        # that goes through an empty asm, so that LLVM cannot see it is a compare again (a select of the
        # carried float compiles to a branch on x86, mispredicted at every row's end: spmv_flat.py)
        i64 = ir.IntegerType.get_signless(64)
        flag = llvm.inline_asm(i64, [arith.extui(i64, last)], "", "=r,0")
        r1 = arith.addi(r, arith.index_cast(idx, flag))
        end1 = arith.select(last, nxt, end)
        ahead = end_of(arith.addi(r, two))       # the end of the row after next, off the carried chain
        nxt1 = arith.select(last, ahead, nxt)
        # one compare for both ways out of the plain step (taken rarely, so predicted): the next row is
        # empty (end1 == k1) or the flat rows are done (its end beyond kstop, or k1 == kstop); inside a row
        # k1 < end1 <= kstop
        leaving = arith.cmpi(CMPI_UGE, arith.subi(arith.subi(end1, k1), one), arith.subi(kstop, k1))
        # the next row's starting value (y[r + 1], not stored yet: rows go up), taken at a row's end; a load
        # of y[r] after this row's stores would wait for the last one, on the sum's chain
        following = memref.load(y, [arith.addi(r, one)])
        fix = scf.IfOp(leaving, [idx, idx, idx, t], has_else=True)
        with ir.InsertionPoint(fix.then_block):
            more = scf.IfOp(arith.cmpi(CMPI_ULT, k1, kstop), [idx, idx, idx, t], has_else=True)
            with ir.InsertionPoint(more.then_block):     # rows from r1 on are empty up to the found one
                found = _skip_empty(r1, k1, end_of)
                scf.yield_([found, end_of(found), end_of(arith.addi(found, one)), memref.load(y, [found])])
            with ir.InsertionPoint(more.else_block):
                scf.yield_([r1, end1, nxt1, following])
            scf.yield_(list(more.results))
        with ir.InsertionPoint(fix.else_block):
            scf.yield_([r1, end1, nxt1, following])
        r2, end2, nxt2, restart = fix.results
        inner_body = inner.regions[0].blocks[0]
        cloner = _Cloner({inner_body.arguments[0]: k, inner_body.arguments[1]: acc, iv: r})
        body_ops = list(inner_body.operations)
        for op in body_ops[:-1]:
            cloner.op(op.operation)
        total = cloner.value(body_ops[-1].operation.operands[0])
        memref.store(total, y, [r])
        scf.yield_([k1, r2, end2, nxt2, _blend(flag, restart, total, t)])


def _blend(flag: ir.Value, on: ir.Value, off: ir.Value, t: ir.Type) -> ir.Value:
    """``on`` where the i64 ``flag`` is 1, else ``off``, by bits: (on & mask) | (off & ~mask), on 2-lane
    vectors so that a float stays in its vector register (a scalar and / or would move the running sum to
    an integer register and back: ~6 cycles more on its chain from one entry to the next)."""
    bits = ir.IntegerType.get_signless(t.width)
    lanes = 128 // t.width
    vbits, vt = ir.VectorType.get([lanes], bits), ir.VectorType.get([lanes], t)
    flag = flag if t.width == 64 else arith.trunci(bits, flag)
    mask = vector.broadcast(vbits, arith.subi(arith.constant(bits, 0), flag))
    as_bits = (lambda v: vector.broadcast(vbits, v)) if isinstance(t, ir.IntegerType) else \
        (lambda v: vector.bitcast(vbits, vector.broadcast(vt, v)))
    ones = arith.constant(vbits, ir.DenseElementsAttr.get_splat(vbits, ir.IntegerAttr.get(bits, -1)))
    both = arith.ori(arith.andi(as_bits(on), mask), arith.andi(as_bits(off), arith.xori(mask, ones)))
    if not isinstance(t, ir.IntegerType):
        both = vector.bitcast(vt, both)
    return vector.extract(both, [], [0])


def _skip_empty(row: ir.Value, k: ir.Value, end_of) -> ir.Value:
    """The first row from ``row`` on whose end is beyond entry ``k`` (one exists: k < the range's end)."""
    idx = ir.IndexType.get()
    loop = scf.WhileOp([idx], [row])
    before = loop.before.blocks.append(idx)
    with ir.InsertionPoint(before):
        (r,) = before.arguments
        scf.condition(arith.cmpi(CMPI_ULE, end_of(r), k), [r])
    after = loop.after.blocks.append(idx)
    with ir.InsertionPoint(after):
        (r,) = after.arguments
        scf.yield_([arith.addi(r, arith.constant(idx, 1))])
    return loop.results[0]
