"""The committed real instances (benchmarks/instances/*.json): valid problems that `auto` solves exactly."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import layoutopt
from benchmarks.instances import regenerate
from benchmarks.networks import NETWORKS, input_shape
from layoutopt import Costs, Problem
from layoutopt.io import read_json

INSTANCES = Path(__file__).resolve().parents[1] / "benchmarks" / "instances"
FILES = sorted(INSTANCES.glob("*.json"))
METADATA = ("network", "input_shape", "units", "target", "tvm", "date", "machine", "measurement")


def test_the_suite_is_not_empty():
    assert FILES, f"no problem file in {INSTANCES}: run python -m benchmarks.instances.regenerate"
    assert {path.stem for path in FILES} <= set(NETWORKS)


@pytest.fixture(scope="module", params=FILES, ids=[path.stem for path in FILES])
def instance(request):
    path = request.param
    graph, costs = read_json(path)
    return path, graph, costs


def test_instance_is_a_valid_measured_problem(instance):
    path, graph, costs = instance
    problem = Problem.from_graph(graph, costs)  # raises ProblemError on anything invalid
    metadata = graph.graph
    assert [key for key in METADATA if key not in metadata] == []
    assert metadata["network"] == path.stem
    assert metadata["units"] == "seconds"
    assert metadata["input_shape"] == input_shape(path.stem)
    assert metadata["tvm"].startswith("0.")
    # every node keeps its layout labels (from_graph checked there is one per choice), and every
    # conv/dense node has a measured kernel
    assert all(labels is not None for labels in problem.labels)
    kinds = dict(graph.nodes(data="kind"))
    assert sum(kind == "target" for kind in kinds.values()) >= 10
    for i, node in enumerate(problem.nodes):
        vector = problem.node_costs[i]
        if kinds[node] == "target":
            assert np.isfinite(vector).any() and (vector[np.isfinite(vector)] > 0).all(), node
        else:
            assert not vector.any(), f"{node}: only kernels cost time on nodes"
    # forbidden pairs are written as the string "inf", never as a bare Infinity token
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    forbidden = [*problem.node_costs, *problem.edges.values()]
    assert ('"inf"' in text) == any(np.isinf(values).any() for values in forbidden)


def test_auto_proves_optimality_and_pbqp_never_beats_it(instance):
    _, graph, costs = instance
    exact = layoutopt.solve(graph, costs, method="auto", time_limit=20)
    assert exact.status == "optimal"
    assert math.isfinite(exact.objective) and exact.objective > 0
    assert exact.objective == pytest.approx(layoutopt.evaluate(graph, costs, exact.assignment), rel=1e-12)
    heuristic = layoutopt.solve(graph, costs, method="pbqp", time_limit=20)
    assert math.isfinite(heuristic.objective)
    assert heuristic.objective >= exact.objective * (1 - 1e-9)


def test_round_costs_keeps_inf_and_four_significant_digits():
    costs = Costs({"a": np.array([0.0123456789, math.inf])}, {("a", "b"): np.array([[0.0, 1.23456e-5]])})
    rounded = regenerate.round_costs(costs, 4)
    assert rounded.nodes["a"].tolist() == [0.01235, math.inf]
    assert rounded.edges[("a", "b")].tolist() == [[0.0, 1.235e-5]]
    assert regenerate.round_costs(costs, 0) is costs


def test_regenerate_rejects_an_unknown_network(capsys):
    with pytest.raises(SystemExit):
        regenerate.main(["--networks", "resnet50_v1,alexnet"])
    assert "alexnet" in capsys.readouterr().err


def test_instance_files_are_compact_json():
    for path in FILES:
        document = json.loads(path.read_text())
        assert document["format"] == "layoutopt-problem"
        assert path.stat().st_size < 5_000_000, f"{path.name} is not small"
