"""What bounds the two-finger fast lane (docs/passes.md, "What bounds the lane, measured").

For ``bench limit``'s sparse dot (int32 coordinates, f64 values, 2^20 : 2^20 coordinates, 1 / 10 / 50 %
overlap, default options: n = 4, phases 7, strict sum):

* instructions per lane step: the fast lane's loop in the kernel's machine code (``lower(...).as_text("asm")``:
  the loop from its label to the back edge, every exit not taken), and llvm-mca's estimate for that loop on
  this CPU (``-mcpu=native`` or znver4), when an llvm-mca is found (PATH, or the ``llvm`` package's bin);
* steps and coordinates per step: the lane's advance rule replayed in Python (each finger moves past its n
  coordinates that are <= the other's n-th: ``fast_lane.py``), checked against ``splyce.profile``'s count of
  the coordinates the fast lane consumed;
* time: best of REPEATS whole calls (thread CPU time), cycles at ``bench limit``'s calibrated clock.

There are no hardware counters in these VMs (perf sees none, valgrind cannot run AVX-512), so the cycles per
step are time x clock / steps and the instructions are counted in the code, not by the CPU.

    python docs/scripts/lane_steps.py [log2 length, default 20]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # this checkout's splyce
import numpy as np  # noqa: E402

import splyce  # noqa: E402
from splyce.bench.limit import _jit, _sealed_vector, clock_ghz, fiber_pair, lane_loop  # noqa: E402

N = 4           # the default vector width
REPEATS = 9


def llvm_mca() -> str | None:
    found = shutil.which("llvm-mca")
    if found:
        return found
    try:
        import llvm  # the llvm wheel's tools, when installed

        cand = Path(llvm.__file__).parent / "bin" / "llvm-mca"
        return str(cand) if cand.exists() else None
    except ImportError:
        return None


def mca(body: list[str]) -> str:
    tool = llvm_mca()
    if tool is None:
        return "llvm-mca: not found"
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(body) + "\n")
    for cpu in ("native", "znver4"):
        proc = subprocess.run([tool, f"-mcpu={cpu}", "-iterations=1000", f.name], capture_output=True, text=True)
        if proc.returncode == 0:
            keep = [ln for ln in proc.stdout.splitlines()
                    if ln.startswith(("Iterations", "Instructions", "Total Cycles", "Total uOps", "IPC",
                                      "Block RThroughput", "Dispatch Width"))]
            return f"llvm-mca -mcpu={cpu}: " + "; ".join(" ".join(k.split()) for k in keep)
    return "llvm-mca failed: " + proc.stderr[-300:]


def replay(b: np.ndarray, c: np.ndarray) -> tuple[int, int]:
    """(steps, coordinates consumed) of the fast lane: while both fibers have n coordinates left, each
    finger moves past its next n coordinates that are <= the other's n-th."""
    pb = pc = steps = 0
    nb, nc = b.size, c.size
    bl, cl = b.tolist(), c.tolist()
    while nb - pb >= N and nc - pc >= N:
        last_b, last_c = bl[pb + N - 1], cl[pc + N - 1]
        db = sum(1 for x in bl[pb:pb + N] if x <= last_c)
        dc = sum(1 for x in cl[pc:pc + N] if x <= last_b)
        pb, pc, steps = pb + db, pc + dc, steps + 1
    return steps, pb + pc


def main():
    n = 1 << (int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    ghz, how = clock_ghz()
    print(f"clock {ghz:.2f} GHz ({how}); fibers {n} : {n} int32 / f64; n = {N}, default phases")
    body = None
    for overlap in (0.01, 0.10, 0.50):
        dim, b, bv, c, cv = fiber_pair(n, overlap, 1, np.int32, np.float64)
        A, B = _sealed_vector(dim, b, bv), _sealed_vector(dim, c, cv)
        lane = _jit()
        if body is None:
            body = lane_loop(lane.lower(A, B).as_text("asm"))
            if body is None:
                raise SystemExit("no fast-lane loop found in the machine code")
            print(f"lane step: {len(body)} instructions ({sum(x.startswith('v') for x in body)} vector, "
                  f"{sum(x.startswith('j') for x in body)} branches); {mca(body)}")
        steps, consumed = replay(b, c)
        prof = splyce.profile(lane, A, B)
        assert prof.fast_lane == consumed, (prof, consumed)
        lane(A, B)
        best = min(_timed(lane, A, B) for _ in range(REPEATS))
        coords = b.size + c.size
        cyc = best * ghz * 1e9
        print(f"overlap {overlap:4.0%}: {steps} steps, {consumed / steps:.2f} coordinates per step "
              f"({consumed / coords:.1%} of them in the lane); {best / coords * 1e9:.3f} ns = "
              f"{cyc / coords:.2f} cycles per coordinate, {cyc / steps:.1f} cycles per step, "
              f"{len(body) * steps / cyc:.2f} lane instructions per cycle")


def _timed(f, *args):
    t0 = time.thread_time()
    f(*args)
    return time.thread_time() - t0


if __name__ == "__main__":
    main()
