"""``einsum``: the drop-in for NumPy's einsum on sparse operands: masked products (masked SpGEMM, SDDMM),
the triangle sum on native kernels, repeated indices taken as diagonals, the rest through a jitted kernel.
"""

from __future__ import annotations

import functools
from collections import Counter
import weakref

import numpy as np

from splyce.native import masked_chunks as _masked_chunks, masked_sum_checked as _masked_sum_checked
from splyce.native.array_objects import DATA_OFFSET as _ARRAY_OFFSET   # None: no array read natively by id
from splyce.dropin import diagonals, narrow_dtypes
from splyce.planner import nonfinite as _nonfinite
from splyce.tensors.formats import CSR
from splyce.tensors.validation import check_dtype
from splyce.tensors.tensor import SparseTensor

from splyce.dropin.elementwise import multiply
from splyce.dropin.operands import rowwise_format
from splyce.planner.kernel_choice import Formulation, is_masked_sum, choose_einsum_formulation
from splyce.dropin.kernels import _kernel, _kernels, _threads
from splyce.dropin.operands import OperandInfo, _INT_MAX, _canonical_csr, _converter, operand_family, _nd, scipy_csr_types, sparse_family, _wrap_sparse


# -- einsum ----------------------------------------------------------------------------------------------
class _Einsum:
    """A traced einsum for one subscripts string (hashable, so it keys the kernel cache)."""

    def __init__(self, subscripts: str):
        self.subscripts = subscripts

    def __call__(self, *operands):
        from splyce.tracer.tracer import einsum

        return einsum(self.subscripts, *operands)

    def __eq__(self, other):
        return isinstance(other, _Einsum) and other.subscripts == self.subscripts

    def __hash__(self):
        return hash(("einsum", self.subscripts))


# The longest row of a CSR by its row starts' array, cached by that array's identity (weakly): the O(1) part
# of the small-call rule below. An array changed in place after it was cached only misjudges the thread count
# (never a result: the native calls check and compute on what they are given).
_longest_rows: dict = {}


def _longest_row(indptr) -> int:
    hit = _longest_rows.get(id(indptr))
    if hit is not None and hit[0]() is indptr:
        return hit[1]
    longest = int((indptr[1:] - indptr[:-1]).max(initial=0)) if len(indptr) > 1 else 0
    if len(_longest_rows) >= 256:
        _longest_rows.clear()
    try:
        _longest_rows[id(indptr)] = (weakref.ref(indptr), longest)
    except TypeError:                     # not weakly referenceable: not cached
        pass
    return longest


def small_masked_call(mask_entries: int, a_entries: int, b_indptr) -> bool:
    """Whether a masked product (``"ik,kj,ij->ij"``, the triangle sum) is surely too small to gain from a
    second thread: its work (mask entries plus products, at most ``nnz(A)`` times B's longest row) below
    ``native.masked_chunks.serial_max_work()``, under which the native kernel runs one chunk anyway. Decided
    here before any per-call NumPy pass (the kernel's own check costs 3-8 us, 5-20 % of a call on a 1k-node
    mesh: the default thread count measured 0.81x and 0.92x one thread there, bench default_threads), with
    B's longest row cached per array (``_longest_row``)."""
    limit = _masked_chunks.serial_max_work()
    if a_entries * 8 + mask_entries >= limit:
        return False
    return a_entries * max(_longest_row(b_indptr), 8) + mask_entries < limit


