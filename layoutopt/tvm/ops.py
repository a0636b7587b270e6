"""Which Relax ops follow their input's layout, which combine several, and which need plain NCHW.

The one classification extraction (:mod:`layoutopt.tvm.graph.extract`) and the rewrite
(:mod:`layoutopt.tvm.building.apply`) both use, so that the layout graph costs exactly the program the
rewrite emits; and which elementwise ops after a conv ``FuseOps`` fuses into its kernel
(:class:`EpilogueChains`), so that the kernel is measured with them.

Example:
    >>> from layoutopt.tvm import models
    >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
    >>> layout_carrier(calls["conv1_relu"], "relax.nn.relu").name   # relu runs in its input's layout
    'conv1_bias'
    >>> layout_carrier(calls["conv1_bias"], "relax.add").name       # so does + a per-channel bias
    'conv1'
    >>> layout_carrier(calls["conv1"], "relax.nn.conv2d") is None   # a conv chooses its own
    True
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ProblemError
from ._tvm import import_tvm
from .kernels import NCHW, validate_workload
from .relax_expr import is_tensor_constant, scalar_value, static_shape, var_uses

__all__ = [
    "BINARY_OPS",
    "CONCAT_OPS",
    "EPILOGUE_BINARY",
    "EPILOGUE_UNARY",
    "GATHER_OPS",
    "ONNX_RESIZE",
    "POOL_OPS",
    "RESIZE_OPS",
    "SLICE_OPS",
    "SPATIAL_REDUCE_OPS",
    "SPLIT_OPS",
    "UNARY_OPS",
    "EpilogueChains",
    "channel_permutation",
    "channel_split_sections",
    "conv2d_transpose_workload",
    "conv2d_workload",
    "dense_workload",
    "epilogue_step",
    "fused_epilogues",
    "is_tensor_constant",
    "layout_carrier",
    "op_name",
    "resize_workload",
    "scalar_value",
    "slice_ranges",
    "static_shape",
    "var_uses",
]

#: unary elementwise ops: any layout, same layout out
UNARY_OPS = frozenset({
    "relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
    "relax.nn.prelu_scalar", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.sqrt",
    "relax.rsqrt", "relax.negative", "relax.abs", "relax.square", "relax.erf", "relax.log", "relax.astype",
    "relax.nn.dropout", "relax.hard_sigmoid", "relax.nn.relu6", "relax.nn.softplus",
})
#: binary elementwise ops: layout-following with a per-channel or scalar constant operand,
#: multi-input ops when both operands are tensors computed by the graph
BINARY_OPS = frozenset({
    "relax.add", "relax.multiply", "relax.subtract", "relax.divide", "relax.maximum", "relax.minimum",
    "relax.power",
})
#: pooling ops: re-emitted with ``layout=`` the input's layout
POOL_OPS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})
#: ops that combine several computed tensors in one common layout
CONCAT_OPS = frozenset({"relax.concat"})
#: an ONNX resize computed with ONNX's semantics: a ``call_tir`` of layoutopt's kernel
#: (:mod:`layoutopt.tvm.kernels.onnx_resize`), named so by :func:`op_name`
ONNX_RESIZE = "layoutopt.onnx_resize"
#: resizes: re-emitted in the input's layout (``relax.image.resize2d`` with ``layout=``, where the
#: blocked kernel covers its method and mode: :mod:`layoutopt.tvm.kernels.resize`; an ONNX resize in
#: any layout)
RESIZE_OPS = frozenset({"relax.image.resize2d", ONNX_RESIZE})

#: ops that split one computed tensor along channels into a tuple, in one common layout
SPLIT_OPS = frozenset({"relax.split"})
#: a slice: layout-following over height and width only (YOLOX's focus), a node of its own along
#: channels (ShuffleNet's channel split), a boundary otherwise
SLICE_OPS = frozenset({"relax.strided_slice"})

#: a gather of channels by a constant permutation (a channel shuffle, as prepare writes it): follows
#: its input's layout, a permutation of blocks and lanes in a blocked one
GATHER_OPS = frozenset({"relax.take"})

#: reductions that follow their input's layout when they reduce height and width only, keeping the
#: dimensions (squeeze-excite's global mean): H and W are axes 2 and 3 of NCHW and of NCHW{b}c alike
SPATIAL_REDUCE_OPS = frozenset({"relax.mean", "relax.max", "relax.sum"})


def op_name(call, functions=None) -> str | None:
    """The op ``call`` computes, as the layout model names it: its ``Op``'s name, :data:`ONNX_RESIZE` for a
    ``call_tir`` of an ONNX resize kernel whose PrimFunc is in ``functions`` (the module), None for
    anything else.

    Example:
        >>> from layoutopt.tvm import models
        >>> op_name(models.chain()["main"].body.blocks[0].bindings[0].value)
        'relax.nn.conv2d'
    """
    from .kernels.onnx_resize import workload_of

    tvm = import_tvm()
    if not isinstance(call, tvm.relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    if functions is not None and workload_of(call, functions) is not None:
        return ONNX_RESIZE
    return call.op.name


def layout_carrier(call, op: str | None, is_data: Callable[[Any], bool] | None = None,
                   source: Callable[[Any], Hashable] | None = None):
    """The computed operand whose layout a layout-following op keeps, or None when ``call`` is not one.

    The one classification extraction (:mod:`layoutopt.tvm.graph.extract`) and the rewrite both use, so
    that the graph costs exactly the program the rewrite emits. Layout-following are:

    * a unary elementwise op (:data:`UNARY_OPS`) of a 4-D tensor returning one 4-D tensor (dropout's
      tuple output is not: a boundary);
    * max/avg pooling declared ``NCHW`` in and out (an ``NHWC`` pool is a boundary);
    * an ``NCHW`` resize whose method and mode the blocked kernel covers (:func:`resize_workload`
      validates; a cubic ``resize2d`` is a boundary), and every ONNX resize (:data:`ONNX_RESIZE`);
    * a binary elementwise op (:data:`BINARY_OPS`) of ONE computed 4-D tensor and one per-channel or
      scalar constant, in either order (``add(bias, x)`` as well as ``add(x, bias)``);
    * a mean, max or sum over height and width of a 4-D tensor keeping its dimensions
      (:data:`SPATIAL_REDUCE_OPS`: a global pool, as squeeze-excite's): the channel block stays;
    * a slice over height and width only (:data:`SLICE_OPS`: YOLOX's focus);
    * a gather of channels by a constant permutation (:data:`GATHER_OPS`: a channel shuffle);
    * a binary elementwise op of two computed 4-D tensors of its output's shape that come from the
      same producer (``source(var)``: the node whose output layout a value carries), so arrive in one
      layout: ``x * sigmoid(x)`` (SiLU), hard-swish's ``x * clip(x + 3, 0, 6) / 6``. Without
      ``source``, two computed operands make no layout-following op.

    ``is_data(var)`` tells computed tensors from other Vars (extraction's unbound weights); default:
    every Var is data.

    Example:
        >>> from layoutopt.tvm import models
        >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
        >>> layout_carrier(calls["conv1_relu"], "relax.nn.relu").name   # the Var relu reads
        'conv1_bias'
    """
    tvm = import_tvm()
    relax = tvm.relax
    is_data = is_data or (lambda _var: True)
    if op in SPATIAL_REDUCE_OPS:
        return _spatial_reduction_input(call, is_data)
    if op in GATHER_OPS:
        return call.args[0] if channel_permutation(call) is not None and is_data(call.args[0]) else None
    if op in SLICE_OPS:
        ranges = slice_ranges(call)
        spatial = ranges is not None and all(axis in (2, 3) for axis, *_ in ranges)
        return call.args[0] if spatial and is_data(call.args[0]) else None
    if op == ONNX_RESIZE:  # call_tir(kernel, (data, tables...)): any layout of the data
        data = call.args[1].fields[0]
        shape = static_shape(data)
        return data if isinstance(data, relax.Var) and is_data(data) and shape and len(shape) == 4 else None
    if op not in UNARY_OPS and op not in POOL_OPS and op not in BINARY_OPS and op not in RESIZE_OPS:
        return None
    args = list(call.args)
    if op in BINARY_OPS:
        tensors = [a for a in args if isinstance(a, relax.Var)]
        constants = [a for a in args if is_tensor_constant(a)]
        if len(tensors) == 2 and source is not None and all(is_data(t) for t in tensors):
            shape = static_shape(call)
            same = source(tensors[0]) == source(tensors[1])
            return tensors[0] if same and shape is not None and len(shape) == 4 and all(
                static_shape(t) == shape for t in tensors) else None
        if len(tensors) != 1 or len(constants) != 1 or not is_data(tensors[0]):
            return None
        shape = static_shape(tensors[0])
        ok = shape is not None and len(shape) == 4 and per_channel(constants[0], shape[1])
        return tensors[0] if ok and static_shape(call) == shape else None
    if not args or not isinstance(args[0], relax.Var) or not is_data(args[0]):
        return None
    shape = static_shape(args[0])
    out_shape = static_shape(call)
    if shape is None or len(shape) != 4 or out_shape is None or len(out_shape) != 4:
        return None  # e.g. dropout returns a tuple
    if op in POOL_OPS and (str(call.attrs.layout), str(call.attrs.out_layout)) != (NCHW, NCHW):
        return None
    if op in RESIZE_OPS and not _blocked_resize(call):
        return None
    return args[0]


def _spatial_reduction_input(call, is_data: Callable[[Any], bool]):
    """The data a reduction over axes 2 and 3 (height, width) with ``keepdims`` reads, else None."""
    relax = import_tvm().relax
    data = call.args[0] if call.args else None
    if not isinstance(data, relax.Var) or not is_data(data):
        return None
    shape = static_shape(data)
    axes = call.attrs.axis
    if shape is None or len(shape) != 4 or axes is None or not bool(call.attrs.keepdims):
        return None
    return data if sorted(int(a) % 4 for a in axes) == [2, 3] else None


def channel_split_sections(call) -> list[int] | None:
    """The channel counts of the pieces a ``relax.split`` of a 4-D tensor along channels (axis 1) cuts
    (YOLO's C2f, ShuffleNet's channel split), or None for any other split.

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 128, 8, 8), "float32"))
        >>> channel_split_sections(relax.op.split(x, 2, axis=1)), channel_split_sections(
        ...     relax.op.split(x, [16, 48], axis=1))
        ([64, 64], [16, 32, 80])
        >>> channel_split_sections(relax.op.split(x, 2, axis=2)) is None    # along the height: not a cut
        True
    """
    shape = static_shape(call.args[0]) if call.args else None
    if shape is None or len(shape) != 4 or int(call.attrs.axis) % 4 != 1:
        return None
    channels, cut = shape[1], call.attrs.indices_or_sections
    if not hasattr(cut, "__len__"):  # a number of equal pieces (an IntImm), not a list of offsets
        parts = int(cut)
        return [channels // parts] * parts if parts > 0 and channels % parts == 0 else None
    bounds = [0, *(int(i) for i in cut), channels]
    return [high - low for low, high in itertools.pairwise(bounds)]


def channel_permutation(call) -> np.ndarray | None:
    """The source channel of each output channel of a ``relax.take`` of a 4-D tensor along channels by
    a constant permutation (a channel shuffle,
    :func:`~layoutopt.tvm.frontend.normalise.channel_shuffles_as_take`),
    or None for any other take.

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 2, 4, 4), "float32"))
        >>> channel_permutation(relax.op.take(x, relax.const(np.array([1, 0])), axis=1)).tolist()
        [1, 0]
        >>> channel_permutation(relax.op.take(x, relax.const(np.array([1, 1])), axis=1)) is None
        True
    """
    relax = import_tvm().relax
    data = call.args[0] if call.args else None
    shape = static_shape(data) if isinstance(data, relax.Var) else None
    indices = call.args[1] if len(call.args) > 1 else None
    if shape is None or len(shape) != 4 or call.attrs.axis is None or int(call.attrs.axis) % 4 != 1 or \
            not is_tensor_constant(indices):
        return None
    order = indices.value.numpy()
    if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer) or \
            sorted(order.tolist()) != list(range(shape[1])):
        return None
    return order


def slice_ranges(call) -> list[tuple[int, int, int, int]] | None:
    """``(axis, begin, end, stride)`` per sliced axis of a ``relax.strided_slice`` of a 4-D computed
    tensor with constant bounds, normalised (non-negative, clipped to the axis), or None.

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 64, 8, 8), "float32"))
        >>> slice_ranges(relax.op.strided_slice(x, axes=[1], begin=[16], end=[48]))
        [(1, 16, 48, 1)]
        >>> slice_ranges(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 1], end=[8, -1], strides=[2, 2]))
        [(2, 0, 8, 2), (3, 1, 7, 2)]
    """
    relax = import_tvm().relax
    data = call.args[0] if call.args else None
    shape = static_shape(data) if isinstance(data, relax.Var) else None
    if shape is None or len(shape) != 4 or len(call.args) < 4:
        return None
    try:
        axes, begins, ends = ([int(field.value) for field in arg.fields] for arg in call.args[1:4])
        strides = [int(f.value) for f in call.args[4].fields] if len(call.args) > 4 else [1] * len(axes)
    except (AttributeError, TypeError, ValueError):
        return None  # bounds computed at run time
    ranges = []
    for axis, begin, end, stride in zip(axes, begins, ends, strides, strict=False):
        axis, extent = axis % 4, shape[axis % 4]
        if stride <= 0:
            return None
        begin, end = (min(max(i + extent if i < 0 else i, 0), extent) for i in (begin, end))
        ranges.append((axis, begin, end, stride))
    return ranges


def _blocked_resize(call) -> bool:
    """An NCHW ``resize2d`` of the input's dtype that the blocked resize kernel covers."""
    out_dtype = str(call.attrs.out_dtype or "")
    if str(call.attrs.layout) != NCHW or out_dtype not in ("", "void", str(call.args[0].ty.dtype)):
        return False
    try:
        validate_workload(resize_workload(call))
    except (ProblemError, TypeError, ValueError):  # a cubic resize, a computed size...
        return False
    return True


