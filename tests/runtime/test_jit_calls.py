"""Calling a jitted function as ``jax.jit`` functions are called: keywords bound to the signature, defaults,
``static_argnums`` / ``static_argnames``, pytrees of arguments and of results, and the errors of each; the
results are the un-jitted function's on scipy ``csr_array`` / ``csr_matrix``, ``SparseTensor`` and ndarray
operands (docs/tracing.md, "Calling a jitted function")."""

import collections
import copy
import dataclasses
import pickle
import typing

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.tracer.tracer import TraceError

A = sps.random_array((30, 20), density=0.2, format="csr", rng=3)
X = np.random.default_rng(4).standard_normal(20)
Y = np.random.default_rng(5).standard_normal(30)


class Pair(typing.NamedTuple):
    matrix: object
    vector: object


@dataclasses.dataclass
class State:
    matrix: object
    vector: object
    note: str = "state"


@dataclasses.dataclass(frozen=True)
class Frozen:
    matrix: object
    scale: float

    def __post_init__(self):        # a check that would fail on tracers: the rebuilt one skips it
        if not isinstance(self.matrix, (sps.sparray, sps.spmatrix, splyce.SparseTensor, np.ndarray)) \
                and type(self.matrix).__name__ != "Tracer":
            raise TypeError("Frozen.matrix must be an array")


def _same(got, want):
    """Equal values of the same kind (dense arrays, scipy sparse of the same class, scalars)."""
    if sps.issparse(want):
        assert type(got) is type(want), (type(got), type(want))
        np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12, atol=1e-12)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        assert got == pytest.approx(want)


# -- keywords and defaults -----------------------------------------------------------------------------

def test_keywords_bind_to_the_signature_and_share_one_kernel():
    def spmv(a, x, y):
        return a @ x + y

    f = splyce.jit(spmv)
    want = spmv(A, X, Y)
    for call in (lambda: f(A, X, Y), lambda: f(A, X, y=Y), lambda: f(A, y=Y, x=X), lambda: f(y=Y, a=A, x=X)):
        _same(call(), want)
    info = f.cache_info()
    assert (info.misses, info.hits) == (1, 3)


def test_defaults_are_applied_and_keyed_by_value():
    def scaled(a, x, alpha=2.0, *, beta=1.0):
        return alpha * (a @ x) + beta * x[:1].sum()

    f = splyce.jit(scaled)
    _same(f(A, X), scaled(A, X))
    _same(f(A, X, 2.0), scaled(A, X))           # the default given: the same kernel
    _same(f(A, X, alpha=3.0), scaled(A, X, alpha=3.0))
    _same(f(A, X, beta=-1.0), scaled(A, X, beta=-1.0))
    assert f.cache_info().misses == 3


def test_an_array_default_is_read_on_every_call():
    default = np.ones(20)

    def spmv(a, x=default):
        return a @ x

    f = splyce.jit(spmv)
    t = splyce.asarray(A)
    _same(f(t), A @ default)
    default *= 2.0                  # the same object, changed in place: Python reads it on every call
    _same(f(t), A @ default)
    _same(f(t), spmv(A))


@pytest.mark.parametrize("args, kwargs", [
    ((A,), {"z": X}),              # an unexpected keyword
    ((), {"x": X}),                # a missing argument
    ((A, X), {"a": A}),            # a value given twice
    ((A, X, Y), {}),               # too many positional arguments
])
def test_a_wrong_call_raises_what_the_function_raises(args, kwargs):
    def spmv(a, x):
        return a @ x

    with pytest.raises(TypeError) as python:
        spmv(*args, **kwargs)
    f = splyce.jit(spmv)
    with pytest.raises(TypeError) as jitted:
        f(*args, **kwargs)
    assert str(jitted.value) == str(python.value)
    assert f.cache_info().misses == 0


def test_var_positional_and_var_keyword_parameters():
    def total(a, *vectors, **named):
        out = a @ vectors[0]
        for v in vectors[1:]:
            out = out + a @ v
        return out + named["shift"]

    f = splyce.jit(total)
    _same(f(A, X, 2 * X, shift=Y), total(A, X, 2 * X, shift=Y))
    _same(f(A, X, shift=Y), total(A, X, shift=Y))
    with pytest.raises(KeyError):
        f(A, X)       # the function's own error while tracing


