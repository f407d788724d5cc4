"""LLVM IR text for the native kernels: the one dtype table, the one IR writer and the template spellings.

- ``SCALARS``: a value dtype's LLVM type and instructions, one row per dtype (``VALUE``, ``elementwise.common``
  and each kernel's ``supported`` are views of it); ``INDEX`` the index widths.
- ``IR``: a line writer with unique names (``gep`` / ``load`` / ``store`` / ``op``, counted ``loop``s): the
  kernels written in Python (masked products, SDDMM, SpMV rows, the masked sum).
- ``fill``: the one substitution of the kernels written as marked IR text (merges, SpGEMM, the CSR-with-CSC
  pass, validation drivers, the masked sum's driver, the allocator): ``{name}`` markers filled from fields,
  pieces holding markers of their own; a variant is a field (scipy's order, zeros dropped, a vector or a table
  compress), never a patch of the text. ``index_at`` / ``segment_at`` / ``load_at`` / ``store_at``: the loads
  and stores spelled for those templates, so an index load is written one way everywhere; ``loop_head``: their
  loop heads (phis, test, branch), the marked-text twin of ``counted``.
- Each algorithm is one definition, its variants parameters (``masked.masked_ir(mode=...)``,
  ``spmv_flat.flat_ir`` for rows and CSC columns, ``merge_ir._NARROW_PARTS`` / ``_MERGE_STEP_PARTS`` for the
  intersection and the union); plus the row split the helpers share for ``threads``.
"""

from __future__ import annotations

import bisect
import contextvars
import functools
import re
from typing import NamedTuple

import numpy as np



class Scalar(NamedTuple):
    """How the kernels compute in one value dtype: its LLVM type and instructions."""
    t: str              # LLVM type
    mul: str
    add: str
    sub: str | None     # None: no difference (bool)
    zero: str
    nonzero: str        # the "is not zero" compare (NaN is not zero); its negation is ``is_zero``
    bits: int
    one: str = "1"
    from_i64: str = ""  # an i64 count -> this type (the masked sum's count of ones)
    exact: int = 0      # the largest count the type holds exactly
    exponent: int = 0   # the exponent bits (floats: a value is finite when they are not all set)

    @property
    def is_zero(self) -> str:
        return {"fcmp une": "fcmp oeq", "icmp ne": "icmp eq"}[self.nonzero]

    @property
    def eq(self) -> str:
        return "fcmp oeq" if self.t in FLOAT_TYPES else "icmp eq"


FLOAT_TYPES = ("double", "float")
# THE dtype table of the native kernels: a new value dtype is one row. bool (a pattern): a product is AND, a
# sum OR (NumPy's and scipy's bool + bool, never 2); no difference (NumPy refuses bool minus)
SCALARS = {np.dtype(np.float64): Scalar("double", "fmul", "fadd", "fsub", "0.0", "fcmp une", 64, "1.0", "sitofp",
                                        2**53, 0x7FF0000000000000),
           np.dtype(np.float32): Scalar("float", "fmul", "fadd", "fsub", "0.0", "fcmp une", 32, "1.0", "sitofp",
                                        2**24, 0x7F800000),
           np.dtype(np.int64): Scalar("i64", "mul", "add", "sub", "0", "icmp ne", 64, "1", "bitcast", 2**63 - 1),
           np.dtype(np.int32): Scalar("i32", "mul", "add", "sub", "0", "icmp ne", 32, "1", "trunc", 2**63 - 1),
           np.dtype(np.bool_): Scalar("i8", "and", "or", None, "0", "icmp ne", 8)}
BY_TYPE = {s.t: s for s in SCALARS.values()}    # LLVM type -> its row
NUMERIC = tuple(d for d in SCALARS if d != np.dtype(np.bool_))    # the dtypes of the arithmetic kernels

# value dtype -> (LLVM type, multiply, add, zero) of the arithmetic kernels (the view of SCALARS they unpack)
VALUE = {d: (SCALARS[d].t, SCALARS[d].mul, SCALARS[d].add, SCALARS[d].zero) for d in NUMERIC}
# index dtype -> its LLVM integer type (the index widths the kernels are instantiated for)
INDEX = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


