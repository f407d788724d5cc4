"""Old vs new kernels' optimized assembly (native_family_speed.py's loading, ``$SPLYCE_OLD_NATIVE``): the
instruction count of every function, old and new (deterministic, no timing)."""
import os, re, sys, types
import numpy as np
sys.argv = ["x"]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_family_speed.py")).read().split("names = sys.argv")[0])
from splyce.native.codegen import CodegenOptions, emit_assembly, host_target, optimize
f64 = np.dtype(np.float64)

def count(text):
    module, tm = optimize(text, host_target(), CodegenOptions(opt_level=3))
    asm = emit_assembly(module, tm)
    out = {}
    for m in re.finditer(r"^(\w+):\n(.*?)\.Lfunc_end", asm, re.S | re.M):
        out[m[1]] = len([l for l in m[2].splitlines() if l.startswith("\t") and not l.startswith("\t.")])
    return out

def texts(mods, o):
    sp, ms, md = mods["spmv"], mods["masked_sum"], mods["masked"]
    rows = mods.get("spmv_rows") or __import__("splyce.native.spmv_rows", fromlist=["x"])
    r = {}
    for v in ("rows", "grouped", "flat"):
        r["objects_" + v] = sp.spmv_objects_ir(f64, 32, 32, v)[0]
    r["spmm_any"] = rows.spmm_ir("k", f64, 32, 32, None, True)
    r["spmm_8"] = rows.spmm_ir("k", f64, 32, 32, 8, True)
    r["spmv_r1"] = rows.spmv_ir("k", f64, 32, 32, 1, False)
    if o:
        r["masked"] = md._masked_ir("k", f64, 32, 32, 32, 32, 32, 32, False)
        r["kept"] = md._masked_ir("k", f64, 32, 32, 32, 32, 32, 32, True, "abm")
        r["sum"] = ms._masked_sum_ir("k", f64, 32, 32, 32, 32, 32, 32)
        r["count"] = ms._hit_count_ir("k", 32)
        r["products"] = ms._products_ir("k", 32)
    else:
        r["masked"] = md.masked_ir("k", f64, (32,) * 6, "scipy")
        r["kept"] = md.masked_ir("k", f64, (32,) * 6, "kept", "abm")
        r["sum"] = md.masked_ir("k", f64, (32,) * 6, "sum", "abc")
        r["count"] = md.masked_ir("k", f64, (32,) * 6, "count")
        r["products"] = ms.products_ir("k", 32)
    for fac in (None, "mxy"):
        for ahead in (0, 16):
            r[f"sddmm_{fac}_{ahead}"] = mods["sddmm"]._sddmm_ir("k", f64, 32, 32, (8, 4, 2), fac, ahead)
    return r

to, tn = texts(old, True), texts(dict(new, spmv_rows=None), False)
for k in to:
    co, cn = count(to[k]), count(tn[k])
    print(f"{k:22s}", "same" if co == cn else f"old {co}\n{'':22s} new {cn}")
