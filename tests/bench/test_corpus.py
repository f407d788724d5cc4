"""The bench corpus: deterministic, canonical scipy CSR, and each generator has the structure its class claims."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

from splyce.bench import corpus

pytestmark = pytest.mark.slow


def _assert_canonical(A, symmetric):
    assert isinstance(A, sps.csr_array)
    assert A.dtype == np.float64 and A.indices.dtype == np.int32 and A.indptr.dtype == np.int32
    assert A.has_sorted_indices and A.has_canonical_format
    assert np.all(A.data != 0)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    keys = rows.astype(np.int64) * A.shape[1] + A.indices
    assert np.all(np.diff(keys) > 0)                      # sorted and unique, checked independently of scipy
    if symmetric:
        assert (A != A.T).nnz == 0


@pytest.mark.parametrize("entry", corpus.select(quick=True), ids=lambda e: e.name)
def test_quick_entries_are_canonical(entry):
    A = corpus.canonical(entry.build_fn(), symmetric=entry.symmetric)
    _assert_canonical(A, entry.symmetric)
    assert A.shape[0] == A.shape[1] and 10_000 <= A.nnz <= 2_000_000
    assert entry.kind in corpus.CLASSES and entry.why


def test_full_corpus_lists_every_class_and_stays_in_bounds():
    entries = corpus.select(quick=False)
    assert {e.kind for e in entries} >= set(corpus.CLASSES) - {"shipped"}
    assert len({e.name for e in entries}) == len(entries)
    assert {e.name for e in corpus.select(quick=True)} < {e.name for e in entries}


def test_deterministic():
    for make in (lambda: corpus.rmat(9, 8, seed=1), lambda: corpus.delaunay_mesh(500, 2, seed=1),
                 lambda: corpus.preferential_attachment(500, 3, seed=1), lambda: corpus.road_grid(30, seed=1)):
        A, B = corpus.canonical(make()), corpus.canonical(make())
        assert (A != B).nnz == 0


def _degrees(A):
    return np.diff(A.indptr)


def test_class_structure():
    mesh2 = corpus.canonical(corpus.delaunay_mesh(2000, 2, seed=0), symmetric=True)
    assert np.all(mesh2.diagonal() > 0) and 6.0 < mesh2.nnz / 2000 < 8.0      # ~6 neighbours + diagonal
    assert np.all(np.linalg.eigvalsh(mesh2[:200, :200].toarray()) > 0)        # stiffness-like: SPD
    mesh3 = corpus.canonical(corpus.delaunay_mesh(2000, 3, seed=0), symmetric=True)
    assert 12.0 < mesh3.nnz / 2000 < 18.0
    road = corpus.canonical(corpus.road_grid(80, seed=0), symmetric=True)
    assert 2.2 < road.nnz / road.shape[0] < 2.8 and _degrees(road).max() <= 8
    rmat = corpus.canonical(corpus.rmat(12, 8, seed=0), symmetric=True)
    deg = _degrees(rmat)
    assert deg.max() > 20 * deg.mean()                                         # hubs: a power-law tail
    assert rmat.diagonal().sum() == 0
    ba = corpus.canonical(corpus.preferential_attachment(5000, 3, seed=0), symmetric=True)
    deg = _degrees(ba)
    assert deg.max() > 10 * deg.mean() and np.median(deg) <= 4
    band = corpus.canonical(corpus.banded(1000, 3, seed=0))
    rows = np.repeat(np.arange(1000), _degrees(band))
    assert np.abs(band.indices - rows).max() == 3 and band.nnz == 7 * 1000 - 2 * (1 + 2 + 3)
    blocks = corpus.canonical(corpus.block_diagonal(10, 16, 0.3, seed=0))
    rows = np.repeat(np.arange(160), _degrees(blocks))
    assert np.all(rows // 16 == blocks.indices // 16) and np.all(blocks.diagonal() != 0)


def test_canonical_rejects_an_asymmetric_matrix_of_a_symmetric_class():
    with pytest.raises(ValueError, match="not symmetric"):
        corpus.canonical(sps.csr_array(np.array([[1.0, 2.0], [0.0, 1.0]])), symmetric=True)


def test_npz_cache_round_trip(tmp_path):
    entry = corpus.select(quick=True)[0]
    corpus._MEMORY.clear()          # an earlier test may have built this entry in this process (no file then)
    built = corpus.build(entry, tmp_path)
    files = list(tmp_path.glob(f"{entry.name}-v{corpus.GENERATOR_VERSION}.npz"))
    assert len(files) == 1
    corpus._MEMORY.clear()
    loaded = corpus.build(entry, tmp_path)
    assert loaded is not built and (loaded != built).nnz == 0
    _assert_canonical(loaded, entry.symmetric)
