"""`SparseTensor` (shape, dtype, format and per-level buffers) and `asarray`, the conversion boundary.

Buffers follow MLIR's standard storage, level by level: a compressed level has `pos` (parent positions + 1
entries) and `crd`; a singleton level has its own `crd` (one per parent entry); a dense level has neither and
multiplies the number of positions by its size. `values` holds one value per position of the last level.

scipy.sparse and pydata-sparse are imported only when an input of theirs is seen.
"""

from __future__ import annotations

import sys

import numpy as np

from splyce.tensors import convert
from splyce.tensors.formats import COO, CSC, CSR, SPARSE_VECTOR, Format, Level, coo, csf, dense
from splyce.tensors.validation import NotCanonicalError, check_buffers, check_dtype, check_shape, compressed_ok

__all__ = ["SparseTensor", "asarray", "last_level_buffers"]


class SparseTensor:
    """A tensor stored level by level in a `Format` (MLIR's sparse tensor storage).

    Make one with `splyce.asarray`. Treat it as immutable: its buffers may be shared with the object it was
    made from (a scipy array wrapped without copying).

    A tensor is checked once, as scipy does: when it is made (``asarray``, ``from_buffers``), or, made with
    ``validate=False``, by the first kernel call that takes it; kernels trust it after (docs/caches.md). A
    tensor whose buffers splyce allocated itself (a conversion, ``copy()``, ``asarray(..., copy=True)``) is
    also *sealed*: its buffers are read-only and referenced by nobody else, so the check cannot go stale. A
    tensor wrapping someone else's arrays (``asarray`` of a scipy CSR) shares them: changing them afterwards
    is the caller's responsibility, as changing a scipy array's ``indices`` is.

    NumPy's operators run the drop-ins: ``@``, ``*``, ``+``, ``-``, unary ``-``, ``/`` by a scalar and
    ``.sum(axis=None)`` (attached by ``splyce.api``);
    ``x @ t`` with an ndarray ``x`` never densifies ``t`` (``__array_ufunc__ = None``), while
    ``np.asarray(t)`` does.

    Parameters
    ----------
    shape : tuple of int
        The dimensions' sizes.
    format : Format
        The storage format.
    pos, crd : sequence of ndarray or None
        Per level, the positions and coordinates buffers (None where a level has none).
    values : ndarray
        One value per position of the last level.
    validate : bool, optional
        Check the buffers (O(nnz)); ``False`` only for buffers known well formed.
    name : str, optional
        The tensor's name in error messages.

    Raises
    ------
    ValueError
        Malformed buffers (unsorted, duplicate or out-of-range coordinates, non-monotone positions, bad
        shapes), naming the tensor, level and position.
    TypeError
        Buffers of the wrong dtype.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> t = splyce.asarray(sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]])))
    >>> t
    SparseTensor(shape=(2, 2), dtype=float64, nnz=3, format=(i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32)
    >>> t.T.format == splyce.CSC.with_widths(32, 32)      # the same buffers, read as CSC
    True
    >>> (t @ np.ones(2)).tolist()
    [1.0, 5.0]
    """

    __slots__ = ("_shape", "_format", "_pos", "_crd", "_values", "_sealed", "_validated", "_memo")

    def __init__(self, shape, format: Format, pos, crd, values, *, validate: bool = True, name: str = "tensor",
                 _owned: bool = False, _validated: bool = False):
        if validate:
            check_buffers(shape, format, pos, crd, values, name)
        self._shape = tuple(map(int, shape))     # (map: no generator frame, ~1 us less a tensor)
        self._format = format
        self._pos = tuple(pos)
        self._crd = tuple(crd)
        self._values = values
        self._sealed = False
        self._validated = validate or _owned or _validated
        self._memo = None
        if _owned:     # only splyce holds these buffers: freeze them, so the checks made now cannot go stale
            for buffer in self._buffers():
                buffer.flags.writeable = False
            self._sealed = True

    def _buffers(self):
        return [a for a in (*self._pos, *self._crd, self._values) if a is not None]

    @property
    def sealed(self) -> bool:
        """Whether the tensor is known well formed and its buffers cannot change (see the class doc)."""
        return self._sealed

    @property
    def validated(self) -> bool:
        """Whether the tensor's buffers were checked well formed (when it was made, or by a kernel call that
        took it): kernels take it without checking it again (see the class doc)."""
        return self._validated

    def memo(self) -> dict:
        """A dict for what callers derive from the tensor's (immutable) buffers once and reuse on every call
        (the runtime keeps its kernel argument descriptors here). Empty at first; never pickled."""
        if self._memo is None:
            self._memo = {}
        return self._memo

    @classmethod
    def from_buffers(cls, shape, format: Format, pos=None, crd=None, values=None, *, validate: bool = True,
                     name: str = "tensor") -> SparseTensor:
        """Wrap level buffers without copying.

        Parameters
        ----------
        shape : tuple of int
            The dimensions' sizes.
        format : Format
            The storage format.
        pos, crd : sequence of ndarray or None, optional
            One entry per level (None where a level has no such buffer); omitted, all None (an all-dense
            format).
        values : ndarray
            One value per position of the last level.
        validate : bool, optional
            ``False`` skips the O(nnz) checks, for buffers splyce produced itself.
        name : str, optional
            The tensor's name in error messages.

        Returns
        -------
        SparseTensor
            A tensor over these very arrays.

        Raises
        ------
        ValueError
            Malformed buffers, naming the tensor, level and position.

        Examples
        --------
        >>> import numpy as np, splyce
        >>> t = splyce.SparseTensor.from_buffers(
        ...     (2, 3), splyce.CSR, pos=[None, np.array([0, 1, 3])], crd=[None, np.array([2, 0, 1])],
        ...     values=np.array([1.0, 2.0, 3.0]))
        >>> t.to_numpy()
        array([[0., 0., 1.],
               [2., 3., 0.]])
        """
        pos = (None,) * format.ndim if pos is None else tuple(pos)
        crd = (None,) * format.ndim if crd is None else tuple(crd)
        return cls(shape, format, pos, crd, values, validate=validate, name=name)

    def __reduce_ex__(self, protocol):
        """Pickled as its buffers, which NumPy hands to pickle protocol 5 out of band (no copy into the
        stream, e.g. between Dask workers); not validated again when loaded."""
        return _unpickle, (self._shape, self._format, self._pos, self._crd, self._values)

    shape = property(lambda self: self._shape, doc="tuple of ints, in dimension order")
    format = property(lambda self: self._format, doc="the storage Format")
    pos = property(lambda self: self._pos, doc="per-level position arrays (None except for compressed levels)")
    crd = property(lambda self: self._crd, doc="per-level coordinate arrays (None for dense levels)")
    values = property(lambda self: self._values, doc="1-D stored values, one per position of the last level")

    @property
    def dtype(self) -> np.dtype:
        return self._values.dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def nnz(self) -> int:
        """Number of stored values (explicit zeros and dense-level zeros included)."""
        return len(self._values)

    @property
    def lvl_shape(self) -> tuple[int, ...]:
        """The shape in level order."""
        return tuple(self._shape[d] for d in self._format.order)

    def __repr__(self) -> str:
        return (f"SparseTensor(shape={self._shape}, dtype={self.dtype}, nnz={self.nnz}, "
                f"format={self._format})")

    def _repr_html_(self) -> str:
        """A notebook's view: one small table of what the kernels see (no values are printed)."""
        import html

        size = int(np.prod(self._shape, dtype=np.float64))
        density = f"{self.nnz / size:.3%}" if size else "-"
        nbytes = sum(b.nbytes for b in self._buffers())
        rows = [("shape", " x ".join(map(str, self._shape))), ("dtype", str(self.dtype)),
                ("format", str(self._format)), ("stored values", f"{self.nnz:,}"), ("density", density),
                ("buffers", f"{nbytes / 2**20:.2f} MiB"), ("sealed", "yes" if self._sealed else "no")]
        left = "style='text-align:left'"
        cells = "".join(f"<tr><th {left}>{k}</th><td {left}>{html.escape(v)}</td></tr>" for k, v in rows)
        return f"<table><caption>splyce.SparseTensor</caption>{cells}</table>"

    # -- NumPy-style operators (``@ * + -``, unary ``-``, ``/`` by a scalar, ``sum``) are the drop-ins,
    # attached by splyce.api (imported with splyce), never a silent dense conversion. NumPy defers to them
    # (``__array_ufunc__ = None``), so ``x @ t`` and ``x * t`` of an ndarray ``x`` come to them too instead of
    # densifying ``t`` through ``__array__``; ``np.asarray(t)`` still densifies.
    __array_ufunc__ = None

    @property
    def T(self) -> SparseTensor:
        """The transpose (dimensions reversed) over the same buffers: only the format's dimension order
        changes (CSR becomes CSC), no copy."""
        fmt = self._format
        n = self.ndim
        order = tuple(n - 1 - d for d in fmt.order)
        # sealed as this one is: the same read-only buffers, as well formed as they were
        return SparseTensor(self._shape[::-1], Format(fmt.levels, order, fmt.pos_width, fmt.crd_width), self._pos,
                            self._crd, self._values, validate=False, _owned=self._sealed,
                            _validated=self._validated)

    def transpose(self) -> SparseTensor:
        return self.T

    def copy(self) -> SparseTensor:
        return self.with_values(self._values.copy())

    def with_values(self, values: np.ndarray) -> SparseTensor:
        """The same positions (index buffers copied) holding ``values``, a new array of one value per stored
        position (a scalar product, a negation): sealed, since splyce holds every buffer."""
        copy = [None if a is None else a.copy() for a in (*self._pos, *self._crd)]
        n = self.ndim
        return SparseTensor(self._shape, self._format, copy[:n], copy[n:], values, validate=False, _owned=True)

    def coords(self) -> list[np.ndarray]:
        """Dimension coordinates (one int64 array per dimension) of every stored value."""
        return convert.unpack(self._shape, self._format, self._pos, self._crd)

    def to_numpy(self) -> np.ndarray:
        """The dense array (a view of `values` for an all-dense identity-order format)."""
        fmt = self._format
        if fmt.is_dense:
            return self._values.reshape(self.lvl_shape).transpose(fmt.dim_to_lvl)
        out = np.zeros(self._shape, dtype=self.dtype)
        index = tuple(self.coords())
        if all(level.unique for level in fmt.levels):
            out[index] = self._values
        else:
            np.add.at(out, index, self._values)
        return out

    todense = to_numpy

    def __array__(self, dtype=None, copy=None):
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def to_scipy(self):
        """The tensor as a scipy.sparse array.

        Returns
        -------
        scipy.sparse array
            ``csr_array`` for CSR, ``csc_array`` for CSC (also with an unordered column level: then scipy
            finds ``has_sorted_indices`` out when first asked), ``coo_array`` for COO (sharing buffers),
            otherwise a ``csr_array``; a ``coo_array`` for other ranks than 2. An all-dense format drops its
            zeros.
        """
        import scipy.sparse as sps

        fmt = self._format
        canonical = all(level.unique and level.ordered for level in fmt.levels)
        widths = (fmt.pos_width, fmt.crd_width)
        if self.ndim != 2:
            return sps.coo_array((self._values, tuple(self.coords())), shape=self._shape)
        if fmt.is_dense:
            return sps.csr_array(self.to_numpy())
        if tuple((lv.kind, lv.unique) for lv in fmt.levels) == (("dense", True), ("compressed", True)):
            self._unseal()     # scipy gets the buffers themselves (writeable, as scipy users expect)
            cls = sps.csr_array if fmt.order == (0, 1) else sps.csc_array
            out = cls((self._values, self._crd[1], self._pos[1]), shape=self._shape)
            # an unordered column level (a sparse product's rows: docs/guide/formats.md) may hold sorted rows
            # (the MLIR kernel writes them so): scipy's flags left for scipy to find out when first asked (one
            # pass), so that they say what the rows are
            if canonical:
                out.has_canonical_format = True
            return out
        if fmt == COO.with_widths(*widths):
            self._unseal()
            return sps.coo_array((self._values, (self._crd[0], self._crd[1])), shape=self._shape)
        return asarray(self, CSR.with_widths(*widths)).to_scipy()

    def _unseal(self) -> None:
        """Give the buffers away writeable: from now on the tensor is validated on every kernel call."""
        if self._sealed:
            self._sealed = False
            for buffer in self._buffers():
                buffer.flags.writeable = True

    def to_pydata(self):
        """A pydata-sparse COO (fill value 0)."""
        import sparse

        coords = np.stack(self.coords()) if self.ndim else np.zeros((0, self.nnz), dtype=np.int64)
        unique = all(level.unique for level in self._format.levels)
        return sparse.COO(coords, self._values, shape=self._shape, has_duplicates=not unique)


