"""The one module that chooses the kernel: which native kernel (or the MLIR kernel) computes a product or an
elementwise op, for the drop-ins, the jit and Dask alike.

- The drop-ins and ``splyce.dask`` ask by the operands' facts (``choose_matmul_formulation``,
  ``choose_elementwise_formulation``, ``choose_einsum_formulation``): anything with ``sparse``, ``shape``,
  ``layout`` and ``dtype`` attributes (the drop-ins' ``OperandInfo``).
- The jit asks by the plan: ``library_op`` writes a plan's step over its arguments as a drop-in call,
  ``jit_choice`` decides the native formulation that computes it bit for bit as the MLIR kernel would (or
  None: the MLIR kernel runs), ``native_step_wanted`` whether an intermediate product of a longer program is
  taken out of the kernel. runtime/library.py orders the questions (a one-op form first: runtime/forms.py) and
  the drop-ins' provider (dropin/jit_library.py) builds the call for the choice made here.
- SpMV's own loop (flat, grouped, one row at a time) is native/spmv.py's ``spmv_variant``, asked from here.

Nothing here runs a kernel: each answer is a decision from shapes, formats, dtypes and options, never values.
"""

from __future__ import annotations

import enum

import numpy as np

from splyce.native import spmv
from splyce.native.ir_text import VALUE
from splyce.native.records import record
from splyce.planner.unordered import is_unordered_csr
from splyce.tensors.formats import Format, compressed_order
from splyce.tracer.ir import ContractParams, Node, TensorType

# the stored formats whose products with a dense operand run on their own buffers (``OperandInfo.layout``;
# dropin/stored_formats.py)
STORED_LAYOUTS = frozenset({"coo", "dia", "bsr", "gcxs"})


def native_values(*infos) -> bool:
    """Whether the native kernels (splyce/native/*.py) compute in the operands' common value dtype
    (float64 / float32 / int64 / int32; bool and complex go through the sparsifier's kernels)."""
    dtypes = [i.dtype for i in infos if i.dtype is not None]
    return not dtypes or np.result_type(*dtypes) in VALUE


class Formulation(enum.Enum):
    """How a drop-in ``a @ b`` is computed (``choose_matmul_formulation`` picks one)."""

    NUMPY = "numpy"                      # both dense: NumPy's own product
    SPARSE_TIMES_DENSE = "csr-x-dense"   # A CSR, rows times a dense operand (SpMV / SpMM), MLIR kernel
    STORED_TIMES_DENSE = "stored-x-dense"  # A in its own stored format (COO, DIA, BSR, GCXS) times a dense
                                           # operand, on its buffers as they are: native (dropin/stored_formats.py)
    DENSE_TIMES_SPARSE = "dense-x-csr"   # dense rows times B CSR, MLIR kernel
    SCATTER_VECTOR = "scatter-vector"    # sparse vector operand scattered dense in O(n), then SpMV
    SCATTER_CSC = "csc-x-vector"         # a matrix stored by columns (a CSC, a CSR's transpose) times a vector:
                                         # each column's entries added into the result's rows, native
    GUSTAVSON_SPARSE = "gustavson-spa"   # CSR x CSR -> CSR, per-row sparse accumulator, O(flops), native
    GUSTAVSON_DENSE = "gustavson-dense"  # CSR x CSR -> dense result (asked for), MLIR kernel
    MASKED_GUSTAVSON = "masked-gustavson"  # einsum M * (A @ B), all sparse: mask-driven Gustavson, native
    SDDMM = "sddmm"                      # einsum M * (X @ Y.T), M sparse, X / Y dense: dots on M's entries, native
    MERGE_ROWS = "merge-rows"            # elementwise CSR op CSR -> CSR, one branch-free merge per row, native
    SPARSIFIER = "sparsifier"            # a product through the MLIR sparsifier's kernel: value types the
                                         # native kernels lack (bool, complex)
    MASKED_SUM = "masked-sum"            # einsum "ij,jk,ik->" of three sparse matrices (triangles), native
    COITERATE = "coiterate"              # elementwise through the MLIR kernel (any rank, dense operands)
    DENSE_SUM = "dense-sum"              # a sparse and a dense matrix added / subtracted: scipy's dense result


def wants_sparse_result(a, b, out_format) -> bool:
    return (out_format == "sparse" or isinstance(out_format, Format)) or (
        out_format is None and a.sparse and b.sparse and len(a.shape) == len(b.shape) == 2)


