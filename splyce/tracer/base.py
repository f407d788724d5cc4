"""The core of the tracer: the ``Tracer`` value, ``TraceError``, operands (traced values, and constants the
function reads from its enclosing scope: captures.py), and ``contract``, the one constructor of contraction
nodes, with the format rules of results.

The operations on tracers are in tracer.py (the NumPy / scipy rules, sparse or dense), dense_ops.py (NumPy's
elementwise functions on dense values) and indexing.py (views of dense values); tracer.py installs them as
the ``Tracer``'s operators, so these modules build tracers without importing each other in a cycle.
"""

from __future__ import annotations

import numbers
import string
import weakref

import numpy as np

from splyce.errors import TraceError  # re-exported: defined once in splyce.errors
from splyce.tensors.formats import Format, relabelled
from splyce.tracer import captures
from splyce.tracer.ir import ContractParams, Node, TensorType, result_dtype

MAX_OPERANDS = 4
MAX_RANK = 4

# What a user may pass as out_format: "dense", "sparse" (an automatic sparse format) or a Format.
OUT_FORMATS = ("dense", "sparse")


class _NoBuffer(TraceError, AttributeError):
    """A traced value's missing buffer attribute: a TraceError for the user, an AttributeError for ``getattr(t,
    "data", None)`` / ``hasattr`` (library code probing an operand)."""


class Tracer:
    """A tensor inside a jitted function: its trace node, with NumPy's attributes. The operators are
    installed by tracer.py (``@ * / + - ** < ...``, ``sum``, ``.T``, indexing, NumPy's protocols)."""

    __slots__ = ("node",)
    __array_priority__ = 1000  # so that ndarray * tracer defers to us

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.type.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self):
        return np.dtype(self.node.type.dtype)

    @property
    def format(self) -> Format | None:
        return self.node.type.format

    @property
    def is_sparse(self) -> bool:
        """Whether the value is stored sparse (its implicit zeros are not stored); else it is a dense array."""
        return self.node.type.is_sparse

    def __repr__(self) -> str:
        return f"Tracer({self.node.type})"

    def __bool__(self):
        raise TraceError("the truth value of a traced tensor is not known at trace time (`if t:`, `while t:`, "
                         "`a and b`, Python's min(a, b) / max(a, b), which compare with `<`): write "
                         "np.where(c, x, y) for a choice, np.minimum(a, b) / np.maximum(a, b) for the smaller / "
                         "larger value; a loop runs a fixed number of steps")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced tensor")
        return self.shape[0]

    def _buffer(name: str):
        """scipy's buffer attributes (``a.data``, ``a.indices``, ``a.indptr``): their sizes are the stored
        entries, which are not known at trace time; reading or assigning one raises with what to write."""
        alternatives = {"data": "a.multiply(...), abs(a), a.power(k) or (a != 0) to compute on the stored values",
                        "indices": "a reduction or a product (the pattern is the planner's)",
                        "indptr": "a.getnnz(axis=1) or (a != 0).sum(axis=1) for the entries of each row",
                        "row": "a reduction or a product over the pattern (a != 0)",
                        "col": "a reduction or a product over the pattern (a != 0)",
                        "coords": "a reduction or a product over the pattern (a != 0)"}

        def get(self):
            raise _NoBuffer(f"a traced value has no .{name} array inside @splyce.jit (its stored entries are not "
                             f"known at trace time); write {alternatives[name]}")

        def set_(self, value):
            raise TraceError(f"assigning .{name} of a traced value is not supported inside @splyce.jit (traced "
                             f"values are immutable, as in JAX); write {alternatives[name]}")
        return property(get, set_)

    data = _buffer("data")
    indices = _buffer("indices")
    indptr = _buffer("indptr")
    row = _buffer("row")
    col = _buffer("col")
    coords = _buffer("coords")
    del _buffer

    def nonzero(self):
        raise TraceError("a.nonzero() of a traced value is not supported inside @splyce.jit: the number of "
                         "entries it returns depends on the values (JAX asks for a static size= too); compute "
                         "over the pattern instead, e.g. (a != 0).multiply(np.outer(u, v)).sum() for a sum of "
                         "u[rows] * v[cols] over the stored entries, or call a.nonzero() outside the jitted "
                         "function and pass rows and cols as arguments")

    def __iter__(self):
        raise TraceError("iterating over a traced tensor is not supported (its length is known, but each "
                         "element would be a separate kernel); index it with slices or use a reduction")


