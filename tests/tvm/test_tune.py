"""tune_and_build end to end on a tiny model, the report, model loading and its errors."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import relu_only_onnx, tiny_conv_onnx  # tests/tvm is on sys.path (rootdir-less tests)

import layoutopt
from layoutopt import MissingExtraError, ProblemError
from layoutopt.tvm import load_model, models, tune_and_build
from layoutopt.tvm.building.apply import count_layout_transforms, expected_transforms
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.tune.report import write_report

pytestmark = pytest.mark.tvm


#: blocks {4, 8, 16}, each blocked direct conv in both loop orders (Winograd: its own test below)
CANDIDATES = {"blocks": [4, 8, 16], "orders": ["oc", "rows"], "algorithms": ["direct"]}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The residual block, tuned over :data:`CANDIDATES` with every baseline."""
    cache = tmp_path_factory.mktemp("tune") / "costs.jsonl"
    mod = models.residual(channels=16, size=8)
    return tune_and_build(mod, method="pbqp", cache=cache, candidates=CANDIDATES,
                          baselines=("nchw16c", "nchw16c_tuned", "greedy", "default"), repeat=2), cache


def test_tuned_build_matches_the_untouched_model_and_its_prediction(tuned):
    result, _ = tuned
    graph, solution = result.graph, result.solution
    # pbqp is exact on this graph; only calibration can leave the answer feasible: when its noisy
    # in-network profiles keep changing the choice for its 2 rounds, it hands on the cheapest
    # assignment profiled, and says so (calibrate.calibrated_solution)
    settled = solution.status == "optimal"
    if not settled:
        assert solution.status == "feasible"
        assert solution.message.startswith("in-network calibration did not settle in 2 round(s)")
        assert solution.lower_bound <= solution.objective
    assert result.tuned.max_relative_error < 1e-4
    # the predicted latency is the problem's objective for the applied assignment
    assert math.isclose(result.tuned.predicted, solution.objective, rel_tol=1e-12)
    assert result.tuned.transforms == count_layout_transforms(result.tuned.module)
    assert result.tuned.transforms == expected_transforms(graph, solution.assignment)
    assert result.tuned.measured > 0
    # an exact solution is never predicted slower than a baseline's assignment
    for name in ("nchw16c", "nchw16c_tuned", "greedy"):
        if settled:
            assert result.tuned.predicted <= result.baselines[name].predicted + 1e-12
        assert result.baselines[name].max_relative_error < 1e-4
    assert result.baselines["default"].measured > 0
    assert result.speedup("default") == result.baselines["default"].measured / result.tuned.measured


def test_the_guard_hands_back_the_fastest_build_timed(tuned):
    result, _ = tuned
    members = {name: result.baselines[name] for name in ("nchw8c", "nchw16c")}
    best = result.baselines["best_fixed"]
    fastest = min(members.values(), key=lambda variant: variant.versus_tuned.median)
    # b* is the faster member, as measured round by round in the same interleaved rounds
    assert best.measured == fastest.measured and best.assignment == fastest.assignment
    assert fastest.name in best.description
    assert "winograd_fixed" not in result.baselines  # no conv offers Winograd here
    # the build handed back is never slower, round by round, than any build timed beside it (the guard's
    # choice on hand-made ratios: test_guard.py)
    expected = result.chosen
    handed_back = result.tuned if expected == "layoutopt" else result.baselines[expected]
    assert count_layout_transforms(result.module) == handed_back.transforms
    timed = [v for v in result.baselines.values() if v.name != "default"]
    if expected == "layoutopt":
        assert all(v.versus_tuned.median >= 1.0 for v in timed)
    else:
        assert expected not in ("nchw8c", "nchw16c")  # a member of b* is named by its composite
        assert handed_back.versus_tuned.median < 1.0
        assert all(handed_back.versus_tuned.median <= v.versus_tuned.median for v in timed)
    for variant in timed:  # the ratio and its 95 % interval, paired with the tuned build's rounds
        ratio = variant.versus_tuned
        assert ratio.low <= ratio.median <= ratio.high and ratio.rounds >= 2
        assert result.speedup(variant.name) == ratio.median
    assert f"handed back: {expected}" in result.summary()
    for variant in result.variants():
        if variant.name != "default":
            low, high = variant.spread
            assert low <= variant.measured <= high


