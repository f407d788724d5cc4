"""Which scipy.sparse calls splyce serves while ``patch_scipy()`` is on, and how.

The hooks replace scipy 1.17's per-format workers on ``_cs_matrix`` (the CSR / CSC base class), called only
after scipy's own operator code has parsed the operands, checked shapes and raised its own errors:

==================================  =================================================  ====================
scipy worker                        reached from                                       drop-in
==================================  =================================================  ====================
``_matmul_sparse(self, other)``     ``A @ B``, ``A.dot(B)``, spmatrix ``A * B``,         ``splyce.matmul``
                                    ``B.T @ A.T`` forms, COO operands after ``tocsr()``
``_matmul_multivector(self, X)``    ``A @ X`` / ``A.dot(X)``, X a dense 2-D array        ``splyce.matmul``
``_add_sparse`` / ``_sub_sparse``   ``A + B`` / ``A - B`` (both sparse, shapes equal)    ``splyce.add`` /
                                                                                       ``splyce.subtract``
``_multiply_2d_with_broadcasting``  ``A.multiply(B)``, sparray ``A * B``               ``splyce.multiply``
BSR ``_matmul_vector`` /            ``A @ x`` / ``A @ X``, ``A`` a BSR, ``x`` / ``X``      the native BSR
``_matmul_multivector``             dense of its value dtype                           kernels
==================================  =================================================  ====================

A call is served only when it is exactly a case splyce accelerates and matches scipy on, buffers included:
``self`` a CSR / CSC array or matrix, the other operand one of its family or converted to ``self``'s class first
as scipy's worker converts it, 2-D, value dtypes among float64 / float32 / int64 / int32 (native byte order;
two different ones are both cast to scipy's ``upcast`` first, as sparsetools casts them), int32 / int64 index
arrays of exact length, the operands of a merge (``+``, ``-``, ``multiply``) in canonical form (scipy's general
merge of unsorted rows writes its own order: left to it; a product reads any stored order as scipy's does), and
at least the measured break-even size. Anything else (bool, complex, float128, narrow integers, a BSR
``self``, 1-D arrays, broadcasting, dense operands of ``+`` / ``-`` / ``multiply``, CSC @ dense, sparse @
vector) runs scipy's original worker, counted by reason in ``stats()``.
Served results are made what scipy's would be: the class of ``self``, scipy's index dtype (its own
``_get_index_dtype`` policy, so test suites that monkeypatch it still see theirs), no cached format flags, and
scipy's stored order (a product's rows as scipy's csr_matmat writes them: ``matmul_in_scipy_order``; a merge of
canonical operands sorted, as scipy's canonical merge writes it).

While a thread runs a drop-in, scipy calls on that thread go straight to the originals (the drop-ins convert
and build scipy objects themselves): a thread-local flag, so other threads keep being served.
"""

from __future__ import annotations

import threading

import numpy as np