def _masked_product(formulation, roles, operands, threads):
    """Masked SpGEMM or SDDMM (see ``choose_einsum_formulation``): a canonical csr_array on the mask's
    positions, zero results dropped."""
    from splyce.native import masked as native_masked, sddmm as native_sddmm

    mask, left, right = roles
    convert = _converter(threads)
    M = convert(operands[mask], CSR, "mask").tensor
    dtype = np.result_type(*(x.dtype for x in operands))
    m_parts = (M.values.astype(dtype, copy=False), M.crd[1], M.pos[1])
    if formulation is Formulation.MASKED_GUSTAVSON:
        A = convert(operands[left], CSR, "a").tensor
        B = convert(operands[right], CSR, "b").tensor
        if threads > 1 and small_masked_call(len(M.crd[1]), len(A.crd[1]), B.pos[1]):
            threads = 1                   # the small-call rule: no chunking pass, no pool
        parts = [(t.values.astype(dtype, copy=False), t.crd[1], t.pos[1]) for t in (A, B)]
        out = native_masked.masked_spgemm(m_parts, parts[0], parts[1], M.shape[1], dtype, threads)
    else:
        x, y = (np.ascontiguousarray(operands[r], dtype=dtype.newbyteorder("=")) for r in (left, right))
        check_dtype(x.dtype, "x")
        out = native_sddmm.sddmm(m_parts, x, y, dtype, threads)
    return _canonical_csr(out, M.shape)


def einsum(subscripts, *operands, out_format=None, threads=None):
    """NumPy's einsum on sparse and dense operands (no ellipses; up to 4 operands of rank up to 4).

    A product whose result lies on a sparse operand's positions (masked SpGEMM, SDDMM) runs natively in
    O(work) (``choose_einsum_formulation``). Otherwise loops run in the order the indices first appear, and
    every sparse operand is stored in that order (CSR / CSF-like), so each index is iterated from one operand
    and looked up in the others: a row-wise (Gustavson-style) product with dense accumulation, no
    intersection where the expression needs none.

    ``threads`` > 1 with a scalar result (``"ij,jk,ik->"``, triangle counting): each thread sums its rows and
    the partial sums are added, so a float result may differ from one thread's in the last bits, as any
    parallel sum does (one thread: the exact left-to-right sum).
    """
    from splyce.tracer.tracer import parse_einsum

    families = [operand_family(x) for x in operands]
    if all(f == "numpy" for f in families):
        return np.einsum(subscripts, *operands)
    inputs, output = parse_einsum(subscripts, len(operands))
    if diagonals.has_repeats(inputs):     # "ii->i", "ii->": the diagonals first, as NumPy does
        operands, inputs = diagonals.take(operands, inputs, families, out_format is not None)
        return einsum(",".join(inputs) + "->" + output, *operands, out_format=out_format, threads=threads)
    if narrow_dtypes.involved(*operands):
        return narrow_dtypes.call(functools.partial(einsum, subscripts), operands,
                                  dict(out_format=out_format, threads=threads), prune=False)
    default = threads is None
    threads = _threads(threads)
    family = sparse_family(*operands)
    inputs, output = parse_einsum(subscripts, len(operands))
    # the default never changes a bit: a float sum to a scalar is split only where every order of its terms
    # is exact, a masked sum of 0/1 values (triangle counting: counted, ``masked_sum``'s ``exact_only``; the
    # scan for ones runs beside the chunks), otherwise it runs on one thread
    exact_only = default and threads > 1 and not output and _float_values(operands)
    infos = [OperandInfo.of(x, f) for f, x in zip(families, operands)]
    if (len(inputs) == 2 and inputs[0] == output and inputs[1] in (output, output[::-1]) and len(output) == 2
            and len(set(output)) == 2 and infos[0].sparse and infos[1].sparse
            and (inputs[1] == output or hasattr(operands[1], "T"))):
        # a Hadamard product (``"ij,ij->ij"``, ``"ij,ji->ij"`` of a scipy / pydata B): the drop-in multiply,
        # whose result keeps scipy's and NumPy's NaN for a NaN or Inf against a missing entry (the coiterating
        # kernel skips that pair), and runs the native merge (a CSC B.T without a transpose)
        _check_einsum_shapes(inputs, infos)         # (worded by index, not by the transposed shape)
        b = operands[1] if inputs[1] == output else operands[1].T
        return multiply(operands[0], b, out_format=out_format, threads=threads)
    formulation, roles = choose_einsum_formulation(inputs, output, infos, out_format)
    if formulation is Formulation.SPARSIFIER:
        out_format = "sparse"   # a result on the mask's positions, as the native masked products return
    elif formulation is not Formulation.COITERATE:
        _check_einsum_shapes(inputs, infos)
        # (a float sum to a scalar never comes here; were it to, ``exact_only`` keeps it on one thread)
        return _wrap_sparse(_masked_product(formulation, roles, operands, 1 if exact_only else threads), family)
    operands, inputs, subscripts = _sum_lone_dense_letters(subscripts, operands, inputs, output, families)
    order = list(dict.fromkeys("".join(inputs)))
    ops = []
    convert = _converter(threads)
    for i, (x, subs, f) in enumerate(zip(operands, inputs, families)):
        if f == "numpy":
            ops.append(np.ascontiguousarray(x))
        else:
            ops.append(convert(x, rowwise_format(subs, order), f"operand {i}"))
    kernel_threads = 1 if exact_only else threads
    jitted = _kernel("einsum:" + subscripts, _Einsum(subscripts), out_format, kernel_threads,
                     reassociate=kernel_threads > 1 and not output)
    if out_format is None and is_masked_sum(inputs, output, infos):
        summed = _masked_sum(jitted, ops, inputs, threads, exact_only)
        if summed is not None:
            return _numpy_sum(inputs, ops, *summed)
    out = jitted(*ops)
    if not output:
        return _numpy_sum(inputs, ops, out)
    if isinstance(out, np.ndarray):
        if family == "pydata" and out.ndim:
            import sparse

            return sparse.COO.from_numpy(out)      # NumPy's einsum on pydata arrays returns theirs
        return out
    if np.ndim(out) == 2 and hasattr(out, "tocsr"):
        return _wrap_sparse(out, family)
    return out.to_pydata() if family == "pydata" else out


