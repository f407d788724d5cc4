"""The trace IR: hash-consed nodes (a value used twice is one node), linear printing and keys."""

import pickle

import numpy as np
import scipy.sparse as sps

import splyce
from splyce.tracer.ir import Node, TensorType, Trace, walk
from splyce.tracer.tracer import Tracer

DENSE = TensorType((50, 50), "float64", None)


def _solver_trace(steps: int) -> Trace:
    """``h = h + w @ h * 0.01`` repeated: every step uses ``h`` twice, so the trace, read as a tree, has
    2**steps leaves."""
    w = Tracer(Node("input", (), (0,), TensorType((50, 50), "float64", splyce.CSR)))
    h = Tracer(Node("input", (), (1,), DENSE))
    for _ in range(steps):
        h = h + w @ h * 0.01
    return Trace((w.node.type, DENSE), (h.node,))


def test_equal_nodes_are_one_object():
    a = Node("input", (), (0,), DENSE)
    assert Node("input", (), (0,), DENSE) is a
    b = Tracer(a) * 2.0
    assert (Tracer(a) * 2.0).node is b.node
    assert Node("input", (), (1,), DENSE) is not a


def test_params_that_compare_equal_but_generate_different_code_stay_apart():
    a = Tracer(Node("input", (), (0,), DENSE))
    nodes = [(a * s).node for s in (0.0, -0.0, 1.0)]
    assert len({id(n) for n in nodes}) == 3
    assert (a * float("nan")).node is (a * float("nan")).node


def test_nodes_are_immutable_and_pickle_to_the_same_node():
    node = (Tracer(Node("input", (), (0,), DENSE)) * 3.0).node
    try:
        node.op = "combine"
    except AttributeError:
        pass
    else:
        raise AssertionError("a node could be modified")
    assert pickle.loads(pickle.dumps(node)) is node


def test_a_200_step_solver_loop_is_a_dag_printed_in_linear_size():
    trace = _solver_trace(200)
    nodes = walk(trace.outputs)
    # 2 inputs; per step: w @ h, the scaling, the sum
    assert len(nodes) == 2 + 3 * 200
    text = trace.as_text()
    assert text.count("\n") == 3 * 200 + 2
    assert "%599 = combine[1](%arg1" not in text   # the last sum reads the previous step's value ...
    assert "%599 = combine[1](%596, %598)" in text   # ... and this step's scaled product
    assert _solver_trace(200).outputs[0] is trace.outputs[0]   # tracing again builds no new node


def test_walk_orders_arguments_first_without_recursion_limits():
    trace = _solver_trace(1500)   # deeper than Python's default recursion limit
    position = {node: k for k, node in enumerate(walk(trace.outputs))}
    assert all(position[arg] < position[node] for node in position for arg in node.args)


def test_jitted_solver_loop_matches_numpy_and_caches():
    rng = np.random.default_rng(0)
    w = sps.random_array((50, 50), density=0.1, format="csr", rng=1)
    h0 = rng.random((50, 50))

    @splyce.jit
    def solve(w, h):
        for _ in range(16):
            h = h + w @ h * 0.01
        return h

    expected = h0
    for _ in range(16):
        expected = expected + (w @ expected) * 0.01
    np.testing.assert_allclose(solve(w, h0), expected, rtol=1e-13)
    solve(w, h0)
    assert solve.cache_info().hits == 1 and solve.cache_info().compiles == 1
