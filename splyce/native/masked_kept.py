"""Masked SpGEMM with the sparsifier's result: the jit's ``(l @ l) * l`` (einsum ``"ac,cb,ab->ab"``, loops
a, c, b) on the native kernel library, bit for bit the compiled MLIR kernel's.

The drop-in's masked product (:func:`splyce.native.masked.masked_spgemm`) follows scipy: ``(sum over k of
A[i, k] B[k, j]) * M[i, j]``, zero results dropped. The sparsifier's kernel multiplies inside the sum, in the
einsum's operand order (``(x0 * x1) * x2``), adds each term to a workspace entry that starts at +0.0, in the
order of A's row, and stores every mask position some term reached (zero sums too), columns ascending (the
mask's order). This kernel does the same: the mask's row is marked (``mark[j]`` = its position), each hit adds
its term to ``out[e]`` and sets ``reached[e]``; the row is then compacted to its reached entries.
Work: ``nnz(M) + flops(A @ B)``, as the drop-in's.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import IR, VALUE, load_index, loop, index_bits as _bits
from splyce.native.marked_row import marked_row
from splyce.native.masked import _gather
from splyce.native.masked_chunks import CHUNKS_PER_THREAD, masked_chunks, serial_max_work
from splyce.native.ir_text import run_taken

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (mpos, mcrd, mval, apos, acrd, aval, bpos, bcrd, bval, lo, hi, mark, out, cols, ends, reached) -> entries kept
_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 9), _I, _I, _P, _P, _P, _P, _P)
_lock = threading.Lock()


def _kept_ir(name, value, mp, mc, ap, ac, bp, bc, factors):
    """``factors``: the operands' roles in the einsum's order (``"abm"``: ``(A * B) * M``)."""
    t, mul, add, zero = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %mpos, ptr %mcrd, ptr %mval, ptr %apos, ptr %acrd, ptr %aval, ptr %bpos, "
       f"ptr %bcrd, ptr %bval, i64 %lo, i64 %hi, ptr %mark, ptr %out, ptr %cols, ptr %ends, ptr %reached) {{")
    ir.label("entry")
    base = load_index(ir, "%mpos", mp, "%lo")     # the chunk's results are written compacted from here
    ir("  %kept_slot = alloca i64")
    ir("  store i64 0, ptr %kept_slot")

    def row(i):
        def clear(e):       # out[e] = +0.0 (the sparsifier's workspace), not reached
            po, pr = ir.name("po"), ir.name("pr")
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {e}")
            ir(f"  store {t} {zero}, ptr {po}")
            ir(f"  {pr} = getelementptr i8, ptr %reached, i64 {e}")
            ir(f"  store i8 0, ptr {pr}")

        def hit(pair, m):   # out[m] += (x * y) * z in the einsum's operand order; reached[m] = 1
            pm, mv, xy, p, po, old, new, pr = (ir.name(n) for n in ("pm", "mv", "xy", "p", "po", "old", "new", "pr"))
            ir(f"  {pm} = getelementptr {t}, ptr %mval, i64 {m}")
            ir(f"  {mv} = load {t}, ptr {pm}")
            value_of = {"a": pair[0], "b": pair[1], "m": mv}
            x, y, z = (value_of[f] for f in factors)
            ir(f"  {xy} = {mul} {t} {x}, {y}")
            ir(f"  {p} = {mul} {t} {xy}, {z}")
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {m}")
            ir(f"  {old} = load {t}, ptr {po}")
            ir(f"  {new} = {add} {t} {old}, {p}")
            ir(f"  store {t} {new}, ptr {po}")
            ir(f"  {pr} = getelementptr i8, ptr %reached, i64 {m}")
            ir(f"  store i8 1, ptr {pr}")

        m_start, m_stop = marked_row(ir, i, t, mul, (("%mpos", mp), ("%mcrd", mc)), ap, ac, bp, bc, clear, hit,
                                      pair=True)

        def compact(e):     # entry e to slot base + kept <= e (later entries no longer read it); kept += reached
            po, s, kept, slot, pw, pj, col, pc, pr, r, step, kept1 = (ir.name(n) for n in (
                "po", "s", "kept", "slot", "pw", "pj", "col", "pc", "pr", "r", "step", "kept"))
            ir(f"  {po} = getelementptr {t}, ptr %out, i64 {e}")
            ir(f"  {s} = load {t}, ptr {po}")
            ir(f"  {kept} = load i64, ptr %kept_slot")
            ir(f"  {slot} = add i64 {base}, {kept}")
            ir(f"  {pw} = getelementptr {t}, ptr %out, i64 {slot}")
            ir(f"  store {t} {s}, ptr {pw}")
            ir(f"  {pj} = getelementptr i{mc}, ptr %mcrd, i64 {e}")
            ir(f"  {col} = load i{mc}, ptr {pj}")
            ir(f"  {pc} = getelementptr i{mc}, ptr %cols, i64 {slot}")
            ir(f"  store i{mc} {col}, ptr {pc}")
            ir(f"  {pr} = getelementptr i8, ptr %reached, i64 {e}")
            ir(f"  {r} = load i8, ptr {pr}")
            ir(f"  {step} = zext i8 {r} to i64")
            ir(f"  {kept1} = add i64 {kept}, {step}")
            ir(f"  store i64 {kept1}, ptr %kept_slot")

        after = ir.name("compacted")[1:]
        loop(ir, m_start, m_stop, compact, after)
        ir.label(after)
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
def _kernel(value, mp, mc, ap, ac, bp, bc, factors):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_masked_kept_{VALUE[value][0]}_{mp}_{mc}_{ap}_{ac}_{bp}_{bc}_{factors}"
    return compile_host_helpers(_kept_ir(name, value, mp, mc, ap, ac, bp, bc, factors), {name: _SIG})[name]


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


def masked_kept(m, a, b, n_cols: int, dtype, threads: int = 1, factors: str = "abm"):
    """The sparsifier's ``M * (A @ B)`` as CSR parts ``(data, indices, indptr)`` (indices of M's widths):
    the mask positions some term reached, each ``+0.0 + sum over k (in A's row order) of the terms``, a term
    multiplied in the order of ``factors`` (the roles A, B, M of the einsum's operands, in its order). ``m``,
    ``a``, ``b``: validated CSR parts, values of ``dtype``, M's columns unique per row, ascending."""
    mv, mc, mp = m
    av, ac, ap = a
    bv, bc, bp = b
    dtype = np.dtype(dtype)
    vals = np.empty(len(mv), dtype=dtype)
    cols = np.empty(len(mv), dtype=mc.dtype)
    reached = np.empty(len(mv), dtype=np.uint8)
    ends = np.empty(len(mp) - 1, dtype=np.int64)
    with _lock:
        fn = _kernel(dtype, _bits(mp), _bits(mc), _bits(ap), _bits(ac), _bits(bp), _bits(bc), factors)

    def run(t, lo, hi, mark):
        return fn(_address(mp), _address(mc), _address(mv), _address(ap), _address(ac), _address(av),
                  _address(bp), _address(bc), _address(bv), lo, hi, _address(mark), _address(vals),
                  _address(cols), _address(ends) + 8 * lo, _address(reached))

    chunks = masked_chunks(mp, ap, ac, bp, threads * CHUNKS_PER_THREAD if threads > 1 else 1, serial_max_work())
    kept = run_taken(run, chunks, threads, lambda: np.full(n_cols, -1, dtype=np.int64))
    return _gather(vals, cols, ends, mp, chunks, kept, threads)
