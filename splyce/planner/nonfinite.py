"""NaN and Inf in an einsum summed to a scalar over sparse operands: the value NumPy, scipy and pydata-sparse give.

A compiled (sparsifier) sum only visits terms whose sparse factors are all stored: a missing entry is a zero
that is never multiplied. That is exact while every value is finite (x * 0 == 0), but NumPy's einsum on the
dense arrays, scipy's ``(L @ L).multiply(L).sum()`` and pydata-sparse's einsum all make ``NaN * 0`` and
``Inf * 0`` NaN: a triangle count over a graph with one NaN weight is NaN there, while the plain sum can come
out finite (when the NaN closes no triangle). So the drop-in's scalar einsum checks its sparse operands'
values (one pass, skipped when the sum already proved them all ones) and, when one is not finite, decides
exactly whether some term pairs a non-finite stored value with a missing entry of another sparse operand.

A dense operand's values are all multiplied (the kernel iterates its whole range), so its zeros already give
NaN where NumPy does; its own Inf / NaN against a missing sparse entry is skipped, as scipy's ``A @ x`` and
pydata-sparse's einsum skip it. Results of rank >= 1 keep the sparse rule (missing entries are not
multiplied, as in scipy's ``@``): docs/semantics.md.
"""
from __future__ import annotations

from collections import Counter

import numpy as np


def values_finite(values: np.ndarray) -> bool:
    """Whether every value is finite: one sum (NaN and Inf propagate into it; an overflow only costs the exact
    check, which then finds nothing)."""
    if values.dtype.kind not in "fc" or not len(values):
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(values.sum()))


def _columns(coords, subs, letters) -> np.ndarray:
    """The entries' coordinates on ``letters``, one row per entry."""
    return np.stack([coords[subs.index(letter)] for letter in letters], axis=1)


def _missing_partner(e_coords, e_subs, q_coords, q_subs, sizes, summed) -> bool:
    """Whether some non-finite entry (``e_coords``, of an operand with subscripts ``e_subs``) meets a missing
    entry of operand ``q`` in a term. q's letters in ``summed`` (in no other operand) are summed within q
    first, as pydata-sparse and NumPy's ``optimize=True`` do (a sum adds a missing entry, it multiplies none):
    so q's fibre over the rest misses an entry when its distinct stored coordinates on them, among those that
    agree with the entry on the letters it shares, are fewer than the assignments of its other letters."""
    shared = [letter for letter in q_subs if letter in e_subs]
    free = [letter for letter in q_subs if letter not in e_subs and letter not in summed]
    full = 1
    for letter in free:
        full *= sizes[letter]
    if len(q_coords[0]) < full:     # fewer stored entries than one fibre holds: every fibre misses some
        return True
    if not shared + free:
        return False                # q is summed whole: it multiplies nothing missing
    distinct = np.unique(_columns(q_coords, q_subs, shared + free), axis=0)   # a duplicate is one entry
    if not shared:
        return len(distinct) < full
    # the shared coordinates of q's distinct entries and of the non-finite ones, ranked together
    both = np.concatenate([distinct[:, :len(shared)], _columns(e_coords, e_subs, shared)])
    ranks = np.unique(both, axis=0, return_inverse=True)[1].reshape(-1)
    q_shared, e_key = ranks[:len(distinct)], ranks[len(distinct):]
    stored, counts = np.unique(q_shared, return_counts=True)
    at = np.minimum(np.searchsorted(stored, e_key), len(stored) - 1)
    return bool(((stored[at] != e_key) | (counts[at] < full)).any())


