"""The planner: fusion of masked / reduced products, formulation by cost, the memory guard."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.planner import cost
from filecheck import check_in_order


def _tril_graph(n: int, per_row: int, seed: int) -> sps.csr_array:
    """A symmetric random pattern (about ``per_row`` neighbours), strictly lower triangle, values 1."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, n, n * per_row)
    a = sps.coo_array((np.ones(n * per_row), (rows, cols)), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64)
    low = sps.tril(a, -1, format="csr")
    low.sort_indices()
    return sps.csr_array(low)


def _plan(f, *args):
    kernel, _ = f.kernel_for(*args)
    return kernel.plan


def test_triangle_counting_fuses_into_one_contraction_without_a_dense_intermediate():
    low = _tril_graph(400, 6, 1)
    f = splyce.jit(lambda l: ((l @ l) * l).sum())
    assert f(low) == pytest.approx((low @ low).multiply(low).sum(), rel=1e-12)
    plan = _plan(f, low)
    assert len(plan.steps) == 1 and len(plan.fusions) == 2
    (step,) = plan.steps
    assert len(step.node.args) == 3 and step.node.type.shape == () and step.nbytes == 8
    check_in_order(f.lower(low).as_text("plan"), ["// fused contract[ik,kj->ij]", "// fused contract[",
                                                  "= contract[", "->, order=", "storage=(keep, keep, keep)"])


def test_masked_product_returns_the_mask_pattern_and_never_materializes_a_dense_product():
    a, b = _tril_graph(300, 5, 2), _tril_graph(300, 5, 3).T.tocsr()
    m = _tril_graph(300, 4, 4)
    f = splyce.jit(lambda a, b, m: (a @ b) * m)
    out = f(a, b, m)
    expected = (a @ b).multiply(m)
    assert sps.issparse(out) and out.format == "csr"
    np.testing.assert_allclose(out.toarray(), expected.toarray(), rtol=1e-14)
    plan = _plan(f, a, b, m)
    assert len(plan.steps) == 1 and all(s.node.type.is_sparse for s in plan.steps)
    assert max(s.nbytes for s in plan.steps) < 300 * 300 * 8 / 10


def test_sddmm_with_dense_factors_is_driven_by_the_mask():
    rng = np.random.default_rng(5)
    m = _tril_graph(200, 5, 6)
    x, y = rng.random((200, 8)), rng.random((200, 8))
    f = splyce.jit(lambda m, x, y: m * (x @ y.T))
    out = f(m, x, y)
    np.testing.assert_allclose(out.toarray(), m.multiply(x @ y.T).toarray(), rtol=1e-13)
    (step,) = _plan(f, m, x, y).steps
    assert step.node.type.is_sparse and step.node.params[0].order.endswith(
        [c for c in "abcdefgh" if c not in step.node.params[0].output][0])


@pytest.mark.parametrize("case", ["elementwise-sum", "quadratic-form"])
def test_reductions_of_products_become_one_contraction(case):
    rng = np.random.default_rng(7)
    a = sps.random_array((120, 120), density=0.05, format="csr", rng=8)
    if case == "elementwise-sum":
        b = sps.random_array((120, 120), density=0.05, format="csr", rng=9)
        f, args, expected = splyce.jit(lambda a, b: (a * b).sum()), (a, b), a.multiply(b).sum()
    else:
        v = rng.random(120)
        f, args, expected = splyce.jit(lambda a, v: v @ (a @ v)), (a, v), v @ (a @ v)
    assert f(*args) == pytest.approx(expected, rel=1e-12)
    plan = _plan(f, *args)
    assert len(plan.steps) == 1 and plan.steps[0].node.type.shape == ()