def supported(dtype, bool_ok: bool = False) -> bool:
    """Whether the native kernels compute in ``dtype`` (``bool_ok``: the kernels that have a bool form)."""
    dtype = np.dtype(dtype)
    return dtype in VALUE or (bool_ok and dtype in SCALARS)


class IR:
    """A small LLVM IR writer: unique names, so the generated loops compose."""

    def __init__(self):
        self.lines: list[str] = []
        self.count = 0
        self.block = ""         # the block being written (``label`` sets it)

    def name(self, base: str) -> str:
        self.count += 1
        return f"%{base}{self.count}"

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def gep(self, t: str, ptr: str, at: str, base: str = "p") -> str:
        """``&ptr[at]`` for elements of type ``t``."""
        p = self.name(base)
        self(f"  {p} = getelementptr {t}, ptr {ptr}, i64 {at}")
        return p

    def load(self, t: str, ptr: str, at: str, base: str = "v") -> str:
        """``ptr[at]``, elements of type ``t``."""
        p = self.gep(t, ptr, at)
        v = self.name(base)
        self(f"  {v} = load {t}, ptr {p}")
        return v

    def store(self, t: str, value: str, ptr: str, at: str) -> None:
        """``ptr[at] = value``."""
        self(f"  store {t} {value}, ptr {self.gep(t, ptr, at)}")

    def op(self, instr: str, t: str, x: str, y: str, base: str = "x") -> str:
        """``instr t x, y`` (an arithmetic instruction or a compare such as ``icmp ne``) as a new value."""
        v = self.name(base)
        self(f"  {v} = {instr} {t} {x}, {y}")
        return v

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def ext(bits: int) -> str:
    """The widening of an i{bits} index to i64 (``ext(bits) x to i64``)."""
    return "zext i32" if bits == 32 else "bitcast i64"


def sext(bits: int) -> str:
    """The sign extension of an i{bits} index to i64 (positions not yet known to be non-negative)."""
    return f"sext i{bits}" if bits < 64 else "bitcast i64"


def narrow(bits: int) -> str:
    """The narrowing of an i64 to an i{bits} index (``narrow(bits) x to i{bits}``)."""
    return "trunc i64" if bits == 32 else "bitcast i64"


def index_at(ptr: str, at: str, out: str, width: str = "p", ext_field: str | None = None) -> str:
    """Template text (format fields ``i{width}`` and ``{width_ext}``, or ``{ext_field}``): ``%out = ptr[at]``
    of an index array, widened to i64. The one spelling of the templates' index loads."""
    ext_field = ext_field or f"{width}_ext"
    return (f"  {out}_at = getelementptr i{{{width}}}, ptr {ptr}, i64 {at}\n"
            f"  {out}_raw = load i{{{width}}}, ptr {out}_at\n"
            f"  {out} = {{{ext_field}}} {out}_raw to i64\n")


def load_at(t: str, ptr: str, at: str, out: str) -> str:
    """Template text: ``%out = ptr[at]``, elements of type ``t`` (a type or a format field such as ``{t}``)."""
    return f"  {out}_at = getelementptr {t}, ptr {ptr}, i64 {at}\n  {out} = load {t}, ptr {out}_at\n"


def store_at(t: str, value: str, ptr: str, at: str, address: str) -> str:
    """Template text: ``ptr[at] = value``, elements of type ``t``, through the address ``%address``."""
    return f"  {address} = getelementptr {t}, ptr {ptr}, i64 {at}\n  store {t} {value}, ptr {address}\n"


def segment_at(ptr: str, at: str, start: str, stop: str, width: str = "p", ext_field: str | None = None,
               next_at: str | None = None, add: bool = True) -> str:
    """Template text: segment ``at`` of a positions array, ``%start = ptr[at]``, ``%stop = ptr[next_at]``;
    ``next_at`` (default ``{at}1``) computed as ``at + 1`` between the loads when ``add``."""
    next_at = next_at or f"{at}1"
    step = f"  {next_at} = add i64 {at}, 1\n" if add else ""
    return (index_at(ptr, at, start, width, ext_field) + step + index_at(ptr, next_at, stop, width, ext_field))


