"""Sparse matrix times dense vector / matrix drop-ins (native SpMV / SpMM) and what they check, vs scipy."""

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings, strategies as st

import splyce
from splyce.runtime import arguments


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (5, 0), (0, 4), (9, 7), (60, 45)])
@pytest.mark.parametrize("cols", [None, 1, 3, 16, 40])
def test_spmv_spmm_bit_identical_to_scipy(dtype, shape, cols):
    rng = np.random.default_rng(sum(shape))
    a = sps.random_array(shape, density=0.3, format="csr", rng=rng)
    a.data = (a.data * 8 - 4).astype(dtype)
    x = (rng.random(shape[1] if cols is None else (shape[1], cols)) * 8 - 4).astype(dtype)
    ours, ref = splyce.matmul(a, x), a @ x
    assert type(ours) is type(ref) and ours.shape == ref.shape and ours.dtype == ref.dtype
    assert np.array_equal(ours, ref)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(["csr", "csc", "coo", "matrix"]), st.sampled_from([1, 2, 3]), st.booleans())
def test_spmv_property(m, n, density, seed, fmt, threads, mixed):
    rng = np.random.default_rng(seed)
    a = sps.random_array((m, n), density=density, format="csr" if fmt == "matrix" else fmt, rng=rng)
    if fmt == "matrix":
        a = sps.csr_matrix(a)
    x = rng.random(n).astype(np.float32 if mixed else np.float64)
    ours, ref = splyce.matmul(a, x, threads=threads), a @ x
    # (scipy's COO gives a 0-d result for a 1 x 0 matrix; NumPy's dense product gives shape (1,), as we do)
    assert ours.shape == (m,) and ours.dtype == ref.dtype
    if fmt in ("csr", "matrix"):          # the same summation order as scipy's CSR product: bit for bit
        assert np.array_equal(ours, np.reshape(ref, (m,)))
    else:                                 # scipy sums a CSC / COO in its own order
        np.testing.assert_allclose(ours, np.reshape(ref, (m,)), rtol=1e-6 if mixed else 1e-13)


def test_unsorted_and_duplicate_columns_need_no_canonical_copy():
    indptr = np.array([0, 3, 3, 5], dtype=np.int32)
    indices = np.array([2, 0, 2, 1, 0], dtype=np.int32)
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    a = sps.csr_array((data, indices, indptr), shape=(3, 3))
    x = np.array([1.0, 10.0, 100.0])
    before = [arr.copy() for arr in (indptr, indices, data)]
    assert np.array_equal(splyce.matmul(a, x), a @ x)
    assert all(np.array_equal(b, arr) for b, arr in zip(before, (indptr, indices, data)))   # not modified


def test_bad_operands_raise_clear_errors():
    x = np.ones(4)
    out_of_range = sps.csr_array((np.ones(2), np.array([0, 4], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32)),
                                 shape=(2, 4))
    with pytest.raises(ValueError, match=r"coordinate 4 out of range \[0, 4\)"):
        splyce.matmul(out_of_range, x)
    negative = out_of_range.copy()
    negative.indices[1] = -1
    with pytest.raises(ValueError, match="out of range"):
        splyce.matmul(negative, x)
    decreasing = sps.csr_array((np.ones(2), np.array([0, 1], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32)),
                               shape=(2, 4))
    decreasing.indptr[1] = 3                       # 0, 3, 2: positions decrease
    with pytest.raises(ValueError, match="positions decrease"):
        splyce.matmul(decreasing, x)
    with pytest.raises(TypeError, match="float16"):
        splyce.matmul(out_of_range.tocsc(), x.astype(np.float16))
    with pytest.raises(TypeError, match="float16"):
        splyce.matmul(sps.csr_array(np.eye(4)), x.astype(np.float16))


def test_a_tensor_is_validated_once_then_trusted(monkeypatch):
    """scipy's contract (docs/caches.md): checked when made, or on its first kernel call; trusted after."""
    a = sps.random_array((30, 20), density=0.2, format="csr", random_state=1)
    sealed = splyce.asarray(a, copy=True)
    wrapped = splyce.asarray(a)                    # shares scipy's arrays: checked now, as scipy checks
    unchecked = splyce.SparseTensor.from_buffers(a.shape, wrapped.format, wrapped.pos, wrapped.crd, a.data,
                                                 validate=False)
    assert sealed.sealed and not wrapped.sealed
    assert sealed.validated and wrapped.validated and not unchecked.validated
    with pytest.raises(ValueError):
        sealed.values[0] = 1.0                     # read-only: the check made once cannot go stale
    calls = []
    real = arguments.validate
    monkeypatch.setattr(arguments, "validate", lambda t, name: (calls.append(name), real(t, name)))
    f = splyce.jit(lambda m, v: m @ v)
    x = np.ones(20)
    for _ in range(3):
        assert np.allclose(f(sealed, x), a @ x) and np.allclose(f(wrapped, x), a @ x)
    assert calls == []
    for _ in range(3):
        assert np.allclose(f(unchecked, x), a @ x)
    assert len(calls) == 1 and unchecked.validated          # checked on its first call only
    assert np.allclose(f(a, x), a @ x) and np.allclose(f(a, x), a @ x)
    assert len(calls) == 1   # a scipy argument is checked on every call, while converted (not by validate)
    out = sealed.to_scipy()                        # handing the buffers out unseals the tensor
    assert not sealed.sealed and out.data.flags.writeable


