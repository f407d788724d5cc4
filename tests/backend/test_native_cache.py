"""The native kernels' disk cache (native/codegen.py): a second process loads the drop-ins' kernels and host
helpers instead of compiling them, a corrupted entry is rebuilt, the cache can be turned off, and processes
starting together compile each module once. Counted with ``codegen.stats``, in fresh processes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from splyce.native import codegen, object_cache

# Drop-in SpMV, SpGEMM and multiply in a fresh process, checked against scipy; prints "compiles hits rejected".
SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np, scipy.sparse as sp
    import splyce
    from splyce.native import codegen
    warnings.simplefilter("always")
    a = sp.random_array((60, 50), density=0.1, format="csr", random_state=1)
    b = sp.random_array((50, 40), density=0.1, format="csr", random_state=2)
    x = np.arange(50.0)
    assert np.allclose(splyce.matmul(a, x), a @ x)
    assert abs(splyce.matmul(a, b) - a @ b).max() < 1e-12
    assert abs(splyce.multiply(a, a.T.T) - a.multiply(a)).max() < 1e-12
    s = codegen.stats
    print(s.compiles, s.hits, s.rejected)
    print(*sorted(m for m in ("llvmlite", "mlir") if m in sys.modules))   # the compiler, if it was imported
""")


def _run(cache: Path, **env_extra):
    env = {k: v for k, v in os.environ.items() if k != "SPLYCE_DISABLE_DISK_CACHE"}
    env.update(SPLYCE_CACHE_DIR=str(cache), **env_extra)
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _counts(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return tuple(int(v) for v in out.splitlines()[0].split()), err


def _entries(cache: Path):
    return sorted(cache.glob("*" + object_cache.NATIVE_SUFFIX))


def test_second_process_loads_instead_of_compiling(tmp_path):
    (compiles, hits, _), _ = _counts(_run(tmp_path))
    assert compiles > 0 and hits == 0
    assert len(_entries(tmp_path)) == compiles
    for path in _entries(tmp_path):   # shared libraries (ELF type ET_DYN), dlopened by later processes
        assert path.read_bytes()[:4] == b"\x7fELF" and path.read_bytes()[16] == 3
    proc = _run(tmp_path)
    (again, loaded, rejected), _ = _counts(proc)
    assert (again, loaded, rejected) == (0, compiles, 0)
    assert not list(tmp_path.glob("*.splk"))   # no jitted kernel: the drop-ins ran on native kernels only
    assert not list(tmp_path.glob("link-*"))   # the linker's folders are gone
    assert _run(tmp_path).communicate(timeout=300)[0].splitlines()[1:] in ([], [""])   # no llvmlite, no MLIR


def test_entries_that_do_not_load_are_recompiled_with_a_warning(tmp_path):
    (compiles, _, _), _ = _counts(_run(tmp_path))
    entries = _entries(tmp_path)
    for path in entries:   # valid checksums around code the dynamic loader refuses
        old = object_cache.decode(path.read_bytes())
        path.write_bytes(object_cache.encode(object_cache.Entry(b"\x7fELF not a library", old.metadata)))
    (again, hits, rejected), err = _counts(_run(tmp_path))
    assert (again, rejected) == (len(entries), len(entries))
    assert "does not load" in err
    (third, hits, rejected), _ = _counts(_run(tmp_path))
    assert (third, hits, rejected) == (0, compiles, 0)


def test_without_a_linker_object_code_is_cached_and_loaded_through_llvmlite(tmp_path):
    (compiles, hits, _), err = _counts(_run(tmp_path, SPLYCE_LINKER="none"))
    assert compiles > 0 and hits == 0 and "cannot link" not in err
    for path in _entries(tmp_path):   # object code (ET_REL) for llvmlite's MCJIT
        assert object_cache.decode(path.read_bytes()).metadata["artifact"] == "object"
        assert path.read_bytes()[16] == 1
    assert _counts(_run(tmp_path, SPLYCE_LINKER="none"))[0] == (0, compiles, 0)
    assert _counts(_run(tmp_path))[0] == (compiles, 0, 0)     # linking: shared libraries, their own keys
    assert len(_entries(tmp_path)) == 2 * compiles


def test_corrupted_entries_are_recompiled_with_a_warning(tmp_path):
    (compiles, _, _), _ = _counts(_run(tmp_path))
    entries = _entries(tmp_path)
    for k, path in enumerate(entries):   # three kinds of damage, in turn
        data = bytearray(path.read_bytes())
        if k % 3 == 0:
            data = data[: len(data) // 2]
        elif k % 3 == 1:
            data[-20] ^= 0xFF
        else:
            data = bytearray()
        path.write_bytes(bytes(data))
    (again, hits, rejected), err = _counts(_run(tmp_path))
    assert (again, hits, rejected) == (len(entries), compiles - len(entries), len(entries))
    assert "discarding the corrupted disk cache entry" in err
    (third, hits, rejected), _ = _counts(_run(tmp_path))
    assert (third, hits, rejected) == (0, compiles, 0)


def test_disabled_cache_writes_nothing(tmp_path):
    (compiles, hits, _), _ = _counts(_run(tmp_path, SPLYCE_DISABLE_DISK_CACHE="1"))
    assert compiles > 0 and hits == 0
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_processes_started_together_compile_each_module_once(tmp_path):
    (alone, _, _), _ = _counts(_run(tmp_path / "alone"))
    procs = [_run(tmp_path / "shared") for _ in range(3)]
    counts = [_counts(p)[0] for p in procs]
    assert sum(c[0] for c in counts) == alone        # each module compiled by one process
    assert sum(c[1] for c in counts) == 2 * alone    # and loaded by the two others
    assert len(_entries(tmp_path / "shared")) == alone


IR = "define i64 @twice(i64 %x) {\n  %y = add i64 %x, %x\n  ret i64 %y\n}\n"


def test_key_changes_with_what_changes_the_code(monkeypatch):
    host = codegen.host_target()
    base = codegen.native_key(IR, host, codegen.CodegenOptions())
    assert base == codegen.native_key(IR, host, codegen.CodegenOptions())
    others = {codegen.native_key(IR.replace("add", "mul"), host, codegen.CodegenOptions()),
              codegen.native_key(IR, host, codegen.CodegenOptions(opt_level=2)),
              codegen.native_key(IR, host, codegen.CodegenOptions(slp_vectorize=False)),
              codegen.native_key(IR, codegen.Target(host.triple, "haswell", "+avx2"), codegen.CodegenOptions())}
    assert base not in others and len(others) == 4
    parts = codegen.native_key_parts(IR, host, codegen.CodegenOptions())
    assert set(parts["versions"]) == {"format", "llvmlite", "llvm", "codegen", "artifact"}
    assert parts["versions"]["artifact"] == "shared"          # a linker is on PATH here
    monkeypatch.setenv("SPLYCE_LINKER", "none")               # object code for llvmlite: another entry
    assert codegen.native_key(IR, host, codegen.CodegenOptions()) not in others | {base}


def test_in_process_hit_and_an_entry_missing_a_function(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    sig = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
    before = (codegen.stats.compiles, codegen.stats.hits, codegen.stats.rejected)
    assert codegen.compile_host_helpers(IR, {"twice": sig})["twice"](21) == 42
    assert codegen.compile_host_helpers(IR, {"twice": sig})["twice"](4) == 8
    assert (codegen.stats.compiles, codegen.stats.hits) == (before[0] + 1, before[1] + 1)
    # An entry under this key that lacks a function the caller needs is discarded and rebuilt.
    with pytest.warns(UserWarning, match="does not load"):
        compiled = codegen.compile_cached(IR, codegen.host_target(), codegen.CodegenOptions(),
                                          names=("twice", "thrice"))
    assert codegen.stats.rejected == before[2] + 1
    assert compiled.function_address("twice")
    assert len(_entries(tmp_path)) == 1


def test_unwritable_folder_warns_once_and_runs(tmp_path, monkeypatch):
    import ctypes

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(codegen, "_write_warned", False)
    sig = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
    with pytest.warns(UserWarning, match="cannot write the disk cache entry"):
        assert codegen.compile_host_helpers(IR.replace("twice", "twice_b"), {"twice_b": sig})["twice_b"](3) == 6
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert codegen.compile_host_helpers(IR.replace("twice", "twice_c"), {"twice_c": sig})["twice_c"](5) == 10


def test_host_facts_are_llvmlites_answers_memoized_in_the_cache_folder(tmp_path, monkeypatch):
    from splyce.native import host

    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    answer = host._ask_llvmlite()
    host.facts.cache_clear()
    try:
        asked = host.asked
        assert host.facts() == answer and host.asked == asked + 1
        (memo,) = tmp_path.glob("host-*.json")
        host.facts.cache_clear()
        assert host.facts() == answer and host.asked == asked + 1     # read back, llvmlite not asked
        memo.write_text("{not json")
        host.facts.cache_clear()
        assert host.facts() == answer and host.asked == asked + 2     # a damaged memo is asked again
    finally:
        host.facts.cache_clear()


def test_a_library_that_does_not_load_falls_back_to_llvmlite_with_one_warning(tmp_path, monkeypatch):
    """A freshly linked library the loader refuses (a noexec folder): this process warns once and goes on
    with object code through llvmlite; the helper still works."""
    import ctypes

    from splyce.native import shared_lib

    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shared_lib, "_disabled", None)

    def refuse(path, global_symbols=False):
        raise OSError(f"{path}: failed to map segment from shared object")

    monkeypatch.setattr(shared_lib, "load", refuse)
    sig = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
    with pytest.warns(UserWarning, match="cannot link or load native code as a shared library"):
        fn = codegen.compile_host_helpers(IR.replace("twice", "twice_nx"), {"twice_nx": sig})["twice_nx"]
    assert fn(7) == 14
    assert shared_lib.linker() is None and codegen.artifact_kind() == "object"
    (entry,) = _entries(tmp_path)
    assert object_cache.decode(entry.read_bytes()).metadata["artifact"] == "object"
    assert not list(tmp_path.glob("link-*"))
