"""The integer scaling shared by cpsat, mip and toulbar2: its error bound holds for every assignment."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from strategies import instances

from layoutopt import Problem, ProblemError
from layoutopt.solvers.scaling import (
    INTEGER_COST_BUDGET,
    cost_scale,
    scale_costs,
    status_from_bound,
)


def scaled_objective(scaled, assignment):
    total = sum(scaled.node_costs[i][k] for i, k in enumerate(assignment))
    return total + sum(m[assignment[i], assignment[j]] for (i, j), m in scaled.edges.items())


@settings(max_examples=60)
@given(instances(max_nodes=5))
def test_rounding_error_bounds_every_assignment(instance):
    problem = Problem.from_graph(*instance)
    budget = 2.0**20  # small, so that rounding actually happens
    scaled = scale_costs(problem, budget)
    assert math.frexp(scaled.scale)[0] == 0.5  # a power of two: scaling itself is exact
    for assignment in itertools.islice(itertools.product(*map(range, problem.sizes)), 200):
        original = problem.evaluate(assignment)
        integral = scaled_objective(scaled, assignment)
        if not math.isfinite(original):
            assert integral == math.inf
            continue
        assert integral == round(integral) and 0 <= integral <= budget + len(problem) + len(problem.edges)
        assert abs(integral / scaled.scale - original) <= scaled.rounding_error
        assert scaled.lower_bound(integral) <= original  # certified


def test_integer_costs_are_represented_exactly():
    graph, costs = nx.path_graph(3), {"nodes": {0: [3.0, 1e6], 1: [7.0, 0.0], 2: [2.0]},
                                      "edges": {(0, 1): [[0, 12345], [1, 0]], (1, 2): [[5], [0]]}}
    scaled = scale_costs(Problem.from_graph(graph, costs))
    assert scaled.rounding_error == 0.0
    assert scaled.lower_bound(scaled.scale * 10.0) == 10.0
    assert scaled.scale * (1e6 + 7 + 12345 + 5) <= INTEGER_COST_BUDGET


def test_entries_of_forbidden_choices_become_forbidden():
    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [math.inf, 1.0], 1: [0.0, 2.0]},
                                                    "edges": {(0, 1): [[1e300, 0.0], [4.0, math.inf]]}})
    with np.errstate(all="raise"):  # forbidden entries take part in no arithmetic (no inf - inf)
        scaled = scale_costs(problem, budget=1024)
    # the 1e300 of forbidden choice 0 neither counts in the scale nor reaches the solvers
    assert cost_scale(problem, budget=1024) == scaled.scale == 128.0  # largest objective 1 + 2 + 4
    np.testing.assert_array_equal(scaled.edges[(0, 1)], [[math.inf, math.inf], [512.0, math.inf]])
    assert [keys for keys, _ in scaled.edge_tables] == [[(0, 1)]]


def test_all_zero_costs_and_overflow():
    zero = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.0], 1: [0.0, 0.0]},
                                                 "edges": {(0, 1): [[0.0, 0.0]]}})
    assert scale_costs(zero).scale == 1.0 and scale_costs(zero).rounding_error == 0.0
    huge = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1.7e308], 1: [1.7e308]},
                                                 "edges": {(0, 1): [[0.0]]}})
    with pytest.raises(ProblemError, match="too large"):
        scale_costs(huge)


def test_status_from_bound():
    assert status_from_bound(1e6, 1e6 - 1e-4) == "optimal"  # 1e-10 relative
    assert status_from_bound(1e6, 1e6 - 10) == "feasible"
    assert status_from_bound(0.0, 0.0) == "optimal"
    assert status_from_bound(5.0, -math.inf) == "feasible"

