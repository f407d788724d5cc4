"""python -m splyce.bench: every subcommand in its hidden --tiny mode writes well-formed CSV / Markdown / PNG,
and a result that disagrees with the reference fails the run loudly."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import numpy as np
import pytest

from splyce.bench import __main__ as cli
from splyce.bench import ablation, ceiling, common, kernels, programs, real, threads
from splyce.bench import compile as compile_bench
from splyce.bench.common import BenchMismatch, Config, read_csv

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

EXPECTED = {
    "kernels": ("kernels", kernels.COLUMNS),
    "ablation": ("ablation", ["config", "phases", "fast_math", "median_s", "speedup_vs_baseline"]),
    "width": ("width", ["density", "width", "median_s", "speedup_vs_baseline"]),
    "sparsity": ("sparsity_K1", ["density", "size", "baseline_s", "splyce_s", "speedup_vs_baseline", "simd_share"]),
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
        for r in rows[:-1]:     # the bandwidth columns: every kernel's bytes, floor and share of the floor
            values = [float(r[c]) for c in ("model_mb", "floor_s", "bw_baseline", "bw_splyce")]
            assert all(np.isfinite(v) and v > 0 for v in values), r
        assert "update" in (tmp_path / "kernels.md").read_text()   # the rates the floor was measured at
    if sub == "ablation":
        k1 = [r for r in rows if r["workload"].startswith("K1")]
        assert len(k1) == 17 and {r["fast_math"] for r in k1[1:]} == {"on", "off"}
        assert {r["config"] for r in rows if r["workload"].startswith("skew")} >= {"baseline", "gallop=0"}
        for op in ("add", "subtract", "maximum"):
            for out_format in ("dense", "sparse"):
                floor = {ablation.FLOOR_LABEL} if out_format == "dense" else set()
                assert {r["config"] for r in rows if r["workload"].startswith(f"{op} {out_format}")} == \
                    {"baseline", "union=off", "union=on"} | floor
        assert {r["config"] for r in rows if r["workload"].startswith("a*b*c")} == \
            {"baseline", "three-way n=4", "three-way n=8"}


def test_touched_zeros_are_zero_and_resident():
    out = common.touched_zeros((3, 4))
    assert out.shape == (3, 4) and out.dtype == np.float64 and not out.any()


def test_ceiling_probes_report_every_probe():
    measured = ceiling.measure(tiny=True)
    assert len(measured["ceiling"]) == 5
    assert all(c["one_s"] > 0 and c["two_over_one"] > 0 for c in measured["ceiling"])
    r = measured["refault"]
    assert r["at_once_gbs"] > 0 and r["after_pause_gbs"] > 0
    lines = ceiling.lines(measured)
    assert len(lines) == 6 and lines[0].startswith("two cores: compute") and "after" in lines[-1]
    assert ceiling.markdown(measured).count("\n| ") == 6     # header rule + 5 probes


def test_threads_subcommand(tmp_path):
    assert cli.main(["threads", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "threads", threads.COLUMNS)
    assert {r["kernel"].split()[0] for r in rows} == {"K1", "K3"}
    assert all(float(r["self_scaling"]) > 0 for r in rows)


def test_memory_subcommand(tmp_path):
    from splyce.bench import memory

    assert cli.main(["memory", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "memory", memory.COLUMNS)
    assert {r["op"] for r in rows} == set(memory.OPS)
    assert all(float(r["t1_on_vs_off"]) > 0 and float(r["t2_on_vs_off"]) > 0 for r in rows)


def test_compile_subcommand_fails_without_disk_hit(tmp_path, monkeypatch):
    """With the disk cache switched off the second fresh jit compiles again: the run must fail, not report."""
    monkeypatch.setenv("SPLYCE_DISABLE_DISK_CACHE", "1")
    with pytest.raises(RuntimeError, match="not served by the disk cache"):
        compile_bench.run(Config(out=tmp_path, tiny=True, quick=True, progress=False, repeats=1))


def test_compile_subcommand_loads_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path / "user-cache"))
    assert cli.main(["compile", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "compile", compile_bench.COLUMNS)
    assert [r["kernel"].split()[0] for r in rows] == ["K1", "K2", "K3", "K4", "K5"]
    assert all(float(r["cold_s"]) >= 0 and float(r["load_s"]) >= 0 for r in rows)   # no timing asserts
    assert not (tmp_path / "user-cache").exists() or not any((tmp_path / "user-cache").iterdir())


def test_overhead_subcommand_runs_and_later_processes_compile_nothing(tmp_path):
    from splyce.bench import overhead

    assert cli.main(["overhead", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "overhead", overhead.COLUMNS)
    assert [r["op"] for r in rows] == list(overhead.OPS)
    assert all(int(r["disk_compiles"]) == 0 for r in rows)   # the second fresh process loaded everything
    assert all(float(r["steady_ms"]) > 0 and float(r["call_4x4_us"]) > 0 for r in rows)   # no timing asserts


def test_simd_share_reads_the_profile():
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS["K1"]
    assert 0.5 < common.simd_share(spec.fun, tuple(spec.operands(96, 0.2))) <= 1.0


def test_simd_share_failure_propagates():
    def not_traceable(a):
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError):
        common.simd_share(not_traceable, (np.ones(3),))


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
    runs = [k for k, _ in itertools.groupby(order)]             # a sample may call a candidate several times
    assert runs == list("abc") + list("abc") + list("bca")      # warm-up, then each repeat rotated
    assert all(len(v.times) == 2 for v in t.values())


def test_short_calls_timed_in_batches_long_ones_alone():
    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1
        return np.zeros(1)

    def slow():
        calls["slow"] += 1
        time.sleep(common.MIN_SAMPLE_S * 1.5)
        return np.zeros(1)

    t = common.measure({"fast": fast, "slow": slow}, np.zeros(1), Config(repeats=3, progress=False))
    assert calls["slow"] == 2 + 3                    # warm-up, calibration, one call per sample
    assert calls["fast"] > 2 + 3 * 10                # many calls per sample
    assert t["fast"].median < common.MIN_SAMPLE_S / 10 < t["slow"].median   # times are per call


def test_help_has_methodology():
    out = subprocess.run([sys.executable, "-m", "splyce.bench", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for phrase in ("Warm-up", "Interleaved", "Median and min", "reference", "Machine info"):
        assert phrase in out, phrase


def test_real_tiny_every_op_checked_and_reported(tmp_path, capsys):
    assert cli.main(["real", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "real", real.COLUMNS)
    for op in real.OPS:
        assert (tmp_path / f"real_{op}.png").read_bytes()[:8] == PNG_MAGIC
    mats = {r["matrix"] for r in rows}
    assert len(mats) == len(real.tiny_entries())
    assert sorted((r["matrix"], r["op"]) for r in rows) == sorted((m, op) for m in mats for op in real.OPS)
    for r in rows:
        assert float(r["scipy_s"]) > 0 and float(r["graphblas_s"]) > 0
        # a missing drop-in number is always explained (unsupported, or too slow to repeat), never a bare n/a
        if r["splyce_s"] in ("", "n/a"):
            assert "splyce:" in r["notes"], r
    spmv = [r for r in rows if r["op"] == "spmv"]
    assert all(0 < float(r["bw_scipy"]) for r in spmv)
    printed = capsys.readouterr().out
    assert "drop-in speedup vs scipy" in printed and "GraphBLAS" in printed
    # the run's machine probes go with its table: what two threads could gain, what fresh memory cost
    assert "This machine during the run" in printed and "first touch" in printed
    comments, _ = read_csv(tmp_path / "real.csv")
    assert any("two cores: copy" in c for c in comments) and any("fresh memory" in c for c in comments)


def test_real_ops_and_matrices_select_a_subset(tmp_path):
    out = tmp_path / "sub"
    assert cli.main(["real", "--tiny", "--no-progress", "--ops", "spmv", "--matrices", "blockdiag-32",
                     "--out", str(out)]) == 0
    rows = _check_outputs(out, "real", real.COLUMNS)
    assert [(r["matrix"], r["op"]) for r in rows] == [("blockdiag-32", "spmv")]
    with pytest.raises(SystemExit, match="unknown op spmvv"):
        cli.main(["real", "--tiny", "--ops", "spmvv", "--out", str(out)])


@pytest.mark.parametrize("who", ["splyce_call", "graphblas_call"])
def test_real_wrong_result_fails_loudly(who, tmp_path, monkeypatch, capsys):
    good = getattr(real, who)

    def wrong(op, d, *args, **kw):
        f = good(op, d, *args, **kw)
        return (lambda: 2 * f()) if op == "spmv" else f   # SpMV returns a dense vector (or gb Vector)

    if who == "graphblas_call":
        def wrong(op, d, *args, **kw):   # noqa: F811 - GraphBLAS vectors do not scale with *; drop an entry
            f = good(op, d, *args, **kw)

            def dropped():
                v = f()
                del v[int(d.A.indices[0])]
                return v
            return dropped if op == "spmv" else f
    monkeypatch.setattr(real, who, wrong)
    monkeypatch.setattr(real, "tiny_entries", lambda: real.corpus.select(quick=True)[2:3])
    assert cli.main(["real", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 1
    assert "MISMATCH" in capsys.readouterr().err
    assert not (tmp_path / "real.csv").exists()


def test_real_guarded_probe_in_child(tmp_path, monkeypatch):
    """The child-process probe (used for SpGEMM / triangles / SDDMM on large matrices) returns a time, and a
    child that is not ready in time is stopped and reported as such."""
    entry = next(e for e in real.corpus.select(quick=True) if e.name == "rmat-s10")
    real.corpus.build(entry, tmp_path)
    assert real.probe_in_child(tmp_path, entry, "triangles", "splyce", limit=60.0) > 0
    monkeypatch.setattr(real, "CHILD_STARTUP_S", 0.01)
    assert real.probe_in_child(tmp_path, entry, "triangles", "splyce", limit=60.0) is None


def test_real_case_with_guard(tmp_path, monkeypatch):
    monkeypatch.setattr(real, "GUARD_NNZ", 0)
    entry = next(e for e in real.corpus.select(quick=True) if e.name == "blockdiag-32")
    A = real.corpus.build(entry, tmp_path)
    row = real.run_case(entry, real.Operands(entry.name, A), "triangles", Config(tiny=True, progress=False),
                        cache_dir=tmp_path)
    assert row["op"] == "triangles" and row["scipy_s"] > 0
    assert isinstance(row["splyce_s"], float) or "splyce:" in row["notes"]


def test_check_sparse_reference():
    import scipy.sparse as sps

    A = sps.random_array((40, 40), density=0.1, format="csr", rng=3)
    common.check("same", A.tocoo(), A)
    B = A.tolil()
    B[1, 2] = 5.0
    with pytest.raises(BenchMismatch, match=r"\(1, 2\)"):
        common.check("entry", B, A)
    with pytest.raises(BenchMismatch, match="shape"):
        common.check("shape", A[:39], A)


def test_real_two_thread_columns_when_the_dropin_takes_threads(monkeypatch):
    """The two-thread candidates (drop-in threads=2 vs GraphBLAS nthreads=2) appear exactly when the drop-in's
    signature accepts threads=."""
    entry = real.tiny_entries()[0]
    d = real.Operands(entry.name, real.corpus.build(entry))
    cfg = Config(quick=True, repeats=2, progress=False)
    assert real.dropin_threads("spmv")
    row = real.run_case(entry, d, "spmv", cfg)
    assert row["splyce_t2_vs_graphblas_t2"] > 0 and row["splyce_t2_scaling"] > 0
    monkeypatch.setattr(real, "dropin_threads", lambda op: False)
    row = real.run_case(entry, d, "spmv", cfg)
    assert "splyce_t2_vs_graphblas_t2" not in row


def test_dask_subcommand_tiny(tmp_path, capsys):
    """2-worker LocalCluster: splyce.dask on 1 and 2 workers, checked bit for bit before timing."""
    pytest.importorskip("distributed")
    from splyce.bench import dask as dask_bench

    assert cli.main(["dask", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "dask", dask_bench.COLUMNS)
    assert {r["op"].split()[0] for r in rows} == {"SpMV", "SpMM", "SpGEMM", "triangles", "10", "jitted"}
    assert all(float(r["splyce_1w_s"]) > 0 and float(r["speedup_2w_vs_1w"]) > 0 for r in rows)
    # the single process, the time apart (transfers: none on one worker) and the cost model's predictions
    for r in rows:
        assert float(r["single_s"]) > 0 and float(r["splyce_1w_vs_single"]) > 0, r
        assert float(r["splyce_1w_transfer_s"]) == 0 and float(r["splyce_2w_transfer_s"]) >= 0, r
        assert all(float(r[c]) > 0 for c in dask_bench.MODEL_WORKERS.values()), r
    # the busiest worker's task bodies (task stream) took part of each run's wall time
    assert all(0 < float(r[f"splyce_{w}_tasks_s"]) < float(r[f"splyce_{w}_s"]) for r in rows for w in ("1w", "2w"))
    # Dask's floor: the same 2-worker graph with no-op task bodies, timed (no bound against the real run: at tiny
    # sizes on a loaded machine either can be the faster); max_vs_pydata is pydata / floor, n/a where pydata is
    # not run (tiny mode: its Numba JIT)
    for r in rows:
        assert float(r["dask_floor_2w_s"]) > 0, r
        if r["pydata_2w_s"] == "n/a":
            assert r["max_vs_pydata"] == "n/a", r
        else:
            assert float(r["max_vs_pydata"]) > 0, r


def test_dask_gathered_tiny(tmp_path):
    """--ops gathered: the 1-worker SpGEMM gathered to the client (checked bit for bit before timing) against
    the single-process drop-in, with Dask's transport alone beside it; runs alone."""
    pytest.importorskip("distributed")
    from splyce.bench import dask_gathered

    assert cli.main(["dask", "--tiny", "--ops", "gathered", "--repeats", "2", "--no-progress",
                     "--out", str(tmp_path)]) == 0
    (row,) = _check_outputs(tmp_path, "dask_gathered", dask_gathered.COLUMNS)
    assert row["matrix"].startswith("mesh3d-12") and int(row["rows"]) == 12 ** 3
    assert float(row["c_mb"]) > float(row["a_mb"]) > 0
    assert all(float(row[c]) > 0 for c in dask_gathered.COLUMNS[5:]), row
    with pytest.raises(SystemExit, match="runs alone"):
        cli.main(["dask", "--tiny", "--ops", "gathered,spmv", "--no-progress", "--out", str(tmp_path)])


