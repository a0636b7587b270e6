"""ResNet-50 and VGG-16 written node by node in ONNX, with seeded random weights.

Issue 10 checked the cost model on two models that were not exported from torchvision but written
directly in ONNX: ``Conv`` without bias followed by an explicit ``BatchNormalization`` (ResNet-50,
stride on the 3x3 conv as in v1.5), ``Conv`` with bias (VGG-16), ``Gemm`` heads. These builders
write such models so that ``benchmarks.real_models`` can tune them beside the packaged ones, and
so that the check can be repeated anywhere without a download.

Example::

    from benchmarks.onnx_written import resnet50
    resnet50("resnet50.onnx")                 # 53 Conv, 16 Add, 224x224 input, ~98 MB
    resnet50("tiny.onnx", width=8, size=32)   # the same graph, narrow and small (tests)
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
             batch_norm: bool) -> str:
        fan_in = cin * kernel * kernel
        inputs = [x, self.weight(self.rng.standard_normal((cout, cin, kernel, kernel)) * np.sqrt(2 / fan_in))]
        if not batch_norm:
            inputs.append(self.weight(0.01 * self.rng.standard_normal(cout)))
        y = self.op("Conv", inputs, kernel_shape=[kernel, kernel], strides=[stride, stride],
                    pads=[kernel // 2] * 4)
        if batch_norm:
            scale, bias, mean = (self.rng.standard_normal((3, cout)) * 0.1) + [[1], [0], [0]]
            variance = 1 + 0.1 * self.rng.random(cout)
            y = self.op("BatchNormalization", [y, *map(self.weight, (scale, bias, mean, variance))])
        return y

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
