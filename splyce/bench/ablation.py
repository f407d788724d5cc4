"""``ablation``: the eight phase configurations of the fast lane on K1, strict and fast-math (Tables 1-2);
galloping on / off on skewed intersections (fiber length ratio 1..256) and the galloping threshold sweep;
the union fast lane off / on; the three-way fast lane (``a * b * c``) at n = 4 and 8."""

from __future__ import annotations

import numpy as np

from splyce.options import DEFAULT_PHASES, Options
from splyce.bench.common import Config, Result, _progress, measure, touched_zeros
from splyce.bench.kernels import size_for

def phase_bits(c: int) -> str:
    """Configuration c as its phases 1, 2, 3: S = SIMD, x = scalar."""
    o = Options(phases=c)
    return "".join("S" if simd else "x" for simd in (o.simd_compare, o.simd_mac, o.simd_advance))


COLUMNS = ["workload", "config", "phases", "fast_math", "median_s", "min_s", "speedup_vs_baseline", "compile_s"]
SKEW_SHORT = 8  # coordinates per short fiber in the skew workloads


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    spec = KERNELS["K1"]
    n = size_for(spec, cfg)
    ops = spec.operands(n, cfg.density)
    ref = spec.reference(*[o.to_numpy() for o in ops])
    candidates, tol = {"baseline": (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, vectorize=False))}, {}
    for fm in (False, True):
        for c in range(1, 9):
            key = f"{c}{'-fm' if fm else ''}"
            candidates[key] = (lambda f: lambda: f(*ops))(splyce.jit(spec.fun, phases=c, fast_math=fm))
            tol[key] = 1e-9 if not fm else 1e-7
    bar = _progress(len(candidates) * (cfg.n_repeats + 1), "ablation", cfg)
    try:
        t = measure(candidates, ref, cfg, desc="K1 ablation", rtol=tol, bar=bar)
    finally:
        bar.close()
    base = t["baseline"].median
    k1 = f"K1 N={n}"
    rows = [{"workload": k1, "config": "baseline", "phases": "plain sparsifier", "fast_math": "", "median_s": base,
             "min_s": t["baseline"].min, "speedup_vs_baseline": 1.0, "compile_s": t["baseline"].compile}]
    for fm in (False, True):
        for c in range(1, 9):
            tm = t[f"{c}{'-fm' if fm else ''}"]
            rows.append({"workload": k1, "config": c, "phases": phase_bits(c), "fast_math": "on" if fm else "off",
                         "median_s": tm.median, "min_s": tm.min, "speedup_vs_baseline": base / tm.median,
                         "compile_s": tm.compile})
    note = (f"K1 SpGEMM, N = {n}, {cfg.density * 100:g} % density. phases: (1 load + all-pairs compare, "
            f"2 multiply-accumulate, 3 pointer advance), S = SIMD, x = scalar; configuration {DEFAULT_PHASES} "
            f"({phase_bits(DEFAULT_PHASES)}) is splyce's default (the paper's best was 5). fast_math = reassociation allowed (Table 2), results then checked with rtol 1e-7.")
    rows += _gallop_rows(cfg)
    rows += _union_rows(cfg)
    rows += _threeway_rows(cfg)
    note += (f" Skew rows: `einsum('ij,ij->i')` of a CSR matrix with {SKEW_SHORT} coordinates per row and one "
             f"with ratio x {SKEW_SHORT} per row (the ratio cycling through 1..256 in the mixed workload); config "
             f"gallop=R: galloping from fiber length ratio R on (0: the all-pairs fast lane only), default phases. "
             f"Union rows: sparse add / subtract / maximum of two uniform 5 % CSR matrices into a dense output "
             f"(allocated, zeroed and its pages touched untimed: kernel only) and into a CSR output (the whole "
             f"call), the union fast lane off and on (the default, union=None, is on for the CSR output, off for "
             f"the dense one); '{FLOOR_LABEL}' (dense output only): the result's elements updated in place from one "
             f"list of the union's entries (`einsum('ij->ij', u)` accumulated, plain sparsifier), i.e. the output's "
             f"memory traffic without any merge: its speedup bounds what any merge into that output can reach. Three-way "
             f"rows: `a * b * c` of three CSR matrices accumulated into a preallocated dense output (kernel only), "
             f"into its default sparse CSR result (whole call), and its row sums `einsum('ij,ij,ij->i')` (no output "
             f"to allocate: the loop alone), uniform "
             f"5 % and skewed densities (20 %, 5 %, 0.5 %), the three-way fast lane at n = 4 (default) and 8.")
    return Result("ablation", "K1 phase ablation, strict and fast-math (paper Tables 1-2); galloping",
                  COLUMNS, rows, note, plot=_plot)


