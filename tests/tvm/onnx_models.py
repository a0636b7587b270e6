"""Tiny ONNX models built in code (no download) for the tune and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tiny_conv_onnx(path: Path, channels: int = 8, size: int = 8, seed: int = 0) -> Path:
    """conv3x3(4 -> channels) + bias -> relu -> conv1x1 -> add(skip): a residual pair, batch ``N``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, size, size])
    def weight(shape, name):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)

    inits = [weight((channels, 4, 3, 3), "w1"), weight((channels,), "b1"),
             weight((channels, channels, 1, 1), "w2")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "tiny", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def relu_only_onnx(path: Path) -> Path:
    """A model with nothing to tune: one Relu."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def mobile_fpn_onnx(path: Path, seed: int = 0, fold_free: bool = False) -> Path:
    """The op mix of the public mobile CNNs (PP-OCR, YOLO, MobileNetV3) in a few layers, batch ``N``:

    stem conv -> HardSwish -> depthwise conv -> Clip(0, 6) -> squeeze-excite (GlobalAveragePool,
    1x1 convs, Relu, HardSigmoid, Mul) -> strided 1x1 conv -> SiLU (Sigmoid, Mul) -> FPN neck
    (Resize x2, lateral conv, Add, Concat) -> Erf -> conv: output ``y``; and a second output ``z``:
    the pooled top feature reshaped to ``(N, 16)`` by a shape computed at run time (Shape, Gather,
    Unsqueeze, Concat, Reshape), which TVM's ONNX frontend cannot import unfolded.
    ``fold_free=True`` gives ``z`` a constant shape instead.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name, shape):
        fan_in = int(np.prod(shape[1:]))
        return const(name, (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype("float32"))

    def bias(name, channels):
        return const(name, (rng.standard_normal(channels) * 0.1).astype("float32"))

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 8, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 16])
    conv = helper.make_node
    nodes = [
        conv("Conv", ["x", weight("w_stem", (8, 3, 3, 3)), bias("b_stem", 8)], ["stem"], name="stem",
             pads=[1, 1, 1, 1], strides=[2, 2]),
        conv("HardSwish", ["stem"], ["stem_hs"], name="stem_hswish"),
        conv("Conv", ["stem_hs", weight("w_dw", (8, 1, 3, 3)), bias("b_dw", 8)], ["dw"], name="depthwise",
             pads=[1, 1, 1, 1], group=8),
        conv("Clip", ["dw", const("lo", np.array(0.0, "float32")), const("hi", np.array(6.0, "float32"))],
             ["dw6"], name="relu6"),
        conv("GlobalAveragePool", ["dw6"], ["se_pool"], name="se_pool"),
        conv("Conv", ["se_pool", weight("w_se1", (4, 8, 1, 1)), bias("b_se1", 4)], ["se1"], name="se_reduce"),
        conv("Relu", ["se1"], ["se1r"], name="se_relu"),
        conv("Conv", ["se1r", weight("w_se2", (8, 4, 1, 1)), bias("b_se2", 8)], ["se2"], name="se_expand"),
        conv("HardSigmoid", ["se2"], ["se_gate"], name="se_gate", alpha=0.2, beta=0.5),
        conv("Mul", ["dw6", "se_gate"], ["se_out"], name="se_scale"),
        conv("Conv", ["se_out", weight("w_c3", (16, 8, 1, 1)), bias("b_c3", 16)], ["c3"], name="c3",
             strides=[2, 2]),
        conv("Sigmoid", ["c3"], ["c3_sig"], name="c3_sigmoid"),
        conv("Mul", ["c3", "c3_sig"], ["c3_silu"], name="c3_silu"),
        conv("Resize", ["c3_silu", "", const("scales", np.array([1, 1, 2, 2], "float32"))], ["up"],
             name="upsample", mode="nearest"),
        conv("Conv", ["se_out", weight("w_lat", (16, 8, 1, 1)), bias("b_lat", 16)], ["lat"], name="lateral"),
        conv("Add", ["up", "lat"], ["fpn"], name="fpn_add"),
        conv("Concat", ["fpn", "lat"], ["neck"], name="neck_concat", axis=1),
        conv("Erf", ["neck"], ["neck_erf"], name="neck_erf"),
        conv("Conv", ["neck_erf", weight("w_head", (8, 32, 3, 3)), bias("b_head", 8)], ["y"], name="head",
             pads=[1, 1, 1, 1]),
        conv("GlobalAveragePool", ["c3_silu"], ["top_pool"], name="top_pool"),
    ]
    if fold_free:
        nodes.append(conv("Reshape", ["top_pool", const("z_shape", np.array([1, 16], "int64"))], ["z"],
                          name="flatten"))
    else:
        # as Paddle2ONNX writes a flatten (the PP-OCR classifier): the Casts hide the shape
        nodes += [
            conv("Shape", ["top_pool"], ["pool_shape"], name="pool_shape"),
            conv("Cast", ["pool_shape"], ["pool_shape32"], name="to_int32", to=TensorProto.INT32),
            conv("Slice", ["pool_shape32", const("start", np.array([0], "int64")),
                           const("stop", np.array([1], "int64"))], ["batch32"], name="batch"),
            conv("Cast", ["batch32"], ["batch"], name="to_int64", to=TensorProto.INT64),
            conv("Concat", ["batch", const("minus1", np.array([-1], "int64"))], ["z_shape"], name="z_shape",
                 axis=0),
            conv("Reshape", ["top_pool", "z_shape"], ["z"], name="flatten"),
        ]
    graph = helper.make_graph(nodes, "mobile_fpn", [x], [y, z], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def mobilenet_v3_block_onnx(path: Path, seed: int = 0, size: int = 16) -> Path:
    """MobileNetV3-style blocks, each conv followed by another epilogue, batch 1:

    stem conv 3->16 s2 + HardSwish; an inverted residual (1x1 expand + HardSwish, depthwise 3x3 +
    HardSwish, squeeze-excite: GlobalAveragePool, 1x1 + Relu, 1x1 + HardSigmoid, Mul; 1x1 project,
    residual Add); a second one with ReLU6 (``Clip(0, 6)``), a depthwise 5x5 stride 2 and a 1x1
    project with a per-channel scale and shift (a BatchNormalization after a Relu, decomposed); then
    convs with LeakyRelu, SiLU (``x * Sigmoid(x)``) and GELU as torch exports it (Div, Erf, Add, Mul,
    Mul) into the output ``y``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype="float32"), name))
        return name

    def conv(name, source, out_channels, in_channels, kernel=1, stride=1, groups=1, bias=True):
        fan_in = in_channels // groups * kernel * kernel
        weight = const(f"{name}_w", rng.standard_normal((out_channels, in_channels // groups, kernel, kernel))
                       * np.sqrt(2.0 / fan_in))
        biases = [const(f"{name}_b", rng.standard_normal(out_channels) * 0.1)] if bias else []
        inputs = [source, weight, *biases]
        nodes.append(helper.make_node("Conv", inputs, [name], name=name, pads=[kernel // 2] * 4,
                                      strides=[stride] * 2, group=groups))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    nodes: list = []
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])
    stem = node("HardSwish", [conv("stem", "x", 16, 3, 3, 2)], "stem_hs")
    # inverted residual 1: hard-swish, squeeze-excite, residual add
    expand = node("HardSwish", [conv("b1_expand", stem, 48, 16)], "b1_expand_hs")
    dw = node("HardSwish", [conv("b1_dw", expand, 48, 48, 3, 1, groups=48)], "b1_dw_hs")
    pooled = node("GlobalAveragePool", [dw], "b1_se_pool")
    squeeze = node("Relu", [conv("b1_se_reduce", pooled, 12, 48)], "b1_se_relu")
    gate = node("HardSigmoid", [conv("b1_se_expand", squeeze, 48, 12)], "b1_se_gate", alpha=1.0 / 6, beta=0.5)
    excited = node("Mul", [dw, gate], "b1_se_scale")
    block1 = node("Add", [conv("b1_project", excited, 16, 48), stem], "b1_add")
    # inverted residual 2: ReLU6, depthwise 5x5 stride 2, a batch norm after a relu
    lo, hi = const("lo", 0.0), const("hi", 6.0)
    expand = node("Clip", [conv("b2_expand", block1, 64, 16), lo, hi], "b2_expand_relu6")
    dw = node("Clip", [conv("b2_dw", expand, 64, 64, 5, 2, groups=64), lo, hi], "b2_dw_relu6")
    project = node("Relu", [conv("b2_project", dw, 24, 64, bias=False)], "b2_project_relu")
    normed = node("BatchNormalization", [project, const("bn_scale", rng.uniform(0.5, 1.5, 24)),
                                         const("bn_shift", rng.standard_normal(24) * 0.1),
                                         const("bn_mean", rng.standard_normal(24) * 0.1),
                                         const("bn_var", rng.uniform(0.5, 1.5, 24))], "b2_bn")
    # other activations
    leaky = node("LeakyRelu", [conv("leaky", normed, 32, 24, 3)], "leaky_act", alpha=0.1)
    silu_in = conv("silu", leaky, 32, 32)
    silu = node("Mul", [silu_in, node("Sigmoid", [silu_in], "silu_sigmoid")], "silu_act")
    gelu_in = conv("gelu", silu, 16, 32, 3)
    erf = node("Erf", [node("Div", [gelu_in, const("sqrt2", np.sqrt(2.0))], "gelu_div")], "gelu_erf")
    gelu = node("Mul", [gelu_in, node("Add", [erf, const("one", 1.0)], "gelu_add")], "gelu_mul")
    node("Mul", [gelu, const("half", 0.5)], "y")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, size // 4, size // 4])
    graph = helper.make_graph(nodes, "mobilenet_v3_block", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def unsupported_op_onnx(path: Path) -> Path:
    """conv -> LSTM: an op TVM's ONNX frontend does not import."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype("float32"), "w"),
             numpy_helper.from_array(np.array([8, 1, 4], "int64"), "seq_shape"),
             numpy_helper.from_array(rng.standard_normal((1, 8, 4)).astype("float32"), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 8, 2)).astype("float32"), "R")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "seq_shape"], ["seq"], name="to_sequence"),
             helper.make_node("LSTM", ["seq", "W", "R"], ["y"], name="lstm", hidden_size=2)]
    graph = helper.make_graph(nodes, "lstm", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return path


def _stem(rng, inits: list, channels: int, size: tuple[int, int]):
    """The input ``x`` (1x3xHxW) and a 3x3 conv + bias + relu to ``channels``: a blocked producer."""
    from onnx import TensorProto, helper, numpy_helper

    weight = (rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype("float32")
    inits += [numpy_helper.from_array(weight, "w0"),
              numpy_helper.from_array((rng.standard_normal(channels) * 0.1).astype("float32"), "b0")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *size])
    return x, [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c0"], ["r0"], name="stem_relu")]


def _save(path: Path, nodes: list, x, inits: list, name: str) -> Path:
    import onnx
    from onnx import TensorProto, helper

    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])
    model = helper.make_model(helper.make_graph(nodes, name, [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_transpose_onnx(path: Path, channels: int = 8, out_channels: int = 16, size: tuple[int, int] = (7, 5),
                        kernel: int = 2, stride: int = 2, pads: int = 0, output_padding: int = 0,
                        group: int = 1, seed: int = 0) -> Path:
    """stem conv (3 -> ``channels``) + relu -> ConvTranspose (``kernel``, ``stride``, ``pads``,
    ``output_padding``, ``group``) + bias -> Sigmoid: output ``y``, as a detector's head upsamples."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list = []
    x, nodes = _stem(rng, inits, channels, size)
    weight = rng.standard_normal((channels, out_channels // group, kernel, kernel)) * 0.3
    inits += [numpy_helper.from_array(weight.astype("float32"), "wt"),
              numpy_helper.from_array((rng.standard_normal(out_channels) * 0.1).astype("float32"), "bt")]
    nodes += [helper.make_node("ConvTranspose", ["r0", "wt", "bt"], ["up"], name="deconv",
                               kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pads] * 4,
                               output_padding=[output_padding] * 2, group=group),
              helper.make_node("Sigmoid", ["up"], ["y"], name="head")]
    return _save(path, nodes, x, inits, "conv_transpose")


def resize_onnx(path: Path, mode: str, coordinate_mode: str, nearest_mode: str = "round_prefer_floor",
                scales: tuple[float, float] | None = (2.0, 2.0), sizes: tuple[int, int] | None = None,
                channels: int = 16, size: tuple[int, int] = (5, 7), seed: int = 0) -> Path:
    """stem conv (3 -> ``channels``) + relu -> Resize (``mode``, ``coordinate_mode``, ``nearest_mode``;
    by integer ``scales`` or to static ``sizes``) -> 1x1 conv: output ``y``, as an FPN neck upsamples."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list = []
    x, nodes = _stem(rng, inits, channels, size)
    head = (rng.standard_normal((channels, channels, 1, 1)) * 0.3).astype("float32")
    inits.append(numpy_helper.from_array(head, "w1"))
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array([1, channels, *sizes], "int64"), "sizes"))
        resize_inputs = ["r0", "", "", "sizes"]
    else:
        inits.append(numpy_helper.from_array(np.array([1.0, 1.0, *scales], "float32"), "scales"))
        resize_inputs = ["r0", "", "scales"]
    nodes += [helper.make_node("Resize", resize_inputs, ["up"], name="upsample", mode=mode,
                               coordinate_transformation_mode=coordinate_mode, nearest_mode=nearest_mode),
              helper.make_node("Conv", ["up", "w1"], ["y"], name="head")]
    return _save(path, nodes, x, inits, "resize")


def resize_grid_onnx(path: Path, cases: list[dict], channels: int = 8, size: tuple[int, int] = (7, 9),
                     opset: int = 19, seed: int = 0) -> Path:
    """stem conv (3 -> ``channels``) + relu, then one ``Resize`` per case of ``cases`` on its output, each
    resize an output of the model (``y0``, ``y1``...): many resizes in one build. A case is a dict of the
    node's attributes (``mode``, ``coordinate_transformation_mode``, ``nearest_mode``, ...) with
    ``scales`` (H, W) or ``sizes`` (H, W), and ``roi`` (H start, W start, H end, W end) for
    ``tf_crop_and_resize``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list = []
    x, nodes = _stem(rng, inits, channels, size)
    outputs = []
    for index, case in enumerate(cases):
        attrs = {k: v for k, v in case.items() if k not in ("scales", "sizes", "roi")}
        inits.append(numpy_helper.from_array(resize_roi(case.get("roi")), f"roi{index}"))
        if case.get("sizes") is not None:
            sizes = np.array([1, channels, *case["sizes"]], "int64")
            inits.append(numpy_helper.from_array(sizes, f"sizes{index}"))
            inputs = ["r0", f"roi{index}", "", f"sizes{index}"]
        else:
            scales = np.array([1, 1, *case["scales"]], "float32")
            inits.append(numpy_helper.from_array(scales, f"scales{index}"))
            inputs = ["r0", f"roi{index}", f"scales{index}"]
        nodes.append(helper.make_node("Resize", inputs, [f"y{index}"], name=f"resize{index}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, None))
    model = helper.make_model(helper.make_graph(nodes, "resize_grid", [x], outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, str(path))
    return path


def resize_roi(roi) -> np.ndarray:
    """A Resize node's ``roi`` input of an NCHW tensor from (H start, W start, H end, W end), or empty."""
    return np.array([] if roi is None else [0, 0, roi[0], roi[1], 1, 1, roi[2], roi[3]], "float32")


def issue45_onnx(path: Path, seed: int = 0) -> Path:
    """The model of issue 45: conv 3x3 16->32, Relu, Resize nearest by scales [1, 1, 1.5, 1.5] (21x21 ->
    31x31: TVM's own import maps its coordinates with 21/31 instead of 1/1.5), conv 3x3 32->32; opset 13."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.2).astype("float32"), "w1"),
             numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.2).astype("float32"), "w2"),
             numpy_helper.from_array(np.array([1, 1, 1.5, 1.5], "float32"), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Resize", ["r1", "", "scales"], ["up"], name="resize", mode="nearest"),
             helper.make_node("Conv", ["up", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "issue45", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, 16, 21, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


#: the activations :func:`activation_onnx` writes, as ONNX exporters write them: name -> opset
ACTIVATIONS = {"gelu": 13, "gelu_tanh": 13, "mish": 18, "softplus": 13, "silu": 13}


def _activation_nodes(name: str, x: str, out: str, inits: list) -> list:
    """Nodes computing activation ``name`` of ``x`` into ``out``, each constant an initializer."""
    import math

    from onnx import helper, numpy_helper

    def const(value: float) -> str:
        key = f"{out}_k{len(inits)}"
        inits.append(numpy_helper.from_array(np.array(value, "float32"), key))
        return key

    def node(op, inputs, suffix):
        result = f"{out}_{suffix}" if suffix else out
        return helper.make_node(op, inputs, [result], name=f"{out}_{suffix or op}")

    if name == "gelu":  # torch.onnx's exact GELU: x * 0.5 * (1 + erf(x / sqrt 2)), as written
        return [node("Div", [x, const(math.sqrt(2.0))], "div"), node("Erf", [f"{out}_div"], "erf"),
                node("Add", [f"{out}_erf", const(1.0)], "add"), node("Mul", [x, f"{out}_add"], "mul"),
                node("Mul", [f"{out}_mul", const(0.5)], "")]
    if name == "gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), Pow included
        return [node("Pow", [x, const(3.0)], "cube"), node("Mul", [f"{out}_cube", const(0.044715)], "scaled"),
                node("Add", [x, f"{out}_scaled"], "inner"),
                node("Mul", [f"{out}_inner", const(math.sqrt(2.0 / math.pi))], "arg"),
                node("Tanh", [f"{out}_arg"], "tanh"), node("Add", [f"{out}_tanh", const(1.0)], "add"),
                node("Mul", [x, f"{out}_add"], "mul"), node("Mul", [f"{out}_mul", const(0.5)], "")]
    if name == "mish":
        return [node("Mish", [x], "")]
    if name == "softplus":
        return [node("Softplus", [x], "")]
    if name == "silu":
        return [node("Sigmoid", [x], "sigmoid"), node("Mul", [x, f"{out}_sigmoid"], "")]
    raise ValueError(f"unknown activation {name!r}")


def activation_onnx(path: Path, activation: str, channels: int = 16, size: int = 12, seed: int = 0) -> Path:
    """A 3x3 conv (3 -> ``channels``), then two 1x1 convs of its output, each followed by ``activation``
    (one of :data:`ACTIVATIONS`, written node by node as exporters write it), the sum of the two, and
    the activation of the sum: fused conv epilogues, one of them two activations long."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), key)
             for key, shape, scale in [("w1", (channels, 3, 3, 3), 0.5), ("b1", (channels,), 0.5),
                                       ("w2", (channels, channels, 1, 1), 0.3), ("b2", (channels,), 0.5),
                                       ("w3", (channels, channels, 1, 1), 0.3), ("b3", (channels,), 0.5)]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             *_activation_nodes(activation, "c1", "a1", inits),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2"),
             *_activation_nodes(activation, "c2", "a2", inits),
             helper.make_node("Conv", ["a1", "w3", "b3"], ["c3"], name="conv3"),
             *_activation_nodes(activation, "c3", "a3", inits),
             helper.make_node("Add", ["a2", "a3"], ["s"], name="sum"),
             *_activation_nodes(activation, "s", "y", inits)]
    model = helper.make_model(helper.make_graph(nodes, activation, [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", ACTIVATIONS[activation])])
    model.ir_version = 8  # readable by the ONNX Runtime the dev extra installs
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
