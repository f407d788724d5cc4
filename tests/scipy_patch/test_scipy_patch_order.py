"""splyce.patch_scipy() returns scipy's buffers: a differential corpus of scipy chains run with the switch off
and on, compared on indptr / indices / data byte for byte (stored order included), index dtypes, classes and
the format flags scipy reports; and a chain summed in stored order afterwards (scanpy's ``S.sum(axis=1)``)
bit-identical. Canonical and non-canonical operands (duplicates, unsorted columns), both families."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


@pytest.fixture(autouse=True)
def _switch_off():
    splyce.unpatch_scipy()
    splyce.scipy_patch_stats(reset=True)
    yield
    splyce.unpatch_scipy()


FAMILIES = {"array": (sps.csr_array, sps.csc_array), "matrix": (sps.csr_matrix, sps.csc_matrix)}


def _matrix(shape, fmt, family, dtype, seed, density=0.2, layout="canonical"):
    """A random CSR / CSC of ``family``; ``layout``: "canonical", "unsorted" (each major slice's entries
    shuffled) or "duplicates" (some entries split in two, the halves apart in the slice, unsorted)."""
    rng = np.random.default_rng(seed)
    m = sps.random_array(shape, density=density, format="coo", rng=rng)
    values = (m.data * 8 - 4).round(2)
    if np.dtype(dtype).kind == "i":
        values = np.where(values == 0, 1, np.round(values * 3))
    row, col = m.coords
    if layout == "duplicates":
        split = rng.random(len(values)) < 0.3
        half = (values[split] / 2).round(2) if np.dtype(dtype).kind == "f" else np.ones(split.sum())
        values = np.concatenate([values, half])
        values[: len(split)][split] -= half
        row, col = np.concatenate([row, row[split]]), np.concatenate([col, col[split]])
    major, minor = (row, col) if fmt == "csr" else (col, row)
    order = np.lexsort((col if fmt == "csr" else row, major))
    if layout != "canonical":
        order = np.lexsort((rng.random(len(values)), major))
    n_major = shape[0] if fmt == "csr" else shape[1]
    indptr = np.zeros(n_major + 1, dtype=np.int32)
    np.add.at(indptr, major + 1, 1)
    indptr = np.cumsum(indptr).astype(np.int32)
    cls = FAMILIES[family][0 if fmt == "csr" else 1]
    out = cls((values[order].astype(dtype), minor[order].astype(np.int32), indptr), shape=shape)
    if layout != "canonical":
        assert not out.has_canonical_format
        del out._has_canonical_format        # not cached on the operand: scipy's workers check it themselves
        out.__dict__.pop("_has_sorted_indices", None)
    return out


def _snapshot(x):
    if sps.issparse(x):
        return type(x), x.shape, x.dtype, x.indptr.dtype, x.indptr.tobytes(), x.indices.tobytes(), x.data.tobytes()
    x = np.asarray(x) if not isinstance(x, np.matrix) else x
    return type(x), x.shape, x.dtype, np.ascontiguousarray(x).tobytes()


def _assert_buffers(ours, ref):
    assert type(ours) is type(ref), (type(ours), type(ref))
    if sps.issparse(ref):
        assert ours.format == ref.format and ours.shape == ref.shape and ours.dtype == ref.dtype
        assert ours.indptr.dtype == ref.indptr.dtype and ours.indices.dtype == ref.indices.dtype
        assert ours.indptr.tobytes() == ref.indptr.tobytes()
        assert ours.indices.tobytes() == ref.indices.tobytes(), "stored order differs"
        assert ours.data.tobytes() == ref.data.tobytes()
        assert set(vars(ours)) == set(vars(ref))                # the same flags cached (none)
        assert ours.has_sorted_indices == ref.has_sorted_indices
        assert ours.has_canonical_format == ref.has_canonical_format
    else:
        assert ours.shape == ref.shape and ours.dtype == ref.dtype
        assert np.ascontiguousarray(ours).tobytes() == np.ascontiguousarray(ref).tobytes()


def _differential(chain, operands, route_small=True):
    """chain(*operands) off and on: the same buffers, operands untouched; the patched run's stats."""
    before = [_snapshot(x) for x in operands]
    ref = chain(*operands)
    splyce.scipy_patch_stats(reset=True)
    with splyce.patched_scipy(route_small=route_small):
        ours = chain(*operands)
    stats = splyce.scipy_patch_stats(reset=True)
    _assert_buffers(ours, ref)
    assert [_snapshot(x) for x in operands] == before
    return stats


