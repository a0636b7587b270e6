"""The layout carriers: a gather of channels by a constant permutation (a channel shuffle, as
:func:`~layoutopt.tvm.frontend.shuffle.fold_channel_shuffles` writes it) follows its input's layout, a
permutation of blocks and lanes in a blocked one; and the ``layout_transform`` the rewrite inserts
between layouts, which the profile times as a category of its own.

Example:
    >>> import numpy as np
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 2, 4, 4), "float32"))
    >>> take = relax.op.take(x, relax.const(np.array([1, 0])), axis=1)
    >>> GatherRule().carrier(take, "relax.take", lambda v: True, None).name
    'x'
"""

from __future__ import annotations

import numpy as np

from .._tvm import import_tvm
from ..kernels import layout_block
from ..relax_expr import is_tensor_constant, static_shape
from .rule import OpRule

__all__ = ["GATHER_OPS", "GatherRule", "LayoutTransformRule", "channel_permutation"]

#: a gather of channels by a constant permutation (a channel shuffle, as prepare writes it): follows
#: its input's layout, a permutation of blocks and lanes in a blocked one
GATHER_OPS = frozenset({"relax.take"})


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


class GatherRule(OpRule):
    """A ``relax.take`` of channels by a constant permutation (:func:`channel_permutation`)."""

    name = "channel_gather"
    ops = GATHER_OPS

    def carrier(self, call, op, is_data, source):
        return call.args[0] if channel_permutation(call) is not None and is_data(call.args[0]) else None

    def follow(self, rw, var, call, op, layout) -> bool:
        """The gather in ``layout``: in a blocked one, output lane ``(co, ci)`` reads the block and lane
        of source channel ``order[co * b + ci]``."""
        data = rw.value(call.args[0], layout)
        block = layout_block(layout)
        if block is None:
            rw.emit(var, rw.relax.Call(call.op, [data, call.args[1]], call.attrs), layout)
            return True
        order = rw.relax.const(channel_permutation(call).astype("int32"))
        te = rw.tvm.te

        def gather(x, source):
            def lane(n, co, h, w, ci):
                channel = source[co * block + ci]
                return x[n, channel // block, h, w, channel % block]

            return te.compute(x.shape, lane, name="channel_gather")

        rw.emit(var, rw.bb.call_te(gather, data, order, primfunc_name_hint="channel_gather"), layout)
        return True


class LayoutTransformRule(OpRule):
    """``relax.layout_transform``: what the rewrite inserts where a value changes layout; in a model
    it is a boundary like any op it does not know. The profile times its calls as one category."""

    name = "layout_transform"
    ops = frozenset({"relax.layout_transform"})
    category, symbols = "layout_transform", ("layout_transform",)
