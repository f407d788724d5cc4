"""Views of dense values (``x[:, None]``, ``x[None, :]``, ``X[:, j:j + 1]``, ``X.T``, strided, offset and
reversed slices, ``d[:, None] * e[None, :]``, unit-axis reshapes, integer rows and columns) feeding
contractions with a sparse operand in every position (left / right of ``@``, ``einsum``, ``multiply``, its
sums, 1-D and 2-D results), CSR and CSC, jitted with the defaults, ``library=False`` and ``vectorize=False``,
each checked against NumPy on the dense equivalent (and the inputs unmodified).

An explicit grid, not a random one: every (view, form, shapes) cell runs with library=False on CSR and CSC,
with the defaults on one of them and with vectorize=False on the other. The operands are non-square
with distinct values, so a read at another loop's coordinate (the bug below) gives other numbers, not the same
ones by symmetry.

The regression it guards: ``x[:, None] @ E`` (E a 1 x 2 CSR) gave ``[[0, 1]] * 4`` instead of the outer product.
A view lowered as a gather at ``linalg.index`` positions was fused into the sparse kernel, whose loops MLIR's
sparsifier then reordered without renaming the ``linalg.index`` ops, so ``x`` was read at ``j`` instead of ``i``
(lowering/dense.py ``lower_view`` now lowers a view as a slice read through an affine map; docs/planner.md).
The grid also holds the two shapes of that lowering MLIR miscompiles: a strided read beside a fixed index
(``S.multiply(X[::2, 1])`` crashed the sparsifier) and a reversed slice (a negative-stride subview read the
wrong elements).
"""

import zlib

import numpy as np
import pytest
import scipy.sparse as sps

import splyce

VARIANTS = {"default": {}, "library=False": {"library": False}, "vectorize=False": {"vectorize": False}}
FORMATS = ("csr", "csc")


def _values(rng, shape):
    """Distinct values: no two positions alike, so a read at a wrong position shows."""
    size = int(np.prod(shape))
    return (rng.permutation(size) + 1.0).reshape(shape) / 4 - size / 8


def _sparse(rng, shape, fmt):
    dense = _values(rng, shape) * (rng.random(shape) < 0.6)
    if shape[0] > 1 and shape[1] > 1:
        dense[rng.integers(shape[0])] = 0      # an empty row
    dense.flat[rng.integers(dense.size)] = 7.0   # never all zero
    return getattr(sps, fmt + "_array")(dense)


# 2-D views: name -> (fits(shape), make(rng, shape) -> base arrays, traced function of the bases)
VIEWS_2D = {
    "x[:, None]": (lambda s: s[1] == 1, lambda r, s: [_values(r, (s[0],))], lambda x: x[:, None]),
    "x[None, :]": (lambda s: s[0] == 1, lambda r, s: [_values(r, (s[1],))], lambda x: x[None, :]),
    "X[:, 1:2]": (lambda s: s[1] == 1, lambda r, s: [_values(r, (s[0], 3))], lambda X: X[:, 1:2]),
    "X[2:3, :]": (lambda s: s[0] == 1, lambda r, s: [_values(r, (4, s[1]))], lambda X: X[2:3, :]),
    "x.reshape(-1, 1)": (lambda s: s[1] == 1, lambda r, s: [_values(r, (s[0],))], lambda x: x.reshape(-1, 1)),
    "(2 * x + 1)[:, None]": (lambda s: s[1] == 1, lambda r, s: [_values(r, (s[0],))],
                             lambda x: (2 * x + 1)[:, None]),
    "X.T": (lambda s: True, lambda r, s: [_values(r, (s[1], s[0]))], lambda X: X.T),
    "X[::2, 1::2]": (lambda s: True, lambda r, s: [_values(r, (2 * s[0], 2 * s[1] + 1))], lambda X: X[::2, 1::2]),
    "X[1:-1, :-2]": (lambda s: True, lambda r, s: [_values(r, (s[0] + 2, s[1] + 2))], lambda X: X[1:-1, :-2]),
    "X[::-2, 1:2]": (lambda s: s[1] == 1, lambda r, s: [_values(r, (2 * s[0], 3))], lambda X: X[::-2, 1:2]),
    "X[::-1, ::-2]": (lambda s: True, lambda r, s: [_values(r, (s[0], 2 * s[1]))], lambda X: X[::-1, ::-2]),
    "d[:, None] * e[None, :]": (lambda s: True, lambda r, s: [_values(r, (s[0],)), _values(r, (s[1],))],
                                lambda d, e: d[:, None] * e[None, :]),
    "X.T[1:, :][:, None, :][:, 0]": (lambda s: True, lambda r, s: [_values(r, (s[1], s[0] + 1))],
                                     lambda X: X.T[1:, :][:, None, :][:, 0]),
}

