"""Elementwise products and sums of two sparse matrices, native code (numpy + llvmlite only).

* ``merge.py`` (IR in ``merge_ir.py``): two CSRs, a branch-free merge per row (``elementwise``); operands holding
  the same positions first take one flat pass over all entries (``same_pattern``);
* ``csc.py`` (IR in ``csc_ir.py``, ``csc_vector.py``): a CSR with a CSC (``A.T`` as scipy hands it over), one
  pass over A's entries with a cursor per column of B (``csr_with_csc``, ``csr_with_csc_ranges``);
* ``kept.py``: the sparsifier's semantics (every coiterated position kept) on the kernels above, for the jit;
* ``common.py``: a value dtype's instructions (from ``ir_text.SCALARS``), the branch-free select.

Values follow scipy's ``csr_binop_csr`` by default; ``keep_zeros=True`` gives the sparsifier's coiteration
instead (the jit's semantics, runtime/library.py): every coiterated position is stored, zero results included.
"""

from splyce.native.elementwise.common import OPS, keep_supported, op_supported, supported
from splyce.native.elementwise.csc import (CURSOR_ROW_COST, PREFETCH_DISTANCE, PREFETCH_MIN_NNZ, PREFETCH_WINDOW,
                                           VECTOR_MIN_NNZ, csr_with_csc, csr_with_csc_ranges, prefetch_distance)
from splyce.native.elementwise.merge import elementwise, same_pattern
from splyce.native.elementwise import kept

__all__ = ["OPS", "supported", "keep_supported", "op_supported", "same_pattern", "elementwise", "csr_with_csc", "csr_with_csc_ranges",
           "prefetch_distance", "CURSOR_ROW_COST", "PREFETCH_DISTANCE", "PREFETCH_MIN_NNZ", "PREFETCH_WINDOW",
           "VECTOR_MIN_NNZ", "kept"]