def test_scalar_factor_folds_into_the_product_only_where_it_has_fewer_products_than_results():
    """A scale of a sum's dense result is applied once per result entry, after the sum and fused with the glue
    (NumPy's rounding: PageRank's ``0.85 * (P @ x) + c`` is scipy's bit for bit), unless the sum has fewer
    products than the result has entries (a sparse-by-sparse product into a dense result): then it folds into
    the products."""
    a = sps.random_array((60, 60), density=0.1, format="csr", rng=10)
    h = np.random.default_rng(11).random((60, 60))
    f = splyce.jit(lambda w, h: w @ h * 0.25)
    np.testing.assert_allclose(f(a, h), (a @ h) * 0.25, rtol=1e-14)
    first, second = _plan(f, a, h).steps
    assert first.node.params[0].scale is None and second.node.op == "ewise"
    assert "mul($0, 0.25)" in f.lower(a, h).as_text("plan")
    x = np.random.default_rng(12).random(60)
    pagerank = splyce.jit(lambda p, x: 0.85 * (p @ x) + 0.15 / 60)
    assert np.array_equal(pagerank(a, x), 0.85 * (a @ x) + 0.15 / 60)
    assert np.array_equal(pagerank(a, x), pagerank.with_options(vectorize=False, library=False)(a, x))
    b = sps.random_array((60, 60), density=0.02, format="csr", rng=13)
    g = splyce.jit(lambda w, v: (w @ v) * 0.25, out_format="dense")
    np.testing.assert_allclose(g(b, b), (b @ b).toarray() * 0.25, rtol=1e-14)
    (step,) = _plan(g, b, b).steps
    assert step.node.params[0].scale == 0.25


def test_chained_products_that_are_cheaper_apart_stay_apart():
    a, b = (sps.random_array((80, 80), density=0.05, format="csr", rng=s) for s in (12, 13))
    c = np.random.default_rng(14).random((80, 3))
    f = splyce.jit(lambda a, b, c: a @ (b @ c))
    np.testing.assert_allclose(f(a, b, c), a @ (b @ c), rtol=1e-12)
    plan = _plan(f, a, b, c)
    assert not plan.fusions and len(plan.steps) == 1     # b @ c: the drop-in's SpMM, before the kernel
    assert [s.native.op for s in plan.sources if s.native is not None] == ["matmul"]
    assert len(_plan(splyce.jit(f.fun, library=False), a, b, c).steps) == 2


def test_pinned_order_is_kept_as_written():
    a = sps.random_array((50, 50), density=0.2, format="csr", rng=15)
    b = sps.random_array((50, 50), density=0.2, format="csc", rng=16)
    f = splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, order="ijk"))
    (step,) = _plan(f, a, b).steps
    assert step.node.params[0].order == "ijk" and step.storage == ("keep", "keep")
    with pytest.raises(ValueError, match="order must list each index of ik,kj->ij once"):
        splyce.jit(lambda a, b: splyce.einsum("ik,kj->ij", a, b, order="ij"))(a, b)
    with pytest.raises(TypeError, match="order= pins a traced contraction"):
        splyce.einsum("ik,kj->ij", a, b, order="ijk")


def test_spmv_with_a_sparse_vector_scatters_it_instead_of_intersecting():
    a = sps.random_array((3000, 3000), density=0.01, format="csr", rng=17)
    x = sps.random_array((3000,), density=0.3, format="coo", rng=18)
    f = splyce.jit(lambda a, x: a @ x, library=False)     # the planned kernel (the default runs the drop-in's)
    np.testing.assert_allclose(f(a, x), a @ x.toarray(), rtol=1e-13)
    (step,) = _plan(f, a, x).steps
    assert step.storage == ("keep", "scatter")


def test_numpy_vectors_stay_dense():
    a = sps.random_array((500, 500), density=0.02, format="csr", rng=19)
    v = np.random.default_rng(20).random(500)
    f = splyce.jit(lambda a, v: a @ v)
    np.testing.assert_allclose(f(a, splyce.asarray(v)), a @ v, rtol=1e-13)
    (step,) = _plan(f, a, splyce.asarray(v)).steps
    assert step.storage == ("keep", "dense")


def test_work_grows_linearly_with_rows_at_fixed_nonzeros_per_row():
    """Triangle counting's planned work (the cost model's step count) doubles when N doubles at a fixed
    number of nonzeros per row: the fused plan is O(nnz + flops), not O(N^2)."""
    f = splyce.jit(lambda l: ((l @ l) * l).sum())
    costs = [_plan(f, _tril_graph(n, 6, 21)).cost for n in (2000, 4000, 8000)]
    assert 1.7 < costs[1] / costs[0] < 2.3 and 1.7 < costs[2] / costs[1] < 2.3


