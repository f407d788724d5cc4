"""JAX-style transformations of traced programs: ``grad`` / ``value_and_grad`` / ``vjp`` (reverse mode over
the trace IR: adjoint.py holds one rule per node kind, derivatives.py the derivative of each elementwise
head) and ``vmap`` (batching.py). Each transformation builds a traced program, so it is planned, fused and
compiled like any other: ``jit(grad(f))`` is one program."""