def loop_head(head: str, body: str, enter, phis, test: str, exit: str, latch: str | None = None,
              exit_on: bool = False) -> str:
    """Template text: block ``head`` of a loop written as marked text, its phis ``(value, type, initial,
    next)`` (names without ``%``) from ``enter`` (a block, or a tuple of blocks that all enter with the
    initial value) and ``next`` from ``latch`` (default ``body``); the test ``test`` (``flag = compare``), on
    to ``body`` while the flag holds (``exit_on``: until it holds), else to ``exit``; then the label
    ``body:``. The one spelling of the templates' loop heads (a loop written with the IR writer: ``counted``)."""
    enters = (enter,) if isinstance(enter, str) else enter
    lines = [f"{head}:"]
    for value, t, initial, nxt in phis:
        incoming = ", ".join(f"[{initial}, %{e}]" for e in enters)
        lines.append(f"  %{value} = phi {t} {incoming}, [{nxt}, %{latch or body}]")
    flag = test.split(" = ", 1)[0]
    go, stop = (exit, body) if exit_on else (body, exit)
    lines += [f"  %{test}", f"  br i1 %{flag}, label %{go}, label %{stop}", f"{body}:"]
    return "\n".join(lines) + "\n"


def fill(template: str, **fields) -> str:
    """``template`` with every marker ``{name}`` (a word in braces: never LLVM's ``{i64, i1}`` nor a body's
    ``{``) replaced by ``fields[name]``, itself filled from the same fields (a piece of IR may hold markers):
    the one substitution of IR written as marked text. A missing field is a KeyError, never a marker left in
    the IR."""
    return re.sub(r"\{(\w+)\}", lambda m: fill(str(fields[m[1]]), **fields), template)


def index_bits(a: np.ndarray) -> int:
    """The bit width of an index array's elements (its kernels' ``i{bits}``)."""
    return a.dtype.itemsize * 8


def load_index(ir: IR, ptr: str, bits: int, at: str, signed: bool = False) -> str:
    """``ptr[at]`` of an i{bits} index array, widened to i64 (``signed``: sign-extended, for a scan of
    positions not yet known to be non-negative)."""
    p, raw, wide = ir.name("p"), ir.name("raw"), ir.name("w")
    ir(f"  {p} = getelementptr i{bits}, ptr {ptr}, i64 {at}")
    ir(f"  {raw} = load i{bits}, ptr {p}")
    widen = sext(bits) if signed else ext(bits)
    ir(f"  {wide} = {widen} {raw} to i64")
    return wide


def returns(ir: IR) -> str:
    """The kernel's text, closed by its two returns: 0 from ``done``, 1 (a bad index met) from ``bad``."""
    ir.label("done")
    ir("  ret i64 0")
    ir.label("bad")
    ir("  ret i64 1")
    ir("}")
    return ir.text()


def check_segment(ir: IR, start: str, stop: str, nnz: str = "%nnz") -> None:
    """Branch to %bad unless start <= stop <= nnz (unsigned: a negative position is out of range too)."""
    down, over, bad, ok = ir.name("down"), ir.name("over"), ir.name("badseg"), ir.name("seg_ok")
    ir(f"  {down} = icmp ugt i64 {start}, {stop}")
    ir(f"  {over} = icmp ugt i64 {stop}, {nnz}")
    ir(f"  {bad} = or i1 {down}, {over}")
    ir(f"  br i1 {bad}, label %bad, label %{ok[1:]}")
    ir.label(ok[1:])


def loop(ir: IR, start: str, stop: str, body, after: str) -> None:
    """for (i = start; i < stop; i++) body(i); then branch to ``after``. Emitted at the current block's end."""
    head, bodyl = ir.name("head")[1:], ir.name("body")[1:]
    slot = ir.name("slot")
    ir(f"  {slot} = alloca i64")
    ir(f"  store i64 {start}, ptr {slot}")
    ir(f"  br label %{head}")
    ir.label(head)
    cur, more = ir.name("cur"), ir.name("more")
    ir(f"  {cur} = load i64, ptr {slot}")
    ir(f"  {more} = icmp slt i64 {cur}, {stop}")
    ir(f"  br i1 {more}, label %{bodyl}, label %{after}")
    ir.label(bodyl)
    body(cur)
    nxt = ir.name("next")
    ir(f"  {nxt} = add i64 {cur}, 1")
    ir(f"  store i64 {nxt}, ptr {slot}")
    ir(f"  br label %{head}")


