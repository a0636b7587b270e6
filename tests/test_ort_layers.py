"""benchmarks.ort_layers: reading ONNX Runtime's and OpenVINO's profiles and pairing their conv nodes
with our layers."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks.ort_layers import (
    group_of,
    markdown,
    match_convs,
    node_times,
    openvino_node_times,
    paired_rounds,
    summary_cells,
)


def _conv(data, kernel, stride=1, pad=0, groups=1):
    return {"op": "conv2d", "data": data, "kernel": kernel, "strides": [stride, stride],
            "padding": [pad] * 4, "dilation": [1, 1], "groups": groups, "dtype": "float32"}


def _event(node, op, inputs, outputs, micros):
    """One node run as ONNX Runtime's profiler writes it (chrome trace format)."""
    return {"cat": "Node", "name": f"{node}_kernel_time", "dur": micros,
            "args": {"op_name": op, "input_type_shape": [{"float": s} for s in inputs],
                     "output_type_shape": [{"float": s} for s in outputs]}}


@pytest.fixture
def profile(tmp_path):
    first = ([[1, 64, 56, 56], [64, 64, 3, 3], [64]], [[1, 64, 56, 56]])
    strided = ([[1, 64, 56, 56], [64, 64, 3, 3], [64]], [[1, 64, 28, 28]])
    events = [{"cat": "Session", "name": "model_run", "dur": 9000}]
    for scale in (1.5, 1.0, 1.2):  # three runs: each node keeps its fastest
        events += [
            _event("conv_a", "FusedConv", *first, 400 * scale),
            _event("conv_b", "Conv", *strided, 300 * scale),
            _event("conv_c", "FusedConv", *first, 500 * scale),
            _event("reorder", "ReorderOutput", [[1, 64, 56, 56]], [[1, 64, 56, 56]], 50 * scale),
            {"cat": "Node", "name": "conv_a_fence_before", "dur": 1},  # not a kernel time
        ]
    path = tmp_path / "ort.json"
    path.write_text(json.dumps(events))
    return path


def test_node_times_keeps_each_nodes_fastest_run_in_first_run_order(profile):
    nodes = node_times(profile)
    assert [n["node"] for n in nodes] == ["conv_a", "conv_b", "conv_c", "reorder"]
    assert [n["seconds"] for n in nodes] == pytest.approx([400e-6, 300e-6, 500e-6, 50e-6])
    assert nodes[1]["inputs"][1] == [64, 64, 3, 3] and nodes[1]["outputs"] == [[1, 64, 28, 28]]


def test_node_times_take_another_statistic_of_each_nodes_runs(profile, tmp_path):
    nodes = node_times(profile, statistics.median)  # runs at 1.5x, 1.0x and 1.2x
    assert [n["seconds"] for n in nodes] == pytest.approx([480e-6, 360e-6, 600e-6, 60e-6])
    assert "runs" not in nodes[0]
    written = tmp_path / "ov.json"  # OpenVINO's file keeps every run
    written.write_text(json.dumps([{"node": "n", "type": "Eltwise", "exec_type": "jit",
                                    "runs": [3e-6, 1e-6, 2e-6, 5e-6]}]))
    assert openvino_node_times(written)[0]["seconds"] == 1e-6
    assert openvino_node_times(written, statistics.median)[0]["seconds"] == pytest.approx(2.5e-6)


def test_match_pairs_equal_shapes_in_program_order_and_tells_strides_apart(profile):
    same = _conv([1, 64, 56, 56], [64, 64, 3, 3], pad=1)
    layers = [
        {"layer": "l1", "workload": same, "choice": "NCHW16c->NCHW16c[algorithm=winograd,tile=4]",
         "algorithm": "winograd", "in_network": 300e-6},
        {"layer": "l2", "workload": _conv([1, 64, 56, 56], [64, 64, 3, 3], stride=2, pad=1),
         "choice": "NCHW16c->NCHW32c[order=rows]", "algorithm": "direct", "in_network": 350e-6},
        {"layer": "l3", "workload": same, "choice": "NCHW16c->NCHW16c", "algorithm": "direct",
         "in_network": 450e-6},
        {"layer": "l4", "workload": same, "choice": "NCHW16c->NCHW16c", "algorithm": "direct",
         "in_network": 450e-6},
    ]
    records = match_convs(layers, node_times(profile))
    assert [r["engine"] for r in records] == pytest.approx([400e-6, 300e-6, 500e-6, None])
    assert records[3]["engine"] is None and records[3]["engine_op"] is None  # ORT ran only two
    assert [r["algorithm"] for r in records] == ["winograd", "direct", "direct", "direct"]
    assert [r["group"] for r in records[:2]] == ["3x3 winograd", "3x3 s2 direct"]

    text = "\n".join(markdown(records, node_times(profile)))
    assert "3 of 4 conv layers matched" in text
    # all convs: ours 0.3 + 0.35 + 0.45 = 1.1 ms, ORT's 1.2 ms; two of the three faster here
    assert "| all convs | 3 | 1.100 | 1.200 | 1.09x | 2 of 3 |" in text
    assert "other nodes (reorders, pooling, gemm, elementwise): 0.050 ms" in text
    cells = summary_cells(records)
    assert cells[:5] == ["3 of 4", "1.10", "1.20", "1.09x", "2"]
    assert cells[5] == "3x3 s2 direct (+0.05)"  # the one group where ORT is faster


def test_groups_name_kernel_stride_grouping_and_algorithm():
    assert group_of(_conv([1, 64, 56, 56], [256, 64, 1, 1]), "gemm") == "1x1 gemm"
    assert group_of(_conv([1, 32, 56, 56], [32, 1, 3, 3], stride=2, groups=32), "direct") == \
        "3x3 s2 grouped direct"


