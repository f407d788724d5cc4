"""Running a program cut at its host steps (planner/host_steps.py): its kernels in turn, with NumPy's dense
linear algebra between them (tracer/linalg.py), each value handed from the stage that computes it to the
stages that read it.

``StagedPlan`` plans every kernel stage (costed for the call's operands; a handed-over value is dense, so its
size is its cost) and ``StagedKernel`` runs them: the dispatcher keeps it in its cache as it keeps a
``Kernel``, and ``Jitted.lower`` gives a ``StagedLowering`` whose texts are the stages' in order.
"""

from __future__ import annotations

import math

import numpy as np

from splyce.planner.host_steps import HostStage, KernelStage, split
from splyce.planner.plan import make_plan
from splyce.tensors.tensor import SparseTensor, asarray
from splyce.tracer import linalg
from splyce.tracer import scipy_host  # noqa: F401 - registers scipy's routines run between kernels
from splyce.tracer.ir import Node, Trace


class StagedPlan:
    """The stages of ``source`` and, per kernel stage, its plan."""

    def __init__(self, source: Trace, nnz: tuple, constants: tuple, native=None):
        self.source = source
        self.trace = source              # what the disk lock and the plan's text key on
        self.constants = constants
        self.nnz = nnz
        self.stages = split(source, len(constants))
        first_frozen = len(source.inputs) - len(constants)
        self.plans = {}
        for stage in self.stages:
            if isinstance(stage, KernelStage):
                counts = tuple(nnz[r] if isinstance(r, int) else math.prod(r.type.shape) for r in stage.reads)
                counts += tuple(nnz[i] for i in stage.constants)
                values = tuple(constants[i - first_frozen] for i in stage.constants)
                self.plans[stage] = make_plan(stage.trace, counts, constants=values, native=native)

    @property
    def scatters(self) -> bool:
        return False     # each stage's kernel runs its own kept twin where it scatters (Kernel.run_exact)

    def as_text(self) -> str:
        return "\n".join(_stage_text(stage, self.plans.get(stage), lambda p: p.as_text()) for stage in self.stages)


class StagedKernel:
    """A cut program's kernels (built by ``build(plan)``: the dispatcher's, for one planned trace) and host
    steps, run in turn on every call."""

    direct = None
    scatters = False

    def __init__(self, plan: StagedPlan, result_tree, build):
        self.plan = plan
        self.result_tree = result_tree
        self.trace = plan.source
        self.kernels = {stage: build(p) for stage, p in plan.plans.items()}
        from splyce.runtime.kernel import coo_source

        sources = tuple(coo_source(n) for n in plan.source.outputs)
        self.coo_sources = sources if any(i is not None for i in sources) else None
        self.sparse_results = any(o.type.is_sparse and o.type.ndim == 2 for o in plan.source.outputs)
        self.lowering = StagedLowering(plan, self.kernels)

    def kept(self) -> "StagedKernel":
        return self

    def run_exact(self, values: list) -> list:
        plan = self.plan
        first_frozen = len(plan.source.inputs) - len(plan.constants)
        known: dict[Node, object] = {}

        def value_of(n: Node):
            if n.op == "input":
                i = n.params[0]
                return values[i] if i < first_frozen else plan.constants[i - first_frozen]
            return known[n]

        for stage in plan.stages:
            if isinstance(stage, HostStage):
                done = {}
                for node in stage.nodes:
                    key = linalg.call_key(node)
                    if key not in done:
                        with np.errstate(all="ignore"):
                            done[key] = linalg.evaluate(node, [_host_operand(value_of(a)) for a in node.args])
                    known[node] = done[key][node.params[3]]
                continue
            given = [values[r] if isinstance(r, int) else _handed(known[r], r) for r in stage.reads]
            results = self.kernels[stage].run_exact(given)
            known.update(zip(stage.outputs, results))
        return [value_of(o) for o in plan.source.outputs]

    def run(self, values: list, accumulate_into: np.ndarray | None = None) -> list:
        results = self.run_exact(values)
        if accumulate_into is not None:
            with np.errstate(all="ignore"):
                np.add(accumulate_into, results[0], out=accumulate_into)
            return [accumulate_into]
        return results


class StagedLowering:
    """``Jitted.lower`` of a cut program: each stage's text in turn (a host step as the NumPy call it is)."""

    def __init__(self, plan: StagedPlan, kernels: dict):
        self.plan = plan
        self.trace = plan.source
        self.kernels = kernels     # per kernel stage: its kernel (a native library call's MLIR built when asked)

    def as_text(self, stage: str = "scf") -> str:
        if stage == "trace":
            return self.plan.source.as_text()
        if stage == "plan":
            return self.plan.as_text()
        return "\n".join(_stage_text(s, self.kernels.get(s), lambda k: k.lowering.as_text(stage))
                          for s in self.plan.stages)


def _stage_text(stage, item, text) -> str:
    if isinstance(stage, HostStage):
        calls = dict.fromkeys(n.params[0] if n.params[0].startswith("scipy.") else f"numpy.{n.params[0]}"
                              for n in stage.nodes)
        return f"// host step: {', '.join(calls)} (on the host, between kernels)"
    return f"// kernel\n{text(item)}"


def _host_operand(value):
    """A kernel's result or an operand as NumPy's linalg takes it: a dense array; a sparse one (a scipy routine's
    operand, tracer/scipy_host.py) as a scipy CSR / CSC array of its entries."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value
    if isinstance(value, SparseTensor):
        return value.to_scipy()
    if hasattr(value, "tocsr") and getattr(value, "format", None) not in ("csr", "csc"):
        return value.tocsr()
    return value if hasattr(value, "tocsr") else np.asarray(value)


def _handed(value, node: Node):
    """A value an earlier stage computed, as a kernel operand of ``node``'s dense type (C-contiguous); a sparse
    host result (scipy's tril / triu) as a SparseTensor in the traced format."""
    if node.type.is_sparse:
        return asarray(value, format=node.type.format, name="a host step's sparse result")
    return np.ascontiguousarray(np.asarray(value, dtype=node.type.dtype)).reshape(node.type.shape)
