"""einsum subscripts that repeat an index within one operand (``"ii->i"``, ``"ii->"``, ``"ii,i->i"``,
``"iij->ij"``): that operand's diagonal is taken first, as NumPy's einsum does, and the einsum of distinct
indices runs on it. The diagonal of a sparse operand is read off its stored coordinates, O(nnz): the entries
whose repeated axes agree.

What the diagonal is, by family (so that the result's class is what that library's user gets):

- NumPy: NumPy's own (``np.einsum("ii->i", x)``).
- scipy: a dense NumPy vector, as scipy's ``A.diagonal()`` (a 2-D operand: scipy's own call, duplicates summed);
  with ``out_format`` given, a splyce sparse tensor instead, so that a sparse result asked for stays sparse.
- pydata-sparse: a pydata COO, as ``sparse.einsum`` gives.
- splyce: a splyce sparse tensor.
"""
from __future__ import annotations

import numpy as np


def has_repeats(inputs: list[str]) -> bool:
    return any(len(set(subs)) != len(subs) for subs in inputs)


def take(operands, inputs: list[str], families: list[str], sparse_out: bool):
    """``(operands, inputs)`` with each operand whose subscripts repeat an index replaced by its diagonal over
    the distinct indices (in order of first appearance). Raises ValueError when a repeated index's axes differ
    in length (NumPy's rule)."""
    out_ops, out_inputs = [], []
    for n, (x, subs, family) in enumerate(zip(operands, inputs, families)):
        if len(set(subs)) == len(subs):
            out_ops.append(x)
            out_inputs.append(subs)
            continue
        shape = tuple(np.shape(x)) if family == "numpy" else tuple(x.shape)
        if len(shape) != len(subs):
            raise ValueError(f"einsum: operand {n} has {len(shape)} dimensions but subscripts {subs!r}")
        distinct = "".join(dict.fromkeys(subs))
        axes = [subs.index(c) for c in distinct]          # each distinct index's first axis
        for axis, c in enumerate(subs):
            first = subs.index(c)
            if shape[axis] != shape[first]:
                raise ValueError(f"einsum: index {c!r} repeated in operand {n} ({subs!r}) labels axes of "
                                 f"different lengths ({shape[first]} != {shape[axis]})")
        if family == "numpy":
            diagonal = np.einsum(f"{subs}->{distinct}", np.asarray(x))
        elif family.startswith("scipy") and len(shape) == 2 and not sparse_out:
            diagonal = x.diagonal()                      # scipy's own: any format, duplicates summed
        else:
            coords, values = _coordinates(x, family)
            keep = np.ones(len(values), dtype=bool)
            for axis, c in enumerate(subs):
                first = subs.index(c)
                if axis != first:
                    keep &= coords[axis] == coords[first]
            picked = [coords[a][keep] for a in axes]
            diagonal = _build(family, tuple(shape[a] for a in axes), picked, values[keep], sparse_out)
        out_ops.append(diagonal)
        out_inputs.append(distinct)
    return out_ops, out_inputs


def _coordinates(x, family: str) -> tuple[list[np.ndarray], np.ndarray]:
    """One coordinate array per axis and the values, each position once (duplicates summed on a copy)."""
    if family == "splyce":
        return x.coords(), x.values
    if family == "pydata":
        coo = x if hasattr(x, "coords") else x.tocoo()
        if getattr(coo, "has_duplicates", False):
            coo = coo.copy()
            coo.sum_duplicates()
        if coo.fill_value != 0:
            raise ValueError("einsum: a pydata-sparse operand needs fill value 0, got " + repr(coo.fill_value))
        return list(coo.coords), coo.data
    coo = x.tocoo(copy=True)                             # scipy: a copy, so that summing never touches x
    coo.sum_duplicates()
    return [np.asarray(c) for c in coo.coords], coo.data


def _build(family: str, shape: tuple[int, ...], coords, values, sparse_out: bool):
    if family == "pydata":
        import sparse

        return sparse.COO(np.stack(coords) if coords else np.zeros((0, len(values)), dtype=np.int64), values,
                          shape=shape, has_duplicates=False)
    if family.startswith("scipy") and not sparse_out:
        dense = np.zeros(shape, dtype=values.dtype)
        dense[tuple(coords)] = values
        return dense
    from splyce.tensors.formats import SPARSE_VECTOR, CSR, csf
    from splyce.tensors.tensor import from_coords

    fmt = SPARSE_VECTOR if len(shape) == 1 else CSR if len(shape) == 2 else csf(len(shape))
    return from_coords(shape, fmt, [np.asarray(c, dtype=np.int64) for c in coords], values, None,
                        "einsum diagonal")
