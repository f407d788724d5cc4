"""Storage formats: one frozen, hashable `Format` per sparse layout, mapped to one MLIR encoding.

A `Format` lists one `Level` per storage level and the dimension stored at each level (`order`), plus the bit
widths of the position and coordinate buffers. It is part of compile-cache keys, so it is immutable and
compares structurally. `to_mlir_encoding` is the only place that builds a `#sparse_tensor.encoding`;
importing this module imports no MLIR.
"""

from __future__ import annotations

import operator
import re
import functools
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Level", "Format", "to_mlir_encoding",
    "CSR", "CSC", "DCSR", "DCSC", "COO", "SPARSE_VECTOR", "csf", "coo", "dense", "relabelled",
]

LEVEL_KINDS = ("dense", "compressed", "singleton")
INDEX_WIDTHS = (32, 64)
_DIM_NAMES = ("i", "j", "k", "l")


@dataclass(frozen=True, slots=True)
class Level:
    """One storage level of a `Format`, as MLIR's sparse tensor level types.

    Parameters
    ----------
    kind : {"dense", "compressed", "singleton"}
        A dense level stores every coordinate; a compressed one positions and coordinates; a singleton one
        one coordinate per parent entry (COO's inner levels).
    unique : bool, optional
        False (MLIR's ``nonunique``) lets a coordinate repeat within a segment, as COO's first level needs.
    ordered : bool, optional
        False (``nonordered``) lets coordinates appear in any order within a segment.

    Raises
    ------
    ValueError
        An unknown kind, or a dense level that is not unique and ordered.

    Examples
    --------
    >>> import splyce
    >>> str(splyce.Level("compressed", unique=False))
    'compressed(nonunique)'
    >>> splyce.Level.from_string("singleton(nonunique)") == splyce.Level("singleton", unique=False)
    True
    """

    kind: str
    unique: bool = True
    ordered: bool = True

    def __post_init__(self):
        if self.kind not in LEVEL_KINDS:
            raise ValueError(f"unknown level kind {self.kind!r}; expected one of {', '.join(LEVEL_KINDS)}")
        if not isinstance(self.unique, bool) or not isinstance(self.ordered, bool):
            raise TypeError("Level.unique and Level.ordered must be bool")
        if self.kind == "dense" and not (self.unique and self.ordered):
            raise ValueError("a dense level is always unique and ordered")

    @property
    def has_pos(self) -> bool:
        """A positions buffer (segment bounds): compressed levels only."""
        return self.kind == "compressed"

    @property
    def has_crd(self) -> bool:
        """A coordinates buffer: every level but a dense one."""
        return self.kind != "dense"

    def __str__(self) -> str:
        props = [name for name, on in (("nonunique", not self.unique), ("nonordered", not self.ordered)) if on]
        return f"{self.kind}({', '.join(props)})" if props else self.kind

    @classmethod
    def from_string(cls, text: str) -> Level:
        """Parse `compressed`, `compressed(nonunique)`, `singleton(nonunique, nonordered)` ..."""
        match = re.fullmatch(r"\s*(\w+)\s*(?:\(([\w\s,]*)\))?\s*", text)
        if match is None:
            raise ValueError(f"cannot parse level {text!r}")
        props = {p.strip() for p in (match.group(2) or "").split(",") if p.strip()}
        unknown = props - {"nonunique", "nonordered", "soa"}   # soa: our singleton storage is always SoA
        if unknown:
            raise ValueError(f"unknown level property {sorted(unknown)[0]!r} in {text!r}")
        return cls(match.group(1), unique="nonunique" not in props, ordered="nonordered" not in props)


@functools.lru_cache(maxsize=256)
def _with_widths(fmt: "Format", pos_width: int, crd_width: int) -> "Format":
    """Formats are immutable, so the variants with other index widths are shared (built once)."""
    return Format(fmt.levels, fmt.order, pos_width, crd_width)


