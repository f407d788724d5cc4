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
    probe = cls(parts, shape=(1, 2))
    ok = set(vars(probe)) == {"_shape", "maxprint", "indices", "indptr", "data"} and type(probe._shape) is tuple
    _direct[cls] = (ok, getattr(probe, "maxprint", None))
    if ok:
        made = _make(cls, *parts, (1, 2), None)
        ok = vars(made).keys() == vars(probe).keys() and made.maxprint == probe.maxprint \
            and np.array_equal(made.toarray(), probe.toarray())
        _direct[cls] = (ok, probe.maxprint)
    return ok


def csr(cls, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape, sorted_unique: bool | None):
    """A scipy CSR of class ``cls`` (``csr_array`` / ``csr_matrix``) holding the given arrays (not copied), a
    kernel's well-formed result; ``sorted_unique`` sets scipy's canonical-format flags (None: leave them for
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
