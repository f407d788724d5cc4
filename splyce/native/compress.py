"""Dense rows -> CSR in native code: one counting pass, one filling pass, no temporaries.

The drop-in sparse @ sparse product accumulates blocks of rows densely (Gustavson) and compresses them;
NumPy needs a boolean mask, a count, ``nonzero`` and a masked gather (four passes and two temporaries) for
what these two loops do. Zeros are dropped (``x != 0``: NaN is kept, -0.0 is dropped), as scipy does.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.ir_text import INDEX, IR, SCALARS, counted, narrow, supported as ir_supported

def _pass(fill: bool, t: str, ix: str) -> str:
    """One pass over a dense C-contiguous m x n block, row by row, counting its nonzero entries (NaN counts,
    -0.0 not): ``count`` stores each row's count, ``fill`` writes each nonzero entry's column and value at
    its place (counted over the whole block)."""
    ir = IR()
    name, params = (f"splyce_fill_{t}_{ix}", "ptr %indices, ptr %data") if fill else (f"splyce_count_{t}",
                                                                                       "ptr %counts")
    ir(f"define void @{name}(ptr %dense, i64 %m, i64 %n, {params}) {{")
    ir.label("entry")

    def row(i, out):
        base = ir.op("mul", "i64", i, "%n")

        def column(j, o):
            v = ir.load(t, "%dense", ir.op("add", "i64", base, j))
            nz = ir.op("fcmp une", t, v, "0.0")
            if fill:
                emit, after = ir.name("emit")[1:], ir.name("next")[1:]
                ir(f"  br i1 {nz}, label %{emit}, label %{after}")
                ir.label(emit)
                col = ir.name("col")
                ir(f"  {col} = {narrow(64 if ix == 'i64' else 32)} {j} to {ix}")
                ir.store(ix, col, "%indices", o)
                ir.store(t, v, "%data", o)
                ir(f"  br label %{after}")
                ir.label(after)
            inc = ir.name("inc")
            ir(f"  {inc} = zext i1 {nz} to i64")
            return (ir.op("add", "i64", o, inc),)

        (o,) = counted(ir, "0", "%n", column, carried=(("i64", out if fill else "0"),), base="j")
        if not fill:
            ir.store("i64", o, "%counts", i)
        return (o,)

    counted(ir, "0", "%m", row, carried=(("i64", "0"),), base="i")
    ir("  ret void")
    ir("}")
    return ir.text()


_COUNT_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_FILL_SIG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                             ctypes.c_void_p)
_lock = threading.Lock()


@functools.cache
def _helpers(value_type: str, index_type: str):
    from splyce.native.codegen import compile_host_helpers

    text = _pass(False, value_type, index_type) + _pass(True, value_type, index_type)
    fns = compile_host_helpers(text, {f"splyce_count_{value_type}": _COUNT_SIG,
                                      f"splyce_fill_{value_type}_{index_type}": _FILL_SIG})
    return fns[f"splyce_count_{value_type}"], fns[f"splyce_fill_{value_type}_{index_type}"]


def supported(dtype) -> bool:
    return ir_supported(dtype) and np.dtype(dtype).kind == "f"     # the count's compare is a float one


def dense_to_csr(block: np.ndarray, index_dtype=np.int64):
    """``(data, indices, indptr)`` of a C-contiguous 2-D float array, zeros dropped."""
    block = np.ascontiguousarray(block)
    m, n = block.shape
    index_dtype = np.dtype(index_dtype)
    with _lock:
        count, fill = _helpers(SCALARS[block.dtype].t, INDEX[index_dtype])
    counts = np.empty(m, dtype=np.int64)
    address = block.__array_interface__["data"][0]
    count(address, m, n, counts.__array_interface__["data"][0])
    indptr = np.zeros(m + 1, dtype=index_dtype)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=index_dtype)
    data = np.empty(nnz, dtype=block.dtype)
    fill(address, m, n, indices.__array_interface__["data"][0], data.__array_interface__["data"][0])
    return data, indices, indptr
