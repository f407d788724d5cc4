"""Old vs new kernels of the SpMV / masked / SDDMM family in one process, called interleaved (best and median
of the repeats): the old modules are loaded from ``$SPLYCE_OLD_NATIVE`` (an old checkout's splyce/native/)
under other names, their symbols renamed at compile. ``python docs/scripts/native_family_speed.py
fem2d-3k,ba-4k,road-100 21`` (``OPS=label,...`` to run some only)."""
import os
import sys
import time
import types

import numpy as np

import splyce.native.codegen as codegen
from splyce.bench import corpus
from pathlib import Path

_real = codegen.compile_host_helpers


def wrapper(text, sigs, **kw):
    if sys._getframe(1).f_globals.get("__name__", "").startswith("old_"):
        text = text.replace("@splyce_", "@old_splyce_")
        fns = _real(text, {"old_" + k: v for k, v in sigs.items()}, **kw)
        return {k: fns["old_" + k] for k in sigs}
    return _real(text, sigs, **kw)


codegen.compile_host_helpers = wrapper
OLD = os.environ.get("SPLYCE_OLD_NATIVE", "/tmp/spmv-gen/old/splyce/native/").rstrip("/") + "/"


def load_old(name):
    src = open(OLD + name + ".py").read()
    for m in ("spmv_rows", "spmv_flat", "masked_sum", "masked", "spmv"):
        src = src.replace(f"from splyce.native.{m} import", f"from old_{m} import")
    src = src.replace("from splyce.native.spmv import goes_flat", "from old_spmv import goes_flat")
    mod = types.ModuleType("old_" + name)
    sys.modules["old_" + name] = mod
    exec(compile(src, OLD + name + ".py", "exec"), mod.__dict__)
    return mod


old = {n: load_old(n) for n in ("spmv_rows", "spmv_flat", "spmv", "spmv_scatter", "masked", "masked_sum",
                                "masked_sum_checked", "sddmm")}
from splyce.native import spmv, spmv_scatter, masked, masked_sum, masked_sum_checked, sddmm  # noqa: E402

new = dict(spmv=spmv, spmv_scatter=spmv_scatter, masked=masked, masked_sum=masked_sum,
           masked_sum_checked=masked_sum_checked, sddmm=sddmm)

names = sys.argv[1].split(",")
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
cache = Path(os.environ.get("SPLYCE_CORPUS_CACHE", "/tmp/splyce-corpus-cache"))
cache.mkdir(exist_ok=True)
entries = {e.name: e for e in corpus.entries()}


def timed(fn, n):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def compare(label, make, inner=1):
    import os
    if os.environ.get("OPS") and not any(o in label for o in os.environ["OPS"].split(",")):
        return
    fo, fn_ = make(old), make(new)
    ro, rn = fo(), fn_()
    same = all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in
               zip(ro if isinstance(ro, tuple) else (ro,), rn if isinstance(rn, tuple) else (rn,)))
    to, tn = [], []
    for _ in range(reps):
        to.append(timed(fo, inner))
        tn.append(timed(fn_, inner))
    bo, bn = min(to), min(tn)
    mo, mn = np.median(to), np.median(tn)
    print(f"{label:34s} old {bo*1e3:8.3f} ms  new {bn*1e3:8.3f} ms  best new/old {bn/bo:5.2f}  "
          f"median new/old {mn/mo:5.2f}  same={same}", flush=True)


for name in names:
    A = corpus.build(entries[name], cache).tocsr()
    A.sort_indices()
    m, n = A.shape
    ip, ix, data = A.indptr, A.indices, A.data.astype(np.float64)
    x = np.random.default_rng(1).standard_normal(n)
    print(f"# {name}: {m} x {n}, {A.nnz} entries", flush=True)
    inner = max(1, int(2e6 // max(A.nnz, 1)))
    for variant in (["rows", "grouped", "flat"] if "ONLY" not in __import__("os").environ else []) + ["flat", "rows"] * ("ONLY" in __import__("os").environ):
        def mk(mods, variant=variant):
            f = mods["spmv"]._spmv_objects(np.dtype(np.float64), 32, 32, variant)
            y = np.empty(m)
            return lambda: (f(id(ip), id(ix), id(data), id(x), id(y), n, m, len(ix)), y)[1]
        compare(f"spmv objects {variant}", mk, inner)
    if "ONLY" in __import__("os").environ: continue
    X = np.random.default_rng(2).standard_normal((n, 8))

    def mk_spmm(mods):
        f = mods["spmv"]._spmm_objects(np.dtype(np.float64), 32, 32, 8)
        Y = np.empty((m, 8))
        return lambda: (f(id(ip), id(ix), id(data), id(X), id(Y), n, m, len(ix)), Y)[1]
    compare("spmm objects k=8", mk_spmm, max(1, inner // 8))
    for check in (False, True):
        compare(f"spmv general check={check}", lambda mods, c=check: (lambda: mods["spmv"].csr_times_dense(
            ip, ix, data, x, 1, coordinates_checked=not c)), inner)
    compare("spmm general k=40", lambda mods: (lambda: mods["spmv"].csr_times_dense(
        ip, ix, data, np.ascontiguousarray(np.repeat(X, 5, axis=1)), 1)), max(1, inner // 40))
    z = np.random.default_rng(3).standard_normal(m)
    for flat in (False, True):
        compare(f"csc scatter flat={flat}", lambda mods, f=flat: (lambda: mods["spmv_scatter"].csc_times_vector(
            ip, ix, data, z, n, f)), inner)
    if m == n:
        parts = (data, ix, ip)
        ones = (np.ones_like(data), ix, ip)
        compare("masked spgemm", lambda mods: (lambda: mods["masked"].masked_spgemm(parts, parts, parts, n, np.float64)))
        compare("masked kept abm", lambda mods: (lambda: mods["masked"].masked_kept(parts, parts, parts, n, np.float64)))
        compare("masked sum", lambda mods: (lambda: mods["masked_sum"].masked_sum(parts, parts, parts, n, np.float64)))
        compare("masked sum count ones", lambda mods: (lambda: mods["masked_sum"].masked_sum(
            ones, ones, ones, n, np.float64, count_ones=True)))
        compare("masked sum checked (ones)", lambda mods: (lambda: mods["masked_sum_checked"].masked_sum_checked(
            ones, ones, ones, m, n, n, False, False)))
        compare("masked sum checked", lambda mods: (lambda: mods["masked_sum_checked"].masked_sum_checked(
            parts, parts, parts, m, n, n, False, False)))
        Xd = np.random.default_rng(4).standard_normal((m, 32))
        Yd = np.random.default_rng(5).standard_normal((n, 32))
        compare("sddmm d=32", lambda mods: (lambda: mods["sddmm"].sddmm(parts, Xd, Yd, np.float64)))
        compare("sddmm d=32 mxy", lambda mods: (lambda: mods["sddmm"].sddmm(parts, Xd, Yd, np.float64, 1, "mxy")))
