"""Small dense linear algebra between kernels: ``np.linalg.solve``, ``inv``, ``cholesky``, ``lstsq``, ``qr``,
``eigh``, ``svd``, ``det``, ``norm`` with any ``ord`` ... of traced dense values, run by NumPy itself.

Each call becomes ``host`` nodes (one per result of the NumPy function: ``qr`` gives two, ``lstsq`` four)
whose params name the function, its static arguments and which of its results the node is. The planner cuts
the program there (planner/host_steps.py): the kernels before compute the function's operands, NumPy runs
the function on them on the host, and the kernels after read its results. So the results are NumPy's own,
bit for bit, as in the same code without jit.

Shapes and dtypes of the results are NumPy's: the function is run once at trace time on operands of the same
shapes and dtypes (identity matrices, vectors of ones), which gives them without a table per function. A
result whose shape depends on the values (``lstsq``'s residuals: empty when the matrix is rank deficient) is
checked on every call and raises a ValueError naming it.
"""

from __future__ import annotations

import inspect

import numpy as np

from splyce.tracer.base import TraceError, Tracer, _node
from splyce.tracer.ir import Node, TensorType

# NumPy's functions run on the host: qualified name -> the function (their operands: any traced or concrete
# array argument; every other argument is static, part of the node's params). Besides np.linalg, NumPy's
# sorting and scans, whose results have static shapes (JAX has them; the kernels do not compute them).
FUNCTIONS = {f"linalg.{name}": getattr(np.linalg, name) for name in (
    "solve", "inv", "cholesky", "det", "slogdet", "eigh", "eigvalsh", "qr", "lstsq", "pinv", "svd", "svdvals",
    "matrix_rank", "matrix_power", "cond", "norm", "matrix_norm", "vector_norm", "tensorsolve", "tensorinv")
    if hasattr(np.linalg, name)}
FUNCTIONS.update({name: getattr(np, name) for name in (
    "sort", "argsort", "partition", "argpartition", "cumsum", "cumprod", "median", "percentile", "quantile",
    "searchsorted", "flip", "roll", "tril", "triu", "take_along_axis")})

# refused, with what to write instead
REFUSED = {
    "eig": "the dtype of its result depends on the values (real, or complex when an eigenvalue is); for a "
           "symmetric matrix write np.linalg.eigh, else compute it outside the jitted function",
    "eigvals": "the dtype of its result depends on the values (real, or complex when an eigenvalue is); for a "
               "symmetric matrix write np.linalg.eigvalsh, else compute it outside the jitted function",
    "multi_dot": "write the products with @ (a @ b @ c), in the order you want them computed",
}


def serves(func) -> bool:
    """Whether ``func`` is one of NumPy's functions run between kernels (outside ``np.linalg``)."""
    return FUNCTIONS.get(getattr(func, "__name__", "")) is func


