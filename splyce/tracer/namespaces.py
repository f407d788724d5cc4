"""NumPy and scipy names inside a jitted function: the ``numpy``, ``scipy`` and ``scipy.sparse`` modules (and
functions imported from them, ``from numpy import asarray``) as the traced copy of the function sees them.

NumPy's ``asarray`` cannot return a tracer (it converts through ``__array__``), and scipy's constructors do
not know tracers. The jit traces a copy of the user's function with rebound globals (``rebound`` below,
over tracer/captures.py's): in that copy only, a name bound to one of those modules is bound to a
``Namespace`` that serves traced values and forwards everything else to the real module, and a name bound
to one of the functions served is bound to the traced version.

- ``np.asarray`` / ``array`` / ``asanyarray`` / ``ascontiguousarray``: the identity on a traced dense value
  (``dtype=`` converts), a stack of a list of traced values; of a sparse value a TraceError (NumPy would
  wrap it in a 0-d object array): write ``a.toarray()``.
- ``sp.diags`` / ``diags_array`` / ``spdiags``-free forms of a traced vector: the vector on a diagonal, a
  sparse value in the diagonal's pattern (a scaling of a constant 0/1 matrix: ``einsum("ij,i->ij", e, d)``);
  ``sp.eye`` / ``identity`` / ``eye_array`` take sizes, never traced values, and are the real ones (a
  constant of the trace).
- ``sp.csr_array(t)`` / ``csr_matrix`` / ``csc_*`` / ``coo_*`` of a traced value: a conversion
  (tracer/sparse_methods.py); ``sp.issparse(t)``: whether the traced value is stored sparse;
  ``sp.hstack`` / ``vstack`` of traced sparse values: tracer/stacking.py.

Code the jit does not rebind (a function of another module) reaches NumPy's own ``asarray``; the tracer's
``__array__`` raises there, naming the construct (tracer/surface.py).
"""

from __future__ import annotations

import sys
import types

import numpy as np

from splyce.tracer import matrix, captures
from splyce.tracer import sparse_methods as S
from splyce.tracer import gather, scipy_host, special, stacking, surface
from splyce.tracer import tracer as T
from splyce.tracer.base import TraceError, Tracer, _node, mark_diagonal
from splyce.tracer.dense_ops import astype


def _has_tracer(x) -> bool:
    return isinstance(x, Tracer) or (isinstance(x, (list, tuple)) and any(_has_tracer(v) for v in x))


# -- numpy ----------------------------------------------------------------------------------------------------

def _asarray_like(name: str, real):
    def convert(a, dtype=None, *args, **kwargs):
        if _has_tracer(a):
            result = stacking.as_array(a, dtype, op=name)
            if name == "asanyarray" and isinstance(a, Tracer) and dtype is None:
                return a   # a subclass (np.matrix's) is kept
            return matrix.as_array(result)     # np.asarray(m) of an np.matrix is an ndarray
        return real(a, dtype, *args, **kwargs)
    convert.__name__ = name
    convert.__qualname__ = name
    convert.__doc__ = f"numpy.{name}, serving traced values inside @splyce.jit (tracer/namespaces.py)."
    return convert


def _take(a, indices, axis=None, out=None, mode="raise"):
    """numpy.take of a NumPy constant at a traced index array (``np.take(np.eye(k), labels, axis=0)``, a one-hot
    encoding): NumPy dispatches np.take on its first operand only, so the traced index alone reaches NumPy's
    own, which cannot convert it."""
    if isinstance(indices, Tracer) and not isinstance(a, Tracer) and out is None and mode == "raise":
        return gather.take(a, indices, axis)
    return np.take(a, indices, axis=axis, out=out, mode=mode)


NUMPY = {name: _asarray_like(name, getattr(np, name))
         for name in ("asarray", "array", "asanyarray", "ascontiguousarray")}
NUMPY["take"] = _take


# -- scipy.sparse ---------------------------------------------------------------------------------------------

def _sps():
    import scipy.sparse as sps

    return sps