def test_positional_only_parameters_refuse_keywords_as_python_does():
    def spmv(a, /, x):
        return a @ x

    f = splyce.jit(spmv)
    _same(f(A, x=X), A @ X)
    with pytest.raises(TypeError, match="positional-only arguments passed as keyword arguments: 'a'"):
        f(a=A, x=X)


def test_a_method_called_with_keywords():
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @splyce.jit
        def apply(self, a, x):
            return a @ x

    _same(Model(1.0).apply(A, x=X), A @ X)


# -- static arguments -------------------------------------------------------------------------------

def test_static_argnums_pass_the_value_as_it_is_and_key_by_it():
    def op(a, x, mode):
        assert isinstance(mode, str)             # never a tracer
        if mode == "twice":
            return 2 * (a @ x)
        return a @ x

    f = splyce.jit(op, static_argnums=2)
    _same(f(A, X, "twice"), 2 * (A @ X))
    _same(f(A, X, "once"), A @ X)
    _same(f(A, X, mode="twice"), 2 * (A @ X))    # static by name too (inferred, as jax.jit)
    info = f.cache_info()
    assert (info.misses, info.hits) == (2, 1)


def test_static_argnames_for_a_list_and_a_keyword_only_parameter():
    def op(a, x, *, weights, transpose=False):
        out = a.T @ x if transpose else a @ x
        return out * weights[0] + weights[1]

    f = splyce.jit(op, static_argnames=("weights", "transpose"))
    with pytest.raises(TypeError, match=r"Non-hashable static arguments are not supported: argument 'weights' "
                                        r"is static \(static_argnames\) but list \[2.0, 1.0\] cannot be hashed"):
        f(A, X, weights=[2.0, 1.0])
    _same(f(A, X, weights=(2.0, 1.0)), op(A, X, weights=(2.0, 1.0)))
    _same(f(A, Y, weights=(2.0, 1.0), transpose=True), op(A, Y, weights=(2.0, 1.0), transpose=True))
    assert f.cache_info().misses == 2


def test_an_array_listed_as_static_is_refused_naming_it():
    f = splyce.jit(lambda a, x: a @ x, static_argnums=(1,))
    with pytest.raises(TypeError, match=r"^Non-hashable static arguments are not supported: argument 1 \('x'\) is "
                                        r"static \(static_argnums\) but is an array \(numpy.ndarray\)"):
        f(A, X)
    g = splyce.jit(lambda a, x: a @ x, static_argnums=0)
    with pytest.raises(TypeError, match=r"argument 0 \('a'\) is static \(static_argnums\) but is an array "
                                        r"\(scipy.csr_array\)"):
        g(A, X)    # hashable by identity, still an array: not a static value
    assert f.cache_info().misses == g.cache_info().misses == 0


def test_static_argnums_and_argnames_out_of_range_are_value_errors_at_jit_time():
    with pytest.raises(ValueError, match=r"static_argnums=\(2,\), but only accepts 2 positional arguments"):
        splyce.jit(lambda a, x: a @ x, static_argnums=2)
    with pytest.raises(ValueError, match=r"invalid argnames \{'mode'\} in static_argnames"):
        splyce.jit(lambda a, x: a @ x, static_argnames="mode")
    with pytest.raises(TypeError, match="static_argnums must be an int"):
        splyce.jit(lambda a, x: a @ x, static_argnums="x")
    f = splyce.jit(lambda a, x, mode="a": a @ x if mode == "a" else a.T @ x, static_argnums=-1)
    _same(f(A, Y, "t"), A.T @ Y)


def test_one_and_true_and_one_point_oh_are_different_static_values():
    def pick(a, x, k):
        if k is True:
            return a @ x
        if isinstance(k, float):
            return 3.0 * (a @ x)
        return 2.0 * (a @ x)

    for f in (splyce.jit(pick), splyce.jit(pick, static_argnums=2)):
        _same(f(A, X, 1), 2.0 * (A @ X))
        _same(f(A, X, True), A @ X)
        _same(f(A, X, 1.0), 3.0 * (A @ X))
        assert f.cache_info().misses == 3


# -- pytrees in --------------------------------------------------------------------------------------

