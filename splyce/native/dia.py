"""DIA (dense diagonals) times a dense vector (SpMV) or matrix (SpMM), native code: for every stored diagonal
``d`` of offset ``k`` (scipy's semantics: ``data[d, j]`` is the entry at column ``j``, row ``j - k``; columns at or
beyond ``L = data.shape[1]`` hold nothing, diagonals outside the matrix nothing), ``y[i] += data[d, i + k] *
x[i + k]``, diagonals in stored order into a zeroed ``y``: scipy's ``dia_matvec`` order, so the bits are scipy's.

The rows go in tiles of ``TILE``: each tile runs every diagonal over its rows (a streaming loop LLVM vectorizes),
so ``y``'s tile stays in L1 while the diagonals pass over it, where scipy's loop passes over all of ``y`` once
per diagonal. Each element still sums its diagonals in stored order.

No index is read from memory but the offsets, whose range the kernel clamps (an offset beyond the matrix gives
an empty diagonal): the caller only checks ``data``'s shape and the offsets' count and magnitude
(``|k| < 2**62``, so no row bound overflows).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled
from splyce.native.ir_text import IR, VALUE, columns_axpy

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (offsets, data, x, y, ndiag, L, m, n, k, tile) -> 0
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I)
TILE = 256      # entries of y per tile: rows per tile TILE / k (at least 1); measured best of 256-16384
FIXED = 32      # column counts of X up to this get a kernel with the row's axpy unrolled
_lock = threading.Lock()
_ready: dict = {}   # (value dtype, offset bits, k) -> the compiled kernel, read without the lock


def _smax(ir: IR, a: str, b: str) -> str:
    c, r = ir.name("gt"), ir.name("max")
    ir(f"  {c} = icmp sgt i64 {a}, {b}")
    ir(f"  {r} = select i1 {c}, i64 {a}, i64 {b}")
    return r


def _smin(ir: IR, a: str, b: str) -> str:
    c, r = ir.name("lt"), ir.name("min")
    ir(f"  {c} = icmp slt i64 {a}, {b}")
    ir(f"  {r} = select i1 {c}, i64 {a}, i64 {b}")
    return r


def dia_times_dense_ir(name: str, value: np.dtype, obits: int, k: int | None) -> str:
    """``y += A @ x`` for a DIA ``A``: ``k`` None for SpMV, else SpMM with ``k`` columns (0: any, ``%k``)."""
    t, mul, add, _ = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %offsets, ptr %data, ptr %x, ptr noalias %y, i64 %ndiag, i64 %L, i64 %m, i64 %n, "
       "i64 %k, i64 %tile) {")
    ir.label("entry")
    ir("  br label %tile_head")
    ir.label("tile_head")
    ir("  %t0 = phi i64 [0, %entry], [%t1, %diag_done]")
    ir("  %tmore = icmp slt i64 %t0, %m")
    ir("  br i1 %tmore, label %tile_body, label %done")
    ir.label("tile_body")
    ir("  %t1_raw = add i64 %t0, %tile")
    t1 = _smin(ir, "%t1_raw", "%m")
    ir(f"  %t1 = add i64 {t1}, 0")
    ir("  br label %diag_head")
    ir.label("diag_head")
    ir("  %d = phi i64 [0, %tile_body], [%d1, %rows_done]")
    ir("  %dmore = icmp slt i64 %d, %ndiag")
    ir("  br i1 %dmore, label %diag_body, label %diag_done")
    ir.label("diag_body")
    off = _load_signed(ir, obits, "%d")
    # rows i with 0 <= i < m, 0 <= i + off < min(n, L), within the tile [t0, t1)
    neg = ir.name("neg")
    ir(f"  {neg} = sub i64 0, {off}")
    lo = _smax(ir, _smax(ir, "%t0", neg), "0")
    n_end, l_end = ir.name("nend"), ir.name("lend")
    ir(f"  {n_end} = sub i64 %n, {off}")
    ir(f"  {l_end} = sub i64 %L, {off}")
    hi = _smin(ir, _smin(ir, "%t1", n_end), l_end)
    ir("  %dL = mul i64 %d, %L")
    ir(f"  %dbase = add i64 %dL, {off}")        # data[d, i + off] = data[dL + off + i]
    ir(f"  %lo = add i64 {lo}, 0")
    ir(f"  %hi = add i64 {hi}, 0")
    ir(f"  %off = add i64 {off}, 0")
    ir("  br label %row_head")
    ir.label("row_head")
    ir("  %i = phi i64 [%lo, %diag_body], [%i1, %row_next]")
    ir("  %rmore = icmp slt i64 %i, %hi")
    ir("  br i1 %rmore, label %row_body, label %rows_done")
    ir.label("row_body")
    ir("  %di = add i64 %dbase, %i")
    ir(f"  %pd = getelementptr {t}, ptr %data, i64 %di")
    ir(f"  %dv = load {t}, ptr %pd")
    ir("  %xi = add i64 %i, %off")
    width = "%k" if k == 0 else str(k or 1)
    ir(f"  %xb = mul i64 %xi, {width}")
    ir(f"  %yb = mul i64 %i, {width}")

    columns_axpy(ir, t, mul, add, "%dv", k, "row_body", "row_next", index="j")
    ir.label("row_next")
    ir("  %i1 = add i64 %i, 1")
    ir("  br label %row_head")
    ir.label("rows_done")
    ir("  %d1 = add i64 %d, 1")
    ir("  br label %diag_head")
    ir.label("diag_done")
    ir("  br label %tile_head")
    ir.label("done")
    ir("  ret i64 0")
    ir("}")
    return "\n".join(ir.lines) + "\n"


def _load_signed(ir: IR, bits: int, at: str) -> str:
    """offsets[at] sign-extended to i64 (an offset is negative below the main diagonal)."""
    p, raw, wide = ir.name("p"), ir.name("raw"), ir.name("w")
    ir(f"  {p} = getelementptr i{bits}, ptr %offsets, i64 {at}")
    ir(f"  {raw} = load i{bits}, ptr {p}")
    ir(f"  {wide} = " + (f"sext i{bits} {raw} to i64" if bits < 64 else f"add i64 {raw}, 0"))
    return wide


@functools.cache
def _kernel(value: np.dtype, obits: int, k: int | None):
    tag = "v" if k is None else f"k{k or 'any'}"
    name = f"splyce_dia_{VALUE[value][0]}_o{obits}_{tag}"
    return _compiled(dia_times_dense_ir(name, value, obits, k), _SIG, name, "aaaaiiiiii")


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


OFFSET_LIMIT = 1 << 62


def dia_times_dense(offsets: np.ndarray, data: np.ndarray, x: np.ndarray, m: int) -> np.ndarray:
    """``A @ x`` for a DIA's ``offsets`` (1-D contiguous native int32 / int64, ``|offset| < 2**62``) and ``data``
    (C-contiguous 2-D, one row per offset, of ``x``'s dtype), ``A`` having ``m`` rows and ``len(x)`` columns;
    ``x`` C-contiguous, 1-D (SpMV) or 2-D (SpMM)."""
    n = x.shape[0]
    k = None if x.ndim == 1 else x.shape[1]
    y = np.zeros(m if k is None else (m, k), dtype=data.dtype)
    if data.size == 0 or y.size == 0 or n == 0:
        return y
    key = (data.dtype, offsets.dtype.itemsize * 8, None if k is None else (k if k <= FIXED else 0))
    fn = _ready.get(key)        # a dict read needs no lock: a small call's fixed cost is most of its time
    if fn is None:
        with _lock:
            fn = _ready[key] = _kernel(*key)
    fn(*_arrays(offsets, data, x, y), data.shape[0], data.shape[1], m, n, k or 1,
       max(TILE // (k or 1), 1))
    return y

