"""Native steps anywhere in a program: where to cut a traced function into stages.

``make_plan`` computes a product by the native kernel library before its kernel (a ``NativeStep``) only when
the product's operands are kernel inputs. In a program of several steps (ten PageRank steps unrolled by a
Python loop, CG steps) every SpMV after the first reads a vector the kernel computes, so it stayed a loop nest
of the fused kernel. ``cut_points`` names the products worth running natively there: an SpMV of a sparse
argument by a computed dense vector that the native chooser (runtime/library.py, ``native_steps``) takes on
its own merit when its operand is an input (rows of a few entries: the native flat kernel), and an SpMV or
SpMM whose operand is elementwise glue the fused kernel would recompute at every stored entry (over two or
more arrays, or beyond + - *), over a matrix of at least ``CUT_MIN_ENTRIES`` stored entries, read only by
elementwise glue (unary maps ``abs(y)``, elementwise products and scalings written as contractions: ``y * y``
of a norm, CG's ``alpha * ap``) and 0-d reductions (dot products, ``abs(y).max()``). The
dispatcher then runs the function as stages (runtime/staged.py, ``Program.cut``): stage ``s`` computes every
value ``level`` puts at ``s``; a cut product's level is one more than its computed operand's, so its operand
is an input of its stage and its plan computes it natively, the dense glue after it fused into its stage's
kernel (written over the product's array: planner/in_place.py): each step of the loop is one native SpMV plus
one fused kernel, as the one-step function called alone.

A stage costs a kernel call (~10-30 us of Python and ctypes on the 2-core Zen 4 VM) and a materialized
vector; the cut pays where the native product gains more. Measured (2-core Zen 4 VM, loaded, 10 PageRank
steps unrolled, median of 11, interleaved): road-700 (1.24M entries, 2.5 a row) cut 99.7 ms vs 104.9 uncut
(1.05x); cutting every SpMV regardless (glue): ba-100k 1.01x, fem3d-100k 0.89-0.96x, fem2d-3k 0.74x (the
stages' overhead), label propagation's SpMM on road-700 0.97x: those stay in the fused kernel
(docs/planner.md, "Cutting a program into stages").
"""

from __future__ import annotations

from splyce.tracer.ir import Node, Trace, walk

CUT_MIN_ENTRIES = 200_000

# Dot products of dense vectors (``r @ r``, ``p @ ap``, ``v @ (a @ v)``: ``contract[k,k->]``) of at least this
# many entries run on the host as NumPy runs them (``np.matmul``: BLAS ``ddot`` / ``sdot``, several
# accumulators at memory speed), each a stage of its own, when one of them reads a computed vector. The fused
# kernel adds the products in index order, one dependent add chain (~3 cycles an entry on Zen 4); shorter dots
# stay in the kernel, where a stage's call (~10-30 us) would cost more than the chain (docs/planner.md,
# "Dot products on the host").
DOT_MIN_LENGTH = 50_000

# Work (stored entries x 4 for an SpMV) beyond which the native product splits its rows
# across threads when asked for several: the drop-ins' ``SERIAL_MAX_WORK`` (dropin/kernels.py; a layer above,
# tests/tracer/test_loops.py checks the two agree). A fused kernel computing several products runs on one
# thread (passes/parallel.py splits a kernel's one top-level loop, and declines "N top-level loops"), so with
# several threads such a product is a cut point: the one-step function called alone splits it, and the loop
# jitted whole kept it serial (PageRank unrolled ten steps on ba-100k, quiet: 0.67x the one-step calls).
SPLIT_MIN_WORK = 1 << 21


def _glue_only(readers) -> bool:
    """Whether only elementwise glue (``ewise`` / ``combine`` / ``map``: ``abs(y)``, ``-y``; elementwise
    products ``y * y``), scalings and 0-d reductions (dot products, ``np.abs(y).max()``) read a product."""
    return bool(readers) and all(r.op in ("ewise", "combine", "map") or r.type.ndim == 0 or _elementwise_contract(r)
                                 or (r.op == "contract" and len(r.args) == 1) for r in readers)


def _elementwise_contract(node: Node) -> bool:
    """Whether ``node`` is an elementwise product or a scaling written as a contraction (``y * y``, ``x * d``:
    ``contract[a,a->a]``; ``alpha * ap`` of CG: ``contract[,a->a]``): every operand indexed as the result, or a
    scalar."""
    return node.op == "contract" and all(s in ("", node.params[0].output) for s in node.params[0].inputs)


