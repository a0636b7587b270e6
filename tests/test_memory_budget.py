"""The memory budget (issue 49): every method honours it or says it found nothing, against brute force.

Exact methods (``auto``, ``cpsat``, ``mip``, ``toulbar2``, ``bruteforce``) must reach the constrained
optimum; the others (``dp`` and ``pbqp`` through the Lagrangian search, ``greedy`` by repair) must stay
within the budget with a certified bound: ``lower_bound <= constrained optimum <= objective``.
"""

import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import instances

import layoutopt
from layoutopt import Problem, ProblemError, bench
from layoutopt.cli import main
from layoutopt.constraints import constrain
from layoutopt.generators import generate
from layoutopt.io import read_json, write_json, write_uai, write_wcsp
from layoutopt.solvers.base import Deadline
from layoutopt.solvers.budget import integer_memory, lagrangian, local_costs_all, repair, smallest_memory

EXACT = [m for m in ("auto", "cpsat", "mip", "toulbar2", "bruteforce") if m in layoutopt.methods()]
BOUNDED = ["dp", "pbqp", "greedy"]


def _options(method: str) -> dict:
    return {"num_workers": 1} if method == "cpsat" else {"second_search": False} if method == "auto" else {}


@st.composite
def budgeted(draw, max_nodes: int = 5, max_choices: int = 3):
    """A small instance with memory figures (integers, or floats some of the time) and a budget drawn
    around the interesting range: below the smallest assignment's memory, at it, between it and the
    unconstrained optimum's, above everything."""
    graph, costs = draw(instances(max_nodes=max_nodes, max_choices=max_choices, inf_share=0.1))
    problem = Problem.from_graph(graph, costs)
    floats = draw(st.booleans())
    memory = {}
    for node, size in zip(problem.nodes, problem.sizes, strict=True):
        if draw(st.integers(0, 5)) == 0:
            continue  # a node without figures holds 0 bytes
        if floats:
            figures = st.floats(0, 50, allow_nan=False, allow_subnormal=False)
            values = draw(st.lists(figures, min_size=size, max_size=size))
        else:
            values = draw(st.lists(st.integers(0, 30), min_size=size, max_size=size))
        memory[node] = values
    constrained = Problem.from_graph(graph, costs, {"nodes": memory})
    free = layoutopt.solve_problem(constrained, "bruteforce")
    low = smallest_memory(constrained).memory
    high = free.memory if free.status == "optimal" else sum(max(v) for v in memory.values())
    if not math.isfinite(low):
        low = 0.0
    kind = draw(st.sampled_from(["between", "between", "between", "smallest", "below", "above", "any"]))
    if kind == "between" and high > low:  # where the budget binds
        budget = draw(st.floats(low, high, exclude_max=True, allow_subnormal=False))
    elif kind == "smallest":
        budget = low
    elif kind == "below":
        budget = draw(st.floats(0, low, allow_subnormal=False)) if low > 0 else 0.0
    elif kind == "above":
        budget = draw(st.floats(high, high + 10))
    else:
        budget = draw(st.integers(0, int(sum(max(v) for v in memory.values())) + 2))
    return graph, costs, {"nodes": memory}, budget


def _reference(graph, costs, memory, budget):
    return layoutopt.solve(graph, costs, method="bruteforce", memory=memory, memory_budget=budget)


def _whole(problem: Problem) -> bool:
    """Whether every engine gets the figures exactly (integers after scaling by a power of two, within
    toulbar2's range): only then must the exact methods prove the constrained optimum. Other figures are
    rounded down, and an answer the rounding let over the budget is repaired: within it, with a valid
    bound, not always proven."""
    memory = integer_memory(problem, 2**30)
    return memory is None or memory.exact


def _check(sol, reference, exact: bool, budget: float) -> None:
    if reference.status == "infeasible":
        assert sol.status == "infeasible"
        return
    optimum = reference.objective
    tolerance = 1e-7 * (abs(optimum) + 1)
    assert sol.lower_bound <= optimum + tolerance
    if sol.status == "infeasible":
        assert not exact, sol
        assert sol.lower_bound < math.inf  # never a false proof
        return
    assert sol.memory <= budget
    assert sol.objective >= optimum - tolerance
    if exact or sol.status == "optimal":
        assert sol.status == "optimal", sol.message
        assert sol.objective == pytest.approx(optimum, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("method", EXACT + BOUNDED)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=budgeted())
