"""Which Relax ops follow their input's layout, which combine several, and which need plain NCHW.

The one classification extraction (:mod:`layoutopt.tvm.extract`) and the rewrite
(:mod:`layoutopt.tvm.apply`) both use, so that the layout graph costs exactly the program the
rewrite emits.

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

from collections.abc import Callable
from typing import Any

import numpy as np

from ._tvm import import_tvm
from .kernels import NCHW

__all__ = ["BINARY_OPS", "CONCAT_OPS", "POOL_OPS", "UNARY_OPS", "conv2d_workload", "dense_workload",
           "is_tensor_constant", "layout_carrier", "static_shape"]

#: unary elementwise ops: any layout, same layout out
UNARY_OPS = frozenset({
    "relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
    "relax.nn.prelu_scalar", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.sqrt",
    "relax.rsqrt", "relax.negative", "relax.abs", "relax.square", "relax.erf", "relax.astype",
    "relax.nn.dropout", "relax.hard_sigmoid", "relax.nn.relu6",
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


def static_shape(expr) -> list[int] | None:
    """The static shape of a tensor-typed expression, or None (tuples, dynamic shapes...)."""
    tvm = import_tvm()
    ty = expr.ty
    if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(s) for s in ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


def is_tensor_constant(expr) -> bool:
    """True for a Relax tensor constant (a weight, a bias, a scalar tensor such as ``R.const(6.0)``).

    In TVM 0.27 ``tvm.ir.expr.Constant`` is also the base class of TIR's ``IntImm``/``FloatImm``, the
    plain numbers some ops take as arguments (``R.clip(x, 0, 6)``'s bounds, as the ONNX frontend
    writes HardSigmoid and Clip): those hold a Python number, not a tensor, and have no layout.

    Example:
        >>> from tvm import relax
        >>> is_tensor_constant(relax.const(np.ones((1, 8, 1, 1), "float32")))
        True
        >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
        >>> is_tensor_constant(relax.op.clip(x, 0, 6).args[1])      # an IntImm
        False
    """
    tvm = import_tvm()
    return isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, tvm.relax.TensorType)


def layout_carrier(call, op: str | None, is_data: Callable[[Any], bool] | None = None):
    """The computed operand whose layout a layout-following op keeps, or None when ``call`` is not one.

    The one classification extraction (:mod:`layoutopt.tvm.extract`) and the rewrite both use, so
    that the graph costs exactly the program the rewrite emits. Layout-following are:

    * a unary elementwise op (:data:`UNARY_OPS`) of a 4-D tensor returning one 4-D tensor (dropout's
      tuple output is not: a boundary);
    * max/avg pooling declared ``NCHW`` in and out (an ``NHWC`` pool is a boundary);
    * a binary elementwise op (:data:`BINARY_OPS`) of ONE computed 4-D tensor and one per-channel or
      scalar constant, in either order (``add(bias, x)`` as well as ``add(x, bias)``).

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
    if op not in UNARY_OPS and op not in POOL_OPS and op not in BINARY_OPS:
        return None
    is_data = is_data or (lambda _var: True)
    args = list(call.args)
    if op in BINARY_OPS:
        tensors = [a for a in args if isinstance(a, relax.Var)]
        constants = [a for a in args if is_tensor_constant(a)]
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
    return args[0]


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