def _vectors_read(node: Node) -> int:
    """How many distinct non-scalar values an elementwise expression (``ewise`` / ``combine`` / an elementwise
    ``contract``, nested) reads; 0 for anything else."""
    elementwise = ("ewise", "combine", "map")
    if not (node.op in elementwise or (node.op == "contract" and all(s == node.params[0].output
                                                                    for s in node.params[0].inputs))):
        return 0
    seen, todo, leaves = set(), [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op in elementwise or (n.op == "contract" and all(s == n.params[0].output for s in n.params[0].inputs)):
            todo.extend(n.args)
        elif n.type.ndim > 0:
            leaves.add(n)
    return len(leaves)


_CHEAP = frozenset({"arg", "const", "add", "sub", "mul"})


def _heads(expr) -> set:
    if not isinstance(expr, tuple) or not expr or not isinstance(expr[0], str):
        return set()
    found = {expr[0]}
    for part in expr[1:]:
        found |= _heads(part)
    return found


def _costly_to_recompute(node: Node) -> bool:
    """Whether an SpMV's dense vector is elementwise glue that the fused kernel, recomputing it at every
    stored entry, would pay for per entry: glue over two or more vectors (a gather each), or any operation
    beyond + - * (a division: ``y / norm(y)`` of power iteration). ``0.85 * y + c`` is not."""
    if _vectors_read(node) >= 2:
        return True
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "ewise" and not _heads(n.params[0]) <= _CHEAP:
            return True
        if n.op in ("ewise", "combine", "map") or (n.op == "contract" and all(s == n.params[0].output
                                                                       for s in n.params[0].inputs)):
            todo.extend(n.args)
    return False


def cut_points(trace: Trace, nnz: tuple[int, ...], native, min_entries: int | None = None,
               threads: int = 1) -> list[Node]:
    """The products of ``trace`` to compute natively as stages of their own (see the module docstring), in
    dependency order; ``native``: ``make_plan``'s chooser (None: no cuts); ``threads``: the kernel's compiled
    thread count (> 1: a product the native kernel would split across threads is cut, ``SPLIT_MIN_WORK``)."""
    if native is None:
        return []
    min_entries = CUT_MIN_ENTRIES if min_entries is None else min_entries
    results = set(trace.outputs)
    read_by: dict[Node, list[Node]] = {}
    order = walk(trace.outputs)
    for node in order:
        for a in node.args:
            read_by.setdefault(a, []).append(node)
    cuts = []
    for node in order:
        if node.op != "contract" or node in results or len(node.args) != 2 or node.params[0].order is not None:
            continue
        a, x = node.args
        if a.op != "input" or not a.type.is_sparse or x.op == "input" or x.type.is_sparse or x.type.ndim not in (1, 2):
            continue
        (sa, sx), so = node.params[0].inputs, node.params[0].output
        spmv = len(sa) == 2 and (sx, so) == (sa[1], sa[0])
        spmm = len(sa) == 2 and len(sx) == 2 and sx[0] == sa[1] and so == sa[0] + sx[1]
        if not (spmv or spmm) or a.type.format.order != (0, 1):
            continue             # a row-stored matrix times a vector / dense matrix (not ``a.T @ x``'s scatter)
        if spmm and not _costly_to_recompute(x):
            continue             # an SpMM on its own merit stays in the kernel (label propagation: 0.97x cut)
        entries = nnz[a.params[0]] if a.params[0] < len(nnz) else 0
        if entries < min_entries:
            continue
        operands = (Node("input", (), (0,), a.type), Node("input", (), (1,), x.type))
        candidate = Node(node.op, operands, node.params, node.type)
        size = 1
        for d in x.type.shape:
            size *= d
        # glue=False: only the SpMVs the chooser takes on their own merit (rows of a few entries: the native
        # flat kernel), not for the glue written in place, whose gain does not pay a stage (docs/planner.md);
        # and any SpMV whose vector is dense glue over several vectors, which the fused kernel would recompute
        # at every stored entry (MLIR fuses an elementwise producer into its consumer's loop)
        # and, on several threads, any product the native kernel splits across them (SPLIT_MIN_WORK)
        glue = _costly_to_recompute(x) or (spmv and threads > 1 and entries * 4 > SPLIT_MIN_WORK)
        if _glue_only(read_by.get(node)) and native(candidate, (a.type, x.type), (entries, size), glue=glue) is not None:
            cuts.append(node)
    return cuts


def is_vector_dot(node: Node) -> bool:
    """Whether ``node`` is NumPy's ``x @ y`` of two dense real vectors (``np.dot``, ``np.inner``, ``x @ x``):
    ``contract[k,k->]``, unscaled, operands and result of one float dtype."""
    if node.op != "contract" or len(node.args) != 2 or node.type.ndim != 0 or node.type.is_sparse:
        return False
    params = node.params[0]
    if params.order is not None or params.scale is not None or params.output != "" \
            or len(params.inputs[0]) != 1 or params.inputs[0] != params.inputs[1]:
        return False
    return node.type.dtype in ("float32", "float64") and all(
        a.type.ndim == 1 and not a.type.is_sparse and a.type.dtype == node.type.dtype for a in node.args)


def host_dots(trace: Trace, min_length: int | None = None) -> list[Node]:
    """The dot products of dense vectors of ``trace`` to compute on the host (NumPy's ``matmul``, so each
    equals NumPy's bit for bit), in dependency order: every one of at least ``DOT_MIN_LENGTH`` entries, when
    one of them reads a computed vector (else none: a dot of arguments only is a host product of the plan
    already, planner/plan.py ``on_host``)."""
    min_length = DOT_MIN_LENGTH if min_length is None else min_length
    dots = [n for n in walk(trace.outputs) if is_vector_dot(n) and n.args[0].type.shape[0] >= min_length]
    if not any(a.op != "input" for n in dots for a in n.args):
        return []
    return dots


def levels(trace: Trace, cuts, dots=()) -> dict[Node, int]:
    """Each node's stage: the largest of its operands' (inputs: 0), plus one for a cut product or a host dot
    whose dense operand is computed (so that the operand is an input of the product's stage; a host dot of
    stage ``s`` runs before the kernel of stage ``s``)."""
    cut = set(cuts) | set(dots)
    level: dict[Node, int] = {}
    for node in walk(trace.outputs):
        if node.op == "input":
            level[node] = 0
            continue
        here = max((level[a] for a in node.args), default=0)
        if node in cut:
            here = max(level[a] + (a.op != "input") for a in node.args)
        level[node] = here
    return level
