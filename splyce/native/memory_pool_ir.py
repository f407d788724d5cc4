"""The native allocator of memory_pool.py (NumPy's handler functions: malloc, calloc, realloc, free and the
release of every kept block) as LLVM IR, and the layout of the table they share (the handler's ``ctx``).

Each block has a ``HEADER``-byte header before the address NumPy sees: the libc block, its capacity and whether
it may be kept. A block of at least ``POOL_MIN`` bytes freed is kept in one of ``SLOTS`` slots (up to the
table's limit in bytes), and the next allocation of about its size (at most twice as large as asked; the most
recently kept of those) takes it. Every function takes a spin lock around the table, so a block may be freed
on any thread.
"""

from __future__ import annotations

import platform

from splyce.native.ir_text import bind, fill, loop_head

POOL_MIN = 1 << 20          # blocks from 1 MiB are kept when freed; below, libc's heap already reuses them
SLOTS = 32                  # at most this many blocks kept
HUGE_MIN = 4 << 20          # fresh blocks from 4 MiB get MADV_HUGEPAGE, as NumPy's own allocator does
SLACK = 32 << 20            # an in-place shrink keeps up to 2 x size + SLACK of the block's pages resident
HEADER = 64                 # bytes before the pointer NumPy sees (keeps libc's 16-byte alignment)
_MADV_HUGEPAGE = 14
_MADV_DONTNEED = 4

# The table that the native functions share (the handler's ctx): int64 words.
_LOCK, _LIMIT, _POOLED, _HITS, _MISSES, _KEPT, _RELEASED, _CLOCK, _SLOT0 = range(9)
_WORDS = _SLOT0 + 3 * SLOTS  # slot pointers, slot capacities, then when each slot was filled (the clock)