def counted(ir: IR, start: str, stop: str, body, carried=(), cmp: str = "slt", base: str = "i",
            step: str = "1") -> list[str]:
    """``for (i = start; i cmp stop; i += step) values = body(i, *values)`` as a loop with phis: ``carried``, the
    loop-carried values' ``(type, initial value)``; ``body`` returns their next values (or None without
    any). Emitted at the current block's end; continues in the block after the loop, and returns the carried
    values there."""
    enter = ir.block
    head, inside, after = (ir.name(f"{base}_{b}")[1:] for b in ("head", "body", "done"))
    ir(f"  br label %{head}")
    ir.label(head)
    i, values, more = ir.name(base), [ir.name("c") for _ in carried], ir.name("more")
    at = len(ir.lines)
    ir.lines += [""] * (1 + len(carried))        # the phis, written once the latch is known
    ir(f"  {more} = icmp {cmp} i64 {i}, {stop}")
    ir(f"  br i1 {more}, label %{inside}, label %{after}")
    ir.label(inside)
    nexts = body(i, *values) or ()
    i1 = ir.name(base)
    ir(f"  {i1} = add i64 {i}, {step}")
    ir(f"  br label %{head}")
    ir.lines[at] = f"  {i} = phi i64 [{start}, %{enter}], [{i1}, %{ir.block}]"
    for k, ((t, init), value, nxt) in enumerate(zip(carried, values, nexts)):
        ir.lines[at + 1 + k] = f"  {value} = phi {t} [{init}, %{enter}], [{nxt}, %{ir.block}]"
    ir.label(after)
    return values


# -- the pieces the SpMV / SpMM / CSC scatter, masked-sum and SDDMM kernels are written from (one spelling each)
def define(name: str, params: str, attributes: str = "") -> IR:
    """A writer opened on ``define i64 @name(params) attributes {`` and its block ``entry``."""
    ir = IR()
    ir(f"define i64 @{name}({params}){attributes} {{")
    ir.label("entry")
    return ir


def segment(ir: IR, pos: str, bits: int, at: str, check: bool = False, nnz: str = "%nnz") -> tuple[str, str]:
    """Segment ``at`` of the i{bits} positions ``pos``: ``(pos[at], pos[at + 1])`` widened to i64; ``check``:
    on to %bad unless ``start <= stop <= nnz`` (``check_segment``)."""
    nxt = ir.op("add", "i64", at, "1", "at")
    start, stop = load_index(ir, pos, bits, at), load_index(ir, pos, bits, nxt)
    if check:
        check_segment(ir, start, stop, nnz)
    return start, stop


def add_to(ir: IR, t: str, add: str, ptr: str, value: str) -> None:
    """``*ptr = *ptr add value`` for a ``t`` at ``ptr`` (an accumulator's slot, or an output entry)."""
    old = ir.name("old")
    ir(f"  {old} = load {t}, ptr {ptr}")
    ir(f"  store {t} {ir.op(add, t, old, value, 'new')}, ptr {ptr}")


def each(ir: IR, start: str, stop: str, body) -> None:
    """``for (i = start; i < stop; i++) body(i)`` (``loop``), continuing in a new block after it."""
    after = ir.name("after")[1:]
    loop(ir, start, stop, body, after)
    ir.label(after)


def ordered_product(ir: IR, mul: str, t: str, factors: str, values: dict) -> str:
    """``(f0 * f1) * f2`` for the roles ``factors`` (the einsum's operand order, e.g. ``"abm"``) of ``values``
    (role -> value): the sparsifier's term, multiplied in its order (``t`` a scalar or a vector type)."""
    x, y, z = (values[f] for f in factors)
    return ir.op(mul, t, ir.op(mul, t, x, y), z)


