"""Failed allocations in generated code become ``MemoryError``, not a write through NULL.

MLIR lowers ``memref.alloc`` to ``malloc`` (and LLVM's O3 turns some into ``calloc``) without checking the
result. After LLVM has optimized a kernel (so it still knows these are the C allocator's functions: it
elides, merges and zero-fills them as usual), ``route_heap_calls`` renames its calls to our checked versions
(``__splyce_malloc`` ...), which resolve to the functions of a small helper library loaded (RTLD_GLOBAL) before
any kernel, from the disk cache after the first process (MCJIT's symbol table too, without a linker).
``add_entry_wrapper`` gives every kernel one more entry point, ``splyce_entry``: it takes the same arguments
as ``_mlir_ciface_kernel``, calls ``_setjmp`` once, then calls the kernel (never inlined into the wrapper, so the kernel's code is the same as without the guard). An allocation that fails inside the call
``longjmp``s back to the wrapper, which frees every block the call had allocated and returns the size that
failed; the runtime raises ``MemoryError``. The cost: one ``_setjmp`` and two ``pthread_setspecific`` per
call, and a 16-byte header per allocation (two pointers: the blocks of a running call form a list).

Threads: the runtime runs a split kernel's chunks by calling ``splyce_entry`` once per chunk, each on its
own thread. The current call's context (its ``jmp_buf`` and block list) is found through a pthread key, so
a failing allocation jumps back only to the wrapper frame of its own thread, which is live: no ``longjmp``
ever crosses threads. The other chunks finish normally; the runtime raises once all have returned.

The blocks come from libc's heap, or from the heap the runtime sets (``set_heap``: its cache of freed large
buffers, native/memory_pool.py, so that a loop of calls reuses its results' backed pages instead of
faulting fresh ones in on every call).

Blocks still live when the kernel returns are its results (or buffers it never freed, as before): they are
detached from the list and are freed by the runtime with ``free_address`` (never libc ``free``: the pointer
handed out is 16 bytes past the block's start).
"""

from __future__ import annotations

import ctypes
import threading

