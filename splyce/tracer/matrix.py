"""scipy's ``spmatrix`` and NumPy's ``np.matrix`` inside ``@splyce.jit``: the matrix kind of a traced value.

scipy.sparse has two families whose operators differ. ``csr_array`` and the other ``sparray`` classes follow
NumPy arrays: ``*`` and ``**`` are elementwise, ``sum(axis=0)`` is 1-D. ``csr_matrix`` and the other
``spmatrix`` classes follow ``np.matrix``: ``*`` is the matrix product, ``**`` the matrix power, ``sum(axis=k)``
is an ``np.matrix`` of shape (1, n) / (m, 1), and a dense result of a sparse matrix and a dense array (``S + X``,
``S.todense()``) is an ``np.matrix``. A traced value of the matrix kind is a ``MatrixTracer``: the same trace
nodes as a ``Tracer``, with those operators. The dispatcher makes an argument or a named constant of those
classes a ``MatrixTracer`` (``lift`` does it for a constant met while tracing), and returns a result of the
matrix kind as scipy and NumPy do (a ``csr_matrix``, an ``np.matrix``): ``kind_of`` tells which.

Which kind a result has follows the operand whose method Python runs, as in scipy and NumPy:

- a sparse matrix with an ``sparray`` (a sparse ``Tracer``): the left operand's rules and kind (``Aa * A`` is
  elementwise and a ``csr_array``, ``A * Aa`` the product and a ``csr_matrix``);
- a sparse matrix times (``*``, ``@``, ``dot``) a dense array: a dense array (``A * x`` is 1-D, as scipy's);
- anything else with a matrix operand: the matrix kind; a dense ``np.matrix`` stays 2-D (a 1-D result is a
  row, as ``np.matrix`` makes it) and a reduction over all axes is a scalar.
"""

from __future__ import annotations

import numbers
import operator
import sys

import numpy as np

from splyce.tracer import indexing, tracer as T, views
from splyce.tracer.base import relabel_axes
from splyce.tracer.base import TraceError, Tracer, _node, scalar_value
from splyce.tracer.ir import Node, TensorType

MATRIX, ARRAY = "matrix", "array"


class MatrixTracer(Tracer):
    """A traced ``spmatrix`` (sparse) or ``np.matrix`` (dense): ``Tracer``'s attributes, the matrix operators."""

    __slots__ = ()
    __array_priority__ = 1001   # above Tracer's: ``ndarray * m`` and ``t * m`` defer to the matrix's rules

    def __repr__(self) -> str:
        return f"MatrixTracer({self.node.type})"


def is_matrix_object(x) -> bool:
    """Whether a concrete object has the matrix kind: an ``np.matrix`` or a scipy ``spmatrix``."""
    if isinstance(x, np.matrix):
        return True
    sps = sys.modules.get("scipy.sparse")
    return sps is not None and isinstance(x, sps.spmatrix)


PYDATA = "pydata"   # traced as the array kind; its reductions are returned as pydata's classes (runtime/result_tree.py)


def kind_of_object(x) -> str:
    """The kind a concrete argument is traced with: ``"matrix"`` for an ``np.matrix`` / ``spmatrix``,
    ``"pydata"`` for a pydata-sparse array (part of the cache key: what a reduction returns differs)."""
    if is_matrix_object(x):
        return MATRIX
    pydata = sys.modules.get("sparse")
    if pydata is not None and isinstance(x, getattr(pydata, "SparseArray", ())):
        return PYDATA
    return ARRAY


def kind_of(x) -> str:
    """``"matrix"`` for a ``MatrixTracer``, else ``"array"``."""
    return MATRIX if isinstance(x, MatrixTracer) else ARRAY


def tracer_of(node: Node, kind: str) -> Tracer:
    """A tracer of ``node`` of that kind (the dispatcher's inputs and named constants)."""
    return MatrixTracer(node) if kind == MATRIX and node.type.ndim == 2 else Tracer(node)


