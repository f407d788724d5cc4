"""The planner's rule for a sparse product's rows: unordered unless asked for (``unordered_product_results``),
and the CSR-with-unordered-columns format it gives (``unordered_csr``, ``is_unordered_csr``)."""

from __future__ import annotations

from splyce.tensors.formats import Format, Level
from splyce.tracer.ir import Node, TensorType, walk


UNORDERED_PRODUCT_RULE = ("a sparse x sparse product returned with its sparse format left to splyce: CSR with "
                          "each row's columns unique, in any order (unordered_product_results; "
                          "out_format=splyce.CSR for sorted rows)")


def unordered_csr(fmt: Format) -> Format:
    """``fmt`` (a CSR) with its column level unordered: columns unique per row, in any order."""
    return Format((fmt.levels[0], Level("compressed", ordered=False)), fmt.order, fmt.pos_width, fmt.crd_width)


def _is_csr(t: TensorType, ordered: bool) -> bool:
    """A sparse 2-D type stored as CSR (dense rows, unique columns), its columns sorted iff ``ordered``."""
    f = t.format
    return (t.is_sparse and t.ndim == 2 and f.order == (0, 1)
            and tuple((lv.kind, lv.unique, lv.ordered) for lv in f.levels)
            == (("dense", True, True), ("compressed", True, ordered)))


def is_unordered_csr(t: TensorType) -> bool:
    return _is_csr(t, ordered=False)


def unordered_product_results(outputs: tuple[Node, ...]) -> tuple[Node, ...]:
    """A sparse product's rows are not sorted unless asked for, as scipy's ``A @ B`` and JAX's BCOO products
    leave them: a result of the function (no other op reads it) that is a product of two sparse matrices,
    whose sparse format the user left to splyce (``out_format="sparse"``, at the op or the jit) and which
    would be a CSR, is typed CSR with an unordered column level. Gustavson's product then writes each row in
    order of first appearance (the native route: sorting the rows was up to 2x its time on power-law and road
    graphs, docs/guide/benchmarks.md), or sorted where that kernel is faster (chosen per call:
    native/spgemm.py, ``unordered_kernel``); the MLIR kernel writes them sorted, a valid unordered row, so the
    type does not depend on the route or the kernel. An intermediate stays ordered (the sparsifier coiterates it), and so does
    a result whose format was given (``out_format=splyce.CSR``)."""
    consumed = {a for n in walk(outputs) for a in n.args}
    out = []
    for node in outputs:
        t = node.type
        if (node.op == "contract" and node not in consumed and node.params[0].format_left and len(node.args) == 2
                and all(a.type.is_sparse and a.type.ndim == 2 for a in node.args) and t.ndim == 2
                and set("".join(node.params[0].inputs)) - set(node.params[0].output) and _is_csr(t, ordered=True)):
            node = Node(node.op, node.args, node.params, TensorType(t.shape, t.dtype, unordered_csr(t.format)))
        out.append(node)
    return tuple(out)