def test_a_bad_tensor_made_unchecked_is_refused_on_its_first_call():
    a = sps.random_array((30, 20), density=0.2, format="csr", random_state=1)
    indices = a.indices.copy()
    indices[3] = 99
    bad = splyce.SparseTensor.from_buffers(a.shape, splyce.CSR.with_widths(32, 32), (None, a.indptr),
                                           (None, indices), a.data, validate=False)
    f = splyce.jit(lambda m, v: m @ v)
    for _ in range(2):   # refused every time: a failed check never marks it validated
        with pytest.raises(ValueError, match="out of range"):
            f(bad, np.ones(20))
    assert not bad.validated


# -- the per-call fast path (scipy CSR, 1-D vector of its dtype): its checks happen inside the kernel ----------
def _general_path_off(monkeypatch):
    """Make the general SpMV path fail, so a test proves the fast path produced (or refused) the result."""
    from splyce.dropin import products as dropin

    def refuse(*_args, **_kw):
        raise AssertionError("the general SpMV path ran")
    monkeypatch.setattr(dropin, "_csr_times_dense", refuse)


def _csr(indptr, indices, data, shape, index_dtype, kind):
    a = kind((np.array(data, dtype=np.float64), np.array(indices), np.array(indptr)), shape=shape)
    a.indices, a.indptr = np.array(indices, dtype=index_dtype), np.array(indptr, dtype=index_dtype)  # scipy narrows
    assert a.indices.dtype == index_dtype and a.indptr.dtype == index_dtype
    return a


def _kernel_variant(monkeypatch, variant: str):
    """Make the fast path pick the flat kernel (short rows), the grouped-rows kernel (matrices in cache) or the
    one-row kernel for every matrix."""
    from splyce.native import spmv as native_spmv     # the one SpMV rule's constants (spmv_variant)

    monkeypatch.setattr(native_spmv, "FLAT_MAX_ROW", 1 << 40 if variant == "flat" else -1)
    monkeypatch.setattr(native_spmv, "FLAT_MIN_BYTES", 0)
    monkeypatch.setattr(native_spmv, "GROUPED_MAX_BYTES", 1 << 62 if variant == "grouped" else -1)
    monkeypatch.setattr(native_spmv, "GROUPED_MIN_ROW", 0)


