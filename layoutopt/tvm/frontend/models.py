"""Small Relax test and demo networks, built in code with seeded random weights (no download, no torch).

Every function returns a ``tvm.IRModule`` whose ``main`` takes one ``(1, C, H, W)`` float32 input, in
the form ``tvm.relax.frontend.onnx.from_onnx`` produces after :func:`layoutopt.tvm.prepare`: conv2d
with ``OIHW`` constant weights, batch norm already folded into a per-channel bias ``(1, C, 1, 1)``.
Binding names are readable (``conv1``, ``relu1``, ``add``...) so tests can refer to nodes by name.

================  =============================================================================
:func:`chain`     conv -> relu -> conv -> relu ... (one conv per entry of ``channels``)
:func:`residual`  conv -> relu -> conv -> add(skip) -> relu: a ResNet basic block
:func:`concat3`   stem conv, three branches (1x1, 3x3, maxpool + 1x1), channel concat, conv
:func:`dense_head`  conv -> relu -> maxpool -> flatten (reshape) -> dense (matmul + bias)
:func:`resnet`    ResNet-18/34/50/101/152 (``depth=``), any width and image size
================  =============================================================================

Example:
    >>> from layoutopt.tvm import models
    >>> mod = models.residual(channels=16, size=8)
    >>> mod["main"].params[0].ty, mod["main"].body.ty
    (R.Tensor((1, 3, 8, 8), dtype="float32"), R.Tensor((1, 16, 8, 8), dtype="float32"))
    >>> models.resnet(depth=50, width=8, size=32).script().count("R.nn.conv2d(")
    53
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm

__all__ = ["chain", "concat3", "default_model", "dense_head", "resnet"]

_RESNET_LAYERS = {
    18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3),
}


class _NetBuilder:
    """A BlockBuilder with seeded He-initialised weights and readable binding names."""

    def __init__(self, in_channels: int, size: int | tuple[int, int], seed: int):
        for name, value in (("in_channels", in_channels), ("seed", seed)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProblemError(f"{name} must be an integer, not {value!r}")
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        if in_channels < 1 or height < 1 or width < 1:
            raise ProblemError(f"input shape (1, {in_channels}, {height}, {width}) must be positive")
        self.tvm = import_tvm()
        self.relax = self.tvm.relax
        self.rng = np.random.default_rng(seed)
        self.bb = self.relax.BlockBuilder()
        self.input = self.relax.Var("data", self.relax.TensorType((1, in_channels, height, width), "float32"))

    def const(self, shape: Sequence[int], fan_in: int):
        values = self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
        return self.relax.const(values.astype("float32"), "float32")

    def emit(self, expr, name: str):
        return self.bb.emit(expr, name_hint=name)

    def conv(self, x, channels: int, kernel: int = 3, stride: int = 1, *, groups: int = 1, name: str,
             relu: bool = True, bias: bool = True):
        """conv2d (``same`` padding) + per-channel bias (a folded batch norm) + optional relu."""
        in_channels = int(x.ty.shape[1])
        fan_in = in_channels // groups * kernel * kernel
        weight = self.const((channels, in_channels // groups, kernel, kernel), fan_in)
        pad = kernel // 2
        out = self.emit(self.relax.op.nn.conv2d(x, weight, strides=stride, padding=pad, groups=groups), name)
        if bias:
            out = self.emit(self.relax.op.add(out, self.const((1, channels, 1, 1), fan_in)), f"{name}_bias")
        if relu:
            out = self.emit(self.relax.op.nn.relu(out), f"{name}_relu")
        return out

    def max_pool(self, x, size: int = 2, stride: int = 2, padding: int = 0, name: str = "pool"):
        return self.emit(self.relax.op.nn.max_pool2d(x, size, stride, padding), name)

    def dense(self, x, units: int, name: str = "dense"):
        """matmul by a constant ``(K, N)`` weight + bias, as ONNX Gemm and torch Linear import."""
        features = int(x.ty.shape[1])
        out = self.emit(self.relax.op.matmul(x, self.const((features, units), features)), name)
        return self.emit(self.relax.op.add(out, self.const((units,), features)), f"{name}_bias")

    def flatten(self, x, name: str = "flatten"):
        shape = [int(s) for s in x.ty.shape]
        return self.emit(self.relax.op.reshape(x, (shape[0], int(np.prod(shape[1:])))), name)

    def finish(self, build) -> object:
        """Run ``build(input) -> output`` inside ``main`` and return the module."""
        with self.bb.function("main", [self.input]):
            with self.bb.dataflow():
                output = self.bb.emit_output(build(self.input))
            self.bb.emit_func_output(output)
        return self.bb.get()


def chain(channels: Sequence[int] = (16, 16), in_channels: int = 8, size: int = 8, seed: int = 0,
          groups: int = 1):
    """A chain of 3x3 conv + bias + relu, one conv per entry of ``channels``, each in ``groups`` groups
    (which must divide every channel count).

    Example:
        >>> mod = chain((16, 32), in_channels=8, size=8)   # conv1: 8->16, conv2: 16->32
        >>> mod["main"].body.ty
        R.Tensor((1, 32, 8, 8), dtype="float32")
        >>> chain((32,), in_channels=32, groups=4).script().count("groups=4")   # RegNet's groups of 8
        1
    """
    net = _NetBuilder(in_channels, size, seed)
    counts = (in_channels, *channels)
    valid = isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1
    if not valid or any(n % groups for n in counts):
        raise ProblemError(f"groups={groups!r} must be a positive integer dividing every channel count "
                           f"({', '.join(map(str, counts))})")

    def build(x):
        for i, out_channels in enumerate(channels, start=1):
            x = net.conv(x, out_channels, groups=groups, name=f"conv{i}")
        return x

    return net.finish(build)


def residual(channels: int = 16, size: int = 8, seed: int = 0):
    """A ResNet basic block: ``conv1 -> relu -> conv2 -> add(conv2, skip) -> relu`` (stem conv first).

    The stem ``conv0`` (3 -> ``channels``) feeds both ``conv1`` and the skip connection, so the
    residual ``add`` has two computed inputs and is a multi-input node.

    Example:
        >>> print(residual(channels=16, size=8).script())
        # from tvm.script import ir as I
        ...
                    add: R.Tensor((1, 16, 8, 8), dtype="float32") = R.add(conv2_bias, conv0_relu)
                    add_relu: R.Tensor((1, 16, 8, 8), dtype="float32") = R.nn.relu(add)
        ...
    """
    net = _NetBuilder(3, size, seed)

    def build(x):
        skip = net.conv(x, channels, name="conv0")
        y = net.conv(skip, channels, name="conv1")
        y = net.conv(y, channels, name="conv2", relu=False)
        y = net.emit(net.relax.op.add(y, skip), "add")
        return net.emit(net.relax.op.nn.relu(y), "add_relu")

    return net.finish(build)


def concat3(channels: Sequence[int] = (8, 16, 8), in_channels: int = 8, size: int = 8, seed: int = 0):
    """An Inception-style block: stem conv, three branches concatenated on channels, then a 1x1 conv.

    Branches: ``branch1`` 1x1 conv; ``branch2`` 3x3 conv; ``branch3_pool`` 3x3 max pool (stride 1)
    then 1x1 conv ``branch3``. ``concat`` has ``sum(channels)`` channels; ``head`` maps them back to
    ``in_channels``.

    Example:
        >>> "R.concat(" in concat3((8, 16, 8)).script()   # of 8 + 16 + 8 = 32 channels
        True
    """
    if len(channels) != 3:
        raise ProblemError(f"concat3 needs three branch widths, got {list(channels)}")
    net = _NetBuilder(in_channels, size, seed)

    def build(x):
        stem = net.conv(x, in_channels, name="stem")
        b1 = net.conv(stem, channels[0], kernel=1, name="branch1")
        b2 = net.conv(stem, channels[1], kernel=3, name="branch2")
        pooled = net.max_pool(stem, size=3, stride=1, padding=1, name="branch3_pool")
        b3 = net.conv(pooled, channels[2], kernel=1, name="branch3")
        cat = net.emit(net.relax.op.concat([b1, b2, b3], axis=1), "concat")
        return net.conv(cat, in_channels, kernel=1, name="head")

    return net.finish(build)


def dense_head(channels: int = 16, in_channels: int = 8, size: int = 8, classes: int = 10, seed: int = 0):
    """A classifier head: conv -> relu -> 2x2 max pool -> flatten (reshape) -> dense (matmul + bias).

    Example:
        >>> mod = dense_head(channels=16, size=8, classes=10)   # dense: 16*4*4 = 256 -> 10
        >>> mod["main"].body.ty
        R.Tensor((1, 10), dtype="float32")
    """
    net = _NetBuilder(in_channels, size, seed)

    def build(x):
        x = net.conv(x, channels, name="conv1")
        x = net.max_pool(x, name="pool")
        return net.dense(net.flatten(x), classes)

    return net.finish(build)


def resnet(depth: int = 50, width: int = 64, size: int = 224, classes: int = 1000, seed: int = 0):
    """A ResNet (He et al. 2016) of ``depth`` 18/34 (basic blocks) or 50/101/152 (bottlenecks).

    Batch norm is folded into each conv's bias. ``width`` is the stem width (64 in the paper);
    smaller widths and images give quick test models. Global average pooling is ``mean`` over
    H and W, as torch.export and ONNX import it.

    Example:
        >>> small = resnet(depth=18, width=8, size=32)   # resnet(depth=50): the real ResNet-50 shapes
        >>> small.script().count("R.nn.conv2d("), small["main"].body.ty
        (20, R.Tensor((1, 1000), dtype="float32"))
    """
    if depth not in _RESNET_LAYERS:
        raise ProblemError(f"resnet depth must be one of {sorted(_RESNET_LAYERS)}, not {depth!r}")
    net = _NetBuilder(3, size, seed)
    bottleneck = depth >= 50
    expansion = 4 if bottleneck else 1

    def block(x, planes: int, stride: int, name: str):
        in_channels = int(x.ty.shape[1])
        if bottleneck:
            y = net.conv(x, planes, kernel=1, name=f"{name}_conv1")
            y = net.conv(y, planes, kernel=3, stride=stride, name=f"{name}_conv2")
            y = net.conv(y, planes * expansion, kernel=1, name=f"{name}_conv3", relu=False)
        else:
            y = net.conv(x, planes, kernel=3, stride=stride, name=f"{name}_conv1")
            y = net.conv(y, planes, kernel=3, name=f"{name}_conv2", relu=False)
        if stride != 1 or in_channels != planes * expansion:
            x = net.conv(x, planes * expansion, kernel=1, stride=stride, name=f"{name}_down", relu=False)
        y = net.emit(net.relax.op.add(y, x), f"{name}_add")
        return net.emit(net.relax.op.nn.relu(y), f"{name}_relu")

    def build(x):
        x = net.conv(x, width, kernel=7, stride=2, name="conv1")
        x = net.max_pool(x, size=3, stride=2, padding=1, name="maxpool")
        for stage, blocks in enumerate(_RESNET_LAYERS[depth], start=1):
            planes = width * 2 ** (stage - 1)
            for index in range(blocks):
                stride = 2 if stage > 1 and index == 0 else 1
                x = block(x, planes, stride, f"layer{stage}_{index}")
        x = net.emit(net.relax.op.mean(x, axis=[2, 3], keepdims=True), "avgpool")
        return net.dense(net.flatten(x), classes, name="fc")

    return net.finish(build)


def default_model():
    """The demo model: a narrow ResNet-18 on 56x56 images (quick to measure, real ResNet structure).

    Example:
        >>> default_model()["main"].params[0].ty
        R.Tensor((1, 3, 56, 56), dtype="float32")
    """
    return resnet(depth=18, width=16, size=56, classes=10)
