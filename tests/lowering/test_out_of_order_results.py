"""Sparse results whose loops do not visit them in their storage order (a transpose of a CSC into a CSC, a
result format asked for against the loop order) are written in loop order and re-stored (lowering/to_mlir.py,
``written_format`` / ``restored``): they run and match eager scipy, on every operand kind and format pair,
and the re-store's buffers are freed. They were refused ("would be written out of storage order")."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from leak_corpus import heap_growth
from splyce.tensors.formats import COO, CSC, CSR, DCSC, DCSR, coo

_SCIPY = {"csr": lambda m: m.tocsr(), "csc": lambda m: m.tocsc(), "coo": lambda m: m.tocoo()}
_TENSOR = {name: (lambda f: lambda m: splyce.asarray(m.toarray(), format=f))(f)
           for name, f in {"CSR": CSR, "CSC": CSC, "DCSR": DCSR, "DCSC": DCSC, "COO": COO}.items()}

# square operands x, y; the forms of a result laid out like a transposed operand
FORMS = {
    "(y - x).T + 0.5 * (y - x)": lambda x, y: (y - x).T + 0.5 * (y - x),
    "x.T + y": lambda x, y: x.T + y,
    "(x @ y).T + x": lambda x, y: (x @ y).T + x,
    "(x * y).T * 2.0": lambda x, y: (x * y).T * 2.0,
    "x @ y.T + y": lambda x, y: x @ y.T + y,
    "abs(x.T @ y)": lambda x, y: abs(x.T @ y),
    "(x - y).T @ y": lambda x, y: (x - y).T @ y,
}


def _operands():
    return (sps.random_array((8, 8), density=0.3, random_state=3, format="csr"),
            sps.random_array((8, 8), density=0.3, random_state=4, format="csr"))


def _dense(v):
    return v.toarray() if hasattr(v, "toarray") else np.asarray(v)


def _check(form, kx, ky):
    x, y = _operands()
    makers = {**_SCIPY, **_TENSOR}
    fun = FORMS[form]
    got = splyce.jit(fun)(makers[kx](x), makers[ky](y))
    # eager scipy on the operands' kinds (sparrays for the SparseTensors)
    want = fun(*(makers[k](m) if k in _SCIPY else m for k, m in ((kx, x), (ky, y))))
    assert got.shape == want.shape
    np.testing.assert_allclose(_dense(got), _dense(want), rtol=1e-12, atol=1e-14)
    if hasattr(got, "indices"):
        got.check_format(full_check=True)


_QUICK = {("(y - x).T + 0.5 * (y - x)", "csr", "csr"),
          ("(y - x).T + 0.5 * (y - x)", "CSC", "CSR")}


def _cases():
    pairs = [*itertools.product(_SCIPY, repeat=2), *itertools.product(_TENSOR, repeat=2)]
    for form in FORMS:
        for kx, ky in pairs:
            quick = (form, kx, ky) in _QUICK
            yield pytest.param(form, kx, ky, marks=() if quick else pytest.mark.slow, id=f"{form}-{kx}-{ky}")


@pytest.mark.parametrize("form, kx, ky", list(_cases()))
def test_transposed_layouts_match_scipy(form, kx, ky):
    _check(form, kx, ky)


def _a(m, n, seed):
    return sps.random_array((m, n), density=0.5, format="csr", random_state=seed)


# results asked for against the loop order (these were the LoweringError texts of tests/tracer/test_errors.py)
ASKED = {
    "einsum out_format=CSC, order ij": (
        lambda x, y: splyce.einsum("ij,ij->ij", x, y, out_format=splyce.CSC, order="ij"),
        lambda x, y: x.multiply(y)),
    "add of intermediates out_format=CSC": (
        lambda x, y: (lambda p, q: (splyce.add(p, q, out_format=splyce.CSC), p, q))(x * x, y * y),
        lambda x, y: (x.multiply(x) + y.multiply(y), x.multiply(x), y.multiply(y))),
}


@pytest.mark.parametrize("case", list(ASKED))
def test_results_asked_against_the_loop_order(case):
    fun, eager = ASKED[case]
    a, b = _a(4, 5, 1), _a(4, 5, 2)
    got = splyce.jit(fun, vectorize=False)(a, b)
    want = eager(a, b)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(_dense(g), _dense(w), rtol=1e-12)
    first = got[0] if isinstance(got, tuple) else got
    assert first.format == "csc"


def test_restored_results_free_their_steps():
    """The re-store's unordered COO (sorted in place) and the result written in loop order are freed; the
    result survives later calls."""
    x = sps.random_array((300, 300), density=0.02, random_state=0, format="csr")
    y = sps.random_array((300, 300), density=0.02, random_state=1, format="csr")
    fun = FORMS["(y - x).T + 0.5 * (y - x)"]
    f = splyce.jit(fun)
    kept = f(x, y)
    scf = f.lower(x, y).as_text("scf")
    assert "sparse_tensor" not in scf.split("func.func")[0] and "__splyce_free" not in scf
    growth = heap_growth(lambda a, b, _: f(a, b), (x, y, None), 30)
    if growth is not None:
        assert growth < 1_000          # the unfreed COO was 66 KB a call
    np.testing.assert_allclose(kept.toarray(), fun(x, y).toarray())


def _csf_operands():
    rng = np.random.default_rng(0)
    a = np.where(rng.random((3, 4, 5)) < 0.3, rng.random((3, 4, 5)), 0)
    b = np.where(rng.random((5, 4, 3)) < 0.3, rng.random((5, 4, 3)), 0)
    return a, b


THREE_D = {   # function of two CSF SparseTensors (3 x 4 x 5, 5 x 4 x 3), the same of the dense arrays
    "x.T + y": (lambda x, y: x.transpose((2, 1, 0)) + y, lambda a, b: a.transpose(2, 1, 0) + b),
    "(x * 2).T * y": (lambda x, y: (x * 2.0).transpose((2, 1, 0)) * y, lambda a, b: (a * 2).transpose(2, 1, 0) * b),
    "einsum ijk->kji csf, order ijk": (
        lambda x, y: splyce.einsum("ijk->kji", x, out_format=splyce.csf(3), order="ijk"),
        lambda a, b: a.transpose(2, 1, 0)),
    "einsum ijk->jik coo, order ijk": (
        lambda x, y: splyce.einsum("ijk->jik", x, out_format=coo(3), order="ijk"),
        lambda a, b: a.transpose(1, 0, 2)),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(THREE_D))
def test_three_dimensional_results_out_of_loop_order(case):
    fun, numpy_fun = THREE_D[case]
    a, b = _csf_operands()
    got = splyce.jit(fun)(splyce.asarray(a, format=splyce.csf(3)), splyce.asarray(b, format=splyce.csf(3)))
    np.testing.assert_allclose(_dense(got), numpy_fun(a, b), rtol=1e-12)
