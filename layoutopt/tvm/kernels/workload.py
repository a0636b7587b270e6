"""Workloads and layouts: the plain-data schema every kernel family shares (no TVM import).

A *workload* is a JSON-able dict describing one operator instance; it is a cost-cache key, so it
stays plain data:

- conv2d: ``{"op": "conv2d", "data": [N,C,H,W], "kernel": [O,C/groups,KH,KW], "strides": [sh,sw],
  "padding": [top,left,bottom,right], "dilation": [dh,dw], "groups": g, "dtype": "float32"}``, with
  an optional ``"epilogue"``: the elementwise steps ``FuseOps`` fuses into the kernel (bias,
  activations, residual add: :mod:`.epilogue`), so that it is measured as the build runs it;
- conv2d_transpose: ``{"op": "conv2d_transpose", "data": [N,C,H,W], "kernel": [C,O/groups,KH,KW]`` (IOHW,
  as Relax and ONNX hold it), ``"strides"``, ``"padding"``, ``"dilation"``, ``"groups"`` as conv2d,
  ``"output_padding": [oh,ow]}``, and an optional ``"epilogue"``;
- resize2d: ``{"op": "resize2d", "data": [N,C,H,W], "size": [OH,OW], "method": "nearest_neighbor" |
  "linear", "coordinate_transformation_mode": ..., "rounding_method": ...}`` (the attributes of
  ``relax.image.resize2d``; see :mod:`.resize`);
- onnx_resize: ``{"op": "onnx_resize", "data": [N,C,H,W], "size": [OH,OW], "mode": "nearest" | "linear" |
  "cubic", "coordinate_transformation_mode": ..., "nearest_mode": ..., "scale": [sh,sw], "roi": [...],
  "cubic_coeff_a": a, "exclude_outside": 0 | 1, "extrapolation_value": v}`` (an ONNX ``Resize`` with
  ONNX's semantics; see :mod:`.onnx_resize`);
- dense: ``{"op": "dense", "data": [M,K], "weight": [N,K], "dtype": "float32"}``;
- layout_transform: ``{"op": "layout_transform", "shape": [N,C,H,W], "src": "NCHW16c", "dst": "NCHW8c",
  "dtype": "float32"}``.

Activation layouts are ``"NCHW"`` or channel-blocked ``"NCHW{b}c"`` (shape ``(N, C/b, H, W, b)``).

Example:
    >>> validate_workload({"op": "dense", "data": [1, 8], "weight": [4, 8]})["dtype"]
    'float32'
    >>> layout_shape([1, 32, 7, 7], "NCHW16c")
    (1, 2, 7, 7, 16)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .epilogue import EPILOGUE_STEPS, epilogue_shapes, validate_epilogue

__all__ = [
    "DEFAULT_BLOCKS",
    "EPILOGUE_STEPS",
    "MIN_VECTOR_BLOCK",
    "NCHW",
    "ONNX_RESIZE_COORDINATES",
    "ONNX_RESIZE_MODES",
    "ONNX_RESIZE_NEAREST",
    "PADDED_BLOCKS",
    "RESIZE_METHODS",
    "RESIZE_MODES",
    "RESIZE_ROUNDING",
    "channel_blocks",
    "conv2d_output_shape",
    "conv2d_transpose_output_shape",
    "dense_weight_block",
    "describe_workload",
    "epilogue_shapes",
    "is_depthwise",
    "layout_block",
    "layout_shape",
    "layout_transform_workload",
    "pack_data",
    "padded_pairs",
    "plain_layout",
    "unpack_data",
    "validate_workload",
    "vector_out_blocks",
]

#: the plain activation layout
NCHW = "NCHW"
#: channel blocks tried by default (plus C itself when C < 8), each kept only where it divides C
DEFAULT_BLOCKS = (4, 8, 16, 32, 64)
#: the smallest output block a kernel vectorised along its output block (the GEMMs, Winograd) takes:
#: a 4-lane vector leaves most of an AVX register idle
MIN_VECTOR_BLOCK = 8
#: output blocks a kernel on padded output channels computes in (see :mod:`.padded`): one AVX2 or one
#: AVX-512 vector of float32 (a wider block pads more filters for no better register use)
PADDED_BLOCKS = (8, 16)

#: resize2d methods with blocked kernels (:mod:`.resize`); cubic resizes stay plain-NCHW boundaries
RESIZE_METHODS = ("nearest_neighbor", "linear")
#: resize2d coordinate transformation modes covered (``tf_crop_and_resize``, with its region of
#: interest, is not)
RESIZE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
#: rounding methods of a nearest-neighbour resize2d (``""``: topi's default for the mode)
RESIZE_ROUNDING = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: ONNX Resize's interpolation modes, coordinate transformation modes and nearest roundings (``""``:
#: Resize-10's and Upsample's, ceil when downsampling, else truncate), as :mod:`.onnx_resize` computes them
ONNX_RESIZE_MODES = ("nearest", "linear", "cubic")
ONNX_RESIZE_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                           "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
ONNX_RESIZE_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "")

_BLOCKED = re.compile(r"^NCHW([1-9][0-9]*)c$")
_DENSE_WEIGHT = re.compile(r"^NK(?:([1-9][0-9]*)n)?$")


# --------------------------------------------------------------------------------------------------
# layouts


def layout_block(layout: str) -> int | None:
    """The channel block of ``"NCHW{b}c"`` (``None`` for plain ``"NCHW"``); ProblemError otherwise.

    Example:
        >>> layout_block("NCHW16c"), layout_block("NCHW")
        (16, None)
    """
    if layout == NCHW:
        return None
    match = _BLOCKED.match(layout) if isinstance(layout, str) else None
    if match is None:
        raise ProblemError(f"layout {layout!r} is neither 'NCHW' nor 'NCHW<b>c' (e.g. 'NCHW16c')")
    return int(match.group(1))


def plain_layout(layout: str) -> str:
    """A dense layer's plain ``"NC"`` written ``"NCHW"``, as every plain layout of a layout graph.

    Example:
        >>> plain_layout("NC"), plain_layout("NCHW8c")
        ('NCHW', 'NCHW8c')
    """
    return NCHW if layout == "NC" else str(layout)


def layout_shape(nchw: Sequence[int], layout: str) -> tuple[int, ...]:
    """The physical shape of a logical NCHW tensor laid out as ``layout``.

    Example:
        >>> layout_shape([1, 64, 56, 56], "NCHW8c")
        (1, 8, 56, 56, 8)
    """
    n, c, h, w = (int(d) for d in nchw)
    block = layout_block(layout)
    return (n, c, h, w) if block is None else (n, c // block, h, w, block)


def dense_weight_block(layout: str) -> int | None:
    """The output-feature block of a dense weight layout ``"NK{b}n"`` (None for plain ``"NK"``).

    Example:
        >>> dense_weight_block("NK16n"), dense_weight_block("NK")
        (16, None)
    """
    match = _DENSE_WEIGHT.match(str(layout))
    if match is None:
        raise ProblemError(f"dense weight layout {layout!r} must be 'NK' or 'NK<b>n'")
    return int(match.group(1)) if match.group(1) else None


def check_divides(block: int | None, channels: int, what: str) -> None:
    """ProblemError naming ``what`` unless ``block`` (None: unblocked) divides ``channels``."""
    if block is not None and channels % block:
        raise ProblemError(f"{what}: block {block} does not divide the {channels} channels")


def channel_blocks(channels: int, blocks: Iterable[int] = DEFAULT_BLOCKS) -> list[int]:
    """Blocks from ``blocks`` dividing ``channels``, plus ``channels`` itself when it is below 8.

    Example:
        >>> channel_blocks(24, [4, 8, 16]), channel_blocks(3)
        ([4, 8], [3])
    """
    chosen = {int(b) for b in blocks if int(b) > 0 and channels % int(b) == 0}
    if channels < 8:
        chosen.add(channels)
    return sorted(chosen)


def vector_out_blocks(out_channels: int, blocks: Iterable[int]) -> list[int]:
    """The output blocks among ``blocks`` that divide ``out_channels`` and fill a vector
    (:data:`MIN_VECTOR_BLOCK` or more): those a kernel vectorised along its output block can take.

    Example:
        >>> vector_out_blocks(48, [4, 8, 16, 32]), vector_out_blocks(324, [4, 8, 16])
        ([8, 16], [])
    """
    return [b for b in channel_blocks(out_channels, blocks) if b >= MIN_VECTOR_BLOCK]


def padded_pairs(workload: dict[str, Any], blocks: Iterable[int]) -> list[tuple[int, int]]:
    """``(input block, padded output block)`` pairs of an ungrouped conv2d with :data:`MIN_VECTOR_BLOCK`
    or more output channels that no vector-wide block divides (:func:`vector_out_blocks` is empty):
    every dividing input block times every :data:`PADDED_BLOCKS` member among ``blocks``. Empty when
    a block divides (no padding needed).

    Example:
        >>> wl = {"data": [1, 1024, 32, 32], "kernel": [324, 1024, 3, 3], "groups": 1}
        >>> padded_pairs(wl, [8, 16, 32])[:3]
        [(8, 8), (8, 16), (16, 8)]
    """
    blocks = [int(b) for b in blocks]
    out_channels = workload["kernel"][0]
    if workload["groups"] != 1 or out_channels < MIN_VECTOR_BLOCK or vector_out_blocks(out_channels, blocks):
        return []
    outs = [b for b in PADDED_BLOCKS if b in blocks]
    return [(ib, ob) for ib in channel_blocks(workload["data"][1], blocks) for ob in outs]


def pack_data(array: np.ndarray, layout: str) -> np.ndarray:
    """Re-lay a logical NCHW array out as ``layout`` (``NCHW`` or ``NCHW{b}c``).

    Example:
        >>> pack_data(np.zeros((1, 32, 7, 7)), "NCHW16c").shape
        (1, 2, 7, 7, 16)
    """
    block = layout_block(layout)
    if block is None:
        return np.ascontiguousarray(array)
    n, c, h, w = array.shape
    check_divides(block, c, f"pack_data to {layout}")
    return np.ascontiguousarray(array.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def unpack_data(array: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of :func:`pack_data`: a logical NCHW array.

    Example:
        >>> unpack_data(np.zeros((1, 2, 7, 7, 16)), "NCHW16c").shape
        (1, 32, 7, 7)
    """
    if layout_block(layout) is None:
        return array
    n, outer, h, w, block = array.shape
    return np.ascontiguousarray(array.transpose(0, 1, 4, 2, 3).reshape(n, outer * block, h, w))


