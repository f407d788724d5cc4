"""Dense operands read through views inside a sparse kernel, each program in a child process.

A host-computed value (``s = h @ w``: the planner runs dense-only products before the kernel) or a late
argument that the kernel reads through broadcast views (``s[:, None] + s[None, :]``) is gathered inside the
fused sparse ``linalg.generic``. MLIR 22's sparsifier aborted the process on such a gather from a kernel
argument numbered past the generic's operand count (``Merger::makeTensorId``: ``isValidTensorId(t)``;
docs/toolchain.md); passes/outer_arguments.py keeps that pattern from reaching it. An abort kills the
process, so each program runs in a child and the parent fails on its signal. The reference is the same
function run by NumPy / scipy.sparse (``csr_array``) without ``splyce.jit``.
"""

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np, scipy.sparse as sp
    import splyce

    FORMATS = {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array}
    fmt = sys.argv[2] if len(sys.argv) > 2 else "csr"
    adj = FORMATS[fmt](sp.random(40, 40, density=0.12, format="csr", random_state=0))
    rng = np.random.default_rng(0)
    h = rng.random((40, 4))
    w = rng.uniform(-1, 1, 4)
    m = rng.uniform(-1, 1, (4, 4))
    t, u, s0 = rng.random(40), rng.random(40), rng.random(40)

    def gat_like_scores(adj, h):
        s = h @ np.ones(h.shape[1])   # a dense-only product: run on the host before the kernel
        return adj.multiply(s[:, None] + s[None, :]).sum(axis=1)

    def subtract_sum_columns(adj, h, w):
        s = h @ w
        return adj.multiply(s[:, None] - s[None, :]).sum(axis=0)

    def outer_multiply_total(adj, h, w):
        s = h @ w
        return adj.multiply(s[:, None] * s[None, :]).sum()

    def where_sparse_result(adj, h, w):
        s = h @ w
        return adj.multiply(np.where(s[:, None] > s[None, :], s[:, None], s[None, :]))

    def where_one_view_sum(adj, h, w):
        s = h @ w
        return adj.multiply(np.where(s[:, None] > 0.0, s[:, None], 0.0)).sum(axis=0)

    def add_then_matmul_dense(adj, h, w):
        s = h @ w
        return adj.multiply(s[:, None] + s[None, :]) @ h

    def subtract_then_matmul_vector(adj, h, w):
        s = h @ w
        return adj.multiply(s[:, None] - s[None, :]) @ s

    def row_view_sum(adj, h, w):
        s = h @ w
        return adj.multiply(s[None, :]).sum(axis=1)

    def column_view_matmul(adj, h, w):
        s = h @ w
        return adj.multiply(s[:, None]) @ h

    def columns_of_2d_product(adj, h, m):
        p = h @ m                                       # 40x4 on the host; two column gathers of it
        return adj.multiply(p[:, 0][:, None] + p[:, 1][None, :]).sum(axis=1)

    def transpose_of_2d_product(adj, h):
        q = h @ h.T                                     # 40x40 on the host, read as itself and transposed
        return adj.multiply(q - q.T).sum(axis=1)

    def more_arguments_used_after(adj, t, u, h):
        s = h @ np.ones(h.shape[1])
        return adj.multiply(s[:, None] + s[None, :]).sum(axis=1) * t - u

    def dense_times_product(adj, h, w):                 # h.T @ (...): the sparse operand on the right
        s = h @ w
        return h.T @ adj.multiply(s[:, None] + s[None, :])

    def where_constants_sum(adj, h, w):
        s = h @ w
        return adj.multiply(np.where(s[:, None] > s[None, :], 1.0, -1.0)).sum(axis=0)

    def late_argument(adj, t, u, s):                   # no host product: the view's operand is argument 3
        return adj.multiply(s[:, None] + s[None, :]).sum(axis=1) * t - u

    CASES = {
        "gat_like_scores": (gat_like_scores, (adj, h)),
        "subtract_sum_columns": (subtract_sum_columns, (adj, h, w)),
        "outer_multiply_total": (outer_multiply_total, (adj, h, w)),
        "where_sparse_result": (where_sparse_result, (adj, h, w)),
        "where_one_view_sum": (where_one_view_sum, (adj, h, w)),
        "add_then_matmul_dense": (add_then_matmul_dense, (adj, h, w)),
        "subtract_then_matmul_vector": (subtract_then_matmul_vector, (adj, h, w)),
        "row_view_sum": (row_view_sum, (adj, h, w)),
        "column_view_matmul": (column_view_matmul, (adj, h, w)),
        "columns_of_2d_product": (columns_of_2d_product, (adj, h, m)),
        "transpose_of_2d_product": (transpose_of_2d_product, (adj, h)),
        "more_arguments_used_after": (more_arguments_used_after, (adj, t, u, h)),
        "late_argument": (late_argument, (adj, t, u, s0)),
        "dense_times_product": (dense_times_product, (adj, h, w)),
        "where_constants_sum": (where_constants_sum, (adj, h, w)),
    }
    if sys.argv[1] == "--names":
        print(json.dumps(sorted(CASES)))
        sys.exit(0)

    def dense(x):
        return x.toarray() if hasattr(x, "toarray") else np.asarray(x)

    fun, args = CASES[sys.argv[1]]
    copies = [a.copy() for a in args]
    want = fun(*args)                                   # NumPy / scipy.sparse themselves
    got = splyce.jit(fun)(*args)
    for a, c in zip(args, copies):                      # inputs are never modified
        assert (dense(a) == dense(c)).all()
    g, x = dense(got), dense(want)
    print(json.dumps({"shape": [list(np.shape(g)), list(np.shape(x))], "sparse": [hasattr(got, "toarray"),
                      hasattr(want, "toarray")], "close": bool(np.shape(g) == np.shape(x) and
                      np.allclose(g, x, rtol=1e-12, atol=1e-12)), "got": str(g)[:300], "want": str(x)[:300]}))
