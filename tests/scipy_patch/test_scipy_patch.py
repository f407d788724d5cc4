"""splyce.patch_scipy(): served calls give scipy's results (class, dtype, index dtype, values bit for bit,
errors), the rest falls back to scipy's own code, unpatch restores scipy exactly, threads, the stats."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.sparse as sps
from scipy.sparse import _compressed

import splyce
from splyce.scipy_patch import routes

HOOKED = ("_matmul_sparse", "_matmul_multivector", "_add_sparse", "_sub_sparse", "_multiply_2d_with_broadcasting")


@pytest.fixture(autouse=True)
def _switch_off():
    splyce.unpatch_scipy()
    splyce.scipy_patch_stats(reset=True)
    yield
    splyce.unpatch_scipy()


def _outcome(fn):
    try:
        return fn()
    except Exception as e:       # noqa: BLE001 - the error itself is compared
        return e


def _assert_same(ours, ref):
    """``ours`` is exactly scipy's ``ref``: class, shape, dtypes, values (bit for bit, NaN in place), errors."""
    assert type(ours) is type(ref), (type(ours), type(ref))
    if isinstance(ref, Exception):
        assert str(ours) == str(ref)
        return
    if sps.issparse(ref):
        assert ours.shape == ref.shape and ours.dtype == ref.dtype and ours.nnz == ref.nnz
        if ref.format not in ("csr", "csc"):
            if ref.format == "coo":
                assert [c.dtype for c in ours.coords] == [c.dtype for c in ref.coords]
            _assert_bits(ours.toarray(), ref.toarray())
            return
        assert ours.indices.dtype == ref.indices.dtype and ours.indptr.dtype == ref.indptr.dtype
        assert len(ours.data) == len(ref.data) == ours.nnz
        o, r = ours.sorted_indices(), ref.sorted_indices()     # SpGEMM's column order is not sorted
        assert np.array_equal(o.indptr, r.indptr) and np.array_equal(o.indices, r.indices)
        _assert_bits(o.data, r.data)
        assert set(vars(ours)) == set(vars(ref))              # no cached flags scipy's result lacks
        return
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    _assert_bits(np.asarray(ours), np.asarray(ref))


def _assert_bits(x, y):
    if x.dtype == np.longdouble and x.dtype.itemsize > 8:      # padding bytes are undefined: values and signs
        assert np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))
    else:
        assert x.tobytes() == y.tobytes()


def _both(fn, route_small=True):
    """fn() unpatched and patched: asserts the same outcome, returns the stats of the patched call."""
    ref = _outcome(fn)
    splyce.scipy_patch_stats(reset=True)
    with splyce.patched_scipy(route_small=route_small):
        ours = _outcome(fn)
    _assert_same(ours, ref)
    return splyce.scipy_patch_stats(reset=True)


def _random(shape, fmt, cls, dtype, rng, density=0.3, specials=False):
    m = sps.random_array(shape, density=density, format="csr", rng=rng)
    m.data = (m.data * 8 - 4).round(1)
    if specials and m.nnz >= 4:
        m.data[:4] = [np.nan, np.inf, -0.0, 0.0]       # NaN / Inf / explicit zeros, as scipy keeps or drops them
    m = m.astype(dtype)
    return cls(m.asformat(fmt))


