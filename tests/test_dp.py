"""dp: exact against bruteforce, refuses oversized tables before allocating them."""

import math

import networkx as nx
import pytest
from hypothesis import given, settings
from test_reductions import small_problems

import layoutopt
from layoutopt import Problem, ProblemError
from layoutopt.generators import generate
from layoutopt.solvers.dp import TableTooLarge, eliminate, elimination_order


@settings(max_examples=150, deadline=None)
@given(small_problems())
def test_matches_bruteforce(problem):
    reference = layoutopt.solve_problem(problem, "bruteforce")
    sol = layoutopt.solve_problem(problem, "dp")
    assert sol.status == reference.status
    if reference.status == "optimal":
        assert sol.objective == pytest.approx(reference.objective)
        assert sol.lower_bound == sol.objective


@settings(max_examples=60, deadline=None)
@given(small_problems(max_nodes=6))
def test_elimination_alone_matches_bruteforce(problem):
    # without the reductions in front, on the whole problem
    reference = layoutopt.solve_problem(problem, "bruteforce")
    choices, value = eliminate(problem, elimination_order(problem)[0])
    if reference.status == "infeasible":
        assert choices is None and value == math.inf
    else:
        assert value == pytest.approx(reference.objective)
        assert problem.evaluate(choices) == pytest.approx(value)


@pytest.mark.parametrize("family", ["resnet", "inception", "ssd"])
def test_dnn_shaped_graphs_do_not_blow_up(family):
    graph, costs = generate(family, nodes=600, max_choices=16, seed=1)
    sol = layoutopt.solve(graph, costs, method="dp", max_table_size=1e5)
    assert sol.status == "optimal" and sol.lower_bound == sol.objective
    assert sol.stats["largest_table"] <= 1e5


def test_max_table_size_is_checked_before_allocating():
    graph = nx.complete_graph(30)  # a 16^30 table: would never fit in memory
    costs = {"nodes": {i: list(range(16)) for i in graph},
             "edges": {e: [[1.0] * 16] * 16 for e in graph.edges}}
    with pytest.raises(ProblemError, match=r"max_table_size.*method='auto'") as info:
        layoutopt.solve(graph, costs, method="dp")
    assert isinstance(info.value, TableTooLarge)
    with pytest.raises(ProblemError, match="max_table_size"):
        layoutopt.solve(graph, costs, method="dp", max_table_size=-1)


def test_densenet_is_refused_with_advice():
    graph, costs = generate("densenet121", seed=0)
    with pytest.raises(ProblemError, match="toulbar2"):
        layoutopt.solve(graph, costs, method="dp")


def test_elimination_order_reports_the_largest_table():
    graph = nx.cycle_graph(5)
    problem = Problem.from_graph(graph, {"nodes": {i: [0.0] * (2 + i % 2) for i in graph},
                                         "edges": {(u, v): [[1.0] * (2 + v % 2)] * (2 + u % 2)
                                                   for u, v in graph.edges}})
    order, largest = elimination_order(problem)
    assert sorted(order) == list(range(5))
    assert largest <= 3 * 3 * 3 and largest >= 2 * 2 * 2