def groups(ir: IR, slot: str, stop: str, sizes, body) -> None:
    """From ``*slot`` (an i64 slot allocated in ``entry``) up to ``stop``: ``body(first, size)`` on groups of
    ``sizes[0]`` items while they fit, then of ``sizes[1]``, ...; then each item left on its own (``body(i,
    None)``)."""
    for size in sizes:
        head, inside, after = (ir.name(b)[1:] for b in ("ghead", "gbody", "gdone"))
        ir(f"  br label %{head}")
        ir.label(head)
        first = ir.name("first")
        ir(f"  {first} = load i64, ptr {slot}")
        end = ir.op("add", "i64", first, str(size), "end")
        ir(f"  br i1 {ir.op('icmp sle', 'i64', end, stop, 'fits')}, label %{inside}, label %{after}")
        ir.label(inside)
        body(first, size)
        ir(f"  store i64 {end}, ptr {slot}")
        ir(f"  br label %{head}")
        ir.label(after)
    rest = ir.name("rest")
    ir(f"  {rest} = load i64, ptr {slot}")
    each(ir, rest, stop, lambda i: body(i, None))


@functools.cache
def columns_axpy(ir, t: str, mul: str, add: str, value: str, k: int | None, entry: str, after: str,
                 index: str = "i") -> None:
    """``y[%yb + j] += value * x[%xb + j]`` for the ``k`` columns of a dense operand (``k`` 0: a loop to ``%k``
    entered from block ``entry``; None: one column), then a branch to ``after``: the inner step of every
    stored-format times dense kernel (native/coo.py, dia.py)."""
    def axpy(j: str) -> None:
        xi, yi, px, py, xv, yv, prod, s = (ir.name(n) for n in (f"x{index}", f"y{index}", "px", "py", "xv", "yv",
                                                                   "prod", "s"))
        ir(f"  {xi} = add i64 %xb, {j}")
        ir(f"  {yi} = add i64 %yb, {j}")
        ir(f"  {px} = getelementptr {t}, ptr %x, i64 {xi}")
        ir(f"  {py} = getelementptr {t}, ptr %y, i64 {yi}")
        ir(f"  {xv} = load {t}, ptr {px}")
        ir(f"  {yv} = load {t}, ptr {py}")
        ir(f"  {prod} = {mul} {t} {value}, {xv}")
        ir(f"  {s} = {add} {t} {yv}, {prod}")
        ir(f"  store {t} {s}, ptr {py}")

    if k == 0:
        ir("  br label %jhead")
        ir.label("jhead")
        ir(f"  %j = phi i64 [0, %{entry}], [%j1, %jbody]")
        ir("  %jmore = icmp slt i64 %j, %k")
        ir(f"  br i1 %jmore, label %jbody, label %{after}")
        ir.label("jbody")
        axpy("%j")
        ir("  %j1 = add i64 %j, 1")
        ir("  br label %jhead")
    else:
        for j in range(k or 1):
            axpy(str(j))
        ir(f"  br label %{after}")


def _context_pool_class():
    """ContextPool, defined on first use: ``concurrent.futures.thread`` (and ``queue``) cost a fresh process
    ~1-2 ms to import, and most first calls run on one thread."""
    from concurrent.futures import ThreadPoolExecutor

    class ContextPool(ThreadPoolExecutor):
        """A thread pool whose tasks run in a copy of the submitting thread's context, so that a drop-in's
        workers allocate with the same NumPy allocator as its caller (native/memory_pool.py)."""

        def submit(self, fn, /, *args, **kwargs):
            return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)

    return ContextPool


def context_pool(max_workers: int, thread_name_prefix: str):
    """A ``ThreadPoolExecutor`` whose tasks run in a copy of the submitting thread's context."""
    return _context_pool_class()(max_workers=max_workers, thread_name_prefix=thread_name_prefix)


@functools.cache
def pool(workers: int):
    return context_pool(workers, "splyce-native")


