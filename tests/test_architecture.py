"""The package's import graph points down: no cycles (function-level imports included), no module importing
another package's private names, and the ground floors import nothing above them."""

import ast
from pathlib import Path

import pytest

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


# The SpMV loop rule's tuned constants (native/spmv.py): read only by the rule itself, so no chooser carries a copy.
_SPMV_RULE_CONSTANTS = {"FLAT_MAX_ROW", "FLAT_MIN_BYTES", "GROUPED_MAX_BYTES", "GROUPED_MIN_ROW"}
# The modules that may read one constant besides the rule: the MLIR flat-rows pass emits FLAT_MAX_ROW as a
# constant (the rule's other half it takes from ``spmv.flat_min_entries``).
_SPMV_RULE_READERS = {"splyce.native.spmv": _SPMV_RULE_CONSTANTS, "splyce.passes.flat_rows": {"FLAT_MAX_ROW"}}


def test_spmv_rule_defined_once():
    """SpMV's flat / grouped / one-row rule is written once (native/spmv.py: ``flat_min_entries``, ``goes_flat``,
    ``spmv_variant``): every other module asks those functions, none reads the tuned constants to write the
    comparison again (the drop-in's fast path once did, and the MLIR flat-rows pass rounded the size bound
    its own way), and no module but native/spmv.py defines a function of those names."""
    bad = []
    for path in ROOT.rglob("*.py"):
        name = _module(path)
        allowed = _SPMV_RULE_READERS.get(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            used = None
            if isinstance(node, ast.Name):
                used = node.id
            elif isinstance(node, ast.Attribute):
                used = node.attr
            elif isinstance(node, ast.alias):
                used = node.name
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name != "splyce.native.spmv" \
                    and node.name in ("flat_min_entries", "goes_flat", "spmv_variant"):
                bad.append(f"{name} defines {node.name}")
            if used in _SPMV_RULE_CONSTANTS and used not in allowed:
                bad.append(f"{name} reads {used}")
    assert bad == []


@pytest.mark.parametrize("min_bytes", [0, 1 << 20, 1_000_003])
def test_spmv_rule_agrees_with_itself(monkeypatch, min_bytes):
    """``goes_flat``'s size bound is ``flat_min_entries`` (what the MLIR pass emits) exactly, and the drop-in's
    ``spmv_variant`` goes flat where ``goes_flat`` does, for every entry width the kernels take."""
    from splyce.native import spmv

    monkeypatch.setattr(spmv, "FLAT_MIN_BYTES", min_bytes)     # each CPU's tuning: 0 on Zen 1/2, L2 on Zen 4/5
    for crd_bits, value_bytes in ((32, 4), (32, 8), (64, 4), (64, 8), (16, 8), (64, 16)):
        bits = crd_bits + value_bytes * 8
        least = spmv.flat_min_entries(bits)
        rows = 10**9                                  # rows never the bound here
        assert least == 0 or not spmv.goes_flat(least - 1, rows, crd_bits, value_bytes)
        assert spmv.goes_flat(least, rows, crd_bits, value_bytes)
        for nnz in (0, 1, least - 1, least, least + 1, 3 * least + 7):
            for r in (-1, 0, 1, nnz // 4, nnz // 4 + 1, nnz // 3, rows):
                if bits % 8 == 0:
                    assert (spmv.spmv_variant(nnz, r, bits // 8) == "flat") == spmv.goes_flat(nnz, r, crd_bits,
                                                                                               value_bytes)


def test_no_merge_conflict_markers():
    """No file of the repository holds a merge's conflict markers (a docs row once did, through two merges)."""
    repo = ROOT.parent
    bad = []
    for pattern in ("splyce/**/*.py", "tests/**/*.py", "docs/**/*.md", "*.md", "mkdocs.yml", "pyproject.toml"):
        for path in repo.glob(pattern):
            if ".venv" in path.parts:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======" and path.suffix == ".py":
                    bad.append(f"{path.relative_to(repo)}:{n}")
    assert bad == []
