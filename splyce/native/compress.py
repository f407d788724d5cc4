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

from splyce.native.ir_text import INDEX, SCALARS, supported as ir_supported, load_at

# One pass over a dense C-contiguous m x n block, row by row: ``%o`` counts the nonzero entries (NaN counts,
# -0.0 not). Two instances (``_pass``): ``count`` stores each row's count, ``fill`` writes each nonzero entry's
# column and value at ``%o`` (running over the whole block).
_PASS = """
define void @{name}(ptr %dense, i64 %m, i64 %n, {params}) {{
entry:
  br label %row
row:
  %i = phi i64 [0, %entry], [%i1, %row_end]
{row_phi}  %more = icmp slt i64 %i, %m
  br i1 %more, label %row_body, label %done
row_body:
  %base = mul i64 %i, %n
  br label %col
col:
  %j = phi i64 [0, %row_body], [%j1, %{step}]
  %o = phi i64 [{o_start}, %row_body], [%o1, %{step}]
  %in = icmp slt i64 %j, %n
  br i1 %in, label %col_body, label %row_end
col_body:
  %k = add i64 %base, %j
""" + load_at("{t}", "%dense", "%k", "%v") + """  %nz = fcmp une {t} %v, 0.0
{emit}  %inc = zext i1 %nz to i64
  %o1 = add i64 %o, %inc
  %j1 = add i64 %j, 1
  br label %col
row_end:
{row_end}  %i1 = add i64 %i, 1
  br label %row
done:
  ret void
}}
"""


def _pass(fill: bool, t: str, ix: str) -> str:
    if not fill:
        return _PASS.format(name=f"splyce_count_{t}", params="ptr %counts", t=t, row_phi="", step="col_body",
                            o_start="0", emit="", row_end="  %cp = getelementptr i64, ptr %counts, i64 %i\n"
                                                         "  store i64 %o, ptr %cp\n")
    narrow = "trunc i64" if ix == "i32" else "bitcast i64"
    return _PASS.format(name=f"splyce_fill_{t}_{ix}", params="ptr %indices, ptr %data", t=t, step="col_next",
                        row_phi="  %out = phi i64 [0, %entry], [%o, %row_end]\n", o_start="%out", row_end="",
                        emit=f"""  br i1 %nz, label %emit, label %col_next
emit:
  %ip = getelementptr {ix}, ptr %indices, i64 %o
  %jj = {narrow} %j to {ix}
  store {ix} %jj, ptr %ip
  %dp = getelementptr {t}, ptr %data, i64 %o
  store {t} %v, ptr %dp
  br label %col_next
col_next:
""")


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
