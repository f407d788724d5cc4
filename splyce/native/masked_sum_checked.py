"""The whole one-thread masked sum (triangle counting) in one native call: the drop-in's fast path, which checks
each distinct scipy operand canonical in the same call, and the jit's cached call on validated tensors, which
checks nothing (``trusted``). Results are masked_sum.py's, bit for bit."""

from __future__ import annotations

import functools
import threading

import numpy as np

from splyce.native.ir_text import IR, SCALARS, VALUE, each, fill, load_index
from splyce.native.masked import masked_ir
from splyce.native.masked_sum import HIT_SAMPLE_RATE, finite_ir, ones_ir, products_ir

_lock = threading.Lock()

# The whole one-thread triangle sum in one native call, for the drop-in's fast path: each distinct operand
# checked canonical (as ``native_validation.canonical_csr``). Then, when A's first value is one, the hits of
# a sample (the first max(min(m, 64), m / 16) rows) are counted (``masked.masked_ir``'s count) against the sample's
# products: when under 1 in HIT_SAMPLE_RATE of them hit, a hit is rare and predicted, the summing loop's
# branch costs nothing, and it runs over all rows (ba-100k, road graphs: the count was 0.9x there); else, when
# every value of the operands is one (the 0/1 pattern of triangle counting), the count goes on from the
# sample's end (the marks stay valid: rows in increasing order), which is the sum when the value type holds it
# exactly (up to 2**53 in double, 2**24 in float); otherwise the summing loop. The marks are set to -1 before
# each loop over rows from 0. Returns 0, or 1 when an operand is not canonical (the caller's general path
# words it; after a sample only the sample's marks are set back), or 2 when the summing loop ran and a value is
# NaN or Inf (the general path applies NumPy's rule for them, ``planner.nonfinite``; a count needs no scan).
# ``%checks``: bit 0 set to check B, bit 1 to check C (unset for an operand that is A or B itself:
# its checks and its scan for ones are A's). The trusted variant (validated tensors: the jit's cached call)
# checks nothing and reads the same bits only to skip the scans of an operand that is A or B.
_SUM_CHECKED = """
define i64 @{name}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                   ptr %mark, ptr %out, i64 %m, i64 %n1, i64 %n2, i64 %nnza, i64 %nnzb, i64 %nnzc, i64 %checks) {
{checks}first:
  %has = icmp sgt i64 %nnza, 0
  %n_first = zext i1 %has to i64
  %o1 = call i64 @{name}_ones(ptr %av, i64 %n_first)
  %one_first = icmp ne i64 %o1, 0
  %try = and i1 %has, %one_first
  br i1 %try, label %sample, label %sum
sample:
  call void @{name}_unmark(ptr %mark, i64 %n2)
  %small = icmp slt i64 %m, 64
  %least = select i1 %small, i64 %m, i64 64
  %sixteenth = lshr i64 %m, 4
  %big = icmp sgt i64 %sixteenth, %least
  %srows = select i1 %big, i64 %sixteenth, i64 %least
  %shits = call i64 @{count}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                             i64 0, i64 %srows, ptr %mark, ptr %out)
  %sprod = call i64 @{name}_products(ptr %ap, ptr %ac, ptr %bp, i64 %srows)
  %scaled = mul i64 %shits, {rate}
  %rare = icmp ult i64 %scaled, %sprod
  br i1 %rare, label %resum, label %ones
resum:
  call void @{name}_unmark_rows(ptr %cp, ptr %cc, ptr %mark, i64 %srows)
  br label %summing
ones:
{all_ones}
  br i1 %all_ones, label %count, label %sum
count:
  %rhits = call i64 @{count}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                             i64 %srows, i64 %m, ptr %mark, ptr %out)
  %hits = add i64 %shits, %rhits
  %exact = icmp ule i64 %hits, {exact}
  br i1 %exact, label %counted, label %sum
counted:
  %total = {convert} i64 %hits to {t}
  store {t} %total, ptr %out
  ret i64 0
sum:
  call void @{name}_unmark(ptr %mark, i64 %n2)
  br label %summing
summing:
  %r = call i64 @{sum}(ptr %ap, ptr %ac, ptr %av, ptr %bp, ptr %bc, ptr %bv, ptr %cp, ptr %cc, ptr %cv,
                       i64 0, i64 %m, ptr %mark, ptr %out)
{all_finite}
  %code = select i1 %finite, i64 0, i64 2
  ret i64 %code
fail:
  ret i64 1
}

"""
# ``%{result}`` (i1): the scan ``@{name}_{scan}`` holds for A's values and for B's and C's unless they are A's
# (or B's) arrays (``%skip_b`` / ``%skip_c``); ``{q}`` prefixes the value names, ``{n}`` the counts'
_ALL_VALUES = """  %{q}a = call i64 @{name}_{scan}(ptr %av, i64 %nnza)
  %{n}b = select i1 %skip_b, i64 0, i64 %nnzb
  %{q}b = call i64 @{name}_{scan}(ptr %bv, i64 %{n}b)
  %{n}c = select i1 %skip_c, i64 0, i64 %nnzc
  %{q}c = call i64 @{name}_{scan}(ptr %cv, i64 %{n}c)
  %{q}ab = and i64 %{q}a, %{q}b
  %{q}abc = and i64 %{q}ab, %{q}c
  %{result} = icmp ne i64 %{q}abc, 0"""


