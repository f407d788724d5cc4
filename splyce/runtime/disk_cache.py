"""The on-disk kernel cache: machine code keyed by everything that changes it, shared across processes.

Dispatch order (like numba): the in-memory table of each ``Jitted``, then this cache, then the compiler. On a
memory miss the dispatcher still traces the Python function (cheap); the canonical trace, not the function's
identity, goes into the key, so two functions with the same trace share an entry.

An entry is one file ``<sha256 of the key>.splk`` in the cache folder (``$SPLYCE_CACHE_DIR``, default
``platformdirs.user_cache_dir("splyce")``; ``SPLYCE_DISABLE_DISK_CACHE=1`` turns the cache off)::

    MAGIC (8 bytes) | payload length (8 bytes, little endian) | sha256(payload) (32 bytes) | payload
    payload = metadata length (4 bytes) | metadata (JSON) | object code

Writes go to a temporary file in the same folder, then ``os.replace``: readers see a whole entry or none, and
processes compiling the same kernel at once each replace it with identical bytes. A truncated or corrupted
entry fails the checksum: it is deleted with a warning and rebuilt, never loaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

MAGIC = b"SPLYCE\x01\x00"
_HEADER = struct.Struct("<8sQ32s")
_META_LEN = struct.Struct("<I")
SUFFIX = ".splk"


@dataclass
class DiskStats:
    """Process-wide counters (``splyce.runtime.disk_cache.stats``)."""

    hits: int = 0
    misses: int = 0
    writes: int = 0
    rejected: int = 0   # corrupted / unreadable entries discarded

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)


stats = DiskStats()
_stats_lock = threading.Lock()


def _count(name: str) -> None:
    with _stats_lock:
        setattr(stats, name, getattr(stats, name) + 1)


def enabled() -> bool:
    return os.environ.get("SPLYCE_DISABLE_DISK_CACHE", "").strip().lower() not in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """The cache folder (read from the environment on every use, so tests can redirect it)."""
    folder = os.environ.get("SPLYCE_CACHE_DIR")
    if folder:
        return Path(folder)
    import platformdirs

    return Path(platformdirs.user_cache_dir("splyce"))


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
    "runtime/disk_cache.py",         # the entry layout
)

_SOURCES_HASH: str | None = None
_sources_lock = threading.Lock()


def codegen_source_files() -> list[Path]:
    root = Path(__file__).parent.parent
    return sorted({path for pattern in CODEGEN_SOURCES for path in root.glob(pattern)})


def compiler_sources_hash() -> str:
    """sha256 over ``CODEGEN_SOURCES``, computed once per process: a changed compiler never reuses stale
    code."""
    global _SOURCES_HASH
    with _sources_lock:
        if _SOURCES_HASH is None:
            root = Path(__file__).parent.parent
            digest = hashlib.sha256()
            for path in codegen_source_files():
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
            _SOURCES_HASH = digest.hexdigest()
    return _SOURCES_HASH


@dataclass(frozen=True)
class CachedDecision:
    """A Splyce pass ``LoopDecision`` read back from an entry (same fields, without importing MLIR)."""

    function: str
    index: int
    vectorized: bool
    reason: str


@functools.cache
def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import llvmlite

    from splyce.version import __version__

    try:
        mlir = version("xtc-mlir-python-bindings")
    except PackageNotFoundError:  # pragma: no cover - another MLIR build
        from mlir import ir

        mlir = getattr(ir, "__version__", "unknown")
    return {"splyce": __version__, "mlir": mlir, "llvmlite": llvmlite.__version__,
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
        "versions": _versions(),
    }


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


# -- entries ------------------------------------------------------------------------------------------------
@dataclass
class Entry:
    object_code: bytes
    metadata: dict


def encode(entry: Entry) -> bytes:
    meta = json.dumps(entry.metadata, sort_keys=True).encode()
    payload = _META_LEN.pack(len(meta)) + meta + entry.object_code
    return _HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


class CorruptEntry(Exception):
    pass


def decode(data: bytes) -> Entry:
    if len(data) < _HEADER.size:
        raise CorruptEntry(f"truncated header ({len(data)} bytes)")
    magic, length, checksum = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptEntry("bad magic")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise CorruptEntry(f"payload is {len(payload)} bytes, the header says {length}")
    if hashlib.sha256(payload).digest() != checksum:
        raise CorruptEntry("checksum mismatch")
    (meta_len,) = _META_LEN.unpack_from(payload)
    meta = json.loads(payload[_META_LEN.size:_META_LEN.size + meta_len])
    return Entry(payload[_META_LEN.size + meta_len:], meta)


def entry_path(key: str) -> Path:
    return cache_dir() / (key + SUFFIX)


def read(key: str) -> Entry | None:
    """The entry for ``key``, or None (missing, or corrupted: then deleted with a warning)."""
    path = entry_path(key)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        _count("misses")
        return None
    except OSError as exc:
        warnings.warn(f"splyce: cannot read the disk cache entry {path}: {exc}; recompiling", stacklevel=4)
        _count("misses")
        return None
    try:
        entry = decode(data)
    except (CorruptEntry, ValueError, struct.error) as exc:
        warnings.warn(f"splyce: discarding the corrupted disk cache entry {path} ({exc}); recompiling",
                      stacklevel=4)
        _count("rejected")
        _count("misses")
        discard(path)
        return None
    _count("hits")
    return entry


def discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write(key: str, entry: Entry) -> None:
    """Store ``entry`` atomically (temporary file in the same folder, then ``os.replace``). A cache that
    cannot be written (read-only folder, full disk) only warns: the kernel still runs."""
    path = entry_path(key)
    data = encode(entry)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            discard(Path(tmp))
            raise
    except OSError as exc:
        warnings.warn(f"splyce: cannot write the disk cache entry {path}: {exc}", stacklevel=4)
        return
    _count("writes")


@contextlib.contextmanager
def compile_lock(key: str):
    """Hold an exclusive lock on ``key`` across processes (``locks/<key>.lock`` in the cache folder) while
    it is read, compiled and written: processes that miss on the same kernel at once (Dask workers on one
    machine) compile it once; the others wait, then load it. Without ``fcntl`` (Windows) or a writable
    folder, no lock: each process may compile, still correct."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = cache_dir() / "locks" / (key + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def clear() -> int:
    """Delete every entry (and stray temporary file) in the cache folder; returns how many files went."""
    folder = cache_dir()
    removed = 0
    if not folder.is_dir():
        return 0
    for path in folder.iterdir():
        if path.name.endswith(SUFFIX) or path.name.endswith(".tmp"):
            discard(path)
            removed += 1
    return removed
