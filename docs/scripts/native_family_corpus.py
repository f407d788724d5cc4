"""Differential corpus of the SpMV / SpMM / CSC scatter, masked and SDDMM native kernels: every entry point on a
fixed set of inputs (shapes with empty rows, 0xN, 1xN, wide / tall; random at densities 1e-4..0.3, banded,
power-law and short rows; float64 / float32 / int64 / int32 with Inf / NaN; int32 / int64 indices; malformed
positions and coordinates), outputs saved (``save PATH``) or compared bit for bit with saved ones (``cmp PATH``),
and SpMV / SpMM / the scatter against scipy. Run the old code with ``PYTHONPATH=<old checkout>``, then the new:
``python docs/scripts/native_family_corpus.py save /tmp/base.pkl`` / ``... cmp /tmp/base.pkl``."""
import pickle
import sys

import numpy as np
import scipy.sparse as sp

mode, path = sys.argv[1], sys.argv[2]
from splyce.native import spmv, spmv_scatter, masked, masked_sum, masked_sum_checked, sddmm  # noqa: E402

VALS = [np.float64, np.float32, np.int64, np.int32]
IDX = [np.int32, np.int64]


def pattern(kind, m, n, density, rng):
    if kind == "random":
        return sp.random(m, n, density=density, format="csr", random_state=rng)
    if kind == "banded":
        diags = [d for d in range(-2, 3) if -m < d < n] or [0]
        return sp.diags([np.ones(max(0, min(m, n))) for _ in diags], diags, shape=(m, n), format="csr") if min(m, n) else sp.csr_matrix((m, n))
    if kind == "power":        # power-law rows
        lens = np.minimum(n, (rng.pareto(1.2, m) * 2).astype(int))
        rows = np.repeat(np.arange(m), lens)
        cols = np.concatenate([rng.choice(n, l, replace=False) for l in lens]) if n and len(lens) else np.zeros(0, int)
        return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, n))
    if kind == "short":        # rows of 0-4 entries (the flat kernel's)
        lens = rng.integers(0, 5, m) if n else np.zeros(m, int)
        lens = np.minimum(lens, n)
        rows = np.repeat(np.arange(m), lens)
        cols = np.concatenate([rng.choice(n, l, replace=False) for l in lens]) if len(lens) else np.zeros(0, int)
        return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, n))
    raise ValueError(kind)


def values(A, dt, rng, special):
    A = A.copy()
    A.sort_indices()
    if np.issubdtype(dt, np.floating):
        v = rng.standard_normal(A.nnz)
        if special and A.nnz > 3:
            v[rng.integers(0, A.nnz, 3)] = [np.inf, np.nan, -np.inf]
    else:
        v = rng.integers(-5, 6, A.nnz)
    return v.astype(dt)


SHAPES = [(0, 5), (1, 7), (5, 0), (3, 3), (40, 40), (200, 30), (30, 200), (300, 300), (2000, 2000)]
DENS = [1e-4, 1e-2, 0.3]


def cases():
    rng = np.random.default_rng(7)
    for (m, n) in SHAPES:
        for kind in ("random", "banded", "power", "short"):
            for d in (DENS if kind == "random" else [None]):
                if d == 0.3 and m * n > 10**5:
                    continue
                if kind != "random" and m * n == 0 and kind in ("power",):
                    continue
                A = pattern(kind, m, n, d or 0.01, rng)
                for dt in VALS:
                    for it in IDX:
                        special = (dt in (np.float64, np.float32)) and (m * n > 100)
                        data = values(A, dt, rng, special)
                        ip, ix = A.indptr.astype(it), A.indices.astype(it)
                        yield f"{m}x{n}-{kind}-{d}-{np.dtype(dt).name}-{np.dtype(it).name}", m, n, ip, ix, data


def rvec(n, dt, rng, special=False):
    if np.issubdtype(dt, np.floating):
        v = rng.standard_normal(n).astype(dt)
        if special and n > 4:
            v[1], v[3] = np.inf, np.nan
        return v
    return rng.integers(-4, 5, n).astype(dt)