FAMILIES = {"array": (sps.csr_array, sps.csc_array), "matrix": (sps.csr_matrix, sps.csc_matrix)}
OPS = {
    "matmul": lambda a, b: a @ b.T,
    "dot": lambda a, b: a.dot(b.T),
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a.multiply(b),
}
OP_STAT = {"matmul": "matmul_sparse", "dot": "matmul_sparse", "add": "add", "subtract": "subtract",
           "multiply": "multiply"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("formats", ["csr,csr", "csr,csc", "csc,csc", "csc,csr"])
def test_served_calls_are_scipys(family, dtype, op, formats):
    rng = np.random.default_rng(7)
    classes = dict(zip(("csr", "csc"), FAMILIES[family]))
    fa, fb = formats.split(",")
    specials = np.dtype(dtype).kind == "f"
    a = _random((30, 40), fa, classes[fa], dtype, rng, specials=specials)
    b = _random((30, 40), fb, classes[fb], dtype, rng, specials=specials)
    stats = _both(lambda: OPS[op](a, b))
    assert stats[OP_STAT[op]]["served"] == 1, stats


@pytest.mark.parametrize("family", FAMILIES)
def test_spmatrix_star_and_spmm_are_scipys(family):
    rng = np.random.default_rng(3)
    csr = FAMILIES[family][0]
    a = _random((50, 60), "csr", csr, np.float64, rng)
    b = _random((60, 20), "csr", csr, np.float64, rng)
    x = rng.random((60, 5))
    assert _both(lambda: a @ x)["matmul_dense"]["served"] == 1
    assert _both(lambda: a.dot(np.asmatrix(x)))["matmul_dense"]["served"] == 1      # numpy.matrix: scipy's wrap
    if family == "matrix":
        assert _both(lambda: a * b)["matmul_sparse"]["served"] == 1          # spmatrix * is a product
    else:
        c = _random((50, 60), "csr", csr, np.float64, rng)
        assert _both(lambda: a * c)["multiply"]["served"] == 1           # sparray * is elementwise


def test_coo_and_rmatmul_paths_are_served():
    rng = np.random.default_rng(4)
    a = _random((40, 40), "coo", sps.coo_array, np.float64, rng)
    b = _random((40, 40), "csr", sps.csr_array, np.float64, rng)
    assert _both(lambda: a @ b)["matmul_sparse"]["served"] == 1      # COO: scipy's tocsr(), then the CSR worker
    assert _both(lambda: a + b)["add"]["served"] == 1
    assert _both(lambda: b + a)["add"]["served"] == 1                # the COO right operand converted as scipy does


def test_int64_indices_follow_scipys_index_policy():
    rng = np.random.default_rng(5)
    for cls in (sps.csr_array, sps.csr_matrix):
        a = _random((30, 30), "csr", cls, np.float64, rng)
        b = _random((30, 30), "csr", cls, np.float64, rng)
        a.indices, a.indptr = a.indices.astype(np.int64), a.indptr.astype(np.int64)   # sparray keeps int64
        a.data, b.data = abs(a.data) + 1, abs(b.data) + 1
        # (positive values: a product whose sums cancel leaves scipy's spmatrix index dtype to the unwritten
        # tail of its over-allocated arrays, which no one can match)
        stats = _both(lambda: a + b)
        assert stats["add"]["served"] == 1
        _both(lambda: a @ b)


@pytest.mark.parametrize("case", ["float128", "complex", "bool-subtract", "comparison", "outer-broadcast",
                                  "row-broadcast", "nd", "mixed-family", "mixed-dtype", "non-canonical",
                                  "mixed-dense-dtype", "vector", "dense-sum", "bsr", "shape-error", "matmul-shape-error",
                                  "int8", "1d"])
def test_unsupported_calls_fall_back_to_scipy(case):
    rng = np.random.default_rng(11)
    a = _random((20, 30), "csr", sps.csr_array, np.float64, rng)
    b = _random((20, 30), "csr", sps.csr_array, np.float64, rng)
    calls = {
        "float128": (lambda: a.astype(np.longdouble) + b.astype(np.longdouble), "add", "dtype"),
        "complex": (lambda: a.astype(complex) @ b.T.astype(complex), "matmul_sparse", "dtype"),
        "bool-subtract": (lambda: a.astype(bool) - b.astype(bool), "subtract", "dtype"),
        "comparison": (lambda: a != b, None, None),
        "outer-broadcast": (lambda: sps.csr_array(np.ones((1, 3))) * sps.csr_array(np.ones((3, 1))),
                            "multiply", "broadcast"),    # scipy's own road: a row times a column is a product
        "row-broadcast": (lambda: a.multiply(sps.csr_array(np.arange(30.0).reshape(1, 30))), "multiply",
                          "broadcast"),
        "nd": (lambda: sps.coo_array(np.ones((2, 3, 4))) + sps.coo_array(np.ones((2, 3, 4))), None, None),
        "mixed-family": (lambda: a @ sps.csr_matrix(b).T, "matmul_sparse", "served"),   # converted as scipy does
        "mixed-dtype": (lambda: a + b.astype(np.float32), "add", "served"),     # both cast as scipy casts
        "mixed-dense-dtype": (lambda: a @ np.ones((30, 4), dtype=np.int8), "matmul_dense", "mixed-dtype"),
        "non-canonical": (lambda: sps.csr_array((np.ones(3), [2, 0, 0], [0, 3, 3]), shape=(2, 4)) +
                          sps.csr_array(np.ones((2, 4))), "add", "non-canonical"),
        "vector": (lambda: a @ np.ones(30), None, None),            # SpMV is not routed (no gain measured)
        "dense-sum": (lambda: a + np.ones((20, 30)), None, None),
        "bsr": (lambda: a.tobsr() + b, "add", "format"),
        "shape-error": (lambda: a + b.T, None, None),
        "matmul-shape-error": (lambda: a @ b, None, None),
        "int8": (lambda: a.astype(np.int8).multiply(b.astype(np.int8)), "multiply", "dtype"),
        "1d": (lambda: sps.csr_array(np.arange(5.0)) + sps.csr_array(np.arange(5.0)), "add", "ndim"),
    }
    fn, op, reason = calls[case]
    stats = _both(fn)
    if op is not None:
        if reason == "served":
            assert stats[op]["served"] == 1, stats
        else:
            assert stats[op]["fallback"].get(reason, 0) >= 1, stats


def test_small_calls_go_to_scipy_unless_asked():
    rng = np.random.default_rng(2)
    a = _random((8, 8), "csr", sps.csr_array, np.float64, rng)
    stats = _both(lambda: a @ a, route_small=False)
    assert stats["matmul_sparse"] == {"served": 0, "fallback": {"small": 1}}
    big = _random((400, 400), "csr", sps.csr_array, np.float64, rng, density=0.02)
    assert _both(lambda: big @ big, route_small=False)["matmul_sparse"]["served"] == 1
    assert _both(lambda: big + big.T, route_small=False)["add"]["served"] == 1


def test_inputs_unchanged_and_no_flags_cached():
    rng = np.random.default_rng(6)
    a = _random((30, 30), "csr", sps.csr_array, np.float64, rng)
    b = _random((30, 30), "csc", sps.csc_array, np.float64, rng)
    before = [(set(vars(x)), x.data.copy(), x.indices.copy(), x.indptr.copy()) for x in (a, b)]
    with splyce.patched_scipy(route_small=True):
        a @ b, a + b, a - b, a.multiply(b)
    assert splyce.scipy_patch_stats()["add"]["served"] == 1
    for x, (keys, data, indices, indptr) in zip((a, b), before):
        assert set(vars(x)) == keys          # scipy's lazily cached canonical flags are not set by the check
        assert np.array_equal(x.data, data) and np.array_equal(x.indices, indices)
        assert np.array_equal(x.indptr, indptr)


def test_unpatch_restores_scipy_exactly():
    cls = _compressed._cs_matrix
    before = {name: cls.__dict__[name] for name in HOOKED}
    inherited = {c: dict(vars(c)) for c in (sps.csr_array, sps.csc_matrix, sps.bsr_array)}
    assert splyce.patch_scipy() is True
    assert splyce.patch_scipy() is False                 # idempotent
    assert all(cls.__dict__[name] is not before[name] for name in HOOKED)
    assert splyce.unpatch_scipy() is True
    assert splyce.unpatch_scipy() is False
    assert {name: cls.__dict__[name] for name in HOOKED} == before
    assert all(cls.__dict__[name] is before[name] for name in HOOKED)
    assert {c: dict(vars(c)) for c in inherited} == inherited


def test_context_manager_nests_and_restores_on_error():
    cls = _compressed._cs_matrix
    original = cls.__dict__["_add_sparse"]
    with pytest.raises(RuntimeError):
        with splyce.patched_scipy():
            with splyce.patched_scipy():
                assert splyce.is_scipy_patched()
            assert splyce.is_scipy_patched()          # the inner block did not turn it on: leaves it on
            raise RuntimeError("boom")
    assert not splyce.is_scipy_patched() and cls.__dict__["_add_sparse"] is original
    splyce.patch_scipy()
    with splyce.patched_scipy():
        pass
    assert splyce.is_scipy_patched()                 # on before the block: still on


def test_a_failing_dropin_leaves_the_thread_served():
    a = sps.csr_array((np.ones(2), np.array([0, 99], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32)),
                      shape=(2, 4))                  # column 99 out of range: splyce refuses it
    a._has_canonical_format = True
    b = sps.csr_array(np.ones((2, 4)))
    with splyce.patched_scipy(route_small=True):
        with pytest.raises(ValueError):
            a.multiply(b)
        assert routes._local.busy is False
        _assert_same(b + b, sps.csr_array(np.full((2, 4), 2.0)))
    assert splyce.scipy_patch_stats()["add"]["served"] == 1


def test_threads_are_served_and_switching_is_safe():
    rng = np.random.default_rng(9)
    mats = [_random((60, 60), "csr", sps.csr_array, np.float64, rng) for _ in range(4)]
    refs = [(m @ m.T, m + m.T, m.multiply(m.T)) for m in mats]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                m = mats[k % 4]
                for ours, ref in zip((m @ m.T, m + m.T, m.multiply(m.T)), refs[k % 4]):
                    _assert_same(ours, ref)
        except Exception as e:      # noqa: BLE001
            errors.append(e)

    def switch():
        for _ in range(50):
            splyce.patch_scipy(route_small=True)
            splyce.unpatch_scipy()

    with splyce.patched_scipy(route_small=True):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    s = splyce.scipy_patch_stats()
    assert sum(v["served"] for v in s.values()) == 4 * 20 * 3      # every call counted, none lost
    threads = [threading.Thread(target=switch) for _ in range(3)] + \
        [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert not splyce.is_scipy_patched()
    assert all(_compressed._cs_matrix.__dict__[name].__module__.startswith("scipy") for name in HOOKED)


def test_stats_count_and_reset():
    rng = np.random.default_rng(1)
    a = _random((30, 30), "csr", sps.csr_array, np.float64, rng)
    with splyce.patched_scipy(route_small=True):
        a + a
        a + a.astype(np.float32)
        a.astype(bool) - a.astype(bool)
    s = splyce.scipy_patch_stats(reset=True)
    assert s["add"] == {"served": 2, "fallback": {}}
    assert s["subtract"] == {"served": 0, "fallback": {"dtype": 1}}
    assert splyce.scipy_patch_stats() == {}


def test_import_splyce_stays_cheap():
    import subprocess
    import sys

    code = "import sys, splyce; assert 'splyce.scipy_patch' not in sys.modules and 'scipy' not in sys.modules; " \
           "splyce.patch_scipy; assert 'splyce.scipy_patch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