def test_nothing_matched_says_so():
    layer = {"layer": "l", "workload": _conv([1, 8, 8, 8], [8, 8, 1, 1]), "choice": "NCHW",
             "algorithm": "direct", "in_network": 1e-5}
    records = match_convs([layer], [])
    assert markdown(records, []) == ["No conv layer matched a node of ONNX Runtime's profile."]
    assert summary_cells(records)[0] == "0 of 1"


def test_openvino_conv_nodes_read_as_convs_with_oihw_weights(tmp_path):
    profile = tmp_path / "ov.json"  # as benchmarks.runtimes writes it: each node's fastest run and shapes
    profile.write_text(json.dumps([
        {"node": "Multiply_1", "type": "Convolution", "exec_type": "brgconv", "seconds": 2e-5,
         "inputs": [[1, 3, 9, 9], [4, 3, 3, 3]], "outputs": [[1, 4, 5, 5]]},
        {"node": "Multiply_2", "type": "GroupConvolution", "exec_type": "jit_dw", "seconds": 3e-6,
         "inputs": [[1, 4, 5, 5], [4, 1, 1, 3, 3]], "outputs": [[1, 4, 5, 5]]},
        {"node": "Relu_3", "type": "Eltwise", "exec_type": "jit", "seconds": 1e-6,
         "inputs": [[1, 4, 5, 5]], "outputs": [[1, 4, 5, 5]]}]))
    nodes = openvino_node_times(profile)
    assert nodes[0] == {"node": "Multiply_1", "op": "Conv", "inputs": [[1, 3, 9, 9], [4, 3, 3, 3]],
                        "outputs": [[1, 4, 5, 5]], "seconds": 2e-5}
    assert nodes[1]["op"] == "Conv" and nodes[1]["inputs"][1] == [4, 1, 3, 3]  # depthwise: (O, I/G, KH, KW)
    assert nodes[2]["op"] == "Eltwise"
    layers = [{"layer": "lv", "workload": _conv([1, 3, 9, 9], [4, 3, 3, 3], stride=2, pad=1),
               "choice": "NCHW", "algorithm": "direct", "in_network": 1e-5},
              {"layer": "lv1", "workload": _conv([1, 4, 5, 5], [4, 1, 3, 3], pad=1, groups=4),
               "choice": "NCHW", "algorithm": "depthwise", "in_network": 6e-6}]
    records = match_convs(layers, nodes)
    assert [r["engine"] for r in records] == [2e-5, 3e-6] and records[0]["engine_op"] == "Conv"
    text = "\n".join(markdown(records, nodes, "OpenVINO"))
    assert "| all convs | 2 | 0.016 | 0.023 | 1.44x | 1 of 2 |" in text
    assert "OpenVINO's other nodes (reorders, pooling, gemm, elementwise): 0.001 ms" in text
    # the command reports the other nodes itself, paired round by round with ours: not twice
    assert "other nodes" not in "\n".join(markdown(records, None, "OpenVINO"))


def test_rounds_pair_each_layer_within_its_round():
    """A slow spell of the host slows both sides of its round; the paired ratio holds where the medians
    of each side's times, taken from different rounds, do not."""
    def record(layer, ours, engine):
        return {"layer": layer, "choice": "NCHW8c", "algorithm": "direct", "group": "3x3 direct",
                "in_network": ours, "engine": engine, "engine_op": "Conv"}

    # layer a: the engine 2x slower than us in every round, whatever the spell (1x, 3x, 1.5x)
    rounds = [[record("a", 1.0, 2.0), record("b", 1.0, None)],
              [record("a", 3.0, 6.0), record("b", 2.0, 1.0)],
              [record("a", 1.5, 3.0), record("b", 4.0, 2.0)]]
    combined = paired_rounds(rounds)
    assert [r["layer"] for r in combined] == ["a", "b"]
    assert combined[0]["in_network"] == 1.5 and combined[0]["engine"] == 3.0
    assert combined[0]["ours_rounds"] == [1.0, 3.0, 1.5] and combined[0]["engine_rounds"] == [2.0, 6.0, 3.0]
    # b ran on the engine's side in the last two rounds only
    assert combined[1]["ours_rounds"] == [None, 2.0, 4.0] and combined[1]["engine"] == 1.5
    text = "\n".join(markdown(combined, []))
    assert "| a | NCHW8c | 1500.000 | Conv | 3000.000 | 2.00x [2.00-2.00] |" in text
    assert "| b | NCHW8c | 3000.000 | Conv | 1500.000 | 0.50x [0.50-0.50] |" in text
    assert "paired round by round" in text
    # the group pairs the sums of the rounds where both layers ran: (6 + 1) / (3 + 2), (3 + 2) / (1.5 + 4)
    assert "| 3x3 direct | 2 | 4500.000 | 4500.000 | 1.15x [0.91-1.40] | 1 of 2 |" in text
    assert paired_rounds([]) == []


@pytest.mark.parametrize("option", ["--rounds", "--runs"])
def test_cli_refuses_fewer_than_one_round_or_run(tmp_path, option, capsys):
    from benchmarks.ort_layers import main

    files = [tmp_path / name for name in ("m.onnx", "m.so", "m.solution.json")]
    for path in files:
        path.write_text("")
    with pytest.raises(SystemExit):
        main([str(files[0]), "--library", str(files[1]), "--solution", str(files[2]), option, "0"])
    assert f"{option} must be at least 1, not 0" in capsys.readouterr().err