def test_cost_model_counts_two_finger_merges_and_converts_when_that_pays():
    def ops(convertible):
        return [cost.Operand("ik", (100, 100), 500.0, (0, 1), convertible, (False, True)),
                cost.Operand("jk", (100, 100), 500.0, (0, 1), convertible, (False, True))]
    stuck = cost.choose(ops(False), "ij", None, None)
    # inner products: i, j dense (10^4 points), each merging two fibers of 5 entries, plus the 10^4 output
    assert stuck.order in ("ijk", "jik") and stuck.storage == ("keep", "keep") and 1e5 < stuck.cost < 2e5
    free = cost.choose(ops(True), "ij", None, None)
    # re-storing one operand (k, j) gives the row-wise product: O(flops + output), far cheaper
    assert free.order in ("ikj", "jki") and "convert" in free.storage and free.cost < stuck.cost / 4


def test_memory_budget_refuses_a_dense_intermediate_before_running():
    low = _tril_graph(3000, 4, 22)
    f = splyce.jit(lambda l: l @ l, out_format="dense")    # a dense 3000 x 3000 result: 72 MB
    splyce.set_memory_budget(10_000_000)
    try:
        with pytest.raises(MemoryError, match=r"the plan needs 72\.0 MB, over the memory budget of 10\.0 MB: "
                                              r"a result contract\[ik,kj->ij"):
            f(low)
        fused = splyce.jit(lambda l: ((l @ l) * l).sum())   # the fused form fits
        assert fused(low) == pytest.approx((low @ low).multiply(low).sum())
        sparse = splyce.jit(lambda l: l @ l)(low)            # and the default, sparse as scipy's, fits
        np.testing.assert_allclose(sparse.toarray(), (low @ low).toarray())
    finally:
        splyce.set_memory_budget(None)
    with pytest.raises(ValueError, match="positive number of bytes"):
        splyce.set_memory_budget(-1)


def test_nested_jitted_functions_inline():
    inner = splyce.jit(lambda a, b: a * b)
    outer = splyce.jit(lambda a, b: inner(a, b).sum())
    a, b = (sps.random_array((40, 40), density=0.2, format="csr", rng=s) for s in (23, 24))
    assert outer(a, b) == pytest.approx(a.multiply(b).sum(), rel=1e-12)
    assert len(_plan(outer, a, b).steps) == 1


def test_sparse_results_of_reductions_run_with_the_reduction_innermost():
    a = sps.random_array((30, 40), density=0.2, format="csr", rng=25)
    rows = splyce.jit(lambda x: splyce.einsum("ij->i", x, out_format=splyce.SPARSE_VECTOR))(a)
    np.testing.assert_allclose(rows.to_numpy(), a.sum(axis=1), rtol=1e-14)
    b = sps.random_array((40, 20), density=0.2, format="csr", rng=26)
    prod = splyce.jit(lambda x, y: splyce.matmul(x, y, out_format="sparse"))(a, b)
    np.testing.assert_allclose(prod.toarray(), (a @ b).toarray(), rtol=1e-14)


@pytest.mark.parametrize("fun, fast_lane", [(lambda l: ((l @ l) * l).sum(), True), (lambda l: (l @ l.T) * l, False)],
                         ids=["triangles", "masked"])
def test_fused_plans_vectorized_are_bit_identical_to_the_plain_sparsifier(fun, fast_lane):
    low = _tril_graph(300, 8, 30)
    low.data = np.random.default_rng(31).uniform(-1, 1, low.nnz)
    low.data[::7] = np.inf
    low.data[::11] = -0.0
    plain, fast = splyce.jit(fun, vectorize=False)(low), splyce.jit(fun)(low)
    plain = plain.toarray() if sps.issparse(plain) else np.asarray(plain)
    fast = fast.toarray() if sps.issparse(fast) else np.asarray(fast)
    same_bits = plain.view(np.uint64) == fast.view(np.uint64)
    assert np.all(same_bits | (np.isnan(plain) & np.isnan(fast)))   # NaN payloads are unspecified
    # the fused triangle count co-iterates two rows (the Splyce fast lane); the masked product is planned
    # mask-driven without an intersection
    assert any(d.vectorized for d in splyce.jit(fun).lower(low).decisions) == fast_lane


