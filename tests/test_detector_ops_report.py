"""benchmarks.detector_ops' report: each call of the builds after is set beside the calls of every other
build and the ONNX Runtime nodes that run the same ops, matched by their inputs' shapes."""

from __future__ import annotations

from benchmarks.detector_ops import logical_shape, markdown
from benchmarks.runtimes import SideBySide


def _node(name, op, inputs, seconds):
    return {"node": name, "op": op, "inputs": inputs, "outputs": [], "seconds": seconds}


def _report():
    before = [  # three resizes, each its own call in NCHW, then a transposed conv
        ["resize2d3", [[1, 24, 10, 10], [1, 24, 80, 80]], 0.001],
        ["resize2d4", [[1, 24, 20, 20], [1, 24, 80, 80]], 0.002],
        ["resize2d5", [[1, 24, 40, 40], [1, 24, 80, 80]], 0.003],
        ["te_layout_transform", [[1, 24, 80, 80], [1, 3, 80, 80, 8]], 0.0005],
        ["fused_conv2d_transpose_add", [[1, 24, 80, 80], [24, 24, 2, 2], [1, 24, 160, 160]], 0.1],
    ]
    after = [  # the three resizes fused with their concat, in NCHW8c
        ["fused_conv2d_transpose_NCHWc_add", [[1, 3, 80, 80, 8], [3, 3, 2, 2, 1, 1, 8, 8],
                                              [1, 3, 160, 160, 8]], 0.0004],
        ["fused_resize2d3_resize2d4_resize2d5_concatenate",
         [[1, 3, 10, 10, 8], [1, 3, 20, 20, 8], [1, 3, 40, 40, 8], [1, 3, 80, 80, 8], [1, 12, 80, 80, 8]],
         0.0001],
    ]
    nodes = [_node("Resize.3", "Resize", [[1, 24, 10, 10]], 0.0001),
             _node("Resize.4", "Resize", [[1, 24, 20, 20]], 0.0002),
             _node("Resize.5", "Resize", [[1, 24, 40, 40]], 0.0003),
             _node("ConvTranspose.0", "ConvTranspose", [[1, 24, 80, 80], [24, 24, 2, 2]], 0.0005)]
    side = SideBySide({"before": [0.3, 0.31], "after": [0.1, 0.11], "onnxruntime": [0.05, 0.05]}, runs=7,
                      warmup=3, load_before=1.0, load_after=1.5, max_load=2.0, errors={"before": 1e-6},
                      reference="onnxruntime", stamp={}, versions={})
    return {"stamp": {"date": "D", "machine": "M", "threads": "T", "versions": "V"}, "before": "abc123",
            "threads": 2, "repeat": 5, "load": [1.0, 1.5],
            "profiles": {"before": {"calls": before, "total": 0.2}, "after": {"calls": after, "total": 0.05}},
            "onnxruntime_nodes": nodes, "onnxruntime_total": 0.002, "side_by_side": side.as_dict()}


def test_calls_are_matched_across_builds_and_to_onnxruntime_by_their_inputs():
    lines = markdown(_report())
    row = next(line for line in lines if line.startswith("| `fused_resize2d3"))
    # before: its three resize calls (6 ms); after: the one fused call; ORT: its three Resize nodes
    assert "| 6.000 | 0.100 |" in row and "Resize.3, Resize.4, Resize.5 | 0.600 |" in row
    row = next(line for line in lines if line.startswith("| `fused_conv2d_transpose"))
    assert "| 100.000 | 0.400 | ConvTranspose.0 | 0.500 |" in row
    assert "| layout transforms | | 0.500 | 0.000 | | |" in lines
    assert "| sum of every call | | 200.000 | 50.000 | every node | 2.000 |" in lines
    assert any(line.startswith("| after | 105.000 | 0.48x") for line in lines)


def test_logical_shapes_of_blocked_tensors():
    assert logical_shape([1, 3, 80, 80, 8]) == (1, 24, 80, 80)
    assert logical_shape([1, 24, 80, 80]) == (1, 24, 80, 80)
