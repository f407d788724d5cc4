"""The drop-ins on Dask operands: one task per row block runs the single-process drop-in on that block.

``matmul(a, b)``: blocks of rows of ``a`` times the whole ``b`` (SpMV, SpMM, SpGEMM: each row of the product
depends on one row of ``a``). ``multiply`` / ``add`` / ``subtract``: aligned row blocks of both operands.
``einsum``: the outermost loop index (the first index of the first operand) is partitioned; operands that
start with it are cut into aligned row blocks, operands without it are broadcast whole. When the result keeps
that index, its blocks are the result's row blocks; when it sums over it (a triangle count), the per-block
results are added in block order.

Each row of a result is computed by the same kernel, in the same order, as in one process, so results are
bit-identical, except that sums over the partitioned index (``einsum`` results without it) add the blocks'
partial sums: exact for integers, booleans and floats whose partial sums are exact (0/1 patterns,
counts), otherwise equal up to floating-point rounding.
"""

from __future__ import annotations

import functools
import operator
import threading
import weakref

import numpy as np

from splyce.dask.blocks import (
    _as_array, block_keys, is_dask, pad_rows, row_blocks, trim_rows, whole, whole_keys,
)
from splyce.dask.fresh import fresh_rows
from splyce import dropin
from splyce.dropin import (
    Formulation, OperandInfo, operand_family, rowwise_format, sparse_family, choose_einsum_formulation,
    choose_matmul_formulation,
)
from splyce.native import memory_pool
from splyce.tensors.formats import CSR, Format


def _call_block(fn, rows: int, padded: int, prep: tuple, trim: bool, *operands):
    """One task: pad the partitioned operands to the common row count (``prep`` "pad"), join the broadcast
    ones given as their row blocks (``prep`` ("join", what next): once per process, ``_joined_once``), take
    the broadcast ones the drop-in converts to a format (``prep`` (that Format, the operand's name in the
    drop-in's errors)) as this process's converted and checked SparseTensor of them (``_converted_once``),
    run the drop-in, trim the result (a scipy CSR block as a ``FreshRows``: no copy at ``.compute()``'s end).
    NumPy allocates from splyce's cache of freed large buffers meanwhile, as in ``splyce.matmul`` & co. in one
    process (``native/memory_pool``): a worker's results are freed once sent, and the next task's reuse their
    backed pages. Without it, each task's result was fresh memory: a 216k-row 3-D mesh SpGEMM's 63 MB result
    page-faulted anew in every task (on this VM, whose host reclaims freed guest memory, 40-70 ms of wall
    time a call; the single-process drop-in reuses its pages)."""
    with memory_pool.active():
        out = fn(*(_prepared(x, p, padded) for x, p in zip(operands, prep)))
    return fresh_rows(trim_rows(out, rows)) if trim else out


def _prepared(x, p, padded: int):
    if p == "pad":
        return pad_rows(x, padded)
    if type(p) is tuple and p[0] == "join":
        x, p = _joined_once(x), p[1]
    return _converted_once(x, *p) if type(p) is tuple else x


def _sum_blocks(partials: list):
    """Per-block results of a sum over the partitioned index, added in block order."""
    return functools.reduce(operator.add, partials)


def _meta(x):
    return x._meta if is_dask(x) else x


def _result_meta(family: str, sparse: bool, ndim: int, dtype, coo: bool = False):
    """An empty result of the drop-in's type: NumPy, or the operands' sparse family (scipy CSR / COO)."""
    dtype = np.dtype(dtype)
    if not sparse or family == "numpy" or ndim != 2:
        return np.empty((0,) * ndim, dtype=dtype)
    import scipy.sparse as sps

    if family == "pydata":
        return _pydata_empty(ndim, dtype)
    if family == "scipy-matrix":
        return (sps.coo_matrix if coo else sps.csr_matrix)((0, 0), dtype=dtype)
    return (sps.coo_array if coo else sps.csr_array)((0, 0), dtype=dtype)


def _pydata_empty(ndim, dtype):
    import sparse

    return sparse.COO.from_numpy(np.empty((0,) * ndim, dtype=dtype))


