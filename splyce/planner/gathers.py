"""Gathers computed before the kernel: ``x[perm]``, ``X[:, q]``, ``np.take`` of dense inputs and the row /
column slices and gathers of CSR / CSC inputs (tracer/gather.py's ``gather`` nodes).

The planner replaces each gather node of an input by one more kernel input (after the arguments, the
constants and the transposes read in place), computed per call from the call's values by ``host_gather``;
a gather returned as a result is a copy of that input, as an argument returned is. A gather of a dense value
the kernel computes stays in the kernel (lowering/dense.py), reading its index through one more input: the
index checked and wrapped into ``[0, n)`` here (O(index)). Work, for ``k`` selected entries:

- dense: NumPy's indexing, O(result), which checks every index (``IndexError``) and wraps negative ones;
- sparse, another format than CSR / CSC (a COO, read as DCSR): re-stored as CSR first, O(nnz);
- sparse, the compressed axis (rows of a CSR, columns of a CSC): a contiguous slice, or an index array of
  consecutive rows (``np.arange(a, a + b)``, a minibatch whose start changes per call without a new
  kernel), is a view of the operand's coordinates and values with its positions shifted (O(rows)); a
  gather or a strided slice copies the selected rows, O(rows + k);
- sparse, the other axis (columns of a CSR, ``X[:, q]``): one pass over the stored entries, O(nnz), as
  scipy's ``csr_column_index1/2``; an index array that is not increasing also sorts the selected entries of
  each row by their new column, O(k log k).
"""

from __future__ import annotations

import numpy as np

from splyce.native.records import record
from splyce.tracer.ir import Node, TensorType, Trace, key_text, walk


@record
class Gathered:
    """Kernel input ``first + k``: input ``operand`` read at input ``index`` (None: slices only) through
    ``spec`` (tracer/gather.py), stored as ``type``."""

    operand: int
    index: int | None
    spec: tuple
    type: TensorType


def gather_inputs(trace: Trace, nnz: tuple) -> tuple[Trace, tuple[Gathered, ...], tuple[float, ...]]:
    """``trace`` with every gather node read through a new input (in walk order, so a gather of a gather
    reads an earlier one), the gathers in order and the expected stored entries of each."""
    from splyce.tracer.tracer import copy_of

    found: list[Gathered] = []
    estimates: list[float] = []
    slots: dict[Node, Node] = {}
    mapping: dict[Node, Node] = {}
    outputs = set(trace.outputs)
    for node in walk(trace.outputs):
        args = tuple(mapping.get(a, a) for a in node.args)
        if node.op == "gather" and len(args) > 1 and args[1].op != "input":
            # an index the kernel computes, in range by construction (tracer/gather.py, ``in_range``)
            mapping[node] = Node(node.op, args, node.params, node.type)
            continue
        if node.op == "gather" and args[0].op != "input":   # read in the kernel, at an index checked here
            index = args[1]
            if index.op != "input" or node.type.is_sparse:
                raise AssertionError(f"a gather the tracer should have refused reached the planner: {node}")
            axis = [e for e in node.params[0] if e[0] != "n"].index(("a",))
            n = args[0].type.shape[axis]
            g = Gathered(index.params[0], None, (("check", n, axis),), TensorType(index.type.shape, "int64", None))
            read = slots.get(g)
            if read is None:
                found.append(g)
                estimates.append(float(np.prod(index.type.shape)))
                read = slots[g] = Node("input", (), (len(trace.inputs) + len(found) - 1,), g.type)
            mapping[node] = Node(node.op, (args[0], read), node.params, node.type)
            continue
        if node.op == "gather":
            read = slots.get(node)
            if read is None:
                if any(a.op != "input" for a in args):   # the tracer gathers only inputs and gathers
                    raise AssertionError(f"a gather of a computed value reached the planner: {node}")
                operand = args[0].params[0]
                index = args[1].params[0] if len(args) > 1 else None
                found.append(Gathered(operand, index, node.params[0], node.type))
                read = slots[node] = Node("input", (), (len(trace.inputs) + len(found) - 1,), node.type)
                all_nnz = tuple(nnz) + tuple(estimates)
                estimates.append(_expected_entries(node, all_nnz[operand]))
            mapping[node] = copy_of(read) if node in outputs else read
            continue
        mapping[node] = node if args == node.args else Node(node.op, args, node.params, node.type)
    if not found:
        return trace, (), ()
    inputs = trace.inputs + tuple(g.type for g in found)
    return Trace(inputs, tuple(mapping[o] for o in trace.outputs)), tuple(found), tuple(estimates)


