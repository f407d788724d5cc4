"""Show, clear and warm splyce's disk cache: ``python -m splyce.cache {info,clear,warm}``, or ``info()``,
``clear()`` and ``warm()`` from Python.

The cache folder (``$SPLYCE_CACHE_DIR``, default ``platformdirs.user_cache_dir("splyce")``) holds machine code
for this machine's CPU: jitted kernels (``*.splk``) and the native kernels and helpers behind the drop-ins
(``*.splo``). Warming compiles the drop-ins' kernel set ahead of time, so that a cluster image, a CI job or a
notebook server pays for it once and every later process loads it (docs/caches.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from splyce.native import object_cache

__all__ = ["CacheInfo", "info", "clear", "warm", "WARM_DTYPES"]


@dataclass
class CacheInfo:
    """What ``info()`` reports: the folder, whether the cache is on, and per kind its entries and bytes."""

    folder: Path
    enabled: bool
    entries: dict = field(default_factory=dict)   # kind -> count
    nbytes: dict = field(default_factory=dict)    # kind -> bytes

    @property
    def total_bytes(self) -> int:
        return sum(self.nbytes.values())

    def __str__(self) -> str:
        lines = [f"splyce disk cache: {self.folder}" + ("" if self.enabled else
                                                       "  (off: SPLYCE_DISABLE_DISK_CACHE is set)")]
        for kind, count in self.entries.items():
            lines.append(f"  {kind:<15} {count:>6} entries  {_size(self.nbytes[kind]):>10}")
        lines.append(f"  {'total':<15} {sum(self.entries.values()):>6} entries  {_size(self.total_bytes):>10}")
        return "\n".join(lines)


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""   # pragma: no cover


def info() -> CacheInfo:
    """The cache folder, whether the cache is on, and its entries and size by kind (jitted / native)."""
    found = object_cache.entries()
    return CacheInfo(object_cache.cache_dir(), object_cache.enabled(),
                     {kind: len(items) for kind, items in found.items()},
                     {kind: sum(size for _, size in items) for kind, items in found.items()})


def clear() -> int:
    """Delete every entry (jitted and native kernels) from the disk cache, with the memoized host facts and
    what an interrupted compile left (temporary files, ``link-*`` folders); returns how many went.
    Kernels already loaded in running processes keep working. (``splyce.clear_cache(disk=True)`` also
    empties this process's in-memory caches of jitted functions.)"""
    return object_cache.clear()


# -- warm ------------------------------------------------------------------------------------------------
# The value types the drop-ins' native kernels are generated for by default, and the index widths (scipy's
# int32, and int64 for matrices past 2**31 entries).
WARM_DTYPES = ("float64", "float32", "int64", "complex128")
_INDEX_DTYPES = ("int32", "int64")
# (rows, density): matrices of different sizes and row lengths take different kernels (SpMV: grouped rows
# for long rows in a small matrix, the row-blocked driver for larger ones, ...)
_SIZES = ((60, 0.05), (2000, 0.01), (3000, 0.002), (20000, 0.0005))
_SPMM_COLUMNS = (8, 16, 64)   # SpMM kernels are specialised per column count up to 32, generic beyond
_SHORT_ROWS = 300_000  # rows of 3 entries: past 1 MiB of entries the flat SpMV kernel takes over


def _operands(n: int, density: float, dtype: str, index: str):
    import numpy as np
    import scipy.sparse as sps

    rng = np.random.default_rng(1)
    a, b = (sps.csr_array((np.ones(nnz), rng.integers(0, n, (2, nnz))), shape=(n, n))   # duplicates summed
            for nnz in (int(density * n * n),) * 2)
    for m in (a, b):
        m.data[:] = np.arange(m.nnz) % 7 + 1   # nonzero in every dtype
    a, b = a.astype(dtype), b.astype(dtype)
    for m in (a, b):
        m.indptr, m.indices = m.indptr.astype(index), m.indices.astype(index)
    x = (np.arange(n) % 7).astype(dtype)
    return a, b, x, np.ones((n, max(_SPMM_COLUMNS)), dtype=dtype)


def _short_rows(dtype: str, index: str):
    import numpy as np
    import scipy.sparse as sps

    n = _SHORT_ROWS
    rows = np.repeat(np.arange(n), 3)
    cols = (rows + np.tile(np.array([0, 1, 7]), n)) % n
    a = sps.csr_array((np.ones(3 * n, dtype=dtype), (rows, cols)), shape=(n, n))
    a.indptr, a.indices = a.indptr.astype(index), a.indices.astype(index)
    return a, np.ones(n, dtype=dtype)


def _drop_in_calls(n: int, density: float, dtype: str, index: str) -> None:
    """The drop-ins scipy users call, once each, on operands of ``dtype`` with ``index`` index arrays."""
    import splyce

    if n == _SHORT_ROWS:
        a, x = _short_rows(dtype, index)
        splyce.matmul(a, x)             # the flat SpMV kernel
        return
    a, b, x, dense = _operands(n, density, dtype, index)
    splyce.matmul(a, x)                 # SpMV
    splyce.matmul(a.tocsc(), x)         # CSC SpMV
    for k in _SPMM_COLUMNS:
        splyce.matmul(a, dense[:, :k])  # SpMM
    splyce.matmul(a, b)                 # SpGEMM
    splyce.multiply(a, b)               # Hadamard
    splyce.multiply(a, b.T)             # Hadamard with a transposed operand
    splyce.add(a, b)
    splyce.subtract(a, b)
    splyce.multiply(a, a)               # operands of one structure: the same-pattern kernels
    splyce.add(a, a)
    splyce.subtract(a, a)
    splyce.multiply(a, dense[:, :1])    # broadcast
    if dtype != "complex128":
        splyce.einsum("ij,jk,ik->", a, b, a)   # masked SpGEMM (triangle counting's shape)


def warm(dtypes=WARM_DTYPES, progress: bool = True) -> dict:
    """Compile the drop-ins' native kernels for this CPU ahead of time (or load them, where cached): every
    drop-in on small and large operands of each of ``dtypes`` with int32 and int64 index arrays (SpMM with
    8, 16 and 64 columns; SpMV also on many short rows, the flat kernel). Returns
    ``{"compiled": n, "loaded": n, "seconds": s}``; a tqdm progress bar when tqdm is installed and
    ``progress``. With the disk cache off it only warms this process."""
    from splyce.native import codegen

    tasks = [(n, density, d, i) for d in dtypes for i in _INDEX_DTYPES
             for n, density in (*_SIZES, (_SHORT_ROWS, 0.0))]
    bar = _bar(len(tasks), progress)
    start = time.perf_counter()
    compiles, hits = codegen.stats.compiles, codegen.stats.hits
    try:
        for n, density, dtype, index in tasks:
            if bar is not None:
                bar.set_postfix_str(f"{dtype}, {index} indices, {n} x {n}")
            _drop_in_calls(n, density, dtype, index)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return {"compiled": codegen.stats.compiles - compiles, "loaded": codegen.stats.hits - hits,
            "seconds": time.perf_counter() - start}


def _bar(total: int, progress: bool):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="splyce cache warm", leave=False, dynamic_ncols=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m splyce.cache", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="where the cache is, its size and entries by kind")
    sub.add_parser("clear", help="delete every entry")
    w = sub.add_parser("warm", help="compile the drop-ins' native kernels for this CPU ahead of time")
    w.add_argument("--dtypes", default=",".join(WARM_DTYPES),
                   help=f"comma-separated value types (default {','.join(WARM_DTYPES)})")
    w.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    args = p.parse_args(argv)
    if args.command == "info":
        print(info())
    elif args.command == "clear":
        print(f"removed {clear()} files from {object_cache.cache_dir()}")
    else:
        if not object_cache.enabled():
            print("splyce: the disk cache is off (SPLYCE_DISABLE_DISK_CACHE): nothing would be kept",
                  file=sys.stderr)
            return 1
        dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
        result = warm(dtypes, progress=not args.no_progress)
        print(f"warmed in {result['seconds']:.1f} s: {result['compiled']} native modules compiled, "
              f"{result['loaded']} loaded from the cache")
        print(info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
