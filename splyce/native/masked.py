"""Products whose result lives on a sparse mask's positions, native code: O(work), never a dense result.

- Masked SpGEMM ``M * (A @ B)`` (all CSR): per row, the mask's columns are marked with their output
  positions, then the row's Gustavson products ``A[i, k] * B[k, j]`` are accumulated where ``j`` is marked and
  skipped elsewhere. Work: ``nnz(M) + flops(A @ B)``. Each kept entry is ``(sum over k in A's row order) *
  M[i, j]``, the order scipy's ``(A @ B).multiply(M)`` uses, so values match it bit for bit.
- the masked sum ``einsum("ij,jk,ik->", A, B, C)`` (triangle counting) in the sparsifier's order.

SDDMM ``M * (X @ Y.T)`` is in sddmm.py, the sparsifier's masked SpGEMM (the jit's) in masked_kept.py.

Results keep the mask's positions, without the entries that are zero (as scipy drops them).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native import ir_text
from splyce.native.array_objects import address as _address
from splyce.native.ir_text import IR, VALUE, load_index, loop, run_chunks, run_taken

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (mpos, mcrd, mval, apos, acrd, aval, bpos, bcrd, bval, lo, hi, mark, out, cols, ends) -> entries kept
_MASKED_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P, _P, _P)
# (apos, acrd, aval, bpos, bcrd, bval, cpos, ccrd, cval, lo, hi, mark, out)
_MASKED_SUM_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P)
_lock = threading.Lock()


def _marked_row(ir, i, t, mul, marked, ap, ac, bp, bc, mark_more, hit, each=None, pair=False):
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


def _masked_ir(name, value, mp, mc, ap, ac, bp, bc):
    t, mul, add, zero = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %mpos, ptr %mcrd, ptr %mval, ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, "
       f"ptr %bcrd, ptr %bval, i64 %lo, i64 %hi, ptr %mark, ptr %out, ptr %cols, ptr %ends) {{")
    ir.label("entry")
    base = load_index(ir, "%mpos", mp, "%lo")     # the chunk's results are written compacted from here
    ir("  %kept_slot = alloca i64")
    ir("  store i64 0, ptr %kept_slot")

    def row(i):
        def zero_out(e):     # out[e] = 0
            po = ir.name("po")
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {e}")
            ir(f"  store {t} {zero}, ptr {po}")

        def accumulate(prod, m):     # out[m] += prod
            po, old, new = ir.name("po"), ir.name("old"), ir.name("new")
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {m}")
            ir(f"  {old} = load {t}, ptr {po}")
            ir(f"  {new} = {add} {t} {old}, {prod}")
            ir(f"  store {t} {new}, ptr {po}")

        m_start, m_stop = _marked_row(ir, i, t, mul, (("%mpos", mp), ("%mcrd", mc)), ap, ac, bp, bc, zero_out,
                                      accumulate)

        def scale(e):
            # r = sum * M[i, j], stored (with its column) at the next compacted slot base + kept <= e, which
            # later entries of the row no longer read; the slot advances only when r != 0 (NaN kept)
            po, s, pm, mv, r = (ir.name(n) for n in ("po", "s", "pmv", "mv", "r"))
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {e}")
            ir(f"  {s} = load {t}, ptr {po}")
            ir(f"  {pm} = getelementptr {t}, ptr %mval, i64 {e}")
            ir(f"  {mv} = load {t}, ptr {pm}")
            ir(f"  {r} = {mul} {t} {s}, {mv}")
            kept, slot, pw, pc, nz, step, kept1 = (ir.name(n) for n in ("kept", "slot", "pw", "pc", "nz", "step",
                                                                         "kept"))
            ir(f"  {kept} = load i64, ptr %kept_slot")
            ir(f"  {slot} = add i64 {base}, {kept}")
            ir(f"  {pw} = getelementptr {t}, ptr %out, i64 {slot}")
            ir(f"  store {t} {r}, ptr {pw}")
            j = ir.name("j")
            ir(f"  {j} = getelementptr i{mc}, ptr %mcrd, i64 {e}")
            col = ir.name("col")
            ir(f"  {col} = load i{mc}, ptr {j}")
            ir(f"  {pc} = getelementptr i{mc}, ptr %cols, i64 {slot}")
            ir(f"  store i{mc} {col}, ptr {pc}")
            ir(f"  {nz} = {'fcmp une' if t in ('double', 'float') else 'icmp ne'} {t} {r}, {zero}")
            ir(f"  {step} = zext i1 {nz} to i64")
            ir(f"  {kept1} = add i64 {kept}, {step}")
            ir(f"  store i64 {kept1}, ptr %kept_slot")

        after_s = ir.name("scaled")[1:]
        loop(ir, m_start, m_stop, scale, after_s)
        ir.label(after_s)
        row_end, off, pe = ir.name("kept"), ir.name("off"), ir.name("pe")
        ir(f"  {row_end} = load i64, ptr %kept_slot")
        ir(f"  {off} = sub i64 {i}, %lo")
        ir(f"  {pe} = getelementptr i64, ptr %ends, i64 {off}")
        ir(f"  store i64 {row_end}, ptr {pe}")

    loop(ir, "%lo", "%hi", row, "exit")
    ir.label("exit")
    ir("  %kept_all = load i64, ptr %kept_slot")
    ir("  ret i64 %kept_all")
    ir("}")
    return "\n".join(ir.lines) + "\n"


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
    ir(f"define i64 @{name}(ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, ptr %bcrd, ptr %bval, ptr %cpos, "
       f"ptr %ccrd, ptr %cval, i64 %lo, i64 %hi, ptr %mark, ptr %out) {{")
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

        _marked_row(ir, i, t, mul, (("%cpos", cp), ("%ccrd", cc)), ap, ac, bp, bc, lambda e: None, add_times_c,
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
    ir(f"define i64 @{name}(ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, ptr %bcrd, ptr %bval, ptr %cpos, "
       f"ptr %ccrd, ptr %cval, i64 %lo, i64 %hi, ptr %mark, ptr %out) {{")
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

    loop(ir, "%lo", "%hi", lambda i: _marked_row(ir, i, "i64", "mul", (("%cpos", bits), ("%ccrd", bits)), bits,
                                                 bits, bits, bits, lambda e: None, None, count), "exit")
    ir.label("exit")
    ir("  %count = load i64, ptr %count_slot")
    ir("  ret i64 %count")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _bits(a: np.ndarray) -> int:
    return a.dtype.itemsize * 8


@functools.cache
def _masked(value, mp, mc, ap, ac, bp, bc):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_spgemm_{VALUE[value][0]}_{mp}_{mc}_{ap}_{ac}_{bp}_{bc}"
    return compile_host_helpers(_masked_ir(name, value, mp, mc, ap, ac, bp, bc), {name: _MASKED_SIG})[name]


@functools.cache
def _masked_sum(value, ap, ac, bp, bc, cp, cc, factors="abc"):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_sum_{VALUE[value][0]}_{ap}_{ac}_{bp}_{bc}_{cp}_{cc}" + ("" if factors == "abc" else f"_{factors}")
    return compile_host_helpers(_masked_sum_ir(name, value, ap, ac, bp, bc, cp, cc, factors),
                                {name: _MASKED_SUM_SIG})[name]


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


def _drop_zeros(vals, indices, indptr):
    """The mask's positions without the zero results (NaN != 0: kept)."""
    kept = np.count_nonzero(vals)
    if kept == len(vals):
        return vals, indices.copy(), indptr.copy()
    keep = vals != 0
    before = np.zeros(len(vals) + 1, dtype=np.int64)
    np.cumsum(keep, out=before[1:])
    return vals[keep], indices[keep], before[indptr].astype(indptr.dtype)