def sum_value(inputs: list[str], shapes: list[tuple], sparse: list, result, values_known_finite: bool = False):
    """The scalar einsum's value as NumPy gives it, from ``result``, the sum over stored entries.

    ``inputs``: each operand's subscripts; ``shapes``: each operand's shape; ``sparse``: per operand, None
    for a dense one, else a ``SparseTensor`` (its ``coords()`` and ``values``). ``values_known_finite``: the
    caller proved every sparse value finite (e.g. all ones). Work: one pass over the values; only when one is
    not finite, a sort of the other sparse operands' coordinates on their shared letters (O(nnz log nnz))."""
    dtype = np.asarray(result).dtype
    if values_known_finite or dtype.kind not in "fc":
        return result
    tensors = [(i, t) for i, t in enumerate(sparse) if t is not None]
    if all(values_finite(t.values) for _, t in tensors):
        return result
    sizes = {letter: size for subs, shape in zip(inputs, shapes) for letter, size in zip(subs, shape)}
    counts = Counter("".join(inputs))
    summed = {letter for letter, n in counts.items() if n == 1}      # each in one operand only
    nan = np.array(np.nan, dtype=dtype)[()]
    coords_of: dict = {}

    def coords(i):
        if i not in coords_of:
            coords_of[i] = sparse[i].coords()     # (duplicates: made one in _missing_partner)
        return coords_of[i]

    for i, t in tensors:
        bad = ~np.isfinite(t.values)
        if not bad.any():
            continue
        subs = inputs[i]
        e_coords = [c[bad] for c in coords(i)]
        e_values = t.values[bad]
        if any(sizes[letter] == 0 for letter in set("".join(inputs)) - set(subs)):
            return result           # no term at all: the sum is empty, as NumPy's
        if np.isnan(e_values).any():
            return nan              # NaN times anything, stored or missing, is NaN
        for q, _ in tensors:
            if q != i and _missing_partner(e_coords, subs, coords(q), inputs[q], sizes, summed):
                return nan          # Inf times a missing entry
    return result


# -- a sparse vector scattered densely into a product --------------------------------------------------------
# ``A @ x`` with a sparse x runs as an SpMV on x scattered into a dense vector (O(n)). Its missing entries are
# then zeros that are multiplied: a NaN or Inf of A in a column x does not store gives NaN, where scipy's
# sparse product (and GraphBLAS) skips the pair. Such a NaN is sticky, so the result shows every row it
# reached: those rows (only those) are summed again over the entries x stores, in stored order from +0.0,
# as scipy's ``csr_matmat`` sums them.

def maybe_nan(y: np.ndarray) -> bool:
    """Whether ``y`` holds a NaN, at a ufunc call's cost (~2.5 us on a small vector, where an SpMSpV call
    takes 20-30 us; 0.7-1.7 % of the large ones): its minimum, which a NaN propagates into (a sum would warn
    on an overflow of finite values)."""
    if y.dtype.kind == "c":
        return bool(np.isnan(y).any())
    if y.dtype.kind != "f" or not y.size:
        return False
    v = y.min()
    return v != v


def stored_mask(coords: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[coords] = True
    return mask


def resum_rows(y: np.ndarray, indptr, indices, data, stored: np.ndarray, dense_x: np.ndarray) -> np.ndarray:
    """``y`` (``A @ x`` by a dense scatter of x) with each NaN row summed again over the columns x stores
    (``stored``): a copy when a row changes. Work: the NaN rows' entries."""
    rows = np.flatnonzero(np.isnan(y))
    if not len(rows):
        return y
    y = y.copy()
    zero = np.zeros(1, dtype=y.dtype)
    for r in rows:
        cols = indices[indptr[r]:indptr[r + 1]]
        keep = stored[cols]
        products = data[indptr[r]:indptr[r + 1]][keep] * dense_x[cols[keep]]
        y[r] = np.cumsum(np.concatenate([zero, products.astype(y.dtype, copy=False)]))[-1]
    return y


def resum_dot(out, stored_a: np.ndarray, dense_a: np.ndarray, coords_b: np.ndarray, dense_b: np.ndarray):
    """``a @ b`` of two sparse vectors scattered densely, when NaN: summed again over the coordinates both
    store, ascending (scipy's ``csr_matmat`` order for a 1 x n row times an n x 1 column), from +0.0."""
    both = np.unique(coords_b)
    both = both[stored_a[both]]
    dtype = np.asarray(out).dtype
    products = (dense_a[both] * dense_b[both]).astype(dtype, copy=False)
    total = np.cumsum(np.concatenate([np.zeros(1, dtype=dtype), products]))[-1]
    return total if np.ndim(out) == 0 and not isinstance(out, np.ndarray) else np.asarray(total, dtype=dtype)
