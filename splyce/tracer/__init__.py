"""The tracer: stand-ins for a jitted function's arguments that record a trace (ir.py).

Importing the package installs NumPy's protocols on ``Tracer`` (numpy_api.py), so that ``np.exp(t)`` traces
wherever a tracer exists; surface.py installs the methods built on tracer.py (``tocsr``, ``nnz``,
``var``...).
"""

from splyce.tracer import numpy_api  # noqa: F401  (installs Tracer.__array_ufunc__ / __array_function__)
from splyce.tracer import surface  # noqa: F401  (installs tocsr, nnz, var, std, __array__ ...: surface.py)
# last: the matrix kind wraps every method installed above (tracer/matrix.py)
from splyce.tracer import matrix  # noqa: F401,E402
