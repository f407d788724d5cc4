"""Differential corpus of the elementwise (merge) family (merge-gen, issue 55): every op (multiply / add /
subtract) x CSR / CSC / A.T / BSR (blocks 1x1 .. 9x9) x value dtypes (bool, complex, int16 included) x int32 /
int64 indices x same / different / empty / disjoint / banded patterns x explicit zeros x Inf / NaN / -0.0 x
non-canonical inputs x 1-3 threads, through the drop-ins, the jit's kept-zeros kernels, the CSC pass (forced
lanes and prefetch), BSR op BSR and the transpose; scipy's results beside them. Raw buffers pickled.

Not a test (it needs two checkouts): run it under each and compare with merge_compare.py, e.g.
    PYTHONPATH=/work/main python tests/native/differential/merge_corpus.py old.pkl
    PYTHONPATH=. python tests/native/differential/merge_corpus.py new.pkl
    python tests/native/differential/merge_compare.py old.pkl new.pkl   # bit for bit
    python tests/native/differential/merge_compare.py new.pkl           # against scipy
"""
import pickle, sys, itertools, warnings
import numpy as np
import scipy.sparse as sps

warnings.simplefilter("ignore")
import splyce
from splyce.native.elementwise import kept, csc as ncsc
from splyce.native import elementwise as ne, transpose as ntr, bsr_binop

def raw(x):
    if isinstance(x, tuple):
        return tuple(raw(v) for v in x)
    if isinstance(x, np.ndarray):
        return ("nd", x.dtype.str, x.shape, x.tobytes())
    if sps.issparse(x):
        f = x.format
        if f in ("csr", "csc", "bsr"):
            return (type(x).__name__, x.shape, raw(x.data), raw(x.indices), raw(x.indptr))
        if f == "coo":
            return (type(x).__name__, x.shape, raw(x.data), raw(x.coords if hasattr(x, "coords") else (x.row, x.col)))
        return (type(x).__name__, x.shape, raw(x.toarray()))
    if isinstance(x, (int, np.integer)):
        return ("int", int(x))
    if x is None:
        return None
    return ("obj", repr(x))

def call(f, *a, **k):
    try:
        return raw(f(*a, **k))
    except Exception as e:  # noqa
        return ("exc", type(e).__name__, str(e)[:200])

DTYPES = [np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128, np.int16]
rng = np.random.default_rng(2026)