def row_chunks(indptr: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """At most ``threads`` row ranges with about equal entries (``indptr``: cumulative entries per row)."""
    m = len(indptr) - 1
    if threads <= 1 or m <= 1:
        return [(0, m)]
    targets = np.array([int(indptr[-1]) * k // threads for k in range(1, threads)], dtype=indptr.dtype)
    inner = np.searchsorted(indptr, targets, side="left").tolist()   # same dtype: no copy of indptr
    bounds = sorted(set([0, *inner, m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


MIN_CHUNK = 1 << 15     # entries per thread below which splitting a pass costs more than it saves


def work_chunks(indptr: np.ndarray, threads: int, per_row: int = 0) -> list[tuple[int, int]]:
    """Row ranges for ``threads`` workers with about equal work, ``indptr[r] + per_row * r`` up to row ``r``
    (``indptr``: checked row pointers; ``per_row``: a row's fixed cost counted in entries), one range when the
    entries are too few for splitting to pay."""
    m, nnz = len(indptr) - 1, int(indptr[-1])
    if threads <= 1 or nnz < 2 * MIN_CHUNK or m < 2:
        return [(0, max(m, 0))]
    threads = min(threads, nnz // MIN_CHUNK)
    if not per_row:
        return row_chunks(indptr, threads)
    total = nnz + per_row * m
    inner = [bisect.bisect_left(range(m + 1), total * k // threads, key=lambda r: int(indptr[r]) + per_row * r)
             for k in range(1, threads)]
    bounds = sorted(set([0, *inner, m]))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def run_each(fn, items, executor) -> list:
    """``fn(item)`` for every item, the first on the calling thread (it starts at once, and a pool thread
    slow to wake never ends up running both halves of a split), the others on ``executor``. Results in order."""
    items = list(items)
    rest = [executor.submit(fn, item) for item in items[1:]]
    return [fn(items[0])] + [f.result() for f in rest]


def run_chunks(fn, chunks, threads: int) -> list:
    """``fn(t, lo, hi)`` for every chunk, the first on the calling thread, the others on the pool."""
    if len(chunks) == 1:
        return [fn(0, *chunks[0])]
    return run_each(lambda tc: fn(tc[0], *tc[1]), enumerate(chunks), pool(threads))


def run_taken(fn, chunks, threads: int, state=lambda: None, executor=None) -> list:
    """``fn(t, lo, hi, own)`` for every chunk ``t`` on ``threads`` threads (the caller and the pool), each thread taking
    the next chunk not yet taken, so the chunks go in increasing order on every thread; ``own`` is the
    thread's ``state()``, made once per thread (a scratch array reused from chunk to chunk); ``executor``: the
    pool for the other threads (default ``pool(threads)``). Results in chunk order."""
    out = [None] * len(chunks)
    order = iter(range(len(chunks)))     # shared: next() on it is atomic under the GIL

    def take():
        own = state()
        for i in order:
            out[i] = fn(i, *chunks[i], own)
    executor = executor or pool(threads)
    rest = [executor.submit(take) for _ in range(min(threads, len(chunks)) - 1)]
    take()
    for f in rest:
        f.result()
    return out


# -- the merges' operations (merge-gen) ---------------------------------------------------------------------------
MERGE_OPS = ("multiply", "add", "subtract")     # scipy's names of the elementwise product, sum and difference


def instruction(dtype, op: str) -> str | None:
    """The instruction of the merge operation ``op`` (``MERGE_OPS``) in ``dtype``, read from its row of ``SCALARS``;
    None where the dtype has none (bool: no difference)."""
    s = SCALARS[np.dtype(dtype)]
    return {"multiply": s.mul, "add": s.add, "subtract": s.sub}[op]


# -- the SpGEMM family's helpers (spgemm_ir, spgemm_sorted, spgemm_sorted_map, memory_pool_ir) --

def bind(template: str, **fields) -> str:
    """``template`` with the markers named in ``fields`` filled and every other marker kept for the kernel's
    ``fill``: a piece of marked text parameterised by its own names (a tag, a block), written without the
    ``{{ }}`` escapes of an f-string."""
    return re.sub(r"\{(\w+)\}", lambda m: str(fields[m[1]]) if m[1] in fields else m[0], template)