def lift(x, op: str = "operand"):
    """A concrete ``np.matrix`` / ``spmatrix`` met while tracing as a ``MatrixTracer`` of its constant node;
    anything else as it is."""
    if not isinstance(x, Tracer) and is_matrix_object(x):
        return MatrixTracer(_node(x, op))
    return x


def as_array(x):
    """The array kind of a traced value (``np.asarray(m)``, ``m.A``, ``s.toarray()``): the same node."""
    return Tracer(x.node) if isinstance(x, MatrixTracer) else x


def _matrix(result, dense_matrix: bool):
    """``result`` with the matrix kind: rank 2 as it is, a 1-D dense result of an ``np.matrix`` as a row (NumPy's
    matrix is never 1-D), a scalar as it is."""
    if not isinstance(result, Tracer):
        return result
    ndim = result.node.type.ndim
    if ndim == 1 and dense_matrix and not result.is_sparse:
        result = indexing.reshape(Tracer(result.node), (1, result.shape[0]))
        ndim = 2
    return MatrixTracer(result.node) if ndim == 2 else Tracer(result.node)


def _sparray(x) -> bool:
    """A sparse value of the array kind (a ``csr_array``, a SparseTensor, pydata)."""
    return isinstance(x, Tracer) and not isinstance(x, MatrixTracer) and x.is_sparse


def _dense_array(x) -> bool:
    """A dense operand of the array kind: a dense ``Tracer`` or a concrete ndarray that is no ``np.matrix``."""
    if isinstance(x, MatrixTracer):
        return False
    if isinstance(x, Tracer):
        return not x.is_sparse
    return isinstance(x, np.ndarray) and not isinstance(x, np.matrix) and x.ndim >= 1


def _dense_matrix(*xs) -> bool:
    return any(isinstance(x, MatrixTracer) and not x.is_sparse for x in xs)


# -- the product: ``*``, ``@``, ``dot`` ------------------------------------------------------------------------

def product(a, b, star: bool = False):
    """``a @ b`` (``star``: ``a * b``) where ``a`` or ``b`` has the matrix kind (neither a scalar): the matrix
    product, sparse when both operands are (scipy's ``csr_matrix @ csr_matrix``), dense otherwise."""
    a, b = lift(a, "matmul"), lift(b, "matmul")
    na, nb = _node(a, "matmul"), _node(b, "matmul")
    dense_matrix = _dense_matrix(a, b)
    if dense_matrix and star:   # np.matrix's ``*`` is np.dot of two matrices: a vector is a row (``asmatrix``)
        a, b = (_row(x) for x in (a, b))
        na, nb = _node(a, "matmul"), _node(b, "matmul")
        if na.type.ndim == 2 and nb.type.ndim == 2 and na.type.shape[1] != nb.type.shape[0]:
            raise TraceError(f"shapes {na.type.shape} and {nb.type.shape} not aligned: {na.type.shape[1]} "
                             f"(dim 1) != {nb.type.shape[0]} (dim 0)")
    both_sparse = na.type.is_sparse and nb.type.is_sparse
    result = T.matmul(Tracer(na), Tracer(nb))     # sparse @ sparse is sparse there too
    if both_sparse:    # the left operand's class (``Aa @ A`` is a csr_array)
        return _matrix(result, False) if isinstance(a, MatrixTracer) else result
    if not dense_matrix and (_dense_array(a) or _dense_array(b)):
        return Tracer(result.node)     # scipy: ``A @ x``, ``A * X``, ``x * A`` of ndarrays are ndarrays
    return _matrix(result, dense_matrix)


def dropin(name: str, a, b):
    """``splyce.matmul / multiply / add / subtract`` inside jit with a matrix-kind operand: the result scipy's
    method of the same name gives (``A.dot(B)``, ``A.multiply(B)``, ``A + B``), of its class."""
    if name == "matmul":
        return product(a, b) if not _sparray(a) else T.matmul(a, as_array(b))
    if name == "multiply":
        result = T.multiply(as_array(a), as_array(b))
        return result if _sparray(a) else _matrix(result, _dense_matrix(a, b))
    return a + b if name == "add" else a - b


