"""benchmarks.runtimes on real engines: an exported layoutopt build, ONNX Runtime and OpenVINO (the `dev`
extra installs both) run a small model with the real models' op mix and agree on its outputs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import mobile_fpn_onnx  # tests/tvm is on sys.path

from benchmarks.ort_layers import node_times, openvino_node_times
from benchmarks.runtimes import start_engines, time_side_by_side
from layoutopt.tvm import (
    apply_assignment,
    build,
    export_library,
    extract_layout_graph,
    fixed_layout_assignment,
    load_model,
    prepare,
)
from layoutopt.tvm.evaluate.check import relative_error

pytestmark = pytest.mark.tvm


def test_the_exported_build_onnxruntime_and_openvino_agree_and_are_timed_side_by_side(tmp_path):
    path = mobile_fpn_onnx(tmp_path / "mobile_fpn.onnx")  # dynamic batch, a computed shape, two outputs
    prepared = prepare(load_model(path, [1, 3, 16, 16]))
    graph = extract_layout_graph(prepared, [4, 8], prepared=True)
    nchw8c = apply_assignment(prepared, graph, fixed_layout_assignment(graph, "NCHW8c"))
    library = export_library(build(nchw8c), tmp_path / "mobile_fpn.so")
    inputs = [np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype("float32")]
    with start_engines(path, inputs, {"handed_back": library}, threads=2) as (engines, failed):
        assert failed == {} and list(engines) == ["handed_back", "onnxruntime", "openvino"]
        result = time_side_by_side(engines, rounds=2, runs=2, warmup=1,
                                   versions={name: engine.version for name, engine in engines.items()})
        ours, openvino = engines["handed_back"].outputs(), engines["openvino"].outputs()
        assert [o.shape for o in ours] == [(1, 8, 8, 8), (1, 16)]
        assert relative_error(openvino, ours) < 1e-4
        profiled = node_times(engines["onnxruntime"].profile(2, tmp_path / "ort"))
        openvino_nodes = openvino_node_times(engines["openvino"].profile(2, tmp_path / "ov"))
    assert set(result.errors) == {"handed_back", "openvino"} and result.reference == "onnxruntime"
    assert all(error < 1e-4 for error in result.errors.values()), result.errors
    assert all(len(samples) == 2 and min(samples) > 0 for samples in result.seconds.values())
    assert result.versions["handed_back"].startswith("0.") and result.versions["onnxruntime"]
    assert any(node["op"] in ("Conv", "FusedConv") for node in profiled)
    # OpenVINO's conv nodes carry their shapes: the first conv reads the image
    assert any(node["op"] == "Conv" and node["inputs"][0] == [1, 3, 16, 16] for node in openvino_nodes)