def _diagonal(d, offset: int, shape, dtype, op: str) -> Tracer:
    """The traced vector ``d`` on diagonal ``offset`` of a sparse (n, m) value (CSR, the diagonal's pattern)."""
    node = _node(d, op)
    if node.type.is_sparse or node.type.ndim != 1:
        raise TraceError(f"{op}: a diagonal must be a dense 1-D value, got shape {node.type.shape}"
                         f"{' stored sparse' if node.type.is_sparse else ''}; write d.toarray().ravel()")
    k = node.type.shape[0]
    if shape is None:
        shape = (k + abs(offset), k + abs(offset))
    n, m = shape
    rows = np.arange(k) + max(0, -offset)
    cols = rows + offset
    value = Tracer(node) if dtype is None else astype(Tracer(node), dtype)
    dt = value.node.type.dtype
    sps = _sps()
    pattern = sps.csr_array((np.ones(k, dtype=dt), (rows, cols)), shape=(n, m))
    if offset >= 0:   # entry (i, i + offset) is d[i]: a row scaling by d padded to n rows
        padded = value if k == n else stacking.concatenate([value, np.zeros(n - k, dtype=dt)], 0, op=op)
        result = T.contract([_node(pattern, op), padded.node], ["ij", "i"], "ij", op=op, scaling=True)
        if offset == 0 and n == m:
            mark_diagonal(result.node, value.node)   # a product with it is a scaling (tracer.matmul)
        return result
    padded = value if k == m else stacking.concatenate([value, np.zeros(m - k, dtype=dt)], 0, op=op)
    return T.contract([_node(pattern, op), padded.node], ["ij", "j"], "ij", op=op, scaling=True)


def _diags_like(name: str, real):
    def diags(diagonals, offsets=0, shape=None, format=None, dtype=None):
        if not _has_tracer(diagonals):
            return real(diagonals, offsets=offsets, shape=shape, format=format, dtype=dtype)
        op = f"scipy.sparse.{name}"
        if isinstance(diagonals, Tracer):
            if diagonals.ndim != 1:
                raise TraceError(f"{op}: a traced diagonal must be 1-D, got shape {diagonals.shape}; for several "
                                 "diagonals pass a list of vectors and a list of offsets")
            diagonals, offsets = [diagonals], [offsets] if np.ndim(offsets) == 0 else offsets
        offsets = [offsets] if np.ndim(offsets) == 0 else list(offsets)
        if len(diagonals) != len(offsets):
            raise ValueError(f"{op}: Different number of diagonals ({len(diagonals)}) and offsets "
                             f"({len(offsets)})")
        if len(set(int(o) for o in offsets)) != len(offsets):
            raise ValueError(f"{op}: Repeated diagonal offsets {offsets}")
        if shape is None:   # scipy's: square, sized by the first diagonal
            size = len(diagonals[0]) + abs(int(offsets[0]))
            shape = (size, size)
        n, m = shape
        for index, (d, o) in enumerate(zip(diagonals, offsets)):
            o = int(o)
            length = min(n + o, m) if o < 0 else min(n, m - o)
            if len(d) != length or length <= 0:
                raise ValueError(f"{op}: Diagonal length (index {index}: {len(d)} at offset {o}) does not agree "
                                 f"with array size ({n}, {m}).")
        result = None
        for d, o in zip(diagonals, offsets):
            if not isinstance(d, Tracer):
                d = np.asarray(d, dtype=dtype)
            part = _diagonal(d, int(o), tuple(shape), dtype, op)
            result = part if result is None else T.add(result, part)
        return result if format is None else S.asformat(result, format)
    diags.__name__ = name
    return diags


def _constructor(name: str, real, target: str):
    """``csr_array(t)`` and the like: a traced value converted; anything else is scipy's."""
    def build(arg1, shape=None, dtype=None, copy=False, **kwargs):
        if not isinstance(arg1, Tracer):
            if _has_tracer(arg1):
                raise TraceError(f"scipy.sparse.{name}: a tuple (data, indices, ...) of traced values is not "
                                 "supported inside @splyce.jit (the pattern must be known at trace time); build "
                                 "the value with products of traced values instead")
            return real(arg1, shape=shape, dtype=dtype, copy=copy, **kwargs)
        if shape is not None and tuple(shape) != arg1.shape:
            raise ValueError(f"scipy.sparse.{name}: shape {tuple(shape)} does not match the value's {arg1.shape}")
        value = arg1 if dtype is None else astype(arg1, dtype)
        out = S.convert(value, target, f"scipy.sparse.{name}")
        # ``copy=True``: a new tracer, so the value itself returned is a copy, not a view (tracer/views.py)
        return type(out)(out.node) if copy and out is arg1 else out
    build.__name__ = name
    return build