def _row(x):
    """A 1-D operand as a (1, n) row (``np.asmatrix``); anything else as it is."""
    if isinstance(x, Tracer):
        return indexing.reshape(Tracer(x.node), (1, x.shape[0])) if x.node.type.ndim == 1 else x
    return x.reshape(1, -1) if isinstance(x, np.ndarray) and x.ndim == 1 else x


def _sparse_array_like(x) -> bool:
    """A sparse value of the array kind, traced or concrete (an ``sparray``, pydata, a SparseTensor)."""
    if isinstance(x, Tracer):
        return _sparray(x)
    sps = sys.modules.get("scipy.sparse")
    return (sps is not None and isinstance(x, sps.sparray)) or type(x).__module__.split(".")[0] in ("sparse", "splyce")


def _defers(self, other) -> bool:
    """Whether Python runs ``other``'s reflected method first: a sparse array beside a dense ``np.matrix``
    (scipy's ``__array_priority__`` 10.1 is above the matrix's 10.0), whose array rules and kind then hold."""
    return not self.is_sparse and _sparse_array_like(other)


def _multiply(a, b, reflected: bool = False):
    """``*``: a scalar scales; a sparse array on the left multiplies elementwise (its rules); else the product."""
    if _defers(a, b):
        return T.multiply(b, Tracer(a.node)) if reflected else T.multiply(Tracer(a.node), b)
    left, right = (b, a) if reflected else (a, b)
    if scalar_value(b) is not None or (isinstance(b, Tracer) and b.node.type.ndim == 0):
        return _matrix(T.multiply(Tracer(a.node), b), _dense_matrix(a))
    if _sparray(left):
        return T.multiply(left, Tracer(right.node) if isinstance(right, MatrixTracer) else right)
    return product(left, right, star=True)


