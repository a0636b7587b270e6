"""build_problem: measured costs of a Relax model's layout graph, ready for layoutopt.solve."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

import layoutopt
from layoutopt.tvm import CostCache, build_problem, extract_layout_graph, models, resolve_target
from layoutopt.tvm._tvm import target_key
from layoutopt.tvm.kernels import layout_transform_workload
from layoutopt.tvm.measure.cache import record_cost
from layoutopt.tvm.measure.problem import MeasureFailure, measure_graph, transform_tasks

pytestmark = pytest.mark.tvm

BLOCKS = [8, 16]  # a restricted candidate set keeps measurement to a few seconds


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory):
    """One cost cache for the module: workloads shared between the tests are measured once."""
    return tmp_path_factory.mktemp("costs") / "costs.jsonl"


@pytest.fixture(scope="module")
def residual(cache_path):
    return build_problem(models.residual(channels=16, size=8), candidates=BLOCKS, cache=cache_path)


def transform_cost(cache_path, shape, src, dst, meta):
    workload = layout_transform_workload(shape, src, dst)
    return record_cost(CostCache(cache_path).get(meta.context, workload, {}))


def test_costs_match_the_graph_and_are_positive_and_finite(residual):
    graph, costs, meta = residual
    assert set(costs.nodes) == set(graph.nodes) and set(costs.edges) == set(graph.edges)
    for node in graph.layout_nodes():
        vector = np.asarray(costs.nodes[node.name])
        assert vector.shape == (len(node.choices),)
        if node.kind == "target":
            assert np.all(np.isfinite(vector)) and np.all(vector > 0), node
            assert vector.max() < 0.1  # seconds: a tiny conv takes microseconds
        else:
            assert np.all(vector == 0), node
    assert meta.failures == () and meta.stats.failed == 0
    assert graph.layout_node("add").kind == "multi" and graph.layout_node("conv1").workload["op"] == "conv2d"
    # conv1 and conv2 differ only by the residual add fused into conv2: measured as built
    assert graph.layout_node("conv1").workload["epilogue"] == ["bias", "relu"]
    assert graph.layout_node("conv2").workload["epilogue"] == ["bias", "add", "relu"]
    kernels = sum(len(node.choices) for node in graph.layout_nodes() if node.kind == "target")
    assert meta.stats.requested == kernels + len(transform_tasks(graph))


def test_edge_entries_are_zero_when_layouts_match_and_measured_transforms_otherwise(residual, cache_path):
    graph, costs, meta = residual
    for (producer, consumer), matrix in costs.edges.items():
        shape = list(graph.layout_edge(producer, consumer).shape)
        for k, (_, out_layout) in enumerate(graph.layout_node(producer).layouts):
            for l, (in_layout, _) in enumerate(graph.layout_node(consumer).layouts):  # noqa: E741
                expected = 0.0 if out_layout == in_layout else transform_cost(
                    cache_path, shape, out_layout, in_layout, meta)
                assert matrix[k, l] == expected, (producer, consumer, out_layout, in_layout)
    assert costs.edges["conv0", "add"][0, 1] > 0  # NCHW8c -> NCHW16c is a real transform


def test_solve_runs_and_agrees_with_bruteforce(residual):
    graph, costs, _ = residual
    best = layoutopt.solve(graph, costs)
    brute = layoutopt.solve(graph, costs, method="bruteforce")
    assert best.status == brute.status == "optimal"
    assert best.objective == pytest.approx(brute.objective, rel=1e-9)
    assert math.isfinite(best.objective) and best.objective > 0
    assert set(best.labels) == set(graph.nodes)


def test_cache_hits_skip_measurement(residual, cache_path):
    graph, costs, _ = residual
    again_graph, again, meta = build_problem(models.residual(channels=16, size=8), candidates=BLOCKS,
                                             cache=cache_path)
    assert meta.stats.measured == 0 and meta.stats.cached > 0
    assert list(again_graph.nodes) == list(graph.nodes)
    for node in graph:
        assert np.array_equal(again.nodes[node], costs.nodes[node])
    for edge in graph.edges:
        assert np.array_equal(again.edges[edge], costs.edges[edge])


def test_concat_and_dense_head_are_measured_and_solvable(cache_path):
    for mod in (models.concat3((8, 16, 8), in_channels=8, size=8), models.dense_head(16, size=8, classes=16)):
        graph, costs, meta = build_problem(mod, candidates=BLOCKS, cache=cache_path)
        assert meta.failures == ()
        targets = [node.name for node in graph.layout_nodes() if node.kind == "target"]
        for node in targets:
            assert np.isfinite(costs.nodes[node]).all() and (np.asarray(costs.nodes[node]) > 0).all(), node
        best = layoutopt.solve(graph, costs)
        assert best.status == "optimal"
        assert best.objective == pytest.approx(layoutopt.solve(graph, costs, method="bruteforce").objective)


def test_two_tensors_on_one_edge_cost_two_transforms(cache_path):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    weight = relax.const(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1), "conv1")
            relu = bb.emit(relax.op.nn.relu(conv), "relu")
            # conv1 reaches concat as two values (an add of the two would follow conv1's layout)
            joined = bb.emit(relax.op.concat([conv, relu], axis=1), "concat")
            out = bb.emit_output(relax.op.nn.relu(joined))
        bb.emit_func_output(out)
    graph, costs, meta = build_problem(bb.get(), candidates=BLOCKS, cache=cache_path)
    assert len(graph.layout_edge("conv1", "concat").values) == 2
    out_layouts = [pair[1] for pair in graph.layout_node("conv1").layouts]
    k, l = out_layouts.index("NCHW16c"), graph.nodes["concat"]["choices"].index("NCHW8c")  # noqa: E741
    single = transform_cost(cache_path, [1, 16, 8, 8], "NCHW16c", "NCHW8c", meta)
    assert costs.edges["conv1", "concat"][k, l] == pytest.approx(2 * single)


def test_failed_measurement_is_infinite_and_reported(cache_path, tmp_path):
    graph, _, meta = build_problem(models.chain((16,), in_channels=8), candidates=BLOCKS, cache=cache_path)
    # a kernel that crashed in an earlier run is in the cache as failed: its choice is forbidden
    failing = {"in": "NCHW8c", "out": "NCHW16c"}
    cache = CostCache(tmp_path / "failed.jsonl")
    for record in CostCache(cache_path):
        cache.put(record)
    cache.put({**meta.context.record_fields(), "workload": graph.layout_node("conv1").workload,
               "candidate": failing, "median": None, "results": [], "error": "worker crashed (SIGSEGV)"})
    graph, costs, meta = build_problem(models.chain((16,), in_channels=8), candidates=BLOCKS, cache=cache)
    index = graph.layout_node("conv1").candidates.index(failing)
    assert costs.nodes["conv1"][index] == math.inf
    assert np.isfinite(np.delete(costs.nodes["conv1"], index)).all()
    assert meta.failures == (MeasureFailure(graph.layout_node("conv1").workload, failing,
                                            "worker crashed (SIGSEGV)"),)
    solution = layoutopt.solve(graph, costs)
    assert solution.status == "optimal" and solution.labels["conv1"] != "NCHW8c->NCHW16c"


def test_bad_inputs_raise_problem_errors_before_measuring(tmp_path):
    with pytest.raises(layoutopt.ProblemError, match="kind 'llvm'"):
        build_problem(models.chain((16,)), target="cuda", cache=tmp_path / "c.jsonl")
    with pytest.raises(layoutopt.ProblemError, match="runner must be"):
        build_problem(models.chain((16,)), runner="local", cache=tmp_path / "c.jsonl")
    with pytest.raises(layoutopt.ProblemError, match="candidates must be"):
        build_problem(models.chain((16,)), candidates=[-4])
    with pytest.raises(layoutopt.ProblemError, match="no 'main'"):
        import tvm

        build_problem(tvm.IRModule({}))
    assert not (tmp_path / "c.jsonl").exists()  # nothing was measured


def test_measure_graph_measures_a_graph_as_extracted_and_build_problem_is_extract_then_measure(residual,
                                                                                              cache_path):
    import inspect

    graph, costs, meta = residual
    again, measured = measure_graph(extract_layout_graph(models.residual(channels=16, size=8), BLOCKS),
                                    cache=cache_path)
    assert measured.stats.measured == 0 and measured.stats.requested == meta.stats.requested
    assert all(np.array_equal(again.nodes[node], costs.nodes[node]) for node in graph)
    assert all(np.array_equal(again.edges[edge], costs.edges[edge]) for edge in graph.edges)
    assert dict(measured.measured) == dict(meta.measured) and measured.context == meta.context
    assert set(measured.seconds) == {"measure"} and set(meta.seconds) == {"extract", "measure"}
    # the one place the target travels: the JSON dict TVM resolved, which the records are keyed by
    assert meta.context.target["kind"] == "llvm"
    assert meta.context.target_key == target_key(resolve_target("llvm"))
    # no flag lets one stage skip another's work: a graph is measured by measure_graph
    assert not {"prepared", "graph"} & set(inspect.signature(build_problem).parameters)


def test_the_measure_metadata_is_a_record_with_its_json(residual):
    _, _, meta = residual
    document = json.loads(json.dumps(meta.to_json()))
    assert document["stats"] == meta.stats.to_json() and document["failures"] == []
    assert document["context"]["target"] == dict(meta.context.target)
    assert document["measured"] == dict(meta.measured)
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.stats = None
