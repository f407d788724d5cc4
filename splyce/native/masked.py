"""Products whose result lives on a sparse mask's positions, native code: O(work), never a dense result.

- Masked SpGEMM ``M * (A @ B)`` (all CSR): per row, the mask's columns are marked with their output
  positions, then the row's Gustavson products ``A[i, k] * B[k, j]`` are accumulated where ``j`` is marked and
  skipped elsewhere. Work: ``nnz(M) + flops(A @ B)``. Each kept entry is ``(sum over k in A's row order) *
  M[i, j]``, the order scipy's ``(A @ B).multiply(M)`` uses, so values match it bit for bit.

SDDMM ``M * (X @ Y.T)`` is in sddmm.py, the sparsifier's masked SpGEMM (the jit's) in masked_kept.py, the masked
sum ``einsum("ij,jk,ik->", A, B, C)`` (triangle counting) in masked_sum.py and masked_sum_checked.py.

Results keep the mask's positions, without the entries that are zero (as scipy drops them).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import IR, VALUE, load_index, loop, run_chunks, run_taken, index_bits as _bits
from splyce.native.marked_row import marked_row
from splyce.native.masked_chunks import CHUNKS_PER_THREAD, masked_chunks, serial_max_work

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (mpos, mcrd, mval, apos, acrd, aval, bpos, bcrd, bval, lo, hi, mark, out, cols, ends) -> entries kept
_MASKED_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P, _P, _P)
_lock = threading.Lock()


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

        m_start, m_stop = marked_row(ir, i, t, mul, (("%mpos", mp), ("%mcrd", mc)), ap, ac, bp, bc, zero_out,
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


@functools.cache
def _masked(value, mp, mc, ap, ac, bp, bc):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_spgemm_{VALUE[value][0]}_{mp}_{mc}_{ap}_{ac}_{bp}_{bc}"
    return compile_host_helpers(_masked_ir(name, value, mp, mc, ap, ac, bp, bc), {name: _MASKED_SIG})[name]


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