def run_all():
    out = {}
    ref_fail = []
    rng = np.random.default_rng(11)
    for key, m, n, ip, ix, data in cases():
        dt = data.dtype
        x = rvec(n, dt, rng, special=True)
        A = sp.csr_matrix((data, ix, ip), shape=(m, n))
        ref = A @ x
        # SpMV: each loop variant, checked and trusted
        for variant, consts in (("rows", (-1, 1 << 62, -1, 0)), ("flat", (1 << 40, 0, -1, 0)),
                                ("grouped", (-1, 1 << 62, 1 << 62, 0))):
            spmv.FLAT_MAX_ROW, spmv.FLAT_MIN_BYTES, spmv.GROUPED_MAX_BYTES, spmv.GROUPED_MIN_ROW = consts
            for checked in (True, False):
                for threads in (1, 2):
                    y = spmv.csr_times_dense(ip, ix, data, x, threads, coordinates_checked=checked)
                    out[("spmv", variant, checked, threads, key)] = y
                    if y is None or not np.array_equal(y.view(np.uint8), ref.astype(dt).view(np.uint8)):
                        ref_fail.append(("spmv", variant, checked, threads, key))
            y = np.empty(m, dtype=dt)
            if m and n:
                fn = spmv._spmv_objects(dt, ip.itemsize * 8, ix.itemsize * 8, variant)
                code = fn(id(ip), id(ix), id(data), id(x), id(y), n, m, len(ix))
                out[("spmv_obj", variant, key)] = (code, y.copy())
                if code or not np.array_equal(y.view(np.uint8), ref.astype(dt).view(np.uint8)):
                    ref_fail.append(("spmv_obj", variant, key))
        spmv.FLAT_MAX_ROW, spmv.FLAT_MIN_BYTES, spmv.GROUPED_MAX_BYTES, spmv.GROUPED_MIN_ROW = 4, 0, 0, 0
        # SpMM
        for k in (1, 3, 8, 33):
            X = np.ascontiguousarray(rvec(n * k, dt, rng).reshape(n, k))
            for checked in (True, False):
                Y = spmv.csr_times_dense(ip, ix, data, X, 2, coordinates_checked=checked)
                out[("spmm", k, checked, key)] = Y
                if Y is None or not np.array_equal(Y, (A @ X).astype(dt), equal_nan=dt.kind == "f"):
                    ref_fail.append(("spmm", k, checked, key))
            if k <= spmv.SPMM_FIXED and m and n:
                Y = np.empty((m, k), dtype=dt)
                fn = spmv._spmm_objects(dt, ip.itemsize * 8, ix.itemsize * 8, k)
                code = fn(id(ip), id(ix), id(data), id(X), id(Y), n, m, len(ix))
                out[("spmm_obj", k, key)] = (code, Y.copy())
        # CSC scatter: A read as CSC of A.T (n x m): y = A.T @ z
        z = rvec(m, dt, rng, special=True)
        for flat in (False, True, None):
            y = spmv_scatter.csc_times_vector(ip, ix, data, z, n, flat=flat)
            out[("csc", flat, key)] = y
            r = (A.T @ z).astype(dt)
            if y is None or not np.array_equal(y.view(np.uint8), r.view(np.uint8)):
                ref_fail.append(("csc", flat, key))
        # masked products, on square ones: M = A, A, B = A (n == m)
        if m == n and len(ix) <= 30000:
            for threads in (1, 2):
                parts = (data, ix, ip)
                r = masked.masked_spgemm(parts, parts, parts, n, dt, threads)
                out[("masked", threads, key)] = r
                for factors in ("abm", "mab", "bam"):
                    out[("kept", threads, factors, key)] = masked.masked_kept(parts, parts, parts, n, dt, threads, factors)
                for factors in ("abc", "cba"):
                    for count in (False, True):
                        out[("msum", threads, factors, count, key)] = masked_sum.masked_sum(
                            parts, parts, parts, n, dt, threads, with_proof=True, factors=factors, count_ones=count)
                ones = (np.ones_like(data), ix, ip)
                out[("msum1", threads, key)] = masked_sum.masked_sum(ones, ones, ones, n, dt, threads, with_proof=True)
            for pp in ((data, ix, ip), (np.ones_like(data), ix, ip)):
                out[("msum_checked", pp[0][:1].tobytes(), key)] = masked_sum_checked.masked_sum_checked(
                    pp, pp, pp, m, n, n, True, True)
                if masked_sum_checked.trusted_supported(dt, ix.dtype):
                    for factors in ("abc", "cba"):
                        out[("msum_trusted", factors, pp[0][:1].tobytes(), key)] = masked_sum_checked.masked_sum_trusted(
                            pp, pp, pp, m, n, False, False, factors)
            # scipy reference of the masked product (values up to rounding)
            r = out[("masked", 1, key)]
            ref_m = A.multiply(A @ A).tocsr()
            if dt.kind != "f":
                ref_m.eliminate_zeros()
                got = sp.csr_matrix(r, shape=(m, n))
                if (got != ref_m).nnz:
                    ref_fail.append(("masked-vs-scipy", key))
        # SDDMM: M (m x n), X (m x d), Y (n x d)
        for d in (1, 5, 16, 37):
            X = np.ascontiguousarray(rvec(m * d, dt, rng).reshape(m, d))
            Yd = np.ascontiguousarray(rvec(n * d, dt, rng).reshape(n, d))
            for factors in (None, "mxy", "xym"):
                for pre in (False, True):
                    sddmm.PREFETCH_MIN_BYTES = 0 if pre else 4 << 20
                    saved_near = sddmm.reads_near
                    if pre:
                        sddmm.reads_near = lambda *a: False
                    for threads in (1, 2):
                        out[("sddmm", d, factors, pre, threads, key)] = sddmm.sddmm((data, ix, ip), X, Yd, dt,
                                                                                   threads, factors)
                    sddmm.reads_near = saved_near
            sddmm.PREFETCH_MIN_BYTES = 4 << 20
    # malformed inputs: the checked kernels refuse them
    bad = [("negcol", np.array([0, 2, 3]), np.array([0, -1, 1])), ("bigcol", np.array([0, 2, 3]), np.array([0, 5, 1])),
           ("down", np.array([0, 2, 1, 3]), np.array([0, 1, 2])), ("over", np.array([0, 2, 9]), np.array([0, 1, 2])),
           ("ends", np.array([1, 2, 3]), np.array([0, 1, 2]))]
    for name, ip0, ix0 in bad:
        for it in IDX:
            ip, ix = ip0.astype(it), ix0.astype(it)
            mm = len(ip) - 1
            for dt in VALS:
                data = np.arange(1, len(ix) + 1).astype(dt)
                x = np.arange(1, 4).astype(dt)
                for variant, consts in (("rows", (-1, 1 << 62, -1, 0)), ("flat", (1 << 40, 0, -1, 0)),
                                        ("grouped", (-1, 1 << 62, 1 << 62, 0))):
                    spmv.FLAT_MAX_ROW, spmv.FLAT_MIN_BYTES, spmv.GROUPED_MAX_BYTES, spmv.GROUPED_MIN_ROW = consts
                    if name != "ends":
                        out[("bad-spmv", variant, name, dt, it)] = spmv.csr_times_dense(ip, ix, data, x, 1, False)
                    fn = spmv._spmv_objects(np.dtype(dt), ip.itemsize * 8, ix.itemsize * 8, variant)
                    y = np.zeros(mm, dtype=dt)
                    out[("bad-spmv_obj", variant, name, dt, it)] = fn(id(ip), id(ix), id(data), id(x), id(y), 3, mm, len(ix))
                for k in (2, 40):
                    X = np.ones((3, k), dtype=dt)
                    if name != "ends":
                        out[("bad-spmm", k, name, dt, it)] = spmv.csr_times_dense(ip, ix, data, X, 1, False)
                for flat in (False, True):
                    out[("bad-csc", flat, name, dt, it)] = spmv_scatter.csc_times_vector(ip, ix, data, np.ones(mm, dt), 3, flat)
                if mm == 3 or name != "down":
                    pp = (data, ix, ip)
                    try:
                        out[("bad-msum", name, dt, it)] = masked_sum_checked.masked_sum_checked(pp, pp, pp, mm, 3, 3, True, True)
                    except Exception as e:  # noqa: BLE001
                        out[("bad-msum", name, dt, it)] = repr(e)
    spmv.FLAT_MAX_ROW, spmv.FLAT_MIN_BYTES, spmv.GROUPED_MAX_BYTES, spmv.GROUPED_MIN_ROW = 4, 0, 0, 0
    return out, ref_fail


def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return a == b


out, ref_fail = run_all()
print("cases", len(out), "vs-scipy failures", len(ref_fail))
for f in ref_fail[:20]:
    print("  ref", f)
if mode == "save":
    with open(path, "wb") as f:
        pickle.dump(out, f)
else:
    with open(path, "rb") as f:
        base = pickle.load(f)
    diff = [k for k in base if k not in out or not same(base[k], out[k])]
    extra = [k for k in out if k not in base]
    print("differ", len(diff), "missing/extra", len(extra))
    for k in diff[:30]:
        print("  DIFF", k, base[k] if not isinstance(base[k], np.ndarray) else base[k][:5],
              out.get(k) if not isinstance(out.get(k), np.ndarray) else out[k][:5])
