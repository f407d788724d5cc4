"""Coordinate lists <-> level buffers, for any `Format` (pure NumPy, vectorized).

`pack` turns (coordinates per dimension, values) into MLIR's standard per-level storage; `unpack` does the
reverse. Both are O(nnz * ndim), plus a sort in `pack` unless the entries are known sorted and unique.
"""

from __future__ import annotations

import numpy as np

from splyce.tensors.formats import Format

__all__ = ["pack", "unpack", "to_index_array"]


def to_index_array(arr: np.ndarray, width: int, what: str, name: str = "tensor") -> np.ndarray:
    """`arr` as a C-contiguous int{width} array; ValueError when a value does not fit in `width` bits."""
    dtype = np.dtype(f"int{width}")
    if arr.dtype != dtype and len(arr):
        info = np.iinfo(dtype)
        if arr.max() > info.max or arr.min() < info.min:
            raise ValueError(f"{name}: {what} value {arr.max()} does not fit in {width} bits "
                             f"(use a format with {what.split()[0]}_width=64)")
    return np.ascontiguousarray(arr, dtype=dtype)


def _linear_key(lvl_coords: list[np.ndarray], lvl_shape: list[int]) -> np.ndarray | None:
    """One int64 per entry ordering entries like their level-coordinate tuples (None if it would overflow)."""
    if not lvl_coords or int(np.prod([max(n, 1) for n in lvl_shape], dtype=object)) >= 2**63:
        return None
    key = lvl_coords[0].astype(np.int64, copy=True)
    for c, n in zip(lvl_coords[1:], lvl_shape[1:]):
        key *= n
        key += c
    return key


def _sort_and_sum(lvl_coords: list[np.ndarray], values: np.ndarray, lvl_shape: list[int] | None = None):
    """Sort entries lexicographically by level coordinates and sum duplicates (as scipy's sum_duplicates).
    Entries already sorted and unique (pydata COO, most inputs) are detected in one pass and kept."""
    if len(values) > 1:
        key = _linear_key(lvl_coords, lvl_shape) if lvl_shape is not None else None
        if key is not None:
            if (key[1:] > key[:-1]).all():
                return lvl_coords, values
            perm = np.argsort(key, kind="stable")
        else:
            perm = np.lexsort(lvl_coords[::-1])
        lvl_coords = [c[perm] for c in lvl_coords]
        values = values[perm]
        new = np.zeros(len(values), dtype=bool)
        new[0] = True
        for c in lvl_coords:
            new[1:] |= c[1:] != c[:-1]
        if not new.all():
            starts = np.flatnonzero(new)
            values = np.add.reduceat(values, starts, dtype=values.dtype)
            lvl_coords = [c[starts] for c in lvl_coords]
    return lvl_coords, values


def pack(shape: tuple[int, ...], fmt: Format, coords, values: np.ndarray, *, sorted_unique: bool = False,
         name: str = "tensor"):
    """Level buffers (pos, crd, values) of the tensor with `values[e]` at dimension coordinates `coords[:, e]`.

    `coords` is one int array per dimension; duplicates are summed. With `sorted_unique=True` the caller
    promises the entries are already sorted in level order and unique (e.g. from np.nonzero).
    """
    lvl_coords = [np.asarray(coords[d], dtype=np.int64) for d in fmt.order]
    lvl_shape = [shape[d] for d in fmt.order]
    values = np.asarray(values)
    if not sorted_unique:
        lvl_coords, values = _sort_and_sum(lvl_coords, values, lvl_shape)
    nnz = len(values)
    pos, crd = [None] * fmt.ndim, [None] * fmt.ndim
    parent = np.zeros(nnz, dtype=np.int64)   # each entry's position in the current level
    n_parent = 1
    l = 0
    while l < fmt.ndim:
        level = fmt.levels[l]
        if level.kind == "dense":
            parent = parent * lvl_shape[l] + lvl_coords[l]
            n_parent *= lvl_shape[l]
            l += 1
            continue
        # A compressed level and the singleton levels after it form one run over coordinate tuples.
        end = l + 1
        while end < fmt.ndim and fmt.levels[end].kind == "singleton":
            end += 1
        new = np.ones(nnz, dtype=bool)
        if nnz > 1:
            new[1:] = parent[1:] != parent[:-1]
            for c in lvl_coords[l:end]:
                new[1:] |= c[1:] != c[:-1]
        counts = np.bincount(parent[new], minlength=n_parent)
        pos[l] = np.zeros(n_parent + 1, dtype=np.int64)
        np.cumsum(counts, out=pos[l][1:])
        pos[l] = to_index_array(pos[l], fmt.pos_width, "pos positions", name)
        for m in range(l, end):
            crd[m] = to_index_array(lvl_coords[m][new], fmt.crd_width, "crd coordinates", name)
        parent = np.cumsum(new) - 1
        n_parent = int(new.sum())
        l = end
    if fmt.levels[-1].kind == "dense" or n_parent != nnz:
        out = np.zeros(n_parent, dtype=values.dtype)
        out[parent] = values
        values = out
    return tuple(pos), tuple(crd), np.ascontiguousarray(values)


def unpack(shape: tuple[int, ...], fmt: Format, pos, crd) -> list[np.ndarray]:
    """Dimension coordinates (one int64 array per dimension) of every stored value, in storage order."""
    lvl_coords: list[np.ndarray] = []
    n_cur = 1
    for l, level in enumerate(fmt.levels):
        size = shape[fmt.order[l]]
        if level.kind == "dense":
            lvl_coords = [np.repeat(c, size) for c in lvl_coords]
            lvl_coords.append(np.tile(np.arange(size, dtype=np.int64), n_cur))
            n_cur *= size
        elif level.kind == "compressed":
            counts = np.diff(pos[l])
            lvl_coords = [np.repeat(c, counts) for c in lvl_coords]
            lvl_coords.append(crd[l].astype(np.int64))
            n_cur = len(crd[l])
        else:
            lvl_coords.append(crd[l].astype(np.int64))
    coords = [None] * fmt.ndim
    for l, d in enumerate(fmt.order):
        coords[d] = lvl_coords[l]
    return coords