def _served(stats, op):
    return stats.get(op, {}).get("served", 0)


# chain name -> (function of (A, B, X), op counted in the stats, shapes A / B, formats A / B)
CHAINS = {
    "A @ B": (lambda a, b, x: a @ b, "matmul_sparse", "csr", "csr"),
    "A @ A.T": (lambda a, b, x: a @ a.T, "matmul_sparse", "csr", "csr"),
    "A.T @ A": (lambda a, b, x: a.T @ a, "matmul_sparse", "csr", "csr"),
    "csc @ csc": (lambda a, b, x: a @ b, "matmul_sparse", "csc", "csc"),
    "csr @ csc": (lambda a, b, x: a @ b, "matmul_sparse", "csr", "csc"),
    "csc @ csr": (lambda a, b, x: a @ b, "matmul_sparse", "csc", "csr"),
    "(A @ B).sum(axis=1)": (lambda a, b, x: (a @ b).sum(axis=1), "matmul_sparse", "csr", "csr"),
    "(A @ B).sum(axis=0)": (lambda a, b, x: (a @ b).sum(axis=0), "matmul_sparse", "csr", "csr"),
    "(A @ A.T).sum()": (lambda a, b, x: (a @ a.T).sum(), "matmul_sparse", "csr", "csr"),
    "(A @ B).T": (lambda a, b, x: (a @ b).T, "matmul_sparse", "csr", "csr"),
    "(A @ B) @ X": (lambda a, b, x: (a @ b) @ x[: SHAPE_A[0]], "matmul_sparse", "csr", "csr"),
    "A + B": (lambda a, b, x: a + b.T, "add", "csr", "csr"),
    "A - B": (lambda a, b, x: a - b.T, "subtract", "csr", "csr"),
    "csc - csr": (lambda a, b, x: a - b.T, "subtract", "csc", "csr"),
    "A.multiply(B)": (lambda a, b, x: a.multiply(b.T), "multiply", "csr", "csr"),
    "csc.multiply(csc)": (lambda a, b, x: a.multiply(b.T), "multiply", "csc", "csc"),
    "(A + B).sum(axis=1)": (lambda a, b, x: (a + b.T).sum(axis=1), "add", "csr", "csr"),
    "A @ X": (lambda a, b, x: a @ x, "matmul_dense", "csr", "csr"),
    "csc @ X": (lambda a, b, x: a @ x, "matmul_dense", "csc", "csr"),
}

SHAPE_A, SHAPE_B = (40, 50), (50, 40)


def _operands(family, dtype, dtype_b, layout, fa, fb, seed=0):
    a = _matrix(SHAPE_A, fa, family, dtype, seed, layout=layout)
    b = _matrix(SHAPE_B, fb, family, dtype_b, seed + 1, layout=layout)
    x = np.random.default_rng(seed + 2).random((SHAPE_A[1], 6)).round(3).astype(dtype_b)
    return a, b, x


# CSC @ dense stays scipy's (its csc_matvecs beat the drop-in's CSR conversion plus SpMM: docs/scipy_patch.md)
PASSED_THROUGH = {"csc @ X": "format"}


