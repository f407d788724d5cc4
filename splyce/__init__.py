"""splyce: sparse tensor algebra compiled through MLIR with SIMD dual-path coiteration.

Importing splyce builds no MLIR context and compiles nothing: the compiler is loaded on first use.
"""