# Break-even sizes, measured 2026-12-04 on the shared 2-core AMD EPYC Zen 4 KVM VM (load average 7-11 from
# other jobs, so fastest of 15 interleaved batches of 100 calls), scipy 1.17.1, random n x n CSR float64
# operands with 5 entries per row, each op with the switch off vs on (route_small=True); the script is the
# break-even part of ``python -m splyce.bench clients`` (its table in docs/scipy_patch.md):
# - elementwise (+, -, multiply): scipy's ``_binopt`` spends ~25-70 us in Python and conversions, the
#   drop-in's native merge less: 1.4-3.8x at 500 and 1,000 stored entries (both operands together), 1.2-3.4x
#   at 300 in the bench; below ELEMENTWISE_MIN_NNZ the hook's own checks (~2-5 us) are too large a share.
# - sparse @ sparse: 0.93x at 1,000 entries, 0.63x at 2,000, 1.57x at 4,000, 1.09x at 8,000 (scipy 465 us);
#   1.8x at 30,000 in the bench: served from MATMUL_MIN_NNZ entries (both operands together).
# - CSR @ dense matrix (SpMM, entries x columns of work): 0.6-0.7x up to 8,000 (scipy's csr_matvecs takes
#   4-6 us there, the hook and the drop-in's call ~2.5 us more), 1.09x at 16,000, 1.23-1.54x at 8,000 and
#   32,000 with 2 and 8 columns, 1.4-1.9x beyond: served from SPMM_MIN_WORK.
# Not hooked at all (no gain measured): CSR @ vector (scipy's csr_matvec and splyce's SpMV are both
# memory-bound, 0.98-1.04x from 200 to 10^6 entries), vector @ CSR (scipy's csc_matvec: splyce's
# dense-times-CSR kernel measured 0.5-0.8x). CSC @ dense reaches the SpMM hook and goes back to scipy
# ("format"): the drop-in (a CSR conversion, then SpMM; the same bits) measured 0.08-0.64x of scipy's
# csc_matvecs with 2-8 columns (n = 2,000-100,000, 5 entries per row), 1.3x only with 32 columns
# (2026-12-07, same VM, load average ~10, fastest of 5 x 3 interleaved calls).
# - BSR @ dense vector / matrix (issue 56), 3 x 3 blocks, switch off vs on (route_small), fastest of 5 x 200
#   calls, 2026-12-07 (same VM, other benches running): SpMV at 594 / 2,457 / 12,528 / 188,919 stored values
#   3.0 / 4.0 / 9.6 / 1342 us vs 10.5 / 10.7 / 13.4 / 590 us (the hook's ~7 us fixed cost): served from
#   BSR_MIN_VALUES values; SpMM with 8 columns 5.9 / 14.2 / 60 / 11616 us vs 11.2 / 12.3 / 18.5 / 2910 us:
#   served from SPMM_MIN_WORK values x columns, as CSR's.
BSR_MIN_VALUES = 32768
ELEMENTWISE_MIN_NNZ = 128
MATMUL_MIN_NNZ = 4096
SPMM_MIN_WORK = 16384

# The sizes in force: the break-evens above, or all zero with patch_scipy(route_small=True) (every eligible
# call served, however small: how tests prove served results equal scipy's on small matrices).
_min = {"elementwise": ELEMENTWISE_MIN_NNZ, "matmul": MATMUL_MIN_NNZ, "spmm": SPMM_MIN_WORK,
        "bsr": BSR_MIN_VALUES}


def set_route_small(route_small: bool) -> None:
    _min.update(dict.fromkeys(_min, 0) if route_small else
                {"elementwise": ELEMENTWISE_MIN_NNZ, "matmul": MATMUL_MIN_NNZ, "spmm": SPMM_MIN_WORK,
                 "bsr": BSR_MIN_VALUES})


_VALUES = frozenset(np.dtype(t) for t in (np.float64, np.float32, np.int64, np.int32))
_INDEX = frozenset(np.dtype(t) for t in (np.int32, np.int64))

_local = threading.local()
_stats_lock = threading.Lock()
_counts: dict = {}


def _count(op: str, key: str) -> None:
    with _stats_lock:
        per_op = _counts.get(op)
        if per_op is None:
            per_op = _counts[op] = {}
        per_op[key] = per_op.get(key, 0) + 1


def stats(reset: bool = False) -> dict:
    with _stats_lock:
        out = {op: {"served": c.get("served", 0),
                    "fallback": {k: v for k, v in sorted(c.items()) if k != "served"}}
               for op, c in sorted(_counts.items())}
        if reset:
            _counts.clear()
    return out


# -- operands -------------------------------------------------------------------------------------------------
_kinds: dict = {}        # exact scipy type -> (family, "csr" | "csc"); filled on first use
_has_canonical = None    # scipy's csr_has_canonical_format (uncached: scipy's own flag is not set by a check)
issparse = None
_sputils = None          # scipy.sparse._sputils: its get_index_dtype is what scipy's workers ask (or a test's stand-in)


def _load() -> None:
    global _has_canonical, issparse, _sputils
    import scipy.sparse as sps
    from scipy.sparse import _sparsetools, _sputils as sputils

    _sputils = sputils

    _has_canonical = _sparsetools.csr_has_canonical_format
    issparse = sps.issparse
    _kinds.update({sps.csr_array: ("array", "csr"), sps.csc_array: ("array", "csc"),
                   sps.csr_matrix: ("matrix", "csr"), sps.csc_matrix: ("matrix", "csc")})