def _check_route(stats, chain, op):
    if chain in PASSED_THROUGH:
        assert stats[op] == {"served": 0, "fallback": {PASSED_THROUGH[chain]: 1}}, stats
    else:
        assert _served(stats, op) >= 1, stats


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("chain", CHAINS)
def test_chains_same_buffers_canonical(family, dtype, chain):
    fn, op, fa, fb = CHAINS[chain]
    stats = _differential(fn, _operands(family, dtype, dtype, "canonical", fa, fb))
    _check_route(stats, chain, op)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["unsorted", "duplicates"])
@pytest.mark.parametrize("chain", CHAINS)
def test_chains_same_buffers_non_canonical(family, layout, chain):
    """Products read the operands as they are (scipy's csr_matmat sums duplicates and unsorted rows in stored
    order, and so does the served kernel); merges of non-canonical operands stay scipy's (its general path)."""
    fn, op, fa, fb = CHAINS[chain]
    stats = _differential(fn, _operands(family, np.float64, np.float64, layout, fa, fb))
    if op.startswith("matmul"):
        _check_route(stats, chain, op)
    else:
        assert stats[op] == {"served": 0, "fallback": {"non-canonical": 1}}, stats


MIXED = [(np.float64, np.float32), (np.float32, np.float64), (np.int64, np.float64), (np.int32, np.int64),
         (np.float32, np.int32)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtypes", MIXED, ids=lambda d: "-".join(np.dtype(t).name for t in d))
@pytest.mark.parametrize("chain", ["A @ B", "A + B", "A - B", "csc - csr", "A.multiply(B)", "A @ X", "csc @ X"])
def test_chains_same_buffers_mixed_dtypes(family, dtypes, chain):
    fn, op, fa, fb = CHAINS[chain]
    stats = _differential(fn, _operands(family, *dtypes, "canonical", fa, fb))
    _check_route(stats, chain, op)


@pytest.mark.parametrize("family", FAMILIES)
def test_scanpy_chain_product_then_row_sums_bit_identical(family):
    """A cells x genes matrix, its cell-cell product at served size (the thresholds in force), then row sums:
    summed in stored order, so the patched run reproduces the unpatched one only if the order is scipy's."""
    x = _matrix((1000, 2000), "csr", family, np.float64, 11, density=0.01)
    x.data = np.log1p(np.abs(x.data))

    def chain(x):
        s = x @ x.T
        return np.asarray(s.sum(axis=1)).ravel(), s

    ref_sums, ref = chain(x)
    with splyce.patched_scipy():
        ours_sums, ours = chain(x)
    assert splyce.scipy_patch_stats()["matmul_sparse"]["served"] == 1
    assert ours_sums.tobytes() == ref_sums.tobytes()
    _assert_buffers(ours, ref)
    assert not ref.has_sorted_indices            # scipy's product is not sorted: the test can tell the order


def _scipy_buffers(a, b):
    ref = a @ b
    return ref.indptr.tobytes(), ref.indices.tobytes(), ref.data.tobytes()


@pytest.mark.parametrize("accumulator", ["sparse", "dense"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_native_spgemm_scipy_order_is_csr_matmats(accumulator, dtype, threads, monkeypatch):
    """native spgemm(scipy_order=True): both accumulators, split across threads, int64 indices, sums cancelling
    to zero (dropped), NaN kept, non-canonical operands: scipy's csr_matmat's buffers byte for byte."""
    from splyce.native import ir_text, spgemm

    monkeypatch.setattr(spgemm, "DENSE_ROW_ENTRIES", 1 if accumulator == "dense" else 10**9)
    monkeypatch.setattr(spgemm, "FLAGS_COMPRESSION", 0.0 if accumulator == "dense" else float("inf"))
    monkeypatch.setattr(spgemm, "SAMPLE_MIN_FLOPS", 1)
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 64)          # small products split across threads too
    for seed, layout in enumerate(["canonical", "unsorted", "duplicates"]):
        a = _matrix((300, 200), "csr", "array", dtype, seed, density=0.05, layout=layout)
        b = _matrix((200, 250), "csr", "array", dtype, seed + 7, density=0.05, layout=layout)
        b.data[::5] = -b.data[::5]                          # cancellations
        if np.dtype(dtype).kind == "f":
            a.data[3] = np.nan
        for index in (np.int32, np.int64):
            pa = (a.data, a.indices.astype(index), a.indptr.astype(index))
            pb = (b.data, b.indices.astype(index), b.indptr.astype(index))
            p = spgemm.spgemm(pa, pb, b.shape[1], dtype, threads, sort=False, scipy_order=True)
            assert p.kernel == accumulator
            ours = (p.indptr.astype(np.int32).tobytes(), p.indices.astype(np.int32).tobytes(), p.data.tobytes())
            assert ours == _scipy_buffers(a, b), (layout, index)


def test_native_spgemm_scipy_order_takes_the_dense_accumulator_where_any_order_takes_flags(monkeypatch):
    """Products of many terms an entry: the rows-in-any-order rule's flags kernel (sorted rows), scipy's order the
    dense accumulator (branch-free too) even beyond DENSE_COLUMNS; about one term an entry: sparse."""
    from splyce.native import spgemm

    monkeypatch.setattr(spgemm, "DENSE_COLUMNS", 16)
    monkeypatch.setattr(spgemm, "SAMPLE_MIN_FLOPS", 1)
    rng = np.random.default_rng(5)
    dense_ish = sps.random_array((400, 400), density=0.2, format="csr", rng=rng)      # ~80 terms an entry
    diagonal = sps.csr_array(sps.diags_array(rng.random(400) + 1).tocsr())               # one term an entry
    for a, kernels in ((dense_ish, ("flags", "dense")), (diagonal, ("sparse", "sparse"))):
        parts = (a.data, a.indices, a.indptr)
        assert spgemm.spgemm(parts, parts, 400, np.float64, sort=None).kernel == kernels[0]
        p = spgemm.spgemm(parts, parts, 400, np.float64, sort=False, scipy_order=True)
        assert p.kernel == kernels[1]
        ref = a @ a
        assert (p.indices.tobytes(), p.data.tobytes()) == (ref.indices.tobytes(), ref.data.tobytes())


def test_native_spgemm_scipy_order_needs_sort_false():
    from splyce.native import spgemm

    a = sps.csr_array(np.eye(3))
    parts = (a.data, a.indices, a.indptr)
    with pytest.raises(ValueError, match="scipy_order=True is one order and needs sort=False"):
        spgemm.spgemm(parts, parts, 3, np.float64, sort=None, scipy_order=True)


def test_matmul_in_scipy_order_refuses_malformed_operands():
    from splyce.dropin.products import matmul_in_scipy_order

    good = sps.csr_array(np.eye(3))
    bad_index = sps.csr_array((np.ones(2), np.array([0, 5], dtype=np.int32), np.array([0, 1, 2, 2], dtype=np.int32)),
                              shape=(3, 3))
    with pytest.raises(ValueError, match="b has a column index outside"):
        matmul_in_scipy_order(good, bad_index)
    bad_ptr = sps.csr_array(np.eye(3))
    bad_ptr.indptr = np.array([0, 2, 1, 3], dtype=np.int32)
    with pytest.raises(ValueError, match="a's indptr must start at 0, never decrease"):
        matmul_in_scipy_order(bad_ptr, good)
    with pytest.raises(ValueError, match="one value dtype expected"):
        matmul_in_scipy_order(good, good.astype(np.float32))
    with pytest.raises(ValueError, match="not aligned"):
        matmul_in_scipy_order(good, sps.csr_array(np.ones((4, 2))))


def test_strided_buffers_go_to_scipy():
    """Index or value arrays that are strided views (scipy accepts them) are left to scipy ("layout"), as the
    served kernels read buffers as they are."""
    a = _matrix((100, 100), "csr", "array", np.float64, 3, density=0.5)
    wide = np.empty(2 * a.nnz, dtype=a.indices.dtype)
    wide[::2] = a.indices
    b = sps.csr_array((a.data, a.indices, a.indptr), shape=a.shape)
    b.indices = wide[::2]
    stats = _differential(lambda b: b @ b, [b])
    assert stats["matmul_sparse"] == {"served": 0, "fallback": {"layout": 1}}, stats


_TYPES = [np.float64, np.float32, np.int64, np.int32]
_CLASSES = [sps.csr_array, sps.csc_array, sps.csr_matrix, sps.csc_matrix]


def _random_operands(seed):
    """Three small operands (m x k, k x n, m x k) of one random class, value dtypes (one or two), index dtype,
    shapes from 0 to 11, integer values in [-3, 3] (cancellations), half of them non-canonical. An spmatrix
    keeps int32 indices: with int64 ones scipy's own result index dtype depends on np.empty's leftovers (its
    constructor checks the contents of the unpruned ``indices``), so two unpatched runs can differ."""
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(0, 12, 3))
    dt = _TYPES[rng.integers(4)]
    dt2 = dt if rng.random() < 0.6 else _TYPES[rng.integers(4)]
    cls = _CLASSES[rng.integers(4)]
    idx = np.int32 if "matrix" in cls.__name__ else (np.int32, np.int64)[rng.integers(2)]

    def make(shape, dtype):
        nnz = int(rng.integers(0, shape[0] * shape[1] + 3)) if shape[0] * shape[1] else 0
        r = rng.integers(0, max(shape[0], 1), nnz).astype(idx)
        c = rng.integers(0, max(shape[1], 1), nnz).astype(idx)
        x = cls(sps.coo_array((rng.integers(-3, 4, nnz).astype(dtype), (r, c)), shape=shape))
        if rng.random() < 0.5 and x.nnz:        # entries split in two, each major slice shuffled
            major = np.repeat(np.arange(len(x.indptr) - 1), np.diff(x.indptr))
            split = rng.random(x.nnz) < 0.3
            data = np.concatenate([x.data - split.astype(x.dtype), np.ones(split.sum(), x.dtype)])
            minor = np.concatenate([x.indices, x.indices[split]])
            major = np.concatenate([major, major[split]])
            order = np.lexsort((rng.random(len(data)), major))
            indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=len(x.indptr) - 1))])
            x = cls((data[order], minor[order], indptr.astype(minor.dtype)), shape=shape)
        return x
    return make((m, k), dt), make((k, n), dt2), make((m, k), dt2)


