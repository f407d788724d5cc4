"""One-op forms on one CSR or CSC argument, computed on its arrays as scipy computes them.

A jitted function that is one reduction or one zero-preserving elementwise map of one canonical CSR / CSC
argument (``a.sum()``, ``a.sum(axis=1)``, ``a.max()``, ``-a``, ``a / 3.0``, ``abs(a)``, ``a ** 2``, ``a * a``,
``np.sqrt(a)``, ``a != 0``) is a flat pass over the stored values: runtime/library.py (the module that chooses
kernels) recognizes the plan's canonical form (``recognize``; ``a * a`` of one operand and ``a ** 2`` are one
``ewise[mul($0, $0)]`` node of the plan) and runs the function ``runner`` returns instead of the MLIR kernel.

- Sums are NumPy's: the full sum is ``np.add.reduce`` of the values (NumPy's pairwise sum, blocks of 128
  with 8 accumulators), which is what scipy 1.17's ``A.sum()`` computes (``np.sum`` of ``A.data``); the sum
  of each stored row of a CSR (``A.sum(axis=1)``; each column of a CSC, ``axis=0``) is ``np.add.reduceat``
  over the non-empty rows, scipy's ``_minor_reduce``. So these sums equal scipy's bit for bit (in the traced
  result dtype: an int32 matrix sums in int64, as NumPy's dense sum), and run at NumPy's speed. The sum
  across the stored order (a CSR's column sums) keeps the MLIR kernel, whose scatter in stored order is
  scipy's ``ones @ A`` term for term.
- ``max`` / ``min`` over all axes: NumPy's reduction of the values (SIMD, order free), then with zero when
  the matrix has an implicit zero, so NaN propagates and the zeros count as on the dense array (scipy's
  ``_min_or_max``).
- Maps write new values over the same positions in one NumPy pass, evaluated as the MLIR kernel evaluates
  the expression (an integer power as repeated products, a division by the constant, constants in the result
  dtype): for the operations IEEE rounds exactly the values are the MLIR kernel's bit for bit; the
  transcendental maps that keep zeros zero (``expm1``, ``log1p``, ``sin``, ``tan``, ``tanh``, ``sinh``,
  ``arctan``, ``arcsinh`` of float32 / float64 values) are NumPy's, as scipy computes them (``np.expm1(A)``
  maps ``A.data``), where the MLIR kernel calls the C library's, which may round an ulp differently. The index arrays are copied (memcpy), never shared: the
  result is a scipy array whose buffers its caller may write to, and the argument's may be the caller's too.
- ``view``: the argument itself or its transpose returned as is (the trace's ``views``, tracer/views.py):
  scipy's ``A.T``, a CSR / CSC over the argument's own three arrays, nothing copied (docs/tracing.md,
  "Results and aliasing"); ``a.copy()`` returned stays the identity ``map``, a memcpy of the three arrays.
"""

from __future__ import annotations

import contextlib

import numpy as np

from splyce.native import memory_pool
from splyce.native.records import record
from splyce.runtime import providers
from splyce.tensors.formats import compressed_order
from splyce.tensors.tensor import SparseTensor
from splyce.tracer.ir import TensorType

# Unary NumPy heads IEEE computes exactly (correctly rounded or exact), with f(0) == 0: the MLIR kernel and
# NumPy give the same bits for them.
_EXACT_UNARY = {"sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
                "sign": np.sign}
# Unary heads with f(0) == 0 whose values are a libm's (NumPy's SIMD loops on x86, the MLIR kernel's calls into
# the C library): taken as forms of a float32 / float64 matrix and computed by NumPy, so the result is scipy's
# own (``np.expm1(A)`` maps ``A.data`` with these same loops), bit for bit; inside a fused MLIR kernel the same
# head may round an ulp differently (docs/semantics.md)
_LIBM_UNARY = {"expm1": np.expm1, "log1p": np.log1p, "sin": np.sin, "tan": np.tan, "tanh": np.tanh,
               "sinh": np.sinh, "arctan": np.arctan, "arcsinh": np.arcsinh}
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal}


