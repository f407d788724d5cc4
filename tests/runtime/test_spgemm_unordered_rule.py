"""The per-call kernel of a product whose rows may come in any order (``out_format="sparse"`` in the jit:
native/spgemm.py, ``unordered_kernel``): the sorted flags kernel where a sample of the rows says each entry gets
many terms and b's columns are not runs, else the unsorted kernel. Matrices built to fall on each side of the
rule (no timing): the choice, the sample's estimate, and results equal to scipy's and bit for bit the MLIR
kernel's, with scipy's flags saying which order came."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.native import spgemm, spgemm_sorted
from splyce.runtime.library import LibraryKernel

from test_one_engine import _flags_true, _same_entries


def _random(m, n, per_row, seed, index=np.int32):
    """``per_row`` distinct random columns a row (no runs: about per_row / n of neighbours adjacent)."""
    rng = np.random.default_rng(seed)
    cols = np.concatenate([np.sort(rng.choice(n, per_row, replace=False)) for _ in range(m)])
    vals = rng.standard_normal(len(cols))
    vals[::17] = 0.0
    vals[5::23] = -0.0
    return sps.csr_array((vals, cols.astype(index), np.arange(0, m * per_row + 1, per_row).astype(index)),
                         shape=(m, n))


def _banded(n, b, seed):
    rng = np.random.default_rng(seed)
    return sps.csr_array(sps.diags([rng.standard_normal(n - abs(d)) for d in range(-b, b + 1)],
                                   list(range(-b, b + 1)), format="csr"))


def _choice(a, b):
    prefix = spgemm.row_flops_prefix(a.indptr, a.indices, b.indptr)
    return (spgemm.unordered_kernel(a.indptr, a.indices, b.indptr, b.indices, b.shape[1], prefix),
            spgemm.compression(a.indptr, a.indices, b.indptr, b.indices, b.shape[1], prefix), int(prefix[-1]))


def _true_compression(a, b):
    ones = lambda x: sps.csr_array((np.ones(x.nnz), x.indices, x.indptr), shape=x.shape)
    return spgemm.row_flops_prefix(a.indptr, a.indices, b.indptr)[-1] / (ones(a) @ ones(b)).nnz


# (a, b, the rule's kernel): many terms an entry, no runs -> flags; about one term an entry (a wide random
# product), b's columns in runs (banded, ~10 terms an entry), rows of few terms on average -> the unsorted one
CASES = {
    "many-terms": (lambda: (_random(400, 400, 40, 1), _random(400, 400, 40, 2)), "flags"),
    "one-term": (lambda: (_random(6000, 6000, 6, 3), _random(6000, 6000, 6, 4)), False),
    "runs": (lambda: (_banded(6000, 10, 5), _banded(6000, 10, 6)), False),
    "short-rows": (lambda: (_random(40_000, 40_000, 3, 7), _random(40_000, 40_000, 3, 8)), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rule_falls_on_its_side(case):
    make, want = CASES[case]
    a, b = make()
    kernel, estimate, flops = _choice(a, b)
    assert kernel == want and flops >= spgemm.SAMPLE_MIN_FLOPS
    if case in ("many-terms", "one-term"):      # the sample's estimate of flops / nnz(C) (the rows' mean)
        assert estimate == pytest.approx(_true_compression(a, b), rel=0.15)
        assert (estimate >= spgemm.FLAGS_COMPRESSION) == (kernel == "flags")
    elif case == "runs":
        assert estimate is None and spgemm_sorted.kind_for(b.indices) == "map" and _true_compression(a, b) > 5
    else:
        assert estimate is None and flops <= spgemm_sorted.SHORT_ROW_FLOPS * a.shape[0]


def test_small_products_and_hub_rows_are_not_sampled():
    """Under SAMPLE_MIN_FLOPS multiply-adds: no look. A product whose work sits in a few rows (each over
    flops / SAMPLE_SHARE): too few rows to sample, the unsorted kernel."""
    a, b = _random(60, 60, 20, 9), _random(60, 60, 20, 10)
    assert _choice(a, b)[:2] == (False, None) and _choice(a, b)[2] < spgemm.SAMPLE_MIN_FLOPS
    hubs = sps.random_array((400, 400), density=0.01, format="csr", rng=11)
    hubs = sps.csr_array(sps.vstack([sps.csr_array(np.ones((20, 400))), hubs[20:]]))
    kernel, estimate, flops = _choice(hubs, _random(400, 400, 40, 12))
    assert (kernel, estimate) == (False, None) and flops >= spgemm.SAMPLE_MIN_FLOPS


@pytest.mark.parametrize("case", ["many-terms", "one-term"])
def test_results_as_scipy_and_the_mlir_kernel(case):
    """The jitted product on either kernel: scipy's values and, sorted, its structure (every reached position
    kept: explicit zeros among the values); bit for bit the MLIR kernel's; scipy's flags say whether the rows
    came sorted; one and two threads the same arrays."""
    make, want = CASES[case]
    x, y = make()
    a, b = splyce.asarray(x), splyce.asarray(y)
    f = splyce.jit(lambda a, b: a @ b, out_format="sparse")
    got = f(a, b)
    assert isinstance(f.kernel_for(a, b)[0], LibraryKernel)
    _flags_true(got)
    assert got.has_sorted_indices == (want == "flags")
    assert abs(got - x @ y).max() <= 1e-12 * abs(x @ y).max()
    _same_entries(got, splyce.jit(lambda a, b: a @ b, out_format="sparse", library=False)(a, b))
    two = splyce.jit(lambda a, b: a @ b, out_format="sparse", threads=2)(a, b)
    for x, y in ((got.indptr, two.indptr), (got.indices, two.indices), (got.data.view(np.uint64),
                                                                          two.data.view(np.uint64))):
        assert np.array_equal(x, y)


def test_sorted_needs_the_sparsifiers_zeros_and_either_order_takes_the_rule():
    """sort=True is the sparsifier's result only; sort=None takes the rule under either zero rule (the jit's
    and the drop-in's: tests/dropin/test_spgemm_dropin_flags.py); sort=False keeps the unsorted kernels."""
    a = _random(400, 400, 40, 1)
    parts = (a.data, a.indices, a.indptr)
    with pytest.raises(ValueError, match="keep_zeros"):
        spgemm.spgemm(parts, parts, 400, np.float64, sort=True)
    assert spgemm.spgemm(parts, parts, 400, np.float64, keep_zeros=True, sort=None).kernel == "flags"
    assert spgemm.spgemm(parts, parts, 400, np.float64, sort=None).kernel == "flags"
    assert spgemm.spgemm(parts, parts, 400, np.float64).kernel == "dense"      # scipy's rule: unsorted
    assert splyce.matmul(a, a).has_sorted_indices


def test_the_plan_says_the_rule():
    a = splyce.asarray(_random(50, 50, 5, 13))
    text = splyce.jit(lambda a: a @ a, out_format="sparse").lower(a).as_text("plan")
    assert "per call, by a sample of the product's rows" in text and "sorted flags kernel" in text
    assert "by a sample" not in splyce.jit(lambda a: a @ a, out_format=splyce.CSR).lower(a).as_text("plan")
