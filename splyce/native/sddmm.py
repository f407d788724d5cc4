"""SDDMM ``M * (X @ Y.T)`` (M CSR, X and Y dense, rows of ``d`` values), native code: for each mask entry a
dot product of two rows, ``d`` products summed in order from +0.0. A row's entries go 8, then 4, then 2 at a
time as the lanes of one vector (their block of Y transposed in registers, X's value broadcast), each lane its
entry's own chain of additions in column order, so a lane's bits are the scalar chain's; the rest one by one.
Work: ``nnz(M) * d``.

- the drop-in's (scipy's values): ``(sum of X[i, k] Y[j, k]) * M[i, j]``, zero results left out;
- the jit's (``factors``, the sparsifier's values bit for bit): each term ``(f0 * f1) * f2`` in the einsum's
  operand order (``m * (x @ y.T)`` is ``(M[i, j] X[i, k]) Y[j, k]``), added to a sum from +0.0, every mask
  position kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading

import numpy as np

from splyce.native import memory_pool
from splyce.native.array_objects import address as _address
from splyce.native.ir_text import (SCALARS, VALUE, add_to, define, each, groups, index_bits as _bits, load_index, loop,
                                   ordered_product, row_chunks, run_chunks, segment)
from splyce.native.ir_text import supported  # noqa: F401  (``sddmm.supported``: the one table's)
from splyce.native.masked import _drop_zeros

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (mpos, mcrd, mval, x, y, d, lo, hi, out) -> results not zero
_SDDMM_SIG = ctypes.CFUNCTYPE(_I, _P, _P, _P, _P, _P, _I, _I, _I, _P)
# mask entries of one row computed together, as the lanes of one vector: 8 while they fit, then 4, then one by
# one (scalar chains)
GROUPS = (8, 4, 2)
# each mask entry computed prefetches every cache line of the row of Y that the entry this many places on reads,
# where Y is beyond L2 (PREFETCH_MIN_BYTES): its rows are the kernel's random reads (power-law, road and mesh
# graphs), a miss each otherwise. Measured (Sapphire-Rapids-class Xeon, KVM, 32 columns, one thread, shared
# cores), ms without -> with, the drop-in's / the jit's kernel: ba-100k 78 -> 47 / 80 -> 48, fem3d-100k 59 -> 40
# / 58 -> 45, blockdiag-1500 61 -> 42 / 61 -> 44, fem2d-250k 71 -> 62 / 75 -> 61; ahead 8 and 32 were slower on
# ba-100k (53, 54). With Y in cache the prefetches only cost: fem2d-3k 0.16 -> 0.20, propack 0.11 -> 0.14.
PREFETCH_AHEAD = 16
PREFETCH_MIN_BYTES = 4 << 20
# ... unless the mask's entries stay near its diagonal (banded, block-diagonal): then the rows of Y a row reads
# were read by the rows just before (still in cache, a stream the hardware prefetcher follows) and the
# prefetches only cost. The 99th percentile of |column - row| over a sample of entries, times a row of Y, up to
# this many bytes is near. AMD Zen 4 VM, 2026-12-06, drop-in ms with -> without, thread CPU: banded-150k (p99 5)
# 16.1 -> 12.1, blockdiag-1500 (p99 57) 16.7 -> 13.7; kept where far: ba-100k (p99 94116) 27.9 -> 35.4,
# fem2d-250k (5285) 20.1 -> 23.4, road-700 (701: 175 KiB) 27.3 -> 31.9, fem3d-100k (42647) equal. (The
# Sapphire-Rapids VM above measured blockdiag-1500 faster with them; not re-measured.)
NEAR_WINDOW_BYTES = 64 << 10
NEAR_SAMPLE = 1024
_lock = threading.Lock()


def _sddmm_ir(name, value, mp, mc, sizes, factors=None, ahead=0):
    """SDDMM's row loop: ``sizes`` (largest first) mask entries of a row at a time, each a chain
    of ``d`` additions from zero (``vector_blocks``), the row's last entries one by one.
    ``factors`` None: ``(sum of x * y) * m``, zero results counted out (the drop-in's, scipy's values);
    ``factors`` (the roles ``m``, ``x``, ``y`` in the einsum's operand order): the sparsifier's, each term
    ``(f0 * f1) * f2`` added in, every entry kept. ``ahead`` > 0: each entry first prefetches the row of Y of
    the entry ``ahead`` places on (at most the range's last entry), every cache line of it; 0: no prefetch."""
    t, mul, add, zero = VALUE[value]
    ir = define(name, "ptr %mpos, ptr %mcrd, ptr %mval, ptr %x, ptr %y, i64 %d, i64 %lo, i64 %hi, ptr %out")
    accs = [f"%acc{g}" for g in range(max(sizes))]
    for acc in accs:
        ir(f"  {acc} = alloca {t}")
    ir("  %e_slot = alloca i64")
    ir("  %kept = alloca i64")
    ir("  store i64 0, ptr %kept")
    if ahead:
        # the last entry of the range (prefetched entries stop there) and the cache lines of a row of Y
        ir(f"  %last_e = sub i64 {load_index(ir, '%mpos', mp, '%hi')}, 1")
        ir(f"  %row_bytes = mul i64 %d, {value.itemsize}")
        ir("  %row_end = sub i64 %row_bytes, 1")
        ir("  %row_lines0 = udiv i64 %row_end, 64")
        ir("  %row_lines = add i64 %row_lines0, 2")

    def prefetch(e):
        """Every cache line of the row of Y that entry ``e + ahead`` (at most the range's last) reads."""
        at, pe = ir.op("add", "i64", e, str(ahead), "pfa"), ir.name("pfe")
        ir(f"  {pe} = select i1 {ir.op('icmp sgt', 'i64', at, '%last_e', 'pfo')}, i64 %last_e, i64 {at}")
        base = ir.op("mul", "i64", load_index(ir, "%mcrd", mc, pe), "%row_bytes", "pfrow")
        row_ptr = ir.gep("i8", "%y", base, "pfp")

        def line(q):
            off, clamped = ir.op("mul", "i64", q, "64", "pfoff"), ir.name("pfoff")
            ir(f"  {clamped} = select i1 {ir.op('icmp ugt', 'i64', off, '%row_end', 'pfend')}, i64 %row_end, i64 {off}")
            ir(f"  call void @llvm.prefetch.p0(ptr {ir.gep('i8', row_ptr, clamped, 'pfl')}, i32 0, i32 3, i32 1)")
        each(ir, "0", "%row_lines", line)

    def finish(e, acc):     # out[e] = the sum (the drop-in's: times M[i, j]); a result not zero counted
        s, mv = ir.load(t, acc, "0"), ir.load(t, "%mval", e)
        r = ir.op(mul, t, s, mv) if factors is None else s
        ir.store(t, r, "%out", e)
        nz = ir.op(SCALARS[value].nonzero, t, r, zero) if factors is None else "true"
        inc, k0 = ir.name("inc"), ir.name("k")
        ir(f"  {inc} = zext i1 {nz} to i64")
        ir(f"  {k0} = load i64, ptr %kept")
        ir(f"  store i64 {ir.op('add', 'i64', k0, inc, 'k')}, ptr %kept")

    def term(f0, xv, yv, vt=t):     # the drop-in's x * y, or the sparsifier's (f0 * f1) * f2 (f0: the mask's)
        if factors is None:
            return ir.op(mul, vt, xv, yv)
        return ordered_product(ir, mul, vt, factors, {"m": f0, "x": xv, "y": yv})

    def vector_blocks(xrow, yrows, es):
        """The sparsifier's chains of ``len(es)`` (= G) entries of one row as the G lanes of one vector, in
        blocks of G columns: the entries' G x G block of y loaded row by row and transposed in registers
        (shuffles; a gather per column ran 1.8-2.2x slower than scalar chains), x[i, k] broadcast, the mask
        values one vector load. Each lane computes its entry's terms ``(f0 * f1) * f2`` and adds them from
        +0.0 in column order, the scalar chain's operations bit for bit. Leaves the lanes' sums in ``accs``;
        returns the first column the scalar tail continues from."""
        w = len(es)
        vt = f"<{w} x {t}>"
        acc_v, mvec = ir.name("accv"), ir.name("mvec")
        ir(f"  {acc_v} = alloca {vt}")
        ir(f"  store {vt} zeroinitializer, ptr {acc_v}")
        ir(f"  {mvec} = load {vt}, ptr {ir.gep(t, '%mval', es[0], 'pmv')}, align {value.itemsize}")
        blocks = ir.op("udiv", "i64", "%d", str(w), "blocks")
        kv = ir.op("mul", "i64", blocks, str(w), "kv")

        def block(b):
            kb = ir.op("mul", "i64", b, str(w), "kb")
            rows = []
            for yrow in yrows:
                v = ir.name("yblk")
                ir(f"  {v} = load {vt}, ptr {ir.gep(t, '%y', ir.op('add', 'i64', yrow, kb, 'ya'), 'py')}, "
                   f"align {value.itemsize}")
                rows.append(v)
            cols = _transpose(ir, rows, vt)
            acc = ir.name("acc")
            ir(f"  {acc} = load {vt}, ptr {acc_v}")
            xk = ir.gep(t, "%x", ir.op("add", "i64", xrow, kb, "xa"), "px")
            for kk, col in enumerate(cols):
                xi, xb = ir.name("xi"), ir.name("xb")
                ir(f"  {xi} = insertelement {vt} poison, {t} {ir.load(t, xk, str(kk))}, i64 0")
                ir(f"  {xb} = shufflevector {vt} {xi}, {vt} poison, <{w} x i32> zeroinitializer")
                acc = ir.op(add, vt, acc, term(mvec, xb, col, vt), "acc")
            ir(f"  store {vt} {acc}, ptr {acc_v}")

        each(ir, "0", blocks, block)
        sums = ir.name("sums")
        ir(f"  {sums} = load {vt}, ptr {acc_v}")
        for g in range(w):
            lane = ir.name("lane")
            ir(f"  {lane} = extractelement {vt} {sums}, i64 {g}")
            ir(f"  store {t} {lane}, ptr {accs[g]}")
        return kv

    def dots(i, es):
        """acc[g] = sum over k of x[i, k] * y[crd[es[g]], k], the len(es) chains in one k loop."""
        xrow = ir.op("mul", "i64", i, "%d", "xrow")
        yrows, mvals = [], []
        for g, e in enumerate(es):
            if ahead:
                prefetch(e)
            yrows.append(ir.op("mul", "i64", load_index(ir, "%mcrd", mc, e), "%d", "yrow"))
            ir(f"  store {t} {zero}, ptr {accs[g]}")
            mvals.append(ir.load(t, "%mval", e) if factors is not None else None)
        first_k = vector_blocks(xrow, yrows, es) if len(es) > 1 else "0"

        def k_body(k):
            xv = ir.load(t, "%x", ir.op("add", "i64", xrow, k, "a"))
            for g, yrow in enumerate(yrows):
                add_to(ir, t, add, accs[g], term(mvals[g], xv, ir.load(t, "%y", ir.op("add", "i64", yrow, k, "a"))))

        each(ir, first_k, "%d", k_body)
        for g, e in enumerate(es):
            finish(e, accs[g])

    def row(i):
        start, stop = segment(ir, "%mpos", mp, i)
        ir(f"  store i64 {start}, ptr %e_slot")
        # groups of the largest size while they fit, then of the next, ..., then one by one
        groups(ir, "%e_slot", stop, sizes,
               lambda e, size: dots(i, [e] if size is None else [ir.op("add", "i64", e, str(g), "eg")
                                                                  for g in range(size)]))

    loop(ir, "%lo", "%hi", row, "exit")
    ir.label("exit")
    ir("  %kept_all = load i64, ptr %kept")
    ir("  ret i64 %kept_all")
    ir("}")
    if ahead:
        ir("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
    return ir.text()


def _transpose(ir, rows, vt):
    """The columns of the square block whose rows are the vectors ``rows`` (``vt`` = ``<w x T>``, w a power of
    two): log2(w) rounds of two-input shuffles, each interleaving blocks of s lanes of rows i and i + s."""
    w, s = len(rows), 1
    while s < w:
        new = [None] * w
        for i in range(w):
            if (i // s) % 2:
                continue
            lo, hi = [], []
            for c in range(w // (2 * s)):
                base = c * 2 * s
                lo += [base + q for q in range(s)] + [w + base + q for q in range(s)]
                hi += [base + s + q for q in range(s)] + [w + base + s + q for q in range(s)]
            for half, mask in ((i, lo), (i + s, hi)):
                out = ir.name("tr")
                lanes = ", ".join(f"i32 {q}" for q in mask)
                ir(f"  {out} = shufflevector {vt} {rows[i]}, {vt} {rows[i + s]}, <{w} x i32> <{lanes}>")
                new[half] = out
        rows, s = new, s * 2
    return rows


@functools.cache
def _sddmm(value, mp, mc, sizes, factors=None, ahead=0):
    from splyce.native.codegen import compile_host_helpers

    name = (f"splyce_sddmm_{VALUE[value][0]}_{mp}_{mc}_g{'_'.join(map(str, sizes))}"
            + ("" if factors is None else f"_{factors}") + (f"_p{ahead}" if ahead else ""))
    # the sparsifier's variant without SLP, which would pack the group's chains of additions into vectors
    # loaded lane by lane from the entries' separate rows of terms
    return compile_host_helpers(_sddmm_ir(name, value, mp, mc, sizes, factors, ahead), {name: _SDDMM_SIG},
                                slp_vectorize=factors is None)[name]


def reads_near(mp: np.ndarray, mc: np.ndarray, y: np.ndarray) -> bool:
    """Whether the rows of Y the mask's entries read stay within NEAR_WINDOW_BYTES of each entry's own row
    (``mp``, ``mc``: the mask's row starts and columns), judged on NEAR_SAMPLE entries spread evenly."""
    if len(mc) == 0:
        return True
    pos = np.linspace(0, len(mc) - 1, min(len(mc), NEAR_SAMPLE)).astype(np.int64)
    rows = np.searchsorted(mp, pos, side="right") - 1
    far = np.percentile(np.abs(mc[pos].astype(np.int64) - rows), 99)
    return far * y.strides[0] <= NEAR_WINDOW_BYTES


# SDDMM's multiply-adds (mask entries x columns) below which threads > 1 still runs one range: about 0.3 ms of
# one thread, where a pool thread's round trip cost about what it saved (fem2d-3k, 670k: 168 vs 176 us on two
# threads and one; blockdiag-32, 337k: 164 vs 100 us).
SDDMM_SERIAL_MAX_WORK = 1 << 20


def sddmm(m, x: np.ndarray, y: np.ndarray, dtype, threads: int = 1, factors: str | None = None):
    """``M * (X @ Y.T)`` as CSR parts; ``m``: validated CSR parts of an (rows(X) x rows(Y)) matrix; ``x``,
    ``y``: C-contiguous 2-D arrays of ``dtype`` with equal column counts. Each thread also copies its rows'
    part of the mask's index arrays, which are the result's when no result is zero (the kernel counts them):
    nothing runs after the threads then. ``factors`` (``"mxy"``: the einsum's operand order of the roles M, X,
    Y): the sparsifier's result instead, the jit's: every mask position, ``+0.0 + sum over k of (f0 * f1) *
    f2`` (``_sddmm_ir``)."""
    mv, mc, mp = m
    dtype = np.dtype(dtype)
    # the result's buffers from the cache of freed large buffers (the drop-in's calls already allocate there;
    # the jit's did not: fresh pages, first touched by the kernel, every call: ba-100k 50 vs 46 ms)
    with memory_pool.active() if len(mv) * dtype.itemsize >= memory_pool.POOL_MIN else contextlib.nullcontext():
        out = np.empty(len(mv), dtype=dtype)
        indices, indptr = np.empty_like(mc), np.empty_like(mp)
    with _lock:
        fn = _sddmm(dtype, _bits(mp), _bits(mc), GROUPS, factors,
                    PREFETCH_AHEAD if y.nbytes >= PREFETCH_MIN_BYTES and not reads_near(mp, mc, y) else 0)
    d = x.shape[1]

    def run(t, lo, hi):
        kept = fn(_address(mp), _address(mc), _address(mv), _address(x), _address(y), d, lo, hi, _address(out))
        a, b = int(mp[lo]), int(mp[hi])
        indices[a:b] = mc[a:b]
        indptr[lo + 1:hi + 1] = mp[lo + 1:hi + 1]
        return kept

    split = threads > 1 and len(mv) * d >= SDDMM_SERIAL_MAX_WORK
    kept = run_chunks(run, row_chunks(mp, threads) if split else [(0, len(mp) - 1)], threads)
    if sum(kept) == len(mv):
        indptr[:1] = 0
        return out, indices, indptr
    return _drop_zeros(out, mc, mp)