# --------------------------------------------------------------------------------------------------
# workloads


def validate_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """Check a workload dict and return it normalised (plain ints and lists), or raise ProblemError.

    Example:
        >>> validate_workload({"op": "dense", "data": [1, 8], "weight": [4, 8], "dtype": "float32"})
        {'op': 'dense', 'data': [1, 8], 'weight': [4, 8], 'dtype': 'float32'}
    """
    if not isinstance(workload, dict) or "op" not in workload:
        raise ProblemError(f"workload {workload!r} must be a dict with an 'op' key")
    op = workload["op"]
    checker = _VALIDATORS.get(op)
    if checker is None:
        raise ProblemError(f"workload op {op!r} is not one of {sorted(_VALIDATORS)}")
    try:
        return checker(workload)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ProblemError):
            raise
        raise ProblemError(f"malformed {op} workload {workload!r}: {exc!r}") from None


def _ints(value: Any, length: int, what: str, minimum: int) -> list[int]:
    items = list(value)
    if len(items) != length or any(int(v) != v or int(v) < minimum for v in items):
        raise ProblemError(f"{what} must be {length} integers >= {minimum}, got {value!r}")
    return [int(v) for v in items]


def _dtype(workload: dict[str, Any]) -> str:
    dtype = workload.get("dtype", "float32")
    if dtype not in ("float32", "float64"):
        raise ProblemError(f"workload dtype {dtype!r} is not supported (float32 or float64)")
    return dtype


