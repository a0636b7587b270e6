"""mip: every backend, a zero relative gap, time limits, clear backend errors, no output."""

import math

import networkx as nx
import pytest
from strategies import frustrated_problem

import layoutopt
from layoutopt import Problem, ProblemError
from layoutopt.generators import generate
from layoutopt.solvers.mip import BACKENDS

BACKEND_NAMES = list(BACKENDS)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_each_backend_finds_the_optimum_of_a_dnn_shaped_instance(backend, capfd):
    graph, costs = generate("densenet", nodes=30, max_choices=4, seed=3, regime="hard")
    problem = Problem.from_graph(graph, costs)
    expected = layoutopt.solve_problem(problem, "dp").objective
    sol = layoutopt.solve_problem(problem, "mip", backend=backend)
    assert sol.status == "optimal" and sol.objective == pytest.approx(expected, rel=1e-12)
    assert sol.stats["backend"] == backend
    assert capfd.readouterr() == ("", "")  # HiGHS prints a banner on stdout unless silenced


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_the_relative_gap_is_zero(backend):
    """An odd cycle of 'differ' preferences (the LP relaxation is loose there) on top of a large
    constant: every assignment is within 1e-4 relative of the optimum, so pywraplp's default gap
    would accept the first one found."""
    graph = nx.cycle_graph(5)
    costs = {"nodes": {n: [1e5 + 0.5 * (n == 0), 1e5] for n in graph},
             "edges": {e: [[1.0, 0.0], [0.0, 1.0]] for e in graph.edges}}
    reference = layoutopt.solve(graph, costs, method="bruteforce")
    sol = layoutopt.solve(graph, costs, method="mip", backend=backend)
    assert sol.status == "optimal" and sol.objective == reference.objective


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_time_limit_returns_an_assignment_and_a_bound(backend):
    problem = frustrated_problem(nodes=40, seed=2)
    sol = layoutopt.solve_problem(problem, "mip", time_limit=0.5, backend=backend)
    assert sol.status == "feasible" and math.isfinite(sol.objective)
    assert sol.lower_bound < sol.objective
    assert sol.message


@pytest.mark.parametrize("backend", ["gurobi", "SCIP", "glop", None])
def test_unknown_backend_lists_the_valid_ones(backend):
    graph = nx.path_graph(2)
    costs = {"nodes": {0: [1.0], 1: [2.0]}, "edges": {(0, 1): [[0.0]]}}
    expected = f"option backend: unknown value {backend!r}; valid values: scip, cbc, highs"
    with pytest.raises(ProblemError, match=expected):
        layoutopt.solve(graph, costs, method="mip", backend=backend)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_proven_infeasibility_is_silent(backend, capfd):
    triangle = nx.cycle_graph(3)
    differ = [[math.inf, 0.0], [0.0, math.inf]]
    costs = {"nodes": {n: [0.0, 1.0] for n in triangle}, "edges": {e: differ for e in triangle.edges}}
    sol = layoutopt.solve(triangle, costs, method="mip", backend=backend)
    assert sol.status == "infeasible" and sol.lower_bound == math.inf
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_node_without_allowed_choice_is_infeasible_when_called_directly(backend):
    # auto calls back-ends on reduced kernels, without the front end's culprit check
    from layoutopt.solvers import get_solver
    from layoutopt.solvers.base import Deadline

    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [math.inf, math.inf], 1: [1.0]},
                                                    "edges": {(0, 1): [[0.0], [0.0]]}})
    mip = get_solver("mip")
    result = mip().solve(problem, Deadline(None), mip.resolve_options({"backend": backend}))
    assert result.assignment is None and result.status == "infeasible" and result.lower_bound == math.inf


def test_no_time_limit_is_never_reported_as_reached(monkeypatch):
    """Issue 13: mip said "time limit reached" when none was set (SCIP stopping short of a proof)."""
    from ortools.linear_solver import pywraplp

    from layoutopt.solvers import get_solver
    from layoutopt.solvers.base import Deadline

    solve = pywraplp.Solver.Solve

    def stopped_short(self, *args):  # the solution and bound SCIP found, reported as only FEASIBLE
        solve(self, *args)
        return pywraplp.Solver.FEASIBLE

    monkeypatch.setattr(pywraplp.Solver, "Solve", stopped_short)
    mip = get_solver("mip")
    problem = frustrated_problem(nodes=6, degree=3, seed=3)
    result = mip().solve(problem, Deadline(None), mip.resolve_options())
    assert result.status == "feasible" and result.message and "time limit" not in result.message


@pytest.mark.parametrize("time_limit", [None, 30.0])
def test_an_infeasible_answer_that_denies_the_warm_start_is_no_proof(monkeypatch, time_limit):
    """CBC answers INFEASIBLE when its time limit stops it before a first solution; that once turned
    a timed-out run into a false proof of infeasibility. Any backend saying so while pbqp holds an
    allowed assignment is wrong, so the warm start is returned with the trivial bound."""
    from ortools.linear_solver import pywraplp

    monkeypatch.setattr(pywraplp.Solver, "Solve", lambda self, *args: pywraplp.Solver.INFEASIBLE)
    problem = frustrated_problem(nodes=6, degree=3, seed=3)
    sol = layoutopt.solve_problem(problem, "mip", time_limit=time_limit, backend="cbc")
    assert sol.status == "feasible" and math.isfinite(sol.objective)
    assert sol.lower_bound == problem.trivial_lower_bound() < sol.objective
    assert "reported infeasible, which is no proof" in sol.message
    assert sol.stats["mip_status"] == pywraplp.Solver.INFEASIBLE and sol.stats["infeasible_not_trusted"]


def test_a_timed_out_cbc_infeasible_answer_without_warm_start_proves_nothing(monkeypatch):
    from ortools.linear_solver import pywraplp

    from layoutopt.solvers import mip as mip_module

    monkeypatch.setattr(pywraplp.Solver, "Solve", lambda self, *args: pywraplp.Solver.INFEASIBLE)
    monkeypatch.setattr(mip_module, "heuristic_assignment", lambda problem, deadline: None)
    problem = frustrated_problem(nodes=6, degree=3, seed=3)
    timed = layoutopt.solve_problem(problem, "mip", time_limit=30.0, backend="cbc")
    assert timed.status == "infeasible" and timed.lower_bound < math.inf and "not proven" in timed.message
    untimed = layoutopt.solve_problem(problem, "mip", backend="cbc")  # the same answer, unlimited: trusted
    assert untimed.status == "infeasible" and untimed.lower_bound == math.inf
