"""conv2d_transpose (ONNX ConvTranspose): a target node whose choices are its kernel family's blocked
per-phase kernels (:mod:`layoutopt.tvm.kernels.conv2d_transpose`) and TVM's own in ``NCHW``.

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 24, 80, 80), "float32"))
    >>> w = relax.Var("w", relax.TensorType((24, 8, 2, 2), "float32"))
    >>> call = relax.op.nn.conv2d_transpose(x, w, strides=2)
    >>> Conv2dTransposeRule().matches(call, "relax.nn.conv2d_transpose")
    True
"""

from __future__ import annotations

from typing import Any

from ...errors import ProblemError
from ..kernels import NCHW
from ..kernels import candidates as kernel_candidates
from ..relax_expr import is_tensor_constant, static_shape
from .common import kernel_family
from .conv2d import conv_node
from .rule import Node, OpRule

__all__ = ["Conv2dTransposeRule", "conv2d_transpose_workload"]


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


class Conv2dTransposeRule(OpRule):
    """An NCHW/IOHW ``relax.nn.conv2d_transpose`` by a constant weight: a target node; its chosen
    blocked kernel runs its family's compute, ``NCHW`` TVM's own."""

    name = "conv2d_transpose"
    ops = frozenset({"relax.nn.conv2d_transpose"})
    category, symbols, kernel = "conv2d_transpose", ("conv2d_transpose",), True

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        return conv_node(self, call, name, ctx, "IOHW", conv2d_transpose_workload)

    def candidates(self, workload, ctx) -> list[dict[str, Any]]:
        return kernel_candidates(workload, ctx.conv_options["algorithms"], blocks=ctx.blocks)

    def rewrite(self, rw, var, call, op, choice) -> bool:
        """A conv2d_transpose -> the chosen kernel (its family's compute, as measured), weight packed
        here; ``NCHW``: TVM's own, as extracted and measured."""
        if choice["in"] == NCHW:
            rw.boundary(var, call)
            return True
        attrs = call.attrs
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != (NCHW, "IOHW", NCHW):
            raise ProblemError(f"node {var.name!r}: only an NCHW/IOHW conv2d_transpose can take another "
                               f"kernel (this one is {attrs.data_layout}/{attrs.kernel_layout})")
        weight = call.args[1]
        if not is_tensor_constant(weight):
            raise ProblemError(f"node {var.name!r}: kernel {choice} needs a constant weight "
                               "(bind the weights: prepare(mod, params))")
        workload = rw.fused_workload(var.name, conv2d_transpose_workload(call))
        kernels = kernel_family(var.name, workload, choice)
        packed = kernels.pack_weight(workload, choice, weight.value.numpy())
        tvm = rw.tvm
        hint = "depthwise_conv2d_transpose_NCHWc" if workload["groups"] > 1 else "conv2d_transpose_NCHWc"
        data = rw.value(call.args[0], choice["in"])
        new = rw.bb.call_te(lambda d, w: kernels.compute(tvm, [d, w], workload, choice), data,
                            rw.relax.const(packed, str(packed.dtype)), primfunc_name_hint=hint)
        rw.emit(var, new, choice["out"])
        return True
