"""python -m splyce.bench: every subcommand in its hidden --tiny mode writes well-formed CSV / Markdown / PNG,
and a result that disagrees with the reference fails the run loudly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from splyce.bench import __main__ as cli
from splyce.bench import common, kernels, threads
from splyce.bench.common import BenchMismatch, Config, read_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

EXPECTED = {
    "kernels": ("kernels", kernels.COLUMNS),
    "ablation": ("ablation", ["config", "phases", "fast_math", "median_s", "speedup_vs_baseline"]),
    "width": ("width", ["density", "width", "median_s", "speedup_vs_baseline"]),
    "sparsity": ("sparsity_K1", ["density", "size", "baseline_s", "splyce_s", "speedup_vs_baseline", "simd_share"]),
    "real": ("real", ["matrix", "kernel", "baseline_s", "splyce_s", "speedup_vs_baseline", "simd_share"]),
}


def _check_outputs(out, stem, columns):
    comments, rows = read_csv(out / f"{stem}.csv")
    text = "\n".join(comments)
    for key in ("cpu:", "isa:", "cores:", "splyce:", "numpy:", "scipy:", "llvmlite:", "mlir-bindings:"):
        assert key in text, key
    assert rows, "no rows"
    for c in columns:
        assert c in rows[0], c
    assert (out / f"{stem}.png").read_bytes()[:8] == PNG_MAGIC
    md = (out / f"{stem}.md").read_text()
    assert md.count("|") > 10 and "---" in md
    return rows


@pytest.mark.parametrize("sub", list(EXPECTED))
def test_subcommand_tiny(sub, tmp_path, capsys):
    assert cli.main([sub, "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    stem, columns = EXPECTED[sub]
    rows = _check_outputs(tmp_path, stem, columns)
    printed = capsys.readouterr().out
    assert "| " in printed and "cpu:" in printed
    speedups = [float(r["speedup_vs_baseline"]) for r in rows if r.get("speedup_vs_baseline") not in ("", "n/a")]
    assert speedups and all(s > 0 for s in speedups)
    if sub == "kernels":
        assert [r["kernel"].split()[0] for r in rows] == ["K1", "K2", "K3", "K4", "K5", "geomean"]
    if sub == "ablation":
        assert len(rows) == 17 and {r["fast_math"] for r in rows[1:]} == {"on", "off"}


def test_threads_subcommand_exits_zero(tmp_path, capsys):
    assert cli.main(["threads", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    if not threads.supported():
        assert "threads" in capsys.readouterr().out
    else:
        _check_outputs(tmp_path, "threads", threads.COLUMNS)


def test_wrong_kernel_fails_loudly(tmp_path, monkeypatch, capsys):
    """Inject a wrong scipy formulation: the run aborts before timing with a non-zero exit."""
    good = kernels.scipy_impl

    def wrong(name, shapes):
        f = good(name, shapes)
        return (lambda *a: 2 * f(*a)) if name == "K2" else f

    monkeypatch.setattr(kernels, "scipy_impl", wrong)
    assert cli.main(["kernels", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 1
    assert "MISMATCH" in capsys.readouterr().err
    assert not (tmp_path / "kernels.csv").exists()


def test_wrong_jitted_result_raises(monkeypatch):
    calls = {"n": 0}

    def off_by_one():
        calls["n"] += 1
        return np.ones(3) + 1e-3

    with pytest.raises(BenchMismatch, match="bad"):
        common.measure({"bad": off_by_one}, np.ones(3), Config(tiny=True, progress=False))
    assert calls["n"] == 1   # checked at warm-up: never timed


def test_check_shapes_and_tolerance():
    common.check("ok", np.arange(4.0).reshape(4, 1), np.arange(4.0))
    with pytest.raises(BenchMismatch):
        common.check("shape", np.ones(3), np.ones(4))
    with pytest.raises(BenchMismatch):
        common.check("nan", np.array([np.nan]), np.array([1.0]))


def test_interleaved_order():
    order = []
    cands = {k: (lambda k=k: order.append(k) or np.zeros(1)) for k in "abc"}
    t = common.measure(cands, np.zeros(1), Config(repeats=2, progress=False))
    assert order == list("abc") * 3
    assert all(len(v.times) == 2 for v in t.values())


def test_help_has_methodology():
    out = subprocess.run([sys.executable, "-m", "splyce.bench", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for phrase in ("Warm-up", "Interleaved", "Median and min", "reference", "Machine info"):
        assert phrase in out, phrase
