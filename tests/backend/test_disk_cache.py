"""The disk cache, across processes: reload instead of compiling, reject corrupted entries, miss on a changed
option, stay off when disabled, survive concurrent writers; and its key and entry format in-process."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import splyce
from splyce.runtime import disk_cache
from splyce.bench.paper_kernels import KERNELS

# One kernel call in a fresh process; prints "compiles disk_hits max-error".
SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    import splyce
    from splyce.bench.paper_kernels import KERNELS
    warnings.simplefilter("always")
    spec = KERNELS[{name!r}]
    ops = spec.operands(spec.quick_size, 0.1, seed=3)
    f = splyce.jit(spec.fun, vector_width={width})
    out = f(*ops)
    out = out.toarray() if hasattr(out, "toarray") else np.asarray(out)
    dense = [o.to_numpy() if hasattr(o, "to_numpy") else np.asarray(o) for o in ops]
    err = float(np.max(np.abs(out - spec.reference(*dense))))
    info = f.cache_info()
    print(info.compiles, info.disk_hits, err)
    print(*sorted(m for m in ("llvmlite", "mlir") if m in sys.modules))   # the compiler, if it was imported
""")


def _run(cache: Path, name="K1", width=4, **env_extra):
    env = {k: v for k, v in os.environ.items() if k != "SPLYCE_DISABLE_DISK_CACHE"}
    env.update(SPLYCE_CACHE_DIR=str(cache), **env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT.format(name=name, width=width)], env=env,
                          capture_output=True, text=True, timeout=300)


def _counts(run):
    assert run.returncode == 0, run.stderr
    compiles, disk_hits, err = run.stdout.splitlines()[0].split()
    assert float(err) < 1e-9
    return int(compiles), int(disk_hits)


def _entries(cache: Path):
    return sorted(cache.glob("*" + disk_cache.SUFFIX))


def _imported(run) -> list:
    """What the process imported of llvmlite and MLIR."""
    return run.stdout.splitlines()[1].split()


def test_second_process_loads_instead_of_compiling(tmp_path):
    assert _counts(_run(tmp_path)) == (1, 0)
    (entry,) = _entries(tmp_path)
    assert entry.read_bytes()[:4] == b"\x7fELF" and entry.read_bytes()[16] == 3   # ET_DYN: a shared library
    again = _run(tmp_path)
    assert _counts(again) == (0, 1)
    assert _imported(again) == []     # dlopened: neither llvmlite nor MLIR was imported
    assert len(_entries(tmp_path)) == 1


def test_sources_hash_is_memoized_and_a_damaged_memo_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(disk_cache, "_SOURCES_HASH", None)
    first = disk_cache.compiler_sources_hash()
    (memo,) = tmp_path.glob("host-sources-*.json")
    monkeypatch.setattr(disk_cache, "_SOURCES_HASH", None)
    memo.write_text("{damaged")
    assert disk_cache.compiler_sources_hash() == first
    monkeypatch.setattr(disk_cache, "_SOURCES_HASH", None)
    monkeypatch.setenv("SPLYCE_DISABLE_DISK_CACHE", "1")     # no memo: the files themselves
    assert disk_cache.compiler_sources_hash() == first


def _rewrite(entry: Path, code: bytes) -> None:
    """Replace an entry's code, keeping its metadata and a valid checksum (damage the checksum cannot see)."""
    old = disk_cache.decode(entry.read_bytes())
    entry.write_bytes(disk_cache.encode(disk_cache.Entry(code, old.metadata)))


def test_an_entry_that_does_not_load_is_rebuilt_with_a_warning(tmp_path):
    _counts(_run(tmp_path))
    (entry,) = _entries(tmp_path)
    _rewrite(entry, b"\x7fELF\x02\x01\x01 not a library at all")
    run = _run(tmp_path)
    assert _counts(run) == (1, 0)
    assert "does not load" in run.stderr
    assert _counts(_run(tmp_path)) == (0, 1)


def test_without_a_linker_object_code_is_cached_under_its_own_key(tmp_path):
    none = _run(tmp_path, SPLYCE_LINKER="none")
    assert _counts(none) == (1, 0) and "cannot link" not in none.stderr
    (entry,) = _entries(tmp_path)
    assert disk_cache.decode(entry.read_bytes()).metadata["artifact"] == "object"
    assert entry.read_bytes()[16] == 1          # ET_REL: object code, for llvmlite
    assert _counts(_run(tmp_path, SPLYCE_LINKER="none")) == (0, 1)
    assert _counts(_run(tmp_path)) == (1, 0)    # linking: a shared library, another entry
    assert len(_entries(tmp_path)) == 2
    assert _counts(_run(tmp_path)) == (0, 1)


