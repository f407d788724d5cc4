"""``kernels``: K1-K5 at one density (the paper's Table 3) against the plain sparsifier, scipy, pydata-sparse
and the drop-in ``splyce.matmul / multiply / einsum``."""

from __future__ import annotations

import functools
import math
import time

import numpy as np

from splyce.bench import bandwidth
from splyce.bench.common import Config, Result, geomean, measure, simd_share, touched_zeros

TINY_SIZES = {"K1": 96, "K2": 512, "K3": (4, 4, 256, 4), "K4": (16, 1024), "K5": (3, 3, 256, 4)}
DENSE_REFERENCE_LIMIT = 30_000_000  # elements in all dense operands: above this scipy is the reference

K4_NOTE_ACCUMULATE = ("K4: Splyce and the plain sparsifier accumulate into a dense output that is allocated and "
                      "zeroed outside the timer (`Jitted.accumulate`, docs/kernels.md); scipy, pydata and the drop-in "
                      "return a sparse (CSR) result, as scipy's `multiply` does, allocation included.")
K4_NOTE = ("K4: jitted functions take no `out=` argument, so Splyce and the plain sparsifier are timed as called, "
           "including the allocation and zeroing of their dense output (docs/kernels.md excludes it); scipy, "
           "pydata and the drop-in return a sparse (CSR) result, as scipy's `multiply` does.")


# ``kernels --quick`` (the README's demo): sizes where each kernel, not the per-call work around it, is what
# is timed (scipy takes milliseconds on each), still compiled and run in about a minute. The paper kernels'
# quick sizes (``spec.quick_size``, used by the other subcommands and the tests) are smaller: at those scipy's
# K3 and K5 take 0.1-0.3 ms and a drop-in's operand checks and conversions are most of its time.
DEMO_SIZES = {"K1": 512, "K2": 4096, "K3": (32, 32, 2048, 16), "K4": (512, 8192), "K5": (48, 48, 2048, 32)}


def size_for(spec, cfg: Config):
    if cfg.tiny:
        return TINY_SIZES[spec.name]
    return spec.quick_size if cfg.quick else spec.bench_size


def demo_size_for(spec, cfg: Config):
    """``kernels``' size: ``DEMO_SIZES`` in ``--quick``, else as ``size_for``."""
    return DEMO_SIZES[spec.name] if cfg.quick and not cfg.tiny else size_for(spec, cfg)


def _scipy_operands(name, ops):
    """The operands as a scipy user holds them (2-D sparse arrays; 3-D tensors unfolded)."""
    import scipy.sparse as sps

    if name == "K1":
        return ops[0].to_scipy().tocsr(), ops[1].to_scipy().tocsc()
    if name == "K2":
        return ops[0].to_scipy().tocsr(), sps.coo_array(ops[1].to_scipy())
    if name == "K3":
        B, C, D = ops
        I, K, L = B.shape
        Bu = B.to_pydata().reshape((I, K * L)).to_scipy_sparse().tocsr()
        return Bu, C, D.to_scipy().tocsc()
    if name == "K4":
        return ops[0].to_scipy().tocsr(), ops[1].to_scipy().tocsr()
    if name == "K5":
        B, C = ops
        I, J, K = B.shape
        return B.to_pydata().reshape((I * J, K)).to_scipy_sparse().tocsr(), C.to_scipy().tocsc()
    raise KeyError(name)


def scipy_impl(name, shapes):
    """scipy as a user writes each kernel; returns a function of the scipy operands."""
    if name == "K1":
        return lambda B, C: B @ C
    if name == "K2":
        return lambda B, c: B @ c
    if name == "K3":
        I, K, L, J = shapes

        def k3(Bu, C, D):   # unfolded B (I, K*L) times the Khatri-Rao product of C and D
            Dd = D.toarray()
            return Bu @ (C[:, None, :] * Dd[None, :, :]).reshape(K * L, J)
        return k3
    if name == "K4":
        return lambda B, C: B.multiply(C)
    if name == "K5":
        I, J, K, L = shapes
        return lambda Bu, C: Bu @ C
    raise KeyError(name)