GUARDED_ENTRY = "splyce_entry"
KERNEL_ENTRY = "_mlir_ciface_kernel"
_PREFIX = "__splyce_"
# The C heap functions generated code may call, renamed to our checked versions after optimization.
HEAP_FUNCTIONS = ("malloc", "calloc", "realloc", "free")
# Functions that allocate or free heap memory that we do not route: a kernel calling one is refused.
_UNROUTED = ("aligned_alloc", "posix_memalign", "memalign", "valloc", "pvalloc", "reallocarray", "strdup",
             "strndup", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv")

# Context of a running call, an alloca in the wrapper's frame: jmp_buf (glibc's is 200 bytes on x86-64
# and 312 on AArch64), the first block of the call's list, the size that failed, the previous context.
_JMPBUF_BYTES = 512
_CONTEXT_BYTES = _JMPBUF_BYTES + 32
_HEAD, _FAILED, _PREVIOUS = _JMPBUF_BYTES, _JMPBUF_BYTES + 8, _JMPBUF_BYTES + 16
_HEADER = 16   # block header: next block, address of the pointer that points at this block (null: detached)

_lock = threading.Lock()
_installed = None
_heap_provider = None


def set_heap(provider) -> None:
    """Have the checked allocator take its blocks from ``provider()`` (called once, at ``install``): a dict
    of native function addresses (``_heap_calls``), or None for libc's heap. The runtime sets its cache of
    freed large buffers here (native/memory_pool.py), so that kernels' result buffers are reused too. Takes
    effect only before the first ``install`` of the process."""
    global _heap_provider
    _heap_provider = provider


def _walk_blocks(body: str) -> str:
    """IR running ``body`` on each block ``%h`` of the list of context ``%ctx`` (``%next`` is loaded before
    ``body`` runs, so ``body`` may free ``%h``); ends in block ``exit``."""
    return f"""entry:
  %head = getelementptr i8, ptr %ctx, i64 {_HEAD}
  %first = load ptr, ptr %head
  br label %loop
loop:
  %h = phi ptr [ %first, %entry ], [ %next, %body ]
  %done = icmp eq ptr %h, null
  br i1 %done, label %exit, label %body
body:
  %next = load ptr, ptr %h
{body}
  br label %loop
exit:"""


# The process-specific numbers the helper needs (its pthread key; the heap's context and functions) are read
# from this table, filled in after loading: the helper's IR, and so its machine code, is the same in every
# process and comes from the native code cache (native/codegen.py) after the first.
_CONFIG = f"{_PREFIX}guard_config"
_CONFIG_SLOTS = ("key", "ctx") + HEAP_FUNCTIONS


def _slot(name: str) -> str:
    return f"getelementptr inbounds ([{len(_CONFIG_SLOTS)} x i64], ptr @{_CONFIG}, i64 0, i64 {_CONFIG_SLOTS.index(name)})"


def _heap_calls(pooled: bool) -> dict:
    """The IR call prefixes of the heap underneath the checked allocator (``"free_end"`` closes a free): libc's,
    or the native functions that ``set_heap`` gives (malloc / calloc / realloc / free taking a leading context
    pointer ``ctx``, free a trailing size that is ignored), called through the config table."""
    if not pooled:
        callee, end = {name: f"@{name}(" for name in HEAP_FUNCTIONS}, ")"
    else:
        callee, end = {name: f"@{_PREFIX}heap_{name}(" for name in HEAP_FUNCTIONS}, ", i64 0)"
    calls = {name: ("call void " if name == "free" else "call ptr ") + c for name, c in callee.items()}
    return dict(calls, free_end=end)


def _pooled_heap_ir() -> str:
    """Internal forwarders to the pooled heap's functions (inlined at O2: two loads per call)."""
    params = {"malloc": ("ptr", "i64 %a"), "calloc": ("ptr", "i64 %a, i64 %b"), "realloc": ("ptr", "ptr %a, i64 %b"),
              "free": ("void", "ptr %a, i64 %b")}
    out = []
    for name, (ret, args) in params.items():
        forwarded = ", ".join(a.split()[0] + " " + a.split()[1] for a in args.split(", "))
        call = f"call {ret} %f(ptr %ctx, {forwarded})"
        body = f"  %r = {call}\n  ret ptr %r" if ret == "ptr" else f"  {call}\n  ret void"
        out.append(f"""define internal {ret} @{_PREFIX}heap_{name}({args}) alwaysinline {{
  %f = load ptr, ptr {_slot(name)}
  %ctx = load ptr, ptr {_slot("ctx")}
{body}
}}
""")
    return "\n".join(out)


def _helper_ir(pooled: bool = False) -> str:
    """The checked allocator and the wrapper's enter / leave / fail steps, on libc's heap or (``pooled``) on
    the heap ``set_heap`` gives; the pthread key and the heap's addresses are read from ``_CONFIG`` (through
    the accessors ``@__splyce_key_get`` / ``_set``)."""
    key = f"{_PREFIX}key"
    config = f"@{_CONFIG} = global [{len(_CONFIG_SLOTS)} x i64] zeroinitializer\n"
    accessors = f"""
define internal ptr @{key}_get() alwaysinline {{
  %k = load i32, ptr {_slot("key")}
  %r = call ptr @pthread_getspecific(i32 %k)
  ret ptr %r
}}

define internal i32 @{key}_set(ptr %v) alwaysinline {{
  %k = load i32, ptr {_slot("key")}
  %r = call i32 @pthread_setspecific(i32 %k, ptr %v)
  ret i32 %r
}}
"""
    return config + _helper_body(pooled) + accessors + (_pooled_heap_ir() if pooled else "")


def _tracked(size: str, allocate: str) -> str:
    """Blocks try / ok / failed (the caller's): ``allocate`` (an allocation of ``%total`` bytes into ``%h``)
    after ``%total = size + _HEADER``; a block is linked into the call's list, NULL goes to ``failed``."""
    return f"""try:
  %total = add i64 {size}, {_HEADER}
  %h = {allocate}
  %null = icmp eq ptr %h, null
  br i1 %null, label %failed, label %ok
ok:
  %p = call ptr @{_PREFIX}track(ptr %h)
  ret ptr %p
failed:"""


def _relink(h: str, next_: str, new_pprev: str, after: str) -> str:
    """Blocks from ``%linked`` on: when block ``h``'s header says where it is pointed at from (``%pprev``), that
    pointer becomes ``%next_`` and the next block's back pointer ``%new_pprev``; then block ``after``."""
    load_next = f"\n  %next = load ptr, ptr %{h}" if next_ != "next" else ""
    return f"""  %linked = icmp ne ptr %pprev, null
  br i1 %linked, label %relink, label %{after}
relink:
  store ptr %{next_}, ptr %pprev{load_next}
  %has_next = icmp ne ptr %next, null
  br i1 %has_next, label %relink_next, label %{after}
relink_next:
  %next_pprev = getelementptr i8, ptr %next, i64 8
  store ptr %{new_pprev}, ptr %next_pprev
  br label %{after}"""


def _helper_body(pooled: bool) -> str:
    call = _heap_calls(pooled)
    get, set_ = f"@{_PREFIX}key_get(", f"@{_PREFIX}key_set("
    detach_each = _walk_blocks("  %pprev = getelementptr i8, ptr %h, i64 8\n  store ptr null, ptr %pprev")
    free_each = _walk_blocks(f"  {call['free']}ptr %h{call['free_end']}")
    return f"""
declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare ptr @pthread_getspecific(i32)
declare i32 @pthread_setspecific(i32, ptr)
declare void @longjmp(ptr, i32) noreturn
declare {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64, i64)

define void @{_PREFIX}guard_enter(ptr %ctx) {{
  %prev = call ptr {get})
  %head = getelementptr i8, ptr %ctx, i64 {_HEAD}
  store ptr null, ptr %head
  %failed = getelementptr i8, ptr %ctx, i64 {_FAILED}
  store i64 0, ptr %failed
  %prevp = getelementptr i8, ptr %ctx, i64 {_PREVIOUS}
  store ptr %prev, ptr %prevp
  %r = call i32 {set_}ptr %ctx)
  ret void
}}

; success: the blocks still live belong to the results now; detach them from the list
define void @{_PREFIX}guard_leave(ptr %ctx) {{
{detach_each}
  call void @{_PREFIX}restore(ptr %ctx)
  ret void
}}

; after the longjmp: free every block the call allocated; returns 1 + the size that failed
define i64 @{_PREFIX}guard_fail(ptr %ctx) {{
{free_each}
  call void @{_PREFIX}restore(ptr %ctx)
  %failedp = getelementptr i8, ptr %ctx, i64 {_FAILED}
  %failed = load i64, ptr %failedp
  %small = icmp ult i64 %failed, 9223372036854775807
  %capped = select i1 %small, i64 %failed, i64 9223372036854775806
  %status = add i64 %capped, 1
  ret i64 %status
}}

define internal void @{_PREFIX}restore(ptr %ctx) {{
  %prevp = getelementptr i8, ptr %ctx, i64 {_PREVIOUS}
  %prev = load ptr, ptr %prevp
  %r = call i32 {set_}ptr %prev)
  ret void
}}

; no context (called outside splyce_entry): hand back NULL as the C allocator would
define internal ptr @{_PREFIX}fail(i64 %size) cold noinline {{
  %ctx = call ptr {get})
  %none = icmp eq ptr %ctx, null
  br i1 %none, label %null, label %jump
null:
  ret ptr null
jump:
  %failed = getelementptr i8, ptr %ctx, i64 {_FAILED}
  store i64 %size, ptr %failed
  call void @longjmp(ptr %ctx, i32 1)
  unreachable
}}

; link block %h at the head of the current call's list (detached when there is no call)
define internal ptr @{_PREFIX}track(ptr %h) {{
  %ctx = call ptr {get})
  %pprev = getelementptr i8, ptr %h, i64 8
  %none = icmp eq ptr %ctx, null
  br i1 %none, label %detached, label %linked
detached:
  store ptr null, ptr %h
  store ptr null, ptr %pprev
  br label %out
linked:
  %head = getelementptr i8, ptr %ctx, i64 {_HEAD}
  %first = load ptr, ptr %head
  store ptr %first, ptr %h
  store ptr %head, ptr %pprev
  %some = icmp ne ptr %first, null
  br i1 %some, label %relink, label %store_head
relink:
  %first_pprev = getelementptr i8, ptr %first, i64 8
  store ptr %h, ptr %first_pprev
  br label %store_head
store_head:
  store ptr %h, ptr %head
  br label %out
out:
  %user = getelementptr i8, ptr %h, i64 {_HEADER}
  ret ptr %user
}}

define ptr @{_PREFIX}malloc(i64 %size) {{
  %big = icmp ugt i64 %size, -{_HEADER + 1}
  br i1 %big, label %failed, label %try
{_tracked("%size", call['malloc'] + "i64 %total)")}
  %r = call ptr @{_PREFIX}fail(i64 %size)
  ret ptr %r
}}

define ptr @{_PREFIX}calloc(i64 %count, i64 %size) {{
  %mul = call {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64 %count, i64 %size)
  %bytes = extractvalue {{ i64, i1 }} %mul, 0
  %overflow = extractvalue {{ i64, i1 }} %mul, 1
  %big = icmp ugt i64 %bytes, -{_HEADER + 1}
  %bad = or i1 %overflow, %big
  br i1 %bad, label %failed, label %try
{_tracked("%bytes", call['calloc'] + "i64 1, i64 %total)")}
  %asked = select i1 %overflow, i64 -1, i64 %bytes
  %r = call ptr @{_PREFIX}fail(i64 %asked)
  ret ptr %r
}}

define ptr @{_PREFIX}realloc(ptr %p, i64 %size) {{
entry:
  %fresh = icmp eq ptr %p, null
  br i1 %fresh, label %as_malloc, label %check
as_malloc:
  %m = call ptr @{_PREFIX}malloc(i64 %size)
  ret ptr %m
check:
  %big = icmp ugt i64 %size, -{_HEADER + 1}
  br i1 %big, label %failed, label %try
try:
  %h = getelementptr i8, ptr %p, i64 -{_HEADER}
  %total = add i64 %size, {_HEADER}
  %h2 = {call['realloc']}ptr %h, i64 %total)
  %null = icmp eq ptr %h2, null
  br i1 %null, label %failed, label %moved
moved:
  ; the header moved with the block: make the list point at its new address
  %pprevp = getelementptr i8, ptr %h2, i64 8
  %pprev = load ptr, ptr %pprevp
{_relink("h2", "h2", "h2", "ok")}
ok:
  %user = getelementptr i8, ptr %h2, i64 {_HEADER}
  ret ptr %user
failed:
  ; the old block is still valid and still in the list: the fail path frees it
  %r = call ptr @{_PREFIX}fail(i64 %size)
  ret ptr %r
}}

define void @{_PREFIX}free(ptr %p) {{
entry:
  %none = icmp eq ptr %p, null
  br i1 %none, label %out, label %unlink
unlink:
  %h = getelementptr i8, ptr %p, i64 -{_HEADER}
  %next = load ptr, ptr %h
  %pprevp = getelementptr i8, ptr %h, i64 8
  %pprev = load ptr, ptr %pprevp
{_relink("h", "next", "pprev", "release")}
release:
  {call['free']}ptr %h{call['free_end']}
  br label %out
out:
  ret void
}}
"""


_EXPORTED = tuple(f"{_PREFIX}{name}" for name in HEAP_FUNCTIONS + ("guard_enter", "guard_leave", "guard_fail"))


class _Installed:
    def __init__(self, compiled, key: int, heap: dict | None = None):
        self.compiled = compiled   # keeps the helper's machine code alive
        self.key = key
        self.heap = heap           # the heap underneath (None: libc's)
        self.free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.function_address(f"{_PREFIX}free"))


