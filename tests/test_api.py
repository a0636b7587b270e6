"""The front end, layoutopt.solve: every bad input of issue 2 raises a clear ProblemError naming the
culprit; infeasible problems, labels, transposed edges, attribute costs, multigraphs, methods()."""

import math
import re

import networkx as nx
import numpy as np
import pytest

import layoutopt
from layoutopt import Costs, MissingExtraError, ProblemError
from layoutopt.solvers import get_solver

INF = math.inf


def chain():
    """conv1 -> conv2 -> relu, two choices each, matching layouts free."""
    graph = nx.DiGraph([("conv1", "conv2"), ("conv2", "relu")])
    costs = {
        "nodes": {"conv1": [2.0, 1.0], "conv2": [1.0, 3.0], "relu": [1.0, 1.0]},
        "edges": {("conv1", "conv2"): [[0.0, 0.5], [0.5, 0.0]], ("conv2", "relu"): [[0.0, 2.0], [2.0, 0.0]]},
    }
    return graph, costs


def with_(costs, **changes):
    """A deep-enough copy of ``costs`` with ``nodes``/``edges`` entries replaced (None deletes)."""
    result = {"nodes": dict(costs["nodes"]), "edges": dict(costs["edges"])}
    for part, updates in changes.items():
        for key, value in updates.items():
            if value is None:
                del result[part][key]
            else:
                result[part][key] = value
    return result


def raises(match):
    return pytest.raises(ProblemError, match=match)


# --- the happy path ------------------------------------------------------------------------


def test_solution_fields():
    graph, costs = chain()
    sol = layoutopt.solve(graph, costs, method="bruteforce")
    # conv1=1 (1) + conv2=0 (1) + transform 0.5 + relu=0 (1) = 3.5 beats every other choice
    assert sol.assignment == {"conv1": 1, "conv2": 0, "relu": 0}
    assert sol.labels == sol.assignment  # no "choices" attribute: labels are the indices
    assert sol.objective == 3.5 == sol.lower_bound
    assert sol.status == "optimal" and sol.method == "bruteforce"
    assert sol.solve_time > 0 and isinstance(sol.stats, dict) and sol.gap == 0.0


def test_labels_come_from_the_choices_attribute():
    graph, costs = chain()
    for node in graph:
        graph.nodes[node]["choices"] = ["NCHW8c", "NCHW16c"]
    sol = layoutopt.solve(graph, costs, method="pbqp")
    assert sol.labels == {"conv1": "NCHW16c", "conv2": "NCHW8c", "relu": "NCHW8c"}
    assert layoutopt.evaluate(graph, costs, sol.labels) == sol.objective  # labels are accepted too


def test_a_graph_edge_may_be_given_reversed_with_the_transposed_matrix():
    graph = nx.Graph([("a", "b")])
    matrix = np.array([[0.0, 1.0, 7.0], [4.0, 0.0, 2.0]])  # a has 2 choices, b has 3
    forward = {"nodes": {"a": [0.0, 0.0], "b": [5.0, 5.0, 0.0]}, "edges": {("a", "b"): matrix}}
    backward = {"nodes": forward["nodes"], "edges": {("b", "a"): matrix.T}}
    one = layoutopt.solve(graph, forward, method="bruteforce")
    other = layoutopt.solve(graph, backward, method="bruteforce")
    assert one.assignment == other.assignment == {"a": 1, "b": 2}
    assert one.objective == other.objective == 2.0


def test_direction_does_not_change_the_objective():
    graph, costs = chain()
    undirected = layoutopt.solve(graph.to_undirected(), costs, method="bruteforce")
    assert layoutopt.solve(graph, costs, method="bruteforce").objective == undirected.objective


