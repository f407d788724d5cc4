"""``op(A, B)`` of a CSR A and a CSC B (``A.T`` as scipy hands it over) in one pass over A's entries, a cursor per
column of B (no transpose of B): the pass, its prefetch and vector-match choices, and its run on row ranges."""

from __future__ import annotations

import functools

import numpy as np

from splyce.native import ir_text
from splyce.native.ir_text import fill
from splyce.native.elementwise.common import _lock, value_type
from splyce.native.elementwise.csc_ir import (_COUNTED_CURSOR, _CSC_CANONICAL, _CSC_PASS, _CSC_POSITIONS,
                                              _CSC_PREFETCH, _FINITE, _INTERSECT_MISS, _INTERSECT_SKIP, _MATCH_MISS,
                                              _RANGE_SEEN, _RANGE_SPAN, _RANGE_STASH, _SCALAR_MATCH, _TAIL_FINITE,
                                              _TOUCH_MAX)
from splyce.native.elementwise.csc_vector import (_MODE_NEXT, _OWN_VALUES, _VECTOR_BAD_CHECK, _VECTOR_DECLARES,
                                                  _VECTOR_DECLARES_FLOAT, _VECTOR_FINITE_SKIPPED,
                                                  _VECTOR_FINITE_UNMATCHED, _VECTOR_MATCH, _VECTOR_ROWS)

# the vector match's switch (csc_vector._MODE_NEXT): every MODE_ROWS rows, over 1 / MISS_SHARE of them missing
MODE_ROWS = 64      # a power of two
MISS_SHARE = 3


# The entries loop of a pass that keeps every result is not unrolled: without the zero count LLVM unrolled it by
# two, and the remainder's branches and the spills of the output pointers made road-700's A * A.T (2.5 entries
# per row, every one a hit) 6.3 ms against 5.4 for the float pass (thread CPU, median of 31)
_NO_UNROLL_REF = ", !llvm.loop !90"
_NO_UNROLL = """
!90 = distinct !{!90, !91}
!91 = !{!"llvm.loop.unroll.disable"}
"""


