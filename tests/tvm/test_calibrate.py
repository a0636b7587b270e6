"""In-network calibration: observed kernels cost what they cost in the network, the rest is scaled."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt.problem import Costs, Problem
from layoutopt.tvm import extract_layout_graph, models
from layoutopt.tvm.evaluate.calibrate import Calibration
from layoutopt.tvm.evaluate.profile import Call, KernelShapes, observe
from layoutopt.tvm.kernels import build_kernel, layout_shape
from layoutopt.tvm.measure.cache import task_key
from layoutopt.tvm.measure.problem import transform_edge_costs, transform_tasks

#: the kernels' argument shapes, worked out once for every test here
SHAPES = KernelShapes()

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def chain():
    """conv1 (8->16) -> conv2 (16->16) with blocks 8 and 16, fake isolated costs: every kernel 1 ms,
    every transform 0.1 ms."""
    graph = extract_layout_graph(models.chain((16, 16), in_channels=8, size=8), [8, 16])
    measured = {task_key(workload, {}): 1e-4 for workload, _ in transform_tasks(graph)}
    nodes = {node.name: np.full(len(node.choices), 1e-3 if node.kind == "target" else 0.0)
             for node in graph.layout_nodes()}
    return graph, Costs(nodes, transform_edge_costs(graph, measured)), measured


def _index(graph, node, label):
    return graph.layout_node(node).labels.index(label)


def _calls(graph, assignment, seconds, transform_seconds):
    """The profile of the build of ``assignment``: each conv's call, then each transform's."""
    calls = []
    for name, value in seconds.items():
        node = graph.layout_node(name)
        shapes = SHAPES(node.workload, node.choices[assignment[name]].candidate)
        calls.append(Call("fused_conv2d_NCHWc_add_relu", tuple(shapes), value))
    for (shape, src, dst), value in transform_seconds.items():
        calls.append(Call("te_layout_transform", (layout_shape(shape, src), layout_shape(shape, dst)), value))
    return calls


def test_the_shapes_profiles_are_matched_against_are_the_built_kernels():
    # worked out from the compute alone (no schedule, no compile), they must be what the build runs
    graph = extract_layout_graph(models.residual(channels=16, size=8),
                                 {"blocks": [8, 16], "algorithms": ["direct", "winograd", "gemm"]})
    shapes = KernelShapes()
    for node in graph.layout_nodes():
        for choice in node.choices if node.kind == "target" else ():
            built = build_kernel(node.workload, dict(choice.candidate)).arg_shapes
            assert shapes(node.workload, choice.candidate) == built, (node.name, choice.label)


def test_observed_kernels_cost_what_they_cost_in_the_network_and_the_rest_is_scaled(chain):
    graph, costs, measured = chain
    calibration = Calibration(graph, costs, measured)
    assignment = {"data": 0, "conv1": _index(graph, "conv1", "NCHW8c->NCHW16c"),
                  "conv2": _index(graph, "conv2", "NCHW16c->NCHW16c"), "output:gv": 0}
    image_in = ((1, 8, 8, 8), "NCHW", "NCHW8c")
    calibration.observe(observe(_calls(graph, assignment, {"conv1": 3e-3, "conv2": 1.5e-3}, {image_in: 4e-4}),
                                graph, assignment, SHAPES))
    assert calibration.observed(assignment) and not calibration.observed({**assignment, "conv1": 0})
    calibrated = calibration.costs()
    conv1, conv2 = calibrated.nodes["conv1"], calibrated.nodes["conv2"]
    # observed: the in-network time; the node's other choices: isolated x the node's ratio (3x, 1.5x)
    assert conv1[assignment["conv1"]] == pytest.approx(3e-3)
    assert conv2[assignment["conv2"]] == pytest.approx(1.5e-3)
    assert np.allclose(np.delete(conv1, assignment["conv1"]), 3e-3)
    assert np.allclose(np.delete(conv2, assignment["conv2"]), 1.5e-3)
    # the observed transform costs what it cost (4x); the others are scaled by that ratio
    image = calibrated.edges["data", "conv1"]
    assert image[0, assignment["conv1"]] == pytest.approx(4e-4)
    assert np.allclose(image[image > 0], 4e-4)
    between = calibrated.edges["conv1", "conv2"]
    assert np.allclose(between[between > 0], 4e-4)
    assert calibration.isolated is costs and np.allclose(costs.nodes["conv1"], 1e-3)  # left alone


def test_a_node_never_observed_takes_its_kinds_ratio(chain):
    graph, costs, measured = chain
    calibration = Calibration(graph, costs, measured)
    assignment = {"data": 0, "conv1": 0, "conv2": 0, "output:gv": 0}
    calibration.observe(observe(_calls(graph, assignment, {"conv1": 2e-3}, {}), graph, assignment, SHAPES))
    calibrated = calibration.costs()
    assert np.allclose(calibrated.nodes["conv2"], 2e-3)  # no call matched conv2: conv2d's ratio, 2x
    assert np.array_equal(calibrated.edges["conv1", "conv2"], costs.edges["conv1", "conv2"])  # none seen


def test_transform_calls_are_matched_by_their_shapes(chain):
    graph, _, _ = chain
    assignment = {"data": 0, "conv1": _index(graph, "conv1", "NCHW8c->NCHW8c"),
                  "conv2": _index(graph, "conv2", "NCHW16c->NCHW16c"), "output:gv": 0}
    calls = _calls(graph, assignment, {}, {((1, 16, 8, 8), "NCHW8c", "NCHW16c"): 5e-5,
                                           ((1, 16, 8, 8), "NCHW4c", "NCHW16c"): 9.0})
    found = observe(calls, graph, assignment, SHAPES).transforms
    # only the transform the assignment implies (8c -> 16c between the convs) is matched
    assert list(found.values()) == [[5e-5]]


def test_a_transform_and_its_reverse_are_told_apart(chain):
    graph, _, _ = chain
    assignment = {"data": 0, "conv1": _index(graph, "conv1", "NCHW8c->NCHW8c"),
                  "conv2": _index(graph, "conv2", "NCHW8c->NCHW8c"), "output:gv": 0}
    # out of conv2 (NCHW8c -> NCHW, 16 channels) and a reverse of the same shapes that no edge implies
    calls = _calls(graph, assignment, {}, {((1, 16, 8, 8), "NCHW8c", "NCHW"): 3e-5,
                                           ((1, 16, 8, 8), "NCHW", "NCHW8c"): 9.0})
    found = observe(calls, graph, assignment, SHAPES).transforms
    assert list(found.values()) == [[3e-5]]  # matched in order, source first: the reverse is not it


def test_a_concat_running_as_its_own_kernel_is_observed_and_costed():
    graph = extract_layout_graph(models.concat3((8, 16, 8), in_channels=8, size=8), [8, 16])
    concat = graph.layout_node("concat")
    assignment = {node.name: 0 for node in graph.layout_nodes()}
    layout = concat.choices[0].out_layout  # NCHW8c
    inputs = [layout_shape(shape, layout) for shape in concat.workload["shapes"]]
    calls = [Call("fused_concatenate", (*inputs, layout_shape((1, 32, 8, 8), layout)), 7e-4),
             Call("fused_concatenate", ((1, 1, 8, 8, 8), (1, 1, 8, 8, 8)), 1.0)]  # no such concat
    assert observe(calls, graph, assignment, SHAPES).kernels == {"concat": 7e-4}
    nodes = {node.name: np.full(len(node.choices), 1e-3 if node.kind == "target" else 0.0)
             for node in graph.layout_nodes()}
    measured = {task_key(workload, {}): 1e-4 for workload, _ in transform_tasks(graph)}
    calibration = Calibration(graph, Costs(nodes, transform_edge_costs(graph, measured)), measured)
    calibration.observe(observe(calls, graph, assignment, SHAPES))
    # measured at 0 alone, observed at 0.7 ms: every layout of the concat now costs its observed time
    assert np.allclose(calibration.costs().nodes["concat"], 7e-4)


def test_a_nodes_ratio_carries_to_the_choices_of_the_same_algorithm_first():
    options = {"blocks": [8, 16], "algorithms": ["direct", "winograd"]}
    graph = extract_layout_graph(models.chain((16, 16), in_channels=8, size=8), options)
    measured = {task_key(workload, {}): 1e-4 for workload, _ in transform_tasks(graph)}
    nodes = {node.name: np.full(len(node.choices), 1e-3 if node.kind == "target" else 0.0)
             for node in graph.layout_nodes()}
    calibration = Calibration(graph, Costs(nodes, transform_edge_costs(graph, measured)), measured)
    conv2 = graph.layout_node("conv2")
    algorithm = [choice.candidate.get("algorithm", "direct") for choice in conv2.choices]
    direct, winograd = algorithm.index("direct"), algorithm.index("winograd")
    for k, seconds in ((direct, 3e-3), (winograd, 1e-3)):  # two builds: direct 3x slower, Winograd as alone
        assignment = {"data": 0, "conv1": 0, "conv2": k, "output:gv": 0}
        calibration.observe(observe(_calls(graph, assignment, {"conv2": seconds}, {}), graph, assignment,
                                    SHAPES))
    calibrated = calibration.costs().nodes["conv2"]
    expected = [3e-3 if a == "direct" else 1e-3 for a in algorithm]
    assert np.allclose(calibrated, expected)


def test_calibration_that_does_not_settle_hands_on_the_cheapest_assignment_profiled(chain):
    from layoutopt.solution import Solution
    from layoutopt.tvm.evaluate.calibrate import calibrated_solution

    graph, costs, measured = chain
    calibration = Calibration(graph, costs, measured)
    first = {"data": 0, "conv1": _index(graph, "conv1", "NCHW8c->NCHW8c"),
             "conv2": _index(graph, "conv2", "NCHW8c->NCHW8c"), "output:gv": 0}
    second = {**first, "conv2": _index(graph, "conv2", "NCHW8c->NCHW16c")}
    third = {**first, "conv1": _index(graph, "conv1", "NCHW8c->NCHW16c")}
    calls = _calls(graph, first, {"conv1": 2e-3, "conv2": 2e-3}, {})
    calibration.observe(observe(calls, graph, first, SHAPES))
    answers = iter([second, third])  # a solver that never picks a profiled assignment

    def solve_costs(_costs):
        return Solution(next(answers), {}, 1e-3, 5e-4, "optimal", "fake")

    def build_and_observe(assignment):  # second: conv2 runs at 1 ms, cheaper than the first build
        calls = _calls(graph, assignment, {"conv1": 2e-3, "conv2": 1e-3}, {})
        calibration.observe(observe(calls, graph, assignment, SHAPES))

    solution, final = calibrated_solution(calibration, 1, build_and_observe, solve_costs,
                                          own=lambda: [first, second])
    assert solution.assignment == second and solution.status == "feasible"
    assert "did not settle in 1 round" in solution.message
    assert solution.lower_bound == 5e-4  # the solver's bound on the calibrated problem stays valid
    problem = Problem.from_graph(graph, final)
    assert solution.objective == problem.evaluate([second[n] for n in problem.nodes])
    assert solution.objective < problem.evaluate([first[n] for n in problem.nodes])


def test_a_profile_keeps_each_calls_fastest_run(monkeypatch):
    """The host's interference only adds time: a call slow in most runs keeps its fastest one."""
    import layoutopt.tvm.evaluate.profile as profile
    from layoutopt.tvm import build
    from layoutopt.tvm.evaluate.timing import random_inputs

    mod = models.chain((8,), in_channels=4, size=8)
    executable, inputs = build(mod), random_inputs(mod)
    per_run = len(profile.profile_calls(executable, inputs, repeat=1))
    readings = {"count": 0, "now": 0.0}

    def fake_counter() -> float:  # a call lasts 1 s, or 6 s in every run but the third (warm-up first)
        index = readings["count"]
        readings["count"] += 1
        run, ends_a_call = index // 2 // per_run, index % 2 == 1
        readings["now"] += (1.0 + (0.0 if run == 3 else 5.0)) if ends_a_call else 0.0
        return readings["now"]

    monkeypatch.setattr(profile.time, "perf_counter", fake_counter)
    calls = profile.profile_calls(executable, inputs, repeat=4)
    assert len(calls) == per_run and all(call.seconds == 1.0 for call in calls)
    # another statistic of the same runs: the median of 6, 6, 1, 6 s
    readings.update(count=0, now=0.0)
    calls = profile.profile_calls(executable, inputs, repeat=4, statistic=statistics.median)
    assert all(call.seconds == 6.0 for call in calls)