def test_memory_budget_from_the_environment(monkeypatch):
    from splyce.planner.memory import budget_bytes, physical_memory

    monkeypatch.setenv("SPLYCE_MEMORY_BUDGET", "123456789")
    assert budget_bytes() == 123456789
    monkeypatch.setenv("SPLYCE_MEMORY_BUDGET", "0.25")
    assert budget_bytes() == int(0.25 * physical_memory())
    for bad, message in (("lots", "must be a number of bytes or a fraction of physical memory, got 'lots'"),
                         ("-3", "must be positive, got '-3'")):
        monkeypatch.setenv("SPLYCE_MEMORY_BUDGET", bad)
        with pytest.raises(ValueError, match=message):
            budget_bytes()


def test_host_products_of_two_operands_go_through_tensordot_in_row_major_order():
    """A dense product of inputs computed before the kernel (``X @ W`` of a GCN layer) comes out of
    ``np.tensordot`` already row-major (``einsum(optimize=True)`` gave it column-major, then copied), with
    NumPy's values; forms whose result lists indices in another order stay with ``einsum``."""
    from splyce.planner.before_kernel import tensordot_axes

    assert tensordot_axes("ik,kj->ij") == ([1], [0]) and tensordot_axes("k,k->") == ([0], [0])
    assert tensordot_axes("ki,kj->ij") == ([0], [0]) and tensordot_axes("ijk,kj->i") == ([1, 2], [1, 0])
    for other in ("ik,kj->ji", "ij,ij->i", "ik,kj,jl->il", "ii,i->", "i,j->ij"):
        assert tensordot_axes(other) is None
    rng = np.random.default_rng(30)
    a = sps.random_array((300, 300), density=0.02, format="csr", rng=31)
    x, w = rng.random((300, 16)), rng.random((16, 8)) - 0.5

    def layer(m):
        return np.maximum(m @ (x @ w), 0)

    f = splyce.jit(layer)
    plain = splyce.jit(layer, library=False, vectorize=False)
    assert np.array_equal(f(a), plain(a))
    np.testing.assert_allclose(f(a), layer(a), rtol=1e-13)
    kernel, values = f.kernel_for(a)
    host = [v for v, s in zip(kernel.plan.prepare(values), kernel.plan.sources) if s.host is not None]
    assert len(host) == 1 and host[0].flags.c_contiguous and np.array_equal(host[0], np.tensordot(x, w, 1))
    np.testing.assert_allclose(host[0], x @ w, rtol=1e-14)


def test_a_scalar_factor_of_dense_values_fuses_into_the_update_that_reads_it():
    """CG's ``x + alpha * p`` with ``alpha`` computed in the kernel: the scalar product is an elementwise
    factor (read at no axis) and fuses into the update, so no temporary vector is written; the values are
    NumPy's, bit for bit the plain sparsifier's, signed zeros among them. A scalar times a sparse operand
    stays a contraction."""
    a = sps.random_array((200, 200), density=0.05, format="csr", rng=32)
    rng = np.random.default_rng(33)
    x, p = rng.random(200), rng.random(200) - 0.5
    x[:3], p[:3] = (-0.0, 0.0, -0.0), (-0.0, -0.0, 0.0)

    def step(a, x, p):
        ap = a @ p
        alpha = (x @ x) / (p @ ap)
        return x + alpha * p, x - alpha * ap

    f = splyce.jit(step)
    plain = splyce.jit(step, vectorize=False, library=False)
    got, want = f(a, x, p), plain(a, x, p)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    ap = a @ p
    alpha = (x @ x) / (p @ ap)
    for g, w in zip(got, (x + alpha * p, x - alpha * ap)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    plan = f.lower(a, x, p).as_text("plan")
    assert "contract[,a->a" not in plan and "reads a,,a" in plan
    g = splyce.jit(lambda a, x: (x @ x) * a)
    assert "contract[,ab->ab" in g.lower(a, x).as_text("plan")
    np.testing.assert_allclose(g(a, x).toarray(), ((x @ x) * a).toarray(), rtol=1e-13)