RANDOM_OPS = {"a @ b": lambda a, b, c: a @ b, "a + c": lambda a, b, c: a + c, "a - c": lambda a, b, c: a - c,
              "a.multiply(c)": lambda a, b, c: a.multiply(c), "a.T @ c": lambda a, b, c: a.T @ c}


def _outcome(x):
    if isinstance(x, Exception):
        return type(x), str(x)
    if sps.issparse(x):
        return (type(x), x.shape, x.dtype, x.indptr.dtype, x.indices.dtype, x.indptr.tobytes(), x.indices.tobytes(),
                x.data.tobytes(), tuple(sorted(vars(x))))
    return type(x), np.asarray(x).dtype, np.asarray(x).tobytes()


@pytest.mark.parametrize("op", RANDOM_OPS)
def test_random_operands_same_buffers(op):
    """300 seeded random cases per op (empty shapes, cancellations, duplicates, unsorted slices, both families,
    mixed dtypes, int64 indices), every eligible call served however small: the patched outcome (buffers,
    dtypes, class, cached flags, or the error) is scipy's."""
    served = 0
    for seed in range(300):
        def run():
            try:
                return _outcome(RANDOM_OPS[op](*_random_operands(seed)))
            except Exception as e:      # noqa: BLE001 - scipy's own error, compared
                return _outcome(e)
        ref = run()
        splyce.scipy_patch_stats(reset=True)
        with splyce.patched_scipy(route_small=True):
            ours = run()
        served += sum(v["served"] for v in splyce.scipy_patch_stats(reset=True).values())
        assert ours == ref, seed
    assert served >= 100, served