def _partitioned_graph(fn, parts: list, broadcast: list, order: list, out_chunks, meta, reduce: bool,
                       name: str, converted: dict | None = None):
    """The graph: per row block, ``fn(*operands)`` with the partitioned operands' blocks (padded to the
    largest block) and the broadcast operands' single keys, in ``order`` (('p', i) / ('b', i) per operand);
    the broadcast operands at positions in ``converted`` go in as their SparseTensor in the Format given
    there (with the operand's name for errors), converted and checked once per process (``_converted_once``)."""
    converted = converted or {}
    from dask.base import tokenize

    rows = parts[0].chunks[0]
    padded = max(rows) if rows else 0
    part_keys = [block_keys(p) for p in parts]
    bcast_keys, joined = zip(*[whole_keys(b) for b in broadcast]) if broadcast else ((), ())
    # a dense block's padding rows would take part in a sum over the rows (0 * inf is NaN): then no padding
    dense_sum = reduce and any(operand_family(p._meta) == "numpy" for p in parts)
    prep = tuple("pad" if kind == "p" and not dense_sum else
                 (("join", converted.get(n, "")) if joined[i] else converted.get(n, "")) if kind == "b" else ""
                 for n, (kind, i) in enumerate(order))
    token = tokenize(fn, [p.name for p in parts], [b.name for b in broadcast], order, reduce)
    # ``name`` names the kind of op (e.g. matmul-spgemm): distributed estimates a task's duration from the
    # past tasks with its name's prefix, and places and steals tasks by that estimate; an SpMV of a few ms
    # under the same prefix as an SpGEMM of a second made SpGEMM tasks look free to leave queued on one worker
    out = f"splyce-{name}-{token}"
    partial = f"splyce-{name}-block-{token}" if reduce else out
    layer = {}
    for k, n in enumerate(rows):
        args = [part_keys[i][k] if kind == "p" else bcast_keys[i] for kind, i in order]
        key = (partial, k) if reduce else (out, k) + (0,) * (len(out_chunks) - 1)
        layer[key] = (_call_block, fn, n, padded, prep, not reduce, *args)
    if reduce:
        layer[(out,) + (0,) * len(out_chunks)] = (_sum_blocks, [(partial, k) for k in range(len(rows))])
        out_chunks = tuple((s,) for s in out_chunks)
    return _as_array(out, layer, [*parts, *broadcast], out_chunks, meta)


# -- matmul -------------------------------------------------------------------------------------------------
def matmul(a, b, *, out_format=None, threads=1):
    """``a @ b`` as a lazy Dask array: row blocks of ``a`` times the whole ``b``.

    ``splyce.matmul`` calls it when an operand is a Dask array.

    Parameters
    ----------
    a : dask.array.Array or scipy.sparse array or matrix
        2-D; its rows are partitioned (``from_scipy``).
    b : array_like or scipy.sparse array or matrix or dask.array.Array
        1-D (a NumPy vector) or 2-D; broadcast to every task as one Dask key, or read from its row blocks
        (joined once per worker) when it is a Dask array.
    out_format : {None, "dense", "sparse"} or Format, optional
        As the single-process drop-in's.
    threads : int or None, optional
        Threads per task.

    Returns
    -------
    dask.array.Array
        Row blocks of the product; ``.compute()`` returns what ``splyce.matmul`` returns on the whole
        operands, bit for bit.

    Raises
    ------
    ValueError
        A left operand that is not 2-D, or shapes that do not align.
    NotImplementedError
        A sparse 1-D right operand (pass the vector as a NumPy array).

    Examples
    --------
    See ``from_scipy``.
    """
    sa, sb = np.shape(a), np.shape(b)
    if len(sa) != 2 or not 1 <= len(sb) <= 2:
        raise ValueError(f"matmul on Dask operands needs a 2-D left operand (its rows are partitioned) and a "
                         f"1-D or 2-D right operand, got shapes {sa} and {sb}")
    if sa[1] != sb[0]:
        raise ValueError(f"matmul: shapes {sa} and {sb} are not aligned ({sa[1]} != {sb[0]})")
    ma, mb = _meta(a), _meta(b)
    fa, fb = operand_family(ma), operand_family(mb)
    if len(sb) == 1 and fb != "numpy":
        raise NotImplementedError("matmul on Dask operands: a sparse 1-D right operand would give 1-D sparse "
                                  "blocks, which Dask cannot concatenate; pass the vector as a NumPy array")
    A, B = row_blocks(a), whole(b)
    want_sparse = out_format == "sparse" or isinstance(out_format, Format) or (
        out_format is None and fa != "numpy" and fb != "numpy" and len(sb) == 2)
    dtype = np.result_type(ma.dtype, mb.dtype)
    meta = _result_meta(sparse_family(ma, mb), want_sparse, len(sb), dtype)
    chunks = (A.chunks[0],) + tuple((s,) for s in sb[1:])
    fn = functools.partial(dropin.matmul, out_format=out_format, threads=threads)
    kind = "spmv" if len(sb) == 1 else "spgemm" if fb != "numpy" else "spmm"
    ia, ib = OperandInfo(fa, sa, ma.dtype), OperandInfo(fb, sb, mb.dtype)
    converted = {1: (CSR, "b")} if _converts_b_to_csr(ia, ib, out_format) else {}
    return _partitioned_graph(fn, [A], [B], [("p", 0), ("b", 0)], chunks, meta, False, "matmul-" + kind,
                              converted)