@record
class Form:
    """A plan's one step as a form over one argument's stored values."""

    kind: str   # "sum" | "line_sums" | "mean" | "max" | "min" | "map" | "row_scale" | "column_scale" | "restore"
    #             | "diagonal" | "trace" | "view" (the argument's arrays as they are)
    argument: int              # the function's argument it reads
    type: TensorType           # that argument's (a canonical CSR or CSC)
    out: TensorType
    expr: tuple | None = None  # a map's expression over ("arg", 0)
    vector: int | None = None  # a scaling's dense vector argument (``a * d[:, None]``, ``a * d[None, :]``)
    vector_type: TensorType | None = None

    @property
    def arguments(self) -> tuple[int, ...]:
        return (self.argument,) if self.vector is None else (self.argument, self.vector)

    def describe(self) -> str:
        storage = "CSR" if compressed_order(self.type.format) == (0, 1) else "CSC"
        if self.kind == "sum":
            return f"the sum of the {storage}'s stored values in NumPy's pairwise order (np.add.reduce, scipy's A.sum())"
        if self.kind == "line_sums":
            line = "row" if storage == "CSR" else "column"
            return (f"each stored {line}'s sum in NumPy's order (np.add.reduceat over the non-empty {line}s, "
                    f"scipy's _minor_reduce)")
        if self.kind == "mean":
            return (f"scipy's mean: the {storage}'s stored values times 1 / {self.expr[1]}, then summed in NumPy's "
                    f"pairwise order (np.add.reduce)")
        if self.kind in ("row_scale", "column_scale"):
            gather = "np.repeat(d, the row lengths)" if (self.kind == "row_scale") == (storage == "CSR") \
                else "d[indices]"
            return (f"the stored values times {gather} in one pass, over the same positions (index arrays "
                    f"copied)")
        if self.kind in ("diagonal", "trace"):
            what = "diagonal" if self.kind == "diagonal" else "trace: the sum (np.add.reduce) of the diagonal"
            return f"the {storage}'s {what}, one pass over each row's entries (scipy's csr_diagonal)"
        if self.kind == "restore":
            other = "CSC" if storage == "CSR" else "CSR"
            return (f"the {storage} re-stored as a {other} by a counting transpose of its arrays (scipy's "
                    f"csr_tocsc; native/transpose.py on more threads)")
        if self.kind == "view":
            return (f"the argument's own arrays as a {storage} (a view: scipy's A.T shares A's data, indices and "
                    f"indptr; nothing computed)")
        if self.kind in ("max", "min"):
            return (f"np.{'maximum' if self.kind == 'max' else 'minimum'}.reduce of the stored values, then with "
                    f"the implicit zero (NaN propagates)")
        return (f"{_text(self.expr)} of the stored values in one pass, over the same positions (index arrays "
                f"copied)")


def _text(expr) -> str:
    head = expr[0]
    if head == "arg":
        return "$0"
    if head == "const":
        return repr(expr[1])
    parts = [_text(x) if isinstance(x, tuple) else repr(x) for x in expr[1:]]
    return f"{head}({', '.join(parts)})"


def _storage(t: TensorType) -> tuple[int, int] | None:
    if t.ndim != 2 or not t.is_sparse:
        return None
    order = compressed_order(t.format)
    return order if order in ((0, 1), (1, 0)) else None