def per_channel(const, channels: int) -> bool:
    """True for a constant that broadcasts along channels only: scalar, ``(C,1,1)``, ``(1,C,1,1)``."""
    shape = tuple(int(s) for s in const.value.shape)
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return True
    if len(shape) < 3 or len(shape) > 4:
        return False
    padded = (1,) * (4 - len(shape)) + shape
    return padded[0] == 1 and padded[2] == 1 and padded[3] == 1 and padded[1] == channels


def conv2d_workload(call) -> dict[str, Any]:
    """The kernel workload (:mod:`layoutopt.tvm.kernels.workload`) of an NCHW/OIHW ``relax.nn.conv2d``
    call with static shapes, without epilogue.

    Example:
        >>> from layoutopt.tvm import models
        >>> conv1 = models.chain()["main"].body.blocks[0].bindings[0]
        >>> conv1.var.name, conv2d_workload(conv1.value)
        ('conv1', {'op': 'conv2d', 'data': [1, 8, 8, 8], 'kernel': [16, 8, 3, 3], 'strides': [1, 1],
                   'padding': [1, 1, 1, 1], 'dilation': [1, 1], 'groups': 1, 'dtype': 'float32'})
    """
    attrs = call.attrs
    return {
        "op": "conv2d", "data": static_shape(call.args[0]), "kernel": static_shape(call.args[1]),
        "strides": [int(s) for s in attrs.strides], "padding": [int(p) for p in attrs.padding],
        "dilation": [int(d) for d in attrs.dilation], "groups": int(attrs.groups),
        "dtype": str(call.args[0].ty.dtype),
    }


