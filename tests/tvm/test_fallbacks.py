"""Every function of a build is scheduled: the builds of the test models take no fallback, and a
function no rule covers (unscheduled, or serial) is named, in the build and in the tune's summary."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")

from onnx_models import mobile_fpn_onnx, tiny_conv_onnx  # tests/tvm is on sys.path

from layoutopt.tvm import load_model, models, tune_and_build
from layoutopt.tvm.building.apply import apply_assignment
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import compile_module
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.graph.extract import extract_layout_graph
from layoutopt.tvm.kernels import module as module_rules

pytestmark = pytest.mark.tvm


def _models(tmp_path):
    yield "chain", models.chain((16, 32), in_channels=8, size=8)
    yield "concat3", models.concat3((8, 16, 8), in_channels=8, size=8)
    yield "dense_head", models.dense_head()
    yield "default", models.default_model()
    yield "mobile_fpn", load_model(mobile_fpn_onnx(tmp_path / "mobile.onnx"), [1, 3, 16, 16])


@pytest.mark.parametrize("layout", ["NCHW", "NCHW8c", "NCHW16c"])
def test_the_builds_of_the_test_models_take_no_fallback(tmp_path, layout):
    for name, mod in _models(tmp_path):
        mod = prepare(mod)
        graph = extract_layout_graph(mod, {"algorithms": ["direct", "winograd", "gemm"]}, prepared=True)
        assignment = fixed_layout_assignment(graph, layout)
        compiled = compile_module(apply_assignment(mod, graph, assignment), "llvm")
        assert compiled.fallbacks == (), (name, [f.describe() for f in compiled.fallbacks])


def test_a_function_no_rule_covers_is_named_unscheduled(tmp_path, monkeypatch):
    import tvm

    def failing(sch, names):
        raise tvm.s_tir.ScheduleError("no rule for this one")

    monkeypatch.setattr(module_rules, "schedule_generic", failing)
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx"), [1, 4, 8, 8])
    compiled = compile_module(mod, "llvm", fuse=False)
    assert compiled.fallbacks and all(f.reason.startswith("unscheduled (") for f in compiled.fallbacks)
    assert {f.symbol for f in compiled.fallbacks} >= {"relu"}


def test_a_function_scheduled_without_a_parallel_loop_is_named_serial(tmp_path, monkeypatch):
    monkeypatch.setattr(module_rules, "schedule_generic", lambda sch, names: None)  # schedules nothing
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx"), [1, 4, 8, 8])
    compiled = compile_module(mod, "llvm", fuse=False)
    serial = [f for f in compiled.fallbacks if f.reason == "serial (no parallel loop)"]
    assert "relu" in {f.symbol for f in serial}


def test_the_summary_names_the_fallbacks_of_the_build_handed_back(tmp_path, monkeypatch):
    monkeypatch.setattr(module_rules, "schedule_generic", lambda sch, names: None)
    # pinned blocked: the build handed back transforms the input and output (generic functions) whatever
    # the timings say; unpinned, a build in the model's own layout may have nothing generic to name
    result = tune_and_build(models.chain((8,), in_channels=4, size=8), method="dp", candidates=[4, 8],
                            baselines=(), guard=False, repeat=1, calibrate=0, cache=tmp_path / "c.jsonl",
                            pin={"conv1": "NCHW4c->NCHW4c"})
    fell_back = result.tuned.fallbacks
    assert fell_back and all(f.seconds is not None and f.seconds >= 0 for f in fell_back)  # profiled
    line = next(line for line in result.summary().splitlines()
                if line.startswith("functions no schedule rule covered:"))
    assert all(f.symbol in line for f in fell_back) and "ms in the network" in line
