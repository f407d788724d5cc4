"""Constants of a trace: arrays a jitted function reads from its enclosing scope, as JAX's closed-over constants.

Such an array (NumPy, scipy.sparse, a SparseTensor) becomes an ``input`` node of the trace after the
arguments, and the kernel takes it as a hidden argument: its values are never baked into the machine code.

- *Named* constants are the arrays bound, when the function is called, to the names it reads from its
  closure cells and module globals (and those of the plain Python functions of the same module it calls).
  The dispatcher reads them on every call (``Site.read``): their types are part of the cache key, and a new
  value of the same type is used by the same kernel, without recompiling. The function is traced as a copy
  of itself (``rebound``) whose globals and closure cells bind those names to tracers, so that an expression
  of constants only (``X @ W``) is traced too instead of being computed once by NumPy.
- Any other array met while tracing (an attribute ``self.w``, an array the function builds, ``np.ones(n)``)
  is *frozen*: the value seen at trace time is kept with the plan and passed on every call (JAX's behaviour
  for all captured constants).

The trace context is per thread: tracing runs the Python function on the calling thread.
"""

from __future__ import annotations

import dis
import threading
import types
from dataclasses import dataclass, field

from splyce.tracer.ir import Node, TensorType


@dataclass(frozen=True, eq=False)
class Captured:
    """A named constant as the dispatcher found it for one call: the object, its label and its type."""

    obj: object
    label: str
    type: TensorType


@dataclass
class TraceContext:
    """The constants of the trace being recorded on this thread."""

    prepare: object                  # (obj, name) -> (TensorType, value): the dispatcher's argument handling
    next_index: int                  # input index of the next frozen constant
    nodes: dict = field(default_factory=dict)       # id(obj) -> input Node
    frozen: list = field(default_factory=list)      # (obj, TensorType, value) per frozen constant, in order

    def add(self, obj, index: int, type_: TensorType) -> Node:
        node = Node("input", (), (index,), type_)
        self.nodes[id(obj)] = node
        return node


_state = threading.local()


def current() -> TraceContext | None:
    return getattr(_state, "context", None)


class tracing:
    """``with tracing(context):`` records the constants of one trace (nested traces keep their own)."""

    def __init__(self, context: TraceContext):
        self.context = context

    def __enter__(self) -> TraceContext:
        self.saved = current()
        _state.context = self.context
        return self.context

    def __exit__(self, *exc):
        _state.context = self.saved


def constant_node(obj) -> Node | None:
    """The input node of a constant array read while tracing (a frozen one is added on first use), or None
    outside a trace."""
    context = current()
    if context is None:
        return None
    node = context.nodes.get(id(obj))
    if node is not None:
        return node
    type_, value = context.prepare(obj, f"a constant array ({type(obj).__name__}) read by the function")
    context.frozen.append((obj, type_, value))   # obj stays alive with the plan, so its id is not reused
    node = context.add(obj, context.next_index, type_)
    context.next_index += 1
    return node


# -- where a function's named constants live ----------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Site:
    """A name the function reads: a closure cell, or a key of a module's globals."""

    label: str
    cell: object = None
    namespace: dict | None = None

    def read(self):
        if self.cell is not None:
            try:
                return self.cell.cell_contents
            except ValueError:   # an empty cell (a name assigned later in the enclosing function)
                return None
        return self.namespace.get(self.label)


_NOT_DATA = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)