def conv2d_transpose_workload(call) -> dict[str, Any]:
    """The kernel workload of an NCHW/IOHW ``relax.nn.conv2d_transpose`` call with static shapes,
    without epilogue (see :mod:`layoutopt.tvm.kernels.conv2d_transpose`).

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 24, 80, 80), "float32"))
        >>> w = relax.Var("w", relax.TensorType((24, 8, 2, 2), "float32"))
        >>> workload = conv2d_transpose_workload(relax.op.nn.conv2d_transpose(x, w, strides=2))
        >>> workload["op"], workload["data"], workload["kernel"], workload["strides"]
        ('conv2d_transpose', [1, 24, 80, 80], [24, 8, 2, 2], [2, 2])
    """
    attrs = call.attrs
    return {
        "op": "conv2d_transpose", "data": static_shape(call.args[0]), "kernel": static_shape(call.args[1]),
        "strides": [int(s) for s in attrs.strides], "padding": [int(p) for p in attrs.padding],
        "output_padding": [int(p) for p in attrs.output_padding],
        "dilation": [int(d) for d in attrs.dilation], "groups": int(attrs.groups),
        "dtype": str(call.args[0].ty.dtype),
    }


def resize_workload(call) -> dict[str, Any]:
    """The workload of a ``relax.image.resize2d`` call in NCHW (see :mod:`layoutopt.tvm.kernels.resize`).

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 96, 10, 10), "float32"))
        >>> resize = relax.op.image.resize2d(x, (20, 20), method="nearest_neighbor")
        >>> call = relax.BlockBuilder().normalize(resize)
        >>> workload = resize_workload(call)
        >>> workload["op"], workload["size"], workload["method"]
        ('resize2d', [20, 20], 'nearest_neighbor')
    """
    attrs = call.attrs
    return {
        "op": "resize2d", "data": static_shape(call.args[0]), "size": static_shape(call)[2:],
        "method": str(attrs.method),
        "coordinate_transformation_mode": str(attrs.coordinate_transformation_mode),
        "rounding_method": str(attrs.rounding_method), "dtype": str(call.args[0].ty.dtype),
    }


