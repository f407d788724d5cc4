"""Every operator and method x every operand kind, eager vs ``@splyce.jit``: the result's class family, shape and
values must be the eager ones (scipy's ``spmatrix`` classes and ``np.matrix`` follow the matrix rules, ``sparray``,
pydata and SparseTensor the array rules), and an eager error must be an error under jit too. No combination
can silently differ (tracer/matrix.py, docs/tracing.md "Matrices and arrays")."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps
import sparse as pydata

import splyce

N = 6
_rng = np.random.default_rng(7)


def _dense(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((N, N))
    a[rng.random((N, N)) < 0.55] = 0.0
    return a


A, B = _dense(1), _dense(2)
X = np.arange(1.0, N + 1)                 # a dense vector operand
W = _dense(3)                             # a dense 2-D ndarray operand


def make(kind: str, a: np.ndarray):
    if kind == "ndarray":
        return a.copy()
    if kind == "np.matrix":
        return np.asmatrix(a.copy())
    if kind == "SparseTensor":
        return splyce.asarray(sps.csr_array(a))
    if kind.startswith("pydata."):
        coo = pydata.COO.from_numpy(a)
        return coo if kind == "pydata.COO" else pydata.GCXS(coo)
    fmt, _, cls = kind.partition("_")
    return getattr(sps, f"{fmt}_{cls}")(a)


SCIPY = [f"{f}_{c}" for c in ("matrix", "array") for f in ("csr", "csc", "coo")]
KINDS = ["ndarray", "np.matrix", *SCIPY, "pydata.COO", "pydata.GCXS", "SparseTensor"]


def family(r) -> str:
    """The class family a user sees: a sparse matrix, a sparse array, an np.matrix, an ndarray, a scalar."""
    if isinstance(r, sps.spmatrix):
        return "sparse matrix"
    if isinstance(r, (sps.sparray, pydata.SparseArray, splyce.SparseTensor)):
        return "sparse array"
    if isinstance(r, np.matrix):
        return "np.matrix"
    if isinstance(r, np.ndarray) and r.ndim > 0:
        return "ndarray"
    return "scalar"


def dense_of(r):
    if isinstance(r, (sps.spmatrix, sps.sparray)):
        return r.toarray()
    if isinstance(r, pydata.SparseArray):
        return r.todense()
    if isinstance(r, splyce.SparseTensor):
        return r.to_numpy()
    return np.asarray(r)


# eager results whose class the jit gives differently, documented (docs/tracing.md): max / min along an axis
# of SparseTensor operands (scipy's: its COO class exactly, checked below); pydata's reductions are pydata's
# classes exactly (a 0-d COO of a full reduction, a COO / GCXS along an axis), checked below
CONVERSIONS = ("tocsc", "T_tocsr", "asformat_csc")
REDUCTIONS = ("sum", "sum0", "sum1", "mean0", "max", "max0", "min1", "np_sum1")
EXACT_CLASS = ("max0", "min1")     # scipy's coo_array (1-D) / coo_matrix ((1, n), (m, 1)) of the nonzeros


def _known(name: str, kinds: tuple, eager) -> bool:
    # max / min along an axis of SparseTensor operands (no scipy or pydata operand in the call) are dense
    # arrays under jit
    if name in EXACT_CLASS:
        return not any(k in SCIPY or k.startswith("pydata") for k in kinds)
    return False


def _reference(x):
    """The eager operand a SparseTensor's semantics are checked against: the csr_array of the same entries
    (SparseTensor follows scipy's sparray rules; its own eager operators cover fewer forms)."""
    return x.to_scipy() if isinstance(x, splyce.SparseTensor) else x


def check(name, fun, *operands, kinds=()):
    try:
        expected = fun(*(_reference(x) for x in operands))
    except Exception as e:   # noqa: BLE001 - whatever eager raises, the jit must raise too
        if isinstance(e, AttributeError) and (name in CONVERSIONS and "pydata.GCXS" in kinds or name in (
                "diagonal", "trace") and any(k.startswith("pydata") for k in kinds)):
            # pydata's GCXS has no tocsc / tocsr (its COO has), neither has diagonal / trace: the jit's are
            # scipy's on any sparse value, a wider surface, never another answer (docs/tracing.md)
            got = splyce.jit(fun)(*operands)
            want = fun(*(sps.csr_array(x.to_scipy_sparse()) for x in operands))
            np.testing.assert_array_equal(dense_of(got), dense_of(want))
            return None
        with pytest.raises(Exception):
            splyce.jit(fun)(*operands)
        return type(e).__name__
    got = splyce.jit(fun)(*operands)
    want = family(expected)
    if _known(name, kinds, expected):
        want = family(got)
        assert want in ("ndarray", "np.matrix", "scalar"), (name, kinds, type(got))
    assert family(got) == want, f"{name} on {kinds}: jit gives {type(got).__name__}, eager {type(expected).__name__}"
    if name in REDUCTIONS and isinstance(expected, pydata.SparseArray):
        assert type(got) is type(expected), (name, kinds, type(got), type(expected))
    if name in EXACT_CLASS and isinstance(expected, (sps.spmatrix, sps.sparray)) and any(k in SCIPY for k in kinds):
        assert type(got) is type(expected), (name, kinds, type(got), type(expected))
        assert got.nnz == expected.nnz, (name, kinds, got.nnz, expected.nnz)
    assert np.shape(got) == np.shape(expected), (name, kinds, np.shape(got), np.shape(expected))
    np.testing.assert_allclose(dense_of(got), dense_of(expected), rtol=1e-12, atol=1e-12, err_msg=f"{name} {kinds}")
    return None


UNARY = {
    "scale": lambda a: a * 2.5, "rscale": lambda a: 2.5 * a, "div": lambda a: a / 4.0, "neg": lambda a: -a,
    "abs": lambda a: abs(a), "pow2": lambda a: a ** 2, "pow3": lambda a: a ** 3, "T": lambda a: a.T,
    "sum": lambda a: a.sum(), "sum0": lambda a: a.sum(axis=0), "sum1": lambda a: a.sum(axis=1),
    "mean0": lambda a: a.mean(axis=0), "max": lambda a: a.max(), "max0": lambda a: a.max(axis=0),
    "min1": lambda a: a.min(axis=1),
    "matvec": lambda a: a @ X, "star_vec": lambda a: a * X, "vec_star": lambda a: X * a,
    "vec_mat": lambda a: X @ a, "dot_vec": lambda a: a.dot(X), "star_dense": lambda a: a * W,
    "dense_star": lambda a: W * a, "plus_dense": lambda a: a + W, "ne0": lambda a: a != 0,
    "toarray": lambda a: a.todense() if isinstance(a, pydata.SparseArray) else a.toarray() if hasattr(a, "toarray")
    else np.asarray(a),
    "np_sum1": lambda a: np.sum(a, axis=1), "self_star": lambda a: a * a, "T_star": lambda a: a.T * a,
    "chain": lambda a: (a * a.T) * X,
    "tocsc": lambda a: a.tocsc(), "T_tocsr": lambda a: a.T.tocsr(), "asformat_csc": lambda a: a.asformat("csc"),
    "diagonal": lambda a: a.diagonal(), "trace": lambda a: a.trace(),
}
BINARY = {
    "star": lambda a, b: a * b, "at": lambda a, b: a @ b, "plus": lambda a, b: a + b, "minus": lambda a, b: a - b,
}


def _eager_only_pydata(kinds) -> bool:
    """pydata mixed with scipy or np.matrix has no common eager semantics to follow (each library refuses or
    guesses): those pairs are not compared."""
    libs = {"pydata" if k.startswith("pydata") else "other" for k in kinds}
    return len(libs) > 1


QUICK_UNARY = ["scale", "pow2", "sum1", "max0", "star_vec", "vec_star", "star_dense", "plus_dense", "chain", "T_star",
               "tocsc"]
QUICK_KINDS = ["ndarray", "np.matrix", "csr_matrix", "csr_array", "coo_matrix", "SparseTensor", "pydata.COO"]


@pytest.mark.parametrize("kind", QUICK_KINDS)
@pytest.mark.parametrize("name", QUICK_UNARY)
def test_unary_quick(name, kind):
    check(name, UNARY[name], make(kind, A), kinds=(kind,))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_every_kind(name, kind):
    check(name, UNARY[name], make(kind, A), kinds=(kind,))


QUICK_PAIRS = [("csr_matrix", "csr_matrix"), ("csr_matrix", "csr_array"), ("csr_array", "csr_matrix"),
               ("csr_array", "csr_array"), ("ndarray", "csr_matrix"), ("csr_matrix", "ndarray"),
               ("np.matrix", "csr_matrix"), ("csc_matrix", "np.matrix"), ("SparseTensor", "csr_array"),
               ("np.matrix", "ndarray"), ("pydata.COO", "pydata.GCXS")]


@pytest.mark.parametrize("left, right", QUICK_PAIRS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_quick(name, left, right):
    check(name, BINARY[name], make(left, A), make(right, B), kinds=(left, right))


@pytest.mark.slow
@pytest.mark.parametrize("right", KINDS)
@pytest.mark.parametrize("left", KINDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_every_pair(name, left, right):
    if _eager_only_pydata((left, right)):
        pytest.skip("pydata with scipy / np.matrix: no eager semantics to follow")
    check(name, BINARY[name], make(left, A), make(right, B), kinds=(left, right))


def test_the_reported_wrong_answers_are_right():
    """``*`` of csr_matrix operands is the matrix product (it was computed elementwise)."""
    a = sps.random(50, 50, density=0.1, format="csr", random_state=0)
    b = sps.random(50, 50, density=0.1, format="csr", random_state=1)
    v = np.random.default_rng(0).standard_normal(50)
    got = splyce.jit(lambda a, v: (a * a.T) * v)(a, v)
    assert type(got) is np.ndarray and got.shape == (50,)
    np.testing.assert_allclose(got, (a @ a.T) @ v, rtol=1e-12)
    prod = splyce.jit(lambda a, b: a * b)(a, b)
    assert type(prod) is sps.csr_matrix
    np.testing.assert_allclose(prod.toarray(), (a @ b).toarray(), rtol=1e-12)
    # the same function on arrays is elementwise, and each class has its own kernel
    f = splyce.jit(lambda a, b: a * b)
    np.testing.assert_allclose(f(sps.csr_array(a), sps.csr_array(b)).toarray(), a.multiply(b).toarray())
    np.testing.assert_allclose(f(a, b).toarray(), (a @ b).toarray(), rtol=1e-12)
    assert f.cache_info().misses == 2


def test_matrix_reductions_and_idioms():
    a = sps.random(30, 20, density=0.2, format="csr", random_state=3)
    rows = splyce.jit(lambda a: a.sum(axis=1))(a)
    assert type(rows) is np.matrix and rows.shape == (30, 1)
    np.testing.assert_allclose(rows, a.sum(axis=1))
    normalised = splyce.jit(lambda a: a.multiply(1.0 / (a.sum(axis=1) + 1.0)))(a)
    np.testing.assert_allclose(normalised.toarray(), a.multiply(1.0 / (a.sum(axis=1) + 1.0)).toarray())
    m = np.asmatrix(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(splyce.jit(lambda m: m.T * m)(m), m.T * m)
    assert type(splyce.jit(lambda m: m[1])(m)) is np.matrix


def test_matrix_power():
    a = sps.random(8, 8, density=0.3, format="csr", random_state=4)
    for k in (0, 1, 2, 3, 5):
        got, want = splyce.jit(lambda a: a ** k)(a), a ** k
        assert family(got) == family(want), k
        np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12, atol=1e-15)
    m = np.asmatrix(np.arange(9.0).reshape(3, 3))
    np.testing.assert_array_equal(splyce.jit(lambda m: m ** 4)(m), m ** 4)
    with pytest.raises(TypeError, match="integer"):
        splyce.jit(lambda a: a ** 0.5)(a)
    with pytest.raises(TypeError, match="square"):
        splyce.jit(lambda a: a ** 2)(sps.random(3, 4, density=0.5, format="csr"))


def test_captured_matrix_constant_multiplies_as_a_product():
    b = sps.random(6, 6, density=0.4, format="csr", random_state=5)
    x = np.arange(6.0)
    np.testing.assert_allclose(splyce.jit(lambda x: b * x)(x), b * x, rtol=1e-12)
    np.testing.assert_allclose(splyce.jit(lambda x: x * b)(x), x * b, rtol=1e-12)
