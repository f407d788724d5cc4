"""The drop-ins for scipy.sparse products and their rules: what a call on concrete operands (NumPy, scipy.sparse,
pydata-sparse, SparseTensor) returns, and which kernel computes it.

Above the runtime (it runs kernels through it) and below the public API. Its public names:
- the ops, as scipy computes them: ``matmul``, ``multiply``, ``add``, ``subtract``, ``einsum``;
- their per-call fast paths, tried first by ``splyce.api`` (``fast_spmv``, ``fast_merge``, ``fast_masked_sum``:
  each answers ``None`` when the call is not theirs);
- the operand and formulation rules that ``splyce.dask`` shares: ``operand_family``, ``sparse_family``,
  ``as_format``, ``rowwise_format``, ``OperandInfo``, and (re-exported from the one module that chooses kernels,
  ``splyce.planner.kernel_choice``) ``Formulation`` and the ``choose_*_formulation`` functions;
- the result rules: scipy's broadcasting and scalars (``broadcast``), narrower integer dtypes (``narrow_dtypes``),
  einsum's repeated indices (``diagonals``), scipy's result classes (``scipy_out``).

Modules: ``operands`` (families, conversions, result wrapping),
``kernels`` (the jitted kernels the drop-ins compile, and thread counts), ``products`` (matmul: SpMV / SpMM /
SpMSpV / SpGEMM), ``elementwise`` (multiply / add / subtract: row merges), ``einsums`` (einsum, masked
products, the triangle sum).

The names load lazily (PEP 562): ``import splyce.dropin`` costs a few ms, and a first call imports only the
modules it runs (a first SpMV in a fresh process does not import the einsums).
"""

from splyce.dropin import broadcast

# public name -> (module, its name there)
_NAMES = {
    "einsum": ("einsums", "einsum"), "fast_masked_sum": ("einsums", "_fast_masked_sum"),
    "add": ("elementwise", "add"), "multiply": ("elementwise", "multiply"),
    "subtract": ("elementwise", "subtract"), "fast_merge": ("elementwise", "_fast_merge"),
    "Formulation": ("kernel_choice", "Formulation"),
    "choose_einsum_formulation": ("kernel_choice", "choose_einsum_formulation"),
    "choose_elementwise_formulation": ("kernel_choice", "choose_elementwise_formulation"),
    "choose_matmul_formulation": ("kernel_choice", "choose_matmul_formulation"),
    "rowwise_format": ("operands", "rowwise_format"),
    "OperandInfo": ("operands", "OperandInfo"), "as_format": ("operands", "as_format"),
    "operand_family": ("operands", "operand_family"), "sparse_family": ("operands", "sparse_family"),
    "to_dense_vector": ("operands", "_to_dense_vector"),
    "matmul": ("products", "matmul"), "fast_spmv": ("products", "_fast_spmv"),
}


def _module(name: str):
    """A submodule, imported on first use (each import spelled out: the import graph checks see them)."""
    if name == "einsums":
        from splyce.dropin import einsums as module
    elif name == "elementwise":
        from splyce.dropin import elementwise as module
    elif name == "kernel_choice":
        from splyce.planner import kernel_choice as module
    elif name == "operands":
        from splyce.dropin import operands as module
    elif name == "products":
        from splyce.dropin import products as module
    else:
        raise AttributeError(f"module 'splyce.dropin' has no attribute {name!r}")
    return module


def __getattr__(name):
    if name in _NAMES:
        module, attribute = _NAMES[name]
        value = getattr(_module(module), attribute)
        globals()[name] = value      # later look-ups skip this hook
        return value
    raise AttributeError(f"module 'splyce.dropin' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


def _late(name: str):
    """``name`` for the broadcast forms, imported on their first call (then bound as it is)."""
    def op(*args, **kwargs):
        value = __getattr__(name)
        broadcast.bind(**{name: value})
        return value(*args, **kwargs)
    return op


broadcast.bind(**{name: _late(name) for name in ("multiply", "add", "subtract", "einsum")})


__all__ = [
    "matmul", "multiply", "add", "subtract", "einsum", "fast_spmv", "fast_merge", "fast_masked_sum",
    "Formulation", "OperandInfo", "choose_matmul_formulation", "choose_elementwise_formulation",
    "choose_einsum_formulation", "rowwise_format", "as_format", "operand_family", "sparse_family", "to_dense_vector",
]