def test_costs_none_reads_the_cost_attributes():
    graph, costs = chain()
    for node, vector in costs["nodes"].items():
        graph.nodes[node]["cost"] = vector
    for (u, v), matrix in costs["edges"].items():
        graph.edges[u, v]["cost"] = matrix
    assert layoutopt.solve(graph, method="bruteforce").objective == 3.5
    assert layoutopt.solve(graph, Costs.from_graph(graph), method="bruteforce").objective == 3.5


def test_parallel_edges_of_a_multidigraph_are_summed():
    graph = nx.MultiDiGraph()
    graph.add_edge("a", "b", cost=[[0.0, 3.0], [3.0, 0.0]])
    graph.add_edge("a", "b", cost=[[4.0, 0.0], [0.0, 4.0]])
    graph.nodes["a"]["cost"] = [0.0, 1.0]
    graph.nodes["b"]["cost"] = [0.0, 0.5]
    sol = layoutopt.solve(graph, method="bruteforce")
    assert sol.assignment == {"a": 0, "b": 1}  # with either edge alone the optimum would cost 0 or 0.5
    assert sol.objective == 3.5


def test_parallel_edges_take_costs_keyed_by_edge_key():
    graph = nx.MultiDiGraph([("a", "b"), ("a", "b")])
    nodes = {"a": [0.0, 1.0], "b": [0.0, 0.5]}
    edges = {("a", "b", 0): [[0.0, 3.0], [3.0, 0.0]], ("a", "b", 1): [[4.0, 0.0], [0.0, 4.0]]}
    assert layoutopt.solve(graph, {"nodes": nodes, "edges": edges}, method="bruteforce").objective == 3.5
    with raises(re.escape("edge ('a', 'b') has parallel edges: give each one's cost as (u, v, key)")):
        layoutopt.solve(graph, {"nodes": nodes, "edges": {("a", "b"): np.zeros((2, 2))}})


def test_opposite_edges_of_a_digraph_are_both_counted():
    graph = nx.DiGraph([("a", "b"), ("b", "a")])
    costs = {"nodes": {"a": [0.0, 0.0], "b": [0.0, 0.0]},
             "edges": {("a", "b"): [[1.0, 5.0], [5.0, 3.0]], ("b", "a"): [[1.0, 5.0], [5.0, 0.0]]}}
    sol = layoutopt.solve(graph, costs, method="bruteforce")
    assert sol.assignment == {"a": 0, "b": 0} and sol.objective == 2.0


def test_methods_lists_the_available_ones():
    names = layoutopt.methods()
    assert {"auto", "pbqp", "dp", "cpsat", "mip", "greedy", "bruteforce"} <= set(names)
    assert names == sorted(names)
    for name in names:
        assert get_solver(name).name == name and get_solver(name).is_available()


def test_an_unavailable_extra_is_not_listed_and_raises_missing_extra(monkeypatch):
    monkeypatch.setattr(get_solver("toulbar2"), "requires", (("not_a_real_module_xyz", "toulbar2"),))
    assert "toulbar2" not in layoutopt.methods()
    graph, costs = chain()
    with pytest.raises(MissingExtraError, match=r"layoutopt\[toulbar2\]"):
        layoutopt.solve(graph, costs, method="toulbar2")


# --- infeasible problems: a status, not an exception ------------------------------------------


@pytest.mark.parametrize("method", layoutopt.methods())
def test_a_node_with_every_choice_forbidden_is_named(method):
    graph, costs = chain()
    sol = layoutopt.solve(graph, with_(costs, nodes={"conv2": [INF, INF]}), method=method)
    assert sol.status == "infeasible" and sol.objective == INF and sol.lower_bound == INF
    assert sol.assignment == {}
    assert "'conv2'" in sol.message


@pytest.mark.parametrize("method", layoutopt.methods())
def test_an_edge_forbidding_every_allowed_pair_is_named(method):
    graph, costs = chain()
    # relu's choice 0 is forbidden, and the edge forbids every pair with relu's choice 1
    bad = with_(costs, nodes={"relu": [INF, 1.0]}, edges={("conv2", "relu"): [[0.0, INF], [0.0, INF]]})
    sol = layoutopt.solve(graph, bad, method=method)
    assert sol.status == "infeasible" and sol.lower_bound == INF
    assert "('conv2', 'relu')" in sol.message