def skewed_pair(rows: int, ratios, seed: int = 0):
    """Two CSR operands (int32 indices): row r of B has SKEW_SHORT coordinates, row r of C
    ``ratios[r % len(ratios)] * SKEW_SHORT``, drawn from 4x the longest fiber's count of columns."""
    import scipy.sparse as sps

    import splyce

    rng = np.random.default_rng(seed)
    cols = 4 * SKEW_SHORT * max(ratios)
    out = []
    for lengths in ([SKEW_SHORT] * rows, [SKEW_SHORT * ratios[r % len(ratios)] for r in range(rows)]):
        idx = np.concatenate([np.sort(rng.choice(cols, k, replace=False)) for k in lengths]).astype(np.int32)
        ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        out.append(splyce.asarray(sps.csr_array((rng.uniform(0.5, 1.5, len(idx)), idx, ptr), shape=(rows, cols))))
    return out


def _row_dot(b, c):
    import splyce

    return splyce.einsum("ij,ij->i", b, c)


def _ratio_rows(workload: str, t: dict, configs: dict) -> list[dict]:
    """The baseline's row and one row per candidate key of ``configs`` (labelled by its value), default
    phases, with the speedup over the baseline's median."""
    base = t["baseline"].median
    rows = [{"workload": workload, "config": "baseline", "phases": "plain sparsifier", "fast_math": "",
             "median_s": base, "min_s": t["baseline"].min, "speedup_vs_baseline": 1.0,
             "compile_s": t["baseline"].compile}]
    for key, label in configs.items():
        rows.append({"workload": workload, "config": label, "phases": phase_bits(DEFAULT_PHASES), "fast_math": "",
                     "median_s": t[key].median, "min_s": t[key].min, "speedup_vs_baseline": base / t[key].median,
                     "compile_s": t[key].compile})
    return rows


def _gallop_rows(cfg: Config) -> list[dict]:
    """Galloping off / at the default threshold per fiber length ratio, then a threshold sweep."""
    import splyce
    from splyce.options import DEFAULT_GALLOP_RATIO

    rows_per = 40 if cfg.tiny else (200 if cfg.quick else 1000)
    ratios = (1, 64) if cfg.tiny else (1, 4, 16, 64, 256)
    sweep = (0, 8, 64) if cfg.tiny else (0, 4, 8, 16, 32, 64, 128)
    workloads = [(f"skew ratio {r}", (r,), (0, DEFAULT_GALLOP_RATIO)) for r in ratios]
    workloads.append(("skew mixed 1..256", tuple(2 ** k for k in range(9)), sweep))
    out = []
    for name, ratio_cycle, gallops in workloads:
        ops = skewed_pair(rows_per, ratio_cycle)
        ref = (ops[0].to_numpy() * ops[1].to_numpy()).sum(axis=1)
        candidates = {"baseline": (lambda f: lambda: f(*ops))(splyce.jit(_row_dot, vectorize=False))}
        for g in gallops:
            candidates[g] = (lambda f: lambda: f(*ops))(splyce.jit(_row_dot, gallop=g))
        t = measure(candidates, ref, cfg, desc=f"ablation {name}", rtol=1e-9)
        out += _ratio_rows(name, t, {g: f"gallop={g}" for g in gallops})
    return out