def dense_workload(call) -> dict[str, Any]:
    """The dense workload of a ``relax.matmul(x, W)`` call by a 2-D ``(K, N)`` weight (held ``(N, K)``).

    Example:
        >>> from layoutopt.tvm import models
        >>> calls = {b.var.name: b.value for b in models.dense_head()["main"].body.blocks[0].bindings}
        >>> dense_workload(calls["dense"])     # relax.matmul(flatten, W) with W of shape (256, 10)
        {'op': 'dense', 'data': [1, 256], 'weight': [10, 256], 'dtype': 'float32'}
    """
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    return {"op": "dense", "data": data, "weight": [weight[1], weight[0]],
            "dtype": str(call.args[0].ty.dtype)}


# ------------------------------------------------------------------------------------------------
# fused epilogues: the elementwise chain FuseOps fuses into each conv's kernel

#: Relax unary ops a fused epilogue may hold, by their epilogue step
#: (:mod:`layoutopt.tvm.kernels.epilogue`)
EPILOGUE_UNARY = {
    "relax.nn.relu": "relu", "relax.sigmoid": "sigmoid", "relax.tanh": "tanh", "relax.erf": "erf",
    "relax.exp": "exp", "relax.log": "log", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh",
    "relax.nn.silu": "silu",
}
#: Relax binary ops a fused epilogue may hold (with a scalar, a per-channel constant, a residual or an
#: earlier value of the chain), by their epilogue step
EPILOGUE_BINARY = {
    "relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply", "relax.divide": "divide",
    "relax.maximum": "maximum", "relax.minimum": "minimum", "relax.power": "power",
}
#: the binary steps whose operands may come in either order
_COMMUTATIVE = ("add", "multiply", "maximum", "minimum")


