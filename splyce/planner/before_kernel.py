"""Products a plan computes before its kernel: dense-only products on the host (NumPy, BLAS) and products by
the native kernel library (``NativeStep``, runtime/library.py's ``native_steps``)."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from splyce.thread_count import call_threads, cores
from splyce.tracer.ir import TensorType

# A host product of at least 2^20 multiply-adds runs BLAS on the threads a splyce call would take now
# (thread_count.call_threads: the cores other processes leave idle, or the count the user chose): OpenBLAS's
# threads spin-wait for a busy core. GCN's ``X @ W`` (100000 x 16 by 16 x 16, 2.6e7) took a median 92 ms on
# OpenBLAS's two threads on the loaded 2-core VM, 2.4 ms on one (30 interleaved calls, 2026-12-07); on the
# quiet VM two threads are the faster (1.0 vs 2.1 ms), and there both cores are idle, so BLAS keeps them.
LIMITED_FROM = 1 << 20
_blas = None
_blas_lock = threading.Lock()     # the BLAS thread count is process-global: one limited product at a time


def _blas_threads(n: int):
    """A context running BLAS on ``n`` threads (threadpoolctl), or a null context where it is unavailable."""
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController().select(user_api="blas")
        except Exception:      # noqa: BLE001 (no threadpoolctl, or a BLAS it does not know: leave BLAS as it is)
            _blas = False
    if not _blas:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def limited():
        with _blas_lock, _blas.limit(limits=n):
            yield
    return limited()


def _multiply_adds(subs: str, arrays) -> int:
    sizes = {}
    for part, a in zip(subs.split("->")[0].split(","), arrays):
        sizes.update(zip(part, np.shape(a)))
    return int(np.prod(list(sizes.values()), dtype=np.float64))


def host_product(host: tuple, t: TensorType, values: list) -> np.ndarray:
    """A dense-only product on the host (NumPy, BLAS): ``host`` is ``(einsum subscripts, input indices,
    scale)``, ``t`` the product's type."""
    subs, operands, scale = host
    arrays = [values[i] for i in operands]
    axes = tensordot_axes(subs)
    threads = cores()
    if len(arrays) > 1 and _multiply_adds(subs, arrays) >= LIMITED_FROM:
        threads = call_threads()
    with np.errstate(all="ignore"), (_blas_threads(threads) if threads < cores() else contextlib.nullcontext()):
        # NaN / Inf as the kernel would give them, silently
        if axes is not None and _matmul_axes(axes, arrays):
            value = np.matmul(*arrays)   # BLAS as tensordot, without its reshapes: GCN's X @ W 10 % faster
        elif axes is not None:
            value = np.tensordot(*arrays, axes=axes)
        else:
            value = np.einsum(subs, *arrays, optimize=len(operands) > 1)
        if scale is not None:
            value = value * scale
    value = np.asarray(value, dtype=t.dtype)   # a 0-d result stays 0-d (ascontiguousarray makes it 1-D)
    return value if value.flags.c_contiguous else value.copy()


def native_product(step, t: TensorType, prepared: list, threads: int) -> np.ndarray:
    """An intermediate product by the native kernel library (a ``NativeStep``) on the prepared operands."""
    value = step.run([prepared[i] for i in step.operands], threads)
    if value is None:
        raise RuntimeError(f"the native {step.op} ('{step.formulation}') declined operands its plan chose it for")
    if hasattr(value, "to_numpy"):            # a sparse vector result (SpMSpV's scatter) where the type is dense
        value = value.to_numpy()
    if type(value) is not np.ndarray or value.dtype != np.dtype(t.dtype) or value.shape != t.shape:
        value = np.asarray(value, dtype=t.dtype).reshape(t.shape)
    return value if value.flags.c_contiguous else value.copy()


def _matmul_axes(axes, arrays) -> bool:
    """Whether the product is ``np.matmul``'s: 1-D / 2-D operands, the first one's last axis summed with the
    second one's first (``ik,kj->ij``, ``ik,k->i``, ``k,kj->j``, ``k,k->``): what the user's ``x @ w`` computes,
    so the bits are the ones NumPy gives them (Zen 3, 100000 x 16 by 16 x 16: 2.70 ms, tensordot 3.03 ms)."""
    x, y = arrays
    return (1 <= x.ndim <= 2 and 1 <= y.ndim <= 2 and axes == ([x.ndim - 1], [0]))


def tensordot_axes(subs: str) -> tuple[list[int], list[int]] | None:
    """``np.tensordot``'s axes for a product of two operands whose result holds the first one's free indices,
    then the second one's, in order (``ik,kj->ij``, ``ik,k->i``, ``k,k->``), else None. BLAS either way, but
    ``einsum(optimize=True)`` gave GCN's ``X @ W`` (100000 x 16 by 16 x 16) in column-major order, so the
    product took 3.1 ms and its row-major copy 1.2 ms more, against 2.1 ms for ``tensordot`` (Zen 4, one
    thread). Contracted axes in sorted order of their letters, as ``einsum`` passes them to ``tensordot``."""
    inputs, out = subs.split("->")
    parts = inputs.split(",")
    if len(parts) != 2 or any(len(set(p)) != len(p) for p in parts):
        return None
    x, y = parts
    shared = sorted(c for c in x if c in y)
    free = "".join(c for c in x if c not in shared) + "".join(c for c in y if c not in shared)
    if not shared or free != out:
        return None
    return [x.index(c) for c in shared], [y.index(c) for c in shared]
