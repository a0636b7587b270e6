"""ResNet-50, VGG-16 and ShuffleNet v1 written node by node in ONNX, with seeded random weights.

Issue 10 checked the cost model on two models that were not exported from torchvision but written
directly in ONNX: ``Conv`` without bias followed by an explicit ``BatchNormalization`` (ResNet-50,
stride on the 3x3 conv as in v1.5), ``Conv`` with bias (VGG-16), ``Gemm`` heads. These builders
write such models so that ``benchmarks.real_models`` can tune them beside the packaged ones, and
so that the check can be repeated anywhere without a download.

Example::

    from benchmarks.onnx_written import resnet50
    resnet50("resnet50.onnx")                 # 53 Conv, 16 Add, 224x224 input, ~98 MB
    resnet50("tiny.onnx", width=8, size=32)   # the same graph, narrow and small (tests)
    shufflenet_v1("shufflenet_g3.onnx", groups=3)   # grouped 1x1 convs, channel shuffles
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: (blocks, stride of the first block) per ResNet-50 stage; the stage's width is ``width * 2**i``
RESNET50_STAGES = ((3, 1), (4, 2), (6, 2), (3, 2))
#: VGG-16's convs: output channels as multiples of ``width``, "M" a 2x2 max-pool
VGG16_CONVS = (1, 1, "M", 2, 2, "M", 4, 4, 4, "M", 8, 8, 8, "M", 8, 8, 8, "M")


class _Graph:
    """ONNX nodes and initializers under generated names, weights He-initialised from one seed."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, values: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name("w")
        self.initializers.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attributes) -> str:
        from onnx import helper

        output = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [output], **attributes))
        return output

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, *,
             batch_norm: bool, groups: int = 1) -> str:
        fan_in = cin // groups * kernel * kernel
        weight = self.rng.standard_normal((cout, cin // groups, kernel, kernel)) * np.sqrt(2 / fan_in)
        inputs = [x, self.weight(weight)]
        if not batch_norm:
            inputs.append(self.weight(0.01 * self.rng.standard_normal(cout)))
        y = self.op("Conv", inputs, kernel_shape=[kernel, kernel], strides=[stride, stride],
                    pads=[kernel // 2] * 4, group=groups)
        if batch_norm:
            scale, bias, mean = (self.rng.standard_normal((3, cout)) * 0.1) + [[1], [0], [0]]
            variance = 1 + 0.1 * self.rng.random(cout)
            y = self.op("BatchNormalization", [y, *map(self.weight, (scale, bias, mean, variance))])
        return y

    def shuffle(self, x: str, channels: int, groups: int, size: int) -> str:
        """ShuffleNet's channel shuffle as exporters write it: Reshape to ``(N, g, C/g, H, W)``,
        Transpose the two channel axes, Reshape back."""
        split = self.weight_int64([1, groups, channels // groups, size, size])
        y = self.op("Transpose", [self.op("Reshape", [x, split])], perm=[0, 2, 1, 3, 4])
        return self.op("Reshape", [y, self.weight_int64([1, channels, size, size])])

    def weight_int64(self, values: list[int]) -> str:
        from onnx import numpy_helper

        name = self._name("shape")
        self.initializers.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def gemm(self, x: str, units_in: int, units_out: int) -> str:
        weights = self.rng.standard_normal((units_out, units_in)) * np.sqrt(2 / units_in)
        return self.op("Gemm", [x, self.weight(weights), self.weight(np.zeros(units_out))], transB=1)

    def save(self, output: str, classes: int, size: int, path: str | Path) -> Path:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, "main",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, classes])], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(model, full_check=True)
        path = Path(path)
        # larger than protobuf's 2 GB limit only far beyond VGG-16; write to a temporary name first so
        # that an interrupted run never leaves a truncated model under the final name
        partial = path.with_name(path.name + ".partial")
        onnx.save(model, str(partial))
        partial.replace(path)
        return path


def resnet50(path: str | Path, *, width: int = 64, size: int = 224, classes: int = 1000,
             seed: int = 0) -> Path:
    """Write a ResNet-50 (bottleneck blocks, BatchNormalization nodes, stride on the 3x3) to ``path``."""
    g = _Graph(seed)
    x = g.op("Relu", [g.conv("input", 3, width, 7, 2, batch_norm=True)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = width
    for stage, (blocks, first_stride) in enumerate(RESNET50_STAGES):
        planes = width * 2**stage
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            y = g.op("Relu", [g.conv(x, channels, planes, 1, batch_norm=True)])
            y = g.op("Relu", [g.conv(y, planes, planes, 3, stride, batch_norm=True)])
            y = g.conv(y, planes, planes * 4, 1, batch_norm=True)
            shortcut = g.conv(x, channels, planes * 4, 1, stride, batch_norm=True) if block == 0 else x
            x = g.op("Relu", [g.op("Add", [y, shortcut])])
            channels = planes * 4
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.save(g.gemm(x, channels, classes), classes, size, path)


def vgg16(path: str | Path, *, width: int = 64, size: int = 224, classes: int = 1000,
          hidden: int = 4096, seed: int = 0) -> Path:
    """Write a VGG-16 (13 3x3 convs with bias and ReLU, five max-pools, three Gemm) to ``path``."""
    if size % 32:
        raise ValueError(f"VGG-16's five 2x2 pools need a size divisible by 32, not {size}")
    g = _Graph(seed)
    x, channels = "input", 3
    for entry in VGG16_CONVS:
        if entry == "M":
            x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        else:
            x = g.op("Relu", [g.conv(x, channels, width * entry, 3, batch_norm=False)])
            channels = width * entry
    x = g.op("Flatten", [x])
    units = channels * (size // 32) ** 2
    x = g.op("Relu", [g.gemm(x, units, hidden)])
    x = g.op("Relu", [g.gemm(x, hidden, hidden)])
    return g.save(g.gemm(x, hidden, classes), classes, size, path)


#: ShuffleNet v1's stage outputs per group count (Zhang et al. 2018, Table 1); units per stage
SHUFFLENET_V1_CHANNELS = {1: (144, 288, 576), 2: (200, 400, 800), 3: (240, 480, 960), 4: (272, 544, 1088),
                          8: (384, 768, 1536)}
SHUFFLENET_V1_UNITS = (4, 8, 4)


def shufflenet_v1(path: str | Path, *, groups: int = 3, size: int = 224, classes: int = 1000,
                  seed: int = 0) -> Path:
    """Write a ShuffleNet v1 (``groups`` 1, 2, 3, 4 or 8) to ``path``: a 3x3 stem and max-pool, then
    units of grouped 1x1 conv + BN + ReLU, channel shuffle, 3x3 depthwise conv + BN, grouped 1x1 conv
    + BN, added to the input (stride 1) or concatenated with its 3x3 average pool (stride 2, the first
    unit of a stage), ReLU; the first 1x1 conv of stage 2 is not grouped (its 24 input channels are
    few); global average pool and a fully connected layer. Bottlenecks have a quarter of the unit's
    output channels, as in the paper."""
    if groups not in SHUFFLENET_V1_CHANNELS:
        raise ValueError(f"ShuffleNet v1 has no configuration for {groups} groups "
                         f"(known: {sorted(SHUFFLENET_V1_CHANNELS)})")
    if size % 32:
        raise ValueError(f"ShuffleNet v1's five stride-2 layers need a size divisible by 32, not {size}")
    g = _Graph(seed)
    x = g.op("Relu", [g.conv("input", 3, 24, 3, 2, batch_norm=True)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels, spatial = 24, size // 4
    for stage, (out, units) in enumerate(zip(SHUFFLENET_V1_CHANNELS[groups], SHUFFLENET_V1_UNITS,
                                             strict=True)):
        for unit in range(units):
            stride = 2 if unit == 0 else 1
            spatial_out = spatial // stride
            mid = out // 4
            first_groups = 1 if stage == 0 and unit == 0 else groups
            y = g.op("Relu", [g.conv(x, channels, mid, 1, batch_norm=True, groups=first_groups)])
            if first_groups > 1:
                y = g.shuffle(y, mid, groups, spatial)
            y = g.conv(y, mid, mid, 3, stride, batch_norm=True, groups=mid)
            branch = out - channels if stride == 2 else out
            y = g.conv(y, mid, branch, 1, batch_norm=True, groups=groups)
            if stride == 2:
                pooled = g.op("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
                x = g.op("Relu", [g.op("Concat", [pooled, y], axis=1)])
            else:
                x = g.op("Relu", [g.op("Add", [y, x])])
            channels, spatial = out, spatial_out
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.save(g.gemm(x, channels, classes), classes, size, path)