def _unpickle(shape, format, pos, crd, values) -> SparseTensor:
    return SparseTensor(shape, format, pos, crd, values, validate=False)


def last_level_buffers(t: SparseTensor) -> tuple:
    """``(values, crd, pos)`` of ``t``'s last level (a CSR's ``data, indices, indptr``): one call where a
    kernel's hot path would read three properties (~35 ns each over a slot read, 1-2 % of a 10-us SpMV)."""
    if type(t) is not SparseTensor or t._pos[-1] is None:
        raise TypeError(f"last_level_buffers: expected a SparseTensor whose last level is compressed, got "
                        f"{type(t).__name__}" + (f" in format {t.format}" if type(t) is SparseTensor else ""))
    return t._values, t._crd[-1], t._pos[-1]


def _target_widths(*index_arrays) -> tuple[int, int]:
    widths = []
    for arr in index_arrays:
        widths.append(32 if arr.dtype == np.int32 else 64)
    return tuple(widths)


def _default_format(ndim: int, sparse_default: Format | None = None) -> Format:
    if ndim == 0:
        raise ValueError("splyce tensors need at least one dimension")
    if ndim == 1:
        return SPARSE_VECTOR
    if ndim == 2:
        return sparse_default or CSR
    return csf(ndim)


def from_coords(shape, fmt, coords, values, copy, name, sorted_unique=False) -> SparseTensor:
    if copy is False:
        raise ValueError(f"{name}: converting to {fmt} needs a copy, but copy=False")
    shape = check_shape(shape, name)
    if len(shape) != fmt.ndim:
        raise ValueError(f"{name}: format {fmt} has {fmt.ndim} levels but the input has {len(shape)} dimensions")
    values = np.asarray(values)
    values = values.astype(values.dtype.newbyteorder("="), copy=False)
    for d, c in enumerate(coords):
        if len(c) and (c.min() < 0 or c.max() >= shape[d]):
            k = int(np.argmax((c < 0) | (c >= shape[d])))
            raise ValueError(f"{name}: coordinate {c[k]} of dimension {d} out of range [0, {shape[d]}) at entry {k}")
    pos, crd, vals = convert.pack(shape, fmt, coords, values, sorted_unique=sorted_unique, name=name)
    if np.may_share_memory(vals, values):     # packing kept the caller's values: own a copy (sealed below)
        vals = vals.copy()
    return SparseTensor(shape, fmt, pos, crd, vals, validate=False, _owned=True)


