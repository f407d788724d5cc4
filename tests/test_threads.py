"""threads=N: the outer loop runs in N contiguous chunks balanced by nonzeros, bit-identical to one thread."""

import os

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime.dispatcher import _outer_chunks
from splyce.kernels import KERNELS


def _as_array(x):
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


@pytest.mark.parametrize("vectorize", [True, False])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_threads_bit_identical_on_the_five_kernels(name, vectorize):
    spec = KERNELS[name]
    ops = spec.operands(spec.quick_size, 0.1, seed=5)
    one = _as_array(splyce.jit(spec.fun, vectorize=vectorize)(*ops))
    for threads in (2, 3):
        f = splyce.jit(spec.fun, vectorize=vectorize, threads=threads)
        out = _as_array(f(*ops))
        assert out.tobytes() == one.tobytes()
        text = f.lower(*ops).as_text("splyce")
        assert "// splyce: threads: outer loop split into chunks" in text
        if vectorize:
            assert "vectorized" in text


def test_skewed_rows_chunk_unevenly_and_stay_identical():
    rng = np.random.default_rng(0)
    dense = np.zeros((60, 400))
    dense[:5] = rng.uniform(0.5, 1, (5, 400))           # five full rows hold most nonzeros
    dense[5:, ::37] = 1.0
    B = splyce.asarray(dense, format=splyce.CSR.with_widths(32, 32))
    C = splyce.asarray(rng.uniform(-1, 1, (400, 30)) * (rng.random((400, 30)) < 0.3),
                       format=splyce.CSC.with_widths(32, 32))
    chunks = _outer_chunks(60, 3, [_type(B), _type(C)], [B, C])
    assert chunks[0][0] == 0 and chunks[-1][1] == 60 and len(chunks) == 3
    assert chunks[0][1] <= 5                            # the heavy rows are split off early
    one = splyce.jit(lambda x, y: x @ y)(B, C)
    for threads in (2, 3):
        assert splyce.jit(lambda x, y: x @ y, threads=threads)(B, C).tobytes() == one.tobytes()


def _type(x):
    from splyce.runtime.arguments import prepare

    return prepare(x, "x")[0]


def test_chunks_cover_the_rows_once():
    assert _outer_chunks(2, 4, [], []) == [(0, 1), (1, 2)]
    assert _outer_chunks(10, 1, [], []) == [(0, 10)]
    assert _outer_chunks(10, 3, [], []) == [(0, 3), (3, 6), (6, 10)]


def test_sparse_output_falls_back_to_one_thread():
    a = sps.random(30, 40, 0.2, format="csr", random_state=1)
    b = sps.random(30, 40, 0.2, format="csr", random_state=2)
    f = splyce.jit(lambda x, y: x * y, threads=2)
    out = f(a, b)
    assert np.allclose(out.toarray(), a.multiply(b).toarray())
    low = f.lower(a, b)
    assert low.outer_extent is None
    assert "// splyce: threads: one thread (" in low.as_text("splyce")


def test_profile_falls_back_to_one_thread():
    from splyce.runtime.dispatcher import Jitted

    spec = KERNELS["K1"]
    ops = spec.operands(64, 0.2, seed=1)
    f = Jitted(spec.fun, profile=True, threads=2)
    assert np.allclose(f(*ops), splyce.jit(spec.fun)(*ops))
    assert "one thread (profile counters are shared)" in f.lower(*ops).as_text("splyce")


def test_threads_option_validation_and_key():
    assert splyce.jit(lambda x: x, threads=None).options.threads == (os.cpu_count() or 1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be"):
            splyce.jit(lambda x: x, threads=bad)
    spec = KERNELS["K1"]
    ops = spec.operands(16, 0.2)
    k1 = splyce.jit(spec.fun)._key(ops)[0]
    k2 = splyce.jit(spec.fun, threads=2)._key(ops)[0]
    assert k1.explain(k2) == ["options"]