def test_without_the_guard_the_tuned_build_is_handed_back():
    result = tune_and_build(models.chain((8,), in_channels=4, size=8), method="pbqp", candidates=[4, 8],
                            baselines=(), guard=False, repeat=1, profile=False, check=False,
                            calibrate=0)
    assert result.chosen == "layoutopt" and not result.baselines


def test_with_winograd_choices_the_guard_also_times_the_fixed_rule(tmp_path):
    mod = models.residual(channels=16, size=8)
    result = tune_and_build(mod, method="dp", cache=tmp_path / "costs.jsonl", baselines=(),
                            candidates={"blocks": [8, 16], "algorithms": ["direct", "winograd"]},
                            repeat=2, profile=False, calibrate=0)
    rule = result.baselines["winograd_fixed"]
    assert rule.description.rsplit(": ", 1)[-1] in ("winograd_nchw8c", "winograd_nchw16c")
    chosen = [result.graph.choice(node, k).candidate for node, k in rule.assignment.items()]
    assert any(c.get("algorithm") == "winograd" for c in chosen)
    assert all(v.max_relative_error < 1e-4 for v in result.variants() if v.name != "default")
    ratios = [v.versus_tuned.median for v in result.baselines.values() if v.versus_tuned is not None]
    if result.chosen == "layoutopt":
        assert min(ratios) >= 1.0
    else:
        assert result.baselines[result.chosen].versus_tuned.median == min(ratios) < 1.0


def test_layer_table_lists_every_tuned_op_with_its_choice(tuned):
    result, _ = tuned
    graph = result.graph
    problem_nodes = [node.name for node in graph.layout_nodes() if node.decides]
    rows = {layer.node: layer for layer in result.layers}
    assert set(problem_nodes) <= set(rows)
    for node in problem_nodes:
        choice = graph.nodes[node]["choices"][result.solution.assignment[node]]
        assert rows[node].choice == choice
        assert rows[node].best_kernel_time <= rows[node].kernel_time


def test_profile_times_every_kernel_and_transform_of_the_build_in_the_network(tuned):
    result, _ = tuned
    graph = result.graph
    for variant in [result.tuned, result.baselines["nchw16c"], result.baselines["greedy"]]:
        rows = {row.category: row for row in variant.breakdown}
        # one fused call per conv (its epilogue inside), one call per inserted layout_transform
        convs = sum(1 for node in graph.layout_nodes() if node.workload.get("op") == "conv2d")
        assert rows["conv2d"].calls == convs
        assert rows["layout_transform"].calls == variant.transforms
        assert all(row.measured > 0 for row in rows.values())
        # the predicted shares add up to the objective of the variant's assignment
        predicted = sum(row.predicted for row in rows.values() if row.predicted is not None)
        assert math.isclose(predicted, variant.predicted, rel_tol=1e-9)
        modelled = ("conv2d", "dense", "layout_transform")
        outside = {name: row for name, row in rows.items() if name not in modelled}
        assert "vm builtins" in outside and all(row.predicted is None for row in outside.values())
    assert result.baselines["default"].breakdown is None  # timed once, not profiled
    # every conv layer of the tuned build is matched to its kernel's call
    convs = {node.name for node in graph.layout_nodes() if node.workload.get("op") == "conv2d"}
    timed = {layer.node: layer.in_network for layer in result.layers if layer.in_network is not None}
    assert convs <= set(timed) and all(t > 0 for t in timed.values())


def test_fixed_layout_baseline_takes_nchw16c_where_it_fits(tuned):
    result, _ = tuned
    graph = result.graph
    assignment = fixed_layout_assignment(graph, "NCHW16c")
    assert assignment == result.baselines["nchw16c"].assignment
    assert graph.layout_node("conv1").layouts[assignment["conv1"]] == ("NCHW16c", "NCHW16c")
    # conv0 reads the 3-channel image: its nearest input block is 3
    assert graph.layout_node("conv0").layouts[assignment["conv0"]] == ("NCHW3c", "NCHW16c")
    # ... in the default schedule; the tuned variant takes the same layouts in the faster loop order
    assert all("order" not in graph.choice(n, k).candidate for n, k in assignment.items())
    tuned_schedules = result.baselines["nchw16c_tuned"].assignment
    for node, k in tuned_schedules.items():
        layouts, cost = graph.layout_node(node).layouts, result.isolated_costs.nodes[node]
        assert layouts[k] == layouts[assignment[node]]
        assert cost[k] == min(cost[j] for j in range(len(layouts)) if layouts[j] == layouts[k])
    # chosen on the kernels' own measurements: never dearer than the default schedules there
    isolated = {name: layoutopt.evaluate(graph, result.isolated_costs, result.baselines[name].assignment)
                for name in ("nchw16c", "nchw16c_tuned")}
    assert isolated["nchw16c_tuned"] <= isolated["nchw16c"]