# 1-D views of length n: name -> (make(rng, n), traced function)
VIEWS_1D = {
    "x[::2]": (lambda r, n: [_values(r, (2 * n,))], lambda x: x[::2]),
    "x[::-1]": (lambda r, n: [_values(r, (n,))], lambda x: x[::-1]),
    "X[::2, 1]": (lambda r, n: [_values(r, (2 * n, 3))], lambda X: X[::2, 1]),
    "X[::-1, 1]": (lambda r, n: [_values(r, (n, 3))], lambda X: X[::-1, 1]),
    "X[:, 2]": (lambda r, n: [_values(r, (n, 3))], lambda X: X[:, 2]),
    "X[1]": (lambda r, n: [_values(r, (3, n))], lambda X: X[1]),
    "X.T[1]": (lambda r, n: [_values(r, (n, 3))], lambda X: X.T[1]),
    "X[:, 1:2].reshape(-1)": (lambda r, n: [_values(r, (n, 2))], lambda X: X[:, 1:2].reshape(-1)),
    "x[1:][:, None][:, 0]": (lambda r, n: [_values(r, (n + 1,))], lambda x: x[1:][:, None][:, 0]),
}

# 2-D forms: name -> (list of (sparse shape, view shape), f(S, V), reference on dense arrays)
FORMS_2D = {
    "V @ S": ([((1, 3), (4, 1)), ((5, 3), (4, 5)), ((5, 3), (1, 5))], lambda S, V: V @ S, lambda S, V: V @ S),
    "S @ V": ([((3, 1), (1, 4)), ((3, 5), (5, 2)), ((3, 5), (5, 1))], lambda S, V: S @ V, lambda S, V: S @ V),
    "S.T @ V": ([((5, 3), (5, 1)), ((5, 3), (5, 2))], lambda S, V: S.T @ V, lambda S, V: S.T @ V),
    "einsum(ik,kj->ji, S, V)": ([((3, 5), (5, 2)), ((3, 1), (1, 4))], lambda S, V: np.einsum("ik,kj->ji", S, V),
                                lambda S, V: np.einsum("ik,kj->ji", S, V)),
    "einsum(ik,kj->ij, V, S)": ([((5, 3), (4, 5)), ((1, 3), (4, 1))], lambda S, V: np.einsum("ik,kj->ij", V, S),
                                lambda S, V: np.einsum("ik,kj->ij", V, S)),
    "S.multiply(V)": ([((4, 3), (4, 3)), ((4, 3), (4, 1)), ((4, 3), (1, 3))], lambda S, V: S.multiply(V),
                      lambda S, V: S * V),
    # the view read through an elementwise producer, broadcast by its reader
    "S.multiply(np.exp(V))": ([((4, 3), (4, 3)), ((4, 3), (4, 1)), ((4, 3), (1, 3))],
                              lambda S, V: S.multiply(np.exp(V)), lambda S, V: S * np.exp(V)),
    "(S @ ones) * V": ([((4, 5), (4, 3)), ((4, 5), (4, 1)), ((4, 5), (1, 3))],
                       lambda S, V: (S @ np.ones((5, 3))) * V, lambda S, V: (S @ np.ones((5, 3))) * V),
}

# forms with 1-D results from a 2-D view
FORMS_2D_TO_1D = {
    "S.multiply(V).sum(axis=0)": ([((4, 3), (4, 3)), ((4, 3), (4, 1))], lambda S, V: S.multiply(V).sum(axis=0),
                                  lambda S, V: (S * V).sum(axis=0)),
    "S.multiply(V).sum(axis=1)": ([((4, 3), (4, 3)), ((4, 3), (1, 3))], lambda S, V: S.multiply(V).sum(axis=1),
                                  lambda S, V: (S * V).sum(axis=1)),
    "S.multiply(V).sum()": ([((4, 3), (4, 3)), ((4, 3), (4, 1))], lambda S, V: S.multiply(V).sum(),
                            lambda S, V: (S * V).sum()),
    "einsum(ij,ij->i, S, V)": ([((4, 3), (4, 3))], lambda S, V: np.einsum("ij,ij->i", S, V),
                               lambda S, V: np.einsum("ij,ij->i", S, V)),
    "(V @ S).sum(axis=1)": ([((5, 3), (4, 5))], lambda S, V: (V @ S).sum(axis=1), lambda S, V: (V @ S).sum(axis=1)),
}

# 1-D views: name -> (sparse shape, view length, f(S, v), reference)
FORMS_1D = {
    "S @ v": ((3, 5), 5, lambda S, v: S @ v, lambda S, v: S @ v),
    "v @ S": ((5, 3), 5, lambda S, v: v @ S, lambda S, v: v @ S),
    "S.T @ v": ((5, 3), 5, lambda S, v: S.T @ v, lambda S, v: S.T @ v),
    "einsum(ij,j->i, S, v)": ((3, 5), 5, lambda S, v: np.einsum("ij,j->i", S, v),
                              lambda S, v: np.einsum("ij,j->i", S, v)),
    "S.multiply(v)": ((3, 5), 5, lambda S, v: S.multiply(v), lambda S, v: S * v),
    "S @ v[:, None]": ((3, 5), 5, lambda S, v: S @ v[:, None], lambda S, v: S @ v[:, None]),
    "v[:, None] * S": ((5, 3), 5, lambda S, v: v[:, None] * S, lambda S, v: v[:, None] * S),
}


