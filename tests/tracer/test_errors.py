"""Every refusal of the tracer (TraceError) and of the lowering (LoweringError), reached from a user's call,
with its exact text: a message a user acts on is part of the interface, so a change to it shows up here."""

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.lowering.to_mlir import LoweringError
from splyce.tracer.tracer import TraceError

CSR_TEXT = "(i, j) -> (i : dense, j : compressed)"
CSR32_TEXT = CSR_TEXT + ", posWidth = 32, crdWidth = 32"     # scipy's int32 index arrays


def _csr(m, n, seed):
    return sps.random_array((m, n), density=0.5, format="csr", random_state=seed)


A, B = _csr(4, 5, 1), _csr(4, 5, 2)   # two 4x5 CSR operands unless a case says otherwise
A4, B4 = _csr(4, 4, 1), _csr(4, 4, 2)

TRACE_ERRORS = {
    "truth value": (lambda x, y: x if x else y, (A, B),
                    "the truth value of a traced tensor is not known at trace time (`if t:`, `while t:`, `a and b`, "
                    "Python's min(a, b) / max(a, b), which compare with `<`): write np.where(c, x, y) for a choice, "
                    "np.minimum(a, b) / np.maximum(a, b) for the smaller / larger value; a loop runs a fixed number "
                    "of steps"),
    "divide by a tensor": (lambda x, y: x / y, (A, B),
                           "divide: dividing by a sparse tensor divides by its implicit zeros (0 / 0 is NaN); "
                           "write x / b.todense() for NumPy's dense result"),
    "matmul by a Python int": (lambda x, y: x @ 3, (A, B),
                               "matmul: operands must be traced tensors (the jitted function's arguments), "
                               "got int"),
    "multiply by a string": (lambda x, y: splyce.multiply(x, "2"), (A, B),
                             "multiply: operands must be traced tensors (the jitted function's arguments), "
                             "got str"),
    "out_format levels": (lambda x, y: splyce.matmul(x, y, out_format=splyce.CSR), (A, np.ones(5)),
                          f"out_format {CSR_TEXT} has 2 levels, the result has rank 1"),
    "out_format name": (lambda x, y: splyce.matmul(x, y, out_format="csr"), (A, np.ones(5)),
                        "out_format must be 'dense', 'sparse', a splyce.Format or None, got 'csr'"),
    "five operands": (lambda x, y: splyce.einsum("ij,ij,ij,ij,ij->ij", x, y, x, y, x), (A, B),
                      "einsum: between 1 and 4 operands are supported, got 5"),
    "subscripts vs rank": (lambda x, y: splyce.einsum("ijk,ij->ij", x, y), (A, B),
                           "einsum: operand 0 has shape (4, 5) but subscripts 'ijk'"),
    "repeated index": (lambda x, y: splyce.einsum("ii,jk->ik", x, y), (A, B),
                       "einsum: repeated index in 'ii' (diagonals) is not supported inside @splyce.jit "
                       "(the drop-in splyce.einsum on concrete operands takes the diagonal)"),
    "size mismatch": (lambda x, y: splyce.einsum("ij,jk->ik", x, y), (A, B),
                      "einsum: size mismatch for index 'j' (5 vs 4) with operand shapes (4, 5), (4, 5)"),
    "output repeats": (lambda x, y: splyce.einsum("ij,ij->ii", x, y), (A, B),
                       "einsum: output subscripts 'ii' must be distinct indices of the inputs"),
    "output unknown index": (lambda x, y: splyce.einsum("ij,ij->iz", x, y), (A, B),
                             "einsum: output subscripts 'iz' must be distinct indices of the inputs"),
    "result rank 5": (lambda x, y: splyce.einsum("ij,kl,m->ijklm", x, y, x.sum(axis=0)), (A, B),
                      "einsum: results of rank up to 4 are supported"),
    "bool scalar": (lambda x, y: x * True, (A, B), "scalar factors must be numbers, got bool"),
    "matmul of 3-D": (lambda x, y: x @ y, (np.ones((2, 2, 2)), B),
                      "matmul: operands must be 1-D or 2-D, got shapes (2, 2, 2) and (4, 5)"),
    "matmul not aligned": (lambda x, y: x @ y, (A, B),
                           "matmul: shapes (4, 5) and (4, 5) are not aligned (5 != 4)"),
    "multiply shapes": (lambda x, y: x * y, (A, A.T),
                        "multiply: shapes (4, 5), (5, 4) cannot be broadcast together"),
    "add a scalar": (lambda x, y: x + 1.0, (A, B),
                     "add: adding a nonzero scalar to a sparse tensor makes it dense (scipy refuses it too); "
                     "write a.todense() + c for the dense result"),
    "subtract shapes": (lambda x, y: x - y, (A, A.T),
                        "subtract: shapes (4, 5), (5, 4) cannot be broadcast together"),
    "add a sparse broadcast": (lambda x, y: x + y.sum(axis=0), (A, B),
                               "add: shapes (4, 5) and (5,) differ; a sparse operand cannot be broadcast: write "
                               "a.todense() + d for the dense result"),
    "exp of a sparse tensor": (lambda x, y: np.exp(x), (A, B),
                               "exp: not supported on a sparse tensor here: exp(a) is not zero where a stores "
                               "nothing, so the result is dense; write exp(a.todense()) to compute it on the dense "
                               "array"),
    "mask index": (lambda x, y: x.todense()[x.todense() > 0], (A, B),
                   "index: boolean mask indexing is not supported inside @splyce.jit: a boolean mask selects a "
                   "data-dependent number of entries, which a traced shape cannot hold (as in JAX); keep the "
                   "shape: write np.where(mask, x, 0) (or x * mask), and for a sum over the selected entries "
                   "np.where(mask, x, 0).sum()"),
    "computed index": (lambda x, y: x.todense()[0][x.todense()[0].astype(np.int64)], (A, B),
                       "index: an index array computed inside the jitted function is not supported (its values "
                       "are only known when the kernel runs, and the kernel does not check bounds); pass the "
                       "index array as an argument of the function (it is checked on every call), or compute "
                       "it outside"),
    "gather of a computed sparse value": (
        lambda x, y: (x * np.exp(y.todense()[:, 0])[:, None])[[0, 2]], (A, B),
        "index: a slice or gather of a sparse value computed inside the function is pushed down to the arguments "
        "through products, unions and zero-preserving functions ((a * b)[rows] is a[rows] * b[rows]), but this "
        "one reaches a dense value computed in the kernel, or its key is not slices and one 1-D index array; "
        "index the arguments instead (the entries at index pairs of a product of arguments, c[u, v] with "
        "c = b @ b.T: b[u].multiply(b[v]).sum(axis=1))"),
    "sparse integer index": (lambda x, y: x[1], (A, B),
                             "index: an integer index of a sparse matrix (a row) is not supported inside "
                             "@splyce.jit; write a[1:2] (a sparse matrix of one row), or a[1:2].todense() for a "
                             "dense array"),
    "sparse pairs": (lambda x, y: x[[0, 1], [1, 2]], (A, B),
                     "index: a[rows, cols] with two index arrays (entries at pairs of indices, a data-dependent "
                     "pattern) is not supported on a sparse matrix; select one axis at a time: a[rows][:, cols]"),
    "truth of a value": (lambda x, y: float(x.sum()), (A, B),
                         "a traced tensor has no value at trace time (float(), int(), item() and the like need "
                         "one); keep the computation in arrays, e.g. where(c, x, y) instead of an if"),
    "sum axis": (lambda x, y: x.sum(axis=2), (A, B), "sum: axis 2 is out of range for a tensor of rank 2"),
    "sum axis bool": (lambda x, y: x.sum(axis=True), (A, B),
                      "sum: axis True is out of range for a tensor of rank 2"),
    "transpose axes": (lambda x, y: x.transpose(0, 0), (A, B),
                       "transpose: axes (0, 0) are not a permutation of range(2)"),
    "einsum subscripts type": (lambda x, y: splyce.einsum(3, x), (A, B),
                               "einsum: subscripts must be a string, got int"),
    "einsum ellipsis": (lambda x, y: splyce.einsum("i...,j->ij", x, y), (A, B),
                        "einsum: ellipses ('...') are not supported"),
    "einsum not letters": (lambda x, y: splyce.einsum("i1,ij", x, y), (A, B),
                           "einsum: invalid subscripts 'i1,ij' (use letters a-z)"),
    "einsum groups": (lambda x, y: splyce.einsum("ij,jk->ik", x), (A, B),
                      "einsum: 2 subscript groups for 1 operands in 'ij,jk->ik'"),
    "returns a number": (lambda x, y: 3, (A, B),
                         "a jitted function must return at least one traced tensor (alone or in a tuple, list, "
                         "dict, NamedTuple or dataclass), got int"),
    "returns an empty tuple": (lambda x, y: (), (A, B),
                               "a jitted function must return at least one traced tensor (alone or in a tuple, "
                               "list, dict, NamedTuple or dataclass), got an empty tuple"),
    "returns a set": (lambda x, y: (x, {"a": {1}}), (A, B),
                      "a jitted function returns traced tensors, Python scalars or strings, or NumPy arrays, "
                      "nested in tuples, lists, dicts, NamedTuples or dataclasses; the result[1]['a'] is of type "
                      "set"),
}


