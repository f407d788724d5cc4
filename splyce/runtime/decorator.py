"""``splyce.jit``: the decorator, its options and their documentation; the jitted function itself is
``dispatcher.Jitted``."""

from __future__ import annotations

from splyce.options import DEFAULT_GALLOP_RATIO, DEFAULT_PHASES
from splyce.runtime.dispatcher import Jitted


def jit(fun=None, *, static_argnums=None, static_argnames=None, vectorize=True, vector_width=None,
        phases=DEFAULT_PHASES, fast_math=False, target="native", out_format=None, slp=None, threads=None,
        gallop=DEFAULT_GALLOP_RATIO, union=None, library=True):
    """Compile ``fun``, a NumPy-style function of sparse and dense tensors, on its first call per signature.

    Usable as ``@splyce.jit`` and ``@splyce.jit(vectorize=False, ...)``, and called as ``fun`` is: positional
    and keyword arguments, bound to ``fun``'s signature with its defaults (a wrong call raises the
    ``TypeError`` ``fun`` would). Array arguments may be NumPy arrays, scipy.sparse arrays or matrices,
    pydata-sparse arrays or ``SparseTensor``, alone or as the leaves of pytrees, as in ``jax.jit``: tuples,
    lists, dicts, NamedTuples and dataclass instances (their fields), nested, with ``None`` among them.
    Array leaves are the kernel's inputs; other leaves (Python scalars, strings, any hashable value) are
    static: part of the cache key by value, passed to ``fun`` as they are. Results are NumPy arrays or
    scalars, and scipy.sparse arrays for sparse 2-D results (``csr_matrix`` and its kin when every scipy
    argument is an ``spmatrix``), returned in the pytree ``fun`` returned them in (same container types;
    Python scalars and strings in it returned as they are, NumPy arrays it made while tracing copied).

    Parameters
    ----------
    fun : callable, optional
        The function to compile. Omitted, ``jit`` returns a decorator with these options.
    static_argnums : int or sequence of int, optional
        Positional parameters that are static whatever they hold (a list, a dict, a tuple of strings): part
        of the cache key by value (they must be hashable and not arrays; a ``TypeError`` names the argument
        otherwise) and passed to ``fun`` as they are, so ``if mode == "sym":`` works while tracing. As in
        ``jax.jit``, the names of these parameters are static too when ``static_argnames`` is not given.
        Negative numbers count from the last positional parameter.
    static_argnames : str or sequence of str, optional
        Parameters, by name, that are static (as ``static_argnums``); when ``static_argnums`` is not given,
        their positions are static too.
    vectorize : bool, optional
        Run the Splyce pass (the SIMD fast lanes). False gives the plain MLIR sparsifier's code.
    vector_width : int, optional
        Coordinates of each operand a fast-lane step consumes: 2, 4, 8 or 16. None (default): 4; with
        ``fast_math=True`` for the host, the lane measured fastest on this CPU at first use (4, 8 or the
        16 x 16 conflict-compare lane; kept in the cache folder; ``SPLYCE_NO_TUNE=1`` or another target: 16
        on AVX-512 CD, else 4); the "splyce" stage text says which and why.
    phases : int, optional
        1 to 8: which fast-lane phases run in SIMD; the bits of ``phases - 1`` are load / compare,
        multiply-accumulate and pointer advance (see the design page on kernels). The default, 7, runs
        load / compare and multiply-accumulate in SIMD with an ordered, bit-exact reduction.
    fast_math : bool, optional
        Allow reassociating floating-point sums (a SIMD tree reduction; threads may split float sums).
        False keeps results bit-identical to the plain sparsifier, Inf and NaN included.
    target : str, optional
        "native", "avx2", "avx512" or an LLVM CPU name. Any target lowers to "asm"; calling code the host
        cannot run raises ``RuntimeError``.
    out_format : {None, "dense", "sparse"} or Format, optional
        The results' storage. None: dense for contractions, sparse for elementwise results of sparse
        operands, as scipy. "sparse": a format of splyce's choice; a returned sparse x sparse product's is a
        CSR with unordered columns, as scipy's ``A @ B`` (``out_format=splyce.CSR`` sorts them).
    slp : bool, optional
        LLVM's SLP vectorizer. None: off where a fast lane was built, on elsewhere.
    threads : int or None, optional
        Split the kernel's outermost parallel loop into chunks balanced by nonzeros, run on this many
        threads. None (default): the process default at the first call, every core unless
        ``splyce.set_threads`` / ``SPLYCE_NUM_THREADS`` say otherwise; ``1``: one thread. A call whose
        operands hold too few entries to gain from a second thread runs on one. Results are bit-identical to
        one thread. Kernels whose outer loop is not independent run on one thread and say why in
        ``lower(...).as_text("splyce")``.
    gallop : int, optional
        Two-fiber intersections whose long fiber has at least ``gallop + 2 min(floor(log2 short), 12)``
        (short fibers of 8 coordinates or more; ``gallop`` below) times the short one's coordinates (k-way: the longest ``gallop`` times the shortest's) skip ahead by
        exponential and binary search instead of the all-pairs fast lane; 0: never. Bit-identical either way.
    union : bool or None, optional
        The union fast lane for sparse add / subtract / maximum: None for CSR-like sparse outputs, True for
        dense outputs too, False never. Bit-identical either way.
    library : bool, optional
        A function that is one drop-in operation on its arguments (``a @ x`` on a CSR, ``a * b`` of two CSRs)
        runs the drop-in's native kernel when the drop-in's rules choose one and its results are the MLIR
        kernel's bit for bit; ``as_text("plan")`` says so. False: always the MLIR kernel. An elementwise op
        jitted with ``union=`` or ``gallop=`` given runs the MLIR kernel too (they choose among its loops).

    Returns
    -------
    Jitted
        The compiled function (a decorator when ``fun`` is omitted).

    Raises
    ------
    TypeError
        ``fun`` is not callable.
    ValueError
        An option out of range, an unknown ``out_format`` or an unknown CPU name, a ``static_argnums`` past
        ``fun``'s positional parameters or a ``static_argnames`` it does not take.

    Notes
    -----
    Tracing errors (an operation splyce cannot express, or one undefined on sparse operands such as
    ``a ** 0``) raise ``TraceError`` at the first call. A plan whose results and intermediates exceed the
    memory budget (``set_memory_budget``) raises ``MemoryError`` before anything runs.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sps, splyce
    >>> @splyce.jit
    ... def triangles(L):
    ...     return ((L @ L) * L).sum()       # fused by the planner: no L @ L is built
    >>> L = sps.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> float(triangles(L))
    4.0
    >>> plain = splyce.jit(triangles.fun, vectorize=False)
    >>> float(plain(L))
    4.0

    Keywords, static arguments and pytrees in and out:

    >>> @splyce.jit(static_argnames="mode")
    ... def step(a, state, *, mode="plain"):
    ...     y = a @ state["x"]
    ...     return {"y": 2 * y if mode == "double" else y, "mode": mode}
    >>> out = step(L, {"x": np.ones(4)}, mode="double")
    >>> out["y"], out["mode"]
    (array([0., 2., 4., 6.]), 'double')
    """
    options = dict(static_argnums=static_argnums, static_argnames=static_argnames, vectorize=vectorize,
                   vector_width=vector_width, phases=phases, fast_math=fast_math, target=target,
                   out_format=out_format, slp=slp, threads=threads, gallop=gallop, union=union, library=library)
    if fun is None:
        return lambda f: Jitted(f, **options)
    return Jitted(fun, **options)