def _window(workload: dict[str, Any], op: str) -> tuple[list[int], list[int], list[int], int]:
    """``(strides, padding, dilation, groups)`` of a conv2d or conv2d_transpose workload."""
    strides = _ints(workload.get("strides", [1, 1]), 2, f"{op} 'strides'", 1)
    padding = list(workload.get("padding", [0, 0, 0, 0]))
    if len(padding) == 2:
        padding = padding * 2
    padding = _ints(padding, 4, f"{op} 'padding' [top,left,bottom,right]", 0)
    dilation = _ints(workload.get("dilation", [1, 1]), 2, f"{op} 'dilation'", 1)
    return strides, padding, dilation, int(workload.get("groups", 1))


def _epilogue(workload: dict[str, Any], op: str) -> list:
    """The workload's fused epilogue steps, validated (:mod:`.epilogue`); ``op`` names the workload."""
    try:
        return validate_epilogue(workload.get("epilogue") or [])
    except ProblemError as exc:
        raise ProblemError(f"{op} {exc}") from None


def _validate_conv2d(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 4, "conv2d 'data' shape [N,C,H,W]", 1)
    kernel = _ints(workload["kernel"], 4, "conv2d 'kernel' shape [O,C/groups,KH,KW]", 1)
    strides, padding, dilation, groups = _window(workload, "conv2d")
    channels, out_channels = data[1], kernel[0]
    if groups < 1 or channels % groups or out_channels % groups:
        raise ProblemError(
            f"conv2d groups={groups} must divide the {channels} input and {out_channels} output channels"
        )
    if kernel[1] * groups != channels:
        raise ProblemError(
            f"conv2d kernel {kernel} expects {kernel[1] * groups} input channels, data {data} has {channels}"
        )
    normal = {
        "op": "conv2d",
        "data": data,
        "kernel": kernel,
        "strides": strides,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
        "dtype": _dtype(workload),
    }
    out = conv2d_output_shape(normal)
    if out[2] < 1 or out[3] < 1:
        raise ProblemError(
            f"conv2d workload {workload!r} has an empty output {out}: kernel larger than padded input"
        )
    epilogue = _epilogue(workload, "conv2d")
    if epilogue:  # absent when empty, so plain convolutions keep their cache keys
        normal["epilogue"] = epilogue
    return normal


