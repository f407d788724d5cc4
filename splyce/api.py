"""The public operations. Inside ``@splyce.jit`` they record trace nodes; called on concrete operands
(NumPy, scipy.sparse, pydata-sparse, SparseTensor) they are drop-ins for the scipy / NumPy product of the
same name: they choose formats and a loop order, compile once per signature, and return what scipy would.
On Dask operands they return lazy Dask arrays, one task per row block (``splyce.dask``).
"""

from __future__ import annotations

import operator
import sys

import numpy as np

from splyce.tensors.tensor import SparseTensor
from splyce.tracer import tracer as T
from splyce.tracer import matrix
from splyce.tracer.matrix import MatrixTracer
from splyce.tracer.tracer import Tracer

# Drop-ins on operands of at least this many stored values run with NumPy allocating from splyce's cache of
# freed large buffers (native/memory_pool.py: a result is fresh memory on every call otherwise); below it
# a result is under the cache's 1 MiB minimum anyway, and the call saves the handler switch (~2 us).
POOL_OPERAND = 1 << 16
POOL_MIN = 1 << 20          # native/memory_pool.POOL_MIN: the smallest block the cache keeps (a test checks)


_pool_module = None


def _memory_pool():
    """native/memory_pool, imported on the first drop-in call (not by ``import splyce``; a malformed
    SPLYCE_POOL_BYTES is reported there)."""
    global _pool_module
    if _pool_module is None:
        from splyce.native import memory_pool

        _pool_module = memory_pool
    return _pool_module


def _pool_for(*xs):
    """memory_pool.install() when an operand is large (the token to restore), else None."""
    pool = _pool_module or _memory_pool()
    for x in xs:
        d = x if type(x) is np.ndarray else getattr(x, "values" if type(x) is SparseTensor else "data", None)
        if type(d) is np.ndarray and d.size >= POOL_OPERAND:
            return pool.install()
    return None


def _pool_for_dense_product(a, b: np.ndarray):
    """As _pool_for for ``a @ b`` with a dense ``b`` (SpMV / SpMM): by the result's size, the call's only
    large allocation (an SpMV of 0.2 ms on 200k entries with a 64 KB result would pay the switch for nothing)."""
    pool = _pool_module or _memory_pool()
    shape = getattr(a, "shape", None)
    if type(shape) is tuple and len(shape) == 2 and b.ndim in (1, 2):
        if shape[0] * (b.shape[1] if b.ndim == 2 else 1) * b.itemsize >= POOL_MIN:
            return pool.install()
        return None
    return _pool_for(a, b)


def _any_dask(*xs) -> bool:
    """Whether an operand is a Dask array (then the op builds a lazy graph: splyce.dask, imported only then)."""
    dask_array = sys.modules.get("dask.array")
    return dask_array is not None and any(isinstance(x, dask_array.Array) for x in xs)


_dropin_module = None


def _dropin():
    """splyce.dropin, imported on first use (a drop-in call is microseconds: no import per call)."""
    global _dropin_module
    if _dropin_module is None:
        from splyce import dropin

        _dropin_module = dropin
    return _dropin_module


def _binary(name: str, doc: str):
    """``name(a, b, *, out_format=None)``: the tracer op on traced operands, else the drop-in."""
    traced_op = getattr(T, name)
    fast = name == "matmul"      # SpMV / SpMM on a scipy CSR: tens of microseconds, so no layer in between
    merge = name != "matmul"     # the same for two scipy CSR / CSC matrices on one thread (A * A.T, A + A.T)

    def op(a, b, *, out_format=None, threads=None):
        token = _pool_for_dense_product(a, b) if fast and type(b) is np.ndarray else _pool_for(a, b)
        try:
            return _op(a, b, out_format, threads)
        finally:
            if token is not None:
                _pool_module.restore(token)

    def _op(a, b, out_format, threads):
        if fast and type(b) is np.ndarray and out_format is None:
            out = (_dropin_module or _dropin()).fast_spmv(a, b, threads)
            if out is not None:
                return out
        elif merge and out_format is None and (threads is None or type(threads) is int and threads >= 1):
            # the default (None) resolved inside: one thread for a merge too small to split, else the
            # process default (splyce.set_threads, SPLYCE_NUM_THREADS, the idle cores)
            out = (_dropin_module or _dropin()).fast_merge(name, a, b, threads)
            if out is not None:
                return out
        if isinstance(a, Tracer) or isinstance(b, Tracer):
            if out_format is None and (isinstance(a, MatrixTracer) or isinstance(b, MatrixTracer)):
                return matrix.dropin(name, a, b)   # an spmatrix / np.matrix operand: scipy's result class
            return traced_op(a, b, out_format=out_format)
        if _any_dask(a, b):
            from splyce.dask import ops

            # Dask: each task on one thread unless asked (the workers are the parallelism)
            return getattr(ops, name)(a, b, out_format=out_format, threads=1 if threads is None else threads)
        return getattr(_dropin(), name)(a, b, out_format=out_format, threads=threads)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc.replace("{parameters}", _BINARY_PARAMETERS)
    return op


