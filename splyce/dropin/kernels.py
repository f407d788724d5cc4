"""The jitted kernels the drop-ins compile (one per op, dtype, format and thread count, kept for the process)
and the thread-count rules shared by every drop-in.
"""

from __future__ import annotations

import threading

from splyce.thread_count import call_threads, resolve


# A dense result of sparse @ sparse (asked for with out_format="dense") larger than this raises MemoryError.
DENSE_RESULT_BYTES = 4 << 30
_kernels: dict = {}
_lock = threading.Lock()


def _kernel(name: str, fun, out_format=None, threads: int = 1, reassociate: bool = False):
    """A jitted function per (name, out_format, threads, reassociate), shared by all calls (the jit caches
    per signature). ``reassociate``: compile with ``fast_math=True`` (sums may be reordered)."""
    key = (name, out_format, threads, reassociate)
    kernel = _kernels.get(key)
    if kernel is None:
        from splyce.runtime.dispatcher import Jitted

        with _lock:
            # library=False: these kernels are what the drop-ins fall back on, never the drop-ins again
            kernel = _kernels.setdefault(key, Jitted(fun, out_format=out_format, threads=threads,
                                                     fast_math=reassociate, library=False))
    return kernel


# -- matmul ----------------------------------------------------------------------------------------------
def _mm(a, b):
    return a @ b


# Work (entries x columns; an SpMV entry, a gather and a short row's loop exit, counts as 4 columns) up to
# which a product asked for several threads runs on one (bit-identical results either way): ~1 ms of one
# thread here. Below it, handing half to a worker cost more than it saved: on the loaded machine ba-4k SpMV
# 45 us on one thread vs 319 us with threads=2, SpMM (16 columns) 135 vs 357 us; in the quiet corpus run
# (limit 2**19 then) rmat-s13 SpMV (work 816k, 0.55 ms) 0.50x of one thread, pyamg-ldg-diffusion SpMM (565k,
# 0.25 ms) 0.57x, rmat-s13 SpMM (3.3M, 1.8 ms) 0.96x, while ba-100k SpMV (3.2M, 3.0 ms) gained 1.49x; the
# hand-off costs ~0.2 ms of CPU time per call (rmat-s13 SpMV: 551 vs 347 us, kernels 375 vs 322 us).
SERIAL_MAX_WORK = 1 << 21


def _several_threads(threads) -> bool | None:
    """False for one thread, True for several (an int > 1, or None when the default, ``thread_count``, is more
    than one), None when ``threads`` is not a thread count (then the fast paths leave the call to the general
    path, which says so)."""
    if type(threads) is int:
        return None if threads < 1 else threads > 1
    return call_threads() > 1 if threads is None else None


def _threads(threads) -> int:
    """A call's thread count (None: the default, ``splyce.set_threads`` / ``SPLYCE_NUM_THREADS`` / all cores)."""
    return resolve(threads)
