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


@pytest.mark.parametrize("method", layoutopt.methods())
def test_negative_costs_are_accepted_by_every_method(method):
    """Issue 13: PBQP is defined over the reals (register allocation's coalescing preferences, energy
    models); every negative value used to be refused."""
    graph, costs = chain()
    costs = with_(costs, nodes={"conv2": [-1.0, 1.0]}, edges={("conv2", "relu"): [[-2.5, 2.0], [2.0, -1e-3]]})
    sol = layoutopt.solve(graph, costs, method=method)
    # conv1=1 (1) + 0.5 + conv2=0 (-1) + -2.5 + relu=0 (1) = -1.0 beats every other choice
    assert sol.objective == -1.0 and sol.assignment == {"conv1": 1, "conv2": 0, "relu": 0}
    if get_solver(method).exact:  # -1e-3 is no multiple of a power of two: integer back-ends round it
        assert sol.status == "optimal" and sol.lower_bound == pytest.approx(-1.0, rel=1e-12)


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


# --- issue 13: options validated by type, containers, limits ------------------------------------


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        ("mip", {"backend": ["scip"]}, "option backend: unknown value \\['scip'\\]"),
        ("greedy", {"max_repair_rounds": "x"}, "option max_repair_rounds must be an integer >= 0, not 'x'"),
        ("greedy", {"max_repair_rounds": None}, "option max_repair_rounds must be an integer >= 0, not None"),
        ("greedy", {"max_repair_rounds": -5}, "option max_repair_rounds must be an integer >= 0, not -5"),
        ("greedy", {"max_repair_rounds": 2.5}, "option max_repair_rounds must be an integer"),
        ("cpsat", {"hint": "no"}, "option hint must be True or False, not 'no'"),
        ("pbqp", {"polish": "no"}, "option polish must be True or False, not 'no'"),
        ("pbqp", {"polish": 0}, "option polish must be True or False, not 0"),
        ("dp", {"max_table_size": math.nan}, "option max_table_size must be a number > 0"),
        ("auto", {"dp_max_table": "big"}, "option dp_max_table must be a number >= 0"),
    ],
)
def test_option_values_are_checked_by_type(method, options, message):
    """Issue 13: backend=["scip"] raised TypeError, max_repair_rounds="x"/None a ValueError/TypeError,
    -5 was accepted, hint="no" and polish="no" were read as true."""
    graph, costs = chain()
    with raises(message):
        layoutopt.solve(graph, costs, method=method, **options)


def test_bruteforce_refuses_an_astronomical_count_with_a_message():
    """Issue 13: 16**300 assignments raised OverflowError while formatting the refusal."""
    graph = nx.path_graph(300)
    costs = {"nodes": {i: np.zeros(16) for i in graph}, "edges": {e: np.ones((16, 16)) for e in graph.edges}}
    with raises(r"bruteforce refuses 10\^361.2 assignments"):
        layoutopt.solve(graph, costs, method="bruteforce")


@pytest.mark.parametrize(
    ("costs", "message"),
    [
        ({"nodes": 5}, "costs 'nodes' must be a mapping from node to its costs, not int"),
        ({"nodes": {}, "edges": None},
         "costs 'edges' must be a mapping from edge to its costs, not NoneType"),
        (Costs(nodes={}, edges=None), "costs 'edges' must be a mapping"),
        (Costs(nodes=[1.0], edges={}), "costs 'nodes' must be a mapping"),
    ],
)
def test_cost_containers_of_the_wrong_type(costs, message):
    """Issue 13: these raised TypeError from deep inside the validation."""
    with raises(message):
        layoutopt.solve(nx.path_graph(2), costs)


@pytest.mark.parametrize("where", ["node", "edge"])
def test_complex_costs_are_refused(where):
    """Issue 13: a complex numpy array silently lost its imaginary part."""
    graph, costs = chain()
    if where == "node":
        bad, culprit = with_(costs, nodes={"relu": np.array([1 + 1j, 2.0])}), "node 'relu'"
    else:
        bad = with_(costs, edges={("conv2", "relu"): np.array([[0, 1j], [1, 0]])})
        culprit = "edge ('conv2', 'relu')"
    with raises(re.escape(culprit) + ": cost is complex"):
        layoutopt.solve(graph, bad)


