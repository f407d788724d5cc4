"""The tracer: stand-ins for a jitted function's arguments that record a trace (ir.py).

Importing the package installs NumPy's protocols on ``Tracer`` (numpy_api.py), so that ``np.exp(t)`` traces
wherever a tracer exists.
"""

from splyce.tracer import numpy_api  # noqa: F401  (installs Tracer.__array_ufunc__ / __array_function__)
from splyce.tracer import matrix  # noqa: F401,E402  (installs the matrix kind's operators: tracer/matrix.py)