def recognize(plan) -> Form | None:
    """The form of a plan of one step that reads one argument as it is (a canonical CSR or CSC), else None."""
    if len(plan.trace.outputs) != 1:
        return None
    if len(plan.steps) == 2:
        return _mean(plan)
    if len(plan.steps) != 1:
        return None
    node = plan.trace.outputs[0]
    if node is not plan.steps[0].node or not node.args or any(a.op != "input" for a in node.args):
        return None
    if len(node.args) == 2 and node.op == "contract":
        diagonal = _diagonal(plan, node)
        if diagonal is not None:
            return diagonal
    args = [_argument(plan, a.params[0]) for a in node.args]
    if any(a is None for a in args):
        return _restore(plan, node)
    k, t = args[0]
    order = _storage(t)
    if order is None:
        return None
    out = node.type
    if len(node.args) == 2:
        return _scaling(node, k, t, *args[1])
    if len(node.args) != 1:
        return None
    if node.op == "contract":
        params = node.params[0]
        if params.scale is not None or len(params.inputs) != 1 or out.is_sparse:
            return None
        (subs,) = params.inputs
        if len(subs) != 2 or subs[0] == subs[1] or not _summable(t.dtype, out.dtype):
            return None
        if params.output == "":
            return Form("sum", k, t, out)
        if params.output == subs[order[0]]:        # the sums of the stored rows (a CSC's columns)
            return Form("line_sums", k, t, out)
        return None
    if node.op == "reduce":
        kind, axes, keepdims = node.params[:3]
        if len(node.params) > 3 or kind not in ("max", "min") or tuple(axes) != (0, 1) or keepdims \
                or out.dtype != t.dtype:
            return None
        return Form(kind, k, t, out)
    if node.op == "ewise":
        expr = node.params[0]
        reads = node.params[1] if len(node.params) > 1 else None
        if reads is not None and tuple(reads) != ("ab",):
            return None
        if not out.is_sparse or out.format != t.format or out.shape != t.shape or not _maps_exactly(expr, t, out):
            return None
        views = plan.source.views
        if expr[0] == "arg" and out.dtype == t.dtype and views and views[0]:
            return Form("view", k, t, out, expr)       # the argument or its transpose returned: scipy's A.T
        return Form("map", k, t, out, expr)
    return None


def _diagonal(plan, node) -> Form | None:
    """``a.diagonal()`` of a CSR / CSC argument: the trace's product with the identity (a constant,
    ``contract[ij,ij->i]``; ``->j`` of a tall matrix), computed as scipy computes it (``csr_diagonal`` of its
    sparsetools: one pass over each row's entries)."""
    n_args = len(plan.source.inputs) - len(plan.constants)
    first, second = (plan.sources[a.params[0]] for a in node.args)
    k = first.index if first.converted else node.args[0].params[0]     # the argument, read as it is
    c = second.index if second.converted else node.args[1].params[0]   # the identity, a constant
    if any(s.host is not None or s.native is not None for s in (first, second)) or k >= n_args \
            or not n_args <= c < len(plan.source.inputs):
        return None
    t = plan.source.inputs[k]
    if _csr_diagonal() is None or _storage(t) is None or node.type.is_sparse:
        return None
    params = node.params[0]
    if params.scale is not None or len(params.inputs) != 2 or params.inputs[0] != params.inputs[1] \
            or len(params.inputs[0]) != 2 or params.output not in ("", params.inputs[0][0 if t.shape[0] <= t.shape[1]
                                                                                       else 1]):
        return None      # (the rows' sums of a wide or square matrix, the columns' of a tall one; all: the trace)
    m, n = t.shape
    if node.type.dtype != t.dtype or np.dtype(t.dtype).kind not in "fciub" or t.dtype == "float16":
        return None
    eye = plan.constants[c - n_args]
    if hasattr(eye, "to_scipy"):
        eye = eye.to_scipy()
    import scipy.sparse as sps

    if not sps.issparse(eye) or eye.shape != (m, n) or eye.nnz != min(m, n):
        return None
    eye, want = sps.csr_array(eye), sps.eye_array(m, n, format="csr")
    if not (np.array_equal(eye.indptr, want.indptr) and np.array_equal(eye.indices, want.indices)
            and np.all(eye.data == 1)):
        return None
    return Form("diagonal" if params.output else "trace", k, t, node.type)


def _csr_diagonal():
    try:
        from scipy.sparse._sparsetools import csr_diagonal
    except ImportError:                    # scipy no longer offers it: the MLIR kernel
        return None
    return csr_diagonal