@functools.cache
def _csc_pass_kernel(op: str, value: np.dtype, bits: int, prefetch: int = 0, ranged: str = "", lanes: int = 0,
                     mode_rows: int = 64, miss_share: int = 3, keep_zeros: bool = False):
    """The pass; ``ranged``: "" (one thread: all rows, operands checked in the call), "first" (the range from row
    0 on several threads, operands checked before, all values finite) or "later" (a later range: likewise, its
    cursors counted from its first row); ``lanes``: a product's rows that miss often (``_MODE_NEXT``: over 1 /
    ``miss_share`` of the last ``mode_rows`` rows' entries) go to ``_VECTOR_MATCH`` on that many B entries at
    once (0: all rows ``_SCALAR_MATCH``); ``keep_zeros``: the sparsifier's coiteration (every matched position
    stored, zero results too; an entry without a partner drops out whatever its value: no finite checks)."""
    from splyce.native import array_objects, validation as native_validation
    from splyce.native.codegen import compile_host_helpers

    t, zero, nonzero, instr = value_type(value, keep_zeros, op)
    intersect = op == "multiply"
    floats = intersect and value.kind == "f" and not keep_zeros
    name = (f"splyce_elementwise_csc_{op}_{t}_i{bits}" + (f"_pf{prefetch}" if prefetch else "")
            + (f"_{ranged}" if ranged else "") + (f"_v{lanes}" if lanes else "") + ("_k" if keep_zeros else ""))
    check = name + "_check"
    ext, narrow = ir_text.ext(bits), ir_text.narrow(bits)
    fields = dict(c=bits, ext=ext, narrow=narrow, t=t, check=check, vsize=value.itemsize)
    if intersect:
        finite_b = fill(_FINITE, x="b", i="at", t=t) if floats else ""
        finite_a = fill(_FINITE, x="a", i="k", t=t) if floats else ""
        skip = fill(_INTERSECT_SKIP, finite_b=finite_b, **fields)
        miss = fill(_INTERSECT_MISS, finite_a=finite_a, **fields)
        seek_phi, not_same = ", [%at_next, %skip]" if not floats else ", [%at_next, %b_finite]", "below"
        next_phi = ", [%o, %miss]" if not floats else ", [%o, %a_finite]"
        next_phi_z = next_phi.replace("%o", "%z")
        b_check = _CSC_CANONICAL
        tail = (fill(_RANGE_SEEN if ranged else _TAIL_FINITE, **fields) if floats else "  br label %finish")
    else:
        skip, miss, seek_phi, not_same, next_phi, next_phi_z = "", _MATCH_MISS, "", "miss", "", ""
        b_check, tail = _CSC_POSITIONS, "  br label %finish"
    values = dict(op=instr, zero=zero, nonzero=nonzero)
    declares, row_exit, bad_check, mode_next, row_latch, vrows, vrows_fn = "", "done", "", "", "row_end", "", ""
    latch = dict(latch_r="r1", latch_o="o_e", latch_z="z_e")
    scalar = fill(_SCALAR_MATCH, skip=skip, miss=miss, seek_phi=seek_phi, not_same=not_same, next_phi=next_phi,
                  next_phi_z=next_phi_z, **values, **fields)
    if lanes and intersect:
        vector = dict(w=lanes, cb=bits // 8, tv={"double": "f64", "float": "f32"}.get(t, t), **fields)
        match = fill(_VECTOR_MATCH, finite_skipped=fill(_VECTOR_FINITE_SKIPPED, **vector) if floats else "",
                     finite_unmatched=fill(_VECTOR_FINITE_UNMATCHED, **vector) if floats else "", **values, **vector)
        vrows = fill(_VECTOR_ROWS, name=name + "_vrows", match=match, **fields)
        vrows_fn = f"  %vrows_fn = bitcast ptr @{name}_vrows to ptr\n"
        if floats:      # B's entries of A's own memory (A * A.T): no check of the skipped ones (see _OWN_VALUES)
            vrows += fill(_VECTOR_ROWS, name=name + "_vrows_own", **fields, match=fill(_VECTOR_MATCH,
                finite_skipped="", finite_unmatched=fill(_VECTOR_FINITE_UNMATCHED, **vector), **values, **vector))
            vrows_fn = fill(_OWN_VALUES, name=name)
        declares = fill(_VECTOR_DECLARES, **vector) + (fill(_VECTOR_DECLARES_FLOAT, **vector) if floats else "")
        if floats:
            row_exit, bad_check = "bad_check", _VECTOR_BAD_CHECK
        mode_next = fill(_MODE_NEXT, miss_share=miss_share, mode_rows=mode_rows, mode_rows_1=mode_rows - 1,
                         vrows_fn=vrows_fn, **fields)
        row_latch, latch = "mode_done", dict(latch_r="r_next", latch_o="o_next", latch_z="z_next")
    match = scalar
    text = (native_validation.canonical_check_ir(check, bits) + declares + vrows
            + fill(_CSC_PASS, name=name, match=match, row_exit=row_exit, bad_check=bad_check, mode_next=mode_next,
                   row_latch=row_latch, **latch, **values,
                   touch_max=_TOUCH_MAX, prologue=fill(_RANGE_SPAN, **fields) if ranged else "",
                   stash=_RANGE_STASH if ranged and floats else "",
                   init_lo="%smin" if ranged else "0", init_hi="%smax" if ranged else "%n",
                   init_value=fill(_COUNTED_CURSOR, **fields) if ranged == "later" else
                   (f"  %pbj = getelementptr i{bits}, ptr %bp, i64 %j\n  %bj = load i{bits}, ptr %pbj"),
                   init_latch="cnt_done" if ranged == "later" else "init_body",
                   prefetch=fill(_CSC_PREFETCH, distance=prefetch, **fields) if prefetch else "",
                   b_check=fill(b_check, **fields), tail=tail, entries_loop=_NO_UNROLL_REF if keep_zeros else "",
                   **fields)
            + array_objects.object_entry_ir(name + "_objects", name, "a" * 10 + "iiiiiia")
            + (_NO_UNROLL if keep_zeros else ""))
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(17)})[name + "_objects"]


