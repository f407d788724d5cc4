"""What a jitted function's in-memory cache is keyed by and what it counts: ``CacheKey`` (every part that
changes the generated code, named, so that a miss can be explained) and ``CacheInfo`` (``cache_info()``'s
counters, the fast path's hits read from a lock-free counter)."""

from __future__ import annotations

from collections import namedtuple

from splyce.native.records import record
from splyce.options import Options
from splyce.tracer.ir import TensorType

# compiles: kernels built by the compiler; disk_hits: memory misses served by the disk cache instead.
CacheInfo = namedtuple("CacheInfo", "hits misses currsize compiles disk_hits", defaults=(0,))


@record
class CacheKey:
    """Everything that changes the generated code, as named parts (so a miss can be explained)."""

    function: object
    static_args: tuple
    inputs: tuple[TensorType | None, ...]
    out_format: object
    options: Options
    captured: tuple[TensorType, ...] = ()   # the named constants the function reads (tracer/captures.py)
    # how the arguments were passed (runtime/call_args.py: positional, keywords, pytrees, static arguments)
    # and the static leaves' types
    call: tuple = (None, ())
    kinds: tuple[str, ...] = ()   # per input and named constant, "matrix" / "array" (tracer/matrix.py); () all arrays

    def explain(self, other: "CacheKey") -> list[str]:
        """The names of the parts in which two keys differ."""
        return [name for name in self._fields if getattr(self, name) != getattr(other, name)]


def count_of(counter) -> int:
    """The next value ``counter`` (an ``itertools.count``) would give (the calls counted so far), without advancing it: its repr is
    ``count(n)`` (stable across Python versions, unlike its pickling support)."""
    return int(repr(counter)[6:-1])
