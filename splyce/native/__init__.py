"""The ground floor: native code generated with llvmlite from LLVM IR written in Python, and its runtime.

Imports only NumPy and llvmlite (never another splyce package), so every stage above may use it: the LLVM
code generation for a target (`codegen`), the IR writer shared by the kernel library (`ir_text`), the kernel
library itself (validation scans, compression, transpose, SpMV / SpMM, Gustavson SpGEMM, elementwise row
merges, masked SpGEMM / SDDMM) and the cache of freed large buffers (`memory_pool`).
"""
