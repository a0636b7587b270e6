"""Problem: the vectorised validation keeps the user's arrays untouched, checks every value,
and evaluate / infeasibility_culprit agree with plain per-node and per-edge definitions."""

import math

import networkx as nx
import numpy as np
import pytest

from layoutopt import Problem, ProblemError
from layoutopt.generators import generate

INF = math.inf


def test_costs_are_read_only_copies_of_the_users_arrays():
    node_a, node_b = np.array([1.0, 2.0]), np.array([3.0, 1.0])
    matrix = np.array([[0.0, 5.0], [5.0, 0.0]])
    costs = {"nodes": {0: node_a, 1: node_b}, "edges": {(1, 0): matrix}}
    problem = Problem.from_graph(nx.path_graph(2), costs)
    for stored, given in ((problem.node_costs[0], node_a), (problem.edge(1, 0), matrix)):
        assert not stored.flags.writeable
        assert not np.shares_memory(stored, given)
    matrix[0, 1] = 100.0  # changing the input afterwards changes nothing
    assert problem.edges[(0, 1)].tolist() == [[0.0, 5.0], [5.0, 0.0]]
    assert node_a.flags.writeable and matrix.flags.writeable


def test_each_parallel_edge_is_checked_before_summing():
    graph = nx.MultiDiGraph([("a", "b"), ("a", "b")])
    costs = {"nodes": {"a": [1.0], "b": [1.0]},
             "edges": {("a", "b", 0): [[-INF]], ("a", "b", 1): [[INF]]}}  # the sum would be NaN
    with pytest.raises(ProblemError, match=r"edge \('a', 'b', 0\): cost contains -inf"):
        Problem.from_graph(graph, costs)
    costs["edges"] = {("a", "b", 0): [[1e308]], ("a", "b", 1): [[1e308]]}  # the sum would be inf: forbidden
    with pytest.raises(ProblemError, match=r"edge \('a', 'b', 1\): its cost plus that of edge .* overflows"):
        Problem.from_graph(graph, costs)


def test_the_first_bad_value_is_named_among_many_arrays():
    graph, costs = generate("resnet", nodes=60, seed=1)
    bad_node, bad_edge = list(graph)[41], list(graph.edges)[17]
    nodes = dict(costs.nodes)
    nodes[bad_node] = np.array(nodes[bad_node], dtype=float)
    nodes[bad_node][0] = math.nan
    with pytest.raises(ProblemError, match=f"node '{bad_node}': cost contains NaN"):
        Problem.from_graph(graph, {"nodes": nodes, "edges": costs.edges})
    edges = dict(costs.edges)
    edges[bad_edge] = -np.asarray(edges[bad_edge], dtype=float) - 1.0
    with pytest.raises(ProblemError, match=f"edge {bad_edge!r}".replace("(", r"\(").replace(")", r"\)")):
        Problem.from_graph(graph, {"nodes": costs.nodes, "edges": edges})


@pytest.mark.parametrize("family", ["densenet", "random"])
def test_evaluate_matches_the_per_edge_definition(family):
    graph, costs = generate(family, nodes=80, seed=2, regime="noinf")
    problem = Problem.from_graph(graph, costs)
    rng = np.random.default_rng(0)
    for _ in range(5):
        choice = [int(rng.integers(k)) for k in problem.sizes]
        expected = math.fsum(float(c[k]) for c, k in zip(problem.node_costs, choice, strict=True))
        expected += math.fsum(float(m[choice[i], choice[j]]) for (i, j), m in problem.edges.items())
        assert problem.evaluate(choice) == expected


def test_evaluate_rejects_out_of_range_and_short_assignments():
    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1.0, 2.0], 1: [3.0]},
                                                    "edges": {(0, 1): [[0.0], [1.0]]}})
    assert problem.evaluate([1, 0]) == 6.0
    for bad in ([2, 0], [0, 1], [-1, 0], [0]):
        with pytest.raises(ValueError, match="in-range choice indices"):
            problem.evaluate(bad)


def frozen(values):
    array = np.array(values, dtype=float)
    array.flags.writeable = False
    return array


def test_culprit_on_a_problem_built_directly():
    # the constructor path (used for reduced kernels) computes the extremes on first use
    nodes = (frozen([INF, 1.0]), frozen([0.0, 2.0]), frozen([1.0]))
    edges = {(0, 1): frozen([[0.0, 0.0], [INF, INF]]), (1, 2): frozen([[INF], [0.0]])}
    names = {(0, 1): ("x", "y"), (1, 2): ("y", "z")}
    problem = Problem(("x", "y", "z"), nodes, edges, (None, None, None), names)
    assert "edge ('x', 'y')" in problem.infeasibility_culprit()
    # an inf only at a forbidden choice of x is no culprit
    edges[(0, 1)] = frozen([[INF, INF], [0.0, INF]])
    edges[(1, 2)] = frozen([[0.0], [0.0]])
    fine = Problem(("x", "y", "z"), nodes, edges, (None, None, None), names)
    assert fine.infeasibility_culprit() is None
    assert fine.evaluate([1, 0, 0]) == 2.0
    assert fine.evaluate([1, 1, 0]) == INF  # (x=1, y=1) is forbidden
