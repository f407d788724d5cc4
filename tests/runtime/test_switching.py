"""First calls from native stages while the fused kernel compiles in the background (runtime/switching.py):
the same bits as the fused kernel, then the fused kernel itself."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.runtime import switching
from splyce.runtime.kernel import Kernel


def pagerank(p, r):
    for _ in range(10):
        r = 0.85 * (p @ r) + 0.15 / p.shape[0]
    return r


def alternate(a, b, x):
    for _ in range(3):
        x = 0.5 * (a @ x) - 0.25 * x
        x = b @ x + 1.0
    return x


def relu_layers(a, x):
    for _ in range(3):
        x = np.maximum(a @ x, 0.0)
    return x


def clipped(a, x):
    y = a @ x
    return np.minimum(np.maximum(a @ (2.0 * y - 1.0), -0.5), 3.0)


def exp_step(a, x):                  # libm glue: not taken (the fused kernel compiles on the first call)
    return np.exp(a @ (a @ x) * 0.001)


# ``alternate``'s ``0.5 * (a @ x) - 0.25 * x`` is a ``combine`` node: not glue (the fused kernel on the first call)
PROGRAMS = [(pagerank, 1, True), (alternate, 2, False), (relu_layers, 1, True), (clipped, 1, True),
            (exp_step, 1, False)]


def _operands(f, n_sparse, dtype, two_d):
    rng = np.random.default_rng(7)
    mats = []
    for s in range(n_sparse):
        m = sps.random_array((400, 400), density=0.02, format="csr", rng=s + 1).astype(dtype)
        m.data -= dtype(0.3)
        mats.append(m)
    x = rng.standard_normal((400, 4) if two_d else 400).astype(dtype)
    return mats, x


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=pytest.mark.slow)])
@pytest.mark.parametrize("f,n_sparse,taken", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_first_calls_then_fused(f, n_sparse, taken, dtype):
    mats, x = _operands(f, n_sparse, dtype, f is relu_layers)
    x_before = x.copy()
    tensors = [splyce.asarray(m) for m in mats]
    jitted = splyce.jit(f)
    first = jitted(*tensors, x)
    (kernel,) = jitted._cache.values()
    assert isinstance(kernel, switching.SwitchKernel) == taken or (taken and type(kernel) is Kernel)
    info = jitted.cache_info()           # waits for the compile in flight
    assert info.compiles == 1 and info.misses == 1
    (after,) = jitted._cache.values()
    assert type(after) is Kernel         # the fused kernel replaced the stages
    again = jitted(*tensors, x)
    fused = splyce.jit(f, library=False)(*tensors, x)
    assert first.tobytes() == again.tobytes() == fused.tobytes()
    with np.errstate(all="ignore"):
        ref = f(*mats, x)
    np.testing.assert_allclose(first, ref, rtol=1e-4 if dtype == np.float32 else 1e-11, atol=1e-5)
    assert x.tobytes() == x_before.tobytes()


def test_first_call_compiles_nothing(monkeypatch):
    mats, x = _operands(pagerank, 1, np.float64, False)
    compiled = []
    kernels = []
    real = switching.SwitchKernel.__init__

    def counted(self, provisional, build, caches=()):
        kernels.append(self)
        real(self, provisional, lambda: compiled.append(1) or build(), caches)
    monkeypatch.setattr(switching.SwitchKernel, "__init__", counted)
    jitted = splyce.jit(pagerank)
    jitted(splyce.asarray(mats[0]), x)
    assert len(kernels) == 1 and kernels[0].provisional_calls == 1
    assert jitted.cache_info().compiles == 1 and compiled == [1]
    k, _ = jitted.kernel_for(splyce.asarray(mats[0]), x)      # the compiled kernel, not the stages
    assert type(k) is Kernel


def test_switch_off(monkeypatch):
    monkeypatch.setenv(switching.ENV, "0")
    mats, x = _operands(pagerank, 1, np.float64, False)
    jitted = splyce.jit(pagerank)
    jitted(splyce.asarray(mats[0]), x)
    (kernel,) = jitted._cache.values()
    assert type(kernel) is Kernel and jitted.cache_info().compiles == 1


def test_scipy_operand_and_accumulate():
    mats, x = _operands(pagerank, 1, np.float64, False)
    jitted = splyce.jit(pagerank)
    first = jitted(mats[0], x)             # a scipy CSR: checked as any first call
    out = np.ones_like(x)
    jitted.accumulate(out, mats[0], x)     # the fused kernel, waited for
    np.testing.assert_array_equal(out, 1.0 + first)
    assert jitted(mats[0], x).tobytes() == first.tobytes()
