"""Every method honours ``time_limit``: it returns within ``limit * 1.1 + 0.1`` s, model building
included, with its best assignment and a certified bound (or says why it has none).

Issue 13 measured, with ``time_limit=0.5`` on DenseNet-shaped instances: cpsat 1.66 s (300 nodes), mip
14.4 s (cbc), 4.05 s (highs), 1.9 s (scip); dp, bruteforce and greedy ignored the limit. These test the
contract, not speed: without a limit the instances take seconds; the bound is the issue's. A shared
machine can stall any process for a moment, so a solve over the bound is retried once: an overrun that
happens twice is the method's.
"""

import math

import networkx as nx
import numpy as np
import pytest
from strategies import uniform_problem

import layoutopt
from layoutopt import Problem
from layoutopt.generators import generate

pytestmark = pytest.mark.slow


def solve_within(problem: Problem, method: str, limit: float, **options):
    """The solution, checked to arrive within ``limit * 1.1 + 0.1`` s (twice over: see the module)."""
    for _ in range(2):
        sol = layoutopt.solve_problem(problem, method, time_limit=limit, **options)
        if sol.solve_time <= limit * 1.1 + 0.1:
            return sol
    raise AssertionError(f"{method} took {sol.solve_time:.3f} s for {limit} s, twice")


@pytest.fixture(scope="module")
def densenet():
    """Solved by no exact method within half a second (model building alone takes longer for some)."""
    graph, costs = generate("densenet", nodes=600, seed=1, regime="xhard")
    for method in layoutopt.methods():  # imports and first-call costs are not the limit's business
        if method != "bruteforce":
            layoutopt.solve(*generate("resnet", nodes=20, max_choices=3), method=method)
    return Problem.from_graph(graph, costs)


def check_answer(problem: Problem, sol) -> None:
    assert sol.status in ("optimal", "feasible") and math.isfinite(sol.objective)
    assert problem.evaluate([sol.assignment[n] for n in problem.nodes]) == sol.objective
    assert -math.inf < sol.lower_bound <= sol.objective


@pytest.mark.parametrize("method", [m for m in layoutopt.methods() if m not in ("bruteforce", "dp")]
                         + ["mip:cbc", "mip:highs"])
def test_every_method_answers_within_the_limit(densenet, method):
    method, _, backend = method.partition(":")
    options = {"backend": backend} if backend else {}
    sol = solve_within(densenet, method, 0.5, **options)
    if sol.method in ("pbqp", "greedy"):
        assert math.isfinite(sol.objective)
    else:
        check_answer(densenet, sol)
        assert sol.status == "optimal" or sol.message  # a time-limited answer says so


def test_dp_stops_at_the_limit_with_a_bound():
    problem = uniform_problem(nx.grid_2d_graph(4, 60), 16)  # tables of 16**5 entries: ~2 s of elimination
    sol = solve_within(problem, "dp", 0.5)
    check_answer(problem, sol)
    assert sol.status == "feasible" and "dp stopped at the time limit" in sol.message


def test_bruteforce_stops_at_the_limit_with_a_bound():
    problem = uniform_problem(nx.complete_graph(19), 2)  # 2**19 assignments, 190 tables: about 0.2 s
    sol = solve_within(problem, "bruteforce", 0.02)
    check_answer(problem, sol)
    assert sol.status == "feasible" and "time limit reached" in sol.message


def test_greedy_repair_stops_at_the_limit():
    cycle = nx.cycle_graph(2001)  # odd: no 2-colouring, so the repair never succeeds
    differ = np.array([[math.inf, 0.0], [0.0, math.inf]])
    costs = {"nodes": {v: [0.0, 1.0] for v in cycle}, "edges": {e: differ for e in cycle.edges}}
    sol = solve_within(Problem.from_graph(cycle, costs), "greedy", 0.2, max_repair_rounds=2000)
    assert sol.status == "infeasible" and sol.lower_bound < math.inf and sol.message


@pytest.fixture(scope="module")
def budgeted(densenet):  # densenet: the methods warmed up
    """The same instance with memory figures and a budget halfway between the smallest assignment's
    memory and pbqp's unconstrained answer's: the budget binds."""
    from layoutopt.solvers.budget import smallest_memory

    graph, costs = generate("densenet", nodes=600, seed=1, regime="xhard")
    rng = np.random.default_rng(0)
    memory = {"nodes": {n: np.round(rng.uniform(1e5, 1e6, len(c))) for n, c in costs.nodes.items()}}
    problem = Problem.from_graph(graph, costs, memory)
    free = layoutopt.solve_problem(problem, "pbqp")
    return problem.with_memory_budget(0.5 * (free.memory + smallest_memory(problem).memory))


@pytest.mark.parametrize("method", [m for m in layoutopt.methods() if m not in ("bruteforce", "dp")])
def test_every_method_answers_within_the_limit_under_a_budget(budgeted, method):
    sol = solve_within(budgeted, method, 0.5)
    if method == "greedy":  # proves nothing: no bound
        assert sol.status == "feasible" and math.isfinite(sol.objective)
    else:
        check_answer(budgeted, sol)
    assert sol.memory <= budgeted.memory_budget
