"""Import an ONNX model into Relax: TVM's ONNX frontend, with layoutopt's own ``Resize`` and ``Upsample``.

TVM 0.27's converters of ``Resize`` and ``Upsample`` turn ``scales`` into an output size and hand it to
``relax.image.resize2d``, whose legalization maps coordinates with in/out sizes instead of 1/scale:
wrong wherever ``in_size * scale`` is not a whole number. They also read Resize-10's inputs as
Resize-11's, ignore ``axes``, ``keep_aspect_ratio_policy`` and ``antialias``, lack
``half_pixel_symmetric``, and ``align_corners`` onto one row divides by zero at build time
(``docs/tvm-import-defects.md`` lists them). :func:`import_onnx` converts these two ops itself, with
ONNX Runtime's semantics (:mod:`layoutopt.tvm.kernels.onnx_resize`): a resize that TVM's
``resize2d`` computes exactly stays that op (``tvm_equivalent``); any other becomes layoutopt's
``onnx_resize`` kernel, which carries its true scale through the layout rewrite. What it cannot
compute (``antialias``, a resize of the batch or the channels, scales or sizes computed at run time)
is refused, naming the node.

Why at the converter: ``from_onnx`` takes no custom converters, but converts node by node through
``ONNXGraphImporter._convert_operator``, which a subclass overrides for these two ops and hands every
other op back to TVM (TVM's module is not patched). A pre-import ONNX rewrite has nothing to write a
resize with a given scale in but ``Resize`` itself (or Gathers and Muls the layout rewrite would see
as unknown ops); after TVM's import the scale is gone (``resize2d`` keeps the output size only).

Example:
    >>> import onnx
    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    >>> graph = helper.make_graph([node], "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
    ...     [1, 4, 21, 21])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    ...     [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 1.5, 1.5])])
    >>> mod = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    >>> mod["main"].ret_ty, "layoutopt.onnx_resize" in mod.script()     # 31 rows: floor(21 x 1.5)
    (R.Tensor((1, 4, 31, 31), dtype="float32"), True)
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from ..kernels import onnx_resize
from ..kernels.workload import validate_workload

__all__ = ["RESIZE_OPS", "import_onnx", "resize_workload"]

#: the ONNX ops :func:`import_onnx` converts itself
RESIZE_OPS = ("Resize", "Upsample")


def import_onnx(model, shape_dict: Mapping[str, Sequence[int]] | None = None):
    """``model`` (an ``onnx.ModelProto``) as a Relax ``IRModule``, as
    ``tvm.relax.frontend.onnx.from_onnx(model, shape_dict, keep_params_in_input=False)`` imports it,
    but for ``Resize`` and ``Upsample`` (see the module's docstring).

    Raises:
        ProblemError: a ``Resize`` or ``Upsample`` this cannot compute, naming the node. Any other
            failure is TVM's frontend's own exception, raised while converting a node.
    """
    if model.ir_version < 3:
        raise ProblemError(f"ONNX IR version {model.ir_version} is older than ONNX 1.1: not supported")
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 1)
    importer = _importer_class()(dict(shape_dict or {}), "float32", keep_params_in_input=False)
    return importer.from_onnx(model.graph, opset)


@cache
def _importer_class():
    """TVM's ``ONNXGraphImporter`` with ``Resize`` and ``Upsample`` converted by :func:`convert_resize`."""
    import_tvm()
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class Importer(ONNXGraphImporter):
        def _convert_operator(self, op_name, inputs, attrs, opset):
            if op_name in RESIZE_OPS:
                converted = convert_resize(self.bb, op_name, inputs, attrs, opset)
                if converted is not None:
                    return self.bb.normalize(converted)
            return super()._convert_operator(op_name, inputs, attrs, opset)

    return Importer


def convert_resize(bb, op_name: str, inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int):
    """The Relax expression of a ``Resize`` or ``Upsample`` node of a float 4-D tensor: TVM's
    ``relax.image.resize2d`` where it computes the node exactly, else layoutopt's ``onnx_resize``
    kernel; None for another rank or dtype (left to TVM's converter).

    Raises:
        ProblemError: naming the node, for what this does not compute.
    """
    tvm = import_tvm()
    relax = tvm.relax
    data = inputs[0]
    ty = data.ty
    if not isinstance(ty, relax.TensorType) or ty.ndim != 4 or str(ty.dtype) not in ("float32", "float64"):
        return None
    name = str(attrs.get("tvm_custom", {}).get("name") or "?")
    try:
        shape = [int(s) for s in ty.shape]
    except (TypeError, ValueError):
        raise ProblemError(f"{op_name} node {name!r}: its input has a dynamic shape {ty.shape}") from None
    workload = resize_workload(op_name, shape, [_constant(x) for x in inputs[1:]], attrs, opset, name)
    try:
        workload = validate_workload({**workload, "dtype": str(ty.dtype)})
    except ProblemError as exc:
        raise ProblemError(f"{op_name} node {name!r}: {exc}") from None
    if workload["size"] == shape[2:]:
        return data  # nothing resized: ONNX Runtime copies (whatever the scales and mode)
    equivalent = onnx_resize.tvm_equivalent(workload)
    if equivalent is not None:
        return relax.op.image.resize2d(data, relax.ShapeExpr(workload["size"]), layout="NCHW", **equivalent)
    return onnx_resize.emit(bb, data, workload)


def _constant(expr) -> np.ndarray | None:
    """The value of a constant input (a tensor constant, or a shape the frontend folded), None for an
    absent one; ``...`` for one computed at run time."""
    from ..ops import is_tensor_constant

    relax = import_tvm().relax
    if expr is None:
        return None
    if is_tensor_constant(expr):
        return expr.value.numpy()
    if isinstance(expr, relax.ShapeExpr):
        try:
            return np.array([int(v) for v in expr.values], np.int64)
        except (TypeError, ValueError):
            return ...
    return ...


def _text(attrs: Mapping[str, Any], key: str, default: str) -> str:
    value = attrs.get(key, default)
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def resize_workload(op_name: str, shape: Sequence[int], constants: Sequence[Any], attrs: Mapping[str, Any],
                    opset: int, name: str = "?") -> dict[str, Any]:
    """The ``onnx_resize`` workload (:mod:`layoutopt.tvm.kernels.onnx_resize`) of a ``Resize`` or
    ``Upsample`` node of an NCHW input of ``shape``, given the values of its inputs after the data
    (``constants``: arrays, None for an absent input, ``...`` for one computed at run time), its
    attributes and the model's opset, as ONNX Runtime reads them: the output size from ``scales``
    (``floor(float32(scale) * in)``) or from ``sizes`` (with ``keep_aspect_ratio_policy``), the scale the
    coordinates use, ``axes``, the region of interest.

    Raises:
        ProblemError: naming the node (``name``), for what :mod:`~layoutopt.tvm.kernels.onnx_resize`
            does not compute.

    Example:
        >>> wl = resize_workload("Resize", [1, 16, 21, 21], [None, np.array([1, 1, 1.5, 1.5], "float32")],
        ...                      {"mode": b"nearest"}, opset=13)
        >>> wl["size"], wl["scale"], wl["coordinate_transformation_mode"], wl["nearest_mode"]
        ([31, 31], [1.5, 1.5], 'half_pixel', 'round_prefer_floor')
        >>> resize_workload("Resize", [1, 16, 8, 8], [None, None, np.array([1, 16, 4, 4])],
        ...                 {"mode": b"linear", "antialias": 1}, opset=18, name="down")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: Resize node 'down': antialias=1 is not supported
    """
    where = f"{op_name} node {name!r}"
    rank = len(shape)
    mode = _text(attrs, "mode", "nearest")
    if op_name == "Upsample" or opset < 11:  # Upsample and Resize-10: asymmetric, their own rounding
        coordinates, nearest_mode = "asymmetric", ""
        if op_name == "Upsample" and "scales" in attrs:  # Upsample-7/8: an attribute
            scales, sizes, roi = np.array(attrs["scales"], np.float32), None, None
        else:
            scales, sizes, roi = (constants[0] if constants else None), None, None
    else:
        coordinates = _text(attrs, "coordinate_transformation_mode", "half_pixel")
        nearest_mode = _text(attrs, "nearest_mode", "round_prefer_floor")
        padded = [*constants, None, None, None][:3]
        roi, scales, sizes = padded
    for value, what in ((scales, "scales"), (sizes, "sizes"), (roi, "roi")):
        if value is ...:
            raise ProblemError(f"{where}: its {what} are computed at run time; layout selection needs them "
                               "constant (load the model with its shapes folded)")
    if int(attrs.get("antialias", 0)):
        raise ProblemError(f"{where}: antialias=1 is not supported")
    if mode not in ("nearest", "linear", "cubic"):
        raise ProblemError(f"{where}: mode {mode!r} is not nearest, linear or cubic")
    axes = [int(a) + (rank if int(a) < 0 else 0) for a in attrs.get("axes", ())] if opset >= 18 else []
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise ProblemError(f"{where}: axes {list(attrs.get('axes', ()))} are not distinct axes of a "
                           f"{rank}-D input")
    scales = None if scales is None or scales.size == 0 else scales.astype(np.float32).ravel()
    sizes = None if sizes is None or sizes.size == 0 else sizes.astype(np.int64).ravel()
    if (scales is None) == (sizes is None):
        raise ProblemError(f"{where}: give exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != (len(axes) or rank):
        raise ProblemError(f"{where}: {len(given)} {'scales' if scales is not None else 'sizes'} for "
                           f"{len(axes) or rank} axes")
    if scales is not None:
        full = np.ones(rank, np.float32)
        full[axes or list(range(rank))] = scales
        if not np.all(np.isfinite(full)) or np.any(full <= 0):
            raise ProblemError(f"{where}: scales {full.tolist()} must be positive")
        out = [int(np.float32(s) * np.float32(d)) for s, d in zip(full, shape, strict=True)]
    else:
        out = list(shape)
        for axis, size in zip(axes or range(rank), sizes, strict=True):
            out[axis] = int(size)
        if min(out) < 1:
            raise ProblemError(f"{where}: sizes {sizes.tolist()} must be positive")
        full = np.array([np.float32(o) / np.float32(d) for o, d in zip(out, shape, strict=True)], np.float32)
        full, out = _keep_aspect_ratio(_text(attrs, "keep_aspect_ratio_policy", "stretch"), full, out, shape,
                                       axes, where)
    if out[:2] != list(shape[:2]) or full[0] != 1 or full[1] != 1:
        raise ProblemError(f"{where}: it resizes the batch or the channels ({list(shape)} -> {out}); "
                           "only height and width are supported")
    if min(out) < 1:
        raise ProblemError(f"{where}: the output {out} would be empty")
    return {"op": "onnx_resize", "data": list(shape), "size": out[2:], "mode": mode,
            "coordinate_transformation_mode": coordinates, "nearest_mode": nearest_mode,
            "scale": [float(s) for s in full[2:]], "roi": _roi(roi, rank, axes, where),
            "cubic_coeff_a": float(attrs.get("cubic_coeff_a", -0.75)),
            "exclude_outside": int(attrs.get("exclude_outside", 0)),
            "extrapolation_value": float(attrs.get("extrapolation_value", 0.0))}


def _keep_aspect_ratio(policy: str, scales: np.ndarray, out: list[int], shape: Sequence[int],
                       axes: Sequence[int], where: str) -> tuple[np.ndarray, list[int]]:
    """ONNX Runtime's ``AdjustOutputSizeAsPolicy``: with ``not_larger`` (``not_smaller``) every axis
    concerned (``axes``, or all) takes the smallest (largest) scale, and the size it rounds to."""
    if policy == "stretch":
        return scales, out
    if policy not in ("not_larger", "not_smaller"):
        raise ProblemError(f"{where}: keep_aspect_ratio_policy {policy!r} is not stretch, not_larger or "
                           "not_smaller")
    concerned = list(axes) or list(range(len(shape)))
    chosen = (min if policy == "not_larger" else max)(scales[a] for a in concerned)
    scales, out = scales.copy(), list(out)
    for axis in range(len(shape)):
        if axis in concerned:
            scales[axis] = chosen
            product = float(np.float32(chosen) * np.float32(shape[axis]))
            out[axis] = math.floor(abs(product) + 0.5)  # std::round: halves away from zero
        else:
            scales[axis], out[axis] = 1.0, shape[axis]
    return scales, out


def _roi(roi: np.ndarray | None, rank: int, axes: Sequence[int], where: str) -> list[float]:
    """The region of interest of H and W as ``[h start, w start, h end, w end]`` (default: all)."""
    if roi is None or roi.size == 0:
        return [0.0, 0.0, 1.0, 1.0]
    roi = roi.astype(np.float32).ravel()
    if len(roi) != 2 * (len(axes) or rank):
        raise ProblemError(f"{where}: roi has {len(roi)} values, not 2 per axis")
    starts, ends = np.zeros(rank, np.float32), np.ones(rank, np.float32)
    concerned = list(axes) or list(range(rank))
    starts[concerned], ends[concerned] = roi[: len(concerned)], roi[len(concerned):]
    return [float(starts[2]), float(starts[3]), float(ends[2]), float(ends[3])]


def quiet_import(model, shape_dict: Mapping[str, Sequence[int]] | None = None):
    """:func:`import_onnx` with the frontend's printing silenced: on a failure it prints the failing
    node's inputs (pages of IR) before raising; the error says it."""
    with contextlib.redirect_stdout(io.StringIO()):
        return import_onnx(model, shape_dict)
