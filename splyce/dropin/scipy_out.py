"""scipy CSR results without the cost of scipy's constructor.

``csr_array((data, indices, indptr), shape=...)`` checks the format and chooses an index dtype in Python:
~45 us per call on the 2-core EPYC this was measured on, as long as a whole elementwise product of a
10^4-entry matrix. A native kernel's result is well formed by construction, so ``csr`` makes the object
directly (``__new__`` plus the attributes scipy's constructor sets: 1.3 us). That attribute set is confirmed
once per class and process against an object the constructor made; if scipy ever sets anything else, or the
index arrays are not int32 (the constructor narrows int64 ones whose values fit, which this does not
reproduce), the constructor is used.
"""

from __future__ import annotations

import numpy as np

_direct: dict = {}      # class -> whether ``__new__`` plus attributes makes what the constructor makes


def _make(cls, data, indices, indptr, shape, sorted_unique):
    out = cls.__new__(cls)
    out._shape = shape
    out.maxprint = _direct[cls][1]
    out.indices, out.indptr, out.data = indices, indptr, data
    if sorted_unique is not None:
        out._has_canonical_format = out._has_sorted_indices = sorted_unique
    return out


def _confirm(cls) -> bool:
    parts = (np.array([2.0]), np.zeros(1, dtype=np.int32), np.array([0, 1], dtype=np.int32))
    shape = (2, 1) if getattr(cls, "_format", "csr") == "csc" else (1, 2)    # one compressed row / column
    probe = cls(parts, shape=shape)
    ok = set(vars(probe)) == {"_shape", "maxprint", "indices", "indptr", "data"} and type(probe._shape) is tuple
    _direct[cls] = (ok, getattr(probe, "maxprint", None))
    if ok:
        made = _make(cls, *parts, shape, None)
        ok = vars(made).keys() == vars(probe).keys() and made.maxprint == probe.maxprint \
            and np.array_equal(made.toarray(), probe.toarray())
        _direct[cls] = (ok, probe.maxprint)
    return ok


def csr(cls, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape, sorted_unique: bool | None):
    """A scipy CSR of class ``cls`` (``csr_array`` / ``csr_matrix``; or a CSC class, ``indptr`` then over the
    columns) holding the given arrays (not copied), a kernel's well-formed result; ``sorted_unique`` sets scipy's canonical-format flags (None: leave them for
    scipy to find out)."""
    known = _direct.get(cls)
    direct = known[0] if known is not None else _confirm(cls)
    if direct and indices.dtype == np.int32 and indptr.dtype == np.int32:
        return _make(cls, data, indices, indptr, (int(shape[0]), int(shape[1])), sorted_unique)
    out = cls((data, indices, indptr), shape=shape)
    if sorted_unique is not None:
        out.has_canonical_format = sorted_unique
        if not sorted_unique:
            out.has_sorted_indices = False
    return out


_direct_coo: dict = {}    # class -> (whether __new__ plus attributes makes what cls(dense vector) makes, maxprint)


def _confirm_coo(cls) -> tuple:
    probe = cls(np.array([0.0, 2.0, 0.0]))
    ok = (set(vars(probe)) == {"_shape", "maxprint", "coords", "data", "has_canonical_format"}
          and type(probe._shape) is tuple and probe.coords[0].dtype == np.int32)
    if ok:
        made = _make_coo(cls, np.array([2.0]), np.array([1], dtype=np.int32), 3, probe.maxprint)
        ok = vars(made).keys() == vars(probe).keys() and np.array_equal(made.toarray(), probe.toarray())
    _direct_coo[cls] = (ok, probe.maxprint)
    return _direct_coo[cls]


def _make_coo(cls, data, coords, n, maxprint):
    out = cls.__new__(cls)
    out._shape = (n,)
    out.maxprint = maxprint
    out.coords = (coords,)
    out.data = data
    out.has_canonical_format = True
    return out