IR = r"""
declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare ptr @aligned_alloc(i64, i64)
declare i32 @madvise(ptr, i64, i32)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare {i64, i1} @llvm.umul.with.overflow.i64(i64, i64)
{PAUSE_DECLARE}

define internal void @lock(ptr %ctx) {
entry:
  br label %try
try:
  %old = atomicrmw xchg ptr %ctx, i64 1 acquire
  %free = icmp eq i64 %old, 0
  br i1 %free, label %done, label %spin
spin:
{PAUSE}
  %now = load atomic i64, ptr %ctx monotonic, align 8
  %still = icmp ne i64 %now, 0
  br i1 %still, label %spin, label %try
done:
  ret void
}

define internal void @unlock(ptr %ctx) {
  store atomic i64 0, ptr %ctx release, align 8
  ret void
}

define internal void @bump(ptr %ctx, i64 %word, i64 %by) {
  %p = getelementptr i64, ptr %ctx, i64 %word
  %v = load i64, ptr %p
  %v1 = add i64 %v, %by
  store i64 %v1, ptr %p
  ret void
}

; slot s's word in the table: field 0 its block (0: empty), 1 the block's capacity, 2 when it was kept
define internal ptr @slot(ptr %ctx, i64 %field, i64 %s) {
  %f = mul i64 %field, {SLOTS}
  %i0 = add i64 %f, %s
  %i = add i64 %i0, {SLOT0}
  %p = getelementptr i64, ptr %ctx, i64 %i
  ret ptr %p
}

; the block's header, HEADER bytes before the pointer NumPy holds: [libc block, capacity, keepable]
define internal ptr @raw_of(ptr %user) {
  %h = getelementptr i8, ptr %user, i64 -{HEADER}
  %raw = load ptr, ptr %h
  ret ptr %raw
}

define internal i64 @capacity_of(ptr %user) {
  %h = getelementptr i8, ptr %user, i64 -{HEADER}
  %pc = getelementptr i64, ptr %h, i64 1
  %cap = load i64, ptr %pc
  ret i64 %cap
}

define internal i1 @keepable(ptr %user) {
  %h = getelementptr i8, ptr %user, i64 -{HEADER}
  %pk = getelementptr i64, ptr %h, i64 2
  %keep = load i64, ptr %pk
  %kept = icmp ne i64 %keep, 0
  ret i1 %kept
}

define internal ptr @stamp(ptr %raw, i64 %cap, i64 %keep) {
  store ptr %raw, ptr %raw
  %pc = getelementptr i64, ptr %raw, i64 1
  store i64 %cap, ptr %pc
  %pk = getelementptr i64, ptr %raw, i64 2
  store i64 %keep, ptr %pk
  %user = getelementptr i8, ptr %raw, i64 {HEADER}
  ret ptr %user
}

; madvise on the whole pages inside [start, end): madvise rounds a length up, and the bytes after a block
; may be the next heap chunk's header
define internal void @advise_inside(i64 %start, i64 %end, i32 %advice) {
entry:
  %a1 = add i64 %start, 4095
  %from = and i64 %a1, -4096
  %to = and i64 %end, -4096
  %some = icmp ugt i64 %to, %from
  br i1 %some, label %advise, label %done
advise:
  %len = sub i64 %to, %from
  %pf = inttoptr i64 %from to ptr
  %ignored = call i32 @madvise(ptr %pf, i64 %len, i32 %advice)
  br label %done
done:
  ret void
}

define internal void @hugepages(ptr %raw, i64 %bytes) {
entry:
  %big = icmp uge i64 %bytes, {HUGE_MIN}
  br i1 %big, label %advise, label %done
advise:
  %a = ptrtoint ptr %raw to i64
  %end = add i64 %a, %bytes
  call void @advise_inside(i64 %a, i64 %end, i32 {MADV_HUGEPAGE})
  br label %done
done:
  ret void
}

; the most recently kept block of capacity in [size, 2 size], taken out of the table; null if none (the
; newest is the likeliest still in cache, as glibc's bins reuse the last chunk freed)
define internal ptr @take(ptr %ctx, i64 %size) {
entry:
  call void @lock(ptr %ctx)
  %most = shl i64 %size, 1
  br label %scan
""" + loop_head("scan", "look", "entry", [("s", "i64", "0", "%s1"), ("best", "i64", "-1", "%best1"),
                ("bestcap", "i64", "-1", "%bestcap1"), ("beststamp", "i64", "-1", "%beststamp1")],
                "more = icmp slt i64 %s, {SLOTS}", "chosen") + """\
{look}  %full = icmp ne i64 %p, 0
  %big = icmp uge i64 %c, %size
  %small = icmp ule i64 %c, %most
  %newer = icmp sgt i64 %t, %beststamp
  %f1 = and i1 %full, %big
  %f2 = and i1 %small, %newer
  %fits = and i1 %f1, %f2
  %best1 = select i1 %fits, i64 %s, i64 %best
  %bestcap1 = select i1 %fits, i64 %c, i64 %bestcap
  %beststamp1 = select i1 %fits, i64 %t, i64 %beststamp
  %s1 = add i64 %s, 1
  br label %scan
chosen:
  %none = icmp slt i64 %best, 0
  br i1 %none, label %miss, label %hit
miss:
  call void @bump(ptr %ctx, i64 {MISSES}, i64 1)
  br label %evict
; A miss needs fresh pages: kept blocks too small for it go back first (up to its size), so the system can
; hand their pages out again (on a VM, pages just freed are backed; pages never used may not be), and the
; cache holds what calls reuse, not what they outgrew.
evict:
  %e = phi i64 [0, %miss], [%e1, %evict_next]
  %freed = phi i64 [0, %miss], [%freed1, %evict_next]
  %emore = icmp slt i64 %e, {SLOTS}
  %need = icmp ult i64 %freed, %size
  %go = and i1 %emore, %need
  br i1 %go, label %evict_look, label %evicted
evict_look:
{evict_look}  %efull = icmp ne i64 %ep, 0
  %esmall = icmp ult i64 %ec, %size
  %out = and i1 %efull, %esmall
  br i1 %out, label %evict_one, label %evict_next
evict_one:
  store i64 0, ptr %epp
  %eneg = sub i64 0, %ec
  call void @bump(ptr %ctx, i64 {POOLED}, i64 %eneg)
  call void @bump(ptr %ctx, i64 {RELEASED}, i64 1)
  %euser = inttoptr i64 %ep to ptr
  %eraw = call ptr @raw_of(ptr %euser)
  call void @free(ptr %eraw)
  br label %evict_next
evict_next:
  %gained = phi i64 [%ec, %evict_one], [0, %evict_look]
  %e1 = add i64 %e, 1
  %freed1 = add i64 %freed, %gained
  br label %evict
evicted:
  call void @unlock(ptr %ctx)
  ret ptr null
hit:
  %qp = call ptr @slot(ptr %ctx, i64 0, i64 %best)
  %q = load i64, ptr %qp
  store i64 0, ptr %qp
  %neg = sub i64 0, %bestcap
  call void @bump(ptr %ctx, i64 {POOLED}, i64 %neg)
  call void @bump(ptr %ctx, i64 {HITS}, i64 1)
  call void @unlock(ptr %ctx)
  %r = inttoptr i64 %q to ptr
  ret ptr %r
}

define ptr @pool_malloc(ptr %ctx, i64 %size) {
entry:
{sized_malloc}small:
  %raw = call ptr @malloc(i64 %total)
  %nul = icmp eq ptr %raw, null
  br i1 %nul, label %fail, label %small_ok
small_ok:
  %u = call ptr @stamp(ptr %raw, i64 %size, i64 0)
  ret ptr %u
{take_malloc}reuse:
  ret ptr %got
fresh:
  %rounded0 = add i64 %total, 63
  %rounded = and i64 %rounded0, -64
  %raw2 = call ptr @aligned_alloc(i64 64, i64 %rounded)
  %nul2 = icmp eq ptr %raw2, null
  br i1 %nul2, label %fail, label %fresh_ok
fresh_ok:
  call void @hugepages(ptr %raw2, i64 %rounded)
  %u2 = call ptr @stamp(ptr %raw2, i64 %size, i64 1)
  ret ptr %u2
fail:
  ret ptr null
}

define ptr @pool_calloc(ptr %ctx, i64 %n, i64 %each) {
entry:
  %m = call {i64, i1} @llvm.umul.with.overflow.i64(i64 %n, i64 %each)
  %size = extractvalue {i64, i1} %m, 0
  %over = extractvalue {i64, i1} %m, 1
  %total = add i64 %size, {HEADER}
  %wraps = icmp ult i64 %total, %size
  %bad = or i1 %over, %wraps
  br i1 %bad, label %fail, label %sized
{sized_calloc}{take_calloc}reuse:
  call void @llvm.memset.p0.i64(ptr %got, i8 0, i64 %size, i1 false)
  ret ptr %got
zeroed:
  %raw = call ptr @calloc(i64 1, i64 %total)
  %nul = icmp eq ptr %raw, null
  br i1 %nul, label %fail, label %ok
ok:
  %keep = zext i1 %large to i64
  br i1 %large, label %advise, label %stamped
advise:
  call void @hugepages(ptr %raw, i64 %total)
  br label %stamped
stamped:
  %u = call ptr @stamp(ptr %raw, i64 %size, i64 %keep)
  ret ptr %u
fail:
  ret ptr null
}

define ptr @pool_realloc(ptr %ctx, ptr %user, i64 %size) {
{user_realloc}new:
  %n = call ptr @pool_malloc(ptr %ctx, i64 %size)
  ret ptr %n
{header_realloc}  %fits = icmp ule i64 %size, %cap
  %inplace = and i1 %kept, %fits
  br i1 %inplace, label %same, label %move
; A kept block shrinks in place (a product's buffers sized by an upper bound, then cut to the entries made):
; it keeps its capacity, so the next call asking the same bound reuses it. Its pages up to twice the new
; size plus SLACK stay (a kernel that wrote its whole bound reuses them, backed, on the next call); those
; beyond are given back (MADV_DONTNEED: nothing to do for pages never touched), so a small array cut from a
; large written buffer does not hold the buffer's memory.
same:
  %ua = ptrtoint ptr %user to i64
  %keep_end = shl i64 %size, 1
  %end0 = add i64 %ua, %keep_end
  %from = add i64 %end0, {SLACK}
  %stop = add i64 %ua, %cap
  call void @advise_inside(i64 %from, i64 %stop, i32 {MADV_DONTNEED})
  ret ptr %user
; A block grown to a pooled size takes a kept block when one fits (its pages backed: a kernel's result
; buffers grow by doubling, and the last call's buffers of each size were kept), copying the old contents;
; else libc moves it (fresh pages past the old ones).
move:
{sized_realloc}{take_realloc}copy:
  %less = icmp ult i64 %cap, %size
  %copied = select i1 %less, i64 %cap, i64 %size
  call void @llvm.memcpy.p0.p0.i64(ptr %got, ptr %user, i64 %copied, i1 false)
  call void @pool_free(ptr %ctx, ptr %user, i64 0)
  ret ptr %got
go:
  %raw = call ptr @raw_of(ptr %user)
  %raw2 = call ptr @realloc(ptr %raw, i64 %total)
  %nul = icmp eq ptr %raw2, null
  br i1 %nul, label %fail, label %ok
ok:
  %keep2 = zext i1 %grow_large to i64
  %u = call ptr @stamp(ptr %raw2, i64 %size, i64 %keep2)
  ret ptr %u
fail:
  ret ptr null
}

define void @pool_free(ptr %ctx, ptr %user, i64 %ignored) {
{user_free}  br i1 %kept, label %try, label %give
try:
  call void @lock(ptr %ctx)
  %pl = getelementptr i64, ptr %ctx, i64 {LIMIT}
  %limit = load i64, ptr %pl
  %pp = getelementptr i64, ptr %ctx, i64 {POOLED}
  %pooled = load i64, ptr %pp
  %after = add i64 %pooled, %cap
  %room = icmp ule i64 %after, %limit
  br i1 %room, label %scan, label %release
""" + loop_head("scan", "look", "try", [("s", "i64", "0", "%s1")], "more = icmp slt i64 %s, {SLOTS}", "release") + """\
{free_look}  %empty = icmp eq i64 %p, 0
  %s1 = add i64 %s, 1
  br i1 %empty, label %store, label %scan
; the slot's capacity and time first, its pointer last (a release store: a process forked meanwhile sees
; a slot either empty or whole)
store:
  %cp = call ptr @slot(ptr %ctx, i64 1, i64 %s)
  store i64 %cap, ptr %cp
  %clockp = getelementptr i64, ptr %ctx, i64 {CLOCK}
  %now = load i64, ptr %clockp
  %now1 = add i64 %now, 1
  store i64 %now1, ptr %clockp
  %tp = call ptr @slot(ptr %ctx, i64 2, i64 %s)
  store i64 %now1, ptr %tp
  %ua = ptrtoint ptr %user to i64
  store atomic i64 %ua, ptr %sp release, align 8
  store i64 %after, ptr %pp
  call void @bump(ptr %ctx, i64 {KEPT}, i64 1)
  call void @unlock(ptr %ctx)
  ret void
release:
  call void @bump(ptr %ctx, i64 {RELEASED}, i64 1)
  call void @unlock(ptr %ctx)
  br label %give
give:
  call void @free(ptr %raw)
  br label %done
done:
  ret void
}

; every kept block back to libc
define void @pool_release(ptr %ctx) {
entry:
  call void @lock(ptr %ctx)
  br label %scan
""" + loop_head("scan", "look", "entry", [("s", "i64", "0", "%s1")], "more = icmp slt i64 %s, {SLOTS}", "done",
                latch="next") + """\
{free_look}  %full = icmp ne i64 %p, 0
  br i1 %full, label %give, label %next
give:
  store i64 0, ptr %sp
  %user = inttoptr i64 %p to ptr
  %raw = call ptr @raw_of(ptr %user)
  call void @free(ptr %raw)
  br label %next
next:
  %s1 = add i64 %s, 1
  br label %scan
done:
  %pp = getelementptr i64, ptr %ctx, i64 {POOLED}
  store i64 0, ptr %pp
  call void @unlock(ptr %ctx)
  ret void
}
"""


