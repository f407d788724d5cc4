"""Programs whose fused MLIR kernel keeps a sparse intermediate (a product, an elementwise merge of sparse values,
a transpose, a scaling, chains and sums of products; results returned and consumed), written before they were
measured, and the C heap's growth over a loop of calls.

``PROGRAMS``: name -> function of (p, q, x): p and q are 300 x 300 sparse matrices (2 %), x a 300 x 8 dense
matrix. ``heap_growth(f, args, calls)``: bytes the C heap grew per call over ``calls`` calls after a warm-up.
``python tests/lowering/leak_corpus.py [calls]`` prints the bytes per call of every program under each option variant.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

import numpy as np
import scipy.sparse as sps

PROGRAMS = {
    # products kept as intermediates, read by another op
    "abs(p @ q)": lambda p, q, x: abs(p @ q),
    "(p @ q) + p": lambda p, q, x: (p @ q) + p,
    "(p @ q).multiply(q @ p)": lambda p, q, x: (p @ q).multiply(q @ p),
    "(p @ q) * p + q": lambda p, q, x: (p @ q).multiply(p) + q,
    "(p @ q) @ x": lambda p, q, x: (p @ q) @ x,
    "(p @ q).sum(axis=0)": lambda p, q, x: (p @ q).sum(axis=0),
    # elementwise merges of sparse values feeding a product or a transpose
    "(p + q) @ q": lambda p, q, x: (p + q) @ q,
    "(p - q).T + p": lambda p, q, x: (p - q).T + p,
    "abs(p - q) @ (p + q)": lambda p, q, x: abs(p - q) @ (p + q),
    # transposes
    "(p @ q).T + p": lambda p, q, x: (p @ q).T + p,
    "p.T @ q + q": lambda p, q, x: p.T @ q + q,
    # scalings
    "(2.0 * (p @ q)) @ q": lambda p, q, x: (2.0 * (p @ q)) @ q,
    "(p * 3.0) @ q - q": lambda p, q, x: (p * 3.0) @ q - q,
    # chains of three products, sums of products
    "p @ q @ p": lambda p, q, x: p @ q @ p,
    "(p @ q) @ (q @ p)": lambda p, q, x: (p @ q) @ (q @ p),
    "p @ q + q @ p": lambda p, q, x: p @ q + q @ p,
    "p @ q + q @ p + p @ p": lambda p, q, x: p @ q + q @ p + p @ p,
    # an intermediate also returned, or two results sharing one
    "(p @ q, abs(p @ q))": lambda p, q, x: (p @ q, abs(p @ q)),
    "(s := p @ q) + p, s.T": lambda p, q, x: ((s := p @ q) + p, s.T),
}

VARIANTS = {
    "default": {},
    "library=False": {"library": False},
    "vectorize=False": {"vectorize": False},
    "fast_math=True": {"fast_math": True},
}


# the operands' kinds: scipy sparrays in three formats, an spmatrix, SparseTensors in two more formats
KINDS = {
    "csr": lambda m: m.tocsr(),
    "csc": lambda m: m.tocsc(),
    "coo": lambda m: m.tocoo(),
    "csr_matrix": lambda m: sps.csr_matrix(m),
    "SparseTensor DCSR": lambda m: _tensor(m, "DCSR"),
    "SparseTensor COO": lambda m: _tensor(m, "COO"),
}


def _tensor(m, fmt):
    import splyce

    return splyce.asarray(m.toarray(), format=getattr(splyce, fmt))


def operands(kind: str = "csr"):
    p = sps.random_array((300, 300), density=0.02, random_state=0, format="csr")
    q = sps.random_array((300, 300), density=0.02, random_state=1, format="csr")
    return KINDS[kind](p), KINDS[kind](q), np.random.default_rng(2).random((300, 8))


def reference(fun, kind: str = "csr"):
    """``fun`` on the operands as scipy sparrays (eager scipy), dense."""
    p, q, x = operands("csr" if kind.startswith("SparseTensor") else kind)
    return dense(fun(p, q, x))


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_in_use() -> int | None:
    """Bytes the C heap has handed out (glibc's mallinfo2: small blocks + mmapped blocks), or None."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def heap_growth(f, args, calls: int = 30) -> float | None:
    """Bytes per call the C heap grew over ``calls`` calls of ``f(*args)`` (each result dropped), after two
    warm-up calls; None without glibc's mallinfo2."""
    for _ in range(2):
        f(*args)
    gc.collect()
    before = heap_in_use()
    if before is None:
        return None
    for _ in range(calls):
        got = f(*args)
        del got
    gc.collect()
    return (heap_in_use() - before) / calls


def dense(v):
    if isinstance(v, tuple):
        return tuple(dense(x) for x in v)
    v = v.toarray() if hasattr(v, "toarray") else v
    return np.asarray(v)


def matches(got, want) -> bool:
    if isinstance(want, tuple):
        return len(got) == len(want) and all(matches(g, w) for g, w in zip(got, want))
    return got.shape == want.shape and np.allclose(got, want)


def _table(calls, names, columns):
    """One row per program, one column per (label -> (options, kind)): bytes per call, '!' when wrong."""
    import splyce

    width = max(16, *(len(c) + 2 for c in columns))
    print(f"{'program':28s}" + "".join(f"{c:>{width}s}" for c in columns) + f"   (bytes per call, {calls} calls)")
    for name in names:
        fun = PROGRAMS[name]
        row = []
        for options, kind in columns.values():
            args = operands(kind)
            f = splyce.jit(fun, **options)
            try:
                ok = matches(dense(f(*args)), reference(fun, kind))
                row.append(f"{heap_growth(f, args, calls):>{width - 1}.0f}" + ("" if ok else "!"))
            except Exception as e:   # noqa: BLE001 - report and go on
                row.append(f"{type(e).__name__:>{width}s}")
        print(f"{name:28s}" + "".join(f"{r:>{width}s}" for r in row), flush=True)


if __name__ == "__main__":
    import sys

    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    names = sys.argv[2].split(";") if len(sys.argv) > 2 and sys.argv[2] else list(PROGRAMS)
    _table(calls, names, {v: (o, "csr") for v, o in VARIANTS.items()})
    _table(calls, names, {k: ({}, k) for k in KINDS if k != "csr"})