def choose_matmul_formulation(a, b, out_format=None) -> Formulation:
    """The one place the drop-in ``matmul`` decides how to compute ``a @ b``: each index is iterated from one
    operand and looked up or scattered in the other, never co-iterated (no intersection is needed)."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if not native_values(a, b) and len(a.shape) == 2 and (b.sparse and len(b.shape) == 2 or not b.sparse):
        return Formulation.SPARSIFIER if a.sparse else Formulation.DENSE_TIMES_SPARSE
    if a.sparse and b.sparse:
        if len(b.shape) == 1 or (len(b.shape) == 2 and b.shape[1] == 1 and len(a.shape) == 2) \
                or len(a.shape) == 1:
            return Formulation.SCATTER_VECTOR
        if wants_sparse_result(a, b, out_format):
            return Formulation.GUSTAVSON_SPARSE
        return Formulation.GUSTAVSON_DENSE
    if a.sparse and a.layout in STORED_LAYOUTS and len(a.shape) == 2:
        return Formulation.STORED_TIMES_DENSE
    return Formulation.SPARSE_TIMES_DENSE if a.sparse else Formulation.DENSE_TIMES_SPARSE


def choose_elementwise_formulation(a, b, out_format=None,
                                   name: str = "multiply") -> Formulation:
    """The one place the drop-in ``multiply`` / ``add`` / ``subtract`` decides how to compute: two sparse
    matrices with a sparse result merge their rows natively; anything else runs the coiteration kernel."""
    if not (a.sparse or b.sparse):
        return Formulation.NUMPY
    if a.sparse and b.sparse and len(a.shape) == 2 and out_format in (None, "sparse") \
            and (native_values(a, b) or _bool_pattern(name, a, b)):
        return Formulation.MERGE_ROWS
    if name != "multiply" and a.sparse != b.sparse and len(a.shape) == 2 and out_format in (None, "dense"):
        return Formulation.DENSE_SUM
    return Formulation.COITERATE


def _bool_pattern(name: str, a, b) -> bool:
    """A product or sum of two bool matrices: the merge's AND / OR kernels (the jit's too, every position kept
    there; scipy's rule here: a False result is not stored). NumPy has no bool difference: that call goes to
    the coiteration kernel, which says so."""
    return name in ("multiply", "add") and a.dtype == np.bool_ and b.dtype == np.bool_


def choose_einsum_formulation(inputs: list[str], output: str, infos: list,
                              out_format=None) -> tuple[Formulation, tuple[int, ...]]:
    """The one place the drop-in ``einsum`` decides how to compute, and the operand roles: a product whose
    result lies on a sparse operand's positions (``"ik,kj,ij->ij"``: masked SpGEMM; ``"ij,ik,jk->ij"`` with
    dense ``ik``, ``jk``: SDDMM) runs natively in O(work) with the mask's positions as result, returned as
    ``(formulation, (mask, left, right))``; anything else runs the traced einsum kernel (``()``)."""
    if len(inputs) != 3 or len(output) != 2 or output[0] == output[1] or out_format not in (None, "sparse"):
        return Formulation.COITERATE, ()
    i, j = output
    for mask in range(3):
        if inputs[mask] != output or not infos[mask].sparse or len(infos[mask].shape) != 2:
            continue
        p, q = (x for x in range(3) if x != mask)
        for left, right in ((p, q), (q, p)):
            a, b = inputs[left], inputs[right]
            if len(a) != 2 or len(b) != 2 or a[0] != i or a[1] in output:
                continue
            k = a[1]
            native = native_values(*infos)   # else the sparsifier's kernel, fused on the mask's positions
            if infos[left].sparse and infos[right].sparse and b == k + j:
                return Formulation.MASKED_GUSTAVSON if native else Formulation.SPARSIFIER, (mask, left, right)
            if not infos[left].sparse and not infos[right].sparse and b == j + k:
                return Formulation.SDDMM if native else Formulation.SPARSIFIER, (mask, left, right)
    return Formulation.COITERATE, ()


def is_masked_sum(inputs: list[str], output: str, infos: list) -> bool:
    """``"ij,jk,ik->"`` (up to the letters: triangle counting with L three times), all three operands sparse
    matrices of one value dtype the native kernels compute in."""
    if output or len(inputs) != 3 or any(len(s) != 2 for s in inputs):
        return False
    (i, j), (j2, k), (i2, k2) = inputs
    if not (i == i2 and j == j2 and k == k2 and len({i, j, k}) == 3):
        return False
    dtypes = {info.dtype for info in infos}
    return all(info.sparse and len(info.shape) == 2 for info in infos) and len(dtypes) == 1 \
        and native_values(*infos)


# -- the jit: a plan's step as a drop-in op, and the native kernel that computes it as the MLIR kernel would ----
@record
class LibraryOp:
    """A plan's one step written as a drop-in call: ``op(*args[operands], ...)``."""

    op: str                      # "matmul" | "multiply" | "add" | "subtract" | "einsum"
    subscripts: str | None       # einsum's subscripts, else None
    operands: tuple[int, ...]    # the function's arguments, in call order
    types: tuple[TensorType, ...]
    out: TensorType
    order: str | None = None     # a contraction's loop order, outermost first (it fixes the sum's order)
    # set when the operands are the call's arguments read as they are (nothing prepared): the argument each
    # reads, and whether transposed (a CSR argument's own buffers as its transpose's CSC, not re-stored)
    reads: tuple[int, ...] | None = None
    transposed: tuple[bool, ...] = ()   # a matmul's: (True, False) when the matrix's buffers hold its columns
    # an elementwise op whose operands and result the plan stores in column order (CSC): computed on the
    # transposes, whose CSR buffers those are (``a.T * b`` of CSR arguments: ``(a * b.T).T``); ``transposed``
    # then says which operand's buffers are in the other order than that frame's
    columns: bool = False


