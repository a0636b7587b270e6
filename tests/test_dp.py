"""dp: exact against bruteforce, refuses oversized tables before allocating them."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from test_reductions import small_problems

import layoutopt
from layoutopt import Problem, ProblemError
from layoutopt.generators import generate
from layoutopt.solvers import dp as dp_module
from layoutopt.solvers.dp import TableTooLarge, eliminate, elimination_order
from layoutopt.solvers.reductions import reduce


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


def _random_kernel(nodes: int, seed: int) -> Problem:
    """The reduced kernel of a seeded G(n, m) graph with 2 to 8 random-cost choices per node."""
    rng = np.random.default_rng(seed)
    graph = nx.gnm_random_graph(nodes, int(nodes * rng.uniform(1.2, 2.5)), seed=seed)
    node_costs = {v: rng.random(int(rng.integers(2, 9))) for v in graph}
    edge_costs = {(u, v): rng.random((node_costs[u].size, node_costs[v].size)) for u, v in graph.edges}
    return reduce(Problem.from_graph(graph, {"nodes": node_costs, "edges": edge_costs})).kernel


@pytest.mark.parametrize(("nodes", "seed", "fits"), [
    (40, 19, "min-degree"),  # a 27-node kernel: min-fill's order needs a table above 1e5, min-degree's not
    (25, 10, "min-fill"),    # a 20-node kernel: the other way round
])
def test_elimination_order_fits_when_either_heuristic_does(nodes, seed, fits):
    kernel = _random_kernel(nodes, seed)
    other = {"min-degree": "min-fill", "min-fill": "min-degree"}[fits]
    with pytest.raises(TableTooLarge):
        dp_module._order(kernel, other, 1e5)
    order, largest = elimination_order(kernel, 1e5)
    assert sorted(order) == list(range(len(kernel))) and largest <= 1e5
    solved = layoutopt.solve_problem(kernel, "dp", max_table_size=1e5)
    assert solved.status == "optimal"
    assert solved.objective == pytest.approx(layoutopt.solve_problem(kernel, "cpsat").objective, rel=1e-9)


def test_a_hopeless_kernel_of_many_nodes_is_refused_without_min_fill(monkeypatch):
    # min-fill costs ~10x min-degree's time on a 72-node kernel and would not fit either
    kernel = reduce(Problem.from_graph(*generate("random", 200, seed=0))).kernel
    assert len(kernel) > dp_module.MIN_FILL_RESCUE
    calls = []
    monkeypatch.setattr(dp_module, "min_fill_in_heuristic", lambda graph: calls.append(1))
    with pytest.raises(TableTooLarge):
        elimination_order(kernel, 1e5)
    assert calls == []


def test_min_fill_replaces_min_degree_where_its_tables_are_smaller():
    # a small kernel whose two orders both fit: the smaller largest table is kept
    for nodes, seed in ((15, s) for s in range(20)):
        kernel = _random_kernel(nodes, seed)
        if len(kernel) < 2:
            continue
        sizes = [dp_module._order(kernel, h, math.inf)[1] for h in ("min-degree", "min-fill")]
        assert elimination_order(kernel)[1] == min(sizes)
