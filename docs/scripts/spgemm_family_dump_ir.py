"""Dump every IR text of the SpGEMM family (all variants) from the tree on PYTHONPATH into a dir."""
import itertools, sys, os, hashlib
import numpy as np
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
from splyce.native import ir_text, spgemm_ir, spgemm_sorted, spgemm_sorted_map, spgemm_sample, memory_pool_ir, bsr_spgemm, compress, spgemm_network
W = (32, 64)
texts = {}
for v in ir_text.NUMERIC:
    t, mul, add, _ = ir_text.VALUE[v]
    for pa, ca, pb, cb, co in itertools.product(W, W, W, W, W):
        if (pa, ca, pb, cb) not in ((pa, pa, pb, pb),) and not (pa == 32 and pb == 32 and co == 32): pass
        idx = spgemm_ir.index_fields(pa, ca, pb, cb, co)
        for dense in (False, True):
            for kz in (False, True):
                for so in (False, True):
                    texts[f"prod_{t}_{pa}{ca}{pb}{cb}{co}_{dense}_{kz}_{so}"] = spgemm_ir.product_ir("K", dense, t, mul, add, kz, idx, so)
        for kind in ("flags", "map", "short"):
            for comp in (None, True, False):
                for kz in ((True, False) if kind == "flags" else (True,)):
                    try:
                        s = spgemm_sorted.rows_ir(dict(name="K", t=t, mul=mul, add=add, **idx), kind, compress=comp, keep_zeros=kz)
                    except TypeError:
                        s = spgemm_sorted.rows_ir(dict(name="K", t=t, mul=mul, add=add, **idx), kind, keep_zeros=kz)
                    texts[f"sorted_{kind}_{t}_{pa}{ca}{pb}{cb}{co}_{comp}_{kz}"] = s + spgemm_ir.backward_ir("K", t, idx)
        if True:
            texts[f"map_net_{t}_{pa}{ca}{pb}{cb}{co}"] = spgemm_sorted_map.rows_ir(dict(name="K", t=t, mul=mul, add=add, **idx), network=True)
    for a, c, b in itertools.product(W, W, W):
        pass
for pa, ca, pb in itertools.product(W, W, W):
    texts[f"flops_{pa}{ca}{pb}"] = spgemm_ir.flops_ir("F", pa, ca, pb)
    for cb in W:
        texts[f"sample_{pa}{ca}{pb}{cb}"] = spgemm_sample.sample_ir("S", pa, ca, pb, cb)
texts["pool"] = memory_pool_ir.ir()
for v in ir_text.NUMERIC:
    for ab, bb, cbits in itertools.product(W, W, W):
        for block in (None, (2, 3, 4), (1, 1, 1)):
            texts[f"bsr_num_{v}_{ab}{bb}{cbits}_{block}"] = bsr_spgemm.numeric_ir("N", v, ab, bb, cbits, block)
for ab, bb in itertools.product(W, W):
    texts[f"bsr_count_{ab}{bb}"] = bsr_spgemm.count_ir("C", ab, bb)
for v in (np.dtype(np.float64), np.dtype(np.float32)):
    for ix in ("i32", "i64"):
        texts[f"compress_{v}_{ix}"] = compress._pass(False, ir_text.SCALARS[v].t, ix) + compress._pass(True, ir_text.SCALARS[v].t, ix)
for k, s in texts.items():
    open(os.path.join(out, k), "w").write(s)
print(len(texts), "texts")