def _is_compressed_2d(t: TensorType, order: tuple[int, int]) -> bool:
    """A canonical CSR (``order`` (0, 1)) or CSC ((1, 0)) type: a dense then a compressed level, unique and
    ordered, stored in ``order``."""
    return t.ndim == 2 and t.format is not None and compressed_order(t.format) == order


def is_csr(t: TensorType) -> bool:
    return _is_compressed_2d(t, (0, 1))


def is_csc(t: TensorType) -> bool:
    return _is_compressed_2d(t, (1, 0))


def is_sparse_vector(t: TensorType) -> bool:
    f = t.format
    return t.ndim == 1 and f is not None and tuple(level.kind for level in f.levels) == ("compressed",)


def library_op(step: Node, inputs: tuple[TensorType, ...]) -> LibraryOp | None:
    """``step`` (a plan's node over the kernel's inputs ``inputs``) as a drop-in call, when every operand is an
    input and the form is one the drop-ins run; None otherwise."""
    if not step.args or any(a.op != "input" for a in step.args):
        return None
    operands = tuple(a.params[0] for a in step.args)
    types = tuple(inputs[i] for i in operands)
    out = step.type
    if step.op == "ewise":
        expr = step.params[0]
        if len(operands) == 2 and expr in (("mul", ("arg", 0), ("arg", 1)), ("add", ("arg", 0), ("arg", 1)),
                                           ("sub", ("arg", 0), ("arg", 1))):
            name = {"mul": "multiply", "add": "add", "sub": "subtract"}[expr[0]]
            for columns, stored in ((False, is_csr), (True, is_csc)):
                if all(stored(t) for t in types) and types[0].shape == types[1].shape and stored(out):
                    return LibraryOp(name, None, operands, types, out, columns=columns)
        return None
    if step.op != "contract":
        return None
    params: ContractParams = step.params[0]
    if params.scale is not None:
        return None
    subs = ",".join(params.inputs) + "->" + params.output
    if len(operands) == 2:
        (x, y), o = params.inputs, params.output
        if len(x) == 2 and len(y) == 1 and not types[1].is_sparse and not out.is_sparse and (
                (is_csr(types[0]) and (y, o) == (x[0], x[1])) or (is_csc(types[0]) and (y, o) == (x[1], x[0]))):
            # ``a.T @ z`` of a CSR ``a`` (``ki,k->i``), or a CSC times a vector: buffers stored by the product's
            # columns, each scattering its entries into the result (the drop-in's CSC x vector kernel)
            return LibraryOp("matmul", None, operands, types, out, transposed=(True, False))
        if len(x) == 1 and len(y) == 2 and not types[0].is_sparse and not out.is_sparse and (
                (is_csr(types[1]) and (x, o) == (y[0], y[1])) or (is_csc(types[1]) and (x, o) == (y[1], y[0]))):
            # ``z @ a`` of a CSR ``a`` (``k,kj->j``; of a CSC, ``einsum("j,kj->k", z, a)``): the forms above with
            # the matrix operand second
            return LibraryOp("matmul", None, operands[::-1], types[::-1], out, transposed=(True, False))
        product = len(x) == 2 and y[:1] == x[1:] and x[1] not in o and o == x[0] + y[1:]
        if not (product and is_csr(types[0])):
            return None
        if not types[1].is_sparse and not out.is_sparse:
            return LibraryOp("matmul", None, operands, types, out)                  # SpMV / SpMM
        if is_sparse_vector(types[1]) and not out.is_sparse:
            return LibraryOp("matmul", None, operands, types, out)                  # SpMSpV
        if is_csr(types[1]) and (is_csr(out) or is_unordered_csr(out)):
            return LibraryOp("matmul", None, operands, types, out)                  # Gustavson SpGEMM
        return None
    if len(operands) == 3 and (out.ndim == 0 or is_csr(out)):
        if all(is_csr(t) or not t.is_sparse for t in types):
            return LibraryOp("einsum", subs, operands, types, out, params.order)    # masked / SDDMM / triangles
    return None


