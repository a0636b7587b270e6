"""The operator rules: what each Relax op means to every phase, one rule per op family, one module each.

A rule (:class:`~layoutopt.tvm.ops.rule.OpRule`) says, in one place, which calls it matches, whether
they follow their input's layout, the layout graph's node they make (workload, candidates through the
kernel families), how a chosen candidate rewrites the call, the build's legalization and the
profile's category. Extraction, the rewrite, the build and the profile loop over the registry
(:data:`~layoutopt.tvm.ops.registry.RULES`) and hold no per-op branch of their own:

========================  ===========================================================================
:mod:`.conv2d`            conv2d, grouped and depthwise (target)
:mod:`.conv2d_transpose`  conv2d_transpose (target)
:mod:`.dense`             matmul by a constant 2-D weight (target)
:mod:`.pooling`           max/avg pooling, global means (layout-following)
:mod:`.resize`            resize2d, ONNX resize (layout-following)
:mod:`.concat`            concat, channel split and slice (multi), spatial slice (layout-following)
:mod:`.elementwise`       unary and binary elementwise ops, fused epilogues
:mod:`.softmax`           softmax (boundary, own legalization)
:mod:`.carriers`          channel gather (layout-following), layout_transform (profile category)
:mod:`.boundary`          any other call (boundary: plain NCHW)
========================  ===========================================================================

Adding an op is a module with its :class:`~layoutopt.tvm.ops.rule.OpRule` and one line in
:data:`~layoutopt.tvm.ops.registry.RULES` (or :func:`~layoutopt.tvm.ops.registry.register` from your own
code); ``tests/tvm/test_op_rules.py`` checks every registered rule against one contract.

Example:
    >>> from layoutopt.tvm import models
    >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
    >>> layout_carrier(calls["conv1_relu"], "relax.nn.relu").name   # relu runs in its input's layout
    'conv1_bias'
    >>> [rule.name for rule in rules_for("relax.nn.conv2d")]
    ['conv2d', 'boundary']
"""

from __future__ import annotations

from ..kernels import NCHW
from ..relax_expr import is_tensor_constant, scalar_value, static_shape, var_uses
from .carriers import GATHER_OPS, channel_permutation
from .concat import CONCAT_OPS, SLICE_OPS, SPLIT_OPS, channel_split_sections, slice_ranges
from .conv2d import conv2d_workload
from .conv2d_transpose import conv2d_transpose_workload
from .dense import dense_workload
from .elementwise import (
    BINARY_OPS,
    EPILOGUE_BINARY,
    EPILOGUE_UNARY,
    UNARY_OPS,
    EpilogueChains,
    epilogue_step,
    per_channel,
)
from .pooling import POOL_OPS, SPATIAL_REDUCE_OPS
from .registry import (
    RULES,
    categories,
    follower,
    fused_epilogues,
    kernel_categories,
    layout_carrier,
    legalizers,
    op_name,
    register,
    rules_for,
    unregister,
)
from .resize import ONNX_RESIZE, RESIZE_OPS, resize_workload
from .rule import Node, OpRule

__all__ = [
    "BINARY_OPS",
    "CONCAT_OPS",
    "EPILOGUE_BINARY",
    "EPILOGUE_UNARY",
    "GATHER_OPS",
    "NCHW",
    "ONNX_RESIZE",
    "POOL_OPS",
    "RESIZE_OPS",
    "RULES",
    "SLICE_OPS",
    "SPATIAL_REDUCE_OPS",
    "SPLIT_OPS",
    "UNARY_OPS",
    "EpilogueChains",
    "Node",
    "OpRule",
    "categories",
    "channel_permutation",
    "channel_split_sections",
    "conv2d_transpose_workload",
    "conv2d_workload",
    "dense_workload",
    "epilogue_step",
    "follower",
    "fused_epilogues",
    "is_tensor_constant",
    "kernel_categories",
    "layout_carrier",
    "legalizers",
    "op_name",
    "per_channel",
    "register",
    "resize_workload",
    "rules_for",
    "scalar_value",
    "slice_ranges",
    "static_shape",
    "unregister",
    "var_uses",
]
