"""A sparse argument, or its transpose, returned as is by a jitted function is a view over the argument's
arrays, as scipy's ``A.T`` is (docs/semantics.md, "Results and aliasing"); ``.copy()`` / ``np.copy`` and
every computed result never share an argument's buffers."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce


def _buffers(x):
    if isinstance(x, splyce.SparseTensor):
        return [b for b in x._buffers() if b is not None]
    return [x.data, x.indices, x.indptr]


def _shares(result, arg) -> bool:
    return any(np.shares_memory(r, b) for r in _buffers(result) for b in _buffers(arg))


def _dense(x):
    return x.to_scipy().toarray() if isinstance(x, splyce.SparseTensor) else x.toarray()


# operands nobody here designed: scipy's random patterns, several shapes and dtypes, an empty one
def _corpus():
    out = []
    for seed, (shape, density, dtype) in enumerate([((40, 30), 0.1, np.float64), ((1, 17), 0.5, np.float32),
                                                   ((25, 25), 0.0, np.float64), ((60, 8), 0.3, np.int64),
                                                   ((13, 50), 0.2, np.complex128)]):
        a = sps.random_array(shape, density=density, format="csr", rng=seed, dtype=dtype)
        out.append(a)
    return out


KINDS = {
    "csr_array": lambda a: a.tocsr(),
    "csc_array": lambda a: a.tocsc(),
    "csr_matrix": lambda a: sps.csr_matrix(a),
    "csc_matrix": lambda a: sps.csc_matrix(a),
    "SparseTensor": lambda a: splyce.asarray(a),
}
VIEWS = {"T": lambda a: a.T, "id": lambda a: a, "TT": lambda a: a.T.T, "transpose": lambda a: a.transpose()}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("form", list(VIEWS))
def test_view_shares_the_arguments_arrays_as_scipy(kind, form):
    for i, base in enumerate(_corpus()):
        x = KINDS[kind](base)
        f = splyce.jit(VIEWS[form])
        for _ in range(2):           # the first call and a cached one (the fast path)
            r = f(x)
            want = VIEWS[form](base.toarray())
            np.testing.assert_array_equal(_dense(r), want)
            if kind != "SparseTensor":
                eager = VIEWS[form](x)
                assert type(r) is type(eager), (type(r), type(eager))
                if x.nnz:
                    # scipy's A.T holds A's arrays themselves: the same memory
                    assert all(np.shares_memory(p, q) for p, q in zip(_buffers(r), _buffers(x)))
            if base.nnz:
                assert _shares(r, x)
        if kind == "csr_array" and base.nnz and base.dtype == np.float64:
            # a write through the view shows in the argument, exactly as through scipy's A.T
            mine, theirs = x.copy(), x.copy()
            VIEWS[form](theirs).data[0] = 123.0
            f(mine).data[0] = 123.0
            np.testing.assert_array_equal(mine.toarray(), theirs.toarray())
            assert mine.data[0] == 123.0


COPIES = {"copy": lambda a: a.copy(), "np.copy": lambda a: np.copy(a), "T.copy": lambda a: a.T.copy(),
          "copy.T": lambda a: a.copy().T, "copy.T.T": lambda a: a.copy().T.T, "neg": lambda a: -a,
          "scaled": lambda a: 2 * a, "T+T": lambda a: a.T + a.T}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("form", list(COPIES))
def test_copies_and_computed_results_never_share(kind, form):
    for base in _corpus():
        x = KINDS[kind](base)
        before = _dense(x).copy()
        f = splyce.jit(COPIES[form])
        try:
            want = COPIES[form](base.toarray())
        except TypeError:
            continue
        for _ in range(2):
            r = f(x)
            np.testing.assert_array_equal(_dense(r), want)
            assert not _shares(r, x)
        np.testing.assert_array_equal(_dense(x), before)       # the input never modified


def test_a_view_and_a_copy_of_the_same_value_returned_together_are_copies():
    a = sps.random_array((30, 20), density=0.2, format="csr", rng=7)
    for fun in (lambda a: (a, a.copy()), lambda a: (a.T, a.copy().T), lambda a: (a.copy(), a)):
        for r in splyce.jit(fun)(a):
            assert not _shares(r, a)
            assert r.shape in (a.shape, a.shape[::-1])
    # beside a result a kernel computes, a transpose returned is computed too (a copy: docs/semantics.md)
    v, c = splyce.jit(lambda a: (a.T, -a))(a)
    assert not _shares(c, a)
    np.testing.assert_array_equal(c.toarray(), -a.toarray())
    np.testing.assert_array_equal(v.toarray(), a.T.toarray())


def test_pydata_and_dense_results_stay_fresh():
    # pydata's own COO.T copies its coords and data: the jit's result does not share them either; a dense
    # argument's transpose is computed (a fresh array), as before
    sparse = pytest.importorskip("sparse")
    a = sps.random_array((30, 20), density=0.2, format="csr", rng=3)
    p = sparse.COO.from_scipy_sparse(a)
    r = splyce.jit(lambda a: a.T)(p)
    np.testing.assert_array_equal(np.asarray(r.todense()), a.T.toarray())
    assert not any(np.shares_memory(b, q) for b in _buffers(r) for q in (p.data, p.coords))
    x = np.arange(12.0).reshape(3, 4)
    t = splyce.jit(lambda x: x.T)(x)
    np.testing.assert_array_equal(t, x.T)
    assert not np.shares_memory(t, x)


def test_a_captured_matrix_returned_is_copied():
    c = sps.random_array((10, 10), density=0.3, format="csr", rng=5)
    r = splyce.jit(lambda x: (c.T, x * 2))(np.ones(3))[0]
    np.testing.assert_array_equal(r.toarray(), c.T.toarray())
    assert not _shares(r, c)


def test_a_view_of_an_operand_changed_in_place_between_calls_shows_it_as_scipy():
    # the first call checks the operand canonical; a later call with the same arrays skips the scan (nothing
    # reads an index); the view then holds the arrays as they are now, as scipy's A.T does, its sortedness
    # left for scipy to find out
    a = sps.random_array((30, 20), density=0.3, format="csr", rng=11)
    f = splyce.jit(lambda a: a.T)
    f(a)
    row = next(i for i in range(a.shape[0]) if a.indptr[i + 1] - a.indptr[i] >= 2)
    lo, hi = a.indptr[row], a.indptr[row + 1]
    a.indices[lo:hi] = a.indices[lo:hi][::-1].copy()
    a.data[lo:hi] = a.data[lo:hi][::-1].copy()
    a.has_sorted_indices = False
    r = f(a)
    want = a.T
    np.testing.assert_array_equal(r.toarray(), want.toarray())
    assert all(np.shares_memory(p, q) for p, q in zip(_buffers(r), _buffers(a)))
    assert not r.has_sorted_indices


# the constructors as a function names them (the jit rebinds ``sps`` in the function it traces)
CTOR = {"csr_array": (lambda a: sps.csr_array(a), lambda a: sps.csr_array(a, copy=True)),
        "csr_matrix": (lambda a: sps.csr_matrix(a), lambda a: sps.csr_matrix(a, copy=True))}


@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix"])
def test_conversions_follow_scipys_copy_argument(kind):
    a = KINDS[kind](sps.random_array((20, 15), density=0.3, format="csr", rng=2))
    for fun, shared in ((lambda a: a.tocsr(), True), (lambda a: a.asformat("csr"), True),
                        (lambda a: a.tocsr(copy=True), False), (lambda a: a.asformat("csr", copy=True), False),
                        (lambda a: a.astype(a.dtype), False), (CTOR[kind][0], True), (CTOR[kind][1], False),
                        (lambda a: a.tocsc(), False)):
        r, eager = splyce.jit(fun)(a), fun(a)
        np.testing.assert_array_equal(r.toarray(), eager.toarray())
        assert type(r) is type(eager)
        assert _shares(r, a) == shared == _shares(eager, a)


def test_a_view_of_a_non_canonical_or_int64_operand():
    # int64 index arrays: wrapped as they are, so shared; unsorted indices or duplicates on the first call: the
    # operand is re-stored sorted (as every jitted call does), so the transpose is of that fresh copy
    a = sps.random_array((50, 40), density=0.2, format="csr", rng=4)
    wide = a.copy()
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    unsorted = a.copy()
    lo, hi = unsorted.indptr[0], unsorted.indptr[1]
    unsorted.indices[lo:hi] = unsorted.indices[lo:hi][::-1].copy()
    unsorted.has_sorted_indices = False
    dup = sps.csr_array((np.r_[a.data, 1.0], np.r_[a.indices, a.indices[0]], np.r_[a.indptr[:1], a.indptr[1:] + 1]),
                        shape=a.shape)
    f = splyce.jit(lambda a: a.T)
    for x, shared in ((wide, True), (unsorted, False), (dup, False)):
        r = f(x)
        np.testing.assert_array_equal(r.toarray(), x.T.toarray())
        assert _shares(r, x) == shared
