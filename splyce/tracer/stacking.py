"""Joining traced values: NumPy's ``concatenate``, ``stack``, ``hstack``, ``vstack``, ``column_stack`` of dense
values, scipy's ``hstack`` / ``vstack`` of sparse ones, and ``np.asarray`` / ``np.array`` of a traced value
or a list of them.

A join adds no node kind: each piece is *placed* into the result by a contraction with a constant 0/1
placement matrix stored sparse (``P[j, offset + j] = 1``, a frozen constant of the trace) along the joined
axis, and the placed pieces are added. Only the placement's stored entries multiply, so an ``inf`` or NaN of
a piece lands where it belongs and nowhere else; a sparse piece stays sparse (a sparse product, then a
union), as scipy's ``hstack`` of CSR blocks is CSR.
"""

from __future__ import annotations

import numbers

import numpy as np

from splyce.tensors.formats import Format
from splyce.tracer import indexing
from splyce.tracer import tracer as T
from splyce.tracer.base import TraceError, Tracer, _letters, _node, is_array, scalar_value
from splyce.tracer.dense_ops import astype


def _scalars_dtype(values) -> str:
    """The dtype NumPy gives an array of these scalars: each by its dtype, a Python number as NumPy converts it
    (array coercion is not NEP 50's weak promotion: ``np.array([np.float32(1), 2.0])`` is float64)."""
    return np.result_type(*[v.dtype if isinstance(v, Tracer) else np.asarray(v).dtype for v in values]).name


def _zero_d(v, op: str):
    """A 0-d piece to stack: a traced value as it is, a number as a 0-d constant node of its own dtype."""
    if isinstance(v, Tracer):
        return v
    return Tracer(_node(np.asarray(v).reshape(1), op)).reshape(())


def _pieces(arrays, op: str) -> list:
    if isinstance(arrays, Tracer) or is_array(arrays):
        raise TraceError(f"{op}: pass a list or tuple of arrays (NumPy iterates over the first axis of a single "
                         f"array, which a traced value cannot do); write {op}([a, b])")
    if not isinstance(arrays, (list, tuple)) or not arrays:   # (NumPy's own message)
        raise ValueError(f"{op}: need at least one array to concatenate")
    pieces = []
    for x in arrays:
        if isinstance(x, (list, tuple)):
            x = as_array(x, op=op) if _has_tracer(x) else np.asarray(x)
        elif scalar_value(x) is not None:
            raise ValueError(f"{op}: zero-dimensional arrays cannot be concatenated")
        pieces.append(x)
    return pieces


def _has_tracer(values) -> bool:
    return any(isinstance(v, Tracer) or (isinstance(v, (list, tuple)) and _has_tracer(v)) for v in values)


def concatenate(arrays, axis=0, *, sparse: Format | None = None, op: str = "concatenate") -> Tracer:
    """The pieces joined along ``axis`` (None: each flattened first). ``sparse``: the pieces are sparse
    values and the result is stored in this format (scipy's hstack / vstack); else they are dense."""
    pieces = _pieces(arrays, op)
    if axis is None:   # NumPy flattens each piece first: a view for 1-D ones only inside @splyce.jit
        if any(_node(p, op).type.ndim > 1 for p in pieces):
            raise TraceError(f"{op}: axis=None flattens the pieces, and flattening a traced value of rank > 1 is "
                             "not supported inside @splyce.jit; join along an axis, or pass 1-D pieces")
        axis = 0
    return _join([(p, False) for p in pieces], axis, sparse, op)


