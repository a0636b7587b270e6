"""The one cost-scaling mechanism (cpsat, mip, toulbar2, the .wcsp export): shift, prune, scale, round.
Its error bound holds for every assignment, negative costs included; huge and tiny costs keep their
precision."""

import itertools
import math

import networkx as nx
import numpy as np
from hypothesis import given, settings
from strategies import instances

from layoutopt import Problem
from layoutopt.solvers.base import heuristic_assignment
from layoutopt.solvers.scaling import INTEGER_COST_BUDGET, scale_costs


def scaled_objective(scaled, assignment):
    total = sum(scaled.node_costs[i][k] for i, k in enumerate(assignment))
    return total + sum(m[assignment[i], assignment[j]] for (i, j), m in scaled.edges.items())


def check_certified(problem, scaled, budget, incumbent=None):
    assert all((c[np.isfinite(c)] >= 0).all() for c in (*scaled.node_costs, *scaled.edges.values()))
    best = problem.evaluate(incumbent) if incumbent is not None else math.inf
    for assignment in itertools.islice(itertools.product(*map(range, problem.sizes)), 200):
        original = problem.evaluate(assignment)
        integral = scaled_objective(scaled, assignment)
        if not math.isfinite(original):
            assert integral == math.inf
            continue
        if integral == math.inf:  # pruned: only assignments worse than the incumbent may be
            assert scaled.pruned and original > best
            continue
        assert integral == round(integral) and 0 <= integral <= budget + len(problem) + len(problem.edges)
        assert abs(scaled.offset + scaled.unscaled(integral) - original) <= scaled.rounding_error + 1e-12 * (
            problem.magnitude(assignment))  # the float sums of this check itself round too
        assert scaled.lower_bound(integral) <= original  # certified


@settings(max_examples=60)
@given(instances(max_nodes=5))
def test_rounding_error_bounds_every_assignment(instance):
    problem = Problem.from_graph(*instance)
    budget = 2.0**20  # small, so that rounding actually happens
    check_certified(problem, scale_costs(problem, budget), budget)
    incumbent = heuristic_assignment(problem)
    if incumbent is not None:
        check_certified(problem, scale_costs(problem, budget, incumbent=incumbent), budget, incumbent)


def test_integer_costs_are_represented_exactly():
    graph, costs = nx.path_graph(3), {"nodes": {0: [3.0, 1e6], 1: [-7.0, 0.0], 2: [2.0]},
                                      "edges": {(0, 1): [[0, 12345], [1, 0]], (1, 2): [[5], [0]]}}
    scaled = scale_costs(Problem.from_graph(graph, costs))
    assert scaled.rounding_error == 0.0 and scaled.exponent == 0 and scaled.scale == 1.0
    assert scaled.offset == 3.0 - 7.0 + 2.0 + 0.0 + 0.0
    assert scaled.node_costs[1].tolist() == [0.0, 7.0]
    assert scaled.lower_bound(10.0) == 8.0
    halves = scale_costs(Problem.from_graph(graph, {"nodes": {0: [0.5, 1.25], 1: [0.0, 1.0], 2: [2.0]},
                                                    "edges": costs["edges"]}))
    assert halves.exponent == 2 and halves.rounding_error == 0.0  # quarters: exact at 2**2


def test_entries_of_forbidden_choices_become_forbidden():
    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [math.inf, 1.0], 1: [0.0, 2.0]},
                                                    "edges": {(0, 1): [[1e300, 0.0], [4.0, math.inf]]}})
    with np.errstate(all="raise"):  # forbidden entries take part in no arithmetic (no inf - inf)
        scaled = scale_costs(problem, budget=1024)
    # the 1e300 of forbidden choice 0 neither counts in the scale nor reaches the solvers
    assert scaled.exponent == 0  # integers: exact at scale 1, far within the budget
    np.testing.assert_array_equal(scaled.edges[(0, 1)], [[math.inf, math.inf], [0.0, math.inf]])  # 4 - 4
    assert scaled.offset == 1.0 + 0.0 + 4.0
    assert [keys for keys, _ in scaled.edge_tables] == [[(0, 1)]]


def test_all_zero_costs():
    zero = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.0], 1: [0.0, 0.0]},
                                                 "edges": {(0, 1): [[0.0, 0.0]]}})
    assert scale_costs(zero).exponent == 0 and scale_costs(zero).rounding_error == 0.0


def test_tiny_costs_scale_beyond_the_float_range_of_powers_of_two():
    """Issue 13: costs near 1e-300 need 2**1040, which is not a float: the scale overflowed and fell back
    to 1, and every cost rounded to 0."""
    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1e-300, 2e-300], 1: [3e-300, 5e-324]},
                                                    "edges": {(0, 1): [[0.0, 0.0], [0.0, 0.0]]}})
    scaled = scale_costs(problem)
    assert scaled.exponent > 1023 and scaled.rounding_error < 1e-13 * 1e-300
    assert scaled.node_costs[0][1] > scaled.node_costs[0][0] == 0.0
    optimum = problem.evaluate([0, 1])
    assert optimum - 1e-12 * optimum < scaled.lower_bound(scaled.cost([0, 1])) <= optimum


def test_a_huge_entry_is_pruned_by_the_incumbent_and_the_rest_keeps_its_precision():
    """Issue 13: one entry of 1e14 among costs of about 1 decided the scale: the rounding error (~1e-1
    per table) made every integer back-end's answer a guess."""
    rng = np.random.default_rng(0)
    graph = nx.complete_graph(8)
    costs = {"nodes": {i: rng.uniform(0, 1, 3) for i in graph},
             "edges": {e: rng.uniform(0, 1, (3, 3)) for e in graph.edges}}
    costs["edges"][(0, 1)][0, 0] = 1e14
    problem = Problem.from_graph(graph, costs)
    plain = scale_costs(problem)
    assert plain.coarse and plain.rounding_error > 1e-3
    incumbent = heuristic_assignment(problem)
    pruned = scale_costs(problem, incumbent=incumbent)
    assert pruned.pruned >= 1 and pruned.edges[(0, 1)][0, 0] == math.inf
    assert not pruned.coarse and pruned.rounding_error < 1e-11
    assert pruned.lower_bound(pruned.cost(incumbent)) <= problem.evaluate(incumbent)


def test_the_budget_bounds_the_largest_scaled_objective():
    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.1, 2 / 3], 1: [math.pi, 1.0]},
                                                    "edges": {(0, 1): [[0.0, 1e5 / 3], [0.0, 0.0]]}})
    scaled = scale_costs(problem)
    spreads = [t[np.isfinite(t)].max() for t in (*scaled.node_costs, *scaled.edges.values())]
    assert INTEGER_COST_BUDGET / 2 < sum(spreads) <= INTEGER_COST_BUDGET