@pytest.mark.parametrize("variant", ["flat", "grouped", "rows"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", [sps.csr_array, sps.csr_matrix])
def test_fast_spmv_is_taken_and_bit_identical(monkeypatch, variant, index_dtype, kind):
    rng = np.random.default_rng(5)
    a = sps.random_array((1300, 700), density=0.02, format="csr", rng=rng)   # > 2 blocks of checked rows
    banded = sps.diags_array([rng.random(1300 - abs(k)) for k in (-2, -1, 0, 1, 2)], offsets=[-2, -1, 0, 1, 2],
                             shape=(1300, 700 + 600)).tocsr()[:, :700]       # blocks of rows of one length
    x = rng.random(700) * 8 - 4
    x[::50] = [np.nan, np.inf, -np.inf, -0.0][0:1] * len(x[::50])            # NaN propagates as in scipy
    _kernel_variant(monkeypatch, variant)
    X = np.ascontiguousarray(np.stack([x, -x, 2 * x], axis=1))                 # SpMM: a kernel per column count
    thin = sps.random_array((1300, 700), density=0.0015, format="csr", rng=rng)  # empty rows and runs of them
    for mat in (a, sps.csr_array(banded), thin):
        mat = _csr(mat.indptr, mat.indices, mat.data * 8 - 4, mat.shape, index_dtype, kind)
        refs = [mat @ x, mat @ X, mat @ X[:, :1].copy(), mat @ np.tile(X, 11)[:, :32].copy()]
        _general_path_off(monkeypatch)
        for vec, ref in zip((x, X, X[:, :1].copy(), np.tile(X, 11)[:, :32].copy()), refs):
            ours = splyce.matmul(mat, vec)
            assert type(ours) is np.ndarray and ours.dtype == ref.dtype and ours.shape == ref.shape
            assert np.array_equal(ours.view(np.int64), ref.view(np.int64))     # bit for bit, NaN included
        monkeypatch.undo()
        _kernel_variant(monkeypatch, variant)
    # unsorted and repeated columns under a stale "canonical" flag: a product needs neither order nor uniqueness
    shuffled = _csr([0, 3, 3, 5], [2, 0, 2, 1, 0], [1.0, 2.0, 3.0, 4.0, 5.0], (3, 3), index_dtype, kind)
    shuffled.has_canonical_format = True
    assert np.array_equal(splyce.matmul(shuffled, np.array([1.0, 10.0, 100.0])), [402.0, 0.0, 45.0])


@pytest.mark.parametrize("variant", ["flat", "grouped", "rows"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_sparse_tensor_operand_takes_the_fast_path(monkeypatch, variant, index_dtype):
    """A CSR ``SparseTensor`` (checked when made) goes to the fast path's kernel as scipy's CSR does, with the
    same bits; other layouts keep the general path: a CSC times a vector its scatter kernel on the tensor's
    buffers, unordered or repeated columns re-stored first."""
    rng = np.random.default_rng(11)
    a = sps.random_array((1300, 700), density=0.02, format="csr", rng=rng)
    a.data = a.data * 8 - 4
    a.indices, a.indptr = a.indices.astype(index_dtype), a.indptr.astype(index_dtype)
    x = rng.random(700) * 8 - 4
    x[::97] = np.nan
    X = np.ascontiguousarray(np.stack([x, -x, 2 * x], axis=1))
    t = splyce.asarray(a)
    refs = [a @ x, a @ X]
    _kernel_variant(monkeypatch, variant)
    _general_path_off(monkeypatch)
    for vec, ref in zip((x, X), refs):
        for ours in (splyce.matmul(t, vec), t @ vec):
            assert type(ours) is np.ndarray and ours.dtype == ref.dtype and ours.shape == ref.shape
            assert np.array_equal(ours.view(np.int64), ref.view(np.int64))
    monkeypatch.undo()
    from splyce.dropin import products as dropin

    csc = splyce.asarray(a.tocsc())
    assert dropin._fast_spmv(csc, x) is None
    assert np.allclose(splyce.matmul(csc, x), refs[0], equal_nan=True)
    unordered_csr = splyce.Format(("dense", splyce.Level("compressed", ordered=False)))
    unordered = splyce.SparseTensor((2, 2), unordered_csr, [None, np.array([0, 2, 3])],
                                    [None, np.array([1, 0, 0])], np.array([2.0, 3.0, 4.0]))
    assert dropin._fast_spmv(unordered, np.ones(2)) is None
    assert np.array_equal(splyce.matmul(unordered, np.array([1.0, 10.0])), [23.0, 4.0])
    # a CSC tensor (and a CSR one read transposed in a jitted function) goes to the scatter kernel on its
    # buffers: checked as they are read there too
    for defect in ("crd", "pos"):
        t = splyce.asarray(sps.csr_array(a, copy=True))
        c = splyce.asarray(sps.csc_array(a, copy=True))
        for tensor in (t, c):
            getattr(tensor, defect)[1][3] = 10**6
        with pytest.raises(ValueError, match="modified after it was made"):
            splyce.matmul(c, x)
        with pytest.raises(ValueError, match="modified after it was made"):
            splyce.jit(lambda a, z: a.T @ z)(t, np.ones(a.shape[0]))
    # buffers broken in place after the tensor was made: refused, never read out of bounds
    broken = splyce.asarray(sps.csr_array(a))
    broken.crd[1][5] = 10**6
    with pytest.raises(ValueError, match="modified after it was made"):
        splyce.matmul(broken, x)


def _bad_operands(index_dtype, kind):
    """(matrix, vector, error pattern) for every defect a product must refuse, each built valid and then broken
    by assigning to its arrays (scipy checks only at construction; its flags then may be stale)."""
    m, n = 1100, 40                      # the defects sit in several blocks of checked rows
    rng = np.random.default_rng(7)
    base = sps.random_array((m, n), density=0.1, format="csr", rng=rng)
    base.has_canonical_format = True
    x = rng.random(n)
    cases = []

    def case(pattern, edit):
        a = _csr(base.indptr, base.indices, base.data, base.shape, index_dtype, kind)
        a.has_canonical_format = True
        edit(a)
        cases.append((a, x, pattern))

    for row in (0, 511, 512, 1099):      # first row, either side of a block boundary, last row
        at = int(base.indptr[row])
        case("out of range", lambda a, at=at: a.indices.__setitem__(at, n))
        case("out of range", lambda a, at=at: a.indices.__setitem__(at, -1))
        case("out of range", lambda a, at=at: a.indices.__setitem__(at, np.iinfo(index_dtype).max))
    for row in (1, 512, 513, 1099):      # positions that decrease, within a block and across a boundary
        case("positions decrease", lambda a, row=row: a.indptr.__setitem__(row, a.indptr[row + 1] + 1))
    case("positions must start at 0", lambda a: a.indptr.__setitem__(0, 1))
    case("positions end at", lambda a: a.indptr.__setitem__(m, a.indptr[m] - 1))
    case("positions end at", lambda a: (setattr(a, "indices", a.indices[:-1].copy()),      # fewer entries
                                        setattr(a, "data", a.data[:-1].copy())))          # than indptr says
    return cases


@pytest.mark.parametrize("variant", ["flat", "grouped", "rows"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", [sps.csr_array, sps.csr_matrix])
def test_fast_spmv_refuses_every_malformed_operand(monkeypatch, variant, index_dtype, kind):
    _kernel_variant(monkeypatch, variant)
    _general_path_off(monkeypatch)
    for a, x, pattern in _bad_operands(index_dtype, kind):
        for vec in (x, np.ascontiguousarray(np.stack([x, x], axis=1))):     # SpMV and SpMM
            before = [arr.copy() for arr in (a.indptr, a.indices, a.data, vec)]
            with pytest.raises(ValueError, match=pattern):
                splyce.matmul(a, vec)
            assert all(np.array_equal(b, arr) for b, arr in zip(before, (a.indptr, a.indices, a.data, vec)))


def test_fast_spmv_leaves_other_calls_to_the_general_path():
    from splyce.dropin import products as dropin

    a = sps.random_array((30, 20), density=0.2, format="csr", rng=3)
    x = np.random.default_rng(3).random(20)

    def with_data(data):
        b = a.copy()
        b.data = data
        return b

    others = [(a, x.astype(np.float32)), (a, np.repeat(x, 2)[::2]), (a, x.astype(">f8")),
              (with_data(np.repeat(a.data, 2)[::2]), x),
              (a, np.ones((20, 33))), (a, np.asfortranarray(np.ones((20, 3)))), (a, np.ones((20, 0)))]
    for mat, vec in others:
        assert dropin._fast_spmv(mat, vec) is None
        np.testing.assert_allclose(splyce.matmul(mat, vec), a.toarray() @ vec, rtol=1e-6)
    assert dropin._fast_spmv(with_data(a.data.astype(">f8")), x) is None
    class Lookalike:                       # has an ndarray's attributes but not its memory layout
        def __init__(self, arr):
            self.dtype, self.strides, self.ndim, self.shape, self._arr = arr.dtype, arr.strides, 1, arr.shape, arr

        def __len__(self):
            return len(self._arr)

    odd = a.copy()
    odd.data = Lookalike(a.data)
    assert dropin._fast_spmv(odd, x) is None
    wrong_length = with_data(a.data[:-1].copy())
    assert dropin._fast_spmv(wrong_length, x) is None
    with pytest.raises(ValueError, match="values have length"):
        splyce.matmul(wrong_length, x)
    with pytest.raises(ValueError, match="not aligned"):
        splyce.matmul(a, np.ones(21))


def test_array_objects_entry_reads_the_data_pointer(monkeypatch):
    from splyce.native import array_objects
    from splyce.dropin import products as dropin

    assert array_objects.DATA_OFFSET is not None          # numpy's layout confirmed on this platform
    # without a confirmed layout the fast path steps aside and the general path answers
    monkeypatch.setattr(array_objects, "DATA_OFFSET", None)
    monkeypatch.setattr(dropin, "_spmv_entries", {})
    monkeypatch.setattr(dropin, "_spmv_last", (None, None, None, None))
    a = sps.random_array((9, 7), density=0.4, format="csr", rng=2)
    x = np.arange(7.0)
    assert dropin._fast_spmv(a, x) is None and np.array_equal(splyce.matmul(a, x), a @ x)


def test_positions_far_outside_the_entries_are_refused_without_reading_there():
    """A position in the middle of indptr far beyond nnz (or negative) makes a segment that a kernel trusting
    the ends of indptr would read out of bounds. The SpMV kernels check each segment (``start <= stop <=
    nnz``, unsigned) before reading it, SpMV and SpMM alike. The columns end just before a page that may not be read (PROT_NONE):
    any read past them kills the child process, and the test fails with its signal."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        import ctypes, mmap
        import numpy as np, scipy.sparse as sps, splyce
        from splyce.native import ir_text, spmv as native_spmv
        from splyce.dropin import products as dropin
        ir_text.MIN_CHUNK = 8                # threads=2 really splits these 4400 entries
        dropin.SERIAL_MAX_WORK = 0
        keep = []

        def before_guard_page(arr):
            """A copy of arr ending exactly where an unreadable page starts."""
            pages = -(-arr.nbytes // mmap.PAGESIZE) + 1
            mm = mmap.mmap(-1, pages * mmap.PAGESIZE)
            start = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            guard = ctypes.c_void_p(start + (pages - 1) * mmap.PAGESIZE)
            assert ctypes.CDLL(None).mprotect(guard, mmap.PAGESIZE, 0) == 0
            out = np.frombuffer(mm, dtype=arr.dtype, count=arr.size, offset=(pages - 1) * mmap.PAGESIZE - arr.nbytes)
            out[:] = arr
            keep.append(mm)
            return out

        base = sps.random_array((1100, 40), density=0.1, format="csr", rng=np.random.default_rng(3))
        x, X = np.ones(40), np.ones((40, 3))
        refused = 0
        for index_dtype in (np.int32, np.int64):
            for flat, grouped in ((1 << 40, -1), (-1, 1 << 62), (-1, -1)):
                # the one SpMV rule (native_spmv.spmv_variant / goes_flat): the fast path's choice and the
                # threaded general path's at once
                native_spmv.FLAT_MAX_ROW, native_spmv.GROUPED_MAX_BYTES, native_spmv.GROUPED_MIN_ROW = flat, grouped, 0
                native_spmv.FLAT_MIN_BYTES = 0
                for row, value in ((600, np.iinfo(index_dtype).max), (600, -5), (1, 2**30), (1099, -1)):
                    a = sps.csr_array((base.data, base.indices, base.indptr), shape=base.shape)
                    a.indices = before_guard_page(base.indices.astype(index_dtype))
                    a.data = before_guard_page(base.data)
                    a.indptr = base.indptr.astype(index_dtype)
                    a.indptr[row] = value
                    for threads, vec in ((1, x), (2, x), (1, X), (2, X)):     # SpMV, SpMM
                        try:
                            splyce.matmul(a, vec, threads=threads)
                        except ValueError as e:
                            assert "positions" in str(e), e
                            refused += 1
        print(refused)
    ''')
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert run.returncode >= 0, f"child killed by signal {-run.returncode}:\n{run.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["96"]


def test_checked_spmv_kernel_code_shape():
    """What the measured speed rests on (docs/corpus.md): in the checking SpMV beyond cache no column feeds the
    load of x through a select (a clamped index made the gather wait for the compare: 20-30 % slower), every
    check is a branch to the error return, and the kernel is not inlined into its entry (inlined, the same
    loop measured ~12 % slower)."""
    import re

    from splyce.native import spmv as native_spmv
    from splyce.native.codegen import CodegenOptions, emit_assembly, host_target, optimize

    text, _ = native_spmv.spmv_objects_ir(np.dtype(np.float64), 32, 32, "rows")
    module, tm = optimize(text, host_target(), CodegenOptions(opt_level=3))
    ir = str(module)
    kernel = re.search(r"define [^@]*@splyce_spmv_double_p32_c32_r1_checked\(.*?\n}\n", ir, re.S).group(0)
    whole = re.search(r"define [^@]*@splyce_spmv_double_p32_c32_r1_whole\(.*?\n}\n", ir, re.S).group(0)
    assert not re.search(r"= select ", kernel)
    assert "call i64 @splyce_spmv_double_p32_c32_r1_checked(" in whole      # not inlined
    if host_target().triple.startswith("x86_64"):
        asm = emit_assembly(module, tm)
        body = asm.split("splyce_spmv_double_p32_c32_r1_checked:", 1)[1].split(".Lfunc_end", 1)[0]
        assert "cmov" not in body and "vmulsd" in body


def test_flat_spmv_loop_has_no_branch_on_a_row_end():
    """The flat kernel (rows of a few entries) goes from one row to the next by selects: its loop has two
    conditional branches (a column out of range; the loop's own, which leaves at an empty or malformed next
    row or the range's end), none on the row's end, which would be mispredicted at every short row (the
    measured gain, docs/corpus.md); the sum restarts from +0.0 by an and (a select of a double is a branch
    on x86)."""
    import re

    from splyce.native import spmv as native_spmv
    from splyce.native.codegen import CodegenOptions, emit_assembly, host_target, optimize

    text, _ = native_spmv.spmv_objects_ir(np.dtype(np.float64), 32, 32, "flat")
    module, tm = optimize(text, host_target(), CodegenOptions(opt_level=3))
    if host_target().triple.startswith("x86_64"):
        asm = emit_assembly(module, tm)
        body = asm.split("splyce_spmv_double_p32_c32_r1_flat_checked_flat:", 1)[1].split(".Lfunc_end", 1)[0]
        blocks = re.split(r"^(\.LBB\d+_\d+):\n", body, flags=re.MULTILINE)[1:]
        flat = [(label, code) for label, code in zip(blocks[::2], blocks[1::2]) if "vaddsd" in code and "vandpd" in code]
        assert len(flat) == 1, blocks
        label, code = flat[0]
        back = re.search(rf"^\tj(?!mp)[a-z]+\t{re.escape(label)}$", code, re.MULTILINE)
        assert back, code                                     # one block, its own loop
        loop = code[:back.end()]
        jumps = re.findall(r"^\t(j[a-z]+)\t(\S+)$", loop, re.MULTILINE)
        assert len([j for j, _ in jumps if j != "jmp"]) == 2, jumps
        assert "cmov" in loop


def test_small_products_asked_for_threads_run_on_one(monkeypatch):
    """threads=2 / None on a product of at most SERIAL_MAX_WORK entries x columns takes the one-thread fast
    path (waking a worker costs more than it saves there; results are bit-identical either way); above it,
    the threaded general path; a bad thread count still raises."""
    from splyce.dropin import products as dropin

    rng = np.random.default_rng(11)
    a = sps.random_array((300, 200), density=0.05, format="csr", rng=rng)
    x, X = rng.random(200), rng.random((200, 4))
    ran = []
    real = dropin._csr_times_dense
    monkeypatch.setattr(dropin, "_csr_times_dense", lambda *args: (ran.append(args[2]), real(*args))[1])
    frontier = sps.coo_array((rng.random(9), (rng.choice(200, 9, replace=False),)), shape=(200,))   # SpMSpV
    one = splyce.matmul(a, frontier)
    with monkeypatch.context() as m:                   # SpMSpV too: not the general path's compiled kernel
        m.setattr(dropin, "_kernel", lambda *args, **kw: pytest.fail("general path"))
        for threads in (2, None):
            for vec in (x, X):
                assert np.array_equal(splyce.matmul(a, vec, threads=threads), a @ vec)
            assert splyce.matmul(a, frontier, threads=threads).data.tobytes() == one.data.tobytes()
    assert ran == []                                   # all on the fast path
    monkeypatch.setattr(dropin, "SERIAL_MAX_WORK", 4 * a.nnz - 1)
    assert np.array_equal(splyce.matmul(a, x, threads=2), a @ x) and ran == [2]
    assert splyce.matmul(a, frontier, threads=2).data.tobytes() == one.data.tobytes() and ran == [2, 2]
    from splyce.native import ir_text  # split even these few entries: two ranges, same bits
    monkeypatch.setattr(ir_text, "MIN_CHUNK", 8)
    assert len(ir_text.work_chunks(a.indptr, 2)) == 2
    for vec in (x, X, rng.random((200, 40))):           # SpMV, SpMM with k fixed and with any k
        assert np.array_equal(splyce.matmul(a, vec, threads=2), a @ vec)
    monkeypatch.setattr(dropin, "SERIAL_MAX_WORK", 0)
    from splyce.native import spmv as native_spmv
    monkeypatch.setattr(native_spmv, "FLAT_MIN_BYTES", 0)     # the flat kernel at any size (as on Zen 1)
    thin = sps.random_array((300, 200), density=0.012, format="csr", rng=rng)   # 2.4 per row: the flat kernel
    assert np.array_equal(splyce.matmul(thin, x, threads=2), thin @ x)
    for bad in (0, True, "2"):
        for vec in (x, frontier):
            with pytest.raises(ValueError, match="threads"):
                splyce.matmul(a, vec, threads=bad)


def test_spmv_kernel_choice_by_cpu(monkeypatch):
    """The one-row / grouped / flat choice follows the CPU's measurements (native_spmv._tuned_for): on Zen 1 /
    Zen 2 grouped rows in L2 and flat short rows at any size; on Zen 4 grouped rows in L2 for long rows only;
    on Sapphire Rapids grouped rows in L2 from 5.5 a row, flat short rows at any size; elsewhere never grouped;
    flat from L2's size but on Zen 1 / 2 and Sapphire Rapids. The drop-in follows them."""
    import scipy.sparse as sps

    from splyce.native import spmv as native_spmv
    from splyce.dropin import products as dropin

    assert native_spmv._tuned_for("znver1", 512 << 10) == (512 << 10, 0, 0)
    assert native_spmv._tuned_for("znver4", 1 << 20) == (1 << 20, 14, 1 << 20)
    assert native_spmv._tuned_for("znver5", 1 << 20) == (0, 0, 1 << 20)
    assert native_spmv._tuned_for("sapphirerapids", 2 << 20) == (2 << 20, 5.5, 0)
    assert native_spmv._tuned_for("rocketlake", 2 << 20) == (2 << 20, 5.5, 0)      # the same host under KVM
    chosen = []
    real = dropin._spmv_entry
    monkeypatch.setattr(dropin, "_spmv_entry", lambda dtype, idx, variant: chosen.append(variant) or real(dtype, idx, variant))
    rng = np.random.default_rng(2)
    for tuned in ((1 << 20, 14, 1 << 20), (0, 0, 1 << 20), (512 << 10, 0, 0), (2 << 20, 5.5, 0)):
        for name, value in zip(("GROUPED_MAX_BYTES", "GROUPED_MIN_ROW", "FLAT_MIN_BYTES"), tuned):
            monkeypatch.setattr(native_spmv, name, value)
        for per_row in (2, 8, 30):                       # in L2 (12 bytes an entry): 48-720 KB
            monkeypatch.setattr(dropin, "_spmv_entries", {})       # compiled entries looked up again
            monkeypatch.setattr(dropin, "_spmv_last", (None, None, None, None))
            a = sps.random_array((2000, 2000), density=per_row / 2000, format="csr", rng=rng)
            x = rng.random(2000)
            assert np.array_equal(dropin._fast_spmv(a, x), a @ x)
    assert chosen == ["rows", "rows", "grouped", "rows", "rows", "rows", "flat", "grouped", "rows",   # 720 KB > 512
                      "flat", "grouped", "grouped"]
    assert native_spmv._l2_bytes() > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_csc_times_vector_runs_on_its_columns_bit_identical_to_scipy(dtype, kind, monkeypatch):
    """``A.T @ y`` with scipy's CSC transpose: scattered column by column in scipy's order on the buffers as
    they are (no CSR copy: the conversion is never called), the values scipy's bit for bit, also with unsorted
    and repeated rows and with int64 indices; the operand is left as it was."""
    from splyce.native import spmv_scatter

    calls = []
    native = spmv_scatter.csc_times_vector
    monkeypatch.setattr(spmv_scatter, "csc_times_vector", lambda *args: calls.append(1) or native(*args))
    make = sps.csc_array if kind == "array" else sps.csc_matrix
    rng = np.random.default_rng(70)
    a = sps.random_array((70, 50), density=0.1, format="csr", rng=71)
    a = sps.csr_array((rng.integers(-5, 6, a.nnz).astype(dtype), a.indices, a.indptr), shape=a.shape)
    messy = make((np.array([0.5, 0.25, -1.0, 3.0], dtype=dtype), np.array([4, 4, 2, 0]), np.array([0, 2, 4, 4])),
                 shape=(5, 3))
    for m in (make(a.T), make(a.T).astype(dtype), messy):
        for y in (rng.random(m.shape[1]), rng.integers(-3, 4, m.shape[1]).astype(np.int32)):
            before = [m.data.copy(), m.indices.copy(), m.indptr.copy()]
            calls.clear()
            got, want = splyce.matmul(m, y), m @ y
            assert calls == [1] and got.dtype == want.dtype and np.asarray(got).tobytes() == np.asarray(want).tobytes()
            assert all(np.array_equal(b, n) for b, n in zip(before, (m.data, m.indices, m.indptr)))
    wide = make(a.T)
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    y = rng.random(wide.shape[1])
    assert np.array_equal(splyce.matmul(wide, y), wide @ y)


def test_csc_times_vector_refuses_malformed_operands_clearly():
    y = np.ones(3)
    good = (np.ones(3), np.array([0, 1, 2]), np.array([0, 1, 2, 3]))
    cases = [((good[0], np.array([0, 5, 2]), good[2]), "out of range"),
             ((good[0], np.array([0, -1, 2]), good[2]), "out of range"),
             ((good[0], good[1], np.array([0, 2, 1, 3])), "positions decrease"),
             ((good[0], good[1], np.array([0, 1, 2, 2])), "positions")]
    for (data, indices, indptr), pattern in cases:
        m = sps.csc_array((data.copy(), indices.copy(), indptr.copy()), shape=(4, 3))
        m.indices, m.indptr = indices, indptr         # as given, nothing fixed by scipy
        with pytest.raises(ValueError, match=pattern):
            splyce.matmul(m, y)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_csc_times_vector_refuses_what_its_kernel_finds_for_either_index_width(index, monkeypatch):
    """The malformed operands the scatter kernel itself must refuse (it is called, and it answers None): a row
    past ``m`` or negative, a position that decreases or is negative, ``indptr[0] != 0``, ``indptr[-1]`` beyond
    or short of ``nnz``; with int32 and int64 index arrays. Nothing is modified."""
    from splyce.native import spmv_scatter

    answers = []
    native = spmv_scatter.csc_times_vector
    monkeypatch.setattr(spmv_scatter, "csc_times_vector", lambda *args: answers.append(native(*args)) or answers[-1])
    ix = lambda *v: np.array(v, dtype=index)
    good = (np.ones(3), ix(0, 1, 2), ix(0, 1, 2, 3))
    cases = [((ix(0, 4, 2), good[2]), "out of range"), ((ix(0, -1, 2), good[2]), "out of range"),
             ((good[1], ix(0, 2, 1, 3)), "positions decrease"), ((good[1], ix(0, -1, 2, 3)), "positions decrease"),
             ((good[1], ix(1, 1, 2, 3)), "start at 0"), ((good[1], ix(0, 1, 2, 4)), "end at 4"),
             ((good[1], ix(0, 1, 2, 2)), "end at 2")]
    for (indices, indptr), pattern in cases:
        m = sps.csc_array(good, shape=(4, 3))
        m.indices, m.indptr = indices, indptr         # as given, nothing fixed by scipy
        before = (indices.copy(), indptr.copy())
        answers.clear()
        with pytest.raises(ValueError, match=pattern):
            splyce.matmul(m, np.ones(3))
        assert len(answers) == 1 and answers[0] is None
        assert np.array_equal(m.indices, before[0]) and np.array_equal(m.indptr, before[1])


def test_csc_times_vector_wrong_length_nonfinite_and_mixed_index_widths():
    """A vector of the wrong length is refused by the shape check; NaN and Inf (in A or in y) give scipy's
    values bit for bit; index arrays of two widths (not read as they are) still give scipy's answer; and the
    native entry answers None for buffers whose lengths disagree, before anything is compiled or read."""
    from splyce.native import spmv_scatter

    m = sps.csc_array((np.array([np.nan, 2.0, np.inf, -1.0]), np.array([0, 3, 1, 3]), np.array([0, 2, 2, 4])),
                      shape=(4, 3))
    for wrong in (np.ones(2), np.ones(4)):
        with pytest.raises(ValueError, match="not aligned"):
            splyce.matmul(m, wrong)
    for y in (np.array([1.0, 2.0, 3.0]), np.array([np.inf, np.nan, 0.0]), np.array([0.0, 1.0, -np.inf])):
        assert splyce.matmul(m, y).tobytes() == (m @ y).tobytes()
    mixed = sps.csc_array(m)
    mixed.indices = mixed.indices.astype(np.int64)
    y = np.array([1.0, 2.0, 3.0])
    assert splyce.matmul(mixed, y).tobytes() == (m @ y).tobytes()
    ones = np.ones(3)
    assert spmv_scatter.csc_times_vector(np.array([0, 1, 3]), np.array([0, 1, 2]), ones, ones, 3) is None
    assert spmv_scatter.csc_times_vector(np.array([0, 1, 2, 3]), np.array([0, 1]), ones, ones, 3) is None


def _short_columns(rng, m, n, dtype, index=np.int32):
    """CSC buffers of ``n`` columns of 0-5 sorted rows (empty runs included), NaN / Inf / -0.0 among values."""
    lengths = rng.integers(0, 6, size=n) * (rng.random(n) < 0.8)
    lengths = np.minimum(lengths, m)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(index)
    indices = np.concatenate([np.sort(rng.choice(m, size=k, replace=False)) for k in lengths]
                             + [np.zeros(0, int)]).astype(index)
    data = (rng.standard_normal(int(indptr[-1])) * 4).astype(dtype)
    if np.issubdtype(dtype, np.floating) and len(data):
        data[rng.random(len(data)) < 0.05] = rng.choice([np.nan, np.inf, -np.inf, -0.0])
    return indptr, indices, data


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_csc_times_vector_flat_loop_is_the_column_loop_bit_for_bit(dtype, index):
    """The flat scatter (one loop over the entries, the column moving on by a flag: for columns of a few
    entries) gives the column loop's values bit for bit, scipy's too, on every shape down to no columns; on
    malformed buffers (a row out of range, positions out of range, decreasing, shuffled) it refuses exactly when
    the column loop does, reading nothing out of bounds."""
    from splyce.native import spmv_scatter

    rng = np.random.default_rng(81)
    for trial in range(300):
        n, m = int(rng.integers(0, 30)), int(rng.integers(1, 30))
        indptr, indices, data = _short_columns(rng, m, n, dtype, index)
        x = (rng.standard_normal(n) * 3).astype(dtype)
        loop = spmv_scatter.csc_times_vector(indptr, indices, data, x, m, flat=False)
        flat = spmv_scatter.csc_times_vector(indptr, indices, data, x, m, flat=True)
        assert loop.tobytes() == flat.tobytes(), trial
        with np.errstate(all="ignore"):
            assert np.array_equal(flat, sps.csc_array((data, indices, indptr), shape=(m, n)) @ x, equal_nan=True)
        for defect in range(4):
            ip, ix = indptr.copy(), indices.copy()
            if defect == 0 and len(ix):
                ix[rng.integers(len(ix))] = m + int(rng.integers(0, 3))
            elif defect == 1 and n > 2:
                ip[rng.integers(1, n)] = len(ix) + 1 + int(rng.integers(0, 10**6))
            elif defect == 2 and n > 3:
                ip[rng.integers(1, n)] = rng.integers(0, len(ix) + 1)
            elif defect == 3 and n > 3:
                ip[1:-1] = rng.permutation(ip[1:-1])
            else:
                continue
            answers = [spmv_scatter.csc_times_vector(ip, ix, data, x, m, flat=f) for f in (False, True)]
            assert (answers[0] is None) == (answers[1] is None), (trial, defect)
            if answers[0] is not None:
                assert answers[0].tobytes() == answers[1].tobytes()


def test_csc_times_vector_goes_flat_on_columns_of_a_few_entries(monkeypatch):
    """The flat loop where SpMV's flat kernel runs (``spmv.goes_flat``: a few entries a column, past the CPU's
    size threshold), the column loop otherwise; the drop-in and a jitted ``a.T @ z`` take it the same way."""
    from splyce.native import spmv, spmv_scatter

    chosen = []
    kernel = spmv_scatter._kernel
    monkeypatch.setattr(spmv_scatter, "_kernel", lambda *a: chosen.append(a[3]) or kernel(*a))
    rng = np.random.default_rng(82)
    n = 300_000                                    # 2.0 entries a column, 3.6 MB of entries: past any threshold
    indptr, indices, data = _short_columns(rng, n, n, np.float64)
    assert spmv.goes_flat(len(indices), n, 32, 8)
    c = sps.csc_array((data, indices, indptr), shape=(n, n))
    x = rng.standard_normal(n)
    with np.errstate(all="ignore"):
        want = c @ x
        assert np.array_equal(splyce.matmul(c, x), want, equal_nan=True)
        t = splyce.asarray(sps.csr_array(c.T))
        assert np.array_equal(splyce.jit(lambda a, z: a.T @ z)(t, x), want, equal_nan=True)
    wide = sps.random_array((2000, 2000), density=0.01, format="csc", rng=83)      # 20 a column
    splyce.matmul(wide, np.ones(2000))
    assert chosen == [True, True, False]


def test_default_threads_large_product_on_one_idle_core_takes_the_fast_path():
    """``threads=None`` on a product past ``SERIAL_MAX_WORK``: when the cores idle now give it one thread
    (another process holds the others), the fast path runs it on one thread instead of handing it to the
    general path, which would run the same kernel on one thread 30-100 us later; with cores idle, the general
    path splits it. The same bits either way."""
    from splyce.dropin.kernels import SERIAL_MAX_WORK

    from splyce.dropin import products as dropin

    rng = np.random.default_rng(0)
    n = SERIAL_MAX_WORK // 4 // 8 + 1000          # 8 entries a row: past the bound
    rows, cols = np.repeat(np.arange(n), 8), rng.integers(0, n, 8 * n)
    a = sps.csr_array((rng.random(8 * n), (rows, cols)), shape=(n, n))
    assert a.nnz * 4 > SERIAL_MAX_WORK
    x = rng.random(n)
    with splyce.use_threads(1):
        y = dropin._fast_spmv(a, x, None)
    assert y is not None and np.array_equal(y, a @ x)
    with splyce.use_threads(2):
        assert dropin._fast_spmv(a, x, None) is None       # to the general path, which splits it
        assert np.array_equal(splyce.matmul(a, x), a @ x)