def test_a_failing_linker_falls_back_to_llvmlite_with_one_warning(tmp_path):
    import shutil

    run = _run(tmp_path, SPLYCE_LINKER=shutil.which("false"))    # a "linker" that exits 1
    assert _counts(run) == (1, 0)
    assert run.stderr.count("cannot link or load native code as a shared library") == 1
    (entry,) = _entries(tmp_path)
    assert disk_cache.decode(entry.read_bytes()).metadata["artifact"] == "object"
    again = _run(tmp_path, SPLYCE_LINKER=shutil.which("false"))
    assert _counts(again) == (0, 1)          # the object code entry, loaded through llvmlite


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupted_entry_is_rebuilt_with_a_warning(tmp_path, damage):
    _counts(_run(tmp_path))
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) - 100] ^= 0xFF
    else:
        data = b""
    entry.write_bytes(bytes(data))
    run = _run(tmp_path)
    assert _counts(run) == (1, 0)
    assert "discarding the corrupted disk cache entry" in run.stderr
    assert _counts(_run(tmp_path)) == (0, 1)  # rebuilt entry is good again


def test_changed_option_misses(tmp_path):
    _counts(_run(tmp_path, width=4))
    assert _counts(_run(tmp_path, width=8)) == (1, 0)
    assert len(_entries(tmp_path)) == 2
    assert _counts(_run(tmp_path, width=8)) == (0, 1)