def _expected_entries(node: Node, operand_nnz: float) -> float:
    if not node.type.is_sparse:
        return float(np.prod(node.type.shape))
    fraction = 1.0
    for n_in, n_out in zip(node.args[0].type.shape, node.type.shape):
        fraction *= n_out / n_in if n_in else 1.0
    return float(operand_nnz) * fraction


def describe(g: Gathered, first: int, k: int) -> str:
    if g.spec[0][0] == "check":
        _, n, axis = g.spec[0]
        return (f"%arg{first + k} = checked %arg{g.operand} (every index in [-{n}, {n}) for axis {axis}, "
                f"wrapped, before the kernel) : {g.type}")
    index = f", %arg{g.index}" if g.index is not None else ""
    where = "NumPy's indexing" if not g.type.is_sparse else "rows / columns selected"
    return (f"%arg{first + k} = gather %arg{g.operand}{index} [{key_text(g.spec)}] ({where}, before the kernel, "
            f"indices checked) : {g.type}")


def _slice(entry: tuple) -> slice:
    _, start, step, length = entry
    stop = start + step * length
    return slice(start, None if stop < 0 else stop, step)


def host_gather(g: Gathered, values: list):
    """The gathered value from the kernel's earlier inputs ``values``."""
    operand = values[g.operand]
    if g.spec[0][0] == "check":           # an index the kernel reads: wrapped into [0, n), every entry checked
        _, n, axis = g.spec[0]
        return np.ascontiguousarray(checked_index(operand, n, axis))
    index = values[g.index] if g.index is not None else None
    if not g.type.is_sparse:
        key = tuple(index if e[0] == "a" else None if e[0] == "n" else e[1] if e[0] == "i" else _slice(e)
                    for e in g.spec)
        value = np.asarray(operand)[key]
        value = np.asarray(value, dtype=g.type.dtype)
        if value.shape != g.type.shape:   # the kernel was compiled for these shapes
            raise AssertionError(f"gather gave shape {value.shape}, planned {g.type.shape}")
        return value if value.flags.c_contiguous and value.base is None else value.copy()
    return _sparse_gather(operand, g, index)


def checked_index(index, n: int, axis: int) -> np.ndarray:
    """``index`` wrapped into ``[0, n)`` as int64, or NumPy's IndexError for an entry out of ``[-n, n)``."""
    index = np.asarray(index)
    wide = index.astype(np.int64, copy=False) if index.dtype != np.uint64 else index
    bad = (wide < -n) | (wide >= n)
    if bad.any():
        raise IndexError(f"index {int(index[np.argmax(bad)])} is out of bounds for axis {axis} with size {n}")
    wide = wide.astype(np.int64, copy=False)
    return np.where(wide < 0, wide + n, wide)


def _selection(entry: tuple, index, n: int, axis: int):
    """A step-1 slice as ``(start, stop)``, else the selected positions as an int64 array."""
    if entry[0] == "a":
        index = checked_index(index, n, axis)
        if index.ndim == 1 and len(index) > 1 and int(index[-1]) - int(index[0]) == len(index) - 1 \
                and bool(np.all(np.diff(index) == 1)):
            return (int(index[0]), int(index[-1]) + 1)     # consecutive (np.arange(a, a + b)): as a slice
        return index
    _, start, step, length = entry
    if step == 1:
        return (start, start + length)
    return start + step * np.arange(length, dtype=np.int64)


