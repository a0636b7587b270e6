"""The guard (layoutopt.tvm.tune.guard) on hand-made ratios: which build it hands back, never slower than a
build timed beside it, pins and forbids kept, b* named by its composite."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")

from layoutopt.constraints import parse_constraints
from layoutopt.tvm import models
from layoutopt.tvm.evaluate.timing import Ratio
from layoutopt.tvm.graph.extract import extract_layout_graph
from layoutopt.tvm.tune.guard import baseline_builds, fastest_build, guard_rules
from layoutopt.tvm.tune.result import Variant

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def graph():
    return extract_layout_graph(models.chain((16, 16), in_channels=16, size=8),
                                {"blocks": [8, 16], "algorithms": ["direct", "winograd"]})


def _label_index(graph, node: str, label: str) -> int:
    return graph.layout_node(node).labels.index(label)


def _variant(graph, name: str, ratio: float, layout: str) -> Variant:
    """A build timed beside the tuned one: ``ratio`` its latency over the tuned build's."""
    assignment = {node.name: 0 for node in graph.layout_nodes()}
    for conv in ("conv1", "conv2"):
        assignment[conv] = _label_index(graph, conv, f"{layout}->{layout}")
    rounds = [ratio] * 9
    return Variant(name, name, None, assignment=assignment, versus_tuned=Ratio.of(rounds, [1.0] * 9))


def test_the_tuned_build_stays_unless_another_measured_faster(graph):
    slower = {"nchw8c": _variant(graph, "nchw8c", 1.2, "NCHW8c"), "greedy": _variant(graph, "greedy", 1.05,
                                                                                     "NCHW16c")}
    assert fastest_build(graph, slower, {}, [], say=lambda _: None) == "layoutopt"


def test_the_fastest_rival_is_handed_back_named_by_its_composite(graph):
    said: list[str] = []
    variants = {"nchw8c": _variant(graph, "nchw8c", 0.9, "NCHW8c"),
                "nchw16c": _variant(graph, "nchw16c", 0.8, "NCHW16c"),
                "greedy": _variant(graph, "greedy", 0.95, "NCHW8c")}
    variants["best_fixed"] = variants["nchw16c"]
    assert fastest_build(graph, variants, {"best_fixed": "nchw16c"}, [], say=said.append) == "best_fixed"
    assert said and said[0].startswith("best_fixed measured faster than the tuned build (0.800x")


def test_a_faster_build_that_breaks_a_pin_is_passed_over(graph):
    variants = {"nchw16c": _variant(graph, "nchw16c", 0.8, "NCHW16c"),
                "nchw8c": _variant(graph, "nchw8c", 0.9, "NCHW8c")}
    pins = parse_constraints(graph, pin=["conv1=NCHW8c->NCHW8c"])
    said: list[str] = []
    assert fastest_build(graph, variants, {}, pins, say=said.append) == "nchw8c"
    assert "nchw16c measured faster than the tuned build, but breaks a pin or forbid" in said
    forbids = parse_constraints(graph, forbid=["conv2=NCHW8c->NCHW8c", "conv2=NCHW16c->NCHW16c"])
    assert fastest_build(graph, variants, {}, forbids, say=said.append) == "layoutopt"


def test_tvms_default_build_never_competes(graph):
    default = Variant("default", "TVM's default build", None, measured=0.001)
    assert fastest_build(graph, {"default": default}, {}, [], say=lambda _: None) == "layoutopt"


def test_the_guard_times_the_winograd_rule_only_where_winograd_is_offered(graph):
    assert guard_rules(graph) == ["best_fixed", "winograd_fixed"]
    direct = extract_layout_graph(models.chain((16, 16), in_channels=16, size=8),
                                  {"blocks": [8, 16], "algorithms": ["direct"]})
    assert guard_rules(direct) == ["best_fixed"]
    assert baseline_builds(["greedy", "best_fixed"], guard_rules(graph)) == [
        "greedy", "nchw8c", "nchw16c", "best_fixed", "winograd_nchw8c", "winograd_nchw16c", "winograd_fixed"]
