"""Cuts and permutations of channels run in blocked layouts: a split (YOLO's C2f) and a slice along
channels (ShuffleNet's halves) as nodes cut between blocks, a channel shuffle as one gather and a
spatial slice (YOLOX's focus) following their input, with no round trip through NCHW."""

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

DIRECT = {"blocks": [8, 16], "algorithms": ["direct"]}


def c2f(cut=2, channels: int = 64, size: int = 8, seed: int = 0):
    """conv -> split along channels (``cut``: pieces or offsets) -> conv on the last piece -> concat of
    every piece and that conv -> 1x1 conv: YOLOv8's C2f block in small."""
    from tvm import relax

    rng = np.random.default_rng(seed)

    def const(*shape):
        return relax.const((rng.standard_normal(shape) * 0.2).astype("float32"))

    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, 16, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, const(channels, 16, 1, 1)), "stem")
            pieces = bb.emit(relax.op.split(y, cut, axis=1), "split")
            count = cut if isinstance(cut, int) else len(cut) + 1
            items = [bb.emit(relax.TupleGetItem(pieces, i), f"piece{i}") for i in range(count)]
            last = int(items[-1].ty.shape[1])
            z = bb.emit(relax.op.nn.conv2d(items[-1], const(last, last, 3, 3), padding=1), "inner")
            joined = bb.emit(relax.op.concat([*items, z], axis=1), "concat")
            total = channels + last
            out = bb.emit_output(relax.op.nn.conv2d(joined, const(16, total, 1, 1)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(("cut", "sections", "choices"), [
    (2, [32, 32], ["NCHW8c", "NCHW16c", "NCHW"]),
    ([16, 48], [16, 32, 16], ["NCHW8c", "NCHW16c", "NCHW"]),
    ([8, 24], [8, 16, 40], ["NCHW8c", "NCHW"]),  # 16 would cut a block in two
])
def test_a_channel_split_is_a_node_whose_layouts_keep_every_cut_between_blocks(cut, sections, choices):
    graph = extract_layout_graph(c2f(cut), DIRECT)
    split = graph.layout_node("split")
    assert split.kind == "multi" and split.workload["sections"] == sections
    assert graph.nodes["split"]["choices"] == choices
    assert graph.has_edge("stem", "split") and graph.has_edge("split", "concat")


@pytest.mark.parametrize("cut", [2, [16, 48]])
@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c"])
def test_a_blocked_split_needs_no_transform_and_computes_the_same(cut, layout):
    mod = prepare(c2f(cut))
    graph = extract_layout_graph(mod, DIRECT, prepared=True)
    assignment = fixed_layout_assignment(graph, layout)
    assert graph.layout_node("split").labels[assignment["split"]] == layout
    new_mod = apply_assignment(mod, graph, assignment)
    # into the stem and out of the last conv: the split, its pieces and the concat stay blocked
    assert count_layout_transforms(new_mod) == expected_transforms(graph, assignment) == 2
    inputs = random_inputs(mod)
    verdict = Reference.of(mod, inputs, "llvm").judge(run(build(new_mod, "llvm"), inputs))
    assert verdict.passed, verdict.describe(layout)


def shuffle_block(channels: int = 32, groups: int = 2, size: int = 6, seed: int = 0):
    """ShuffleNetV2's unit in small: conv -> channel slices (two halves) -> conv on one -> concat ->
    channel shuffle (reshape, transpose, reshape) -> conv; and a spatial slice (YOLOX's focus)."""
    from tvm import relax

    rng = np.random.default_rng(seed)

    def const(*shape):
        return relax.const((rng.standard_normal(shape) * 0.2).astype("float32"))

    half = channels // 2
    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, 16, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, const(channels, 16, 1, 1)), "stem")
            left = bb.emit(relax.op.strided_slice(y, axes=[1], begin=[0], end=[half]), "left")
            right = bb.emit(relax.op.strided_slice(y, axes=[1], begin=[half], end=[channels]), "right")
            right = bb.emit(relax.op.nn.conv2d(right, const(half, half, 3, 3), padding=1), "branch")
            joined = bb.emit(relax.op.concat([left, right], axis=1), "concat")
            grouped = bb.emit(relax.op.reshape(joined, (1, groups, channels // groups, size, size)), "group")
            swapped = bb.emit(relax.op.permute_dims(grouped, [0, 2, 1, 3, 4]), "swap")
            shuffled = bb.emit(relax.op.reshape(swapped, (1, channels, size, size)), "shuffle")
            focus = bb.emit(relax.op.strided_slice(shuffled, axes=[2, 3], begin=[0, 1], end=[size, size],
                                                   strides=[2, 2]), "focus")
            out = bb.emit_output(relax.op.nn.conv2d(focus, const(16, channels, 1, 1)))
        bb.emit_func_output(out)
    return bb.get()


def test_a_channel_shuffle_is_one_gather_that_follows_its_inputs_layout():
    mod = prepare(shuffle_block())
    ops = [b.value.op.name for b in mod["main"].body.blocks[0].bindings if hasattr(b.value, "op")]
    assert "relax.take" in ops and "relax.permute_dims" not in ops  # reshape-transpose-reshape: one op
    graph = extract_layout_graph(mod, DIRECT, prepared=True)
    assert all(node.kind != "boundary" for node in graph.layout_nodes())
    assert graph.layout_node("left").workload["begin"] == 0 and graph.nodes["left"]["choices"] == [
        "NCHW8c", "NCHW16c", "NCHW"]
    assert graph.following["focus"] == "concat"  # the spatial slice and the shuffle follow the concat


@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c"])
def test_slices_and_a_shuffle_run_blocked_and_compute_the_same(layout):
    mod = prepare(shuffle_block())
    graph = extract_layout_graph(mod, DIRECT, prepared=True)
    assignment = fixed_layout_assignment(graph, layout)
    new_mod = apply_assignment(mod, graph, assignment)
    assert count_layout_transforms(new_mod) == expected_transforms(graph, assignment) == 2
    inputs = random_inputs(mod)
    verdict = Reference.of(mod, inputs, "llvm").judge(run(build(new_mod, "llvm"), inputs))
    assert verdict.passed, verdict.describe(layout)