@functools.lru_cache(maxsize=256)
def _index_buffers(levels: tuple[Level, ...]) -> tuple[tuple[str, int], ...]:
    """Computed once per level tuple: the call path flattens every sparse argument with it."""
    return tuple((kind, l) for l, level in enumerate(levels)
                 for kind, present in (("pos", level.has_pos), ("crd", level.has_crd)) if present)


def compressed_order(fmt: "Format") -> tuple[int, int] | None:
    """``fmt``'s order when it is a CSR ((0, 1)) or a CSC ((1, 0)) with ordered, unique coordinates (any index
    widths): the layouts the native kernels read as they are; else None. Memoized per format (hot paths ask)."""
    found = _COMPRESSED_ORDER.get(fmt, False)
    if found is False:
        found = _COMPRESSED_ORDER[fmt] = fmt.order if (
            tuple(level.kind for level in fmt.levels) == ("dense", "compressed")
            and all(level.unique and level.ordered for level in fmt.levels)) else None
    return found


_COMPRESSED_ORDER: dict = {}


def _as_level(level) -> Level:
    if isinstance(level, Level):
        return level
    if isinstance(level, str):
        return Level.from_string(level)
    raise TypeError(f"a format level must be a Level or a string, not {type(level).__name__}")


def _check_width(name: str, width) -> None:
    if isinstance(width, (bool, np.bool_)) or width not in INDEX_WIDTHS:
        raise ValueError(f"{name} must be 32 or 64, not {width!r}")