# the formulations in which the drop-in matmul reads a sparse 2-D ``b`` as ``convert(b, CSR, "b")``
_B_AS_CSR = (Formulation.GUSTAVSON_SPARSE, Formulation.GUSTAVSON_DENSE, Formulation.SPARSIFIER)


def _converts_b_to_csr(ia: OperandInfo, ib: OperandInfo, out_format) -> bool:
    """Whether each block's drop-in ``matmul`` converts (and checks) the whole broadcast ``b`` to CSR, and
    does the same given that CSR as a SparseTensor: same formulation, same result family."""
    if not (ib.sparse and len(ib.shape) == 2):
        return False
    formulation = choose_matmul_formulation(ia, ib, out_format)
    trusted = OperandInfo("splyce", ib.shape, ib.dtype)
    return (formulation in _B_AS_CSR and choose_matmul_formulation(ia, trusted, out_format) is formulation
            and _same_family([ia.family, ib.family], 1))


def _same_family(families: list[str], n: int) -> bool:
    """Whether the operands' result family (``_sparse_family``) stays the same with operand ``n`` a
    SparseTensor."""
    def family(fs):
        fs = [f for f in fs if f != "numpy"]
        return "scipy-array" if "scipy-array" in fs else fs[0] if fs else "numpy"
    return family(families) == family(families[:n] + ["splyce"] + families[n + 1:])


# -- multiply, add, subtract ------------------------------------------------------------------------------
def _elementwise(name: str, a, b, out_format, threads):
    sa, sb = np.shape(a), np.shape(b)
    if sa != sb:
        raise ValueError(f"{name}: shapes {sa} and {sb} differ (broadcasting is not supported)")
    if len(sa) != 2:
        raise NotImplementedError(f"{name} on Dask operands needs 2-D operands (row blocks), got shape {sa}")
    first = a if is_dask(a) else b
    A = row_blocks(first, name="a" if first is a else "b")
    other = row_blocks(b if first is a else a, A.chunks[0], name="b" if first is a else "a")
    A, B = (A, other) if first is a else (other, A)
    ma, mb = _meta(a), _meta(b)
    fa, fb = operand_family(ma), operand_family(mb)
    sparse = not (fa == fb == "numpy") and out_format != "dense"
    family = sparse_family(ma, mb)
    coo = "numpy" in (fa, fb) and family.startswith("scipy")
    meta = _result_meta(family, sparse, 2, np.result_type(ma.dtype, mb.dtype), coo=coo)
    fn = functools.partial(getattr(dropin, name), out_format=out_format, threads=threads)
    return _partitioned_graph(fn, [A, B], [], [("p", 0), ("p", 1)], (A.chunks[0], (sa[1],)), meta, False, name)


def multiply(a, b, *, out_format=None, threads=1):
    """``splyce.multiply`` of 2-D operands, one task per row block of ``a``.

    ``b`` is rechunked to ``a``'s row blocks. Parameters and results as ``matmul``'s; ``.compute()`` returns
    what the single-process drop-in returns.
    """
    return _elementwise("multiply", a, b, out_format, threads)


def add(a, b, *, out_format=None, threads=1):
    """``splyce.add`` of 2-D operands, one task per row block of ``a``; as ``multiply``."""
    return _elementwise("add", a, b, out_format, threads)


def subtract(a, b, *, out_format=None, threads=1):
    """``splyce.subtract`` of 2-D operands, one task per row block of ``a``; as ``multiply``."""
    return _elementwise("subtract", a, b, out_format, threads)