def _operand(x, canonical: bool):
    """None if ``x`` is a CSR / CSC splyce serves as scipy would, else the reason it is not."""
    kind = _kinds.get(type(x))
    if kind is None:
        return "format"
    if len(x._shape) != 2:
        return "ndim"
    data, indices, indptr = x.data, x.indices, x.indptr
    if type(data) is not np.ndarray or type(indices) is not np.ndarray or type(indptr) is not np.ndarray:
        return "layout"
    if not (data.flags.c_contiguous and indices.flags.c_contiguous and indptr.flags.c_contiguous):
        return "layout"             # the kernels read the buffers as they are
    if data.dtype not in _VALUES:
        return "dtype"
    if indices.dtype not in _INDEX or indptr.dtype != indices.dtype:
        return "index-dtype"
    major = x._shape[0] if kind[1] == "csr" else x._shape[1]
    nnz = len(data)
    # consistent lengths (scipy allows unpruned arrays; splyce wants exact ones), and what makes scipy's
    # canonical check below read in bounds
    if indptr.ndim != 1 or len(indptr) != major + 1 or len(indices) != nnz or indptr[0] != 0 or indptr[-1] != nnz:
        return "layout"
    if canonical:
        flags = x.__dict__
        flag = flags.get("_has_canonical_format")
        if flag is None:
            flag = flags.get("_has_sorted_indices", True) and _has_canonical(major, indptr, indices)
        if not flag:
            return "non-canonical"
    return None


def _pair(a, b, min_nnz: int, same_class: bool = False, canonical: bool = True):
    """``(why, b)``: why is None if ``a op b`` (both sparse, same shape) is served, else the reason it is not;
    ``b`` is converted to ``a``'s class first, as scipy's worker does, unless splyce reads it as it is (a CSR
    or CSC of ``a``'s family; ``same_class``: only one of ``a``'s class, as scipy's product converts).
    ``canonical``: both operands must be in canonical form (the merges; a product reads them as they are)."""
    if not _kinds:
        _load()
    why = _operand(a, canonical)
    if why is not None:
        return why, b
    if len(b.shape) != 2:
        return "ndim", b
    if len(a.data) + b.nnz < min_nnz:
        return "small", b
    kind_b = _kinds.get(type(b))
    if type(b) is not type(a) and (same_class or kind_b is None or kind_b[0] != _kinds[type(a)][0]):
        b = a.__class__(b)          # scipy's own conversion, the first step of its worker too
    why = _operand(b, canonical)
    if why is not None:
        return why, b
    if a.data.dtype != b.data.dtype and np.dtype(_sputils.upcast(a.data.dtype, b.data.dtype)) not in _VALUES:
        return "mixed-dtype", b
    return None, b


def _common(a, b):
    """``a`` and ``b`` with values of one dtype, scipy's ``upcast`` of theirs, as its workers compute (sparsetools
    casts both value arrays to the result's type before it adds or multiplies): the other's values cast (a
    copy of ``data`` only, the index arrays shared), else the operands themselves."""
    da, db = a.data.dtype, b.data.dtype
    if da == db:
        return a, b
    target = np.dtype(_sputils.upcast(da, db))
    if da != target:
        a = a._with_data(a.data.astype(target), copy=False)
    if db != target:
        b = b._with_data(b.data.astype(target), copy=False)
    return a, b


# -- results --------------------------------------------------------------------------------------------------
_I32 = np.dtype(np.int32)
_I32_MAX = 2**31 - 1