def csr_with_csc(op: str, a, b_csc, dtype, m: int, n: int, prefetch: int = 0, lanes: int | None = None,
                 keep_zeros: bool = False):
    """``op(A, B)`` on one thread for a CSR ``a = (data, indices, indptr)`` (m x n) and a CSC ``b_csc`` of the
    same shape (n columns of rows): index arrays of one dtype (int32 / int64), values of ``dtype`` (a dtype
    object), all C-contiguous, lengths consistent (``len(indptr)`` m + 1 and n + 1, data and indices of each
    operand alike); ``array_objects.DATA_OFFSET`` confirmed. Returns ``(data, indices, indptr)`` (canonical), or
    a code: 2 A is not canonical, 3 B's structure is not well formed (the caller's general path words either),
    1 (a sum) B's positions are not A's, 4 (a product of floats) an entry without a partner is NaN or Inf;
    after 1 or 4 A is known canonical (the caller merges). ``keep_zeros``: the sparsifier's coiteration (every
    matched position stored; never 4)."""
    av, ac, ap = a
    bv, bc, bp = b_csc
    size = len(ac)
    if op != "multiply" and len(bc) != size:
        # B's positions are not A's, but code 1 promises A canonical to the caller's merge: checked here
        from splyce.native import validation as native_validation

        return 1 if native_validation.canonical_csr(ap, ac, n) else 2
    lanes = _lanes(ac.dtype, lanes, size)
    key = (op, dtype, ac.dtype, prefetch, lanes, keep_zeros)
    kernel = _csc_kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _csc_kernels[key] = _csc_pass_kernel(op, dtype, ac.dtype.itemsize * 8, prefetch, "", lanes,
                                                          MODE_ROWS, MISS_SHARE, keep_zeros)
    vals = np.empty(size, dtype=dtype)
    cols = np.empty(size, dtype=ac.dtype)
    indptr = np.empty(m + 1, dtype=ap.dtype)
    cursor = np.empty(2 * n, dtype=ap.dtype)    # (next entry, end) per column of B
    nnz = kernel(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cursor), id(cols), id(vals), id(indptr),
                 m, n, size, len(bc), 0, m, id(cursor))
    if nnz < 0:
        return -nnz
    if nnz != size:
        vals.resize(nnz, refcheck=False)       # shrink in place: no copy of the entries
        cols.resize(nnz, refcheck=False)
    return vals, cols, indptr


@functools.cache
def _host_avx512() -> bool:
    from splyce.native.codegen import host_target

    return "+avx512f" in host_target().features.split(",")


# Below this many entries of A the pass keeps the scalar match: called again on the same matrix (as a benchmark
# does), the branch predictor learns a small pattern's hits and skips (32 blocks of 32 at 30 %, 10.5k entries:
# 19 us scalar, 45 us vector, 1.8 ns per entry; 64 such blocks, 21k entries: 176 us scalar, 99 us vector)
VECTOR_MIN_NNZ = 1 << 14


def _lanes(index: np.dtype, lanes: int | None, nnz: int) -> int:
    """The vector match's width (``lanes`` if given): one 512-bit register of B's rows on a host with AVX-512
    (16 int32, 8 int64) from VECTOR_MIN_NNZ entries of A on; else 0, the scalar match (a masked load without
    AVX-512 is a branch per lane)."""
    if lanes is not None:
        return lanes
    return 64 // index.itemsize if nnz >= VECTOR_MIN_NNZ and _host_avx512() else 0


# Prefetching in the one pass (``_CSC_PREFETCH``): from this many entries of A, when over 1/32 of the sampled
# row ends (a row's first and last column) lie farther from the row than PREFETCH_WINDOW bytes of B (distance
# in rows times B's bytes per row): then the pass's scattered reads of B leave the cache. Measured (one thread,
# whole drop-in call, thread CPU, median of 11, loaded machine): ba-100k 44 -> 29 ms, fem3d-100k 24 -> 20,
# fem2d-250k 22 -> 18, rmat-s13 2.9 -> 2.1 with it; road-700 (every row within 701 rows: 21 KB) 15 -> 19 and
# banded-150k 12 -> 14 slower (instructions for nothing), so they go without (none of their rows reach 64 KB).
PREFETCH_MIN_NNZ = 1 << 16
PREFETCH_WINDOW = 1 << 16
PREFETCH_DISTANCE = 32
_SAMPLED_ROWS = 256


