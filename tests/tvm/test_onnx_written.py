"""benchmarks.onnx_written: ResNet-50 and VGG-16 written node by node in ONNX import into TVM, have
every conv as a layout choice, and compute the same outputs in blocked layouts as their reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from benchmarks import onnx_written
from layoutopt.tvm import load_model
from layoutopt.tvm.building.apply import apply_assignment
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import build
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import run
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.graph.extract import extract_layout_graph

pytestmark = pytest.mark.tvm


# onnx 1.23's ReferenceEvaluator gets BatchNormalization wrong (0.05 off numpy's and ONNX Runtime's
# y = scale * (x - mean) / sqrt(var + eps) + bias on a 4-channel case), so ResNet-50's outputs are
# checked against TVM's build of the untouched import, which matches ONNX Runtime at full size
@pytest.mark.parametrize(("writer", "kwargs", "convs", "adds", "reference"), [
    (onnx_written.resnet50, {"width": 4, "size": 32, "classes": 10}, 53, 16, "tvm"),
    (onnx_written.vgg16, {"width": 2, "size": 32, "classes": 10, "hidden": 16}, 13, 0, "onnx"),
])
def test_written_models_compute_their_reference_in_blocked_layouts(tmp_path, writer, kwargs, convs, adds,
                                                                   reference):
    import onnx
    import tvm
    from onnx.reference import ReferenceEvaluator

    path = writer(tmp_path / "model.onnx", **kwargs)
    assert not list(tmp_path.glob("*.partial"))
    proto = onnx.load(str(path))
    op_types = [node.op_type for node in proto.graph.node]
    assert (op_types.count("Conv"), op_types.count("Add")) == (convs, adds)
    data = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype("float32")
    imported = load_model(path, [1, 3, 32, 32])
    if reference == "onnx":
        expected = ReferenceEvaluator(proto).run(None, {"input": data})
    else:
        expected = run(tvm.compile(imported, target=tvm.target.Target({"kind": "llvm"})), [data])
    assert expected[0].shape == (1, 10) and np.isfinite(expected[0]).all()

    mod = prepare(imported)
    graph = extract_layout_graph(mod, [4, 8], prepared=True)
    targets = [node.op for node in graph.layout_nodes() if node.kind == "target"]
    assert targets.count("relax.nn.conv2d") == convs
    for layout in ("NCHW4c", "NCHW8c"):
        outputs = run(build(apply_assignment(mod, graph, fixed_layout_assignment(graph, layout))), [data])
        assert relative_error(outputs, expected) < 1e-4, layout


def test_vgg16_refuses_a_size_its_pools_cannot_halve(tmp_path):
    with pytest.raises(ValueError, match="divisible by 32, not 40"):
        onnx_written.vgg16(tmp_path / "vgg.onnx", size=40)
    assert not list(tmp_path.iterdir())
