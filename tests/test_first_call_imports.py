"""A new program's first call imports only what the function reads: tracing ``a @ x`` does not import
scipy.sparse.linalg (~0.5 s cold, through scipy.linalg), and a function that reads ``scipy.sparse.linalg``
through ``scipy.sparse`` still gets the traced-aware ``norm`` (the namespace is built on that read)."""

import subprocess
import sys

SCRIPT = r"""
import sys
import numpy as np, scipy.sparse as sps
assert "scipy.sparse.linalg" not in sys.modules
import splyce
a = sps.random_array((40, 40), density=0.1, format="csr", rng=0)
x = np.arange(40.0)
assert np.allclose(splyce.jit(lambda m, v: m @ v)(a, x), a @ x)
assert "scipy.sparse.linalg" not in sys.modules, "tracing a @ x imported scipy.sparse.linalg"
f = splyce.jit(lambda m: sps.linalg.norm(m) * 2.0)
got = f(a)
import scipy.sparse.linalg as spla
assert np.isclose(got, spla.norm(a) * 2.0)
g = splyce.jit(lambda m: spla.norm(m, 1))
assert np.isclose(g(a), spla.norm(a, 1))
print("ok")
"""


def test_first_trace_does_not_import_scipy_sparse_linalg(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "SPLYCE_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
