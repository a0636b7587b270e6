"""Resize (``relax.image.resize2d``: ONNX Resize / Upsample) in any channel-blocked layout.

A resize moves whole pixels: every channel of an output pixel reads the same input positions with the
same weights. In ``NCHW{b}c`` its ``b`` channels are contiguous, so the kernel computes each output
pixel's source positions (and bilinear weights) once, as scalars, and copies or blends ``b`` channels
at a time, one vector; in plain NCHW the innermost loop runs along a row, and each lane reads its own
source position (a gather). Layout-following: a resize runs in the layout its input arrives in (the
rewrite gives ``relax.image.resize2d`` that ``layout``; TVM's legalization computes it with
``topi.image.resize2d``, which takes ``NCHW{b}c``), so a neck's upsampling no longer takes the
network back to NCHW and out again.

The schedule (:meth:`Resize.schedule`, every legalized resize's, in any layout, fused or not): the
ops ``FuseOps`` fused with it (the neck's add after it, an elementwise op before) inlined into one
loop nest, parallel over (n, channel chunk, output row), the innermost axis (the channel block)
vectorised.

Covered, with a numpy reference computed as ``topi.image.resize2d`` computes (:func:`resize_reference`;
the tests check ONNX Runtime's output on ONNX models too): ``method`` ``"nearest_neighbor"``
(``rounding_method`` ``floor``, ``ceil``, ``round``, ``round_prefer_floor``, ``round_prefer_ceil``) and
``"linear"``, with the coordinate transformation modes ``half_pixel``, ``pytorch_half_pixel``,
``align_corners``, ``asymmetric`` and ``tf_half_pixel_for_nn``, any static output size. Cubic
resizes and ``tf_crop_and_resize`` stay plain-NCHW boundaries.

Example:
    >>> wl = {"op": "resize2d", "data": [1, 96, 10, 10], "size": [20, 20], "method": "nearest_neighbor",
    ...       "coordinate_transformation_mode": "asymmetric", "rounding_method": "floor"}
    >>> [c["in"] for c in FAMILY.candidates(wl, blocks=[8, 16])]
    ['NCHW8c', 'NCHW16c', 'NCHW']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import block_names, inline_into_last
from .family import KernelFamily
from .workload import (
    DEFAULT_BLOCKS,
    NCHW,
    RESIZE_MODES,
    channel_blocks,
    check_divides,
    layout_block,
    layout_shape,
    pack_data,
    unpack_data,
)

__all__ = ["FAMILY", "MAIN_BLOCKS", "Resize", "resize_reference", "source_coordinates"]

#: the block ``topi.image.resize2d`` computes (TVM's legalization of ``relax.image.resize2d`` too)
MAIN_BLOCKS = ("resize",)
#: what ``topi.image.resize2d`` adds before flooring / subtracts before ceiling a source position
_EPSILON = np.float32(1e-5)


def source_coordinates(out_size: int, in_size: int, mode: str) -> np.ndarray:
    """The source position of each output index along one axis, in float32 as ``topi`` computes it.

    Example:
        >>> source_coordinates(4, 2, "half_pixel").tolist()
        [-0.25, 0.25, 0.75, 1.25]
    """
    out = np.arange(out_size, dtype=np.float32)
    scale = np.float32(in_size) / np.float32(out_size)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        coordinates = (out + np.float32(0.5)) * scale - np.float32(0.5)
        return coordinates if mode == "half_pixel" or out_size > 1 else np.zeros_like(out)
    if mode == "align_corners":
        return np.float32(in_size - 1) / np.float32(out_size - 1) * out
    if mode == "asymmetric":
        return scale * out
    if mode == "tf_half_pixel_for_nn":
        return (out + np.float32(0.5)) * scale
    raise ProblemError(f"resize2d coordinate_transformation_mode {mode!r} is not among {list(RESIZE_MODES)}")


def _nearest(coordinates: np.ndarray, rounding: str, mode: str) -> np.ndarray:
    if rounding == "":  # topi's default: round for align_corners, else floor
        rounding = "round" if mode == "align_corners" else "floor"
    if rounding == "round":  # TVM's round is LLVM's nearbyint: halves to even
        return np.rint(coordinates)
    if rounding == "round_prefer_floor":
        return np.ceil(coordinates - np.float32(0.5))
    if rounding == "round_prefer_ceil":
        return np.floor(coordinates + np.float32(0.5))
    if rounding == "floor":
        return np.floor(coordinates + _EPSILON)
    if rounding == "ceil":
        return np.ceil(coordinates - _EPSILON)
    raise ProblemError(f"resize2d rounding_method {rounding!r} is not one of floor, ceil, round, "
                       "round_prefer_floor, round_prefer_ceil")


def _axis(out_size: int, in_size: int, workload: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Per output index along one axis: nearest, the source index; linear, the two source indices
    (clamped to the input, as ``topi`` reads them) and the weight of the second."""
    mode = workload["coordinate_transformation_mode"]
    coordinates = source_coordinates(out_size, in_size, mode)
    if workload["method"] == "nearest_neighbor":
        index = _nearest(coordinates, workload["rounding_method"], mode).astype(np.int64)
        return (np.clip(index, 0, in_size - 1),)
    low = np.floor(coordinates)
    weight = (coordinates - low).astype(np.float64)
    low = low.astype(np.int64)
    return np.clip(low, 0, in_size - 1), np.clip(low + 1, 0, in_size - 1), weight


