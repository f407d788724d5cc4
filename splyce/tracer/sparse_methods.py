"""scipy.sparse's storage methods on traced values: format conversions (``tocsr``, ``tocsc``, ``tocoo``,
``asformat``) and the counts of stored entries (``nnz``, ``getnnz(axis)``, ``count_nonzero(axis)``).

- A conversion to the format a value already has is the value itself (scipy's ``copy=False``); to another
  format it is a re-store: a one-operand contraction whose result format is the target (the planner copies
  the entries into the new buffers). A dense value converted is sparsified (its zeros are not stored), as
  ``csr_array(ndarray)``.
- ``nnz`` is the count of *stored* entries, explicit zeros included, as scipy's: not known at trace time, it
  is a traced int64 0-d value, the sum of a ``stored`` head (1 at each stored entry) over the value.
  ``count_nonzero`` counts the stored entries that are not zero.
"""

from __future__ import annotations

from splyce.tensors.formats import COO, CSC, CSR, Format
from splyce.tracer import tracer as T
from splyce.tracer.base import TraceError, Tracer, _axes, _node
from splyce.tracer.dense_ops import apply

# scipy's format names -> the Format a 2-D value is stored in
FORMATS = {"csr": CSR, "csc": CSC, "coo": COO}
OTHER_SCIPY_FORMATS = ("dia", "lil", "dok", "bsr")


def convert(x, name: str, op: str | None = None) -> Tracer:
    """``x`` stored in scipy's format ``name`` (``"csr"``, ``"csc"``, ``"coo"``)."""
    op = op or f"to{name}"
    node = _node(x, op)
    if node.type.ndim != 2:
        raise TraceError(f"{op}: a 2-D value is needed (scipy's sparse formats are 2-D), got shape "
                         f"{node.type.shape}")
    target = FORMATS[name]
    current = node.type.format
    if node.type.is_sparse:
        target = target.with_widths(current.pos_width, current.crd_width)
        if _same_storage(current, target):
            return x if isinstance(x, Tracer) else Tracer(node)
    return T.contract([node], ["ab"], "ab", out_format=target, op=op)


def _same_storage(a: Format, b: Format) -> bool:
    return a.levels == b.levels and (a.order or (0, 1)) == (b.order or (0, 1)) \
        and (a.pos_width, a.crd_width) == (b.pos_width, b.crd_width)


def asformat(x, format, copy=False) -> Tracer:
    """scipy's ``asformat``: ``None`` keeps the value, ``"csr"`` / ``"csc"`` / ``"coo"`` convert."""
    if format is None:
        return x
    if not isinstance(format, str):
        raise TraceError(f"asformat: the format must be a string such as 'csr', got {format!r}")
    name = format.lower()
    if name in FORMATS:
        return convert(x, name, "asformat")
    if name in OTHER_SCIPY_FORMATS:
        raise TraceError(f"asformat: format {format!r} is not supported inside @splyce.jit; use 'csr', 'csc' or "
                         "'coo' (the result is converted to the argument's class on return)")
    raise ValueError(f"asformat: unknown format {format!r}; scipy's formats are csr, csc, coo, dia, lil, dok, bsr")


def stored(x, op: str) -> Tracer:
    """A bool value, True at each entry ``x`` stores (explicit zeros and NaN included), in ``x``'s pattern."""
    return apply("stored", x, op=op, sparse_ok=True)


def getnnz(x, axis=None) -> Tracer:
    """scipy's ``getnnz(axis)``: the stored entries (explicit zeros included) in all, per column (axis 0) or
    per row (axis 1), as int64."""
    node = _node(x, "getnnz")   # of sparse values only (tracer/surface.py)
    if axis is not None:
        if isinstance(axis, (tuple, list)):
            raise TraceError(f"getnnz: axis must be None, 0 or 1, got {axis!r}")
        _axes(axis, node.type.ndim, "getnnz")
    return T.sum_(stored(x, "getnnz"), axis, dtype="int64")


def nnz(x) -> Tracer:
    """scipy's ``nnz`` of a traced sparse value: a traced int64 0-d value (not known at trace time). scipy
    keeps the explicit zeros of an argument through what it computes from the stored values alone
    (transposes, conversions, scalings, unary maps, ``astype``), and drops the zeros its binary operations,
    products and comparisons produce: ``nnz`` counts the stored entries in the first case, the nonzero
    ones in the second."""
    if keeps_stored_zeros(_node(x, "nnz")):   # of sparse values only (tracer/surface.py)
        return getnnz(x)
    return T.count_nonzero(x)


def keeps_stored_zeros(node) -> bool:
    """Whether scipy's value for ``node`` stores what its source argument stores (scipy's ``_with_data``)."""
    while node.op != "input":
        if node.op == "map":
            node = node.args[0]
        elif node.op == "contract" and len(node.args) == 1 and \
                sorted(node.params[0].inputs[0]) == sorted(node.params[0].output):
            node = node.args[0]
        elif node.op == "ewise" and len(node.args) == 1 and _keeps(node.params[0][0]):
            node = node.args[0]
        else:
            return False
    return True


def _keeps(head: str) -> bool:
    from splyce.tracer.dense_ops import UFUNCS

    return head == "cast" or (head in UFUNCS and UFUNCS[head].kind == "arith" and head not in ("max", "min"))


def count_nonzero(x, axis=None) -> Tracer:
    """scipy's ``count_nonzero(axis)`` (explicit zeros not counted), NumPy's for a dense value."""
    node = _node(x, "count_nonzero")
    if axis is not None and not isinstance(axis, (tuple, list)):
        _axes(axis, node.type.ndim, "count_nonzero")
    return T.count_nonzero(x, axis)


__all__ = ["FORMATS", "asformat", "convert", "count_nonzero", "getnnz", "nnz", "stored"]
