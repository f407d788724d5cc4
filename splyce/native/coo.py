"""COO times a dense vector (SpMV) or matrix (SpMM), native code on the coordinate arrays as they are stored:
``y[row[e]] += values[e] * x[col[e]]`` for every entry ``e`` in stored order, into a zeroed ``y``: scipy's
``coo_matvec`` / ``coo_matmat_dense`` loop, so the bits are scipy's (unsorted and repeated entries are fine: a
product needs no canonical form). ``A.T @ x`` of a COO is the same kernel on the swapped coordinate arrays.

Index checks: each entry's row (``< m``) and column (``< n``) are compared unsigned (a negative one fails too) as
they are read, a branch to an error return that the CPU predicts as never taken; the kernel returns 1, ``y``
incomplete, at the first defect. The caller words the error (``bad_entry``).

SpMM: ``k`` columns fixed at compile time (up to ``FIXED``, one straight-line axpy of the row that LLVM packs into
SIMD), else a loop over ``k``.

Threads (``coo_times_dense(..., threads=T)``, at least ``2 * MIN_CHUNK`` entries): each thread owns a range of rows
and adds only its rows' entries, in stored order, so every ``y[i]`` gets its terms in scipy's order whatever the
split (bit-identical to one thread). Only entries grouped by row (sampled as row-sorted: canonical COOs, COOs made
from a CSR) are split, by entry ranges at row boundaries, each thread reading only its own entries, and strict:
an entry of a row the thread does not own (the rows were not sorted after all) stops the kernel (2), and the
product reruns on one thread. Entries in any other order run on one thread (a split where every thread reads
every entry's row and skips the others' rows, ``coo_rows_split_ir`` with ``strict`` 0, measured 0.1-0.45x of
one thread on the loaded 2-core VM, 2026-12-08).

Rows held in registers (``coo_runs_ir``): consecutive entries of one row add into a register, ``y[r]`` loaded
once and stored when the row changes, the same additions in the same order (bit-identical). SpMM of up to
``FIXED`` columns always; SpMV for a grouped COO of ``RUNS_MIN_ROW`` or more entries per row (road-700, 2.5 per
row: 0.56x of scipy with it, the row-change branch mispredicted; rmat-s13 sorted, 25 per row: 3.4x).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.object_calls import array_args as _arrays, compile_on_objects as _compiled
from splyce.native.ir_text import IR, MIN_CHUNK, VALUE, columns_axpy, load_index, returns, \
    pool as _pool, run_each as _run_each

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (row, col, values, x, y, nnz, m, n, k) -> 0, or 1 at an index out of range
_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I, _I)
# (row, col, values, x, y, e0, e1, m, n, k, lo, hi, strict) -> 0; 1 at an index out of range; 2 (strict) at an
# entry of a row outside [lo, hi)
_SPLIT_SIG = ctypes.CFUNCTYPE(_I, *([_P] * 5), *([_I] * 8))
RUNS_MIN_ROW = 8     # SpMV entries per row (mean) from which a grouped COO holds its row in registers
FIXED = 32      # column counts of X up to this get a kernel with the row's axpy unrolled
_lock = threading.Lock()
_ready: dict = {}   # kernel key -> the compiled kernel, read without the lock


def coo_times_dense_ir(name: str, value: np.dtype, rbits: int, cbits: int, k: int | None) -> str:
    """``y += A @ x`` over the entries of a COO: ``k`` None for SpMV (``x``, ``y`` vectors), else SpMM with ``k``
    columns (0: any count, read from ``%k``). Returns 1 at the first row ``>= m`` or column ``>= n``."""
    t, mul, add, _ = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %row, ptr %col, ptr %vals, ptr %x, ptr noalias %y, i64 %nnz, i64 %m, i64 %n, "
       "i64 %k) {")
    ir.label("entry")
    ir("  br label %head")
    ir.label("head")
    ir("  %e = phi i64 [0, %entry], [%e1, %next]")
    ir("  %more = icmp slt i64 %e, %nnz")
    ir("  br i1 %more, label %body, label %done")
    ir.label("body")
    r = load_index(ir, "%row", rbits, "%e")
    c = load_index(ir, "%col", cbits, "%e")
    ir(f"  %r_in = icmp ult i64 {r}, %m")
    ir(f"  %c_in = icmp ult i64 {c}, %n")
    ir("  %inside = and i1 %r_in, %c_in")
    ir("  br i1 %inside, label %work, label %bad")
    ir.label("work")
    ir(f"  %pv = getelementptr {t}, ptr %vals, i64 %e")
    ir(f"  %v = load {t}, ptr %pv")
    width = "%k" if k == 0 else str(k or 1)
    ir(f"  %xb = mul i64 {c}, {width}")
    ir(f"  %yb = mul i64 {r}, {width}")

    columns_axpy(ir, t, mul, add, "%v", k, "work", "next", index="i")
    ir.label("next")
    ir("  %e1 = add i64 %e, 1")
    ir("  br label %head")
    return returns(ir)


def coo_runs_ir(name: str, value: np.dtype, rbits: int, cbits: int, k: int | None, split: bool = False) -> str:
    """``coo_times_dense_ir`` (``k`` None or a fixed column count; ``split``: ``coo_rows_split_ir``'s share of
    the entries and rows) with the row being added to held in registers while consecutive entries share it: a
    run of entries of one row (a sorted COO's rows, a COO made from a CSR) loads ``y[r]`` once, adds each term
    in stored order and stores it when the row changes. The same additions in the same order as the loop that
    loads and stores ``y[r]`` per entry (bit-identical to scipy's ``coo_matvec``), without the chain through
    memory from each entry's store to the next one's load."""
    t, mul, add, _ = VALUE[value]
    size = np.dtype(value).itemsize
    w = k or 1
    vt = t if k is None else f"<{k} x {t}>"
    ir = IR()
    extra = "i64 %lo, i64 %hi, i64 %strict" if split else "i64 %k"
    first, end = ("%e0", "%e1") if split else ("0", "%nnz")
    ends = "i64 %e0, i64 %e1" if split else "i64 %nnz"
    ir(f"define i64 @{name}(ptr %row, ptr %col, ptr %vals, ptr %x, ptr noalias %y, {ends}, i64 %m, i64 %n, "
       f"{'i64 %k, ' if split else ''}{extra}) {{")
    ir.label("entry")
    if split:
        ir("  %span = sub i64 %hi, %lo")
        ir("  %is_strict = icmp ne i64 %strict, 0")
    zero = "zeroinitializer" if k else _zero(t)
    skip = (", [%en, %skip]", ", [%cur, %skip]", ", [%acc, %skip]") if split else ("", "", "")
    ir("  br label %head")
    ir.label("head")
    ir(f"  %e = phi i64 [{first}, %entry], [%en, %next]{skip[0]}")
    ir(f"  %cur = phi i64 [-1, %entry], [%r, %next]{skip[1]}")
    ir(f"  %acc = phi {vt} [{zero}, %entry], [%sum, %next]{skip[2]}")
    ir(f"  %more = icmp slt i64 %e, {end}")
    ir("  br i1 %more, label %body, label %final")
    ir.label("body")
    ir("  %en = add i64 %e, 1")
    r = load_index(ir, "%row", rbits, "%e")
    ir(f"  %r = add i64 {r}, 0")
    ir("  %r_in = icmp ult i64 %r, %m")
    if split:
        ir("  br i1 %r_in, label %own_test, label %bad")
        ir.label("own_test")
        ir("  %rel = sub i64 %r, %lo")
        ir("  %own = icmp ult i64 %rel, %span")
        ir("  br i1 %own, label %mine, label %other")
        ir.label("other")
        ir("  br i1 %is_strict, label %foreign, label %skip")
        ir.label("skip")
        ir("  br label %head")
        ir.label("foreign")
        ir("  ret i64 2")
    else:
        ir("  br i1 %r_in, label %mine, label %bad")
    ir.label("mine")
    c = load_index(ir, "%col", cbits, "%e")
    ir(f"  %c_in = icmp ult i64 {c}, %n")
    ir("  br i1 %c_in, label %work, label %bad")
    ir.label("work")
    ir(f"  %pv = getelementptr {t}, ptr %vals, i64 %e")
    ir(f"  %v = load {t}, ptr %pv")
    ir(f"  %xo = mul i64 {c}, {w}")
    ir(f"  %px = getelementptr {t}, ptr %x, i64 %xo")
    ir(f"  %xv = load {vt}, ptr %px, align {size}")
    if k is None:
        vs = "%v"
    else:
        ir(f"  %v1 = insertelement {vt} poison, {t} %v, i64 0")
        ir(f"  %vsplat = shufflevector {vt} %v1, {vt} poison, <{k} x i32> zeroinitializer")
        vs = "%vsplat"
    ir(f"  %prod = {mul} {vt} {vs}, %xv")
    ir("  %same = icmp eq i64 %r, %cur")
    ir("  br i1 %same, label %add, label %change")
    ir.label("change")
    ir("  %had = icmp sge i64 %cur, 0")
    ir("  br i1 %had, label %flush, label %fresh")
    ir.label("flush")
    ir(f"  %fo = mul i64 %cur, {w}")
    ir(f"  %pf = getelementptr {t}, ptr %y, i64 %fo")
    ir(f"  store {vt} %acc, ptr %pf, align {size}")
    ir("  br label %fresh")
    ir.label("fresh")
    ir(f"  %yo = mul i64 %r, {w}")
    ir(f"  %py = getelementptr {t}, ptr %y, i64 %yo")
    ir(f"  %yv = load {vt}, ptr %py, align {size}")
    ir("  br label %add")
    ir.label("add")
    ir(f"  %base = phi {vt} [%acc, %work], [%yv, %fresh]")
    ir(f"  %sum = {add} {vt} %base, %prod")
    ir("  br label %next")
    ir.label("next")
    ir("  br label %head")
    ir.label("final")
    ir("  %held = icmp sge i64 %cur, 0")
    ir("  br i1 %held, label %last, label %done")
    ir.label("last")
    ir(f"  %lo2 = mul i64 %cur, {w}")
    ir(f"  %pl = getelementptr {t}, ptr %y, i64 %lo2")
    ir(f"  store {vt} %acc, ptr %pl, align {size}")
    ir("  br label %done")
    return returns(ir)


def _zero(t: str) -> str:
    return "0.0" if t in ("double", "float") else "0"


def coo_rows_split_ir(name: str, value: np.dtype, rbits: int, cbits: int, k: int | None) -> str:
    """``coo_times_dense_ir``'s loop over entries ``[e0, e1)`` adding only the entries of rows in ``[lo, hi)``
    (one thread's share); an entry of another row is skipped, or, with ``strict`` nonzero, returns 2. Rows are
    checked against ``m`` (every entry: 1 at a row out of range) and columns against ``n`` (the owned ones)."""
    t, mul, add, _ = VALUE[value]
    ir = IR()
    ir(f"define i64 @{name}(ptr %row, ptr %col, ptr %vals, ptr %x, ptr noalias %y, i64 %e0, i64 %e1, i64 %m, "
       "i64 %n, i64 %k, i64 %lo, i64 %hi, i64 %strict) {")
    ir.label("entry")
    ir("  %span = sub i64 %hi, %lo")
    ir("  %is_strict = icmp ne i64 %strict, 0")
    ir("  br label %head")
    ir.label("head")
    ir("  %e = phi i64 [%e0, %entry], [%e1n, %next]")
    ir("  %more = icmp slt i64 %e, %e1")
    ir("  br i1 %more, label %body, label %done")
    ir.label("body")
    r = load_index(ir, "%row", rbits, "%e")
    ir(f"  %r_in = icmp ult i64 {r}, %m")
    ir("  br i1 %r_in, label %own_test, label %bad")
    ir.label("own_test")
    ir(f"  %rel = sub i64 {r}, %lo")
    ir("  %own = icmp ult i64 %rel, %span")
    ir("  br i1 %own, label %mine, label %other")
    ir.label("other")
    ir("  br i1 %is_strict, label %foreign, label %next")
    ir.label("mine")
    c = load_index(ir, "%col", cbits, "%e")
    ir(f"  %c_in = icmp ult i64 {c}, %n")
    ir("  br i1 %c_in, label %work, label %bad")
    ir.label("work")
    ir(f"  %pv = getelementptr {t}, ptr %vals, i64 %e")
    ir(f"  %v = load {t}, ptr %pv")
    width = "%k" if k == 0 else str(k or 1)
    ir(f"  %xb = mul i64 {c}, {width}")
    ir(f"  %yb = mul i64 {r}, {width}")
    columns_axpy(ir, t, mul, add, "%v", k, "work", "next", index="i")
    ir.label("next")
    ir("  %e1n = add i64 %e, 1")
    ir("  br label %head")
    ir.label("foreign")
    ir("  ret i64 2")
    return returns(ir)


@functools.cache
def _split_kernel(value: np.dtype, rbits: int, cbits: int, k: int | None, runs: bool):
    tag = "v" if k is None else f"k{k or 'any'}"
    name = f"splyce_coo_split{'_runs' if runs else ''}_{VALUE[value][0]}_r{rbits}_c{cbits}_{tag}"
    make = functools.partial(coo_runs_ir, split=True) if runs else coo_rows_split_ir
    return _compiled(make(name, value, rbits, cbits, k), _SPLIT_SIG, name, "aaaaaiiiiiiii")


@functools.cache
def _kernel(value: np.dtype, rbits: int, cbits: int, k: int | None, runs: bool):
    tag = "v" if k is None else f"k{k or 'any'}"
    name = f"splyce_coo{'_runs' if runs else ''}_{VALUE[value][0]}_r{rbits}_c{cbits}_{tag}"
    make = coo_runs_ir if runs else coo_times_dense_ir
    return _compiled(make(name, value, rbits, cbits, k), _SIG, name, "aaaaaiiii")


def supported(dtype) -> bool:
    return np.dtype(dtype) in VALUE


def coo_times_dense(row: np.ndarray, col: np.ndarray, data: np.ndarray, x: np.ndarray, m: int, threads: int = 1):
    """``A @ x`` for a COO's coordinate arrays (1-D, contiguous, native int32 / int64, ``len(data)`` each), its
    values and a C-contiguous ``x`` of the values' dtype (1-D: SpMV; 2-D: SpMM), ``A`` having ``m`` rows and
    ``len(x)`` columns; None when an entry's row or column is out of range (checked as read). ``threads``: up
    to that many threads (the same bits for any count)."""
    n = x.shape[0]
    k = None if x.ndim == 1 else x.shape[1]
    y = np.zeros(m if k is None else (m, k), dtype=data.dtype)
    if len(data) == 0 or y.size == 0:
        return None if len(data) and _any_outside(row, col, m, n) else y
    kk = None if k is None else (k if k <= FIXED else 0)
    # rows held in registers (coo_runs_ir): SpMM of a fixed column count always (a row's axpy is wide work);
    # SpMV only for entries sampled as grouped by row with RUNS_MIN_ROW or more per row on average (shorter
    # runs: the row-change branch, mispredicted, costs more than the chain through memory it saves)
    split = threads > 1 and len(data) >= 2 * MIN_CHUNK and m >= 2
    grouped = (split or (kk is None and len(data) >= RUNS_MIN_ROW * m)) and _grouped(row)
    runs = kk != 0 and (kk is not None or (len(data) >= RUNS_MIN_ROW * m and grouped))
    key = (data.dtype, row.dtype.itemsize * 8, col.dtype.itemsize * 8, kk, runs)
    if split and grouped:
        y = _split(key, row, col, data, x, y, m, n, k, min(threads, len(data) // MIN_CHUNK))
        if y is not False:
            return y
        y = np.zeros(m if k is None else (m, k), dtype=data.dtype)
    fn = _ready.get(key)        # a dict read needs no lock: a small call's fixed cost is most of its time
    if fn is None:
        with _lock:
            fn = _ready[key] = _kernel(*key)
    bad = fn(*_arrays(row, col, data, x, y), len(data), m, n, k or 1)
    return None if bad else y


def _grouped(row: np.ndarray) -> bool:
    """Whether a sample of ``row`` (about 64 entries, evenly spaced) is sorted: worth trying the entry split."""
    step = max(1, len(row) // 64)
    s = row[::step]
    return bool((s[1:] >= s[:-1]).all()) and row[-1] >= s[-1]


def _split(key, row, col, data, x, y, m, n, k, threads):
    """``y`` (zeroed) filled by ``threads`` threads for entries sampled as grouped by row, None at an index out
    of range, False when no split applies (then the caller runs one thread)."""
    nnz = len(data)
    args = _arrays(row, col, data, x, y)

    def run(parts):
        codes = _run_each(lambda p: fn(*args, p[0], p[1], m, n, k or 1, p[2], p[3], p[4]), parts, _pool(threads))
        return 1 if 1 in codes else 2 if 2 in codes else 0

    # entry ranges cut at row boundaries: thread t's rows are [row[cuts[t]], row[cuts[t + 1]]), disjoint
    # (checked non-decreasing), strict: a foreign row means the rows were not sorted after all
    cuts = [0] + [int(np.searchsorted(row, row[nnz * t // threads], side="left")) for t in range(1, threads)] \
        + [nnz]
    owned = [0] + [int(row[c]) if c < nnz else m for c in cuts[1:-1]] + [m]
    if all(a <= b for a, b in zip(owned, owned[1:])) and all(a <= b for a, b in zip(cuts, cuts[1:])):
        parts = [(cuts[t], cuts[t + 1], owned[t], owned[t + 1], 1) for t in range(threads)
                 if cuts[t + 1] > cuts[t] and owned[t + 1] > owned[t]]
        if len(parts) >= 2 and sum(p[1] - p[0] for p in parts) == nnz:
            with _lock:
                fn = _split_kernel(*key)
            code = run(parts)
            if code == 1:
                return None
            if code == 0:
                return y
            return False        # some thread stopped at a foreign row: the caller starts again, one thread
    return False


def _any_outside(row, col, m, n) -> bool:
    return bool(((row < 0) | (row >= m) | (col < 0) | (col >= n)).any())


def bad_entry(row: np.ndarray, col: np.ndarray, m: int, n: int) -> str | None:
    """What is wrong with a COO's coordinates (the first entry out of range), or None."""
    outside = (row < 0) | (row >= m) | (col < 0) | (col >= n)
    if not outside.any():
        return None
    e = int(np.argmax(outside))
    return (f"entry {e} has coordinates ({int(row[e])}, {int(col[e])}) outside the shape ({m}, {n}); "
            "every row must be in [0, m) and every column in [0, n)")

