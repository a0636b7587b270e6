"""cpsat: the marginal encoding, certified bounds, time limits, options."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from strategies import frustrated_problem, instances

import layoutopt
from layoutopt import Problem, ProblemError
from layoutopt.generators import generate
from layoutopt.solvers import get_solver
from layoutopt.solvers.base import Deadline
from layoutopt.solvers.marginal import marginal_model


def test_forbidden_entries_get_no_variable_and_separable_edges_none_at_all():
    inf = math.inf
    node_costs = [np.array([1.0, inf, 2.0]), np.array([0.0, 5.0]), np.array([3.0, 3.0])]
    edges = {
        (0, 1): np.array([[0.0, inf], [7.0, 7.0], [2.0, 0.0]]),  # row 1 belongs to a forbidden choice
        (1, 2): np.array([[1.0, 4.0], [2.0, 5.0]]),  # separable: [1, 2] + [0, 3]
    }
    model = marginal_model(node_costs, edges)
    assert model.literal_choice.tolist() == [0, 2, 0, 1, 0, 1]  # no literal for node 0's choice 1
    # pairs only for the 3 finite entries between allowed choices of (0, 1); none for (1, 2)
    assert sorted(zip(model.pair_first.tolist(), model.pair_second.tolist(), strict=True)) == [
        (0, 2), (1, 2), (1, 3)]
    assert model.pair_cost.tolist() == [0.0, 2.0, 0.0]
    # the separable edge moved into the node costs of nodes 1 and 2
    assert model.literal_cost[2:].tolist() == [1.0, 7.0, 3.0, 6.0]
    rows = {literal: sorted(pairs.tolist()) for literal, pairs in model.marginals}
    assert rows == {0: [0], 1: [1, 2], 2: [0, 1], 3: [2]}
    assert model.assignment(np.array([0, 1, 0, 1, 1, 0])).tolist() == [2, 1, 0]


@settings(max_examples=40)
@given(instances(max_nodes=5))
def test_the_bound_is_certified_for_float_costs(instance):
    problem = Problem.from_graph(*instance)
    reference = layoutopt.solve_problem(problem, "bruteforce")
    cpsat = get_solver("cpsat")
    result = cpsat().solve(problem, Deadline(None), cpsat.resolve_options({"num_workers": 1}))
    if reference.status == "infeasible":
        assert result.assignment is None and result.lower_bound == math.inf
        return
    assert result.lower_bound <= reference.objective <= problem.evaluate(result.assignment)
    assert problem.evaluate(result.assignment) == pytest.approx(reference.objective, rel=1e-9, abs=1e-12)


def test_time_limit_returns_the_incumbent_with_the_best_bound(capfd):
    problem = frustrated_problem(nodes=40)
    sol = layoutopt.solve_problem(problem, "cpsat", time_limit=0.5)
    assert capfd.readouterr() == ("", "")
    assert sol.status == "feasible"
    if "cpsat_status" in sol.stats:  # UNKNOWN (loaded machine): the warm start
        assert sol.stats["cpsat_status"] in ("FEASIBLE", "UNKNOWN")
    else:  # a slow host: building or loading the model met the deadline; the pbqp warm start's answer
        assert "the assignment is pbqp's" in sol.message
    assert 0 < sol.lower_bound < sol.objective < math.inf
    assert "time limit" in sol.message


@pytest.mark.parametrize("options", [{"hint": False}, {"num_workers": 1}, {"num_workers": 3, "hint": False}])
def test_options_do_not_change_the_optimum(options):
    graph, costs = generate("densenet", nodes=30, max_choices=4, seed=7)
    problem = Problem.from_graph(graph, costs)
    expected = layoutopt.solve_problem(problem, "dp").objective
    sol = layoutopt.solve_problem(problem, "cpsat", **options)
    assert sol.status == "optimal" and sol.objective == pytest.approx(expected, rel=1e-12)
    assert sol.stats["workers"] == options.get("num_workers", sol.stats["workers"])


@pytest.mark.parametrize("workers", [0, -2, 1.5, True, "2"])
def test_bad_num_workers(workers):
    graph = nx.path_graph(2)
    costs = {"nodes": {0: [1.0], 1: [2.0]}, "edges": {(0, 1): [[0.0]]}}
    with pytest.raises(ProblemError, match="option num_workers must be a positive integer"):
        layoutopt.solve(graph, costs, method="cpsat", num_workers=workers)


def test_large_float_costs_keep_full_precision():
    # costs around 1e9 with fractional parts: the scaling must not lose the sub-unit differences
    graph = nx.path_graph(3)
    base = 1e9
    costs = {"nodes": {0: [base + 0.25, base + 0.5], 1: [base, base + 0.125], 2: [base + 0.75, base]},
             "edges": {(0, 1): [[0.0, 0.3], [0.3, 0.0]], (1, 2): [[0.0, 0.1], [0.1, 0.0]]}}
    reference = layoutopt.solve(graph, costs, method="bruteforce")
    sol = layoutopt.solve(graph, costs, method="cpsat")
    assert sol.assignment == reference.assignment and sol.status == "optimal"
