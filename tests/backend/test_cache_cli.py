"""``python -m splyce.cache`` and ``splyce.cache.info / clear / warm``: a warmed cache serves a second
process without compiling; info counts entries by kind; clear empties it."""

import os
import subprocess
import sys

import splyce.cache as cache


def _cli(folder, *args, **env_extra):
    env = {k: v for k, v in os.environ.items() if k != "SPLYCE_DISABLE_DISK_CACHE"}
    env.update(SPLYCE_CACHE_DIR=str(folder), **env_extra)
    return subprocess.run([sys.executable, "-m", "splyce.cache", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_info_of_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path / "none"))
    got = cache.info()
    assert got.folder == tmp_path / "none" and got.total_bytes == 0
    assert got.entries == {"jitted kernels": 0, "native kernels": 0}
    assert "native kernels" in str(got)
    assert cache.clear() == 0


def test_warm_then_a_second_process_compiles_nothing_then_clear(tmp_path):
    first = _cli(tmp_path, "warm", "--dtypes", "float64", "--no-progress")
    assert first.returncode == 0, first.stderr
    assert " 0 native modules compiled" not in first.stdout and "0 loaded" in first.stdout
    again = _cli(tmp_path, "warm", "--dtypes", "float64", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "warmed in" in again.stdout and " 0 native modules compiled" in again.stdout
    native = list(tmp_path.glob("*.splo"))
    assert native
    shown = _cli(tmp_path, "info")
    assert shown.returncode == 0 and str(tmp_path) in shown.stdout
    line = next(l for l in shown.stdout.splitlines() if "native kernels" in l)
    assert int(line.split()[2]) == len(native)
    assert list(tmp_path.glob("host-*.json"))   # the host facts the keys need, memoized
    # what a process killed while linking leaves behind: clear removes it too
    stray = tmp_path / "link-abc123"
    stray.mkdir()
    (stray / "code.o").write_bytes(b"half an object")
    count = len(list(tmp_path.glob("*.spl?"))) + len(list(tmp_path.glob("host-*.json"))) + 1
    cleared = _cli(tmp_path, "clear")
    assert cleared.returncode == 0 and f"removed {count} files" in cleared.stdout
    assert not list(tmp_path.glob("*.splo")) and not list(tmp_path.glob("*.splk"))
    assert not list(tmp_path.glob("link-*")) and not list(tmp_path.glob("host-*"))


def test_warm_refuses_when_the_cache_is_off(tmp_path):
    run = _cli(tmp_path, "warm", "--no-progress", SPLYCE_DISABLE_DISK_CACHE="1")
    assert run.returncode == 1 and "disk cache is off" in run.stderr
    assert not tmp_path.exists() or not any(tmp_path.glob("*.spl?"))