# a budget a rounding error below a whole figure: MIP took the 23 within its tolerance, then repaired
@example(case=(nx.empty_graph(1), {"nodes": {0: [1.0, 0.0, math.inf]}, "edges": {}},
               {"nodes": {0: [0, 23, 0]}}, 22.999999999999996))
# a fractional figure made exact by scaling (figures near 2**41): CP-SAT answered "infeasible"
@example(case=(nx.Graph([(0, 3), (0, 4), (1, 2), (1, 4), (2, 3), (2, 4), (3, 4)]),
               {"nodes": {0: [0.0], 1: [0.0, 0.0], 2: [0.0] * 3, 3: [0.0] * 3, 4: [0.0] * 3},
                "edges": {(0, 3): [[0, 0, 0]], (0, 4): [[0, 0, 0]], (1, 4): [[0, 0, 0], [0, 0, 0]],
                          (1, 2): [[0, 0, math.inf], [math.inf, 0, 0]],
                          **{edge: [[0, 0, math.inf], [math.inf, 0, 0], [0, 0, 0]]
                             for edge in ((2, 3), (2, 4), (3, 4))}}},
               {"nodes": {1: [1.4424876831655755, 26.0], 3: [23.0, 9.0, 9.0], 4: [41.0, 0.0, 0.0]}}, 75.0))
def test_every_method_against_brute_force(method, case):
    graph, costs, memory, budget = case
    reference = _reference(graph, costs, memory, budget)
    sol = layoutopt.solve(graph, costs, method, memory=memory, memory_budget=budget, **_options(method))
    whole = _whole(Problem.from_graph(graph, costs, memory, budget))
    exact = method == "bruteforce" or (method in EXACT and whole)
    _check(sol, reference, exact, budget)
    if sol.status != "infeasible":
        problem = Problem.from_graph(graph, costs, memory, budget)
        assert sol.memory == problem.memory_of([sol.assignment[n] for n in problem.nodes])


def test_unconstrained_answer_when_the_budget_binds_nothing():
    graph, costs = generate("resnet", nodes=30, max_choices=4, seed=2)
    memory = {"nodes": {n: np.arange(len(c), dtype=float) * 1e6 for n, c in costs.nodes.items()}}
    free = layoutopt.solve(graph, costs)
    for method in ("auto", "dp", "pbqp", "toulbar2"):
        budgeted = layoutopt.solve(graph, costs, method=method, memory=memory, memory_budget=free.memory
                                   if free.memory is not None else 1e12)
        assert budgeted.objective == free.objective and budgeted.status == "optimal", method


def test_budget_exactly_at_the_smallest_memory():
    rng = np.random.default_rng(0)
    graph = nx.path_graph(6)
    costs = {"nodes": {v: rng.uniform(1, 10, 3) for v in graph},
             "edges": {e: rng.uniform(0, 5, (3, 3)) for e in graph.edges}}
    memory = {"nodes": {v: [30.0, 20.0, 10.0] for v in graph}}
    for method in EXACT + BOUNDED:
        sol = layoutopt.solve(graph, costs, method, memory=memory, memory_budget=60, **_options(method))
        assert sol.status != "infeasible" and sol.memory == 60
        assert all(k == 2 for k in sol.assignment.values())
        below = layoutopt.solve(graph, costs, method, memory=memory, memory_budget=59.5, **_options(method))
        assert below.status == "infeasible" and below.lower_bound == math.inf
        assert below.message == ("infeasible: the smallest assignment needs 6e-05 MB (60 bytes), above the "
                                 "memory budget of 5.95e-05 MB (59.5 bytes)")


def test_forbidden_pairs_raise_the_smallest_memory():
    inf = math.inf
    graph = nx.path_graph(3)
    costs = {"nodes": {v: [1.0, 1.0] for v in graph},
             "edges": {(0, 1): [[inf, 0], [0, inf]], (1, 2): [[inf, 0], [0, inf]]}}
    memory = {"nodes": {v: [1e6, 5e6] for v in graph}}  # the lightest choices (0, 0, 0) are forbidden
    found = smallest_memory(Problem.from_graph(graph, costs, memory))
    assert found.memory == 7e6 and found.proven and found.assignment.tolist() == [0, 1, 0]
    for method in EXACT + BOUNDED:
        sol = layoutopt.solve(graph, costs, method=method, memory=memory, memory_budget=6e6)
        assert sol.status == "infeasible", method
        assert sol.message.startswith("infeasible: the smallest assignment needs 7 MB (7000000 bytes)")


