"""merge_compare.py A.pkl [B.pkl]: two runs of merge_corpus.py compared bit for bit, or one run's drop-in results
against scipy's (values, dtype, class and whether the buffers are identical)."""
import pickle, sys
import numpy as np
import scipy.sparse as sps
old = pickle.load(open(sys.argv[1], "rb"))
if len(sys.argv) > 2:
    new = pickle.load(open(sys.argv[2], "rb"))
    assert old.keys() == new.keys(), "key sets differ"
    bad = [k for k in old if old[k] != new[k]]
    print(f"old vs new: {len(old)} cases, {len(bad)} differ")
    for k in bad[:20]:
        print("  DIFF", k, str(old[k])[:150], "|", str(new[k])[:150])
    sys.exit(0)

def arr(r):
    _, s, shape, b = r
    return np.frombuffer(b, dtype=np.dtype(s)).reshape(shape)

def dense(r):
    if r is None or r[0] == "exc":
        return r
    name, shape = r[0], r[1]
    if name.startswith(("csr", "csc")):
        data, ind, ptr = arr(r[2]), arr(r[3]), arr(r[4])
        cls = sps.csr_array if name.startswith("csr") else sps.csc_array
        return cls((data, ind, ptr), shape=shape).toarray()
    if name.startswith("bsr"):
        return sps.bsr_array((arr(r[2]), arr(r[3]), arr(r[4])), shape=shape).toarray()
    if name.startswith("coo"):
        return None
    if name == "nd":
        return arr(r)
    return None

fails = exact = total = 0
for k, v in old.items():
    if k[-1] != "scipy" and "scipy" not in k[-1:]:
        continue
for k, ref in old.items():
    # drop-in cases with a scipy reference beside them
    if k[0] == "big" or k[0] in ("noncanon", "bsr", "transpose"):
        continue
    if len(k) == 7 and k[5] in ("csr", "csc", "csc_l"):
        sk = k[:5] + ("scipy",)
        r = old[sk]
        total += 1
        a, b = dense(v := ref), dense(r)
        if r[0] == "exc" or v[0] == "exc":
            if (r[0] == "exc") != (v[0] == "exc"):
                fails += 1; print("EXC mismatch", k, str(v)[:120], str(r)[:120])
            continue
        if a is None or b is None: continue
        if a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=True) or (k[5] == "csr" and k[6] != "mat" and v[0].split("_")[1] != r[0].split("_")[1]):
            fails += 1; print("VAL mismatch", k, v[0], r[0], a.dtype, b.dtype)
        elif k[5] == "csr" and v[2:] == r[2:]:
            exact += 1
for k, v in old.items():
    if k[0] in ("big", "noncanon", "bsr") and k[-1] != "scipy" and not (isinstance(k[-1], str) and k[-1].startswith("scipy")) and k[-1] != "native" and not (k[0] == "big" and k[-2].startswith(("kept", "ranges"))):
        if k[0] == "big":
            sk = k[:5] + ("scipy_" + k[5],) if k[5] in ("ab", "sT", "aT") else None
        elif k[0] == "noncanon":
            sk = k[:4] + ("scipy",) if k[4] == "l" else None
        else:
            sk = k + ("scipy",)
        if sk is None or sk not in old: continue
        r = old[sk]; total += 1
        if r[0] == "exc" or v[0] == "exc":
            if (r[0] == "exc") != (v[0] == "exc"):
                fails += 1; print("EXC mismatch", k, str(v)[:120], str(r)[:120])
            continue
        a, b = dense(v), dense(r)
        if a is None or b is None: continue
        if a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=True):
            fails += 1; print("VAL mismatch", k, v[0], r[0])
        elif v[2:] == r[2:]:
            exact += 1
print(f"vs scipy: {total} compared, {fails} differ in values/dtype/exceptions, {exact} with identical buffers")
