"""Differential corpus for the SpGEMM family: run the kernels of the tree on PYTHONPATH, save outputs (pickle),
and check them against scipy. Usage: corpus.py OUT.pkl"""
import sys, pickle, itertools, hashlib
import numpy as np, scipy.sparse as sp
from splyce.native import spgemm as S, bsr_spgemm, compress
rng = np.random.default_rng(55)
DT = [np.float64, np.float32, np.int64, np.int32]

def powerlaw(m, n, nnz):
    r = (rng.pareto(1.2, nnz) * 3).astype(np.int64) % m
    c = rng.integers(0, n, nnz)
    return sp.coo_matrix((np.ones(nnz), (r, c)), shape=(m, n)).tocsr()

def banded(n, w):
    return sp.diags([np.ones(n - abs(k)) for k in range(-w, w + 1)], list(range(-w, w + 1)), shape=(n, n)).tocsr()

def shapes():
    yield "0x0", sp.csr_matrix((0, 0)), sp.csr_matrix((0, 0))
    yield "1xN", sp.random(1, 50, 0.3, random_state=1, format="csr"), sp.random(50, 40, 0.1, random_state=2, format="csr")
    yield "Nx1", sp.random(60, 1, 0.3, random_state=3, format="csr"), sp.random(1, 70, 0.3, random_state=4, format="csr")
    yield "emptyrows", sp.csr_matrix(sp.random(80, 90, 0.05, random_state=5).toarray() * (np.arange(80)[:, None] % 3 == 0)), \
        sp.csr_matrix(sp.random(90, 70, 0.05, random_state=6).toarray() * (np.arange(70)[None, :] % 4 == 0))
    for d in (1e-4, 1e-3, 1e-2, 0.1, 0.3):
        n = 300 if d >= 0.1 else 2000
        yield f"rand{d}", sp.random(n, n, d, random_state=int(d * 1e4), format="csr"), sp.random(n, n + 7, d, random_state=9, format="csr")
    p = powerlaw(3000, 3000, 30000); yield "powerlaw", p, p.T.tocsr()
    b = banded(4000, 4); yield "banded", b, b
    b2 = banded(600, 40); yield "banded_wide", b2, b2
    yield "dense_acc", sp.random(200, 300, 0.4, random_state=11, format="csr"), sp.random(300, 500, 0.3, random_state=12, format="csr")

    # cancelling sums and -0.0 / NaN
    a = sp.csr_matrix(np.array([[1., -1., 0.], [2., 0, -0.0], [np.nan, 1, 1]])); yield "cancel", a, sp.csr_matrix(np.array([[1., 1], [1., 1], [0, 1]]))

def noncanon(a):
    """unsorted + duplicate entries within rows"""
    a = a.tocsr().copy()
    if a.nnz == 0: return None
    idx, dat, ptr = [], [], [0]
    for i in range(a.shape[0]):
        s, e = a.indptr[i], a.indptr[i + 1]
        c, v = a.indices[s:e][::-1], a.data[s:e][::-1]
        if e - s >= 1:
            c = np.concatenate([c, c[:1]]); v = np.concatenate([v, v[:1] * 0.5])
        idx.append(c); dat.append(v); ptr.append(ptr[-1] + len(c))
    return sp.csr_matrix((np.concatenate(dat), np.concatenate(idx), np.array(ptr)), shape=a.shape)

out, fails = {}, []
def cast(m, dt, it):
    m = m.copy()
    vals = m.data
    if np.dtype(dt).kind in "iu":
        vals = np.round(np.nan_to_num(vals) * 7 - 3)
    return (np.ascontiguousarray(vals.astype(dt)), m.indices.astype(it), m.indptr.astype(it))

