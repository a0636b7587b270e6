"""Small random ONNX graphs of the ops layoutopt imports, for the numerics fuzz suite
(``test_fuzz_numerics.py``): a hypothesis strategy of *specs* (plain data, so that a failing one can be
kept as an ``@example``) and the ONNX model a spec stands for.

A spec is ``{"input": [C, H, W], "seed": s, "ops": [...]}``: a stem conv on the input, then each op
applied to the last tensor (some reading an earlier one of the same height and width), the last tensor
the model's output. Ops: ``conv`` (groups, dilations, strides, asymmetric pads; depthwise),
``conv_transpose`` (groups, output_padding), ``pool`` (max/avg, ceil_mode, count_include_pad),
``resize`` (every mode and coordinate transformation, by scales or sizes), ``concat``, ``split`` and
``slice`` along channels, ``binary`` (elementwise with a per-channel, scalar or tensor operand),
``act`` (ReLU, ReLU6, hard-swish, hard-sigmoid, SiLU, GELU as exporters write them...), ``se``
(squeeze-excite), ``layernorm`` (over the last axis, the op or written out) and ``head`` (flatten,
matmul, softmax: the end of a graph).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

#: the opset of the models (Resize 19: half_pixel_symmetric; LayerNormalization since 17)
OPSET = 19
ACTIVATIONS = ("Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "SiLU", "GELU", "LeakyRelu", "Tanh")
COORDINATES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def specs(draw, max_ops: int = 5) -> dict[str, Any]:
    """A spec (see the module's docstring) of up to ``max_ops`` ops after the stem."""
    channels = draw(st.sampled_from([3, 4, 8]))
    height, width = draw(st.integers(4, 11)), draw(st.integers(4, 11))
    spec = {"input": [channels, height, width], "seed": draw(st.integers(0, 2**16)), "ops": []}
    shapes = [(channels, height, width)]
    stem = _conv(draw, shapes[-1], depthwise=False)
    spec["ops"].append(stem)
    shapes.append(_shape_after(stem, shapes))
    for _ in range(draw(st.integers(1, max_ops))):
        kinds = [
            "conv",
            "conv",
            "depthwise",
            "conv_transpose",
            "pool",
            "resize",
            "concat",
            "split",
            "slice",
            "binary",
            "act",
            "act",
            "se",
            "layernorm",
        ]
        kind = draw(st.sampled_from(kinds))
        op = _draw_op(draw, kind, shapes)
        if op is None:
            continue
        spec["ops"].append(op)
        shapes.append(_shape_after(op, shapes))
    if draw(st.booleans()):
        spec["ops"].append({"op": "head", "out": draw(st.sampled_from([5, 10, 16]))})
    return spec


def _conv(draw, shape, depthwise: bool) -> dict[str, Any]:
    c, h, w = shape
    kernel = [draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3]))]
    dilation = [draw(st.sampled_from([1, 2])) if k > 1 else 1 for k in kernel]
    stride = [draw(st.sampled_from([1, 1, 2])) for _ in range(2)]
    pads = [draw(st.integers(0, k - 1)) for k in (*kernel, *kernel)]  # top, left, bottom, right
    for axis, size in enumerate((h, w)):  # the window fits the padded input
        while size + pads[axis] + pads[axis + 2] < dilation[axis] * (kernel[axis] - 1) + 1:
            pads[axis + 2] += 1
    if depthwise:
        out, groups = c * draw(st.sampled_from([1, 2])), c
    else:
        out = draw(st.sampled_from([4, 6, 8, 12, 16, 24]))
        groups = draw(st.sampled_from([g for g in _divisors(c) if out % g == 0]))
    return {
        "op": "conv",
        "out": out,
        "kernel": kernel,
        "stride": stride,
        "dilation": dilation,
        "pads": pads,
        "groups": groups,
        "bias": draw(st.booleans()),
    }


def _same_size(shapes, h: int, w: int) -> list[int]:
    return [i for i, (_, hh, ww) in enumerate(shapes) if (hh, ww) == (h, w) and i > 0]


