"""Joins and cuts along channels: a concat is a multi-input node (one common layout of its inputs and
output); a split along channels a node whose layouts keep every cut between blocks; a slice of a range
of channels a node likewise, and a slice over height and width only (YOLOX's focus) follows its
input's layout. A concat's legalization marks it for the build to place its inputs in its output
(:func:`~layoutopt.tvm.building.storage.concat_in_place`).

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 64, 8, 8), "float32"))
    >>> SliceRule().carrier(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 1], end=[8, 8], strides=[2, 2]),
    ...                     "relax.strided_slice", lambda v: True, None).name
    'x'
"""

from __future__ import annotations

import itertools
import math
from types import MappingProxyType
from typing import Any

from .._tvm import import_tvm
from ..kernels import NCHW, layout_block, layout_shape
from ..relax_expr import static_shape
from .common import blocked_layouts, common_layout_node
from .rule import Node, OpRule

__all__ = [
    "CONCAT_IN_PLACE",
    "CONCAT_OPS",
    "SLICE_OPS",
    "SPLIT_OPS",
    "ConcatRule",
    "SliceRule",
    "SplitRule",
    "channel_split_sections",
    "concat_fits_in_place",
    "slice_ranges",
]

#: ops that combine several computed tensors in one common layout
CONCAT_OPS = frozenset({"relax.concat"})
#: ops that split one computed tensor along channels into a tuple, in one common layout
SPLIT_OPS = frozenset({"relax.split"})
#: a slice: layout-following over height and width only (YOLOX's focus), a node of its own along
#: channels (ShuffleNet's channel split), a boundary otherwise
SLICE_OPS = frozenset({"relax.strided_slice"})

#: the attribute that marks a concat PrimFunc :func:`~layoutopt.tvm.building.storage.concat_in_place`
#: may remove (its value: the axis)
CONCAT_IN_PLACE = "layoutopt.concat_in_place"


def concat_fits_in_place(shapes: list[tuple[int, ...]], axis: int) -> bool:
    """Whether a concat of tensors of ``shapes`` along ``axis`` lays its inputs out one after another:
    every axis before ``axis`` has extent 1 (one image, channels or a blocked layout's outer channel
    axis), so each input is one contiguous range of the output.

    Example:
        >>> concat_fits_in_place([(1, 2, 8, 8, 16), (1, 1, 8, 8, 16)], 1)
        True
        >>> concat_fits_in_place([(2, 2, 8, 8, 16), (2, 1, 8, 8, 16)], 1)    # two images
        False
    """
    return len(shapes) >= 2 and all(0 <= axis < len(s) and math.prod(s[:axis]) == 1 for s in shapes)


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


def _legalize_concat(bb, call):
    """``relax.concat`` -> TVM's ``concatenate``, marked :data:`CONCAT_IN_PLACE` where its inputs lie
    one after another in its output, so that the build can let its producers write there
    (:func:`~layoutopt.tvm.building.storage.concat_in_place`)."""
    from tvm.relax.transform.legalize_ops.manipulate import _concat

    legalized = _concat(bb, call)  # call_tir(concatenate, (inputs...), ...)
    shapes = [static_shape(field) for field in legalized.args[1].fields]
    if shapes and all(shape is not None for shape in shapes) and \
            concat_fits_in_place(shapes, axis := int(call.attrs.axis) % len(shapes[0])):
        gvar = legalized.args[0]
        bb.update_func(gvar, bb.get()[gvar].with_attr(CONCAT_IN_PLACE, axis))
    return legalized