for (name, A, B), dt, (ia, ib) in itertools.product(list(shapes()), DT, [(np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64)]):
    if name == "big_threads" and (dt not in (np.float64,) ):
        continue
    variants = [("noncanon" if nc else "canon", nc) for nc in (False, True)]
    for vname, nc in variants:
        A2 = noncanon(A) if nc else A
        if A2 is None: continue
        a, b = cast(A2, dt, ia), cast(B, dt, ib)
        ref = None
        try:
            ref = (sp.csr_matrix((a[0], a[1], a[2]), shape=A2.shape) @ sp.csr_matrix((b[0], b[1], b[2]), shape=B.shape))
        except Exception as e:
            pass
        for kw in [dict(), dict(scipy_order=True), dict(keep_zeros=True), dict(keep_zeros=True, sort=True), dict(sort=None), dict(keep_zeros=True, sort=None)]:
            for th in ((1, 2, 3) if name in ("big_threads", "powerlaw", "banded") else (1,)):
                if nc and kw.get("sort"):  # sorted kernels: canonical B only matters; A noncanon fine
                    pass
                key = (name, np.dtype(dt).name, np.dtype(ia).name, np.dtype(ib).name, vname, tuple(sorted(kw.items())), th)
                try:
                    p = S.spgemm(a, b, B.shape[1], dt, threads=th, **kw)
                    res = (p.data.copy(), p.indices.copy(), p.indptr.copy(), p.kernel)
                    out[key] = (hashlib.sha1(res[0].tobytes()).hexdigest(), hashlib.sha1(res[1].tobytes()).hexdigest(), hashlib.sha1(res[2].tobytes()).hexdigest(), res[3])
                    if ref is not None:
                        got = sp.csr_matrix((p.data, p.indices, p.indptr), shape=(A2.shape[0], B.shape[1]))
                        if not kw.get("keep_zeros"):
                            got.sum_duplicates(); r2 = ref.copy(); r2.sum_duplicates()
                            ok = np.allclose(got.toarray(), r2.toarray(), equal_nan=True, rtol=1e-4 if dt == np.float32 else 1e-10)
                            if kw.get("scipy_order") and ok and not nc:
                                ok = np.array_equal(p.indices, ref.indices) and np.array_equal(p.data, ref.data, equal_nan=True)
                        else:
                            ok = np.allclose(got.toarray(), ref.toarray(), equal_nan=True, rtol=1e-4 if dt == np.float32 else 1e-10)
                        if not ok: fails.append(("vs scipy", key))
                except Exception as e:
                    out[key] = ("raised", type(e).__name__, str(e)[:200])
# BSR
for dt in DT:
    for (R, K, C) in ((1, 1, 1), (2, 3, 4), (8, 8, 8), (3, 1, 2)):
        for d in (0.0, 0.05, 0.3):
            A = sp.random(R * 30, K * 20, d, random_state=7, format="csr").astype(dt) 
            B = sp.random(K * 20, C * 25, d, random_state=8, format="csr").astype(dt)
            if np.dtype(dt).kind in "iu":
                A.data = np.round(A.data * 9 + 1).astype(dt); B.data = np.round(B.data * 9 + 1).astype(dt)
            Ab, Bb = A.tobsr((R, K)), B.tobsr((K, C))
            for it in (np.int32, np.int64):
                key = ("bsr", np.dtype(dt).name, R, K, C, d, np.dtype(it).name)
                r = bsr_spgemm.bsr_matmat((Ab.indptr.astype(it), Ab.indices.astype(it), np.ascontiguousarray(Ab.data)),
                                          (Bb.indptr.astype(it), Bb.indices.astype(it), np.ascontiguousarray(Bb.data)), Bb.shape[1] // C)
                out[key] = tuple(x.copy() for x in r)
                ref = Ab @ Bb
                if not (np.array_equal(r[0], ref.indptr) and np.array_equal(r[1], ref.indices) and np.array_equal(r[2], ref.data)):
                    fails.append(("bsr vs scipy", key))
    # bad index -> None
bad = (np.array([0, 1]), np.array([5]), np.ones((1, 2, 2)))
out["bsr_bad"] = bsr_spgemm.bsr_matmat(bad, (np.array([0, 1]), np.array([0]), np.ones((1, 2, 2))), 1)
for dt in (np.float64, np.float32):
    for it in (np.int32, np.int64):
        blk = rng.standard_normal((37, 53)).astype(dt); blk[blk < 0.8] = 0; blk[0, :3] = [-0.0, np.nan, 0]
        r = compress.dense_to_csr(blk, it); out[("compress", np.dtype(dt).name, np.dtype(it).name)] = r
        ref = sp.csr_matrix(blk)
        if not (np.array_equal(r[0], ref.data, equal_nan=True) and np.array_equal(r[1], ref.indices)): fails.append(("compress", dt, it))
pickle.dump(out, open(sys.argv[1], "wb"))
print(len(out), "outputs;", len(fails), "fails vs scipy")
for f in fails[:30]: print(" ", f)
