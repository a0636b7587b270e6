"""The depthwise conv2d family (``kernels.depthwise``): numpy-reference checks on odd shapes, its
register tiles and work split, no padded copy of the input, and random graphs of depthwise convs
with fused epilogues against TVM's own build of the untouched model."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from hypothesis import given, settings
from hypothesis import strategies as st

from layoutopt import ProblemError
from layoutopt.tvm import apply_assignment, build, extract_layout_graph, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.kernels import (
    FAMILIES,
    LOOP_ORDERS,
    build_kernel,
    check_kernel,
    conv2d_candidates,
    validate_workload,
)
from layoutopt.tvm.kernels.common import block_names
from layoutopt.tvm.kernels.depthwise import MAIN_BLOCK, MIN_PARALLEL_CHUNKS, row_chunk
from layoutopt.tvm.kernels.isa import MAX_ACCUMULATORS, MAX_TILE_COLUMNS, depthwise_register_tile

pytestmark = pytest.mark.tvm

DEPTHWISE = FAMILIES["conv2d", "depthwise"]
AVX2, AVX512 = {"kind": "llvm", "mcpu": "znver3"}, {"kind": "llvm", "mcpu": "skylake-avx512"}
HARD_SWISH = ["bias", ["add", 3.0], ["clip", 0.0, 6.0], ["divide", 6.0], ["multiply", "@1"]]


def depthwise(channels, height, width, kernel, stride=1, padding=None, dilation=1, epilogue=("bias",)):
    pad = [kernel // 2] * 4 if padding is None else list(padding)
    return validate_workload({"op": "conv2d", "data": [1, channels, height, width],
                              "kernel": [channels, 1, kernel, kernel], "strides": [stride] * 2,
                              "padding": pad, "dilation": [dilation] * 2, "groups": channels,
                              "epilogue": list(epilogue)})


@pytest.mark.parametrize("workload", [
    depthwise(16, 13, 11, 3),  # prime widths
    depthwise(24, 13, 11, 3, stride=2, epilogue=HARD_SWISH),  # stride 2, odd sizes, 16 does not divide 24
    depthwise(16, 9, 7, 5, epilogue=["bias", "sigmoid", ["multiply", "@1"]]),  # 5x5, SiLU
    depthwise(8, 17, 15, 7, stride=2, epilogue=["bias", ["leaky_relu", 0.1]]),  # 7x7 stride 2
    depthwise(16, 12, 13, 3, padding=[0, 1, 2, 0], epilogue=["scale", "bias", "gelu"]),  # asymmetric padding
    depthwise(16, 11, 11, 3, padding=[2, 2, 2, 2], dilation=2, epilogue=["bias", "add", "relu"]),  # dilated
    depthwise(6, 7, 7, 3, epilogue=["bias", ["maximum", 0.0], ["minimum", 6.0]]),  # 6 channels: block 6
    depthwise(32, 3, 9, 3, padding=[0, 1, 0, 1]),  # one output row, no vertical padding
], ids=["prime", "s2-odd", "5x5-silu", "7x7-s2", "asymmetric", "dilated", "c6", "one-row"])
def test_every_candidate_matches_numpy_on_odd_shapes(workload):
    target = resolve_target(None)
    found = DEPTHWISE.candidates(workload, blocks=[4, 8, 16], orders=LOOP_ORDERS)  # rows first too
    assert found and all(candidate in conv2d_candidates(workload, blocks=[4, 8, 16], orders=LOOP_ORDERS)
                         for candidate in found)
    assert sum(candidate.get("order") == "rows" for candidate in found) == len(found) // 2
    for candidate in found:
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-4, candidate


def test_a_register_tile_knob_gives_the_same_numbers():
    workload = depthwise(16, 10, 14, 3, stride=1, epilogue=HARD_SWISH)
    target = resolve_target(None)
    for reg_n in (1, 2, 7, 14):
        candidate = {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise", "reg_n": reg_n}
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-4


def test_the_kernel_reads_the_input_in_place_and_finishes_the_epilogue_in_its_tile():
    tvm = import_tvm()
    workload = depthwise(16, 14, 14, 3, epilogue=HARD_SWISH)
    candidate = {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise"}
    sch = tvm.s_tir.Schedule(build_kernel(workload, candidate, resolve_target(AVX2)).module["kernel"])
    # no padded copy of the input; the tile's sums, then its epilogue (hard-swish's last multiply, the
    # other steps inlined into it), the sums in a buffer local to the tile
    assert block_names(sch) == [MAIN_BLOCK + "_init", MAIN_BLOCK + "_update", "T_multiply"]
    assert sch.get(sch.get_sblock(MAIN_BLOCK + "_update")).writes[0].source.scope() == "local"


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_register_tiles_divide_the_width_and_fit_the_registers(target):
    from layoutopt.tvm.kernels import vector_registers

    lanes, registers = vector_registers(target)
    for width in range(1, 120):
        for block in (4, 8, 16, 32):
            for kernel_w in (3, 5, 7):
                columns = depthwise_register_tile(width, block, kernel_w, target)
                per_column = -(-block // lanes)
                assert width % columns == 0 and 1 <= columns <= MAX_TILE_COLUMNS  # no partial tile
                most = min(MAX_ACCUMULATORS, registers - per_column - 1)
                assert columns == 1 or columns * per_column <= most
    # the shapes of MobileNets' layers: 7 columns of one AVX2 vector (8 ran slower), 2 of two
    assert [depthwise_register_tile(w, 8, 3, AVX2) for w in (112, 56, 28, 14, 7)] == [7, 7, 7, 7, 7]
    assert [depthwise_register_tile(w, 16, 3, AVX2) for w in (112, 14, 7)] == [2, 2, 1]
    assert depthwise_register_tile(56, 16, 3, AVX512) == 14


def test_work_is_split_over_channel_blocks_and_chunks_of_rows():
    for items in (1, 2, 4, 9, 60, 120):
        for rows in (1, 7, 14, 28, 56, 112, 13):
            chunk = row_chunk(items, rows)
            assert rows % chunk == 0
            assert chunk == 1 or items * rows // chunk >= MIN_PARALLEL_CHUNKS


def test_candidates_and_their_validation():
    workload = depthwise(24, 8, 8, 3)
    assert [c["in"] for c in DEPTHWISE.candidates(workload, blocks=[4, 8, 16])] == ["NCHW4c", "NCHW8c"]
    assert not DEPTHWISE.candidates(validate_workload({**workload, "groups": 1, "kernel": [24, 24, 3, 3]}))
    for candidate, message in [
        ({"in": "NCHW8c", "out": "NCHW16c", "algorithm": "depthwise"}, "same blocked layout"),
        ({"in": "NCHW16c", "out": "NCHW16c", "algorithm": "depthwise"}, "block 16 does not divide"),
        ({"in": "NCHW", "out": "NCHW", "algorithm": "depthwise"}, "same blocked layout"),
        ({"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise", "reg_n": 0}, "reg_n"),
        ({"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise", "tile": 2}, "unknown keys"),
        ({"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise", "order": "tiles"},
         "order='tiles' is not among"),
    ]:
        with pytest.raises(ProblemError, match=message):
            DEPTHWISE.validate_candidate(workload, candidate)
    # the direct family keeps NCHW for depthwise convs, and points to this family for blocked ones
    with pytest.raises(ProblemError, match="'algorithm': 'depthwise'"):
        FAMILIES["conv2d", "direct"].validate_candidate(workload, {"in": "NCHW8c", "out": "NCHW8c"})


def test_avx512_kernels_compile_with_zmm_registers():
    tvm = import_tvm()
    target = resolve_target(AVX512)
    kernel = build_kernel(depthwise(32, 14, 14, 5, epilogue=HARD_SWISH),
                          {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "depthwise"}, target)
    assert "zmm" in tvm.compile(kernel.module, target=target).mod.inspect_source("asm")


# -- random graphs against TVM's untouched build ----------------------------------------------------

def _activation(relax, emit, x, name):
    """``x`` through an activation as TVM's ONNX frontend (and prepare) writes it in Relax."""
    op = relax.op

    def scalar(value):
        return relax.const(value, "float32")

    if name == "relu6":
        return emit(op.minimum(emit(op.maximum(x, scalar(0.0))), scalar(6.0)))
    if name == "hard_swish":
        gate = emit(op.divide(emit(op.clip(emit(op.add(x, scalar(3.0))), 0, 6)), scalar(6.0)))
        return emit(op.multiply(x, gate))
    if name == "hard_sigmoid":
        return emit(op.clip(emit(op.add(emit(op.multiply(scalar(0.2), x)), scalar(0.5))), 0, 1))
    if name == "silu":
        return emit(op.multiply(x, emit(op.sigmoid(x))))
    if name == "leaky_relu":
        return emit(op.nn.leakyrelu(x, 0.1))
    if name == "gelu":
        return emit(op.nn.gelu(x))
    return x