def _from_numpy(x: np.ndarray, fmt, copy, name) -> SparseTensor:
    check_dtype(x.dtype, name)
    fmt = fmt or dense(x.ndim)   # a NumPy array stays dense unless a sparse format is asked for
    if fmt.ndim != x.ndim:
        raise ValueError(f"{name}: format {fmt} has {fmt.ndim} levels but the input has {x.ndim} dimensions")
    in_levels = x.transpose(fmt.order)
    if fmt.is_dense:
        flat_ok = in_levels.flags.c_contiguous and x.dtype.isnative
        if copy is False and not flat_ok:
            raise ValueError(f"{name}: storing this array in {fmt} needs a copy, but copy=False")
        values = np.ascontiguousarray(in_levels, dtype=x.dtype.newbyteorder("=")).reshape(-1)
        if copy and np.shares_memory(values, x):
            values = values.copy()
        return SparseTensor(x.shape, fmt, (None,) * x.ndim, (None,) * x.ndim, values, validate=False,
                            _validated=True)   # all dense: nothing to check
    lvl_coords = np.nonzero(in_levels)       # sorted in level order, unique
    coords = [None] * x.ndim
    for l, d in enumerate(fmt.order):
        coords[d] = lvl_coords[l]
    return from_coords(x.shape, fmt, coords, in_levels[lvl_coords], copy, name, sorted_unique=True)