def _sum_lone_dense_letters(subscripts, operands, inputs, output, families):
    """Sum a dense operand over its letters that are in no other operand and not in the result, before the
    kernel, as NumPy's einsum does: ``"ij,jk->"`` with a dense B is ``A``'s entries times B's row sums, not
    each entry times every element of its row (O(nnz + size of B), not O(nnz * columns)), and an Inf in A
    against a zero in B's row is then Inf, as NumPy and pydata-sparse give. Returns the operands, their
    subscripts and the subscripts string."""
    counts = Counter("".join(inputs) + output)
    operands, inputs, changed = list(operands), list(inputs), False
    for n, (x, subs, family) in enumerate(zip(operands, inputs, families)):
        if family != "numpy" or np.ndim(x) != len(subs):
            continue                       # (a subscript / shape mismatch: the tracer words it)
        lone = [d for d, letter in enumerate(subs) if counts[letter] == 1]
        if lone and len(lone) < len(subs):
            x = np.asarray(x)
            operands[n] = np.add.reduce(x, axis=tuple(lone), dtype=x.dtype)
            inputs[n] = "".join(letter for d, letter in enumerate(subs) if d not in lone)
            changed = True
    return operands, inputs, (",".join(inputs) + "->" + output) if changed else subscripts


_plain_plans = weakref.WeakKeyDictionary()   # Kernel -> whether its plan is the loop nest masked_sum runs




def _stored_values(x):
    """The stored values of an operand (scipy / pydata ``.data``, a SparseTensor's ``.values``, an array)."""
    if isinstance(x, np.ndarray):
        return x
    values = getattr(x, "values", None) if type(x) is SparseTensor else getattr(x, "data", None)
    return values if isinstance(values, np.ndarray) else np.asarray(x.toarray() if hasattr(x, "toarray") else x)


def _float_values(operands) -> bool:
    """Whether some operand holds float or complex values (sums of integers and bools are exact in any
    order: wrap-around addition is associative)."""
    return any(_stored_values(x).dtype.kind in "fc" for x in operands)


