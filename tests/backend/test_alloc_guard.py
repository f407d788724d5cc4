"""Allocations inside generated code that fail raise MemoryError in Python (backend/alloc_guard.py): no
write through NULL, no segfault. Out-of-memory is provoked under an address-space limit (RLIMIT_AS) in a
child process, and the parent fails on any signal."""

import os
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")


def _run_child(script: str, timeout: int = 240) -> str:
    env = dict(os.environ, SPLYCE_MEMORY_BUDGET="1e15")   # the planner's budget must not be what stops it
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert run.returncode >= 0, f"child killed by signal {-run.returncode}:\n{run.stdout}\n{run.stderr[-3000:]}"
    assert run.returncode == 0, f"child failed:\n{run.stdout}\n{run.stderr[-3000:]}"
    return run.stdout


LIMIT = '''
import resource
def limit_address_space(extra):
    """Allow ``extra`` bytes of address space beyond what the process maps now."""
    with open("/proc/self/status") as status:
        vm = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, vm + extra))
'''


def test_jit_workspace_too_big_raises_memory_error_and_recovers():
    """Sparse SpGEMM through the sparsifier allocates a dense workspace as wide as the result (8 GiB of
    values here) that the planner's estimate does not see: under a 1 GiB margin it must fail in Python, the
    same call must fail the same way again (nothing leaked), and later calls must work."""
    out = _run_child(LIMIT + '''
import numpy as np, scipy.sparse as sps, splyce
N = 2**30
a = sps.csr_array((np.ones(3), ([0, 1, 2], [5, 7, 9])), shape=(3, 16))
b = sps.csr_array((np.ones(3), ([5, 7, 9], [1, 2, N - 1])), shape=(16, N))
spgemm = splyce.jit(lambda a, b: a @ b, out_format="sparse", library=False)   # the sparsifier's kernel
spgemm.kernel_for(a, b)                      # compile before the limit
limit_address_space(1 << 30)
for attempt in range(3):
    try:
        spgemm(a, b)
        print("no error")
    except MemoryError as e:
        print("MemoryError:", e)
c = sps.random_array((40, 40), density=0.1, format="csr", random_state=0)
print("small ok", abs(spgemm(c, c) - c @ c).max() == 0)
''')
    lines = out.splitlines()
    errors = [l for l in lines if l.startswith("MemoryError:")]
    assert len(errors) == 3, out
    assert "contract[ik,kj->ij" in errors[0] and "8589934592 bytes" in errors[0], errors[0]
    assert "small ok True" in lines, out


GUARDED_KERNEL = '''
import ctypes, threading
import llvmlite.binding
from splyce.backend import alloc_guard
from splyce.native import codegen
from splyce.backend.compiler import optimize_kernel

# out[0..2] = three blocks: a (grown by realloc), c, b; b is `huge` bytes
IR = """
declare ptr @malloc(i64)
declare ptr @realloc(ptr, i64)
define void @_mlir_ciface_kernel(ptr %out, i64 %small, i64 %huge) {
  %a = call ptr @malloc(i64 %small)
  store i8 1, ptr %a
  %c = call ptr @malloc(i64 %small)
  store i8 3, ptr %c
  %twice = shl i64 %small, 1
  %a2 = call ptr @realloc(ptr %a, i64 %twice)
  %b = call ptr @malloc(i64 %huge)
  store i8 2, ptr %b
  store ptr %a2, ptr %out
  %o1 = getelementptr ptr, ptr %out, i64 1
  store ptr %b, ptr %o1
  %o2 = getelementptr ptr, ptr %out, i64 2
  store ptr %c, ptr %o2
  ret void
}
"""
target = codegen.host_target()
module, tm = optimize_kernel(IR, target, codegen.CodegenOptions(opt_level=3))
alloc_guard.install()
compiled = codegen.load(module, tm, target)
entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    compiled.function_address(alloc_guard.GUARDED_ENTRY))

def call(small, huge):
    out = (ctypes.c_void_p * 3)()
    status = entry(ctypes.addressof(out), small, huge)
    if status == 0:
        assert ctypes.c_char.from_address(out[0]).value == b"\\x01"
        assert ctypes.c_char.from_address(out[1]).value == b"\\x02"
        assert ctypes.c_char.from_address(out[2]).value == b"\\x03"
        for p in out:
            alloc_guard.free_address(p)
    return status
'''


@pytest.mark.parametrize("heap", ["libc", "pool"])
def test_guard_frees_the_call_blocks_and_works_per_thread(heap):
    """A call whose third allocation fails returns 1 + its size after freeing the first two (a realloc'ed
    block among them): repeated 40 times under a margin that holds 3 of them, every failure still names
    the huge block, never the 96 MiB ones (which would fail if they leaked). Two threads at once, one
    failing and one succeeding, each get their own outcome (each longjmp stays on its own thread). On
    libc's heap and on the runtime's cache of freed blocks (native/memory_pool.py), which keeps the freed
    96 MiB blocks for the next call and gives them back before the huge request fails."""
    use_pool = ("from splyce.native import memory_pool\nalloc_guard.set_heap(memory_pool.native_heap)\n"
                if heap == "pool" else "")
    kernel = GUARDED_KERNEL.replace("alloc_guard.install()\n", use_pool + "alloc_guard.install()\n"
                                    f"assert (alloc_guard.install().heap is None) == {heap == 'libc'}\n", 1)
    out = _run_child(LIMIT + kernel + '''
SMALL, HUGE = 96 << 20, 1 << 40
assert call(16, 16) == 0
limit_address_space(1 << 30)
statuses = [call(SMALL, HUGE) for _ in range(40)]
print("sequential", sorted(set(statuses)) == [HUGE + 1])

results = {"fail": [], "ok": []}
def worker(kind):
    for _ in range(40):
        results[kind].append(call(SMALL, HUGE) if kind == "fail" else call(1 << 20, 4096))
threads = [threading.Thread(target=worker, args=(k,)) for k in ("fail", "ok")]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", sorted(set(results["fail"])) == [HUGE + 1], sorted(set(results["ok"])) == [0])
''')
    assert "sequential True" in out, out
    assert "threads True True" in out, out


def test_guarded_entry_has_setjmp_only_in_the_wrapper():
    """The kernel is not inlined into the wrapper: _setjmp is called once, by splyce_entry, and the
    kernel's own functions call no setjmp; its heap calls go to the checked allocator."""
    import numpy as np
    import scipy.sparse as sps

    import splyce

    a = sps.random_array((30, 30), density=0.2, format="csr", random_state=1)
    text = splyce.jit(lambda a, b: a @ b, out_format="sparse").lower(a, a).as_text("llvm")
    functions = text.split("\ndefine ")
    with_setjmp = [f.split("(")[0] for f in functions[1:] if "@_setjmp(" in f]
    assert with_setjmp == ["i64 @splyce_entry"], with_setjmp
    wrapper = next(f for f in functions if f.startswith("i64 @splyce_entry"))
    assert "call void @_mlir_ciface_kernel(" in wrapper
    for name in ("malloc", "calloc", "realloc", "free"):
        assert f"@{name}(" not in text.replace(f"@__splyce_{name}(", "")
    assert "@__splyce_malloc(" in text or "@__splyce_calloc(" in text
    assert np.array_equal(splyce.jit(lambda a, b: a @ b, out_format="sparse")(a, a).toarray(), (a @ a).toarray())
