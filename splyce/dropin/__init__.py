"""The drop-ins for scipy.sparse products and their rules: what a call on concrete operands (NumPy, scipy.sparse,
pydata-sparse, SparseTensor) returns, and which kernel computes it.

Above the runtime (it runs kernels through it) and below the public API. Its public names:
- the ops, as scipy computes them: ``matmul``, ``multiply``, ``add``, ``subtract``, ``einsum``;
- their per-call fast paths, tried first by ``splyce.api`` (``fast_spmv``, ``fast_merge``, ``fast_masked_sum``:
  each answers ``None`` when the call is not theirs);
- the operand and formulation rules that ``splyce.dask`` shares: ``operand_family``, ``sparse_family``,
  ``as_format``, ``rowwise_format``, ``OperandInfo``, ``Formulation`` and the ``choose_*_formulation`` functions;
- the result rules: scipy's broadcasting and scalars (``broadcast``), narrower integer dtypes (``narrow_dtypes``),
  einsum's repeated indices (``diagonals``), scipy's result classes (``scipy_out``).

Modules: ``operands`` (families, conversions, result wrapping), ``formulation`` (the choice of kernel),
``kernels`` (the jitted kernels the drop-ins compile, and thread counts), ``products`` (matmul: SpMV / SpMM /
SpMSpV / SpGEMM), ``elementwise`` (multiply / add / subtract: row merges), ``einsums`` (einsum, masked
products, the triangle sum).
"""

from splyce.dropin.einsums import einsum, _fast_masked_sum as fast_masked_sum
from splyce.dropin.elementwise import add, multiply, subtract, _fast_merge as fast_merge
from splyce.dropin.formulation import (
    Formulation, choose_einsum_formulation, choose_elementwise_formulation, choose_matmul_formulation,
    rowwise_format,
)
from splyce.dropin.operands import (
    OperandInfo, as_format, operand_family, sparse_family, _to_dense_vector as to_dense_vector,
)
from splyce.dropin.products import matmul, _fast_spmv as fast_spmv
from splyce.dropin import broadcast

from splyce.dropin import jit_library
from splyce.runtime import library

broadcast.bind(multiply=multiply, add=add, subtract=subtract, einsum=einsum)
library.register(jit_library.provide)     # the jit runs these ops on the drop-ins' native kernels

__all__ = [
    "matmul", "multiply", "add", "subtract", "einsum", "fast_spmv", "fast_merge", "fast_masked_sum",
    "Formulation", "OperandInfo", "choose_matmul_formulation", "choose_elementwise_formulation",
    "choose_einsum_formulation", "rowwise_format", "as_format", "operand_family", "sparse_family", "to_dense_vector",
]