def _cells():
    for form, (shapes, _, _) in {**FORMS_2D, **FORMS_2D_TO_1D}.items():
        for s_shape, v_shape in shapes:
            for view, (fits, _, _) in VIEWS_2D.items():
                if fits(v_shape):
                    yield pytest.param("2d", form, view, s_shape, v_shape, id=f"{form}|{view}|{s_shape}x{v_shape}")
    for form, (s_shape, n, _, _) in FORMS_1D.items():
        for view in VIEWS_1D:
            yield pytest.param("1d", form, view, s_shape, (n,), id=f"{form}|{view}|{s_shape}")


CELLS = list(_cells())


def _dense(value):
    if sps.issparse(value):
        return value.toarray()
    if hasattr(value, "todense") and not isinstance(value, np.ndarray):
        return np.asarray(value.todense())
    return np.asarray(value)


def _runs():
    """Each cell with library=False on CSR and on CSC (the MLIR kernels, where views fuse into the sparse
    loops), and with the defaults and vectorize=False on one format each, alternating by cell."""
    for n, cell in enumerate(CELLS):
        kind, form, view, s_shape, v_shape = cell.values
        one, other = FORMATS[n % 2], FORMATS[1 - n % 2]
        for fmt, variant in (("csr", "library=False"), ("csc", "library=False"), (one, "default"),
                             (other, "vectorize=False")):
            yield pytest.param(*cell.values, fmt, variant, id=f"{cell.id}|{fmt}|{variant}")


@pytest.mark.slow
@pytest.mark.parametrize("kind,form,view,s_shape,v_shape,fmt,variant", list(_runs()))
def test_view_feeding_a_sparse_contraction(kind, form, view, s_shape, v_shape, fmt, variant):
    rng = np.random.default_rng(zlib.crc32(f"{form}|{view}|{s_shape}|{v_shape}".encode()))
    S = _sparse(rng, s_shape, fmt)
    if kind == "2d":
        _, make, view_of = VIEWS_2D[view]
        _, f, ref = {**FORMS_2D, **FORMS_2D_TO_1D}[form]
        bases = make(rng, v_shape)
    else:
        make, view_of = VIEWS_1D[view]
        _, _, f, ref = FORMS_1D[form]
        bases = make(rng, v_shape[0])
    copies = [b.copy() for b in bases]
    S_copy = S.copy()

    jitted = splyce.jit(lambda S, *b: f(S, view_of(*b)), **VARIANTS[variant])
    got = _dense(jitted(S, *bases))
    want = ref(S.toarray(), view_of(*bases))
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    for b, c in zip(bases, copies):
        np.testing.assert_array_equal(b, c)   # inputs never modified
    assert (S != S_copy).nnz == 0


@pytest.mark.parametrize("options", list(VARIANTS.values()) + [{"library": False, "vectorize": False}],
                         ids=list(VARIANTS) + ["library=False,vectorize=False"])
def test_outer_product_of_a_column_view_and_a_sparse_row(options):
    """The report: x[:, None] @ E read x at E's column index (all rows [0, 1])."""
    x = np.arange(4.0)
    E = sps.csr_array([[0.0, 1.0]])
    got = splyce.jit(lambda x, E: x[:, None] @ E, **options)(x, E)
    np.testing.assert_array_equal(_dense(got), [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])


QUICK = {   # one cell of each shape that was miscompiled, for the quick (not slow) run
    "x[:, None] @ E": (lambda x, X, E, A: x[:4, None] @ E, lambda x, X, E, A: x[:4, None] @ E),
    "A.multiply(X[::2, 1:2])": (lambda x, X, E, A: A.multiply(X[::2, 1:2]), lambda x, X, E, A: A * X[::2, 1:2]),
    "A.T @ X[:6][::-1, ::-2]": (lambda x, X, E, A: A.T @ X[:6][::-1, ::-2],
                                lambda x, X, E, A: A.T @ X[:6][::-1, ::-2]),
    "A.multiply(x[:, None] + x[None, :5]) @ X[:5]": (
        lambda x, X, E, A: A.multiply(x[:, None] + x[None, :5]) @ X[:5],
        lambda x, X, E, A: (A * (x[:, None] + x[None, :5])) @ X[:5]),
    "np.einsum(ij,j->i, A, X[1:11:2, 2])": (lambda x, X, E, A: np.einsum("ij,j->i", A, X[1:11:2, 2]),
                                            lambda x, X, E, A: np.einsum("ij,j->i", A, X[1:11:2, 2])),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(QUICK))
def test_view_shapes_once_miscompiled(name, fmt):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x, X = _values(rng, (6,)), _values(rng, (12, 3))
    E, A = _sparse(rng, (1, 3), fmt), _sparse(rng, (6, 5), fmt)
    f, ref = QUICK[name]
    got = _dense(splyce.jit(f, library=False)(x, X, E, A))
    want = ref(x, X, E.toarray(), A.toarray())
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
