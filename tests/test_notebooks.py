"""The notebooks execute top to bottom (small sizes), in a kernel running this very interpreter."""

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


@pytest.mark.parametrize("name", ["01_quickstart.ipynb", "02_paper_experiments.ipynb"])
def test_notebook_runs(name, kernel_env, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks cleared"
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=240,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot"
