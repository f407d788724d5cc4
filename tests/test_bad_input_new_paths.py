"""Bad input on the user-level paths added on 2026-12-05: one object passed twice (the aliasing check), the bool
`*` / `+` drop-ins on the native merge, `a.T * b` on the transposes, and the vector width chosen for fast_math.
Each gives a clear Python exception or scipy's answer; inputs are never modified."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce import TraceError


def _csr(shape, seed, density=0.15):
    return sps.csr_array(sps.random_array(shape, density=density, rng=seed))


def _bool(shape, seed):
    return sps.csr_array(_csr(shape, seed) != 0)


def _dense(r):
    return np.asarray(r.toarray() if hasattr(r, "toarray") else r.todense() if hasattr(r, "todense") else r)


def test_one_malformed_object_passed_twice_is_reported_not_run():
    # in a child process: a malformed CSR reaching a native kernel could abort the interpreter
    code = r"""
import numpy as np, scipy.sparse as sps, splyce

def base():
    return sps.csr_array(sps.random_array((50, 50), density=0.1, rng=0))

def out_of_range():
    a = base(); a.indices[3] = 999; return a

def decreasing():
    a = base(); a.indptr[5] = 10**6; return a

def negative():
    a = base(); a.indices[0] = -1; return a

jits = {"mul": splyce.jit(lambda a, b: a * b), "add": splyce.jit(lambda a, b: a + b),
        "sub": splyce.jit(lambda a, b: a - b), "tl": splyce.jit(lambda a, b: a.T * b),
        "matmul": splyce.jit(lambda a, b: a @ b, out_format="sparse")}
dropins = {"multiply": splyce.multiply, "add": splyce.add, "subtract": splyce.subtract, "matmul": splyce.matmul}
for make, what in ((out_of_range, "out of range"), (decreasing, "decrease"), (negative, "out of range")):
    for name, call in list(jits.items()) + list(dropins.items()):
        a = make()
        before = (a.data.copy(), a.indices.copy(), a.indptr.copy())
        try:
            call(a, a)
        except ValueError as e:
            assert what in str(e) and ("argument 0" in str(e) or str(e).startswith("a:")), (name, str(e))
        else:
            raise AssertionError(f"{name}: no error for {what}")
        for x, y in zip(before, (a.data, a.indices, a.indptr)):
            assert np.array_equal(x, y), f"{name}: input modified"

# valid for scipy but not canonical: unsorted columns in a row, one object twice -> scipy's values
a = base()
i = next(i for i in range(a.shape[0]) if a.indptr[i + 1] - a.indptr[i] >= 2)
p = a.indptr[i]
a.indices[p], a.indices[p + 1] = a.indices[p + 1], a.indices[p]
a.data[p], a.data[p + 1] = a.data[p + 1], a.data[p]
a.has_sorted_indices = False
before = (a.data.copy(), a.indices.copy(), a.indptr.copy())
d = a.toarray()
def dense(r):
    return np.asarray(r.toarray() if hasattr(r, "toarray") else r.todense() if hasattr(r, "todense") else r)
for name, want in (("mul", d * d), ("add", d + d), ("sub", d - d), ("tl", d.T * d), ("matmul", d @ d)):
    assert np.allclose(dense(jits[name](a, a)), want), name
for name, want in (("multiply", d * d), ("add", d + d), ("subtract", d - d), ("matmul", d @ d)):
    assert np.allclose(dense(dropins[name](a, a)), want), name
for x, y in zip(before, (a.data, a.indices, a.indptr)):
    assert np.array_equal(x, y), "unsorted input modified"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-3000:])


@pytest.mark.parametrize("op", ["multiply", "add", "subtract"])
def test_bool_dropins_mismatched_shapes_raise(op):
    a, b = _bool((30, 40), 2), _bool((40, 30), 3)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        getattr(splyce, op)(a, b)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        getattr(splyce, op)(a, _bool((30, 41), 4))


@pytest.mark.parametrize("partner", [np.float64, np.float32, np.int32, np.int64])
@pytest.mark.parametrize("op", ["multiply", "add"])
def test_bool_dropins_with_a_non_bool_partner_give_scipys_answer(op, partner):
    a = _bool((30, 40), 2)
    b = sps.csr_array((_csr((30, 40), 3) * 10).astype(partner))
    for x, y in ((a, b), (b, a)):
        got, want = getattr(splyce, op)(x, y), getattr(sps.csr_array, op if op == "multiply" else "__add__")(x, y)
        assert got.dtype == want.dtype
        assert np.array_equal(_dense(got), want.toarray())


@pytest.mark.parametrize("fun", [lambda x, y: x * y, lambda x, y: x + y])
def test_bool_jit_mismatched_shapes_raise_and_mixed_dtypes_match(fun):
    a, b = _bool((30, 40), 2), _bool((40, 30), 3)
    with pytest.raises(TraceError, match="cannot be broadcast"):
        splyce.jit(fun)(a, b)
    f = _csr((30, 40), 5)
    assert np.allclose(_dense(splyce.jit(fun)(a, f)), fun(a.toarray(), f.toarray()))


@pytest.mark.parametrize("name", ["multiply", "add", "subtract"])
def test_transpose_on_the_left_mismatched_shapes_raise(name):
    a, b = _csr((30, 40), 2), _csr((30, 40), 3)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        getattr(splyce, name)(a.T, b)
    fun = {"multiply": lambda x, y: x.T * y, "add": lambda x, y: x.T + y, "subtract": lambda x, y: x.T - y}[name]
    with pytest.raises(TraceError, match="cannot be broadcast"):
        splyce.jit(fun)(a, b)


def _wide(x):
    y = sps.csr_array((x.data, x.indices.astype(np.int64), x.indptr.astype(np.int64)), shape=x.shape)
    assert y.indices.dtype == np.int64    # scipy keeps int64 arrays passed as such
    return y


@pytest.mark.parametrize("name", ["multiply", "add", "subtract"])
def test_transpose_on_the_left_with_differing_index_widths(name):
    a, b = _csr((40, 40), 2), _csr((40, 40), 3)
    dense = {"multiply": lambda x, y: x * y, "add": lambda x, y: x + y, "subtract": lambda x, y: x - y}[name]
    fun = {"multiply": lambda x, y: x.T * y, "add": lambda x, y: x.T + y, "subtract": lambda x, y: x.T - y}[name]
    jitted = splyce.jit(fun)
    for x, y in ((a, _wide(b)), (_wide(a), b)):
        want = dense(x.toarray().T, y.toarray())
        assert np.array_equal(_dense(jitted(x, y)), want)
        assert np.array_equal(_dense(jitted(splyce.asarray(x), splyce.asarray(y))), want)
        assert np.array_equal(_dense(getattr(splyce, name)(x.T, y)), want)


@pytest.mark.parametrize("width", [0, 3, "x", -4, 32, 4.0, True])
def test_fast_math_with_an_invalid_vector_width_raises_at_jit(width):
    with pytest.raises(ValueError, match="vector_width must be 2, 4, 8, 16 or None"):
        splyce.jit(lambda a, b: splyce.einsum("ij,ij->i", a, b), fast_math=True, vector_width=width)


def test_fast_math_vector_width_as_a_numpy_int_is_accepted():
    a = _csr((30, 40), 2, 0.3)
    f = splyce.jit(lambda x, y: splyce.einsum("ij,ij->i", x, y), fast_math=True, vector_width=np.int64(8))
    assert np.allclose(_dense(f(a, a)), (a.toarray() ** 2).sum(axis=1))
