"""Squeeze-excite in blocked layout: the global mean keeps the channel block (a layout follower), so the
squeeze's 1x1 convs and the excite's broadcast multiply need no transform to and from NCHW."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt.tvm.building.apply import apply_assignment, count_layout_transforms, expected_transforms
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import build
from layoutopt.tvm.evaluate.check import Reference
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.graph.extract import extract_layout_graph

pytestmark = pytest.mark.tvm


def squeeze_excite(channels: int = 32, squeezed: int = 8, size: int = 7, keepdims: bool = True,
                   seed: int = 0):
    """conv -> relu -> SE (mean over H, W; 1x1 conv; relu; 1x1 conv; sigmoid; multiply) -> conv."""
    from tvm import relax

    rng = np.random.default_rng(seed)

    def const(*shape):
        return relax.const((rng.standard_normal(shape) * 0.3).astype("float32"))

    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, 16, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, const(channels, 16, 3, 3), padding=1), "stem")
            y = bb.emit(relax.op.nn.relu(y), "stem_relu")
            pooled = bb.emit(relax.op.mean(y, axis=[2, 3], keepdims=keepdims), "squeeze")
            if not keepdims:
                pooled = bb.emit(relax.op.reshape(pooled, (1, channels, 1, 1)), "unsqueeze")
            s = bb.emit(relax.op.nn.conv2d(pooled, const(squeezed, channels, 1, 1)), "fc1")
            s = bb.emit(relax.op.nn.relu(s), "fc1_relu")
            s = bb.emit(relax.op.nn.conv2d(s, const(channels, squeezed, 1, 1)), "fc2")
            s = bb.emit(relax.op.sigmoid(s), "fc2_sigmoid")
            z = bb.emit(relax.op.multiply(y, s), "excite")
            out = bb.emit_output(relax.op.nn.conv2d(z, const(16, channels, 1, 1)))
        bb.emit_func_output(out)
    return bb.get()


def test_the_global_mean_follows_its_inputs_layout():
    graph = extract_layout_graph(squeeze_excite(), {"blocks": [8, 16], "algorithms": ["direct"]})
    assert "squeeze" not in graph and graph.following["squeeze"] == "stem"
    assert graph.has_edge("stem", "fc1")  # the squeeze's 1x1 conv reads the stem's layout directly
    assert graph.layout_node("excite").kind == "multi"


def test_a_mean_that_drops_its_dimensions_stays_a_boundary():
    graph = extract_layout_graph(squeeze_excite(keepdims=False),
                                 {"blocks": [8, 16], "algorithms": ["direct"]})
    assert graph.layout_node("squeeze").kind == "boundary"


@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c"])
def test_squeeze_excite_runs_blocked_with_no_transform_inside_and_right_numbers(layout):
    mod = prepare(squeeze_excite())
    graph = extract_layout_graph(mod, {"blocks": [8, 16], "algorithms": ["direct"]}, prepared=True)
    assignment = fixed_layout_assignment(graph, layout)
    new_mod = apply_assignment(mod, graph, assignment)
    # into the stem and out of the last conv only: the SE block itself stays in the blocked layout
    assert count_layout_transforms(new_mod) == expected_transforms(graph, assignment) == 2
    inputs = random_inputs(mod)
    verdict = Reference.of(mod, inputs, "llvm").judge(run(build(new_mod, "llvm"), inputs))
    assert verdict.passed, verdict.describe(layout)
