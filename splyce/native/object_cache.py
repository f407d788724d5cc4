"""Machine code on disk, shared across processes: the entry format, atomic writes and per-key compile locks
used by both caches in the cache folder (the jitted kernels' ``runtime/disk_cache.py`` and the native
kernels' ``native/codegen.py``). The ground floor: standard library (and platformdirs) only.

An entry is one file in the cache folder (``$SPLYCE_CACHE_DIR``, default ``platformdirs.user_cache_dir
("splyce")``; ``SPLYCE_DISABLE_DISK_CACHE=1`` turns both caches off)::

    MAGIC (8 bytes) | payload length (8 bytes, little endian) | sha256(payload) (32 bytes) | payload
    payload = metadata length (4 bytes) | metadata (JSON) | object code

Writes go to a temporary file in the same folder, then ``os.replace``: readers see a whole entry or none, and
processes compiling the same code at once each replace it with identical bytes. A truncated or corrupted
entry fails the checksum: it is deleted with a warning and rebuilt, never loaded.
"""

from __future__ import annotations

import contextlib
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

# File suffixes by kind of entry (``python -m splyce.cache info`` counts them apart).
KERNEL_SUFFIX = ".splk"     # a jitted kernel (runtime/disk_cache.py)
NATIVE_SUFFIX = ".splo"     # a native kernel or host helper (native/codegen.py)
KINDS = {KERNEL_SUFFIX: "jitted kernels", NATIVE_SUFFIX: "native kernels"}


@dataclass
class Stats:
    """Process-wide counters of one cache."""

    hits: int = 0
    misses: int = 0
    writes: int = 0
    rejected: int = 0   # corrupted / unreadable entries discarded

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)


_stats_lock = threading.Lock()


def count(stats: Stats, name: str) -> None:
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


def read(path: Path, stats: Stats, stacklevel: int = 2) -> Entry | None:
    """The entry at ``path``, or None (missing, or corrupted: then deleted with a warning)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        count(stats, "misses")
        return None
    except OSError as exc:
        warnings.warn(f"splyce: cannot read the disk cache entry {path}: {exc}; recompiling", stacklevel=stacklevel + 1)
        count(stats, "misses")
        return None
    try:
        entry = decode(data)
    except (CorruptEntry, ValueError, struct.error) as exc:
        reject(path, stats, str(exc), stacklevel + 1)
        return None
    count(stats, "hits")
    return entry


def reject(path: Path, stats: Stats, why: str, stacklevel: int = 2) -> None:
    """Discard a bad entry (it fails its checksum, or its code does not load) with a warning."""
    warnings.warn(f"splyce: discarding the corrupted disk cache entry {path} ({why}); recompiling",
                  stacklevel=stacklevel + 1)
    count(stats, "rejected")
    count(stats, "misses")
    discard(path)


def discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write(path: Path, entry: Entry, stats: Stats) -> str | None:
    """Store ``entry`` atomically (temporary file in the same folder, then ``os.replace``). Returns None, or
    why it could not be written (read-only folder, full disk: the caller warns, the code still runs)."""
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
        return str(exc)
    count(stats, "writes")
    return None


@contextlib.contextmanager
def compile_lock(key: str):
    """Hold an exclusive lock on ``key`` across processes (``locks/<key>.lock`` in the cache folder) while
    it is read, compiled and written: processes that miss on the same code at once (Dask workers on one
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


def entries(folder: Path | None = None) -> dict:
    """``{kind: [(path, size in bytes), ...]}`` of the entries in the cache folder."""
    folder = cache_dir() if folder is None else folder
    found = {kind: [] for kind in KINDS.values()}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            kind = KINDS.get(path.suffix)
            if kind is not None:
                with contextlib.suppress(OSError):
                    found[kind].append((path, path.stat().st_size))
    return found


def clear(suffixes=tuple(KINDS)) -> int:
    """Delete every entry with one of ``suffixes`` (and stray temporary files) in the cache folder; returns
    how many files went."""
    folder = cache_dir()
    removed = 0
    if not folder.is_dir():
        return 0
    for path in folder.iterdir():
        if path.suffix in suffixes or path.name.endswith(".tmp"):
            discard(path)
            removed += 1
    return removed   # lock files stay: deleting one that a process holds would let a second one in
