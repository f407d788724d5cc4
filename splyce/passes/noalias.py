"""Tell LLVM what the runtime knows about a kernel's buffers: they do not overlap where it matters.

A kernel's entry takes its inputs' buffers and its dense results' buffers. LLVM sees only pointers, so it must
assume a store to the result may change any input: in ``C[i, :] += a_ik * X[k, :]`` (SpMM) it stores every
partial sum of the row of C and reloads X and the values after it, instead of keeping the row in registers.
The runtime guarantees more: a result buffer is fresh (or, for ``Jitted.accumulate``, copied away from any
input that overlaps it), and inputs are only read. So when the kernel writes no input (checked here on the
stage-1 module, through views, loops and calls; anything this check cannot follow keeps the kernel as it
is), every buffer argument's aligned pointer is marked ``noalias`` on the LLVM dialect. Two inputs may
share memory (``a * a``): ``noalias`` allows that, as neither is written.

Temporaries get the same treatment: MemRefToLLVM aligns a ``malloc`` by ``inttoptr`` of an integer sum, which
hides from LLVM's alias analysis that the buffer is that fresh allocation; it is rewritten as a byte offset
from the malloc'd pointer (the same address), so the analysis knows the temporary overlaps nothing else.

Kernels with a Splyce fast lane are left as they are (backend/compiler.py): their loops are already written
with their loads and stores in registers, and ``noalias`` there made K1 4 % slower (docs/passes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from splyce.passes.dealloc_guard import aliased_root
from splyce.passes.ir_utils import defining_op, walk

# Ops that read a memref operand, or look at its descriptor, and never write it.
_READS = frozenset((
    "memref.load", "vector.load", "vector.maskedload", "vector.gather", "vector.transfer_read",
    "vector.expandload", "memref.dim", "memref.rank", "memref.extract_strided_metadata",
    "memref.extract_aligned_pointer_as_index", "memref.prefetch", "func.return",
    "memref.cast", "memref.reinterpret_cast", "memref.subview", "memref.collapse_shape", "memref.expand_shape",
    "memref.transpose", "memref.view", "memref.assume_alignment",
))
# Ops whose result is a buffer of its own (fresh, or a constant never written through an argument).
_FRESH = frozenset(("memref.alloc", "memref.alloca", "memref.realloc", "memref.get_global"))
_LOOPS = frozenset(("scf.for", "scf.while", "scf.if", "scf.index_switch", "scf.execute_region"))


@dataclass
class Plan:
    """What ``analyze`` found: the functions (by name) whose memref arguments are marked, or why none is."""

    marked: dict = field(default_factory=dict)   # name -> tuple of memref argument types (for the layout)
    reason: str = ""

    @property
    def applies(self) -> bool:
        return bool(self.marked)


class _Unknown(Exception):
    """A memref this analysis cannot trace to an argument or an allocation: keep the kernel as it is."""


def _functions(module: ir.Module) -> dict:
    return {op.operation.attributes["sym_name"].value: op.operation for op in module.body.operations
            if op.operation.name == "func.func"}


class _Roots:
    """The buffers (an entry-block argument index, or a fresh allocation) a memref value may point into: every
    source reachable backwards through views and the values loops carry (a search per value, memoized whole)."""

    def __init__(self, fn: ir.Operation, functions: dict, made: dict | None = None):
        self.functions = functions
        self.made = {} if made is None else made     # function name -> its _Roots (a callee's, made once)
        self.args = list(fn.regions[0].blocks[0].arguments)
        self.returns = []
        self.memo: dict = {}
        self.yields: dict = {}
        for op in walk(fn):          # one walk (each walk reads the whole function through the bindings)
            name = op.name
            if name == "func.return":
                self.returns.append(op)
            elif name in ("scf.yield", "scf.condition"):
                self.yields.setdefault(op.parent.operation, []).append(op)

    def of(self, value: ir.Value) -> frozenset:
        value = aliased_root(value)
        if value not in self.memo:
            found, seen, todo = set(), {value}, [value]
            while todo:
                for source in self._sources(todo.pop(), found):
                    source = aliased_root(source)
                    if source not in seen:
                        seen.add(source)
                        todo.append(source)
            self.memo[value] = frozenset(found)
        return self.memo[value]

    def _sources(self, value: ir.Value, found: set) -> list:
        """The values ``value`` takes its buffer from; an argument or allocation goes into ``found``."""
        owner = value.owner
        if isinstance(owner, ir.Block):
            if value in self.args:
                found.add(("arg", self.args.index(value)))
                return []
            return self._carried(owner, value.arg_number)
        op = owner.operation
        if op.name in _FRESH:
            found.add(("fresh", value))
            return []
        if op.name in _LOOPS:
            return self._result(op, value.result_number)
        if op.name == "func.call" and op.attributes["callee"].value in self.functions:
            return self._called(op, value.result_number, found)
        raise _Unknown(f"a memref made by {op.name}")

    def _carried(self, block: ir.Block, n: int) -> list:
        """A loop's block argument: what flows in (init) and what flows back (yield)."""
        loop = block.owner.operation
        if loop.name == "scf.for" and n > 0:
            return [list(loop.operands)[3 + n - 1]] + self._yielded(loop, n - 1, "scf.yield")
        if loop.name == "scf.while":
            if block == loop.regions[0].blocks[0]:
                return [list(loop.operands)[n]] + self._yielded(loop, n, "scf.yield")
            return self._yielded(loop, n + 1, "scf.condition")
        raise _Unknown(f"a memref block argument of {loop.name}")

    def _result(self, loop: ir.Operation, n: int) -> list:
        if loop.name == "scf.while":
            return self._yielded(loop, n + 1, "scf.condition")
        return self._yielded(loop, n, "scf.yield")

    def _called(self, call: ir.Operation, n: int, found: set) -> list:
        """A result of a call: the callee's returned buffer, one of the call's operands or its own allocation."""
        name = call.attributes["callee"].value
        callee = self.made.get(name)
        if callee is None:
            callee = self.made[name] = _Roots(self.functions[name], self.functions, self.made)
        sources = []
        for ret in callee.returns:
            for kind, x in callee.of(list(ret.operands)[n]):
                if kind == "arg":
                    sources.append(list(call.operands)[x])
                else:
                    found.add((kind, x))
        return sources

    def _yielded(self, loop: ir.Operation, n: int, name: str) -> list:
        return [list(y.operands)[n] for y in self.yields.get(loop, []) if y.name == name]