@pytest.mark.parametrize("method", [m for m in layoutopt.methods() if get_solver(m).exact])
def test_infeasibility_without_a_cheap_culprit_is_proven_by_exact_methods(method):
    # 2-colouring a triangle: every node and every edge alone allows something, the whole does not
    graph = nx.cycle_graph(3)
    differ = [[INF, 0.0], [0.0, INF]]
    sol = layoutopt.solve(graph, {"nodes": {n: [0.0, 1.0] for n in graph},
                                  "edges": {e: differ for e in graph.edges}}, method=method)
    assert sol.status == "infeasible" and sol.lower_bound == INF and sol.objective == INF
    assert sol.message


# --- bad input: one test per case of issue 2 -----------------------------------------------


def test_missing_node_cost():
    graph, costs = chain()
    with raises("node 'conv2' has no cost vector"):
        layoutopt.solve(graph, with_(costs, nodes={"conv2": None}))


def test_missing_edge_cost():
    graph, costs = chain()
    with raises(re.escape("edge ('conv2', 'relu') has no cost matrix")):
        layoutopt.solve(graph, with_(costs, edges={("conv2", "relu"): None}))


def test_wrong_edge_shape():
    graph, costs = chain()
    with raises(re.escape("edge ('conv1', 'conv2'): cost matrix has shape (2, 3), expected (2, 2)")):
        layoutopt.solve(graph, with_(costs, edges={("conv1", "conv2"): np.zeros((2, 3))}))


def test_transposed_edge_with_the_untransposed_shape():
    graph = nx.Graph([("a", "b")])
    costs = {"nodes": {"a": [0.0, 0.0], "b": [0.0, 0.0, 0.0]}, "edges": {("b", "a"): np.zeros((2, 3))}}
    with raises(re.escape("edge ('b', 'a'): cost matrix has shape (2, 3), expected (3, 2)")):
        layoutopt.solve(graph, costs)


def test_wrong_node_dimension():
    graph, costs = chain()
    with raises("node 'relu': cost must be a 1-D vector, got shape"):
        layoutopt.solve(graph, with_(costs, nodes={"relu": [[1.0, 1.0]]}))


def test_wrong_edge_dimension():
    graph, costs = chain()
    with raises(re.escape("edge ('conv1', 'conv2'): cost matrix has shape (4,)")):
        layoutopt.solve(graph, with_(costs, edges={("conv1", "conv2"): [0.0, 0.5, 0.5, 0.0]}))


def test_non_numeric_cost():
    graph, costs = chain()
    with raises("node 'relu': cost is not numeric"):
        layoutopt.solve(graph, with_(costs, nodes={"relu": ["fast", "slow"]}))


@pytest.mark.parametrize("where", ["node", "edge"])
def test_nan(where):
    graph, costs = chain()
    if where == "node":
        bad, culprit = with_(costs, nodes={"conv1": [1.0, math.nan]}), "node 'conv1'"
    else:
        bad = with_(costs, edges={("conv1", "conv2"): [[0, math.nan], [0, 0]]})
        culprit = "edge ('conv1', 'conv2')"
    with raises(re.escape(culprit) + ": cost contains NaN"):
        layoutopt.solve(graph, bad)


@pytest.mark.parametrize("where", ["node", "edge"])
def test_negative_infinity(where):
    graph, costs = chain()
    if where == "node":
        bad, culprit = with_(costs, nodes={"relu": [-INF, 1.0]}), "node 'relu'"
    else:
        bad, culprit = with_(costs, edges={("conv2", "relu"): [[0, -INF], [0, 0]]}), "edge ('conv2', 'relu')"
    with raises(re.escape(culprit) + r": cost contains -inf"):
        layoutopt.solve(graph, bad)