def is_array(x) -> bool:
    """Whether ``x`` is a concrete array a traced function may read as a constant (NumPy, scipy.sparse,
    pydata-sparse or a SparseTensor)."""
    if isinstance(x, np.ndarray):
        return True
    module = type(x).__module__.split(".")[0]
    return module in ("scipy", "sparse", "splyce") and hasattr(x, "shape") and hasattr(x, "dtype") \
        and not isinstance(x, Tracer)


def scalar_value(x):
    """``x`` as a Python number when it is one (NumPy scalars and 0-d arrays included), else None."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, (bool, numbers.Number)) and not isinstance(x, Tracer):
        return x
    return None


def _node(x, op: str) -> Node:
    """The trace node of an operand: a tracer's, or that of a constant array read from the enclosing scope
    (a hidden argument of the kernel, captures.py)."""
    if isinstance(x, Tracer):
        return x.node
    if isinstance(x, (list, tuple)) and x and all(isinstance(v, numbers.Number) for v in x):
        x = np.asarray(x)   # a literal vector, as NumPy converts it: a frozen constant
    if is_array(x) and not (isinstance(x, np.ndarray) and x.ndim == 0):
        node = captures.constant_node(x)
        if node is not None:
            return node
    raise TraceError(f"{op}: operands must be traced tensors (the jitted function's arguments), "
                     f"got {type(x).__name__}")



# Square diagonal matrices built from a traced vector (``sp.diags(d)``: tracer/namespaces.py), node -> the
# vector's node: a product with one is the row / column scaling it stands for (tracer.matmul).
_DIAGONALS: "weakref.WeakKeyDictionary[Node, Node]" = weakref.WeakKeyDictionary()


def mark_diagonal(node: Node, vector: Node) -> None:
    _DIAGONALS[node] = vector


def diagonal_vector(node: Node) -> Node | None:
    """The vector ``d`` when ``node`` is the square diagonal matrix ``diags(d)``, else None."""
    return _DIAGONALS.get(node)


def check_out_format(out_format, ndim: int):
    if out_format is None or isinstance(out_format, Format):
        if isinstance(out_format, Format) and out_format.ndim != ndim:
            raise TraceError(f"out_format {out_format} has {out_format.ndim} levels, the result has rank {ndim}")
        return out_format
    if out_format in OUT_FORMATS:
        return out_format
    raise TraceError(f"out_format must be 'dense', 'sparse', a splyce.Format or None, got {out_format!r}")


def default_sparse_format(like: Format, ndim: int) -> Format:
    """The sparse format of a result that mirrors a sparse operand: same level kinds and order, unique and
    ordered (the sparsifier inserts in order), same index widths."""
    from splyce.tensors.formats import Level

    levels = tuple(Level("dense") if lv.kind == "dense" else Level("compressed") for lv in like.levels)
    return Format(levels, like.order, like.pos_width, like.crd_width)


def resolve_format(out_format, sparse_default: bool, sparse_like: list[Format], ndim: int):
    """The result format: an explicit request wins; otherwise sparse only where the op's default says so."""
    if isinstance(out_format, Format):
        return None if out_format.is_dense else out_format
    want_sparse = out_format == "sparse" or (out_format is None and sparse_default)
    if not want_sparse or ndim == 0:
        return None
    same_rank = [f for f in sparse_like if f.ndim == ndim]
    if same_rank:
        return default_sparse_format(same_rank[0], ndim)
    from splyce.tensors.formats import csf

    base = csf(ndim) if ndim > 1 else Format(("compressed",))
    return base