def _plot(rows, ax):
    x = np.arange(1, 9)
    for fm, label in (("off", "strict"), ("on", "fast-math")):
        ys = [r["speedup_vs_baseline"] for r in rows if r["fast_math"] == fm and r["workload"].startswith("K1")]
        ax.bar(x + (-0.2 if fm == "off" else 0.2), ys, 0.4, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{c}\n{phase_bits(c)}" for c in x])
    ax.set_ylabel("speedup vs plain sparsifier")
    ax.legend(fontsize=8)


class _UnionOp:
    """``name`` (add / subtract / maximum) of two sparse operands into an ``out_format`` result."""

    def __init__(self, name, out_format):
        self.name, self.out_format = name, out_format

    def __call__(self, b, c):
        from splyce.tracer import tracer

        return getattr(tracer, self.name)(b, c, out_format=self.out_format)


def _union_rows(cfg: Config) -> list[dict]:
    """The union fast lane off / on for sparse add, subtract and maximum into a dense and a sparse output;
    for the dense output also the floor: the same output elements read, updated and written with no merge."""
    import scipy.sparse as sps

    import splyce

    n = 64 if cfg.tiny else (400 if cfg.quick else 4000)
    rng = np.random.default_rng(0)
    mats = [sps.random_array((n, n), density=0.05, format="csr", rng=rng) for _ in range(2)]
    ops = [splyce.asarray(m) for m in mats]
    out = []
    refs = {"add": mats[0] + mats[1], "subtract": mats[0] - mats[1], "maximum": mats[0].maximum(mats[1])}
    for out_format in ("dense", "sparse"):
        for name, ref in refs.items():
            fun = _UnionOp(name, out_format)
            configs = {False: "union=off", True: "union=on"}
            if out_format == "dense":
                # the output allocated, zeroed and touched untimed (as a reused output, or the runtime's zeroed
                # result, reaches the kernel); the kernel accumulates into it
                def call(f, args=ops):
                    return (lambda: touched_zeros((n, n)), lambda into: f.accumulate(into, *args))
                union = splyce.asarray(sps.csr_array(ref))
                floor = {"floor": call(splyce.jit(_scatter_dense, vectorize=False), (union,))}
                configs["floor"] = FLOOR_LABEL
                ref = ref.toarray()
            else:                       # the whole call: the kernel builds the CSR result
                def call(f):
                    return lambda: f(*ops)
                floor = {}
            candidates = {"baseline": call(splyce.jit(fun, vectorize=False))}
            for union in (False, True):
                candidates[union] = call(splyce.jit(fun, union=union))
            candidates.update(floor)
            t = measure(candidates, ref, cfg, desc=f"ablation {name} {out_format}", rtol=1e-12)
            out += _ratio_rows(f"{name} {out_format} N={n} 5 %", t, configs)
    return out


# The dense union's floor: one read-modify-write per element of the result (``out[i, j] += u`` over the
# union's entries, as the merge's bodies do), one coordinate stream instead of the merge's two, no compares:
# strictly less work than any merge writing the same output, so baseline / floor bounds every merge's speedup.
FLOOR_LABEL = "floor (no merge)"


def _scatter_dense(u):
    from splyce.tracer import tracer

    return tracer.einsum("ij->ij", u, out_format="dense")


def _mul3(a, b, c):   # a dense or sparse result, by out_format
    return a * b * c


def _mul3_rows(a, b, c):
    import splyce

    return splyce.einsum("ij,ij,ij->i", a, b, c)


def _threeway_rows(cfg: Config) -> list[dict]:
    """The three-way intersection (one loop over three coordinate lists): plain sparsifier vs fast lane."""
    import scipy.sparse as sps

    import splyce

    n = 64 if cfg.tiny else (1000 if cfg.quick else 4000)
    out = []
    workloads = (("5 %", (0.05, 0.05, 0.05)), ("skewed 20/5/0.5 %", (0.2, 0.05, 0.005)))
    for label, densities in workloads[:1] if cfg.tiny else workloads:
        rng = np.random.default_rng(0)
        mats = [sps.random_array((n, n), density=d, format="csr", rng=rng) for d in densities]
        ops = [splyce.asarray(m) for m in mats]
        sparse_product = mats[0].multiply(mats[1]).multiply(mats[2]).tocsr()
        product = sparse_product.toarray()
        for name, fun, ref, kwargs in (("a*b*c dense", _mul3, product, {"out_format": "dense"}),
                                       ("a*b*c sparse", _mul3, sparse_product, {}),
                                       ("ij,ij,ij->i", _mul3_rows, product.sum(axis=1), {})):
            if "out_format" in kwargs:   # the kernel alone: it accumulates into a zeroed output allocated and touched untimed
                def call(f):
                    return (lambda: np.full((n, n), 0.0)), (lambda out: f.accumulate(out, *ops))
            else:
                def call(f):
                    return lambda: f(*ops)
            candidates = {"baseline": call(splyce.jit(fun, vectorize=False, **kwargs))}
            for width in (4, 8):
                candidates[width] = call(splyce.jit(fun, vector_width=width, **kwargs))
            t = measure(candidates, ref, cfg, desc=f"ablation {name} {label}", rtol=1e-12)
            out += _ratio_rows(f"{name} N={n} {label}", t, {w: f"three-way n={w}" for w in (4, 8)})
    return out
