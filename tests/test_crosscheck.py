"""Every method against ``bruteforce`` (and the exact methods against each other) on random instances.

Written generically: a method registered later is checked as soon as it is available.
"""

import math

import pytest
from hypothesis import given, settings
from strategies import instances

import layoutopt
from layoutopt import Problem
from layoutopt.generators import generate
from layoutopt.solution import OPTIMALITY_TOLERANCE
from layoutopt.solvers import get_solver

EXACT = [m for m in layoutopt.methods() if get_solver(m).exact and m != "bruteforce"]
HEURISTICS = [m for m in layoutopt.methods() if not get_solver(m).exact]
RELATIVE = 1e-9  # the integer back-ends are exact to their scaling precision, far below this


def check_consistent(graph, costs, sol):
    """What holds for any solution of any method."""
    assert sol.status in ("optimal", "feasible", "infeasible")
    if sol.status == "infeasible":
        assert sol.objective == math.inf
        return
    assert math.isfinite(sol.objective), "a finite status with an inf objective"
    assert set(sol.assignment) == set(graph.nodes)
    assert layoutopt.evaluate(graph, costs, sol.assignment) == sol.objective
    assert sol.lower_bound <= sol.objective
    if sol.status == "optimal":  # the certified bound meets the objective within the tolerance
        problem = Problem.from_graph(graph, costs)
        magnitude = problem.magnitude(problem.assignment_from(sol.assignment))
        assert sol.objective - sol.lower_bound <= OPTIMALITY_TOLERANCE * magnitude


@pytest.mark.parametrize("method", EXACT)
@settings(max_examples=80)
@given(instances())
def test_exact_methods_equal_bruteforce(method, instance):
    graph, costs = instance
    reference = layoutopt.solve(graph, costs, method="bruteforce")
    sol = layoutopt.solve(graph, costs, method=method)
    check_consistent(graph, costs, sol)
    assert sol.status == reference.status
    if reference.status == "optimal":
        assert sol.objective == pytest.approx(reference.objective, rel=RELATIVE, abs=1e-12)
    else:
        assert sol.lower_bound == math.inf, "an exact method must prove infeasibility"


@pytest.mark.parametrize("method", HEURISTICS)
@settings(max_examples=80)
@given(instances())
def test_heuristics_never_beat_the_optimum(method, instance):
    graph, costs = instance
    reference = layoutopt.solve(graph, costs, method="bruteforce")
    sol = layoutopt.solve(graph, costs, method=method)
    check_consistent(graph, costs, sol)
    if reference.status == "infeasible":
        assert sol.status == "infeasible"
        return
    slack = RELATIVE * abs(reference.objective) + 1e-12  # costs may be negative
    if sol.status != "infeasible":
        assert sol.objective >= reference.objective - slack
        assert sol.lower_bound <= reference.objective + slack
    if sol.status == "optimal":
        assert sol.objective == pytest.approx(reference.objective, rel=RELATIVE)


@pytest.mark.parametrize("backend", ["cbc", "highs"])
@settings(max_examples=25)
@given(instances(max_nodes=5))
def test_every_mip_backend_equals_bruteforce(backend, instance):
    graph, costs = instance
    reference = layoutopt.solve(graph, costs, method="bruteforce")
    sol = layoutopt.solve(graph, costs, method="mip", backend=backend)
    check_consistent(graph, costs, sol)
    assert sol.status == reference.status
    if reference.status == "optimal":
        assert sol.objective == pytest.approx(reference.objective, rel=RELATIVE, abs=1e-12)


@pytest.mark.parametrize(("family", "regime"), [("densenet", "hard"), ("random", "normal")])
def test_exact_methods_agree_beyond_bruteforce(family, regime):
    """DNN-shaped instances too large to enumerate, where RN fires and the LP need not be tight."""
    graph, costs = generate(family, nodes=36, max_choices=5, seed=11, regime=regime)
    problem = Problem.from_graph(graph, costs)
    solutions = {m: layoutopt.solve_problem(problem, m) for m in EXACT}
    reference = solutions[EXACT[0]]
    for method, sol in solutions.items():
        assert sol.status == "optimal", method
        assert sol.objective == pytest.approx(reference.objective, rel=RELATIVE), method
        check_consistent(graph, costs, sol)