SAMPLE_ROWS = 2048      # rows whose products are counted to balance masked SpGEMM's chunks
# chunks per thread, each thread taking the next one left: rows of equal counted work still differ in cost
# (cache misses on far rows: ba-100k's two halves took 2.7 and 5.0 ms CPU)
CHUNKS_PER_THREAD = 4


def serial_max_work() -> int:
    """Masked work (mask entries plus products) below which ``threads`` > 1 still runs one chunk on the
    calling thread, where handing chunks to a thread and the chunking itself cost more than they save:
    2^20 items, 0.4-0.7 ms of one thread on Zen 4/5 (0.4-0.6 ns per item; on Zen 1 ba-4k and fem2d-3k were
    2.5-3x slower on two threads). At 8 * MIN_CHUNK (2^18, set on Zen 1) pyamg-ldg-diffusion's 0.31M items
    (0.18 ms on one thread) went to 8 chunks on two threads: 0.53 ms."""
    return 32 * ir_text.MIN_CHUNK


def small_masked_work(mask_entries: int, ac, bp, min_work: int) -> bool:
    """Whether masked work (``mask_entries`` plus the products: ``len(B[k])`` for each column ``k`` in
    ``ac``) is surely below ``min_work``, for a small A only: bounded by B's longest row (a max over B's row
    starts, no gather), else counted exactly. ``ac``'s values must lie in ``[0, len(bp) - 1)``; ``bp`` need
    not be checked (a bad one only misjudges the size)."""
    if len(ac) * 8 > min_work:
        return False
    lengths = np.diff(bp)
    if len(ac) * max(int(lengths.max(initial=0)), 8) + mask_entries < min_work:
        return True
    return int(np.bincount(ac, minlength=len(lengths)) @ lengths) + mask_entries < min_work