def test_mesh3d_is_the_7_point_laplacian():
    from splyce.bench.dask_gathered import mesh3d

    a = mesh3d(4)
    assert a.shape == (64, 64) and a.has_canonical_format
    assert np.array_equal(a.diagonal(), np.full(64, 6.0)) and np.array_equal(np.diff(a.indptr).max(), 7)
    assert a.nnz == 64 * 7 - 6 * 16 and (a != a.T).nnz == 0


def test_dask_bench_matrices(tmp_path):
    """The dask bench runs on the corpus: its full sizes are the corpus's large entries (a mesh, a power-law
    graph, the road-like graph), its quick and test sizes small entries; matrices come out canonical."""
    from splyce.bench import corpus
    from splyce.bench import dask as dask_bench

    entries = {e.name: e for e in corpus.entries()}
    assert all(name in entries and not entries[name].quick for name in dask_bench.FULL)
    assert all(entries[name].quick for name in dask_bench.QUICK + dask_bench.TINY)
    assert {"fem-3d", "power-law", "road"} <= {entries[name].kind for name in dask_bench.FULL}
    assert {"power-law"} <= {entries[name].kind for name in dask_bench.QUICK + dask_bench.TINY}
    mats = dask_bench.matrices(Config(tiny=True, out=tmp_path))
    assert [label.split()[0] for label, _ in mats] == list(dask_bench.TINY)
    for _, A in mats:
        assert A.format == "csr" and A.has_canonical_format and (A != A.T).nnz == 0
    # --matrices picks corpus entries by name, in the order given; an unknown name exits saying the choices
    picked = dask_bench.matrices(Config(tiny=True, out=tmp_path, matrices=("rmat-s10", "fem3d-1500")))
    assert [label.split()[0] for label, _ in picked] == ["rmat-s10", "fem3d-1500"]
    with pytest.raises(SystemExit, match="choose from"):
        dask_bench.matrices(Config(tiny=True, out=tmp_path, matrices=("no-such-matrix",)))