def _restore(plan, node) -> Form | None:
    """``a.tocsc()`` of a CSR argument, ``a.tocsr()`` of a CSC one, ``a.T.tocsr()`` of a CSR (a copy of the
    argument's entries stored in the other order: the identity map over the plan's converted input): scipy's
    counting transpose of the argument's arrays (native/transpose.py, ``csr_tocsc`` on one thread), instead of
    the MLIR kernel's conversion."""
    if node.op != "ewise" or node.params[0] != ("arg", 0) or len(node.args) != 1:
        return None
    if len(node.params) > 1 and node.params[1] is not None and tuple(node.params[1]) != ("ab",):
        return None
    k = node.args[0].params[0]
    n_in = len(plan.source.inputs)
    n_args = n_in - len(plan.constants)
    source = plan.sources[k]
    if not source.converted or source.host is not None or source.native is not None:
        return None
    out = node.type
    if source.index < n_args:                   # the argument re-stored: its shape, the other order
        arg = source.index
        t = plan.source.inputs[arg]
        order = _storage(t)
        if order is None or _storage(out) != order[::-1] or out.shape != t.shape:
            return None
    elif n_in <= source.index < n_in + len(plan.derived):     # its transpose re-stored: its order
        derived = plan.derived[source.index - n_in]
        arg = derived.source
        if derived.axes != (1, 0) or arg >= n_args:
            return None
        t = plan.source.inputs[arg]
        order = _storage(t)
        if order is None or _storage(out) != order or out.shape != t.shape[::-1]:
            return None
    else:
        return None
    widths = (t.format.pos_width, t.format.crd_width)
    if out.dtype != t.dtype or widths != (out.format.pos_width, out.format.crd_width) or widths[0] != widths[1] \
            or widths[0] not in (32, 64) or np.dtype(t.dtype).itemsize not in (4, 8) \
            or np.dtype(t.dtype).kind not in "fiu":
        return None                        # the native transpose: one index width, values of 4 or 8 bytes
    return Form("restore", arg, t, out)


def _mean(plan) -> Form | None:
    """``a.mean()``: the sum step, then its division by the count. Computed as
    scipy 1.17 computes it, ``(a * (1.0 / count)).sum(...)``: each value scaled first (in float64 for an
    integer or bool matrix, else in its dtype), then summed in NumPy's order, so scipy's bits."""
    first, last = plan.steps
    node = plan.trace.outputs[0]
    if node is not last.node or node.op != "ewise" or len(node.args) != 1 or node.args[0] is not first.node:
        return None
    expr = node.params[0]
    if len(expr) != 3 or expr[:2] != ("div", ("arg", 0)) or not isinstance(expr[2], int) or expr[2] <= 0:
        return None
    total = first.node
    if total.op != "contract" or len(total.args) != 1 or total.args[0].op != "input":
        return None
    read = _argument(plan, total.args[0].params[0])
    if read is None:
        return None
    k, t = read
    if _storage(t) is None or np.dtype(t.dtype).kind not in "fiub" or t.dtype == "float16":
        return None
    inter = "float64" if np.dtype(t.dtype).kind in "iub" else t.dtype
    if node.type.dtype != inter or node.type.is_sparse:
        return None
    params = total.params[0]
    if params.scale is not None or len(params.inputs) != 1 or len(params.inputs[0]) != 2:
        return None
    if params.output != "":
        # scipy's mean(axis=...) passes the axis on as a tuple, which its CSR / CSC sum does not take for the
        # reduceat path: each line is summed from +0.0 in stored order (``A @ ones``), the values scaled first;
        # not a NumPy pass (the MLIR kernel sums that order, but divides after)
        return None
    return Form("mean", k, t, node.type, expr=("count", expr[2]))


def _argument(plan, k: int) -> tuple[int, TensorType] | None:
    """``(argument, type)``: the function's argument whose arrays kernel input ``k`` reads as they are, and
    the type it reads them as: the argument's own, or its transpose's (``a.T`` of a CSR: the same arrays as a
    CSC, a derived input of the plan); else None (re-stored, converted, a constant, a host product)."""
    n_in = len(plan.source.inputs)
    n_args = n_in - len(plan.constants)
    source = plan.sources[k]
    if source.converted or source.host is not None or source.native is not None:
        return None
    if k < n_args:
        t = plan.source.inputs[k]
        return (k, t) if source.type == t else None
    if k < n_in or k - n_in >= len(plan.derived):
        return None
    derived = plan.derived[k - n_in]
    if derived.axes != (1, 0) or derived.source >= n_args or _storage(plan.source.inputs[derived.source]) is None:
        return None
    return derived.source, derived.type