def test_disabled_writes_nothing(tmp_path):
    assert _counts(_run(tmp_path, SPLYCE_DISABLE_DISK_CACHE="1")) == (1, 0)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_concurrent_processes_on_an_empty_cache(tmp_path):
    env = {**os.environ, "SPLYCE_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT.format(name="K3", width=4)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert float(out.split()[2]) < 1e-9
    assert len(_entries(tmp_path)) == 1
    assert not list(tmp_path.glob("*.tmp"))
    assert _counts(_run(tmp_path, name="K3")) == (0, 1)


# -- in-process ---------------------------------------------------------------------------------------------
def _spgemm():
    spec = KERNELS["K1"]
    return spec, spec.operands(64, 0.2, seed=1)


def test_same_trace_from_another_function_hits_and_ir_is_available():
    spec, ops = _spgemm()
    first = splyce.jit(spec.fun)
    expected = first(*ops)
    second = splyce.jit(lambda b, c: splyce.einsum("ik,kj->ij", b, c, order="ijk"))   # the same trace
    got = second(*ops)
    assert np.array_equal(got, expected)
    assert second.cache_info().disk_hits == 1 and second.cache_info().compiles == 0
    low = second.lower(*ops)
    assert low.from_disk
    # the IR is lowered again on demand, the same as the compiling function's
    for stage in ("trace", "linalg", "scf", "splyce", "llvm"):
        assert low.as_text(stage) == first.lower(*ops).as_text(stage), stage


def test_clear_cache_empties_memory_and_disk():
    spec, ops = _spgemm()
    f = splyce.jit(spec.fun)
    f(*ops)
    assert _entries(disk_cache.cache_dir())
    splyce.clear_cache()
    assert f.cache_info().currsize == 0 and _entries(disk_cache.cache_dir())
    f(*ops)
    assert f.cache_info().disk_hits == 1
    splyce.clear_cache(disk=True)
    assert not _entries(disk_cache.cache_dir())
    f(*ops)
    assert f.cache_info().compiles == 1


def test_key_parts_are_named_and_change_with_options():
    spec, ops = _spgemm()
    f, g = splyce.jit(spec.fun), splyce.jit(spec.fun, fast_math=True, vector_width=4)   # (unset: 16 on AVX-512 CD)
    (k1, specs, _), (k2, _, _) = f._key(ops), g._key(ops)
    trace = f._trace(specs)[0]
    p1 = disk_cache.key_parts(trace, k1.static_args, k1.out_format, k1.options)
    p2 = disk_cache.key_parts(trace, k2.static_args, k2.out_format, k2.options)
    assert disk_cache.explain(p1, p2) == ["options.fast_math"]
    assert disk_cache.digest(p1) != disk_cache.digest(p2)
    assert set(p1) == {"trace", "static_args", "inputs", "out_format", "options", "target", "versions", "tuning",
                       "vector_math"}
    assert set(p1["versions"]) == {"splyce", "mlir", "llvmlite", "compiler_sources", "artifact"}
    # formats appear in full, index widths included (a 64-bit CSR must not share a 32-bit CSR's entry)
    assert p1["inputs"][0]["format"] == {"levels": ["dense", "compressed"], "order": [0, 1],
                                         "pos_width": 32, "crd_width": 32}
    assert "repr" not in repr(p1) and "object at 0x" not in repr(p1)


def test_key_changes_with_the_tuned_flat_rows_bound(monkeypatch):
    """The flat-rows pass compiles ``spmv.FLAT_MAX_ROW`` and ``FLAT_MIN_BYTES`` into the kernel as numbers: a
    kernel filed under other values is not this one (a shared cache directory, another L2 size)."""
    from splyce.native import spmv

    spec, ops = _spgemm()
    f = splyce.jit(spec.fun)
    k, specs, _ = f._key(ops)
    trace = f._trace(specs)[0]
    before = disk_cache.key_parts(trace, k.static_args, k.out_format, k.options)
    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", spmv.FLAT_MIN_BYTES + 1)
    after = disk_cache.key_parts(trace, k.static_args, k.out_format, k.options)
    assert disk_cache.explain(before, after) == ["tuning.flat_min_bytes"]
    assert disk_cache.digest(before) != disk_cache.digest(after)


def test_key_keeps_apart_what_equality_merges():
    """-0.0 == 0.0 and 1 == 1.0, yet they generate different code: the trace text keeps them apart."""
    spec, ops = _spgemm()
    traces = []
    for scale in (0.0, -0.0, 1, 1.0):
        f = splyce.jit(lambda b, c, s=scale: (b @ c) * s)
        key, specs, _ = f._key(ops)
        traces.append(disk_cache.digest(disk_cache.key_parts(f._trace(specs)[0], key.static_args,
                                                             key.out_format, key.options)))
    assert len(set(traces)) == 4


def test_codegen_sources_all_exist():
    """Every pattern of the explicit source list still matches a file (a rename cannot drop one silently),
    and host-only modules are not in it."""
    root = Path(disk_cache.__file__).parent.parent
    for pattern in disk_cache.CODEGEN_SOURCES:
        assert list(root.glob(pattern)), pattern
    names = {p.relative_to(root).as_posix() for p in disk_cache.codegen_source_files()}
    assert {"tensors/formats.py", "lowering/to_mlir.py", "native/codegen.py"} <= names
    assert not names & {"runtime/dispatcher.py", "runtime/calls.py", "tensors/validation.py"}


def test_lower_before_call_still_writes_the_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    spec, ops = _spgemm()
    f = splyce.jit(spec.fun)
    f.lower(*ops).as_text("scf")
    f(*ops)
    assert len(_entries(tmp_path)) == 1
    g = splyce.jit(spec.fun)
    g(*ops)
    assert g.cache_info().disk_hits == 1 and g.cache_info().compiles == 0


def test_disk_miss_is_explained_in_the_debug_log(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path))
    spec, ops = _spgemm()
    small = splyce.asarray(ops[0].to_scipy()[:32, :].tocsr())
    f = splyce.jit(lambda b, c: b @ c)
    with caplog.at_level("DEBUG", logger="splyce.cache"):
        f(*ops)
        f(small, ops[1])
    messages = [r.getMessage() for r in caplog.records if r.name == "splyce.cache"]
    assert len(messages) == 2
    assert "(first compile of this function)" in messages[0]
    assert messages[1].endswith("differs from the previous compile in inputs, trace")


def test_entry_format_round_trips_and_rejects_damage():
    entry = disk_cache.Entry(b"\x7fELF object", {"result_ranks": [1, 1]})
    data = disk_cache.encode(entry)
    assert disk_cache.decode(data) == entry
    for bad, why in [(data[-10:], "truncated"), (data[:-1] + b"X", "bad magic"),
                     (data[1:], "the trailer says"), (b"!" + data[1:], "checksum mismatch")]:
        with pytest.raises(disk_cache.CorruptEntry, match=why):
            disk_cache.decode(bad)


def test_unwritable_cache_folder_warns_and_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(blocker / "cache"))
    spec, ops = _spgemm()
    with pytest.warns(UserWarning, match="cannot write the disk cache entry"):
        out = splyce.jit(spec.fun)(*ops)
    assert out.shape == (64, 64)