@record
class JitChoice:
    """The native formulation that computes a jitted ``LibraryOp`` bit for bit as the MLIR kernel would, and
    its parameters; the drop-ins' provider (dropin/jit_library.py) builds the call from it."""

    formulation: Formulation
    label: str                       # the plan's text names the formulation so (LibraryCall.formulation)
    detail: str = ""
    roles: tuple = ()                # three-operand einsums: ((role, operand index), ...)
    factors: str = ""                # the roles in operand order (the multiplications' order)


@record
class _Facts:
    """A traced operand as the drop-ins' formulation rules read it (``OperandInfo``'s attributes)."""

    sparse: bool
    shape: tuple
    dtype: np.dtype
    layout: str | None = None


# The drop-ins' native kernels follow scipy's rules, the jit's MLIR kernels the sparsifier's: a union or
# intersection result stores every coiterated position where scipy drops zero results and keeps NaN times a
# missing entry, and SpGEMM / masked products / SDDMM differ in stored zeros or summation order. A native kernel
# serves the jit only where its results are the MLIR kernel's on every input, special values included (equal
# bits, but for the sign of a NaN, which depends on operand order in the hardware; tests/runtime/test_one_engine.py):
# SpMV, SpMM, SpMSpV, the elementwise ops through their ``keep_zeros`` variants (native/elementwise/kept.py: the
# sparsifier's coiteration on the drop-in's kernels), and the sparsifier's own variants of SpGEMM, masked
# SpGEMM, the masked sum (triangles) and SDDMM (every reached position kept, the sparsifier's summation and
# multiplication order).
_ELEMENTWISE = ("multiply", "add", "subtract")


def jit_choice(op: LibraryOp, options) -> JitChoice | None:
    """The native formulation for a jitted plan's one drop-in op (``library_op``), or None: the MLIR kernel.
    The decision is the drop-ins' own (``choose_*_formulation`` on the operands' types), narrowed to the
    kernels whose results are the MLIR kernel's bit for bit."""
    if len({t.dtype for t in op.types}) != 1 or op.out.dtype != op.types[0].dtype:
        return None              # mixed or promoted value types: the jit's kernel (NumPy's promotion there)
    infos = [_Facts(t.is_sparse, t.shape, np.dtype(t.dtype)) for t in op.types]
    if op.op == "matmul" and op.transposed[:1] == (True,):
        # a matrix stored by the product's columns times a vector: the drop-in's CSC x vector scatter, in the
        # MLIR kernel's order (columns ascending, each row's sum from +0.0); one thread, as the drop-in's
        from splyce.native import spmv_scatter

        if not spmv_scatter.supported(op.out.dtype):
            return None
        return JitChoice(Formulation.SCATTER_CSC, Formulation.SCATTER_CSC.value)
    if op.op == "matmul" and not op.out.is_sparse:
        formulation = choose_matmul_formulation(*infos)
        if formulation not in (Formulation.SPARSE_TIMES_DENSE, Formulation.SCATTER_VECTOR):
            return None
        if op.types[1].ndim == 2 and op.types[1].shape[1] > spmv.SPMM_FIXED:
            # SpMM beyond the columns the native kernel keeps in registers: the MLIR kernel is faster (2-core
            # Zen 4 VM, 2026-12-06, thread CPU, median of 9, 64 columns: native 0.79x / 0.83x / 0.94x its time
            # on fem3d-100k / ba-100k / road-700)
            return None
        return JitChoice(formulation, formulation.value)
    if op.op in _ELEMENTWISE:
        return _elementwise_choice(op, options)
    if op.op == "matmul" and op.out.is_sparse and native_values(*infos):
        # Gustavson's product keeping every reached position (zero sums too): the sparsifier's result; each
        # entry sums from +0.0 over k in A's row order, as its i, k, j loop nest does. Rows sorted where the
        # result's format is ordered (an explicit out_format=splyce.CSR), else as the drop-in writes them.
        if is_csr(op.out):
            return JitChoice(Formulation.GUSTAVSON_SPARSE, "gustavson-spa, every position kept, rows sorted")
        return JitChoice(Formulation.GUSTAVSON_SPARSE, Formulation.GUSTAVSON_SPARSE.value)
    if op.op == "einsum":
        return _einsum_choice(op, infos)
    return None