def _scaling(node, k: int, t: TensorType, j: int, d: TensorType) -> Form | None:
    # (``j``: the vector's argument; its type ``d`` a dense vector's: a transposed read is 2-D, declined below)
    """``a * d[:, None]`` / ``a * d[None, :]``: ``contract[ab,a->ab]`` / ``[ab,b->ab]`` of the sparse argument
    and a dense vector argument of its dtype, into the sparse argument's format."""
    out = node.type
    if node.op != "contract" or d.is_sparse or d.ndim != 1 or d.dtype != t.dtype or out.dtype != t.dtype:
        return None
    params = node.params[0]
    if params.scale is not None or len(params.inputs) != 2 or params.output != params.inputs[0]:
        return None
    subs, vec = params.inputs
    if len(subs) != 2 or subs[0] == subs[1] or vec not in subs or out.format != t.format or out.shape != t.shape:
        return None
    if np.dtype(t.dtype).kind not in "fiu" or t.dtype == "float16":
        return None                    # a complex product rounds differently in MLIR's and NumPy's arithmetic
    return Form("row_scale" if vec == subs[0] else "column_scale", k, t, out, vector=j, vector_type=d)


def _summable(dtype: str, out: str) -> bool:
    """Sums NumPy computes in ``out`` as the traced type says: the same dtype, or a bool / narrower integer
    summed as int64 (``a.sum(dtype=...)`` otherwise keeps the MLIR kernel)."""
    if dtype == out:
        return not dtype.startswith("float16")
    return out == "int64" and dtype in ("bool", "int8", "int16", "int32")


def _maps_exactly(expr, t: TensorType, out: TensorType) -> bool:
    """Whether ``evaluate`` gives the MLIR kernel's values for ``expr`` and keeps zeros zero."""
    dtype = np.dtype(t.dtype)
    if dtype.kind not in "fciu" or dtype == np.float16:
        return False
    if expr[0] == "cast":
        # a conversion IEEE rounds the same in both (to nearest): float to float, an integer to a float; not
        # a float to an integer (NaN and out-of-range values differ) nor complex
        target = np.dtype(expr[2]) if isinstance(expr[2], str) else None
        if expr[1] != ("arg", 0) or target is None or target.name != out.dtype or target.kind != "f" \
                or target == np.float16 or dtype.kind not in "fiu":
            return False
    elif expr[0] in _COMPARE:
        if out.dtype != "bool" or dtype.kind == "c" and expr[0] not in ("eq", "ne"):
            return False
        x, c = expr[1], expr[2]
        if x != ("arg", 0) or c[0] != "const" or not isinstance(c[1], (int, float)) or isinstance(c[1], bool):
            return False
        if dtype.kind in "iu" and not isinstance(c[1], int):
            return False               # an integer against a float compares in float64
        try:
            exact = dtype.type(c[1]) == c[1]     # the constant as the operand's dtype compares it
        except (OverflowError, ValueError):
            return False
        if not exact:
            return False
    else:
        if out.dtype != t.dtype or not _exact_tree(expr, dtype):
            return False
    with np.errstate(all="ignore"):
        zero = evaluate(expr, np.zeros(1, dtype=dtype), np.dtype(out.dtype))
    return not zero.any()


def _exact_tree(expr, dtype: np.dtype) -> bool:
    head = expr[0]
    if head == "arg":
        return expr[1] == 0
    if head == "const":
        v = expr[1]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or (dtype.kind not in "fc" and not isinstance(v, int)):
            return False
        try:
            dtype.type(v)              # -1 of an unsigned dtype: NumPy refuses it (the MLIR kernel then runs)
        except (OverflowError, ValueError):
            return False
        return True
    if head in ("add", "sub", "mul"):
        if head == "mul" and dtype.kind == "c" and "const" not in (expr[1][0], expr[2][0]):
            return False               # a complex product's rounding differs between MLIR's and NumPy's
        return len(expr) == 3 and _exact_tree(expr[1], dtype) and _exact_tree(expr[2], dtype)
    if head == "div":                  # a complex quotient: MLIR's and NumPy's formulas differ at Inf / NaN
        return dtype.kind == "f" and isinstance(expr[2], (int, float)) and not isinstance(expr[2], bool) \
            and _exact_tree(expr[1], dtype)
    if head == "pow":
        return dtype.kind != "c" and isinstance(expr[2], int) and 1 <= expr[2] <= 64 and _exact_tree(expr[1], dtype)
    if head in ("neg", "conj"):
        return _exact_tree(expr[1], dtype)
    if head == "abs":                  # a complex magnitude is a hypot, whose libraries differ
        return dtype.kind != "c" and _exact_tree(expr[1], dtype)
    if head == "square":
        return dtype.kind != "c" and _exact_tree(expr[1], dtype)
    if head in _EXACT_UNARY:
        return (dtype.kind == "f" or (head == "sign" and dtype.kind == "i")) and _exact_tree(expr[1], dtype)
    if head in _LIBM_UNARY:
        return dtype in (np.float32, np.float64) and _exact_tree(expr[1], dtype)
    return False