def _loads(s: str, fields: str, prefix: str = "") -> str:
    """``%{prefix}p`` (and ``c``, ``t``: ``fields`` of them), slot ``%s``'s block, capacity and time, each through
    its address ``%{prefix}p{field}`` (the block's: ``%{prefix}pp``, or ``%sp`` in the scans of free / release)."""
    out = ""
    for k, f in enumerate(fields):
        at = "%sp" if fields == "p" else f"%{prefix}p{f}"
        out += f"  {at} = call ptr @slot(ptr %ctx, i64 {k}, i64 %{s})\n  %{prefix}{f} = load i64, ptr {at}\n"
    return out


def _sized(large: str, pooled: str, other: str, total: bool = True) -> str:
    """``%total``, the bytes with the header (a wrap goes to ``fail``; ``total`` False: computed before),
    then block sized: ``%large`` whether the size is pooled, on to ``pooled`` or ``other``."""
    head = ("  %total = add i64 %size, {HEADER}\n  %wraps = icmp ult i64 %total, %size\n"
            "  br i1 %wraps, label %fail, label %sized\n") if total else ""
    return head + bind("sized:\n  %{large} = icmp uge i64 %size, {POOL_MIN}\n  br i1 %{large}, label %{pooled}, "
                       "label %{other}\n", large=large, pooled=pooled, other=other)