def pydata_impls(name, ops):
    """pydata-sparse formulations (matmul / tensordot / einsum); the table reports the best of them.

    ``sparse.einsum`` is left out for K1 and K3 (it materializes the full outer product: > 6 GB at the
    benchmark sizes) and K5 (26 s, > 10x its tensordot)."""
    try:
        import sparse
    except ImportError:
        return {}
    if name == "K1":
        B, C = ops[0].to_pydata(), ops[1].to_pydata()
        Bg, Cg = sparse.GCXS(B, compressed_axes=(0,)), sparse.GCXS(C, compressed_axes=(1,))
        return {"matmul": lambda: sparse.matmul(Bg, Cg), "tensordot": lambda: sparse.tensordot(B, C, axes=1)}
    if name == "K2":
        B, c = ops[0].to_pydata(), ops[1].to_pydata()
        Bg = sparse.GCXS(B, compressed_axes=(0,))
        return {"matmul": lambda: sparse.matmul(Bg, c), "tensordot": lambda: sparse.tensordot(B, c, axes=1),
                "einsum": lambda: sparse.einsum("ik,k->i", B, c)}
    if name == "K3":
        B, C, D = ops[0].to_pydata(), ops[1], ops[2].to_pydata()
        return {"tensordot": lambda: np.einsum("ilj,lj->ij", _dense(sparse.tensordot(B, C, axes=([1], [0]))),
                                               _dense(D))}
    if name == "K4":
        B, C = ops[0].to_pydata(), ops[1].to_pydata()
        return {"multiply": lambda: B * C, "einsum": lambda: sparse.einsum("ij,ij->ij", B, C)}
    if name == "K5":
        B, C = ops[0].to_pydata(), ops[1].to_pydata()
        return {"tensordot": lambda: sparse.tensordot(B, C, axes=1),
                "matmul": lambda: sparse.matmul(B, C)}
    return {}


def _dense(x):
    return x.todense() if hasattr(x, "todense") else np.asarray(x)


def dropin_impl(name, sp_ops, ops):
    import splyce

    if name == "K1":
        return lambda: splyce.matmul(*sp_ops)
    if name == "K2":
        return lambda: splyce.matmul(*sp_ops)
    if name == "K3":
        B = ops[0].to_pydata()
        _, C, D = sp_ops
        return lambda: splyce.einsum("ikl,kj,lj->ij", B, C, D)
    if name == "K4":
        return lambda: splyce.multiply(*sp_ops)
    if name == "K5":
        B = ops[0].to_pydata()
        return lambda: splyce.einsum("ijk,kl->ijl", B, sp_ops[1])
    return None


def reference(spec, ops, sp_ops, shapes):
    """NumPy dense on the dense operands when they fit, else scipy (a different formulation from the timed
    one where there is one)."""
    total = sum(int(np.prod(o.shape)) for o in ops)
    if total <= DENSE_REFERENCE_LIMIT:
        dense = [o if isinstance(o, np.ndarray) else o.to_numpy() for o in ops]
        return spec.reference(*dense)
    name = spec.name
    if name == "K1":
        B, C = sp_ops
        return (B.tocsc() @ C.tocsr()).toarray()
    if name == "K2":
        B, c = sp_ops
        return B @ c.toarray()
    if name == "K3":
        Bu, C, D = sp_ops
        I, K, L, J = shapes
        Dd = D.toarray()
        return np.stack([Bu @ np.kron(C[:, j], Dd[:, j]) for j in range(J)], axis=1)
    if name == "K4":
        B, C = sp_ops
        return (B.tocoo().multiply(C.tocoo())).toarray()
    if name == "K5":
        Bu, C = sp_ops
        I, J, K, L = shapes
        return (Bu @ C.toarray()).reshape(I, J, L)
    raise KeyError(name)


def shapes_of(name, ops):
    if name == "K3":
        I, K, L = ops[0].shape
        return I, K, L, ops[1].shape[1]
    if name == "K5":
        I, J, K = ops[0].shape
        return I, J, K, ops[1].shape[1]
    return None


COLUMNS = ["kernel", "size", "baseline_s", "splyce_s", "scipy_s", "pydata_s", "pydata_best", "dropin_s",
           "speedup_vs_baseline", "splyce_vs_scipy", "dropin_vs_scipy", "simd_share", "compile_s", "disk_s",
           "baseline_min_s", "splyce_min_s", "model_mb", "floor_s", "bw_baseline", "bw_splyce"]