def test_pins_and_forbids_with_a_budget():
    graph = nx.DiGraph([("a", "b"), ("b", "c")])
    for n in graph:
        graph.nodes[n]["choices"] = ["winograd", "direct"]
    costs = {"nodes": {"a": [1.0, 2.0], "b": [1.0, 2.0], "c": [1.0, 2.0]},
             "edges": {("a", "b"): [[0, 0], [0, 0]], ("b", "c"): [[0, 0], [0, 0]]}}
    memory = {"nodes": {n: [40e6, 10e6] for n in graph}}
    pinned = constrain(graph, costs, pin={"a": "winograd"})
    for method in EXACT + BOUNDED:
        sol = layoutopt.solve(graph, pinned, method=method, memory=memory, memory_budget=65e6)
        assert sol.labels == {"a": "winograd", "b": "direct", "c": "direct"} and sol.memory == 60e6, method
        assert layoutopt.solve(graph, pinned, method=method, memory=memory,
                               memory_budget=55e6).status == "infeasible"
    forbidden = constrain(graph, costs, forbid=["b=direct"])
    sol = layoutopt.solve(graph, forbidden, memory=memory, memory_budget=65e6)
    assert sol.labels["b"] == "winograd" and sol.memory == 60e6


@pytest.mark.parametrize(("memory", "budget", "error"), [
    ({"nodes": {0: [1, float("nan")]}}, 10, "node 0: memory contains NaN"),
    ({"nodes": {0: [1, float("inf")]}}, 10, "node 0: memory contains inf"),
    ({"nodes": {0: [1, -2]}}, 10, "node 0: memory contains a negative figure"),
    ({"nodes": {0: [1, 2, 3]}}, 10, "node 0: memory has shape (3,), expected (2,)"),
    ({"nodes": {0: "ab"}}, 10, "node 0: memory"),
    ({"nodes": {7: [1, 2]}}, 10, "memory given for node 7, which is not in the graph"),
    ({"edges": {}}, 10, "memory must be a mapping {'nodes'"),
    ([1, 2], 10, "memory must be a mapping"),
    ({"nodes": {0: [1, 2]}}, -1, "memory_budget must be >= 0"),
    ({"nodes": {0: [1, 2]}}, float("nan"), "memory_budget must be >= 0"),
    ({"nodes": {0: [1, 2]}}, "10", "memory_budget must be a number of bytes"),
    ({"nodes": {0: [1, 2]}}, True, "memory_budget must be a number of bytes"),
    (None, 10, "memory_budget given without memory figures"),
    ({"nodes": {0: [1e308, 1e308], 1: [1e308, 1e308]}}, 10, "memory: the figures are too large"),
])
def test_bad_memory_input(memory, budget, error):
    costs = {"nodes": {0: [1, 2], 1: [3, 4]}, "edges": {(0, 1): [[0, 1], [1, 0]]}}
    with pytest.raises(ProblemError, match=error.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        layoutopt.solve(nx.path_graph(2), costs, memory=memory, memory_budget=budget)


def test_graph_attributes_carry_memory_and_budget():
    graph = nx.path_graph(2)
    graph.nodes[0]["memory"] = [10, 1]
    graph.graph["memory_budget"] = 5
    costs = {"nodes": {0: [1, 2], 1: [3, 4]}, "edges": {(0, 1): [[0, 1], [1, 0]]}}
    sol = layoutopt.solve(graph, costs)
    assert sol.assignment == {0: 1, 1: 0} and sol.memory == 1
    assert layoutopt.solve(graph, costs, memory_budget=float("inf")).assignment == {0: 0, 1: 0}


def test_with_memory_budget_keeps_the_costs_and_figures():
    costs = {"nodes": {0: [1, 2], 1: [3, 4]}, "edges": {(0, 1): [[0, 1], [1, 0]]}}
    problem = Problem.from_graph(nx.path_graph(2), costs, memory={"nodes": {0: [10, 1]}})
    assert layoutopt.solve_problem(problem).memory == 10
    assert layoutopt.solve_problem(problem.with_memory_budget(5)).memory == 1
    with pytest.raises(ProblemError, match="without memory figures"):
        Problem.from_graph(nx.path_graph(2), costs).with_memory_budget(5)


def test_integer_memory_rounds_down_and_says_so():
    costs = {"nodes": {0: [1, 2], 1: [3, 4]}, "edges": {}}
    problem = Problem.from_graph(nx.empty_graph(2), costs, {"nodes": {0: [0.1, 0.3], 1: [2**60, 0]}}, 2**59)
    scaled = integer_memory(problem)
    assert not scaled.exact and scaled.flat.max() < 2**49
    # every assignment within the true budget stays within the integer one
    for x in ([0, 1], [1, 1]):
        assert math.fsum(scaled.flat[[x[0], 2 + x[1]]]) <= scaled.budget


def test_local_costs_match_the_objective():
    graph, costs = generate("densenet", nodes=30, max_choices=4, seed=1)
    problem = Problem.from_graph(graph, costs)
    rng = np.random.default_rng(0)
    x = np.array([rng.integers(k) for k in problem.sizes])
    local = local_costs_all(problem, x)
    start = problem._packing.node_start
    for i in range(0, len(problem), 7):
        for k in range(problem.sizes[i]):
            y = x.copy()
            y[i] = k
            with np.errstate(invalid="ignore"):
                expected = problem.evaluate(y) - problem.evaluate(x) + local[start[i] + x[i]]
            if math.isfinite(expected):
                assert local[start[i] + k] == pytest.approx(expected, rel=1e-9)


def test_repair_reports_failure():
    costs = {"nodes": {0: [1, 2]}, "edges": {}}
    problem = Problem.from_graph(nx.empty_graph(1), costs, {"nodes": {0: [10, 5]}}, 4)
    x = np.array([0])
    assert not repair(problem, x) and problem.memory_of(x) == 5


def test_lagrangian_bound_is_certified_on_a_duality_gap():
    # three choices: the multiplier search meets (0, 0) and (1, 1), the optimum (0, 1) lies above
    # their lines, so the bound stays below it: a gap, and an honest "feasible"
    costs = {"nodes": {0: [1.0, 3.0], 1: [1.0, 2.0]}, "edges": {(0, 1): [[0.0, 1.0], [1.0, 0.0]]}}
    problem = Problem.from_graph(nx.path_graph(2), costs, {"nodes": {0: [50, 10], 1: [50, 10]}}, 60)

    def exact(priced, deadline):
        best = layoutopt.solve_problem(priced, "bruteforce")
        return np.array([best.assignment[n] for n in priced.nodes]), best.lower_bound

    result = lagrangian(problem, exact, Deadline(None), "test")
    assert problem.evaluate(result.assignment) == 4.0 and result.lower_bound == pytest.approx(3.5)
    assert layoutopt.solve_problem(problem, "dp").status == "feasible"
    assert layoutopt.solve_problem(problem, "auto").status == "optimal"


def test_time_limited_budgeted_solve_returns_within_the_budget():
    graph, costs = generate("densenet", nodes=300, seed=1, regime="xhard")
    rng = np.random.default_rng(0)
    memory = {"nodes": {n: np.round(rng.uniform(1e5, 1e6, len(c))) for n, c in costs.nodes.items()}}
    problem = Problem.from_graph(graph, costs, memory)
    free = layoutopt.solve_problem(problem, "pbqp")
    budget = 0.5 * (free.memory + smallest_memory(problem).memory)
    for method in ("auto", "toulbar2", "cpsat", "pbqp", "greedy"):
        sol = layoutopt.solve_problem(problem.with_memory_budget(budget), method, time_limit=1.0)
        assert sol.status in ("optimal", "feasible") and sol.memory <= budget, (method, sol.message)
        assert sol.lower_bound <= sol.objective


# --- files and the command line ---------------------------------------------------------------------


@pytest.fixture
def budgeted_file(tmp_path):
    graph, costs = generate("resnet", nodes=20, max_choices=4, seed=3)
    rng = np.random.default_rng(1)
    memory = {"nodes": {n: rng.uniform(0, 1e6, len(c)) for n, c in costs.nodes.items()}}  # non-dyadic floats
    problem = Problem.from_graph(graph, costs, memory, 1.234e7)
    path = tmp_path / "budgeted.json"
    write_json(path, problem)
    return path, problem


def test_json_round_trips_memory_and_budget_exactly(budgeted_file, tmp_path):
    path, problem = budgeted_file
    document = json.loads(path.read_text())
    assert document["version"] == 2 and document["memory_budget"] == 1.234e7
    graph, costs = read_json(path)
    again = Problem.from_graph(graph, costs)
    assert np.array_equal(again.memory_flat, problem.memory_flat) and again.memory_budget == 1.234e7
    assert layoutopt.solve(graph, costs).objective == layoutopt.solve_problem(problem).objective
    plain = tmp_path / "plain.json"
    write_json(plain, problem.with_memory_budget(None))
    assert "memory_budget" not in json.loads(plain.read_text())
    write_json(plain, *generate("resnet", nodes=20, max_choices=4, seed=3))
    assert json.loads(plain.read_text())["version"] == 1  # no figures: readable by version-1 readers


@pytest.mark.parametrize(("edit", "error"), [
    (lambda d: d["nodes"][0].update(memory=["inf"] * len(d["nodes"][0]["costs"])), "memory contains inf"),
    (lambda d: d["nodes"][0].update(memory=[-1] * len(d["nodes"][0]["costs"])), "negative figure"),
    (lambda d: d["nodes"][0].update(memory=[1]), "memory has shape (1,)"),
    (lambda d: d["nodes"][0].update(memory="big"), "memory: must be a list"),
    (lambda d: d.update(memory_budget="1 GB"), '"memory_budget" must be a number of bytes'),
    (lambda d: d.update(memory_budget=-5), "memory_budget must be >= 0"),
])
def test_bad_memory_in_a_file_names_the_file(budgeted_file, tmp_path, edit, error):
    path, _ = budgeted_file
    document = json.loads(path.read_text())
    edit(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(ProblemError, match=str(bad).replace("(", r"\(") + ".*" + error.replace("(", r"\(")
                       .replace(")", r"\)")):
        read_json(bad)


def test_integer_exports_refuse_a_budget(budgeted_file, tmp_path):
    _, problem = budgeted_file
    for write in (write_wcsp, write_uai):
        with pytest.raises(ProblemError, match="cannot carry a memory budget"):
            write(tmp_path / "x", problem)
        write(tmp_path / "x", problem.with_memory_budget(None))  # the figures alone change nothing


def test_cli_solves_within_the_file_budget_and_the_option(budgeted_file, tmp_path, capsys):
    path, problem = budgeted_file
    output = tmp_path / "solution.json"
    assert main(["solve", str(path), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "status       optimal" in out and "budget 12.34 MB" in out
    assert json.loads(output.read_text())["memory"] <= 1.234e7
    smallest = smallest_memory(problem).memory
    assert main(["solve", str(path), "--memory-budget", str(smallest / 2)]) == 1
    assert "infeasible: the smallest assignment needs" in capsys.readouterr().out
    assert main(["solve", str(path), "--memory-budget", "inf", "--output", str(output)]) == 0
    assert json.loads(output.read_text())["objective"] == layoutopt.solve_problem(
        problem.with_memory_budget(None)).objective
    plain = tmp_path / "plain.json"
    write_json(plain, *generate("resnet", nodes=20, max_choices=4, seed=3))
    capsys.readouterr()
    assert main(["solve", str(plain), "--memory-budget", "1e6"]) == 2
    err = capsys.readouterr().err
    assert "memory_budget given without memory figures" in err and err.count("\n") == 1


def test_the_bench_runs_budgeted_instances_and_baselines_refuse_them():
    suite = bench.budget_suite(bench.synthetic_suite(sizes=[30], families=["resnet"], presets=False), [0.5])
    assert [spec.name for spec in suite] == ["resnet_30_mem50"]
    records = bench.run(suite, methods=["auto", "toulbar2", "dp", "greedy"], baselines=["tvm-dp"],
                        time_limit=10, isolate=False, progress=False)
    by = {r.method: r for r in records}
    assert by["tvm-dp"].status == "refused" and "memory budget" in by["tvm-dp"].message
    assert by["auto"].status == by["toulbar2"].status == "optimal"
    assert by["auto"].objective == by["toulbar2"].objective and by["auto"].gap == 0
    assert by["greedy"].gap >= 0 and by["dp"].lower_bound <= by["auto"].objective
    graph, costs = suite[0].load()
    free = layoutopt.solve(graph, costs, memory_budget=float("inf"))
    assert by["auto"].objective > free.objective  # the budget binds


def test_figures_of_gigabytes_stay_exact_in_auto():
    """toulbar2's knapsack takes figures below 2**31 (larger ones it would round): auto hands whole
    figures beyond that to CP-SAT, which keeps them exact."""
    graph = nx.path_graph(3)
    costs = {"nodes": {v: [1.0, 2.0, 3.0] for v in graph},
             "edges": {e: np.zeros((3, 3)) for e in graph.edges}}
    memory = {"nodes": {v: [5 * 2**30 + 7, 3 * 2**30 + 1, 2**30] for v in graph}}
    budget = (5 * 2**30 + 7) + 2 * (3 * 2**30 + 1)
    sol = layoutopt.solve(graph, costs, memory=memory, memory_budget=budget, second_search=False)
    assert sol.status == "optimal" and sol.objective == 5 and sol.memory == budget
    assert sol.stats["engine"] == "cpsat"