def _masked_sum(jitted, ops, inputs, threads: int = 1, exact_only: bool = False):
    """``"ij,jk,ik->"`` (rows split across ``threads`` by work, see ``native.masked_sum.masked_sum``). The jitted
    kernel's plan, chosen by cost for the first call of these
    shapes and formats, sets the order of the sum; when it is the plain one (loops i, j, k, every operand kept
    in its CSR, nothing fused: the corpus's triangle counts), the native ``masked_sum`` runs the same sum in
    the same order, bit for bit, without the kernel call's descriptors and results (~0.3 ms on a small
    matrix), as ``(sum, whether every value was proved finite)``; any other plan: None (the caller runs the
    kernel)."""
    from splyce.native import masked_sum as native_masked_sum

    kernel, _ = jitted.kernel_for(*ops)
    plain = _plain_plans.get(kernel)
    if plain is None:
        plain = _plain_plans[kernel] = _plain_masked_sum_plan(kernel.plan, inputs)
    if not plain:
        return None
    A, B, C = (op.tensor for op in ops)
    return native_masked_sum.masked_sum(*((t.values, t.crd[1], t.pos[1]) for t in (A, B, C)), C.shape[1], A.dtype,
                                    threads, with_proof=True, exact_only=exact_only)


def _numpy_sum(inputs, ops, out, values_known_finite: bool = False):
    """A scalar einsum's value with NumPy's NaN / Inf rule for missing entries (``planner.nonfinite``)."""
    sparse = [None if isinstance(op, np.ndarray) else op.tensor for op in ops]
    return _nonfinite.sum_value(inputs, [np.shape(op) if isinstance(op, np.ndarray) else op.tensor.shape
                                        for op in ops], sparse, out, values_known_finite)


_SUM_SUBSCRIPTS: dict = {}    # einsum subscripts -> whether they read "ij,jk,ik->" (up to the letters)
_SUM_FORMATS: dict = {}       # index bits -> the CSR format a checked scipy CSR of that width gets
_SUM_VALUES = frozenset(np.dtype(v) for v in (np.float64, np.float32, np.int64, np.int32))   # native, native order


def _sum_subscripts(subscripts: str) -> bool:
    known = _SUM_SUBSCRIPTS.get(subscripts)
    if known is None:
        from splyce.tracer.tracer import TraceError, parse_einsum

        try:
            inputs, output = parse_einsum(subscripts, 3)
        except TraceError:
            return False                   # the general path words the error
        known = not output and len(inputs) == 3 and all(len(s) == 2 for s in inputs) and \
            inputs[0][0] == inputs[2][0] and inputs[0][1] == inputs[1][0] and inputs[1][1] == inputs[2][1] and \
            len(set(inputs[0] + inputs[1])) == 3
        if len(_SUM_SUBSCRIPTS) < 256:
            _SUM_SUBSCRIPTS[subscripts] = known
    return known


def _sum_parts(x, dtype, idx, rows: int):
    """``(data, indices, indptr)`` of a scipy CSR of ``rows`` rows as the fast triangle sum reads them by id:
    exact ndarrays, 1-D and contiguous, values of a native-kernel dtype (``dtype`` when given), int32 / int64
    indices (``idx`` when given) for both index arrays; else None. Nothing is validated."""
    data, indices, indptr = x.data, x.indices, x.indptr
    if not (type(data) is _nd and type(indices) is _nd and type(indptr) is _nd):
        return None
    vt, it = data.dtype, indices.dtype
    if dtype is None:
        if vt not in _SUM_VALUES or it not in _INT_MAX or not it.isnative:
            return None
    elif vt != dtype or it != idx:
        return None
    if (indptr.dtype != it or len(indptr) != rows + 1 or len(data) != len(indices)
            or data.strides != (vt.itemsize,) or indices.strides != (it.itemsize,)
            or indptr.strides != (it.itemsize,)):
        return None
    return data, indices, indptr


