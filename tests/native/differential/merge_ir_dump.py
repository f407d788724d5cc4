"""merge_ir_dump.py OUT.pkl: the LLVM IR text of every variant of the family's kernel builders (merge, same
pattern, CSC pass, BSR op BSR canonical / general, transpose), nothing compiled; compare two checkouts' dumps
with ir_diff.py (byte-identical IR: the same machine code)."""
import itertools, pickle, sys
import numpy as np
from splyce.native import codegen, ir_text
texts = []
def fake(llvm_ir, signatures, slp_vectorize=True):
    texts.append(llvm_ir)
    return {name: None for name in signatures}
codegen.compile_host_helpers = fake
from splyce.native import object_calls
object_calls.compile_on_objects = lambda text, sig, name, kinds: texts.append(text)
from splyce.native import bsr_binop, transpose
bsr_binop._compiled = object_calls.compile_on_objects
from splyce.native.elementwise import csc, merge
try:
    from splyce.native.elementwise import same
except ImportError:
    same = merge
out = {}
def run(tag, fn, *args):
    texts.clear(); fn.__wrapped__(*args); out[(tag,) + args] = "\n".join(texts)
W = (32, 64)
for v in ir_text.SCALARS:
    for op in ("multiply", "add", "subtract"):
        if op == "subtract" and ir_text.SCALARS[v].sub is None:
            continue
        for p, c, inter, direct, keep in itertools.product(W, W, (False, True), (False, True), (False, True)):
            run("merge", merge._kernel, op, v, p, c, inter, direct, keep)
        for c, keep in itertools.product(W, (False, True)):
            run("same", same._same_kernel, op, v, c, keep)
        for bits, pf, ranged, lanes, keep in itertools.product(W, (0, 32), ("", "first", "later"), (0, 8, 16), (False, True)):
            run("csc", csc._csc_pass_kernel, op, v, bits, pf, ranged, lanes, 64, 3, keep)
for v in ir_text.NUMERIC:
    for op in ("add", "subtract", "multiply"):
        for a, b, c, rc in itertools.product(W, W, W, (1, 4, 6, 64, None)):
            run("bsr", bsr_binop._kernel, op, v, a, b, c, rc)
            if hasattr(bsr_binop, "_general_kernel"):
                run("bsrg", bsr_binop._general_kernel, op, v, a, b, c, rc)
            else:
                texts.clear(); bsr_binop._kernel.__wrapped__(op, v, a, b, c, rc, True); out[("bsrg", op, v, a, b, c, rc)] = "\n".join(texts)
for bits, vb in itertools.product(W, (8, 16, 32, 64)):
    run("tr", transpose._kernels, bits, vb)
pickle.dump(out, open(sys.argv[1], "wb"))
print(len(out))
