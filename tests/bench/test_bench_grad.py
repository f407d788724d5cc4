"""python -m splyce.bench grad --tiny: every program's gradients checked against the scipy gradient and
reported with the JAX and scipy columns and first-call times."""

import pytest

from splyce.bench import __main__ as cli
from splyce.bench.common import read_csv


@pytest.mark.slow
def test_grad_bench_tiny(tmp_path):
    assert cli.main(["grad", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    _, rows = read_csv(tmp_path / "grad.csv")
    assert [r["program"] for r in rows] == ["gcn", "logreg", "mf"]
    for r in rows:
        for column in ("splyce_ms", "jax_ms", "scipy_ms", "splyce_first_s", "jax_first_s", "cpu_jax_over_splyce",
                       "cpu_scipy_over_splyce"):
            assert float(r[column]) > 0, (r["program"], column)