def _issparse(x) -> bool:
    if isinstance(x, Tracer):
        return x.node.type.is_sparse
    return _sps().issparse(x)


def _stack(how: str, real):
    def join(blocks, format=None, dtype=None):
        if not _has_tracer(blocks):
            return real(blocks, format=format, dtype=dtype)
        return stacking.sparse_stack(blocks, how, format, dtype)
    join.__name__ = how
    return join


def _matrix_kind(fn, when=lambda *args: True):
    """``fn`` whose traced result has the matrix kind (tracer/matrix.py), as scipy's ``diags`` and
    ``csr_matrix`` return ``spmatrix`` classes; ``when`` (of the arguments): only then."""
    def served(*args, **kwargs):
        result = fn(*args, **kwargs)
        if isinstance(result, matrix.MatrixTracer) and args and result is args[0]:
            return result          # ``csr_matrix(M)`` of a CSR matrix: M itself, as scipy's (a view if returned)
        if isinstance(result, Tracer) and when(*args):
            return matrix.tracer_of(result.node, matrix.MATRIX)
        return result
    served.__name__ = fn.__name__
    return served


def _all_matrices(blocks, *rest) -> bool:
    """scipy's ``hstack`` / ``vstack`` of ``spmatrix`` blocks only is an ``spmatrix``."""
    flat = [b for row in blocks for b in (row if isinstance(row, (list, tuple)) else [row])]
    return all(isinstance(b, matrix.MatrixTracer) or matrix.is_matrix_object(b) for b in flat if b is not None)


def _scipy_sparse() -> dict:
    sps = _sps()
    table = {"issparse": _issparse,
             "hstack": _matrix_kind(_stack("hstack", sps.hstack), _all_matrices),
             "vstack": _matrix_kind(_stack("vstack", sps.vstack), _all_matrices),
             "diags": _matrix_kind(_diags_like("diags", sps.diags)),
             "diags_array": _diags_like("diags_array", sps.diags_array),
             "tril": _keeps_kind(_traced_or_real("tril", sps.tril, lambda *a, **k: scipy_host.triangle("tril", *a, **k))),
             "triu": _keeps_kind(_traced_or_real("triu", sps.triu, lambda *a, **k: scipy_host.triangle("triu", *a, **k)))}
    for fmt in ("csr", "csc", "coo"):
        for kind in ("array", "matrix"):
            name = f"{fmt}_{kind}"
            build = _constructor(name, getattr(sps, name), fmt)
            table[name] = _matrix_kind(build) if kind == "matrix" else _array_kind(build)
    return table


def _sparse_norm(x, ord=None, axis=None):
    """``scipy.sparse.linalg.norm`` of a traced value: the Frobenius norm, or ``ord`` = 1 / -1 / inf / -inf
    (the largest / smallest absolute column / row sum), over the whole matrix; along one ``axis``, ``ord`` =
    None / 2 / 1 / 0, a 1-D array as scipy returns."""
    if not isinstance(x, Tracer):
        return _sps().linalg.norm(x, ord=ord, axis=axis)
    if not x.is_sparse:
        raise TypeError("input is not sparse. use numpy.linalg.norm")   # scipy's own refusal
    if isinstance(axis, tuple) and len(axis) == 1:
        axis = axis[0]
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and ord in (None, 2, 1, 0):
        if axis not in (0, 1, -1, -2):
            raise ValueError("Invalid axis for the norm of a matrix")   # scipy's own refusal
        axis = int(axis) % 2
        magnitude = abs(Tracer(x.node))        # the array class: scipy returns a 1-D ndarray for both classes
        if ord in (None, 2):
            return np.sqrt(magnitude.multiply(magnitude).sum(axis=axis))
        if ord == 1:
            return magnitude.sum(axis=axis)
        return (magnitude != 0).sum(axis=axis)
    if axis is not None or ord not in (None, "fro", 1, -1, np.inf, -np.inf):
        raise TraceError(f"scipy.sparse.linalg.norm: ord={ord!r}, axis={axis!r} is not supported inside "
                         "@splyce.jit (the Frobenius norm and ord=1 / -1 / inf / -inf of the whole matrix are, and "
                         "ord=None / 2 / 1 / 0 along one axis); write abs(a).max(axis).toarray().ravel() for "
                         "ord=inf along an axis")
    magnitude = abs(Tracer(x.node))
    if ord in (None, "fro"):
        return np.sqrt(magnitude.multiply(magnitude).sum())
    sums = magnitude.sum(axis=0 if ord in (1, -1) else 1)
    return sums.max() if ord in (1, np.inf) else sums.min()


