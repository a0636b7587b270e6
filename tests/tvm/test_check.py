"""The output check of a build (layoutopt.tvm.evaluate.check): NaN never passes, float32 rounding is not a
bug,
a baseline that fails is dropped, a tuned build that fails says where it diverges."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm import models, tune_and_build
from layoutopt.tvm.building import apply as apply_module
from layoutopt.tvm.building.apply import apply_layouts
from layoutopt.tvm.building.builder import build
from layoutopt.tvm.evaluate.check import ROUNDING_GROWTH, Reference, float64_module, relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.frontend.normalise import prepare

pytestmark = pytest.mark.tvm

#: small and quick to measure: direct kernels in two blocks, no calibration
QUICK = {"candidates": {"blocks": [8, 16], "algorithms": ["direct"]}, "method": "dp", "repeat": 2,
         "profile": False, "calibrate": 0}


def _two_branches(weights_a, weights_b, size: int = 8):
    """``y = conv_a(x) - conv_b(x)``: the branches cancel when the weights are nearly equal."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, weights_a.shape[1], size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, relax.const(weights_a), padding=1), name_hint="conv_a")
            b = bb.emit(relax.op.nn.conv2d(x, relax.const(weights_b), padding=1), name_hint="conv_b")
            y = bb.emit_output(relax.op.subtract(a, b))
        bb.emit_func_output(y)
    assert isinstance(bb.get(), tvm.IRModule)
    return bb.get()


def cancelling(channels: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((channels, 16, 3, 3)).astype("float32")
    nearly = (weights * (1 + 1e-6 * rng.standard_normal(weights.shape))).astype("float32")
    return _two_branches(weights, nearly)


def test_nan_or_inf_where_the_reference_is_finite_is_an_infinite_error():
    assert relative_error([np.array([1.0, np.nan])], [np.ones(2)]) == math.inf
    assert relative_error([np.array([1.0, np.inf])], [np.ones(2)]) == math.inf
    assert relative_error([np.array([1.0, 2.0])], [np.array([1.0, 2.5])]) == pytest.approx(0.2)


def test_a_non_finite_reference_is_refused_not_passed():
    with pytest.raises(ProblemError, match=r"not finite.*1 NaN"):
        relative_error([np.ones(2)], [np.array([1.0, np.nan])])
    with pytest.raises(ProblemError, match="not finite"):
        relative_error([np.full(2, np.nan)], [np.full(2, np.nan)])  # all NaN: nothing compared before


def test_a_build_with_nan_fails_its_verdict():
    reference = Reference((np.ones(3),), (np.ones(3),), (1e-7,), "float64")
    assert reference.judge([np.ones(3)]).passed
    verdict = reference.judge([np.array([1.0, np.nan, np.inf])])
    assert not verdict.passed and verdict.error == math.inf
    assert "NaN/inf where the reference is finite" in verdict.describe("layoutopt")


def test_an_untouched_model_that_overflows_cannot_check_anything():
    rng = np.random.default_rng(0)
    huge = (rng.standard_normal((16, 16, 3, 3)) * 1e20).astype("float32")  # squares overflow float32
    mod = prepare(_two_branches(huge, huge * np.float32(0.5)))
    inputs = [np.full((1, 16, 8, 8), 1e20, np.float32)]
    with pytest.raises(ProblemError, match=r"the untouched model itself produces NaN/inf.*--no-check"):
        Reference.of(mod, inputs, "llvm")


def test_the_float64_reference_computes_the_model_in_float64():
    mod = prepare(models.dense_head())
    wide = float64_module(mod)
    assert wide["main"].params[0].ty.dtype == "float64"
    assert "float32" not in wide["main"].script()
    inputs = random_inputs(mod)
    reference = Reference.of(mod, inputs, "llvm")
    assert reference.kind == "float64" and reference.truth[0].dtype == np.float64
    # float32 rounding alone: small but not zero, and it sets no bound above rtol on a tame model
    assert 0 < reference.untouched_error < 1e-5
    assert reference.bounds == (1e-4,)


def test_rounding_is_not_a_rewrite_bug_when_the_branches_cancel():
    mod = prepare(cancelling())
    inputs = random_inputs(mod)
    reference = Reference.of(mod, inputs, "llvm")
    # TVM's own float32 build is far from the truth: the check must not call the tuned build wrong
    assert reference.kind == "float64" and reference.untouched_error > 0.01
    for layout in ("NCHW8c->NCHW8c", "NCHW16c->NCHW16c"):
        outputs = run(build(apply_layouts(mod, {"conv_a": layout, "conv_b": layout})), inputs)
        assert relative_error(outputs, reference.untouched) > 1e-4  # what the old check compared: "a bug"
        verdict = reference.judge(outputs)
        assert verdict.passed, verdict.describe(layout)
        assert verdict.bounds[0] == ROUNDING_GROWTH * reference.untouched_error


def test_the_whole_tune_of_a_cancelling_model_hands_back_a_build(tmp_path):
    result = tune_and_build(cancelling(), cache=tmp_path / "costs.jsonl", **QUICK)
    assert result.reference.kind == "float64" and result.reference.untouched_error > 0.01
    assert result.chosen in {v.name for v in result.variants()}
    for variant in result.variants():
        assert variant.max_relative_error <= max(result.reference.bounds)
    assert "checked against the untouched model computed in float64" in result.summary()


def _corrupt_layout(monkeypatch, layout: str) -> None:
    """Every per-channel constant repacked into ``layout`` (conv biases) is scaled by 1.5: a
    rewrite bug of that layout only."""
    pack = apply_module.pack_data

    def wrong(array, into):
        packed = pack(array, into)
        return packed * np.float32(1.5) if into == layout else packed

    monkeypatch.setattr(apply_module, "pack_data", wrong)


def test_a_baseline_that_fails_the_check_is_dropped_and_the_rest_compared(tmp_path, monkeypatch):
    _corrupt_layout(monkeypatch, "NCHW8c")
    said: list[str] = []
    mod = models.chain((16, 16), in_channels=16, size=8)
    result = tune_and_build(mod, cache=tmp_path / "costs.jsonl", baselines=("nchw16c",),
                            pin={"conv1": "NCHW16c->NCHW16c", "conv2": "NCHW16c->NCHW16c"},
                            progress=said.append, **QUICK)
    assert "nchw8c" not in result.baselines  # failed: dropped, not handed back, not compared
    assert result.baselines["best_fixed"].description.endswith("nchw16c")
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and "nchw8c build is off by" in warnings[0] and "dropped" in warnings[0]
    assert result.chosen in ("layoutopt", "best_fixed", "nchw16c")


def test_a_tuned_build_that_fails_names_the_first_value_that_diverges(tmp_path, monkeypatch):
    _corrupt_layout(monkeypatch, "NCHW16c")
    mod = models.chain((16, 16), in_channels=16, size=8)
    with pytest.raises(ProblemError) as failure:
        tune_and_build(mod, cache=tmp_path / "costs.jsonl", guard=False, baselines=(),
                       pin={"conv1": "NCHW16c->NCHW16c", "conv2": "NCHW16c->NCHW16c"}, **QUICK)
    message = str(failure.value)
    assert "the layoutopt build is off by" in message and "--no-check" in message
    # conv1's bias is the first value computed with a corrupted constant
    assert "the first value that diverges is 'conv1_bias'" in message
