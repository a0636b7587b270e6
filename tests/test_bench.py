"""The solver-comparison harness and the tvm-dp baseline (this repository's re-implementation of the
DP idea of TVM's graph tuner)."""

import csv
import math
import os
import time

import networkx as nx
import numpy as np
import pytest

import layoutopt
from layoutopt import bench, topological_dp
from layoutopt.baselines import Baseline, solve_baseline
from layoutopt.bench import InstanceSpec, Record
from layoutopt.generators import generate
from layoutopt.io import write_json

# --- baselines that misbehave, for the isolation tests (imported by name in the worker) -----------


def raises(graph, problem, time_limit):
    raise RuntimeError("solver bug")


def dies(graph, problem, time_limit):
    if graph.graph.get("family") == "densenet":
        os._exit(3)  # what a segfaulting extension looks like from outside
    return layoutopt.solve_problem(problem, "greedy").assignment


def hangs(graph, problem, time_limit):
    time.sleep(60)


RAISES = Baseline("raises", raises, "raises a RuntimeError")
DIES = Baseline("dies", dies, "kills its process on DenseNets")
HANGS = Baseline("hangs", hangs, "never answers")


def test_harness_runs_a_tiny_suite_and_writes_its_outputs(tmp_path):
    suite = bench.synthetic_suite(sizes=[20], families=["resnet", "densenet"], presets=False)
    write_json(tmp_path / "real_one.json", *generate("ssd", nodes=20, max_choices=4, seed=9))
    suite += bench.file_suite(tmp_path)
    assert [s.name for s in suite] == ["resnet_20", "densenet_20", "real_one"]
    records = bench.run(
        suite,
        methods=["greedy", "dp"],
        baselines=["tvm-dp", RAISES, DIES],
        time_limit=5,
        progress=False,
    )
    assert len(records) == 3 * 5
    by = {(r.instance, r.method): r for r in records}
    for inst in ("resnet_20", "densenet_20", "real_one"):
        assert by[(inst, "dp")].status == "optimal"
        assert by[(inst, "dp")].gap == 0.0 and by[(inst, "dp")].lower_bound == by[(inst, "dp")].objective
        assert by[(inst, "tvm-dp")].objective == by[(inst, "dp")].objective
        assert by[(inst, "tvm-dp")].stats["max_live"] >= 2
        assert by[(inst, "greedy")].gap >= 0 and by[(inst, "greedy")].lower_bound == -math.inf
        assert by[(inst, "raises")].status == "error"
        assert "RuntimeError: solver bug" in by[(inst, "raises")].message
    crashed = by[("densenet_20", "dies")]
    assert crashed.status == "crash" and "exit code 3" in crashed.message
    assert crashed.nodes == 20  # the shape is known from the other runners
    assert by[("real_one", "dies")].status == "feasible"  # the worker was restarted after the crash
    assert by[("real_one", "dp")].group == "real"

    paths = bench.write_report(records, tmp_path / "out", time_limit=5)
    assert [p.name for p in paths] == ["solvers.md", "solvers.csv", "solvers.time.png", "solvers.gaps.png"]
    text = paths[0].read_text()
    assert "| instance | n/m | best known | greedy | dp | tvm-dp | raises | dies |" in text
    optimum = by[("densenet_20", "dp")].objective
    assert f"| densenet_20 | 20/34 | {optimum:.7g}* |" in text
    assert "## Topological-order DP" in text and "## Failures" in text
    assert "Date:" in text and "numpy" in text
    with open(paths[1]) as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    assert len(rows) == len(records) and {r["method"] for r in rows} >= {"greedy", "tvm-dp", "dies"}
    assert all(p.stat().st_size > 10_000 for p in paths[2:])  # real PNGs, not empty figures
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hanging_solver_is_killed_and_the_run_goes_on():
    suite = bench.synthetic_suite(sizes=[20], families=["resnet"], presets=False)
    records = bench.run(suite, methods=["greedy"], baselines=[HANGS], time_limit=0.5,
                        progress=False, grace=1.0)
    assert [(r.method, r.status) for r in records] == [("greedy", "feasible"), ("hangs", "killed")]


def test_in_process_run_records_refusals():
    suite = [InstanceSpec("resnet50", family="resnet50")]
    records = bench.run(suite, methods=["bruteforce", "pbqp"], isolate=False, progress=False, time_limit=5)
    assert records[0].status == "refused" and "bruteforce refuses" in records[0].message
    assert records[1].status == "optimal"  # series-parallel: the exact reductions finish it


def _record(instance, method, status, objective, wall_time):
    return Record(instance, "synthetic", 10, 10, method, status, objective=objective, wall_time=wall_time)


