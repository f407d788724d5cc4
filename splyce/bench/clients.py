"""``clients``: real client code (networkx, scikit-learn, a scanpy-style kNN graph) with ``splyce.patch_scipy()``
off and on, interleaved, and the per-op break-even sizes behind the switch's thresholds (docs/scipy_patch.md).

Client workloads (the code is the library's own, unchanged; the switch is the only difference):

* ``pagerank``: ``networkx.pagerank`` on a directed preferential-attachment graph (its scipy form: one
  ``Q @ A`` SpGEMM to normalise rows, then power iterations of ``x @ A``, which scipy computes as a CSC
  matvec that the switch leaves to scipy).
* ``tfidf``: ``TfidfVectorizer(max_df=0.05).fit_transform`` of a generated Zipf-distributed corpus, then
  ``cosine_similarity(X, dense_output=False)`` (``X @ X.T``: SpGEMM) timed apart (tokenising is pure Python):
  on X as scikit-learn returns it (columns unsorted within rows: the served product reads them in stored order,
  as scipy's does) and on X after ``X.sort_indices()``.
* ``knn-union``: scanpy's / UMAP's fuzzy union of a kNN connectivity graph, ``W + W.T - W.multiply(W.T)``.
* ``knn-spgemm``: ``C @ C.T`` of the symmetric connectivities (two-hop neighbourhoods, as PAGA-style
  graph code multiplies them).
* ``small``: the same client calls on small inputs (a 200-node pagerank, 100 documents), where the switch
  must not be slower.

Break-even rows: each routed op on random n x n CSR float64 matrices (5 entries per row) with the switch on
and ``route_small=True`` (served even below the thresholds), to show where splyce starts to gain.

Timing: the switch is set before each sample (a batch of calls filling >= 10 ms, as ``common.measure``),
never inside it, so the "on" calls run as in a process with the switch on all along; off and on samples
alternate, the order swapped every repeat; medians. Every workload's result with the switch on is checked
against its result with the switch off first: the same values, and the same buffers byte for byte (a sparse
result's stored order included).
"""

from __future__ import annotations

import numpy as np

import gc
import statistics
import time

from splyce.bench.common import BenchMismatch, Config, Result, _calls_per_sample, _progress, check

# Words in more than 5 % of the documents are dropped (stop words): with them X @ X.T of a Zipf corpus is dense.
MAX_DF = 0.05
COLUMNS = ["group", "workload", "size", "scipy_s", "patched_s", "speedup", "speedup_min", "served", "fell_back"]


def _same_buffers(name: str, got, ref) -> None:
    """The switch's promise: the patched result is the unpatched one byte for byte, a sparse result's stored
    order included (indptr, indices, data), so that later sums in stored order agree too."""
    import scipy.sparse as sps

    if sps.issparse(ref):
        parts = (lambda x: (type(x), x.format, x.shape, x.dtype)) if ref.format not in ("csr", "csc") else (
            lambda x: (type(x), x.format, x.indptr.dtype, x.indptr.tobytes(), x.indices.tobytes(), x.data.tobytes()))
        same = type(got) is type(ref) and got.format == ref.format and parts(got) == parts(ref)
    else:
        got, ref = np.asarray(got), np.asarray(ref)
        same = got.dtype == ref.dtype and got.shape == ref.shape and got.tobytes() == ref.tobytes()
    if not same:
        raise BenchMismatch(f"{name}: the patched result's buffers differ from scipy's (stored order or bits)")


def _measure(name: str, fn, route_small: bool, cfg: Config, bar) -> dict:
    """Median seconds per call of fn with the switch off and on (interleaved samples), after checking the
    result with it on against the result with it off; and the calls served / fallen back in one call."""
    import splyce

    ref = fn()
    splyce.scipy_patch_stats(reset=True)
    with splyce.patched_scipy(route_small=route_small):
        got = fn()
    stats = splyce.scipy_patch_stats(reset=True)
    _same_buffers(f"clients {name}", got, ref)      # first: check() may sort a sparse result's indices in place
    check(f"clients {name}", got, ref)
    del got, ref
    calls = _calls_per_sample(fn)
    times = {"scipy": [], "patched": []}
    for r in range(cfg.n_repeats):
        for cand in (("scipy", "patched") if r % 2 == 0 else ("patched", "scipy")):
            if cand == "patched":
                splyce.patch_scipy(route_small=route_small)
            try:
                gc.collect()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[cand].append((time.perf_counter() - t0) / calls)
            finally:
                splyce.unpatch_scipy()
            bar.update(1)
    return {"scipy": statistics.median(times["scipy"]), "patched": statistics.median(times["patched"]),
            "speedup_min": min(times["scipy"]) / min(times["patched"]),
            "served": sum(v["served"] for v in stats.values()),
            "fell_back": sum(sum(v["fallback"].values()) for v in stats.values())}


def _corpus(n_docs: int, rng, words_per_doc=60, vocabulary=20000):
    ranks = np.minimum(rng.zipf(1.3, size=(n_docs, words_per_doc)), vocabulary)
    return [" ".join(f"w{r}" for r in row) for row in ranks]


def _knn_connectivities(n: int, k: int, rng):
    """A kNN graph's connectivities as scanpy keeps them: CSR, k weights in (0, 1] per row, no self loops."""
    import scipy.sparse as sps

    points = rng.random((n, 8))
    order = np.argsort(points[:, 0])          # neighbours among the nearest by one coordinate: local, asymmetric
    rows = np.repeat(np.arange(n), k)
    offsets = rng.integers(1, 3 * k, size=n * k) * rng.choice([-1, 1], size=n * k)
    pos = np.clip(np.argsort(order)[rows] + offsets, 0, n - 1)
    cols = order[pos]
    keep = cols != rows
    w = sps.csr_array((np.exp(-rng.random(int(keep.sum()))), (rows[keep], cols[keep])), shape=(n, n))
    w.sum_duplicates()
    return w


