"""CSR times a dense vector (SpMV) or a dense matrix (SpMM), native code, one thread or row chunks: the compiled
variants, their drivers and the entry points (the kernels' IR: spmv_rows.py, per row; spmv_flat.py, one loop
over the entries of short rows).

Every row sums its products in stored order from +0.0, as scipy's ``csr_matvec`` and the plain sparsifier do,
so results are bit for bit the same. A matrix whose entries stay in cache is bound by the latency of each
row's chain of additions and by the mispredicted exit of every short row loop; there (the drop-in's fast path,
``GROUPED_MAX_BYTES``, on the CPUs where that pays) rows of varying lengths go in groups of ``GROUPED_ROWS``
(spmv_rows.py). Beyond cache the gather from memory bounds it and rows go one at a time. Rows of a few entries
(``FLAT_MAX_ROW``; on some CPUs only beyond ``FLAT_MIN_BYTES``) go through one flat loop over all the entries
instead, with no branch on a row's end (spmv_flat.py).

Index checks: the kernels check positions and coordinates as they read them (spmv_rows.py). Measured
against the alternatives on the shared 2-core EPYC (docs/corpus.md): a SIMD scan of each block of rows
before the rows ran cost 10-20 % on matrices beyond cache (the scan's memory time does not overlap the
product's), a clamped (selected) index 20-30 % (the gather waits for the compare). The drop-in's fast path
(``_spmv_objects``) also checks the two ends of the positions in native code, so a malformed scipy operand
is refused with nothing checked in Python. SpMM checks the same way, every thread its own rows.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from splyce.native.array_objects import address as _address
from splyce.native.ir_text import VALUE, run_chunks as _run_chunks, work_chunks as _work_chunks
from splyce.native.ir_text import supported  # noqa: F401  (``spmv.supported``: the one table's)
from splyce.native.spmv_flat import spmv_flat_ir
from splyce.native.spmv_rows import block_driver_ir, spmm_ir, spmv_ir, whole_ir

# Rows advanced together (independent addition chains). Measured on the shared 2-core EPYC (Delaunay meshes,
# R-MAT, 0.7-1M entries): 1 is fastest there (1.76 ms vs 2.16 for 4 and 3.0 for 8 on a 3-D mesh); the gather
# from x, not the addition chain, bounds it. Kept as a knob for machines where the latency dominates.
ROWS = 1

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (pos, crd, values, x, n, lo, hi, y, nnz) -> 0, or 1 when a checking kernel met a bad index
_SPMV_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _I, _I, _I, _P, _I)
# (pos, crd, values, X, n, lo, hi, Y, k, nnz) -> as _SPMV_SIG
_SPMM_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _I, _I, _I, _P, _I, _I)
_lock = threading.Lock()

# The flat kernel (spmv_flat.py) pays only for rows of a few entries: measured (docs/corpus.md) 1.5-1.6x the
# per-row kernel on road graphs (2.5 entries per row), 0.5-0.9x on 6-25.
FLAT_MAX_ROW = 4       # average entries per row (nnz <= FLAT_MAX_ROW * m) up to which the drop-in goes flat


# -- compiled variants and the drivers ----------------------------------------------------------------------
SPMM_FIXED = 32    # column counts up to this get a kernel with the row's sums in registers


@functools.cache
def _spmv(value: np.dtype, p: int, c: int, check: bool, flat: bool = False):
    """The SpMV kernel on rows [lo, hi); with ``check``, one that checks the positions and columns it reads as
    it reads them (``spmv_rows.spmv_ir``) and returns 1, the output incomplete, at the first defect. ``flat``: the flat
    kernel for rows of a few entries (spmv_flat.py), which always checks (its checks are predicted branches)."""
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spmv_{VALUE[value][0]}_p{p}_c{c}_" + ("flat_checked" if flat else f"r{ROWS}" + "_checked" * check)
    text = kernel_ir(name, value, p, c, "flat" if flat else "rows", check)
    return compile_host_helpers(text, {name: _SPMV_SIG})[name]


def kernel_ir(name: str, value: np.dtype, p: int, c: int, variant: str, check: bool = True) -> str:
    """SpMV on rows [lo, hi) (``spmv_rows.ROW_PARAMS``), by ``variant``: "rows" (one row at a time, ``check``:
    checking what it reads), or per block of ``GROUPED_BLOCK_ROWS`` rows, a block of rows of one length one
    row at a time and the others "grouped" (``GROUPED_ROWS`` rows together, the block's positions and columns
    scanned first by SIMD scans, the kernels checking nothing) or "flat" (the flat loop; each kernel checks)."""
    if variant == "rows":
        return spmv_ir(name, value, p, c, ROWS, check)
    other = (spmv_flat_ir(name + "_flat", value, p, c) if variant == "flat"
             else spmv_ir(name + "_grouped", value, p, c, GROUPED_ROWS))
    return (spmv_ir(name + "_rows", value, p, c, ROWS, variant == "flat") + other
            + block_driver_ir(name, p, c, GROUPED_BLOCK_ROWS, variant, scan=variant == "grouped"))


# For a matrix whose entries stay in cache: per block of GROUPED_BLOCK_ROWS rows, a SIMD scan of the block's
# positions (monotone) and of the range of its columns, then the block's rows, which read them again from
# cache, in groups of GROUPED_ROWS unless they all have one length (then one at a time: every loop exit is
# predicted, and groups only add work). In cache the scan is cheap, and the grouped kernel without a branch
# per entry was measured 1.3x faster than with one (ba-4k, pyamg-bar).
GROUPED_BLOCK_ROWS = 512


# Rows advanced together in the grouped kernel. Measured on the shared 2-core EPYC (Zen 1), raw kernels, min of
# 25 interleaved repeats, vs ROWS = 1: 1.3-1.45x faster on small meshes, power-law and block matrices (fem2d-3k
# 43 -> 30 us, propack 22 -> 17 us), equal on R-MAT and 3-D meshes, slower on uniform rows (banded) and on
# matrices beyond cache (there the gather from memory bounds it, and ROWS = 1 is fastest).
GROUPED_ROWS = 3


def _tuned_for(cpu: str, l2_bytes: int) -> tuple[int, int, int]:
    """(GROUPED_MAX_BYTES, GROUPED_MIN_ROW, FLAT_MIN_BYTES) for this CPU: the matrix size (index + value bytes
    of the entries) up to which the grouped kernel runs, for an average row of at least GROUPED_MIN_ROW
    entries, and the size from which rows of a few entries go flat. Measured per machine (docs/corpus.md,
    "SpMV kernel choice by CPU"). Zen 1 / Zen 2 (512 KiB L2): grouped rows in L2 (1.3-1.45x the one-row
    kernel), the flat loop at any size (road-100: 1.83 vs 1.18x scipy). Zen 4 (1 MiB L2): grouped rows pay in
    L2 only on long rows (37-39 entries: 1.25x the one-row kernel; 14-16: 1.02-1.04x; 6-12: 0.86-0.97x), and
    beyond L2 the flat loop wins on short rows (road-700: 1.9x the one-row kernel). Zen 5 (1 MiB L2), and by
    default the CPUs not measured: in L2 the one-row kernel is fastest everywhere (grouped 0.66-0.96x of it,
    flat 0.41-0.62x: road-100 0.97x scipy flat, 2.24x one row) and beyond L2 the flat loop wins on short rows
    (road graphs of 1.2-14 MB: 1.47-1.72x scipy against the one-row kernel's 0.92-1.00x). Sapphire Rapids
    (``_GOLDEN_COVE``): grouped rows in L2 from 5.5 entries a row, flat short rows at any size."""
    if cpu in ("znver1", "znver2"):
        return 512 << 10, 0, 0
    if cpu == "znver4":
        return l2_bytes, 14, l2_bytes
    if cpu in _GOLDEN_COVE:
        return l2_bytes, 5.5, 0
    return 0, 0, l2_bytes


# The Sapphire-Rapids-class Xeon (2 MiB L2; LLVM names its host CPU rocketlake under KVM), 2026-12-05, the
# drop-in's kernels on the corpus, min of 60 interleaved batches of 50 calls, us, one row / grouped / flat /
# scipy (shared cores, load ~4): fem2d-3k 27.2 / 13.4 / - / 21.3, fem3d-1500 20.5 / 12.6 / - / 18.3, ba-4k
# 26.5 / 16.1 / - / 25.4, rmat-s10 9.9 / 8.7 / - / 8.7, pyamg-bar 14.1 / 12.1 / - / 13.3, pyamg-ldg 22.5 / 17.0 / -
# / 18.9, blockdiag-32 9.4 / 7.1 / - / 9.8, propack 10.4 / 10.0 / - / 9.6; rows of 5 (banded-4k) 13.1 / 15.3 /
# - / 12.0: one row; 2.5 (road-100) 61.6 / 49.0 / 34.2 / 50.7: flat. Grouped in L2 from 5.5 entries a row
# (ba-4k's 5.97 grouped, banded-4k's 5.0 not), flat rows of a few entries at any size.
_GOLDEN_COVE = ("sapphirerapids", "emeraldrapids", "rocketlake")


def _l2_bytes() -> int:
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        return int(text[:-1]) << {"K": 10, "M": 20}[text[-1]] if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError, KeyError):
        return 1 << 20


def _host_cpu() -> str:
    from splyce.native.codegen import host_target

    return host_target().cpu


L2_BYTES = _l2_bytes()
GROUPED_MAX_BYTES, GROUPED_MIN_ROW, FLAT_MIN_BYTES = _tuned_for(_host_cpu(), L2_BYTES)


@functools.cache
def _spmm(value: np.dtype, p: int, c: int, k: int | None, check: bool = False):
    from splyce.native.codegen import compile_host_helpers

    name = f"splyce_spmm_{VALUE[value][0]}_p{p}_c{c}_k{k or 'any'}" + ("_checked" if check else "")
    return compile_host_helpers(spmm_ir(name, value, p, c, k, check), {name: _SPMM_SIG})[name]



@functools.cache
def _spmv_objects(value: np.dtype, p: int, c: int, variant: str):
    """``i64 f(id(indptr), id(indices), id(data), id(x), id(y), n, m, nnz)``: the checking SpMV on array
    objects (``array_objects``), nonzero when the index arrays are malformed (then ``y`` is incomplete).
    ``variant``: "rows" (one row at a time), "grouped" (rows of varying lengths in groups of ``GROUPED_ROWS``,
    for matrices that stay in cache) or "flat" (one loop over all entries, for rows of a few entries)."""
    return _objects(*spmv_objects_ir(value, p, c, variant))


def spmv_objects_ir(value: np.dtype, p: int, c: int, variant: str, k: int | None = None) -> tuple[str, str]:
    """The IR of ``_spmv_objects`` (``k``: of ``_spmm_objects``) and its entry's name: the checking kernel, the
    whole product's entry (``spmv_rows.whole_ir``) and its entry on array objects."""
    from splyce.native import array_objects

    if variant not in ("rows", "grouped", "flat", "spmm"):
        raise ValueError(f"unknown SpMV variant {variant!r}")
    suffix = {"rows": "", "grouped": f"_g{GROUPED_ROWS}", "flat": "_flat", "spmm": ""}[variant]
    name = (f"splyce_spmm_{VALUE[value][0]}_p{p}_c{c}_k{k}" if k else
            f"splyce_spmv_{VALUE[value][0]}_p{p}_c{c}_r{ROWS}" + suffix)
    checked, whole, entry = name + "_checked", name + "_whole", name + "_objects"
    text = spmm_ir(checked, value, p, c, k, True) if k else kernel_ir(checked, value, p, c, variant)
    return text + whole_ir(whole, checked, p, k) + array_objects.object_entry_ir(entry, whole, "aaaaaiii"), entry


def _objects(text: str, entry: str):
    from splyce.native import array_objects
    from splyce.native.codegen import compile_host_helpers

    return compile_host_helpers(text, {entry: array_objects.signature(8)})[entry]


@functools.cache
def _spmm_objects(value: np.dtype, p: int, c: int, k: int):
    """``i64 f(id(indptr), id(indices), id(data), id(X), id(Y), n, m, nnz)``: SpMM with ``k`` (<= SPMM_FIXED)
    columns on array objects, checking what it reads as SpMV does; nonzero (``Y`` incomplete) when the operand
    is malformed."""
    return _objects(*spmv_objects_ir(value, p, c, "spmm", k))


# -- the one rule for SpMV's loop (flat / grouped / one row at a time) ------------------------------------------
# Every chooser asks these three functions: the drop-in's fast path (dropin/products.py, ``spmv_variant``), this
# module's general path and the CSC scatter (``goes_flat``), the planner (``_short_row_spmv``), the native-step
# chooser (runtime/library.py, ``native_steps``) and the MLIR flat-rows pass (passes/flat_rows.py, which emits
# ``flat_min_entries`` and ``FLAT_MAX_ROW`` as constants). No other module reads the tuned constants
# (tests/test_architecture.py, ``test_spmv_rule_defined_once``). The constants are read at call time, so a test
# that sets them here moves every chooser at once.

def flat_min_entries(entry_bits: int) -> int:
    """The fewest entries (of ``entry_bits`` bits: coordinate + value) from which short rows go flat: the least
    ``nnz`` with ``nnz * entry_bits // 8 >= FLAT_MIN_BYTES``."""
    return -(-FLAT_MIN_BYTES * 8 // entry_bits)


def compiled_constants() -> dict:
    """The rule's tuned constants that MLIR kernels hold as numbers (passes/flat_rows.py emits
    ``FLAT_MAX_ROW`` and ``flat_min_entries``, which follows ``FLAT_MIN_BYTES``): part of the disk cache's key."""
    return {"flat_max_row": FLAT_MAX_ROW, "flat_min_bytes": FLAT_MIN_BYTES}


def goes_flat(nnz: int, rows: int, crd_bits: int, value_bytes: int) -> bool:
    """Whether SpMV on ``rows`` rows holding ``nnz`` entries (``crd_bits``-bit coordinates, values of
    ``value_bytes``) runs the flat kernel: rows of a few entries on average, and on some CPUs only beyond a
    size (``FLAT_MIN_BYTES``). The planner asks the same (runtime/library.py, ``native_steps``): where it holds,
    an SpMV inside a program is taken out of the MLIR kernel, whose loop nest pays a row's exit per row."""
    return nnz <= FLAT_MAX_ROW * rows and nnz >= flat_min_entries(crd_bits + value_bytes * 8)


def spmv_variant(nnz: int, rows: int, entry_bytes: int) -> str:
    """The SpMV loop for ``rows`` rows holding ``nnz`` entries of ``entry_bytes`` (coordinate + value): "flat"
    (``goes_flat``), "grouped" (a matrix that stays in cache, on the CPUs that gain by it, for rows of at
    least ``GROUPED_MIN_ROW`` entries on average) or "rows" (one row at a time); ``_tuned_for`` has the
    measurements. Any ``rows`` (a malformed ``indptr``'s -1 too: the caller refuses it after choosing)."""
    if nnz <= FLAT_MAX_ROW * rows and nnz * entry_bytes >= FLAT_MIN_BYTES:
        return "flat"
    if nnz * entry_bytes <= GROUPED_MAX_BYTES and nnz >= GROUPED_MIN_ROW * rows:
        return "grouped"
    return "rows"


def beyond_cache(nnz: int, crd_bits: int, value_bytes: int) -> bool:
    """Whether ``nnz`` entries (``crd_bits``-bit coordinates, values of ``value_bytes``) outgrow this core's L2."""
    return nnz * (crd_bits + value_bytes * 8) // 8 > L2_BYTES


def csr_times_dense(indptr, indices, data, x, threads: int = 1, coordinates_checked: bool = True):
    """``A @ x`` for CSR buffers and a C-contiguous ``x`` of A's value dtype, 1-D (SpMV) or 2-D (SpMM). The
    buffers must be checked already (positions monotone from 0 to ``len(indices)``, coordinates in
    ``[0, len(x))``), or, with ``coordinates_checked=False`` (``pos[0] == 0`` and ``pos[-1] == len(indices)``
    still checked by the caller), they are checked inside the kernel as it reads them (by each thread for its
    rows: nothing serial before the threads start), and the result is None when they are not well formed."""
    m = len(indptr) - 1
    n = x.shape[0]
    p, c = indptr.dtype.itemsize * 8, indices.dtype.itemsize * 8
    if x.ndim == 1:
        y = np.empty(m, dtype=data.dtype)
        with _lock:
            flat = goes_flat(len(indices), m, c, data.dtype.itemsize)
            fn = _spmv(data.dtype, p, c, not coordinates_checked, flat)
        extra = (len(indices),)
    else:
        k = x.shape[1]
        y = np.empty((m, k), dtype=data.dtype)
        with _lock:
            fn = _spmm(data.dtype, p, c, k if k <= SPMM_FIXED else None, not coordinates_checked)
        extra = (k, len(indices))

    def args(lo, hi):
        return (_address(indptr), _address(indices), _address(data), _address(x), n, lo, hi,
                _address(y), *extra)

    # rows balanced by entries (any split is safe: each range checks its own rows); the first range on the
    # calling thread; one range when the entries are too few for a split to pay (ir_text.MIN_CHUNK)
    bad = any(_run_chunks(lambda t, lo, hi: fn(*args(lo, hi)), _work_chunks(indptr, threads), threads))
    return None if bad else y