PYTREES_IN = {
    "tuple": ((A, X), lambda p: p[0] @ p[1]),
    "list": ([A, X], lambda p: p[0] @ p[1]),
    "dict": ({"x": X, "a": A}, lambda p: p["a"] @ p["x"]),
    "OrderedDict": (collections.OrderedDict(a=A, x=X), lambda p: p["a"] @ p["x"]),
    "defaultdict": (collections.defaultdict(int, a=A, x=X), lambda p: p["a"] @ p["x"] + p["missing"]),
    "NamedTuple": (Pair(A, X), lambda p: p.matrix @ p.vector),
    "dataclass": (State(A, X, "scaled"), lambda p: (2.0 if p.note == "scaled" else 1.0) * (p.matrix @ p.vector)),
    "frozen dataclass": (Frozen(A, 0.5), lambda p: p.scale * (p.matrix @ np.ones(20))),
    "nested with None": ({"layers": [Pair(A, X), (None, {"y": Y})], "mode": "sum"},
                         lambda p: p["layers"][0].matrix @ p["layers"][0].vector + p["layers"][1][1]["y"]
                         if p["mode"] == "sum" and p["layers"][1][0] is None else None),
}


@pytest.mark.parametrize("case", list(PYTREES_IN), ids=list(PYTREES_IN))
def test_pytree_arguments(case):
    tree, fun = PYTREES_IN[case]
    f = splyce.jit(fun)
    want = fun(copy.deepcopy(tree))      # (a defaultdict read by a missing key gains the key)
    _same(f(tree), want)
    _same(f(tree), want)
    info = f.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_another_structure_or_static_leaf_is_another_kernel():
    f = splyce.jit(lambda p: p["a"] @ p["x"] * p.get("k", 1.0))
    f({"a": A, "x": X})
    f({"x": X, "a": A})             # the keys in another order: another structure
    f({"a": A, "x": X, "k": 2.0})
    _same(f({"a": A, "x": X, "k": 3.0}), 3.0 * (A @ X))
    assert f.cache_info().misses == 4


def test_calls_on_sparse_tensors_are_filed_by_structure_static_values_and_types():
    t = splyce.asarray(A)

    def pick(p, k):
        scale = 2.0 if k is True else 3.0 if isinstance(k, float) else 5.0 if k == "s" else 7.0
        return scale * (p["a"] @ p["x"])

    f = splyce.jit(pick)
    cases = [(1, 7.0), (True, 2.0), (1.0, 3.0), ("s", 5.0)]
    for _ in range(3):             # the second and third rounds find each kernel by the call's signature
        for k, scale in cases:
            _same(f({"a": t, "x": X}, k), scale * (A @ X))
            _same(f({"a": t, "x": X}, k=k), scale * (A @ X))
    _same(f({"x": X, "a": t}, 1), 7.0 * (A @ X))     # another key order: another structure
    info = f.cache_info()
    assert info.misses == 5 and info.hits == 3 * 2 * len(cases) - 4
    assert any(s[0] == "call" for s in f._by_signature)
    x2 = np.arange(40.0).reshape(20, 2)[:, 0]           # a strided leaf: the general path, still right
    _same(f({"a": t, "x": x2}, 1), 7.0 * (A @ x2))
    assert f.cache_info().misses == 5


def test_an_unhashable_non_array_leaf_is_named_by_its_path():
    f = splyce.jit(lambda p: p["a"] @ p["x"])
    with pytest.raises(TypeError, match=r"^argument 0\['opts'\]\[1\]: unsupported argument of type set$"):
        f({"a": A, "x": X, "opts": (1, {2})})
    with pytest.raises(TypeError, match=r"^argument 'p'\.vector: unsupported argument of type set$"):
        splyce.jit(lambda *, p: p.matrix @ X)(p=Pair(A, {1}))


def test_a_container_inside_itself_is_refused_naming_it():
    cyclic = [A, X]
    cyclic.append({"again": cyclic})
    with pytest.raises(ValueError, match=r"^argument 0\[2\]\['again'\]: a list that contains itself"):
        splyce.jit(lambda p: p[0] @ p[1])(cyclic)
    with pytest.raises(ValueError, match=r"^the result\['y'\]: a dict that contains itself"):
        splyce.jit(lambda a: (lambda d: d.update(y=d) or d)({"x": a @ X}))(A)