def evaluate(expr, x: np.ndarray, dtype: np.dtype):
    """``expr`` over the values ``x`` in ``dtype``, operation by operation as the MLIR kernel evaluates it."""
    head = expr[0]
    if head == "arg":
        return x
    if head == "const":
        return dtype.type(expr[1])
    if head in _COMPARE:
        return _COMPARE[head](x, x.dtype.type(expr[2][1]))
    if head == "cast":
        return x.astype(expr[2])
    if head == "add":
        return np.add(evaluate(expr[1], x, dtype), evaluate(expr[2], x, dtype))
    if head == "sub":
        return np.subtract(evaluate(expr[1], x, dtype), evaluate(expr[2], x, dtype))
    if head == "mul":
        return np.multiply(evaluate(expr[1], x, dtype), evaluate(expr[2], x, dtype))
    if head == "div":
        return np.true_divide(evaluate(expr[1], x, dtype), dtype.type(expr[2]))
    if head == "pow":
        base = evaluate(expr[1], x, dtype)
        result = base
        for _ in range(expr[2] - 1):       # the lowering's repeated products, in its order
            result = np.multiply(result, base)
        return result
    if head == "neg":
        return np.negative(evaluate(expr[1], x, dtype))
    if head == "conj":
        return np.conjugate(evaluate(expr[1], x, dtype))
    if head == "abs":
        return np.absolute(evaluate(expr[1], x, dtype))
    if head == "square":
        base = evaluate(expr[1], x, dtype)
        return np.multiply(base, base)
    if head in _LIBM_UNARY:
        return _LIBM_UNARY[head](evaluate(expr[1], x, dtype))
    return _EXACT_UNARY[head](evaluate(expr[1], x, dtype))


