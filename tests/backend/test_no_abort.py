"""Every supported op x operand format x dtype in a child process: MLIR / LLVM aborts kill the process, so
the parent fails on a signal. Each combination either matches NumPy or raises a clear Python error."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent('''
    import json, sys, traceback
    import numpy as np, scipy.sparse as sps
    import splyce

    FORMATS = {"csr": splyce.CSR, "csc": splyce.CSC, "coo": splyce.COO, "dcsr": splyce.DCSR, "dense": None}
    PAIRS = [("csr", "csr"), ("csr", "csc"), ("csc", "csr"), ("coo", "csr"), ("dcsr", "dcsr"),
             ("dense", "csr"), ("csr", "dense")]
    OPS = {
        "matmul": (lambda a, b: a @ b, lambda A, B: A @ B),
        "matmul sparse": (lambda a, b: splyce.matmul(a, b, out_format="sparse"), lambda A, B: A @ B),
        "matmul T": (lambda a, b: a @ b.T, lambda A, B: A @ B.T),
        "multiply": (lambda a, b: a * b, lambda A, B: A * B),
        "add": (lambda a, b: a + b, lambda A, B: A + B),
        "subtract": (lambda a, b: a - b, lambda A, B: A - B),
        "scaled sum": (lambda a, b: 2 * a + b, lambda A, B: 2 * A + B),
        "maximum": (lambda a, b: splyce.maximum(a, b), np.maximum),
        "abs pow": (lambda a, b: abs(a) ** 2 + b, lambda A, B: np.abs(A) ** 2 + B),
        "div": (lambda a, b: a / 2 - b, lambda A, B: A / 2 - B),
        "sum axis": (lambda a, b: (a * b).sum(axis=1), lambda A, B: (A * B).sum(axis=1)),
        "masked": (lambda a, b: (a @ b) * a, lambda A, B: (A @ B) * A),
        "triangles": (lambda a, b: ((a @ b) * a).sum(), lambda A, B: ((A @ B) * A).sum()),
        "einsum3": (lambda a, b: splyce.einsum("ij,jk,ik->i", a, b, a), lambda A, B: np.einsum("ij,jk,ik->i", A, B, A)),
    }
    # max / min reductions and the bool / complex value types (refusals: bool negation, complex ordering)
    NEW_OPS = {
        "max axis": (lambda a, b: a.max(axis=1), lambda A, B: A.max(axis=1)),
        "min keepdims": (lambda a, b: a.min(axis=0, keepdims=True), lambda A, B: A.min(axis=0, keepdims=True)),
        "max of product": (lambda a, b: (a * b).max(), lambda A, B: (A * B).max()),
        "sum axis": (lambda a, b: a.sum(axis=0), lambda A, B: A.sum(axis=0)),
        "matmul": (lambda a, b: a @ b, lambda A, B: A @ B),
        "matmul sparse": (lambda a, b: splyce.matmul(a, b, out_format="sparse"), lambda A, B: A @ B),
        "abs add": (lambda a, b: abs(a) + abs(b), lambda A, B: np.abs(A) + np.abs(B)),
        "conj negative": (lambda a, b: -(a.conj()) * b, lambda A, B: -(A.conj()) * B),
    }
    NEW_PAIRS = [("csr", "csr"), ("csc", "csr"), ("coo", "dcsr"), ("dense", "csr")]
    dtypes = sys.argv[1].split(",")
    if sys.argv[2] == "new":
        OPS, PAIRS = NEW_OPS, NEW_PAIRS
    rng = np.random.default_rng(0)

    def values(dtype):
        mask = rng.random((7, 7)) < 0.4
        if dtype == "bool":
            return mask
        x = rng.uniform(-3, 3, (7, 7)) + (1j * rng.uniform(-3, 3, (7, 7)) if dtype.startswith("complex") else 0)
        return (x * mask).astype(dtype)

    for dtype in dtypes:
        A, B = values(dtype), values(dtype)
        for (fa, fb) in PAIRS:
            a = A if FORMATS[fa] is None else splyce.asarray(A, FORMATS[fa])
            b = B if FORMATS[fb] is None else splyce.asarray(B, FORMATS[fb])
            for name, (fun, ref) in OPS.items():
                case = f"{name} {fa}x{fb} {dtype}"
                try:
                    out = splyce.jit(fun)(a, b)
                except (ValueError, TypeError, MemoryError) as exc:
                    print(json.dumps({"case": case, "status": "error", "type": type(exc).__name__,
                                      "message": str(exc)}), flush=True)
                    continue
                got = out.toarray() if hasattr(out, "toarray") else (out.to_numpy() if hasattr(out, "to_numpy")
                                                                      else np.asarray(out))
                want = ref(A, B)
                ok = got.shape == np.shape(want) and np.allclose(np.asarray(got, dtype=complex),
                                                                  np.asarray(want, dtype=complex), rtol=1e-4, atol=1e-4)
                print(json.dumps({"case": case, "status": "ok" if ok else "wrong", "got": str(got)[:200],
                                  "want": str(want)[:200]}), flush=True)
''')


# Both tables' children start with the module's first test, so that they run at the same time on a machine with
# two cores (the parent only waits); each test then checks its own child. Output goes to files, not pipes: a
# child whose pipe filled up would wait for its test to read it.
TABLES = {"test_every_op_format_dtype_combination_runs_or_raises_clearly": ("core", "float64,int32"),
          "test_reductions_and_value_types_run_or_raise_clearly": ("new", "bool,complex128,int64")}


@pytest.fixture(scope="module")
def children(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("no-abort")
    env = dict(os.environ)
    wanted = {item.originalname for item in request.session.items if item.module is request.module}
    procs = {}
    for test, (table, dtypes) in TABLES.items():
        if test in wanted:
            out, err = open(folder / f"{table}.out", "w+"), open(folder / f"{table}.err", "w+")
            procs[table] = (subprocess.Popen([sys.executable, "-c", SCRIPT, dtypes, table], stdout=out, stderr=err,
                                             text=True, env=env), out, err)
    yield procs
    for proc, out, err in procs.values():   # a test that failed early leaves no child behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()


def _run(children, table: str):
    proc, out, err = children[table]
    try:
        proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    assert proc.returncode == 0, (f"the child process died (status {proc.returncode}, a negative status is a "
                                  f"signal) after:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_every_op_format_dtype_combination_runs_or_raises_clearly(children):
    rows = _run(children, "core")
    assert len(rows) == 2 * 7 * 14
    wrong = [r for r in rows if r["status"] == "wrong"]
    assert not wrong, wrong[:3]
    errors = [r for r in rows if r["status"] == "error"]
    for r in errors:   # refusals name the problem; nothing internal leaks through
        assert r["message"] and "internal error" not in r["message"] and "MLIR" not in r["message"], r
    # the common products work in every format pair
    assert not [r for r in errors if r["case"].split()[0] in ("multiply", "add", "triangles")], errors[:3]


def test_reductions_and_value_types_run_or_raise_clearly(children):
    rows = _run(children, "new")
    assert len(rows) == 3 * 4 * 8
    wrong = [r for r in rows if r["status"] == "wrong"]
    assert not wrong, wrong[:3]
    errors = [r for r in rows if r["status"] == "error"]
    for r in errors:
        assert r["message"] and "internal error" not in r["message"] and "MLIR" not in r["message"], r
    # the only refusals: complex values have no order, bools no negation (TypeErrors naming op and dtype)
    for r in errors:
        name, dtype = r["case"].rsplit(" ", 2)[0], r["case"].split()[-1]
        expected = (dtype == "complex128" and name.startswith(("max", "min"))) or \
            (dtype == "bool" and name == "conj negative")
        assert expected and r["type"] == "TypeError" and dtype in r["message"], r
    assert len(errors) == 3 * 4 + 4