def _written(name: str, functions: dict, memo: dict, made: dict | None = None) -> frozenset:
    """The argument indices of function ``name`` whose buffers it (or a function it calls) may write
    (``memo``: the functions analysed, each with all its call sites checked; ``made``: their ``_Roots``)."""
    if name in memo:
        return memo[name]
    memo[name] = frozenset()   # recursion: the sparsifier makes none
    fn = functions[name]
    made = {} if made is None else made
    roots = made.get(name)
    if roots is None:
        roots = made[name] = _Roots(fn, functions, made)
    written: set = set()
    for op in walk(fn):
        memrefs = [(k, v) for k, v in enumerate(op.operands) if isinstance(v.type, ir.MemRefType)]
        if not memrefs or op.name in _READS:
            continue
        if op.name == "func.call":
            callee = op.attributes["callee"].value
            if callee not in functions or not functions[callee].regions[0].blocks:
                raise _Unknown(f"a memref passed to the external function {callee}")
            inner = _written(callee, functions, memo, made)
            operand_roots = {k: roots.of(v) for k, v in memrefs}
            for k, found in operand_roots.items():
                if k in inner and any(found & other for j, other in operand_roots.items() if j != k):
                    raise _Unknown(f"{callee} writes a buffer it is also given as another argument")
            memrefs = [(k, v) for k, v in memrefs if k in inner]
        elif op.name in ("scf.yield", "scf.condition"):
            continue   # passes the buffer on: followed by _Roots where it is used
        else:
            memrefs = [(k, v) for k, v in memrefs if k in _written_operands(op)]
        for _, v in memrefs:   # a store, a copy, a fill, a dealloc, any op not known to only read
            written |= {i for kind, i in roots.of(v) if kind == "arg"}
    memo[name] = frozenset(written)
    return memo[name]


def _written_operands(op: ir.Operation) -> range:
    """The operand indices an op may write: a linalg op's outputs (destination-passing style), a copy's
    target, every operand of any other op."""
    n = len(op.operands)
    if op.name == "memref.copy":
        return range(1, 2)
    if op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
        ins, outs = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[:2]
        return range(ins, ins + outs)
    return range(n)


def analyze(module: ir.Module, entry: str, n_outputs: int) -> Plan:
    """Whether the buffer arguments of ``module``'s functions may be marked ``noalias``: the entry ``entry``
    (whose last ``n_outputs`` memref arguments are its dense results' buffers) writes no other argument, and
    no function is handed one buffer twice where it writes it (``_written`` refuses that), so inside every
    function a written buffer is reached through its own argument only."""
    functions = _functions(module)
    memo: dict = {}
    made: dict = {}
    try:
        written = _written(entry, functions, memo, made)
        for name, fn in functions.items():     # every call site's operands checked, called or not (a function
            if fn.regions[0].blocks:           # already analysed, its own call sites included, is in ``memo``)
                _written(name, functions, memo, made)
    except _Unknown as e:
        return Plan(reason=str(e))
    types = [a.type for a in functions[entry].regions[0].blocks[0].arguments]
    memref_args = [i for i, t in enumerate(types) if isinstance(t, ir.MemRefType)]
    outputs = set(memref_args[len(memref_args) - n_outputs:]) if n_outputs else set()
    if not written <= outputs:
        return Plan(reason=f"the kernel writes its input argument(s) {sorted(written - outputs)}")
    return Plan(marked={name: tuple(a.type for a in fn.regions[0].blocks[0].arguments)
                        for name, fn in functions.items() if fn.regions[0].blocks})


