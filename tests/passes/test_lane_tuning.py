"""The fast_math lane width measured per CPU at first use (runtime/lane_tuning.py, issue 36): a measurement
(faked here, real in a child process) decides the width, the choice is kept on disk and read back by another
process without measuring, a corrupt or unwritable memo falls back safely, a failed measurement or
``SPLYCE_NO_TUNE=1`` leaves the static rule, an explicit width and strict kernels never measure, and the chosen
width is in the memory and disk cache keys. No timing asserts."""

import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import splyce
from splyce import options as opts
from splyce.bench.paper_kernels import KERNELS
from splyce.native import codegen
from splyce.runtime import disk_kernels, lane_tuning

CONFLICT = "n=16 conflict lane"


def _has_cd() -> bool:
    return opts.has_conflict_compares(codegen.host_target())


def _fake(ns: dict):
    calls = []

    def measure(target, jit, cands):
        calls.append([c.name for c in cands])
        return {c.name: ns[c.name] for c in cands if c.name in ns}

    measure.calls = calls
    return measure


def _never(target, jit, cands):
    raise AssertionError("measured")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder, nothing recorded for the host, tuning on; the host's record restored after."""
    host = codegen.host_target()
    saved = opts.recorded_width_choice(host)
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPLYCE_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.delenv(lane_tuning.ENV_SKIP, raising=False)
    opts.record_width_choice(host, None)
    lane_tuning.forget()
    yield host
    opts.record_width_choice(host, saved)
    lane_tuning.forget()


def _options(**kw):
    return splyce.jit(lambda a, b: a @ b, **kw).options


def _memo(cands=None):
    return lane_tuning.memo_path(lane_tuning.candidates_for(codegen.host_target()) if cands is None else cands)


def test_a_measurement_decides_the_width(fresh, monkeypatch):
    fake = _fake({"n=4": 1.0, "n=8": 0.5, CONFLICT: 2.0})
    monkeypatch.setattr(lane_tuning, "measure", fake)
    o = _options(fast_math=True)
    assert o.vector_width == 8 and o.width_chosen
    assert o.width_reason.startswith("chosen: fast_math, measured on this CPU"), o.width_reason
    assert "n=8 0.50 vs n=4 1.00" in o.width_reason
    assert ("n=16 conflict lane 2.00" in o.width_reason) == _has_cd()
    assert len(fake.calls) == 1 and (CONFLICT in fake.calls[0]) == _has_cd()
    _options(fast_math=True)   # recorded: not measured again in this process
    assert len(fake.calls) == 1
    # a chosen 8 holds for intersection loops only (unions keep n = 4), a given 8 for every loop: other keys
    assert o != _options(fast_math=True, vector_width=8)


def _llvm(f, ops) -> str:
    return re.sub(r"^// splyce:.*\n", "", f.lower(*ops).as_text("llvm"), flags=re.M)


def test_a_chosen_8_holds_for_intersections_and_not_unions(fresh, monkeypatch):
    """K1 (an intersection) chosen at n = 8 is the code of a given 8; a sparse add (a union) keeps n = 4's."""
    import scipy.sparse as sps

    monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 0.5, CONFLICT: 2.0}))
    spec = KERNELS["K1"]
    k1 = spec.operands(size=spec.quick_size, density=0.2)
    add = [splyce.asarray(sps.random(200, 200, density=0.05, format="csr", random_state=i)) for i in range(2)]
    for fun, ops, width, kind in ((spec.fun, k1, 8, "K-accumulate"), (lambda a, b: a + b, add, 4, "merge")):
        chosen = splyce.jit(fun, fast_math=True, library=False)
        given = chosen.with_options(vector_width=width)
        assert chosen.options.vector_width == 8
        text = chosen.lower(*ops).as_text("splyce")
        assert re.findall(rf"{kind} \w+ i\d+-crd n=(\d+)", text) == [str(width)], text
        assert _llvm(chosen, ops) == _llvm(given, ops)
        got, want = chosen(*ops), splyce.jit(fun, vectorize=False)(*ops)
        np.testing.assert_allclose(*(x.toarray() if hasattr(x, "toarray") else np.asarray(x) for x in (got, want)),
                                   rtol=1e-10, atol=1e-10)


def test_the_default_wins_within_the_margin(fresh, monkeypatch):
    monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 0.99, CONFLICT: 0.985}))
    o = _options(fast_math=True)
    assert o.vector_width == 4 and not o.width_chosen and o.width_reason.startswith("chosen: fast_math, measured")
    assert o == _options(fast_math=True, vector_width=4)


@pytest.mark.skipif(not _has_cd(), reason="the conflict lane needs AVX-512 CD on the host")
def test_a_measured_conflict_lane_is_scoped(fresh, monkeypatch):
    monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 0.9, CONFLICT: 0.5}))
    o = _options(fast_math=True)
    assert o.vector_width == 16 and o.width_chosen
    assert o != _options(fast_math=True, vector_width=16)


def test_the_memo_is_read_back_and_a_corrupt_one_measured_again(fresh, monkeypatch):
    monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 0.5, CONFLICT: 2.0}))
    first = _options(fast_math=True)
    memo = _memo()
    assert json.loads(memo.read_text())["chosen"] == "n=8"
    opts.record_width_choice(fresh, None)            # as a new process: only the disk memo
    monkeypatch.setattr(lane_tuning, "measure", _never)
    again = _options(fast_math=True)
    assert (again.vector_width, again.width_reason) == (first.vector_width, first.width_reason)
    for junk in ("{not json", "[]", json.dumps({"chosen": "n=8", "width": 16, "reason": "x"}),
                 json.dumps({"chosen": "n=99", "width": 8, "reason": "x"})):
        memo.write_text(junk)
        opts.record_width_choice(fresh, None)
        fake = _fake({"n=4": 0.5, "n=8": 1.0, CONFLICT: 2.0})
        monkeypatch.setattr(lane_tuning, "measure", fake)
        assert _options(fast_math=True).vector_width == 4 and len(fake.calls) == 1, junk
        assert json.loads(memo.read_text())["chosen"] == "n=4"   # rewritten