def _prim_number(arg) -> float | None:
    """The number an ``IntImm``/``FloatImm`` argument holds (``R.clip``'s bounds), else None."""
    tvm = import_tvm()
    return float(arg.value) if isinstance(arg, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) else None


def epilogue_step(call, op: str | None, values: Sequence, is_data: Callable[[Any], bool] | None = None
                  ) -> tuple[Any, list[int]] | None:
    """The epilogue step (:mod:`layoutopt.tvm.kernels.epilogue`) ``call`` applies to the running value
    of a conv's fused chain, with the indices of the chain's values it reads; None when it is none.

    ``values`` are the chain's values so far (Vars): the conv's output, then each step's; ``call``
    must read the last, and compute a tensor of its shape and dtype from it and at most one of: a
    scalar or per-channel constant, an earlier value of the chain, or (an ``add``) another computed
    tensor of its shape, the residual; or multiply a computed feature map by it, broadcast from
    ``(N, O, 1, 1)`` (a squeeze-excite gate). ``is_data`` tells computed tensors from other Vars (default:
    every Var is one). A non-commutative op (subtract, divide) must have the running value first.

    Example:
        >>> from layoutopt.tvm import models
        >>> bindings = {b.var.name: b for b in models.chain()["main"].body.blocks[0].bindings}
        >>> epilogue_step(bindings["conv1_bias"].value, "relax.add", [bindings["conv1"].var])
        ('bias', [0])
    """
    tvm = import_tvm()
    head = values[-1]
    shape = static_shape(head)
    args = list(call.args)
    if shape is None or not isinstance(call.ty, tvm.relax.TensorType) or \
            str(call.ty.dtype) != str(head.ty.dtype) or \
            not any(isinstance(arg, tvm.relax.Var) and arg.same_as(head) for arg in args[:2]):
        return None
    last = len(values) - 1
    if static_shape(call) != shape:
        step = _broadcast_multiply(call, op, head, shape, is_data)
        return None if step is None else (step, [last])
    if op in EPILOGUE_UNARY and len(args) == 1:
        return EPILOGUE_UNARY[op], [last]
    if op == "relax.clip" and len(args) == 3 and args[0].same_as(head):
        bounds = [_prim_number(arg) for arg in args[1:]]
        return (["clip", *bounds], [last]) if None not in bounds else None
    if op == "relax.nn.leakyrelu" and len(args) == 1:
        return ["leaky_relu", float(call.attrs.alpha)], [last]
    if op not in EPILOGUE_BINARY or len(args) != 2:
        return None
    name = EPILOGUE_BINARY[op]
    head_first = args[0].same_as(head)
    other = args[1] if head_first else args[0]
    if not head_first and name not in _COMMUTATIVE:
        return None
    earlier = next((index for index, value in enumerate(values) if value.same_as(other)), None)
    if earlier is not None:
        return [name, f"@{earlier}"], [last, earlier]
    if is_tensor_constant(other):
        if (value := scalar_value(other)) is not None:
            return [name, value], [last]
        if not per_channel(other, shape[1]):
            return None
        return {"add": "bias", "multiply": "scale"}.get(name, [name, "channel"]), [last]
    is_data = is_data or (lambda _var: True)
    if name == "add" and isinstance(other, tvm.relax.Var) and is_data(other) and static_shape(other) == shape:
        return "add", [last]
    return None