def test_pytree_arguments_are_not_modified():
    d = {"a": A, "x": X}
    before = (A.data.copy(), X.copy())
    out = splyce.jit(lambda p: (p.pop("a") @ p["x"], len(p)))(d)   # the function changes the dict it gets
    assert set(d) == {"a", "x"} and d["a"] is A and out[1] == 1
    assert np.array_equal(A.data, before[0]) and np.array_equal(X, before[1])


# -- pytrees out -------------------------------------------------------------------------------------

def test_results_come_back_in_the_structure_returned():
    def many(a, x):
        y = a @ x
        return {"pair": Pair(y, None), "state": State(a, y, "out"), "nested": [(y, 2), "text"], "n": 3}

    f = splyce.jit(many)
    out = f(A, X)
    want = many(A, X)
    assert type(out) is dict and list(out) == list(want)
    assert type(out["pair"]) is Pair and out["pair"].vector is None
    assert type(out["state"]) is State and out["state"].note == "out"
    assert type(out["nested"]) is list and type(out["nested"][0]) is tuple
    assert out["nested"][0][1] == 2 and out["nested"][1] == "text" and out["n"] == 3
    _same(out["pair"].matrix, want["pair"].matrix)
    _same(out["state"].matrix, want["state"].matrix)     # an argument returned: a scipy CSR, as given
    _same(out["state"].vector, want["state"].vector)
    _same(out["nested"][0][0], want["nested"][0][0])


def test_a_value_returned_twice_is_one_object_and_a_constant_array_is_fresh():
    f = splyce.jit(lambda a, x: {"y": a @ x, "again": a @ x, "ones": np.ones(3)})
    t = splyce.asarray(A)
    first = f(t, X)
    first["ones"][0] = 7.0
    second = f(t, X)
    assert second["ones"][0] == 1.0 and second["ones"] is not first["ones"]
    _same(second["y"], A @ X)


def test_results_of_no_traced_tensor_are_refused():
    with pytest.raises(TraceError, match=r"must return at least one traced tensor .* got an empty dict"):
        splyce.jit(lambda a: {})(A)
    with pytest.raises(TraceError, match=r"the result\['m'\] is of type object"):
        splyce.jit(lambda a: {"y": a @ X, "m": object()})(A)


# -- operands: scipy csr_array / csr_matrix, SparseTensor, ndarray --------------------------------------

OPERANDS = {
    "csr_array": lambda: A,
    "csr_matrix": lambda: sps.csr_matrix(A),
    "SparseTensor": lambda: splyce.asarray(A),
    "ndarray": lambda: A.toarray(),
}


@pytest.mark.parametrize("kind", list(OPERANDS), ids=list(OPERANDS))
def test_pytrees_and_keywords_on_every_operand_kind(kind):
    def step(params, *, mode="sum", scale=1.0):
        a = params["a"]
        y = a @ params["x"]
        if mode == "sum":
            y = y + params["bias"]
        return Pair(scale * y, a + a), {"mode": mode}

    f = splyce.jit(step, static_argnames="mode")
    a = OPERANDS[kind]()
    params = {"a": a, "x": X, "bias": Y}
    for kwargs in ({}, {"mode": "sum", "scale": 2.0}, {"mode": "plain"}):
        got, extra = f(params, **kwargs)
        want, want_extra = step(params, **kwargs)      # eager: scipy / NumPy / splyce's SparseTensor operators
        assert type(got) is Pair and extra == want_extra
        _same(got.matrix, want.matrix)
        _same(got.vector, want.vector)


# -- everything that calls jitted functions ----------------------------------------------------------

def test_positional_calls_on_sparse_tensors_keep_the_fast_path():
    f = splyce.jit(lambda a, x, alpha=2.0: alpha * (a @ x))
    t = splyce.asarray(A)
    f(t, X)
    f(t, X)
    assert f._by_signature and f.cache_info().hits == 1
    f(t, x=X)                  # keywords: bound, then the same signature
    assert f.cache_info().misses == 1 and f.cache_info().hits == 2


def _op(a, x, mode):
    return a @ x if mode == "plain" else 2.0 * (a @ x)


