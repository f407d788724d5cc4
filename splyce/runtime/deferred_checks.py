"""Checks of a scipy CSR operand left to the native kernels that read it (a call's argument handling).

A scipy operand is checked on every call (it is the caller's, and its arrays may change between calls): a
native scan of its index arrays, one more pass over them than scipy's own ``A @ x`` makes (0.15-0.4 ms on
0.8-1.7M entries, 10-25 % of an SpMV; 2-core Zen 4, 2026-12-07). Where the plan reads the operand only
through native steps that check every position and coordinate as they read it (the drop-in's SpMV / SpMM,
``checks_indices`` on the step's ``run``), that scan buys nothing but the answer to "is it canonical", which
decides how the operand is stored (a canonical operand is wrapped as it is, any other re-stored sorted). So:

* the first call of an operand object checks it in full (``arguments.prepare``); when it was wrapped as it is
  (canonical), the object and its three arrays are remembered (``remember``);
* a later call with the same object holding the same arrays wraps them again without a scan (``unchecked``);
* once the kernel is known, ``confirm`` checks every operand so wrapped that the plan reads otherwise (the
  MLIR kernel, a conversion, a transpose read in place): its index arrays are then scanned as before. An
  operand whose scan fails (its arrays were modified in place since) is forgotten and the call prepared again
  the ordinary way, so it gets the ordinary result (a re-stored copy) or the ordinary error.

What is remembered is whether the arrays were canonical (sorted, unique coordinates), as scipy's own
``has_canonical_format`` flag caches it on the object; memory safety never rests on it: the native steps check
bounds as they read. A stale memory (coordinates unsorted in place after the first call) only changes the
order in which an SpMV row adds its entries: the stored order, as scipy's ``A @ x`` adds them.
"""

from __future__ import annotations

import threading
import weakref

from splyce.tensors.tensor import SparseTensor
from splyce.tensors.validation import validate

_lock = threading.Lock()
# id(scipy object) -> (weak reference to it, indptr, indices, data, shape, format): the arrays held, so an id
# of a replaced array cannot come back as another array's while the entry lives
_seen: dict[int, tuple] = {}


def _forget(key: int) -> None:
    with _lock:
        _seen.pop(key, None)


def remember(x, tensor) -> None:
    """Note scipy CSR ``x`` as checked canonical when ``tensor`` (its prepared SparseTensor) wraps its own
    arrays: a later call with the same arrays may defer their check (``unchecked``)."""
    if getattr(x, "format", None) != "csr" or type(tensor) is not SparseTensor or not tensor.validated:
        return
    pos, crd = tensor.pos[1], tensor.crd[1]
    if pos is not x.indptr or crd is not x.indices or tensor.values is not x.data:
        return
    key = id(x)
    try:
        ref = weakref.ref(x, lambda _r, key=key: _forget(key))
    except TypeError:
        return
    with _lock:
        _seen[key] = (ref, pos, crd, tensor.values, x.shape, tensor.format)


def unchecked(x) -> SparseTensor | None:
    """An unvalidated SparseTensor over scipy CSR ``x``'s arrays when ``x`` was checked canonical with these same
    arrays by an earlier call (``remember``), else None."""
    entry = _seen.get(id(x))
    if entry is None:
        return None
    ref, pos, crd, data, shape, fmt = entry
    if ref() is not x or x.indptr is not pos or x.indices is not crd or x.data is not data or x.shape != shape:
        return None
    return SparseTensor(shape, fmt, (None, pos), (None, crd), data, validate=False)


def self_checked(kernel) -> frozenset:
    """The kernel inputs (positions in the call's operands) that its plan reads only through native steps
    checking every index they read (memoized on the kernel); empty for None (a kernel of another kind), a plan
    that may recompute with every operand kept (``scatters``) or that reads operands through gathers."""
    known = getattr(kernel, "_self_checked", None)
    if known is not None:
        return known
    from splyce.planner.plan import Plan

    plan = getattr(kernel, "plan", None)
    program = getattr(plan, "program", None) if getattr(plan, "cut", False) else None
    if program is not None:      # a program cut into stages (runtime/staged.py, planner/cuts.py)
        found = _staged_self_checked(program, plan.source)
        if found is None:
            return frozenset()   # a stage not compiled yet: asked again on the next call
        kernel._self_checked = found
        return found
    # a plain kernel's (runtime/kernel.py's ``Kernel``; the dispatcher passes no other) plan only: a staged
    # program's stages (runtime/staged.py, host_stages.py) and a library call's MLIR fallback read their
    # operands in ways this does not follow
    simple = kernel is not None and isinstance(plan, Plan) and not kernel.scatters and not kernel.distributed
    found = _self_checked_inputs(plan) if simple else frozenset()
    try:
        kernel._self_checked = found
    except AttributeError:
        pass
    return found