def _validate_conv2d_transpose(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 4, "conv2d_transpose 'data' shape [N,C,H,W]", 1)
    kernel = _ints(workload["kernel"], 4, "conv2d_transpose 'kernel' shape [C,O/groups,KH,KW]", 1)
    strides, padding, dilation, groups = _window(workload, "conv2d_transpose")
    output_padding = _ints(workload.get("output_padding", [0, 0]), 2, "conv2d_transpose 'output_padding'", 0)
    channels = data[1]
    if groups < 1 or channels % groups:
        raise ProblemError(f"conv2d_transpose groups={groups} must divide the {channels} input channels")
    if kernel[0] != channels:
        raise ProblemError(f"conv2d_transpose kernel {kernel} (IOHW) expects {kernel[0]} input channels, "
                           f"data {data} has {channels}")
    if any(pad >= max(stride, dil) for pad, stride, dil in zip(output_padding, strides, dilation,
                                                               strict=True)):
        raise ProblemError(f"conv2d_transpose output_padding {output_padding} must be below the strides "
                           f"{strides} (or the dilation)")
    normal = {"op": "conv2d_transpose", "data": data, "kernel": kernel, "strides": strides,
              "padding": padding, "output_padding": output_padding, "dilation": dilation, "groups": groups,
              "dtype": _dtype(workload)}
    out = conv2d_transpose_output_shape(normal)
    if out[2] < 1 or out[3] < 1:
        raise ProblemError(f"conv2d_transpose workload {workload!r} has an empty output {out}: padding "
                           "larger than the output")
    epilogue = _epilogue(workload, "conv2d_transpose")
    if epilogue:
        normal["epilogue"] = epilogue
    return normal


def _validate_dense(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 2, "dense 'data' shape [M,K]", 1)
    weight = _ints(workload["weight"], 2, "dense 'weight' shape [N,K]", 1)
    if data[1] != weight[1]:
        raise ProblemError(f"dense data {data} and weight {weight} disagree on the reduction size K")
    return {"op": "dense", "data": data, "weight": weight, "dtype": _dtype(workload)}