class ConcatRule(OpRule):
    """A concat: one common layout of all its inputs and its output, blocked where the block divides
    every input's channels, the inputs an inline tuple and the axis 1, 2 or 3 (a blocked concat keeps
    the axis index of the 5-D tensors, and its inputs are converted field by field)."""

    name = "concat"
    ops = CONCAT_OPS
    category, symbols, in_network = "concat", ("concat",), True
    legalizers = MappingProxyType({"relax.concat": _legalize_concat})

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        relax = import_tvm().relax
        out_shape = ctx.shape(call, f"binding {name!r}")
        shapes = [ctx.shape(v, f"input {v.name!r} of {name!r}") for v in inputs]
        axis = int(call.attrs.axis)
        workload: dict[str, Any] = {"op": "concat", "shapes": shapes, "dtype": str(call.ty.dtype),
                                    "axis": axis}
        blocked = out_shape is not None and len(out_shape) == 4 and all(
            s is not None and len(s) == 4 for s in shapes) and isinstance(call.args[0], relax.Tuple) and \
            axis in (1, 2, 3)
        return common_layout_node(workload, shapes, blocked, ctx.blocks)

    def rewrite(self, rw, var, call, op, choice) -> bool:
        return self.follow(rw, var, call, op, choice["out"])

    def call_shapes(self, workload, layout) -> list[tuple[int, ...]] | None:
        """The concat's inputs and output in ``layout`` (4-D inputs only).

        Example:
            >>> workload = {"op": "concat", "shapes": [[1, 8, 4, 4], [1, 16, 4, 4]], "axis": 1}
            >>> ConcatRule().call_shapes(workload, "NCHW8c")
            [(1, 1, 4, 4, 8), (1, 2, 4, 4, 8), (1, 3, 4, 4, 8)]
        """
        shapes = workload.get("shapes") or []
        if not shapes or any(shape is None or len(shape) != 4 for shape in shapes):
            return None
        axis = workload.get("axis", 1)
        out = list(shapes[0])
        out[axis] = sum(shape[axis] for shape in shapes)
        return [layout_shape(shape, layout) for shape in [*shapes, out]]


class SplitRule(OpRule):
    """A split along channels (:func:`channel_split_sections`): one common layout of its input and its
    pieces, blocked where the block divides every piece (each piece is then whole blocks, cut at block
    boundaries)."""

    name = "split"
    ops = SPLIT_OPS

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        sections = channel_split_sections(call)
        if sections is None:
            return None
        shape = ctx.shape(call.args[0], f"input of {name!r}")
        workload = {"op": "split", "shapes": [shape], "sections": sections,
                    "dtype": str(call.args[0].ty.dtype)}
        layouts = blocked_layouts(min(sections), ctx.blocks, lambda b: all(s % b == 0 for s in sections))
        return Node("multi", workload, layouts=[*layouts, NCHW])

    def rewrite(self, rw, var, call, op, choice) -> bool:
        """A split along channels in the chosen layout: in a blocked one, the cut falls between blocks."""
        layout = choice["out"]
        cut = call.attrs.indices_or_sections
        if not hasattr(cut, "__len__"):  # a number of equal pieces: the same number of blocked ones
            cut = int(cut)
        else:  # channel offsets -> block offsets (the extraction kept only blocks dividing them)
            cut = [int(index) // (layout_block(layout) or 1) for index in cut]
        rw.emit(var, rw.relax.op.split(rw.value(call.args[0], layout), cut, axis=1), layout)
        return True


class SliceRule(OpRule):
    """A slice (:func:`slice_ranges`): over height and width only it follows its input's layout; of a
    range of channels (stride 1) it is a node, one common layout of its input and output, blocked where
    the block divides the input's channels and the range's start and length."""

    name = "strided_slice"
    ops = SLICE_OPS

    def carrier(self, call, op, is_data, source):
        ranges = slice_ranges(call)
        spatial = ranges is not None and all(axis in (2, 3) for axis, *_ in ranges)
        return call.args[0] if spatial and is_data(call.args[0]) else None

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        ranges = slice_ranges(call)
        if ranges is None or len(ranges) != 1 or ranges[0][0] != 1 or ranges[0][3] != 1:
            return None
        _, begin, end, _ = ranges[0]
        shape = ctx.shape(call.args[0], f"input of {name!r}")
        workload = {"op": "strided_slice", "shapes": [shape], "begin": begin, "end": end,
                    "dtype": str(call.args[0].ty.dtype)}
        layouts = blocked_layouts(max(end - begin, 1), ctx.blocks, lambda b: shape[1] % b == 0 and
                                  begin % b == 0 and (end - begin) % b == 0)
        return Node("multi", workload, layouts=[*layouts, NCHW])

    def rewrite(self, rw, var, call, op, choice) -> bool:
        """A slice of a range of channels in the chosen layout: in a blocked one, a range of whole blocks."""
        layout = choice["out"]
        (_, begin, end, _), = slice_ranges(call)
        block = layout_block(layout) or 1
        data = rw.value(call.args[0], layout)
        rw.emit(var, rw.relax.op.strided_slice(data, axes=[1], begin=[begin // block], end=[end // block]),
                layout)
        return True
