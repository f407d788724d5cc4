"""Native code as shared libraries: object code linked once by the system linker, loaded with ``dlopen``.

Why: loading object code through llvmlite's MCJIT means importing llvmlite, initialising LLVM, creating a
target machine and linking in memory: tens of ms in every fresh process, for a kernel that is already
compiled. A shared library linked when the kernel is compiled (``ld -shared``, a few ms, once per machine)
loads with ``ctypes`` in well under a millisecond, without llvmlite. The disk cache entry holds the library
itself (native/object_cache.py puts its check after the code), so a later process dlopens the entry file.

Linking: ``$SPLYCE_LINKER`` names the linker (``ld`` or a compiler driver such as ``cc``; ``none``: never
link, load object code through llvmlite as before); by default ``ld``, else ``cc``, found on ``PATH`` (on
Linux; elsewhere only when ``$SPLYCE_LINKER`` names one).
``-Bsymbolic`` binds each library's calls to its own functions (every kernel defines ``splyce_entry``). A
library's undefined symbols are libc's (and libm's) and the checked allocator's ``__splyce_*`` functions
(backend/alloc_guard.py), which its helper library, loaded with ``RTLD_GLOBAL`` before any kernel, provides.

When linking fails, or a library just linked does not load (a ``noexec`` folder), the process goes back to
object code through llvmlite for the rest of its life, with one warning (``disable``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from splyce.native import object_cache

ARTIFACT = "shared"          # the entries' ``artifact`` metadata for a shared library
_lock = threading.Lock()
_disabled: str | None = None   # why this process stopped linking (None: it links when it can)


class LinkError(RuntimeError):
    pass


def linker() -> list[str] | None:
    """The linker command (with its flags), or None when this process does not link."""
    if _disabled is not None:
        return None
    return _configured(os.environ.get("SPLYCE_LINKER", "").strip())


_found: dict = {}


def _configured(setting: str) -> list[str] | None:
    if setting in _found:
        return _found[setting]
    if setting.lower() in ("none", "0", "off", "no", "false"):
        command = None
    elif not setting and not sys.platform.startswith("linux"):
        command = None      # the flags below are GNU / ELF ones: elsewhere only a linker asked for is used
    else:
        names = [setting] if setting else ["ld", "cc"]
        command = None
        for name in names:
            path = shutil.which(name)
            if path is not None:
                driver = not Path(path).name.split("-")[-1].startswith("ld") and "ld." not in Path(path).name
                flags = ["-shared", "-Wl,-Bsymbolic"] if driver else ["-shared", "-Bsymbolic"]
                command = [path, *flags]
                break
    _found[setting] = command
    return command


def disable(why: str) -> None:
    """Stop linking in this process (warn once): native code is loaded as object code through llvmlite."""
    global _disabled
    with _lock:
        if _disabled is None:
            _disabled = why
            warnings.warn(f"splyce: {why}; native code is loaded through llvmlite in this process (slower to "
                          "start; set SPLYCE_LINKER=none to choose this without the warning)", stacklevel=4)


def link(object_code: bytes, command: list[str], global_symbols: bool = False) -> tuple[bytes, "SharedModule"]:
    """Link ``object_code`` into a shared library and load it: ``(the library's bytes, the loaded module)``.
    Linked in a ``link-*`` folder of the cache folder (the system's temporary folder when the cache is off or
    not writable), removed when done (``global_symbols``: as ``load``). Raises ``LinkError`` when the linker fails, ``OSError`` when the library
    does not load."""
    folder = _link_folder()
    try:
        obj, lib = os.path.join(folder, "code.o"), os.path.join(folder, "code.so")
        with open(obj, "wb") as f:
            f.write(object_code)
        try:
            run = subprocess.run([*command, "-o", lib, obj], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise LinkError(f"cannot run the linker {command[0]}: {exc}") from exc
        if run.returncode != 0:
            raise LinkError(f"the linker {command[0]} failed: {run.stderr.strip()[-500:]}")
        with open(lib, "rb") as f:
            data = f.read()
        module = load(lib, global_symbols)
        module.artifact = data
        return data, module
    finally:
        shutil.rmtree(folder, ignore_errors=True)   # a loaded library stays mapped after its file goes


def _link_folder() -> str:
    if object_cache.enabled():
        cache = object_cache.cache_dir()
        try:
            cache.mkdir(parents=True, exist_ok=True)
            return tempfile.mkdtemp(prefix=object_cache.LINK_PREFIX, dir=cache)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="splyce-" + object_cache.LINK_PREFIX)


class SharedModule:
    """A loaded shared library: the ``CompiledModule`` interface (function and global addresses) over ctypes.
    Never unloaded (functions taken from it may live as long as the process)."""

    def __init__(self, library: ctypes.CDLL, artifact: bytes | None = None):
        self._library = library
        self.artifact = artifact   # the library's bytes, when this process linked it (what the cache stores)
        self.artifact_kind = ARTIFACT

    def function_address(self, name: str) -> int:
        try:
            return ctypes.cast(getattr(self._library, name), ctypes.c_void_p).value
        except AttributeError:
            raise LookupError(f"no function {name!r} in the compiled module") from None

    def global_address(self, name: str) -> int:
        try:
            return ctypes.addressof(ctypes.c_char.in_dll(self._library, name))
        except ValueError:
            raise LookupError(f"no global {name!r} in the compiled module") from None


_global = ctypes.RTLD_GLOBAL


def load(path, global_symbols: bool = False) -> SharedModule:
    """dlopen ``path`` (``global_symbols``: its symbols resolve later libraries' references, RTLD_GLOBAL).
    Raises OSError when it does not load."""
    mode = _global if global_symbols else ctypes.RTLD_LOCAL
    return SharedModule(ctypes.CDLL(str(path), mode=mode))