def _scipy_sparse_linalg() -> dict:
    import scipy.sparse.linalg as spla

    return {"norm": _sparse_norm,
            "spsolve_triangular": _traced_or_real("spsolve_triangular", spla.spsolve_triangular,
                                                  scipy_host.spsolve_triangular),
            "spsolve": _traced_or_real("spsolve", spla.spsolve, scipy_host.spsolve)}


def _traced_or_real(name: str, real, traced):
    """``traced`` when an argument is a traced value, else scipy's own ``real``."""
    def served(*args, **kwargs):
        if _has_tracer(args) or _has_tracer(tuple(kwargs.values())):
            return traced(*args, **kwargs)
        return real(*args, **kwargs)
    served.__name__ = name
    return served


def _keeps_kind(fn):
    """``fn`` whose traced result has its first operand's kind: ``spmatrix`` in, ``spmatrix`` out (scipy's tril
    / triu)."""
    def served(*args, **kwargs):
        result = fn(*args, **kwargs)
        if isinstance(result, Tracer) and args and isinstance(args[0], matrix.MatrixTracer):
            return matrix.tracer_of(result.node, matrix.MATRIX)
        return result
    served.__name__ = fn.__name__
    return served


def _array_kind(fn):
    def served(*args, **kwargs):
        return matrix.as_array(fn(*args, **kwargs))
    served.__name__ = fn.__name__
    return served


# -- the namespaces and the rebinding ------------------------------------------------------------------------

class Namespace(types.ModuleType):
    """A module as a traced function sees it: the served names, the rest forwarded to the real module."""

    def __init__(self, real: types.ModuleType, served: dict, lazy: dict | None = None):
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(served)
        self.__dict__["_real"] = real
        self.__dict__["_lazy"] = lazy or {}    # served names built on first read (a submodule's namespace)

    def __getattr__(self, name):
        lazy = self.__dict__["_lazy"].get(name)
        if lazy is not None:
            value = self.__dict__[name] = lazy()
            return value
        real = getattr(self.__dict__["_real"], name)
        if self.__name__.startswith(("scipy.sparse", "scipy.special")) and isinstance(real, types.FunctionType):
            return _refusing(f"{self.__name__}.{name}", real, sorted(k for k in self.__dict__ if not
                                                                     k.startswith("_")))
        return real

    def __repr__(self) -> str:
        return f"<traced view of module {self.__name__!r}>"


