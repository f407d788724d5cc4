"""The trace IR: small, frozen, hashable nodes recorded while a jitted function runs on tracers.

Every operation normalizes to one of three node kinds:
- ``input``: the i-th argument (params: its position);
- ``contract``: an einsum over 1-4 operands with an optional constant factor (matmul, einsum, elementwise
  ``*``, transpose, ``sum`` and scalar multiplication all become this);
- ``combine``: elementwise ``+`` / ``-`` of same-shaped operands (a union: an entry stored in either operand).

Nodes compare structurally, so a trace is its own cache key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from splyce.tensors.formats import Format


@dataclass(frozen=True)
class TensorType:
    """Shape, dtype (a NumPy dtype name) and format (``None`` for a dense tensor)."""

    shape: tuple[int, ...]
    dtype: str
    format: Format | None

    def __hash__(self) -> int:   # part of every cache lookup: computed once
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.shape, self.dtype, self.format))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_sparse(self) -> bool:
        return self.format is not None and not self.format.is_dense

    def __str__(self) -> str:
        dims = "x".join(map(str, self.shape)) or "scalar"
        return f"{dims}x{self.dtype}" + (f" #{self.format}" if self.is_sparse else "")


@dataclass(frozen=True)
class Node:
    op: str                       # "input" | "contract" | "combine"
    args: tuple["Node", ...]
    params: tuple                 # hashable op parameters (see the module docstring)
    type: TensorType

    def walk(self):
        """Nodes in dependency order, each once."""
        seen: dict[Node, None] = {}

        def visit(node: Node):
            if node in seen:
                return
            for arg in node.args:
                visit(arg)
            seen[node] = None

        visit(self)
        return list(seen)


@dataclass(frozen=True)
class ContractParams:
    """``out = scale * einsum(",".join(inputs) + "->" + output, *args)``."""

    inputs: tuple[str, ...]
    output: str
    scale: float | int | None = None

    def __str__(self) -> str:
        text = ",".join(self.inputs) + "->" + self.output
        return text if self.scale is None else f"{text}, scale={self.scale!r}"


@dataclass(frozen=True)
class Trace:
    """A traced function: its input types, output nodes, and the output format requested per output."""

    inputs: tuple[TensorType, ...]
    outputs: tuple[Node, ...]

    def as_text(self) -> str:
        names: dict[Node, str] = {}
        lines = []
        for out in self.outputs:
            for node in out.walk():
                if node in names:
                    continue
                if node.op == "input":
                    names[node] = f"%arg{node.params[0]}"
                    continue
                name = f"%{len(names) - sum(1 for n in names if n.op == 'input')}"
                names[node] = name
                operands = ", ".join(names[a] for a in node.args)
                params = ", ".join(str(p) for p in node.params if p is not None)
                lines.append(f"  {name} = {node.op}[{params}]({operands}) : {node.type}")
        header = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(self.inputs))
        results = ", ".join(names[o] for o in self.outputs)
        return f"trace({header}) {{\n" + "\n".join(lines) + f"\n  return {results}\n}}"


def result_dtype(*dtypes: str) -> str:
    return np.result_type(*[np.dtype(d) for d in dtypes]).name