def traffic(ops, result: np.ndarray, accumulate: bool) -> bandwidth.Traffic:
    """The bytes the timed call of the plain sparsifier or Splyce must move at minimum (``model_mb``).

    Read once: every buffer of every operand (positions, coordinates, values; a dense operand whole). The
    dense result: with ``accumulate`` (K4: the output allocated and zeroed untimed, ``out += B * C``) the
    cache lines holding a nonzero of the result, each read and written back; otherwise (the result allocated
    by the call: its zeroing is timed) written once in full, the kernel's own writes into it not counted
    again. Operands and output as one pass each, nothing re-read: a lower bound, not the kernels' traffic (an
    inner-product SpGEMM reads each column many times)."""
    read = 0
    for x in ops:
        if isinstance(x, np.ndarray):
            read += x.nbytes
        else:
            read += sum(b.nbytes for b in (*x.pos, *x.crd, x.values) if b is not None)
    if not accumulate:
        return bandwidth.Traffic(read=read, written=result.nbytes)
    # the output's first byte within its line, as touched_zeros allocates it (libc puts a header before it)
    offset = np.empty(result.shape, result.dtype).ctypes.data % bandwidth.LINE
    lines = bandwidth.lines_holding(np.flatnonzero(result), result.itemsize, offset)
    return bandwidth.Traffic(read=read, updated=lines * bandwidth.LINE)


def run_kernel(spec, cfg: Config, bar=None, simd=True) -> dict:
    import splyce

    name = spec.name
    size = demo_size_for(spec, cfg)
    ops = spec.operands(size, cfg.density)
    shapes = shapes_of(name, ops)
    sp_ops = _scipy_operands(name, ops)
    base = splyce.jit(spec.fun, vectorize=False, target=cfg.target)
    fast = splyce.jit(spec.fun, target=cfg.target)
    sp = scipy_impl(name, shapes)
    candidates = {"baseline": lambda: base(*ops), "splyce": lambda: fast(*ops), "scipy": lambda: sp(*sp_ops)}
    if name == "K4" and hasattr(fast, "accumulate"):   # dense output allocated and zeroed outside the timer
        zeroed = functools.partial(touched_zeros, ops[0].shape)
        candidates["baseline"] = (zeroed, lambda out: base.accumulate(out, *ops))
        candidates["splyce"] = (zeroed, lambda out: fast.accumulate(out, *ops))
    pyd = {} if cfg.tiny else pydata_impls(name, ops)   # tiny (tests): skip numba's compile time
    for label, f in pyd.items():
        candidates["pydata-" + label] = f
    drop = dropin_impl(name, sp_ops, ops)
    if drop is not None:
        candidates["dropin"] = drop
    ref = reference(spec, ops, sp_ops, shapes)
    if bar is not None:
        bar.total += len(candidates) * (cfg.n_repeats + 1)
        bar.refresh()
    t = measure(candidates, ref, cfg, desc=name, bar=bar)
    best_pyd = min((k for k in t if k.startswith("pydata-")), key=lambda k: t[k].median, default=None)
    row = {
        "kernel": f"{name} {spec.title}", "size": "x".join(map(str, size)) if isinstance(size, tuple) else str(size),
        "baseline_s": t["baseline"].median, "splyce_s": t["splyce"].median, "scipy_s": t["scipy"].median,
        "pydata_s": t[best_pyd].median if best_pyd else math.nan,
        "pydata_best": best_pyd[len("pydata-"):] if best_pyd else "n/a",
        "dropin_s": t["dropin"].median if "dropin" in t else math.nan,
        "compile_s": t["splyce"].compile, "baseline_min_s": t["baseline"].min, "splyce_min_s": t["splyce"].min,
    }
    row["speedup_vs_baseline"] = row["baseline_s"] / row["splyce_s"]
    row["splyce_vs_scipy"] = row["scipy_s"] / row["splyce_s"]
    row["dropin_vs_scipy"] = row["scipy_s"] / row["dropin_s"] if "dropin" in t else math.nan
    row["simd_share"] = simd_share(spec.fun, tuple(ops)) if simd else math.nan
    moved = traffic(ops, np.asarray(ref), accumulate=isinstance(candidates["splyce"], tuple))
    floor = bandwidth.floor_seconds(moved, rate_bytes(cfg))
    row.update(model_mb=moved.total / 1e6, floor_s=floor, bw_baseline=floor / row["baseline_s"],
               bw_splyce=floor / row["splyce_s"])
    row["disk_s"] = _disk_load(spec, ops, cfg.target)
    return row


