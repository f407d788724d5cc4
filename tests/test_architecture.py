"""The package's import graph points down: no cycles (function-level imports included), no module importing
another package's private names, and the ground floors import nothing above them."""

import ast
from pathlib import Path

import splyce

ROOT = Path(splyce.__file__).parent

# What each ground-floor package may import from splyce (besides itself).
FLOORS = {
    "native": {"splyce.native"},
    "thread_count": set(),
    "errors": set(),
    "version": set(),
    "tensors": {"splyce.tensors", "splyce.native", "splyce.errors"},
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports():
    """(module, imported module, imported names) for every import statement under splyce/."""
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("splyce"):
                        yield name, alias.name, ()
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                if not base.startswith("splyce"):
                    continue
                names = tuple(a.name for a in node.names)
                submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                if submodules:
                    yield from ((name, m, ()) for m in submodules)
                    names = tuple(n for n in names if f"{base}.{n}" not in modules)
                    if not names:
                        continue
                yield name, base, names


def _edges():
    modules = {_module(p) for p in ROOT.rglob("*.py")}
    graph = {m: set() for m in modules}
    for src, dst, _ in _imports():
        while dst not in modules and "." in dst:
            dst = dst.rpartition(".")[0]
        if dst in modules and dst != src and dst != "splyce":
            graph[src].add(dst)
    return graph


def test_no_import_cycles():
    graph = _edges()
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []


def test_no_private_names_across_packages():
    bad = []
    for src, dst, names in _imports():
        src_pkg, dst_pkg = src.split(".")[:2], dst.split(".")[:2]
        for n in names:
            if n.startswith("_") and not n.startswith("__") and src_pkg != dst_pkg:
                bad.append(f"{src} imports {dst}.{n}")
    assert bad == []


def test_ground_floors_import_nothing_above():
    bad = []
    for src, dst, _ in _imports():
        floor = src.split(".")[1] if "." in src else None
        if floor in FLOORS and not any(dst == a or dst.startswith(a + ".") for a in FLOORS[floor] | {f"splyce.{floor}"}):
            bad.append(f"{src} imports {dst}")
    assert bad == []


def test_the_checks_see_the_package():
    """The walk finds the imports it judges (a broken walk would pass every test above)."""
    graph = _edges()
    assert "splyce.dropin.products" in graph["splyce.dropin"]
    assert "splyce.native.spmv" in graph["splyce.dropin.products"]
    assert "splyce.errors" in graph["splyce.tracer.tracer"]


def test_import_splyce_loads_no_compiler_and_no_native_code():
    """``import splyce`` stays cheap: no MLIR, no LLVM, no native module until a call needs one."""
    import subprocess
    import sys

    code = ("import sys, splyce; heavy = [m for m in ('mlir', 'llvmlite', 'splyce.native.memory_pool', "
            "'splyce.native.codegen', 'splyce.runtime.dispatcher', 'scipy.sparse') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_api_pool_threshold_is_the_pools():
    from splyce import api
    from splyce.native import memory_pool

    assert api.POOL_MIN == memory_pool.POOL_MIN
