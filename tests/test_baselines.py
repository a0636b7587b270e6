"""The baseline registry: registration, look-up, and how a baseline's assignment becomes a Solution."""

import math

import networkx as nx
import pytest

import layoutopt
from layoutopt.baselines import Baseline, baselines, get_baseline, register_baseline, solve_baseline
from layoutopt.generators import generate

COSTS = {"nodes": {0: [1, 2], 1: [3, 1]}, "edges": {(0, 1): [[0, 5], [5, 0]]}}


def last_choices(graph, problem, time_limit=None):
    return {node: len(problem.node_costs[problem.index[node]]) - 1 for node in graph}


def test_registered_baselines_and_their_solutions():
    assert {"greedy", "tvm-dp"} <= set(baselines())
    graph, costs = generate("resnet", nodes=30, max_choices=4, seed=3)
    greedy = solve_baseline("greedy", graph, costs)
    assert greedy.assignment == layoutopt.solve(graph, costs, method="greedy").assignment
    assert greedy.status == "feasible" and greedy.lower_bound == -math.inf and greedy.method == "greedy"
    exact = solve_baseline("tvm-dp", graph, costs)
    assert exact.status == "optimal" and exact.lower_bound == exact.objective
    assert exact.objective == pytest.approx(layoutopt.solve(graph, costs, method="dp").objective)
    assert exact.stats["max_live"] >= 2 and get_baseline("tvm-dp").exact
    assert "not TVM's code" in get_baseline("tvm-dp").description


def test_register_look_up_and_refuse_a_second_function_under_one_name():
    entry = register_baseline("last-choices", last_choices, description="every node's last choice")
    assert get_baseline("last-choices") is entry and "last-choices" in baselines()
    assert register_baseline("last-choices", last_choices, description="again").description == "again"
    with pytest.raises(layoutopt.ProblemError, match="'last-choices' is already registered"):
        register_baseline("last-choices", lambda g, p, t=None: {}, description="another")
    sol = solve_baseline("last-choices", nx.path_graph(2), COSTS)
    assert sol.assignment == {0: 1, 1: 1} and sol.labels == {0: 1, 1: 1} and sol.objective == 3.0
    with pytest.raises(layoutopt.ProblemError, match=r"unknown baseline 'nope'; known baselines: .*greedy"):
        get_baseline("nope")


@pytest.mark.parametrize(("function", "match"), [
    (lambda graph, problem, time_limit: [0, 0], "returned a list, not a mapping"),
    (lambda graph, problem, time_limit: {0: 0}, "assignment has no choice for node 1"),
    (lambda graph, problem, time_limit: {0: 0, 1: 7}, "node 1: choice 7 out of range"),
])
def test_a_bad_assignment_is_a_clear_error(function, match):
    with pytest.raises(layoutopt.ProblemError, match=match):
        solve_baseline(Baseline("bad", function, "returns a bad assignment"), nx.path_graph(2), COSTS)


def test_forbidden_choices_make_an_infeasible_solution_and_bad_time_limits_are_refused():
    forbidden = {"nodes": {0: [math.inf, 1.0], 1: [1.0]}, "edges": {(0, 1): [[0.0], [math.inf]]}}
    sol = solve_baseline("tvm-dp", nx.path_graph(2), forbidden)
    assert sol.status == "infeasible" and sol.lower_bound == math.inf and sol.message
    assert solve_baseline("greedy", nx.path_graph(2), forbidden).status == "infeasible"
    with pytest.raises(layoutopt.ProblemError, match="time_limit must be positive"):
        solve_baseline("greedy", nx.path_graph(2), COSTS, time_limit=0)