def _wrap_compressed(x, native: Format, fmt: Format, copy, name) -> SparseTensor | None:
    """A scipy CSR / CSC as a SparseTensor in `fmt` (its own format up to index widths), or None when the
    input is not canonical. Its own widths: the buffers are wrapped as they are, unless `copy`."""
    pos, crd, data = (None, x.indptr), (None, x.indices), x.data
    try:
        check_buffers(x.shape, native, pos, crd, data, name)
    except NotCanonicalError:
        return None
    if fmt != native:
        if copy is False:
            raise ValueError(f"{name}: changing index widths to {fmt.pos_width}/{fmt.crd_width} needs a copy, "
                             f"but copy=False")
        pos = (None, convert.to_index_array(x.indptr, fmt.pos_width, "pos positions", name))
        crd = (None, convert.to_index_array(x.indices, fmt.crd_width, "crd coordinates", name))
        data = data.copy() if copy else data
    tensor = SparseTensor(x.shape, fmt, pos, crd, data, validate=False, _validated=True)   # checked above
    return tensor.copy() if copy and fmt == native else tensor


def _wrapped_at_once(x, fmt) -> SparseTensor | None:
    """A scipy 2-D CSR / CSC whose arrays are canonical, wrapped (no copy) in its own format (or ``fmt``, when
    that is it) after one short check (``validation.compressed_ok``), or None: then ``_from_scipy``'s general
    route decides, checks and words any defect. The same tensor that route makes of such input, in a few us
    instead of ~25 (a scipy operand is converted and checked on every jitted call and drop-in)."""
    kind = x.format
    if kind == "csr":
        base = CSR
    elif kind == "csc":
        base = CSC
    else:
        return None
    shape = x.shape
    data, indptr = x.data, x.indptr
    if len(shape) != 2 or type(data) is not np.ndarray or type(indptr) is not np.ndarray:
        return None
    native = base.with_widths(32, 32) if indptr.dtype == np.int32 else base
    if fmt is not None and fmt != native:
        return None
    major, minor = (shape[0], shape[1]) if kind == "csr" else (shape[1], shape[0])
    if not compressed_ok(major, minor, indptr, x.indices, data):
        return None
    return SparseTensor(shape, native, (None, indptr), (None, x.indices), data, validate=False, _validated=True)


