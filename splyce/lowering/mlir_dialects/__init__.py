"""Stand-ins for MLIR's per-dialect Python modules that the bindings import when they first meet a dialect's
op or attribute (``lowering/linalg_ops.py`` puts this package first in their search list for that one
import). Each registers exactly what the real module's generated part registers; see ``linalg``."""
