"""pbqp: exact on series-parallel graphs, never better than the optimum, never wrongly infeasible."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reductions import small_problems

import layoutopt
from layoutopt import Problem
from layoutopt.generators import generate
from layoutopt.solvers.base import Deadline
from layoutopt.solvers.pbqp import feasible_assignment, icm


@settings(max_examples=150, deadline=None)
@given(small_problems(), st.booleans())
def test_never_beats_the_optimum_and_optimal_means_optimal(problem, polish):
    reference = layoutopt.solve_problem(problem, "bruteforce")
    sol = layoutopt.solve_problem(problem, "pbqp", polish=polish)
    assert (sol.status == "infeasible") == (reference.status == "infeasible")
    if reference.status == "optimal":
        assert sol.objective >= reference.objective - 1e-9
        if sol.status == "optimal":
            assert sol.objective == pytest.approx(reference.objective)
            assert sol.stats["RN"] == 0


@st.composite
def colouring_problems(draw):
    """Graph colouring with random costs: inf on equal colours, so RN choices can dead-end."""
    n = draw(st.integers(4, 8))
    graph = nx.gnp_random_graph(n, draw(st.floats(0.3, 0.9)), seed=draw(st.integers(0, 10**6)))
    colours = draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    forbid_equal = np.where(np.eye(colours, dtype=bool), math.inf, 0.0)
    costs = {"nodes": {i: rng.integers(0, 5, colours).astype(float) for i in graph},
             "edges": {e: forbid_equal + rng.integers(0, 3, (colours, colours)) for e in graph.edges}}
    return Problem.from_graph(graph, costs)


@settings(max_examples=80, deadline=None)
@given(colouring_problems())
def test_never_infeasible_when_a_feasible_assignment_exists(problem):
    reference = layoutopt.solve_problem(problem, "bruteforce")
    sol = layoutopt.solve_problem(problem, "pbqp")
    assert (sol.status == "infeasible") == (reference.status == "infeasible")
    if sol.status == "infeasible":
        assert sol.lower_bound == math.inf  # proven, by the reductions or the feasibility search


@pytest.mark.parametrize("family", ["resnet", "inception", "ssd"])
def test_exact_on_series_parallel_families(family):
    graph, costs = generate(family, nodes=90, max_choices=8, seed=5, regime="hard")
    problem = Problem.from_graph(graph, costs)
    sol = layoutopt.solve_problem(problem, "pbqp")
    exact = layoutopt.solve_problem(problem, "dp")
    assert exact.status == "optimal"
    assert sol.objective == pytest.approx(exact.objective, rel=1e-12)


def test_rn_is_reported_and_polish_never_hurts():
    graph, costs = generate("densenet", nodes=120, max_choices=6, seed=3)
    problem = Problem.from_graph(graph, costs)
    raw = layoutopt.solve_problem(problem, "pbqp", polish=False)
    polished = layoutopt.solve_problem(problem, "pbqp")
    assert raw.stats["RN"] > 0 and raw.status == "feasible" and raw.lower_bound == -math.inf
    assert polished.objective <= raw.objective
    assignment = np.array([raw.assignment[n] for n in problem.nodes])
    icm(problem, assignment)
    assert problem.evaluate(assignment) <= raw.objective


def colouring(nodes: int, colours: int) -> Problem:
    """Colouring a complete graph: every node and edge allows something; infeasible if colours < nodes."""
    graph = nx.complete_graph(nodes)
    forbid_equal = np.where(np.eye(colours, dtype=bool), math.inf, 0.0)
    return Problem.from_graph(graph, {"nodes": {i: np.arange(colours, dtype=float) for i in graph},
                                      "edges": {e: forbid_equal for e in graph.edges}})


def test_small_kernel_is_solved_exactly_including_infeasibility():
    problem = colouring(4, 3)  # a 4-node kernel: variable elimination proves it infeasible
    assert problem.infeasibility_culprit() is None
    sol = layoutopt.solve_problem(problem, "pbqp")
    assert sol.status == "infeasible" and sol.lower_bound == math.inf and sol.stats["kernel_dp"] == 4
    sol = layoutopt.solve_problem(colouring(4, 4), "pbqp")
    assert sol.status == "optimal" and sol.objective == 6.0  # colours 0..3, once each


def test_feasibility_search_proves_infeasibility_when_rn_dead_ends():
    problem = colouring(7, 6)  # 6^7 tables: too wide for the small-kernel elimination, so RN runs
    assert feasible_assignment(problem, Deadline(5.0)) == (None, True)
    sol = layoutopt.solve_problem(problem, "pbqp")
    assert sol.status == "infeasible" and sol.lower_bound == math.inf
    assert sol.stats["feasibility_search"] and "kernel_dp" not in sol.stats


def test_large_graph_runs_and_matches_dp():
    # scale itself is measured in benchmarks/core.py; this checks nothing breaks at size
    graph, costs = generate("resnet", nodes=3000, max_choices=4, seed=1)
    problem = Problem.from_graph(graph, costs)
    sol = layoutopt.solve_problem(problem, "pbqp")
    assert sol.status == "optimal" and len(sol.assignment) == 3000
    assert sol.objective == pytest.approx(layoutopt.solve_problem(problem, "dp").objective, rel=1e-12)


def reference_icm(problem, assignment, max_sweeps=10):
    """ICM spelled out: every visit recomputes the node's local costs from scratch."""
    for _ in range(max_sweeps):
        changed = False
        for i in range(len(problem)):
            local = problem.node_costs[i].copy()
            for j in problem.neighbors(i):
                local += problem.edge(i, j)[:, assignment[j]]
            best = int(local.argmin())
            if local[best] < local[assignment[i]]:
                assignment[i], changed = best, True
        if not changed:
            break


@pytest.mark.parametrize("family,regime", [("densenet", "xhard"), ("random", "hard")])
def test_icm_with_cached_local_costs_moves_like_the_plain_definition(family, regime):
    graph, costs = generate(family, nodes=150, seed=5, regime=regime)
    problem = Problem.from_graph(graph, costs)
    start = np.array([int(np.argmin(c)) for c in problem.node_costs])
    fast, plain = start.copy(), start.copy()
    moves = icm(problem, fast)
    reference_icm(problem, plain)
    assert moves > 0 and fast.tolist() == plain.tolist()
    assert problem.evaluate(fast) <= problem.evaluate(start)


def test_the_most_certain_node_first_keeps_the_hard_regime_gap_small():
    # hard_densenet_200_s0 of benchmarks/core.py: 1.75 % above the optimum with the max-degree RN rule
    graph, costs = generate("densenet", nodes=200, seed=0, regime="hard")
    problem = Problem.from_graph(graph, costs)
    optimum = layoutopt.solve_problem(problem, "auto").objective
    sol = layoutopt.solve_problem(problem, "pbqp")
    assert sol.stats["RN"] > 0
    assert optimum <= sol.objective <= optimum * 1.005
