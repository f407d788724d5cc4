"""linalg's generated op classes and enum attribute builders: what ``mlir.dialects.linalg`` registers with
the bindings, without the OpDSL named ops it also builds in Python on import (~0.24 s; lowering/linalg_ops.py)."""

from mlir.dialects._linalg_enum_gen import *  # noqa: F401,F403 - registers the enum attribute builders
from mlir.dialects._linalg_ops_gen import *  # noqa: F401,F403 - registers the op classes