def _draw_op(draw, kind: str, shapes) -> dict[str, Any] | None:
    c, h, w = shapes[-1]
    if kind in ("conv", "depthwise"):
        return _conv(draw, shapes[-1], depthwise=kind == "depthwise")
    if kind == "conv_transpose":
        kernel = draw(st.sampled_from([1, 2, 3, 4]))
        stride = draw(st.sampled_from([1, 2, 3]))
        pads = [draw(st.integers(0, (kernel - 1) // 2)) for _ in range(4)]
        out = draw(st.sampled_from([4, 8, 12, 16]))
        groups = draw(st.sampled_from([g for g in _divisors(c) if out % g == 0]))
        output_padding = [draw(st.integers(0, stride - 1)) for _ in range(2)]
        return {
            "op": "conv_transpose",
            "out": out,
            "kernel": [kernel, kernel],
            "stride": [stride, stride],
            "pads": pads,
            "output_padding": output_padding,
            "groups": groups,
            "bias": draw(st.booleans()),
        }
    if kind == "pool":
        kernel = [draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w)))]
        if kernel == [1, 1]:
            return None
        stride = [draw(st.sampled_from([1, 2])) for _ in range(2)]
        pads = [draw(st.integers(0, k - 1)) for k in (*kernel, *kernel)]
        ceil = draw(st.sampled_from([0, 1]))
        for n, k, s, p0, p1 in (
            (h, kernel[0], stride[0], pads[0], pads[2]),
            (w, kernel[1], stride[1], pads[1], pads[3]),
        ):
            if ceil and (-(-(n + p0 + p1 - k) // s)) * s >= n + p0:
                # the last ceil window would start past the input: ONNX's shape inference keeps it, ONNX
                # Runtime (and TVM) drop it, so the model's declared shapes would be wrong
                ceil = 0
        return {
            "op": "pool",
            "kind": draw(st.sampled_from(["MaxPool", "AveragePool"])),
            "kernel": kernel,
            "stride": stride,
            "pads": pads,
            "ceil": ceil,
            "count_include_pad": draw(st.sampled_from([0, 1])),
        }
    if kind == "resize":
        mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
        coordinates = draw(st.sampled_from(COORDINATES))
        op = {
            "op": "resize",
            "mode": mode,
            "coordinates": coordinates,
            "nearest_mode": draw(
                st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
            ),
            "exclude_outside": draw(st.sampled_from([0, 1])) if mode == "cubic" else 0,
        }
        if draw(st.booleans()):
            scales = [draw(st.sampled_from([0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5])) for _ in range(2)]
            if int(h * scales[0]) < 1 or int(w * scales[1]) < 1:
                return None
            op["scales"] = scales
        else:
            op["sizes"] = [draw(st.integers(1, 2 * h + 1)), draw(st.integers(1, 2 * w + 1))]
        if coordinates == "tf_crop_and_resize":
            op["roi"] = [
                draw(st.sampled_from([0.0, 0.2])),
                draw(st.sampled_from([-0.1, 0.0])),
                draw(st.sampled_from([0.8, 1.0])),
                draw(st.sampled_from([1.0, 1.2])),
            ]
        return op
    if kind == "concat":
        return {"op": "concat", "with": draw(st.sampled_from(_same_size(shapes, h, w)))}
    if kind == "split":
        if c < 2:
            return None
        first = draw(st.integers(1, c - 1))
        return {
            "op": "split",
            "sections": [first, c - first],
            "take": draw(st.sampled_from([0, 1])),
            "swap_concat": draw(st.booleans()),
        }
    if kind == "slice":
        if c < 2:
            return None
        start = draw(st.integers(0, c - 1))
        return {"op": "slice", "start": start, "end": draw(st.integers(start + 1, c))}
    if kind == "binary":
        operand = draw(st.sampled_from(["channel", "scalar", "tensor"]))
        op = {
            "op": "binary",
            "kind": draw(st.sampled_from(["Add", "Mul", "Sub", "Div", "Max"])),
            "operand": operand,
        }
        if operand == "tensor":
            same = [i for i, s in enumerate(shapes) if s == (c, h, w) and i > 0]
            op["with"] = draw(st.sampled_from(same))
            if op["kind"] == "Div":
                op["kind"] = "Mul"
        return op
    if kind == "act":
        return {"op": "act", "kind": draw(st.sampled_from(ACTIVATIONS))}
    if kind == "se":
        return {
            "op": "se",
            "reduced": draw(st.sampled_from([max(1, c // 4), max(1, c // 2)])),
            "gate": draw(st.sampled_from(["Sigmoid", "HardSigmoid"])),
        }
    if kind == "layernorm":
        return {"op": "layernorm", "written_out": draw(st.booleans())}
    raise AssertionError(kind)


def _shape_after(op: dict[str, Any], shapes) -> tuple[int, int, int]:
    """The (C, H, W) after ``op`` on the last tensor (and, for concat, the one it reads)."""
    c, h, w = shapes[-1]
    kind = op["op"]
    if kind == "conv":
        (kh, kw), (sh, sw), (dh, dw) = op["kernel"], op["stride"], op["dilation"]
        t, left, b, r = op["pads"]
        return (
            op["out"],
            (h + t + b - dh * (kh - 1) - 1) // sh + 1,
            (w + left + r - dw * (kw - 1) - 1) // sw + 1,
        )
    if kind == "conv_transpose":
        (k, _), (s, _) = op["kernel"], op["stride"]
        t, left, b, r = op["pads"]
        oh, ow = op["output_padding"]
        return op["out"], (h - 1) * s + oh + k - t - b, (w - 1) * s + ow + k - left - r
    if kind == "pool":
        (kh, kw), (sh, sw) = op["kernel"], op["stride"]
        t, left, b, r = op["pads"]
        rounding = (lambda x: -(-x // 1)) if op["ceil"] else (lambda x: x // 1)

        def size(n, k, s, p0, p1):  # as ONNX's shape inference: no window dropped for starting in the pads
            return int(rounding((n + p0 + p1 - k) / s)) + 1

        return c, size(h, kh, sh, t, b), size(w, kw, sw, left, r)
    if kind == "resize":
        if "sizes" in op:
            return c, op["sizes"][0], op["sizes"][1]
        return (
            c,
            int(np.float32(op["scales"][0]) * np.float32(h)),
            int(np.float32(op["scales"][1]) * np.float32(w)),
        )
    if kind == "concat":
        return c + shapes[op["with"]][0], h, w
    if kind == "split":
        return (c if op["swap_concat"] else op["sections"][op["take"]]), h, w
    if kind == "slice":
        return op["end"] - op["start"], h, w
    if kind == "head":
        return op["out"], 1, 1
    return c, h, w


def build_model(spec: dict[str, Any]):
    """The ``onnx.ModelProto`` a spec stands for (weights drawn from its seed); its input ``x``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(spec["seed"])
    c, h, w = spec["input"]
    nodes, inits = [], []
    names = ["x"]
    shapes = [(c, h, w)]

    def const(array, name: str) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(op_type: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    for index, op in enumerate(spec["ops"]):
        kind, x, (c, h, w) = op["op"], names[-1], shapes[-1]
        tag = f"{kind}{index}"
        if kind in ("conv", "conv_transpose"):
            groups, out = op["groups"], op["out"]
            kh, kw = op["kernel"]
            fan_in = (c // groups) * kh * kw
            shape = (out, c // groups, kh, kw) if kind == "conv" else (c, out // groups, kh, kw)
            inputs = [x, const(rng.standard_normal(shape) / np.sqrt(fan_in), f"{tag}_w")]
            if op["bias"]:
                inputs.append(const(rng.standard_normal(out) * 0.1, f"{tag}_b"))
            attrs = {
                "kernel_shape": op["kernel"],
                "strides": op["stride"],
                "pads": op["pads"],
                "group": groups,
            }
            if kind == "conv":
                y = node("Conv", inputs, tag, dilations=op["dilation"], **attrs)
            else:
                y = node("ConvTranspose", inputs, tag, output_padding=op["output_padding"], **attrs)
        elif kind == "pool":
            attrs = {
                "kernel_shape": op["kernel"],
                "strides": op["stride"],
                "pads": op["pads"],
                "ceil_mode": op["ceil"],
            }
            if op["kind"] == "AveragePool":
                attrs["count_include_pad"] = op["count_include_pad"]
            y = node(op["kind"], [x], tag, **attrs)
        elif kind == "resize":
            roi = op.get("roi")
            roi_name = const(
                [] if roi is None else [0, 0, roi[0], roi[1], 1, 1, roi[2], roi[3]], f"{tag}_roi"
            )
            if "sizes" in op:
                inits.append(
                    numpy_helper.from_array(np.array([1, c, *op["sizes"]], np.int64), f"{tag}_sizes")
                )
                inputs = [x, roi_name, "", f"{tag}_sizes"]
            else:
                inputs = [x, roi_name, const([1, 1, *op["scales"]], f"{tag}_scales")]
            attrs = {
                "mode": op["mode"],
                "coordinate_transformation_mode": op["coordinates"],
                "nearest_mode": op["nearest_mode"],
                "extrapolation_value": -1.5,
            }
            if op["mode"] == "cubic":
                attrs["exclude_outside"] = op["exclude_outside"]
            y = node("Resize", inputs, tag, **attrs)
        elif kind == "concat":
            y = node("Concat", [x, names[op["with"]]], tag, axis=1)
        elif kind == "split":
            inits.append(numpy_helper.from_array(np.array(op["sections"], np.int64), f"{tag}_sections"))
            nodes.append(
                helper.make_node("Split", [x, f"{tag}_sections"], [f"{tag}_a", f"{tag}_b"], name=tag, axis=1)
            )
            if op["swap_concat"]:
                y = node("Concat", [f"{tag}_b", f"{tag}_a"], f"{tag}_swapped", axis=1)
            else:
                y = f"{tag}_{'ab'[op['take']]}"
        elif kind == "slice":
            starts = numpy_helper.from_array(np.array([op["start"]], np.int64), f"{tag}_starts")
            ends = numpy_helper.from_array(np.array([op["end"]], np.int64), f"{tag}_ends")
            axes = numpy_helper.from_array(np.array([1], np.int64), f"{tag}_axes")
            inits += [starts, ends, axes]
            y = node("Slice", [x, f"{tag}_starts", f"{tag}_ends", f"{tag}_axes"], tag)
        elif kind == "binary":
            if op["operand"] == "tensor":
                other = names[op["with"]]
            elif op["operand"] == "channel":
                values = rng.standard_normal((1, c, 1, 1))
                other = const(values + np.sign(values) * 0.5 if op["kind"] == "Div" else values, f"{tag}_k")
            else:
                other = const(np.float32(rng.choice([-1.5, 0.5, 2.0])), f"{tag}_k")
            y = node(op["kind"], [x, other], tag)
        elif kind == "act":
            y = _activation(op["kind"], x, tag, node, const)
        elif kind == "se":
            pooled = node("GlobalAveragePool", [x], f"{tag}_pool")
            reduced = op["reduced"]
            down = node(
                "Conv",
                [
                    pooled,
                    const(rng.standard_normal((reduced, c, 1, 1)) / np.sqrt(c), f"{tag}_w1"),
                    const(rng.standard_normal(reduced) * 0.1, f"{tag}_b1"),
                ],
                f"{tag}_down",
            )
            relu = node("Relu", [down], f"{tag}_relu")
            up = node(
                "Conv",
                [
                    relu,
                    const(rng.standard_normal((c, reduced, 1, 1)) / np.sqrt(reduced), f"{tag}_w2"),
                    const(rng.standard_normal(c) * 0.1, f"{tag}_b2"),
                ],
                f"{tag}_up",
            )
            gate = node(op["gate"], [up], f"{tag}_gate")
            y = node("Mul", [x, gate], tag)
        elif kind == "layernorm":
            scale, bias = (
                const(rng.standard_normal(w) * 0.5 + 1, f"{tag}_g"),
                const(rng.standard_normal(w) * 0.1, f"{tag}_beta"),
            )
            if op["written_out"]:  # as exporters write it: prepare() makes it one layer_norm again
                axes = numpy_helper.from_array(np.array([-1], np.int64), f"{tag}_axes")
                inits.append(axes)
                mean = node("ReduceMean", [x, f"{tag}_axes"], f"{tag}_mean", keepdims=1)
                centred = node("Sub", [x, mean], f"{tag}_centred")
                square = node("Pow", [centred, const(np.float32(2.0), f"{tag}_two")], f"{tag}_square")
                variance = node("ReduceMean", [square, f"{tag}_axes"], f"{tag}_var", keepdims=1)
                std = node(
                    "Sqrt",
                    [node("Add", [variance, const(np.float32(1e-5), f"{tag}_eps")], f"{tag}_ve")],
                    f"{tag}_std",
                )
                normal = node("Div", [centred, std], f"{tag}_normal")
                y = node("Add", [node("Mul", [normal, scale], f"{tag}_scaled"), bias], tag)
            else:
                y = node("LayerNormalization", [x, scale, bias], tag, axis=-1, epsilon=1e-5)
        elif kind == "head":
            flat = node("Flatten", [x], f"{tag}_flat", axis=1)
            features = c * h * w
            logits = node(
                "MatMul",
                [flat, const(rng.standard_normal((features, op["out"])) / np.sqrt(features), f"{tag}_w")],
                f"{tag}_mm",
            )
            biased = node(
                "Add", [logits, const(rng.standard_normal(op["out"]) * 0.1, f"{tag}_b")], f"{tag}_logits"
            )
            y = node("Softmax", [biased], tag, axis=-1)
        else:
            raise AssertionError(kind)
        names.append(y)
        shapes.append(_shape_after(op, shapes))
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *spec["input"]])
    c, h, w = shapes[-1]
    out_shape = [1, c] if spec["ops"][-1]["op"] == "head" else [1, c, h, w]
    y_info = helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, out_shape)
    graph = helper.make_graph(nodes, "fuzz", [x_info], [y_info], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    inferred = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info
    }
    for name, (c, h, w) in zip(names[1:], shapes[1:], strict=True):  # the spec's plan is ONNX's shapes
        if name in inferred and len(inferred[name]) == 4:
            assert inferred[name] == [1, c, h, w], (name, inferred[name], (c, h, w))
    return model


def _activation(kind: str, x: str, tag: str, node, const) -> str:
    if kind == "Clip":  # ReLU6
        return node("Clip", [x, const(np.float32(0), f"{tag}_lo"), const(np.float32(6), f"{tag}_hi")], tag)
    if kind == "SiLU":  # as exporters write it
        return node("Mul", [x, node("Sigmoid", [x], f"{tag}_sigmoid")], tag)
    if kind == "GELU":  # x * 0.5 * (1 + erf(x / sqrt 2)), as torch exports it
        scaled = node("Div", [x, const(np.float32(np.sqrt(2)), f"{tag}_root2")], f"{tag}_scaled")
        shifted = node(
            "Add", [node("Erf", [scaled], f"{tag}_erf"), const(np.float32(1), f"{tag}_one")], f"{tag}_shift"
        )
        return node(
            "Mul", [node("Mul", [x, shifted], f"{tag}_mul"), const(np.float32(0.5), f"{tag}_half")], tag
        )
    if kind == "LeakyRelu":
        return node("LeakyRelu", [x], tag, alpha=0.1)
    return node(kind, [x], tag)