def _validate_layout_transform(workload: dict[str, Any]) -> dict[str, Any]:
    shape = _ints(workload["shape"], 4, "layout_transform 'shape' [N,C,H,W]", 1)
    src, dst = workload["src"], workload["dst"]
    if src == dst:
        raise ProblemError(f"layout_transform from {src!r} to itself is free: nothing to measure")
    for layout in (src, dst):
        check_divides(layout_block(layout), shape[1], f"layout_transform {src}->{dst} of shape {shape}")
    return {"op": "layout_transform", "shape": shape, "src": src, "dst": dst, "dtype": _dtype(workload)}


def _validate_resize2d(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 4, "resize2d 'data' shape [N,C,H,W]", 1)
    size = _ints(workload["size"], 2, "resize2d 'size' [OH,OW]", 1)
    method = workload.get("method", "linear")
    mode = workload.get("coordinate_transformation_mode", "half_pixel")
    rounding = workload.get("rounding_method", "") if method == "nearest_neighbor" else ""
    for value, known, what in ((method, RESIZE_METHODS, "method"),
                               (mode, RESIZE_MODES, "coordinate_transformation_mode"),
                               (rounding, RESIZE_ROUNDING, "rounding_method")):
        if value not in known:
            raise ProblemError(f"resize2d {what} {value!r} is not among {list(known)}")
    if mode == "align_corners" and min(size) < 2:
        raise ProblemError(f"resize2d to {size} with align_corners: the output needs 2 or more rows and "
                           "columns")
    return {"op": "resize2d", "data": data, "size": size, "method": method,
            "coordinate_transformation_mode": mode, "rounding_method": rounding, "dtype": _dtype(workload)}


def _floats(value: Any, length: int, what: str) -> list[float]:
    """``value`` as ``length`` finite numbers, each rounded to float32 (what an ONNX tensor holds)."""
    if not isinstance(value, (list, tuple)) or len(value) != length or not all(
            isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) for v in value):
        raise ProblemError(f"{what} must be {length} numbers, not {value!r}")
    rounded = [float(np.float32(v)) for v in value]
    if not all(np.isfinite(rounded)):
        raise ProblemError(f"{what} must be finite float32 numbers, not {value!r}")
    return rounded


def _validate_onnx_resize(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 4, "onnx_resize 'data' shape [N,C,H,W]", 1)
    size = _ints(workload["size"], 2, "onnx_resize 'size' [OH,OW]", 1)
    mode = workload.get("mode", "nearest")
    coordinates = workload.get("coordinate_transformation_mode", "half_pixel")
    nearest = workload.get("nearest_mode", "round_prefer_floor")
    for value, known, what in ((mode, ONNX_RESIZE_MODES, "mode"),
                               (coordinates, ONNX_RESIZE_COORDINATES, "coordinate_transformation_mode"),
                               (nearest, ONNX_RESIZE_NEAREST, "nearest_mode")):
        if value not in known:
            raise ProblemError(f"onnx_resize {what} {value!r} is not among {list(known)}")
    default_scale = [float(np.float32(o) / np.float32(i)) for o, i in zip(size, data[2:], strict=True)]
    scale = _floats(workload.get("scale", default_scale), 2, "onnx_resize 'scale' [sh,sw]")
    if min(scale) <= 0:
        raise ProblemError(f"onnx_resize 'scale' {scale} must be positive")
    exclude = workload.get("exclude_outside", 0)
    if exclude not in (0, 1) or (exclude and mode != "cubic"):
        raise ProblemError(f"onnx_resize 'exclude_outside' {exclude!r}: 0, or 1 with mode 'cubic'")
    [cubic_a] = _floats([workload.get("cubic_coeff_a", -0.75)], 1, "onnx_resize 'cubic_coeff_a'")
    [extrapolation] = _floats([workload.get("extrapolation_value", 0.0)], 1,
                              "onnx_resize 'extrapolation_value'")
    return {"op": "onnx_resize", "data": data, "size": size, "mode": mode,
            "coordinate_transformation_mode": coordinates, "nearest_mode": nearest, "scale": scale,
            "roi": _floats(workload.get("roi", [0.0, 0.0, 1.0, 1.0]), 4, "onnx_resize 'roi'"),
            "cubic_coeff_a": cubic_a, "exclude_outside": int(exclude), "extrapolation_value": extrapolation,
            "dtype": _dtype(workload)}