def wrap_canonical_compressed(x) -> SparseTensor | None:
    """``asarray(x)`` for a scipy 2-D CSR / CSC whose arrays one short check shows canonical (wrapped, not
    copied, in its own format), else None (then ``asarray`` decides, checks and words any defect): a jitted
    call's look-up of scipy operands calls it first."""
    return _wrapped_at_once(x, None)


def _native_order(x):
    """``x`` with its arrays in the machine's byte order: scipy's own conversions (``tocoo``) refuse a
    big-endian ``>f8`` data array ("scipy.sparse does not support dtype >f8"), so a non-native one is converted
    here, a copy in the same format and class (the values are the same numbers)."""
    names = [a for a in ("data", "indices", "indptr", "offsets") if isinstance(getattr(x, a, None), np.ndarray)]
    coords = list(getattr(x, "coords", ())) if x.format == "coo" else []
    if all(getattr(x, a).dtype.isnative for a in names) and all(c.dtype.isnative for c in coords):
        return x
    native = {a: getattr(x, a).astype(getattr(x, a).dtype.newbyteorder("=")) for a in names}
    if x.format in ("csr", "csc", "bsr"):
        return type(x)((native["data"], native["indices"], native["indptr"]), shape=x.shape)
    if x.format == "coo":
        return type(x)((native["data"], tuple(c.astype(c.dtype.newbyteorder("=")) for c in coords)),
                       shape=x.shape)
    if x.format == "dia":
        return type(x)((native["data"], native["offsets"]), shape=x.shape)
    raise TypeError(f"{type(x).__name__}: a scipy {x.format} value with arrays in non-native byte order "
                    f"({x.dtype.str}) is not supported; convert it first, e.g. x.astype(x.dtype.newbyteorder('='))"
                    " or x.tocsr() after converting its data")