def installed() -> bool:
    """Whether the helper is installed in this process already."""
    return _installed is not None


def install() -> _Installed:
    """Compile (or load) the helper once per process and make its functions resolvable by every kernel loaded
    afterwards: a shared library loaded with RTLD_GLOBAL (kernels' libraries find ``__splyce_*`` through the
    dynamic loader), and for code MCJIT loads, llvmlite's symbol table (``codegen.add_process_symbols``).
    Idempotent; call before loading a guarded kernel."""
    global _installed
    with _lock:
        if _installed is None:
            from splyce.native import codegen

            libc = ctypes.CDLL(None)
            key = ctypes.c_uint()
            if libc.pthread_key_create(ctypes.byref(key), None) != 0:
                raise RuntimeError("splyce: pthread_key_create failed (no thread-specific key left)")
            heap = _heap_provider() if _heap_provider is not None else None
            target = codegen.host_target()
            compiled = codegen.compile_cached(_helper_ir(heap is not None), target,
                                              codegen.CodegenOptions(opt_level=2), names=_EXPORTED,
                                              global_symbols=True)
            config = (ctypes.c_int64 * len(_CONFIG_SLOTS)).from_address(compiled.global_address(_CONFIG))
            config[0] = key.value
            for k, name in enumerate(_CONFIG_SLOTS[1:], start=1):
                config[k] = int(heap[name]) if heap is not None else 0
            codegen.add_process_symbols({name: compiled.function_address(name) for name in _EXPORTED})
            _installed = _Installed(compiled, key.value, heap)
        return _installed