def resize_reference(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical NCHW output of a resize2d workload in float64 numpy, source positions computed as
    ``topi.image.resize2d`` computes them (:func:`source_coordinates`).

    Example:
        >>> wl = {"op": "resize2d", "data": [1, 1, 2, 2], "size": [4, 4], "method": "nearest_neighbor",
        ...       "coordinate_transformation_mode": "asymmetric", "rounding_method": "floor"}
        >>> resize_reference(wl, [np.arange(4.0).reshape(1, 1, 2, 2)])[0, 0, 0]
        array([0., 0., 1., 1.])
    """
    data = np.asarray(inputs[0], dtype=np.float64)
    height, width = data.shape[2:]
    out_h, out_w = workload["size"]
    rows, columns = _axis(out_h, height, workload), _axis(out_w, width, workload)
    if workload["method"] == "nearest_neighbor":
        return data[:, :, rows[0]][:, :, :, columns[0]]
    top, bottom, y_weight = rows
    left, right, x_weight = columns

    def blend(picked: np.ndarray) -> np.ndarray:  # along x, rows already picked
        return picked[..., left] * (1 - x_weight) + picked[..., right] * x_weight

    y_weight = y_weight[:, None]
    return blend(data[:, :, top]) * (1 - y_weight) + blend(data[:, :, bottom]) * y_weight


class Resize(KernelFamily):
    """``relax.image.resize2d`` in plain or channel-blocked layouts (see the module's docstring)."""

    op = "resize2d"
    main_blocks = MAIN_BLOCKS

    def candidates(self, workload: dict[str, Any],
                   blocks: Iterable[int] = DEFAULT_BLOCKS) -> list[dict[str, Any]]:
        """Each dividing channel block's ``NCHW{b}c`` (in and out alike), then ``NCHW``."""
        layouts = [f"NCHW{b}c" for b in channel_blocks(workload["data"][1], blocks)] + [NCHW]
        return [{"in": layout, "out": layout} for layout in layouts]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is one layout in and out that holds the channels."""
        what = f"{self.op} candidate {candidate!r}"
        if not isinstance(candidate, dict) or set(candidate) != {"in", "out"}:
            raise ProblemError(f"{what} must be {{'in': LAYOUT, 'out': LAYOUT}}")
        if candidate["in"] != candidate["out"]:
            raise ProblemError(f"{what}: a resize writes the layout it reads")
        check_divides(layout_block(candidate["in"]), workload["data"][1], what)

    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """The NCHW input."""
        return [workload["data"]]

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """:func:`resize_reference`."""
        return resize_reference(workload, inputs)

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The input in the candidate's layout."""
        return [pack_data(inputs[0], candidate["in"])]

    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """The output as a logical NCHW array."""
        return unpack_data(output, candidate["out"])

    def placeholders(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The input in the candidate's layout."""
        return [tvm.te.placeholder(layout_shape(workload["data"], candidate["in"]), dtype=workload["dtype"],
                                   name="data")]

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """``topi.image.resize2d`` in the candidate's layout: what TVM legalizes the Relax op into."""
        return tvm.topi.image.resize2d(
            inputs[0], (0.0, 0.0, 0.0, 0.0), list(workload["size"]), layout=candidate["in"],
            method=workload["method"],
            coordinate_transformation_mode=workload["coordinate_transformation_mode"],
            rounding_method=workload["rounding_method"])

    def schedule(self, func, target=None):
        """The resize and the ops ``FuseOps`` fused with it (the neck's add after it, an elementwise op
        before, a concat of several resizes) in one loop nest, parallel over its outer axes, the
        innermost (a channel block, or a plain row) vectorised."""
        sch = import_tvm().s_tir.Schedule(func)
        inline_into_last(sch, block_names(sch))
        return sch


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Resize()