def contract(nodes: list[Node], inputs: list[str], output: str, *, scale=None, out_format=None,
             op: str = "einsum", order: str | None = None, dtype: str | None = None,
             scaling: bool = False) -> Tracer:
    """The one constructor for contraction nodes: checks subscripts against shapes and infers the type.
    ``scaling``: a product of a sparse operand with dense ones broadcast along some of its axes (row / column
    scaling ``a * d[:, None]``): sparse, in the sparse operand's pattern, as scipy's ``multiply``."""
    if not 1 <= len(nodes) <= MAX_OPERANDS:
        raise TraceError(f"{op}: between 1 and {MAX_OPERANDS} operands are supported, got {len(nodes)}")
    # an elementwise product, or a scaled copy, of sparse operands as written gives a sparse result as in
    # scipy (``b.T * b`` of a CSR ``b`` is CSC there), also when a transpose folds into the subscripts below
    elementwise = all(subs == output for subs in inputs) and (len(nodes) >= 2 or scale is not None)
    elementwise = elementwise or scaling
    sparse_like = [n.type.format for n in nodes if n.type.is_sparse]
    if len(nodes) > 1 or scale is not None or inputs[0] != output:
        # a sparse transpose stays an operand of an elementwise op: the planner reads a transposed input in
        # place and fuses the op with its elementwise neighbours, which permuted subscripts would prevent
        nodes, inputs = zip(*[_fold_transpose(n, s, relabels=not elementwise) for n, s in zip(nodes, inputs)])
    sizes: dict[str, int] = {}
    for n, (node, subs) in enumerate(zip(nodes, inputs)):
        if len(subs) != node.type.ndim:
            raise TraceError(f"{op}: operand {n} has shape {node.type.shape} but subscripts {subs!r}")
        if len(set(subs)) != len(subs):
            raise TraceError(f"{op}: repeated index in {subs!r} (diagonals) is not supported inside @splyce.jit "
                             "(the drop-in splyce.einsum on concrete operands takes the diagonal)")
        if node.type.ndim > MAX_RANK:
            raise TraceError(f"{op}: tensors of rank up to {MAX_RANK} are supported, got {node.type.ndim}")
        for letter, size in zip(subs, node.type.shape):
            if sizes.setdefault(letter, size) != size:
                shapes = ", ".join(str(x.type.shape) for x in nodes)
                raise TraceError(f"{op}: size mismatch for index {letter!r} ({sizes[letter]} vs {size}) "
                                 f"with operand shapes {shapes}")
    if len(set(output)) != len(output) or not set(output) <= set(sizes):
        raise TraceError(f"{op}: output subscripts {output!r} must be distinct indices of the inputs")
    if len(output) > MAX_RANK:
        raise TraceError(f"{op}: results of rank up to {MAX_RANK} are supported")
    out_format = check_out_format(out_format, len(output))
    fmt = resolve_format(out_format, elementwise and bool(sparse_like), sparse_like, len(output))
    dtype = dtype or result_dtype(*[n.type.dtype for n in nodes])
    if scale is not None:   # NumPy 2 (NEP 50): a Python scalar is weak (it turns ints into floats, bools
        _scalar_dtype(scale)   # into ints, reals into complex), never widens float32 / complex64
        dtype = np.result_type(np.dtype(dtype), scale).name
    shape = tuple(sizes[c] for c in output)
    if order is not None and (not isinstance(order, str) or sorted(order) != sorted(sizes)):
        raise TraceError(f"{op}: order must list each index of {','.join(inputs)}->{output} once "
                         f"(outermost loop first), got {order!r}")
    # a sparse format not given as a Format ("sparse", or the op's sparse default) is the planner's to refine
    params = ContractParams(tuple(inputs), output, scale, order,
                            format_left=fmt is not None and not isinstance(out_format, Format))
    return Tracer(Node("contract", tuple(nodes), (params,), TensorType(shape, dtype, fmt)))


def _fold_transpose(node: Node, subs: str, relabels: bool = True) -> tuple[Node, str]:
    """Read a transposed operand through its source with permuted subscripts (``x @ y.T`` becomes
    ``einsum("ik,jk->ij", x, y)``), so the sparse source keeps its format instead of going through a
    dense transposed copy. ``relabels``: sparse transposes (relabel_axes) fold too."""
    while node.op == "contract" and len(node.args) == 1 and (
            not node.type.is_sparse or (relabels and relabel_axes(node))):
        params: ContractParams = node.params[0]
        (source,) = params.inputs
        if params.scale is not None or sorted(source) != sorted(params.output):
            break
        subs = "".join(subs[params.output.index(c)] for c in source)
        node = node.args[0]
    return node, subs


