"""The Candidate record and the labels of a layout graph: every printed label parses back to its choice."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from layoutopt import ProblemError
from layoutopt.constraints import parse_constraints
from layoutopt.tvm import extract_layout_graph, kernels, models, prepare
from layoutopt.tvm.building.apply import parse_choice
from layoutopt.tvm.graph.graph import Choice, candidate_label
from layoutopt.tvm.kernels.candidate import Candidate
from layoutopt.tvm.measure.cache import CostCache, task_key

pytestmark = pytest.mark.tvm

ALGORITHMS = sorted(algorithm for op, algorithm in kernels.FAMILIES if op == "conv2d")


def assert_label_names_its_choice(labels, k, choice: Choice, node="node"):
    """The label of choice ``k`` parses back to its candidate (as the record, in the graph's plain
    spelling, and as apply reads it), and a pin by that label names choice ``k`` alone."""
    label = labels[k]
    assert Candidate.from_label(label) == choice.record.in_graph_spelling(), label
    assert parse_choice(node, label) == parse_choice(node, dict(choice.candidate)), label
    if choice.record.in_graph_spelling() == choice.record:  # all but a dense layer's "NC"
        assert Candidate.from_label(label).to_json() == dict(choice.candidate), label
    graph = nx.DiGraph()
    graph.add_node(node, choices=list(labels))
    assert parse_constraints(graph, pin={node: label})[0].indices == (k,), label


@st.composite
def workloads(draw):
    """Conv2d workloads of every kind the families take (blocked, 1x1, 3x3, strided, padded output
    channels, depthwise, grouped) and dense layers."""
    if draw(st.integers(0, 5)) == 0:
        features = draw(st.sampled_from([10, 16, 24, 48]))
        return {"op": "dense", "data": [1, 64], "weight": [features, 64], "dtype": "float32"}
    channels = draw(st.sampled_from([3, 8, 12, 16, 32]))
    kind = draw(st.sampled_from(["plain", "depthwise", "grouped"]))
    size = draw(st.sampled_from([1, 3]))
    if kind == "depthwise":
        out_channels, groups = channels, channels
    elif kind == "grouped" and channels % 4 == 0:
        out_channels, groups = draw(st.sampled_from([8, 16])), 4
    else:
        out_channels, groups = draw(st.sampled_from([8, 12, 16, 20, 36, 64])), 1
    pad = draw(st.sampled_from([0, size // 2]))
    return kernels.validate_workload({
        "op": "conv2d", "data": [1, channels, 8, 8], "kernel": [out_channels, channels // groups, size, size],
        "strides": [draw(st.sampled_from([1, 2]))] * 2, "padding": [pad] * 4, "dilation": [1, 1],
        "groups": groups, "dtype": "float32",
        "epilogue": draw(st.sampled_from([[], ["bias", "relu"], ["bias", "add", "relu"]])),
    })


@settings(max_examples=200, deadline=None)
@given(workloads(), st.lists(st.sampled_from([4, 8, 16, 32, 64]), min_size=1, unique=True),
       st.lists(st.sampled_from(kernels.CONV2D_ORDERS), min_size=1, unique=True),
       st.lists(st.sampled_from(ALGORITHMS), min_size=1, unique=True))
def test_every_label_of_a_nodes_choices_parses_back_to_its_candidate(workload, blocks, orders, algorithms):
    if workload["op"] == "conv2d":
        found = kernels.candidates(workload, blocks=blocks, orders=orders, algorithms=algorithms)
    else:
        found = kernels.candidates(workload, blocks=blocks)
    choices = [Choice(candidate) for candidate in found]  # labelled as the graph labels them
    labels = [choice.label for choice in choices]
    assert len(set(labels)) == len(labels)  # one label, one choice
    for k, choice in enumerate(choices):
        assert_label_names_its_choice(labels, k, choice)


@pytest.mark.parametrize("name,make", [
    ("chain", models.chain),
    ("residual", models.residual),
    ("concat3", models.concat3),
    ("concat3-padded", lambda: models.concat3((12, 12, 8), in_channels=16, size=9)),  # 12: "oc_block"
    ("dense_head", models.dense_head),
    ("default", models.default_model),
    ("resnet50", lambda: models.resnet(depth=50)),
])
def test_every_label_of_the_embedded_models_parses_back_to_its_choice(name, make):
    options = {"orders": list(kernels.CONV2D_ORDERS), "algorithms": ALGORITHMS}
    graph = extract_layout_graph(prepare(make()), options, prepared=True)
    seen = set()
    for node in graph.layout_nodes():
        assert graph.nodes[node.name]["choices"] == node.labels
        for k, choice in enumerate(node.choices):
            assert_label_names_its_choice(node.labels, k, choice, node.name)
            seen.add(choice.record.algorithm)
            seen.update(choice.record.knobs)
    wanted = {"direct", "order", *(["oc_block"] if name == "concat3-padded" else [])}
    assert wanted <= seen


# -- the Candidate record --------------------------------------------------------------------------

WORKLOAD = kernels.validate_workload({"op": "conv2d", "data": [1, 32, 8, 8], "kernel": [36, 32, 3, 3],
                                      "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]})
DENSE = kernels.validate_workload({"op": "dense", "data": [1, 64], "weight": [48, 64]})
TARGET, VERSION = '{"kind":"llvm"}', "0.27.0+schedules.5+cold"


@pytest.mark.parametrize(("workload", "candidate", "key"), [
    (WORKLOAD, {"in": "NCHW16c", "out": "NCHW", "oc_block": 16, "algorithm": "winograd", "tile": 4,
                "order": "tiles"},
     '["{\\"kind\\":\\"llvm\\"}","0.27.0+schedules.5+cold"][{"data":[1,32,8,8],"dilation":[1,1],'
     '"dtype":"float32","groups":1,"kernel":[36,32,3,3],"op":"conv2d","padding":[1,1,1,1],"strides":[1,1]},'
     '{"algorithm":"winograd","in":"NCHW16c","oc_block":16,"order":"tiles","out":"NCHW","tile":4}]'),
    (WORKLOAD, {"in": "NCHW8c", "out": "NCHW4c", "order": "rows"},
     '["{\\"kind\\":\\"llvm\\"}","0.27.0+schedules.5+cold"][{"data":[1,32,8,8],"dilation":[1,1],'
     '"dtype":"float32","groups":1,"kernel":[36,32,3,3],"op":"conv2d","padding":[1,1,1,1],"strides":[1,1]},'
     '{"in":"NCHW8c","order":"rows","out":"NCHW4c"}]'),
    (DENSE, {"in": "NC", "out": "NC", "weight": "NK16n"},
     '["{\\"kind\\":\\"llvm\\"}","0.27.0+schedules.5+cold"][{"data":[1,64],"dtype":"float32","op":"dense",'
     '"weight":[48,64]},{"in":"NC","out":"NC","weight":"NK16n"}]'),
])
def test_the_record_gives_back_the_candidate_dict_and_its_cost_cache_key(workload, candidate, key):
    record = Candidate.from_json(candidate)
    assert record.to_json() == candidate
    # the cost cache's key, byte for byte as before the record (keys written by 1a5728c)
    assert CostCache.key(TARGET, VERSION, workload, record.to_json()) == key
    assert task_key(workload, record.to_json()) == task_key(workload, candidate)


def test_every_candidate_of_the_families_round_trips_through_the_record():
    for workload in (WORKLOAD, DENSE):
        options = {"orders": list(kernels.CONV2D_ORDERS)} if workload["op"] == "conv2d" else {}
        for candidate in kernels.candidates(workload, blocks=[4, 8, 16], **options):
            record = Candidate.from_json(candidate)
            assert record.to_json() == candidate
            assert hash(record) == hash(Candidate.from_json(dict(candidate)))
            assert record.algorithm == candidate.get("algorithm", "direct")


def test_the_records_fields():
    record = Candidate.from_json({"in": "NCHW16c", "out": "NCHW", "oc_block": 16, "algorithm": "winograd",
                                  "tile": 4})
    assert (record.in_layout, record.out_layout, record.algorithm) == ("NCHW16c", "NCHW", "winograd")
    assert dict(record.knobs) == {"oc_block": 16, "tile": 4} and record.oc_block == 16
    label = "NCHW16c->NCHW[algorithm=winograd,oc_block=16,tile=4]"
    assert record.label == candidate_label(record.to_json()) == label
    with pytest.raises(TypeError):
        record.knobs["tile"] = 2  # immutable
    assert Candidate("NCHW8c", "NCHW8c").oc_block is None


@pytest.mark.parametrize(("candidate", "message"), [
    ({"in": "NCHW8c"}, "'in' and 'out'"),
    ("NCHW8c->NCHW8c", "'in' and 'out'"),
    ({"in": "NCHW8c", "out": 8}, "out 8 must be a non-empty string"),
    ({"in": "NCHW8c", "out": "NCHW8c", "algorithm": None}, "algorithm None"),
])
def test_bad_candidate_dicts_are_clear_errors(candidate, message):
    with pytest.raises(ProblemError, match=message):
        Candidate.from_json(candidate)


def test_knobs_cannot_hide_the_layouts_or_the_algorithm():
    with pytest.raises(ProblemError, match="are not knobs"):
        Candidate("NCHW8c", "NCHW8c", knobs={"algorithm": "gemm"})