@pytest.mark.parametrize("case", list(TRACE_ERRORS), ids=list(TRACE_ERRORS))
def test_trace_error_text(case):
    fun, args, message = TRACE_ERRORS[case]
    f = splyce.jit(fun, vectorize=False)
    with pytest.raises(TraceError) as info:
        f(*args)
    assert str(info.value) == message
    assert f.cache_info().compiles == 0


def test_jit_level_out_format_of_the_wrong_rank_is_a_trace_error():
    f = splyce.jit(lambda x, y: x @ y, vectorize=False, out_format=splyce.CSR)
    with pytest.raises(TraceError) as info:
        f(A, np.ones(5))
    assert str(info.value) == f"out_format {CSR_TEXT} has 2 levels, the result has rank 1"


def test_intermediates_in_incompatible_orders_are_re_stored():
    # was the LoweringError "no loop order fits the operands' storage orders ij:..., ji:...": two intermediates
    # (the planner cannot re-store them on the host) read in contradicting orders; now one is re-stored inside
    # the kernel (planner/restored_operands.py)
    fun = lambda x, y: (lambda p, q: (splyce.einsum("ij,ji->ij", p, q), p, q))(x * x, y * y)   # noqa: E731
    got = splyce.jit(fun, vectorize=False)(A4, B4)
    a, b = A4.toarray(), B4.toarray()
    r = got[0].toarray() if hasattr(got[0], "toarray") else got[0]
    np.testing.assert_allclose(np.asarray(r), np.einsum("ij,ji->ij", a * a, b * b), rtol=1e-14)


def test_refusals_are_value_errors():
    # callers catching ValueError (as for NumPy's shape errors) see both kinds
    assert issubclass(TraceError, ValueError) and issubclass(LoweringError, ValueError)