def _as_scipy_result(self, out, arrays, maxval):
    """``out`` (splyce's result, of self's family) as scipy's worker returns it: self's class, the index dtype
    scipy's two policy calls give (the worker's on the operands, then the constructor's on the result), no
    cached format flags (scipy's constructor sets none)."""
    if type(out) is not type(self):
        out = self.__class__(out)
    shape = out._shape
    if _sputils.get_index_dtype.__module__ == _sputils.__name__:
        # scipy's own policy, in closed form (each call of it costs ~8 us): int64 when a size needs it; a
        # sparray also keeps int64 operands' width (its constructor does not look at the contents), an
        # spmatrix narrows to int32 whatever fits
        wide = max(shape) > _I32_MAX or out.nnz > _I32_MAX or (
            _kinds[type(self)][0] == "array" and (maxval > _I32_MAX or any(x.dtype != _I32 for x in arrays)))
        final = np.dtype(np.int64) if wide else _I32
    else:
        # a monkeypatched policy (scipy's own 64-bit tests): ask it, as scipy's worker and constructor do
        idx = self._get_index_dtype(arrays, maxval=maxval)
        carriers = (out.indices.astype(idx, copy=False), out.indptr.astype(idx, copy=False))
        final = self._get_index_dtype(carriers, maxval=None if 0 in shape else max(shape), check_contents=True)
    if out.indices.dtype != final or out.indptr.dtype != final:
        out.indices, out.indptr = out.indices.astype(final), out.indptr.astype(final)
    d = out.__dict__
    d.pop("_has_canonical_format", None)
    d.pop("_has_sorted_indices", None)
    return out


def _run(fun, a, b):
    _local.busy = True
    try:
        return fun(a, b)
    finally:
        _local.busy = False


# -- hooks ----------------------------------------------------------------------------------------------------
_dropins = None


def _dropin(name: str):
    global _dropins
    if _dropins is None:
        import splyce
        from splyce.dropin.products import matmul_in_scipy_order

        # sparse @ sparse in scipy's stored order (its csr_matmat's, not sorted): the drop-in's own product may
        # give each row's columns in another order (whichever kernel is faster), which changes every later sum
        # taken in stored order (``S.sum(axis=1)``) in the last bits
        _dropins = {"matmul": matmul_in_scipy_order, "spmm": splyce.matmul, "add": splyce.add,
                    "subtract": splyce.subtract, "multiply": splyce.multiply}
    return _dropins[name]


def _matmul_sparse_hook(original):
    def _matmul_sparse(self, other):
        if getattr(_local, "busy", False):
            return original(self, other)
        # any stored order, duplicates too: the product reads both as scipy's csr_matmat does
        why, other = _pair(self, other, _min["matmul"], same_class=True, canonical=False)
        if why is not None:
            _count("matmul_sparse", why)
            return original(self, other)
        out = _run(_dropin("matmul"), *_common(self, other))
        if out.nnz == 0:
            # scipy gives an empty product its own layout (an empty matrix, or unpruned arrays after
            # cancellation): its worker on a product with nothing to compute is cheap
            _count("matmul_sparse", "empty")
            return original(self, other)
        _count("matmul_sparse", "served")
        return _as_scipy_result(self, out, (self.indptr, self.indices, other.indptr, other.indices), out.nnz)
    return _matmul_sparse


def _matmul_multivector_hook(original):
    def _matmul_multivector(self, other):
        if getattr(_local, "busy", False):
            return original(self, other)
        if not _kinds:
            _load()
        kind = _kinds.get(type(self))
        why = "format" if kind is None or kind[1] != "csr" else _operand(self, False)
        if why is None:
            if type(other) is not np.ndarray or other.ndim != 2:
                why = "dense-operand"
            elif other.dtype != self.data.dtype and (
                    other.dtype not in _VALUES
                    or np.dtype(_sputils.upcast_char(self.data.dtype.char, other.dtype.char)) not in _VALUES):
                why = "mixed-dtype"
            elif len(self.data) * other.shape[1] < _min["spmm"]:
                why = "small"
        if why is not None:
            _count("matmul_dense", why)
            return original(self, other)
        a = self
        if other.dtype != self.data.dtype:      # both cast to scipy's result type first, as csr_matvecs does
            target = np.dtype(_sputils.upcast_char(self.data.dtype.char, other.dtype.char))
            a = self if self.data.dtype == target else self._with_data(self.data.astype(target), copy=False)
            other = other.astype(target)
        out = _run(_dropin("spmm"), a, other)
        _count("matmul_dense", "served")
        return out
    return _matmul_multivector