# The parameters the four binary operations share, written once into each docstring.
_BINARY_PARAMETERS = """Parameters
----------
a, b : array_like or SparseTensor or dask.array.Array
    NumPy arrays, scipy.sparse arrays or matrices (any format), pydata-sparse ``COO`` / ``GCXS``,
    ``SparseTensor``; inside ``@splyce.jit``, the traced arguments. Dask arrays give a lazy Dask result
    (``splyce.dask``).
out_format : {None, "dense", "sparse"} or Format, optional
    The result's storage. None: what scipy / NumPy return for these operands.
threads : int or None, optional
    Worker threads of a drop-in call. None (default): the process default, every core unless
    ``splyce.set_threads`` / ``splyce.use_threads`` / ``SPLYCE_NUM_THREADS`` say otherwise; a call too small
    to gain from a second thread runs on one. ``1``: one thread, as scipy. Results are bit-identical for
    any count. Ignored inside ``@splyce.jit``, where ``jit(threads=)`` decides; Dask operands run each task
    on one thread unless a count is given.
"""


matmul = _binary("matmul", """``a @ b``, as scipy / NumPy compute it.

On concrete operands, a drop-in for scipy's product: SpMV and SpMM (each row summed in stored order,
bit-identical to scipy's CSR product), sparse @ sparse in O(flops) with a sparse result (Gustavson), a CSR
matrix times a sparse vector. Inside ``@splyce.jit``, a contraction node the planner may fuse with what
reads it.

{parameters}
Returns
-------
ndarray or scipy.sparse array or matrix or SparseTensor or dask.array.Array
    What scipy returns for the same operands (type family, format, shape, dtype): a dense result for a
    dense operand, a CSR (CSC for a CSC left operand) for sparse @ sparse.

Raises
------
ValueError
    Shapes that do not align, or a malformed sparse operand (the message names the operand, level and
    position).
TypeError
    An operand splyce cannot read, or a dtype with no such operation.

Examples
--------
>>> import numpy as np, scipy.sparse as sps, splyce
>>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
>>> splyce.matmul(A, np.array([1.0, 1.0]))
array([1., 5.])
>>> type(splyce.matmul(A, A)).__name__
'csr_array'
""")
def _elementwise_doc(summary: str, returns: str, cannot_read: str, name: str, example: str) -> str:
    """The docstring of ``multiply`` / ``add`` / ``subtract``: one layout, their differences filled in."""
    return f"""{summary}

{{parameters}}
Returns
-------
scipy.sparse array or matrix or ndarray or SparseTensor or dask.array.Array
    What scipy's ``{returns}`` returns for the same operands.

Raises
------
ValueError
    Shapes that do not broadcast, or a malformed sparse operand.
TypeError
    An operand splyce cannot read{cannot_read}.

Examples
--------
>>> import numpy as np, scipy.sparse as sps, splyce
>>> A = sps.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
>>> splyce.{name}(A, A.T).toarray()
{example}
"""


multiply = _binary("multiply", _elementwise_doc(
    """Elementwise product (Hadamard), as scipy's ``a.multiply(b)``.

Two sparse operands intersect: only positions stored in both are computed, and the result is sparse.
Scalars and row / column vectors broadcast by scipy's rules. A NaN or Inf without a partner gives scipy's
result (a NaN where scipy has one: see the guide's "NaN, Inf and dtypes").""",
    "multiply", "", "multiply", """array([[1., 0.],
       [0., 9.]])"""))
add = _binary("add", _elementwise_doc(
    """Elementwise sum, as scipy's ``a + b``.

Two sparse operands merge (a union of their positions) into a sparse result; a dense operand gives a
dense result, and ``0`` is accepted as scipy accepts it.""",
    "+", "", "add", """array([[2., 2.],
       [2., 6.]])"""))
