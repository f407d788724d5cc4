"""The planner's cost model: expected work of one contraction for a loop order and operand storage.

Asymptotic and simple on purpose (docs/planner.md): every sparse operand is modelled as uniformly random with
its actual density (from the first call's nonzero counts), indices are independent. For a loop order the
model walks the loops outermost first and counts

- the loop's steps: a loop over an index that sparse operands store in compressed levels iterates (or
  co-iterates, two fingers) their fibers, ``sum of the fiber lengths`` per entry of the enclosing loops; an
  index of dense levels only runs its full extent (dense levels are indexed, not walked);
- one body execution per point of the whole iteration space that every sparse operand stores;
- the result: zero-filling a dense output (its size), writing a sparse one (its expected entries).

An operand whose storage order does not fit the loop order is converted first (``nnz log nnz`` on the host) or
scattered into a dense array (its size); the cheapest choice per operand wins. Costs are in "steps"; only
their ratios matter.
"""

from __future__ import annotations

import itertools
import math
from splyce.native.records import record

MAX_PERMUTED_INDICES = 7     # beyond this many indices only the heuristic order is costed (7! = 5040)


@record
class Operand:
    subs: str                 # its einsum subscripts
    shape: tuple[int, ...]
    nnz: float                # stored entries (dense operands: their size)
    order: tuple[int, ...] | None   # dimension order of its levels; None: dense
    convertible: bool = True  # an input (converted on the host) rather than an intermediate
    walked: tuple[bool, ...] = ()   # per level: compressed / singleton (walked) rather than dense (indexed)

    @property
    def iterated(self) -> str:
        """Subscripts of the walked levels."""
        if self.order is None:
            return ""
        return "".join(self.subs[d] for d, walked in zip(self.order, self.walked) if walked)

    def restored(self, loops: str) -> "Operand":
        """The same operand with its levels stored in loop order (same level kinds)."""
        dims = tuple(sorted(range(len(self.subs)), key=lambda d: loops.index(self.subs[d])))
        return self._replace(order=dims)

    @property
    def size(self) -> float:
        return float(math.prod(self.shape)) if self.shape else 1.0

    @property
    def sparse(self) -> bool:
        return self.order is not None

    @property
    def density(self) -> float:
        return min(1.0, self.nnz / self.size) if self.size else 0.0

    def stored_subs(self) -> str:
        return "".join(self.subs[d] for d in self.order)


@record
class Choice:
    """How a contraction runs: its loop order, what happens to each operand, the expected work."""

    order: str
    storage: tuple[str, ...]        # per operand: "keep" | "convert" | "scatter" | "dense"
    cost: float
    out_entries: float              # expected entries of the result


def fits(op: Operand, order: str) -> bool:
    """True when the operand's levels are stored in loop order (what the sparsifier needs)."""
    stored = op.stored_subs()
    return "".join(c for c in order if c in stored) == stored


def expected_output(ops: list[Operand], sizes: dict[str, int], output: str) -> float:
    """Expected stored entries of the result: an output point needs every sparse operand indexed by output
    indices only (a mask) to store it, and at least one of the remaining products there to be nonzero."""
    out_size = float(math.prod(sizes[c] for c in output)) if output else 1.0
    if out_size == 0:
        return 0.0
    everything = float(math.prod(sizes.values()))
    flops = everything * math.prod(op.density for op in ops if op.sparse)
    cover = math.prod(op.density for op in ops if op.sparse and set(op.subs) <= set(output))
    if cover == 0:
        return 0.0
    return out_size * cover * -math.expm1(-flops / (out_size * cover))


def _present(op: Operand, sizes: dict[str, int], fixed: set[str]) -> float:
    """Probability that op stores an entry below given coordinates of its indices in ``fixed``."""
    if not fixed & set(op.subs):
        return 1.0
    rest = math.prod(sizes[x] for x in op.subs if x not in fixed)
    return min(1.0, op.density * rest)


def _points(sparse_ops: list[Operand], sizes: dict[str, int], fixed: set[str]) -> float:
    """Expected points of the loops over ``fixed`` that every sparse operand stores."""
    points = float(math.prod(sizes[c] for c in fixed))
    for op in sparse_ops:
        points *= _present(op, sizes, fixed)
    return points


def body_executions(ops: list[Operand]) -> float:
    """Expected points of the whole iteration space that every sparse operand stores: the products a
    contraction computes (any loop order)."""
    sizes: dict[str, int] = {}
    for op in ops:
        sizes.update(zip(op.subs, op.shape))
    return _points([op for op in ops if op.sparse], sizes, set(sizes))


def loop_cost(ops: list[Operand], sparse_flags: list[bool], sizes: dict[str, int], order: str) -> float:
    """Expected loop steps and body executions for ``order`` with the given operands stored sparse."""
    sparse_ops = [op for op, flag in zip(ops, sparse_flags) if flag]
    total = 0.0
    for depth, c in enumerate(order):
        fixed = set(order[:depth])
        points = _points(sparse_ops, sizes, fixed)
        carriers = [op for op in sparse_ops if c in op.iterated]
        if not carriers:
            total += points * sizes[c]
            continue
        for op in carriers:   # two fingers: every carrier's fiber is walked
            rest = math.prod(sizes[x] for x in op.subs if x not in fixed)
            fiber = op.density * rest / max(_present(op, sizes, fixed), 1e-300)
            total += points * min(float(sizes[c]), fiber)
    return total + _points(sparse_ops, sizes, set(order))