def runner(form: Form):
    """``run(args, threads) -> result`` for ``form``: ``args`` holds the one argument, a checked
    SparseTensor of ``form.type`` (the dispatcher's ``arguments.prepare``)."""
    out_dtype = np.dtype(form.out.dtype)
    shape = form.type.shape
    major = shape[compressed_order(form.type.format)[0]]
    size = shape[0] * shape[1]
    if form.kind == "sum":
        same = out_dtype == np.dtype(form.type.dtype)

        def run_sum(args, threads):
            values = args[0].values
            return np.add.reduce(values) if same else np.add.reduce(values, dtype=out_dtype)
        return run_sum
    if form.kind == "mean":
        scale = 1.0 / form.expr[1]         # scipy's: a * (1.0 / count), then the sum

        def scaled(values):
            return values.astype(out_dtype, copy=False) * scale
    else:
        def scaled(values):
            return values

    if form.kind == "mean":
        def run_mean(args, threads):
            with np.errstate(all="ignore"):      # Inf * scale, Inf - Inf: no warning, as in the MLIR kernel
                return np.add.reduce(scaled(args[0].values))
        return run_mean
    if form.kind == "line_sums":
        if out_dtype == np.dtype(form.type.dtype):    # (a dtype= argument takes NumPy's slower casting loop)
            reduceat = np.add.reduceat
        else:
            def reduceat(values, starts):
                return np.add.reduceat(values, starts, dtype=out_dtype)

        def run_line_sums(args, threads):
            with np.errstate(all="ignore"):      # Inf - Inf is NaN without a warning, as in the MLIR kernel
                return line_sums(args[0])

        def line_sums(a):
            indptr, values = a.pos[1], scaled(a.values)
            counts = np.diff(indptr)
            if counts.all():
                return reduceat(values, indptr[:-1].astype(np.intp)) if major else np.zeros(0, dtype=out_dtype)
            out = np.zeros(major, dtype=out_dtype)
            lines = np.flatnonzero(counts)
            if len(lines):
                out[lines] = reduceat(values, indptr[lines].astype(np.intp))
            return out
        return run_line_sums
    if form.kind in ("max", "min"):
        ufunc = np.maximum if form.kind == "max" else np.minimum
        zero = out_dtype.type(0)

        def run_extremum(args, threads):
            values = args[0].values
            if len(values) == 0:
                return zero
            m = ufunc.reduce(values)
            return ufunc(zero, m) if len(values) < size else m
        return run_extremum
    if form.kind in ("diagonal", "trace"):
        csr_diagonal = _csr_diagonal()
        total = form.kind == "trace"
        m, n = shape
        csr = compressed_order(form.type.format) == (0, 1)

        def run_diagonal(args, threads):
            a = args[0]
            out = np.empty(min(m, n), dtype=out_dtype)
            if csr:
                csr_diagonal(0, m, n, a.pos[1], a.crd[1], a.values, out)
            else:
                csr_diagonal(0, n, m, a.pos[1], a.crd[1], a.values, out)
            return np.add.reduce(out) if total else out
        return run_diagonal
    fmt = form.out.format
    import scipy.sparse as sps

    # the scipy result made directly over the new arrays (scipy's constructor checks in Python: ~10 us, a
    # third of the whole call on a 20k-entry matrix); SparseTensor.to_scipy where no builder is registered
    build = providers.result_builder("csr")
    cls = sps.csr_array if compressed_order(fmt) == (0, 1) else sps.csc_array

    if form.kind == "view":
        def run_view(args, threads):
            a = args[0]
            if build is not None:
                # scipy finds out whether the indices are sorted (an operand's arrays may be changed in place
                # between calls, and a view, as scipy's A.T, shows them as they are)
                return build(cls, a.values, a.crd[1], a.pos[1], shape, None)
            return SparseTensor.from_buffers(shape, fmt, [None, a.pos[1]], [None, a.crd[1]], a.values,
                                             validate=False).to_scipy()
        return run_view
    if form.kind == "restore":
        from splyce.native import transpose as native_transpose

        rows, cols = shape if compressed_order(form.type.format) == (0, 1) else shape[::-1]
        shape = form.out.shape

        def run_restore(args, threads):
            a = args[0]
            values, crd, pos = native_transpose.transpose(a.values, a.crd[1], a.pos[1], rows, cols, threads)
            if build is not None:
                return build(cls, values, crd, pos, shape, True)
            return SparseTensor.from_buffers(shape, fmt, [None, pos], [None, crd], values, validate=False).to_scipy()
        return run_restore
    if form.kind in ("row_scale", "column_scale"):
        major_scale = (form.kind == "row_scale") == (compressed_order(fmt) == (0, 1))

        def values_of(args):
            a, d = args
            factors = np.repeat(d, np.diff(a.pos[1])) if major_scale else d[a.crd[1]]
            return np.multiply(a.values, factors)
    else:
        expr = form.expr

        def values_of(args):
            return np.asarray(evaluate(expr, args[0].values, out_dtype), dtype=out_dtype)

    def run_map(args, threads):
        a = args[0]
        # results of 1 MiB or more from the cache of freed buffers (native/memory_pool.py), as the MLIR
        # kernel's and the drop-ins' are: a loop of calls reuses backed pages instead of faulting fresh ones
        pooled = memory_pool.active() if a.values.nbytes >= memory_pool.POOL_MIN else contextlib.nullcontext()
        with pooled, np.errstate(all="ignore"):
            values = values_of(args)
            if values is a.values:           # the identity map: a result never shares an argument's buffers
                values = values.copy()
            pos, crd = [None, a.pos[1].copy()], [None, a.crd[1].copy()]
        if build is not None:
            return build(cls, values, crd[1], pos[1], shape, True)
        return SparseTensor.from_buffers(shape, fmt, pos, crd, values, validate=False).to_scipy()
    return run_map
