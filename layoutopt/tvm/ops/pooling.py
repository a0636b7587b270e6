"""Pooling: max/avg pooling declared ``NCHW`` follows its input's layout (re-emitted with ``layout=``
the input's); so does a mean, max or sum over height and width keeping its dimensions (a global
pool, squeeze-excite's): the channel block stays.

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 32, 7, 7), "float32"))
    >>> SpatialReduceRule().carrier(relax.op.mean(x, [2, 3], keepdims=True), "relax.mean",
    ...                             lambda v: True, None).name
    'x'
    >>> SpatialReduceRule().carrier(relax.op.mean(x, [2, 3]), "relax.mean", lambda v: True, None) is None
    True
"""

from __future__ import annotations

from .._tvm import import_tvm
from ..kernels import NCHW
from ..relax_expr import static_shape
from .common import four_d_input
from .rule import OpRule

__all__ = ["POOL_OPS", "SPATIAL_REDUCE_OPS", "PoolRule", "SpatialReduceRule"]

#: pooling ops: re-emitted with ``layout=`` the input's layout
POOL_OPS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})
#: reductions that follow their input's layout when they reduce height and width only, keeping the
#: dimensions (squeeze-excite's global mean): H and W are axes 2 and 3 of NCHW and of NCHW{b}c alike
SPATIAL_REDUCE_OPS = frozenset({"relax.mean", "relax.max", "relax.sum"})


class PoolRule(OpRule):
    """Max/avg pooling declared ``NCHW`` in and out (an ``NHWC`` pool is a boundary)."""

    name = "pool"
    ops = POOL_OPS
    category, symbols = "pool", ("pool",)

    def carrier(self, call, op, is_data, source):
        data = four_d_input(call, is_data)
        if data is None or (str(call.attrs.layout), str(call.attrs.out_layout)) != (NCHW, NCHW):
            return None
        return data

    def follow(self, rw, var, call, op, layout) -> bool:
        attrs = call.attrs
        pool = rw.relax.op.nn.max_pool2d if op == "relax.nn.max_pool2d" else rw.relax.op.nn.avg_pool2d
        new = pool(rw.value(call.args[0], layout), list(attrs.pool_size), list(attrs.strides),
                   list(attrs.padding), list(attrs.dilation), bool(attrs.ceil_mode),
                   bool(attrs.count_include_pad), layout=layout, out_layout=layout)
        rw.emit(var, new, layout)
        return True


class SpatialReduceRule(OpRule):
    """A mean, max or sum over axes 2 and 3 (height, width) of a 4-D tensor with ``keepdims``."""

    name = "spatial_reduce"
    ops = SPATIAL_REDUCE_OPS
    category, symbols = "pool", ("mean",)

    def carrier(self, call, op, is_data, source):
        relax = import_tvm().relax
        data = call.args[0] if call.args else None
        if not isinstance(data, relax.Var) or not is_data(data):
            return None
        shape = static_shape(data)
        axes = call.attrs.axis
        if shape is None or len(shape) != 4 or axes is None or not bool(call.attrs.keepdims):
            return None
        return data if sorted(int(a) % 4 for a in axes) == [2, 3] else None
