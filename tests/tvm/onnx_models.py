"""Tiny ONNX models built in code (no download) for the tune and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tiny_conv_onnx(path: Path, channels: int = 8, size: int = 8, seed: int = 0) -> Path:
    """conv3x3(4 -> channels) + bias -> relu -> conv1x1 -> add(skip): a residual pair, batch ``N``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, size, size])
    def weight(shape, name):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)

    inits = [weight((channels, 4, 3, 3), "w1"), weight((channels,), "b1"),
             weight((channels, channels, 1, 1), "w2")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "tiny", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def relu_only_onnx(path: Path) -> Path:
    """A model with nothing to tune: one Relu."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path
