"""The memory estimate: a model too large to tune is refused, with the estimate and the limit, before any
input or activation is allocated."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("tvm")

from onnx_models import tiny_conv_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm import load_model
from layoutopt.tvm.building import memory
from layoutopt.tvm.building.memory import available_memory, check_memory, estimate_memory

pytestmark = pytest.mark.tvm

#: the inputs 6.4 GB, their float64 draw 12.8 GB, and the last add twice: 3 tensors of 1x8x20000x20000
HUGE_GB = 6.4 + 12.8 + 2 * 3 * 12.8


def test_the_estimate_counts_the_inputs_their_draw_the_weights_and_the_largest_op_twice(tmp_path):
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx"), [2, 4, 8, 8])
    estimate = estimate_memory(mod)
    assert estimate.inputs == 2 * 4 * 8 * 8 * 4 and estimate.drawn == 2 * estimate.inputs  # float64
    assert estimate.weights == (8 * 4 * 3 * 3 + 8 + 8 * 8) * 4  # both convs' weights and the bias
    # the largest op is the residual add: two (2, 8, 8, 8) float32 tensors in, one out
    assert estimate.largest_op_bytes == 3 * 2 * 8 * 8 * 8 * 4 and "(relax.add)" in estimate.largest_op
    assert estimate.total == 2048 + 4096 + 1440 + 2 * 12288


def test_a_model_too_large_for_the_limit_is_refused_with_the_estimate_and_the_limit(tmp_path):
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx", size=20000), [1, 4, 20000, 20000])
    with pytest.raises(ProblemError) as refused:
        check_memory(mod, limit=8 * 10**9)
    message = str(refused.value)
    assert message.startswith(f"the model needs at least {HUGE_GB:.3g} GB of memory to tune, above the 8 GB "
                              "available (the limit given); give it a smaller input shape")
    assert "inputs 6.4 GB + their float64 draw 12.8 GB + weights 1.44 kB + 2 x 38.4 GB" in message
    assert "largest op, gv (relax.add)" in message and "\n" not in message
    assert check_memory(mod, limit=10**12).total == pytest.approx(HUGE_GB * 1e9, rel=1e-6)


def test_the_limit_is_the_memory_available_and_no_check_when_it_is_unknown(tmp_path, monkeypatch):
    if sys.platform.startswith("linux"):
        available, source = available_memory()
        assert available > 0 and source == "MemAvailable in /proc/meminfo"
    mod = load_model(tiny_conv_onnx(tmp_path / "tiny.onnx", size=20000), [1, 4, 20000, 20000])
    monkeypatch.setattr(memory, "available_memory", lambda: (16 * 10**9, "MemAvailable in /proc/meminfo"))
    with pytest.raises(ProblemError, match=r"above the 16 GB available \(MemAvailable in /proc/meminfo\)"):
        check_memory(mod)
    monkeypatch.setattr(memory, "available_memory", lambda: None)
    assert check_memory(mod).total > 16 * 10**9


def test_the_tune_command_refuses_a_huge_input_before_allocating_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: (16 * 10**9, "MemAvailable in /proc/meminfo"))
    model = tiny_conv_onnx(tmp_path / "tiny.onnx", size=20000)
    argv = ["tune", str(model), "--input-shape", "1,4,20000,20000", "--cache", "none", "--report", ""]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"layoutopt tune: error: the model needs at least {HUGE_GB:.3g} GB of "
                                   "memory to tune, above the 16 GB available")
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert "cost cache" not in captured.out  # nothing measured, no input drawn


def test_bytes_moved_counts_each_calls_inputs_weights_and_output_and_fusion_lowers_it():
    from layoutopt.tvm import models
    from layoutopt.tvm.building.builder import compile_module
    from layoutopt.tvm.building.memory import bytes_moved

    mod = models.chain((16,), in_channels=8, size=8)  # conv (8 -> 16, 3x3), bias add, relu
    activation = 16 * 8 * 8 * 4
    conv = 8 * 8 * 8 * 4 + 16 * 8 * 3 * 3 * 4 + activation
    assert bytes_moved(mod) == conv + (activation + 16 * 4 + activation) + 2 * activation
    fused = compile_module(mod, "llvm").bytes_moved  # one call: input, weight, bias, output
    assert fused == conv + 16 * 4
    assert compile_module(mod, "llvm", fuse=False).bytes_moved == bytes_moved(mod)