def _join(parts, axis, sparse: Format | None, op: str) -> Tracer:
    """``parts``: (piece, new) pairs; a ``new`` piece lacks the joined axis (it fills one position of it, as
    ``np.stack`` places its pieces), the others have it."""
    nodes = [_node(p, op) for p, _ in parts]
    if sparse is None:   # a dense piece of one position along the axis (``x[:, None]``) is read without it
        parts, nodes = _unit_pieces(parts, nodes, axis)
    if sparse is None:
        for node in nodes:
            if node.type.is_sparse:
                raise TraceError(f"{op}: a sparse value cannot be joined by NumPy; write sp.hstack / sp.vstack for "
                                 f"a sparse result, or a.toarray() for NumPy's dense one")
    ranks = {node.type.ndim + new for node, (_, new) in zip(nodes, parts)}
    ndim = max(ranks)
    if ndim == 0 or any(node.type.ndim == 0 and not new for node, (_, new) in zip(nodes, parts)):
        raise ValueError(f"{op}: zero-dimensional arrays cannot be concatenated")   # (stacked, they can)
    if len(ranks) != 1:
        raise ValueError(f"{op}: all the input arrays must have same number of dimensions, got shapes "
                         f"{', '.join(str(n.type.shape) for n in nodes)}")
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -ndim <= axis < ndim:
        raise TraceError(f"{op}: axis {axis!r} is out of bounds for arrays of dimension {ndim}")
    axis = int(axis) % ndim
    shapes = [node.type.shape[:axis] + (1,) + node.type.shape[axis:] if new else node.type.shape
              for node, (_, new) in zip(nodes, parts)]
    if len({shape[:axis] + shape[axis + 1:] for shape in shapes}) != 1:
        raise ValueError(f"{op}: all the input array dimensions except for the concatenation axis must match "
                         f"exactly, got shapes {', '.join(map(str, shapes))}")
    if len(nodes) == 1 and not parts[0][1]:
        return parts[0][0] if isinstance(parts[0][0], Tracer) else Tracer(nodes[0])
    dtype = np.result_type(*[np.dtype(n.type.dtype) for n in nodes]).name   # of supported dtypes: supported
    work = "int64" if dtype == "bool" else dtype   # a bool product would be a logical and: join as integers
    total = sum(shape[axis] for shape in shapes)
    letters = _letters(ndim + 2)
    subs, joined, unit = letters[:ndim], letters[ndim], letters[ndim + 1]
    out = subs[:axis] + joined + subs[axis + 1:]
    result, offset = None, 0
    for node, (_, new), shape in zip(nodes, parts, shapes):
        size = shape[axis]
        if node.type.dtype != work:
            node = astype(Tracer(node), work).node
        # a new piece is read without the joined axis; its placement's one row is a summed unit axis
        read = subs[:axis] + subs[axis + 1:] if new else subs
        row = unit if new else subs[axis]
        # a dense piece is read in its own row-major order, the placement's one entry per row innermost but
        # one, as written: pinned, so the planner does not fuse the piece's producer (``a @ x``) into a loop
        # nest that reads it once per placement row; a sparse piece's order is the planner's (its storage)
        order = None if sparse is not None else subs[:axis] + row + joined + subs[axis + 1:]
        placed = T.contract([node, _node(placement(size, offset, total, work), op)], [read, row + joined], out,
                            out_format=_format(sparse, node), op=op, order=order)
        result = placed if result is None else T.add(result, placed)
        offset += size
    return T.compare("!=", result, 0) if dtype == "bool" else result


def _unit_pieces(parts, nodes, axis):
    ranks = {node.type.ndim + new for node, (_, new) in zip(nodes, parts)}
    if len(ranks) != 1 or isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        return parts, nodes
    ndim = ranks.pop()
    if not -ndim <= axis < ndim:
        return parts, nodes
    axis = int(axis) % ndim
    out_parts, out_nodes = [], []
    for (piece, new), node in zip(parts, nodes):
        if not new and not node.type.is_sparse and node.type.shape[axis] == 1 and ndim > 1:
            if not isinstance(piece, Tracer):   # a concrete piece: squeezed by NumPy, a new constant
                piece, new = np.squeeze(np.asarray(piece), axis), True
                node = _node(piece, "concatenate")
            elif indexing.squeeze(node, {axis}).op != "view":   # ``x[:, None]``: read ``x`` itself
                node = indexing.squeeze(node, {axis})
                piece, new = Tracer(node), True
        out_parts.append((piece, new))
        out_nodes.append(node)
    return out_parts, out_nodes


def _format(sparse: Format | None, node):
    if sparse is None:
        return "dense"
    return sparse.with_widths(node.type.format.pos_width, node.type.format.crd_width)


def placement(size: int, offset: int, total: int, dtype: str):
    """The 0/1 matrix (size x total), stored CSR, with ones at (j, offset + j)."""
    import scipy.sparse as sps

    rows = np.arange(size, dtype=np.int32)
    return sps.csr_array((np.ones(size, dtype=dtype), (rows, offset + rows)), shape=(size, total))


def stack(arrays, axis=0, op: str = "stack") -> Tracer:
    pieces = _pieces(arrays, op)
    shapes = {_node(p, op).type.shape for p in pieces}
    if len(shapes) != 1:
        raise ValueError(f"{op}: all input arrays must have the same shape, got {', '.join(map(str, shapes))}")
    _refuse_sparse(pieces, op)
    return _join([(p, True) for p in pieces], axis, None, op)


