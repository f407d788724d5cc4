"""The compile options: one frozen, hashable value, validated once, passed unchanged through every stage.

Everything that changes the generated code is here, so an ``Options`` is part of every cache key.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # codegen imports llvmlite: not needed to build or validate options
    from splyce.native.codegen import Target

# The fast lane's phases in SIMD (see Options). The paper found 5 (SIMD load/compare, scalar
# multiply-accumulate and pointer advance) best on Sapphire Rapids; re-measured on this project's machines
# (AMD Zen 5, both AVX-512 and AVX2 code), 7 (SIMD multiply-accumulate too, with an ordered, bit-exact
# reduction; scalar pointer advance) is faster on K1, K3, K5 (and K2 with AVX2 code): see README.
DEFAULT_PHASES = 7
# The length ratio from which galloping beats the all-pairs fast lane for short fibers: measured ~12 for
# n = 4 and ~8 for n = 8 on 8-coordinate ones, a clear win from 16 on for both (docs/passes.md); two-fiber
# intersections add 2 floor(log2(short length)) (capped; short fibers of 8 or more) to it (gallop_lane.py).
DEFAULT_GALLOP_RATIO = 16
VECTOR_WIDTHS = (2, 4, 8, 16)
DEFAULT_VECTOR_WIDTH = 4
# vector_width left unset (None) with fast_math: the width measured on this CPU at first use when the target is
# the host (runtime/lane_tuning.py records it here: record_width_choice), else the static rule: 16, the conflict
# lane (passes/conflict_lane.py), on a target with AVX-512 CD (measured 3.5-6.4x the plain sparsifier on K1-K5
# on AMD Zen 4, but 1.6-2x slower than n = 4 on Intel Sapphire Rapids: docs/passes.md), else 4. Strict kernels
# keep n = 4 everywhere: their best measured configuration, and their code unchanged.
CONFLICT_FEATURES = ("+avx512f", "+avx512cd")
CONFLICT_WIDTH = 16   # the conflict lane's n: 16 x 16 coordinates a step
# CPUs (LLVM names) whose vpconflictd was measured cheap: AMD Zen 4 (the conflict count step 0.22 ns per coordinate,
# where Intel Sapphire Rapids took 1.4-1.7: docs/passes.md); the strict conflict lane is built for these only
FAST_CONFLICT_CPUS = ("znver4",)


@dataclass(frozen=True)
class WidthChoice:
    """The fast_math lane width left unset resolves to ``width``, for ``reason``. ``scoped``: the width holds
    only for the loops it was chosen for (``splyce_pass._unchosen``: the conflict lane's loops for 16, every
    intersection loop for 8; every other loop keeps the default's code), so a chosen and a given width are
    different code and cache keys (``Options.width_chosen``); unscoped, it holds for every loop, exactly as
    the same width given."""

    width: int
    reason: str
    scoped: bool = False


# Target -> WidthChoice measured on this host (runtime/lane_tuning.py): a resolved fact, read by the options
_RECORDED: dict = {}


def record_width_choice(target: Target, choice: WidthChoice | None) -> None:
    """Record (or, with None, forget) the fast_math width measured for ``target`` (the host)."""
    if choice is None:
        _RECORDED.pop(target, None)
    else:
        _RECORDED[target] = choice


def recorded_width_choice(target: Target | None) -> WidthChoice | None:
    return _RECORDED.get(target) if target is not None else None


def has_conflict_compares(target: Target | None) -> bool:
    """Whether ``target`` has AVX-512 CD (``vpconflictd``): the conflict lane's one target fact, asked here
    by the width choice and by the pass (passes/conflict_lane.py)."""
    return target is not None and has_features(target, CONFLICT_FEATURES)


def has_fast_conflict_compares(target: Target | None) -> bool:
    """Whether ``target`` is a CPU with AVX-512 CD whose ``vpconflictd`` was measured fast (``FAST_CONFLICT_CPUS``):
    the static rule of the strict conflict lane (passes/strict_conflict_lane.py), which no measurement chooses."""
    return has_conflict_compares(target) and target.cpu in FAST_CONFLICT_CPUS


def has_features(target: Target, needed: tuple[str, ...]) -> bool:
    return _has_all(target.features, tuple(needed))


@functools.cache
def _has_all(features: str, needed: tuple[str, ...]) -> bool:   # one host's feature string, parsed once
    return set(needed) <= set(features.split(",")) if features else False


def width_choice(fast_math: bool, target: Target | None) -> WidthChoice:
    """The fast lane's n when the user left ``vector_width`` unset: measured for this host (recorded), else
    the static rule."""
    if not fast_math:
        return WidthChoice(DEFAULT_VECTOR_WIDTH, "default")
    recorded = recorded_width_choice(target)
    if recorded is not None:
        return recorded
    if target is None:
        return WidthChoice(DEFAULT_VECTOR_WIDTH, "default: fast_math, no target to read features from")
    if has_conflict_compares(target):
        return WidthChoice(CONFLICT_WIDTH, "chosen: fast_math, the target (native: the host) has AVX-512 CD "
                           "(static rule, not measured)", scoped=True)
    return WidthChoice(DEFAULT_VECTOR_WIDTH, "default: fast_math, but the target has no AVX-512 CD")


def choose_vector_width(fast_math: bool, target: Target | None) -> tuple[int, str]:
    """The fast lane's n when the user left ``vector_width`` unset, and why (``Options.width_reason``)."""
    choice = width_choice(fast_math, target)
    return choice.width, choice.reason


@dataclass(frozen=True)
class Options:
    """How to compile a kernel.

    ``phases`` is a configuration c in 1..8: the bits of c - 1 are (phase 1 load + compare, phase 2
    multiply-accumulate, phase 3 pointer advance), most significant first, 1 = SIMD, 0 = unrolled scalar.
    """

    vectorize: bool = True       # the Splyce pass; False: the plain sparsifier's loops
    vector_width: int | None = None  # the fast lane's n; None: chosen by choose_vector_width (the resolved
    #                              Options holds the int, and ``width_reason`` says why)
    phases: int = DEFAULT_PHASES
    fast_math: bool = False      # allow reassociating sums; off: bit-identical to the scalar loop
    target: Target | None = None
    slp: bool | None = None      # LLVM SLP vectorizer; None: off where the Splyce pass built a fast lane
    profile: bool = False        # instrument fast lanes and epilogues (splyce.profile)
    threads: int = 1             # > 1: the outer loop takes [lo, hi) arguments (passes/parallel.py)
    gallop: int = DEFAULT_GALLOP_RATIO  # intersections gallop from this fiber length ratio on; 0: never
    library: bool = True         # a plan of one drop-in op runs on the native kernel library, as the drop-in
    #                              does (runtime/library.py); False: always the MLIR kernel
    union: bool | None = None    # the union fast lane (sparse add / subtract / maximum): None (default) for
    #                              CSR outputs only, True for dense outputs too, False never (docs/passes.md)
    # set from vector_width: True when it was left unset and chosen (WidthChoice.scoped) other than the default,
    # which then holds for the loops it was chosen for only (the conflict lane's, or every intersection loop;
    # every other loop keeps the default's code: splyce_pass._unchosen), where a given width holds for every
    # loop. A field, so the two are different cache keys (memory and disk)
    width_chosen: bool = field(default=False, init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.vectorize, bool):
            raise TypeError(f"vectorize must be a bool, got {self.vectorize!r}")
        if not isinstance(self.fast_math, bool):
            raise TypeError(f"fast_math must be a bool, got {self.fast_math!r}")
        # width_reason is not a field (text for the plan); width_chosen is (it changes the code)
        reason = "given"
        if self.vector_width is None:
            choice = width_choice(self.fast_math, self.target)
            reason = choice.reason
            object.__setattr__(self, "vector_width", choice.width)
            object.__setattr__(self, "width_chosen", choice.scoped and choice.width != DEFAULT_VECTOR_WIDTH)
        object.__setattr__(self, "width_reason", reason)
        # an int only: 4.0 == 4 would pass the membership test, and a float or a NumPy integer fail deep in the
        # MLIR builder; a NumPy integer is stored as the int (one cache key for both)
        if not isinstance(self.vector_width, numbers.Integral) or isinstance(self.vector_width, bool) or \
                self.vector_width not in VECTOR_WIDTHS:
            raise ValueError(f"vector_width must be 2, 4, 8, 16 or None, got {self.vector_width!r}")
        object.__setattr__(self, "vector_width", int(self.vector_width))
        if isinstance(self.phases, bool) or self.phases not in range(1, 9):
            raise ValueError(f"phases must be an int from 1 to 8 (the bits of phases - 1 choose SIMD for load + "
                             f"compare, multiply-accumulate, pointer advance), got {self.phases!r}")
        if not (self.slp is None or isinstance(self.slp, bool)):
            raise TypeError(f"slp must be a bool or None, got {self.slp!r}")
        if not isinstance(self.profile, bool):
            raise TypeError(f"profile must be a bool, got {self.profile!r}")
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise ValueError(f"threads must be a positive int or None (all cores), got {self.threads!r}")
        if not isinstance(self.gallop, int) or isinstance(self.gallop, bool) or self.gallop == 1 or \
                not 0 <= self.gallop <= 1 << 16:
            raise ValueError(f"gallop must be 0 (off) or a fiber length ratio from 2 to 65536, got {self.gallop!r}")
        if not isinstance(self.library, bool):
            raise TypeError(f"library must be a bool, got {self.library!r}")
        if self.union is not None and not isinstance(self.union, bool):
            raise TypeError(f"union must be a bool or None, got {self.union!r}")

    def __hash__(self) -> int:   # hashed on every call's cache lookup: computed once
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, name) for name in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    # The phase bits, decoded here only.
    @property
    def simd_compare(self) -> bool:
        """Phase 1 (load n coordinates of each operand, all-pairs compare) in SIMD."""
        return bool((self.phases - 1) & 4)

    @property
    def simd_mac(self) -> bool:
        """Phase 2 (the guarded multiply-accumulate / store) in SIMD."""
        return bool((self.phases - 1) & 2)

    @property
    def simd_advance(self) -> bool:
        """Phase 3 (pointer advance past the pivot) in SIMD."""
        return bool((self.phases - 1) & 1)