def coo_vector(cls, dense: np.ndarray):
    """``cls(dense)`` (``cls`` scipy's ``coo_array``) for a 1-D NumPy vector, what scipy returns for a sparse
    matrix times a sparse vector: the entries that are not zero (NaN kept), int32 coordinates (int64 past
    2**31 - 1 entries, as scipy chooses), canonical. Built directly (~5 us instead of ~90 us) once that is
    confirmed to make what the constructor makes; else the constructor."""
    known = _direct_coo.get(cls)
    ok, maxprint = known if known is not None else _confirm_coo(cls)
    n = len(dense)
    if not ok or dense.ndim != 1 or n > np.iinfo(np.int32).max:
        return cls(dense)
    coords = np.flatnonzero(dense).astype(np.int32)
    return _make_coo(cls, dense[coords], coords, n, maxprint)


_direct_blocks: dict = {}     # DIA / BSR class -> (whether __new__ plus attributes makes what the constructor makes, maxprint)
_BLOCK_ATTRS = {"dia": {"_shape", "maxprint", "data", "offsets"},
                "bsr": {"_shape", "maxprint", "indices", "indptr", "data"}}


def _make_blocks(cls, shape, maxprint, attrs: dict):
    out = cls.__new__(cls)
    out._shape = shape
    out.maxprint = maxprint
    for name, value in attrs.items():
        setattr(out, name, value)
    return out


def _confirm_blocks(cls, fmt: str) -> tuple:
    i32 = np.int32
    if fmt == "dia":
        attrs = {"data": np.array([[1.0, 2.0]]), "offsets": np.array([1], dtype=i32)}
        probe = cls((attrs["data"], attrs["offsets"]), shape=(2, 2))
    else:
        attrs = {"data": np.array([[[1.0], [2.0]]]), "indices": np.array([1], dtype=i32),
                 "indptr": np.array([0, 1], dtype=i32)}
        probe = cls((attrs["data"], attrs["indices"], attrs["indptr"]), shape=(2, 2), blocksize=(2, 1))
    ok = set(vars(probe)) == _BLOCK_ATTRS[fmt] and type(probe._shape) is tuple
    if ok:
        made = _make_blocks(cls, (2, 2), probe.maxprint, attrs)
        ok = vars(made).keys() == vars(probe).keys() and np.array_equal(made.toarray(), probe.toarray())
    _direct_blocks[cls] = (ok, getattr(probe, "maxprint", None))
    return _direct_blocks[cls]


def dia(cls, data: np.ndarray, offsets: np.ndarray, shape):
    """A scipy DIA of class ``cls`` holding ``data`` (2-D, a row per offset) and ``offsets`` (1-D int32,
    distinct), a kernel's well-formed result, without the constructor's checks (its ``np.unique`` of the
    offsets) once confirmed to make what the constructor makes; else the constructor."""
    known = _direct_blocks.get(cls)
    ok, maxprint = known if known is not None else _confirm_blocks(cls, "dia")
    if not ok or offsets.dtype != np.int32 or data.ndim != 2 or data.shape[0] != len(offsets):
        return cls((data, offsets), shape=shape)
    return _make_blocks(cls, (int(shape[0]), int(shape[1])), maxprint, {"data": data, "offsets": offsets})


def bsr(cls, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape):
    """A scipy BSR of class ``cls`` holding a kernel's well-formed blocks (``data`` ``(blocks, R, C)``, int32
    ``indices`` / ``indptr``), without the constructor's checks once confirmed to make what it makes; else the
    constructor (int64 index arrays: scipy may narrow them, which this does not reproduce)."""
    known = _direct_blocks.get(cls)
    ok, maxprint = known if known is not None else _confirm_blocks(cls, "bsr")
    if not ok or indices.dtype != np.int32 or indptr.dtype != np.int32 or data.ndim != 3:
        return cls((data, indices, indptr), shape=shape, blocksize=data.shape[1:])
    return _make_blocks(cls, (int(shape[0]), int(shape[1])), maxprint,
                        {"indices": indices, "indptr": indptr, "data": data})