def values(n, dtype, special):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(n) < 0.7
    if dtype.kind in "iu":
        v = rng.integers(-3, 4, n).astype(dtype)   # small: many zero results (x - x, x * 0)
        return v
    v = rng.integers(-3, 4, n).astype(dtype)
    if dtype.kind == "c":
        v = v + 1j * rng.integers(-1, 2, n)
    if special and n:
        k = max(1, n // 20)
        idx = rng.choice(n, size=min(n, 3 * k), replace=False)
        v[idx[:k]] = np.inf
        v[idx[k:2 * k]] = np.nan
        v[idx[2 * k:]] = -0.0
    return v.astype(dtype)

def rand(m, n, density, dtype, idx, special=False, cls=sps.csr_array):
    x = sps.random_array((m, n), density=density, format="csr", rng=rng, dtype=np.float64)
    x = sps.csr_array(x)
    x.data = values(len(x.data), dtype, special)
    x.indices = x.indices.astype(idx); x.indptr = x.indptr.astype(idx)
    return cls(x) if cls is not sps.csr_array else x

def with_idx(x, idx):
    x = x.copy()
    x.indices = x.indices.astype(idx); x.indptr = x.indptr.astype(idx)
    return x

def pairs(dtype, idx, special):
    """(label, a, b) CSR pairs of assorted patterns."""
    out = []
    for (m, n, d) in ((0, 5, 0.5), (1, 1, 1.0), (7, 9, 0.4), (60, 50, 0.1), (130, 130, 0.05), (40, 300, 0.3)):
        a = rand(m, n, d, dtype, idx, special)
        out.append((f"diff{m}x{n}", a, rand(m, n, d, dtype, idx, special)))
        b = a.copy(); b.data = values(len(b.data), dtype, special)
        out.append((f"same{m}x{n}", a, b))
        out.append((f"self{m}x{n}", a, a))
        out.append((f"empty{m}x{n}", a, with_idx(sps.csr_array((m, n), dtype=dtype), idx)))
    # disjoint: left half columns vs right half
    a = rand(50, 60, 0.2, dtype, idx, special); b = rand(50, 60, 0.2, dtype, idx, special)
    a = sps.csr_array(a[:, :30].tocsr()); a = sps.csr_array(sps.hstack([a, sps.csr_array((50, 30), dtype=dtype)]).tocsr())
    b = sps.csr_array(sps.hstack([sps.csr_array((50, 30), dtype=dtype), b[:, 30:]]).tocsr())
    out.append(("disjoint", with_idx(a, idx), with_idx(b, idx)))
    # explicit zeros stored
    a = rand(40, 40, 0.3, dtype, idx, special); a.data[::3] = 0
    b = rand(40, 40, 0.3, dtype, idx, special); b.data[::4] = 0
    out.append(("zeros", a, b))
    # banded / blocks (window fast paths of the merge)
    for w in (3, 70):
        a = with_idx(sps.csr_array(sps.diags([np.ones(300)] * (2 * w + 1), range(-w, w + 1), shape=(300, 300))), idx)
        a.data = values(len(a.data), dtype, special)
        b = a.copy(); b.data = values(len(b.data), dtype, special)
        b = with_idx(sps.csr_array(b.multiply(sps.csr_array(rng.random((300, 300)) < 0.6))), idx)
        out.append((f"band{w}", a, b))
    return out

res = {}
ops = ("multiply", "add", "subtract")
fns = dict(multiply=splyce.multiply, add=splyce.add, subtract=splyce.subtract)
scipy_fn = dict(multiply=lambda a, b: a.multiply(b), add=lambda a, b: a + b, subtract=lambda a, b: a - b)

for dtype, idx, special in itertools.product(DTYPES, (np.int32, np.int64), (False, True)):
    if special and np.dtype(dtype).kind not in "fc":
        continue
    for label, a, b in pairs(dtype, idx, special):
        for op in ops:
            key = (np.dtype(dtype).name, np.dtype(idx).name, special, label, op)
            for th in (1, 2):
                res[key + ("csr", th)] = call(fns[op], a, b, threads=th)
            res[key + ("csr", "mat")] = call(fns[op], sps.csr_matrix(a), sps.csr_matrix(b))
            if a.shape[0] == a.shape[1]:
                res[key + ("aT", 1)] = call(fns[op], a, a.T)
                res[key + ("aT2", 2)] = call(fns[op], a, a.T, threads=2)
            res[key + ("csc", 1)] = call(fns[op], a, b.tocsc())
            res[key + ("csc_l", 1)] = call(fns[op], a.tocsc(), b)
            res[key + ("scipy",)] = call(scipy_fn[op], a, b)
            # the jit's semantics (kept zeros), straight on the native kernels
            if ne.keep_supported(dtype) and not (op == "subtract" and np.dtype(dtype) == np.bool_) and a.nnz + b.nnz:
                pa = (a.data, a.indices, a.indptr); pb = (b.data, b.indices, b.indptr)
                res[key + ("kept_rows", 1)] = call(kept.rows, op, pa, pb, dtype)
                res[key + ("kept_rows", 2)] = call(kept.rows, op, pa, pb, dtype, threads=2)
                bc = b.tocsc(); bc.indices = bc.indices.astype(idx); bc.indptr = bc.indptr.astype(idx)
                res[key + ("kept_csc", 1)] = call(kept.with_csc, op, pa, (bc.data, bc.indices, bc.indptr), dtype, *a.shape)
                if np.dtype(dtype).kind != "c":
                    for lanes in (0, 8, 16) if np.dtype(idx).itemsize == 4 else (0, 8):
                        for pf in (0, 4):
                            for kz in (False, True):
                                res[key + ("csc_direct", lanes, pf, kz)] = call(
                                    ncsc.csr_with_csc, op, pa, (bc.data, bc.indices, bc.indptr), np.dtype(dtype),
                                    *a.shape, prefetch=pf, lanes=lanes, keep_zeros=kz)

# large: the ranged / threaded / vector paths (>= 2 * MIN_CHUNK entries)
for dtype, idx, special in ((np.float64, np.int32, False), (np.float64, np.int32, True), (np.float32, np.int64, False),
                            (np.int64, np.int32, False), (np.int32, np.int64, False), (np.bool_, np.int32, False)):
    n = 3000
    a = rand(n, n, 0.012, dtype, idx, special)
    b = rand(n, n, 0.012, dtype, idx, special)
    s = with_idx(sps.csr_array(a + a.T), idx)      # symmetric pattern
    s.data = values(len(s.data), dtype, special)
    for op in ops:
        if op == "subtract" and np.dtype(dtype) == np.bool_:
            continue
        key = ("big", np.dtype(dtype).name, np.dtype(idx).name, special, op)
        for th in (1, 2):
            res[key + ("ab", th)] = call(fns[op], a, b, threads=th)
            res[key + ("sT", th)] = call(fns[op], s, s.T, threads=th)
            res[key + ("aT", th)] = call(fns[op], a, a.T, threads=th)
            res[key + ("abc", th)] = call(fns[op], a, b.tocsc(), threads=th)
            pa = (a.data, a.indices, a.indptr)
            res[key + ("kept_rows", th)] = call(kept.rows, op, pa, (b.data, b.indices, b.indptr), dtype, threads=th)
            sc = s.T
            res[key + ("kept_csc", th)] = call(kept.with_csc, op, (s.data, s.indices, s.indptr),
                                               (sc.data, sc.indices, sc.indptr), dtype, n, n, threads=th)
            bc = b.tocsc()
            res[key + ("kept_csc_ab", th)] = call(kept.with_csc, op, pa, (bc.data, bc.indices, bc.indptr), dtype, n, n, threads=th)
            res[key + ("ranges", th)] = call(ncsc.csr_with_csc_ranges, op, (s.data, s.indices, s.indptr),
                                             (sc.data, sc.indices, sc.indptr), np.dtype(dtype), n, n, th + 1)
        res[key + ("scipy_ab",)] = call(scipy_fn[op], a, b)
        res[key + ("scipy_sT",)] = call(scipy_fn[op], s, s.T)
        res[key + ("scipy_aT",)] = call(scipy_fn[op], a, a.T)

# non-canonical CSR inputs (unsorted, duplicates) through the drop-in
for dtype in (np.float64, np.int32):
    a = rand(30, 30, 0.2, dtype, np.int32)
    b = rand(30, 30, 0.2, dtype, np.int32)
    u = a.copy(); 
    for r in range(30):
        s0, s1 = u.indptr[r], u.indptr[r + 1]
        u.indices[s0:s1] = u.indices[s0:s1][::-1].copy(); u.data[s0:s1] = u.data[s0:s1][::-1].copy()
    u.has_sorted_indices = False
    d = sps.csr_array((np.concatenate([a.data, a.data[:5]]), np.concatenate([a.indices, a.indices[:5]]),
                       np.concatenate([a.indptr[:1], a.indptr[1:] + 5])), shape=a.shape) if a.nnz >= 5 else a
    for op in ops:
        for lab, x in (("unsorted", u), ("dups", d)):
            key = ("noncanon", np.dtype(dtype).name, lab, op)
            res[key + ("l",)] = call(fns[op], x, b)
            res[key + ("r",)] = call(fns[op], b, x)
            res[key + ("rc",)] = call(fns[op], b, x.tocsc())
            res[key + ("scipy",)] = call(scipy_fn[op], x, b)

# BSR
for dtype, idx, (R, C) in itertools.product((np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128),
                                            (np.int32, np.int64), ((1, 1), (2, 2), (3, 2), (4, 4), (8, 8), (9, 9))):
    for special in (False, True) if np.dtype(dtype).kind == "f" else (False,):
        mb, nb = 12, 10
        def bsr(dens, cls=sps.bsr_array):
            pat = sps.random_array((mb, nb), density=dens, format="csr", rng=rng)
            nnzb = pat.nnz
            data = values(nnzb * R * C, dtype, special).reshape(nnzb, R, C)
            if nnzb:
                data[0] = 0      # an all-zero block
            x = cls((data, pat.indices.astype(idx), pat.indptr.astype(idx)), shape=(mb * R, nb * C))
            return x
        a, b = bsr(0.3), bsr(0.3)
        b2 = a.copy(); b2.data = values(b2.data.size, dtype, special).reshape(b2.data.shape)
        e = sps.bsr_array((mb * R, nb * C), blocksize=(R, C), dtype=dtype)
        # unsorted block columns (non-canonical): reverse every block row
        u = a.copy()
        for r in range(mb):
            s0, s1 = u.indptr[r], u.indptr[r + 1]
            u.indices[s0:s1] = u.indices[s0:s1][::-1].copy(); u.data[s0:s1] = u.data[s0:s1][::-1].copy()
        u.has_sorted_indices = False
        for op in ops:
            if op == "subtract" and np.dtype(dtype) == np.bool_:
                continue
            key = ("bsr", np.dtype(dtype).name, np.dtype(idx).name, (R, C), special, op)
            for lab, x, y in (("ab", a, b), ("same", a, b2), ("self", a, a), ("empty", a, e), ("unsorted", u, b),
                              ("mat", sps.bsr_matrix(a), sps.bsr_matrix(b))):
                res[key + (lab,)] = call(fns[op], x, y)
                res[key + (lab, "scipy")] = call(scipy_fn[op], x, y)
                res[key + (lab, "native")] = call(bsr_binop.bsr_binop, op, (x.indptr, x.indices, x.data),
                                                  (y.indptr, y.indices, y.data), nb) if np.dtype(dtype).kind != "c" and np.dtype(dtype) != np.bool_ else None

# transpose
for idx, dtype in itertools.product((np.int32, np.int64), (np.float64, np.float32, np.int32, np.int64)):
    for (m, n, d) in ((0, 3, 0.5), (5, 7, 0.5), (300, 200, 0.05), (3000, 2500, 0.012)):
        a = rand(m, n, d, dtype, idx, np.dtype(dtype).kind == "f")
        for th in (1, 2, 3):
            res[("transpose", np.dtype(idx).name, np.dtype(dtype).name, m, n, th)] = call(
                ntr.transpose, a.data, a.indices, a.indptr, m, n, th)

with open(sys.argv[1], "wb") as f:
    pickle.dump(res, f)
print(len(res), "cases")
