"""The fast_math lane width chosen per CPU by measurement at first use, and kept on disk (issue 36).

``vector_width`` left unset with ``fast_math=True``: which lane is fastest depends on the CPU, not on a feature
flag. The conflict lane (16 x 16 blocks, ``vpconflictd``; passes/conflict_lane.py) was measured 3.5-6.4x the
plain sparsifier on AMD Zen 4, where ``vpconflictd`` is cheap, but 1.6-2x slower than the all-pairs lane at
n = 4 on Intel Sapphire Rapids, where it is not. So the first ``Jitted`` that needs the choice for the host
(``Jitted.options``) compiles each candidate's sparse dot of two fibers (``CANDIDATES``: one descriptor each,
the one place to add a lane), times them on a fixed synthetic fiber pair (int32 coordinates, f64 values, 10 %
and 50 % overlap, best of interleaved repeats, thread CPU time) and records the fastest in the options
(``options.record_width_choice``), with the numbers in ``Options.width_reason``.

The choice is memoized beside the host facts (native/host.py): ``host-lanes-<hash>.json`` in the cache folder,
the hash over the host's fingerprint (its CPU as /proc/cpuinfo tells it, the Python environment, llvmlite and
MLIR), the compiler sources' hash (a changed lane is measured again) and the candidates; a second process reads
it and measures nothing. A memo that cannot be read or parsed is measured again (and rewritten); a folder that
cannot be written only means the next process measures too. ``SPLYCE_NO_TUNE=1`` skips the measurement: the
static rule of ``options.width_choice`` (16 on AVX-512 CD, else 4), for reproducible runs.

Only the host is measured: for a named or foreign target (``target="avx512"``) the static rule holds. Short
fibers are not measured: a whole call on a 16-coordinate fiber pair costs ~6 us of call overhead, 30x the
lane's work, so timing them through calls cannot rank lanes (a per-fiber-length rule would need a kernel
over many short rows; not done). The phase configuration is not tuned (the default, 7, for every candidate).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from splyce.native import host, object_cache
from splyce.options import (CONFLICT_FEATURES, CONFLICT_WIDTH, DEFAULT_VECTOR_WIDTH, WidthChoice,
                            has_features, record_width_choice, recorded_width_choice)

log = logging.getLogger(__name__)

ENV_SKIP = "SPLYCE_NO_TUNE"


@dataclass(frozen=True)
class Candidate:
    """One lane the choice may pick: ``vector_width`` and the target features it needs. ``scoped``: the chosen
    width holds only for the loops it was measured on (``WidthChoice.scoped``, ``splyce_pass._unchosen``): the
    conflict lane's loops for 16, every intersection loop for 8; unions keep n = 4 (a sparse add ran 0.80x
    at n = 8 on Sapphire Rapids, where K1-K5 ran 1.0-1.5x)."""

    name: str
    width: int
    needs: tuple[str, ...] = ()
    scoped: bool = False


# On AVX2 without AVX-512 (AMD Zen 1) the n = 4 candidate, measured on f64 values, is the permute lane
# (passes/permute_lane.py: the static lane for fast_math n = 4 int32 / f64 sums there, 1.12-1.17x the rotating
# all-pairs lane, docs/passes.md "AMD Zen 1"): no width tells the two apart, so it is not a candidate of its own.
CANDIDATES = (
    Candidate("n=4", DEFAULT_VECTOR_WIDTH),
    Candidate("n=8", 8, scoped=True),
    Candidate("n=16 conflict lane", CONFLICT_WIDTH, CONFLICT_FEATURES, scoped=True),
)
FIBER = 1 << 15          # coordinates per fiber: ~0.7 ns each x 2 fibers, ~50 us a call, L2-resident
OVERLAPS = (0.10, 0.50)
REPEATS = 7
BATCH_SECONDS = 2e-3     # calls per timed sample: at least this long (thread CPU time)
MARGIN = 0.03            # another lane must beat the default (n = 4) by this share to be chosen
_lock = threading.Lock()
measured = 0             # how many times this process measured (tests: 0 where the memo was read)
_failed: set = set()     # targets whose measurement failed in this process (the static rule then, once)


def forget() -> None:
    """Forget this process's failed measurements (tests)."""
    _failed.clear()


def skipped() -> bool:
    return os.environ.get(ENV_SKIP, "").strip().lower() in ("1", "true", "yes", "on")


def candidates_for(target) -> tuple[Candidate, ...]:
    return tuple(c for c in CANDIDATES if has_features(target, c.needs))


def resolve(target, jit) -> WidthChoice | None:
    """The fast_math width for ``target`` when it is the host and tuning is on: recorded, memoized on disk or
    measured now (``jit``: ``splyce.jit``'s class, compiles the candidates); None when the static rule holds.
    Records the choice for ``Options`` to read."""
    from splyce.native.codegen import host_target

    if skipped() or target != host_target() or target in _failed:
        return None
    with _lock:
        found = recorded_width_choice(target)
        if found is not None:
            return found
        cands = candidates_for(target)
        path = memo_path(cands)
        choice = _read_memo(path, cands)
        if choice is None:
            lock = object_cache.compile_lock(path.stem) if path is not None else contextlib.nullcontext()
            with lock:   # two processes starting at once: one measures, the other reads its memo
                choice = _read_memo(path, cands)
                if choice is None:
                    choice = _measure_and_keep(target, jit, cands, path)
        if choice is None:
            _failed.add(target)
            return None
        record_width_choice(target, choice)
        return choice