subtract = _binary("subtract", _elementwise_doc(
    """Elementwise difference, as scipy's ``a - b``.

Two sparse operands merge (a union of their positions) into a sparse result; a dense operand gives a
dense result.""",
    "-", ", or bool operands but two scipy sparse matrices (NumPy's rules; scipy's sparse bool difference\n    is ``a != b``, and so is the drop-in's)", "subtract", """array([[ 0., -2.],
       [ 2.,  0.]])"""))


def einsum(subscripts, *operands, out_format=None, order=None, threads=None):
    """NumPy's ``einsum`` on sparse and dense operands (no ellipses; up to 4 operands of rank up to 4).

    On concrete operands, a drop-in: masked SpGEMM (``"ik,kj,ij->ij"``), SDDMM (``"ij,ik,jk->ij"``) and the
    triangle count (``"ij,jk,ik->"``) run on the mask's positions, never building a dense product. An index
    repeated in one operand (``"ii->i"``) takes the diagonal first, as NumPy. Inside ``@splyce.jit``, a
    contraction node the planner formulates (loop order, operand storage) by cost.

    Parameters
    ----------
    subscripts : str
        NumPy's subscripts, e.g. ``"ik,kj->ij"``; an explicit output (``->``) is optional.
    *operands : array_like or SparseTensor or dask.array.Array
        NumPy, scipy.sparse, pydata-sparse or ``SparseTensor`` operands (traced ones inside ``@splyce.jit``).
    out_format : {None, "dense", "sparse"} or Format, optional
        The result's storage. None: a dense result for contractions, a sparse one for a Hadamard product
        of sparse operands, as NumPy / scipy.
    order : str, optional
        Only inside ``@splyce.jit``: the loop order, e.g. ``"ijk"``; the contraction is then lowered as
        written (no fusion, operands used as stored).
    threads : int or None, optional
        Worker threads of a drop-in call. None (default): the process default (every core unless
        ``splyce.set_threads`` / ``SPLYCE_NUM_THREADS`` say otherwise), small calls on one thread; bit-identical
        to one thread (a float sum to a scalar is split only when its values make every order exact). An
        explicit count > 1 also splits a float sum to a scalar, whose per-thread partial sums are then added
        in chunk order (the result may differ from one thread's in the last bits).

    Returns
    -------
    ndarray or scalar or scipy.sparse array or SparseTensor or dask.array.Array
        NumPy's result for the same subscripts (sparse where the result is the pattern of a sparse operand).

    Raises
    ------
    ValueError
        Malformed subscripts, sizes that disagree for one index, or a malformed sparse operand.
    TypeError
        ``order=`` on concrete operands (the drop-in chooses its own formulation).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> L = sps.csr_array(np.tril(np.ones((4, 4)), -1))     # the lower triangle of K4
    >>> float(splyce.einsum("ij,jk,ik->", L, L, L))          # its triangles
    4.0
    """
    token = _pool_for(*operands)
    try:
        return _einsum(subscripts, operands, out_format, order, threads)
    finally:
        if token is not None:
            _pool_module.restore(token)


def _einsum(subscripts, operands, out_format, order, threads):
    if len(operands) == 3 and out_format is None and order is None and (threads is None or type(threads) is int):
        out = (_dropin_module or _dropin()).fast_masked_sum(subscripts, *operands, threads=threads)   # triangles
        if out is not None:
            return out
    if any(isinstance(x, Tracer) for x in operands):
        return T.einsum(subscripts, *operands, out_format=out_format, order=order)
    if order is not None:
        raise TypeError("einsum: order= pins a traced contraction's loop order inside @splyce.jit; the drop-in "
                        "on concrete operands chooses its own formulation")
    if _any_dask(*operands):
        from splyce.dask import ops

        return ops.einsum(subscripts, *operands, out_format=out_format, threads=1 if threads is None else threads)
    from splyce import dropin

    return dropin.einsum(subscripts, *operands, out_format=out_format, threads=threads)


def maximum(a, b, *, out_format=None):
    """Elementwise maximum of traced operands, as ``np.maximum`` (NaN propagates).

    A sparse pair gives a sparse union: implicit zeros take part, so ``maximum(a, b)`` of two sparse
    tensors holds ``max(a, 0)`` where only ``a`` has an entry. Only inside ``@splyce.jit``.

    Parameters
    ----------
    a, b : traced tensors
        The jitted function's arguments or values computed from them.
    out_format : {None, "dense", "sparse"} or Format, optional
        The result's storage (None: sparse for a sparse pair).

    Returns
    -------
    traced tensor
        The elementwise maximum.

    Raises
    ------
    TypeError
        Called on concrete operands (use ``np.maximum`` or scipy's ``a.maximum(b)``), or on complex values
        (complex numbers have no order).
    TraceError
        A form that is not zero at implicit zeros, such as ``maximum(a, 1)`` of a sparse ``a``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> f = splyce.jit(lambda a, b: splyce.maximum(a, b))
    >>> A = sps.csr_array(np.array([[1.0, -2.0], [0.0, 3.0]]))
    >>> f(A, A.T).toarray()
    array([[1., 0.],
           [0., 3.]])
    """
    return _traced_only("maximum", T.maximum, a, b, out_format)