def _elementwise_choice(op: LibraryOp, options) -> JitChoice | None:
    """Two CSRs (one of them maybe a transposed argument) with a CSR result of their dtype: the drop-in's
    elementwise kernels with every coiterated position kept. Not when the jit was asked for the MLIR kernel's
    own lanes (``union=``, ``gallop=``): those options choose among MLIR loops the native kernel does not have."""
    from splyce.native.elementwise import keep_supported
    from splyce.options import DEFAULT_GALLOP_RATIO

    dtype = np.dtype(op.out.dtype)
    if not keep_supported(dtype) or (dtype == np.bool_ and op.op == "subtract"):
        return None
    if options.union is not None or options.gallop != DEFAULT_GALLOP_RATIO:
        return None
    if op.transposed == (True, True) or (op.transposed[:1] == (True,) and op.op == "subtract"):
        return None                   # a.T - b: the difference does not commute
    widths = {(t.format.pos_width, t.format.crd_width) for t in op.types + (op.out,)}
    if len(widths) != 1 or (any(op.transposed) and len(set(widths.pop())) != 1):
        return None                   # the kernels take one index dtype per operand pair (a CSC pass: one in all)
    detail = "every coiterated position kept"
    if op.columns:
        detail += "; in column order: computed on the transposes (their CSR buffers), the result a CSC"
    if any(op.transposed):
        detail += "; the transpose read as its argument's CSC, one pass with a cursor per column, not re-stored"
    return JitChoice(Formulation.MERGE_ROWS, Formulation.MERGE_ROWS.value, detail)


# The plan's loop order ``o1 o2 o3`` fixes a three-operand einsum's sum order, the einsum's operand order the
# order of each term's multiplications (``(x0 * x1) * x2``, lowering/to_mlir.py). The native kernels loop rows
# ``o1``, then a CSR row over ``o2``, then ``o3``: an operand is read in the role its subscripts give (``o1
# o2``: A, ``o2 o3``: B, ``o1 o3``: the mask), and ``factors`` tells each kernel the roles in operand order.
def _einsum_choice(op: LibraryOp, infos: list) -> JitChoice | None:
    """Masked SpGEMM ``(l @ l) * l``, the triangle sum ``((l @ l.T) * l).sum()`` or SDDMM ``m * (x @ y.T)``,
    each computed as the sparsifier's kernel computes the planned einsum."""
    if len(op.types) != 3 or not native_values(*infos):
        return None
    sparse = [t.is_sparse for t in op.types]
    if all(sparse) and all(is_csr(t) for t in op.types):
        found = _roles(op, {"a": (0, 1), "b": (1, 2), "m": (0, 2)}, ((), (0, 2)))
        if found is None:
            return None
        if op.out.ndim == 0:
            return JitChoice(Formulation.MASKED_SUM, Formulation.MASKED_SUM.value, roles=found[0],
                             factors=found[1])
        if not is_csr(op.out):
            return None
        return JitChoice(Formulation.MASKED_GUSTAVSON, "masked-gustavson, reached positions kept", roles=found[0],
                         factors=found[1])
    if sparse.count(True) == 1 and op.out.ndim == 2 and is_csr(op.out):
        found = _sddmm_roles(op)
        if found is None:
            return None
        roles = dict(found[0])
        if not is_csr(op.types[roles["m"]]) or op.types[roles["x"]].shape[1] == 0:
            return None           # (no column: no term reaches a position, the MLIR kernel's empty result)
        return JitChoice(Formulation.SDDMM, "sddmm, every mask position kept", roles=found[0], factors=found[1])
    return None