def choose(ops: list[Operand], output: str, out_stored: str | None, fallback_order: str | None,
           scatter: bool = True) -> Choice | None:
    """The cheapest (loop order, storage per operand) for a contraction, or None when no order fits an
    operand that cannot be converted. ``out_stored``: a sparse result's indices in storage order.
    ``scatter=False`` keeps every sparse operand sparse (a scattered operand's missing entries become stored
    zeros, which a NaN or Inf of its partners is then multiplied by: docs/semantics.md)."""
    out_sparse = out_stored is not None
    sizes: dict[str, int] = {}
    for op in ops:
        sizes.update(zip(op.subs, op.shape))
    letters = list(dict.fromkeys(output + "".join(op.subs for op in ops)))
    out_entries = expected_output(ops, sizes, output)
    orders = [fallback_order] if fallback_order else []   # first: ties keep the lowering's usual order
    if len(letters) <= MAX_PERMUTED_INDICES:
        orders += ["".join(p) for p in itertools.permutations(letters) if "".join(p) != fallback_order]
    best = _cheapest(ops, output, out_stored, orders, sizes, out_entries, scatter, written=False)
    if best is None and out_sparse:
        # no loop order writes the result in its storage order with its outer levels outside every reduction
        # (``A.T @ B`` of CSR operands into a CSC): written in loop order, then re-stored (lowering/restore.py)
        best = _cheapest(ops, output, out_stored, orders, sizes, out_entries, scatter, written=True)
    return best


def _cheapest(ops, output, out_stored, orders, sizes, out_entries, scatter, written: bool) -> Choice | None:
    out_sparse = out_stored is not None
    best: Choice | None = None
    for order in orders:
        stored = "".join(c for c in order if c in output) if written else out_stored
        if out_sparse and not sparse_output_ok(order, output, stored):
            continue
        storage, flags, extra = [], [], 0.0
        effective = list(ops)
        feasible = True
        for k, op in enumerate(ops):
            if not op.sparse:
                storage.append("dense"), flags.append(False)
            elif fits(op, order):
                storage.append("keep"), flags.append(True)
            elif op.convertible:
                # sorting the entries, plus the new positions array of every level
                convert = op.nnz * max(1.0, math.log2(max(op.nnz, 2.0))) + sum(op.shape)
                if scatter and op.size < convert:
                    storage.append("scatter"), flags.append(False)
                    extra += op.size
                else:
                    storage.append("convert"), flags.append(True)
                    effective[k] = op.restored(order)
                    extra += convert
            else:
                feasible = False
                break
        if not feasible:
            continue
        # scattering a short sparse vector can still pay against long sparse rows (look-ups, no merging)
        for k, op in enumerate(ops):
            if scatter and storage[k] == "keep" and op.convertible and len(op.shape) == 1:
                trial = list(flags)
                trial[k] = False
                if loop_cost(effective, trial, sizes, order) + op.size < loop_cost(effective, flags, sizes, order):
                    storage[k], flags[k] = "scatter", False
                    extra += op.size
        cost = extra + loop_cost(effective, flags, sizes, order)
        cost += out_entries if out_sparse else (math.prod(sizes[c] for c in output) if output else 1.0)
        if written and stored != out_stored:   # the re-store: a sort of the result's entries
            cost += out_entries * max(1.0, math.log2(max(out_entries, 2.0)))
        if best is None or cost < best.cost:
            best = Choice(order, tuple(storage), cost, out_entries)
    return best


def evaluate(ops: list[Operand], output: str, out_stored: str | None, order: str) -> Choice:
    """The cost of a contraction pinned to ``order`` with every operand kept as it is stored."""
    sizes: dict[str, int] = {}
    for op in ops:
        sizes.update(zip(op.subs, op.shape))
    out_entries = expected_output(ops, sizes, output)
    storage = tuple("keep" if op.sparse else "dense" for op in ops)
    cost = loop_cost(ops, [op.sparse for op in ops], sizes, order)
    cost += out_entries if out_stored is not None else (math.prod(sizes[c] for c in output) if output else 1.0)
    return Choice(order, storage, cost, out_entries)


def sparse_output_ok(order: str, output: str, out_stored: str) -> bool:
    """A sparse result is written in its storage order, all but its innermost level outside every reduction:
    the sparsifier accumulates the innermost level in an expanded-access workspace (whose i1 flags
    passes/widen_i1.py widens), which only works below fixed outer coordinates."""
    if "".join(c for c in order if c in output) != out_stored:
        return False
    first_reduction = min((k for k, c in enumerate(order) if c not in output), default=len(order))
    return all(order.index(c) < first_reduction for c in out_stored[:-1])
