"""conv2d, grouped and depthwise ones included: a target node whose choices are its kernel families'
candidates (:func:`~layoutopt.tvm.kernels.conv2d_candidates`: direct, Winograd, GEMM, depthwise; a
grouped conv fixed ``NCHW`` where no family covers it), rewritten to the chosen kernel's compute with
its weight packed at compile time, legalized blocked by ``topi.nn.conv2d_NCHWc`` (TVM's own legalizer
refuses blocked layouts), and fused with its elementwise epilogue.

Example:
    >>> from layoutopt.tvm import models
    >>> conv1 = models.chain()["main"].body.blocks[0].bindings[0].value
    >>> Conv2dRule().matches(conv1, "relax.nn.conv2d"), Conv2dRule().fuses_epilogue(conv1, "relax.nn.conv2d")
    (True, True)
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..kernels import NCHW, conv2d, conv2d_candidates, layout_block
from ..relax_expr import is_tensor_constant, static_shape
from .common import kernel_family
from .rule import Node, OpRule

__all__ = ["Conv2dRule", "conv2d_workload"]


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


def out_dtype(attrs, default: str | None) -> str | None:
    """A call's ``out_dtype`` attribute, ``default`` where it is unset."""
    dtype = str(attrs.out_dtype) if attrs.out_dtype is not None else ""
    return default if dtype in ("", "None", "void") else dtype


def _legalize_conv2d(bb, call):
    """Blocked conv2d -> ``topi.nn.conv2d_NCHWc`` (TVM's legalizer leaves it, and codegen then fails)."""
    tvm = import_tvm()
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    if len(attrs.data_layout) == 4 and len(attrs.kernel_layout) == 4:
        return _nn_conv2d(bb, call)
    dtype = out_dtype(attrs, str(call.args[0].ty.dtype))
    return bb.call_te(
        tvm.topi.nn.conv2d_NCHWc, call.args[0], call.args[1], list(attrs.strides), list(attrs.padding),
        list(attrs.dilation), attrs.data_layout, attrs.out_layout, dtype,
        primfunc_name_hint="conv2d_NCHWc",
    )


class Conv2dRule(OpRule):
    """An NCHW/OIHW ``relax.nn.conv2d`` of a computed tensor by a constant (or weight parameter): a
    target node; its chosen kernel runs its family's compute, as measured."""

    name = "conv2d"
    ops = frozenset({"relax.nn.conv2d"})
    category, symbols, kernel, takes_epilogue = "conv2d", ("conv2d",), True, True
    legalizers = MappingProxyType({"relax.nn.conv2d": _legalize_conv2d})

    def fuses_epilogue(self, call, op) -> bool:
        attrs = call.attrs
        return is_tensor_constant(call.args[1]) and \
            (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == (NCHW, "OIHW", NCHW)

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        return conv_node(self, call, name, ctx, "OIHW", conv2d_workload)

    def candidates(self, workload, ctx) -> list[dict[str, Any]]:
        return conv2d_candidates(workload, blocks=ctx.blocks, **ctx.conv_options)

    def rewrite(self, rw, var, call, op, choice) -> bool:
        """A conv2d -> the chosen kernel (its family's compute, as measured), weights packed here."""
        relax = rw.relax
        attrs = call.attrs
        name = var.name
        in_layout, out_layout = choice["in"], choice["out"]
        if (in_layout, out_layout) == (NCHW, NCHW) and "algorithm" not in choice:
            rw.boundary(var, call)  # TVM's own conv2d, as extracted and measured
            return True
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != (NCHW, "OIHW", NCHW):
            raise ProblemError(
                f"node {name!r}: only an NCHW/OIHW conv2d can take another kernel "
                f"(this one is {attrs.data_layout}/{attrs.kernel_layout})"
            )
        workload = rw.fused_workload(name, conv2d_workload(call))
        kernels = kernel_family(name, workload, choice)
        data = rw.value(call.args[0], in_layout)
        weight = call.args[1]
        if is_tensor_constant(weight):
            packed = kernels.pack_weight(workload, choice, weight.value.numpy())
            weight = relax.const(packed, str(packed.dtype))
        elif kernels is conv2d.FAMILY:
            # a runtime parameter: repack it in the program (FoldConstant removes it once bound)
            in_block, out_block = layout_block(in_layout), layout_block(out_layout)

            def pack(o, i, h, w):
                return o // out_block, i // in_block, h, w, i % in_block, o % out_block

            weight = rw.bb.emit(relax.op.layout_transform(rw.value(weight, None), index_map=pack),
                                name_hint=f"{name}_weight")
        else:
            raise ProblemError(f"node {name!r}: kernel {choice} needs a constant weight "
                               "(bind the weights: prepare(mod, params))")
        tvm = rw.tvm
        hint = {"direct": "conv2d_NCHWc", "depthwise": "depthwise_conv2d_NCHWc"}.get(
            kernels.algorithm, f"conv2d_{kernels.algorithm}")
        new = rw.bb.call_te(lambda d, w: kernels.compute(tvm, [d, w], workload, choice), data, weight,
                            primfunc_name_hint=hint)
        rw.emit(var, new, out_layout)
        return True


def conv_node(rule: OpRule, call, name: str, ctx, kernel_layout: str, workload_of) -> Node | None:
    """The target node of a conv (or conv_transpose: ``kernel_layout``) in NCHW of a computed tensor
    by a constant weight, or None (another layout, a weight computed at run time: a boundary)."""
    attrs = call.attrs
    data, weight = call.args[0], call.args[1]
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != (NCHW, kernel_layout, NCHW):
        return None
    if not ctx.is_data(data) or not ctx.is_weight(weight):
        return None  # a weight computed at run time is not a kernel we can pack
    what = call.op.name.rsplit(".", 1)[-1]
    ctx.shape(data, f"input of {what} {name!r}")  # a clear error for dynamic shapes
    ctx.shape(weight, f"weight of {what} {name!r}")
    return rule.target(workload_of(call), ctx, data, starts_chain=True)