# -- einsum -----------------------------------------------------------------------------------------------
def einsum(subscripts, *operands, out_format=None, threads=1):
    """``splyce.einsum`` with row-partitioned operands.

    The operands whose first index is the first operand's first index are split into row blocks; the others
    are broadcast. A sum over the partitioned index adds one partial result per block (exact for integers,
    booleans and 0/1-valued floats).

    Parameters
    ----------
    subscripts : str
        NumPy's subscripts.
    *operands : dask.array.Array or array_like or scipy.sparse array
        At least one Dask array.
    out_format : {None, "dense", "sparse"} or Format, optional
        As the single-process drop-in's.
    threads : int or None, optional
        Threads per task.

    Returns
    -------
    dask.array.Array
        The lazy result; ``.compute()`` returns what ``splyce.einsum`` returns on the whole operands.

    Raises
    ------
    ValueError
        Sizes that disagree for one index, or no operand with an index to partition.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce, splyce.dask
    >>> A = sps.random_array((500, 500), density=0.02, format="csr", rng=0)
    >>> L = sps.csr_array(sps.tril(A != 0, -1), dtype=np.float64)
    >>> t = splyce.einsum("ij,ik,kj->", splyce.dask.from_scipy(L, blocks=2), splyce.dask.from_scipy(L, blocks=2), L)
    >>> float(t.compute()) == float(splyce.einsum("ij,ik,kj->", L, L, L))
    True
    """
    from splyce.tracer.tracer import parse_einsum

    inputs, output = parse_einsum(subscripts, len(operands))
    _check_sizes(inputs, operands)
    letters = "".join(inputs)
    if not letters:
        raise ValueError("einsum on Dask operands needs an operand with an index to partition")
    p = letters[0]
    order, parts, broadcast, wholes, rows = [], [], [], [], None
    for n, (x, subs) in enumerate(zip(operands, inputs)):
        if p in subs[1:]:
            raise NotImplementedError(f"einsum on Dask operands partitions index {p!r}, the first index of "
                                      f"the first operand; operand {n} ({subs!r}) has it in another position")
        if subs[:1] == p and (is_dask(x) and rows is None):
            rows = row_blocks(x).chunks[0]
    for n, (x, subs) in enumerate(zip(operands, inputs)):
        if subs[:1] == p:
            block = row_blocks(x, rows, name=f"operand {n}")
            rows = block.chunks[0]
            order.append(("p", len(parts)))
            parts.append(block)
        else:
            order.append(("b", len(broadcast)))
            # one key for an operand passed twice (a concrete one gets a fresh key name per whole())
            same = [w for y, w in wholes if y is x]
            broadcast.append(same[0] if same else whole(x))
            wholes.append((x, broadcast[-1]))
    if p in output[1:]:
        raise NotImplementedError(f"einsum on Dask operands: the result must start with the partitioned index "
                                  f"{p!r} or sum over it, got output {output!r}")
    metas = [_meta(x) for x in operands]
    sizes = {c: s for x, subs in zip(operands, inputs) for c, s in zip(subs, np.shape(x))}
    families = [operand_family(m) for m in metas]
    elementwise = len(operands) >= 2 and all(s == output for s in inputs)
    sparse = out_format == "sparse" or isinstance(out_format, Format) or (
        out_format is None and elementwise and any(f != "numpy" for f in families))
    family = sparse_family(*metas)
    dtype = np.result_type(*[m.dtype for m in metas])
    meta = _result_meta(family, sparse, len(output), dtype)
    if family == "pydata" and output and not sparse:
        meta = _pydata_empty(len(output), dtype)     # NumPy's einsum on pydata operands returns theirs
    reduce = p not in output
    chunks = tuple(sizes[c] for c in output) if reduce else (rows,) + tuple((sizes[c],) for c in output[1:])
    fn = functools.partial(dropin.einsum, subscripts, out_format=out_format, threads=threads)
    kind = "".join(c for c in subscripts if c.isalpha()) or "scalar"
    converted = _einsum_conversions(inputs, output, operands, out_format)
    return _partitioned_graph(fn, parts, broadcast, order, chunks, meta, reduce, "einsum-" + kind,
                              {n: f for n, f in converted.items() if order[n][0] == "b"})


