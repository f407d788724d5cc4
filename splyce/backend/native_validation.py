"""Call-time validation in native code: one pass over each compressed level, no temporaries.

The NumPy checks in ``splyce.tensors.validation`` cost ~25 us of fixed overhead per tensor and make several passes
with O(nnz) temporaries (45 ms for 20M entries, vs 5.5 ms here). Once the compiler is loaded, this module
registers a single-pass scan (each variant compiled on first use, once per process, with llvmlite) as the
fast path of ``check_buffers``; the NumPy checks still run, to word the error, whenever the scan finds a
defect, and for what it does not cover (singleton levels: their checks need the parent coordinates).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.tensors.validation import SUPPORTED_DTYPES, register_fast_check

# One function per (pos width, crd width, order rule). Segment s spans crd[pos[s]:pos[s+1]]; a segment's
# defects are OR-ed without early exit (so LLVM can vectorize the scan) and checked at its end.
_TEMPLATE = """
define i64 @{name}(ptr %pos, i64 %nseg, ptr %crd, i64 %ncrd, i64 %size) {{
entry:
  br label %seg_head
seg_head:
  %s = phi i64 [0, %entry], [%s1, %seg_done]
  %more = icmp slt i64 %s, %nseg
  br i1 %more, label %seg_body, label %ok
seg_body:
  %plo = getelementptr i{p}, ptr %pos, i64 %s
  %lo_raw = load i{p}, ptr %plo
  %lo = {p_ext} %lo_raw to i64
  %s1 = add i64 %s, 1
  %phi_ptr = getelementptr i{p}, ptr %pos, i64 %s1
  %hi_raw = load i{p}, ptr %phi_ptr
  %hi = {p_ext} %hi_raw to i64
  %bad_a = icmp sgt i64 %lo, %hi
  %bad_b = icmp sgt i64 %hi, %ncrd
  %bad_c = icmp slt i64 %lo, 0
  %bad_ab = or i1 %bad_a, %bad_b
  %bad_seg = or i1 %bad_ab, %bad_c
  br i1 %bad_seg, label %fail, label %crd_head
crd_head:
  %k = phi i64 [%lo, %seg_body], [%k1, %crd_body]
  %prev = phi i64 [-1, %seg_body], [%c, %crd_body]
  %acc = phi i1 [false, %seg_body], [%acc1, %crd_body]
  %in = icmp slt i64 %k, %hi
  br i1 %in, label %crd_body, label %seg_done
crd_body:
  %pc = getelementptr i{c}, ptr %crd, i64 %k
  %c_raw = load i{c}, ptr %pc
  %c = {c_ext} %c_raw to i64
  %neg = icmp slt i64 %c, 0
  %big = icmp sge i64 %c, %size
  %range = or i1 %neg, %big
  {order}
  %bad = or i1 %range, %unordered
  %acc1 = or i1 %acc, %bad
  %k1 = add i64 %k, 1
  br label %crd_head
seg_done:
  br i1 %acc, label %fail, label %seg_head
ok:
  ret i64 0
fail:
  ret i64 1
}}
"""
_ORDER = {
    "unique": "%unordered = icmp sle i64 %c, %prev",      # strictly increasing within a segment
    "ordered": "%unordered = icmp slt i64 %c, %prev",     # non-decreasing (nonunique)
    "any": "%unordered = icmp slt i64 %c, -1",            # nonordered and nonunique: no rule (false)
}

_lock = threading.Lock()
_INT = {32: np.dtype(np.int32), 64: np.dtype(np.int64)}
_MAX = {32: 2**31 - 1, 64: 2**63 - 1}
_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_int64)


@functools.cache
def _scanner(pos_bits: int, crd_bits: int, rule: str):
    """Compile one variant on first use (~20 ms), once per process."""
    from splyce.backend.codegen import compile_host_helpers

    name = f"splyce_check_p{pos_bits}_c{crd_bits}_{rule}"
    text = _TEMPLATE.format(name=name, p=pos_bits, c=crd_bits, order=_ORDER[rule],
                            p_ext=_extend(pos_bits), c_ext=_extend(crd_bits))
    return compile_host_helpers(text, {name: _SIGNATURE})[name]


def _extend(bits: int) -> str:
    """Widen a loaded index to i64 (a no-op bitcast when it already is)."""
    return f"sext i{bits}" if bits < 64 else "bitcast i64"


def _rule(level) -> str:
    if not level.ordered:
        return "any"
    return "unique" if level.unique else "ordered"


def buffers_ok(shape, fmt, pos, crd, values) -> bool:
    """True when the buffers are a well-formed tensor (False: let the NumPy checks find and word the defect,
    also for what this scan does not cover: singleton levels)."""
    try:
        pos, crd, shape = tuple(pos), tuple(crd), tuple(shape)
    except TypeError:
        return False
    # not covered: singleton levels (checked against parent coordinates) and unique-but-unordered levels
    # (duplicates anywhere in a segment)
    if any(level.kind == "singleton" or (level.unique and not level.ordered) for level in fmt.levels):
        return False
    return _structure_ok(shape, fmt, pos, crd, values) and _levels_ok(shape, fmt, pos, crd)


register_fast_check(buffers_ok)


def _structure_ok(shape, fmt, pos, crd, values) -> bool:
    """Types, dtypes, lengths and layout of every buffer (cheap attribute checks, no data read)."""
    if len(shape) != fmt.ndim or len(pos) != fmt.ndim or len(crd) != fmt.ndim:
        return False
    pos_dtype, crd_dtype = _INT[fmt.pos_width], _INT[fmt.crd_width]
    n_parent = 1
    for l, level in enumerate(fmt.levels):
        size = shape[fmt.order[l]]
        if type(size) is not int or size < 0:
            return False
        p, c = pos[l], crd[l]
        if level.kind == "dense":
            if p is not None or c is not None:
                return False
            n_parent *= size
            continue
        for arr, dtype in ((p, pos_dtype), (c, crd_dtype)):
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1 \
                    or not arr.flags.c_contiguous:
                return False
        if size - 1 > _MAX[fmt.crd_width] or len(p) != n_parent + 1 or p[0] != 0 or p[-1] != len(c):
            return False
        n_parent = len(c)
    return (isinstance(values, np.ndarray) and values.ndim == 1 and values.flags.c_contiguous
            and values.dtype.isnative and len(values) == n_parent
            and values.dtype in SUPPORTED_DTYPES)


def _levels_ok(shape, fmt, pos, crd) -> bool:
    for l, level in enumerate(fmt.levels):
        if level.kind != "compressed":
            continue
        p, c = pos[l], crd[l]
        with _lock:
            scan = _scanner(fmt.pos_width, fmt.crd_width, _rule(level))
        if scan(p.ctypes.data, len(p) - 1, c.ctypes.data, len(c), shape[fmt.order[l]]):
            return False
    return True
