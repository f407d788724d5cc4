"""The notebooks execute top to bottom in a kernel running this very interpreter (01 and 02 at small sizes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL_NAME = "splyce-test-python3"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A kernelspec in a temporary Jupyter data dir whose argv is sys.executable (CI has no installed spec)."""
    data = tmp_path_factory.mktemp("jupyter")
    spec_dir = data / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "splyce tests", "language": "python"}))
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "SPLYCE_NOTEBOOK_QUICK", "MPLBACKEND")}
    os.environ.pop("MPLBACKEND", None)   # the kernel's inline backend renders the plots as image/png
    os.environ["JUPYTER_PATH"] = str(data) + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    os.environ["SPLYCE_NOTEBOOK_QUICK"] = "1"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# name -> whether it draws a plot. Each notebook asserts its results against scipy / NumPy in its cells.
NOTEBOOK_PLOTS = {
    "01_quickstart.ipynb": True,
    "02_paper_experiments.ipynb": True,
    "03_graph_analytics.ipynb": False,
    "04_fem_spmv_spmm.ipynb": False,
    "05_sddmm_attention.ipynb": False,
    "06_reading_the_plan.ipynb": False,
    "07_training_with_grad.ipynb": False,
}


def test_every_notebook_is_executed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NOTEBOOK_PLOTS)


@pytest.mark.parametrize("name", sorted(NOTEBOOK_PLOTS))
def test_notebook_runs(name, kernel_env, tmp_path):
    # The committed notebooks keep the outputs of a full run (the docs site renders them); the test runs
    # them afresh from their sources, replacing those outputs in memory only.
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=240,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert all(c.outputs for c in nb.cells if c.cell_type == "code" and "print(" in c.source)
    if NOTEBOOK_PLOTS[name]:
        assert any("image/png" in o.get("data", {}) for o in outputs), "no plot"