def _user(null: str, header: str = "") -> str:
    """Block entry: a null ``%user`` goes to block ``null``; ``header``: then block old with ``%cap`` and
    ``%kept`` from the block's header (after ``header``'s own lines)."""
    return (f"entry:\n  %isnull = icmp eq ptr %user, null\n  br i1 %isnull, label %{null}, label %old\n"
            if null else "") + (f"old:\n{header}  %cap = call i64 @capacity_of(ptr %user)\n"
                                 "  %kept = call i1 @keepable(ptr %user)\n" if header is not None else "")


def _take(block: str, hit: str, miss: str) -> str:
    """Block ``block``: ``%got``, a kept block for the size (``@take``), on to ``hit`` or ``miss`` when none."""
    return (f"{block}:\n  %got = call ptr @take(ptr %ctx, i64 %size)\n  %hit = icmp ne ptr %got, null\n"
            f"  br i1 %hit, label %{hit}, label %{miss}\n")


def ir() -> str:
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    pieces = dict(look=_loads("s", "pct"), evict_look=_loads("e", "pc", "e"), free_look=_loads("s", "p"),
                  sized_malloc=_sized("large", "pooled", "small"), take_malloc=_take("pooled", "reuse", "fresh"),
                  sized_calloc=_sized("large", "pooled", "zeroed", total=False),
                  take_calloc=_take("pooled", "reuse", "zeroed"), sized_realloc=_sized("grow_large", "try_take", "go"),
                  take_realloc=_take("try_take", "copy", "go"), user_realloc=_user("new", None),
                  header_realloc=_user("", ""), user_free=_user("done", "  %raw = call ptr @raw_of(ptr %user)\n"),
                  PAUSE_DECLARE="declare void @llvm.x86.sse2.pause()" if x86 else "",
                  PAUSE="  call void @llvm.x86.sse2.pause()" if x86 else "")
    constants = dict(SLOTS=SLOTS, SLOT0=_SLOT0, HEADER=HEADER, POOL_MIN=POOL_MIN, HUGE_MIN=HUGE_MIN, SLACK=SLACK,
                     MADV_HUGEPAGE=_MADV_HUGEPAGE, MADV_DONTNEED=_MADV_DONTNEED, LIMIT=_LIMIT, POOLED=_POOLED,
                     CLOCK=_CLOCK, HITS=_HITS, MISSES=_MISSES, KEPT=_KEPT, RELEASED=_RELEASED)
    return fill(IR, **pieces, **constants)