def _aligned_positions(types: tuple) -> tuple[list[int], int]:
    """The LLVM argument positions of each ranked memref's aligned pointer (MemRefToLLVM expands a memref
    into allocated pointer, aligned pointer, offset, sizes, strides), and the expanded argument count."""
    positions, at = [], 0
    for t in types:
        if isinstance(t, ir.MemRefType):
            positions.append(at + 1)
            at += 3 + 2 * t.rank
        elif isinstance(t, ir.UnrankedMemRefType):
            at += 2
        else:
            at += 1
    return positions, at


def mark_noalias(module: ir.Module, plan: Plan) -> int:
    """On the LLVM dialect: ``llvm.noalias`` on the aligned pointer of every buffer argument of the planned
    functions; returns how many arguments were marked (a function whose lowered signature is not the
    expected layout is left alone)."""
    marked = 0
    for op in module.body.operations:
        op = op.operation
        if op.name != "llvm.func" or op.attributes["sym_name"].value not in plan.marked:
            continue
        positions, count = _aligned_positions(plan.marked[op.attributes["sym_name"].value])
        fn_type = ir.TypeAttr(op.attributes["function_type"]).value
        inputs = _llvm_inputs(fn_type)
        if len(inputs) != count or any(inputs[p] != "ptr" for p in positions):
            continue
        old = list(op.attributes["arg_attrs"]) if "arg_attrs" in op.attributes else [ir.DictAttr.get({})] * count
        new = list(old)
        for p in positions:
            entries = {a.name: a.attr for a in ir.DictAttr(old[p])}
            entries["llvm.noalias"] = ir.UnitAttr.get()
            new[p] = ir.DictAttr.get(entries)
            marked += 1
        op.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
    return marked


def _llvm_inputs(fn_type: ir.Type) -> list[str]:
    """The parameter types, as text, of an ``!llvm.func<ret (t1, t2, ...)>`` type (the Python bindings have
    no accessor for them)."""
    text = str(fn_type)
    body = text[text.index("<") + 1:text.rindex(">")]
    parts, depth, start = [], 0, None
    for i, c in enumerate(body):
        if c == "(" and depth == 0 and start is None:
            start = i + 1
            continue
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            if depth == 0:   # the parameter list's closing parenthesis
                break
            depth -= 1
        elif c == "," and depth == 0 and start is not None:
            parts.append(body[start:i].strip())
            start = i + 1
    tail = body[start:i].strip() if start is not None else ""
    return parts + [tail] if tail else parts


def offset_aligned_allocations(module: ir.Module) -> int:
    """On the LLVM dialect: each aligned temporary ``inttoptr(f(ptrtoint(p)))`` (``f`` of constants only,
    MemRefToLLVM's round up to the alignment) becomes ``getelementptr i8, p, f(ptrtoint(p)) - ptrtoint(p)``:
    the same address, now derived from ``p`` (the malloc) for alias analysis. Returns how many."""
    from mlir.dialects import llvm

    rewritten = 0
    for fn in module.body.operations:
        if fn.operation.name != "llvm.func":
            continue
        for op in [op for op in walk(fn) if op.name == "llvm.inttoptr"]:
            leaves = _integer_leaves(op.operands[0])
            if leaves is None or len(leaves) != 1:
                continue
            as_int = leaves[0]
            base = as_int.operands[0]
            with ir.InsertionPoint(op), op.location:
                nowrap = ir.Attribute.parse("#llvm.overflow<none>")
                offset = llvm.sub(op.operands[0], as_int.result, nowrap)
                gep = llvm.getelementptr(op.result.type, base, [offset], ir.DenseI32ArrayAttr.get([_DYNAMIC]),
                                         ir.TypeAttr.get(ir.IntegerType.get_signless(8)),
                                         ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0))
            op.result.replace_all_uses_with(gep)
            op.erase()
            rewritten += 1
    return rewritten


_DYNAMIC = -2 ** 31   # GEPOp's marker for an index given as an operand
_ARITH = frozenset(("llvm.add", "llvm.sub", "llvm.urem", "llvm.and", "llvm.or", "llvm.mul"))


def _integer_leaves(value: ir.Value):
    """The ``llvm.ptrtoint`` ops an integer is computed from through llvm arithmetic on constants, or None
    when it depends on anything else (an argument, a load, a call)."""
    found, todo, seen = [], [value], []
    while todo:
        v = todo.pop()
        op = defining_op(v)
        if op is None:
            return None
        if op.name == "llvm.mlir.constant":
            continue
        if op.name == "llvm.ptrtoint":
            if not any(op == f for f in found):
                found.append(op)
            continue
        if op.name not in _ARITH:
            return None
        if any(op == s for s in seen):
            continue
        seen.append(op)
        todo.extend(op.operands)
    return found