def test_negative_cost():
    graph, costs = chain()
    with raises(r"node 'conv2': cost contains a negative value \(-1\)"):
        layoutopt.solve(graph, with_(costs, nodes={"conv2": [-1.0, 1.0]}))


def test_empty_cost_vector():
    graph, costs = chain()
    with raises("node 'conv1': cost vector is empty"):
        layoutopt.solve(graph, with_(costs, nodes={"conv1": []}))


def test_self_loop():
    graph, costs = chain()
    graph.add_edge("relu", "relu")
    with raises(re.escape("edge ('relu', 'relu') is a self-loop")):
        layoutopt.solve(graph, with_(costs, edges={("relu", "relu"): np.zeros((2, 2))}))


def test_labels_of_the_wrong_length():
    graph, costs = chain()
    graph.nodes["conv2"]["choices"] = ["NCHW8c", "NCHW16c", "NCHW32c"]
    with raises("node 'conv2': 3 choice labels but 2 costs"):
        layoutopt.solve(graph, costs)


def test_unknown_method():
    graph, costs = chain()
    with raises("unknown method 'simplex'; known methods: .*bruteforce"):
        layoutopt.solve(graph, costs, method="simplex")


def test_unknown_option():
    graph, costs = chain()
    with raises("unknown option.* max_iter for method 'cpsat'; accepted: hint, num_workers"):
        layoutopt.solve(graph, costs, method="cpsat", max_iter=10)


@pytest.mark.parametrize("limit", [0, -1.0, math.nan, "10", True])
def test_bad_time_limit(limit):
    graph, costs = chain()
    with raises("time_limit must be"):
        layoutopt.solve(graph, costs, time_limit=limit)


def test_cost_for_a_node_not_in_the_graph():
    graph, costs = chain()
    with raises("cost given for node 'softmax', which is not in the graph"):
        layoutopt.solve(graph, with_(costs, nodes={"softmax": [1.0]}))


def test_cost_for_an_edge_not_in_the_graph():
    graph, costs = chain()
    with raises(re.escape("cost given for edge ('conv1', 'relu'), which is not in the graph")):
        layoutopt.solve(graph, with_(costs, edges={("conv1", "relu"): np.zeros((2, 2))}))


def test_not_a_graph_and_not_costs():
    graph, costs = chain()
    with raises("graph must be a networkx Graph"):
        layoutopt.solve({"conv1": ["conv2"]}, costs)
    with raises("costs must be a layoutopt.Costs"):
        layoutopt.solve(graph, [costs["nodes"], costs["edges"]])
    with raises("costs has unknown keys"):
        layoutopt.solve(graph, {**costs, "node": {}})


def test_evaluate_validates_the_assignment():
    graph, costs = chain()
    assert layoutopt.evaluate(graph, costs, {"conv1": 1, "conv2": 0, "relu": 0}) == 3.5
    with raises("assignment has no choice for node 'relu'"):
        layoutopt.evaluate(graph, costs, {"conv1": 1, "conv2": 0})
    with raises("node 'conv2': choice 2 out of range 0..1"):
        layoutopt.evaluate(graph, costs, {"conv1": 1, "conv2": 2, "relu": 0})


@pytest.mark.parametrize(
    ("method", "options", "fragment"),
    [("mip", {"backend": "gurobi"}, "backend"), ("cpsat", {"num_workers": 0}, "num_workers")],
)
def test_bad_option_value_is_reported_even_when_infeasibility_answers_first(method, options, fragment):
    graph = nx.path_graph(2)
    costs = {"nodes": {0: [math.inf], 1: [1.0]}, "edges": {(0, 1): [[0.0]]}}
    with pytest.raises(layoutopt.ProblemError, match=fragment):
        layoutopt.solve(graph, costs, method=method, **options)