def _scalar_dtype(x) -> str:
    if isinstance(x, bool) or not isinstance(x, numbers.Number):
        raise TraceError(f"scalar factors must be numbers, got {type(x).__name__}")
    if isinstance(x, numbers.Integral):
        return "int64"
    return "float64" if isinstance(x, numbers.Real) else "complex128"


def refuse_dtype(op: str, dtype: str, why: str) -> None:
    """The one error for an op NumPy does not define (or splyce does not support) on a value dtype."""
    raise TypeError(f"{op}: not supported for {dtype} values ({why})")


def _letters(n: int, skip: str = "") -> str:
    return "".join(c for c in string.ascii_lowercase if c not in skip)[:n]


def _axes(axis, ndim: int, op: str) -> set[int]:
    """NumPy's ``axis`` argument (None, an int or a tuple; negative counts from the end) as a set."""
    axes = range(ndim) if axis is None else (axis if isinstance(axis, (tuple, list)) else (axis,))
    norm = set()
    for ax in axes:
        if isinstance(ax, bool) or not isinstance(ax, numbers.Integral) or not -ndim <= ax < ndim:
            raise TraceError(f"{op}: axis {ax!r} is out of range for a tensor of rank {ndim}")
        if int(ax) % ndim in norm:
            raise TraceError(f"{op}: axis {ax!r} is repeated")
        norm.add(int(ax) % ndim)
    return norm



def check_reducible(dtype: str, op: str) -> None:
    """max / min need an order: complex values have none here."""
    if dtype.startswith("complex"):
        refuse_dtype(op, dtype, "complex numbers are not ordered; compare abs(x) instead")



def copy_of(node: Node, op: str = "return") -> Node:
    """A copy of ``node`` in its own format (a result never aliases an argument: the caller may write to
    either, as JAX returns a new array)."""
    subs = _letters(node.type.ndim)
    fmt = node.type.format if node.type.is_sparse else "dense"
    return contract([node], [subs], subs, out_format=fmt, op=op).node


def relabel_axes(node: Node) -> tuple[int, ...] | None:
    """The axes of ``node`` when it is a transpose of a sparse value stored in that value's buffers
    relabelled (``relabelled(format, axes)``: no entry moves), else None."""
    if node.op != "contract" or len(node.args) != 1 or not node.type.is_sparse:
        return None
    params: ContractParams = node.params[0]
    (source,) = params.inputs
    (arg,) = node.args
    if params.scale is not None or not arg.type.is_sparse or sorted(source) != sorted(params.output):
        return None
    if node.type.dtype != arg.type.dtype:
        return None
    axes = tuple(source.index(c) for c in params.output)
    return axes if node.type.format == relabelled(arg.type.format, axes) else None


def parse_einsum(subscripts: str, nops: int) -> tuple[list[str], str]:
    """NumPy's einsum notation without ellipses: explicit (``"ik,kj->ij"``) or implicit (``"ik,kj"``)."""
    if not isinstance(subscripts, str):
        raise TraceError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    text = subscripts.replace(" ", "")
    if "." in text:
        raise TraceError("einsum: ellipses ('...') are not supported")
    lhs, arrow, rhs = text.partition("->")
    inputs = lhs.split(",")
    if any(not s.isalpha() and s != "" for s in inputs) or (arrow and rhs and not rhs.isalpha()):
        raise TraceError(f"einsum: invalid subscripts {subscripts!r} (use letters a-z)")
    if len(inputs) != nops:
        raise TraceError(f"einsum: {len(inputs)} subscript groups for {nops} operands in {subscripts!r}")
    if not arrow:
        counts = {c: "".join(inputs).count(c) for c in set("".join(inputs))}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(rhs)) != len(rhs) or not set(rhs) <= set("".join(inputs)):
        raise TraceError(f"einsum: output subscripts {rhs!r} must be distinct indices of the inputs")
    return inputs, rhs