def free_address(address: int) -> None:
    """Free a block a guarded kernel allocated and returned (a result buffer)."""
    install().free(address)


def add_entry_wrapper(module) -> None:
    """Add ``splyce_entry`` to an (unoptimized) llvmlite kernel module: ``_setjmp`` once, then the kernel.
    Returns 0, or 1 + the byte count of the allocation that failed (everything the call allocated is freed
    by then)."""
    import llvmlite.binding as llvm

    kernel = module.get_function(KERNEL_ENTRY)
    types = [str(a.type) for a in kernel.arguments]
    params = ", ".join(f"{t} %a{i}" for i, t in enumerate(types))   # passed through as they come
    wrapper = f"""
declare void @{KERNEL_ENTRY}({", ".join(types)})
declare void @{_PREFIX}guard_enter(ptr)
declare void @{_PREFIX}guard_leave(ptr)
declare i64 @{_PREFIX}guard_fail(ptr)
declare i32 @_setjmp(ptr) #0

define i64 @{GUARDED_ENTRY}({params}) {{
entry:
  %ctx = alloca [{_CONTEXT_BYTES} x i8], align 16
  call void @{_PREFIX}guard_enter(ptr %ctx)
  %jumped = call i32 @_setjmp(ptr %ctx) #0
  %first = icmp eq i32 %jumped, 0
  br i1 %first, label %run, label %failed
run:
  call void @{KERNEL_ENTRY}({params}) #1
  call void @{_PREFIX}guard_leave(ptr %ctx)
  ret i64 0
failed:
  %status = call i64 @{_PREFIX}guard_fail(ptr %ctx)
  ret i64 %status
}}

attributes #0 = {{ returns_twice }}
attributes #1 = {{ noinline }}
"""
    extra = llvm.parse_assembly(wrapper)
    extra.triple = module.triple
    extra.data_layout = module.data_layout
    module.link_in(extra)


def route_heap_calls(module) -> None:
    """Rename the C heap functions an optimized kernel module calls to our checked versions (in place)."""
    for fn in module.functions:
        if not fn.is_declaration:
            continue
        if fn.name in HEAP_FUNCTIONS:
            fn.name = _PREFIX + fn.name
        elif fn.name in _UNROUTED:
            raise RuntimeError(f"internal error: a kernel calls {fn.name}, which the allocation guard does not "
                               "check; add it to splyce.backend.alloc_guard")