def _kernel_checked(kernel) -> frozenset:
    """The inputs of one stage's kernel that it reads only through checking native code: a plain kernel's
    (``self_checked``), or a native library call's (runtime/library.py, ``LibraryKernel``) sparse operands
    when it reads the operands as given and its native kernel checks every index it reads."""
    call = getattr(kernel, "call", None)
    if call is None:
        return self_checked(kernel) if type(kernel).__name__ == "Kernel" else frozenset()
    plan = kernel.plan
    if call.op.reads is not None or plan.derived or plan.gathered or plan.needs_conversion or plan.constants \
            or kernel.scatters or not getattr(call.run, "checks_indices", False):
        return frozenset()
    return frozenset(i for i in call.op.operands if plan.source.inputs[i].is_sparse)


def _staged_self_checked(program, source) -> frozenset | None:
    """The arguments of a cut program that each stage reading them reads through checking native code (a
    segment whose kernel ``_kernel_checked`` names the operand, its kernel ``trusted`` with the operands
    as given); None while a stage reading a sparse argument has not run."""
    sparse = {i for i, t in enumerate(source.inputs) if t.is_sparse}
    ok = set(sparse)
    for stage in program.stages:
        reads = getattr(stage, "reads", ())
        if not hasattr(stage, "jitted"):          # a host dot (dense operands) or a loop
            if hasattr(stage, "spec"):
                ok -= set(reads)
            continue
        mine = [(p, s) for p, s in enumerate(reads) if s in sparse]
        if not mine:
            continue
        if stage.trusted is None:
            return None
        checked = _kernel_checked(stage.trusted)
        ok -= {s for p, s in mine if p not in checked}
    return frozenset(ok)


def _self_checked_inputs(plan) -> frozenset:
    """The arguments that checking native steps read (so each call checks their bounds before the kernel runs)
    and nothing else reads but MLIR steps for which the order of a row's entries changes neither memory
    safety nor more than the order of a sum (``_order_free``)."""
    from splyce.tracer.ir import walk

    if plan.gathered:
        return frozenset()
    n_args = len(plan.source.inputs) - len(plan.constants)
    read = set(d.source for d in plan.derived)           # transposes read in place
    natively: set[int] = set()
    readers: dict[int, list] = {}                        # kernel input -> the MLIR kernel's nodes reading it
    for node in walk(plan.trace.outputs):
        for a in node.args:
            if a.op == "input":
                readers.setdefault(a.params[0], []).append(node)
    returned = {o.params[0] for o in plan.trace.outputs if o.op == "input"}
    for k, s in enumerate(plan.sources):
        if s.host is not None:
            read.update(s.host[1])
        elif s.native is not None:
            checks = getattr(s.native.run, "checks_indices", False)
            for o in s.native.operands:
                src = plan.sources[o]
                if not src.type.is_sparse:
                    continue
                if src.host is None and src.native is None and not src.converted and checks:
                    natively.add(src.index)
                else:
                    read.add(src.index if src.native is None and src.host is None else -1)
        elif s.converted or k in returned or not all(_order_free(n) for n in readers.get(k, ())):
            read.add(s.index)
    return frozenset(i for i in natively if i < n_args and i not in read)


def _order_free(node) -> bool:
    """Whether an MLIR step reading a sparse operand whose bounds a native step checked in the same call is
    safe and right whatever the order of its rows' entries: a contraction or reduction of that one sparse
    operand (with dense ones) into a dense result, whose loops follow the positions and index dense arrays by
    the (checked) coordinates; unsorted coordinates could only change the order of a sum, to the stored
    order, as scipy sums."""
    return (node.op in ("contract", "reduce") and not node.type.is_sparse
            and sum(1 for a in node.args if a.type.is_sparse) == 1)


def confirm(values: list, deferred: list, kernel) -> bool:
    """Check, in place of ``arguments.prepare``, each operand in ``deferred`` (positions in ``values`` holding a
    tensor from ``unchecked``) that ``kernel`` does not check itself; False, the operand forgotten, when one is
    not canonical any more (the caller then prepares the call again the ordinary way). Malformed arrays raise
    ``prepare``'s error."""
    if getattr(kernel, "reads_no_indices", False):
        return True       # a view returned (runtime/forms.py's "view"): the arrays as they are, as scipy's A.T
    skip = self_checked(kernel)
    ok = True
    for i, obj in deferred:
        t = values[i]
        if t.validated or (i in skip and all(j in skip for j, o in deferred if o is obj)):
            continue      # checked at its other position, or read only by checking native steps
        try:
            validate(t, "argument")
        except ValueError:   # unsorted now (NotCanonicalError) or malformed: prepared again the ordinary way,
            _forget(id(obj))     # which re-stores the one and words the other's error with the argument's name
            ok = False
    return ok
