"""A Griffe extension for the API reference: it shows splyce's public names where users find them.

Two things static analysis cannot see in splyce's source:
- ``splyce/__init__.py`` imports the compiler-facing names lazily (PEP 562, its ``_LAZY`` table) so that
  ``import splyce`` stays cheap; each becomes an alias to the object in the module that defines it, so
  ``::: splyce.jit`` documents ``jit`` wherever the package keeps it.
- the binary drop-ins (``matmul``, ``multiply``, ``add``, ``subtract``) are made by one factory
  (``api._binary``), so their signatures and docstrings exist only at run time; they are inspected.
"""

from __future__ import annotations

import ast
import sys

import griffe


class SplyceNames(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.path != "splyce":
            return
        lazy = ast.literal_eval(str(pkg.members["_LAZY"].value)) if "_LAZY" in pkg.members else {}
        for name, module in lazy.items():
            if name not in pkg.members:
                pkg.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=pkg))
        # the modules that define the public names: where factory-made functions may hide
        public = ast.literal_eval(str(pkg.members["__all__"].value))
        modules = {pkg.members[n].target_path.rpartition(".")[0] for n in public
                   if n in pkg.members and pkg.members[n].is_alias}
        for module_path in sorted(modules):
            module = loader.modules_collection.get_member(module_path)
            made = [n for n, m in module.members.items()
                    if not m.is_alias and m.is_attribute and str(getattr(m, "value", "")).startswith("_binary(")]
            if made:
                # imported from the tree being documented, not from another installed copy
                inspected = griffe.inspect(module_path, import_paths=[str(pkg.filepath.parent.parent), *sys.path],
                                           docstring_parser=loader.docstring_parser,
                                           docstring_options=loader.docstring_options)
                for name in made:
                    static = module.members[name]
                    func = inspected.members[name]
                    func.lineno, func.endlineno = static.lineno, static.endlineno
                    module.set_member(name, func)
