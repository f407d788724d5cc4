"""The on-disk kernel cache: machine code keyed by everything that changes it, shared across processes.

Dispatch order (like numba): the in-memory table of each ``Jitted``, then this cache, then the compiler. On a
memory miss the dispatcher still traces the Python function (cheap); the canonical trace, not the function's
identity, goes into the key, so two functions with the same trace share an entry.

An entry is one file ``<sha256 of the key>.splk`` in the cache folder (``$SPLYCE_CACHE_DIR``, default
``platformdirs.user_cache_dir("splyce")``; ``SPLYCE_DISABLE_DISK_CACHE=1`` turns the cache off), in the
format of ``native/object_cache.py`` (checksummed, written atomically; a corrupted entry, or one whose code
does not load, is deleted with a warning and rebuilt). It holds a shared library, dlopened from the entry
file itself (or, without a linker, object code for llvmlite: native/shared_lib.py). The native kernels' entries (``.splo``) live beside them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import warnings
from dataclasses import fields
from pathlib import Path

from splyce.backend import vector_math
from splyce.native import codegen, host, object_cache
from splyce.native.records import record
from splyce.native.object_cache import MAGIC, CorruptEntry, Entry, cache_dir, decode, enabled, encode  # noqa: F401

SUFFIX = object_cache.KERNEL_SUFFIX
DiskStats = object_cache.Stats
stats = DiskStats()   # process-wide counters (``splyce.runtime.disk_cache.stats``)


# -- the key ------------------------------------------------------------------------------------------------
# The sources that change generated code for a given trace and options (package-relative globs). The trace
# itself is in the key as text, so modules that only run on the host (dispatch, calls, validation,
# conversions) are not listed: editing them must not throw the cache away. A test checks every pattern
# still matches a file, so a rename cannot silently drop one.
CODEGEN_SOURCES = (
    "tensors/formats.py",            # builds every sparse_tensor encoding
    "tracer/*.py",
    "planner/*.py",
    "lowering/*.py",
    "passes/*.py",
    "backend/compiler.py",
    "native/codegen.py",
    "backend/alloc_guard.py",        # the guarded entry and the heap functions kernels call
    "runtime/arguments.py",          # the entry point's buffer layout
    "runtime/disk_cache.py",         # the key
    "native/object_cache.py",        # the entry layout
    "native/shared_lib.py",          # how code is linked and loaded
)

_SOURCES_HASH: str | None = None
_sources_lock = threading.Lock()


def codegen_source_files() -> list[Path]:
    root = Path(__file__).parent.parent
    return sorted({path for pattern in CODEGEN_SOURCES for path in root.glob(pattern)})


def compiler_sources_hash() -> str:
    """sha256 over ``CODEGEN_SOURCES``, computed once per process: a changed compiler never reuses stale
    code. Memoized in the cache folder by the files' sizes and modification times (``host-sources-*.json``),
    so that a process loading its kernels reads none of the ~50 files."""
    global _SOURCES_HASH
    with _sources_lock:
        if _SOURCES_HASH is None:
            root = Path(__file__).parent.parent
            files = codegen_source_files()
            memo = None
            if enabled():
                stamp = hashlib.sha256()
                for path in files:
                    st = path.stat()
                    stamp.update(f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}\n".encode())
                memo = cache_dir() / f"{object_cache.HOST_PREFIX}sources-{stamp.hexdigest()[:24]}.json"
                try:
                    found = json.loads(memo.read_text()).get("sha256")
                except (OSError, ValueError, AttributeError):
                    found = None
                if isinstance(found, str) and len(found) == 64:
                    _SOURCES_HASH = found
                    return found
            digest = hashlib.sha256()
            for path in files:
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
            _SOURCES_HASH = digest.hexdigest()
            if memo is not None:
                object_cache.write_text(memo, json.dumps({"sha256": _SOURCES_HASH}))
    return _SOURCES_HASH


@record
class CachedDecision:
    """A Splyce pass ``LoopDecision`` read back from an entry (same fields, without importing MLIR)."""

    function: str
    index: int
    vectorized: bool
    reason: str


@functools.cache
def _versions() -> dict:
    from splyce.version import __version__

    facts = host.facts()   # memoized in the cache folder: no llvmlite or MLIR import to compute a key
    return {"splyce": __version__, "mlir": facts["mlir"], "llvmlite": facts["llvmlite"],
            "compiler_sources": compiler_sources_hash()}


def key_parts(trace, static_args, out_format, options) -> dict:
    """The named parts of a disk key, each a canonical JSON value, so that a miss can be explained part by
    part (``explain``). Formats appear in full (levels, order, index widths), options field by field."""
    target = options.target
    return {
        "trace": trace.as_text(),
        "inputs": [_type_key(t) for t in trace.inputs],
        "static_args": [[i, _value_key(v)] for i, v in static_args],
        "out_format": _value_key(out_format),
        "options": {f.name: _value_key(getattr(options, f.name)) for f in fields(options)
                    if f.name != "target"},
        "target": {"triple": target.triple, "cpu": target.cpu, "features": target.features},
        "versions": dict(_versions(), artifact=codegen.artifact_kind()),   # a shared library, or object code
        "tuning": _tuning(),
        "vector_math": vector_math.key(),   # transcendental calls to libmvec, or libm (backend/vector_math.py)
    }


def _tuning() -> dict:
    """The tuned constants compiled into a kernel as numbers: the flat-rows pass's bound (passes/flat_rows.py
    emits ``spmv.FLAT_MAX_ROW`` and ``spmv.flat_min_entries``, whose size bound ``FLAT_MIN_BYTES`` follows the
    host CPU and its L2 size). A kernel compiled under other values is another kernel: a cache directory
    shared by machines of one CPU name but other cache sizes, or read after a retuning, misses instead of
    running the old bound."""
    from splyce.native import spmv

    return spmv.compiled_constants()


def _type_key(t) -> dict:
    return {"shape": list(t.shape), "dtype": t.dtype, "format": _value_key(t.format)}


def _value_key(value):
    """A canonical, JSON-able form of a key value: formats in full, floats exactly, others typed."""
    from splyce.tensors.formats import Format

    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, Format):
        return {"levels": [str(level) for level in value.levels], "order": list(value.order),
                "pos_width": value.pos_width, "crd_width": value.crd_width}
    if isinstance(value, (tuple, list)):
        return [_value_key(v) for v in value]
    return {type(value).__qualname__: repr(value)}


def explain(parts: dict, other: dict) -> list[str]:
    """The names of the key parts (``options.threads``, ``target.cpu``, ...) in which two keys differ."""
    names = []
    for name in sorted(set(parts) | set(other)):
        mine, theirs = parts.get(name), other.get(name)
        if isinstance(mine, dict) and isinstance(theirs, dict) and name != "out_format":
            names += [f"{name}.{sub}" for sub in sorted(set(mine) | set(theirs)) if mine.get(sub) != theirs.get(sub)]
        elif mine != theirs:
            names.append(name)
    return names


def digest(parts: dict) -> str:
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# -- entries: the format, atomic writes and locks are native/object_cache.py's ---------------------------
def entry_path(key: str) -> Path:
    return cache_dir() / (key + SUFFIX)


def read(key: str) -> Entry | None:
    """The entry for ``key``, or None (missing, or corrupted: then deleted with a warning)."""
    return object_cache.read(entry_path(key), stats, stacklevel=3)


def discard(path: Path) -> None:
    object_cache.discard(path)


def reject(path: Path, why: str) -> None:
    """Discard an entry whose code does not load (with a warning): the kernel is compiled again."""
    object_cache.reject(path, stats, why, stacklevel=3)


def write(key: str, entry: Entry) -> None:
    """Store ``entry`` atomically. A cache that cannot be written (read-only folder, full disk) only warns:
    the kernel still runs."""
    failure = object_cache.write(entry_path(key), entry, stats)
    if failure is not None:
        warnings.warn(f"splyce: cannot write the disk cache entry {entry_path(key)}: {failure}", stacklevel=3)


compile_lock = object_cache.compile_lock


def clear() -> int:
    """Delete every entry, jitted and native (and stray temporary files), in the cache folder; returns how
    many files went."""
    return object_cache.clear()
