"""ONNX Resize with ONNX's semantics (layoutopt.tvm.kernels.onnx_resize, layoutopt.tvm.frontend.onnx_import),
checked against ONNX Runtime: the tables over a grid of shapes, scales and modes; builds in NCHW and
blocked layouts; the import of every opset's Resize and Upsample; the refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("tvm")
onnxruntime = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_models import resize_grid_onnx, resize_roi  # noqa: E402  (tests/tvm is on sys.path)

from layoutopt import ProblemError  # noqa: E402
from layoutopt.tvm import (  # noqa: E402
    apply_assignment,
    build,
    extract_layout_graph,
    fixed_layout_assignment,
    load_model,
    prepare,
)
from layoutopt.tvm._tvm import resolve_target  # noqa: E402
from layoutopt.tvm.evaluate.timing import run  # noqa: E402
from layoutopt.tvm.frontend.onnx_import import resize_workload  # noqa: E402
from layoutopt.tvm.kernels import FAMILIES, build_kernel, check_kernel, validate_workload  # noqa: E402
from layoutopt.tvm.kernels.onnx_resize import resize_reference, tvm_equivalent  # noqa: E402
from layoutopt.tvm.ops import ONNX_RESIZE, op_name  # noqa: E402

pytestmark = pytest.mark.tvm

COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: the region of interest of the crop-and-resize cases: partly outside the input (extrapolated)
ROI = (0.2, -0.1, 0.9, 1.2)


def modes():
    """Every (mode, nearest_mode, exclude_outside) ONNX Runtime computes: 4 + 1 + 2."""
    return ([("nearest", rounding, 0) for rounding in NEAREST] + [("linear", "round_prefer_floor", 0)]
            + [("cubic", "round_prefer_floor", exclude) for exclude in (0, 1)])


def case(mode, coordinates, rounding="round_prefer_floor", exclude=0, scales=None, sizes=None):
    return {"mode": mode, "coordinate_transformation_mode": coordinates, "nearest_mode": rounding,
            "exclude_outside": exclude, "cubic_coeff_a": -0.5 if exclude else -0.75,
            "extrapolation_value": -2.0, "roi": ROI if coordinates == "tf_crop_and_resize" else None,
            "scales": scales, "sizes": sizes}


def session(model):
    """An ONNX Runtime session of ``model`` (a path, or the serialized model)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # no warning per tf_half_pixel_for_nn model
    return onnxruntime.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                        providers=["CPUExecutionProvider"])