def memo_path(cands) -> Path | None:
    """Where the choice among ``cands`` is kept for this host and compiler (None: no disk cache)."""
    stamp = host.fingerprint()
    if stamp is None or not object_cache.enabled():
        return None
    from splyce.runtime.disk_cache import compiler_sources_hash

    text = "\n".join([stamp, compiler_sources_hash(), repr(cands), repr((FIBER, OVERLAPS, MARGIN))])
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return object_cache.cache_dir() / f"{object_cache.HOST_PREFIX}lanes-{digest}.json"


def _read_memo(path, cands) -> WidthChoice | None:
    if path is None:
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    by_name = {c.name: c for c in cands}
    cand, reason = by_name.get(found.get("chosen")), found.get("reason")
    if cand is None or not isinstance(reason, str) or found.get("width") != cand.width:
        return None
    return WidthChoice(cand.width, reason, cand.scoped)


def _measure_and_keep(target, jit, cands, path) -> WidthChoice | None:
    global measured
    try:
        ns = measure(target, jit, cands)
    except Exception as exc:   # noqa: BLE001 - a failed measurement must not fail the user's kernel
        log.warning("splyce: measuring the fast_math lane width failed (%s); the static rule holds", exc)
        return None
    measured += 1
    cand, reason = decide(cands, ns)
    choice = WidthChoice(cand.width, reason, cand.scoped)
    if path is not None:
        object_cache.write_text(path, json.dumps({"chosen": cand.name, "width": cand.width, "reason": reason,
                                                  "ns_per_crd": ns}, sort_keys=True))
    return choice


def decide(cands, ns: dict[str, float]) -> tuple[Candidate, str]:
    """The fastest candidate (the default unless another is ``MARGIN`` faster) and the reason text."""
    timed = [c for c in cands if isinstance(ns.get(c.name), (int, float)) and ns[c.name] > 0]
    if not timed:
        raise ValueError(f"no candidate was measured: {ns!r}")
    best = min(timed, key=lambda c: ns[c.name])
    default = next((c for c in timed if c.width == DEFAULT_VECTOR_WIDTH and not c.scoped), None)
    if default is not None and ns[best.name] > (1 - MARGIN) * ns[default.name]:
        best = default
    others = ", ".join(f"{c.name} {ns[c.name]:.2f}" for c in timed if c is not best)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    reason = (f"chosen: fast_math, measured on this CPU {date}: {best.name} {ns[best.name]:.2f} vs {others} ns "
              f"per coordinate (sparse dot of two {FIBER}-coordinate int32 / f64 fibers, "
              f"{' and '.join(f'{o * 100:g} %' for o in OVERLAPS)} overlap, best of {REPEATS})")
    return best, reason


def fibers(overlap: float, seed: int):
    """Two sorted fibers of ``FIBER`` distinct int32 coordinates, ``overlap`` of them shared, in a universe
    4x their total, and f64 values: (dim, crd 1, values 1, crd 2, values 2)."""
    rng = np.random.default_rng(seed)
    shared = int(overlap * FIBER)
    dim = 8 * FIBER
    drawn = rng.permutation(dim)[:2 * FIBER - shared].astype(np.int32)
    one = np.sort(drawn[:FIBER])
    two = np.sort(np.concatenate([drawn[:shared], drawn[FIBER:]]))
    return dim, one, rng.standard_normal(FIBER), two, rng.standard_normal(FIBER)


def _operand(dim, crd, values):
    from splyce.tensors.formats import SPARSE_VECTOR
    from splyce.tensors.tensor import SparseTensor

    fmt = SPARSE_VECTOR.with_widths(32, 32)
    pos = np.array([0, crd.size], dtype=np.int32)
    return SparseTensor.from_buffers((dim,), fmt, pos=(pos,), crd=(crd,), values=values).copy()


def _sparse_dot(a, b):
    return (a * b).sum()


def measure(target, jit, cands) -> dict[str, float]:
    """ns per input coordinate of each candidate's sparse dot: best of ``REPEATS`` interleaved samples per
    overlap, summed over the overlaps' pairs and divided by their coordinates. Each result checked first."""
    kernels = {c.name: jit(_sparse_dot, fast_math=True, vector_width=c.width, target=target.cpu, library=False)
               for c in cands}
    cases = []
    for i, overlap in enumerate(OVERLAPS):
        dim, c1, v1, c2, v2 = fibers(overlap, 36 + i)
        _, i1, i2 = np.intersect1d(c1, c2, assume_unique=True, return_indices=True)
        cases.append(((_operand(dim, c1, v1), _operand(dim, c2, v2)), float(v1[i1] @ v2[i2])))
    calls = {}
    for name, kernel in kernels.items():
        for ops, want in cases:
            got = float(kernel(*ops))
            if not np.isclose(got, want, rtol=1e-9, atol=1e-9):
                raise ArithmeticError(f"the {name} lane's sparse dot gave {got!r}, expected {want!r}")
        t0 = time.thread_time()
        kernel(*cases[0][0])
        calls[name] = max(1, int(BATCH_SECONDS / max(time.thread_time() - t0, 1e-6)))
    best = {(name, k): float("inf") for name in kernels for k in range(len(cases))}
    names = list(kernels)
    for r in range(REPEATS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for k, (ops, _) in enumerate(cases):
                gc.collect()
                t0 = time.thread_time()
                for _ in range(calls[name]):
                    kernels[name](*ops)
                best[name, k] = min(best[name, k], (time.thread_time() - t0) / calls[name])
    coords = 2 * FIBER * len(cases)
    return {name: sum(best[name, k] for k in range(len(cases))) / coords * 1e9 for name in names}