def _from_scipy(x, fmt, copy, name) -> SparseTensor:
    if copy is None:
        tensor = _wrapped_at_once(x, fmt)
        if tensor is not None:
            return tensor
    x = _native_order(x)
    check_dtype(x.dtype, name)
    if x.ndim == 2 and x.format in ("csr", "csc"):
        base = CSR if x.format == "csr" else CSC
        simple = all(a.flags.c_contiguous for a in (x.indptr, x.indices, x.data)) and x.data.dtype.isnative
        if simple and x.indptr.dtype in (np.int32, np.int64) and x.indices.dtype in (np.int32, np.int64):
            native = base.with_widths(*_target_widths(x.indptr, x.indices))
            if fmt is None or fmt.with_widths(64, 64) == base:
                tensor = _wrap_compressed(x, native, fmt or native, copy, name)
                if tensor is not None:
                    return tensor
                if copy is False:
                    raise ValueError(f"{name}: scipy {x.format} input is not canonical (unsorted or duplicate "
                                     f"indices); canonicalizing needs a copy, but copy=False")
            else:
                try:   # scipy's own conversions assume well-formed index arrays: check them first
                    check_buffers(x.shape, native, (None, x.indptr), (None, x.indices), x.data, name)
                except NotCanonicalError:
                    pass
            fmt = fmt or native
        coo_x = x.tocoo()
    elif x.format == "coo":
        coo_x = x
    else:
        coo_x = x.tocoo()
    index_dtype = coo_x.coords[0].dtype if coo_x.coords else np.dtype(np.int64)
    width = 32 if index_dtype == np.int32 else 64
    if fmt is None:
        sparse_default = COO if x.format == "coo" else CSR
        fmt = (coo(x.ndim) if x.format == "coo" and x.ndim > 2 else _default_format(x.ndim, sparse_default))
        fmt = fmt.with_widths(width, width)
    return from_coords(x.shape, fmt, list(coo_x.coords), coo_x.data, copy, name)


def _from_pydata(x, fmt, copy, name) -> SparseTensor:
    import sparse

    check_dtype(x.dtype, name)
    if not (x.fill_value == 0):
        raise ValueError(f"{name}: pydata-sparse arrays need fill_value 0, not {x.fill_value}")
    if isinstance(x, sparse.GCXS):
        if fmt is None:
            by_rows = x.ndim == 2 and tuple(x.compressed_axes) == (0,)
            fmt = (CSR if by_rows else CSC) if x.ndim == 2 else _default_format(x.ndim)
        x = x.tocoo()
    elif not isinstance(x, sparse.COO):
        raise TypeError(f"{name}: unsupported pydata-sparse type {type(x).__name__}; use COO or GCXS")
    if fmt is None:
        fmt = coo(x.ndim) if x.ndim >= 2 else _default_format(x.ndim)
    return from_coords(x.shape, fmt, list(x.coords), x.data, copy, name)


_ROWS_OF_COLUMNS = (Level("dense"), Level("compressed"))