def _unmark_ir(name, bits, rows: bool):
    """``void name(ptr mark, i64 n)``: ``mark[0:n]`` set to -1; ``rows``: ``void name(ptr cpos, ptr ccrd, ptr mark,
    i64 rows)``, only the marks C's first ``rows`` rows set (after a sample, instead of all n of them: road-700's
    490k marks are 3.9 MB)."""
    ir = IR()
    ir(f"define void @{name}({'ptr %cpos, ptr %ccrd, ptr %mark, i64 %rows' if rows else 'ptr %mark, i64 %n'}) {{")
    ir.label("entry")
    if rows:
        each(ir, "0", load_index(ir, "%cpos", bits, "%rows"),
             lambda e: ir.store("i64", "-1", "%mark", load_index(ir, "%ccrd", bits, e)))
    else:
        each(ir, "0", "%n", lambda j: ir.store("i64", "-1", "%mark", j))
    ir("  ret void")
    ir("}")
    return ir.text()


# A's check, then B's and C's (``x``: b / c), unless its bit of ``%checks`` is clear; each then to block ``next``
_CHECK_A = """entry:
  %ra = call i64 @{check}_canonical(ptr %ap, ptr %ac, i64 %m, i64 %n1, i64 %nnza)
  %bad_a = icmp ne i64 %ra, 0
  br i1 %bad_a, label %fail, label %test_b
"""
_CHECK_OPERAND = """test_{x}:
  %w{x} = and i64 %checks, {bit}
  %skip_{x} = icmp eq i64 %w{x}, 0
  br i1 %skip_{x}, label %{next}, label %check_{x}
check_{x}:
  %r{x} = call i64 @{check}_canonical(ptr %{x}p, ptr %{x}c, i64 %{rows}, i64 %n2, i64 %nnz{x})
  %bad_{x} = icmp ne i64 %r{x}, 0
  br i1 %bad_{x}, label %fail, label %{next}
"""
# operands already validated: no check; which of B and C are A's (or B's) arrays, for the scans
_TRUSTED = """entry:
  %wb = and i64 %checks, 1
  %skip_b = icmp eq i64 %wb, 0
  %wc = and i64 %checks, 2
  %skip_c = icmp eq i64 %wc, 0
  br label %first
"""


def _checks_ir(check: str, trusted: bool) -> str:
    if trusted:
        return _TRUSTED
    return (fill(_CHECK_A, check=check)
            + fill(_CHECK_OPERAND, x="b", bit=1, next="test_c", rows="n1", check=check)
            + fill(_CHECK_OPERAND, x="c", bit=2, next="first", rows="m", check=check))


@functools.cache
def _sum_checked_kernel(value: np.dtype, bits: int, exact: int | None = None, factors: str = "abc",
                        trusted: bool = False):
    """The entry of ``_SUM_CHECKED`` on array objects; ``exact``: the largest count taken as the sum (default:
    the value type's; tests lower it to reach the summing fallback); ``factors``: each term's multiplication
    order (``masked.masked_ir``); ``trusted``: no canonical checks (validated operands)."""
    from splyce.native import array_objects, validation as native_validation
    from splyce.native.codegen import compile_host_helpers

    t = VALUE[value][0]
    name = f"splyce_masked_sum_{'trusted' if trusted else 'checked'}_{t}_i{bits}"
    name += "" if factors == "abc" else f"_{factors}"
    check, total, count = name + "_check", name + "_rows", name + "_count"
    convert, type_exact = SCALARS[value].from_i64, SCALARS[value].exact
    exact = type_exact if exact is None else exact
    text = (("" if trusted else native_validation.canonical_check_ir(check, bits))
            + masked_ir(total, value, (bits,) * 6, "sum", factors)
            + masked_ir(count, value, (bits,) * 6, "count")
            + products_ir(name + "_products", bits)
            + _unmark_ir(name + "_unmark_rows", bits, True) + _unmark_ir(name + "_unmark", bits, False)
            + ones_ir(name + "_ones", value)
            + finite_ir(name + "_finite", value)
            + fill(_SUM_CHECKED, name=name, checks=_checks_ir(check, trusted), sum=total, count=count, t=t,
                   convert=convert, exact=exact, rate=HIT_SAMPLE_RATE,
                   all_ones=fill(_ALL_VALUES, name=name, scan="ones", q="o", n="n", result="all_ones"),
                   all_finite=fill(_ALL_VALUES, name=name, scan="finite", q="f", n="fn", result="finite"))
            + array_objects.object_entry_ir(name + "_objects", name, "a" * 11 + "i" * 7))
    return compile_host_helpers(text, {name + "_objects": array_objects.signature(18)})[name + "_objects"]


