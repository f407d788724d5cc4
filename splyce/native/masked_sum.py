"""The masked sum ``einsum("ij,jk,ik->", A, B, C)`` (triangle counting with A = B = C = L) on the native kernel
library, summed in the sparsifier kernel's order, bit for bit; on several threads, rows in chunks of about
equal work. When every value is one (a 0/1 pattern), the sum is the count of products, which a branch-free
kernel counts (``_hit_count_ir``). The drop-in's and the jit's one-call form of it is masked_sum_checked.py."""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import IR, SCALARS, VALUE, counted, load_index, loop, run_taken, index_bits as _bits
from splyce.native.marked_row import marked_row
from splyce.native.masked_chunks import CHUNKS_PER_THREAD, masked_chunks, serial_max_work

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (apos, acrd, aval, bpos, bcrd, bval, cpos, ccrd, cval, lo, hi, mark, out)
_MASKED_SUM_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P)
# the parameters of the summing and the counting kernel (``_MASKED_SUM_SIG``)
_PARAMS = ("(ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, ptr %bcrd, ptr %bval, ptr %cpos, ptr %ccrd, ptr %cval, "
           "i64 %lo, i64 %hi, ptr %mark, ptr %out)")
_lock = threading.Lock()


def _masked_sum_ir(name, value, ap, ac, bp, bc, cp, cc, factors="abc"):
    """``sum over i, j, k of A[i, j] * B[j, k] * C[i, k]`` (einsum ``"ij,jk,ik->"``, triangle counting with
    A = B = C = L) in the order the sparsifier's kernel for that einsum sums, loops i, j, k: rows i in order,
    A's row in stored order, then the k of B's row j that C's row i holds, in B's order (ascending, as the
    sparsifier's co-iteration yields them); one accumulator from zero, ``(a * b) * c`` added to it. C's row
    is marked (``mark[k]`` = its position), so each k costs one lookup. ``factors``: the order the three are
    multiplied in, ``(x * y) * z`` for ``factors = "xyz"`` (the einsum's operand order: ``"ac,bc,ab->"``, the
    jit's triangle sum, is ``"cba"``)."""
    t, mul, add, zero = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}{_PARAMS} {{")
    ir.label("entry")
    ir(f"  %acc_slot = alloca {t}")
    ir(f"  store {t} {zero}, ptr %acc_slot")

    def row(i):
        def add_times_c(ab, m):     # acc += (a * b) * C[i, k], multiplied in the order of ``factors``
            pc, cv, xy, abc, old, new = (ir.name(n) for n in ("pc", "cv", "xy", "abc", "old", "new"))
            ir(f"  {pc} = getelementptr {t}, ptr %cval, i64 {m}")
            ir(f"  {cv} = load {t}, ptr {pc}")
            value_of = {"a": ab[0], "b": ab[1], "c": cv}
            x, y, z = (value_of[f] for f in factors)
            ir(f"  {xy} = {mul} {t} {x}, {y}")
            ir(f"  {abc} = {mul} {t} {xy}, {z}")
            ir(f"  {old} = load {t}, ptr %acc_slot")
            ir(f"  {new} = {add} {t} {old}, {abc}")
            ir(f"  store {t} {new}, ptr %acc_slot")

        marked_row(ir, i, t, mul, (("%cpos", cp), ("%ccrd", cc)), ap, ac, bp, bc, lambda e: None, add_times_c,
                    pair=True)

    loop(ir, "%lo", "%hi", row, "exit")
    ir.label("exit")
    ir(f"  %sum = load {t}, ptr %acc_slot")
    ir(f"  store {t} %sum, ptr %out")
    ir("  ret i64 0")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _hit_count_ir(name, bits):
    """The number of products ``_masked_sum_ir`` adds (``i64 name(...)``, its arguments, ``%out`` unused): when
    every value is one, the sum is that count, bit for bit (each addend is exactly 1, each partial sum an
    integer, exact up to 2**53 / 2**24 in double / float; integers wrap alike). A hit is counted by an add of
    the compare's carry (``adc``), so the loop has no branch on it: on irregular rows a hit is a coin toss,
    and its misprediction cost more than the product (docs/corpus.md: 1.1-2.3x the summing loop, ~1.0x where
    hits are rare and predicted)."""
    ir = IR()
    ir(f"define i64 @{name}{_PARAMS} {{")
    ir.label("entry")
    ir("  %count_slot = alloca i64")
    ir("  store i64 0, ptr %count_slot")

    def count(m, first, end):
        # a hit: mark[j] in [first, end), one unsigned compare (earlier rows' marks are below, unset ones -1).
        # The sum goes through an empty asm: else LLVM vectorizes the loop (16 and 4 lanes of scalar loads,
        # then a scalar tail), whose dispatch on B's row length cost more than it saved on short rows
        one, old, new, kept = ir.name("one"), ir.name("old"), ir.name("new"), ir.name("kept")
        off, span, is_hit = ir.name("off"), ir.name("span"), ir.name("hit")
        ir(f"  {off} = sub i64 {m}, {first}")
        ir(f"  {span} = sub i64 {end}, {first}")
        ir(f"  {is_hit} = icmp ult i64 {off}, {span}")
        ir(f"  {one} = zext i1 {is_hit} to i64")
        ir(f"  {old} = load i64, ptr %count_slot")
        ir(f"  {new} = add i64 {old}, {one}")
        ir(f'  {kept} = call i64 asm "", "=r,0"(i64 {new})')
        ir(f"  store i64 {kept}, ptr %count_slot")

    loop(ir, "%lo", "%hi", lambda i: marked_row(ir, i, "i64", "mul", (("%cpos", bits), ("%ccrd", bits)), bits,
                                                 bits, bits, bits, lambda e: None, None, count), "exit")
    ir.label("exit")
    ir("  %count = load i64, ptr %count_slot")
    ir("  ret i64 %count")
    ir("}")
    return "\n".join(ir.lines) + "\n"


@functools.cache
def _masked_sum(value, ap, ac, bp, bc, cp, cc, factors="abc"):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_sum_{VALUE[value][0]}_{ap}_{ac}_{bp}_{bc}_{cp}_{cc}" + ("" if factors == "abc" else f"_{factors}")
    return compile_host_helpers(_masked_sum_ir(name, value, ap, ac, bp, bc, cp, cc, factors),
                                {name: _MASKED_SUM_SIG})[name]


def masked_sum(a, b, c, n_cols: int, dtype, threads: int = 1, with_proof: bool = False, factors: str = "abc",
               count_ones: bool = False, exact_only: bool = False):
    """``einsum("ij,jk,ik->", A, B, C)``, summed in the sparsifier kernel's order (see ``_masked_sum_ir``): a
    NumPy scalar of ``dtype``. ``a``, ``b``, ``c``: validated CSR parts ``(data, indices, indptr)`` with
    values of ``dtype`` (columns of B and C in ``[0, n_cols)``, C's unique within a row). Work: ``nnz(C) + sum
    over A's entries (i, j) of nnz(B[j, :])``. ``threads`` > 1: rows in chunks of about equal work
    (``masked_chunks``, 4 per thread, each thread taking the next one left, one mark array per thread), each
    summed from zero; the partial sums added in chunk order (a float sum reassociated, as the compiled kernel's
    split reduction does; exact for integers and integer-valued floats). ``with_proof``: returns ``(sum,
    finite)``, ``finite`` True when every value is finite: proved by the count (every value one) or by a scan
    of the values run beside the chunks (``planner.nonfinite`` needs no pass of its own then). ``factors``: the
    order of each term's multiplications (``_masked_sum_ir``). ``count_ones``: on one thread too, count the
    hits when every value is one (``_counted_sum``; the drop-in's one-thread fast path does so itself).
    ``exact_only``: split across ``threads`` only where the split changes no bit: every value one (the count,
    ``_counted_sum``, exact in any order); otherwise the rows are summed as one chunk, the one-thread order
    (the default thread count's rule for float sums: bit-identical to ``threads=1``)."""
    av, ac, ap = a
    bv, bc, bp = b
    cv, cc, cp = c
    dtype = np.dtype(dtype)
    with _lock:
        fn = _masked_sum(dtype, _bits(ap), _bits(ac), _bits(bp), _bits(bc), _bits(cp), _bits(cc), factors)
    chunks = masked_chunks(cp, ap, ac, bp, threads * CHUNKS_PER_THREAD if threads > 1 else 1, serial_max_work())

    def summed_into(out, t, lo, hi, mark):
        fn(_address(ap), _address(ac), _address(av), _address(bp), _address(bc), _address(bv), _address(cp),
           _address(cc), _address(cv), lo, hi, _address(mark), _address(out) + t * dtype.itemsize)

    if len(chunks) > 1 or count_ones:
        def summed(lo, hi, mark):
            one = np.empty(1, dtype=dtype)
            summed_into(one, 0, lo, hi, mark)
            return one[0]
        counted = _counted_sum(a, b, c, n_cols, dtype, chunks, threads, summed)
        if counted is not None:
            return (counted, True) if with_proof else counted
        if exact_only and len(chunks) > 1:      # not a 0/1 pattern: the one-thread order
            chunks = masked_chunks(cp, ap, ac, bp, 1, serial_max_work())
    out = np.empty(len(chunks), dtype=dtype)
    items = [("rows", lo, hi) for lo, hi in chunks]
    scan = with_proof and dtype.kind in "fc"
    if scan:        # each distinct value array scanned for NaN / Inf, in halves, by whichever thread is free
        with _lock:
            finite = _finite_scan(dtype)
        for v in {id(v): v for v in (av, bv, cv)}.values():
            items += [("finite", v, half) for half in ((0, len(v) // 2), (len(v) // 2, len(v)))]

    def run(t, kind, x, y, mark):
        if kind == "finite":
            lo, hi = y
            return bool(finite(_address(x) + lo * x.itemsize, hi - lo))
        summed_into(out, t, x, y, mark)

    results = run_taken(run, items, threads, lambda: np.full(n_cols, -1, dtype=np.int64))
    total = out[0]
    for part in out[1:]:
        total = total + part
    if not with_proof:
        return total
    return total, all(r for (kind, *_), r in zip(items, results) if kind == "finite")


@functools.cache
def _finite_scan(value):
    """``i64 (ptr v, i64 n)``: whether the ``n`` values at ``v`` are all finite (``_finite_ir``)."""
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_finite_{VALUE[value][0]}"
    return compile_host_helpers(_finite_ir(name, value), {name: _COUNT_SIG})[name]



_COUNT_SIG = ctypes.CFUNCTYPE(_I, _P, _I)           # (values, n) -> all ones; and the products' (below)
_PRODUCTS_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _I)


@functools.cache
def _counting(value, bits):
    """(hit count of rows ``[lo, hi)``, products of the first rows, all-ones test) for one index width."""
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_count_{VALUE[value][0]}_i{bits}"
    text = (_hit_count_ir(name, bits) + _products_ir(name + "_products", bits) + _ones_ir(name + "_ones", value))
    fns = compile_host_helpers(text, {name: _MASKED_SUM_SIG, name + "_products": _PRODUCTS_SIG,
                                      name + "_ones": _COUNT_SIG})
    return fns[name], fns[name + "_products"], fns[name + "_ones"]


def _counted_sum(a, b, c, n_cols: int, dtype: np.dtype, chunks, threads: int, summed):
    """``masked_sum`` over several chunks as the one-thread ``masked_sum_checked`` does it when every value is
    one (triangle counting): the hits counted by the branch-free ``_hit_count_ir`` instead of summed by the
    loop whose branch on a hit mispredicts on irregular rows (rmat-s13 on two threads: 7.1 ms summing, against
    4.0 ms counting on one). The same sample decides: the first ``m / 16`` rows (at least 64) counted, and
    when under 1 product in ``HIT_SAMPLE_RATE`` hits, a hit is rare and predicted, and the chunks not started
    yet are summed instead (``summed(lo, hi, own)``: the summing kernel's partial sum of rows ``[lo, hi)``).
    The sample, the scan of every value for one (in halves) and the chunks after the sample are one list of
    items taken by the threads in turn, so nothing waits for the sample or the scan: a chunk counted before
    the scan ends is exact once it passes (each product is one), and all of them are dropped when it fails.
    Returns None when a value is not one, the index arrays have several widths, or the value type does not
    hold the count exactly (the caller sums); else the count as ``dtype``: the sum, bit for bit (each product
    is exactly one, so a summed chunk's partial sum is an exact integer too)."""
    (av, ac, ap), (bv, bc, bp), (cv, cc, cp) = a, b, c
    widths = {_bits(x) for x in (ac, ap, bc, bp, cc, cp)}
    t = VALUE[dtype][0]
    distinct = list({id(v): v for v in (av, bv, cv)}.values())
    if len(widths) != 1 or t not in _COUNTED or any(len(v) and v[0] != 1 for v in distinct):
        return None             # not a 0/1 pattern (its first value tells, before any work)
    with _lock:
        count, products, ones = _counting(dtype, widths.pop())
    m = len(cp) - 1
    srows = min(m, max(64, m // 16))
    addresses = [_address(x) for x in (ap, ac, av, bp, bc, bv, cp, cc, cv)]
    # items in row order (a thread's marks stay valid only while its rows increase): the sample, the scan's
    # halves (no rows), then the chunks past the sample
    items = [("sample", 0, srows)]
    for v in distinct:
        items += [("ones", v, half) for half in ((0, len(v) // 2), (len(v) // 2, len(v)))]
    items += [("rows", max(lo, srows), hi) for lo, hi in chunks if hi > srows]
    rare = []                   # set by the sample: sum the chunks not started yet

    def run(_, kind, x, y, own):        # run_taken's (index, *item, own)
        if kind == "ones":
            lo, hi = y
            return bool(ones(_address(x) + lo * x.itemsize, hi - lo))
        if kind == "sample":
            hits = count(*addresses, x, y, _address(own), None)
            if hits * HIT_SAMPLE_RATE < products(_address(ap), _address(ac), _address(bp), y):
                rare.append(True)
            return hits
        if rare:
            return summed(x, y, own)
        return count(*addresses, x, y, _address(own), None)

    results = run_taken(run, items, threads, lambda: np.full(n_cols, -1, dtype=np.int64))
    if not all(r for (kind, *_), r in zip(items, results) if kind == "ones"):
        return None
    hits = sum(int(r) for (kind, *_), r in zip(items, results) if kind != "ones")
    if hits > _COUNTED[t][1]:
        return None
    return np.array(hits, dtype=np.int64).astype(dtype)[()]

HIT_SAMPLE_RATE = 32   # below 1 hit in this many products of the sample: the summing loop (its branch predicted)


def _products_ir(name, bits):
    """``i64 name(ptr apos, ptr acrd, ptr bpos, i64 rows)``: the products of A's first ``rows`` rows, the sum
    over their entries (i, k) of B's row length (the sample's work for the hit rate)."""
    ir = IR()
    ir(f"define i64 @{name}(ptr %apos, ptr %acrd, ptr %bpos, i64 %rows) {{")
    ir.label("entry")
    ir("  %total_slot = alloca i64")
    ir("  store i64 0, ptr %total_slot")
    end = load_index(ir, "%apos", bits, "%rows")

    def entry(e):
        k = load_index(ir, "%acrd", bits, e)
        k1, old, new, length = ir.name("k1"), ir.name("old"), ir.name("new"), ir.name("len")
        ir(f"  {k1} = add i64 {k}, 1")
        start, stop = load_index(ir, "%bpos", bits, k), load_index(ir, "%bpos", bits, k1)
        ir(f"  {length} = sub i64 {stop}, {start}")
        ir(f"  {old} = load i64, ptr %total_slot")
        ir(f"  {new} = add i64 {old}, {length}")
        ir(f"  store i64 {new}, ptr %total_slot")

    loop(ir, "0", end, entry, "exit")
    ir.label("exit")
    ir("  %total = load i64, ptr %total_slot")
    ir("  ret i64 %total")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _all_of_ir(name, elem, test):
    """``i64 name(ptr v, i64 n)``: 1 when ``test(ir, x)`` (the i1 it computes from the element ``x`` of type
    ``elem``) holds for each of the ``n`` values at ``v``, else 0 (no early exit: the loop vectorizes)."""
    ir = IR()
    ir(f"define i64 @{name}(ptr %v, i64 %n) {{")
    ir.label("entry")
    (all_,) = counted(ir, "0", "%n", lambda k, so_far: (ir.op("and", "i1", so_far, test(ir, ir.load(elem, "%v", k))),),
                      carried=(("i1", "true"),), base="k")
    r = ir.name("r")
    ir(f"  {r} = zext i1 {all_} to i64")
    ir(f"  ret i64 {r}")
    ir("}")
    return ir.text()


def _ones_ir(name, value):
    """``i64 name(ptr v, i64 n)``: whether each of the ``n`` values at ``v`` is one."""
    row = SCALARS[value]
    return _all_of_ir(name, row.t, lambda ir, x: ir.op(row.eq, row.t, x, row.one))


def _finite_ir(name, value):
    """``i64 name(ptr v, i64 n)``: whether each of the ``n`` values at ``v`` is finite (its exponent bits not
    all set, read as an integer; integers always are)."""
    row = SCALARS[value]
    if not row.exponent:
        return f"define i64 @{name}(ptr %v, i64 %n) {{\nentry:\n  ret i64 1\n}}\n"
    bits, mask = row.bits, row.exponent
    exponent = lambda ir, x: ir.op("and", f"i{bits}", x, str(mask))     # noqa: E731
    return _all_of_ir(name, f"i{bits}", lambda ir, x: ir.op("icmp ne", f"i{bits}", exponent(ir, x), str(mask)))


# value type -> (i64 -> the type, the largest count the sum holds exactly): a view of the one dtype table
_COUNTED = {r.t: (r.from_i64, r.exact) for r in SCALARS.values() if r.from_i64}
