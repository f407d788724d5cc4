"""The jitted kernels' entries in the disk cache (runtime/disk_cache.py): the key of a traced kernel, a lowering
loaded from its entry (no compile), and a compiled kernel's machine code and metadata stored for later
processes."""

from __future__ import annotations

import time

from splyce.backend.compiler import Lowering, load_entry
from splyce.options import Options
from splyce.runtime import disk_cache
from splyce.runtime.kernel import Kernel
from splyce.tracer.ir import Trace


def disk_key(trace: Trace, key) -> str:
    """The disk cache's key of the kernel for ``trace`` under ``key`` (a ``cache_key.CacheKey``)."""
    return disk_cache.digest(disk_cache.key_parts(trace, key.static_args, key.out_format, key.options))


def load(disk_key: str, trace: Trace, options: Options) -> Lowering | None:
    """A lowering whose native code comes from the disk cache (loaded), or None on a miss (or a bad entry:
    one that does not load is discarded with a warning, and the kernel recompiled)."""
    entry = disk_cache.read(disk_key)
    if entry is None:
        return None
    start = time.perf_counter()
    path = disk_cache.entry_path(disk_key)
    try:
        loaded = load_entry(path, entry, options)
    except (OSError, LookupError, RuntimeError) as exc:
        disk_cache.reject(path, f"does not load: {exc}")
        return None
    meta = entry.metadata
    decisions = [disk_cache.CachedDecision(**d) for d in meta["decisions"]]
    low = Lowering.from_loaded(trace, options, loaded, tuple(meta["result_ranks"]), decisions,
                               meta.get("outer_extent"), meta.get("outer_reductions", ()))
    low.timings["load"] = time.perf_counter() - start
    return low


def store(lowering: Lowering, kernel: Kernel) -> None:
    compiled = kernel.compiled
    if compiled.artifact is None:  # pragma: no cover - MCJIT emitted no single object
        return
    meta = {"result_ranks": list(lowering.result_ranks), "outer_extent": lowering.outer_extent,
            "outer_reductions": [list(r) for r in lowering.outer_reductions], "artifact": compiled.artifact_kind,
            "decisions": [dict(function=d.function, index=d.index, vectorized=d.vectorized, reason=d.reason)
                          for d in lowering.decisions]}
    disk_cache.write(lowering.disk_key, disk_cache.Entry(compiled.artifact, meta))