_sum_checked: dict = {}     # (value dtype, index dtype) -> the compiled entry (looked up per call: no lock)
_sum_trusted: dict = {}     # (value dtype, index dtype, factors) -> the compiled trusted entry


def masked_sum_checked(a, b, c, m: int, n1: int, n2: int, check_b: bool, check_c: bool):
    """``masked_sum`` on one thread for CSR parts ``(data, indices, indptr)`` of A (m x n1), B (n1 x n2) and
    C (m x n2) that are not validated yet: one native call checks each operand canonical (``check_b`` /
    ``check_c`` False for an operand that is A or B itself), then sums. Values of one dtype the native kernels
    compute in, index arrays of one dtype (int32 / int64), all 1-D C-contiguous, lengths consistent, the
    sizes fitting the index dtype, ``array_objects.DATA_OFFSET`` confirmed. Returns the sum (a NumPy scalar,
    as ``masked_sum``), or None when an operand is not canonical or a value is not finite."""
    key = (a[0].dtype, a[1].dtype)
    fn = _sum_checked.get(key)
    if fn is None:
        with _lock:
            fn = _sum_checked[key] = _sum_checked_kernel(key[0], key[1].itemsize * 8)
    code, total = _call(fn, a, b, c, m, n1, n2, check_b | (check_c << 1))
    return None if code else total   # not canonical, or a value NaN / Inf: the general path words it / applies the rule


def trusted_supported(value: np.dtype, index: np.dtype) -> bool:
    """Whether ``masked_sum_trusted`` takes values of ``value`` with indices of ``index`` (array objects read
    natively: ``array_objects.DATA_OFFSET`` confirmed)."""
    from splyce.native.array_objects import DATA_OFFSET

    return DATA_OFFSET is not None and value in VALUE and SCALARS[value].from_i64 \
        and index in (np.dtype(np.int32), np.dtype(np.int64)) and value.isnative and index.isnative


def masked_sum_trusted(a, b, c, m: int, n2: int, distinct_b: bool, distinct_c: bool, factors: str = "abc"):
    """``masked_sum(..., factors=factors)`` on one thread for validated CSR parts (the jit's SparseTensors):
    the same bits, in one native call that checks nothing (``masked_sum_checked``'s sample, count or sum).
    ``distinct_b`` / ``distinct_c`` False for an operand that is A or B itself (scanned once). Values and
    indices as ``trusted_supported`` allows, every index array of one dtype, all 1-D C-contiguous. A value
    that is NaN or Inf is summed as the sparsifier sums it (the kernel's code 2 only tells)."""
    key = (a[0].dtype, a[1].dtype, factors)
    fn = _sum_trusted.get(key)
    if fn is None:
        with _lock:
            fn = _sum_trusted[key] = _sum_checked_kernel(key[0], key[1].itemsize * 8, factors=factors, trusted=True)
    return _call(fn, a, b, c, m, len(b[2]) - 1, n2, distinct_b | (distinct_c << 1))[1]


def _call(fn, a, b, c, m: int, n1: int, n2: int, checks: int):
    """(the kernel's return code, the sum) of one call of a ``_sum_checked_kernel`` entry."""
    (av, ac, ap), (bv, bc, bp), (cv, cc, cp) = a, b, c
    mark = np.empty(n2, dtype=np.int64)
    out = np.empty(1, dtype=av.dtype)
    code = fn(id(ap), id(ac), id(av), id(bp), id(bc), id(bv), id(cp), id(cc), id(cv), id(mark), id(out), m, n1, n2,
              len(ac), len(bc), len(cc), checks)
    return code, out[0]