def sites(fun) -> tuple[Site, ...]:
    """The names ``fun`` reads from its closure and its module's globals, and transitively those of the plain
    functions of the same module it calls; names bound to modules, functions and classes when ``jit`` is
    called are left out (they are code, not data)."""
    found: dict[tuple, Site] = {}
    seen: set[int] = set()
    stack = [fun]
    while stack:
        f = stack.pop()
        f = getattr(f, "__wrapped__", f)
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        closure = getattr(f, "__closure__", None) or ()
        for name, cell in zip(code.co_freevars, closure):
            try:
                value = cell.cell_contents
            except ValueError:
                value = None
            if isinstance(value, types.FunctionType):
                stack.append(value)
            elif not isinstance(value, _NOT_DATA) and not callable(value):
                found.setdefault(("cell", id(cell)), Site(name, cell=cell))
        namespace = getattr(f, "__globals__", None)
        if namespace is None:
            continue
        for name in _global_names(code):
            value = _helper(namespace.get(name), namespace)
            if value is not None:
                stack.append(value)
            elif not isinstance(namespace.get(name), _NOT_DATA) and not callable(namespace.get(name)):
                found.setdefault(("global", id(namespace), name), Site(name, namespace=namespace))
    return tuple(found.values())


def _helper(value, namespace: dict):
    """The plain function of the module ``namespace`` that ``value`` runs: itself, or the function of a
    ``splyce.jit`` object (called with tracers, a jitted function runs its Python function inline), else None."""
    if not isinstance(value, types.FunctionType) and hasattr(value, "cache_info") and hasattr(value, "lower"):
        value = getattr(value, "__wrapped__", None)
    if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
        return value
    return None


def _global_names(code) -> set[str]:
    """The names a code object and the code nested in it (lambdas, comprehensions) may read as globals."""
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        # only the names loaded as globals: ``co_names`` also holds attribute names (``a.T``, ``x.sum()``),
        # and a site for one of those made every call read it and kept the call off the cached fast path
        names.update(i.argval for i in dis.get_instructions(c) if i.opname in _GLOBAL_LOADS)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


_GLOBAL_LOADS = ("LOAD_GLOBAL", "LOAD_NAME")


def rebound(fun, tracers: dict, substitute=None):
    """A copy of ``fun`` whose module globals and closure cells bound to the objects keyed (by id) in
    ``tracers`` are bound to those tracers instead, as are the same-module functions it calls (copied over
    the same new globals). ``substitute(value)``: a stand-in for any other bound value, or None to keep it
    (tracer/namespaces.py binds the numpy / scipy modules so). Nothing is modified: the copy has its own
    globals dict and cells."""
    if not isinstance(fun, types.FunctionType) or (not tracers and substitute is None):
        return fun
    namespace = fun.__globals__
    scope = dict(namespace)
    for name, value in namespace.items():
        if id(value) in tracers:
            scope[name] = tracers[id(value)]
        elif substitute is not None:
            stand_in = substitute(value)
            if stand_in is not None:
                scope[name] = stand_in
    pending, done = [fun.__code__], set()
    while pending:   # the same-module functions reachable by name, copied over ``scope``
        code = pending.pop()
        for name in _global_names(code):
            value = _helper(namespace.get(name), namespace)
            if value is not None and name not in done:
                done.add(name)
                scope[name] = _copy(value, scope, tracers, substitute)
                pending.append(value.__code__)
    return _copy(fun, scope, tracers, substitute)


_MAX_NESTING = 8   # closures of closures copied, at most this deep (a self-referring closure stops here)


def _copy(fun, scope: dict, tracers: dict, substitute=None, copying: tuple = ()):
    closure = None
    if fun.__closure__:
        cells = []
        for cell in fun.__closure__:
            try:
                value = cell.cell_contents
            except ValueError:
                cells.append(cell)
                continue
            stand_in = tracers.get(id(value))
            if stand_in is None and substitute is not None:
                stand_in = substitute(value)
            helper = _helper(value, fun.__globals__) if stand_in is None and substitute is not None else None
            if helper is not None and helper is not fun and helper not in copying and len(copying) < _MAX_NESTING:
                # a plain function of the same module held in a closure: copied over the same scope
                stand_in = _copy(helper, scope, tracers, substitute, copying + (fun,))
            cells.append(cell if stand_in is None else types.CellType(stand_in))
        closure = tuple(cells)
    copy = types.FunctionType(fun.__code__, scope, fun.__name__, fun.__defaults__, closure)
    copy.__kwdefaults__ = fun.__kwdefaults__
    copy.__qualname__ = fun.__qualname__
    return copy
