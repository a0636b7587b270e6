"""The 1x1 GEMM in plain NCHW, vectorised along the pixels (ShuffleNetV2's 58 and 116 channels, which
no block of 8 divides): candidates and refusals, the pixel tile rule on both ISAs, odd shapes against
numpy, random graphs against TVM's own build of the untouched model, and the kernel the build runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_checks import AVX2, AVX512, build_and_check  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.tvm import apply_assignment, build, extract_layout_graph, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.kernels import gemm as kernels_gemm
from layoutopt.tvm.kernels import vector_registers
from layoutopt.tvm.kernels.common import block_names
from layoutopt.tvm.kernels.isa import pixel_register_tile, pixel_tiles

pytestmark = pytest.mark.tvm

GEMM, NCHW_GEMM = kernels_gemm.FAMILY, kernels_gemm.NCHW_CANDIDATE


def pointwise(channels, out_channels, h, w, strides=(1, 1), batch=1, epilogue=()):
    return {"op": "conv2d", "data": [batch, channels, h, w], "kernel": [out_channels, channels, 1, 1],
            "strides": list(strides), "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1,
            "dtype": "float32", "epilogue": list(epilogue)}


def test_offered_for_stride_1_maps_a_vector_run_tiles_and_refused_elsewhere():
    shuffle = pointwise(58, 58, 28, 28)
    assert GEMM.candidates(shuffle, blocks=[8, 16]) == [NCHW_GEMM]  # no block divides 58: NCHW only
    assert NCHW_GEMM in GEMM.candidates(pointwise(64, 64, 56, 56), blocks=[16])  # beside the blocked ones
    for refused in (pointwise(58, 58, 14, 14), pointwise(58, 58, 7, 7), pointwise(58, 58, 56, 56, (2, 2))):
        assert NCHW_GEMM not in GEMM.candidates(refused, blocks=[8])
        with pytest.raises(ProblemError, match=r"stride-1.*8-pixel vectors"):
            GEMM.validate_candidate(refused, NCHW_GEMM)
    with pytest.raises(ProblemError, match="no other keys"):
        GEMM.validate_candidate(shuffle, {**NCHW_GEMM, "order": "rows"})
    with pytest.raises(ProblemError, match="blocked layouts"):  # one side NCHW: not the NCHW kernel
        GEMM.validate_candidate(shuffle, {**NCHW_GEMM, "out": "NCHW8c"})
    assert GEMM.weight_shape(shuffle, NCHW_GEMM) == (58, 58, 1, 1)  # OIHW as it comes


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_the_pixel_tile_is_a_rectangle_of_whole_vectors_that_fits_the_registers(target):
    lanes, registers = vector_registers(target)
    for h, w in itertools.product([1, 2, 3, 5, 6, 7, 8, 12, 14, 16, 24, 28, 56, 112], repeat=2):
        tile = pixel_register_tile(h, w, target)
        if tile is None:
            assert not pixel_tiles(h, w)
            continue
        rows, columns, width = tile
        assert width in (lanes, 8)
        assert h % rows == 0 and w % columns == 0 and (rows == 1 or columns == w)
        assert rows * columns % width == 0 and rows * columns // width <= registers - 2
    assert pixel_register_tile(28, 28, AVX2) == (4, 28, 8)
    assert pixel_tiles(14, 14) == [] and pixel_register_tile(14, 14, target) is None


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("workload", [
    pointwise(29, 13, 6, 12, epilogue=["bias", "relu"]),        # prime channels; whole rows (2 x 12)
    pointwise(5, 58, 8, 24, batch=2, epilogue=["bias", "add"]),  # part of a row; batch 2; residual
    pointwise(58, 58, 28, 28, epilogue=["bias", "sigmoid"]),     # ShuffleNetV2's, 4 rows x 28
    pointwise(3, 7, 1, 16),                                      # one row, no epilogue
], ids=["29to13_6x12", "5to58_8x24_n2", "58to58_28x28", "3to7_1x16"])
def test_matches_numpy_on_odd_shapes(workload, target):
    assert build_and_check(workload, NCHW_GEMM, target) < 1e-5  # compiled only, where this host cannot run it


def candidates_of(node) -> list[dict]:
    return [dict(choice.candidate) for choice in node.choices]


def shuffle_like_model(rng, channels, size, layers):
    """1x1 convs (bias, relu, residual adds) on ``channels`` that no block of 8 divides."""
    tvm = import_tvm()
    relax = tvm.relax
    x = relax.Var("x", relax.TensorType((1, channels, *size), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for residual in layers:
                weight = rng.standard_normal((channels, channels, 1, 1)).astype("float32") / channels
                bias = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32") * 0.1)
                out = bb.emit(relax.op.nn.conv2d(y, relax.const(weight)))
                out = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(out, bias))))
                y = bb.emit(relax.op.add(out, y)) if residual else out
            output = bb.emit_output(y)
        bb.emit_func_output(output)
    return bb.get()


@settings(max_examples=4, deadline=None)
@given(st.data())
def test_random_graphs_of_nchw_gemms_compute_what_tvm_computes(data):
    tvm = import_tvm()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    channels = data.draw(st.sampled_from([5, 13, 29, 58]), label="channels")
    size = data.draw(st.sampled_from([(8, 8), (4, 16), (6, 12), (3, 24)]), label="map")
    layers = data.draw(st.lists(st.booleans(), min_size=1, max_size=3), label="residual")
    mod = shuffle_like_model(rng, channels, size, layers)
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=1)
    expected = run(tvm.compile(mod, target=target), inputs)
    graph = extract_layout_graph(prepare(mod), {"blocks": [4, 8, 16]}, prepared=True)
    convs = [node for node in graph.layout_nodes() if node.op == "relax.nn.conv2d"]
    assert len(convs) == len(layers) and all(NCHW_GEMM in candidates_of(node) for node in convs)
    assignment = {node.name: data.draw(st.integers(0, len(node.choices) - 1), label=node.name)
                  for node in graph.layout_nodes()}
    built = build(apply_assignment(graph.mod, graph, assignment), target)
    assert relative_error(run(built, inputs), expected) < 1e-4


def test_a_conv_given_the_nchw_gemm_runs_it_with_its_epilogue_in_the_tile():
    tvm = import_tvm()
    mod = prepare(shuffle_like_model(np.random.default_rng(0), 58, (28, 28), [False, True]))
    graph = extract_layout_graph(mod, {"blocks": [8]}, prepared=True)
    assignment = {node.name: candidates_of(node).index(NCHW_GEMM) for node in graph.layout_nodes()
                  if node.op == "relax.nn.conv2d"}
    applied = apply_assignment(mod, graph, assignment)
    blocks = [block_names(tvm.s_tir.Schedule(func)) for func in applied.functions.values()
              if isinstance(func, tvm.tirx.PrimFunc)]
    assert sum(kernels_gemm.MAIN_BLOCKS[1] in names for names in blocks) == 2
    assert not any("conv2d_nchw" in names for names in blocks)  # TVM's NCHW conv is gone
    inputs = random_inputs(mod, seed=1)
    expected = run(tvm.compile(mod, target=resolve_target(None)), inputs)
    assert relative_error(run(build(applied, resolve_target(None)), inputs), expected) < 1e-4