def single_resize_model(shape, resize: dict, opset=19):
    """One Resize of a ``shape`` input, as ``resize_grid_onnx`` writes each case, without the stem."""
    attrs = {k: v for k, v in resize.items() if k not in ("scales", "sizes", "roi") and v is not None}
    inits = [numpy_helper.from_array(resize_roi(resize.get("roi")), "roi")]
    if resize.get("sizes") is not None:
        inits.append(numpy_helper.from_array(np.array([*shape[:2], *resize["sizes"]], "int64"), "sizes"))
        inputs = ["x", "roi", "", "sizes"]
    else:
        inits.append(numpy_helper.from_array(np.array([1, 1, *resize["scales"]], "float32"), "scales"))
        inputs = ["x", "roi", "scales"]
    graph = helper.make_graph([helper.make_node("Resize", inputs, ["y"], name="resize", **attrs)], "resize",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def workload_of_model(model, shape):
    """The onnx_resize workload layoutopt reads from the model's one Resize node."""
    node = model.graph.node[0]
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    values = [constants.get(name) if name else None for name in node.input[1:]]
    return validate_workload(resize_workload("Resize", shape, values, attrs, model.opset_import[0].version))


# -- the tables against ONNX Runtime ------------------------------------------------------------------------

#: input shapes (size-1 axes, odd and even sizes) x scales (upscales and downscales, integral or not, a
#: scale of 1 on one axis) or sizes (onto one row, as align_corners divides by it)
SHAPES = [(1, 2, 7, 9), (1, 2, 1, 5), (1, 1, 4, 3), (1, 2, 21, 21)]
SCALES = [(1.5, 1.5), (0.6, 0.75), (1.3, 2.7), (2.0, 2.0), (0.5, 0.5), (3.0, 1.0), (1.0, 0.34)]


@pytest.mark.parametrize("mode, rounding, exclude", modes())
def test_the_tables_match_onnxruntime_over_a_grid_of_shapes_scales_and_modes(mode, rounding, exclude):
    rng = np.random.default_rng(0)
    checked = 0
    for shape, coordinates in itertools.product(SHAPES, COORDINATES):
        sizes = [(1, 11), (shape[2] * 2 + 1, 1)]
        for scales, size in [*((s, None) for s in SCALES), *((None, s) for s in sizes)]:
            resize = case(mode, coordinates, rounding, exclude, scales, size)
            model = single_resize_model(shape, resize)
            x = rng.standard_normal(shape).astype("float32")
            theirs = session(model.SerializeToString()).run(None, {"x": x})[0]
            if 0 in theirs.shape:
                continue  # a scale that leaves no row: ONNX Runtime's output is empty, ours is refused
            workload = workload_of_model(model, list(shape))
            assert workload["size"] == list(theirs.shape[2:]), (resize, shape)
            ours = resize_reference(workload, [x])
            assert np.abs(ours - theirs).max() <= 1e-5 * max(1.0, np.abs(theirs).max()), (resize, shape)
            checked += 1
    assert checked > 200


def test_a_tie_of_nearest_rounding_follows_onnxruntime():
    # (4 + 0.5) / 0.3f - 0.5 is 14.499999 in float32: ONNX Runtime takes it for the tie 14.5 it means
    # (round_prefer_ceil: 15), so do the tables; numpy's float32 alone would say 14
    model = single_resize_model((1, 1, 21, 1), case("nearest", "half_pixel", "round_prefer_ceil",
                                                    scales=(0.3, 1.0)))
    x = np.arange(21, dtype="float32").reshape(1, 1, 21, 1)
    theirs = session(model.SerializeToString()).run(None, {"x": x})[0]
    ours = resize_reference(workload_of_model(model, [1, 1, 21, 1]), [x])
    assert theirs[0, 0, 4, 0] == ours[0, 0, 4, 0] == 15.0


# -- builds against ONNX Runtime --------------------------------------------------------------------


def every_case(**size):
    return [case(mode, coordinates, rounding, exclude, **size)
            for coordinates in COORDINATES for mode, rounding, exclude in modes()]


@pytest.mark.parametrize("size, layouts", [
    ({"scales": (1.3, 2.7)}, ("NCHW", "NCHW8c")),   # upscales no size gives: TVM's import was wrong
    ({"scales": (0.6, 0.75)}, ("NCHW4c",)),          # downscales
    ({"sizes": (1, 12)}, ("NCHW8c",)),               # onto one row: align_corners divided by zero
])
def test_every_mode_built_in_plain_and_blocked_layouts_matches_onnxruntime(size, layouts, tmp_path):
    cases = every_case(**size)
    path = resize_grid_onnx(tmp_path / "grid.onnx", cases, channels=8, size=(7, 9))
    mod = prepare(load_model(path, [1, 3, 7, 9]))
    graph = extract_layout_graph(mod, [4, 8], prepared=True)
    resizes = [b.var.name for b in mod["main"].body.blocks[0].bindings
               if op_name(b.value, mod) in (ONNX_RESIZE, "relax.image.resize2d")]
    assert len(resizes) >= len(cases) - 2 and set(resizes) <= set(graph.following)  # in the stem's layout
    x = np.random.default_rng(1).standard_normal((1, 3, 7, 9)).astype("float32")
    theirs = session(path).run(None, {"x": x})
    for layout in layouts:
        ours = run(build(apply_assignment(mod, graph, fixed_layout_assignment(graph, layout))), [x])
        for index, (mine, reference) in enumerate(zip(ours, theirs, strict=True)):
            assert mine.shape == reference.shape, (layout, cases[index])
            assert np.abs(mine - reference).max() <= 1e-5 * max(1.0, np.abs(reference).max()), \
                (layout, cases[index])


def test_the_issues_resize_imports_as_the_onnx_kernel_and_scale_2_keeps_tvms_op(tmp_path):
    path = resize_grid_onnx(tmp_path / "two.onnx", [case("nearest", "half_pixel", scales=(1.5, 1.5)),
                                                     case("nearest", "half_pixel", scales=(2.0, 2.0))],
                            size=(21, 21))
    mod = load_model(path, [1, 3, 21, 21])
    ops = [op_name(b.value, mod) for b in mod["main"].body.blocks[0].bindings]
    assert ops.count(ONNX_RESIZE) == 1 and ops.count("relax.image.resize2d") == 1


def test_tvm_equivalent_only_where_tvms_coordinates_are_onnxs():
    base = {"op": "onnx_resize", "data": [1, 8, 21, 21], "mode": "linear",
            "coordinate_transformation_mode": "half_pixel"}
    assert tvm_equivalent(validate_workload({**base, "size": [42, 42], "scale": [2.0, 2.0]})) == {
        "method": "linear", "coordinate_transformation_mode": "half_pixel", "rounding_method": ""}
    coordinates = "coordinate_transformation_mode"
    for changed in ({"size": [31, 31], "scale": [1.5, 1.5]},
                    {"size": [42, 42], "scale": [2.0, 2.0], "mode": "cubic"},
                    {"size": [42, 42], "scale": [2.0, 2.0], coordinates: "tf_crop_and_resize"},
                    {"size": [1, 42], "scale": [1 / 21, 2.0], coordinates: "align_corners"}):
        assert tvm_equivalent(validate_workload({**base, **changed})) is None, changed


# -- the kernel family -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode, coordinates, rounding, size, scale", [
    ("nearest", "half_pixel", "round_prefer_floor", [7, 18], [1.5, 2.6]),
    ("linear", "align_corners", "round_prefer_floor", [7, 18], [1.5, 2.6]),
    ("cubic", "tf_crop_and_resize", "round_prefer_floor", [7, 18], [1.5, 2.6]),
    ("nearest", "asymmetric", "", [7, 18], [1.5, 2.6]),
    ("linear", "half_pixel", "", [5, 11], [1.0, 1.7]),        # an axis of scale 1: one tap on it
    ("cubic", "pytorch_half_pixel", "", [3, 7], [0.7, 1.0]),
])
def test_every_onnx_resize_kernel_matches_numpy(mode, coordinates, rounding, size, scale):
    target = resolve_target("llvm")
    workload = validate_workload({"op": "onnx_resize", "data": [1, 16, 5, 7], "size": size, "mode": mode,
                                  "coordinate_transformation_mode": coordinates, "nearest_mode": rounding,
                                  "scale": scale, "roi": [0.1, 0.0, 0.8, 1.3], "extrapolation_value": 3.0})
    family = FAMILIES["onnx_resize", "direct"]
    found = family.candidates(workload, blocks=[8, 16])
    assert [c["in"] for c in found] == ["NCHW8c", "NCHW16c", "NCHW"]
    for candidate in found:
        assert check_kernel(build_kernel(workload, candidate, target), target=target) < 1e-5


