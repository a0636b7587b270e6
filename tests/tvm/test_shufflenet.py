"""ShuffleNet v1: grouped 1x1 convs as a GEMM per group (``kernels.gemm``, blocked and NCHW) and channel
shuffles folded into the convs after them (``layoutopt.tvm.frontend.shuffle``), checked against numpy, TVM's
own
build and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from benchmarks.onnx_written import shufflenet_v1
from layoutopt.tvm import apply_assignment, build, extract_layout_graph, load_model, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.frontend.shuffle import fold_channel_shuffles
from layoutopt.tvm.kernels import build_kernel, check_kernel, conv2d_candidates

pytestmark = pytest.mark.tvm

#: ShuffleNet v1 (3 groups)'s bottleneck convs: 1x1 240 -> 60 (20 per group) and 60 -> 240
NARROW = {"op": "conv2d", "data": [1, 240, 8, 8], "kernel": [60, 80, 1, 1], "strides": [1, 1],
          "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 3, "dtype": "float32"}
WIDE = {**NARROW, "data": [1, 60, 8, 8], "kernel": [240, 20, 1, 1]}


def gemm_labels(workload) -> list[str]:
    return [f"{c['in']}->{c['out']}" for c in conv2d_candidates(workload, blocks=[4, 8, 16])
            if c.get("algorithm") == "gemm"]


def test_grouped_1x1_convs_get_a_gemm_per_group_as_choices():
    # blocks dividing the channels per group; 4-channel output blocks where no wider one divides
    assert gemm_labels(WIDE) == ["NCHW4c->NCHW8c", "NCHW4c->NCHW16c", "NCHW->NCHW"]
    assert gemm_labels(NARROW) == ["NCHW4c->NCHW4c", "NCHW8c->NCHW4c", "NCHW16c->NCHW4c", "NCHW->NCHW"]
    depthwise = {**NARROW, "data": [1, 60, 8, 8], "kernel": [60, 1, 1, 1], "groups": 60}
    assert gemm_labels(depthwise) == []  # the depthwise family's


@pytest.mark.parametrize("workload", [WIDE, NARROW, {**WIDE, "strides": [2, 2]}],
                         ids=["wide", "narrow", "stride-2"])
def test_every_grouped_gemm_kernel_matches_numpy(workload):
    target = resolve_target(None)
    workload = {**workload, "epilogue": ["bias", "relu"]}
    candidates = [c for c in conv2d_candidates(workload, blocks=[4, 8, 16]) if c.get("algorithm") == "gemm"]
    assert candidates
    for candidate in candidates:
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-5, candidate


def _shuffled(convs, groups: int = 2, channels: int = 8, size: int = 6, shared: bool = False):
    """x -> take(shuffle of ``groups``) -> each of ``convs`` (``"dense"``, ``"grouped"``,
    ``"in_group"``: a permutation within the conv's groups, ``"depthwise"`` + bias + relu) in turn."""
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(0)
    order = np.arange(channels)
    shuffle = (order % groups) * (channels // groups) + order // groups
    per_group = channels // groups
    within = np.concatenate([rng.permutation(per_group) + g * per_group for g in range(groups)])
    x = relax.Var("x", relax.TensorType((1, channels, size, size), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.take(x, relax.const(within if convs[0] == "in_group" else shuffle), axis=1))
            taken = y
            for kind in convs:
                if kind == "depthwise":
                    weight = relax.const(rng.standard_normal((channels, 1, 3, 3), "float32"))
                    y = bb.emit(relax.op.nn.conv2d(y, weight, padding=1, groups=channels))
                    bias = relax.const(rng.standard_normal((1, channels, 1, 1), "float32"))
                    y = bb.emit(relax.op.add(y, bias))
                    y = bb.emit(relax.op.nn.relu(y))
                else:
                    groups_here = 1 if kind == "dense" else groups
                    weight = rng.standard_normal((channels, channels // groups_here, 1, 1), "float32")
                    y = bb.emit(relax.op.nn.conv2d(y, relax.const(weight), groups=groups_here))
            if shared:  # the shuffle read twice
                y = bb.emit(relax.op.add(y, taken))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if hasattr(b.value, "op")]


@pytest.mark.parametrize("convs, shared, takes_after", [
    (["dense"], False, 0),                      # folded into the weight
    (["in_group"], False, 0),                   # a permutation within the groups: folded too
    (["depthwise", "dense"], False, 0),         # moved past the depthwise conv, bias and relu, folded
    (["grouped"], False, 1),                    # the shuffle moves channels between the groups: stays
    (["depthwise", "grouped"], False, 1),       # moved past the depthwise conv, stops at the grouped one
    (["dense"], True, 1),                       # read twice: stays
], ids=["dense", "in-group", "depthwise-dense", "grouped", "depthwise-grouped", "shared"])
def test_a_shuffle_folds_into_the_conv_it_reaches_and_computes_the_same(convs, shared, takes_after):
    tvm = import_tvm()
    mod = _shuffled(convs, shared=shared)
    folded = fold_channel_shuffles(mod)
    ops = _ops(folded)
    assert ops.count("relax.take") == takes_after
    if convs == ["depthwise", "grouped"]:  # the take now comes after the depthwise conv's relu
        assert ops.index("relax.take") > ops.index("relax.nn.relu")
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=3)
    expected = run(tvm.compile(mod, target=target), inputs)
    assert relative_error(run(tvm.compile(folded, target=target), inputs), expected) < 1e-5


@pytest.mark.parametrize("groups", [3, 8])
def test_shufflenet_v1_runs_blocked_and_computes_what_onnxruntime_computes(groups, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = shufflenet_v1(tmp_path / f"shufflenet_g{groups}.onnx", groups=groups, size=32, classes=10)
    mod = prepare(load_model(path, [1, 3, 32, 32]))
    graph = extract_layout_graph(mod, prepared=True)
    grouped = [node for node in graph.layout_nodes() if node.op == "relax.nn.conv2d"
               and node.workload["kernel"][2:] == [1, 1] and node.workload["groups"] > 1]
    assert all(any(c.candidate.get("algorithm") == "gemm" for c in node.choices) for node in grouped)
    assignment = fixed_layout_assignment(graph, "NCHW8c", prefer=("gemm",))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    (got,) = run(build(apply_assignment(graph.mod, graph, assignment), resolve_target(None)), [x])
    assert relative_error([got], [expected]) < 1e-4
