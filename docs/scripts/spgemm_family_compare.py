"""Compare two outputs of spgemm_family_corpus.py bit for bit. Usage: compare.py OLD.pkl NEW.pkl"""
import pickle, sys
import numpy as np
a, b = (pickle.load(open(path, "rb")) for path in sys.argv[1:3])
def eq(x, y):
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(eq(u, v) for u, v in zip(x, y))
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    return x == y
diff = [k for k in a if k not in b or not eq(a[k], b[k])]
print(len(a), "old outputs,", len(b), "new;", len(diff), "differ;", len(set(b) - set(a)), "only new")
for k in diff[:10]: print(" ", k)