def _roles(op: LibraryOp, names: dict, results: tuple) -> tuple[tuple, str] | None:
    """``((role, operand index), ...)`` and the roles in operand order, for ``names`` = ``{role: (letter
    positions in the loop order)}``; None unless every operand takes exactly one role and the output's letters
    are at one of the ``results`` positions in the loop order."""
    inputs, output = op.subscripts.split("->")
    inputs = inputs.split(",")
    order = op.order
    if order is None or len(order) != 3 or len(set(order)) != 3 or any(len(s) != 2 for s in inputs):
        return None
    want = {role: order[p] + order[q] for role, (p, q) in names.items()}
    roles = {}
    for n, subs in enumerate(inputs):
        hits = [role for role, w in want.items() if w == subs]
        if len(hits) != 1 or hits[0] in roles:
            return None
        roles[hits[0]] = n
    if len(roles) != 3 or output not in ["".join(order[p] for p in at) for at in results]:
        return None
    return tuple(sorted(roles.items())), "".join(next(r for r, n in roles.items() if n == k) for k in range(3))


def _sddmm_roles(op: LibraryOp) -> tuple[tuple, str] | None:
    """SDDMM's roles: the mask ``ij`` (the sparse operand), ``x`` = ``ik``, ``y`` = ``jk``, the result ``ij``,
    rows ``i`` outermost. Loops ``i, j, k`` and ``i, k, j`` (the planner takes either) sum each entry alike:
    over ``k`` ascending from the workspace's +0.0."""
    inputs, output = op.subscripts.split("->")
    inputs = inputs.split(",")
    mask = next(n for n, t in enumerate(op.types) if t.is_sparse)
    if op.order is None or any(len(s) != 2 for s in inputs) or inputs[mask] != output:
        return None
    i, j = output
    k = set(op.order) - {i, j}
    if len(op.order) != 3 or op.order[0] != i or len(k) != 1:
        return None
    k = k.pop()
    want = {"m": i + j, "x": i + k, "y": j + k}
    roles = {r: next((n for n, s in enumerate(inputs) if s == w and (n == mask) == (r == "m")), None)
             for r, w in want.items()}
    if None in roles.values() or len(set(roles.values())) != 3:
        return None
    return tuple(sorted(roles.items())), "".join(next(r for r, n in roles.items() if n == q) for q in range(3))


def native_step_wanted(op: LibraryOp | None, nnz: tuple[int, ...], glue: bool, contracted: bool) -> bool:
    """Whether an intermediate product of a program of several ops (``op``, its ``library_op``) is computed by
    a native call before the kernel rather than as a loop nest inside it (runtime/library.py's
    ``native_steps`` says why, with the measurements): SpMM, an SpMV where the drop-in runs its flat kernel
    (``spmv.goes_flat`` for the stored entries ``nnz`` of the matrix), an SpMV whose result only glue reads
    (``glue``), or one beyond the core's cache whose result contractions read (``contracted``)."""
    if op is None or op.op != "matmul" or op.types[1].is_sparse:
        return False
    if op.types[1].ndim == 2:
        return True
    if op.types[1].ndim != 1:
        return False
    if glue:
        return True
    a = op.types[0]
    if op.operands[0] >= len(nnz):
        return False
    entries, bits, size = nnz[op.operands[0]], a.format.crd_width, np.dtype(a.dtype).itemsize
    return spmv.goes_flat(entries, a.shape[0], bits, size) or (contracted and spmv.beyond_cache(entries, bits, size))