def test_an_unwritable_cache_folder_still_chooses(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(blocker / "cache"))   # under a file: nothing can be written
    fake = _fake({"n=4": 1.0, "n=8": 0.5, CONFLICT: 2.0})
    monkeypatch.setattr(lane_tuning, "measure", fake)
    assert _options(fast_math=True).vector_width == 8
    assert not _memo().exists()
    opts.record_width_choice(fresh, None)
    assert _options(fast_math=True).vector_width == 8 and len(fake.calls) == 2   # measured again: no memo


def test_a_failed_measurement_leaves_the_static_rule(fresh, monkeypatch, caplog):
    def broken(target, jit, cands):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(lane_tuning, "measure", broken)
    with caplog.at_level(logging.WARNING, logger="splyce.runtime.lane_tuning"):
        o = _options(fast_math=True)
    assert "no compiler today" in caplog.text
    assert (o.vector_width, o.width_reason) == opts.choose_vector_width(True, fresh)   # nothing recorded
    assert not _memo().exists()
    monkeypatch.setattr(lane_tuning, "measure", _never)   # once per process
    assert _options(fast_math=True) == o


@pytest.mark.parametrize("how", ["env", "given", "strict", "named target"])
def test_no_measurement(fresh, monkeypatch, how):
    monkeypatch.setattr(lane_tuning, "measure", _never)
    if how == "env":
        monkeypatch.setenv(lane_tuning.ENV_SKIP, "1")
        o = _options(fast_math=True)
        assert (o.vector_width, o.width_reason) == opts.choose_vector_width(True, fresh)   # the static rule
        assert "measured on this CPU" not in o.width_reason
    elif how == "given":
        for width in (2, 4, 8, 16):
            o = _options(fast_math=True, vector_width=width)
            assert (o.vector_width, o.width_reason, o.width_chosen) == (width, "given", False)
    elif how == "strict":
        o = _options()
        assert (o.vector_width, o.width_reason) == (4, "default") and o == _options(vector_width=4)
    else:
        o = _options(fast_math=True, target="avx512")
        assert (o.vector_width, o.width_chosen) == (16, True) and "static rule" in o.width_reason
    assert not _memo().exists()


def test_strict_code_is_untouched_by_a_choice(fresh, monkeypatch):
    """A recorded choice changes fast_math kernels only: the strict kernel's LLVM IR is the same."""
    spec = KERNELS["K1"]
    ops = spec.operands(size=spec.quick_size, density=0.2)
    before = splyce.jit(spec.fun).lower(*ops).as_text("llvm")
    monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 0.5, CONFLICT: 2.0}))
    assert _options(fast_math=True).vector_width == 8
    assert splyce.jit(spec.fun).lower(*ops).as_text("llvm") == before


def test_the_chosen_width_is_in_the_cache_keys(fresh, monkeypatch):
    spec = KERNELS["K1"]
    ops = spec.operands(size=spec.quick_size, density=0.2)
    keys = {}
    for winner in ("n=4", "n=8"):
        opts.record_width_choice(fresh, None)
        _memo().unlink(missing_ok=True)
        monkeypatch.setattr(lane_tuning, "measure", _fake({"n=4": 1.0, "n=8": 1.0, CONFLICT: 2.0, winner: 0.5}))
        f = splyce.jit(spec.fun, fast_math=True)
        key = f._key(ops)[0]
        keys[winner] = (key, disk_kernels.disk_key(f.lower(*ops).trace, key))
        assert f"n={key.options.vector_width} (chosen: fast_math, measured" in f.lower(*ops).as_text("splyce")
        np.testing.assert_allclose(np.asarray(f(*ops)), np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops)),
                                   rtol=1e-10, atol=1e-10)
    assert keys["n=4"][0].options.vector_width == 4 and keys["n=8"][0].options.vector_width == 8
    assert keys["n=4"][0] != keys["n=8"][0] and keys["n=4"][1] != keys["n=8"][1]


_CHILD = """
import json, splyce
from splyce.runtime import lane_tuning
o = splyce.jit(lambda a, b: a @ b, fast_math=True).options
print(json.dumps({"measured": lane_tuning.measured, "width": o.vector_width, "reason": o.width_reason}))
"""


def test_measured_once_then_read_from_disk_by_another_process(tmp_path):
    """A real measurement in a first process, none in a second one with the same cache folder."""
    env = {k: v for k, v in os.environ.items() if k not in (lane_tuning.ENV_SKIP, "SPLYCE_DISABLE_DISK_CACHE")}
    env["SPLYCE_CACHE_DIR"] = str(tmp_path / "cache")
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                                      check=True, timeout=300).stdout.splitlines()[-1]) for _ in range(2)]
    assert [r["measured"] for r in runs] == [1, 0]
    assert runs[0]["width"] == runs[1]["width"] in (4, 8, 16) and runs[0]["reason"] == runs[1]["reason"]
    assert runs[0]["reason"].startswith("chosen: fast_math, measured on this CPU")
    memo = json.loads(next((tmp_path / "cache").glob("host-lanes-*.json")).read_text())
    names = {c.name for c in lane_tuning.candidates_for(codegen.host_target())}
    assert set(memo["ns_per_crd"]) == names and all(v > 0 for v in memo["ns_per_crd"].values())
