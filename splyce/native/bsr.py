"""BSR (dense R x C blocks, scipy's layout: ``data[b]`` a row-major block, ``indptr`` / ``indices`` a CSR over
block rows and block columns) times a dense vector (SpMV) or matrix (SpMM), native code.

Order: every output row ``i * R + r`` sums, over its block row's blocks in stored order and each block's columns
``c`` in order, ``data[b, r, c] * x[j * C + c]``, from zero: scipy's ``bsr_matvec`` / ``bsr_matvecs`` order (its
``gemv`` / ``gemm`` per block), so the bits are scipy's. SpMM: the same per output column.

Block shapes: with ``R * C`` up to ``FIXED_BLOCK`` the block is unrolled at compile time (a 3 x 3 block is 9
multiply-adds on ``R`` independent chains, the block row's sums kept in registers and stored once; the ``C``
values of ``x`` loaded once per block); larger blocks loop over ``r`` and ``c`` at run time and accumulate in
``y``. SpMM: ``k`` columns unrolled up to ``FIXED`` (each block entry one axpy of a row of ``X`` into a row of
``Y``, which LLVM packs into SIMD), else a loop.

Index checks, as the CSR kernels (spmv_rows.py): each block row's segment ``start <= stop <= nnzb`` and each block
column ``< nb`` compared unsigned as read (branches predicted never taken), 1 returned at the first defect.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled
from splyce.native.ir_text import IR, VALUE, check_segment, load_index, loop, returns

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (indptr, indices, data, x, y, mb, nb, nnzb, R, C, k) -> 0, or 1 at a malformed index
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I)
FIXED_BLOCK = 64    # blocks of up to this many entries are unrolled at compile time
FIXED = 32          # column counts of X up to this get an unrolled axpy
_lock = threading.Lock()
_ready: dict = {}   # kernel key -> the compiled kernel, read without the lock


def _each(ir: IR, count: int | None, runtime: str, body) -> None:
    """``body(index)`` for index in [0, count): unrolled when ``count`` is known, else a loop to ``runtime``."""
    if count is not None:
        for idx in range(count):
            body(str(idx))
        return
    after = ir.name("after")[1:]
    loop(ir, "0", runtime, body, after)
    ir.label(after)


def bsr_times_dense_ir(name: str, value: np.dtype, pbits: int, cbits: int, block: tuple[int, int] | None,
                       k: int | None) -> str:
    """``y = A @ x`` for a BSR ``A`` with ``block`` = (R, C) fixed at compile time (None: read from ``%R``,
    ``%C``); ``k`` None for SpMV, else SpMM with ``k`` columns (0: any count, ``%k``). ``y`` zeroed by the caller
    (only the unrolled SpMV writes it without reading it)."""
    t, mul, add, zero = VALUE[value]
    R, C = block if block is not None else (None, None)
    in_registers = block is not None and k is None
    ir = IR()
    ir(f"define i64 @{name}(ptr %pos, ptr %crd, ptr %vals, ptr %x, ptr noalias %y, i64 %mb, i64 %nb, i64 %nnzb, "
       "i64 %R, i64 %C, i64 %k) {")
    ir.label("entry")
    rows = R if R is not None else "%R"
    cols = C if C is not None else "%C"
    width = None if k is None else ("%k" if k == 0 else str(k))
    ir(f"  %RC = mul i64 {rows}, {cols}")
    accs = [f"%acc{r}" for r in range(R)] if in_registers else []
    for acc in accs:
        ir(f"  {acc} = alloca {t}")

    def block_row(i: str) -> None:
        start = load_index(ir, "%pos", pbits, i)
        i1 = ir.name("i1")
        ir(f"  {i1} = add i64 {i}, 1")
        stop = load_index(ir, "%pos", pbits, i1)
        check_segment(ir, start, stop, "%nnzb")
        ybase = ir.name("ybase")
        ir(f"  {ybase} = mul i64 {i}, {rows}")
        for acc in accs:
            ir(f"  store {t} {zero}, ptr {acc}")

        def entry(b: str) -> None:
            j = load_index(ir, "%crd", cbits, b)
            inside, col_ok = ir.name("inside"), ir.name("col_ok")
            ir(f"  {inside} = icmp ult i64 {j}, %nb")
            ir(f"  br i1 {inside}, label %{col_ok[1:]}, label %bad")
            ir.label(col_ok[1:])
            xbase, abase = ir.name("xbase"), ir.name("abase")
            ir(f"  {xbase} = mul i64 {j}, {cols}")
            ir(f"  {abase} = mul i64 {b}, %RC")

            def load_at(ptr: str, at: str) -> str:
                p, v = ir.name("p"), ir.name("v")
                ir(f"  {p} = getelementptr {t}, ptr {ptr}, i64 {at}")
                ir(f"  {v} = load {t}, ptr {p}")
                return v

            def offset(base: str, *terms: str) -> str:
                out = base
                for term in terms:
                    nxt = ir.name("o")
                    ir(f"  {nxt} = add i64 {out}, {term}")
                    out = nxt
                return out

            if in_registers:
                xs = [load_at("%x", offset(xbase, str(c))) for c in range(C)]
                for r in range(R):
                    for c in range(C):
                        a = load_at("%vals", offset(abase, str(r * C + c)))
                        prod, s0, s1 = ir.name("prod"), ir.name("s"), ir.name("s")
                        ir(f"  {prod} = {mul} {t} {a}, {xs[c]}")
                        ir(f"  {s0} = load {t}, ptr {accs[r]}")
                        ir(f"  {s1} = {add} {t} {s0}, {prod}")
                        ir(f"  store {t} {s1}, ptr {accs[r]}")
                return

            def per_row(r: str) -> None:
                rc, yrow = ir.name("rc"), ir.name("yrow")
                ir(f"  {rc} = mul i64 {r}, {cols}")
                ir(f"  {yrow} = add i64 {ybase}, {r}")

                def per_col(c: str) -> None:
                    a = load_at("%vals", offset(abase, rc, c))
                    xrow = offset(xbase, c)

                    def axpy(v: str | None) -> None:
                        if width is None:
                            xi, yi = xrow, yrow
                        else:
                            xm, ym = ir.name("xm"), ir.name("ym")
                            ir(f"  {xm} = mul i64 {xrow}, {width}")
                            ir(f"  {ym} = mul i64 {yrow}, {width}")
                            xi, yi = offset(xm, v), offset(ym, v)
                        xv = load_at("%x", xi)
                        py, yv, prod, s = ir.name("py"), ir.name("yv"), ir.name("prod"), ir.name("s")
                        ir(f"  {py} = getelementptr {t}, ptr %y, i64 {yi}")
                        ir(f"  {yv} = load {t}, ptr {py}")
                        ir(f"  {prod} = {mul} {t} {a}, {xv}")
                        ir(f"  {s} = {add} {t} {yv}, {prod}")
                        ir(f"  store {t} {s}, ptr {py}")

                    if width is None:
                        axpy(None)
                    else:
                        _each(ir, None if k == 0 else k, "%k", axpy)

                _each(ir, C, "%C", per_col)

            _each(ir, R, "%R", per_row)

        after = ir.name("blocks")[1:]
        loop(ir, start, stop, entry, after)
        ir.label(after)
        for r, acc in enumerate(accs):
            at, py, s = ir.name("at"), ir.name("py"), ir.name("s")
            ir(f"  {at} = add i64 {ybase}, {r}")
            ir(f"  {py} = getelementptr {t}, ptr %y, i64 {at}")
            ir(f"  {s} = load {t}, ptr {acc}")
            ir(f"  store {t} {s}, ptr {py}")

    loop(ir, "0", "%mb", block_row, "done")
    return returns(ir)


@functools.cache
def _kernel(value: np.dtype, pbits: int, cbits: int, block: tuple[int, int] | None, k: int | None):
    shape = "any" if block is None else f"{block[0]}x{block[1]}"
    tag = "v" if k is None else f"k{k or 'any'}"
    name = f"splyce_bsr_{VALUE[value][0]}_p{pbits}_c{cbits}_b{shape}_{tag}"
    return _compiled(bsr_times_dense_ir(name, value, pbits, cbits, block, k), _SIG, name, "aaaaaiiiiii")


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


_last: list = [(None,) * 7]   # [the last call's (dtype, indptr dtype, indices dtype, R, C, k, kernel)]


def bsr_times_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray, m: int):
    """``A @ x`` for a BSR's ``indptr`` / ``indices`` (1-D contiguous, one native int32 / int64 dtype, ``indptr``
    of ``m / R + 1`` entries starting at 0), ``data`` (C-contiguous ``(nnzb, R, C)`` of ``x``'s dtype,
    ``nnzb == len(indices)``) and a C-contiguous ``x`` (``len(x)`` a multiple of ``C``; 1-D: SpMV, 2-D: SpMM);
    None when a segment of ``indptr`` or a block column is out of range (checked as read)."""
    nnzb, R, C = data.shape
    n = x.shape[0]
    k = None if x.ndim == 1 else x.shape[1]
    mb, nb = m // R, n // C
    dtype, pdt, cdt = data.dtype, indptr.dtype, indices.dtype
    y = np.zeros(m if k is None else (m, k), dtype=dtype)
    if y.size == 0:
        return y
    last = _last[0]
    # the last call's kernel when its dtypes (identity: NumPy's built-in dtypes are singletons) and shapes
    # match, with no key built or hashed: a small matrix's SpMV is a few microseconds
    if last[0] is dtype and last[1] is pdt and last[2] is cdt and last[3] == R and last[4] == C and last[5] == k:
        fn = last[6]
    else:
        unrolled = R * C * (1 if k is None or k > FIXED else k)
        block = (R, C) if R * C <= FIXED_BLOCK and unrolled <= FIXED_BLOCK * 16 else None
        key = (dtype, pdt.itemsize * 8, cdt.itemsize * 8, block, None if k is None else (k if k <= FIXED else 0))
        fn = _ready.get(key)        # a dict read needs no lock
        if fn is None:
            with _lock:
                fn = _ready[key] = _kernel(*key)
        _last[0] = (dtype, pdt, cdt, R, C, k, fn)     # one store: a reader sees one call's whole tuple
    bad = fn(*_arrays(indptr, indices, data, x, y), mb, nb, nnzb, R, C,
             k or 1)
    return None if bad else y

