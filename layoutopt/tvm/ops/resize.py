"""Resizes: an ``NCHW`` ``relax.image.resize2d`` whose method and mode the blocked kernel covers
(:mod:`layoutopt.tvm.kernels.resize`) follows its input's layout, re-emitted with ``layout=`` it; an
ONNX resize (a ``call_tir`` of layoutopt's kernel, :mod:`layoutopt.tvm.kernels.onnx_resize`) follows
it in any layout, its kernel emitted again for that layout on the same tables.

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 96, 10, 10), "float32"))
    >>> call = relax.BlockBuilder().normalize(relax.op.image.resize2d(x, (20, 20), method="nearest_neighbor"))
    >>> Resize2dRule().carrier(call, "relax.image.resize2d", lambda v: True, None).name
    'x'
"""

from __future__ import annotations

from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..kernels import NCHW, onnx_resize, validate_workload
from ..relax_expr import static_shape
from .common import four_d_input
from .rule import OpRule

__all__ = ["ONNX_RESIZE", "RESIZE_OPS", "OnnxResizeRule", "Resize2dRule", "resize_workload"]

#: an ONNX resize computed with ONNX's semantics: a ``call_tir`` of layoutopt's kernel
#: (:mod:`layoutopt.tvm.kernels.onnx_resize`), named so by :func:`~.registry.op_name`
ONNX_RESIZE = "layoutopt.onnx_resize"
#: resizes: re-emitted in the input's layout (``relax.image.resize2d`` with ``layout=``, where the
#: blocked kernel covers its method and mode: :mod:`layoutopt.tvm.kernels.resize`; an ONNX resize in
#: any layout)
RESIZE_OPS = frozenset({"relax.image.resize2d", ONNX_RESIZE})


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


class Resize2dRule(OpRule):
    """An ``NCHW`` ``relax.image.resize2d`` of the input's dtype that the blocked resize kernel covers
    (:func:`resize_workload` validates: a cubic resize is a boundary)."""

    name = "resize2d"
    ops = frozenset({"relax.image.resize2d"})
    category, symbols = "resize", ("resize",)

    def carrier(self, call, op, is_data, source):
        data = four_d_input(call, is_data)
        return data if data is not None and _blocked_resize(call) else None

    def follow(self, rw, var, call, op, layout) -> bool:
        if layout == NCHW:
            return super().follow(rw, var, call, op, layout)
        attrs = call.attrs  # topi's resize2d takes NCHW{b}c
        args = [rw.value(arg, layout) for arg in call.args]
        new = rw.relax.op.image.resize2d(
            args[0], args[1], roi=[float(r) for r in attrs.roi], layout=layout, method=str(attrs.method),
            coordinate_transformation_mode=str(attrs.coordinate_transformation_mode),
            rounding_method=str(attrs.rounding_method), cubic_alpha=float(attrs.cubic_alpha),
            cubic_exclude=int(attrs.cubic_exclude), extrapolation_value=float(attrs.extrapolation_value))
        rw.emit(var, new, layout)
        return True


class OnnxResizeRule(OpRule):
    """An ONNX resize: ``call_tir(kernel, (data, tables...))``, any layout of its 4-D data."""

    name = "onnx_resize"
    ops = frozenset({ONNX_RESIZE})
    category, symbols = "resize", ("resize",)

    def call_name(self, call, functions) -> str | None:
        return ONNX_RESIZE if functions is not None and onnx_resize.workload_of(call, functions) is not None \
            else None

    def carrier(self, call, op, is_data, source):
        relax = import_tvm().relax
        data = call.args[1].fields[0]
        shape = static_shape(data)
        return data if isinstance(data, relax.Var) and is_data(data) and shape and len(shape) == 4 else None

    def follow(self, rw, var, call, op, layout) -> bool:
        # its kernel again, in the layout its data arrives in, on the same tables
        data, *tables = call.args[1].fields
        workload: dict[str, Any] = onnx_resize.workload_of(call, rw.functions)
        rw.emit(var, onnx_resize.emit(rw.bb, rw.value(data, layout), workload, layout, tables), layout)
        return True