def masked_chunks(mp, ap, ac, bp, threads: int, min_work: int = 0) -> list[tuple[int, int]]:
    """Row chunks of masked SpGEMM with about equal work: mask entries plus products (``len(B[k])`` for each
    ``A[i, k]``). Rows of power-law matrices differ by orders of magnitude in products, so balancing the mask's
    entries alone leaves one thread with most of the work. Products are counted exactly on up to
    ``SAMPLE_ROWS`` evenly spaced rows (all rows of smaller matrices), each standing for the rows up to the
    next: a pass over a small part of A, not all of it. Balance only: any split gives the same result. One
    chunk when that estimate of the work is below ``min_work``."""
    m = len(mp) - 1
    if threads <= 1 or m < 2:
        return [(0, max(m, 0))]
    if small_masked_work(int(mp[-1]), ac, bp, min_work):
        return [(0, m)]             # cheaper than sampling rows
    stride = max(1, m // SAMPLE_ROWS)
    rows = np.arange(0, m, stride)
    starts, lengths = ap[rows].astype(np.int64), (ap[rows + 1] - ap[rows]).astype(np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    entries = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    ks = ac[entries]
    cumulative = np.zeros(len(entries) + 1, dtype=np.int64)
    np.cumsum(bp[ks + 1] - bp[ks], out=cumulative[1:])
    block_products = (cumulative[offsets[1:]] - cumulative[offsets[:-1]]) * np.diff(np.append(rows, m))
    at = np.append(rows, m)                                  # block k: rows [at[k], at[k + 1])
    work = np.zeros(len(at), dtype=np.int64)
    np.cumsum(block_products, out=work[1:])
    work += mp[at]
    if work[-1] < min_work:
        return [(0, m)]
    inner = at[np.searchsorted(work, work[-1] * np.arange(1, threads) / threads, side="left")].tolist()
    bounds = sorted(set([0, *inner, m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def masked_spgemm(m, a, b, n_cols: int, dtype, threads: int = 1):
    """``M * (A @ B)`` as CSR parts; ``m``, ``a``, ``b``: validated CSR parts ``(data, indices, indptr)``
    (columns of M in range ``[0, n_cols)``, unique within a row), values of ``dtype``. The kernel leaves out
    the zero results as it goes: each row chunk's kept entries compacted from the chunk's first mask position,
    with the kept count at each row's end."""
    mv, mc, mp = m
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    vals = np.empty(len(mv), dtype=dtype)
    cols = np.empty(len(mv), dtype=mc.dtype)
    ends = np.empty(len(mp) - 1, dtype=np.int64)
    with _lock:
        fn = _masked(dtype, _bits(mp), _bits(mc), _bits(ap), _bits(ac), _bits(bp), _bits(bc))

    def run(t, lo, hi, mark):
        # mark: the thread's own, reused by its chunks, which come in increasing row order (a mark left by an
        # earlier row is below the current row's first mask position, so it never reads as set)
        return fn(_address(mp), _address(mc), _address(mv), _address(ap), _address(ac), _address(av),
                  _address(bp), _address(bc), _address(bv), lo, hi, _address(mark), _address(vals),
                  _address(cols), _address(ends) + 8 * lo)

    chunks = masked_chunks(mp, ap, ac, bp, threads * CHUNKS_PER_THREAD if threads > 1 else 1, serial_max_work())
    kept = run_taken(run, chunks, threads, lambda: np.full(n_cols, -1, dtype=np.int64))
    return _gather(vals, cols, ends, mp, chunks, kept, threads)


def _gather(vals, cols, ends, mp, chunks, kept, threads: int = 1):
    """CSR parts from the compacted chunks: each chunk's ``kept`` entries from ``mp[lo]``, ``ends`` counted
    from the chunk's start. The chunks are moved down in the buffers to close the gaps between them (kept
    entries only) and the buffers shrunk in place (no concatenation); ``indptr`` (a pass over the rows) is
    written by ``threads`` threads, each for its share of the rows."""
    indptr = np.empty(len(mp), dtype=mp.dtype)
    indptr[0] = 0
    if len(chunks) == 1:
        vals.resize(kept[0], refcheck=False)
        cols.resize(kept[0], refcheck=False)
        indptr[1:] = ends
        return vals, cols, indptr
    offsets, offset = [], 0
    for (lo, hi), k in zip(chunks, kept):
        start = int(mp[lo])
        if offset != start:      # close the gap left by the chunks before (a move down: numpy handles overlap)
            vals[offset:offset + k] = vals[start:start + k]
            cols[offset:offset + k] = cols[start:start + k]
        offsets.append(offset)
        offset += k

    def row_ends(t, r0, r1):
        for (lo, hi), at in zip(chunks, offsets):
            a, b = max(lo, r0), min(hi, r1)
            if b > a:
                np.add(ends[a:b], at, out=indptr[a + 1:b + 1], casting="unsafe")

    m = len(mp) - 1
    run_chunks(row_ends, [(m * t // threads, m * (t + 1) // threads) for t in range(threads)], threads)
    vals.resize(offset, refcheck=False)
    cols.resize(offset, refcheck=False)
    return vals, cols, indptr


def masked_sum(a, b, c, n_cols: int, dtype, threads: int = 1, with_proof: bool = False, factors: str = "abc",
               count_ones: bool = False):
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
    hits when every value is one (``_counted_sum``; the drop-in's one-thread fast path does so itself)."""
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
    if hits > _COUNTED[t][2]:
        return None
    return np.array(hits, dtype=np.int64).astype(dtype)[()]

# The whole one-thread triangle sum in one native call, for the drop-in's fast path: each distinct operand
# checked canonical (as ``native_validation.canonical_csr``). Then, when A's first value is one, the hits of
# a sample (the first max(min(m, 64), m / 16) rows) are counted (``_hit_count_ir``) against the sample's
# products: when under 1 in HIT_SAMPLE_RATE of them hit, a hit is rare and predicted, the summing loop's
# branch costs nothing, and it runs over all rows (ba-100k, road graphs: the count was 0.9x there); else, when
# every value of the operands is one (the 0/1 pattern of triangle counting), the count goes on from the
# sample's end (the marks stay valid: rows in increasing order), which is the sum when the value type holds it
# exactly (up to 2**53 in double, 2**24 in float); otherwise the summing loop. The marks are set to -1 before
# each loop over rows from 0. Returns 0, or 1 when an operand is not canonical (the caller's general path
# words it; after a sample only the sample's marks are set back), or 2 when the summing loop ran and a value is
# NaN or Inf (the general path applies NumPy's rule for them, ``planner.nonfinite``; a count needs no scan).
# ``%checks``: bit 0 set to check B, bit 1 to check C (unset for an operand that is A or B itself:
# its checks and its scan for ones are A's).
_SUM_CHECKED = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                   ptr %mark, ptr %out, i64 %m, i64 %n1, i64 %n2, i64 %nnza, i64 %nnzb, i64 %nnzc, i64 %checks) {{
entry:
  %ra = call i64 @{check}_canonical(ptr %ap, ptr %ac, i64 %m, i64 %n1, i64 %nnza)
  %bad_a = icmp ne i64 %ra, 0
  br i1 %bad_a, label %fail, label %test_b
{check_b}{check_c}first:
  %has = icmp sgt i64 %nnza, 0
  %n_first = zext i1 %has to i64
  %o1 = call i64 @{name}_ones(ptr %av, i64 %n_first)
  %one_first = icmp ne i64 %o1, 0
  %try = and i1 %has, %one_first
  br i1 %try, label %sample, label %sum
sample:
  call void @{name}_unmark(ptr %mark, i64 %n2)
  %small = icmp slt i64 %m, 64
  %least = select i1 %small, i64 %m, i64 64
  %sixteenth = lshr i64 %m, 4
  %big = icmp sgt i64 %sixteenth, %least
  %srows = select i1 %big, i64 %sixteenth, i64 %least
  %shits = call i64 @{count}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                             i64 0, i64 %srows, ptr %mark, ptr %out)
  %sprod = call i64 @{name}_products(ptr %ap, ptr %ac, ptr %bp, i64 %srows)
  %scaled = mul i64 %shits, {rate}
  %rare = icmp ult i64 %scaled, %sprod
  br i1 %rare, label %resum, label %ones
resum:
  call void @{name}_unmark_rows(ptr %cp, ptr %cc, ptr %mark, i64 %srows)
  br label %summing
ones:
  %oa = call i64 @{name}_ones(ptr %av, i64 %nnza)
  %nb = select i1 %skip_b, i64 0, i64 %nnzb
  %ob = call i64 @{name}_ones(ptr %bv, i64 %nb)
  %nc = select i1 %skip_c, i64 0, i64 %nnzc
  %oc = call i64 @{name}_ones(ptr %cv, i64 %nc)
  %oab = and i64 %oa, %ob
  %oabc = and i64 %oab, %oc
  %all_ones = icmp ne i64 %oabc, 0
  br i1 %all_ones, label %count, label %sum
count:
  %rhits = call i64 @{count}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                             i64 %srows, i64 %m, ptr %mark, ptr %out)
  %hits = add i64 %shits, %rhits
  %exact = icmp ule i64 %hits, {exact}
  br i1 %exact, label %counted, label %sum
counted:
  %total = {convert} i64 %hits to {t}
  store {t} %total, ptr %out
  ret i64 0
sum:
  call void @{name}_unmark(ptr %mark, i64 %n2)
  br label %summing
summing:
  %r = call i64 @{sum}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                       i64 0, i64 %m, ptr %mark, ptr %out)
  %fa = call i64 @{name}_finite(ptr %av, i64 %nnza)
  %fnb = select i1 %skip_b, i64 0, i64 %nnzb
  %fb = call i64 @{name}_finite(ptr %bv, i64 %fnb)
  %fnc = select i1 %skip_c, i64 0, i64 %nnzc
  %fc = call i64 @{name}_finite(ptr %cv, i64 %fnc)
  %fab = and i64 %fa, %fb
  %fabc = and i64 %fab, %fc
  %finite = icmp ne i64 %fabc, 0
  %code = select i1 %finite, i64 0, i64 2
  ret i64 %code
fail:
  ret i64 1
}}

define void @{name}_unmark(ptr %mark, i64 %n) {{
entry:
  br label %head
head:
  %j = phi i64 [0, %entry], [%j1, %body]
  %more = icmp slt i64 %j, %n
  br i1 %more, label %body, label %done
body:
  %pm = getelementptr i64, ptr %mark, i64 %j
  store i64 -1, ptr %pm
  %j1 = add i64 %j, 1
  br label %head
done:
  ret void
}}

"""
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


def _unmark_rows_ir(name, bits):
    """``void name(ptr cpos, ptr ccrd, ptr mark, i64 rows)``: the marks C's first ``rows`` rows set back to -1
    (after a sample, instead of all n of them: road-700's 490k marks are 3.9 MB)."""
    ir = IR()
    ir(f"define void @{name}(ptr %cpos, ptr %ccrd, ptr %mark, i64 %rows) {{")
    ir.label("entry")
    end = load_index(ir, "%cpos", bits, "%rows")

    def entry(e):
        j, pm = load_index(ir, "%ccrd", bits, e), ir.name("pm")
        ir(f"  {pm} = getelementptr i64, ptr %mark, i64 {j}")
        ir(f"  store i64 -1, ptr {pm}")

    loop(ir, "0", end, entry, "exit")
    ir.label("exit")
    ir("  ret void")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _all_of_ir(name, elem, test):
    """``i64 name(ptr v, i64 n)``: 1 when ``test`` (IR lines computing ``%ok`` from the element ``%x`` of type
    ``elem``) holds for each of the ``n`` values at ``v``, else 0 (no early exit: the loop vectorizes)."""
    return f"""
define i64 @{name}(ptr %v, i64 %n) {{
entry:
  br label %head
head:
  %k = phi i64 [0, %entry], [%k1, %body]
  %all = phi i1 [true, %entry], [%all1, %body]
  %more = icmp slt i64 %k, %n
  br i1 %more, label %body, label %done
body:
  %pv = getelementptr {elem}, ptr %v, i64 %k
  %x = load {elem}, ptr %pv
{test}
  %all1 = and i1 %all, %ok
  %k1 = add i64 %k, 1
  br label %head
done:
  %r = zext i1 %all to i64
  ret i64 %r
}}
"""


def _ones_ir(name, value):
    """``i64 name(ptr v, i64 n)``: whether each of the ``n`` values at ``v`` is one."""
    t = VALUE[value][0]
    return _all_of_ir(name, t, f"  %ok = {_COUNTED[t][0]}")


def _finite_ir(name, value):
    """``i64 name(ptr v, i64 n)``: whether each of the ``n`` values at ``v`` is finite (its exponent bits not
    all set, read as an integer; integers always are)."""
    t = VALUE[value][0]
    if t not in _EXPONENT:
        return f"define i64 @{name}(ptr %v, i64 %n) {{\nentry:\n  ret i64 1\n}}\n"
    bits, mask = _EXPONENT[t]
    return _all_of_ir(name, f"i{bits}", f"  %e = and i{bits} %x, {mask}\n  %ok = icmp ne i{bits} %e, {mask}")


_EXPONENT = {"double": (64, 0x7FF0000000000000), "float": (32, 0x7F800000)}


# B's or C's check (``x``: b / c), unless its bit of ``%checks`` is clear; then to block ``next``
_CHECK_OPERAND = """test_{x}:
  %w{x} = and i64 %checks, {bit}
  %skip_{x} = icmp eq i64 %w{x}, 0
  br i1 %skip_{x}, label %{next}, label %check_{x}
check_{x}:
  %r{x} = call i64 @{check}_canonical(ptr %{x}p, ptr %{x}c, i64 %{rows}, i64 %n2, i64 %nnz{x})
  %bad_{x} = icmp ne i64 %r{x}, 0
  br i1 %bad_{x}, label %fail, label %{next}
"""
# value type -> (the compare of %x with one, i64 -> the type, the largest count the sum holds exactly)
_COUNTED = {"double": ("fcmp oeq double %x, 1.0", "sitofp", 2**53), "float": ("fcmp oeq float %x, 1.0", "sitofp", 2**24),
            "i64": ("icmp eq i64 %x, 1", "bitcast", 2**63 - 1), "i32": ("icmp eq i32 %x, 1", "trunc", 2**63 - 1)}


@functools.cache
def _sum_checked_kernel(value: np.dtype, bits: int, exact: int | None = None):
    """The entry of ``_SUM_CHECKED`` on array objects; ``exact``: the largest count taken as the sum (default:
    the value type's; tests lower it to reach the summing fallback)."""
    from splyce.native import array_objects, validation as native_validation
    from splyce.native.codegen import compile_host_helpers

    t = VALUE[value][0]
    name = f"splyce_masked_sum_checked_{t}_i{bits}"
    check, total, count = name + "_check", name + "_rows", name + "_count"
    _, convert, type_exact = _COUNTED[t]
    exact = type_exact if exact is None else exact
    text = (native_validation.canonical_check_ir(check, bits)
            + _masked_sum_ir(total, value, *([bits] * 6))
            + _hit_count_ir(count, bits)
            + _products_ir(name + "_products", bits)
            + _unmark_rows_ir(name + "_unmark_rows", bits)
            + _ones_ir(name + "_ones", value)
            + _finite_ir(name + "_finite", value)
            + _SUM_CHECKED.format(name=name, check=check, sum=total, count=count, t=t,
                                  convert=convert, exact=exact,
                                  check_b=_CHECK_OPERAND.format(x="b", bit=1, next="test_c", rows="n1", check=check),
                                  check_c=_CHECK_OPERAND.format(x="c", bit=2, next="first", rows="m", check=check),
                                  rate=HIT_SAMPLE_RATE)
            + array_objects.object_entry_ir(name + "_objects", name, "a" * 11 + "i" * 7))
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(18)})[name + "_objects"]


_sum_checked: dict = {}     # (value dtype, index dtype) -> the compiled entry (looked up per call: no lock)


def masked_sum_checked(a, b, c, m: int, n1: int, n2: int, check_b: bool, check_c: bool):
    """``masked_sum`` on one thread for CSR parts ``(data, indices, indptr)`` of A (m x n1), B (n1 x n2) and
    C (m x n2) that are not validated yet: one native call checks each operand canonical (``check_b`` /
    ``check_c`` False for an operand that is A or B itself), then sums. Values of one dtype the native kernels
    compute in, index arrays of one dtype (int32 / int64), all 1-D C-contiguous, lengths consistent, the
    sizes fitting the index dtype, ``array_objects.DATA_OFFSET`` confirmed. Returns the sum (a NumPy scalar,
    as ``masked_sum``), or None when an operand is not canonical or a value is not finite."""
    av, ac, ap = a
    bv, bc, bp = b
    cv, cc, cp = c
    key = (av.dtype, ac.dtype)
    fn = _sum_checked.get(key)
    if fn is None:
        with _lock:
            fn = _sum_checked[key] = _sum_checked_kernel(av.dtype, ac.dtype.itemsize * 8)
    mark = np.empty(n2, dtype=np.int64)
    out = np.empty(1, dtype=av.dtype)
    if fn(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cp), id(cc), id(cv), id(mark), id(out), m, n1, n2,
          len(ac), len(bc), len(cc), check_b | (check_c << 1)):
        return None          # not canonical, or a value NaN / Inf: the general path words it / applies the rule
    return out[0]