def test_summary_figures():
    records = [
        _record("a", "auto", "optimal", 100.0, 0.010), _record("a", "toulbar2", "optimal", 100.0, 0.020),
        _record("a", "pbqp", "feasible", 101.0, 0.001),
        _record("b", "auto", "feasible", 210.0, 1.0), _record("b", "toulbar2", "optimal", 200.0, 0.5),
        _record("b", "pbqp", "feasible", 200.0, 0.002),
        _record("c", "auto", "optimal", 50.0, 0.030), _record("c", "toulbar2", "optimal", 50.0, 0.010),
        _record("c", "pbqp", "error", math.inf, 0.001),
    ]
    summary = bench.summarize(records)
    assert [r.gap for r in records[:3]] == [0.0, 0.0, 0.01]
    assert records[3].gap == pytest.approx(0.05)
    assert math.isnan(records[8].gap)
    pbqp = summary["methods"]["pbqp"]
    assert pbqp["mean_gap"] == pytest.approx(0.005) and pbqp["max_gap"] == pytest.approx(0.01)
    assert pbqp["failures"] == 1 and pbqp["optimal"] == 0
    cmp = summary["auto_vs_toulbar2"]
    assert cmp["proved"] == 2 and cmp["not_proved"] == ["b"]
    assert cmp["ratios"] == {"a": pytest.approx(0.5), "c": pytest.approx(3.0)}
    assert cmp["slower"] == {"c": pytest.approx(3.0)}
    assert cmp["total_ratio"] == pytest.approx(0.040 / 0.030)
    text = bench.markdown(records)
    assert "`auto` proved optimality on 2/3 instances (not on: b)" in text
    assert "c (3.00x)" in text and "`pbqp` gap: mean 0.50%" in text


def test_suites():
    names = [s.name for s in bench.synthetic_suite(sizes=[20, 2000], families=["random"], regimes=["hard"],
                                                   seeds=[0, 1])]
    assert names == ["hard_resnet50_s0", "hard_inception_s0", "hard_densenet121_s0", "hard_ssd_s0",
                     "hard_random_20_s0", "hard_random_2000_s0", "hard_resnet50_s1", "hard_inception_s1",
                     "hard_densenet121_s1", "hard_ssd_s1", "hard_random_20_s1", "hard_random_2000_s1"]
    assert bench.file_suite("/nonexistent") == []
    graph, _ = InstanceSpec("x", family="densenet", nodes=30, seed=2, regime="xhard").load()
    assert graph.number_of_nodes() == 30 and graph.graph["regime"] == "xhard"


# --- the tvm-dp baseline (the DP idea of TVM's graph tuner, re-implemented here) ------------------


@pytest.mark.parametrize("seed", range(6))
def test_tvm_dp_is_exact(seed):
    rng = np.random.default_rng(seed)
    graph = nx.gnp_random_graph(8, 0.35, seed=seed, directed=True)
    graph = nx.DiGraph([(u, v) for u, v in graph.edges if u < v])  # a DAG
    graph.add_nodes_from(range(8))
    nodes = {n: np.where(rng.random(k) < 0.2, np.inf, rng.integers(0, 9, k).astype(float))
             for n, k in zip(graph, rng.integers(1, 4, 8), strict=True)}
    edges = {(u, v): np.where(rng.random((len(nodes[u]), len(nodes[v]))) < 0.2, np.inf,
                              rng.integers(0, 9, (len(nodes[u]), len(nodes[v]))).astype(float))
             for u, v in graph.edges}
    costs = {"nodes": nodes, "edges": edges}
    expected = layoutopt.solve(graph, costs, method="bruteforce")
    solution = solve_baseline("tvm-dp", graph, costs)
    assert solution.status == expected.status
    if expected.status == "optimal":
        assert solution.objective == expected.objective
        assert layoutopt.evaluate(graph, costs, solution.assignment) == expected.objective


def test_tvm_dp_state_counts_and_refusal():
    graph, costs = generate("ssd")
    stats = topological_dp.profile(graph, costs)
    assert stats["max_live"] == 13  # six feature maps and their heads stay open until the concats
    with pytest.raises(topological_dp.StateCapExceeded,
                       match=r"needs 10\^\d+\.\d states \(13 operators") as info:
        solve_baseline("tvm-dp", graph, costs)
    assert info.value.stats == stats and isinstance(info.value, layoutopt.ProblemError)
    resnet = topological_dp.profile(*generate("resnet50"))
    assert resnet["max_live"] == 3 and resnet["max_states"] <= 16**3
    assert topological_dp.profile(*generate("densenet121"))["max_live"] == 26