@dataclass(frozen=True, slots=True)
class Format:
    """A sparse storage format: `levels[l]` stores dimension `order[l]`.

    Frozen and hashable; part of every compile-cache key. ``str(fmt)`` reads like MLIR's encoding map, and
    ``Format.from_string`` parses it back.

    Parameters
    ----------
    levels : sequence of Level or str
        One level per dimension, outermost first; strings such as ``"compressed(nonunique)"`` are parsed.
    order : tuple of int, optional
        The dimension stored at each level (a permutation); None: the identity.
    pos_width, crd_width : {64, 32}, optional
        The integer widths of the position and coordinate buffers; scipy's int32 index arrays are used as
        they are with widths 32.

    Raises
    ------
    ValueError
        No levels, an `order` that is not a permutation, widths other than 32 / 64, or a singleton level
        whose parent is not a non-unique compressed or singleton level.
    TypeError
        A level that is neither a ``Level`` nor a string.

    Examples
    --------
    >>> import splyce
    >>> str(splyce.CSC)
    '(i, j) -> (j : dense, i : compressed)'
    >>> splyce.Format(("dense", "compressed"), order=(1, 0)) == splyce.CSC
    True
    >>> str(splyce.csf(3).with_widths(32, 32))
    '(i, j, k) -> (i : dense, j : compressed, k : compressed), posWidth = 32, crdWidth = 32'
    """

    levels: tuple[Level, ...]
    order: tuple[int, ...] | None = None
    pos_width: int = 64
    crd_width: int = 64
    # Formats key every compile-cache lookup: hash once, not on every call.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self):
        if isinstance(self.levels, (str, Level)):
            raise TypeError("Format.levels must be a sequence of levels")
        levels = tuple(_as_level(level) for level in self.levels)
        if not levels:
            raise ValueError("a format needs at least one level")
        order = tuple(range(len(levels))) if self.order is None else tuple(self.order)
        if any(isinstance(d, (bool, np.bool_)) or not hasattr(d, "__index__") for d in order):
            raise ValueError(f"order must be a tuple of ints, not {self.order!r}")
        order = tuple(operator.index(d) for d in order)
        if len(order) != len(levels):
            raise ValueError(f"order {order} has {len(order)} entries but the format has {len(levels)} levels")
        if sorted(order) != list(range(len(levels))):
            raise ValueError(f"order {order} is not a permutation of range({len(levels)})")
        _check_width("pos_width", self.pos_width)
        _check_width("crd_width", self.crd_width)
        for l, level in enumerate(levels):
            if level.kind == "singleton" and (l == 0 or levels[l - 1].kind == "dense" or levels[l - 1].unique):
                raise ValueError(
                    f"level {l} is singleton but its parent level is not compressed(nonunique) or singleton(nonunique)"
                )
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "pos_width", int(self.pos_width))
        object.__setattr__(self, "crd_width", int(self.crd_width))
        object.__setattr__(self, "_hash", hash((levels, order, self.pos_width, self.crd_width)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def ndim(self) -> int:
        return len(self.levels)

    @property
    def is_dense(self) -> bool:
        """True when every level is dense (such tensors carry no MLIR encoding)."""
        return all(level.kind == "dense" for level in self.levels)

    @property
    def dim_to_lvl(self) -> tuple[int, ...]:
        """The level storing each dimension (the inverse of `order`)."""
        inverse = [0] * self.ndim
        for l, d in enumerate(self.order):
            inverse[d] = l
        return tuple(inverse)

    @property
    def index_buffers(self) -> tuple[tuple[str, int], ...]:
        """The index buffers in MLIR's order (a kernel's memref arguments and results): per level, outermost
        first, ``("pos", l)`` then ``("crd", l)`` where the level has them; the values buffer follows."""
        return _index_buffers(self.levels)

    def with_widths(self, pos_width: int, crd_width: int) -> Format:
        """The same format with other index widths (32 or 64)."""
        if (pos_width, crd_width) == (self.pos_width, self.crd_width):
            return self
        return _with_widths(self, pos_width, crd_width)

    def __str__(self) -> str:
        names = _DIM_NAMES if self.ndim <= len(_DIM_NAMES) else [f"d{d}" for d in range(self.ndim)]
        dims = ", ".join(names[: self.ndim])
        lvls = ", ".join(f"{names[d]} : {level}" for d, level in zip(self.order, self.levels))
        text = f"({dims}) -> ({lvls})"
        if (self.pos_width, self.crd_width) != (64, 64):
            text += f", posWidth = {self.pos_width}, crdWidth = {self.crd_width}"
        return text

    def __repr__(self) -> str:
        return f"Format({str(self)!r})"

    @classmethod
    def from_string(cls, text: str) -> Format:
        """Build a format from `"dense, compressed"` or from its own `str()`, e.g.
        `"(i, j) -> (j : dense, i : compressed), posWidth = 32, crdWidth = 32"`."""
        widths = {"pos": 64, "crd": 64}
        for key, value in re.findall(r"(pos|crd)Width\s*=\s*(\d+)", text):
            widths[key] = int(value)
        body = re.split(r",\s*(?:pos|crd)Width", text)[0].strip()
        if "->" not in body:
            return cls(tuple(_split_levels(body)), None, widths["pos"], widths["crd"])
        match = re.fullmatch(r"\(([^)]*)\)\s*->\s*\((.*)\)", body)
        if match is None:
            raise ValueError(f"cannot parse format {text!r}")
        dims = [d.strip() for d in match.group(1).split(",")]
        order, levels = [], []
        for part in _split_levels(match.group(2)):
            name, _, level = part.partition(":")
            if name.strip() not in dims:
                raise ValueError(f"unknown dimension {name.strip()!r} in format {text!r}")
            order.append(dims.index(name.strip()))
            levels.append(level)
        return cls(tuple(levels), tuple(order), widths["pos"], widths["crd"])


def _split_levels(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:pos])
            start = pos + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _check_ndim(ndim) -> None:
    if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
        raise ValueError(f"ndim must be a positive int, not {ndim!r}")


def dense(ndim: int) -> Format:
    """The all-dense format of `ndim` dimensions (identity order).

    Parameters
    ----------
    ndim : int
        Number of dimensions (>= 1).

    Returns
    -------
    Format
        Dense levels only; such tensors carry no MLIR encoding.

    Raises
    ------
    ValueError
        `ndim` is not a positive int.

    Examples
    --------
    >>> import splyce
    >>> str(splyce.dense(2))
    '(i, j) -> (i : dense, j : dense)'
    """
    _check_ndim(ndim)
    return Format(("dense",) * ndim)


def csf(ndim: int) -> Format:
    """Compressed sparse fiber: the first level dense, the others compressed.

    Parameters
    ----------
    ndim : int
        Number of dimensions (>= 1); ``csf(1)`` is ``SPARSE_VECTOR`` and ``csf(2)`` is ``CSR``.

    Returns
    -------
    Format
        The format.

    Raises
    ------
    ValueError
        `ndim` is not a positive int.

    Examples
    --------
    >>> import numpy as np, splyce
    >>> X = splyce.asarray(np.arange(8.0).reshape(2, 2, 2), format=splyce.csf(3))
    >>> X.nnz                               # the zero at (0, 0, 0) is not stored
    7
    """
    _check_ndim(ndim)
    if ndim == 1:
        return SPARSE_VECTOR
    return Format(("dense",) + ("compressed",) * (ndim - 1))


def coo(ndim: int) -> Format:
    """Sorted COO: compressed(nonunique), singleton(nonunique) ..., singleton; one coordinate array per level."""
    _check_ndim(ndim)
    if ndim == 1:
        return SPARSE_VECTOR
    return Format((Level("compressed", unique=False),) + (Level("singleton", unique=False),) * (ndim - 2)
                  + (Level("singleton"),))


SPARSE_VECTOR = Format(("compressed",))
"""A 1-D sparse vector: one compressed level."""
CSR = Format(("dense", "compressed"))
"""Compressed sparse rows: rows dense, columns compressed (scipy's ``csr_array``)."""
CSC = Format(("dense", "compressed"), order=(1, 0))
"""Compressed sparse columns: columns dense, rows compressed (scipy's ``csc_array``)."""
DCSR = Format(("compressed", "compressed"))
"""Doubly compressed sparse rows: only non-empty rows are stored."""
DCSC = Format(("compressed", "compressed"), order=(1, 0))
"""Doubly compressed sparse columns: only non-empty columns are stored."""
COO = coo(2)
"""Sorted 2-D coordinates: ``compressed(nonunique)`` rows, ``singleton`` columns (scipy's ``coo_array``)."""


def relabelled(fmt: Format, axes: tuple[int, ...]) -> Format:
    """The format of ``x.transpose(axes)`` stored in ``x``'s buffers unchanged: the same levels, each now
    storing the result dimension that was its source dimension (a CSR matrix's transpose is CSC)."""
    position = {source: result for result, source in enumerate(axes)}
    return Format(fmt.levels, tuple(position[d] for d in fmt.order), fmt.pos_width, fmt.crd_width)


def to_mlir_encoding(fmt: Format):
    """The `#sparse_tensor.encoding` attribute of `fmt`, or None for an all-dense format.

    Must be called inside an active `mlir.ir.Context`. Singleton levels get the `soa` property because
    splyce stores one coordinate array per level.
    """
    if fmt.is_dense:
        return None
    from mlir import ir
    from mlir.dialects import sparse_tensor as st

    lvl_types = []
    for level in fmt.levels:
        props = []
        if not level.unique:
            props.append(st.LevelProperty.non_unique)
        if not level.ordered:
            props.append(st.LevelProperty.non_ordered)
        if level.kind == "singleton":
            props.append(st.LevelProperty.soa)
        lvl_types.append(st.EncodingAttr.build_level_type(getattr(st.LevelFormat, level.kind), props))
    dim_to_lvl = ir.AffineMap.get_permutation(list(fmt.order))
    return st.EncodingAttr.get(lvl_types, dim_to_lvl, None, fmt.pos_width, fmt.crd_width)