def _broadcast_multiply(call, op: str | None, head, shape: list[int], is_data) -> list | None:
    """``multiply(map, head)`` of a computed ``(N, O, H, W)`` map by a running value ``(N, O, 1, 1)``
    (a squeeze-excite gate) as the ``broadcast_multiply`` step, else None."""
    tvm = import_tvm()
    out = static_shape(call)
    others = [arg for arg in call.args if not arg.same_as(head)]
    if op != "relax.multiply" or len(others) != 1 or out is None or len(shape) != 4 or shape[2:] != [1, 1]:
        return None
    other = others[0]
    if not isinstance(other, tvm.relax.Var) or not (is_data or (lambda _var: True))(other) or \
            static_shape(other) != out or out[:2] != shape[:2]:
        return None
    return ["broadcast_multiply", out[2], out[3]]


@dataclass
class _Chain:
    """One conv's chain: its values (the conv's output, then each step's), steps, and the chain
    values each step reads."""

    values: list
    steps: list = field(default_factory=list)
    reads: list[list[int]] = field(default_factory=list)

    def fused_length(self, uses: Mapping[Any, int]) -> int:
        """How many steps ``FuseOps`` fuses: the longest prefix whose every value but its last is read
        by the prefix's steps only (``uses``: each Var's reads in the whole function)."""
        fused = 0
        for length in range(1, len(self.steps) + 1):
            reads = Counter(index for step in self.reads[:length] for index in step)
            if all(uses.get(self.values[index], 0) == reads[index] for index in range(length)):
                fused = length
        return fused