_VALIDATORS = {
    "conv2d": _validate_conv2d,
    "conv2d_transpose": _validate_conv2d_transpose,
    "dense": _validate_dense,
    "layout_transform": _validate_layout_transform,
    "resize2d": _validate_resize2d,
    "onnx_resize": _validate_onnx_resize,
}


def conv2d_output_shape(workload: dict[str, Any]) -> tuple[int, int, int, int]:
    """Logical NCHW output shape of a conv2d workload.

    Example:
        >>> conv2d_output_shape({"data": [1, 3, 224, 224], "kernel": [64, 3, 7, 7], "strides": [2, 2],
        ...                      "dilation": [1, 1], "padding": [3, 3, 3, 3]})
        (1, 64, 112, 112)
    """
    n, _, h, w = workload["data"]
    o, _, kh, kw = workload["kernel"]
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, bottom, right = workload["padding"]
    out_h = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    return (n, o, out_h, out_w)


def conv2d_transpose_output_shape(workload: dict[str, Any]) -> tuple[int, int, int, int]:
    """Logical NCHW output shape of a conv2d_transpose workload (IOHW kernel).

    Example:
        >>> conv2d_transpose_output_shape({"data": [1, 24, 80, 80], "kernel": [24, 24, 2, 2],
        ...     "strides": [2, 2], "padding": [0, 0, 0, 0], "output_padding": [0, 0], "dilation": [1, 1],
        ...     "groups": 1})
        (1, 24, 160, 160)
    """
    n, _, h, w = workload["data"]
    _, per_group, kh, kw = workload["kernel"]
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, bottom, right = workload["padding"]
    oph, opw = workload["output_padding"]
    out_h = (h - 1) * sh - top - bottom + dh * (kh - 1) + 1 + oph
    out_w = (w - 1) * sw - left - right + dw * (kw - 1) + 1 + opw
    return (n, per_group * workload["groups"], out_h, out_w)


def is_depthwise(workload: dict[str, Any]) -> bool:
    """A conv2d with one input and one output channel per group."""
    return workload["groups"] == workload["data"][1] == workload["kernel"][0]


def layout_transform_workload(
    shape: Sequence[int], src: str, dst: str, dtype: str = "float32"
) -> dict[str, Any]:
    """The workload dict for transforming a tensor of logical NCHW ``shape`` from ``src`` to ``dst``.

    Example:
        >>> layout_transform_workload([1, 64, 56, 56], "NCHW", "NCHW16c")["op"]
        'layout_transform'
    """
    return validate_workload(
        {"op": "layout_transform", "shape": [int(s) for s in shape], "src": src, "dst": dst, "dtype": dtype}
    )


def describe_workload(workload: dict[str, Any] | None) -> str:
    """A short human-readable name of a workload, for tables.

    Example:
        >>> describe_workload({"op": "conv2d", "data": [1, 64, 56, 56], "kernel": [128, 64, 3, 3],
        ...                    "strides": [2, 2], "groups": 1})
        '3x3 64->128 @56x56 s2'
    """
    if not workload:
        return ""
    if workload.get("op") == "conv2d":
        _, c, h, w = workload["data"]
        o, _, kh, kw = workload["kernel"]
        stride = workload.get("strides", [1, 1])[0]
        groups = workload.get("groups", 1)
        text = f"{kh}x{kw} {c}->{o} @{h}x{w}" + (f" s{stride}" if stride != 1 else "")
        return text + (f" g{groups}" if groups != 1 else "")
    if workload.get("op") == "conv2d_transpose":
        _, c, h, w = workload["data"]
        _, per_group, kh, kw = workload["kernel"]
        groups = workload.get("groups", 1)
        stride = workload.get("strides", [1, 1])[0]
        text = f"transposed {kh}x{kw} {c}->{per_group * groups} @{h}x{w} s{stride}"
        return text + (f" g{groups}" if groups != 1 else "")
    if workload.get("op") == "dense":
        return f"dense {workload['data'][1]}->{workload['weight'][0]}"
    shape = workload.get("shape") or workload.get("data")
    return f"{workload.get('op', '')} {shape}" if shape else str(workload.get("op", ""))
