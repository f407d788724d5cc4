"""Random programs (hypothesis) of the operators scipy's matrix and array classes share, whose meaning differs
between them (``*`` and ``**`` above all): each program jitted on ``csr_matrix`` operands and on ``csr_array``
operands (the slow sweep: also the CSC and COO matrix and array classes) gives what the same program gives
eagerly on those operands, class and values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import HealthCheck, given, settings, strategies as st

import splyce

N = 7

SPARSE_OPS = {   # name -> (arity, function of sparse values)
    "add": (2, lambda a, b: a + b), "sub": (2, lambda a, b: a - b), "star": (2, lambda a, b: a * b),
    "at": (2, lambda a, b: a @ b), "multiply": (2, lambda a, b: a.multiply(b)), "T": (1, lambda a: a.T),
    "scale": (1, lambda a: 0.5 * a), "div": (1, lambda a: a / 3.0), "neg": (1, lambda a: -a),
    "abs": (1, lambda a: abs(a)), "pow2": (1, lambda a: a ** 2),
}
ENDINGS = {   # name -> function of the sparse value and the dense vector
    "sum": lambda s, x: s.sum(), "sum0": lambda s, x: s.sum(axis=0), "sum1": lambda s, x: s.sum(axis=1),
    "matvec": lambda s, x: s @ x, "star_vec": lambda s, x: s * x, "toarray": lambda s, x: s.toarray(),
    "as_is": lambda s, x: s,
}


def trees(depth: int):
    leaf = st.sampled_from(["a", "b"])
    if depth == 0:
        return leaf
    sub = trees(depth - 1)
    unary = st.tuples(st.sampled_from([k for k, v in SPARSE_OPS.items() if v[0] == 1]), sub)
    binary = st.tuples(st.sampled_from([k for k, v in SPARSE_OPS.items() if v[0] == 2]), sub, sub)
    return st.one_of(leaf, unary, binary)


def evaluate(tree, env):
    if isinstance(tree, str):
        return env[tree]
    op, *args = tree
    return SPARSE_OPS[op][1](*(evaluate(t, env) for t in args))


def program(tree, ending):
    def f(a, b, x):
        return ENDINGS[ending](evaluate(tree, {"a": a, "b": b}), x)
    return f


def _same(got, want, label):
    if isinstance(want, (sps.spmatrix, sps.sparray)):
        assert isinstance(got, sps.spmatrix) == isinstance(want, sps.spmatrix), (label, type(got), type(want))
        assert isinstance(got, (sps.spmatrix, sps.sparray)), (label, type(got))
        got, want = got.toarray(), want.toarray()
    else:
        assert isinstance(got, np.matrix) == isinstance(want, np.matrix), (label, type(got), type(want))
    assert np.shape(got) == np.shape(want), (label, np.shape(got), np.shape(want))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12, err_msg=label)


def _check_program(tree, ending, seed, classes=(sps.csr_matrix, sps.csr_array)):
    rng = np.random.default_rng(seed)
    a = sps.random(N, N, density=0.35, format="csr", random_state=seed)
    b = sps.random(N, N, density=0.35, format="csr", random_state=seed + 1)
    x = rng.standard_normal(N)
    f = program(tree, ending)
    jitted = splyce.jit(f)
    for cls in classes:
        ea, eb = cls(a), cls(b)
        label = f"{tree} -> {ending} on {cls.__name__}"
        try:
            want = f(ea, eb, x)
        except (ValueError, TypeError):
            try:
                jitted(ea, eb, x)
            except (ValueError, TypeError):
                continue
            raise AssertionError(f"{label}: eager raises, jit does not")
        _same(jitted(ea, eb, x), want, label)


_STRATEGY = dict(tree=trees(3), ending=st.sampled_from(sorted(ENDINGS)), seed=st.integers(0, 2**16))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_STRATEGY)
def test_random_programs_follow_the_operand_class(tree, ending, seed):
    _check_program(tree, ending, seed)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_STRATEGY)
def test_many_random_programs_follow_the_operand_class(tree, ending, seed):
    _check_program(tree, ending, seed, (sps.csr_matrix, sps.csr_array, sps.csc_matrix, sps.csc_array,
                                        sps.coo_matrix, sps.coo_array))