def _disk_load(spec, ops, target: str = "native") -> float:
    """The Splyce kernel's first call in a process whose disk cache holds it: a fresh ``splyce.jit`` after
    emptying the in-memory caches, timed up to the kernel (trace, plan, key, load: ``kernel_for``), without
    the run; NaN when the disk cache is off."""
    import splyce
    from splyce.native import object_cache

    if not object_cache.enabled():
        return math.nan
    splyce.clear_cache()
    loaded = splyce.jit(spec.fun, target=target)
    t0 = time.perf_counter()
    loaded.kernel_for(*ops)
    seconds = time.perf_counter() - t0
    info = loaded.cache_info()
    if info.disk_hits != 1 or info.compiles != 0:
        raise RuntimeError(f"kernels bench: {spec.name} was not loaded from the disk cache ({info})")
    return seconds


def rate_bytes(cfg: Config) -> int:
    """The buffers the bandwidth floor is measured over: in memory, or in cache for the tests' tiny runs."""
    return bandwidth.TINY_BYTES if cfg.tiny else bandwidth.BANDWIDTH_BYTES


def run(cfg: Config) -> Result:
    import splyce
    from splyce.bench.paper_kernels import KERNELS

    from splyce.bench.common import _progress, empty_disk_cache

    rows = []
    bar = _progress(0, "kernels", cfg)
    # an empty disk cache of its own, so that compile_s is a compile on every run, and disk_s a load
    try:
        with empty_disk_cache("splyce-bench-kernels-"):
            for spec in KERNELS.values():
                rows.append(run_kernel(spec, cfg, bar=bar))
    finally:
        bar.close()
    gm = {"kernel": "geomean", "size": ""}
    for c in ("speedup_vs_baseline", "splyce_vs_scipy", "dropin_vs_scipy"):
        gm[c] = geomean(r[c] for r in rows)
    rows.append(gm)
    note = (f"Density {cfg.density:g} in every sparse operand; median seconds of {cfg.n_repeats} interleaved "
            "repeats; speedup_vs_baseline = plain sparsifier / Splyce; *_vs_scipy = scipy / that column; "
            "simd_share = share of coordinates consumed by the fast lane; the Splyce kernel's fixed costs: "
            "compile_s = its first call minus the fastest run, in an empty disk cache (the drop-ins' native "
            "kernels compile too, in their untimed first call); disk_s = its first call up to the kernel (trace, "
            "plan, disk-cache load, no run) once the in-memory caches are emptied; the cached call is splyce_s. "
            "A fresh process also pays imports: `python -m splyce.bench overhead`. model_mb = the bytes the "
            "timed call must move at minimum (kernels.traffic: every operand buffer read once; a dense output "
            "written once in full when the call allocates it, else the lines holding a result read and written "
            "back); floor_s = their time at this run's single-core rates (" + bandwidth.rates_line(rate_bytes(cfg)) +
            "); bw_* = floor_s / that median, the share of the memory bandwidth reached (> 1 where the buffers "
            "fit in cache). " +
            (K4_NOTE_ACCUMULATE if hasattr(splyce.jit(KERNELS["K4"].fun, target=cfg.target), "accumulate")
             else K4_NOTE))
    return Result("kernels", f"K1-K5 at {cfg.density * 100:g} % density (paper Table 3)" +
                  (f", {cfg.target} code" if cfg.target != "native" else ""), COLUMNS, rows, note,
                  plot=_plot)


def _plot(rows, ax):
    rows = [r for r in rows if r["kernel"] != "geomean"]
    labels = [r["kernel"].split()[0] for r in rows]
    x = np.arange(len(rows))
    series = [("baseline_s", "plain sparsifier"), ("splyce_s", "Splyce"), ("scipy_s", "scipy"),
              ("pydata_s", "pydata-sparse"), ("dropin_s", "splyce drop-in")]
    w = 0.8 / len(series)
    for i, (col, label) in enumerate(series):
        ax.bar(x + (i - 2) * w, [r[col] if r[col] == r[col] else 0 for r in rows], w, label=label)
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("median time (s)")
    ax.legend(fontsize=8)