def test_an_undirected_edge_given_both_ways_is_named_as_such():
    """Issue 13: said "(1, 0), which is not in the graph"."""
    graph = nx.Graph([(0, 1)])
    matrix = [[0.0, 1.0], [1.0, 0.0]]
    costs = {"nodes": {0: [0.0, 1.0], 1: [0.0, 1.0]}, "edges": {(0, 1): matrix, (1, 0): matrix}}
    with raises(re.escape("edge (0, 1) is given twice, as (0, 1) and as (1, 0)")):
        layoutopt.solve(graph, costs)


def test_multigraph_keys_may_be_given_reversed():
    """Issue 13: an undirected MultiGraph's (v, u, key) was refused."""
    graph = nx.MultiGraph([("a", "b"), ("a", "b")])
    nodes = {"a": [0.0, 1.0], "b": [0.0, 0.5, 2.0]}
    forward = {("a", "b", 0): np.array([[0.0, 3.0, 1.0], [3.0, 0.0, 1.0]]),
               ("a", "b", 1): np.full((2, 3), 4.0)}
    mixed = {("b", "a", 0): forward[("a", "b", 0)].T, ("a", "b", 1): forward[("a", "b", 1)]}
    one = layoutopt.solve(graph, {"nodes": nodes, "edges": forward}, method="bruteforce")
    other = layoutopt.solve(graph, {"nodes": nodes, "edges": mixed}, method="bruteforce")
    assert one.objective == other.objective == 4.0 and one.assignment == other.assignment


def test_evaluate_asks_for_a_mapping():
    """Issue 13: evaluate(g, c, [0, 0]) said "no choice for node 1"."""
    graph, costs = chain()
    with raises("an assignment must be a mapping node -> choice index"):
        layoutopt.evaluate(graph, costs, [1, 0, 0])


@pytest.mark.parametrize("method", layoutopt.methods())
@pytest.mark.parametrize("limit", [math.inf, 1e30])
def test_an_infinite_or_huge_time_limit_means_no_limit(method, limit):
    """Issue 13: inf raised OverflowError in mip, toulbar2 and auto; 1e30 a TypeError in toulbar2."""
    graph, costs = chain()
    sol = layoutopt.solve(graph, costs, method=method, time_limit=limit)
    assert sol.objective == 3.5
    if method == "auto":  # a kernel for the exact engine, not only the reductions
        clique = nx.complete_graph(4)
        kernel = {"nodes": {i: [1.0, 2.0] for i in clique},
                  "edges": {e: [[0, 1], [1, 0]] for e in clique.edges}}
        sol = layoutopt.solve(clique, kernel, time_limit=limit, dp_max_table=0)
        assert sol.objective == 4.0 and sol.status == "optimal"


def test_validation_happens_once_and_solve_problem_takes_only_a_problem():
    graph, costs = chain()
    problem = layoutopt.Problem.from_graph(graph, costs)
    assert layoutopt.solve_problem(problem, "dp", time_limit=5).objective == 3.5
    with raises("solve_problem takes a layoutopt.Problem"):
        layoutopt.solve_problem(graph, "dp")
    with raises("time_limit must be positive"):
        layoutopt.solve_problem(problem, "dp", time_limit=0)
    with raises("unknown option"):
        layoutopt.solve_problem(problem, "dp", polish=True)
    import inspect

    assert all(not name.startswith("_") for name in inspect.signature(layoutopt.solve_problem).parameters)


def test_an_internal_failure_is_not_a_problem_error(monkeypatch):
    """ProblemError blames the input; a solver reporting a bound above its own objective is layoutopt's
    bug: InternalError."""
    from layoutopt.solvers.base import SolverResult

    solver = get_solver("bruteforce")
    monkeypatch.setattr(solver, "solve", lambda self, problem, deadline, options: SolverResult(
        [1, 0, 0], "optimal", 100.0))
    graph, costs = chain()
    with pytest.raises(layoutopt.InternalError, match=r"lower bound 100\.0 above its objective 3\.5"):
        layoutopt.solve(graph, costs, method="bruteforce")
    assert not issubclass(layoutopt.InternalError, ProblemError)