def test_a_rerun_with_the_cache_measures_nothing(tuned):
    result, cache = tuned
    again = tune_and_build(models.residual(channels=16, size=8), method="pbqp", cache=cache,
                           candidates=CANDIDATES, baselines=(), repeat=1)
    # the same measurements, from the cache (the calibrated solution may differ: profiles are noisy)
    assert again.meta.stats.measured == 0
    for node, vector in result.isolated_costs.nodes.items():
        assert np.array_equal(again.isolated_costs.nodes[node], vector)
    assert again.timings["measure"] < result.timings["measure"]


def test_report_has_tables_and_plot(tuned, tmp_path):
    result, _ = tuned
    paths = write_report(result, tmp_path / "report", model="residual")
    text = paths["markdown"].read_text()
    assert "| layoutopt |" in text and "| nchw16c |" in text and "tvm 0." in text
    assert "conv1" in text
    assert "## Where the time goes" in text and "| conv2d |" in text
    assert "Check: outputs checked against the untouched model computed in float64" in text
    assert "Timing: 2 interleaved rounds" in text or "Timing: 4 interleaved rounds" in text
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_onnx_model_tunes_with_a_given_input_shape(tmp_path):
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx"), input_shape=[1, 4, 8, 8])
    result = tune_and_build(mod, method="pbqp", candidates=[4, 8], baselines=(), repeat=1)
    assert result.tuned.max_relative_error < 1e-4
    assert {layer.op for layer in result.layers} >= {"relax.nn.conv2d", "relax.add"}


def test_relative_error():
    assert relative_error([np.ones(3)], [np.ones(3)]) == 0.0
    with pytest.raises(ProblemError, match="shape"):
        relative_error([np.ones(3)], [np.ones(4)])


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([1, 3, 8, 8], "does not fit"),
        ([1, 4, 8], "does not fit"),
        ({"y": [1, 4, 8, 8]}, "no input named 'y'"),
        ([1, 0, 8, 8], "positive"),
    ],
)
def test_wrong_input_shape_is_a_clear_error(tmp_path, shape, message):
    path = tiny_conv_onnx(tmp_path / "tiny.onnx")
    with pytest.raises(ProblemError, match=message):
        load_model(path, input_shape=shape)


def test_symbolic_batch_needs_an_input_shape(tmp_path):
    with pytest.raises(ProblemError, match="symbolic"):
        load_model(tiny_conv_onnx(tmp_path / "tiny.onnx"))


def test_model_with_no_supported_op_is_a_clear_error(tmp_path):
    mod = load_model(relu_only_onnx(tmp_path / "relu.onnx"))
    with pytest.raises(ProblemError, match="no supported op"):
        tune_and_build(mod, baselines=())


def test_bad_model_files(tmp_path):
    with pytest.raises(ProblemError, match="does not exist"):
        load_model(tmp_path / "missing.onnx")
    (tmp_path / "model.txt").write_text("x")
    with pytest.raises(ProblemError, match="unknown format"):
        load_model(tmp_path / "model.txt")
    (tmp_path / "broken.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(ProblemError, match=r"broken\.onnx"):
        load_model(tmp_path / "broken.onnx", input_shape=[1, 4, 8, 8])


def test_default_model_needs_no_file():
    mod = load_model(None)
    assert [int(d) for d in mod["main"].params[0].ty.shape][:2] == [1, 3]
    with pytest.raises(ProblemError, match="model file"):
        load_model(None, input_shape=[1, 3, 8, 8])


def test_unknown_baseline_is_refused():
    with pytest.raises(ProblemError, match="unknown baseline"):
        tune_and_build(models.chain(), baselines=("fastest",))


def test_missing_tvm_extra_is_a_clear_error(monkeypatch):
    for name in list(sys.modules):
        if name == "tvm" or name.startswith(("tvm.", "layoutopt.tvm")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tvm", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'layoutopt\[tvm\]'"):
        import layoutopt.tvm  # noqa: F401
