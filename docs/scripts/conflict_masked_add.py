"""The fast_math conflict lane's vector accumulate written ``acc + select(matched, term, -0.0)`` instead of
``select(matched, acc + term, acc)`` (the same value in every lane: x + -0.0 == x), to see whether LLVM emits fewer
vector ops a step (it lowered the select form to vmovaps + vaddps + a masked vmovaps on the inverted mask). Both
compiled in one process, checked against the exact sum, bench limit's timing (calls per sample calibrated,
REPEATS interleaved rotated rounds), best ns per input coordinate (ratio of medians to NumKong's sparse_dot).

    python docs/scripts/conflict_masked_add.py [REPEATS] [N] [DISTRIBUTION ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
os.environ["SPLYCE_DISABLE_DISK_CACHE"] = "1"
os.environ["SPLYCE_NO_TUNE"] = "1"
import statistics  # noqa: E402

import numpy as np  # noqa: E402
from mlir import ir  # noqa: E402
from mlir.dialects import arith, vector  # noqa: E402

import splyce  # noqa: E402
import splyce.passes.splyce_pass as sp  # noqa: E402
from splyce.bench import limit, sweep  # noqa: E402
from splyce.passes.conflict_lane import ConflictLaneBuilder  # noqa: E402
from splyce.passes.fast_lane import _neg_zero, _reassoc  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
NAMES = sys.argv[3:] or ["uniform x2", "uniform x10", "runs 64", "powerlaw 2"]


class AddSelected(ConflictLaneBuilder):
    def _body(self, args):
        out = super()._body(args)
        for slot in self.vector_acc_slots.values():
            sel = out[slot].owner                      # select(mask, acc + term, acc)
            mask, added, acc = sel.operands
            term = added.owner.operands[1]
            vt = ir.VectorType(term.type)
            ident = vector.broadcast(vt, _neg_zero(vt.element_type))
            out[slot] = arith.addf(acc, arith.select(mask, term, ident), fastmath=_reassoc())
        return out


import numkong as nk  # noqa: E402

for name in NAMES:
    dim, b, bv, c, cv = sweep.fiber_pair(name, N, np.int32, np.float32)
    A, B = limit._sealed_vector(dim, b, bv), limit._sealed_vector(dim, c, cv)
    _, ib, ic = np.intersect1d(b, c, assume_unique=True, return_indices=True)
    exact = float(bv[ib].astype(np.float64) @ cv[ic].astype(np.float64))
    cands = {}
    for var, cls in (("select", ConflictLaneBuilder), ("add selected", AddSelected)):
        sp.ConflictLaneBuilder = cls
        try:
            j = splyce.jit(limit._dot, fast_math=True, vector_width=16)
            asm = j.lower(A, B).as_text("asm")
            r = float(j(A, B))
        finally:
            sp.ConflictLaneBuilder = ConflictLaneBuilder
        assert abs(r - exact) <= 1e-4 * max(1.0, abs(exact)), (name, var)
        loop = limit.lane_loop(asm) or []
        cands[var] = (lambda j=j: j(A, B), r, 1e-4)
        print(f"  {var}: lane loop {len(loop)} instructions", flush=True)
    ub, uc = b.view(np.uint32), c.view(np.uint32)
    cands["numkong"] = (lambda: nk.sparse_dot(ub, bv, uc, cv), exact, 1e-3)
    t = limit._time_case(cands, REPEATS)
    t = {k: [x / (b.size + c.size) * 1e9 for x in v] for k, v in t.items()}
    med = {k: statistics.median(v) for k, v in t.items()}
    cells = [f"{k} {min(v):.3f} ({med[k] / med['numkong']:.2f})" for k, v in t.items()]
    print(f"{name}: " + "  ".join(cells), flush=True)
