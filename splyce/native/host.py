"""Facts about this host that every cache key holds (LLVM triple, CPU name and features; llvmlite's, LLVM's and
the MLIR bindings' versions), memoized in the cache folder so that a process whose kernels all come from the
disk cache never imports llvmlite (~20 ms of imports, and LLVM's initialisation) to compute their keys.

The memo is ``host-<fingerprint>.json`` in the cache folder. The fingerprint names what would change an answer
without asking llvmlite: the CPU as the kernel describes it (``/proc/cpuinfo``: vendor, family, model, flags;
a VM moved to another host gets another file), the Python environment, and the installed llvmlite and MLIR
bindings (their package folders' identity and modification time: reinstalling either rewrites them). Linux
only: elsewhere, and when the memo cannot be read or written, llvmlite answers in every process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import threading
from pathlib import Path

from splyce.native import object_cache

_lock = threading.Lock()
FACTS = ("triple", "cpu", "features", "llvmlite", "llvm", "mlir")


def _package_stamp(name: str) -> str:
    """The identity of an installed package's folder (device, inode, modification time), without importing
    it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return f"{name}:missing"
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    if not places:
        return f"{name}:missing"
    stamps = []
    for place in places:
        with contextlib.suppress(OSError):
            st = os.stat(place)
            stamps.append(f"{place}:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}")
    return f"{name}:" + ";".join(stamps)


def _cpu_description() -> str | None:
    """The first processor's identifying lines of ``/proc/cpuinfo`` (None when there is none: not Linux)."""
    wanted = ("vendor_id", "cpu family", "model", "model name", "flags", "cpu implementer", "cpu part",
              "features", "isa", "uarch")
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = []
            for line in f:
                if not line.strip():
                    break
                key = line.split(":", 1)[0].strip().lower()
                if key in wanted:
                    lines.append(line.strip())
    except OSError:
        return None
    return "\n".join(lines) if lines else None


@functools.cache
def fingerprint() -> str | None:
    """What the facts depend on, hashed; None when it cannot be told without asking llvmlite."""
    if not sys.platform.startswith("linux"):
        return None
    cpu = _cpu_description()
    if cpu is None:
        return None
    text = "\n".join([cpu, sys.prefix, sys.version, _package_stamp("llvmlite"), _package_stamp("mlir")])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _ask_llvmlite() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import llvmlite
    import llvmlite.binding as llvm

    with _lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
    try:
        mlir = version("xtc-mlir-python-bindings")
    except PackageNotFoundError:  # pragma: no cover - another MLIR build
        try:
            from mlir import ir

            mlir = getattr(ir, "__version__", "unknown")
        except ImportError:
            mlir = "missing"
    return {"triple": llvm.get_process_triple(), "cpu": llvm.get_host_cpu_name(),
            "features": llvm.get_host_cpu_features().flatten(), "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)), "mlir": mlir}


def memo_path() -> Path | None:
    stamp = fingerprint()
    if stamp is None:
        return None
    return object_cache.cache_dir() / f"{object_cache.HOST_PREFIX}{stamp}.json"


asked = 0   # how many times this process asked llvmlite (tests: 0 in a process whose memo was there)


@functools.cache
def facts() -> dict:
    """``{triple, cpu, features, llvmlite, llvm, mlir}`` for this host: from the memo, else llvmlite (and the
    memo written, atomically; a folder that cannot be written only means llvmlite is asked next time)."""
    global asked
    path = memo_path() if object_cache.enabled() else None
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            found = json.loads(path.read_text())
            if isinstance(found, dict) and all(isinstance(found.get(k), str) for k in FACTS):
                return {k: found[k] for k in FACTS}
    answer = _ask_llvmlite()
    asked += 1
    if path is not None:
        object_cache.write_text(path, json.dumps(answer, sort_keys=True))
    return answer
