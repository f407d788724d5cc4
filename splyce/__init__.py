"""splyce: sparse tensor algebra compiled through MLIR, with SIMD dual-path coiteration (the Splyce pass).

Importing splyce builds no MLIR context and compiles nothing: the compiler loads on first use.
"""

from splyce.errors import AllocationFailed, LoweringError, NotCanonicalError, TraceError
from splyce.tensors.formats import COO, CSC, CSR, DCSC, DCSR, SPARSE_VECTOR, Format, Level, csf, dense
from splyce.tensors.tensor import SparseTensor, asarray
from splyce.api import add, einsum, matmul, maximum, minimum, multiply, subtract   # attaches SparseTensor's operators

from splyce.version import __version__
from splyce.thread_count import get_threads, set_threads, use_threads
from splyce.runtime import providers as _providers

__all__ = [
    "Format", "Level", "CSR", "CSC", "DCSR", "DCSC", "COO", "SPARSE_VECTOR", "csf", "dense",
    "SparseTensor", "asarray", "jit", "matmul", "multiply", "einsum", "add", "subtract", "profile",
    "clear_cache", "set_memory_budget", "maximum", "minimum", "set_threads", "get_threads", "use_threads",
    "TraceError", "LoweringError", "NotCanonicalError", "AllocationFailed",
    "patch_scipy", "unpatch_scipy", "patched_scipy", "scipy_patch_stats", "is_scipy_patched",
    "grad", "value_and_grad", "vjp", "jvp", "vmap",
    "fori_loop", "while_loop", "scan",
]

# The compiler-facing names load lazily (PEP 562) so that `import splyce` stays cheap.
_LAZY = {
    "jit": "splyce.runtime.decorator", "profile": "splyce.runtime.profiling",
    "clear_cache": "splyce.runtime.dispatcher", "set_memory_budget": "splyce.planner.memory",
    "patch_scipy": "splyce.scipy_patch", "unpatch_scipy": "splyce.scipy_patch", "patched_scipy": "splyce.scipy_patch",
    "scipy_patch_stats": "splyce.scipy_patch", "is_scipy_patched": "splyce.scipy_patch",
    "grad": "splyce.transforms.grad", "value_and_grad": "splyce.transforms.grad", "vjp": "splyce.transforms.grad",
    "jvp": "splyce.transforms.forward",
    "vmap": "splyce.transforms.batching",
    "fori_loop": "splyce.lax", "while_loop": "splyce.lax", "scan": "splyce.lax",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value      # later look-ups skip this hook (a drop-in call is microseconds)
        return value
    raise AttributeError(f"module 'splyce' has no attribute {name!r}")


def _dropin_kernels(op, options):
    """The drop-ins' native kernels as the jit's kernel library (runtime/library.py asks; dropin/jit_library.py
    answers, imported when a jitted plan first asks)."""
    from splyce.dropin import jit_library

    return jit_library.provide(op, options)


_providers.register(_dropin_kernels)


def _scipy_csr(cls, data, indices, indptr, shape, sorted_unique):
    """A scipy CSR / CSC over a kernel's well-formed arrays without scipy's checks (runtime/forms.py's maps)."""
    from splyce.dropin import scipy_out

    return scipy_out.csr(cls, data, indices, indptr, shape, sorted_unique)


_providers.register_result_builder("csr", _scipy_csr)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