# -- the import of each opset, and what it refuses -------------------------------------------------


def upsample_model(opset):
    """Upsample-7 (scales as an attribute) or Upsample-9 / Resize-10 (scales as the second input)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scales = [1.0, 1.0, 1.5, 2.5]
    if opset < 9:
        node, inits = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=scales), []
    else:
        op = "Upsample" if opset == 9 else "Resize"
        node = helper.make_node(op, ["x", "scales"], ["y"], mode="linear")
        inits = [numpy_helper.from_array(np.array(scales, "float32"), "scales")]
    graph = helper.make_graph([node], "up", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [7, 9, 10])
def test_upsample_and_resize_10_import_as_onnxruntime_computes_them(opset, tmp_path):
    import tvm

    model = upsample_model(opset)
    onnx.save(model, str(tmp_path / "up.onnx"))
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 7)).astype("float32")
    theirs = session(tmp_path / "up.onnx").run(None, {"x": x})[0]
    ours = run(tvm.compile(load_model(tmp_path / "up.onnx"), "llvm"), [x])[0]
    assert ours.shape == theirs.shape == (1, 2, 7, 17)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, inputs, expected", [
    ({"keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]}, {"sizes": [10, 30]}, [10, 14]),
    ({"keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]}, {"sizes": [10, 30]}, [21, 30]),
    ({"axes": [3]}, {"scales": [1.7]}, [5, 11]),
    ({"axes": [-1, 2]}, {"sizes": [4, 3]}, [3, 4]),
])
def test_opset_18_axes_and_keep_aspect_ratio_policy(attrs, inputs, expected, tmp_path):
    import tvm

    shape = [1, 2, 5, 7]
    key = "sizes" if "sizes" in inputs else "scales"
    values = np.array(inputs[key], "int64" if key == "sizes" else "float32")
    node = helper.make_node("Resize", ["x", "", *(["", key] if key == "sizes" else [key])], ["y"],
                            mode="linear", **attrs)
    graph = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(values, key)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(tmp_path / "r.onnx"))
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    theirs = session(tmp_path / "r.onnx").run(None, {"x": x})[0]
    ours = run(tvm.compile(load_model(tmp_path / "r.onnx"), "llvm"), [x])[0]
    assert list(theirs.shape[2:]) == list(ours.shape[2:]) == expected
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, scales, message", [
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.5], "node 'resize': antialias=1 is not supported"),
    ({"mode": "nearest"}, [1, 2, 1, 1], "node 'resize': it resizes the batch or the channels"),
    ({"mode": "nearest", "exclude_outside": 1}, [1, 1, 2, 2],
     "node 'resize': onnx_resize 'exclude_outside' 1: 0, or 1 with mode 'cubic'"),
])
def test_a_resize_it_cannot_compute_is_refused_in_one_line_naming_the_node(attrs, scales, message, tmp_path):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    graph = helper.make_graph([node], "r", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(scales, "float32"), "scales")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(tmp_path / "r.onnx"))
    with pytest.raises(ProblemError, match=message) as raised:
        load_model(tmp_path / "r.onnx")
    assert "\n" not in str(raised.value) and "r.onnx" in str(raised.value)