''')

NAMES = ["gat_like_scores", "subtract_sum_columns", "outer_multiply_total", "where_sparse_result",
         "where_one_view_sum", "add_then_matmul_dense", "subtract_then_matmul_vector", "row_view_sum",
         "column_view_matmul", "columns_of_2d_product", "transpose_of_2d_product", "more_arguments_used_after",
         "late_argument", "dense_times_product", "where_constants_sum"]
# CSC and COO operands order the loops otherwise (their kernels read the CSR-stored copy or the columns first)
OTHER_FORMATS = ["gat_like_scores", "add_then_matmul_dense", "dense_times_product", "where_constants_sum"]


def _child(*argv):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"the child process died (status {proc.returncode}, a negative status is a "
                                  f"signal):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_table_lists_every_case():
    assert _child("--names") == sorted(NAMES)


@pytest.mark.slow   # a child process per program (~5 s each on the shared VM)
@pytest.mark.parametrize("name,fmt", [(n, "csr") for n in NAMES] + [(n, f) for f in ("csc", "coo")
                                                                     for n in OTHER_FORMATS])
def test_views_of_host_and_late_operands_match_scipy_in_a_child(name, fmt):
    row = _child(name, fmt)
    assert row["close"], row
    assert row["sparse"][0] == row["sparse"][1], row   # a sparse result where scipy's is sparse, dense where dense


# The fused kernels of two of the programs above (after linalg-fuse-elementwise-ops), as the sparsifier got them.
CSR = "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>"
ROW_SUMS = f'''
func.func @k(%a: tensor<40x40xf64, {CSR}>, %h: tensor<40x4xf64>, %w: tensor<4xf64>, %s: tensor<40xf64>,
             %out: tensor<40xf64>) -> tensor<40xf64> {{
  %0 = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}}
       ins(%a : tensor<40x40xf64, {CSR}>) outs(%out : tensor<40xf64>) {{
  ^bb0(%in: f64, %acc: f64):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %sj = tensor.extract %s[%j] : tensor<40xf64>
    %si = tensor.extract %s[%i] : tensor<40xf64>
    %t = arith.addf %si, %sj : f64
    %p = arith.mulf %in, %t : f64
    %r = arith.addf %acc, %p : f64
    linalg.yield %r : f64
  }} -> tensor<40xf64>
  return %0 : tensor<40xf64>
}}'''
TIMES_DENSE = f'''
func.func @k(%a: tensor<40x40xf64, {CSR}>, %h: tensor<40x4xf64>, %s: tensor<40xf64>,
             %out: tensor<40x4xf64>) -> tensor<40x4xf64> {{
  %0 = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d2, d0)>,
                                        affine_map<(d0, d1, d2) -> (d1, d0)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}}
       ins(%a, %h : tensor<40x40xf64, {CSR}>, tensor<40x4xf64>) outs(%out : tensor<40x4xf64>) {{
  ^bb0(%in: f64, %in_h: f64, %acc: f64):
    %i = linalg.index 1 : index
    %k = linalg.index 2 : index
    %sk = tensor.extract %s[%k] : tensor<40xf64>
    %si = tensor.extract %s[%i] : tensor<40xf64>
    %t = arith.addf %si, %sk : f64
    %p = arith.mulf %in, %t : f64
    %q = arith.mulf %p, %in_h : f64
    %r = arith.addf %acc, %q : f64
    linalg.yield %r : f64
  }} -> tensor<40x4xf64>
  return %0 : tensor<40x4xf64>
}}'''


def _sparse_generic_body(module) -> str:
    text = str(module)
    return text[text.index("linalg.generic"):]


def test_late_argument_reads_in_a_sparse_body_go_through_a_cast():
    from mlir import ir

    from splyce.passes.loop_coordinates import coordinates_as_operands
    from splyce.passes.outer_arguments import shield_outer_arguments

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(ROW_SUMS)
        assert shield_outer_arguments(module) == 2          # %s is argument 3, the generic has 2 operands
        body = _sparse_generic_body(module)
        assert "tensor.extract %arg3" not in body and "tensor.extract %s" not in body, body
        assert "tensor.cast" in str(module) and "tensor<?xf64>" in body
        module.operation.verify()
        assert shield_outer_arguments(module) == 0          # nothing left to reroute
        # the sparsifier keeps this generic's loops (rows, then their entries): linalg.index stays
        assert coordinates_as_operands(module) == 0
        assert "linalg.index" in _sparse_generic_body(module)


def test_reordered_sparse_loops_read_coordinates_from_operands():
    from mlir import ir

    from splyce.passes.loop_coordinates import coordinates_as_operands
    from splyce.passes.outer_arguments import shield_outer_arguments

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(TIMES_DENSE)
        assert shield_outer_arguments(module) == 0          # %s is argument 2 of a generic with 3 operands
        # loops (j, i, k) that the sparsifier sorts to (i, k, j): each coordinate the body reads becomes an operand
        assert coordinates_as_operands(module) == 1
        module.operation.verify()
        text = str(module)
        sparse_generic = text[text.rindex("linalg.generic"):]
        assert "linalg.index" not in sparse_generic, text
        assert "tensor<40xi64>" in sparse_generic, text     # 0 .. 39 read through (d0, d1, d2) -> (d1) and -> (d2)
        assert coordinates_as_operands(module) == 0