def prefetch_distance(ap: np.ndarray, ac: np.ndarray, entry_bytes: int) -> int:
    """The prefetch distance for the one pass over a CSR A (entries ahead, 0 for none): prefetch when over a
    quarter of the sampled rows reach farther than PREFETCH_WINDOW bytes of B. Reads A's arrays before they
    are checked: positions clipped, the result only a choice of kernel."""
    nnz, m = len(ac), len(ap) - 1
    if nnz < PREFETCH_MIN_NNZ or m < 1:
        return 0
    step = -(-m // _SAMPLED_ROWS)
    rows = np.arange(0, m, step)
    first = ac.take(ap[:-1:step], mode="clip")
    last = ac.take(ap[1::step] - 1, mode="clip")
    reach = int(PREFETCH_WINDOW * m / (nnz * entry_bytes))     # in rows
    far = np.count_nonzero(np.abs(first - rows) > reach) + np.count_nonzero(np.abs(last - rows) > reach)
    return PREFETCH_DISTANCE if far > len(rows) // 16 else 0


# A row's fixed cost in the pass on row ranges, in entries (measured on ba-100k for the same-positions pass it
# replaced: ranges of equal entries but 3x the rows took 1.5x the CPU time; a range's first use of a column
# searches it)
CURSOR_ROW_COST = 4


def csr_with_csc_ranges(op: str, a, b_csc, dtype, m: int, n: int, threads: int, prefetch: int = 0,
                        lanes: int | None = None, keep_zeros: bool = False):
    """``csr_with_csc`` on row ranges balanced by entries, one per thread, for operands checked by the caller (A
    canonical; B's positions, and for a product all of B, unless B's index arrays are A's memory). Each range
    writes its results from its rows' first entry of A on (an upper bound) and its row ends there; the ranges
    after the first then move down to close the gaps (bit-identical to one thread). Returns ``(data, indices,
    indptr)``, or 1 (a sum: B's positions are not A's) or 4 (a product of floats with a NaN or Inf, which
    needs the caller's union merge)."""
    av, ac, ap = a
    bv, bc, bp = b_csc
    size = len(ac)
    if op != "multiply" and len(bc) != size:
        return 1
    chunks = ir_text.work_chunks(ap, threads, CURSOR_ROW_COST)
    with _lock:
        kernels = [_csc_pass_kernel(op, dtype, ac.dtype.itemsize * 8, prefetch, ranged, _lanes(ac.dtype, lanes, size),
                                    MODE_ROWS, MISS_SHARE, keep_zeros)
                   for ranged in ("first", "later")[:len(chunks)]]
    vals = np.empty(size, dtype=dtype)
    cols = np.empty(size, dtype=ac.dtype)
    indptr = np.empty(m + 1, dtype=ap.dtype)
    # a float product, per range: B entries its cursors passed; then the cursors' first sum and the columns
    # reached, which the pass keeps here rather than in registers across its loops (spills: 12-17 % slower)
    seen = np.zeros((len(chunks), 4), dtype=np.int64)

    def run(t, lo, hi):
        cursor = np.empty(2 * n, dtype=ap.dtype)     # (next entry, end) per column; only those the range reaches
        passed = seen[t]                         # held: the kernel reads the view object by address
        return kernels[lo > 0](id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cursor), id(cols), id(vals),
                               id(indptr), m, n, size, len(bc), lo, hi, id(passed))

    ends = ir_text.run_chunks(run, chunks, threads)
    if min(ends) < 0:
        return -min(ends)
    if op == "multiply" and dtype.kind == "f" and not keep_zeros and int(seen[:, 0].sum()) != len(bc) and not np.isfinite(bv.sum()):
        return 4     # B entries no cursor passed, not all finite (a finite sum proves them finite)
    offset = 0
    for (lo, hi), end in zip(chunks, ends):
        start = int(ap[lo])
        if start != offset:     # a move to a lower offset: numpy copies overlapping ranges correctly
            cols[offset:offset + end - start] = cols[start:end]
            vals[offset:offset + end - start] = vals[start:end]
            indptr[lo + 1:hi + 1] -= start - offset
        offset += end - start
    if offset != size:
        vals.resize(offset, refcheck=False)       # shrink in place: no copy of the entries
        cols.resize(offset, refcheck=False)
    return vals, cols, indptr


_csc_kernels: dict = {}    # (op, value dtype, index dtype) -> the compiled pass (looked up per call: no lock)
