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
_SOURCES_HASH: str | None = None
_sources_lock = threading.Lock()


def compiler_sources_hash() -> str:
    """sha256 over splyce's compiler sources (every .py of the stages that generate code, plus this file:
    the entry layout), computed once per process: a changed compiler never reuses stale code."""
    global _SOURCES_HASH
    with _sources_lock:
        if _SOURCES_HASH is None:
            root = Path(__file__).parent.parent
            files = sorted([*(root / "lowering").rglob("*.py"), *(root / "tracer").rglob("*.py"),
                            *(root / "passes").rglob("*.py"), *(root / "backend").rglob("*.py"),
                            root / "tensors" / "formats.py", Path(__file__)])
            digest = hashlib.sha256()
            for path in files:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
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

    import splyce

    try:
        mlir = version("xtc-mlir-python-bindings")
    except PackageNotFoundError:  # pragma: no cover - another MLIR build
        from mlir import ir

        mlir = getattr(ir, "__version__", "unknown")
    return {"splyce": splyce.__version__, "mlir": mlir, "llvmlite": llvmlite.__version__,
            "compiler_sources": compiler_sources_hash()}


def key_parts(trace, static_args, out_format, options) -> dict:
    """The named parts of a disk key, as JSON-able strings (so a miss can be explained part by part)."""
    target = options.target
    opts = {f.name: repr(getattr(options, f.name)) for f in fields(options) if f.name != "target"}
    return {
        "trace": trace.as_text(),
        "trace_structure": repr(trace),
        "static_args": repr(static_args),
        "inputs": repr(trace.inputs),
        "out_format": repr(out_format),
        "options": opts,
        "triple": target.triple,
        "cpu": target.cpu,
        "features": target.features,
        "versions": _versions(),
    }


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