def test_programs_tiny(tmp_path, capsys):
    # the algorithm bodies jitted whole vs scipy: every program on both tiny matrices, checked, timed
    assert cli.main(["programs", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "programs", programs.COLUMNS)
    assert {r["program"] for r in rows} == set(programs.PROGRAMS) and len(rows) == 2 * len(programs.PROGRAMS)
    assert all(float(r["splyce_vs_scipy"]) > 0 and float(r["wrapped_vs_chain"]) > 0 for r in rows)


def test_forms_tiny(tmp_path, capsys):
    # every one-op form on the tiny matrix: checked against scipy, timed (or named as untraced), the path said
    from splyce.bench import forms

    assert len(forms.FORMS) >= 40
    assert cli.main(["forms", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "forms", forms.COLUMNS)
    assert [r["form"] for r in rows] == list(forms.FORMS)
    timed = [r for r in rows if not r["path"].startswith("untraced")]
    assert len(timed) >= 40 and all(float(r["jit_vs_scipy"]) > 0 for r in timed)
    by_form = {r["form"]: r["path"] for r in rows}
    assert {by_form[f] for f in ("neg", "scale", "abs", "square", "pow2", "sum", "sum_axis1", "max", "ne0")} \
        == {"form"}


def test_limit_tiny(tmp_path, capsys):
    """bench limit: every candidate checked and timed, NumKong only where it takes the dtypes, the clock known."""
    from splyce.bench import limit

    assert cli.main(["limit", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    comments, rows = read_csv(tmp_path / "limit.csv")
    assert any(c.startswith("# clock: ") for c in comments)
    assert list(rows[0]) == limit.COLUMNS
    by_case = {}
    for r in rows:
        by_case.setdefault((r["crd"], r["val"], r["lengths"]), set()).add(r["candidate"])
        assert float(r["ns_per_crd"]) > 0 and float(r["bw_share"]) > 0
    assert by_case[("int32", "float64", "4096:4096")] >= {"lane", "plain", "floor", "lane fast_math n8",
                                                          "lane fast_math auto"}
    assert any(c.startswith("# clock: ") and ("imuls" in c or "cpu MHz" in c) for c in comments), comments
    assert "lane gallop=0" in by_case[("int64", "float32", "4096:256")]
    assert all("numkong dot" not in names for (crd, _, _), names in by_case.items() if crd == "int64")
    assert "plain / lane" in capsys.readouterr().out


@pytest.mark.parametrize("skew", [1, 16])
def test_limit_fiber_pair_overlap(skew):
    from splyce.bench import limit

    dim, b, bv, c, cv = limit.fiber_pair(2000, 0.1, skew, np.int64, np.float32)
    assert b.size == 2000 and c.size == 2000 // skew and b.max() < dim and c.max() < dim
    assert np.all(np.diff(b) > 0) and np.all(np.diff(c) > 0)
    assert np.intersect1d(b, c).size == round(0.1 * c.size)


def test_kernels_target_avx2(tmp_path, monkeypatch, capsys):
    """`bench kernels --target avx2`: both the plain sparsifier and Splyce are compiled for AVX2 (the paper's
    AVX2 column measured on an AVX-512 host), and the table says so."""
    import splyce

    targets = []
    real_jit = splyce.jit

    def spy(*args, **kwargs):
        targets.append(kwargs.get("target", "native"))
        return real_jit(*args, **kwargs)

    monkeypatch.setattr(splyce, "jit", spy)
    assert cli.main(["kernels", "--tiny", "--no-progress", "--target", "avx2", "--out", str(tmp_path)]) == 0
    assert targets and set(targets) == {"avx2"}, targets
    assert "avx2 code" in (tmp_path / "kernels.md").read_text()
    assert "(target avx2)" in capsys.readouterr().out


def test_sweep_tiny(tmp_path, capsys):
    """bench sweep: the distributions' first cases checked and timed, with NumKong and the floor beside them."""
    from splyce.bench import sweep

    assert cli.main(["sweep", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    comments, rows = read_csv(tmp_path / "sweep.csv")
    assert list(rows[0]) == sweep.COLUMNS and any(c.startswith("# clock: ") for c in comments)
    assert {r["candidate"] for r in rows} == set(sweep.CANDIDATES)
    assert all(float(r["ns_per_crd"]) > 0 for r in rows)
    assert "fast / floor" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["uniform x1.25", "uniform x10", "runs 8", "runs 64", "powerlaw 1.2",
                                  "powerlaw 2", "skew 1:16", "mixed"])
def test_sweep_distributions(name):
    """Each distribution: sorted distinct coordinates of the stated lengths, with the stated gaps."""
    from splyce.bench import sweep

    n = 1 << 12
    dim, b, bv, c, cv = sweep.fiber_pair(name, n, np.int64, np.float32)
    for crd, val in ((b, bv), (c, cv)):
        assert crd.size == val.size and np.all(np.diff(crd) > 0) and crd[0] >= 0 and crd[-1] < dim
    assert b.size == n and c.size == (n // 16 if name == "skew 1:16" else n)
    shared = np.intersect1d(b, c).size
    if name.startswith("uniform"):
        f = float(name.split("x")[1])
        assert b[-1] < f * n and abs(shared / n - 1 / f) < 0.05
    if name.startswith("runs"):
        run = int(name.split()[1])
        assert np.count_nonzero(np.diff(b) == 1) >= n * (run - 1) / run - 1
    if name == "powerlaw 1.2":
        gaps = np.diff(b)
        assert np.median(gaps) <= 2 and gaps.max() > 100
    if name == "mixed":
        assert b[-1] < 2 * n and c[-1] > 8 * n
    with pytest.raises(ValueError, match="unknown distribution"):
        sweep.distribution("gaussian", n)


@pytest.mark.slow
def test_first_call_bench_splits_stages_and_checks_results():
    """``bench first_call``: fresh processes with empty caches, results equal across splyce and JAX (if
    installed), splyce's stages summed over the kernels it compiled (no timing asserts)."""
    from splyce.bench import first_call

    rows = first_call.measure(n=2000, repeats=1, programs=("spmv", "gcn"), out=lambda line: None)
    splyce_rows = {r["program"]: r for r in rows if r["framework"] == "splyce"}
    assert set(splyce_rows) == {"spmv", "gcn"}
    assert splyce_rows["spmv"]["kernels"] == 0          # the drop-in's native kernel: nothing compiled
    assert splyce_rows["gcn"]["kernels"] >= 1 and splyce_rows["gcn"]["mlir_s"] > 0


def test_jit_formats_tiny(tmp_path):
    """bench jit_formats: every program on held BSR / DIA / COO operands checked against scipy, ratios reported."""
    assert cli.main(["jit_formats", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = _check_outputs(tmp_path, "jit_formats", ["matrix", "program", "held_ms", "csr_ms", "scipy_ms",
                                                     "csr_over_held", "scipy_over_held"])
    assert {r["matrix"].split()[0] for r in rows} == {"bsr", "dia", "coo"} and len(rows) == 20
    assert all(float(r["csr_over_held"]) > 0 for r in rows)
