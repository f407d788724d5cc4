"""The compile pipeline as flat lists of named MLIR passes, split where the Splyce pass cuts in.

Stage 1 (``SPARSIFY``) turns linalg.generic on sparse tensors into scf + memref + arith loops: the
sparsifier's coiteration ``scf.while`` loops are visible there, and the Splyce pass rewrites them.
Stage 2 (``TO_LLVM``) lowers the rest to the LLVM dialect. The list mirrors what
``sparsifier{enable-runtime-library=false}`` expands to in MLIR 22 (docs/toolchain.md), preceded by
``sparse-assembler{direct-out=true}`` so that the entry point takes plain (pos, crd, values) buffers.
"""

# Stage 1 runs in two parts: intermediates are freed between them (passes/free_intermediates.py), after
# fusion (a free is a use, and a used producer is not fused) and before bufferization.
FUSE = (
    "sparse-assembler{direct-out=true}",
    "func.func(linalg-generalize-named-ops)",
    "func.func(linalg-fuse-elementwise-ops)",
)
BUFFERIZE = (
    # an elementwise result written whole goes to its output argument (materialize_in_destination): written
    # in place instead of into a fresh buffer copied over (lowering/to_mlir.py, overwritten_results)
    "eliminate-empty-tensors",
    "sparsification-and-bufferization{enable-simd-index32=true parallelization-strategy=none "
    "sparse-emit-strategy=functional vl=0}",
    "sparse-storage-specifier-to-llvm",
    "func.func(canonicalize)",
)
SPARSIFY = FUSE + BUFFERIZE
# when the fused module has sparse operands that contradict each other's loop orders (passes/fusion_check.py)
UNFUSED = tuple(p for p in FUSE if "linalg-fuse-elementwise-ops" not in p)

TO_LLVM = (
    "func.func(convert-linalg-to-loops)",
    "func.func(convert-vector-to-scf)",
    "func.func(expand-realloc{emit-deallocs=true})",
    "func.func(convert-scf-to-cf)",
    "expand-strided-metadata",
    "lower-affine",
    "convert-vector-to-llvm",
    "func.func(convert-complex-to-standard)",
    "func.func(arith-expand)",
    "func.func(convert-math-to-llvm)",
    "convert-math-to-libm",
    "convert-complex-to-libm",
    "convert-vector-to-llvm",
    "convert-to-llvm",
    "reconcile-unrealized-casts",
)


def pipeline_text(passes: tuple[str, ...]) -> str:
    """The textual pipeline for ``PassManager.parse``."""
    return "builtin.module(" + ",".join(passes) + ")"


def run_passes(module, passes: tuple[str, ...]) -> None:
    """Run ``passes`` on ``module`` in place (inside the module's context), then verify it."""
    from mlir import passmanager

    with module.context:
        passmanager.PassManager.parse(pipeline_text(passes)).run(module.operation)
        module.operation.verify()