def test_accumulate_lower_with_options_and_pickle_take_keywords_and_statics():
    f = splyce.jit(_op, static_argnames="mode")
    out = np.ones(30)
    f.accumulate(out, A, x=X, mode="double")
    _same(out, 1.0 + 2.0 * (A @ X))
    assert "linalg.generic" in f.lower(A, X, mode="plain").as_text("linalg")
    twin = f.with_options(vectorize=False)
    _same(twin(A, X, mode="double"), 2.0 * (A @ X))
    assert twin._convention.static_argnums == (2,)
    again = pickle.loads(pickle.dumps(f))
    assert again is f                           # the same process: its own Jitted
    from splyce.runtime.dispatcher import _unpickle_jitted

    fresh = _unpickle_jitted("another-token", *f.__reduce__()[1][1:])
    _same(fresh(A, X, mode="double"), 2.0 * (A @ X))
    with pytest.raises(TypeError, match="Non-hashable static"):
        fresh(A, X, mode=["plain"])


def test_jitted_functions_called_from_jitted_functions_with_keywords_and_pytrees():
    inner = splyce.jit(lambda a, *, x, scale=1.0: scale * (a @ x))
    pair = splyce.jit(lambda p: Pair(p.matrix @ p.vector, None))

    @splyce.jit
    def outer(a, x):
        return inner(a, x=x, scale=2.0) + pair(Pair(a, x)).matrix

    _same(outer(A, X), 3.0 * (A @ X))
    assert inner.cache_info().misses == pair.cache_info().misses == 0    # inlined, not compiled


def test_profile_of_a_jitted_function_with_a_default():
    f = splyce.jit(lambda a, b, k=1.0: splyce.einsum("ij,ij->i", a, b) * k)
    a = sps.random_array((200, 2000), density=0.05, format="csr", rng=0)
    b = sps.random_array((200, 2000), density=0.05, format="csr", rng=1)
    assert splyce.profile(f, a, b).simd_share > 0.5
    counted = splyce.profile(f, a, b=b, k=2.0)          # keywords, as f takes them
    assert counted.simd_share > 0.5 and counted.total == splyce.profile(f, a, b).total


def test_flattening_matches_jax_tree_util():
    import jax

    tree = {"b": [1, (2, None)], "a": Pair(3, {"z": 4, "y": 5})}
    from splyce.runtime import pytree

    leaves, _, structure = pytree.flatten(tree)
    assert sorted(leaves) == sorted(jax.tree_util.tree_leaves(tree))
    rebuilt = pytree.unflatten(structure, [10 * v for v in leaves])
    assert rebuilt == jax.tree_util.tree_map(lambda v: 10 * v, tree)
    assert type(rebuilt["a"]) is Pair and list(rebuilt) == ["b", "a"]      # the keys in their order


def test_the_calls_bench_checks_and_reports_every_convention(tmp_path):
    from splyce.bench import __main__ as cli
    from splyce.bench import calls
    from splyce.bench.common import read_csv

    assert cli.main(["calls", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    comments, rows = read_csv(tmp_path / "calls.csv")
    assert [r["convention"] for r in rows] == [name for name, _, _ in calls.conventions(A, splyce.asarray(A), X)]
    assert all(float(r["best_us"]) > 0 for r in rows) and float(rows[0]["vs_positional"]) == 1.0
    assert any(line.startswith("# cpu:") for line in comments)


def test_structures_and_static_errors_match_jax_jit():
    import jax
    import jax.numpy as jnp

    def fun(p, *, mode):
        y = p.matrix @ p.vector
        out = {"b": y, "a": (2.0 * y if mode == "double" else y, None, 3)}
        return out

    dense = A.toarray().astype(np.float32)
    x = X.astype(np.float32)
    ours = splyce.jit(fun, static_argnames="mode")(Pair(A.astype(np.float32), x), mode="double")
    theirs = jax.jit(fun, static_argnames="mode")(Pair(jnp.asarray(dense), jnp.asarray(x)), mode="double")
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
    for got, want in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # the same refusals (JAX raises ValueError where splyce raises TypeError for an unhashable static value)
    for static in ([1, 2], np.ones(2)):
        with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
            jax.jit(lambda a, s: a, static_argnums=1)(jnp.ones(2), static)
        with pytest.raises(TypeError, match="Non-hashable static arguments are not supported"):
            splyce.jit(lambda a, s: a @ X, static_argnums=1)(A, static)
    for kwargs in ({"static_argnums": 3}, {"static_argnames": "nope"}):
        with pytest.raises(ValueError):
            jax.jit(lambda a, x: a, **kwargs)
        with pytest.raises(ValueError):
            splyce.jit(lambda a, x: a, **kwargs)
