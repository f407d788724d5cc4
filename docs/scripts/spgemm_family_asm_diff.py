"""For IR texts that differ between two dump dirs: compare the O3 assembly (names in the IR do not reach it)."""
import os, sys, re
from splyce.native import codegen
old, new = sys.argv[1], sys.argv[2]
only = sys.argv[3] if len(sys.argv) > 3 else ""
target = codegen.host_target(); opts = codegen.CodegenOptions(opt_level=3, slp_vectorize=True)
names = sorted(set(os.listdir(old)) | set(os.listdir(new)))
same_text = diff_text_same_asm = diff_asm = 0; bad = []
def asm(text):
    m, tm = codegen.optimize(text, target, opts)
    a = codegen.emit_assembly(m, tm)
    return "\n".join(l for l in a.splitlines() if not l.strip().startswith(("#", ".file", ".ident")) )
for n in names:
    if only and only not in n: continue
    if not (os.path.exists(os.path.join(old, n)) and os.path.exists(os.path.join(new, n))):
        bad.append(("missing", n)); continue
    a, b = open(os.path.join(old, n)).read(), open(os.path.join(new, n)).read()
    if a == b: same_text += 1; continue
    if asm(a) == asm(b): diff_text_same_asm += 1
    else: diff_asm += 1; bad.append(("asm differs", n))
print(f"identical IR {same_text}, IR differs but same O3 asm {diff_text_same_asm}, asm differs {diff_asm}")
for x in bad[:40]: print(" ", x)