def _check_sizes(inputs: list[str], operands) -> None:
    """Every index of one size across the operands, checked on the client with the operands' whole shapes, as
    the single-process einsum does: each task sees only its rows, and cutting a longer operand into the first
    one's row blocks would drop its last rows without an error. Unknown (NaN) Dask sizes are not checked."""
    from splyce.tracer.tracer import TraceError

    sizes: dict = {}
    for n, (x, subs) in enumerate(zip(operands, inputs)):
        shape = tuple(np.shape(x))
        if len(shape) != len(subs):
            raise TraceError(f"einsum: operand {n} has shape {shape} but subscripts {subs!r}")
        for letter, size in zip(subs, shape):
            if size != size:            # NaN: a Dask array of unknown chunk sizes
                continue
            if sizes.setdefault(letter, size) != size:
                shapes = ", ".join(str(tuple(np.shape(y))) for y in operands)
                raise TraceError(f"einsum: size mismatch for index {letter!r} ({sizes[letter]} vs {size}) "
                                 f"with operand shapes {shapes}")


def _einsum_conversions(inputs: list[str], output: str, operands, out_format) -> dict[int, tuple]:
    """Operand position -> (Format, the operand's name) for each sparse operand that the drop-in ``einsum``
    converts (and checks) at every call (``convert(x, rowwise_format(subs, loops))``) and that it computes
    the same way given that conversion as a SparseTensor (same formulation, same result family). For a
    broadcast operand that was the whole matrix checked once per block, and transposed once per block when
    stored by columns (``kj`` in ``"ij,ik,kj->"``: 1.5-2.8x a block's own time on the corpus's triangle
    counts)."""
    metas = [_meta(x) for x in operands]
    families = [operand_family(m) for m in metas]
    if all(f == "numpy" for f in families):
        return {}
    infos = [OperandInfo(f, tuple(np.shape(x)), m.dtype) for x, m, f in zip(operands, metas, families)]
    formulation = choose_einsum_formulation(inputs, output, infos, out_format)[0]
    if formulation is not Formulation.COITERATE:
        return {}
    loops = list(dict.fromkeys("".join(inputs)))
    out = {}
    for n, (subs, info) in enumerate(zip(inputs, infos)):
        if not info.sparse:
            continue
        trusted = infos[:n] + [OperandInfo("splyce", info.shape, info.dtype)] + infos[n + 1:]
        if choose_einsum_formulation(inputs, output, trusted, out_format)[0] is formulation \
                and _same_family(families, n):
            out[n] = (rowwise_format(subs, loops), f"operand {n}")
    return out


# Per process caches of what every task on a worker would otherwise redo for a broadcast operand: key ->
# (weak references to the objects it was made from, the value). A worker keeps a broadcast operand (or its
# row blocks) as one object for every task that reads it, and across computations while it is kept (e.g.
# splyce.dask.broadcast), so the value is made once per worker, not once per block; entries go when those
# objects do. Like the drop-in's own conversion, this assumes they are not modified in place while read
# (Dask's data is immutable by convention).
_converted_of: dict = {}
_joined_of: dict = {}
_cache_lock = threading.Lock()


def _once(cache: dict, key, sources: list, make):
    """``make()``, made once per process for as long as every object of ``sources`` lives."""
    def hit():
        got = cache.get(key)
        return got[1] if got is not None and all(r() is x for r, x in zip(got[0], sources)) else None

    with _cache_lock:
        value = hit()
    if value is not None:
        return value
    value = make()                                      # outside the lock: O(size)
    try:
        refs = [weakref.ref(x) for x in sources]
    except TypeError:
        return value
    with _cache_lock:
        earlier = hit()
        if earlier is not None:
            return earlier
        cache[key] = (refs, value)
        for x in sources:
            weakref.finalize(x, cache.pop, key, None)
    return value


def _converted_once(x, fmt: Format, name: str = "operand"):
    """``dropin.as_format(x, fmt)``'s SparseTensor (the drop-in's own conversion and checks: the kernel
    sees the same buffers), made once per process for as long as ``x`` lives. The drop-ins take a
    SparseTensor as it is (it was checked when built)."""
    return _once(_converted_of, (id(x), fmt), [x], lambda: dropin.as_format(x, fmt, name).tensor)


def _joined_once(blocks: list):
    """The row blocks joined along the rows (Dask's own concatenation for their type), once per process while
    the blocks live."""
    from dask.array.dispatch import concatenate_lookup

    join = concatenate_lookup.dispatch(type(blocks[0]))
    return _once(_joined_of, tuple(id(b) for b in blocks), blocks, lambda: join(blocks, axis=0))
