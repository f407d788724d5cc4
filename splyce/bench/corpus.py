"""A realistic, deterministic corpus of sparse matrices for ``python -m splyce.bench real``.

Every matrix is generated from a fixed seed (nothing is downloaded) or read from data that an installed PyPI
package ships. Each :class:`Entry` names its class and why it is in the corpus; ``build()`` returns a canonical
scipy ``csr_array``: float64 values without explicit zeros, int32 ``indices`` / ``indptr``, sorted unique column
indices, and symmetric where the class is (meshes and graphs). docs/corpus.md describes the classes.

Built matrices are kept in memory for the process and, when a folder is given, as ``.npz`` files there
(keyed by the entry's name and its generator version), so a second run does not triangulate again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

# Bump when a generator changes: cached .npz files from older generators are then ignored.
GENERATOR_VERSION = 1

CLASSES = {
    "fem-2d": "2-D finite-element stiffness pattern (Delaunay triangulation of random points)",
    "fem-3d": "3-D finite-element stiffness pattern (Delaunay tetrahedralisation of random points)",
    "power-law": "scale-free graph (R-MAT / Kronecker, preferential attachment)",
    "road": "road-like planar graph, average degree ~2.5",
    "banded": "banded matrix (finite differences, 1-D discretisations, reordered meshes)",
    "block-diagonal": "block-diagonal matrix (batched or decoupled subproblems)",
    "shipped": "real matrix shipped with a PyPI package",
}


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str                       # a key of CLASSES
    why: str
    build_fn: Callable[[], object]  # returns a scipy sparse matrix (any format); canonicalised by build()
    symmetric: bool
    quick: bool = False             # in the --quick subset

    def build(self, cache_dir: Path | None = None):
        return build(self, cache_dir)


# -- canonical form -----------------------------------------------------------------------------------------
def canonical(A, symmetric: bool = False):
    """``A`` as a scipy csr_array: float64, int32 indices, sorted, no duplicates, no explicit zeros."""
    import scipy.sparse as sps

    A = sps.csr_array(A, dtype=np.float64)
    A.sum_duplicates()
    A.eliminate_zeros()
    A.sort_indices()
    if max(A.nnz, *A.shape) >= 2**31:
        raise ValueError(f"corpus: {A.shape} with {A.nnz} nonzeros does not fit int32 indices")
    A.indices = A.indices.astype(np.int32, copy=False)
    A.indptr = A.indptr.astype(np.int32, copy=False)
    if symmetric and (A.shape[0] != A.shape[1] or (abs(A - A.T)).nnz):
        raise ValueError("corpus: a matrix of a symmetric class is not symmetric")
    return A


def _weighted_graph(rows, cols, n: int, rng, diagonal: bool):
    """Symmetric matrix of the undirected edges (rows[i], cols[i]): each edge one weight in [0.5, 1), both
    triangles, self loops and duplicates dropped; with ``diagonal`` a stiffness-like matrix instead (off-diagonal
    -w, diagonal = sum of the row's weights + 1, so it is symmetric positive definite)."""
    import scipy.sparse as sps

    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    keep = rows != cols
    lo, hi = np.minimum(rows[keep], cols[keep]), np.maximum(rows[keep], cols[keep])
    key = np.unique(lo * n + hi)
    lo, hi = key // n, key % n
    w = rng.uniform(0.5, 1.0, key.size)
    if diagonal:
        w = -w
    A = sps.coo_array((np.concatenate([w, w]), (np.concatenate([lo, hi]), np.concatenate([hi, lo]))), shape=(n, n))
    if diagonal:
        degree = np.asarray(abs(A).sum(axis=1)).ravel()
        A = A + sps.diags_array(degree + 1.0)
    return A


def _morton_order(points: np.ndarray) -> np.ndarray:
    """Permutation sorting points along a Z-order curve: mesh generators number nodes with locality, random
    points have none (a random numbering would make every mesh look like a scattered graph)."""
    dims = points.shape[1]
    bits = 20 if dims == 2 else 16
    q = ((points - points.min(0)) / np.ptp(points, axis=0).clip(1e-300) * ((1 << bits) - 1)).astype(np.uint64)
    code = np.zeros(len(points), dtype=np.uint64)
    for b in range(bits):
        for d in range(dims):
            code |= ((q[:, d] >> np.uint64(b)) & np.uint64(1)) << np.uint64(b * dims + d)
    return np.argsort(code, kind="stable")


# -- generators ---------------------------------------------------------------------------------------------
def delaunay_mesh(n_points: int, dim: int, seed: int):
    """Stiffness-like pattern of a Delaunay mesh of ``n_points`` uniform random points in the unit square /
    cube: vertex adjacency (mesh edges) plus the diagonal, nodes numbered along a Z-order curve."""
    from itertools import combinations

    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    points = rng.random((n_points, dim))
    points = points[_morton_order(points)]
    simplices = Delaunay(points).simplices
    pairs = np.array(list(combinations(range(dim + 1), 2)))
    rows = simplices[:, pairs[:, 0]].ravel()
    cols = simplices[:, pairs[:, 1]].ravel()
    return _weighted_graph(rows, cols, n_points, rng, diagonal=True)


def rmat(scale: int, edge_factor: int, seed: int, a=0.57, b=0.19, c=0.19):
    """R-MAT / Kronecker graph with Graph500 parameters: 2**scale vertices, edge_factor * 2**scale edges drawn
    by recursive quadrant choice, vertex labels randomly permuted (as Graph500 does), made undirected."""
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    for level in range(scale):
        r = rng.random(m)
        down = r >= a + b                                  # quadrants c or d: row bit set
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b or d: column bit set
        rows |= down.astype(np.int64) << level
        cols |= right.astype(np.int64) << level
    perm = rng.permutation(n)
    return _weighted_graph(perm[rows], perm[cols], n, rng, diagonal=False)


def preferential_attachment(n: int, m: int, seed: int):
    """Barabasi-Albert graph: every new vertex attaches ``m`` edges to earlier vertices with probability
    proportional to their degree (Batagelj-Brandes: copy a uniformly chosen earlier edge endpoint), vectorised
    by pointer jumping over the copy chains."""
    rng = np.random.default_rng(seed)
    edges = n * m
    ends = np.empty(2 * edges, dtype=np.int64)   # ends[2e] = new vertex, ends[2e+1] = copy of ends[r]
    ends[0::2] = np.arange(edges) // m
    source = np.arange(2 * edges)
    e = np.arange(edges)
    source[1::2] = (rng.random(edges) * (2 * e + 1)).astype(np.int64)   # uniform in [0, 2e]
    while True:                                  # follow copies until each points at an even (known) slot
        odd = (source & 1) == 1
        if not odd.any():
            break
        source[odd] = source[source[odd]]
    ends = ends[source]
    return _weighted_graph(ends[0::2], ends[1::2], n, rng, diagonal=False)


def road_grid(side: int, seed: int, keep: float = 0.62):
    """Road-like planar graph: a side x side grid of junctions whose 4-neighbour streets are kept with
    probability ``keep`` (average degree ~2.5 as in road networks), plus a few diagonal streets; nodes in
    grid order (road data sets are numbered with locality)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(side * side).reshape(side, side)
    horizontal = np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()])
    vertical = np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()])
    diagonal = np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()])
    streets = np.concatenate([horizontal, vertical], axis=1)
    streets = streets[:, rng.random(streets.shape[1]) < keep]
    diagonal = diagonal[:, rng.random(diagonal.shape[1]) < 0.03]
    streets = np.concatenate([streets, diagonal], axis=1)
    return _weighted_graph(streets[0], streets[1], side * side, rng, diagonal=False)


def banded(n: int, half_bandwidth: int, seed: int):
    """All 2 * half_bandwidth + 1 diagonals full, values in +-[0.5, 1) (not symmetric)."""
    import scipy.sparse as sps

    rng = np.random.default_rng(seed)
    offsets = list(range(-half_bandwidth, half_bandwidth + 1))
    diags = [rng.uniform(0.5, 1.0, n - abs(k)) * rng.choice([-1.0, 1.0], n - abs(k)) for k in offsets]
    return sps.diags_array(diags, offsets=offsets, shape=(n, n))


def block_diagonal(blocks: int, size: int, density: float, seed: int):
    """``blocks`` random size x size blocks of the given density on the diagonal (not symmetric); every block
    keeps its diagonal so no row is empty."""
    import scipy.sparse as sps

    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(blocks):
        B = sps.random_array((size, size), density=density, rng=rng, format="coo",
                             data_sampler=lambda size: rng.uniform(0.5, 1.0, size))
        parts.append(B + sps.eye_array(size))
    return sps.block_diag(parts, format="csr")


# -- shipped matrices ----------------------------------------------------------------------------------------
def _propack_complex_real_part():
    """scipy's PROPACK test matrix A_complex (1280 x 1280), real part (scipy/sparse/linalg/tests)."""
    import scipy
    import scipy.sparse as sps

    path = os.path.join(os.path.dirname(scipy.__file__), "sparse", "linalg", "tests", "propack_test_data.npz")
    with np.load(path, allow_pickle=True) as data:
        return sps.csr_array(data["A_complex"].item().real)


def _pyamg_example(name: str):
    import pyamg

    return pyamg.gallery.load_example(name)["A"]


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _scipy_test_data_present() -> bool:
    import scipy

    return os.path.exists(os.path.join(os.path.dirname(scipy.__file__), "sparse", "linalg", "tests",
                                       "propack_test_data.npz"))


# -- the corpus ---------------------------------------------------------------------------------------------
def entries() -> list[Entry]:
    """Every corpus entry available in this environment (shipped matrices only where their package and data
    are installed), small ones first within each class."""
    E = Entry
    out = [
        E("fem2d-3k", "fem-2d", "small 2-D mesh: ~7 nonzeros per row, short rows, strong locality",
          lambda: delaunay_mesh(3_000, 2, seed=1), True, quick=True),
        E("fem2d-250k", "fem-2d", "large 2-D mesh: the SpMV / SpMM workload of implicit solvers, x and y far "
          "beyond cache", lambda: delaunay_mesh(250_000, 2, seed=2), True),
        E("fem3d-1500", "fem-3d", "small 3-D mesh: ~15 nonzeros per row", lambda: delaunay_mesh(1_500, 3, seed=3),
          True, quick=True),
        E("fem3d-100k", "fem-3d", "large 3-D mesh: longer rows than 2-D, A @ A much denser (multigrid "
          "Galerkin products)", lambda: delaunay_mesh(100_000, 3, seed=4), True),
        E("rmat-s10", "power-law", "small Graph500 R-MAT (scale 10, edge factor 8): skewed degrees, hubs",
          lambda: rmat(10, 8, seed=5), True, quick=True),
        E("rmat-s13", "power-law", "Graph500 R-MAT (scale 13, edge factor 16): rows from 1 to thousands of "
          "nonzeros, no locality; the triangle-counting and BFS workload (skewed intersections)",
          lambda: rmat(13, 16, seed=6), True),
        E("ba-4k", "power-law", "small preferential-attachment graph (m = 3)",
          lambda: preferential_attachment(4_000, 3, seed=7), True, quick=True),
        E("ba-100k", "power-law", "preferential-attachment graph (Barabasi-Albert, n = 100k, m = 4): power-law "
          "tail, old vertices are hubs, numbered oldest first", lambda: preferential_attachment(100_000, 4, seed=8),
          True),
        E("road-100", "road", "small road-like grid (10k junctions)", lambda: road_grid(100, seed=9), True,
          quick=True),
        E("road-700", "road", "road-like graph, 490k junctions, ~2.5 neighbours each: very short rows, where "
          "per-row overhead dominates", lambda: road_grid(700, seed=10), True),
        E("banded-4k", "banded", "small banded matrix, 5 diagonals", lambda: banded(4_000, 2, seed=11), False,
          quick=True),
        E("banded-150k", "banded", "banded, 11 diagonals: perfectly regular rows and contiguous x accesses (the "
          "best case for streaming kernels)", lambda: banded(150_000, 5, seed=12), False),
        E("blockdiag-32", "block-diagonal", "small block-diagonal matrix (32 blocks of 32, 30 %)",
          lambda: block_diagonal(32, 32, 0.3, seed=13), False, quick=True),
        E("blockdiag-1500", "block-diagonal", "1500 blocks of 64 at 25 %: ~17 nonzeros per row, A @ A stays "
          "inside the blocks", lambda: block_diagonal(1_500, 64, 0.25, seed=14), False),
    ]
    if _scipy_test_data_present():
        out.append(E("propack-complex-real", "shipped", "scipy's PROPACK SVD test matrix (real part of "
                     "A_complex, 1280 x 1280): a real matrix with irregular rows",
                     _propack_complex_real_part, False, quick=True))
    if _have("pyamg"):
        out.append(E("pyamg-bar", "shipped", "pyamg gallery 'bar': a 3-D linear-elasticity stiffness matrix "
                     "(600 x 600, ~39 nonzeros per row, 3x3 blocks)", lambda: _pyamg_example("bar"), True,
                     quick=True))
        out.append(E("pyamg-ldg-diffusion", "shipped", "pyamg gallery 'local_disc_galerkin_diffusion': a "
                     "discontinuous-Galerkin diffusion matrix (966 x 966, dense element blocks)",
                     lambda: _pyamg_example("local_disc_galerkin_diffusion"), False))
    return out


def select(quick: bool) -> list[Entry]:
    """The --quick subset, or the whole corpus."""
    return [e for e in entries() if e.quick or not quick]


def chosen(quick: bool, names=None, matrices=()) -> list[Entry]:
    """A bench's matrices: ``select(quick)`` (those of ``names`` only, when given), or the corpus matrices named
    by ``--matrices`` (an unknown name exits with the choices)."""
    if matrices:
        everything = {e.name: e for e in entries()}
        unknown = [m for m in matrices if m not in everything]
        if unknown:
            raise SystemExit(f"unknown matrix {', '.join(unknown)}; choose from {', '.join(everything)}")
        return [everything[m] for m in matrices]
    return [e for e in select(quick) if names is None or e.name in names]


_MEMORY: dict[str, object] = {}


def build(entry: Entry, cache_dir: Path | None = None):
    """The canonical matrix of ``entry``, from memory, from ``cache_dir`` (.npz) or built (and stored there)."""
    import scipy.sparse as sps

    key = f"{entry.name}-v{GENERATOR_VERSION}"
    A = _MEMORY.get(key)
    if A is not None:
        return A
    path = Path(cache_dir) / f"{key}.npz" if cache_dir is not None else None
    if path is not None and path.exists():
        A = canonical(sps.load_npz(path), symmetric=entry.symmetric)
    else:
        A = canonical(entry.build_fn(), symmetric=entry.symmetric)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            sps.save_npz(tmp, A, compressed=False)
            os.replace(tmp, path)
    _MEMORY[key] = A
    return A
