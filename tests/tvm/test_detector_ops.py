"""Detector ops in blocked layouts: ConvTranspose as a target node with per-phase blocked kernels, Resize
as a layout follower with a scheduled kernel; checked against numpy, TVM's untouched build and ONNX
Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import conv_transpose_onnx, resize_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.tvm import (
    apply_assignment,
    apply_layouts,
    build,
    extract_layout_graph,
    fixed_layout_assignment,
    load_model,
    prepare,
)
from layoutopt.tvm._tvm import import_tvm, resolve_target
from layoutopt.tvm.building.apply import count_layout_transforms, expected_transforms, op_list
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import run
from layoutopt.tvm.kernels import FAMILIES, build_kernel, candidates, check_kernel, validate_workload
from layoutopt.tvm.kernels.common import block_names
from layoutopt.tvm.kernels.conv2d_transpose import transpose_reference
from layoutopt.tvm.kernels.kernel import kernel_tensors
from layoutopt.tvm.kernels.module import family_of_function

pytestmark = pytest.mark.tvm

TRANSPOSED, RESIZE = FAMILIES["conv2d_transpose", "direct"], FAMILIES["resize2d", "direct"]


@pytest.fixture(scope="module")
def target():
    return resolve_target("llvm")


def transposed(data, kernel, strides=2, padding=0, output_padding=0, groups=1, epilogue=()):
    return validate_workload({
        "op": "conv2d_transpose", "data": list(data), "kernel": list(kernel), "strides": [strides] * 2,
        "padding": [padding] * 4 if isinstance(padding, int) else list(padding),
        "output_padding": [output_padding] * 2, "groups": groups, "epilogue": list(epilogue)})


def onnxruntime_output(path, data: np.ndarray) -> np.ndarray:
    onnxruntime = pytest.importorskip("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": data})[0]


def built_against_references(path, shape, choices=None, layout="NCHW8c", blocks=(4, 8, 16)):
    """Build ``path`` with ``choices`` (else ``layout`` everywhere) and return its graph, rewritten
    module and its output's relative errors against TVM's untouched build and ONNX Runtime."""
    tvm = import_tvm()
    prepared = prepare(load_model(path, list(shape)))
    graph = extract_layout_graph(prepared, list(blocks), prepared=True)
    rewritten = (apply_layouts(prepared, choices) if choices is not None
                 else apply_assignment(prepared, graph, fixed_layout_assignment(graph, layout)))
    data = np.random.default_rng(7).standard_normal(shape).astype("float32")
    ours = run(build(rewritten), [data])
    untouched = run(tvm.compile(prepared, target=resolve_target(None)), [data])
    theirs = [onnxruntime_output(path, data)]
    return graph, rewritten, relative_error(ours, untouched), relative_error(ours, theirs)


# -- ConvTranspose: the kernels ----------------------------------------------------------------------


# odd shapes: prime widths, odd sizes with stride 2, 2x2 and 4x4 with stride 2, 3x3 with stride 2 and
# output padding, stride 3 with uneven padding, depthwise, one output channel
TRANSPOSED_WORKLOADS = {
    "2x2 s2 prime width": transposed([1, 16, 7, 11], [16, 8, 2, 2], epilogue=("bias", "relu")),
    "4x4 s2 p1": transposed([1, 8, 5, 13], [8, 16, 4, 4], padding=1),
    "3x3 s2 p1 op1": transposed([1, 16, 7, 5], [16, 8, 3, 3], padding=1, output_padding=1,
                                epilogue=("bias", "add", "relu")),
    "3x3 s2 odd out": transposed([1, 8, 3, 7], [8, 8, 3, 3]),
    "3x3 s3 uneven pads": transposed([1, 8, 5, 7], [8, 16, 3, 3], strides=3, padding=[1, 0, 2, 1],
                                     output_padding=2),
    "depthwise 4x4 s2": transposed([1, 16, 5, 7], [16, 1, 4, 4], padding=1, groups=16),
    "depthwise 3x3 s2 op1": transposed([1, 8, 7, 5], [8, 1, 3, 3], padding=1, output_padding=1, groups=8),
    "one output channel": transposed([1, 16, 6, 11], [16, 1, 2, 2], epilogue=("bias",)),
}


@pytest.mark.parametrize("name", list(TRANSPOSED_WORKLOADS))
def test_every_transposed_conv_kernel_matches_numpy(name, target):
    workload = TRANSPOSED_WORKLOADS[name]
    found = candidates(workload, blocks=[4, 8, 16])
    assert {"in": "NCHW", "out": "NCHW"} in found and len(found) > 1  # blocked kernels beside TVM's own
    for candidate in found:
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-5


def test_the_numpy_reference_is_the_transposed_convolution():
    # a transposed conv is the adjoint of the conv with the same weight: <conv(x), y> == <x, transposed(y)>
    from layoutopt.tvm.kernels.convolution import conv2d_reference

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4, 3, 3))  # conv2d: OIHW 6 <- 4; transposed: IOHW 6 -> 4
    x, y = rng.standard_normal((1, 4, 9, 9)), rng.standard_normal((1, 6, 5, 5))
    forward = {"data": [1, 4, 9, 9], "kernel": [6, 4, 3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1],
               "dilation": [1, 1], "groups": 1}
    backward = transposed([1, 6, 5, 5], [6, 4, 3, 3], padding=1)
    np.testing.assert_allclose(np.vdot(conv2d_reference(forward, [x, weight]), y),
                               np.vdot(x, transpose_reference(backward, [y, weight])))


def test_candidates_per_kind_of_transposed_conv():
    labels = lambda wl: [f"{c['in']}->{c['out']}" + (f"/{c['oc_block']}" if "oc_block" in c else "")  # noqa: E731
                         for c in candidates(wl, blocks=[8, 16])]
    assert labels(transposed([1, 16, 8, 8], [16, 24, 2, 2])) == [
        "NCHW8c->NCHW8c", "NCHW16c->NCHW8c", "NCHW->NCHW"]
    # one output channel: its own block, or padded blocks written out as NCHW
    assert labels(transposed([1, 24, 8, 8], [24, 1, 2, 2])) == [
        "NCHW8c->NCHW1c", "NCHW8c->NCHW/8", "NCHW8c->NCHW/16", "NCHW->NCHW"]
    assert labels(transposed([1, 16, 8, 8], [16, 1, 4, 4], padding=1, groups=16)) == [
        "NCHW8c->NCHW8c", "NCHW16c->NCHW16c", "NCHW->NCHW"]
    # 12 channels: no block of 8 or 16 divides them, the input stays NCHW (TVM's kernel)
    assert labels(transposed([1, 12, 8, 8], [12, 8, 2, 2])) == ["NCHW->NCHW"]
    assert labels(transposed([1, 16, 8, 8], [16, 2, 2, 2], groups=8)) == ["NCHW->NCHW"]  # grouped
    dilated = validate_workload({**transposed([1, 16, 8, 8], [16, 8, 3, 3]), "dilation": [2, 2]})
    assert labels(dilated) == ["NCHW->NCHW"]


@pytest.mark.parametrize("workload, candidate, message", [
    (transposed([1, 12, 8, 8], [12, 8, 2, 2]), {"in": "NCHW8c", "out": "NCHW8c"},
     "block 8 does not divide the 12 channels"),
    (transposed([1, 16, 8, 8], [16, 8, 2, 2]), {"in": "NCHW8c", "out": "NCHW", "oc_block": 8},
     "block 8 divides the 8 output channels"),
    (transposed([1, 16, 8, 8], [16, 8, 2, 2]), {"in": "NCHW8c", "out": "NCHW"}, "needs a blocked output"),
    (transposed([1, 16, 8, 8], [16, 2, 2, 2], groups=8), {"in": "NCHW8c", "out": "NCHW8c"},
     "grouped transposed convs have the NCHW kernel only"),
    (transposed([1, 16, 8, 8], [16, 8, 2, 2]), {"in": "NCHW8c", "out": "NCHW8c", "tile": 2}, "unknown keys"),
])
def test_bad_transposed_candidates_are_clear_errors(workload, candidate, message):
    with pytest.raises(ProblemError, match=message):
        TRANSPOSED.validate_candidate(workload, candidate)


@pytest.mark.parametrize("change, message", [
    ({"output_padding": [2, 2]}, "output_padding .* must be below the strides"),
    ({"kernel": [8, 8, 2, 2]}, "expects 8 input channels"),
    ({"padding": [5, 5, 5, 5]}, "empty output"),
])
def test_bad_transposed_workloads_are_clear_errors(change, message):
    with pytest.raises(ProblemError, match=message):
        validate_workload({**transposed([1, 16, 4, 4], [16, 8, 2, 2]), **change})


@pytest.mark.parametrize("candidate, algorithm", [
    ({"in": "NCHW8c", "out": "NCHW8c"}, "direct"),
    ({"in": "NCHW8c", "out": "NCHW16c", "algorithm": "gemm"}, "gemm"),
])
def test_each_transposed_kernel_is_scheduled_by_its_own_family(candidate, algorithm, target):
    tvm = import_tvm()
    workload = transposed([1, 16, 8, 8], [16, 16, 3, 3], padding=1, output_padding=1,
                          epilogue=("bias", "relu"))
    script = build_kernel(workload, candidate, target).module.script()
    assert "T.parallel" in script and "T.vectorized" in script and "T.unroll" in script
    with target:
        sch = tvm.s_tir.Schedule(tvm.te.create_prim_func(kernel_tensors(tvm, workload, candidate)))
    assert family_of_function(sch, block_names(sch)) is FAMILIES["conv2d_transpose", algorithm]


# -- ConvTranspose: ONNX models ------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    {"kernel": 2, "stride": 2},
    {"kernel": 4, "stride": 2, "pads": 1, "size": (5, 7)},
    {"kernel": 3, "stride": 2, "pads": 1, "output_padding": 1, "size": (7, 5)},
    {"kernel": 4, "stride": 2, "pads": 1, "out_channels": 16, "channels": 16, "group": 16},
    {"kernel": 2, "stride": 2, "out_channels": 1, "size": (5, 11)},
], ids=["2x2s2", "4x4s2p1", "3x3s2p1op1", "depthwise4x4s2", "one-channel"])
def test_onnx_conv_transpose_is_a_target_node_and_its_blocked_build_matches(case, tmp_path):
    size = case.pop("size", (7, 5))
    path = conv_transpose_onnx(tmp_path / "deconv.onnx", size=size, **case)
    graph, rewritten, untouched_error, ort_error = built_against_references(path, (1, 3, *size))
    [node] = [n for n in graph.layout_nodes() if n.op == "relax.nn.conv2d_transpose"]
    # measured as built: with its bias (a scalar add for one channel) and what FuseOps fuses after it
    assert node.kind == "target" and node.workload["epilogue"]
    assert any(choice.in_layout != "NCHW" for choice in node.choices)
    assert "relax.nn.conv2d_transpose" not in op_list(rewritten)  # it runs the blocked kernel
    assert untouched_error < 1e-5 and ort_error < 1e-5


def test_a_model_with_a_transposed_conv_is_tuned_end_to_end(tmp_path):
    from layoutopt.tvm import tune_and_build

    path = conv_transpose_onnx(tmp_path / "deconv.onnx", kernel=4, pads=1, size=(6, 5))
    result = tune_and_build(load_model(path, [1, 3, 6, 5]), method="pbqp", candidates=[8, 16],
                            cache=tmp_path / "costs.jsonl", baselines=(), repeat=1, calibrate=0)
    [name] = [n.name for n in result.graph.layout_nodes() if n.op == "relax.nn.conv2d_transpose"]
    assert result.meta.stats.failed == 0  # every kernel measured, GEMM + col2im included
    algorithms = {c.record.algorithm for c in result.graph.layout_node(name).choices}
    assert algorithms == {"direct", "gemm"}
    assert result.tuned.max_relative_error < 1e-4  # against the untouched model in float64
    assert result.tuned.transforms == expected_transforms(result.graph, result.solution.assignment)


def test_the_profile_matches_a_transposed_conv_call_to_its_node_and_prices_it(tmp_path):
    from layoutopt.problem import Costs
    from layoutopt.tvm.evaluate.profile import KernelShapes, observe, profile_calls, time_breakdown

    path = conv_transpose_onnx(tmp_path / "deconv.onnx", kernel=4, pads=1, size=(6, 5))
    graph = extract_layout_graph(load_model(path, [1, 3, 6, 5]), [8, 16])
    assignment = fixed_layout_assignment(graph, "NCHW8c")
    [name] = [n.name for n in graph.layout_nodes() if n.op == "relax.nn.conv2d_transpose"]
    data = np.random.default_rng(0).standard_normal((1, 3, 6, 5)).astype("float32")
    calls = profile_calls(build(apply_assignment(graph.mod, graph, assignment)), [data], repeat=1)
    assert name in observe(calls, graph, assignment, KernelShapes()).kernels  # its in-network time
    costs = Costs({n.name: np.full(len(n.choices), 1e-3 if n.kind == "target" else 0.0)
                   for n in graph.layout_nodes()}, {edge: np.zeros((len(graph.nodes[edge[0]]["choices"]),
                                                                  len(graph.nodes[edge[1]]["choices"])))
                                                     for edge in graph.edges})
    rows = {row.category: row for row in time_breakdown(calls, graph, costs, assignment)}
    assert rows["conv2d_transpose"].predicted == 1e-3 and rows["conv2d_transpose"].calls == 1
    assert rows["conv2d"].predicted == 1e-3  # the stem alone


@pytest.mark.parametrize("choice", ["NCHW8c->NCHW1c", "NCHW4c->NCHW[oc_block=16]", "NCHW->NCHW"])
def test_each_kernel_of_a_one_channel_head_builds_and_matches(choice, tmp_path):
    path = conv_transpose_onnx(tmp_path / "head.onnx", out_channels=1, size=(6, 5))
    prepared = prepare(load_model(path, [1, 3, 6, 5]))
    graph = extract_layout_graph(prepared, [4, 8], prepared=True)
    [name] = [n.name for n in graph.layout_nodes() if n.op == "relax.nn.conv2d_transpose"]
    stem = next(n.name for n in graph.layout_nodes() if n.op == "relax.nn.conv2d")
    stem_out = "NCHW" if choice.startswith("NCHW->") else choice.split("->")[0]
    choices = {stem: f"NCHW->{stem_out}" if stem_out == "NCHW" else f"NCHW3c->{stem_out}", name: choice}
    _, _, untouched_error, ort_error = built_against_references(path, (1, 3, 6, 5), choices, blocks=(4, 8))
    assert untouched_error < 1e-5 and ort_error < 1e-5


def test_a_padded_head_writing_wide_rows_with_its_sigmoid_is_vectorised_in_pieces_and_matches(target):
    # DBNet's probability head at 640: ConvTranspose 24 -> 1 on padded blocks, then add and sigmoid on
    # 640-wide NCHW rows. Vectorised a whole row at a time, LLVM compiled it for over 60 s.
    import re

    from layoutopt.tvm.kernels.common import VECTOR_LANES

    workload = transposed([1, 24, 48, 56], [24, 1, 2, 2], epilogue=(("add", -0.1), "sigmoid"))
    kernel = build_kernel(workload, {"in": "NCHW8c", "out": "NCHW", "oc_block": 8}, target)
    widths = [int(w) for w in re.findall(r"T\.vectorized\((\d+)\)", kernel.module.script())]
    assert widths and max(widths) <= VECTOR_LANES  # rows of 112 in two pieces of 56
    assert check_kernel(kernel, target=target) < 1e-5


# -- Resize ---------------------------------------------------------------------------------------------


#: one tiny ONNX model per coordinate mode (and nearest rounding), by integer scales and to odd sizes
RESIZES = {
    "nearest-asymmetric-floor": ("nearest", "asymmetric", "floor", (2.0, 2.0), None),
    "nearest-asymmetric-floor-x3": ("nearest", "asymmetric", "floor", (3.0, 3.0), None),
    "nearest-asymmetric-round_prefer_ceil": ("nearest", "asymmetric", "round_prefer_ceil", None, (13, 11)),
    "nearest-half_pixel-round_prefer_floor": ("nearest", "half_pixel", "round_prefer_floor", (2.0, 2.0),
                                              None),
    "nearest-align_corners-round_prefer_ceil": ("nearest", "align_corners", "round_prefer_ceil", None,
                                                (9, 17)),
    "nearest-tf_half_pixel_for_nn-floor": ("nearest", "tf_half_pixel_for_nn", "floor", None, (11, 13)),
    "linear-half_pixel": ("linear", "half_pixel", "floor", (2.0, 2.0), None),
    "linear-half_pixel-sizes": ("linear", "half_pixel", "floor", None, (11, 17)),
    "linear-align_corners": ("linear", "align_corners", "floor", None, (9, 13)),
    "linear-asymmetric": ("linear", "asymmetric", "floor", (2.0, 2.0), None),
    "linear-pytorch_half_pixel": ("linear", "pytorch_half_pixel", "floor", None, (7, 3)),
}


@pytest.mark.parametrize("name", list(RESIZES))
def test_a_resize_follows_the_blocked_layout_and_matches_onnxruntime(name, tmp_path):
    mode, coordinates, nearest, scales, sizes = RESIZES[name]
    path = resize_onnx(tmp_path / "resize.onnx", mode, coordinates, nearest, scales=scales, sizes=sizes)
    graph, rewritten, untouched_error, ort_error = built_against_references(path, (1, 3, 5, 7))
    resizes = [b.var.name for blk in graph.mod["main"].body.blocks for b in blk.bindings
               if getattr(getattr(b.value, "op", None), "name", None) == "relax.image.resize2d"]
    assert len(resizes) == 1 and resizes[0] in graph.following  # no node: it follows the stem conv
    layouts = [str(b.value.attrs.layout) for blk in rewritten["main"].body.blocks for b in blk.bindings
               if getattr(getattr(b.value, "op", None), "name", None) == "relax.image.resize2d"]
    assert layouts == ["NCHW8c"]
    assignment = fixed_layout_assignment(graph, "NCHW8c")
    assert count_layout_transforms(rewritten) == expected_transforms(graph, assignment) == 2  # in, out
    assert untouched_error < 1e-5 and ort_error < 1e-5


RESIZE_WORKLOADS = [
    ("nearest_neighbor", "asymmetric", "floor", [1, 16, 5, 7], [10, 14]),
    ("nearest_neighbor", "half_pixel", "round_prefer_ceil", [1, 8, 7, 5], [13, 11]),
    ("nearest_neighbor", "align_corners", "round", [2, 24, 6, 3], [3, 7]),
    ("linear", "half_pixel", "", [1, 8, 7, 5], [13, 11]),
    ("linear", "align_corners", "", [1, 16, 5, 7], [11, 2]),
    ("linear", "asymmetric", "", [1, 12, 3, 5], [7, 9]),
]


@pytest.mark.parametrize("method, mode, rounding, data, size", RESIZE_WORKLOADS)
def test_every_resize_kernel_matches_numpy(method, mode, rounding, data, size, target):
    workload = validate_workload({"op": "resize2d", "data": data, "size": size, "method": method,
                                  "coordinate_transformation_mode": mode, "rounding_method": rounding})
    found = RESIZE.candidates(workload, blocks=[8, 16])
    # 12 channels: no block of 8 or 16 divides them, so NCHW4c... only with block 4 asked for
    assert [c["in"] for c in found] == [f"NCHW{b}c" for b in (8, 16) if data[1] % b == 0] + ["NCHW"]
    for candidate in found:
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-5


def test_a_blocked_resize_is_vectorised_along_the_channel_block_with_its_fused_add(target):
    tvm = import_tvm()
    relax = tvm.relax
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 6, 5, 8), "float32"))
    skip = relax.Var("skip", relax.TensorType((1, 2, 12, 10, 8), "float32"))
    with builder.function("main", [x, skip]):
        with builder.dataflow():
            up = builder.emit(relax.op.image.resize2d(x, (12, 10), layout="NCHW8c", method="nearest_neighbor",
                                                      coordinate_transformation_mode="asymmetric",
                                                      rounding_method="floor"))
            out = builder.emit_output(relax.op.add(up, skip))
        builder.emit_func_output(out)
    with target:
        mod = relax.transform.LegalizeOps()(builder.get())
        mod = relax.transform.AnnotateTIROpPattern()(mod)
        mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    [func] = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    sch = RESIZE.schedule(func, target)
    [name] = block_names(sch)  # the resize inlined into the add: one pass
    *_, innermost = (sch.get(loop) for loop in sch.get_loops(sch.get_sblock(name)))
    assert "T.parallel" in sch.mod.script()
    assert innermost.kind == tvm.tirx.ForKind.VECTORIZED and int(innermost.extent) == 8  # the channel block
    data = np.random.default_rng(0).standard_normal((1, 2, 6, 5, 8)).astype("float32")
    other = np.random.default_rng(1).standard_normal((1, 2, 12, 10, 8)).astype("float32")
    ex = tvm.compile(sch.mod["main"].with_attr("global_symbol", "main"), target=target)
    args = [tvm.runtime.tensor(a) for a in (data, other, np.zeros_like(other))]
    ex["main"](*args)
    np.testing.assert_allclose(args[2].numpy(), data.repeat(2, axis=2).repeat(2, axis=3) + other, rtol=1e-6)


def test_a_cubic_resize_follows_the_blocked_layout_as_the_onnx_resize_kernel(tmp_path):
    # TVM's resize2d has no blocked cubic kernel; the ONNX resize kernel (layoutopt.tvm.kernels.onnx_resize)
    # takes any layout
    path = resize_onnx(tmp_path / "cubic.onnx", "cubic", "half_pixel")
    graph, rewritten, untouched_error, ort_error = built_against_references(path, (1, 3, 5, 7))
    assert [n.op for n in graph.layout_nodes() if n.kind == "boundary"] == []
    assert count_layout_transforms(rewritten) == 2 and untouched_error < 1e-5 and ort_error < 1e-5


@pytest.mark.parametrize("change, message", [
    ({"method": "cubic"}, "method 'cubic' is not among"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "coordinate_transformation_mode"),
    ({"rounding_method": "nearest"}, "rounding_method 'nearest'"),
    ({"coordinate_transformation_mode": "align_corners", "size": [1, 4]}, "2 or more rows and columns"),
])
def test_bad_resize_workloads_are_clear_errors(change, message):
    workload = {"op": "resize2d", "data": [1, 8, 4, 4], "size": [8, 8], "method": "nearest_neighbor",
                "coordinate_transformation_mode": "asymmetric", "rounding_method": "floor"}
    with pytest.raises(ProblemError, match=message):
        validate_workload({**workload, **change})