def power(a, n):
    """``a ** n`` of a matrix: the matrix power (scipy's ``matrix_power``, its order of products; NumPy's for an
    ``np.matrix``): ``n`` a non-negative integer, ``a`` square."""
    k = scalar_value(n)
    if k is None or isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"exponent must be an integer, got {n!r} (a ** n of a matrix is the matrix power; "
                        "write a.power(n) or np.power(a, n) for the elementwise power)")
    k = int(k)
    rows, cols = a.shape
    if rows != cols:
        raise TypeError(f"matrix is not square ({rows} x {cols}): a ** n of a matrix is the matrix power")
    if k < 0:
        raise TraceError("a ** n with n < 0 of a matrix is the power of its inverse: not supported inside "
                         "@splyce.jit (solve a linear system instead)")
    if k == 0:
        return _identity(a)
    if k == 1:
        return _matrix(Tracer(a.node), _dense_matrix(a))      # scipy's A.copy(): a result never aliases A
    if not a.is_sparse:   # NumPy's matrix_power: bits of n from the lowest, squares multiplied into the result
        z = result = None
        while k > 0:
            z = a if z is None else product(z, z)
            k, bit = divmod(k, 2)
            if bit:
                result = z if result is None else product(result, z)
        return result
    half = power(a, k // 2) if k // 2 > 1 else a   # scipy's recursion: A @ tmp @ tmp for odd n
    return product(product(a, half), half) if k % 2 else product(half, half)


def _identity(a):
    """``a ** 0``: scipy's ``eye_array`` (an sparray) for a sparse matrix, NumPy's identity matrix for a dense one."""
    import scipy.sparse as sps

    n = a.shape[0]
    if a.is_sparse:
        eye = sps.eye_array(n, dtype=a.dtype, format="csr")
        return Tracer(_node(eye, "power"))
    return MatrixTracer(_node(np.eye(n, dtype=a.dtype), "power"))


# -- reductions: a matrix of one row or column, a scalar over all axes ----------------------------------------

def _reduction(fn):
    def method(self, axis=None, dtype=None, out=None):
        if out is not None:
            raise TypeError("out= is not supported on traced tensors")
        plain = Tracer(self.node)
        if axis is None:
            return fn(plain, None, dtype, False)
        if isinstance(axis, (tuple, list)):
            raise TraceError(f"axis must be None, 0 or 1 for a matrix, got {axis!r}")
        return _matrix(fn(plain, axis, dtype, True), True)
    return method


def _sum(t, axis, dtype, keepdims):
    return T.sum_(t, axis, keepdims=keepdims, dtype=dtype)


def _mean(t, axis, dtype, keepdims):
    if dtype is not None:
        raise TypeError("mean: dtype= is not supported on traced tensors")
    return T.mean(t, axis, keepdims=keepdims)


def _extremum(kind: str):
    def reduce(t, axis, dtype, keepdims):
        if dtype is not None:
            raise TypeError(f"{kind}: dtype= is not supported")
        return T.reduce_extremum(t, kind, axis, keepdims)
    return reduce


# -- every other method and operator: the base's, the result given the matrix kind ----------------------------

def _wrapped(name: str):
    base = getattr(Tracer, name)

    def method(self, *args, **kwargs):
        args = tuple(lift(a, name) for a in args)
        inner = Tracer(self.node)
        result = base(inner, *(as_array(a) for a in args), **kwargs)
        out = _matrix(result, _dense_matrix(self, *args))
        if result is inner:               # the value itself (``M.tocsr()`` of a CSR): scipy's ``self``, a view
            views.note(out, self)
        return out
    method.__name__ = name
    return method


def _reflected(name: str):
    """A binary operator: with an sparse array on the left (``Aa + A``: Python runs the subclass's reflected
    method first), the sparse array's rules and kind."""
    base = getattr(Tracer, name)
    reflected = name.startswith("__r")

    def method(self, other):
        other = lift(other, name)
        result = base(Tracer(self.node), as_array(other))
        if (reflected and _sparray(other)) or _defers(self, other):
            return result
        return _matrix(result, _dense_matrix(self, other))
    method.__name__ = name
    return method


_BINARY = ("__add__", "__radd__", "__sub__", "__rsub__", "__truediv__", "__rtruediv__", "__rpow__", "__and__",
           "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
           "__ge__", "multiply", "maximum", "minimum")
# methods whose results keep the array kind whatever the operand (scipy / NumPy give ndarrays)
_TO_ARRAY = ("toarray",)
# scipy's format conversions: ``csr_matrix.tocsc()`` is a ``csc_matrix``
_CONVERSIONS = ("tocsr", "tocsc", "tocoo", "asformat")
_SKIP = ("__init__", "__repr__", "__bool__", "__len__", "__iter__", "__getattribute__", "__setattr__",
         "__array__", "__float__", "__int__", "__index__", "__complex__", "item", "__hash__", "__slots__",
         "__module__", "__doc__", "__dict__", "__weakref__", "__class__", "__array_priority__", "__new__",
         "__init_subclass__", "__subclasshook__", "__reduce__", "__reduce_ex__", "__getstate__", "__sizeof__",
         "__dir__", "__format__", "__str__", "__delattr__", "node")


def _diagonal(self, k=0):
    """``diagonal(k)``: scipy's sparse matrix gives an ndarray, NumPy's ``np.matrix`` a (1, n) matrix."""
    result = T.diagonal(Tracer(self.node), k)
    return result if self.is_sparse else MatrixTracer(indexing.reshape(result, (1, result.shape[0])).node)


def _trace(self, offset=0):
    """``trace(offset)``: of a sparse matrix a scalar (scipy's ``diagonal().sum()``), of an ``np.matrix`` a
    (1, 1) matrix, as NumPy's."""
    result = T.trace(Tracer(self.node), offset)
    return result if self.is_sparse else MatrixTracer(indexing.reshape(result, (1, 1)).node)


def _converting(bound, source=None):
    """A conversion method bound to the plain tracer, its result of the matrix kind; the value itself (``M.tocsr()``
    of a CSR: scipy's ``self``) a view of ``source`` (tracer/views.py)."""
    def method(*args, **kwargs):
        result = bound(*args, **kwargs)
        out = _matrix(result, False)
        if source is not None and result is bound.__self__:
            views.note(out, source)
        return out
    return method


def _array_ufunc(self, ufunc_, method, *inputs, **kwargs):
    inputs = tuple(lift(x, ufunc_.__name__) for x in inputs)
    if ufunc_.__name__ == "matmul" and method == "__call__":
        return product(*inputs)
    if ufunc_.__name__ == "multiply" and method == "__call__" and len(inputs) == 2:   # np.multiply: elementwise
        plain = tuple(as_array(x) for x in inputs)
        result = T.multiply(*plain)
    else:
        result = Tracer.__array_ufunc__(Tracer(self.node), ufunc_, method, *(as_array(x) for x in inputs), **kwargs)
    if any(_sparray(x) for x in inputs) and not isinstance(inputs[0], MatrixTracer):
        return result
    return _matrix(result, _dense_matrix(*inputs))


_METHOD_FUNCTIONS = {np.sum: "sum", np.mean: "mean", np.max: "max", np.min: "min", np.amax: "max",
                     np.amin: "min"}


def _array_function(self, func, types, args, kwargs):
    name = _METHOD_FUNCTIONS.get(func)
    if name is not None and args and isinstance(args[0], MatrixTracer):   # NumPy calls the matrix's method
        kwargs = {k: v for k, v in kwargs.items() if not (k == "keepdims" and v is False)}
        return getattr(args[0], name)(*args[1:], **kwargs)
    if func is np.dot and len(args) == 2:
        return product(*args) if scalar_value(args[1]) is None and scalar_value(args[0]) is None \
            else _matrix(T.multiply(*(as_array(a) for a in args)), _dense_matrix(*args))
    plain = tuple(as_array(a) if isinstance(a, Tracer) else a for a in args)
    result = Tracer.__array_function__(Tracer(self.node), func, types, plain, kwargs)
    if isinstance(result, Tracer) and not any(_sparray(a) for a in args):
        return _matrix(result, _dense_matrix(*args))
    return result


def _getitem(self, key):
    """Indexing: a sparse matrix's rules are scipy's (2-D results), a dense ``np.matrix``'s are NumPy's
    (``m[i]`` is a row, ``m[:, j]`` a column, ``m[i, j]`` a scalar)."""
    result = Tracer.__getitem__(Tracer(self.node), key)
    if result.node.type.ndim == 1 and not result.is_sparse and not self.is_sparse:
        n = len(key) if isinstance(key, tuple) else 0
        column = n > 1 and isinstance(key[1], numbers.Integral)
        shape = (result.shape[0], 1) if column else (1, result.shape[0])
        return MatrixTracer(indexing.reshape(result, shape).node)
    return _matrix(result, False) if self.is_sparse else result if result.node.type.ndim == 0 \
        else _matrix(result, True)


def _ravel(self):
    """``np.matrix.ravel``: a (1, n) matrix."""
    if self.is_sparse:
        raise AttributeError("a sparse matrix has no ravel(); write m.toarray().ravel()")
    rows, cols = self.shape
    if rows != 1 and cols != 1:
        raise TraceError(f"ravel of a {rows} x {cols} matrix (a reshape that moves entries) is not supported "
                         "inside @splyce.jit")
    return MatrixTracer(indexing.reshape(Tracer(self.node), (1, rows * cols)).node)


def _a1(self):
    """``np.matrix.A1``: the flat 1-D ndarray."""
    return indexing.reshape(Tracer(self.node), (self.size,)) if not self.is_sparse else _no_attribute("A1")


def _no_attribute(name: str):
    raise AttributeError(f"a sparse matrix has no attribute {name!r} (write .toarray())")


def _dense_only(fn):
    return lambda self: fn(self) if not self.is_sparse else _no_attribute(fn.__name__)

def _transposed(self) -> "MatrixTracer":
    """``M.T``: a sparse matrix's over its buffers, a view of an argument as scipy's (tracer/views.py)."""
    return _noted(MatrixTracer(T.transpose(Tracer(self.node)).node), self)



def _noted(out, source):
    """``out``, noted as a view of ``source`` when it is a sparse transpose over its buffers."""
    if isinstance(out, Tracer) and relabel_axes(out.node) is not None:
        views.note(out, source)
    return out


def _install(cls) -> None:
    for name, value in list(vars(Tracer).items()):
        if name in _SKIP or name in _BINARY or isinstance(value, (property, staticmethod, classmethod)) \
                or not callable(value):
            continue
        setattr(cls, name, _wrapped(name))
    for name in _BINARY:
        setattr(cls, name, _reflected(name))
    for name in _CONVERSIONS:           # properties of sparse values (tracer/surface.py), a matrix in, a matrix out
        getter = vars(Tracer)[name].fget
        setattr(cls, name, property((lambda g: lambda self: _converting(g(Tracer(self.node)), self))(getter)))
    for name in _TO_ARRAY:
        base = getattr(Tracer, name)
        setattr(cls, name, (lambda b: lambda self, *a, **k: b(Tracer(self.node), *a, **k))(base))
    cls.T = property(_transposed)
    cls.transpose = (lambda wrapped: lambda self, *a, **k: _noted(wrapped(self, *a, **k), self))(cls.transpose)
    cls.A = property(_dense_only(as_array))
    cls.A1 = property(_a1)
    cls.H = property(lambda self: MatrixTracer(T.transpose(T.conjugate(Tracer(self.node))).node))
    cls.getA = _dense_only(as_array)
    cls.getA1 = _a1
    cls.__mul__ = lambda self, other: _multiply(self, other)
    cls.__rmul__ = lambda self, other: _multiply(self, other, reflected=True)
    cls.__matmul__ = lambda self, other: T.matmul(Tracer(self.node), other) if _defers(self, other) \
        else product(self, other)
    cls.__rmatmul__ = lambda self, other: product(lift(other), self) if not _sparray(other) \
        else T.matmul(other, Tracer(self.node))
    cls.__pow__ = power
    cls.dot = lambda self, other: _multiply(self, other) if scalar_value(other) is not None else product(self, other)
    cls.sum = _reduction(_sum)
    cls.mean = _reduction(_mean)
    cls.max = _reduction(_extremum("max"))
    cls.min = _reduction(_extremum("min"))
    cls.todense = lambda self: MatrixTracer(T.todense(Tracer(self.node)).node)
    cls.diagonal = _diagonal
    cls.trace = _trace
    cls.ravel = cls.flatten = _ravel
    cls.__getitem__ = _getitem
    cls.__array_ufunc__ = _array_ufunc
    cls.__array_function__ = _array_function
    cls.__hash__ = object.__hash__


def _lifting(name: str):
    """A ``Tracer`` operator that first makes a concrete ``np.matrix`` / ``spmatrix`` operand (a constant the
    function reads: ``B * x``, where scipy's own operator gave way) a ``MatrixTracer``, whose rules then apply."""
    base = getattr(Tracer, name)
    symbol = getattr(operator, name.replace("__r", "__", 1) if name.startswith("__r") and name != "__rshift__"
                     else name)

    def method(self, other):
        if not isinstance(other, Tracer) and is_matrix_object(other):
            m = lift(other, name)
            return symbol(m, self) if name.startswith("__r") else symbol(self, m)
        return base(self, other)
    method.__name__ = name
    return method


def _install_lifting() -> None:
    for name in ("__mul__", "__rmul__", "__matmul__", "__rmatmul__", "__add__", "__radd__", "__sub__", "__rsub__"):
        setattr(Tracer, name, _lifting(name))


_install_lifting()
_install(MatrixTracer)

