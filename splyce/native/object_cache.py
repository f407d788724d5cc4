"""Machine code on disk, shared across processes: the entry format, atomic writes and per-key compile locks
used by both caches in the cache folder (the jitted kernels' ``runtime/disk_cache.py`` and the native
kernels' ``native/codegen.py``). The ground floor: standard library (and platformdirs off Linux) only.

An entry is one file in the cache folder (``$SPLYCE_CACHE_DIR``, default ``platformdirs.user_cache_dir
("splyce")``; ``SPLYCE_DISABLE_DISK_CACHE=1`` turns both caches off)::

    code | metadata (JSON) | trailer
    trailer = code length (8 bytes, little endian) | metadata length (4 bytes) | sha256(code | metadata)
              (32 bytes) | MAGIC (8 bytes)

The code comes first and the check last so that an entry holding a shared library (native/shared_lib.py)
is itself a loadable library: the dynamic loader reads the ELF headers at the start and ignores the bytes
after the sections, so a later process verifies the checksum and dlopens the entry file as it is.

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
import sys
import tempfile
import threading
import warnings
from pathlib import Path

MAGIC = b"SPLYCE\x02\x00"
_TRAILER = struct.Struct("<QI32s8s")

# File suffixes by kind of entry (``python -m splyce.cache info`` counts them apart).
KERNEL_SUFFIX = ".splk"     # a jitted kernel (runtime/disk_cache.py)
NATIVE_SUFFIX = ".splo"     # a native kernel or host helper (native/codegen.py)
KINDS = {KERNEL_SUFFIX: "jitted kernels", NATIVE_SUFFIX: "native kernels"}
LINK_PREFIX = "link-"       # a folder a shared library is linked in (removed when done)
HOST_PREFIX = "host-"       # memoized host facts (native/host.py) and sources' hash (runtime/disk_cache.py)


class Stats:
    """Process-wide counters of one cache: ``hits``, ``misses``, ``writes``, ``rejected`` (corrupted or
    unloadable entries discarded). A plain class (a dataclass costs ~1 ms to create at import)."""

    COUNTERS = ("hits", "misses", "writes", "rejected")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        for name in self.COUNTERS:
            setattr(self, name, 0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)}' for n in self.COUNTERS)})"


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
    if sys.platform.startswith("linux"):   # platformdirs' answer on Linux, without its import (~3 ms)
        base = os.environ.get("XDG_CACHE_HOME", "").strip()
        return Path(base if os.path.isabs(base) else os.path.expanduser("~/.cache")) / "splyce"
    import platformdirs

    return Path(platformdirs.user_cache_dir("splyce"))


class Entry:
    """One entry: its code (a shared library, or object code for llvmlite: ``metadata["artifact"]`` says which,
    native/codegen.py) and the metadata its loader needs."""

    __slots__ = ("code", "metadata")

    def __init__(self, code: bytes, metadata: dict):
        self.code = code
        self.metadata = metadata

    def __eq__(self, other) -> bool:
        return isinstance(other, Entry) and (self.code, self.metadata) == (other.code, other.metadata)

    def __repr__(self) -> str:
        return f"Entry({len(self.code)} bytes of code, {self.metadata!r})"


def encode(entry: Entry) -> bytes:
    meta = json.dumps(entry.metadata, sort_keys=True).encode()
    body = entry.code + meta
    return body + _TRAILER.pack(len(entry.code), len(meta), hashlib.sha256(body).digest(), MAGIC)


class CorruptEntry(Exception):
    pass


def decode(data: bytes) -> Entry:
    if len(data) < _TRAILER.size:
        raise CorruptEntry(f"truncated ({len(data)} bytes)")
    code_len, meta_len, checksum, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if magic != MAGIC:
        raise CorruptEntry("bad magic")
    body = memoryview(data)[:len(data) - _TRAILER.size]
    if len(body) != code_len + meta_len:
        raise CorruptEntry(f"{len(body)} bytes of code and metadata, the trailer says {code_len + meta_len}")
    if hashlib.sha256(body).digest() != checksum:
        raise CorruptEntry("checksum mismatch")
    return Entry(bytes(body[:code_len]), json.loads(bytes(body[code_len:])))


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


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then ``os.replace`` (raises
    OSError; the temporary file is removed on any failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        discard(Path(tmp))
        raise


def write(path: Path, entry: Entry, stats: Stats) -> str | None:
    """Store ``entry`` atomically. Returns None, or why it could not be written (read-only folder, full disk:
    the caller warns, the code still runs)."""
    data = encode(entry)
    try:
        _replace(path, data)
    except OSError as exc:
        return str(exc)
    count(stats, "writes")
    return None


def write_text(path: Path, text: str) -> bool:
    """Write a small text file atomically (a memo beside the entries); False when the folder cannot be
    written (the memo is then recomputed by the next process)."""
    try:
        _replace(path, text.encode())
    except OSError:
        return False
    return True


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
    """Delete every entry with one of ``suffixes`` in the cache folder, and what compiling leaves behind when
    a process dies mid-way (temporary files, ``link-*`` folders of native/shared_lib.py) and the memoized host
    facts (``host-*.json``, native/host.py); returns how many files and folders went."""
    import shutil

    folder = cache_dir()
    removed = 0
    if not folder.is_dir():
        return 0
    for path in folder.iterdir():
        name = path.name
        if name.startswith(LINK_PREFIX) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        elif path.suffix in suffixes or name.endswith(".tmp") or (name.startswith(HOST_PREFIX)
                                                                    and name.endswith(".json")):
            discard(path)
            removed += 1
    return removed   # lock files stay: deleting one that a process holds would let a second one in
