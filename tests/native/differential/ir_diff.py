"""ir_diff.py A.pkl B.pkl [TAG ...]: how many IR texts of two merge_ir_dump.py runs differ."""
import pickle, sys
a, b = pickle.load(open(sys.argv[1], "rb")), pickle.load(open(sys.argv[2], "rb"))
tags = sys.argv[3:] 
keys = [k for k in a if not tags or k[0] in tags]
bad = [k for k in keys if a[k] != b.get(k)]
print(len(keys), "texts compared,", len(bad), "differ", bad[:5])