def _swapped_order(x: SparseTensor, fmt: Format, name: str) -> SparseTensor | None:
    """A CSC stored as CSR (or the reverse) by a counting transpose of its buffers, O(nnz + n) native code,
    instead of a sort of all coordinates; None when the formats are not that pair. The buffers of a CSC are
    the CSR of its transpose, whose transpose is the CSR wanted (entries in order, values' bits kept)."""
    old = x.format
    if x.ndim != 2 or old.levels != _ROWS_OF_COLUMNS or fmt.levels != _ROWS_OF_COLUMNS or fmt.order == old.order:
        return None
    from splyce.native import transpose

    data, indices, indptr = x.values, x.crd[1], x.pos[1]
    if not transpose.supported(data, indices, indptr):
        return None
    if not x.validated:    # native code follows these indices: checked once (docs/caches.md)
        check_buffers(x.shape, old, x.pos, x.crd, x.values, name)
        x._validated = True
    rows, cols = (x.shape[1], x.shape[0]) if old.order == (1, 0) else (x.shape[0], x.shape[1])
    t_data, t_indices, t_indptr = transpose.transpose(data, indices, indptr, rows, cols)
    pos = convert.to_index_array(t_indptr, fmt.pos_width, "pos positions", name)
    crd = convert.to_index_array(t_indices, fmt.crd_width, "crd coordinates", name)
    return SparseTensor(x.shape, fmt, (None, pos), (None, crd), t_data, validate=False, _owned=True)


def asarray(x, format: Format | None = None, copy: bool | None = None, *, name: str = "tensor") -> SparseTensor:
    """Convert `x` to a `SparseTensor` stored in `format`.

    `x` is never modified. Non-canonical scipy input (unsorted or duplicate indices, whatever its flags say)
    is canonicalized on a copy, duplicates summed.

    Parameters
    ----------
    x : array_like or scipy.sparse array or matrix or pydata-sparse array or SparseTensor
        A NumPy array (or anything ``np.asarray`` accepts), any scipy.sparse array or matrix, a pydata-sparse
        ``COO`` / ``GCXS``, or a ``SparseTensor``.
    format : Format, optional
        The storage format. None: ``dense(ndim)`` for NumPy input (pass a sparse format to store only its
        nonzeros); CSR for scipy csr / bsr / dia / lil / dok, CSC for csc, COO for coo; ``coo(ndim)`` for
        pydata COO; CSR / CSC for a 2-D GCXS compressed along rows / columns; otherwise ``SPARSE_VECTOR``
        in 1-D and ``csf(ndim)`` in 3-D and up. scipy's int32 indices give index widths 32.
    copy : bool, optional
        None: share buffers when it can (a canonical scipy CSR / CSC in its own format is wrapped without
        copying, and checked in O(nnz)); True: always copy (the result is sealed); False: raise when a copy
        is needed.
    name : str, optional
        The tensor's name in error messages.

    Returns
    -------
    SparseTensor
        The tensor.

    Raises
    ------
    ValueError
        Malformed input (out-of-range coordinates, non-monotone positions, bad shapes) naming the tensor,
        level and position; a 0-d array; ``copy=False`` when a copy is needed.
    TypeError
        A `format` that is not a ``Format``, an unsupported pydata-sparse type, or an unsupported dtype.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> A = sps.random_array((1000, 1000), density=0.01, format="csr", rng=0)
    >>> t = splyce.asarray(A)                      # a canonical CSR: wrapped, not copied
    >>> np.shares_memory(t.values, A.data)
    True
    >>> x = splyce.asarray(np.eye(3), format=splyce.CSR)     # only the nonzeros are stored
    >>> x.nnz
    3
    """
    if format is not None and not isinstance(format, Format):
        raise TypeError(f"{name}: format must be a splyce Format, not {type(format).__name__}")
    if isinstance(x, SparseTensor):
        if format is None or format == x.format:
            return x.copy() if copy else x
        if x.format.is_dense:     # its stored zeros are not entries: convert like a NumPy array
            return _from_numpy(x.to_numpy(), format, copy, name)
        swapped = _swapped_order(x, format, name)
        if swapped is not None:
            return swapped
        return from_coords(x.shape, format, x.coords(), x.values, copy, name)
    sps = sys.modules.get("scipy.sparse")
    if sps is not None and sps.issparse(x):
        return _from_scipy(x, format, copy, name)
    if type(x).__module__.split(".")[0] == "sparse":
        return _from_pydata(x, format, copy, name)
    if not isinstance(x, np.ndarray):
        if copy is False:
            raise ValueError(f"{name}: converting a {type(x).__name__} needs a copy, but copy=False")
        x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError(f"{name}: splyce tensors need at least one dimension (got a 0-d array)")
    return _from_numpy(x, format, copy, name)

