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
from splyce.tensors.formats import COO, CSC, CSR, DCSC, DCSR

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
          ("(y - x).T + 0.5 * (y - x)", "DCSC", "COO")}


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


# results asked for against the loop order (these were the LoweringError texts of tests/test_errors.py)
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