def minimum(a, b, *, out_format=None):
    """Elementwise minimum of traced operands, as ``np.minimum`` (NaN propagates); see ``maximum``.

    Parameters
    ----------
    a, b : traced tensors
        The jitted function's arguments or values computed from them.
    out_format : {None, "dense", "sparse"} or Format, optional
        The result's storage (None: sparse for a sparse pair).

    Returns
    -------
    traced tensor
        The elementwise minimum.

    Raises
    ------
    TypeError
        Called on concrete operands (use ``np.minimum`` or scipy's ``a.minimum(b)``), or on complex values.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> f = splyce.jit(lambda a, b: splyce.minimum(a, b))
    >>> A = sps.csr_array(np.array([[1.0, -2.0], [0.0, 3.0]]))
    >>> f(A, A.T).toarray()
    array([[ 1., -2.],
           [-2.,  3.]])
    """
    return _traced_only("minimum", T.minimum, a, b, out_format)


def _traced_only(name, traced_op, a, b, out_format):
    if isinstance(a, Tracer) or isinstance(b, Tracer):
        return traced_op(a, b, out_format=out_format)
    raise TypeError(f"splyce.{name} works inside @splyce.jit; on concrete operands use scipy's "
                    f"a.{name}(b) or np.{name}")


# -- SparseTensor's NumPy operators ----------------------------------------------------------------------------
# Attached here, as JAX's array methods are (jax/_src/numpy/array_methods.py), so that the data type on the
# ground floor imports no operation: tensors/ stays below the tracer, the drop-ins and this module.

def _tensor_sum(self, axis=None):
    """NumPy's ``sum`` over ``axis`` (None: all; an int or a tuple of ints): a NumPy scalar or array."""
    if axis is None:
        return self.values.sum()       # scipy's A.sum(): NumPy's sum of the stored values, bit for bit
    letters = "abcdefgh"[:self.ndim]
    try:
        axes = [operator.index(a) for a in (axis if isinstance(axis, tuple) else (axis,))]
    except TypeError:
        raise TypeError(f"sum: axis must be None, an int or a tuple of ints, got {axis!r}") from None
    axes = {a + self.ndim if a < 0 else a for a in axes}
    if any(not 0 <= a < self.ndim for a in axes):
        raise np.exceptions.AxisError(f"sum: axis {axis} is out of bounds for a {self.ndim}-D tensor")
    kept = "".join(letter for d, letter in enumerate(letters) if d not in axes)
    return einsum(f"{letters}->{kept}", self)


def _tensor_operator(op, reflected: bool):
    """``self <op> other`` (reflected: ``other <op> self``) through the drop-in; a tracer operand defers to the
    tracer's own operator (inside a jitted function)."""
    def method(self, other):
        if isinstance(other, Tracer):
            return NotImplemented
        return op(other, self) if reflected else op(self, other)
    return method


def _tensor_neg(self):
    from splyce.dropin import broadcast

    return broadcast.negated(self)


def _tensor_truediv(self, other):
    """Division by a scalar (scipy's rule: the same positions, ``np.true_divide`` of the values)."""
    from splyce.dropin import broadcast

    if not broadcast.is_scalar(other):
        raise TypeError(f"SparseTensor / {type(other).__name__}: only division by a scalar is supported "
                        "(dividing by an array would divide by the tensor's implicit zeros)")
    return self.with_values(np.true_divide(self.values, other))


def _set_tensor_methods(cls) -> None:
    for name, op in (("matmul", matmul), ("mul", multiply), ("add", add), ("sub", subtract)):
        setattr(cls, f"__{name}__", _tensor_operator(op, False))
        setattr(cls, f"__r{name}__", _tensor_operator(op, True))
    cls.__neg__ = _tensor_neg
    cls.__truediv__ = _tensor_truediv
    cls.sum = _tensor_sum


_set_tensor_methods(SparseTensor)