class EpilogueChains:
    """The elementwise chain after each conv2d that ``FuseOps`` fuses into its kernel, followed
    binding by binding: what the conv's workload ``"epilogue"`` lists, so that its kernel is measured
    as the build runs it.

    A chain grows by each binding that applies an epilogue step (:func:`epilogue_step`) to its running
    value; FuseOps fuses it as far as every value but the last is read inside the chain only
    (:meth:`epilogues`). A binding reading the running values of several chains joins the first
    whose step it is (one conv per fused kernel): a residual add of two convs its first operand's, a
    squeeze-excite multiply (map times gate) the gate conv's.

    Example:
        >>> from layoutopt.tvm import models
        >>> main = models.chain()["main"]
        >>> bindings = {b.var.name: b for b in main.body.blocks[0].bindings}
        >>> chains = EpilogueChains(var_uses(main))
        >>> chains.start("conv1", bindings["conv1"].var)
        >>> for name in ("conv1_bias", "conv1_relu"):
        ...     chains.binding(bindings[name].var, bindings[name].value, bindings[name].value.op.name)
        >>> chains.epilogues()
        {'conv1': ['bias', 'relu']}
    """

    def __init__(self, uses: Mapping[Any, int], is_data: Callable[[Any], bool] | None = None):
        self.uses = uses
        self.is_data = is_data
        self.chains: dict[str, _Chain] = {}
        self.member: dict[Any, str] = {}  # Var -> the conv whose chain holds it

    def start(self, conv: str, var) -> None:
        """A chain for the conv bound to ``var`` (its node key ``conv``)."""
        self.chains[conv] = _Chain([var])
        self.member[var] = conv

    def binding(self, var, call, op: str | None) -> None:
        """``var = call``: a step of the chain whose running value it reads first, if it is one; of the
        running values it reads, one read nowhere else first (``add(shortcut, y)``: the shortcut is read
        by the next conv too, so ``FuseOps`` fuses the add into ``y``'s kernel, whatever the order)."""
        args = sorted(call.args, key=lambda arg: self.uses.get(arg, 0) != 1)
        for arg in args:
            conv = self.member.get(arg)
            if conv is None or not self.chains[conv].values[-1].same_as(arg):
                continue
            chain = self.chains[conv]
            found = epilogue_step(call, op, chain.values, self.is_data)
            if found is not None:
                step, reads = found
                chain.values.append(var)
                chain.steps.append(step)
                chain.reads.append(reads)
                self.member[var] = conv
                return

    def epilogues(self) -> dict[str, list]:
        """Each conv's fused epilogue: its chain's steps as far as ``FuseOps`` fuses them."""
        return {conv: chain.steps[: chain.fused_length(self.uses)] for conv, chain in self.chains.items()}


def fused_epilogues(function) -> dict[str, list]:
    """The epilogue ``FuseOps`` fuses into each NCHW/OIHW conv2d by a constant weight of a Relax
    ``function`` (``main`` of a prepared module): binding name -> steps (:class:`EpilogueChains`).

    Example:
        >>> from layoutopt.tvm import models
        >>> fused_epilogues(models.chain()["main"])
        {'conv1': ['bias', 'relu'], 'conv2': ['bias', 'relu']}
    """
    tvm = import_tvm()
    relax = tvm.relax
    chains = EpilogueChains(var_uses(function))
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            op = value.op.name if isinstance(value.op, tvm.ir.Op) else None
            attrs = value.attrs
            if op == "relax.nn.conv2d" and is_tensor_constant(value.args[1]) and \
                    (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == (NCHW, "OIHW", NCHW):
                chains.start(binding.var.name, binding.var)
            else:
                chains.binding(binding.var, value, op)
    return chains.epilogues()