def held_times_dense(node: Node, inputs: tuple[TensorType, ...]) -> tuple[tuple[int, int], str] | None:
    """The jit's choice for an argument held in its own format (a scipy BSR / DIA / COO: tensors/held.py,
    ``TensorType.stored``): ``(operands, formulation)`` when ``node`` is ``a @ z`` (``ik,k->i`` / ``ik,kj->ij``,
    no scale) of such an argument ``a`` and a dense ``z`` of its value dtype, which the native kernel on ``a``'s
    own buffers computes (native/bsr.py, dia.py, coo.py: scipy's sums for that format), with no conversion to
    CSR; None otherwise (then the op reads the argument's CSR, converted once a call: planner/plan.py)."""
    if node.op != "contract" or len(node.args) != 2 or any(a.op != "input" for a in node.args) \
            or node.type.is_sparse:
        return None
    params: ContractParams = node.params[0]
    (x, y), o = params.inputs, params.output
    a, z = (inputs[arg.params[0]] for arg in node.args)
    if params.scale is not None or not a.stored or z.stored or z.is_sparse or len(x) != 2 or x[0] == x[1] \
            or len(y) not in (1, 2) or y[0] != x[1] or o != x[0] + y[1:] or (len(y) == 2 and y[1] in x):
        return None
    if not (a.dtype == z.dtype == node.type.dtype):
        return None
    kind = a.stored.split()[0]
    columns = z.shape[1] if z.ndim == 2 else 1
    return (node.args[0].params[0], node.args[1].params[0]), f"{kind} x dense" + (
        VIA_CSR if held_via_csr(a.stored, columns) else "")


# ``held_times_dense``: where the held argument is converted to CSR inside the call (``Held.times_dense(via_csr=
# True)``: a stable counting sort by rows, so each row's entries keep the held format's summation order, duplicates
# and explicit zeros kept: scipy's bits) and the CSR kernel (native/spmv.py, rows split over the call's threads)
# runs: where the conversion costs less than what the CSR kernel saves over the held one. Measured on the 2-core
# Zen 4 VM (2026-12-08, load 9-11 from other sessions, thread CPU time, best of 7-9, one thread), ``A @ X``
# held / conversion + CSR kernel, the ``bench jit_formats --quick`` matrices:
# - COO (360k rows, 3.6M entries, shuffled): SpMV 12-14 / 57-62 + 9.5 ms; 4 columns 52 / 57 + 27; 16 columns
#   190-200 / 57-62 + 100-108. The held kernel takes ~12 ms a column, the CSR one ~6.2: from 12 columns.
# - BSR of 16 or more entries a block (4 x 4, 90k rows; conversion 3.3-3.9 ms): 8 columns 3.0-3.6 / 5.3;
#   16 7.8-18 / 8-9; 17 31.6 / 9.7; 24 16.8 / 11.9; 32 33-40 / 18-21; 48 73 / 64: from 17 columns. Smaller
#   blocks (3 x 3, 270k rows; conversion 4.7 ms): the held kernel is the CSR one's speed at 8-48 columns
#   (4.5 / 5.2 ... 56 / 63 ms): kept.
# - DIA (5-point, 90k rows): the held kernel is slower than the CSR one (16 columns 1.9-2.7 / 1.4-1.7 ms, 32
#   columns 5.4-5.8 / 3.1-3.6) but the conversion (2.0 ms, every in-range position) eats the gain up to 48
#   columns (7.9 / 2.0 + 7.5): kept.
# SpMV and few columns: every held format beats its conversion (the conversion is 1-5 held SpMVs).
HELD_VIA_CSR_COLUMNS = {"coo": 12, "bsr": 17, "dia": None}
HELD_VIA_CSR_BLOCK = 16    # BSR: blocks of at least this many entries
VIA_CSR = ", via csr"


def held_via_csr(stored: str, columns: int) -> bool:
    """Whether ``A @ X`` of an argument held as ``stored`` (``"coo"``, ``"bsr 4x4"``, ``"dia"``) with ``columns``
    dense columns (1: a vector) runs converted in the call (``HELD_VIA_CSR_COLUMNS``)."""
    kind, *block = stored.split()
    first = HELD_VIA_CSR_COLUMNS.get(kind)
    if first is None or columns < first:
        return False
    if kind == "bsr":
        R, C = (int(d) for d in block[0].split("x"))
        return R * C >= HELD_VIA_CSR_BLOCK
    return True


def held_via_csr_reason(kind: str, result: TensorType) -> str:
    """The plan's words for a held argument that ``held_times_dense`` converts in the call."""
    columns = result.shape[1] if result.ndim == 2 else 1
    return (f"its product with {columns} dense columns runs on the CSR kernel, converted once in the call in the "
            f"{kind}'s own summation order (from {HELD_VIA_CSR_COLUMNS[kind]} columns the conversion costs less "
            "than the CSR kernel saves: kernel_choice.held_via_csr)")
