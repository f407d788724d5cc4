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


LINALG_SCRIPT = r"""
import sys
import numpy as np, scipy.sparse as sps
import splyce
a = sps.random_array((30, 20), density=0.2, format="csr", rng=1)
x = np.arange(20.0)
got = splyce.jit(lambda m, v: np.maximum(m @ v, 3.0))(a, x)     # MLIR kernel: linalg ops met and built
assert np.array_equal(got, np.maximum(a @ x, 3.0))
assert "mlir.dialects.linalg" not in sys.modules, "the lowering imported mlir.dialects.linalg (its OpDSL)"
from mlir._mlir_libs import _mlir
assert list(_mlir.globals.dialect_search_modules) == ["mlir.dialects"], "search list not restored"

# splyce's fill builds the IR OpDSL's linalg.fill builds (tensor and memref outputs)
from mlir import ir
from mlir.dialects import arith, func, tensor
from splyce.lowering import linalg_ops
from mlir.dialects import linalg          # the real package imports fine afterwards
assert linalg.GenericOp is linalg_ops.GenericOp and linalg.YieldOp is linalg_ops.YieldOp


def build(fill):
    with ir.Context(), ir.Location.unknown():
        m = ir.Module.create()
        f64, i1, i8 = ir.F64Type.get(), ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(8)
        dyn = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()], f64)
        with ir.InsertionPoint(m.body):
            @func.FuncOp.from_py_func(ir.MemRefType.get([4], i8), dyn)
            def k(buf, d):
                r = fill(arith.constant(f64, -1.5), outs=[tensor.EmptyOp([3, 5], f64).result])
                fill(arith.constant(i1, 1), outs=[tensor.EmptyOp([7], i1).result])
                fill(arith.constant(i8, 2), outs=[buf])
                fill(arith.constant(f64, 0.0), outs=[d])
                return r
        m.operation.verify()
        return str(m)


assert build(linalg.fill) == build(linalg_ops.fill)
print("ok")
"""


def test_lowering_does_not_import_opdsl_and_fill_matches_it(tmp_path):
    out = subprocess.run([sys.executable, "-c", LINALG_SCRIPT], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "SPLYCE_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