def _sparse_gather(tensor, g: Gathered, index):
    from splyce.tensors.formats import compressed_order
    from splyce.tensors.tensor import SparseTensor, asarray

    if compressed_order(tensor.format) is None:      # a COO (read as DCSR) or another format: as CSR, O(nnz)
        tensor = asarray(tensor, format=g.type.format)
    fmt = tensor.format
    major, minor = fmt.order
    pos, crd, vals = tensor.pos[1], tensor.crd[1], tensor.values
    n_major, n_minor = tensor.shape[major], tensor.shape[minor]
    sel_major = _selection(g.spec[major], index, n_major, major)
    sel_minor = _selection(g.spec[minor], index, n_minor, minor)
    if not _whole(sel_major, n_major):
        pos, crd, vals = _take_major(pos, crd, vals, sel_major)
    if not _whole(sel_minor, n_minor):
        pos, crd, vals = _take_minor(pos, crd, vals, sel_minor, n_minor)
    shape = g.type.shape
    return SparseTensor(shape, g.type.format, (None, pos), (None, crd.astype(tensor.crd[1].dtype, copy=False)),
                        vals, validate=False)


def _whole(sel, n: int) -> bool:
    return isinstance(sel, tuple) and sel == (0, n)


def _take_major(pos, crd, vals, sel):
    """The rows (of the compressed axis) ``sel`` selects: a view for a step-1 slice, else a copy."""
    if isinstance(sel, tuple):
        a, b = sel
        first, last = int(pos[a]), int(pos[b])
        new_pos = pos[a:b + 1] - pos[a] if first else pos[a:b + 1]
        return np.ascontiguousarray(new_pos), crd[first:last], vals[first:last]
    starts = pos[sel].astype(np.int64)
    counts = pos[sel + 1].astype(np.int64) - starts
    new_pos = np.zeros(len(sel) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_pos[1:])
    total = int(new_pos[-1])
    take = np.repeat(starts - new_pos[:-1], counts) + np.arange(total, dtype=np.int64)
    return new_pos.astype(pos.dtype, copy=False), crd[take], vals[take]


def _take_minor(pos, crd, vals, sel, n_minor: int):
    """The entries whose coordinate (of the other axis) ``sel`` selects, renumbered, in order per row: one
    pass over the stored coordinates to find them, then work on the ``k`` found (and ``rows log k`` for the
    new positions)."""
    if isinstance(sel, tuple):
        a, b = sel
        hit = np.flatnonzero((crd >= a) & (crd < b))
        new_pos = np.searchsorted(hit, pos)           # kept entries before each row's first
        return (new_pos.astype(pos.dtype, copy=False), (crd[hit] - a).astype(crd.dtype, copy=False), vals[hit])
    selected = np.zeros(n_minor, dtype=np.bool_)
    selected[sel] = True
    hit = np.flatnonzero(np.take(selected, crd))      # the one pass over the stored entries
    coords = crd[hit].astype(np.int64)
    counts = np.bincount(sel, minlength=n_minor)      # how often each coordinate is selected
    times = counts[coords]                            # copies of each entry found
    emitted = np.zeros(len(hit) + 1, dtype=np.int64)
    np.cumsum(times, out=emitted[1:])
    new_pos = emitted[np.searchsorted(hit, pos)]
    total = int(emitted[-1])
    order = np.argsort(sel, kind="stable")            # the new coordinates of each old one, increasing
    first = np.zeros(n_minor + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    within = np.arange(total, dtype=np.int64) - np.repeat(emitted[:-1], times)
    new_crd = order[np.repeat(first[coords], times) + within]
    new_vals = vals[np.repeat(hit, times)]
    if len(sel) > 1 and not np.all(sel[1:] > sel[:-1]):     # not increasing: sort each row by new coordinate
        rows = np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(new_pos))
        perm = np.argsort(rows * len(sel) + new_crd, kind="stable")
        new_crd, new_vals = new_crd[perm], new_vals[perm]
    return new_pos.astype(pos.dtype, copy=False), new_crd, new_vals