def _refusing(qualified: str, real, served: list):
    """scipy's own function, which does not know traced values: called with one, its error becomes a
    TraceError naming it (scipy's would name a constructor it calls inside, or the 0-d object array that
    NumPy makes of a traced value)."""
    def call(*args, **kwargs):
        if not (_has_tracer(args) or _has_tracer(tuple(kwargs.values()))):
            return real(*args, **kwargs)
        try:
            return real(*args, **kwargs)
        except TraceError as e:
            if not isinstance(e, surface.ConversionRefused):
                # the tracer's own message about what scipy's code did with the traced value (``sp.eye(a.nnz)``:
                # a size with no value at trace time; expm_multiply: a Python ``if`` on a norm), named
                raise TraceError(f"{qualified} on traced values inside @splyce.jit: scipy's own code does "
                                 f"what a traced value cannot: {e}; served here: {', '.join(served)}; else "
                                 "compute it outside the jitted function and pass the result as an argument") \
                    from e
            raise TraceError(f"{qualified} is not supported on traced values inside @splyce.jit (served here: "
                             f"{', '.join(served)}); compute it outside the jitted function and pass the result "
                             "as an argument") from e
        except Exception as e:   # noqa: BLE001 - whatever scipy raised on the tracer
            raise TraceError(f"{qualified} is not supported on traced values inside @splyce.jit (served here: "
                             f"{', '.join(served)}); compute it outside the jitted function and pass the result "
                             "as an argument") from e
    call.__name__ = getattr(real, "__name__", qualified)
    return call


class _Table:
    """The substitutes, built on first use, of the modules loaded then: NumPy's always; scipy.sparse's when
    scipy is loaded; scipy.sparse.linalg's when it is loaded, or when a traced function reads
    ``scipy.sparse.linalg`` (importing it costs ~0.5 s on a cold process: a new program's first call must not
    pay it for a function that never reads it). Rebuilt when one of them has been imported since."""

    def __init__(self):
        self.by_id = None
        self.loaded = None
        self._linalg = None
        self._special = None

    def get(self):
        loaded = ("scipy" in sys.modules, "scipy.sparse.linalg" in sys.modules, "scipy.special" in sys.modules)
        if self.by_id is None or loaded != self.loaded:
            self.by_id = self._build(*loaded)
            self.loaded = loaded
        return self.by_id

    def _linalg_namespace(self) -> Namespace:
        if self._linalg is None:
            import scipy.sparse.linalg as spla

            self._linalg = Namespace(spla, _scipy_sparse_linalg())
        return self._linalg

    def _special_namespace(self) -> Namespace:
        if self._special is None:
            import scipy.special

            self._special = Namespace(scipy.special, dict(special.FUNCTIONS))
        return self._special

    def _build(self, scipy_loaded: bool, linalg_loaded: bool, special_loaded: bool = False) -> dict:
        by_id = {id(np): Namespace(np, NUMPY)}
        for name, fn in NUMPY.items():
            by_id[id(getattr(np, name))] = fn
        if not scipy_loaded:         # a function cannot read a scipy module or function before scipy is loaded
            return by_id
        import scipy
        import scipy.sparse as sps

        sparse_served = _scipy_sparse()
        sparse_ns = Namespace(sps, sparse_served, lazy={"linalg": self._linalg_namespace})
        by_id.update({id(sps): sparse_ns,
                      id(scipy): Namespace(scipy, {"sparse": sparse_ns}, lazy={"special": self._special_namespace})})
        for name, fn in sparse_served.items():
            by_id[id(getattr(sps, name))] = fn
        if linalg_loaded:
            linalg_ns = self._linalg_namespace()
            spla = linalg_ns.__dict__["_real"]
            by_id[id(spla)] = linalg_ns
            for name, fn in _scipy_sparse_linalg().items():
                by_id[id(getattr(spla, name))] = linalg_ns.__dict__[name]
        if special_loaded:
            special_ns = self._special_namespace()
            real = special_ns.__dict__["_real"]
            by_id[id(real)] = special_ns
            for name in special.FUNCTIONS:
                by_id[id(getattr(real, name))] = special_ns.__dict__[name]
        return by_id


_TABLE = _Table()


def substitute(value):
    """The traced-aware stand-in for ``value`` (a module or a function served here), else None."""
    if not isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)) \
            and not callable(value):
        return None
    if isinstance(value, types.ModuleType) and value.__name__ not in ("numpy", "scipy", "scipy.sparse",
                                                                       "scipy.sparse.linalg", "scipy.special"):
        return None
    return _TABLE.get().get(id(value))


def rebound(fun, tracers: dict):
    """tracer/captures.py's ``rebound`` with, in the copy only, the numpy / scipy names bound to the
    namespaces of this module."""
    return captures.rebound(fun, tracers, substitute)


__all__ = ["NUMPY", "Namespace", "rebound", "substitute"]
