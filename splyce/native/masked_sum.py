"""The masked sum ``einsum("ij,jk,ik->", A, B, C)`` (triangle counting with A = B = C = L) on the native kernel
library, summed in the sparsifier kernel's order, bit for bit; on several threads, rows in chunks of about
equal work. When every value is one (a 0/1 pattern), the sum is the count of products, which a branch-free
kernel counts. Both kernels are modes of ``masked.masked_ir`` ("sum", "count"). The drop-in's and the jit's
one-call form of it is masked_sum_checked.py."""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import SCALARS, VALUE, counted, define, index_bits as _bits, load_index, run_taken, segment
from splyce.native.masked import masked_ir
from splyce.native.masked_chunks import CHUNKS_PER_THREAD, masked_chunks, serial_max_work

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (apos, acrd, aval, bpos, bcrd, bval, cpos, ccrd, cval, lo, hi, mark, out)
_MASKED_SUM_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P)
# the parameters of the summing and the counting kernel (``_MASKED_SUM_SIG``)
_PARAMS = ("(ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, ptr %bcrd, ptr %bval, ptr %cpos, ptr %ccrd, ptr %cval, "
           "i64 %lo, i64 %hi, ptr %mark, ptr %out)")
_lock = threading.Lock()


@functools.cache
def _masked_sum(value, ap, ac, bp, bc, cp, cc, factors="abc"):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_sum_{VALUE[value][0]}_{ap}_{ac}_{bp}_{bc}_{cp}_{cc}" + ("" if factors == "abc" else f"_{factors}")
    return compile_host_helpers(masked_ir(name, value, (cp, cc, ap, ac, bp, bc), "sum", factors),
                                {name: _MASKED_SUM_SIG})[name]


def masked_sum(a, b, c, n_cols: int, dtype, threads: int = 1, with_proof: bool = False, factors: str = "abc",
               count_ones: bool = False, exact_only: bool = False):
    """``einsum("ij,jk,ik->", A, B, C)``, summed in the sparsifier kernel's order (``masked.masked_ir``, "sum"): a
    NumPy scalar of ``dtype``. ``a``, ``b``, ``c``: validated CSR parts ``(data, indices, indptr)`` with
    values of ``dtype`` (columns of B and C in ``[0, n_cols)``, C's unique within a row). Work: ``nnz(C) + sum
    over A's entries (i, j) of nnz(B[j, :])``. ``threads`` > 1: rows in chunks of about equal work
    (``masked_chunks``, 4 per thread, each thread taking the next one left, one mark array per thread), each
    summed from zero; the partial sums added in chunk order (a float sum reassociated, as the compiled kernel's
    split reduction does; exact for integers and integer-valued floats). ``with_proof``: returns ``(sum,
    finite)``, ``finite`` True when every value is finite: proved by the count (every value one) or by a scan
    of the values run beside the chunks (``planner.nonfinite`` needs no pass of its own then). ``factors``: the
    order of each term's multiplications (``masked.masked_ir``). ``count_ones``: on one thread too, count the
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
    """``i64 (ptr v, i64 n)``: whether the ``n`` values at ``v`` are all finite (``finite_ir``)."""
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_finite_{VALUE[value][0]}"
    return compile_host_helpers(finite_ir(name, value), {name: _COUNT_SIG})[name]



_COUNT_SIG = ctypes.CFUNCTYPE(_I, _P, _I)           # (values, n) -> all ones; and the products' (below)
_PRODUCTS_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _I)


@functools.cache
def _counting(value, bits):
    """(hit count of rows ``[lo, hi)``, products of the first rows, all-ones test) for one index width."""
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_count_{VALUE[value][0]}_i{bits}"
    text = (masked_ir(name, value, (bits,) * 6, "count") + products_ir(name + "_products", bits)
            + ones_ir(name + "_ones", value))
    fns = compile_host_helpers(text, {name: _MASKED_SUM_SIG, name + "_products": _PRODUCTS_SIG,
                                      name + "_ones": _COUNT_SIG})
    return fns[name], fns[name + "_products"], fns[name + "_ones"]


def _counted_sum(a, b, c, n_cols: int, dtype: np.dtype, chunks, threads: int, summed):
    """``masked_sum`` over several chunks as the one-thread ``masked_sum_checked`` does it when every value is
    one (triangle counting): the hits counted by the branch-free ``masked.masked_ir``'s count instead of summed by the
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


def products_ir(name, bits):
    """``i64 name(ptr apos, ptr acrd, ptr bpos, i64 rows)``: the products of A's first ``rows`` rows, the sum
    over their entries (i, k) of B's row length (the sample's work for the hit rate)."""
    ir = define(name, "ptr %apos, ptr %acrd, ptr %bpos, i64 %rows")

    def entry(e, total):
        start, stop = segment(ir, "%bpos", bits, load_index(ir, "%acrd", bits, e))
        return (ir.op("add", "i64", total, ir.op("sub", "i64", stop, start, "len"), "total"),)

    (total,) = counted(ir, "0", load_index(ir, "%apos", bits, "%rows"), entry, carried=(("i64", "0"),), base="e")
    ir(f"  ret i64 {total}")
    ir("}")
    return ir.text()


def _all_of_ir(name, elem, test):
    """``i64 name(ptr v, i64 n)``: 1 when ``test(ir, x)`` (the i1 it computes from the element ``x`` of type
    ``elem``) holds for each of the ``n`` values at ``v``, else 0 (no early exit: the loop vectorizes)."""
    ir = define(name, "ptr %v, i64 %n")
    (all_,) = counted(ir, "0", "%n", lambda k, so_far: (ir.op("and", "i1", so_far, test(ir, ir.load(elem, "%v", k))),),
                      carried=(("i1", "true"),), base="k")
    r = ir.name("r")
    ir(f"  {r} = zext i1 {all_} to i64")
    ir(f"  ret i64 {r}")
    ir("}")
    return ir.text()


def ones_ir(name, value):
    """``i64 name(ptr v, i64 n)``: whether each of the ``n`` values at ``v`` is one."""
    row = SCALARS[value]
    return _all_of_ir(name, row.t, lambda ir, x: ir.op(row.eq, row.t, x, row.one))


def finite_ir(name, value):
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