ACTIVATIONS = ("none", "relu6", "hard_swish", "hard_sigmoid", "silu", "leaky_relu", "gelu")


@settings(max_examples=6, deadline=None)
@given(st.data())
def test_random_graphs_of_depthwise_convs_compute_what_tvm_computes(data):
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    channels = data.draw(st.sampled_from([8, 16, 24]), label="channels")
    size = (data.draw(st.integers(5, 13), label="height"), data.draw(st.integers(5, 13), label="width"))
    layers = data.draw(st.lists(st.tuples(st.sampled_from([3, 5, 7]), st.sampled_from([1, 2]),
                                          st.sampled_from(ACTIVATIONS), st.booleans()),
                                min_size=1, max_size=3), label="layers: kernel, stride, activation, residual")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, *size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for kernel, stride, activation, residual in layers:
                weight = rng.standard_normal((channels, 1, kernel, kernel)).astype("float32") / kernel
                weight = relax.const(weight)
                bias = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32") * 0.1)
                out = bb.emit(relax.op.nn.conv2d(y, weight, strides=stride, padding=kernel // 2,
                                                 groups=channels))
                out = _activation(relax, bb.emit, bb.emit(relax.op.add(out, bias)), activation)
                y = bb.emit(relax.op.add(out, y)) if residual and stride == 1 else out
            output = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(output)
    mod = bb.get()
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=1)
    expected = run(tvm.compile(mod, target=target), inputs)
    graph = extract_layout_graph(prepare(mod), {"blocks": [4, 8, 16]}, prepared=True)
    assignment = {node.name: data.draw(st.integers(0, len(node.choices) - 1), label=node.name)
                  for node in graph.layout_nodes()}
    loop_order = data.draw(st.sampled_from(LOOP_ORDERS), label="loop order")
    built = build(apply_assignment(graph.mod, graph, assignment, loop_order=loop_order), target)
    assert relative_error(run(built, inputs), expected) < 1e-4