def hstack(arrays) -> Tracer:
    pieces = _pieces(arrays, "hstack")
    _refuse_sparse(pieces, "hstack")
    first = _node(pieces[0], "hstack").type.ndim
    if first == 0 or any(_node(p, "hstack").type.ndim == 0 for p in pieces):
        raise TraceError("hstack: 0-d pieces are not supported inside @splyce.jit; pass 1-D or 2-D arrays")
    return _join([(p, False) for p in pieces], 0 if first == 1 else 1, None, "hstack")


def vstack(arrays) -> Tracer:
    """NumPy's vstack: 1-D pieces are rows (a new first axis), the others join along axis 0."""
    pieces = _pieces(arrays, "vstack")
    _refuse_sparse(pieces, "vstack")
    return _join([(p, _node(p, "vstack").type.ndim == 1) for p in pieces], 0, None, "vstack")


def column_stack(arrays) -> Tracer:
    """NumPy's column_stack: 1-D pieces are columns (a new last axis), 2-D ones join along axis 1."""
    pieces = _pieces(arrays, "column_stack")
    _refuse_sparse(pieces, "column_stack")
    return _join([(p, _node(p, "column_stack").type.ndim == 1) for p in pieces], 1, None, "column_stack")


def _refuse_sparse(pieces, op: str) -> None:
    if any(isinstance(p, Tracer) and p.node.type.is_sparse for p in pieces):
        raise TraceError(f"numpy.{op}: a sparse value cannot be joined by NumPy; write sp.{op} (scipy.sparse) "
                         "for a sparse result, or a.toarray() for NumPy's dense one")


def sparse_stack(blocks, how: str, format=None, dtype=None) -> Tracer:
    """scipy's ``hstack`` / ``vstack`` of 2-D sparse values (``blocks`` a list of them): a sparse result in
    CSR (or ``format``: 'csr', 'csc', 'coo'), as scipy joins CSR blocks."""
    from splyce.tracer.sparse_methods import FORMATS

    op = f"scipy.sparse.{how}"
    pieces = _pieces(blocks, op)
    for p in pieces:
        node = _node(p, op)
        if not node.type.is_sparse or node.type.ndim != 2:
            raise TraceError(f"{op}: the blocks must be 2-D sparse values inside @splyce.jit, got one of shape "
                             f"{node.type.shape}{' stored dense' if not node.type.is_sparse else ''}; write "
                             f"sp.csr_array(x) to store a dense block sparse, or np.{how} for a dense result")
    name = "csr" if format is None else str(format).lower()
    if name not in FORMATS:
        raise TraceError(f"{op}: format {format!r} is not supported inside @splyce.jit; use 'csr', 'csc' or 'coo'")
    if dtype is not None:
        pieces = [astype(p, dtype) for p in pieces]
    return _join([(p, False) for p in pieces], 1 if how == "hstack" else 0, FORMATS[name], op)


def as_array(x, dtype=None, op: str = "asarray"):
    """``np.asarray(x)`` of a traced value (the value itself, converted to ``dtype``) or of a (nested) list of
    traced values and numbers (stacked along a new first axis); None when ``x`` holds no traced value."""
    if isinstance(x, Tracer):
        if x.node.type.is_sparse:
            raise TraceError(f"numpy.{op} of a sparse value is not its dense array (NumPy wraps a scipy matrix in "
                             "a 0-d object array); write a.toarray() for the dense array")
        result = Tracer(x.node)   # a plain array (np.asarray of an np.matrix is an ndarray)
        return result if dtype is None else astype(result, dtype)
    if isinstance(x, (list, tuple)) and _has_tracer(x):
        rows = [as_array(v, op=op) if isinstance(v, Tracer) or (isinstance(v, (list, tuple)) and _has_tracer(v))
                else np.asarray(v) for v in x]
        # NumPy's array of scalars: the common dtype of the entries
        if all((v.ndim if isinstance(v, Tracer) else np.ndim(v)) == 0 for v in rows):
            dtype = dtype if dtype is not None else _scalars_dtype(x)
            rows = [_zero_d(v, op) for v in rows]
        result = stack(rows, 0, op=op)
        return result if dtype is None else astype(result, dtype)
    return None