def _client_workloads(cfg: Config, rng):
    import networkx as nx
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    if cfg.tiny:
        nodes, docs, cells = 2000, 300, 2000
    elif cfg.quick:
        nodes, docs, cells = 50000, 3000, 20000
    else:
        nodes, docs, cells = 100000, 10000, 50000
    out = []

    def pagerank(g):
        return lambda: np.fromiter(nx.pagerank(g).values(), dtype=float)

    g = nx.scale_free_graph(nodes, seed=1)
    g = nx.DiGraph(g)                                      # one edge per pair
    out.append(("client", "pagerank", f"{g.number_of_edges()} edges", pagerank(g)))
    texts = _corpus(docs, rng)
    out.append(("client", "tfidf fit_transform", f"{docs} docs",
                lambda: TfidfVectorizer(max_df=MAX_DF).fit_transform(texts)))
    X = TfidfVectorizer(max_df=MAX_DF).fit_transform(texts)
    out.append(("client", "cosine_similarity", f"{docs} docs, {X.nnz} nnz",
                lambda: cosine_similarity(X, dense_output=False)))
    Xs = X.copy()
    Xs.sort_indices()
    out.append(("client", "cosine_similarity, sorted X", f"{docs} docs, {X.nnz} nnz",
                lambda: cosine_similarity(Xs, dense_output=False)))
    W = _knn_connectivities(cells, 15, rng)

    def fuzzy_union():
        t = W.T
        return W + t - W.multiply(t)
    out.append(("client", "knn-union", f"{cells} cells, k=15", fuzzy_union))
    C = fuzzy_union()
    out.append(("client", "knn-spgemm C @ C.T", f"{cells} cells, {C.nnz} nnz", lambda: C @ C.T))
    small = nx.DiGraph(nx.scale_free_graph(200, seed=2))
    out.append(("small", "pagerank", f"{small.number_of_edges()} edges", pagerank(small)))
    small_texts = _corpus(100, rng, vocabulary=2000)
    X100 = TfidfVectorizer().fit_transform(small_texts)
    X100.sort_indices()
    out.append(("small", "cosine_similarity, sorted X", f"100 docs, {X100.nnz} nnz",
                lambda: cosine_similarity(X100, dense_output=False)))
    Ws = _knn_connectivities(300, 15, rng)
    out.append(("small", "knn-union", "300 cells, k=15", lambda: Ws + Ws.T - Ws.multiply(Ws.T)))
    return out


def _breakeven_workloads(cfg: Config, rng):
    import scipy.sparse as sps

    sizes = (30, 300) if cfg.tiny else (30, 100, 300, 1000, 3000, 10000) if cfg.quick else \
        (30, 100, 300, 1000, 3000, 10000, 30000, 100000)
    out = []
    for n in sizes:
        a = sps.random_array((n, n), density=min(1.0, 5 / n), format="csr", rng=rng)
        b = sps.random_array((n, n), density=min(1.0, 5 / n), format="csr", rng=rng)
        x = rng.random((n, 8))
        v = rng.random(n)
        size = f"n={n}, {a.nnz + b.nnz} nnz"
        out += [("break-even", "A + B", size, lambda a=a, b=b: a + b),
                ("break-even", "A - B.T", size, lambda a=a, b=b: a - b.T),
                ("break-even", "A.multiply(B)", size, lambda a=a, b=b: a.multiply(b)),
                ("break-even", "A @ B", size, lambda a=a, b=b: a @ b),
                ("break-even", "A @ B.T", size, lambda a=a, b=b: a @ b.T),
                ("break-even", "A @ X (8 cols)", f"n={n}, {a.nnz} nnz", lambda a=a, x=x: a @ x),
                ("break-even", "A @ v (not routed)", f"n={n}, {a.nnz} nnz", lambda a=a, v=v: a @ v)]
    return out


def run(cfg: Config) -> Result:
    rng = np.random.default_rng(0)
    work = [w + (False,) for w in _client_workloads(cfg, rng)] + \
        [w + (True,) for w in _breakeven_workloads(cfg, rng)]
    rows = []
    bar = _progress(len(work) * 2 * cfg.n_repeats, "clients", cfg)
    try:
        for group, name, size, fn, route_small in work:
            m = _measure(name, fn, route_small, cfg, bar)
            rows.append({"group": group, "workload": name, "size": size, "scipy_s": m["scipy"],
                         "patched_s": m["patched"], "speedup": m["scipy"] / m["patched"],
                         "speedup_min": m["speedup_min"],
                         "served": m["served"], "fell_back": m["fell_back"]})
    finally:
        bar.close()
    note = (f"Median seconds per call of {cfg.n_repeats} interleaved samples, the switch off (scipy) and on "
            "(patched); speedup = scipy / patched (medians), speedup_min the same of the fastest samples; served / "
            "fell_back: scipy calls the switch routed to splyce / left to scipy in one run of the workload. "
            "break-even rows run with route_small=True (served below the thresholds too). Results checked against "
            "the unpatched run.")
    return Result("clients", "Client code with splyce.patch_scipy() off and on", COLUMNS, rows, note, plot=_plot)


def _plot(rows, ax):
    labels = [f"{r['workload']} ({r['size']})" for r in rows if r["group"] != "break-even"]
    speedups = [r["speedup"] for r in rows if r["group"] != "break-even"]
    ax.barh(range(len(labels)), speedups, color="tab:blue")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("speedup with patch_scipy() (scipy time / patched time)")