def call(func, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)`` of NumPy's linalg with a traced operand: its results as traced values of
    ``host`` nodes, in the structure NumPy returns them (a namedtuple for ``qr`` / ``eigh`` / ``svd`` /
    ``slogdet``, a tuple for ``lstsq``)."""
    short = getattr(func, "__name__", str(func))
    name = f"linalg.{short}" if "linalg" in (getattr(func, "__module__", "") or "") else short
    if short in REFUSED:
        raise TraceError(f"numpy.{name} is not supported on traced tensors inside @splyce.jit: {REFUSED[short]}")
    if FUNCTIONS.get(name) is not func:
        raise TypeError(f"numpy.{name} is not supported on traced tensors inside @splyce.jit; run by NumPy "
                        f"between kernels: {', '.join(f'numpy.{n}' for n in sorted(FUNCTIONS))}")
    signature = inspect.signature(func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"numpy.{name}: {e}") from None
    operands, statics, dummies = [], [], {}
    for param, value in bound.arguments.items():
        if isinstance(value, Tracer) or (isinstance(value, np.ndarray) and value.ndim > 0):
            node = _node(value, f"numpy.{name}")
            if node.type.is_sparse:
                raise TraceError(f"numpy.{name} of a sparse value: NumPy's {short} takes dense arrays, not "
                                 "scipy.sparse matrices; write a.toarray() for a small dense matrix, or call "
                                 "scipy.sparse.linalg outside the jitted function")
            operands.append((param, node))
            dummies[param] = _dummy(node.type)
        else:
            if isinstance(value, (list, tuple)) and any(isinstance(v, Tracer) for v in value):
                raise TraceError(f"numpy.{name}: argument {param!r} holds traced values; pass one array "
                                 "(np.stack(...) of them)")
            statics.append((param, _static(value, name, param)))
    with np.errstate(all="ignore"):
        args_, kwargs_ = _call_arguments(signature, dummies, statics)
        example = func(*args_, **kwargs_)   # NumPy's errors, as eagerly
    results = tuple(example) if isinstance(example, tuple) else (example,)
    args_nodes = tuple(node for _, node in operands)
    slots = tuple(param for param, _ in operands)
    tracers = []
    for k, value in enumerate(results):
        value = np.asarray(value)
        t = TensorType(tuple(int(d) for d in value.shape), value.dtype.name, None)
        tracers.append(Tracer(Node("host", args_nodes, (name, tuple(statics), slots, k, len(results)), t)))
    if not isinstance(example, tuple):
        return tracers[0]
    return type(example)(*tracers) if hasattr(type(example), "_fields") else tuple(tracers)


def evaluate(node: Node, values: list):
    """All the results of the NumPy call ``node`` is one of, on its operands' ``values`` (concrete arrays), as
    a tuple, each checked against the traced type (NumPy's result, converted only when NumPy returned a
    scalar of a Python type)."""
    name, statics, slots, _, count = node.params
    func = FUNCTIONS[name]
    arguments = dict(zip(slots, values))
    args_, kwargs_ = _call_arguments(inspect.signature(func), arguments, statics)
    result = func(*args_, **kwargs_)
    results = tuple(result) if isinstance(result, tuple) else (result,)
    out = []
    for k, value in enumerate(results):
        t = _sibling_type(node, k)
        if t.is_sparse:          # a scipy routine's sparse result (tracer/scipy_host.py): its entries, as scipy's
            if value.shape != t.shape:
                raise ValueError(f"{name}: result shape {value.shape}, traced {t.shape}")
            out.append(value)
            continue
        array = np.asarray(value)
        if array.shape != t.shape:
            raise ValueError(f"numpy.{name}: result {k} has shape {array.shape} on these values, but "
                             f"{t.shape} when traced; its shape depends on the values (lstsq's residuals are "
                             "empty when the matrix is rank deficient), which a jitted function cannot return: "
                             "compute it outside the jitted function")
        out.append(array.astype(t.dtype) if array.dtype != np.dtype(t.dtype) else value)
    return tuple(out)


def _sibling_type(node: Node, k: int) -> TensorType:
    """The traced type of result ``k`` of the call ``node`` belongs to (the node itself when it is ``k``)."""
    if node.params[3] == k:
        return node.type
    name, statics, slots, _, count = node.params
    return _result_types(name, statics, slots, node.args)[k]


def _result_types(name, statics, slots, args) -> tuple:
    func = FUNCTIONS[name]
    dummies = {slot: _dummy(a.type) for slot, a in zip(slots, args)}
    with np.errstate(all="ignore"):
        args_, kwargs_ = _call_arguments(inspect.signature(func), dummies, statics)
        example = func(*args_, **kwargs_)
    results = tuple(example) if isinstance(example, tuple) else (example,)
    return tuple(TensorType(np.shape(v), np.asarray(v).dtype.name, None) for v in results)


def call_key(node: Node) -> tuple:
    """What identifies one NumPy call among ``host`` nodes: its function, statics and operands."""
    name, statics, slots, _, count = node.params
    return name, statics, slots, node.args


def _call_arguments(signature: inspect.Signature, operands: dict, statics) -> tuple[tuple, dict]:
    """``(args, kwargs)`` for ``signature``'s function (positional-only parameters by position)."""
    merged = dict(statics)
    merged.update(operands)
    bound = inspect.BoundArguments(signature, {p: merged[p] for p in signature.parameters if p in merged})
    return bound.args, bound.kwargs


def _dummy(t: TensorType) -> np.ndarray:
    """An operand of ``t``'s shape and dtype on which NumPy's linalg functions succeed: identity matrices
    (stacked for more axes), vectors of ones."""
    dtype = np.dtype(t.dtype)
    if len(t.shape) >= 2:
        return np.broadcast_to(np.eye(t.shape[-2], t.shape[-1], dtype=dtype), t.shape).copy()
    return np.ones(t.shape, dtype=dtype)


def _static(value, name: str, param: str):
    """A static argument as a hashable param (numbers, strings, None, tuples of them)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, list):
        value = tuple(value)
    if value is None or isinstance(value, (bool, int, float, str)) or (
            isinstance(value, tuple) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value)):
        return value
    raise TypeError(f"numpy.{name}: argument {param!r} of type {type(value).__name__} is not supported "
                    "inside @splyce.jit (pass a number, string or tuple)")