def _fast_masked_sum(subscripts, a, b, c, threads=1):
    """``einsum("ij,jk,ik->", a, b, c)`` on one thread for three exact scipy CSRs (triangle counting passes L
    three times), or None (then the general path runs, which also words any error): one value dtype the native
    kernels compute in, one index dtype, every buffer 1-D and contiguous, and a plain plan already filed for
    these shapes and formats by an earlier general call (the first call of a signature goes the general way;
    another plan runs the kernel there, as before). Then the whole call is one native pass
    (``native.masked_sum_checked.masked_sum_checked``: each distinct operand checked canonical, then the sum), with the
    general path's exact result. On the corpus' small matrices the call is a few hundred microseconds and the
    bench's ``gc.collect()`` before it leaves the caches cold, so each Python step dropped here counts.

    ``threads`` other than 1 (a positive int or None) takes this path too when the work is surely below
    ``native.masked_chunks.serial_max_work()`` (the general path would run it on one thread anyway, after 0.1-0.2 ms
    of its own steps): mask entries plus an upper bound of the products, ``nnz(a)`` times ``b``'s longest row
    (from the row starts' differences, which are not trusted yet: a bad bound only picks the path), or, when
    that bound fails for a small ``a``, the products counted exactly."""
    if type(subscripts) is not str or not _sum_subscripts(subscripts) or _ARRAY_OFFSET is None:
        return None
    if threads is None:                  # the default: the cores idle now; a large float sum leaves for the
        threads = _threads(None)         # general path, which splits it only where no bit changes (einsum)
    elif type(threads) is not int or threads < 1:
        return None                      # the general path words the error
    types = scipy_csr_types()
    if type(a) not in types or type(b) not in types or type(c) not in types:
        return None
    jitted = _kernels.get(("einsum:" + subscripts, None, 1, False))
    if jitted is None and threads != 1:   # the general path's kernel for these threads (sums may reassociate)
        jitted = _kernels.get(("einsum:" + subscripts, None, threads, True))
    if jitted is None:
        return None
    sa, sb, sc = a.shape, b.shape, c.shape
    (m, n1), (n1b, n2), (mc, n2c) = sa, sb, sc
    if n1b != n1 or mc != m or n2c != n2:
        return None
    pa = _sum_parts(a, None, None, m)
    if pa is None:
        return None
    dtype, idx = pa[0].dtype, pa[1].dtype
    if max(m, n1, n2) - 1 > _INT_MAX[idx]:
        return None
    pb = pa if b is a else _sum_parts(b, dtype, idx, n1)
    pc = pa if c is a else pb if c is b else _sum_parts(c, dtype, idx, m)
    if pb is None or pc is None:
        return None
    if threads != 1 and not small_masked_call(len(pc[1]), len(pa[1]), pb[2]):
        # only a small a: bounded by b's longest row first (cached per array: no pass over a's columns); else
        ac, limit = pa[1], _masked_chunks.serial_max_work()      # counted exactly, a's columns checked
        if len(ac) * 8 > limit:                                  # in range first (they index the count; the
            return None                                          # native call checks everything again)
        if len(ac) and (int(ac.min()) < 0 or int(ac.max()) >= n1):
            return None
        if not _masked_chunks.small_masked_work(len(pc[1]), ac, pb[2], limit):
            return None
    fmt = _SUM_FORMATS.get(idx)
    if fmt is None:
        fmt = _SUM_FORMATS[idx] = CSR.with_widths(idx.itemsize * 8, idx.itemsize * 8)
    kernel = jitted.filed_kernel(((sa, dtype, fmt), (sb, dtype, fmt), (sc, dtype, fmt)))
    if kernel is None or not _plain_plans.get(kernel):
        return None
    return _masked_sum_checked.masked_sum_checked(pa, pb, pc, m, n1, n2, b is not a, c is not a and c is not b)


def _plain_masked_sum_plan(plan, inputs: list[str]) -> bool:
    if len(plan.steps) != 1 or plan.fusions or len(plan.sources) != 3 or plan.needs_conversion:
        return False
    step = plan.steps[0]
    params = step.node.params[0] if step.node.op == "contract" else None
    return (params is not None and tuple(params.inputs) == tuple(inputs) and params.output == ""
            and params.order == "".join(dict.fromkeys("".join(inputs))) and step.storage == ("keep",) * 3)


def _check_einsum_shapes(inputs: list[str], infos: list) -> None:
    sizes: dict = {}
    for subs, info in zip(inputs, infos):
        if len(subs) != len(info.shape):
            raise ValueError(f"einsum: subscripts {subs!r} for an operand of shape {info.shape}")
        for letter, size in zip(subs, info.shape):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(f"einsum: index {letter!r} has sizes {sizes[letter]} and {size}")
