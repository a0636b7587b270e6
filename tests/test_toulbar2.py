"""toulbar2: certified bounds, a wall-clock time limit, no global state leaking in, no output."""

import math
import signal
import subprocess
import sys
import time

import networkx as nx
import pytest
from hypothesis import given, settings
from strategies import frustrated_problem, instances

import layoutopt
from layoutopt import Problem
from layoutopt.generators import generate
from layoutopt.solvers import get_solver
from layoutopt.solvers.base import Deadline

pytoulbar2 = pytest.importorskip("pytoulbar2", reason="toulbar2 is an optional extra")


@settings(max_examples=40)
@given(instances(max_nodes=5))
def test_the_bound_is_certified_for_float_costs(instance):
    problem = Problem.from_graph(*instance)
    reference = layoutopt.solve_problem(problem, "bruteforce")
    result = get_solver("toulbar2")().solve(problem, Deadline(None), {})  # its bound, before the front end
    if reference.status == "infeasible":
        assert result.assignment is None and result.lower_bound == math.inf
        return
    assert result.lower_bound <= reference.objective <= problem.evaluate(result.assignment)
    assert problem.evaluate(result.assignment) == pytest.approx(reference.objective, rel=1e-9, abs=1e-12)


def test_time_limit_is_wall_clock_and_returns_incumbent_and_bound():
    problem = frustrated_problem()
    sol = layoutopt.solve_problem(problem, "toulbar2", time_limit=0.25)
    assert sol.status == "feasible" and "time limit" in sol.message
    assert 0 < sol.lower_bound < sol.objective < math.inf
    # toulbar2's own limit counts whole CPU seconds: at least 1 s. The wall-clock alarm stops it at 0.25 s.
    assert sol.solve_time < 0.9
    assert signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)  # timerStop() ran: no late signal


def test_a_tiny_time_limit_still_returns_an_assignment():
    problem = frustrated_problem(seed=1)
    sol = layoutopt.solve_problem(problem, "toulbar2", time_limit=1e-3)
    assert sol.status == "feasible" and math.isfinite(sol.objective)
    assert sol.lower_bound <= sol.objective


def test_global_options_set_elsewhere_do_not_leak_in(capfd):
    graph, costs = generate("densenet", nodes=40, max_choices=5, seed=2)
    problem = Problem.from_graph(graph, costs)
    expected = layoutopt.solve_problem(problem, "dp").objective
    # what another user of pytoulbar2 in this process may have left behind
    option = pytoulbar2.pytb2.option
    option.btdMode, option.verbose, option.showSolutions, option.vac = 1, 1, 1, 1
    option.backtrackLimit = 1
    sol = layoutopt.solve_problem(problem, "toulbar2")
    assert sol.status == "optimal" and sol.objective == pytest.approx(expected, rel=1e-12)
    assert capfd.readouterr() == ("", "")
    assert option.btdMode == 0 and option.verbose == -1


def test_silent_on_timeout_and_infeasibility(capfd):
    layoutopt.solve_problem(frustrated_problem(), "toulbar2", time_limit=0.05)
    triangle = nx.cycle_graph(3)
    differ = [[math.inf, 0.0], [0.0, math.inf]]
    sol = layoutopt.solve(triangle, {"nodes": {n: [0.0, 1.0] for n in triangle},
                                     "edges": {e: differ for e in triangle.edges}}, method="toulbar2")
    assert sol.status == "infeasible" and sol.lower_bound == math.inf
    assert capfd.readouterr() == ("", "")


def test_a_solve_after_a_timeout_is_not_interrupted():
    layoutopt.solve_problem(frustrated_problem(), "toulbar2", time_limit=0.05)
    graph, costs = generate("inception", nodes=60, max_choices=6, seed=4)
    problem = Problem.from_graph(graph, costs)
    sol = layoutopt.solve_problem(problem, "toulbar2")
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(layoutopt.solve_problem(problem, "dp").objective, rel=1e-12)


def test_empty_and_single_choice_problems():
    assert layoutopt.solve(nx.Graph(), {"nodes": {}, "edges": {}}, method="toulbar2").objective == 0.0
    graph = nx.path_graph(3)
    sol = layoutopt.solve(graph, {"nodes": {n: [float(n)] for n in graph},
                                  "edges": {e: [[1.5]] for e in graph.edges}}, method="toulbar2")
    assert sol.status == "optimal" and sol.objective == 6.0


def test_import_layoutopt_does_not_import_the_heavy_solvers():
    code = ("import sys, layoutopt; heavy = {'pytoulbar2', 'ortools', 'tvm'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_incumbent_bounds_the_search_and_is_returned_when_nothing_beats_it():
    graph, costs = generate("densenet", nodes=60, max_choices=6, seed=7)
    problem = Problem.from_graph(graph, costs)
    optimum = layoutopt.solve_problem(problem, "cpsat")
    best = [optimum.assignment[n] for n in problem.nodes]
    toulbar2 = get_solver("toulbar2")()
    proved = toulbar2.solve(problem, Deadline(None), {}, incumbent=best)  # nothing is strictly better
    assert proved.status == "optimal" and list(proved.assignment) == best
    assert proved.lower_bound <= optimum.objective == problem.evaluate(proved.assignment)
    worse = layoutopt.solve_problem(problem, "greedy")
    improved = toulbar2.solve(problem, Deadline(None), {},
                              incumbent=[worse.assignment[n] for n in problem.nodes])
    assert improved.status == "optimal"
    assert problem.evaluate(improved.assignment) == pytest.approx(optimum.objective, rel=1e-12)
    assert worse.objective > optimum.objective


def test_under_a_tight_limit_the_fallback_is_made_before_the_search():
    # building this model takes far more than FALLBACK_SHARE of 50 ms: the fallback is made first,
    # and toulbar2, stopped at the deadline, returns it with its bound
    graph, costs = generate("densenet", nodes=600, seed=1, regime="xhard")
    problem = Problem.from_graph(graph, costs)
    sol = layoutopt.solve_problem(problem, "toulbar2", time_limit=0.05)
    pbqp = layoutopt.solve_problem(problem, "pbqp")
    assert sol.status == "feasible" and "pbqp assignment" in sol.message
    # pbqp's own answer, unless the fallback ran out of its grace too and cut corners (a loaded machine)
    assert pbqp.objective <= sol.objective <= 1.1 * pbqp.objective and sol.lower_bound < sol.objective


def test_a_slow_build_does_not_change_the_search(monkeypatch):
    # whether the fallback is made first (and bounds the search) must not depend on how long the build
    # happened to take: the same call searches the same way (auto's second search relies on it)
    import layoutopt.solvers.toulbar2 as module

    graph, costs = generate("densenet", nodes=150, seed=3, regime="hard")
    problem = Problem.from_graph(graph, costs)
    assert problem.entries * module.BUILD_SECONDS_PER_ENTRY < module.FALLBACK_SHARE * 10  # no fallback first
    runs = [layoutopt.solve_problem(problem, "toulbar2", time_limit=10)]
    scale = module.scale_costs

    def slow_scale(*args, **kwargs):
        time.sleep(0.2)  # a loaded core: 4 % of the limit
        return scale(*args, **kwargs)

    monkeypatch.setattr(module, "scale_costs", slow_scale)
    runs.append(layoutopt.solve_problem(problem, "toulbar2", time_limit=10))
    assert runs[0].status == runs[1].status == "optimal"
    assert runs[0].stats["nodes"] == runs[1].stats["nodes"] > 1
    assert runs[0].assignment == runs[1].assignment
