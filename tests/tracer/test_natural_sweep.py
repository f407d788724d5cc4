"""A seeded sweep of random algorithm-style expressions that mix sparse products with NumPy's dense glue
(scalars, ufuncs, comparisons, where, clip, broadcasting views, row / column scaling, reductions), jitted under
random options and checked against NumPy on the dense operands. It runs in a child process, so an abort in
MLIR fails the test instead of killing pytest; a refusal (TraceError / TypeError) is allowed, a crash, another
exception or a wrong value is not."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np, scipy.sparse as sps
    import splyce
    from splyce.errors import TraceError

    N = 7

    def operand(rng, fmt):
        a = sps.random_array((N, N), density=0.4, format="csr", rng=rng)
        a.data = a.data * 4 - 2
        return a.toarray() if fmt == "dense" else getattr(sps, fmt + "_array")(a)

    def expr(rng, rank, depth):
        """Source of the given rank over a, b (sparse), d (dense) and v (a dense vector)."""
        if depth == 0 or rng.random() < 0.2:
            return {2: str(rng.choice(["a", "b", "d"])), 1: str(rng.choice(["v", "(a @ v)", "d[0]", "d[:, 1]"])),
                    0: "(v.sum())"}[rank]
        sub = lambda r=rank: expr(rng, r, depth - 1)
        k = int(rng.integers(0, 14))
        scalar = float(rng.choice([2.0, -0.5, 3.0]))
        if k == 0:
            return f"({sub()} {rng.choice(['+', '-', '*'])} {sub()})"
        if k == 1:
            return f"({sub()} {rng.choice(['+', '-', '*', '/'])} {scalar})"
        if k == 2:
            return f"({float(rng.choice([1.0, 2.0]))} {rng.choice(['+', '-', '*'])} {sub()})"
        if k == 3:
            return f"np.{rng.choice(['exp', 'tanh', 'sqrt', 'log1p', 'sign', 'abs', 'sin'])}(np.abs({sub()}))"
        if k == 4:
            return f"np.where({sub()} > 0, {sub()}, {float(rng.choice([0.0, -1.0]))})"
        if k == 5:
            return f"np.maximum({sub()}, {float(rng.choice([0.0, 0.5, -0.5]))})"
        if k == 6:
            return f"({sub()} > {float(rng.choice([0.0, 0.5]))}).astype(np.float64)"
        if k == 7 and rank == 2:
            return f"({sub(1)}[:, None] * {sub()})"
        if k == 8 and rank == 2:
            return f"({sub()} * {sub(1)}[None, :])"
        if k == 9:
            return f"({sub(2)} @ {sub()})" if rank else f"({sub(1)} @ {sub(1)})"
        if k == 10 and rank == 2:
            return f"({sub()}).T"
        if k == 10 and rank == 1:
            return f"({sub(2)}).{rng.choice(['sum', 'mean', 'max'])}(axis={int(rng.integers(0, 2))})"
        if k == 11:
            return f"np.clip({sub()}, -0.5, 0.5)"
        if k == 12 and rank == 2:
            return f"({sub(1)}[:, None] - {sub(1)}[None, :])"
        if k == 13:
            return f"({sub()} / ({sub()} * {sub()} + 1.0))"
        return sub()

    rng = np.random.default_rng(int(sys.argv[1]))
    for case in range(int(sys.argv[2])):
        src = expr(rng, int(rng.choice([1, 2])), 4)
        fa, fb = (str(f) for f in rng.choice(["csr", "csc", "coo"], 2))
        a, b, d = operand(rng, fa), operand(rng, fb), operand(rng, "dense")
        v = rng.random(N) * 2 - 1
        options = dict(threads=int(rng.choice([1, 2])), vectorize=bool(rng.random() < 0.7))
        fun = eval("lambda a, b, d, v: " + src)
        try:
            with np.errstate(all="ignore"):
                want = fun(a.toarray(), b.toarray(), d, v)
        except Exception:
            continue   # NumPy refuses it too
        row = {"case": case, "src": src, "formats": [fa, fb], "options": options}
        try:
            with np.errstate(all="ignore"):
                got = splyce.jit(fun, **options)(a, b, d, v)
        except (TraceError, TypeError) as error:
            print(json.dumps(dict(row, status="refused", message=str(error)[:200])), flush=True)
            continue
        except Exception as error:
            print(json.dumps(dict(row, status="error", message=f"{type(error).__name__}: {str(error)[:300]}")),
                  flush=True)
            continue
        got = got.toarray() if sps.issparse(got) else np.asarray(got)
        ok = got.shape == np.shape(want) and np.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
        print(json.dumps(dict(row, status="ok" if ok else "wrong")), flush=True)
''')


def test_random_natural_expressions_in_a_child_process(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        proc = subprocess.run([sys.executable, "-c", CHILD, "20261204", "80"], stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=1500)
    text = out.read_text()
    assert proc.returncode == 0, (f"the child died (status {proc.returncode}; negative: a signal) after:\n"
                                  f"{text[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in text.splitlines()]
    assert sum(r["status"] == "ok" for r in rows) >= 50   # the sweep exercises what traces, not only refusals
    bad = [r for r in rows if r["status"] in ("error", "wrong")]
    assert not bad, bad[:5]
