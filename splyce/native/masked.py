"""Products whose result lives on a sparse mask's positions, native code: O(work), never a dense result.

Masked SpGEMM ``M * (A @ B)`` (all CSR), one kernel in two orders: per row, the mask's columns are marked with
their output positions, then the row's Gustavson products ``A[i, k] * B[k, j]`` are accumulated where ``j`` is
marked and skipped elsewhere. Work: ``nnz(M) + flops(A @ B)``.

- scipy's order (the drop-in, :func:`masked_spgemm`): each entry is ``(sum over k in A's row order) *
  M[i, j]``, as scipy's ``(A @ B).multiply(M)``, bit for bit; zero results dropped.
- the sparsifier's order (the jit's ``(l @ l) * l``, :func:`masked_kept`): each term multiplied inside the sum
  in the einsum's operand order (``(x0 * x1) * x2``), added to a workspace entry that starts at +0.0 in the
  order of A's row; every mask position some term reached is stored (zero sums too), as the compiled MLIR
  kernel does.

SDDMM ``M * (X @ Y.T)`` is in sddmm.py, the masked sum ``einsum("ij,jk,ik->", A, B, C)`` (triangle counting)
in masked_sum.py and masked_sum_checked.py; its summing and counting kernels are modes of this module's one
definition, ``masked_ir``.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import (SCALARS, VALUE, add_to, define, each, index_bits as _bits, load_index, loop,
                                   ordered_product, run_chunks, run_taken)
from splyce.native.ir_text import supported  # noqa: F401  (``masked.supported``: the one table's)
from splyce.native.marked_row import marked_row
from splyce.native.masked_chunks import CHUNKS_PER_THREAD, masked_chunks, serial_max_work

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (mpos, mcrd, mval, apos, acrd, aval, bpos, bcrd, bval, lo, hi, mark, out, cols, ends[, reached]) -> entries kept
_SIG = {False: ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P, _P, _P),
        True: ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P, _P, _P, _P)}
_lock = threading.Lock()


def masked_ir(name, value, widths, mode="scipy", factors=None):
    """The one masked kernel over rows [lo, hi): per row the mask's row marked (``mark[j]`` = its position),
    then A's row times B's rows, each product whose column the mask holds (``marked_row``) used as ``mode``
    says. ``widths``: the index bits of the mask's and A's and B's positions and coordinates (mask first).

    - ``"scipy"``: masked SpGEMM in scipy's order, ``(sum over k of a * b) * m``, zero results dropped;
    - ``"kept"``: the sparsifier's, each term ``(x * y) * z`` in the einsum's operand order ``factors``
      (default ``"abm"``), summed from +0.0, every reached position stored (zero sums too), marked in
      ``%reached``; both compact each row's results to slot ``base + kept <= e`` as they go and return the count kept;
    - ``"sum"``: the masked sum ``sum over i, j, k of A[i, j] * B[j, k] * C[i, k]`` (C the mask, einsum
      ``"ij,jk,ik->"``) in the order the sparsifier's kernel for that einsum sums, loops i, j, k: rows i in
      order, A's row in stored order, then the k of B's row j that C's row i holds, in B's order; one
      accumulator from zero, each term ``(x * y) * z`` for ``factors = "xyz"`` of ``a``, ``b``, ``c`` (default
      ``"abc"``; the jit's triangle sum ``"ac,bc,ab->"`` is ``"cba"``) added to it, stored to ``out[0]``;
    - ``"count"``: the number of products ``"sum"`` adds (``out`` unused): when every value is one, the sum is
      that count, bit for bit (each addend exactly 1, each partial sum an integer, exact up to 2**53 / 2**24 in
      double / float; integers wrap alike). A hit is counted by an add of the compare's carry (``adc``), so the
      loop has no branch on it: on irregular rows a hit is a coin toss, and its misprediction cost more than
      the product (docs/corpus.md: 1.1-2.3x the summing loop, ~1.0x where hits are rare and predicted)."""
    mp, mc, ap, ac, bp, bc = widths
    t, mul, add, zero = VALUE[value]
    factors = factors or ("abc" if mode == "sum" else "abm")      # the einsum's own order by default
    mask = "c" if mode in ("sum", "count") else "m"
    arrays = "ab" + mask if mask == "c" else mask + "ab"
    params = (", ".join(f"ptr %{x}{f}" for x in arrays for f in ("pos", "crd", "val"))
              + ", i64 %lo, i64 %hi, ptr %mark, ptr %out"
              + {"scipy": ", ptr %cols, ptr %ends", "kept": ", ptr %cols, ptr %ends, ptr %reached"}.get(mode, ""))
    ir = define(name, params)
    kept = mode == "kept"
    if mode in ("scipy", "kept"):
        base = load_index(ir, "%mpos", mp, "%lo")     # the chunk's results are written compacted from here
    slot_type, slot_init = (t, zero) if mode == "sum" else ("i64", "0")
    ir(f"  %slot = alloca {slot_type}")
    ir(f"  store {slot_type} {slot_init}, ptr %slot")
    marked = ((f"%{mask}pos", mp), (f"%{mask}crd", mc))

    def clear(e):       # out[e] = +0.0 (the sparsifier's workspace too); not reached
        ir.store(t, zero, "%out", e)
        if kept:
            ir.store("i8", "0", "%reached", e)

    def hit(term, m):   # out[m] += term; reached[m] = 1
        if kept:        # the term in the einsum's operand order
            term = ordered_product(ir, mul, t, factors, {"a": term[0], "b": term[1], "m": ir.load(t, "%mval", m)})
        add_to(ir, t, add, ir.gep(t, "%out", m), term)
        if kept:
            ir.store("i8", "1", "%reached", m)

    def summed(ab, m):  # acc += the term, multiplied in the order of ``factors``
        add_to(ir, t, add, "%slot", ordered_product(ir, mul, t, factors,
                                                    {"a": ab[0], "b": ab[1], "c": ir.load(t, "%cval", m)}))

    def count(m, first, end):
        # a hit: mark[j] in [first, end), one unsigned compare (earlier rows' marks are below, unset ones -1).
        # The sum goes through an empty asm: else LLVM vectorizes the loop (16 and 4 lanes of scalar loads,
        # then a scalar tail), whose dispatch on B's row length cost more than it saved on short rows
        is_hit = ir.op("icmp ult", "i64", ir.op("sub", "i64", m, first, "off"), ir.op("sub", "i64", end, first, "span"))
        one, old, kept_ = ir.name("one"), ir.name("old"), ir.name("kept")
        ir(f"  {one} = zext i1 {is_hit} to i64")
        ir(f"  {old} = load i64, ptr %slot")
        ir(f'  {kept_} = call i64 asm "", "=r,0"(i64 {ir.op("add", "i64", old, one, "new")})')
        ir(f"  store i64 {kept_}, ptr %slot")

    def compact(e):
        # r (scipy: sum * M[i, j]) stored with its column at the next compacted slot base + kept <= e, which
        # later entries of the row no longer read; the slot advances when r != 0 (NaN kept), or (kept) when
        # the position was reached
        r = ir.load(t, "%out", e)
        if not kept:
            r = ir.op(mul, t, r, ir.load(t, "%mval", e))
        done, step = ir.name("kept"), ir.name("step")
        ir(f"  {done} = load i64, ptr %slot")
        slot = ir.op("add", "i64", base, done, "slot")
        ir.store(t, r, "%out", slot)
        ir.store(f"i{mc}", ir.load(f"i{mc}", "%mcrd", e), "%cols", slot)
        if kept:
            ir(f"  {step} = zext i8 {ir.load('i8', '%reached', e)} to i64")
        else:
            ir(f"  {step} = zext i1 {ir.op(SCALARS[value].nonzero, t, r, zero)} to i64")
        ir(f"  store i64 {ir.op('add', 'i64', done, step, 'kept')}, ptr %slot")

    def row(i):
        if mode == "count":
            marked_row(ir, i, "i64", "mul", marked, ap, ac, bp, bc, lambda e: None, None, count)
            return
        if mode == "sum":
            marked_row(ir, i, t, mul, marked, ap, ac, bp, bc, lambda e: None, summed, pair=True)
            return
        each(ir, *marked_row(ir, i, t, mul, marked, ap, ac, bp, bc, clear, hit, pair=kept), compact)
        row_end = ir.name("kept")
        ir(f"  {row_end} = load i64, ptr %slot")
        ir.store("i64", row_end, "%ends", ir.op("sub", "i64", i, "%lo", "off"))

    loop(ir, "%lo", "%hi", row, "exit")
    ir.label("exit")
    ir(f"  %total = load {slot_type}, ptr %slot")
    if mode == "sum":
        ir(f"  store {t} %total, ptr %out")
    ir(f"  ret i64 {'0' if mode == 'sum' else '%total'}")
    ir("}")
    return ir.text()


@functools.cache
def _masked(value, mp, mc, ap, ac, bp, bc, kept: bool = False, factors: str = "abm"):
    from splyce.native.codegen import compile_host_helpers

    name = (f"splyce_masked_kept_{VALUE[value][0]}_{mp}_{mc}_{ap}_{ac}_{bp}_{bc}_{factors}" if kept else
            f"splyce_masked_spgemm_{VALUE[value][0]}_{mp}_{mc}_{ap}_{ac}_{bp}_{bc}")
    text = masked_ir(name, value, (mp, mc, ap, ac, bp, bc), "kept" if kept else "scipy", factors)
    return compile_host_helpers(text, {name: _SIG[kept]})[name]


def _drop_zeros(vals, indices, indptr):
    """The mask's positions without the zero results (NaN != 0: kept)."""
    kept = np.count_nonzero(vals)
    if kept == len(vals):
        return vals, indices.copy(), indptr.copy()
    keep = vals != 0
    before = np.zeros(len(vals) + 1, dtype=np.int64)
    np.cumsum(keep, out=before[1:])
    return vals[keep], indices[keep], before[indptr].astype(indptr.dtype)


def masked_spgemm(m, a, b, n_cols: int, dtype, threads: int = 1):
    """``M * (A @ B)`` as CSR parts; ``m``, ``a``, ``b``: validated CSR parts ``(data, indices, indptr)``
    (columns of M in range ``[0, n_cols)``, unique within a row), values of ``dtype``. The kernel leaves out
    the zero results as it goes: each row chunk's kept entries compacted from the chunk's first mask position,
    with the kept count at each row's end."""
    return _run(m, a, b, n_cols, dtype, threads, False, "abm")


def masked_kept(m, a, b, n_cols: int, dtype, threads: int = 1, factors: str = "abm"):
    """The sparsifier's ``M * (A @ B)`` as CSR parts ``(data, indices, indptr)`` (indices of M's widths):
    the mask positions some term reached, each ``+0.0 + sum over k (in A's row order) of the terms``, a term
    multiplied in the order of ``factors`` (the roles A, B, M of the einsum's operands, in its order). ``m``,
    ``a``, ``b``: validated CSR parts, values of ``dtype``, M's columns unique per row, ascending."""
    return _run(m, a, b, n_cols, dtype, threads, True, factors)


def _run(m, a, b, n_cols: int, dtype, threads: int, kept: bool, factors: str):
    mv, mc, mp = m
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    vals = np.empty(len(mv), dtype=dtype)
    cols = np.empty(len(mv), dtype=mc.dtype)
    ends = np.empty(len(mp) - 1, dtype=np.int64)
    reached = np.empty(len(mv), dtype=np.uint8) if kept else None     # held until the kernel has run
    extra = (_address(reached),) if kept else ()
    with _lock:
        fn = _masked(dtype, _bits(mp), _bits(mc), _bits(ap), _bits(ac), _bits(bp), _bits(bc), kept, factors)

    def run(t, lo, hi, mark):
        # mark: the thread's own, reused by its chunks, which come in increasing row order (a mark left by an
        # earlier row is below the current row's first mask position, so it never reads as set)
        return fn(_address(mp), _address(mc), _address(mv), _address(ap), _address(ac), _address(av),
                  _address(bp), _address(bc), _address(bv), lo, hi, _address(mark), _address(vals),
                  _address(cols), _address(ends) + 8 * lo, *extra)

    chunks = masked_chunks(mp, ap, ac, bp, threads * CHUNKS_PER_THREAD if threads > 1 else 1, serial_max_work())
    kept_counts = run_taken(run, chunks, threads, lambda: np.full(n_cols, -1, dtype=np.int64))
    return _gather(vals, cols, ends, mp, chunks, kept_counts, threads)


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
