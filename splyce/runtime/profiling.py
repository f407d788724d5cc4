"""``splyce.profile``: how much of the coiteration the Splyce fast lanes consume (the paper's SIMD(%)).

An instrumented build of the kernel counts, per loop iteration, the coordinates each loop consumes (the
advance of every cursor): two-finger fast lanes, scalar epilogues, galloping / leapfrogging jumps and
three- or four-way fast lanes each add to their own counter.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass

from splyce.runtime.dispatcher import Jitted


@dataclass(frozen=True)
class Profile:
    """What ``splyce.profile`` counted: coordinates consumed by each kind of loop of one kernel call.

    ``str(profile)`` summarizes it; ``simd_share`` is the paper's SIMD(%).

    Attributes
    ----------
    fast_lane : int
        Coordinates consumed by two-finger fast-lane iterations.
    epilogue : int
        Coordinates consumed by scalar loops (tails, and loops left scalar).
    loops : tuple
        The Splyce pass's decision per coiteration loop.
    gallop : int
        Coordinates skipped by galloping (skew-aware intersection).
    multiway : int
        Coordinates consumed by three- and four-way fast lanes (``a * b * c``).
    flat_rows : int
        Entries summed by flat row loops: row sums (SpMV) on rows of a few entries, one loop over the
        entries instead of one per row (not part of ``total``: they coiterate nothing).
    conflict_lane : int
        Of ``fast_lane``: coordinates consumed by the strict conflict lane (16 x 16 / 8 x 8 blocks, ordered adds
        of the matched lanes); the rest of ``fast_lane`` by the all-pairs lane.
    pairs_conflict_lane, pairs_all_pairs_lane : int
        The lane choice per fiber pair (pairs long enough for one block, not galloping): pairs that started in
        the strict conflict lane; pairs sent to the all-pairs lane from the start (many matches a step expected
        from their lengths and first and last coordinates).
    """

    fast_lane: int        # coordinates consumed by fast-lane iterations
    epilogue: int         # coordinates consumed by the scalar loops (tails, and loops left scalar)
    loops: tuple          # the Splyce pass's decision per scf.while
    gallop: int = 0       # coordinates skipped by galloping (skew-aware intersection)
    multiway: int = 0     # coordinates consumed by three- and four-way fast lanes (a * b * c)
    flat_rows: int = 0    # entries summed by flat row loops (rows of a few entries, passes/flat_rows.py)
    conflict_lane: int = 0          # of fast_lane: coordinates the strict conflict lane consumed
    pairs_conflict_lane: int = 0    # fiber pairs that started in the strict conflict lane
    pairs_all_pairs_lane: int = 0   # fiber pairs sent to the all-pairs lane from the start

    @property
    def total(self) -> int:
        """All coordinates counted."""
        return self.fast_lane + self.epilogue + self.gallop + self.multiway

    @property
    def simd_share(self) -> float:
        """Share of coordinates consumed by fast lanes, two-finger and multi-way (0..1); NaN when the
        kernel coiterates nothing."""
        return (self.fast_lane + self.multiway) / self.total if self.total else float("nan")

    def __str__(self) -> str:
        share = "n/a" if self.total == 0 else f"{100 * self.simd_share:.1f} %"
        text = f"SIMD share {share} ({self.fast_lane} fast-lane, "
        if self.multiway:
            text += f"{self.multiway} multi-way fast-lane, "
        text += f"{self.epilogue} epilogue"
        text += f", {self.gallop} galloped coordinates)" if self.gallop else " coordinates)"
        if self.pairs_conflict_lane or self.pairs_all_pairs_lane:
            text += (f"; strict lanes: {self.conflict_lane} coordinates in the conflict lane, "
                     f"{self.fast_lane - self.conflict_lane} in the all-pairs lane; fiber pairs: "
                     f"{self.pairs_conflict_lane} started in the conflict lane, {self.pairs_all_pairs_lane} in the "
                     "all-pairs lane")
        return text


_TWINS: "weakref.WeakKeyDictionary[Jitted, Jitted]" = weakref.WeakKeyDictionary()
_twins_lock = threading.Lock()


def instrumented(jitted: Jitted) -> Jitted:
    """The instrumented twin of ``jitted`` (same options, ``profile=True``), built once per function."""
    with _twins_lock:
        twin = _TWINS.get(jitted)
        if twin is None:
            twin = _TWINS[jitted] = jitted.with_options(profile=True)
    return twin


def profile(f, /, *args, **kwargs) -> Profile:
    """Run ``f(*args, **kwargs)`` once through an instrumented build and count fast-lane vs epilogue coordinates.

    The instrumented build is compiled once and cached on ``f``; its counters are process-global, so do not
    profile the same kernel from several threads at once.

    Parameters
    ----------
    f : Jitted or callable
        A jitted function (its options are kept) or a plain function (default ``jit`` options).
    *args
        The arguments to run it on.
    **kwargs
        Its keyword arguments (as ``f`` takes them).

    Returns
    -------
    Profile
        The counts; ``simd_share`` is the share consumed by the SIMD fast lanes (0..1; NaN when the kernel
        coiterates nothing).

    Examples
    --------
    >>> import scipy.sparse as sps, splyce
    >>> f = splyce.jit(lambda a, b: splyce.einsum("ij,ij->i", a, b))
    >>> A = sps.random_array((200, 2000), density=0.05, format="csr", rng=0)
    >>> B = sps.random_array((200, 2000), density=0.05, format="csr", rng=1)
    >>> splyce.profile(f, A, B).simd_share > 0.5
    True
    """
    from splyce.passes.splyce_pass import PROFILE_COUNTERS_SYMBOL, PROFILE_SLOTS

    kernel, values = instrumented(f if isinstance(f, Jitted) else Jitted(f)).kernel_for(*args, **kwargs)
    try:     # the counters exist where a lane or a flat row loop was built
        address = kernel.compiled.global_address(PROFILE_COUNTERS_SYMBOL)
    except LookupError:
        kernel.run(values)
        return Profile(0, 0, tuple(kernel.lowering.decisions))
    counters = (ctypes.c_int64 * PROFILE_SLOTS).from_address(address)
    counters[:] = [0] * PROFILE_SLOTS
    kernel.run(values)
    c = [int(x) for x in counters]
    return Profile(c[0] + c[5], c[1], tuple(kernel.lowering.decisions), c[2], c[3], c[4], c[5], c[6], c[7])
