import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.tensors.formats import COO, CSR, DCSR, SPARSE_VECTOR, Format, Level, coo
from splyce.tensors.tensor import SparseTensor, asarray
from splyce.tensors.validation import NotCanonicalError, check_dtype, check_shape, validate

i64, i32 = np.int64, np.int32


def arr(values, dtype=i64):
    return np.array(values, dtype=dtype)


def csr_buffers(indptr, indices, data=None, dtype=i64):
    indices = arr(indices, dtype)
    data = np.ones(len(indices)) if data is None else data
    return dict(pos=(None, arr(indptr, dtype)), crd=(None, indices), values=data)


# Each case: (shape, format, buffers, exception, key phrase). Messages name the tensor, level and position.
MALFORMED = {
    "pos does not start at 0": ((2, 3), CSR, csr_buffers([1, 1, 2], [0, 1]), ValueError,
                                r"x: level 1 \(compressed\): positions must start at 0"),
    "pos decreases": ((3, 3), CSR, csr_buffers([0, 2, 1, 3], [0, 1, 2]), ValueError,
                      r"level 1 \(compressed\): positions decrease at position 2 \(1 after 2\)"),
    "pos end != nnz": ((2, 3), CSR, csr_buffers([0, 1, 3], [0, 1]), ValueError, "positions end at 3 but there are 2"),
    "pos wrong length": ((3, 3), CSR, csr_buffers([0, 1, 2], [0, 1]), ValueError,
                         r"positions have length 3, expected 4"),
    "crd out of range": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 3]), ValueError,
                         r"coordinate 3 out of range \[0, 3\) at position 1"),
    "negative crd": ((2, 3), CSR, csr_buffers([0, 1, 2], [-1, 0]), ValueError,
                     r"coordinate -1 out of range \[0, 3\) at position 0"),
    "crd unsorted": ((2, 9), CSR, csr_buffers([0, 1, 4], [0, 9 - 4, 3, 7]), NotCanonicalError,
                     r"coordinates not sorted within segment 1 at position 2 \(3 after 5\)"),
    "crd duplicate": ((2, 9), CSR, csr_buffers([0, 1, 3], [0, 4, 4]), NotCanonicalError,
                      r"duplicate coordinate 4 within segment 1 at position 2"),
    "pos float dtype": ((2, 3), CSR, dict(pos=(None, np.array([0., 1, 2])), crd=(None, arr([0, 1])),
                                           values=np.ones(2)), TypeError, "positions must be an integer array"),
    "pos width mismatch": ((2, 3), CSR, dict(pos=(None, arr([0, 1, 2], i32)), crd=(None, arr([0, 1])),
                                              values=np.ones(2)), TypeError,
                           r"positions have dtype int32 but the format's width is 64"),
    "crd width mismatch": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], dtype=i32), TypeError,
                           r"coordinates have dtype int32 but the format's width is 64"),
    "crd as list": ((2, 3), CSR, dict(pos=(None, arr([0, 1, 2])), crd=(None, [0, 1]), values=np.ones(2)),
                    TypeError, "coordinates must be a numpy array"),
    "2-D crd": ((2, 3), CSR, dict(pos=(None, arr([0, 1, 2])), crd=(None, arr([[0, 1]])), values=np.ones(2)),
                ValueError, "coordinates must be a C-contiguous 1-D array"),
    "values too short": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], np.ones(1)), ValueError,
                         "values have length 1, expected 2"),
    "values 2-D": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], np.ones((2, 1))), ValueError,
                   "values must be a C-contiguous 1-D array"),
    "values uint8": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], np.ones(2, np.uint8)), TypeError,
                     "unsupported dtype uint8"),
    "values big-endian": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], np.ones(2, ">f8")), TypeError,
                          "non-native byte order"),
    "values not an array": ((2, 3), CSR, csr_buffers([0, 1, 2], [0, 1], [1.0, 2.0]), TypeError,
                            "values must be a numpy array"),
    "negative shape": ((2, -3), CSR, csr_buffers([0, 1, 2], [0, 1]), ValueError, r"shape\[1\] is negative"),
    "bool shape": ((2, True), CSR, csr_buffers([0, 1, 2], [0, 1]), TypeError, r"shape\[1\] must be an int"),
    "float shape": ((2.0, 3), CSR, csr_buffers([0, 1, 2], [0, 1]), TypeError, r"shape\[0\] must be an int"),
    "shape not iterable": (3, SPARSE_VECTOR, dict(pos=(arr([0, 0]),), crd=(arr([]),), values=np.ones(0)),
                           TypeError, "shape must be a tuple of ints"),
    "rank mismatch": ((2, 3, 4), CSR, csr_buffers([0, 1, 2], [0, 1]), ValueError,
                      "has 3 dimensions but the format has 2 levels"),
    "too few buffers": ((2, 3), CSR, dict(pos=(arr([0, 1, 2]),), crd=(None, arr([0, 1])), values=np.ones(2)),
                        ValueError, "expected 2 pos and crd entries"),
    "dense level with crd": ((2, 3), CSR, dict(pos=(None, arr([0, 1, 2])), crd=(arr([0, 1]), arr([0, 1])),
                                                values=np.ones(2)), ValueError, "a dense level has no pos / crd"),
    "compressed without pos": ((2, 3), CSR, dict(pos=(None, None), crd=(None, arr([0, 1])), values=np.ones(2)),
                               ValueError, "missing pos buffer"),
    "compressed without crd": ((2, 3), CSR, dict(pos=(None, arr([0, 1, 2])), crd=(None, None),
                                                  values=np.ones(2)), ValueError, "missing crd buffer"),
    "singleton with pos": ((2, 3), COO, dict(pos=(arr([0, 1]), arr([0, 1])), crd=(arr([0]), arr([0])),
                                             values=np.ones(1)), ValueError, "a singleton level has no pos"),
    "singleton crd length": ((2, 3), COO, dict(pos=(arr([0, 2]), None), crd=(arr([0, 1]), arr([0])),
                                               values=np.ones(2)), ValueError,
                             r"level 1 \(singleton\): coordinates have length 1, expected 2"),
    "COO first level unsorted": ((2, 3), COO, dict(pos=(arr([0, 2]), None), crd=(arr([1, 0]), arr([0, 0])),
                                                   values=np.ones(2)), NotCanonicalError,
                                 r"level 0 \(compressed\(nonunique\)\): coordinates not sorted within segment 0"),
    "COO duplicate entry": ((2, 3), COO, dict(pos=(arr([0, 3]), None), crd=(arr([0, 1, 1]), arr([2, 1, 1])),
                                              values=np.ones(3)), NotCanonicalError,
                            r"level 1 \(singleton\): duplicate coordinate 1 within a run of equal parent"),
    "COO second level unsorted": ((2, 3), COO, dict(pos=(arr([0, 3]), None), crd=(arr([1, 1, 1]), arr([0, 2, 1])),
                                                    values=np.ones(3)), NotCanonicalError,
                                  r"level 1 \(singleton\): coordinates not sorted .* at position 2 \(1 after 2\)"),
    "DCSR outer duplicate": ((3, 3), DCSR, dict(pos=(arr([0, 2]), arr([0, 1, 2])), crd=(arr([1, 1]), arr([0, 1])),
                                                values=np.ones(2)), NotCanonicalError,
                             r"level 0 \(compressed\): duplicate coordinate 1 within segment 0 at position 1"),
    "nonordered duplicate": ((2, 5), Format(("dense", Level("compressed", ordered=False))),
                             csr_buffers([0, 3, 3], [4, 1, 4]), NotCanonicalError,
                             r"duplicate coordinate 4 within segment 0 at position 2"),
    "dimension beyond int32 with crd_width 32": ((2, 2**31 + 5), CSR.with_widths(32, 32),
                                                 csr_buffers([0, 1, 1], [0], dtype=i32), ValueError,
                                                 "does not fit crd_width 32"),
    "format is not a Format": ((2, 3), "csr", csr_buffers([0, 1, 2], [0, 1]), TypeError,
                               "format must be a splyce Format"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_buffers(case):
    shape, fmt, buffers, exc, message = MALFORMED[case]
    with pytest.raises(exc, match=message):
        SparseTensor.from_buffers(shape, fmt, name="x", **buffers)


def test_not_canonical_is_value_error():
    assert issubclass(NotCanonicalError, ValueError)


def _dense_from_rows(shape, rows):
    """The dense reference of a CSR-like tensor given as {row: [(column, value), ...]} (repeats add up)."""
    out = np.zeros(shape)
    for i, entries in rows.items():
        for j, v in entries:
            out[i, j] += v
    return out


def test_valid_edge_cases_are_accepted_and_read_back_as_stored():
    # Nonordered levels accept any order within a segment; nonunique levels accept repeats (they add up).
    nonordered = Format(("dense", Level("compressed", ordered=False)))
    t = SparseTensor.from_buffers((2, 5), nonordered, **csr_buffers([0, 3, 3], [4, 1, 3], arr([1., 2., 3.], float)))
    np.testing.assert_array_equal(t.to_numpy(), _dense_from_rows((2, 5), {0: [(4, 1.), (1, 2.), (3, 3.)]}))
    nonunique = Format(("dense", Level("compressed", unique=False)))
    t = SparseTensor.from_buffers((2, 5), nonunique, **csr_buffers([0, 3, 3], [1, 1, 3], arr([1., 2., 4.], float)))
    np.testing.assert_array_equal(t.to_numpy(), _dense_from_rows((2, 5), {0: [(1, 3.), (3, 4.)]}))
    # empty and zero-size tensors
    for shape, indptr in (((0, 5), [0]), ((4, 0), [0, 0, 0, 0, 0])):
        t = SparseTensor.from_buffers(shape, CSR, **csr_buffers(indptr, []))
        assert t.nnz == 0 and t.to_numpy().shape == shape
    t = SparseTensor.from_buffers((0,), SPARSE_VECTOR, pos=(arr([0, 0]),), crd=(arr([]),), values=np.ones(0))
    assert t.to_numpy().shape == (0,)
    t = SparseTensor.from_buffers((2, 2, 2), coo(3), pos=(arr([0, 2]), None, None),
                                  crd=(arr([0, 0]), arr([1, 1]), arr([0, 1])), values=arr([5., 6.], float))
    validate(t)
    expected = np.zeros((2, 2, 2))
    expected[0, 1, 0], expected[0, 1, 1] = 5., 6.
    np.testing.assert_array_equal(t.to_numpy(), expected)
    # Unsorted entries in the next segment after a segment boundary are fine.
    t = SparseTensor.from_buffers((2, 9), CSR, **csr_buffers([0, 2, 4], [5, 8, 1, 2], arr([1., 2., 3., 4.], float)))
    np.testing.assert_array_equal(t.to_numpy(), _dense_from_rows((2, 9), {0: [(5, 1.), (8, 2.)],
                                                                          1: [(1, 3.), (2, 4.)]}))


def test_validate_false_skips_checks_and_validate_catches():
    t = SparseTensor.from_buffers((2, 3), CSR, validate=False, **csr_buffers([0, 1, 2], [0, 7]))
    with pytest.raises(ValueError, match=r"B: level 1 \(compressed\): coordinate 7 out of range"):
        validate(t, name="B")


def test_check_helpers():
    assert check_shape((np.int64(3), 4)) == (3, 4)
    assert type(check_shape((np.int64(3),))[0]) is int
    assert check_dtype("float32") == np.float32
    with pytest.raises(TypeError, match="unsupported dtype float16"):
        check_dtype(np.float16)


def test_int32_overflow_raises():
    # 2**31 stored entries cannot be built cheaply; exercise the same check on the index conversion.
    from splyce.tensors.convert import to_index_array

    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        to_index_array(arr([0, 2**31]), 32, "pos positions")
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        asarray(sps.csr_array((np.ones(1), arr([2**31]), arr([0, 1])), shape=(1, 2**31 + 1)),
                CSR.with_widths(64, 32))


@pytest.mark.parametrize("library", [True, False])
def test_a_jitted_call_checks_its_scipy_operand_every_time(library):
    """A scipy CSR given to a jitted function is checked at every call (its flags are not trusted): after a
    first good call, the same object with a column out of range or positions out of order raises a
    ``ValueError`` naming the argument, and with unsorted columns it is sorted on a copy (the result is the
    canonical matrix's, and the operand is not modified)."""
    rng = np.random.default_rng(5)
    a = sps.random_array((3000, 40), density=0.1, format="csr", rng=rng)   # > one row block of the scan
    x = rng.random(40)
    f = splyce.jit(lambda a, x: a @ x, library=library)
    np.testing.assert_allclose(f(a, x), a @ x, rtol=1e-13)
    row = 2500
    lo, hi = int(a.indptr[row]), int(a.indptr[row + 1])
    assert hi - lo >= 2
    for corrupt, message in ((lambda b: b.indices.__setitem__(lo, 40), "out of range"),
                             (lambda b: b.indices.__setitem__(hi - 1, -1), "out of range"),
                             (lambda b: b.indptr.__setitem__(row + 1, lo - 1), "position")):
        bad = a.copy()
        corrupt(bad)
        with pytest.raises(ValueError, match=message) as info:
            f(bad, x)
        assert "argument 0" in str(info.value)
    unsorted = a.copy()
    unsorted.indices[lo:hi] = unsorted.indices[lo:hi][::-1].copy()
    unsorted.data[lo:hi] = unsorted.data[lo:hi][::-1].copy()
    unsorted.has_sorted_indices = True    # a stale flag: not trusted
    before = unsorted.indices.copy()
    np.testing.assert_allclose(f(unsorted, x), a @ x, rtol=1e-13)
    assert np.array_equal(unsorted.indices, before)
