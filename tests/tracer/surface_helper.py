"""A helper module for tests/tracer/test_surface_methods.py: code @splyce.jit does not rebind (another module), whose
``np.asarray`` of a traced value must raise at its own line."""

import numpy as np


def densify(x):
    return np.asarray(x)


def to_csr(x):
    import scipy.sparse

    return scipy.sparse.csr_array(x)