# A product of a CSR and a CSC converts the CSC first (scipy's counting transpose, then a row merge): the
# drop-in's one-pass CSR-with-CSC product measured 0.5-0.8x of that on kNN graphs (20k rows, 15 per row) and
# random matrices (a sum's one pass stayed faster).
_CONVERT_FIRST = {"multiply"}


def _binop_hook(op: str, name: str):
    same_class = op in _CONVERT_FIRST

    def make(original):
        def hook(self, other):
            if getattr(_local, "busy", False):
                return original(self, other)
            why, other = _pair(self, other, _min["elementwise"], same_class)
            if why is not None:
                _count(op, why)
                return original(self, other)
            out = _run(_dropin(op), *_common(self, other))
            _count(op, "served")
            return _as_scipy_result(self, out, (self.indptr, self.indices, other.indptr, other.indices),
                                    len(self.data) + len(other.data))
        hook.__name__ = hook.__qualname__ = name
        return hook
    return make


def _multiply_hook(original):
    binop = _binop_hook("multiply", "_multiply_2d_with_broadcasting")(original)

    def _multiply_2d_with_broadcasting(self, other):
        # scipy: a sparse operand of the same shape is an elementwise product (_binopt); any other operand
        # (dense, scalar-like, broadcasting shapes) takes scipy's own road
        if getattr(_local, "busy", False):
            return original(self, other)
        if not _kinds:
            _load()
        if not issparse(other):
            _count("multiply", "dense-operand")
            return original(self, other)
        if other.shape != self.shape:
            _count("multiply", "broadcast")
            return original(self, other)
        return binop(self, other)
    return _multiply_2d_with_broadcasting


def _bsr_dense_hook(op: str, name: str):
    """A BSR times a dense vector (``_matmul_vector``) or matrix (``_matmul_multivector``) on the native BSR
    kernels (dropin/stored_formats.py: scipy's summation order, so scipy's bits): served when ``other`` is an
    ndarray of the BSR's value dtype among float64 / float32 / int64 / int32 and the BSR holds at least
    ``BSR_MIN_VALUES`` stored values; anything else runs scipy's worker."""
    def make(original):
        def hook(self, other):
            if getattr(_local, "busy", False):
                return original(self, other)
            data = self.data
            if type(other) is not np.ndarray or type(data) is not np.ndarray or other.dtype != data.dtype \
                    or data.dtype not in _VALUES:
                _count(op, "dtype")
                return original(self, other)
            if (data.size if other.ndim == 1 else data.size * other.shape[-1]) < _min["bsr" if other.ndim == 1 else "spmm"]:
                _count(op, "small")
                return original(self, other)
            from splyce.dropin.stored_formats import times_dense

            out = _run(lambda a, b: times_dense(a, b, "scipy-array"), self, other)
            if out is None:
                _count(op, "format")
                return original(self, other)
            _count(op, "served")
            return out
        hook.__name__ = hook.__qualname__ = name
        return hook
    return make


_HOOKS = (
    ("_matmul_sparse", _matmul_sparse_hook),
    ("_matmul_multivector", _matmul_multivector_hook),
    ("_add_sparse", _binop_hook("add", "_add_sparse")),
    ("_sub_sparse", _binop_hook("subtract", "_sub_sparse")),
    ("_multiply_2d_with_broadcasting", _multiply_hook),
)


def hooks():
    """``(class, method name, make_hook(original) -> replacement)`` for each hooked worker scipy has (a
    scipy without one of them keeps its own)."""
    from scipy.sparse import _compressed

    from scipy.sparse import _bsr

    cls = _compressed._cs_matrix
    bsr = [(_bsr._bsr_base, name, _bsr_dense_hook(op, name)) for op, name in
           (("bsr_matvec", "_matmul_vector"), ("bsr_matmat", "_matmul_multivector"))
           if callable(_bsr._bsr_base.__dict__.get(name))]
    return [(cls, name, make) for name, make in _HOOKS if callable(getattr(cls, name, None))] + bsr
